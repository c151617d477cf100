"""Per-table constraints honoured by every sharder: each constraint kind on an inventory whose
unconstrained plan breaks it while a constrained plan exists; the validator refuses a plan breaking one in one
line naming the table and the constraint; what-if refuses a move that breaks one."""

from __future__ import annotations

from pathlib import Path

import pytest
from toy_cost import toy_model

from dreamshard.errors import PlanError
from dreamshard.placement.constraint_check import check_constraints_honoured
from dreamshard.placement.validate import check_plan
from dreamshard.sharders import HEURISTICS, get_sharder
from dreamshard.values import Inventory, Plan, Table, TableConstraints, Topology

TOPO = Topology(num_devices=4, memory_per_device_gb=1.0)
LEARNED = ("dreamshard", "dreamshard_lpt", "dreamshard_rl")
#: each constraint kind on the hottest table, and what a plan honouring it does
KINDS: dict[str, dict[str, object]] = {
    "devices": {"devices": (3,)},
    "sharding_types": {"sharding_types": ("column_wise",)},
    "min_shards": {"min_shards": 4},
    "max_shards": {"sharding_types": ("column_wise", "row_wise"), "max_shards": 2},
    "min_partition": {"sharding_types": ("column_wise",), "min_partition": 32},
    "data_parallel": {"sharding_types": ("data_parallel",)},
}


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("model")
    toy_model(d)
    return d


def _inventory(constraints: dict[str, object] | None) -> Inventory:
    hot = Table(
        name="hot",
        num_embeddings=50_000,
        embedding_dim=64,
        pooling_factor=40.0,
        constraints=TableConstraints.model_validate(constraints) if constraints else None,
    )
    rest = [
        Table(name=f"t{i}", num_embeddings=20_000 * (i + 1), embedding_dim=16, pooling_factor=2.0) for i in range(7)
    ]
    return Inventory(name="constrained", tables=(hot, *rest))


def _plan(name: str, inv: Inventory, model_dir: Path) -> Plan:
    kw = {"model_dir": model_dir} if name in LEARNED else {}
    return get_sharder(name, **kw).shard(inv, TOPO)


def _honours(kind: str, plan: Plan) -> bool:
    cols = plan.column_shards.get("hot", ())
    units = len(cols) + len(plan.row_shards.get("hot", ()))
    return {
        "devices": plan.placement.get("hot") == 3,
        "sharding_types": bool(cols),
        "min_shards": units >= 4,
        "max_shards": 1 < units <= 2 or (bool(cols) and len(cols) <= 2),
        "min_partition": bool(cols) and min(sh.width for sh in cols) >= 32,
        "data_parallel": "hot" in plan.data_parallel,
    }[kind]


@pytest.mark.parametrize("name", (*HEURISTICS, *LEARNED))
def test_every_sharder_finds_the_constrained_plan(name: str, model_dir: Path) -> None:
    free = _plan(name, _inventory(None), model_dir)
    for kind, constraints in KINDS.items():
        if _honours(kind, free):
            continue  # this sharder's free plan happens to honour it already: nothing to find
        inv = _inventory(constraints)
        plan = _plan(name, inv, model_dir)
        assert _honours(kind, plan), (name, kind, plan.placement, plan.column_shards, plan.row_shards)
        check_plan(inv, plan)


def test_the_validator_refuses_a_plan_breaking_a_constraint_in_one_line() -> None:
    inv = _inventory({"devices": (3,)})
    with pytest.raises(PlanError) as err:
        check_constraints_honoured(inv, TOPO, {t.name: 0 for t in inv.tables}, {}, {}, ())
    text = str(err.value)
    assert "'hot'" in text and "devices [3]" in text and "device 0" in text and "\n" not in text


def test_contradictory_constraints_are_one_line_errors() -> None:
    cases: tuple[tuple[dict[str, object], str], ...] = (
        ({"devices": (9,)}, "devices [9]"),
        ({"min_shards": 64, "sharding_types": ("column_wise",)}, "min_shards 64"),
        ({"device_group": "cuda"}, "device_group"),
    )
    for constraints, words in cases:
        with pytest.raises(PlanError) as err:
            get_sharder("size_greedy").shard(_inventory(constraints), TOPO)
        assert words in str(err.value) and "'hot'" in str(err.value) and "\n" not in str(err.value)


def test_torchrec_baseline_says_when_its_plan_breaks_a_pin() -> None:
    pytest.importorskip("torchrec")
    inv = _inventory({"devices": (3,)})
    try:
        plan = get_sharder("torchrec").shard(inv, TOPO)
    except PlanError as e:
        assert "cannot express devices" in str(e) and "'hot'" in str(e) and "\n" not in str(e)
    else:
        assert plan.placement.get("hot") == 3  # TorchRec happened to put it there: the plan is checked, and legal
        check_plan(inv, plan)


def test_torchrec_baseline_is_asked_the_constraints_it_can_express() -> None:
    pytest.importorskip("torchrec")
    inv = _inventory({"sharding_types": ("column_wise",), "min_partition": 32})
    plan = get_sharder("torchrec").shard(inv, TOPO)
    assert "hot" in plan.column_shards and min(sh.width for sh in plan.column_shards["hot"]) >= 32
