"""Moves as a cost in a re-plan (dreamshard.search.moves): candidates ranked by predicted step time plus their move
spread over plan.move_horizon_steps, none moving more than plan.max_move_fraction of the current plan's tables; an
added table moves nothing else unless that pays off within the horizon."""

from __future__ import annotations

from pathlib import Path

import pytest

from dreamshard.cli.app import invoke
from dreamshard.documents import load_plan, save_inventory
from dreamshard.placement.diff import plan_diff
from dreamshard.search.moves import MovePolicy
from dreamshard.sharders import get_sharder
from dreamshard.values import Inventory, Table, Topology
from dreamshard.values.search_result import Candidate, SearchResult


def _inventory(n: int, name: str = "moves") -> Inventory:
    tables = [
        Table(
            name=f"t{i}",
            num_embeddings=20_000 * (1 + i % 5),
            embedding_dim=16 * (1 + i % 4),
            pooling_factor=1.0 + i % 7,
        )
        for i in range(n)
    ]
    return Inventory(name=name, tables=tuple(tables))


def _result(*candidates: Candidate) -> SearchResult:
    return SearchResult(best=candidates[0], candidates=list(candidates))


def test_a_move_is_charged_over_the_horizon_and_the_cap_drops_candidates() -> None:
    inv = _inventory(4)
    topo = Topology(num_devices=2, memory_per_device_gb=16.0)
    incumbent = get_sharder("round_robin").shard(inv, topo)
    here = dict(incumbent.units())
    swapped = {t: 1 - d for t, d in here.items()}  # every table on the other device
    stay = Candidate("current", here, predicted_ms=10.0)
    move = Candidate("policy+search", swapped, predicted_ms=9.9)
    policy = MovePolicy(horizon_steps=0, max_fraction=1.0, ms_per_mb=1.0)
    assert policy.moved(here, swapped) == ["t0", "t1", "t2", "t3"] and policy.moved(here, here) == []
    assert policy.ranked(_result(stay, move), incumbent, inv).best is move  # moves are free: the faster one

    state_ms = policy.move_ms(["t0", "t1", "t2", "t3"], inv, incumbent.topology.optimizer)
    assert state_ms > 0
    short = MovePolicy(horizon_steps=int(state_ms / 0.2), max_fraction=1.0, ms_per_mb=1.0)  # ~0.2 ms a step > 0.1
    ranked = short.ranked(_result(move, stay), incumbent, inv)
    assert ranked.best is stay and [c.source for c in ranked.candidates] == ["current", "policy+search"]
    long = MovePolicy(horizon_steps=int(state_ms / 0.05), max_fraction=1.0, ms_per_mb=1.0)  # ~0.05 ms < 0.1
    assert long.ranked(_result(stay, move), incumbent, inv).best is move  # the move pays off within the horizon

    capped = MovePolicy(horizon_steps=0, max_fraction=0.5, ms_per_mb=1.0).ranked(_result(move, stay), incumbent, inv)
    assert [c.source for c in capped.candidates] == ["current"]
    assert capped.failed["policy+search"] == "moves 4 of 4 tables > plan.max_move_fraction 0.5"
    # every candidate over the cap: the one that moves the fewest, not nothing
    half = {**here, "t0": 1 - here["t0"]}
    fewest = MovePolicy(0, 0.0, 1.0).ranked(_result(move, Candidate("lpt", half, 9.95)), incumbent, inv)
    assert fewest.best.source == "lpt"


@pytest.fixture(scope="module")
def replanned(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    """A 12-table plan by the packaged model, then the inventory with one table added, re-planned from it with
    free moves and with none allowed (`dreamshard plan --incumbent`)."""
    tmp = tmp_path_factory.mktemp("moves")
    topo = ["--devices", "4", "--memory-gb", "16"]
    before, after = _inventory(12), _inventory(13)
    save_inventory(before, tmp / "before.yaml")
    save_inventory(after, tmp / "after.yaml")
    code, _, err = invoke(["plan", "-i", str(tmp / "before.yaml"), *topo, "-o", str(tmp / "old.json")])
    assert code == 0, err
    out: dict[str, object] = {"old": load_plan(tmp / "old.json"), "inv": after}
    labelled = (
        ("free", ["--params", str(_params(tmp, 0))]),
        ("none", ["--max-move-fraction", "0"]),
        ("short", ["--params", str(_params(tmp, 1))]),  # a move paid off within 1 step: none pays
    )
    for label, extra in labelled:
        argv = ["plan", "-i", str(tmp / "after.yaml"), *topo, "--incumbent", str(tmp / "old.json"), *extra]
        code, _, err = invoke([*argv, "-o", str(tmp / f"{label}.json")])
        assert code == 0, err
        out[label] = load_plan(tmp / f"{label}.json")
    return out


def _params(tmp: Path, horizon: int) -> Path:
    path = tmp / f"params-{horizon}.yaml"
    path.write_text(f"plan:\n  move_horizon_steps: {horizon}\n")
    return path


def test_an_added_table_moves_nothing_else_when_no_move_is_allowed(replanned: dict[str, object]) -> None:
    old, inv = replanned["old"], replanned["inv"]
    none = plan_diff(old, replanned["none"], inv)  # type: ignore[arg-type]
    assert none.moved == () and none.added == ("t12",) and none.kept == 12


def test_moves_charged_over_a_short_horizon_move_nothing_even_after_the_robust_rerank(
    replanned: dict[str, object],
) -> None:
    # the tables declare no histograms: the candidates are re-ranked by regret over assumed distributions, which
    # must weigh the moves too (it used to undo the move ranking: 27 of 40 tables moved in bench/replan_churn.py)
    short = plan_diff(replanned["old"], replanned["short"], replanned["inv"])  # type: ignore[arg-type]
    assert short.moved == ()


def test_with_free_moves_the_replan_is_predicted_no_slower(replanned: dict[str, object]) -> None:
    free, none = replanned["free"], replanned["none"]
    # the premise of the cap: free to move, this re-plan moves existing tables (5 of 12 with the packaged model)
    assert plan_diff(replanned["old"], free, replanned["inv"]).moved  # type: ignore[arg-type]
    assert free.predicted is not None and none.predicted is not None  # type: ignore[attr-defined]
    assert free.predicted.overall_ms <= none.predicted.overall_ms + 1e-6  # type: ignore[attr-defined]


def test_a_bad_fraction_is_one_line(tmp_path: Path) -> None:
    save_inventory(_inventory(3), tmp_path / "inv.yaml")
    code, _, err = invoke(["plan", "-i", str(tmp_path / "inv.yaml"), "--max-move-fraction", "1.5"])
    assert code != 0 and "max-move-fraction" in err and "Traceback" not in err
