"""Profiling runs: what gets measured, JSONL records, tasks, and resume after truncation or a kill."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from dreamshard.documents import iter_measurements, load_measurements
from dreamshard.errors import InventoryError
from dreamshard.profiling import make_oracle, profile_inventory, single_table_costs_from
from dreamshard.profiling.runner import plan_items
from dreamshard.values import Inventory, Table, Task, TaskSet, Topology


def _inventory(n: int = 8) -> Inventory:
    return Inventory(
        name="pool",
        tables=tuple(
            Table(name=f"t{i}", num_embeddings=1_000 * (i + 1), embedding_dim=(16, 32, 64)[i % 3], pooling_factor=1 + i)
            for i in range(n)
        ),
    )


TOPO = Topology(num_devices=3, memory_per_device_gb=1.0, batch_size=256)


def test_profile_writes_singles_then_placements(tmp_path: Path) -> None:
    inv = _inventory()
    out = tmp_path / "m.jsonl"
    s = profile_inventory(inv, TOPO, 5, out, make_oracle("simulator"), progress=False)
    assert (s.planned, s.measured, s.skipped, s.singles, s.placements) == (13, 13, 0, 8, 5)
    assert s.backend.is_simulated
    recs = load_measurements(out)
    assert [r.kind for r in recs] == ["single"] * 8 + ["placement"] * 5
    assert len({r.measurement_id for r in recs}) == 13
    for r in recs[8:]:
        assert set(r.placement) == set(inv.table_names) and len(r.costs.per_device) == 3
        assert r.inventory_fingerprint == inv.fingerprint()
    singles = single_table_costs_from(recs)
    assert set(singles) == set(inv.table_names)
    assert singles == make_oracle("simulator").single_table_costs(inv, TOPO)


def test_rerun_resumes_after_a_truncated_line(tmp_path: Path) -> None:
    inv = _inventory()
    out = tmp_path / "m.jsonl"
    profile_inventory(inv, TOPO, 5, out, make_oracle("simulator"), progress=False)
    again = profile_inventory(inv, TOPO, 5, out, make_oracle("simulator"), progress=False)
    assert (again.measured, again.skipped) == (0, 13)
    # Simulate a writer killed mid-record: keep 9 full lines and half of the 10th.
    lines = out.read_text().splitlines(keepends=True)
    out.write_text("".join(lines[:9]) + lines[9][: len(lines[9]) // 2])
    resumed = profile_inventory(inv, TOPO, 5, out, make_oracle("simulator"), progress=False)
    assert (resumed.measured, resumed.skipped) == (4, 9)
    recs = load_measurements(out)
    assert len(recs) == 13 and len({r.measurement_id for r in recs}) == 13
    assert out.read_text().endswith("\n")


def test_tasks_profile_each_train_task_on_its_devices(tmp_path: Path) -> None:
    inv = _inventory(10)
    tasks = TaskSet(
        pool_name="pool",
        pool_fingerprint=inv.fingerprint(),
        train_tables=tuple(inv.table_names[:6]),
        test_tables=tuple(inv.table_names[6:]),
        train=(
            Task(name="a", tables=("t0", "t1", "t2", "t3"), num_devices=2),
            Task(name="b", tables=("t2", "t3", "t4", "t5"), num_devices=3),
        ),
        test=(Task(name="x", tables=("t6", "t7"), num_devices=2),),
    )
    out = tmp_path / "m.jsonl"
    s = profile_inventory(inv, TOPO, 3, out, make_oracle("simulator"), tasks=tasks, progress=False)
    recs = load_measurements(out)
    singles = [r for r in recs if r.kind == "single"]
    assert sorted(r.placement.popitem()[0] for r in singles) == ["t0", "t1", "t2", "t3", "t4", "t5"]
    by_task = {t: [r for r in recs if r.kind == "placement" and r.task == t] for t in ("a", "b")}
    assert len(by_task["a"]) == 3 and len(by_task["b"]) == 3 and s.placements == 6
    assert all(set(r.placement) == {"t0", "t1", "t2", "t3"} and r.topology.num_devices == 2 for r in by_task["a"])
    assert all(r.topology.num_devices == 3 and r.inventory_name == "pool" for r in by_task["b"])
    bad = tasks.model_copy(update={"train": (Task(name="c", tables=("nope",), num_devices=2),)})
    with pytest.raises(InventoryError, match="'nope'"):
        plan_items(inv, TOPO, 1, "simulator", tasks=bad)


def test_killed_cpu_run_resumes_only_missing_items(tmp_path: Path) -> None:
    """A real CPU profiling subprocess killed with SIGKILL mid-run; the rerun measures only what is missing."""
    from dreamshard.documents import save_inventory

    inv = Inventory(
        name="k",
        tables=tuple(Table(name=f"t{i}", num_embeddings=20_000, embedding_dim=64, pooling_factor=30) for i in range(8)),
    )
    inv_path, out = tmp_path / "inv.json", tmp_path / "m.jsonl"
    save_inventory(inv, inv_path)
    topo = Topology(num_devices=1, memory_per_device_gb=1.0, batch_size=2048)  # 1 device: no comm benchmark
    code = textwrap.dedent(
        f"""
        from pathlib import Path
        from dreamshard.documents import load_inventory
        from dreamshard.profiling import make_oracle, profile_inventory
        from dreamshard.values import Topology
        topo = Topology.model_validate_json({topo.model_dump_json()!r})
        oracle = make_oracle("cpu", warmup=3, repeats=60)
        profile_inventory(load_inventory({str(inv_path)!r}), topo, 1, Path({str(out)!r}), oracle, progress=False)
        """
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None:
            if out.exists() and out.read_text().count("\n") >= 2:
                break
            time.sleep(0.02)
        assert proc.poll() is None, "profiling finished before it could be killed"
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait()
    done_before = len(list(iter_measurements(out)))
    assert 2 <= done_before < 9
    # Same backend, seed and settings identity -> same ids; cheap timing settings are fine for the rerun.
    s = profile_inventory(inv, topo, 1, out, make_oracle("cpu", warmup=0, repeats=1), progress=False)
    assert s.planned == 9  # 8 singles + 1 placement (every table on the only device)
    assert (s.measured, s.skipped) == (9 - done_before, done_before)
    recs = load_measurements(out)
    assert len(recs) == 9 and len({r.measurement_id for r in recs}) == 9


def test_random_placements_survive_tight_memory() -> None:
    """With memory so tight that some random orders dead-end, profiling retries other seeds instead of failing."""
    from dreamshard.errors import InfeasiblePlacementError
    from dreamshard.profiling.runner import _random_placements
    from dreamshard.sharders import get_sharder
    from dreamshard.values import GB, Inventory, Table, Topology

    # 0.4, 0.4, 0.3 x 4 GB on two 1 GB devices: only {0.4, 0.3, 0.3} per device fits; a random order that
    # puts both 0.4 tables together dead-ends.
    def table(name: str, gb: float) -> Table:
        return Table(name=name, num_embeddings=int(gb * GB) // 16, embedding_dim=4, pooling_factor=1.0)

    inv = Inventory(name="tight", tables=(table("a", 0.4), table("b", 0.4), *(table(f"c{i}", 0.3) for i in range(4))))
    topo = Topology(num_devices=2, memory_per_device_gb=1.0)
    failures = 0
    for seed in range(20):
        try:
            get_sharder("random", seed=seed).place(inv, topo)
        except InfeasiblePlacementError:
            failures += 1
    assert failures > 0  # the random sharder alone does dead-end here
    out = _random_placements(inv, topo, 2, seed=0)
    assert len(out) == 2
    for p in out:
        assert p["a"] != p["b"]


def test_profile_refuses_a_file_of_another_inventory(tmp_path) -> None:
    """Resuming into a JSONL of a different inventory would mix workloads: a one-line typed error instead."""
    from dreamshard.errors import InventoryError, ProfilingError
    from dreamshard.profiling import make_oracle, profile_inventory
    from dreamshard.values import Inventory, Table, Topology

    def inv(name: str, dim: int) -> Inventory:
        return Inventory(
            name=name,
            tables=(
                Table(name="a", num_embeddings=100, embedding_dim=dim, pooling_factor=1.0),
                Table(name="b", num_embeddings=200, embedding_dim=8, pooling_factor=2.0),
            ),
        )

    topo = Topology(num_devices=2, memory_per_device_gb=1.0, batch_size=64)
    oracle = make_oracle("simulator")
    out = tmp_path / "meas.jsonl"
    profile_inventory(inv("one", 8), topo, 1, out, oracle, progress=False)
    before = out.read_text()
    with pytest.raises(InventoryError, match="holds measurements of inventory 'one'"):
        profile_inventory(inv("two", 16), topo, 1, out, oracle, progress=False)
    assert out.read_text() == before
    with pytest.raises(ProfilingError, match="holds measurements on backend 'simulator', this run measures on 'cpu'"):
        profile_inventory(inv("one", 8), topo, 1, out, make_oracle("cpu", warmup=0, repeats=1), progress=False)
    assert out.read_text() == before  # a measured record never lands among simulated ones


def test_a_cost_model_never_trains_on_mixed_backends(tmp_path: Path) -> None:
    from dreamshard.config.learning import CostTrainConfig
    from dreamshard.errors import ModelError
    from dreamshard.learning.train_cost import train_cost_model

    inv = _inventory(4)
    out = tmp_path / "m.jsonl"
    profile_inventory(
        inv,
        Topology(num_devices=2, memory_per_device_gb=1.0, batch_size=64),
        2,
        out,
        make_oracle("simulator"),
        progress=False,
    )
    records = load_measurements(out)
    mixed = [
        *records,
        records[-1].model_copy(update={"backend": records[-1].backend.model_copy(update={"name": "cpu"})}),
    ]
    with pytest.raises(ModelError, match=r"mix backends \(1 from 'cpu', \d+ from 'simulator'\)"):
        train_cost_model(inv, mixed, CostTrainConfig(steps=1), progress=False)


def test_kinds_add_the_heuristics_plans_and_a_crowded_device():
    from dreamshard.inventory.synth import synth_inventory
    from dreamshard.profiling.runner import crowded_placement
    from dreamshard.sharders import get_sharder

    inv = synth_inventory(20, seed=31)
    topo = TOPO.model_copy(update={"num_devices": 4})
    plain = plan_items(inv, topo, 2, "simulator")
    more = plan_items(inv, topo, 2, "simulator", kinds=("dim_greedy", "crowded"))
    extra = [it.placement for it in more if it.key not in {p.key for p in plain}]
    assert get_sharder("dim_greedy").place(inv, topo) in extra
    crowded = crowded_placement(inv, topo, seed=0)
    assert crowded in extra
    counts = [list(crowded.values()).count(d) for d in range(4)]
    assert max(counts) >= 0.4 * inv.num_tables  # one device holds about half the tables
    assert len(more) == len(plain) + 2
    assert not plan_items(inv, topo, 2, "simulator", kinds=("dim_greedy",), singles=False)[0].kind == "single"


def test_more_random_placements_than_exist_stop_at_what_exists() -> None:
    """`profile -k` beyond the distinct placements used to try k x 20 seeds (minutes, no output)."""
    from dreamshard.profiling.runner import _random_placements

    two = _inventory(2)
    got = _random_placements(two, Topology(num_devices=2, memory_per_device_gb=4.0), 100_000, seed=0)
    assert 1 <= len(got) <= 4 and len({tuple(sorted(p.items())) for p in got}) == len(got)


def test_no_feasible_random_placement_is_the_typed_error_of_the_table_that_did_not_fit() -> None:
    """Each table fits a device, but no packing of the three does: a one-line InfeasiblePlacementError."""
    from dreamshard.errors import InfeasiblePlacementError
    from dreamshard.profiling.runner import _random_placements

    tables = tuple(Table(name=f"t{i}", num_embeddings=2_500_000, embedding_dim=64, pooling_factor=1) for i in range(3))
    with pytest.raises(InfeasiblePlacementError, match="fits on no device"):
        _random_placements(
            Inventory(name="tight", tables=tables), Topology(num_devices=2, memory_per_device_gb=1.0), 2, 0
        )
