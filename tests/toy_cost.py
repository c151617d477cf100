"""A small KNOWN cost function with the CostEstimator interface, for tests, examples and sanity checks.

Labelled as what it is: an analytic toy, never a measurement. It is deliberately non-additive like a
fused operator: each non-empty device pays a fixed kernel overhead once, and compute grows
superlinearly with the device's combined lookup volume (a working set that outgrows the cache).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from dreamshard.values import Costs, DeviceCost, Inventory, Measurement, Table


class ToyCost:
    """state of a table = [1, lookups (dim x pooling / 1000), output dims / 100, rows x dim / 1e7]."""

    state_dim = 4

    def __init__(
        self,
        overhead_ms: float = 0.5,
        linear: float = 1.0,
        superlinear: float = 0.3,
        comm_per_dim: float = 0.2,
        cost_scale: float = 5.0,
    ) -> None:
        self.overhead_ms = overhead_ms
        self.linear = linear
        self.superlinear = superlinear
        self.comm_per_dim = comm_per_dim
        self.cost_scale = cost_scale

    def encode(self, tables: Sequence[Table]) -> torch.Tensor:
        return torch.tensor(
            [
                [
                    1.0,
                    t.embedding_dim * t.pooling_factor / 1000.0,
                    t.embedding_dim / 100.0,
                    t.num_embeddings * t.embedding_dim / 1e7,
                ]
                for t in tables
            ],
            dtype=torch.float32,
        ).reshape(len(tables), 4)

    def device_costs(self, states: torch.Tensor) -> torch.Tensor:
        count, lookups, dims, size = states.unbind(-1)
        nonempty = (count > 0.5).to(states.dtype)
        work = lookups * (1.0 + 0.2 * torch.log1p(size))
        fwd = nonempty * self.overhead_ms + self.linear * work + self.superlinear * work**1.5
        comm = self.comm_per_dim * dims
        return torch.stack((fwd, comm, comm, 1.5 * fwd), dim=-1)

    def overall(self, states: torch.Tensor) -> torch.Tensor:
        return self.device_costs(states).sum(-1).amax(-1)

    def costs(self, tables: Sequence[Table], placement: dict[str, int], num_devices: int) -> Costs:
        """Exact costs of a placement (ms)."""
        st = self.encode(tables)
        dev = torch.zeros(num_devices, self.state_dim)
        dev.index_add_(0, torch.tensor([placement[t.name] for t in tables], dtype=torch.long), st)
        per = self.device_costs(dev)
        return Costs.from_devices([DeviceCost.from_list(r.tolist()) for r in per])


def toy_measurements(
    pool: Inventory,
    toy: ToyCost,
    num_placements: int,
    num_devices: int | Sequence[int],
    tables_per_task: tuple[int, int],
    seed: int = 0,
    singles: bool = True,
    memory_gb: float = 1024.0,
) -> list[Measurement]:
    """Records shaped like profile output, with costs from the toy function (backend "toy", simulated)."""
    import numpy as np

    from dreamshard.values import BackendInfo, Topology

    rng = np.random.default_rng(seed)
    info = BackendInfo(
        name="toy",
        operator="analytic",
        device="cpu",
        num_threads=1,
        batch_size=2048,
        warmup=0,
        repeats=1,
        is_simulated=True,
    )
    devs = [num_devices] if isinstance(num_devices, int) else list(num_devices)
    fp = pool.fingerprint()
    out: list[Measurement] = []

    def record(kind: str, tables: list[Table], placement: dict[str, int], d: int) -> Measurement:
        topo = Topology(num_devices=d, memory_per_device_gb=memory_gb)
        return Measurement(
            kind=kind,
            inventory_name=pool.name,
            inventory_fingerprint=fp,
            topology=topo,  # type: ignore[arg-type]
            placement=placement,
            costs=toy.costs(tables, placement, d),
            backend=info,
        )

    if singles:
        for t in pool.tables:
            out.append(record("single", [t], {t.name: 0}, devs[0]))
    for _ in range(num_placements):
        d = int(rng.choice(devs))
        k = int(rng.integers(tables_per_task[0], tables_per_task[1] + 1))
        idx = rng.choice(pool.num_tables, size=min(k, pool.num_tables), replace=False)
        tables = [pool.tables[i] for i in idx]
        placement = {t.name: int(rng.integers(0, d)) for t in tables}
        out.append(record("placement", tables, placement, d))
    return out


def toy_model(directory: object, seed: int = 0) -> object:
    """A small model (cost ensemble + policy) trained on ToyCost records, saved in `directory`; returns its card.
    Its feature ranges are those of the records (tables of synth_inventory(30, seed=4), 4 devices)."""
    from pathlib import Path

    import torch

    from dreamshard.config.learning import CostTrainConfig, PolicyTrainConfig, TopologyConfig
    from dreamshard.inventory.synth import synth_inventory
    from dreamshard.learning.model_store import save_model
    from dreamshard.learning.planning_cost import cost_factory
    from dreamshard.learning.ranges import ranges_from
    from dreamshard.learning.train_cost import train_cost_model
    from dreamshard.learning.train_policy import train_policy
    from dreamshard.values import Task

    torch.manual_seed(seed)
    pool = synth_inventory(30, seed=4)
    records = toy_measurements(pool, ToyCost(), num_placements=40, num_devices=4, tables_per_task=(5, 12), seed=1)
    net, metrics = train_cost_model(pool, records, CostTrainConfig(steps=60, lr=3e-3), progress=False)
    tasks = [Task(name=f"t{i}", tables=tuple(pool.table_names[i : i + 8]), num_devices=4) for i in range(4)]
    policy, _ = train_policy(
        pool,
        tasks,
        cost_factory(net, (), 1.0),
        PolicyTrainConfig(episodes=20),
        progress=False,
        topology=TopologyConfig(),
    )
    return save_model(
        Path(str(directory)),
        net,
        policy,
        inventory_name=pool.name,
        inventory_fingerprint=pool.fingerprint(),
        backend="toy",
        feature_ranges=ranges_from(records, pool.by_name()),
        cost_metrics=metrics.model_dump(mode="json"),
    )
