"""Attacks on the publish gate (`plans publish`): noise that would flip a decision, a plan decided twice, labels
that remove or fake a baseline, a publisher choosing the baselines, a comparison whose figures disagree or that
measured another inventory, a simulated basis nobody asked for.

The files: the World's (tests/store_helpers.py: inv.yaml, good/bad/worse.json, cmp.json, gate-params.yaml) and a
random plan relabelled as lookup_greedy's (relabelled.json) or as learned (mine.json), each with the comparison
`compare -p` makes of it and every baseline (relabelled-cmp.json, full.json)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness import Case, Holds, Refused, Result, Runs, Table, cli, edited, written
from store_helpers import NoisyOracle, publish_or_reject, world

from dreamshard.evaluation import BASELINE_SHARDERS, Comparison, compare_sharders
from dreamshard.gate import baseline_plan
from dreamshard.sharders import get_sharder
from dreamshard.store import list_plans, open_store, show
from dreamshard.values import GateDecision, Plan

#: Flags every publish of these cases takes: the local store and the simulator's basis allowed.
FLAGS = "--store store -i inv.yaml --allow-simulated"


def relabelled(sharder: str = "lookup_greedy", seed: int = 2) -> Plan:
    """A random plan (8% slower than lookup_greedy's here) whose `sharder` field was edited."""
    w = world()
    return get_sharder("random", seed=seed).shard(w.inventory, w.topology).model_copy(update={"sharder": sharder})


def full_comparison(plan: Plan, oracle: Any = None, sharders: tuple[str, ...] = BASELINE_SHARDERS) -> Comparison:
    """What `compare -p PLAN` makes: every baseline (random with seed 0) and the plan, interleaved, 5 rounds."""
    from dreamshard.profiling import make_oracle

    w = world()
    return compare_sharders(
        w.inventory,
        w.topology,
        list(sharders),
        oracle or make_oracle("simulator"),
        rounds=5,
        sharder_options={"random": {"seed": 0}},
        extra_plans=[plan],
    )


def world_files(d: Path) -> None:
    from dreamshard.documents import save_plan

    world().write(d)
    for name, cmp, plan in (("relabelled", "relabelled-cmp", relabelled()), ("mine", "full", relabelled("dreamshard"))):
        save_plan(plan, d / f"{name}.json")
        (d / f"{cmp}.json").write_text(full_comparison(plan).model_dump_json())


def outcomes(work: Path, plan_id: str | None = None) -> list[str]:
    """The store's decisions (of `plan_id`, or all)."""
    if not (work / "store").exists():
        return []
    return [x.outcome for x in list_plans(open_store(str(work / "store"))) if plan_id in (None, x.plan_id)]


def with_current(work: Path) -> None:
    """A current plan to keep (with none, a plan inside the noise becomes the first: gate/publish_policy.py)."""
    w = world()
    seed = get_sharder("round_robin").shard(w.inventory, w.topology)
    publish_or_reject(
        open_store(str(work / "store")),
        seed.model_copy(update={"measured": seed.predicted}),
        GateDecision(
            approved=True,
            outcome="approved",
            reason="a current plan to keep",
            plan_id=seed.plan_id,
            inventory_fingerprint=w.inventory.fingerprint(),
        ),
    )


def compared(
    plan: str, out: str, sharders: tuple[str, ...] = BASELINE_SHARDERS, noise: int | None = None
) -> Callable[[Path], None]:
    """A setup: `out` is the comparison of the plan file `plan` and the baselines (on a noisy machine seeded
    `noise`, if given)."""

    def setup(work: Path) -> None:
        from dreamshard.documents import load_plan

        oracle = None if noise is None else NoisyOracle(seed=noise)
        (work / out).write_text(full_comparison(load_plan(work / plan), oracle, sharders).model_dump_json())

    return setup


def noisy(plan: str, seed: int, out: str, sharders: tuple[str, ...] = BASELINE_SHARDERS) -> Callable[[Path], None]:
    """A setup: `out` is a comparison of the plan file `plan` and the baselines on a noisy machine, and the store
    has a current plan."""

    def setup(work: Path) -> None:
        compared(plan, out, sharders, noise=seed)(work)
        with_current(work)

    return setup


def rejected_with_fallback(plan: str, *needles: str) -> Callable[[Path, Result], None]:
    """The plan is rejected (the line holds the needles); with no current plan the store keeps the best
    baseline's own placement as the fallback (usecases/publish_write.py), never the plan's."""

    def then(work: Path, r: Result) -> None:
        from dreamshard.documents import load_plan

        for n in needles:
            assert n in r.err, r.err
        assert sorted(outcomes(work)) == ["fallback", "rejected"]
        store = open_store(str(work / "store"))
        kept = show(store, next(x.plan_id for x in list_plans(store) if x.outcome == "fallback"))
        own = baseline_plan(kept.sharder, world().inventory, world().topology, 0)
        assert kept.sharder != "dreamshard" and kept.units() == own.units()
        assert kept.units() != load_plan(work / plan).units()

    return then


def _noise_never_flips(work: Path) -> None:
    """The same plan judged on a noisy comparison, then measured: one decision, the same exit both times."""
    noisy("mine.json", 1, "noisy.json")(work)
    mine = json.loads((work / "mine.json").read_text())["plan_id"]
    first = cli(["plans", "publish", "mine.json", *FLAGS.split(), "--comparison", "noisy.json"])
    second = cli(["plans", "publish", "mine.json", *FLAGS.split(), "--measure", "--backend", "simulator"])
    assert first.code == second.code == 1 and "already decided" in second.err, (first, second)
    assert len(outcomes(work, mine)) == 1


def _quiet_after_noisy_keeps_the_decision(work: Path) -> None:
    """Inside the noise the current plan stays (inconclusive); the same plan again with a quiet comparison or
    with --measure: the recorded decision stands."""
    w = world()
    noisy("good.json", 3, "noisy.json", tuple(w.baselines))(work)
    argv = ["plans", "publish", "good.json", *FLAGS.split(), "--params", "gate-params.yaml"]
    r = cli([*argv, "--comparison", "noisy.json"])
    assert r.code == 1 and r.err.startswith("inconclusive") and "the current plan stays" in r.err, r
    for extra in (["--comparison", "cmp.json"], ["--measure", "--backend", "simulator"]):
        r = cli([*argv, *extra])
        assert r.code == 1 and r.err.startswith("already decided: inconclusive"), r
    records = list_plans(open_store("store"))
    assert [(x.outcome, x.is_current) for x in records if x.plan_id == w.good.plan_id] == [("inconclusive", False)]


def _rejected_stays_rejected(work: Path) -> None:
    argv = ["plans", "publish", "worse.json", *FLAGS.split(), "--params", "gate-params.yaml"]
    assert cli([*argv, "--comparison", "cmp.json"]).code == 1
    r = cli([*argv, "--measure", "--backend", "simulator"])
    assert r.code == 1 and "already decided: rejected" in r.err, r
    assert sorted(outcomes(work)) == ["fallback", "rejected"]  # nothing was current: a baseline's own plan is


def _says(*needles: str) -> Callable[[Path, Result], None]:
    def then(work: Path, r: Result) -> None:
        for n in needles:
            assert n in r.err, r.err

    return then


def _inconclusive(plan_id: str) -> Callable[[Path, Result], None]:
    def then(work: Path, r: Result) -> None:
        assert "current plan stays" in r.err, r.err
        assert outcomes(work, plan_id) == ["inconclusive"]

    return then


def _copied_rr(drop_real: bool) -> Callable[[dict[str, Any]], None]:
    """round_robin's entry copied under the label lookup_greedy, beside the real one or replacing it."""

    def edit(data: dict[str, Any]) -> None:
        rs = data["results"]
        fake = json.loads(json.dumps(next(r for r in rs if r["sharder"] == "round_robin")))
        fake["sharder"] = fake["plan"]["sharder"] = "lookup_greedy"
        fake["plan"]["plan_id"] = "copied"
        data["results"] = [x for x in rs if not (drop_real and x["sharder"] == "lookup_greedy")] + [fake]

    return edit


def _inconsistent(kind: str) -> Callable[[dict[str, Any]], None]:
    """A comparison whose figures disagree: the plan's overall below its per-device totals, `is_simulated` false
    with the simulator as backend, or baselines of 1e308 ms (all of them, or one with its per-device costs)."""

    def edit(data: dict[str, Any]) -> None:
        own = next(r for r in data["results"] if r["sharder"] == "dreamshard")
        if kind == "overall":
            own["overall_ms"] = own["plan"]["measured"]["overall_ms"] = 0.5
            own["samples_ms"] = [0.5] * len(own["samples_ms"])
        elif kind == "simulated":
            data["backend"]["is_simulated"] = False
            for r in data["results"]:
                r["plan"]["measured_by"]["is_simulated"] = False
        elif kind == "huge":
            for r in data["results"]:
                if r["sharder"] != "dreamshard":
                    r["overall_ms"] = r["plan"]["measured"]["overall_ms"] = 1e308
                    r["samples_ms"] = [1e308] * len(r["samples_ms"])
        else:
            base = next(r for r in data["results"] if r["sharder"] == "dim_greedy")
            base["overall_ms"] = base["plan"]["measured"]["overall_ms"] = 1e308
            base["samples_ms"] = [1e308] * len(base["samples_ms"])
            per_device = base["plan"]["measured"]["per_device"]
            base["plan"]["measured"]["per_device"] = [{k: 5e307 for k in d} for d in per_device]

    return edit


def _compared_elsewhere(inventory_tables: int, devices: int) -> Callable[[Path], None]:
    """A genuine comparison of another inventory or another device count, as other.json."""

    def setup(work: Path) -> None:
        from dreamshard.inventory.synth import synth_inventory
        from dreamshard.profiling import make_oracle

        w = world()
        inv = synth_inventory(inventory_tables, 0, name="inv")
        topo = w.topology.model_copy(update={"num_devices": devices})
        cmp = compare_sharders(inv, topo, w.baselines, make_oracle("simulator"), rounds=5)
        (work / "other.json").write_text(cmp.model_dump_json())

    return setup


def _cases() -> list[Case]:
    good = world().good.plan_id
    cases: list[Case] = [
        Holds("the same plan, --comparison then --measure: never opposite decisions", _noise_never_flips),
        Holds(
            "a quiet comparison after a noisy one: the recorded decision stands", _quiet_after_noisy_keeps_the_decision
        ),
        Runs(
            "identical placements measured 10.4 / 18.7 ms: inside the noise, the current plan stays",
            f"plans publish good.json {FLAGS} --comparison noisy.json",
            _inconclusive(good),
            setup=noisy("good.json", 5, "noisy.json"),
            code=1,
        ),
        Holds("a rejected plan is never approved later", _rejected_stays_rejected),
        Refused(
            "a simulator basis without --allow-simulated",
            "plans publish mine.json --store store -i inv.yaml --comparison full.json",
            "--allow-simulated",
        ),
        Refused(
            "a simulator basis the params do not allow",
            "plans publish good.json --store store -i inv.yaml --comparison cmp.json --params strict.yaml",
            "--allow-simulated",
            setup=lambda w: (w / "strict.yaml").write_text(world().params_text(allow_simulated=False)),
        ),
        Runs(
            "a simulator basis asked for with --allow-simulated is published",
            "plans publish good.json --store store -i inv.yaml --comparison cmp.json --params strict.yaml "
            "--allow-simulated",
            setup=lambda w: (w / "strict.yaml").write_text(world().params_text(allow_simulated=False)),
        ),
        Runs(
            "a relabelled random plan, --measure: measured against the real lookup_greedy",
            f"plans publish relabelled.json {FLAGS} --measure --backend simulator",
            rejected_with_fallback("relabelled.json", "best baseline lookup_greedy", "does not beat"),
            code=1,
        ),
        Runs(
            "a relabelled random plan, unedited `compare -p` output: judged by its plan id",
            f"plans publish relabelled.json {FLAGS} --comparison relabelled-cmp.json",
            rejected_with_fallback("relabelled.json", "does not beat"),
            code=1,
        ),
        Refused(
            "`compare --sharders round_robin` output",
            f"plans publish mine.json {FLAGS} --comparison narrow.json",
            "baseline",
            setup=compared("mine.json", "narrow.json", ("round_robin",)),
        ),
        Refused(
            "`compare --sharders round_robin` output, published with --sharders round_robin",
            f"plans publish mine.json {FLAGS} --comparison narrow.json --sharders round_robin",
            "no 'dim_greedy' baseline",
            setup=compared("mine.json", "narrow.json", ("round_robin",)),
        ),
        Refused(
            "a comparison without torchrec",
            f"plans publish mine.json {FLAGS} --comparison narrow.json",
            "baseline",
            setup=edited(
                "full.json",
                "narrow.json",
                lambda d: d.update(results=[r for r in d["results"] if r["sharder"] != "torchrec"]),
            ),
        ),
        Runs(
            "--measure --sharders random: a baseline added beside publish.baselines counts",
            f"plans publish mine.json {FLAGS} --measure --backend simulator --sharders random",
            _says("best baseline random"),
            code=1,
        ),
        Refused(
            "a comparison with the best entries deleted",
            f"plans publish mine.json {FLAGS} --comparison edited.json",
            "baseline",
            setup=edited(
                "full.json",
                "edited.json",
                lambda d: d.update(
                    results=[x for x in d["results"] if x["sharder"] not in ("random", "lookup_greedy")]
                ),
            ),
        ),
        Refused(
            "round_robin's entry copied as lookup_greedy, beside it",
            f"plans publish mine.json {FLAGS} --comparison edited.json",
            "two contenders labelled 'lookup_greedy'",
            setup=edited("full.json", "edited.json", _copied_rr(False)),
        ),
        Refused(
            "round_robin's entry copied as lookup_greedy, replacing it",
            f"plans publish mine.json {FLAGS} --comparison edited.json",
            "recomputed",
            setup=edited("full.json", "edited.json", _copied_rr(True)),
        ),
        Refused(
            "params whose publish.baselines drop torchrec",
            f"plans publish good.json {FLAGS} --comparison cmp.json --params no-torchrec.yaml",
            ("publish.baselines", "torchrec"),
            setup=written("no-torchrec.yaml", "publish:\n  baselines: [round_robin, dim_greedy]\n"),
        ),
        Refused(
            "a comparison and --measure at once",
            "plans publish good.json -i inv.yaml --store store --comparison cmp.json --measure",
            "choose one",
        ),
    ]
    cases += [
        Refused(
            f"a comparison with {what}",
            f"plans publish mine.json {FLAGS} --comparison edited.json",
            needle,
            setup=edited("full.json", "edited.json", _inconsistent(kind)),
        )
        for kind, what, needle in (
            ("overall", "the plan's overall_ms 0.5 beside its per-device totals", "bottleneck device"),
            ("simulated", "is_simulated: false with backend simulator", "is_simulated"),
            ("huge", "every baseline at 1e308 ms", ""),
            ("one-huge", "a baseline at 1e308 ms, its per-device costs at 5e307", "below 1e+12"),
        )
    ]
    cases += [
        Refused(
            f"--comparison from {what}",
            f"plans publish worse.json {FLAGS} --params gate-params.yaml --comparison other.json",
            setup=_compared_elsewhere(tables, devices),
        )
        for what, tables, devices in (("another inventory", 11, 2), ("another device count", 12, 4))
    ]
    return cases


TABLE = Table("gate", _cases(), world_files)
