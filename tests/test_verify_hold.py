"""Verify's duel (dreamshard.measured.verify, `hold`): in a re-plan the current plan's candidate is the default,
and a challenger that won every round replaces it only after enough straight paired wins that chance alone would
explain them less often than plan.verify_confidence allows. Equal plans on a noisy machine keep the current plan;
a plan that is really faster still replaces it."""

from __future__ import annotations

import pytest
from store_helpers import WORLD_TOPOLOGY as TOPOLOGY
from store_helpers import NoisyOracle, world_inventory

from dreamshard.measured.contenders import Contender, Contenders
from dreamshard.measured.verify import rounds_to_replace, verify_candidates
from dreamshard.sharders import get_sharder
from dreamshard.values import Plan

INVENTORY = world_inventory()


def _field(plans: list[Plan], hold: bool) -> Contenders:
    """The plans as the race's learned contenders (c0 the default: the current plan's candidate with `hold`)."""
    items = tuple(Contender(f"c{i}", p, 1.0) for i, p in enumerate(plans))
    return Contenders(items, {}, hold=hold, search_only=0)


def test_rounds_to_replace_bounds_the_chance_of_a_lucky_run() -> None:
    for k in (1, 2, 4, 5, 8):
        n = rounds_to_replace(k, 0.95)
        assert k * 2.0**-n <= 0.05 < k * 2.0 ** -(n - 1)  # the fewest rounds that bound it
    assert rounds_to_replace(4, 0.95) == 7 and rounds_to_replace(1, 0.5) == 1


def test_equal_plans_on_a_noisy_machine_keep_the_current_plan(monkeypatch: pytest.MonkeyPatch) -> None:
    """Five copies of one plan (pure noise between them, sd 10% per measurement): one of the four challengers wins
    all 3 rounds about 41% of the time, but neither the race's keep rule (the paired interval) nor the duel keeps it
    more often than the confidence allows. The duel's
    chance arithmetic is checked without the gain margin (which only makes a lucky run rarer)."""
    import dreamshard.measured.contenders as contenders

    monkeypatch.setattr(contenders, "MEASURED_GAIN_MARGIN", 0.0)
    plan = get_sharder("size_greedy").shard(INVENTORY, TOPOLOGY)
    plans = [plan.model_copy(update={"plan_id": f"{plan.plan_id}-{i}"}) for i in range(5)]
    trials = 40
    replaced = {False: 0, True: 0}
    for hold in (False, True):
        for t in range(trials):
            kept, _ = verify_candidates(
                INVENTORY, _field(plans, hold), NoisyOracle(seed=t, sd=0.1), rounds=3, seed=t, confidence=0.95
            )
            assert kept.verification is not None
            replaced[hold] += kept.verification.chosen != "c0"
    # the race's own rule: a contender ahead of the default must be so beyond the paired interval (one that won
    # every round of 3 was kept 41% of the time before it)
    assert replaced[False] <= 6, replaced
    assert replaced[True] <= 4, replaced  # the duel: about 2 of 40 expected


def test_a_really_faster_plan_replaces_the_current_one_after_the_duel() -> None:
    """On a quiet machine the better placement wins every round: it is kept, after exactly the rounds the duel
    asks of one challenger; the current plan's rounds grow with it (paired)."""
    slow = get_sharder("round_robin").shard(INVENTORY, TOPOLOGY)
    fast = get_sharder("lookup_greedy").shard(INVENTORY, TOPOLOGY)
    oracle = NoisyOracle(seed=3, sd=0.002)
    kept, _ = verify_candidates(INVENTORY, _field([slow, fast], hold=True), oracle, rounds=3, confidence=0.95)
    v = kept.verification
    need = rounds_to_replace(1, 0.95)
    assert v is not None and v.chosen == "c1" and kept.placement == fast.placement
    assert [c.rounds for c in v.candidates] == [need, need]
    kept3, _ = verify_candidates(INVENTORY, _field([slow, fast], hold=False), oracle, rounds=3)
    v3 = kept3.verification
    assert v3 is not None and v3.chosen == "c1" and [c.rounds for c in v3.candidates] == [3, 3]  # no incumbent: no duel
