"""Hostile inputs for the publish gate for
tests/test_gate_hardening.py: relabelled plans, edited comparisons, a noisy simulator. Everything on the
simulator, in a temporary directory; the gate's attack table is tests/attacks/cases_gate.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from dreamshard.documents import save_inventory, save_plan
from dreamshard.evaluation import BASELINE_SHARDERS, Comparison, compare_sharders
from dreamshard.inventory.synth import synth_inventory
from dreamshard.profiling import make_oracle
from dreamshard.sharders import get_sharder
from dreamshard.values import Plan, Topology

INVENTORY = synth_inventory(12, 0, name="inv")
TOPOLOGY = Topology(num_devices=2, memory_per_device_gb=1.0, batch_size=512)


def relabelled(sharder: str = "lookup_greedy", seed: int = 2) -> Plan:
    """A random plan (8% slower than lookup_greedy's here) whose `sharder` field was edited."""
    return get_sharder("random", seed=seed).shard(INVENTORY, TOPOLOGY).model_copy(update={"sharder": sharder})


def full_comparison(
    plan: Plan, oracle: Any = None, rounds: int = 5, sharders: tuple[str, ...] = BASELINE_SHARDERS
) -> Comparison:
    """What `compare -p PLAN` makes: every baseline (random with seed 0) and the plan, interleaved."""
    return compare_sharders(
        INVENTORY,
        TOPOLOGY,
        list(sharders),
        oracle or make_oracle("simulator"),
        rounds=rounds,
        sharder_options={"random": {"seed": 0}},
        extra_plans=[plan],
    )


def write_case(
    d: Path, plan: Plan, comparison: Comparison | dict[str, Any] | None = None, plan_data: dict[str, Any] | None = None
) -> dict[str, Path]:
    d.mkdir(parents=True, exist_ok=True)
    out = {
        "inventory": save_inventory(INVENTORY, d / "inv.yaml"),
        "plan": save_plan(plan, d / "plan.json"),
        "store": d / "store",
        "comparison": d / "cmp.json",
    }
    if plan_data is not None:
        out["plan"].write_text(json.dumps({**json.loads(out["plan"].read_text()), **plan_data}))
    if comparison is not None:
        text = comparison.model_dump_json() if isinstance(comparison, Comparison) else json.dumps(comparison)
        out["comparison"].write_text(text)
    return out


def publish_argv(files: dict[str, Path], *extra: str, comparison: bool = True) -> list[str]:
    return [
        "plans",
        "publish",
        str(files["plan"]),
        "--store",
        str(files["store"]),
        "-i",
        str(files["inventory"]),
        "--allow-simulated",
        *(["--comparison", str(files["comparison"])] if comparison else []),
        *extra,
    ]


def edit_results(cmp: Comparison, fn: Any) -> dict[str, Any]:
    """The comparison as JSON with fn(results) applied to its list of result dicts."""
    data = json.loads(cmp.model_dump_json())
    data["results"] = fn(data["results"])
    return data


def by_label(results: list[dict[str, Any]], label: str) -> dict[str, Any]:
    return next(r for r in results if r["sharder"] == label)
