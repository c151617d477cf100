"""Planning tasks from a table pool (the `tasks` stage): disjoint train / held-out pools per the `tasks` section."""

from __future__ import annotations

from dreamshard.learning.taskset import make_taskset
from dreamshard.usecases.base import Request, Result
from dreamshard.values import Inventory, TaskSet


class TasksRequest(Request):
    inventory: Inventory


class TasksResult(Result):
    taskset: TaskSet


def run(request: TasksRequest) -> TasksResult:
    """The task set of the pool (writing it is the door's)."""
    return TasksResult(taskset=make_taskset(request.inventory, request.settings.tasks))
