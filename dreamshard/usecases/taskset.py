"""Planning tasks from a table pool (the `tasks` stage): disjoint train / held-out pools per the `tasks` section."""

from __future__ import annotations

from pathlib import Path

from dreamshard.documents import check_outputs, dump_model, load_inventory
from dreamshard.learning.taskset import make_taskset
from dreamshard.usecases.base import Request, Result
from dreamshard.values import TaskSet


class TasksRequest(Request):
    inventory: Path
    out: Path


class TasksResult(Result):
    taskset: TaskSet


def run(request: TasksRequest) -> TasksResult:
    check_outputs({"--inventory": request.inventory, "--params": request.settings.source}, {"--output": request.out})
    taskset = make_taskset(load_inventory(request.inventory), request.settings.tasks)
    dump_model(taskset, request.out)
    return TasksResult(taskset=taskset)
