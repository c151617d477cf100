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
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import torch

from dreamshard.cli.app import main
from dreamshard.integrations.processes import remove_stale
from dreamshard.integrations.torchrec_checkpoint import Stored, infer_dense_optimizer, infer_optimizer
from dreamshard.integrations.torchrec_file import save_torchrec_plan, torchrec_document
from dreamshard.integrations.torchrec_moves import Wanted, plan_moves, recut_rows
from dreamshard.integrations.torchrec_ranks import run_ranks
from dreamshard.sharders import make_plan
from dreamshard.values import ColumnShard, Inventory, Table, Topology
from dreamshard.values.units import row_shards_for

pytest.importorskip("torchrec")
import migrate_models  # noqa: E402 - needs torchrec

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
#: The model change (tests/migrate_models.py): v1 under plan A; v2 (ctx removed, ad added) under plan B, user now
#: row-wise; v3 (v2 with item renamed product) under plan C, user data-parallel.
V1, V2, V3 = (migrate_models.inventory(v) for v in ("v1", "v2", "v3"))
MODEL_PLANS = {
    "a": (V1, make_plan(V1, TOPO, {"user": 0, "item": 1, "ctx": 0}, "hand")),
    "b": (V2, make_plan(V2, TOPO, {"item": 0, "ad": 1}, "hand", row_shards={"user": row_shards_for(40, [0, 1])})),
    "c": (V3, make_plan(V3, TOPO, {"product": 1, "ad": 0}, "hand", data_parallel=["user"])),
}
MODEL_DOCS = {k: torchrec_document(p, inv) for k, (inv, p) in MODEL_PLANS.items()}
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
        "model_change": {k: MODEL_DOCS[k].model_dump(mode="json") for k in ("a", "b")},
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
    kinds = {m.target.rsplit(".", 1)[1]: (m.kind, m.source) for m in plan_moves(stored, wanted).moves}
    assert kinds["sum"] == ("copy", "optim.state.embedding_bags.a.weight.a.momentum1")
    assert kinds["step"] == ("fill", None)
    with pytest.raises(Exception, match="table 'a' is 4x8 in the checkpoint but 5x8 in the model"):
        plan_moves(stored, {**wanted, "model.embedding_bags.a.weight": Wanted((5, 8), (8,))})
    with pytest.raises(Exception, match="table 'a': optimizer state 'momentum1' is"):
        plan_moves(stored, {**wanted, "optim.state.embedding_bags.a.weight.sum": Wanted((4,))})


def _state(tables: dict[str, tuple[int, int]], dense: dict[str, tuple[int, ...]], stored: bool) -> dict[str, Any]:
    """A flat state of an EBC's tables (fused row-wise Adagrad) and an MLP's parameters (Adagrad)."""
    make = (
        (lambda shape, widths=(): Stored(shape, widths)) if stored else (lambda shape, widths=(): Wanted(shape, widths))
    )
    out: dict[str, Any] = {}
    for t, (rows, dim) in tables.items():
        out[f"model.ebc.embedding_bags.{t}.weight"] = make((rows, dim), (dim,))
        out[f"optim.state.ebc.embedding_bags.{t}.weight.{t}.momentum1"] = make((rows,))
    for p, shape in dense.items():
        out[f"model.{p}"] = make(shape)
        out[f"optim.state.{p}.sum"] = make(shape)
        out[f"optim.state.{p}.step"] = make(())
    return out


def test_a_model_change_carries_initialises_drops_and_renames_only_when_told() -> None:
    mlp = {"mlp.0.weight": (8, 32), "mlp.0.bias": (8,)}
    stored = _state({"user": (40, 16), "item": (48, 8), "ctx": (20, 8)}, mlp, stored=True)
    v2 = _state({"user": (40, 16), "item": (48, 8), "ad": (24, 8)}, {**mlp, "mlp.2.bias": (1,)}, stored=False)
    got = plan_moves(stored, v2)
    assert (got.carried, got.initialised, got.dropped) == (("item", "user"), ("ad",), ("ctx",))
    assert (got.dense_carried, got.dense_initialised) == (("mlp.0.bias", "mlp.0.weight"), ("mlp.2.bias",))
    by_target = {m.target: m for m in got.moves}
    assert by_target["model.ebc.embedding_bags.ad.weight"].kind == "keep"
    assert by_target["optim.state.ebc.embedding_bags.ad.weight.ad.momentum1"].kind == "keep"
    assert by_target["optim.state.mlp.2.bias.sum"].kind == "keep"
    assert by_target["optim.state.mlp.0.weight.sum"].source == "optim.state.mlp.0.weight.sum"
    v3 = _state({"user": (40, 16), "product": (48, 8)}, mlp, stored=False)
    unmapped = plan_moves(stored, v3)  # never guessed: product is new, item dropped
    assert unmapped.initialised == ("product",) and "item" in unmapped.dropped
    renamed = plan_moves(stored, v3, {"item": "product"})
    assert renamed.carried == ("product", "user") and renamed.renamed == (("item", "product"),)
    moved = {m.target: m.source for m in renamed.moves}
    assert moved["optim.state.ebc.embedding_bags.product.weight.product.momentum1"] == (
        "optim.state.ebc.embedding_bags.item.weight.item.momentum1"
    )
    assert renamed.translated == ()  # the same state under a new name is no translation
    for renames, match in [
        ({"nope": "product"}, "--rename nope=product: the checkpoint has no table 'nope'"),
        ({"item": "nope"}, "--rename item=nope: the model has no table 'nope'"),
        ({"item": "product", "ctx": "product"}, "two tables renamed to one"),
    ]:
        with pytest.raises(Exception, match=match):
            plan_moves(stored, v3, renames)
    wider = _state({"user": (40, 16)}, {"mlp.0.weight": (8, 40), "mlp.0.bias": (8,)}, stored=False)
    with pytest.raises(
        Exception, match="'mlp.0.weight' is 8x32 in the checkpoint but 8x40 in the model; .* --init mlp.0"
    ):
        plan_moves(stored, wider)
    fresh = plan_moves(stored, wider, fresh=["mlp.0"])  # the changed layer as the model initialises it, by request
    assert fresh.dense_initialised == ("mlp.0.bias", "mlp.0.weight") and fresh.dense_dropped == ()
    assert {m.kind for m in fresh.moves if "mlp.0" in m.target} == {"keep"}
    with pytest.raises(Exception, match="--init mlp.9: neither the model nor the checkpoint"):
        plan_moves(stored, wider, fresh=["mlp.9"])
    with pytest.raises(Exception, match="shares no table and no parameter with the model"):
        plan_moves(stored, _state({"other": (4, 4)}, {"head.weight": (1, 4)}, stored=False))


def test_adam_moments_move_between_the_fused_and_dense_forms_and_column_cuts() -> None:
    """Fused ADAM keeps momentum1 (exp_avg) and exp_avg_sq; torch's Adam on a data-parallel table exp_avg,
    exp_avg_sq and step. PARTIAL_ROWWISE_ADAM's exp_avg_sq is a row state, re-cut for new column shards."""
    fqn = "embedding_bags.a.weight"
    stored = {
        f"model.{fqn}": Stored((4, 8), (8,)),
        f"optim.state.{fqn}.a.momentum1": Stored((4, 8), ()),
        f"optim.state.{fqn}.a.exp_avg_sq": Stored((4, 8), ()),
    }
    dp = {
        f"model.{fqn}": Wanted((4, 8), (8,)),
        **{f"optim.state.{fqn}.{f}": Wanted((4, 8)) for f in ("exp_avg", "exp_avg_sq")},
        f"optim.state.{fqn}.step": Wanted(()),
    }
    got = plan_moves(stored, dp)
    moves = {m.target.rsplit(".", 1)[1]: (m.kind, m.source) for m in got.moves}
    assert moves["exp_avg"] == ("copy", f"optim.state.{fqn}.a.momentum1")
    assert moves["exp_avg_sq"] == ("copy", f"optim.state.{fqn}.a.exp_avg_sq") and moves["step"] == ("fill", None)
    assert got.translated == ("a",)
    partial = {**stored, f"optim.state.{fqn}.a.exp_avg_sq": Stored((4,), ())}
    cut = {
        f"model.{fqn}": Wanted((4, 8), (4, 4)),
        f"optim.state.{fqn}.a.momentum1": Wanted((4, 8)),
        f"optim.state.{fqn}.a.exp_avg_sq": Wanted((8,)),
    }
    recut = {m.target.rsplit(".", 1)[1]: m for m in plan_moves(partial, cut).moves}
    assert recut["momentum1"].kind == "copy"
    assert (recut["exp_avg_sq"].kind, recut["exp_avg_sq"].widths_to) == ("rowwise", (4, 4))
    with pytest.raises(Exception, match="table 'a': the checkpoint holds no optimizer state 'exp_avg_sq'"):
        plan_moves({k: v for k, v in stored.items() if "exp_avg_sq" not in k}, dp)


def test_the_optimizers_are_read_from_the_checkpoints_state() -> None:
    mlp = {"mlp.0.weight": (8, 32)}
    stored = _state({"user": (40, 16)}, mlp, stored=True)
    assert infer_optimizer(stored) == ("exact_row_wise_adagrad", "exact_row_wise_adagrad")
    assert infer_dense_optimizer(stored) == "adagrad"
    fqn = "optim.state.ebc.embedding_bags.user.weight"
    adam = {**stored, f"{fqn}.user.momentum1": Stored((40, 16), ()), f"{fqn}.user.exp_avg_sq": Stored((40, 16), ())}
    assert infer_optimizer(adam)[0] == "adam"
    partial = {**adam, f"{fqn}.user.exp_avg_sq": Stored((40,), ())}
    assert infer_optimizer(partial)[0] == "partial_row_wise_adam"
    dense_adam = {k: v for k, v in stored.items() if not k.startswith("optim.state.mlp")}
    dense_adam |= {f"optim.state.mlp.0.weight.{f}": Stored((8, 32), ()) for f in ("exp_avg", "exp_avg_sq")}
    dense_adam["optim.state.mlp.0.weight.step"] = Stored((), ())
    assert infer_dense_optimizer(dense_adam) == "adam"
    # a data-parallel table under the job's dense Adagrad beside row-wise fused tables
    dp = {
        **stored,
        "model.ebc.embedding_bags.ctx.weight": Stored((20, 8), (8,)),
        "optim.state.ebc.embedding_bags.ctx.weight.sum": Stored((20, 8), ()),
    }
    assert infer_optimizer(dp) == ("exact_row_wise_adagrad", "exact_adagrad")


def test_a_model_change_resumes_from_the_old_checkpoint(trained) -> None:
    """v1 (user, item, ctx, MLP) -> v2 (ctx removed, ad added), a new plan: the old tables and the MLP with their
    optimizer state element for element, the new table as v2 initialises it, the loss continuing."""
    root, ranks = trained
    for r in ranks:
        report = r["model_change"]["report"]
        assert (report["carried_tables"], report["initialised_tables"], report["dropped_tables"]) == (
            ["item", "user"],
            ["ad"],
            ["ctx"],
        )
        assert report["dense_carried"] == ["mlp.0.bias", "mlp.0.weight", "mlp.2.bias", "mlp.2.weight"]
        a, b = r["model_change"]["losses_a"][3:], r["model_change"]["losses_b"]
        assert all(math.isclose(x, y, rel_tol=1e-5, abs_tol=1e-7) for x, y in zip(a, b, strict=True)), (a, b)
    got = torch.load(root / "model_change.pt")
    saved, restored, fresh = got["saved"], got["restored"], got["fresh"]
    assert "ctx.weight" not in restored and "ctx.weight" in saved
    carried = [k for k in restored if not k.startswith("ad.")]
    assert {"user.weight", "user.momentum1", "item.weight", "mlp.0.weight", "mlp.0.weight.sum"} <= set(carried)
    for key in carried:
        assert torch.equal(saved[key], restored[key]), key
    assert torch.equal(restored["ad.weight"], fresh["ad.weight"]) and restored["ad.weight"].abs().sum() > 0
    assert torch.equal(restored["ad.momentum1"], fresh["ad.momentum1"])


# ------------------------------------------------------------------------------- the command


@pytest.fixture(scope="module")
def files(trained, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("files")
    out = {"ckpt": trained[0] / "tw_dp", "model_ckpt": trained[0] / "model_change"}
    for name, inv in (("inv", INV), ("inv3", V3)):
        out[name] = d / f"{name}.json"
        out[name].write_text(inv.model_dump_json())
    for name in ("cw", "dp"):
        save_torchrec_plan(torchrec_document(PLANS[name], INV), d / f"{name}.json")
        out[name] = d / f"{name}.json"
    save_torchrec_plan(MODEL_DOCS["c"], d / "c.json")
    out["c"] = d / "c.json"
    return out


def _cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    try:
        main(["torchrec", "migrate", *argv])
        code = 0
    except SystemExit as e:
        code = int(e.code or 0)
    got = capsys.readouterr()
    return code, got.out + got.err


def test_migrate_rewrites_a_model_change_plain_dcp_loads_under_the_new_plan(
    trained, files, tmp_path, monkeypatch, capsys
):
    """v1's checkpoint (row-wise Adagrad tables, an Adagrad MLP) for v3 (ctx removed, ad added, item renamed
    product) under plan C (user data-parallel): the command's output loads with plain DCP, every carried entry
    equal to what v1 saved."""
    out = tmp_path / "new"
    (tmp_path / f".new.tmp-{_reaped()}-0a1b2c3d").mkdir()  # what a killed run left: removed by this one
    model = f"{HERE / 'migrate_models.py'}:build_v3"
    args = [str(files["model_ckpt"]), "--plan", str(files["c"]), "-i", str(files["inv3"]), "--model", model]
    code, said = _cli([*args, "--rename", "item=product", "-o", str(out)], capsys)
    assert code == 0, said
    assert "3 tables on 2 ranks (tables exact_row_wise_adagrad, dense adagrad)" in said, said
    assert (
        "tables carried: product, user; initialised (new in the model): ad; dropped (not in the model): ctx; "
        "renamed: item -> product" in said
    ), said
    assert "dense entries carried: mlp.0.bias, mlp.0.weight, mlp.2.bias, mlp.2.weight;" in said, said
    assert "optimizer state translated: user;" in said, said
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary directory left
    job = {"inventory": V3.model_dump(mode="json"), "b": MODEL_DOCS["c"].model_dump(mode="json")}
    job |= {"optimizer": "exact_row_wise_adagrad", "dense": "adagrad", "model": model}
    _ranks("migrate_support:verify_rank", {**job, "checkpoint": str(out), "pt": str(tmp_path / "v.pt")}, monkeypatch)
    saved, restored = torch.load(trained[0] / "model_change.pt")["saved"], torch.load(tmp_path / "v.pt")
    renamed = {k.replace("product.", "item."): v for k, v in restored.items() if not k.startswith("ad.")}
    assert {"user.weight", "user.momentum1", "item.weight", "item.momentum1", "mlp.0.weight.sum"} <= set(renamed)
    for key, value in renamed.items():  # user's row state is RowWiseAdagrad's [rows, 1] now
        assert torch.equal(saved[key].flatten(), value.flatten()), key


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
    grown = Inventory(name="grown", tables=(INV.tables[0].model_copy(update={"num_embeddings": 50}), *INV.tables[1:]))
    grown_inv = tmp_path / "grown.json"
    grown_inv.write_text(grown.model_dump_json())
    plan_b = make_plan(grown, TOPO, {"user": 0, "item": 1, "ctx": 0}, "hand")
    save_torchrec_plan(torchrec_document(plan_b, grown), tmp_path / "b.json")
    args = [str(files["ckpt"]), "--plan", str(tmp_path / "b.json"), "-i", str(grown_inv)]
    _fails(args, "table 'user' is 40x16 in the checkpoint but 50x16 in the model", out)
    _fails([*args, "--rename", "user"], "--rename user: expected OLD=NEW", out)
    out.mkdir()
    code, said = _cli([str(files["ckpt"]), *plan, *inv, "-o", str(out)], capsys)
    assert code == 2 and "exists" in said


# ------------------------------------------------------------------------------- the command as a job


def _reaped() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def _running(pid: int) -> bool:
    """Whether `pid` runs (a zombie waiting for a reaper does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _children(pid: int) -> list[int]:
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            out.append(int(stat.parent.name))
    return out


def test_stale_folders_of_dead_commands_are_removed(tmp_path) -> None:
    dead, live = _reaped(), os.getppid()
    for pid in (dead, live):
        (tmp_path / f".new.tmp-{pid}-0a1b2c3d").mkdir()
    (tmp_path / ".new.tmp-notapid").mkdir()
    assert remove_stale(tmp_path, ".new.tmp-") == [tmp_path / f".new.tmp-{dead}-0a1b2c3d"]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([f".new.tmp-{live}-0a1b2c3d", ".new.tmp-notapid"])


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads the process table from /proc")
def test_sigkill_of_migrate_leaves_no_rank_and_nothing_at_out(files, tmp_path) -> None:
    """The command killed while its ranks run: the ranks die with it (within 5 s), nothing is at --out, and the
    next run removes the job folder it left."""
    temp = tmp_path / "tmp"
    temp.mkdir()
    out = tmp_path / "new"
    argv = ["torchrec", "migrate", str(files["ckpt"]), "--plan", str(files["dp"]), "-i", str(files["inv"])]
    code = "import sys; from dreamshard.cli.app import main; main(sys.argv[1:])"
    env = {**os.environ, "TMPDIR": str(temp)}
    cmd = subprocess.Popen(
        [sys.executable, "-c", code, *argv, "-o", str(out)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    try:
        ranks: list[int] = []
        deadline = time.monotonic() + 240
        while len(ranks) < 2 and cmd.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
            ranks = _children(cmd.pid)
        assert len(ranks) == 2, f"the command started {len(ranks)} ranks: {cmd.stderr.read() if cmd.stderr else ''}"
        time.sleep(2)  # the ranks import torch and join the group
    finally:
        cmd.kill()
        cmd.wait()
    deadline = time.monotonic() + 5
    while any(_running(p) for p in ranks) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [p for p in ranks if _running(p)]
    assert not out.exists()
    left = sorted(temp.glob("dreamshard-ranks-*"))
    assert left and remove_stale(temp, "dreamshard-ranks-") == left
