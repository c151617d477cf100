"""Heuristic sharders and the registry: completeness, memory, balance, determinism, typed infeasibility."""

from __future__ import annotations

import numpy as np
import pytest

import dreamshard.sharders as sharders_pkg
from dreamshard.errors import ConfigError, DreamshardError, InfeasiblePlacementError, PlanError, UnknownSharderError
from dreamshard.placement.validate import check_placement
from dreamshard.sharders import (
    HEURISTICS,
    Sharder,
    TableWiseSharder,
    accepted_options,
    get_sharder,
    learned_options,
    make_plan,
    options_for,
    register_sharder,
    sharder_names,
)
from dreamshard.sharders.heuristics import GREEDY_COSTS, lookup_cost
from dreamshard.sharders.registry import _REGISTERED, ENTRY_POINT_GROUP
from dreamshard.values import GB, ColumnShard, Inventory, Plan, Table, Topology

MB = 1024**2


def _table(name: str, rows: int, dim: int, pf: float, dtype: str = "fp32") -> Table:
    return Table(
        name=name,
        num_embeddings=rows,
        embedding_dim=dim,
        pooling_factor=pf,
        dtype=dtype,  # type: ignore[arg-type]
    )


def _random_inventory(seed: int, n: int) -> Inventory:
    rng = np.random.default_rng(seed)
    tables = [
        _table(
            f"s{seed}.t{i}",
            rows=int(rng.integers(100, 20_000)),
            dim=int(rng.choice([4, 8, 16, 32, 64, 128])),
            pf=float(np.round(rng.lognormal(1.0, 1.0), 3)),
            dtype="fp16" if rng.random() < 0.2 else "fp32",
        )
        for i in range(n)
    ]
    return Inventory(name=f"rand{seed}", tables=tuple(tables))


def _skewed_inventory() -> Inventory:
    """A few very hot tables listed first and next to each other: round-robin stacks them badly."""
    hot = [_table(f"hot{i}", 1000, 128, 50.0) for i in range(4)]
    cold = [_table(f"cold{i}", 1000, 8, 1.0) for i in range(20)]
    # hot0..hot3 land on devices 0,1,2,3 then cold; interleave so that round robin piles hot ones together.
    tables = [hot[0], cold[0], hot[1], cold[1], hot[2], cold[2], hot[3], *cold[3:]]
    return Inventory(name="skewed", tables=tuple(tables))


INVENTORIES = [_random_inventory(1, 12), _random_inventory(2, 30), _skewed_inventory()]
ROOMY = Topology(num_devices=4, memory_per_device_gb=1.0)


def _plan_ok(inv: Inventory, topo: Topology, placement: dict[str, int]) -> None:
    assert sorted(placement) == sorted(inv.table_names)  # every table exactly once (dict keys unique)
    assert all(0 <= d < topo.num_devices for d in placement.values())
    check_placement(inv, placement, topo)


@pytest.mark.parametrize("name", HEURISTICS)
@pytest.mark.parametrize("inv", INVENTORIES, ids=lambda i: i.name)
def test_every_table_placed_once_within_memory(name: str, inv: Inventory) -> None:
    plan = get_sharder(name).shard(inv, ROOMY)
    _plan_ok(inv, ROOMY, plan.placement)
    assert plan.sharder == name
    assert plan.fits_memory()
    assert plan.inventory_fingerprint == inv.fingerprint()


@pytest.mark.parametrize("name", HEURISTICS)
def test_tight_memory_respected_on_every_device(name: str) -> None:
    inv = _random_inventory(7, 40)
    total = sum(t.size_bytes for t in inv.tables)
    largest = max(t.size_bytes for t in inv.tables)
    # 4 devices with ~25% slack over an even split: memory binds for the greedy cost orders.
    cap_gb = max(total / 4 * 1.25, largest * 1.01) / GB
    topo = Topology(num_devices=4, memory_per_device_gb=cap_gb)
    plan = get_sharder(name).shard(inv, topo)
    _plan_ok(inv, topo, plan.placement)
    assert max(plan.memory_per_device_gb) <= cap_gb + 1e-12


@pytest.mark.parametrize("name", HEURISTICS)
@pytest.mark.parametrize("inv", INVENTORIES, ids=lambda i: i.name)
def test_deterministic(name: str, inv: Inventory) -> None:
    a = get_sharder(name).place(inv, ROOMY)
    b = get_sharder(name).place(inv, ROOMY)
    assert a == b


@pytest.mark.parametrize("name", list(GREEDY_COSTS))
@pytest.mark.parametrize("inv", INVENTORIES, ids=lambda i: i.name)
def test_greedy_within_lpt_bound_of_its_proxy(name: str, inv: Inventory) -> None:
    """LPT guarantee: makespan <= 4/3 OPT, and OPT >= max(largest item, mean load)."""
    cost = GREEDY_COSTS[name]
    placement = get_sharder(name).place(inv, ROOMY)
    load = [0.0] * ROOMY.num_devices
    for t in inv.tables:
        load[placement[t.name]] += cost(t)
    costs = [cost(t) for t in inv.tables]
    lower = max(max(costs), sum(costs) / ROOMY.num_devices)
    assert max(load) <= 4 / 3 * lower + 1e-9


def test_lookup_greedy_beats_round_robin_on_skewed_case() -> None:
    inv = _skewed_inventory()

    def makespan(placement: dict[str, int]) -> float:
        load = [0.0] * ROOMY.num_devices
        for t in inv.tables:
            load[placement[t.name]] += lookup_cost(t)
        return max(load)

    greedy = makespan(get_sharder("lookup_greedy").place(inv, ROOMY))
    rr = makespan(get_sharder("round_robin").place(inv, ROOMY))
    assert greedy < rr
    # one hot table per device is optimal here
    hot_devices = {get_sharder("lookup_greedy").place(inv, ROOMY)[f"hot{i}"] for i in range(4)}
    assert hot_devices == {0, 1, 2, 3}


def test_greedy_skips_full_least_loaded_device() -> None:
    # big0 (cheap, large) fills device 0; the least-loaded device by proxy is then 0, but it has no room.
    tables = (
        _table("hot_a", 1000, 8, 100.0),
        _table("hot_b", 1000, 8, 90.0),
        _table("big0", 60 * MB // 16, 4, 0.01),
        _table("mid", 30 * MB // 16, 4, 0.02),
    )
    inv = Inventory(name="mem", tables=tables)
    topo = Topology(num_devices=2, memory_per_device_gb=80 * MB / GB)
    placement = get_sharder("lookup_greedy").place(inv, topo)
    _plan_ok(inv, topo, placement)
    assert placement["big0"] != placement["mid"]


@pytest.mark.parametrize("name", HEURISTICS)
def test_table_larger_than_device_is_named(name: str) -> None:
    tables = (_table("small", 100, 8, 1.0), _table("huge", 10 * MB // 32, 8, 1.0))  # 10 MB
    inv = Inventory(name="big", tables=tables)
    topo = Topology(num_devices=8, memory_per_device_gb=1 * MB / GB)
    with pytest.raises(InfeasiblePlacementError) as ei:
        get_sharder(name).place(inv, topo)
    assert ei.value.table == "huge"
    assert "'huge'" in str(ei.value) and "\n" not in str(ei.value)


@pytest.mark.parametrize("name", HEURISTICS)
def test_packing_failure_names_table_never_last_device(name: str) -> None:
    """Total memory suffices (1.8 GB of 2 GB) but three 0.6 GB tables cannot pack onto two 1 GB devices."""
    rows = int(0.6 * GB) // (64 * 4)
    inv = Inventory(name="pack", tables=tuple(_table(f"b{i}", rows, 64, 1.0) for i in range(3)))
    topo = Topology(num_devices=2, memory_per_device_gb=1.0)
    assert sum(t.size_bytes for t in inv.tables) < 2 * topo.memory_per_device_bytes
    with pytest.raises(InfeasiblePlacementError) as ei:
        get_sharder(name).place(inv, topo)
    assert ei.value.table in inv.table_names
    assert ei.value.largest_free_gb < ei.value.table_gb
    assert f"sharder {name}" in str(ei.value)


def test_unknown_sharder_lists_names() -> None:
    with pytest.raises(UnknownSharderError) as ei:
        get_sharder("nope")
    msg = str(ei.value)
    assert "'nope'" in msg
    for n in (*HEURISTICS, "torchrec", "dreamshard"):
        assert n in msg
    assert isinstance(ei.value, DreamshardError) and ei.value.exit_code == 2


def test_registry_names() -> None:
    names = sharder_names()
    assert set(HEURISTICS) <= set(names) and {"torchrec", "dreamshard"} <= set(names)
    s = get_sharder("size_greedy")
    assert isinstance(s, TableWiseSharder) and s.name == "size_greedy"


def test_unknown_option_is_a_typed_one_line_error_naming_sharder_and_option() -> None:
    with pytest.raises(ConfigError) as ei:
        get_sharder("size_greedy", seed=3)
    assert str(ei.value) == "sharder 'size_greedy' has no option 'seed' (its options: none)"
    with pytest.raises(ConfigError, match=r"sharder 'random' has no option 'model_dir' \(its options: seed\)"):
        get_sharder("random", seed=1, model_dir="unused")
    with pytest.raises(ConfigError, match="sharder 'dreamshard_lpt' has no option 'verify'"):
        get_sharder("dreamshard_lpt", verify=2)
    assert ei.value.exit_code == 2


def test_a_shared_options_dict_gives_each_sharder_its_own() -> None:
    shared = {"seed": 7, "column_wise": "never", "model_dir": None}
    assert options_for("random", shared) == {"seed": 7}
    assert options_for("dim_greedy", shared) == {}
    assert options_for("torchrec", shared) == {"column_wise": "never"}
    assert options_for("dreamshard", shared) == {"seed": 7, "model_dir": None}
    assert accepted_options("dreamshard") >= {"verify", "oracle", "model_dir"}
    assert "verify" not in accepted_options("dreamshard_rl")
    per = learned_options(seed=1, verify=2)
    assert per["dreamshard"] == {"seed": 1, "verify": 2} and per["dreamshard_lpt"] == {"seed": 1}
    with pytest.raises(ConfigError, match="no learned sharder .* has option 'sede'"):
        learned_options(sede=1)


def test_learned_sharders_come_from_entry_points_with_their_family() -> None:
    from importlib.metadata import entry_points

    from dreamshard.search.model_sharder import ModelSharder

    declared = {ep.name: ep.load() for ep in entry_points(group=ENTRY_POINT_GROUP)}
    learned = tuple(n for n, cls in declared.items() if cls.family == "learned")
    assert set(learned) == {"dreamshard", "dreamshard_lpt", "dreamshard_rl"}
    assert all(issubclass(declared[n], ModelSharder) for n in learned)
    assert sharders_pkg.learned_names() == sharders_pkg.LEARNED == learned
    assert sharder_names(kind="learned") == list(learned)
    assert sharder_names(kind="heuristic") == list(HEURISTICS)
    assert sharder_names(kind="torchrec") == ["torchrec", "torchrec_tw_cw"]
    assert sharders_pkg.ALL_SHARDERS == (*HEURISTICS, "torchrec", *learned)
    with pytest.raises(ConfigError, match="unknown sharder family 'lerned'"):
        sharder_names(kind="lerned")


class _TwoShards(Sharder):
    """A sharder that implements only shard(): the first table cut in two column shards, the rest on device 0."""

    name = "two_shards"
    family = "other"
    options = frozenset({"device"})

    def __init__(self, device: int = 1) -> None:
        self.device = device

    def shard(self, inventory: Inventory, topology: Topology) -> Plan:
        first, *rest = inventory.tables
        half = first.embedding_dim // 2
        shards = {
            first.name: (
                ColumnShard(start=0, end=half, device=0),
                ColumnShard(start=half, end=first.embedding_dim, device=self.device),
            )
        }
        return make_plan(inventory, topology, {t.name: 0 for t in rest}, self.name, column_shards=shards)


def test_a_sharder_that_only_implements_shard_works_through_the_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("dreamshard.sharders.registry._REGISTERED", dict(_REGISTERED))
    register_sharder("two_shards", _TwoShards)
    inv = Inventory(name="cw", tables=(_table("a", 1000, 8, 1.0), _table("b", 1000, 4, 1.0)))
    plan = get_sharder("two_shards", device=1).shard(inv, ROOMY)
    assert plan.sharder == "two_shards" and plan.placement == {"b": 0}
    assert [sh.device for sh in plan.column_shards["a"]] == [0, 1]
    assert "two_shards" in sharder_names() and "two_shards" in sharder_names(kind="other")
    assert "two_shards" not in sharders_pkg.ALL_SHARDERS  # contenders: heuristics, torchrec, learned
    with pytest.raises(PlanError, match="two_shards placed table 'a' column-wise"):
        get_sharder("two_shards").place(inv, ROOMY)  # place(): whole tables only
    with pytest.raises(ConfigError, match="sharder 'two_shards' has no option 'seed'"):
        get_sharder("two_shards", seed=0)
    with pytest.raises(TypeError):
        TableWiseSharder()  # type: ignore[abstract]  # place() is what a table-wise sharder must implement


def test_random_sharder_seeded() -> None:
    inv = _random_inventory(3, 30)
    a = get_sharder("random", seed=11).place(inv, ROOMY)
    b = get_sharder("random", seed=11).place(inv, ROOMY)
    c = get_sharder("random", seed=12).place(inv, ROOMY)
    assert a == b
    assert a != c
    assert len(set(a.values())) > 1


def test_round_robin_cycles_in_inventory_order() -> None:
    inv = _random_inventory(4, 10)
    placement = get_sharder("round_robin").place(inv, ROOMY)
    assert [placement[n] for n in inv.table_names] == [i % 4 for i in range(10)]


def test_plan_memory_matches_table_sizes() -> None:
    inv = _random_inventory(5, 16)
    plan = get_sharder("size_greedy").shard(inv, ROOMY)
    expected = [0] * ROOMY.num_devices
    for t in inv.tables:
        expected[plan.placement[t.name]] += t.size_bytes
    assert plan.memory_per_device_gb == pytest.approx([b / GB for b in expected], rel=1e-12)
    assert sum(plan.memory_per_device_gb) == pytest.approx(sum(t.size_gb for t in inv.tables))
    # device_tables is the inverse of placement
    for d, names in enumerate(plan.device_tables()):
        assert all(plan.placement[n] == d for n in names)


def test_plan_to_torchrec_form() -> None:
    inv = _random_inventory(6, 5)
    plan = get_sharder("round_robin").shard(inv, ROOMY)
    tr = plan.to_torchrec()
    assert set(tr) == set(inv.table_names)
    for name, spec in tr.items():
        assert spec == {"sharding_type": "table_wise", "compute_kernel": "fused", "ranks": [plan.placement[name]]}


def test_plan_roundtrips_json() -> None:
    inv = _random_inventory(8, 6)
    plan = get_sharder("dim_greedy").shard(inv, ROOMY)
    again = type(plan).model_validate_json(plan.model_dump_json())
    assert again == plan


def test_make_plan_rejects_bad_placements() -> None:
    inv = _random_inventory(9, 4)
    names = inv.table_names
    with pytest.raises(PlanError, match=names[-1]):
        make_plan(inv, ROOMY, {n: 0 for n in names[:-1]}, "manual")
    with pytest.raises(PlanError, match="ghost"):
        make_plan(inv, ROOMY, {**{n: 0 for n in names}, "ghost": 1}, "manual")
    with pytest.raises(PlanError, match="device 9"):
        make_plan(inv, ROOMY, {**{n: 0 for n in names}, names[0]: 9}, "manual")
    tiny = Topology(num_devices=4, memory_per_device_gb=max(t.size_gb for t in inv.tables) * 1.5)
    with pytest.raises(PlanError, match="memory limit"):
        make_plan(inv, tiny, {n: 0 for n in names}, "manual")


def test_the_candidate_sources_are_the_policy_lpt_torchrec_and_every_builtin_heuristic() -> None:
    """`CandidateSource` is a Literal (the search's sources, typed); it must follow the sharder registry: a new
    built-in heuristic is a candidate source too. A source outside it is refused in one line naming it."""
    from dreamshard.config.learning import SearchConfig
    from dreamshard.search.proposers import PROPOSERS
    from dreamshard.sharders import HEURISTICS
    from dreamshard.values.search_result import CANDIDATE_SOURCES

    assert set(CANDIDATE_SOURCES) == {"policy", "lpt", "torchrec", *HEURISTICS}
    assert set(PROPOSERS) == set(CANDIDATE_SOURCES)  # each source has its proposer
    with pytest.raises(ValueError, match="unknown candidate source 'gready'"):
        SearchConfig(candidates=("policy", "gready"))  # type: ignore[arg-type]
