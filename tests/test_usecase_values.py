"""Use cases take and return domain objects (docs/architecture/index.md, "Layers"): no request of a use case holds
a path where it means an inventory, a plan or a comparison. Reading and writing those files is the doors' job
(dreamshard.documents, usecases/compare_files.py, usecases/whatif_files.py, the flows' request conversion)."""

from __future__ import annotations

import importlib
import pkgutil
import typing
from pathlib import Path

from pydantic import BaseModel

import dreamshard.usecases
from dreamshard.usecases.base import Request

#: The fields that name a domain object (a file of one is the door's to read).
DOMAIN_FIELDS = frozenset({"inventory", "plan", "plans", "incumbent", "current", "comparison"})
#: Requests that still take a file, counted down (2026-12-05: plan, replan, publish, compare, evaluate and what-if
#: take values; TorchRec migrate and the workspace use cases below do not yet). Nothing may join.
STILL_PATHS = frozenset(
    {
        "InitRequest.inventory",
        "MigrateRequest.inventory",
        "MigrateRequest.plan",
        "RunRequest.inventory",
    }
)


def _mentions_path(annotation: object) -> bool:
    if annotation is Path:
        return True
    return any(_mentions_path(a) for a in typing.get_args(annotation))


def path_fields(models: list[type[BaseModel]]) -> list[str]:
    """`Model.field` for every domain field of `models` whose type admits a Path."""
    return sorted(
        f"{m.__name__}.{name}"
        for m in models
        for name, field in m.model_fields.items()
        if name in DOMAIN_FIELDS and _mentions_path(field.annotation)
    )


def _requests() -> list[type[BaseModel]]:
    for info in pkgutil.iter_modules(dreamshard.usecases.__path__):
        importlib.import_module(f"dreamshard.usecases.{info.name}")
    found: list[type[BaseModel]] = []
    todo: list[type[BaseModel]] = [Request]
    while todo:
        cls = todo.pop()
        found.append(cls)
        todo.extend(cls.__subclasses__())
    from dreamshard.usecases.pipeline_run import PipelineRun

    return [*found, PipelineRun]


def test_no_use_case_request_holds_a_path_for_an_inventory_or_a_plan_beyond_the_known_ones() -> None:
    found = set(path_fields(_requests()))
    assert len(_requests()) > 15
    assert sorted(found - STILL_PATHS) == []
    assert sorted(STILL_PATHS - found) == []  # converted: take it off the list
    for name in ("PlanRequest", "ReplanRequest", "PublishRequest", "CompareRequest", "MeasureRequest", "WhatIfRequest"):
        assert any(m.__name__ == name for m in _requests()), name


def test_a_planted_path_field_is_found() -> None:
    class Planted(Request):
        inventory: Path
        plans: tuple[Path, ...] = ()
        model: Path | None = None  # a model directory is a path on purpose

    assert path_fields([Planted]) == ["Planted.inventory", "Planted.plans"]
