"""The analytic simulator: deterministic, labelled as simulated, and non-additive like fused TBE."""

from __future__ import annotations

from dreamshard.profiling import make_oracle
from dreamshard.values import Inventory, Table, Topology


def _tables(n: int, rows: int = 200_000, dim: int = 64, pooling: float = 20) -> list[Table]:
    return [Table(name=f"t{i}", num_embeddings=rows, embedding_dim=dim, pooling_factor=pooling) for i in range(n)]


def _device_cost(tables: list[Table]) -> float:
    o = make_oracle("simulator")
    inv = Inventory(name="s", tables=tuple(tables))
    return o.measure(inv, {t.name: 0 for t in tables}, Topology(num_devices=1, memory_per_device_gb=64)).overall_ms


def test_simulator_is_labelled_and_deterministic() -> None:
    o1, o2 = make_oracle("simulator", seed=1), make_oracle("simulator", seed=2)
    assert o1.info.is_simulated and o1.info.operator == "analytic" and o1.info.name == "simulator"
    inv = Inventory(name="s", tables=tuple(_tables(6)))
    topo = Topology(num_devices=3, memory_per_device_gb=64)
    placement = {f"t{i}": i % 3 for i in range(6)}
    m1, m2 = o1.measure(inv, placement, topo), o2.measure(inv, placement, topo)
    assert m1.costs == m2.costs and m1.spread == (0.0, 0.0, 0.0)
    assert m1.backend.is_simulated and m1.comm_model is not None and m1.comm_model.backend == "simulated"


def test_simulator_is_not_additive() -> None:
    small = _tables(2, rows=1_000, dim=16, pooling=1)
    pair = _device_cost(small)
    assert pair < sum(_device_cost([t]) for t in small)  # shared kernel overhead
    big = _tables(16)
    fused = _device_cost(big)
    assert fused > 1.2 * sum(_device_cost([t]) for t in big)  # combined working set


def test_simulator_empty_device_and_monotone_costs() -> None:
    o = make_oracle("simulator")
    a, b = (
        Table(name="a", num_embeddings=10_000, embedding_dim=16, pooling_factor=2),
        Table(name="b", num_embeddings=10_000, embedding_dim=128, pooling_factor=40),
    )
    m = o.measure(Inventory(name="s", tables=(a, b)), {"a": 0, "b": 0}, Topology(num_devices=2, memory_per_device_gb=1))
    assert m.costs.per_device[1].total == 0.0
    singles = o.single_table_costs(Inventory(name="s", tables=(a, b)), Topology(num_devices=1, memory_per_device_gb=1))
    assert singles["b"] > singles["a"]
