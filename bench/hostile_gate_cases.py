"""The gate's hostile cases (issue 15 item 5; issue 18 items 2, 3, 4, 13), run by bench/hostile_cases.py.

Each case is the defect's command; it holds when the gate now refuses the input (one-line exit 2, nothing
stored) or decides as the real figures say. The inputs come from tests/gate_hostile.py (shared with
tests/test_gate_hardening.py)."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from gate_hostile import (  # noqa: E402 - tests/ is not a package
    INVENTORY,
    TOPOLOGY,
    NoisyOracle,
    by_label,
    edit_results,
    full_comparison,
    publish_argv,
    relabelled,
    write_case,
)
from hostile_cases import one_line_2  # noqa: E402 - bench/ is the script's directory

from dreamshard.cli.app import invoke as cli  # noqa: E402
from dreamshard.config.settings import installed_pipeline_file  # noqa: E402
from dreamshard.gate import GateDecision, baseline_plan  # noqa: E402
from dreamshard.sharders import get_sharder  # noqa: E402
from dreamshard.store import list_plans, open_store, publish, publish_or_reject, show  # noqa: E402
from dreamshard.values.lineage import Lineage  # noqa: E402

Case = Callable[[str, str, str], Callable[[Callable[[], Any]], None]]


def _outcomes(files: dict[str, Path], plan_id: str | None = None) -> list[str]:
    if not files["store"].exists():
        return []
    return [x.outcome for x in list_plans(open_store(str(files["store"]))) if plan_id in (None, x.plan_id)]


def _rejected_with_fallback(files: dict[str, Path], plan: Any) -> bool:
    """The relabelled plan is rejected; with no current plan the store keeps the best baseline's own placement
    as the fallback (usecases.publish.store_gated), never the relabelled one."""
    if sorted(_outcomes(files)) != ["fallback", "rejected"]:
        return False
    store = open_store(str(files["store"]))
    kept = show(store, next(x.plan_id for x in list_plans(store) if x.outcome == "fallback"))
    own = baseline_plan(kept.sharder, INVENTORY, TOPOLOGY, 0)
    return kept.sharder != "dreamshard" and kept.units() == own.units() and kept.units() != plan.units()


def _with_current(files: dict[str, Path]) -> None:
    """A current plan to keep (with none, a plan inside the noise becomes the first: usecases.publish.first_plan)."""
    seed = get_sharder("round_robin").shard(INVENTORY, TOPOLOGY)
    publish_or_reject(
        open_store(str(files["store"])),
        seed.model_copy(update={"measured": seed.predicted}),
        GateDecision(
            approved=True,
            outcome="approved",
            reason="a current plan to keep",
            plan_id=seed.plan_id,
            inventory_fingerprint=INVENTORY.fingerprint(),
        ),
    )


def gate_cases(d: Path, case: Case) -> None:  # noqa: C901 - one flat list of cases reads best
    plan = relabelled()  # random seed 2, sharder field edited to lookup_greedy
    mine = relabelled("dreamshard")
    full = full_comparison(mine)
    measure = ["--measure", "--backend", "simulator"]

    # lookup_greedy's own placement, labelled as learned
    same = get_sharder("lookup_greedy").shard(INVENTORY, TOPOLOGY).model_copy(update={"sharder": "dreamshard"})

    @case("15.5", "same plan, --comparison then --measure: never opposite decisions", "plans publish P (twice)")
    def _() -> tuple[bool, str]:
        files = write_case(d / "noise", mine, full_comparison(mine, NoisyOracle(seed=1)))
        _with_current(files)
        first = cli(publish_argv(files))
        second = cli(publish_argv(files, *measure, comparison=False))
        mine_out = _outcomes(files, mine.plan_id)
        return (
            first[0] == second[0] == 1 and "already decided" in second[2] and len(mine_out) == 1,
            mine_out[0] if mine_out else first[2][:60],
        )

    @case(
        "15.5",
        "identical placements measured 10.4 / 18.7 ms: inside the noise",
        "plans publish P --comparison noisy.json",
    )
    def _() -> tuple[bool, str]:
        files = write_case(d / "noise2", same, full_comparison(same, NoisyOracle(seed=5)))
        _with_current(files)
        r = cli(publish_argv(files))
        return (
            r[0] == 1 and _outcomes(files, same.plan_id) == ["inconclusive"] and "current plan stays" in r[2],
            r[2][:60],
        )

    @case("15.5", "simulator basis without --allow-simulated", "plans publish P --comparison cmp.json (no flag)")
    def _() -> bool:
        files = write_case(d / "sim", mine, full)
        argv = [a for a in publish_argv(files) if a != "--allow-simulated"]
        return one_line_2(cli(argv), "--allow-simulated") and not files["store"].exists()

    @case("18.2", "relabelled random plan, --measure", "plans publish relabelled.json --measure")
    def _() -> tuple[bool, str]:
        files = write_case(d / "relabel", plan)
        r = cli(publish_argv(files, *measure, comparison=False))
        return r[0] == 1 and _rejected_with_fallback(files, plan), r[2][:60]

    @case("18.2", "relabelled random plan, unedited `compare -p` output", "plans publish relabelled.json --comparison")
    def _() -> tuple[bool, str]:
        files = write_case(d / "relabel2", plan, full_comparison(plan))
        r = cli(publish_argv(files))
        return r[0] == 1 and _rejected_with_fallback(files, plan), r[2][:60]

    for what, sharders in (
        ("`compare --sharders round_robin` output", ("round_robin",)),
        ("comparison without torchrec", tuple(s for s in full.baselines() if s != "torchrec")),
    ):

        @case("18.3", what, "plans publish P --comparison narrow.json")
        def _(sharders: tuple[str, ...] = sharders) -> bool:
            files = write_case(d / f"narrow{len(sharders)}", mine, full_comparison(mine, sharders=sharders))
            return one_line_2(cli(publish_argv(files)), "baseline") and not files["store"].exists()

    @case(
        "18.3",
        "--measure --sharders random (adds a baseline beside publish.baselines)",
        "plans publish P --measure --sharders random",
    )
    def _() -> tuple[bool, str]:
        files = write_case(d / "measure-rr", mine)
        r = cli(publish_argv(files, *measure, "--sharders", "random", comparison=False))
        return r[0] == 1 and "best baseline random" in r[2], r[2][:60]

    @case("18.3", "comparison with the best entries deleted", "plans publish P --comparison edited.json")
    def _() -> bool:
        files = write_case(
            d / "deleted",
            mine,
            edit_results(full, lambda rs: [x for x in rs if x["sharder"] not in ("random", "lookup_greedy")]),
        )
        return one_line_2(cli(publish_argv(files)), "baseline") and not files["store"].exists()

    def copy_rr(rs: list[Any], drop_real: bool) -> list[Any]:
        fake = json.loads(json.dumps(by_label(rs, "round_robin")))
        fake["sharder"] = fake["plan"]["sharder"] = "lookup_greedy"
        fake["plan"]["plan_id"] = "copied"
        return [x for x in rs if not (drop_real and x["sharder"] == "lookup_greedy")] + [fake]

    for drop in (False, True):

        @case(
            "18.3",
            f"round_robin's entry copied as lookup_greedy ({'replacing' if drop else 'beside'} it)",
            "plans publish P --comparison edited.json",
        )
        def _(drop: bool = drop) -> bool:
            files = write_case(d / f"copied{drop}", mine, edit_results(full, lambda rs: copy_rr(rs, drop)))
            return one_line_2(cli(publish_argv(files))) and not files["store"].exists()

    forged = {
        "lineage": Lineage(
            inventory_fingerprint=full.inventory_fingerprint, flow_run_id="fake", dvc_remote="https://u:s3cret@h/x"
        ).model_dump(mode="json"),
        "model_version": "forged",
        "out_of_range": ["kept"],
    }
    tight = full_comparison(same)

    @case(
        "18.4",
        "plan file's lineage / model_version not stored, out_of_range kept",
        "plans publish forged.json; plans show P --lineage",
    )
    def _() -> tuple[bool, str]:
        files = write_case(d / "forged", same, tight, plan_data=forged)
        cli(publish_argv(files))
        r = cli(["plans", "show", same.plan_id, "--store", str(files["store"])])
        if r[0] != 0:
            return False, r[2][:60]
        shown = json.loads(r[1])
        ok = shown["lineage"] is None and shown["model_version"] is None and shown["out_of_range"] == ["kept"]
        return ok and "s3cret" not in r[1], ""

    for what, lineage, needle in (
        ("lineage with the md5s nulled", {"model_md5": None, "measurements_md5": None}, "no md5"),
        (
            "lineage whose dvc.yaml stage runs an arbitrary command",
            {"dvc_yaml": "stages:\n  inventory:\n    cmd: sh -c 'touch pwned'\n    outs: [data/inventory.yaml]\n"},
            "not the installed pipeline's",
        ),
    ):

        @case("18.4", f"plans reproduce: {what}", "plans reproduce P --into repro")
        def _(lineage: dict[str, Any] = lineage, needle: str = needle) -> bool:
            st = d / f"repro-store-{needle[:6]}"
            fields: dict[str, Any] = {
                "inventory_fingerprint": INVENTORY.fingerprint(),
                "dvc_lock": "schema: '2.0'\n",
                "params": "{}\n",
                "dvc_remote": str(d / "remote"),
                "dvc_yaml": installed_pipeline_file("dvc.yaml").read_text(),
                "model_md5": "a" * 32 + ".dir",
                "measurements_md5": "b" * 32,
                **lineage,
            }
            measured = next(r for r in tight.results if r.plan.plan_id == same.plan_id).plan.measured
            old = same.model_copy(update={"lineage": Lineage(**fields), "measured": measured})  # an older store's plan
            publish(
                open_store(str(st)),
                old,
                GateDecision(approved=True, outcome="approved", reason="old store", plan_id=old.plan_id),
            )
            into = d / f"repro-{needle[:6]}"
            r = cli(["plans", "reproduce", old.plan_id, "--store", str(st), "--into", str(into)])
            return one_line_2(r, needle) and not into.exists()

    def bad_consistency(kind: str) -> dict[str, Any]:
        data = json.loads(full.model_dump_json())
        own = next(r for r in data["results"] if r["plan"]["plan_id"] == mine.plan_id)
        if kind == "overall":
            own["overall_ms"] = own["plan"]["measured"]["overall_ms"] = 0.5
            own["samples_ms"] = [0.5] * len(own["samples_ms"])
        elif kind == "simulated":
            data["backend"]["is_simulated"] = False
            for r in data["results"]:
                r["plan"]["measured_by"]["is_simulated"] = False
        else:
            for r in data["results"]:
                if r["sharder"] != "dreamshard":
                    r["overall_ms"] = r["plan"]["measured"]["overall_ms"] = 1e308
                    r["samples_ms"] = [1e308] * len(r["samples_ms"])
        return data

    for kind, what in (
        ("overall", "overall_ms 0.5 beside per-device totals"),
        ("simulated", "is_simulated: false with backend simulator"),
        ("huge", "1e308 baselines"),
    ):

        @case("18.13", what, "plans publish P --comparison edited.json")
        def _(kind: str = kind) -> bool:
            files = write_case(d / f"cons-{kind}", mine, bad_consistency(kind))
            return one_line_2(cli(publish_argv(files))) and not files["store"].exists()
