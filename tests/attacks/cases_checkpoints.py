"""Attacks on training checkpoints and on `torchrec migrate`'s output (docs/torchrec.md, "Checkpoints are read,
never run"): a ``.metadata`` whose pickle would create a file (at the top, or inside DCP's own metadata), a
non-tensor entry whose pickle would, a data file outside the checkpoint, `-o` a link that points nowhere, a plan
of 1,024 ranks, a checkpoint of Adam tables on this CPU machine, a malformed ``--rename``. Each is one line, exit
2, before any rank starts, and nothing is written (the payloads' files included)."""

from __future__ import annotations

import builtins
import pickle
from pathlib import Path
from typing import Any

import pytest
import torch
from harness import Case, Holds, Refused, Table

#: The model's tables (an EmbeddingBagCollection's state, as `torchrec migrate` names it without --model).
TABLES = {"user": (40, 16), "item": (48, 8)}
#: The file a payload would create, relative to the work directory.
MARKER = "PWNED"
MIGRATE = "torchrec migrate ckpt --plan tr.json -i inv.json -o new"


class Payload:
    """Unpickled, it opens (creates) `path` for writing: a stand-in for any code."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self) -> tuple[Any, ...]:
        return (builtins.open, (str(self.path), "w"))


def _state(adam: bool = False) -> dict[str, Any]:
    model = {f"embedding_bags.{t}.weight": torch.rand(r, d) for t, (r, d) in TABLES.items()}
    state: dict[str, Any] = {}
    for t, (r, d) in TABLES.items():
        fields = {f"{t}.momentum1": torch.rand(r, d)} if adam else {f"{t}.momentum1": torch.rand(r)}
        if adam:
            fields[f"{t}.exp_avg_sq"] = torch.rand(r, d)
        state[f"embedding_bags.{t}.weight"] = fields
    return {"model": model, "optim": {"state": state}}


def _save(state: dict[str, Any], path: Path) -> None:
    import torch.distributed.checkpoint as dcp

    dcp.save(state, checkpoint_id=str(path), no_dist=True)


def world(d: Path) -> None:
    pytest.importorskip("torchrec")
    from dreamshard.integrations.torchrec_file import save_torchrec_plan, torchrec_document
    from dreamshard.sharders import make_plan
    from dreamshard.values import Inventory, Table, Topology

    inv = Inventory(
        name="ckpt",
        tables=tuple(
            Table(name=t, num_embeddings=r, embedding_dim=dim, pooling_factor=1.0) for t, (r, dim) in TABLES.items()
        ),
    )
    (d / "inv.json").write_text(inv.model_dump_json())
    topo = Topology(num_devices=2, memory_per_device_gb=0.01, batch_size=8)
    save_torchrec_plan(torchrec_document(make_plan(inv, topo, {"user": 0, "item": 1}, "hand"), inv), d / "tr.json")
    big = Topology(num_devices=1024, memory_per_device_gb=0.01, batch_size=1024)
    save_torchrec_plan(torchrec_document(make_plan(inv, big, {"user": 0, "item": 1023}, "hand"), inv), d / "big.json")
    _save(_state(), d / "ckpt")
    _save(_state(adam=True), d / "adam")


def _trusted_metadata(work: Path) -> Any:
    """The world's own checkpoint metadata (written by the world: trusted)."""
    with open(work / "ckpt" / ".metadata", "rb") as f:
        return pickle.load(f)  # noqa: S301 - the test's own file


def _payload_on_top(work: Path) -> None:
    (work / "ckpt" / ".metadata").write_bytes(pickle.dumps(Payload(work / MARKER)))


def _payload_inside(work: Path) -> None:
    """DCP's real metadata, with the payload where DCP keeps a list of strings (its storage_meta's modules)."""
    meta = _trusted_metadata(work)
    meta.storage_meta.modules = ["model", Payload(work / MARKER)]
    (work / "ckpt" / ".metadata").write_bytes(pickle.dumps(meta))


def _outside(work: Path) -> None:
    meta = _trusted_metadata(work)
    for info in meta.storage_data.values():
        info.relative_path = "../../etc/passwd"
    (work / "ckpt" / ".metadata").write_bytes(pickle.dumps(meta))


def _dangling(work: Path) -> None:
    (work / "new").symlink_to(work / "target")


def _no_marker(work: Path, _: object = None) -> None:
    assert not (work / MARKER).exists(), "the payload ran"


def _target_untouched(work: Path, _: object) -> None:
    assert not (work / "target").exists(), "migrate wrote where the link points"


def _read_refuses_payload(work: Path) -> None:
    """The in-job reader (`load_checkpoint` reads through it) refuses the payload as the command does."""
    from dreamshard.errors import CheckpointError
    from dreamshard.integrations.torchrec_checkpoint import read_checkpoint

    _payload_inside(work)
    with pytest.raises(CheckpointError, match="names io.open") as e:
        read_checkpoint(work / "ckpt")
    assert "\n" not in str(e.value)
    _no_marker(work)


def _bytes_entry_refused(work: Path) -> None:
    """A non-tensor entry is a pickle too: DCP's own planner would run it (torch.load, weights_only=False); the
    safe planner refuses it."""
    import torch.distributed.checkpoint as dcp

    from dreamshard.integrations.dcp_reader import SafeLoadPlanner, SafeReader

    _save({"extra": Payload(work / MARKER), "w": torch.zeros(2)}, work / "bytes")
    state: dict[str, Any] = {"extra": None, "w": torch.zeros(2)}
    with pytest.raises(BaseException, match="Unsupported global|io.open"):
        dcp.load(state, storage_reader=SafeReader(work / "bytes"), planner=SafeLoadPlanner(), no_dist=True)
    _no_marker(work)


CASES: list[Case] = [
    Refused(
        "a .metadata whose pickle would create a file",
        MIGRATE,
        ("ckpt", ".metadata", "names io.open", "--allow-pickle"),
        setup=_payload_on_top,
        then=_no_marker,
    ),
    Refused(
        "a payload inside DCP's own metadata",
        MIGRATE,
        ("names io.open", "--allow-pickle"),
        setup=_payload_inside,
        then=_no_marker,
    ),
    Holds("read_checkpoint (load_checkpoint's reader) refuses a payload", _read_refuses_payload),
    Holds("a non-tensor entry whose pickle would create a file", _bytes_entry_refused),
    Refused("a data file outside the checkpoint", MIGRATE, ("../../etc/passwd", "outside"), setup=_outside),
    Refused("-o a dangling link", MIGRATE, ("--out new", "is a link"), setup=_dangling, then=_target_untouched),
    Refused(
        "a plan of 1,024 ranks",
        MIGRATE.replace("tr.json", "big.json"),
        ("1024 ranks", "CPU cores"),
        seconds=30,
    ),
    Refused(
        "a checkpoint of Adam tables on cpu",
        MIGRATE.replace("ckpt", "adam"),
        ("trained with adam", "cpu"),
    ),
    Refused("a --rename without =", f"{MIGRATE} --rename user", ("--rename user", "OLD=NEW")),
    Refused("a --rename of a table the checkpoint lacks", f"{MIGRATE} --rename nope=user", "no table 'nope'"),
]

TABLE = Table("checkpoints", CASES, world)
