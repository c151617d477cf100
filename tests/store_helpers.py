"""Small plan builders for the store / gate tests, the World (a tiny inventory, candidate plans and one simulator
comparison of them) and a noisy oracle."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

from dreamshard.gate import PublishConfig, evaluate_gate
from dreamshard.store.keys import Kind, parse_key
from dreamshard.values import Costs, DeviceCost, GateDecision, Inventory, Plan, Topology

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


def publish_or_reject(store: Any, plan: Plan, decision: GateDecision) -> Any:
    """A store set up as a decision would leave it (a test's fixture, not a publish: the library's only path that
    makes a plan current is dreamshard.usecases.publish): the recorded decision when the store holds one for this
    plan id and version, else published when approved, kept as rejected when not."""
    from dreamshard.store import already_decided, publish, reject

    recorded = already_decided(store, plan)
    if recorded is not None:
        return recorded[0]
    return publish(store, plan, decision) if decision.approved else reject(store, plan, decision)


#: Distinct placements of make_plan's four tables, one per contender.
LAYOUTS = [{"t0": a, "t1": b, "t2": c, "t3": 1 - c} for a in (0, 1) for b in (0, 1) for c in (0, 1)]


def hand_judgement(decision: GateDecision, samples: dict[str, list[float]], judged: Plan | None = None) -> Any:
    """A gate's judgement (dreamshard.gate.Judgement) on hand-set figures: the judged plan (`judged`, else
    make_plan's), measured 10 ms a round; each contender in `samples` its own placement, measured as its samples
    say."""
    import statistics

    from dreamshard.evaluation import Comparison, SharderResult
    from dreamshard.gate import Judgement

    inv = Inventory.model_construct(name="inv", tables=())
    prints = {"inventory_fingerprint": inv.fingerprint(), "schema_fingerprint": inv.schema_fingerprint()}
    plan = judged or make_plan(overall=10.0).model_copy(update={"placement": LAYOUTS[0]})
    plans = {
        n: make_plan(overall=statistics.median(x)).model_copy(
            update={"sharder": n, "plan_id": f"p-{n}", "placement": LAYOUTS[i + 1], **prints}
        )
        for i, (n, x) in enumerate(samples.items())
    }
    results = [
        SharderResult.model_construct(sharder=n, plan=plans[n], samples_ms=x, overall_ms=statistics.median(x))
        for n, x in samples.items()
    ]
    cmp = Comparison.model_construct(results=results, rounds=3, backend=None)
    return Judgement(plan, decision, cmp, inv, [10.0, 10.0, 10.0], samples, plans, {})


def gate_file_plan(
    plan: Plan, inventory: Inventory, comparison: Any, rules: Any, topology: Topology | None = None, **kw: Any
) -> tuple[Plan, GateDecision]:
    """The gate on a plan as a file gives it (taken by `gate.trust_plan` first, as every door does) and a
    comparison: the judged plan and the decision."""
    from dreamshard.gate import gate_plan, trust_plan

    j = gate_plan(trust_plan(plan, inventory, topology), comparison, rules, **kw)
    return j.plan, j.decision


def gate_measured(
    plan: Plan, inventory: Inventory, oracle: Any, rules: Any, topology: Topology | None = None, **kw: Any
) -> tuple[Plan, GateDecision, Any]:
    """The gate's own measurement of a plan as a file gives it: the judged plan, the decision, the comparison."""
    from dreamshard.gate import measure_and_gate, trust_plan

    j = measure_and_gate(trust_plan(plan, inventory, topology), oracle, rules, **kw)
    return j.plan, j.decision, j.comparison


def approve(plan: Plan) -> GateDecision:
    d = evaluate_gate(plan, {"size_greedy": (plan.best_costs.overall_ms if plan.best_costs else 1.0) * 2}, 0.0)
    assert d.approved, d.reason
    return d


#: The World's devices: two of 1 GB, batch 512.
WORLD_TOPOLOGY = Topology(num_devices=2, memory_per_device_gb=1.0, batch_size=512)
#: The World's required baselines (publish.baselines; TorchRec's planner is always one).
WORLD_BASELINES = ("round_robin", "size_greedy", "dim_greedy", "torchrec")


def world_inventory() -> Inventory:
    """The World's inventory alone (cheap: no comparison), for what a test module builds at import."""
    from dreamshard.inventory.synth import synth_inventory

    return synth_inventory(12, 0, name="inv")


class World:
    """A real (tiny) inventory, candidate plans relabelled as learned, and one simulator comparison of them all."""

    def __init__(self) -> None:
        from dreamshard.evaluation import compare_sharders
        from dreamshard.profiling import make_oracle
        from dreamshard.sharders import get_sharder

        self.inventory = world_inventory()
        self.topology = WORLD_TOPOLOGY

        def candidate(sharder: str, **opts: object) -> Plan:
            return (
                get_sharder(sharder, **opts)
                .shard(self.inventory, self.topology)
                .model_copy(update={"sharder": "dreamshard"})
            )

        self.good = candidate("lookup_greedy")  # ~5.7% faster than the best baseline (dim_greedy)
        self.bad = candidate("random", seed=1)  # ~2.5% faster
        self.worse = candidate("size_greedy")  # slower than every baseline
        # The required baselines of these tests (publish.baselines; TorchRec's planner is always one). The heuristics
        # left out (lookup_greedy, random with seed 0) are within 0.5% of the best table-wise placement here.
        self.baselines = list(WORLD_BASELINES)
        self.rules = PublishConfig(baselines=tuple(self.baselines), allow_simulated=True)
        self.comparison = compare_sharders(
            self.inventory,
            self.topology,
            self.baselines,
            make_oracle("simulator"),
            rounds=self.rules.min_rounds,
            extra_plans=[self.good, self.bad, self.worse],
        )

    def write(self, tmp_path: Path) -> dict[str, Path]:
        from dreamshard.documents import save_inventory, save_plan

        out = {
            "inventory": save_inventory(self.inventory, tmp_path / "inv.yaml"),
            "comparison": tmp_path / "cmp.json",
            "store": tmp_path / "store",
            "dir": tmp_path,
            "params": tmp_path / "gate-params.yaml",
        }
        out["params"].write_text(self.params_text())
        out["comparison"].write_text(self.comparison.model_dump_json(indent=2))
        for name in ("good", "bad", "worse"):
            out[name] = save_plan(getattr(self, name), tmp_path / f"{name}.json")
        return out

    def params_text(self, **publish: object) -> str:
        """A params.yaml whose publish section is these tests' rules (plus `publish`)."""
        import yaml

        section = {"baselines": list(self.baselines), "allow_simulated": True, **publish}
        return yaml.safe_dump({"publish": section}, sort_keys=False)


_WORLD: World | None = None


def world() -> World:
    """One World per test session (about 0.5 s to build)."""
    global _WORLD
    if _WORLD is None:
        _WORLD = World()
    return _WORLD


def sibling(key: str, kind: Kind) -> str:
    """The key of another object (checksum, record) of the plan stored at `key` (dreamshard.store.keys)."""
    parsed = parse_key(key)
    assert parsed is not None, key
    return parsed.of(kind).key


class NoisyOracle:
    """The simulator on a busy machine: every measurement scaled by its own random factor (lognormal, sd 0.3 by
    default), so two identical placements measure 10.4 and 18.7 ms alike."""

    def __init__(self, seed: int = 0, sd: float = 0.3) -> None:
        from dreamshard.profiling import make_oracle

        self.inner = make_oracle("simulator")
        self.rng = random.Random(seed)
        self.sd = sd

    @property
    def info(self) -> Any:
        return self.inner.info

    def corpus_as(self, corpus: Any) -> Any:
        return self.inner.corpus_as(corpus)

    def measure(self, *a: Any, **k: Any) -> Any:
        m = self.inner.measure(*a, **k)
        f = self.rng.lognormvariate(0.0, self.sd)
        per = [DeviceCost.from_list([x * f for x in d.as_list()]) for d in m.costs.per_device]
        return m.model_copy(update={"costs": Costs.from_devices(per, overall_ms=m.costs.overall_ms * f)})

    def close(self) -> None:
        self.inner.close()


def damaged_store(root: Path, outside: Path, link: bool = True) -> dict[str, str]:
    """A local store of five published plans of inventory 'inv' (the last current), then damaged as a hostile
    user did: one plan's bytes rewritten, one record deleted, one garbled, and (with `link`) one plan file moved to
    `outside` with a link to it in its place. Returns the damaged keys by what was done to them."""
    import shutil

    from dreamshard.store import LocalPlanStore, publish

    store = LocalPlanStore(root)
    plans = [make_plan(overall=10.0 - i) for i in range(5)]
    for p in plans:
        publish(store, p, approve(p))
    keys = [f"plans/inv/{FP}/{p.plan_id}.json" for p in plans]
    damaged = {
        "rewritten": keys[0],
        "deleted record": sibling(keys[1], "record"),
        "garbled record": sibling(keys[2], "record"),
    }
    rewritten = root / keys[0]
    rewritten.write_text(rewritten.read_text().replace('"dreamshard"', '"dreamsharp"'))
    (root / damaged["deleted record"]).unlink()
    (root / damaged["garbled record"]).write_text("{garbled")
    if link:
        damaged["link"] = keys[3]
        outside.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(str(root / keys[3]), str(outside))
        (root / keys[3]).symlink_to(outside)
    return damaged


def publish_race(
    root: Path, plan: Plan, decision: GateDecision, threads: int, lag_s: float = 0.1
) -> tuple[Any, list[Any], list[Exception]]:
    """`threads` publishers of the same plan and decision (`publish_or_reject`, as `plans publish` does) into a new
    local store at `root` whose record writes lag `lag_s` behind: the first starts alone, the others as soon as its
    plan object is written, so they find the plan stored and its record not yet there. Returns the store, what each
    publisher was answered, and the errors raised."""
    import threading
    import time

    from dreamshard.store import LocalPlanStore

    plan_written = threading.Event()

    class LaggingRecords(LocalPlanStore):
        def put_bytes(self, key: str, data: bytes) -> None:
            if key.endswith(".json.record"):
                time.sleep(lag_s)
            super().put_bytes(key, data)
            if key.endswith(f"{plan.plan_id}.json"):
                plan_written.set()

    store = LaggingRecords(root)
    refs: list[Any] = []
    errors: list[Exception] = []

    def publisher(first: bool) -> None:
        if not first:
            plan_written.wait(10)
        try:
            refs.append(publish_or_reject(store, plan, decision))
        except Exception as e:  # noqa: BLE001 - returned to the caller, which asserts on it
            errors.append(e)

    workers = [threading.Thread(target=publisher, args=(i == 0,)) for i in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    return store, refs, errors
