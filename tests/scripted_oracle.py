"""An oracle whose measurements the test writes down: each plan (keyed by the measurement's `task`, the sharder
label the measuring code passes) measures the next of its scripted overall costs, all on device 0."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dreamshard.values import BackendInfo, Costs, DeviceCost, Measurement, Topology


class ScriptedOracle:
    """Each plan's overall cost per round from a script (by sharder label); counts what it measures (`calls`)."""

    def __init__(self, script: dict[str, list[float]]) -> None:
        self.script = {k: list(v) for k, v in script.items()}
        self.info = BackendInfo(
            name="fake",
            operator="scripted",
            device="cpu",
            num_threads=1,
            batch_size=0,
            warmup=0,
            repeats=1,
            is_simulated=True,
        )
        self.calls: list[str] = []

    def measure(
        self,
        inventory: Any,
        placement: Mapping[str, int],
        topology: Topology,
        *,
        kind: str = "placement",
        task: str = "",
        **_: Any,
    ) -> Measurement:
        self.calls.append(task)
        v = self.script[task].pop(0)
        per = [DeviceCost.from_list([v, 0, 0, 0])] + [DeviceCost.zero()] * (topology.num_devices - 1)
        return Measurement(
            kind=kind,  # type: ignore[arg-type]
            task=task,
            inventory_name=inventory.name,
            inventory_fingerprint=inventory.fingerprint(),
            topology=topology,
            placement=dict(placement),
            costs=Costs.from_devices(per),
            backend=self.info,
        )
