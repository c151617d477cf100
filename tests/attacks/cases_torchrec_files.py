"""Attacks on TorchRec plan files, read by `torchrec import` and by `load_sharding_plan` alike: row ranges that do
not match the ranks, uneven blocks, ranks past the world size, data-parallel on a subset of ranks,
local_world_size not dividing the world size, unit names as tables, 100k ranges; column ranges out of column
order (both readers put the same columns on the same ranks: `TableSharding.column_shards` is the one reader),
overlapping or gapped."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from cases_plan_files import TYPES_INV, types_plan
from harness import MAX_LINE, Case, Holds, Refused, Result, Runs, Table, edited, written

from dreamshard.documents import save_inventory
from dreamshard.values import Inventory
from dreamshard.values import Table as EmbeddingTable

#: The inventory of the column-range files: one table of 16 columns.
ONE = Inventory(
    name="one", tables=(EmbeddingTable(name="t", num_embeddings=300, embedding_dim=16, pooling_factor=1.0),)
)
HUGE = 100_000


def world(d: Path) -> None:
    from dreamshard.integrations.torchrec_file import torchrec_document

    save_inventory(TYPES_INV, d / "inv.yaml")
    doc = torchrec_document(types_plan(), TYPES_INV)
    (d / "torchrec.json").write_text(doc.model_dump_json(exclude_none=True))
    save_inventory(ONE, d / "one.yaml")


def _tr_rows(x: dict[str, Any], ranks: list[Any], ranges: list[list[int]], kind: str | None = None) -> None:
    b = x["tables"]["b"]
    b["ranks"], b["row_ranges"] = ranks, ranges
    if kind:
        b["sharding_type"] = kind


def _tr_four(x: dict[str, Any], local: int | None = None) -> None:
    x["world_size"] = 4
    x["tables"]["c"]["ranks"] = [0, 1, 2, 3]
    if local:
        x["local_world_size"] = local


#: The TorchRec file of the typed plan edited: refused (one line holding the needle) by both readers.
ATTACKS: dict[str, tuple[Callable[[dict[str, Any]], object], str]] = {
    "row_ranges fewer than ranks": (lambda x: _tr_rows(x, [0, 1], [[0, 500]]), "one [start, end] row range per rank"),
    "uneven row blocks": (lambda x: _tr_rows(x, [0, 1], [[0, 100], [100, 500]]), "ceil(rows / shards)"),
    "overlapping row ranges": (lambda x: _tr_rows(x, [0, 1], [[0, 300], [250, 500]]), "ceil(rows / shards)"),
    "row ranges past the table": (
        lambda x: _tr_rows(x, [0, 1], [[0, 250], [250, 600]]),
        "row ranges end at 600, the table has 500 rows",
    ),
    "row ranks reversed": (lambda x: _tr_rows(x, [1, 0], [[0, 250], [250, 500]]), "on devices [1, 0]"),
    "a row rank past world_size": (
        lambda x: _tr_rows(x, [0, 2], [[0, 250], [250, 500]]),
        "table 'b' is on rank 2, but world_size is 2",
    ),
    "a row rank duplicated": (lambda x: _tr_rows(x, [0, 0], [[0, 250], [250, 500]]), "on devices [0, 0]"),
    "a row rank -1": (lambda x: _tr_rows(x, [0, -1], [[0, 250], [250, 500]]), "tables.b.ranks[1]"),
    "a row rank true": (lambda x: _tr_rows(x, [0, True], [[0, 250], [250, 500]]), "tables.b.ranks[1]"),
    "a row rank 1.0": (lambda x: _tr_rows(x, [0, 1.0], [[0, 250], [250, 500]]), "tables.b.ranks[1]"),
    "row_wise on 2 of 4 ranks": (
        lambda x: (_tr_four(x), _tr_rows(x, [0, 1], [[0, 250], [250, 500]])),
        "row-wise sharding needs devices 0..3 in order",
    ),
    "table_row_wise on a one-host file": (
        lambda x: _tr_rows(x, [0, 1], [[0, 250], [250, 500]], "table_row_wise"),
        "table 'b' is table_row_wise in the plan, but its row ranges",
    ),
    "table_row_wise across two hosts": (
        lambda x: (_tr_four(x, 2), _tr_rows(x, [1, 2], [[0, 250], [250, 500]], "table_row_wise")),
        "or the 2 devices of one host in order",
    ),
    "row_wise on the ranks of one host": (
        lambda x: (_tr_four(x, 2), _tr_rows(x, [2, 3], [[0, 250], [250, 500]], "row_wise")),
        "table 'b' is row_wise in the plan, but its row ranges on ranks [2, 3] are table_row_wise",
    ),
    "data_parallel on a subset of ranks": (
        lambda x: x["tables"]["c"].update(ranks=[0]),
        "data_parallel table 'c' is on ranks [0]",
    ),
    "data_parallel on a duplicated rank": (
        lambda x: x["tables"]["c"].update(ranks=[0, 0]),
        "data_parallel table 'c' is on ranks [0, 0]",
    ),
    "data_parallel with a fused kernel": (
        lambda x: x["tables"]["c"].update(compute_kernel="fused"),
        "uses compute kernel 'dense', not 'fused'",
    ),
    "data_parallel with row_ranges": (
        lambda x: x["tables"]["c"].update(row_ranges=[[0, 20], [20, 40]]),
        "a data_parallel table has no row_ranges",
    ),
    f"{HUGE} data_parallel ranks": (
        lambda x: x["tables"]["c"].update(ranks=[0] * HUGE),
        f"({HUGE - 8} more, {HUGE} in all)",
    ),
    f"{HUGE} row ranges": (
        lambda x: (_tr_rows(x, [0] * HUGE, [[i, i + 1] for i in range(HUGE)]), x["tables"]["b"].pop("num_embeddings")),
        f"({HUGE - 8} more, {HUGE} in all)",
    ),
    "local_world_size 3 of world_size 2": (
        lambda x: x.update(local_world_size=3),
        "world_size 2 is not a whole number of hosts of local_world_size 3",
    ),
    "local_world_size 0": (lambda x: x.update(local_world_size=0), "local_world_size"),
    "local_world_size true": (lambda x: x.update(local_world_size=True), "local_world_size"),
    "local_world_size '2'": (lambda x: x.update(local_world_size="2"), "local_world_size"),
    "a unit name b@r0:250 as a table": (
        lambda x: x["tables"].update({"b@r0:250": {"sharding_type": "table_wise", "ranks": [0]}}),
        "'b@r0:250'",
    ),
    "a unit name c@dp0 as a table": (
        lambda x: x["tables"].update({"c@dp0": {"sharding_type": "table_wise", "ranks": [0]}}),
        "'c@dp0'",
    ),
}

#: Column ranges (range i on rank i) out of column order, and the (start, end, rank) shards both readers see.
OUT_OF_ORDER: dict[str, tuple[list[list[int]], list[tuple[int, int, int]]]] = {
    "equal widths (TorchRec's column_wise(ranks=...))": ([[8, 16], [0, 8]], [(0, 8, 1), (8, 16, 0)]),
    "unequal widths (ShardMetadata)": ([[4, 16], [0, 4]], [(0, 4, 1), (4, 16, 0)]),
    "in column order": ([[0, 8], [8, 16]], [(0, 8, 0), (8, 16, 1)]),
}
#: Column ranges that do not tile the table, and where the line says the gap or overlap is.
NOT_TILING: dict[str, tuple[list[list[int]], str]] = {
    "overlapping, out of order": ([[8, 16], [0, 12]], "gap or overlap at column 12"),
    "gapped, out of order": ([[12, 16], [0, 8]], "gap or overlap at column 8"),
    "the same range twice": ([[0, 8], [0, 8]], "gap or overlap at column 8"),
}


def _column_file(ranges: list[list[int]]) -> str:
    tables = {"t": {"sharding_type": "column_wise", "ranks": [0, 1], "column_ranges": ranges}}
    return json.dumps({"world_size": 2, "tables": tables})


def _loaded(path: Path, inventory: Inventory) -> list[tuple[int, int, int]]:
    """The (start column, end column, rank) shards `load_sharding_plan` gives the file's table 't'."""
    from dreamshard.integrations.torchrec import build_ebc, load_sharding_plan

    ps = load_sharding_plan(path, build_ebc(inventory)).plan[""]["t"]
    shards = [
        (int(s.shard_offsets[1]), int(s.shard_offsets[1] + s.shard_sizes[1]), s.placement.rank())
        for s in ps.sharding_spec.shards
    ]
    assert list(ps.ranks) == [r for *_, r in shards]  # ParameterSharding.ranks in the shards' order
    return sorted(shards)


def _load_refuses(edit: Callable[[dict[str, Any]], object], needle: str) -> Callable[[Path], None]:
    def check(work: Path) -> None:
        pytest.importorskip("torchrec")
        from dreamshard.errors import PlanError
        from dreamshard.integrations.torchrec import build_ebc, load_sharding_plan

        edited("torchrec.json", "bad.json", edit)(work)
        with pytest.raises(PlanError) as e:
            load_sharding_plan(work / "bad.json", build_ebc(TYPES_INV))
        msg = str(e.value)
        assert needle in msg and "\n" not in msg and len(msg) <= MAX_LINE, msg[:300]

    return check


def _read_alike(expected: list[tuple[int, int, int]]) -> Callable[[Path, Result], None]:
    def then(work: Path, r: Result) -> None:
        from dreamshard.documents import load_plan
        from dreamshard.integrations.torchrec_file import read_torchrec_plan

        imported = [(sh.start, sh.end, sh.device) for sh in load_plan(work / "imported.json").column_shards["t"]]
        assert imported == expected
        assert _loaded(work / "tr.json", ONE) == expected  # the same columns on the same rank, whichever reader
        doc = read_torchrec_plan(work / "tr.json")
        assert [(sh.start, sh.end, sh.device) for sh in doc.tables["t"].column_shards()] == expected

    return then


def _load_refuses_ranges(ranges: list[list[int]], where: str) -> Callable[[Path], None]:
    def check(work: Path) -> None:
        from dreamshard.errors import PlanError

        written("tr.json", _column_file(ranges))(work)
        with pytest.raises(PlanError, match=where):
            _loaded(work / "tr.json", ONE)

    return check


def _cases() -> list[Case]:
    cases: list[Case] = []
    for what, (edit, needle) in ATTACKS.items():
        cases += [
            Refused(
                f"import: {what}",
                "torchrec import bad.json -i inv.yaml -m 1 -o imported.json",
                needle,
                setup=edited("torchrec.json", "bad.json", edit),
            ),
            Holds(f"load_sharding_plan: {what}", _load_refuses(edit, needle)),
        ]
    import_one = "torchrec import tr.json -i one.yaml -m 1 -o imported.json"
    cases += [
        Runs(
            f"column ranges {what}: import and load_sharding_plan read one placement",
            import_one,
            _read_alike(expected),
            setup=written("tr.json", _column_file(ranges)),
        )
        for what, (ranges, expected) in OUT_OF_ORDER.items()
    ]
    for what, (ranges, where) in NOT_TILING.items():
        cases += [
            Refused(
                f"import: column ranges {what}",
                import_one,
                ("table 't'", where),
                setup=written("tr.json", _column_file(ranges)),
            ),
            Holds(f"load_sharding_plan: column ranges {what}", _load_refuses_ranges(ranges, where)),
        ]
    return cases


TABLE = Table("torchrec files", _cases(), world)
