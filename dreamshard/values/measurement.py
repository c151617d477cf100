"""Measurements of placements and the planning tasks they are made for (docs/architecture/data-model.md, "Data
model")."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from pydantic import Field

from dreamshard.values.costs import BackendInfo, CommModel, Costs
from dreamshard.values.ids import new_id, utcnow
from dreamshard.values.tables import Number, StrictModel
from dreamshard.values.topology import Topology

#: What a measurement covers: one table alone on a device ("single") or a placement of many ("placement").
MeasurementKind = Literal["single", "placement"]


def new_measurement_id() -> str:
    """A fresh measurement id (`m-` and the UTC time)."""
    return new_id("m-")


class Measurement(StrictModel):
    """One placement on one topology with its per-device costs (docs/architecture/data-model.md, "Data model")."""

    measurement_id: str = Field(default_factory=new_measurement_id)
    kind: MeasurementKind = "placement"
    task: str = ""
    inventory_name: str
    inventory_fingerprint: str
    topology: Topology
    placement: dict[str, Annotated[int, Number, Field(ge=0)]]
    costs: Costs
    spread: tuple[float, ...] = ()  # per-device relative spread (IQR / median) of the total
    backend: BackendInfo
    comm_model: CommModel | None = None
    created_at: datetime = Field(default_factory=utcnow)

    @property
    def overall_ms(self) -> float:
        return self.costs.overall_ms

    def device_tables(self) -> list[list[str]]:
        out: list[list[str]] = [[] for _ in range(self.topology.num_devices)]
        for table, d in self.placement.items():
            out[d].append(table)
        return out


class Task(StrictModel):
    """A planning task: a subset of a pool's tables on a number of devices."""

    name: str
    tables: tuple[str, ...]
    num_devices: Annotated[int, Field(ge=1)]


class TaskSet(StrictModel):
    """Train and held-out tasks drawn from disjoint parts of one table pool (generalisation protocol)."""

    pool_name: str
    pool_fingerprint: str
    train_tables: tuple[str, ...]
    test_tables: tuple[str, ...]
    train: tuple[Task, ...]
    test: tuple[Task, ...]
