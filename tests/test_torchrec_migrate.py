"""A checkpoint follows the plan: a job trained under plan A saves weights and optimizer state with
torch.distributed.checkpoint (DCP) and restarts under plan B with the same state, on 2 gloo CPU ranks.

One rank run (tests/migrate_support.py) trains every scenario: table-wise -> column-wise, column-wise -> row-wise
and table-wise -> data-parallel with EXACT_ADAGRAD (a state the shape of the weight), table-wise -> column-wise
with EXACT_ROWWISE_ADAGRAD (one state per row, per column shard under a column-wise plan), and plain DCP on the
two moves it cannot make. The full weights and optimizer state under B must equal those saved under A element by
element, and the next losses under B those A had. ``dreamshard torchrec migrate`` rewrites a checkpoint that
plain DCP then loads under B; bad input is one line, exit 2, nothing written.
"""

from __future__ import annotations

import math
import shutil
from pathlib import Path
from typing import Any

import pytest
import torch

from dreamshard.cli.app import main
from dreamshard.integrations.torchrec_checkpoint import Stored, Wanted, plan_moves, recut_rows
from dreamshard.integrations.torchrec_file import save_torchrec_plan, torchrec_document
from dreamshard.integrations.torchrec_ranks import run_ranks
from dreamshard.sharders import make_plan
from dreamshard.values import ColumnShard, Inventory, Table, Topology
from dreamshard.values.units import row_shards_for

pytest.importorskip("torchrec")

HERE = Path(__file__).resolve().parent
INV = Inventory(
    name="migrate",
    tables=tuple(
        Table(name=n, num_embeddings=r, embedding_dim=d, pooling_factor=1.0)
        for n, r, d in [("user", 40, 16), ("item", 48, 8), ("ctx", 20, 8)]
    ),
)
TOPO = Topology(num_devices=2, memory_per_device_gb=0.01, batch_size=8)
PLANS = {
    "tw": make_plan(INV, TOPO, {"user": 0, "item": 1, "ctx": 0}, "hand"),
    "cw": make_plan(
        INV,
        TOPO,
        {"ctx": 1},
        "hand",
        column_shards={
            "user": (ColumnShard(start=0, end=8, device=1), ColumnShard(start=8, end=16, device=0)),
            "item": (ColumnShard(start=0, end=4, device=0), ColumnShard(start=4, end=8, device=1)),
        },
    ),
    "rw": make_plan(
        INV,
        TOPO,
        {"ctx": 0},
        "hand",
        row_shards={"user": row_shards_for(40, [0, 1]), "item": row_shards_for(48, [0, 1])},
    ),
    "dp": make_plan(INV, TOPO, {"item": 1}, "hand", data_parallel=["user", "ctx"]),
}
DOCS = {k: torchrec_document(p, INV).model_dump(mode="json") for k, p in PLANS.items()}
SCENARIOS = {
    "tw_cw": ("tw", "cw", "exact_adagrad", False),
    "cw_rw": ("cw", "rw", "exact_adagrad", False),
    "tw_dp": ("tw", "dp", "exact_adagrad", False),
    "rowwise_tw_cw": ("tw", "cw", "exact_row_wise_adagrad", False),
    "plain_tw_dp": ("tw", "dp", "exact_adagrad", True),
    "plain_rowwise_tw_cw": ("tw", "cw", "exact_row_wise_adagrad", True),
}


def _ranks(entry: str, job: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    monkeypatch.setenv("PYTHONPATH", str(HERE))
    return run_ranks(entry, job, 2, timeout_s=240)


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict[str, Any]]]:
    root = tmp_path_factory.mktemp("ckpt")
    job = {
        "inventory": INV.model_dump(mode="json"),
        "dir": str(root),
        "scenarios": {
            name: {"a": DOCS[a], "b": DOCS[b], "optimizer": opt, "plain": plain}
            for name, (a, b, opt, plain) in SCENARIOS.items()
        },
    }
    with pytest.MonkeyPatch.context() as mp:
        return root, _ranks("migrate_support:scenario_rank", job, mp)


def _equal_state(root: Path, name: str) -> None:
    got = torch.load(root / f"{name}.pt")
    saved, restored = got["saved"], got["restored"]
    assert set(saved) == set(restored) and {"user.weight", "user.momentum1"} <= set(saved)
    for key in saved:
        assert torch.equal(saved[key], restored[key]), key


def _losses_continue(ranks: list[dict[str, Any]], name: str) -> None:
    for r in ranks:
        a, b = r[name]["losses_a"][3:], r[name]["losses_b"]
        assert math.isclose(a[0], b[0], rel_tol=1e-6)  # the step after restore: same weights and batch (the loss's
        # sum runs in another order under another plan)
        assert math.isclose(a[1], b[1], rel_tol=1e-5)  # and the one after it: same optimizer state


@pytest.mark.parametrize("name", ["tw_cw", "cw_rw"])
def test_dcp_state_moves_between_sharded_plans_bit_identical(trained, name: str) -> None:
    root, ranks = trained
    assert all(not r[name]["error"] for r in ranks)
    _equal_state(root, name)
    _losses_continue(ranks, name)


def test_a_table_turning_data_parallel_keeps_its_adagrad_state(trained) -> None:
    """TW -> DP: fused ``<table>.momentum1`` becomes the dense optimizer's ``sum`` (plain DCP: a missing key)."""
    root, ranks = trained
    assert all(not r["tw_dp"]["error"] for r in ranks)
    assert {t for r in ranks for t in r["tw_dp"]["report"]["translated_tables"]} == {"user", "ctx"}
    _equal_state(root, "tw_dp")
    for r in ranks:  # the restored step is exact; DP's update averages gradients over ranks (DDP), so the next differs
        assert math.isclose(r["tw_dp"]["losses_a"][3], r["tw_dp"]["losses_b"][0], rel_tol=1e-6)
    assert all("Missing key" in r["plain_tw_dp"]["error"] for r in ranks), [r["plain_tw_dp"]["error"] for r in ranks]


def test_a_row_state_is_given_to_every_column_shard(trained) -> None:
    """EXACT_ROWWISE_ADAGRAD TW -> CW: the table's row state (rows) becomes each shard's (rows x shards); plain
    DCP refuses the sizes."""
    root, ranks = trained
    got = torch.load(root / "rowwise_tw_cw.pt")
    saved, restored = got["saved"], got["restored"]
    for table, k in (("user", 2), ("item", 2), ("ctx", 1)):
        assert torch.equal(saved[f"{table}.weight"], restored[f"{table}.weight"])
        assert torch.equal(saved[f"{table}.momentum1"].repeat(k), restored[f"{table}.momentum1"])
    for r in ranks:
        assert math.isclose(r["rowwise_tw_cw"]["losses_a"][3], r["rowwise_tw_cw"]["losses_b"][0], rel_tol=1e-6)
    assert all("Size mismatch" in r["plain_rowwise_tw_cw"]["error"] for r in ranks)


def test_row_states_recut_between_column_cuts() -> None:
    rows = torch.tensor([1.0, 2.0, 3.0])
    assert torch.equal(recut_rows(rows, 3, (8,), (4, 4)), rows.repeat(2))
    two = torch.cat([rows, rows * 3])  # shards of 4 and 12 columns
    assert torch.allclose(recut_rows(two, 3, (4, 12), (16,)), (rows * 4 + rows * 3 * 12) / 16)


def test_moves_name_the_table_and_field() -> None:
    stored = {
        "model.embedding_bags.a.weight": Stored((4, 8), (8,)),
        "optim.state.embedding_bags.a.weight.a.momentum1": Stored((4, 8), ()),
    }
    wanted = {
        "model.embedding_bags.a.weight": Wanted((4, 8), (8,)),
        "optim.state.embedding_bags.a.weight.sum": Wanted((4, 8)),
        "optim.state.embedding_bags.a.weight.step": Wanted(()),
    }
    kinds = {m.target.rsplit(".", 1)[1]: (m.kind, m.source) for m in plan_moves(stored, wanted)}
    assert kinds["sum"] == ("copy", "optim.state.embedding_bags.a.weight.a.momentum1")
    assert kinds["step"] == ("fill", None)
    with pytest.raises(Exception, match="table 'a' is 4x8 in the checkpoint but 5x8 in the model"):
        plan_moves(stored, {**wanted, "model.embedding_bags.a.weight": Wanted((5, 8), (8,))})
    with pytest.raises(Exception, match="table 'b' is not in the checkpoint"):
        plan_moves(stored, {**wanted, "model.embedding_bags.b.weight": Wanted((5, 8), (8,))})
    with pytest.raises(Exception, match="table 'a': optimizer state 'momentum1' is"):
        plan_moves(stored, {**wanted, "optim.state.embedding_bags.a.weight.sum": Wanted((4,))})


# ------------------------------------------------------------------------------- the command


@pytest.fixture(scope="module")
def files(trained, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("files")
    inv = d / "inv.json"
    inv.write_text(INV.model_dump_json())
    out = {"inv": inv, "ckpt": trained[0] / "tw_dp"}
    for name in ("cw", "dp"):
        save_torchrec_plan(torchrec_document(PLANS[name], INV), d / f"{name}.json")
        out[name] = d / f"{name}.json"
    return out


def _cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    try:
        main(["torchrec", "migrate", *argv])
        code = 0
    except SystemExit as e:
        code = int(e.code or 0)
    got = capsys.readouterr()
    return code, got.out + got.err


def test_migrate_rewrites_a_checkpoint_plain_dcp_loads_under_the_new_plan(
    trained, files, tmp_path, monkeypatch, capsys
):
    out = tmp_path / "new"
    args = [str(files["ckpt"]), "--plan", str(files["dp"]), "-i", str(files["inv"])]
    code, said = _cli([*args, "-o", str(out)], capsys)
    assert code == 0, said
    assert "3 tables on 2 ranks (exact_adagrad)" in said and "optimizer state translated: ctx, user;" in said
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary directory left
    job = {"inventory": INV.model_dump(mode="json"), "b": DOCS["dp"], "optimizer": "exact_adagrad"}
    _ranks("migrate_support:verify_rank", {**job, "checkpoint": str(out), "pt": str(tmp_path / "v.pt")}, monkeypatch)
    saved, restored = torch.load(trained[0] / "tw_dp.pt")["saved"], torch.load(tmp_path / "v.pt")
    assert set(saved) == set(restored) and all(torch.equal(saved[k], restored[k]) for k in saved)


def test_migrate_refuses_bad_input_in_one_line(files, tmp_path, capsys) -> None:
    def _fails(args: list[str], match: str, out: Path) -> None:
        code, said = _cli([*args, "-o", str(out)], capsys)
        assert code == 2 and match in said and "Traceback" not in said, said
        assert len(said.strip().splitlines()) == 1 and not out.exists()

    inv, plan = ["-i", str(files["inv"])], ["--plan", str(files["cw"])]
    out = tmp_path / "new"
    _fails([str(tmp_path / "nope"), *plan, *inv], "no such directory", out)
    cut = tmp_path / "cut"
    shutil.copytree(files["ckpt"], cut)
    data = sorted(cut.glob("*.distcp"))[0]
    data.write_bytes(data.read_bytes()[:100])
    _fails([str(cut), *plan, *inv], f"data file {data.name} is truncated", out)
    other = Inventory(
        name="other", tables=(*INV.tables, Table(name="ad", num_embeddings=8, embedding_dim=4, pooling_factor=1.0))
    )
    other_inv = tmp_path / "other.json"
    other_inv.write_text(other.model_dump_json())
    _fails([str(files["ckpt"]), *plan, "-i", str(other_inv)], "table 'ad' of the module has no entry in the plan", out)
    plan_b = make_plan(other, TOPO, {"user": 0, "item": 1, "ctx": 0, "ad": 1}, "hand")
    save_torchrec_plan(torchrec_document(plan_b, other), tmp_path / "b.json")
    _fails([str(files["ckpt"]), "--plan", str(tmp_path / "b.json"), "-i", str(other_inv)], "table 'ad' is not in", out)
    out.mkdir()
    code, said = _cli([str(files["ckpt"]), *plan, *inv, "-o", str(out)], capsys)
    assert code == 2 and "exists" in said
