"""Attacks on the production loop's fast path: `replan --refine-seconds`, `plan --stage-budget`, the params
`plan.replan_refine_seconds` / `stage_budget` / `refine_confirm_rounds`, `profile.statistic` and the gate's
sequential looks (`publish.early_rounds` / `early_share`, `evaluate.stop_early`), each refused in one line with
nothing written; and the publish policy's "keep the current plan" rule (gate/publish_policy.py) after a schema
change.
The files: `inv.yaml` (8 tables, inventory 'loop').

Also covered elsewhere, not repeated here: the early looks' other bad values (below 2 rounds, out of order, 1000,
true) are PublishConfig's test in tests/test_gate_sequential.py, as is a 3-round comparison whose early look
cannot decide (gate_plan); a table added, another topology, a statistics-only change and a clearly slower plan
are tests/test_replan.py's first-plan tests; the fallback after a table is added is tests/test_fallback.py's, and
a comparison whose baseline entry is swapped or relabelled is refused by the gate (cases_gate.py,
tests/test_gate_hardening.py) whether or not a fallback would follow."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from harness import Case, Holds, Refused, Table, written
from store_helpers import hand_judgement, publish_or_reject

from dreamshard.documents import save_inventory
from dreamshard.gate import incumbent_for
from dreamshard.gate.publish_policy import publish_verdict
from dreamshard.inventory.synth import synth_inventory
from dreamshard.sharders import get_sharder
from dreamshard.store import PlanStore, open_store
from dreamshard.usecases.publish_decide import read_state
from dreamshard.values import GateDecision, Inventory, Topology

INV = synth_inventory(8, 0, name="loop")
TOPO = Topology(num_devices=2, memory_per_device_gb=4.0)
REPLAN = ["replan", "-i", "inv.yaml", "--store", "store"]
VERIFY = ["plan", "-i", "inv.yaml", "--verify", "1", "-o", "p.json"]

#: The values `--refine-seconds` and `--stage-budget` refuse.
BAD_NUMBERS = ("-1", "nan", "inf", "1e12", "abc", "")

#: params.yaml (section, key, value) that `replan --params` refuses, naming `section.key`.
BAD_PARAMS: tuple[tuple[str, str, str], ...] = (
    ("plan", "replan_refine_seconds", ".nan"),
    ("plan", "replan_refine_seconds", "-5"),
    ("plan", "replan_refine_seconds", "'x'"),
    ("plan", "stage_budget", "-1"),
    ("plan", "stage_budget", "1e9"),
    ("plan", "stage_budget", "[2]"),
    ("plan", "refine_confirm_rounds", "-1"),
    ("plan", "refine_confirm_rounds", "101"),
    ("plan", "refine_confirm_rounds", "1.5"),
    ("plan", "refine_confirm_rounds", "'x'"),
    ("profile", "statistic", "mean"),
    ("profile", "statistic", "MIN"),
    ("profile", "statistic", "''"),
    ("profile", "statistic", "[min]"),
    ("profile", "statistic", "3"),
    ("publish", "early_rounds", "'x'"),
    ("publish", "early_rounds", "[3, 'x']"),
    ("publish", "early_share", "0"),
    ("publish", "early_share", "1"),
    ("publish", "early_share", ".nan"),
    ("publish", "early_share", "0.5"),
    ("evaluate", "stop_early", "'maybe'"),
)


def world(d: Path) -> None:
    save_inventory(INV, d / "inv.yaml")


def _current_store(work: Path) -> PlanStore:
    """A store whose current plan is dim_greedy's plan of INV."""
    store = open_store(str(work / "store"))
    plan = get_sharder("dim_greedy").shard(INV, TOPO)
    ok = GateDecision(
        approved=True,
        outcome="approved",
        plan_id=plan.plan_id,
        reason="approved",
        inventory_fingerprint=INV.fingerprint(),
    )
    publish_or_reject(store, plan.model_copy(update={"measured": plan.predicted}), ok)
    return store


def _becomes_current_after(other: Inventory) -> Callable[[Path], None]:
    """A plan of `other` inside the noise: the current plan cannot serve its schema, so it becomes current."""

    def check(work: Path) -> None:
        plan = get_sharder("size_greedy").shard(other, TOPO)
        unsure = GateDecision(
            approved=False,
            outcome="inconclusive",
            plan_id=plan.plan_id,
            reason="inconclusive: ... the current plan stays (measure more rounds)",
        )
        store = _current_store(work)
        state = read_state(store, "loop")
        inc = incumbent_for("loop", state.plan_id, state.plan, state.schema, other, TOPO)
        got = publish_verdict(hand_judgement(unsure, {"size_greedy": [10.0, 10.0, 10.0]}), inc)
        assert got.change == "replaces" and got.decision.approved, got.decision.reason
        assert "cannot serve" in got.decision.reason, got.decision.reason

    return check


SCHEMA_CHANGES: dict[str, Inventory] = {
    "a table removed": Inventory(name="loop", tables=INV.tables[1:]),
    "a table's rows changed": Inventory(
        name="loop", tables=(INV.tables[0].model_copy(update={"num_embeddings": 7}), *INV.tables[1:])
    ),
    "a table renamed": Inventory(
        name="loop", tables=(INV.tables[0].model_copy(update={"name": "t_renamed"}), *INV.tables[1:])
    ),
}


def _argv(*argv: str) -> Callable[[Path], list[str]]:
    return lambda work: list(argv)


def _cases() -> list[Case]:
    cases: list[Case] = []
    for value in BAD_NUMBERS:
        cases += [
            Refused(
                f"replan --refine-seconds {value!r}", _argv(*REPLAN, "--refine-seconds", value), "--refine-seconds"
            ),
            Refused(
                f"plan --verify 1 --stage-budget {value!r}",
                _argv(*VERIFY, "--stage-budget", value),
                "--stage-budget",
            ),
        ]
    cases += [
        Refused(
            f"params {section}.{key}: {value}",
            _argv(*REPLAN, "--params", "bad.yaml"),
            f"{section}.{key}",
            setup=written("bad.yaml", f"{section}:\n  {key}: {value}\n"),
        )
        for section, key, value in BAD_PARAMS
    ]
    cases += [
        Holds(f"inside the noise after {what}: the plan becomes current", _becomes_current_after(other))
        for what, other in SCHEMA_CHANGES.items()
    ]
    return cases


TABLE = Table("production loop", _cases(), world)
