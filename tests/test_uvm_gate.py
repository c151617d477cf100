"""A cuda job's plan with a UVM caching table, from a CPU planning host: the gate says in one line where it can be
measured (a cuda backend, the gpu pool) or which labelled proxy to ask for; asked for, the simulator's analytic
proxy gates and publishes it, labelled simulated, and this host's timings (UVM tables as the fused kernel) gate it,
labelled PROXY in the decision."""

from __future__ import annotations

from pathlib import Path

import pytest

from dreamshard.cli.app import invoke
from dreamshard.documents import save_inventory, save_plan
from dreamshard.sharders import get_sharder
from dreamshard.store import get_current, open_store
from dreamshard.values import Inventory, Table, TableConstraints, Topology


def _files(tmp_path: Path) -> tuple[Path, Path]:
    ad = Table(
        name="ad",
        num_embeddings=100_000,
        embedding_dim=32,
        pooling_factor=2.0,
        constraints=TableConstraints(compute_kernels=("fused_uvm_caching",)),
    )
    rest = (Table(name=f"t{i}", num_embeddings=5000, embedding_dim=16, pooling_factor=2.0) for i in range(3))
    inv = Inventory(name="uvm", tables=(ad, *rest))
    topo = Topology(num_devices=2, memory_per_device_gb=16.0, device_type="cuda")
    plan = get_sharder("dim_greedy").shard(inv, topo)
    assert plan.kernels == {"ad": "fused_uvm_caching"}
    save_inventory(inv, tmp_path / "inv.yaml")
    save_plan(plan, tmp_path / "plan.json")
    return tmp_path / "inv.yaml", tmp_path / "plan.json"


def test_a_uvm_plan_from_a_cpu_host_is_refused_in_one_line_naming_the_ways(tmp_path: Path) -> None:
    inv, plan = _files(tmp_path)
    store = tmp_path / "store"
    code, _, err = invoke(["plans", "publish", str(plan), "-i", str(inv), "--store", str(store), "--measure"])
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1, err
    assert "the plan is for cuda devices (its UVM tables ad run only there)" in lines[0]
    assert "profile.backend cuda" in lines[0] and "gpu pool" in lines[0] and "--allow-simulated" in lines[0]
    assert "--allow-proxy" in lines[0]
    assert not store.exists() or get_current(open_store(str(store)), "uvm") is None


def test_asked_for_the_labelled_proxy_gates_it(tmp_path: Path) -> None:
    inv, plan = _files(tmp_path)
    store = tmp_path / "store"
    argv = ["plans", "publish", str(plan), "-i", str(inv), "--store", str(store), "--measure", "--backend", "simulator"]
    code, _, err = invoke(argv)
    assert code == 2 and "simulated" in err  # never without asking
    code, out, err = invoke([*argv, "--allow-simulated"])
    assert code == 0, err
    current = get_current(open_store(str(store)), "uvm")
    assert current is not None and current.kernel("ad") == "fused_uvm_caching"
    assert current.measured_by is not None and current.measured_by.is_simulated


def test_asked_for_the_cpu_proxy_the_decision_says_proxy(tmp_path: Path) -> None:
    from dreamshard.documents import load_plan
    from dreamshard.store.plans import recorded_decision

    inv, plan = _files(tmp_path)
    store = tmp_path / "store"
    argv = ["plans", "publish", str(plan), "-i", str(inv), "--store", str(store), "--measure", "--backend", "cpu"]
    code, out, err = invoke([*argv, "--rounds", "5", "--allow-proxy"])
    assert code in (0, 1), err  # approved, or kept as rejected / inconclusive: decided, never refused
    assert "PROXY" in out + err
    found = recorded_decision(open_store(str(store)), load_plan(plan))
    assert found is not None
    decision = found[1].gate
    assert decision.proxy.startswith("PROXY: a cuda plan timed on 'cpu'")
    assert "UVM tables (ad) timed with the fused kernel" in decision.proxy
    assert "PROXY for cuda devices" in decision.evidence


def test_the_device_table_shows_the_host_part_beside_device_memory(tmp_path: Path) -> None:
    """`--stats` on a UVM device printed memory 9.27 GB beside weights 10.03 GB, unexplained. The
    table now shows the device cache and the host part, and memory = weights + optimizer + io + cache - host."""
    from dreamshard.documents import load_inventory, load_plan
    from dreamshard.evaluation.render import device_rows, device_table, device_table_markdown

    inv_file, plan_file = _files(tmp_path)
    inv, plan = load_inventory(inv_file), load_plan(plan_file)
    rows = device_rows(plan, inv)
    assert any(float(r["host_gb"]) > 0 for r in rows)  # type: ignore[arg-type]
    for r in rows:
        parts = [float(r[k]) for k in ("weights_gb", "optimizer_gb", "io_gb", "cache_gb")]  # type: ignore[arg-type]
        assert float(r["memory_gb"]) == pytest.approx(sum(parts) - float(r["host_gb"]), abs=1e-3)  # type: ignore[arg-type]
    headers = [c.header for c in device_table(plan, inv).columns]
    assert "cache GB" in headers and "host GB" in headers
    assert "| cache GB | host GB |" in device_table_markdown(plan, inv)
