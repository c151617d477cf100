"""The plan's report lists, per table, the constraints carried but not planned on (their kind is "carried" in
dreamshard.values.constraints, and a cache's fields besides its load factor): `plan`'s output and `--json`, the stats
report (its JSON and markdown: the published plan's artifact) and the comparison (its JSON and markdown: the evaluate
stage's report)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dreamshard.cli.app import main
from dreamshard.documents import load_plan, save_inventory
from dreamshard.evaluation import comparison_markdown, load_comparison
from dreamshard.explain.report import stats_markdown
from dreamshard.integrations.torchrec_carried import carried_lines, carried_report, not_planned_on
from dreamshard.usecases.explain import stats_of
from dreamshard.values import Inventory, Table, TableConstraints

#: `ids`: carried, one in the export (output_dtype), one kept in the inventory only (num_poolings); `pinned`: only
#: constraints planned on; `plain`: none. (cache_params belong to a caching table only: `CACHED`.)
IDS = {
    "output_dtype": "FP16",
    "num_poolings": [1.0],
    "sharding_types": ["table_wise"],
}
LINE = (
    "table 'ids': carried, not planned on: num_poolings, output_dtype "
    "(num_poolings: in the inventory only, TorchRec's ParameterSharding has no field for it)"
)
#: A caching table: its cache's fields besides the load factor are carried, not planned on.
CACHED = {"compute_kernels": ["fused_uvm_caching"], "cache_params": {"load_factor": 0.5, "algorithm": "lru"}}


def _inventory() -> Inventory:
    def table(name: str, constraints: dict[str, object] | None) -> Table:
        c = TableConstraints.model_validate(constraints) if constraints else None
        return Table(name=name, num_embeddings=4_000, embedding_dim=16, pooling_factor=2.0, constraints=c)

    return Inventory(
        name="carried",
        tables=(
            table("ids", IDS),
            table("pinned", {"devices": [1], "pooling_factors": [2.0]}),
            table("plain", None),
        ),
    )


def _run(argv: list[str]) -> int:
    with pytest.raises(SystemExit) as e:
        main(argv)
    return int(e.value.code or 0)


def test_the_carried_constraints_are_named_per_table() -> None:
    inv = _inventory()
    by = inv.by_name()
    assert not_planned_on(by["pinned"]) == [] and not_planned_on(by["plain"]) == []
    assert carried_report(inv) == {"ids": ["num_poolings", "output_dtype"]}
    assert carried_lines(carried_report(inv)) == [LINE]
    cached = Table(
        name="c", num_embeddings=4, embedding_dim=4, pooling_factor=1.0, constraints=TableConstraints(**CACHED)
    )
    assert not_planned_on(cached) == ["cache_params.algorithm"]
    assert carried_lines({"x": ["output_dtype"]}) == ["table 'x': carried, not planned on: output_dtype"]


def test_plan_prints_and_writes_the_carried_constraints(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    inv = save_inventory(_inventory(), tmp_path / "inv.yaml")
    argv = ["plan", "-i", str(inv), "-d", "2", "-m", "1", "-s", "size_greedy", "-o", str(tmp_path / "p.json")]
    assert _run(argv) == 0
    out = capsys.readouterr().out
    assert " ".join(LINE.split()) in " ".join(out.split())
    assert "'pinned'" not in out and "'plain'" not in out
    assert _run([*argv, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["carried"] == {"ids": ["num_poolings", "output_dtype"]}
    assert _run([*argv, "--json", "--stats"]) == 0
    assert json.loads(capsys.readouterr().out)["stats"]["carried"] == data["carried"]


def test_the_stats_report_and_the_comparison_carry_them(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """What a DVC stage or a flow stores: the stats report's markdown (the published plan's artifact), the
    comparison's JSON and markdown (the evaluate stage's data/comparison.json and reports/comparison.md)."""
    inv = _inventory()
    path = save_inventory(inv, tmp_path / "inv.yaml")
    argv = ["plan", "-i", str(path), "-d", "2", "-m", "1", "-s", "size_greedy", "-o", str(tmp_path / "p.json")]
    assert _run(argv) == 0
    stats = stats_of(inv, load_plan(tmp_path / "p.json"), None)
    assert f"- {LINE}" in stats_markdown(stats)
    out = tmp_path / "c.json"
    argv = ["compare", "-i", str(path), "-d", "2", "-m", "1", "--sharders", "size_greedy,round_robin"]
    assert _run([*argv, "--backend", "simulator", "--rounds", "1", "--out", str(out)]) == 0
    cmp = load_comparison(out)
    assert cmp.carried == {"ids": ["num_poolings", "output_dtype"]}
    assert f"- {LINE}" in comparison_markdown(cmp)
