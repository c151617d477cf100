"""How a device's timed repeats become its figure (`profile.statistic`): the minimum by default (interference only
adds time, and on a shared machine it comes in bursts a median takes in), the median for records made before.
The corpus keeps the repeats, so one entry serves either; a plan is only re-measured (drift) with its own."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from dreamshard.config.settings import resolve
from dreamshard.errors import ConfigError, ProfilingError
from dreamshard.evaluation.drift import require_comparable
from dreamshard.profiling.base import ComputeBackend, DeviceTiming
from dreamshard.profiling.corpus import DeviceCorpus, device_key
from dreamshard.profiling.oracle import Oracle
from dreamshard.sharders import get_sharder
from dreamshard.values import CommModel, Inventory, Table, Topology
from dreamshard.values.costs import BackendInfo

TOPO = Topology(num_devices=1, memory_per_device_gb=1.0, batch_size=256)
INV = Inventory(name="s", tables=(Table(name="a", num_embeddings=100, embedding_dim=8, pooling_factor=2.0),))


class Bursty(ComputeBackend):
    """Five repeats, three of them hit by a burst (x3): the median is the burst, the minimum is not."""

    name, operator, device, is_simulated = "cpu", "fbgemm_tbe", "cpu", False
    calls = 0

    def time_device(self, tables: Sequence[Table], batch_size: int, warmup: int, repeats: int) -> DeviceTiming:
        Bursty.calls += 1
        return DeviceTiming((1.0, 3.0, 3.1, 2.9, 1.1), (2.0, 6.0, 6.2, 2.1, 5.9))

    def comm_model(self, world_size: int, collective: str = "all_to_all") -> CommModel:
        return CommModel(alpha_ms=0.0, beta_ms_per_mb=0.0, backend="none", world_size=world_size, collective=collective)  # type: ignore[arg-type]


def test_the_minimum_is_the_default_and_the_median_stays_available(tmp_path: Path) -> None:
    low = Oracle(Bursty(), warmup=0, repeats=5).measure(INV, {"a": 0}, TOPO)
    assert low.costs.per_device[0].fwd_compute == 1.0 and low.costs.per_device[0].bwd_compute == 2.0
    assert low.backend.statistic == "min"
    med = Oracle(Bursty(), warmup=0, repeats=5, statistic="median").measure(INV, {"a": 0}, TOPO)
    assert med.costs.per_device[0].fwd_compute == 2.9 and med.backend.statistic == "median"
    with pytest.raises(ProfilingError, match="median or min"):
        Oracle(Bursty(), statistic="mean")  # type: ignore[arg-type]
    assert resolve(None).profile.statistic == "min" and resolve(None).oracle().statistic == "min"


def test_one_corpus_entry_serves_either_statistic(tmp_path: Path) -> None:
    info = Oracle(Bursty()).backend_info(256)
    assert device_key(info, 0, INV.tables) == device_key(info.model_copy(update={"statistic": "median"}), 0, INV.tables)
    old = BackendInfo.model_validate({k: v for k, v in info.model_dump().items() if k != "statistic"})
    assert old.statistic == "median"  # records written before the field: the median
    assert device_key(old, 0, INV.tables) == device_key(info, 0, INV.tables)  # and their corpus keys did not move
    Bursty.calls = 0
    corpus = DeviceCorpus(tmp_path / "c", "profile")
    for statistic in ("min", "median"):
        oracle = Oracle(Bursty(), warmup=0, repeats=5, statistic=statistic)  # type: ignore[arg-type]
        oracle.corpus = corpus
        oracle.measure(INV, {"a": 0}, TOPO)
    assert Bursty.calls == 1  # timed once, summarised twice


def test_drift_refuses_to_compare_a_plan_measured_with_another_statistic() -> None:
    plan = get_sharder("round_robin").shard(INV, TOPO)
    m = Oracle(Bursty(), warmup=0, repeats=5, statistic="median").measure(INV, plan.placement, TOPO)
    measured = plan.model_copy(update={"measured": m.costs, "measured_by": m.backend})
    with pytest.raises(ConfigError, match="profile.statistic: median"):
        require_comparable(measured, "cpu", "min")
    require_comparable(measured, "cpu", "median")
