"""The gate verifies, never trusts: every forged plan or comparison is refused with one line.

A forged *input* is a PlanError (exit 2, nothing stored); a verified plan that is too slow is a rejection.
"""

from __future__ import annotations

import pytest
from store_helpers import gate_file_plan, gate_measured, world

from dreamshard.errors import ConfigError, PlanError, StoreError
from dreamshard.evaluation import compare_sharders
from dreamshard.profiling import make_oracle
from dreamshard.values import Costs, DeviceCost, Inventory, Plan


def _gate(plan: Plan, **kw: object):  # type: ignore[no-untyped-def]
    w = world()
    rules = w.rules.model_copy(update={"min_improvement": kw.pop("margin", 0.0)})
    return gate_file_plan(
        plan,
        kw.pop("inventory", w.inventory),
        kw.pop("comparison", w.comparison),  # type: ignore[arg-type]
        rules,
        **kw,
    )  # type: ignore[arg-type]


def test_a_genuine_plan_is_judged_on_the_comparisons_figures() -> None:
    w = world()
    judged, d = _gate(w.good, margin=0.05)
    entry = next(r for r in w.comparison.results if r.plan.plan_id == w.good.plan_id)
    assert d.approved and d.plan_cost_ms == entry.overall_ms and d.best_baseline == "dim_greedy"
    assert d.basis == "simulated" and "SIMULATED" in d.evidence and "5 interleaved round(s)" in d.evidence
    assert d.inventory_fingerprint == w.inventory.fingerprint()
    assert judged.measured == entry.plan.measured and judged.measured_by == w.comparison.backend
    _, d = _gate(w.bad, margin=0.05)
    assert not d.approved and "5.0%" in d.reason
    _, d = _gate(w.worse)
    assert not d.approved


def _forge(plan: Plan, **update: object) -> Plan:
    """What a hand-edited plan file loads as: the model re-validated from its JSON."""
    return Plan.model_validate({**plan.model_dump(), **update})


def test_empty_placement_is_refused() -> None:
    forged = _forge(world().good, placement={}, memory_per_device_gb=(0.0, 0.0))
    with pytest.raises(PlanError, match="has no device in the plan"):
        _gate(forged)


def test_missing_table_is_refused() -> None:
    good = world().good
    drop = next(iter(good.placement))
    forged = _forge(good, placement={k: v for k, v in good.placement.items() if k != drop})
    with pytest.raises(PlanError, match=f"table '{drop}' has no device"):
        _gate(forged)


def test_extra_table_is_refused() -> None:
    good = world().good
    forged = _forge(good, placement={**good.placement, "ghost": 0})
    with pytest.raises(PlanError, match="plan places table 'ghost', which is not in inventory 'inv'"):
        _gate(forged)


def test_arbitrary_fingerprint_is_refused() -> None:
    forged = _forge(world().good, inventory_fingerprint="ab" * 32)
    with pytest.raises(PlanError, match="different fingerprint"):
        _gate(forged)


def test_forged_memory_figures_are_refused() -> None:
    w = world()
    forged = _forge(w.good, memory_per_device_gb=(0.0001, 0.0001))
    with pytest.raises(PlanError, match="states 0.0001 GB on device 0, but its tables need"):
        _gate(forged)
    # Understated figures hiding an overflow: memory is recomputed, so the overflow is found.
    crowded = {t: 0 for t in w.good.placement}
    tight = w.inventory.model_copy()
    small = w.topology.model_copy(update={"memory_per_device_gb": sum(t.size_gb for t in tight.tables) * 0.6})
    forged = _forge(w.good, placement=crowded, topology=small.model_dump())
    with pytest.raises(PlanError, match="device 0 holds .* memory limit"):
        _gate(forged)


def test_forged_measured_costs_are_ignored() -> None:
    w = world()
    fast = Costs.from_devices([DeviceCost.from_list([0.001, 0, 0, 0.001])] * 2)
    forged = _forge(w.worse, measured=fast.model_dump())  # 0.002 ms "measured"
    judged, d = _gate(forged)
    entry = next(r for r in w.comparison.results if r.plan.plan_id == w.worse.plan_id)
    assert not d.approved and d.plan_cost_ms == entry.overall_ms and judged.measured == entry.plan.measured


def test_forged_predicted_costs_are_ignored() -> None:
    w = world()
    fast = Costs.from_devices([DeviceCost.from_list([0.001, 0, 0, 0.001])] * 2)
    _, d = _gate(_forge(w.worse, predicted=fast.model_dump()))
    assert not d.approved and d.basis == "simulated"


def test_comparison_of_another_inventory_is_refused() -> None:
    w = world()
    other = Inventory(name="inv", tables=w.inventory.tables[:-1])
    cmp = compare_sharders(other, w.topology, ["round_robin"], make_oracle("simulator"), rounds=1)
    with pytest.raises(PlanError, match="comparison was made for another inventory"):
        _gate(w.good, comparison=cmp)


def test_comparison_on_another_device_count_is_refused() -> None:
    """The issue's case: a comparison for another topology approved a plan its own comparison rejects."""
    w = world()
    four = w.topology.model_copy(update={"num_devices": 4})
    cmp = compare_sharders(w.inventory, four, w.baselines, make_oracle("simulator"), rounds=1)
    with pytest.raises(PlanError, match="measured on 4 x cpu .* the plan is for 2 x cpu"):
        _gate(w.worse, comparison=cmp)


def test_comparison_without_the_plan_is_refused() -> None:
    w = world()
    cmp = w.comparison.model_copy(
        update={"results": [r for r in w.comparison.results if r.plan.plan_id != w.good.plan_id]}
    )
    with pytest.raises(PlanError, match="is not among the contenders .* --measure"):
        _gate(w.good, comparison=cmp)


def test_comparison_entry_with_another_placement_is_refused() -> None:
    w = world()
    moved = dict(w.good.placement)
    t = next(iter(moved))
    moved[t] = 1 - moved[t]
    other = w.good.model_copy(update={"placement": moved})
    with pytest.raises(PlanError):  # stated memory no longer matches, or the placement differs from the entry
        _gate(_forge(other))


def test_edited_comparison_figures_are_refused() -> None:
    w = world()
    results = [
        r.model_copy(update={"overall_ms": r.overall_ms * 10}) if r.sharder == "dim_greedy" else r
        for r in w.comparison.results
    ]
    cmp = w.comparison.model_copy(update={"results": results})
    with pytest.raises(PlanError, match="contender 'dim_greedy': overall .* is not the median of its samples"):
        _gate(w.bad, comparison=cmp)
    results = [
        r.model_copy(update={"overall_ms": r.overall_ms * 10, "samples_ms": [v * 10 for v in r.samples_ms]})
        if r.sharder == "dim_greedy"
        else r
        for r in w.comparison.results
    ]
    with pytest.raises(PlanError, match="measured costs do not match"):
        _gate(w.bad, comparison=w.comparison.model_copy(update={"results": results}))


def test_backend_must_match_when_asked() -> None:
    with pytest.raises(PlanError, match="backend 'simulator', not 'cpu'"):
        _gate(world().good, backend="cpu")


def test_plan_names_must_be_storage_safe() -> None:
    with pytest.raises(StoreError, match="plan id '../x'"):
        _gate(_forge(world().good, plan_id="../x"))


def test_measure_and_gate_measures_itself() -> None:
    w = world()
    fast = Costs.from_devices([DeviceCost.from_list([0.001, 0, 0, 0.001])] * 2)
    forged = _forge(w.worse, measured=fast.model_dump())
    judged, d, cmp = gate_measured(forged, w.inventory, make_oracle("simulator"), w.rules, rounds=1)
    assert not d.approved and d.evidence.startswith("measured by the gate")
    assert {r.sharder for r in cmp.results} == {*w.baselines, "dreamshard"}
    # the simulator's exact figures decide at the sequential rule's early look: measuring stopped there
    assert cmp.rounds == w.rules.early_round_list[0] == d.rounds < w.rules.min_rounds and d.stopped_early
    assert judged.measured is not None and judged.measured.overall_ms > 0.5
    no_early = w.rules.model_copy(update={"early_rounds": 0})
    _, d, cmp = gate_measured(forged, w.inventory, make_oracle("simulator"), no_early, rounds=1)
    assert cmp.rounds == w.rules.min_rounds == d.rounds and not d.stopped_early  # never fewer than min_rounds
    with pytest.raises(PlanError, match="has no device"):
        gate_measured(
            _forge(w.good, placement={}, memory_per_device_gb=(0.0, 0.0)),
            w.inventory,
            make_oracle("simulator"),
            w.rules,
        )
    with pytest.raises(ConfigError, match="publish.allow_simulated"):
        gate_measured(
            w.good, w.inventory, make_oracle("simulator"), w.rules.model_copy(update={"allow_simulated": False})
        )


def test_column_shard_plans_are_verified_by_the_same_rule() -> None:
    from dreamshard.placement.expand import even_bounds, expand
    from dreamshard.placement.validate import device_memory_gb
    from dreamshard.values import ColumnShard

    w = world()
    table = w.inventory.tables[0]
    placement = {k: v for k, v in w.good.placement.items() if k != table.name}
    shards = {
        table.name: tuple(
            ColumnShard(start=a, end=b, device=i % 2) for i, (a, b) in enumerate(even_bounds(table.embedding_dim, 2))
        )
    }
    units, up = expand(w.inventory, placement, shards)
    mem = tuple(device_memory_gb(units, up, 2))
    split = _forge(
        w.good,
        placement=placement,
        column_shards={k: [s.model_dump() for s in v] for k, v in shards.items()},
        memory_per_device_gb=mem,
    )
    cmp = compare_sharders(
        w.inventory, w.topology, w.baselines, make_oracle("simulator"), rounds=5, extra_plans=[split]
    )
    judged, d = _gate(split, comparison=cmp)
    assert judged.column_shards == split.column_shards and d.plan_cost_ms is not None
    gap = {table.name: (ColumnShard(start=0, end=4, device=0),)}
    with pytest.raises(PlanError, match=f"column shards of table '{table.name}' cover 4 of its"):
        _gate(_forge(split, column_shards={k: [s.model_dump() for s in v] for k, v in gap.items()}), comparison=cmp)
