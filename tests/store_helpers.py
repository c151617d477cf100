"""Small plan builders for the store / gate tests."""

from __future__ import annotations

from dreamshard.gate import GateDecision, evaluate_gate
from dreamshard.types import Costs, DeviceCost, Plan, Topology

FP = "ab" * 32


def make_plan(
    inventory: str = "inv",
    overall: float = 10.0,
    basis: str = "measured",
    memory: tuple[float, ...] = (0.5, 0.5),
    mem_cap: float = 1.0,
    sharder: str = "dreamshard",
    fingerprint: str = FP,
) -> Plan:
    n = len(memory)
    per = [DeviceCost.from_list([overall / 2, 0.1, 0.1, overall / 2 - 0.2])] + [
        DeviceCost.from_list([1.0, 0.1, 0.1, 1.0]) for _ in range(n - 1)
    ]
    costs = Costs.from_devices(per, overall_ms=overall)
    return Plan(
        inventory_name=inventory,
        inventory_fingerprint=fingerprint,
        topology=Topology(num_devices=n, memory_per_device_gb=mem_cap),
        sharder=sharder,
        placement={f"t{i}": i % n for i in range(2 * n)},
        memory_per_device_gb=memory,
        measured=costs if basis == "measured" else None,
        predicted=costs if basis == "predicted" else None,
    )


def approve(plan: Plan) -> GateDecision:
    d = evaluate_gate(plan, {"size_greedy": (plan.best_costs.overall_ms if plan.best_costs else 1.0) * 2}, 0.0)
    assert d.approved, d.reason
    return d
