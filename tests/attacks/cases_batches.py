"""Attacks on TorchRec batches files (`inventory from-torchrec --batches`, read by `load_batches`): files that load
under ``weights_only=True`` but hold tensors no batch is made of (sparse, meta, nested, quantized, complex, bool,
0-d or 2-d `values` / `lengths` / `weights`), lengths whose sum is huge or wraps around int64, weights that do not
match the values, and a batch missing a feature another batch has (it would count as no lookups, the feature's
pooling diluted). Each is one line naming the batch and the field, exit 2; a non-contiguous tensor, an integer
`nn.Parameter` and weights that require grad are read as the plain tensors are."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from harness import Case, Holds, Refused, Result, Runs, Table

#: Samples per batch in the files; the model's tables a (feature fa) and b (feature fb), 100 rows each.
B = 2
MODEL = """\
import torch
from torchrec.modules.embedding_configs import EmbeddingBagConfig
from torchrec.modules.embedding_modules import EmbeddingBagCollection


def build():
    return EmbeddingBagCollection(
        tables=[
            EmbeddingBagConfig(name="a", num_embeddings=100, embedding_dim=8, feature_names=["fa"]),
            EmbeddingBagConfig(name="b", num_embeddings=100, embedding_dim=8, feature_names=["fb"]),
        ],
        device=torch.device("meta"),
    )
"""
COMMAND = f"inventory from-torchrec --model model.py:build --batches bad.pt --batch-size {B} -o inv.yaml"
#: The command on the good batches: pooling fa 1.5, fb 1.5 (lengths fa [1, 2], fb [2, 1]).
GOOD_COMMAND = COMMAND.replace("bad.pt", "good.pt")
POOLING = {"a": 1.5, "b": 1.5}


def world(d: Path) -> None:
    pytest.importorskip("torchrec")
    (d / "model.py").write_text(MODEL)
    torch.save([good() for _ in range(3)], d / "good.pt")


def good() -> dict[str, Any]:
    return {"keys": ["fa", "fb"], "values": torch.tensor([1, 2, 3, 4, 5, 6]), "lengths": torch.tensor([1, 2, 2, 1])}


def batches(edit: Callable[[list[dict[str, Any]]], object], name: str = "bad.pt") -> Callable[[Path], None]:
    """A setup writing three good batches with `edit` applied to the list (batch 2 is the usual target)."""

    def setup(work: Path) -> None:
        data = [good() for _ in range(3)]
        edit(data)
        torch.save(data, work / name)

    return setup


def _set(**fields: Callable[[], Any]) -> Callable[[list[dict[str, Any]]], None]:
    """Batch 2 with each of `fields` replaced by what its factory makes (tensors are built at setup time)."""
    return lambda data: data[2].update({k: make() for k, make in fields.items()})


def _t(*args: Any, **kw: Any) -> Callable[[], Any]:
    return lambda: torch.tensor(*args, **kw)


def _sparse(values: list[Any]) -> Callable[[], Any]:
    return lambda: torch.tensor(values).to_sparse()


def _meta(n: int, dtype: str = "int64") -> Callable[[], Any]:
    return lambda: torch.empty(n, dtype=getattr(torch, dtype), device="meta")


def _nested() -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # nested tensors are a prototype
        return torch.nested.nested_tensor([torch.tensor([1, 2, 3]), torch.tensor([4, 5, 6])])


def _quantized() -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # quantized creation is deprecated
        return torch.quantize_per_tensor(torch.tensor([1.0, 2, 3, 4, 5, 6]), 1.0, 0, torch.qint8)


VALUES = [1, 2, 3, 4, 5, 6]
BIG = 2**62
#: Batch 2 edited: refused in one line holding every needle (exit 2, nothing written).
REFUSED: dict[str, tuple[Callable[[list[dict[str, Any]]], object], tuple[str, ...]]] = {
    "sparse values": (_set(values=_sparse(VALUES)), ("batch 2", "'values'", "sparse")),
    "meta values": (_set(values=_meta(6)), ("batch 2", "'values'", "meta tensor")),
    "sparse lengths": (_set(lengths=_sparse([1, 2, 2, 1])), ("batch 2", "'lengths'", "sparse")),
    "meta lengths": (_set(lengths=_meta(4)), ("batch 2", "'lengths'", "meta tensor")),
    "sparse weights": (
        _set(weights=lambda: torch.rand(6).to_sparse()),
        ("batch 2", "'weights'", "sparse"),
    ),
    "meta weights": (_set(weights=_meta(6, "float32")), ("batch 2", "'weights'", "meta tensor")),
    "nested values": (_set(values=_nested), ("batch 2", "'values'", "nested")),
    "quantized values": (_set(values=_quantized), ("batch 2", "'values'", "quantized")),
    "complex values": (
        _set(values=lambda: torch.tensor(VALUES).to(torch.complex64)),
        ("batch 2", "'values'", "complex64"),
    ),
    "bool values": (_set(values=lambda: torch.tensor(VALUES).bool()), ("batch 2", "'values'", "bool")),
    "float lengths": (_set(lengths=_t([1.0, 2.0, 2.0, 1.0])), ("batch 2", "'lengths'", "float32")),
    "bool lengths": (_set(lengths=_t([True, True, True, True])), ("batch 2", "'lengths'", "bool")),
    "0-d values": (
        _set(values=_t(5), lengths=_t([1, 0, 0, 0])),
        ("batch 2", "'values'", "0 dimensions"),
    ),
    "2-d values": (_set(values=_t([[1, 2, 3], [4, 5, 6]])), ("batch 2", "'values'", "2 dimensions")),
    "2-d lengths": (_set(lengths=_t([[1, 2], [2, 1]])), ("batch 2", "'lengths'", "2 dimensions")),
    "values a list": (_set(values=lambda: VALUES), ("batch 2", "'values'", "list")),
    "values missing": (lambda data: data[2].pop("values"), ("batch 2", "'values'")),
    "complex weights": (
        _set(weights=lambda: torch.rand(6).to(torch.complex64)),
        ("batch 2", "'weights'", "complex64"),
    ),
    "bool weights": (_set(weights=lambda: torch.ones(6).bool()), ("batch 2", "'weights'", "bool")),
    "2-d weights": (_set(weights=lambda: torch.rand(6, 1)), ("batch 2", "'weights'", "2 dimensions")),
    "weights shorter than the values": (
        _set(weights=lambda: torch.rand(5)),
        ("batch 2", "'weights'", "5 weights for the 6 values"),
    ),
    "a NaN weight": (
        _set(weights=_t([1.0, float("nan"), 1.0, 1.0, 1.0, 1.0])),
        ("batch 2", "'weights'", "nan"),
    ),
    "lengths of 2**62 each": (_set(lengths=_t([BIG] * 4)), ("batch 2", "'lengths'", f"{BIG}", "6 values")),
    "lengths whose int64 sum wraps to the 6 values": (
        _set(lengths=_t([BIG, BIG, BIG, BIG + 6])),
        ("batch 2", "'lengths'", "6 values"),
    ),
    "a negative length": (_set(lengths=_t([1, 2, 4, -1])), ("batch 2", "'lengths'", "-1")),
    "lengths summing to fewer than the values": (
        _set(lengths=_t([1, 1, 2, 1])),
        ("batch 2", "'lengths'", "sum to 5", "6 values"),
    ),
    "a negative id": (_set(values=_t([1, 2, -3, 4, 5, 6])), ("batch 2", "row -3", "table 'a'")),
    "a uint64 id past int64": (
        _set(values=lambda: torch.from_numpy(np.arange(1, 7, dtype=np.uint64) + np.uint64(2**63))),
        ("batch 2", "'values'", "9223372036854775814", "int64"),
    ),
    # batches with different features
    "batch 1 lacks a feature batch 0 has": (
        lambda data: data[1].update(keys=["fa"], values=_t([1, 2, 3])(), lengths=_t([1, 2])()),
        ("batch 1", "'fb'", "batch 0"),
    ),
    "batch 0 lacks a feature the later batches have": (
        lambda data: data[0].update(keys=["fb"], values=_t([1, 2, 3])(), lengths=_t([2, 1])()),
        ("batch 0", "'fa'", "batch 1"),
    ),
}

#: Batch 2 edited: read as the good batches are (the same pooling).
READ: dict[str, Callable[[list[dict[str, Any]]], object]] = {
    "non-contiguous values": _set(values=lambda: torch.tensor([1, 9, 2, 9, 3, 9, 4, 9, 5, 9, 6, 9])[::2]),
    "int32 values and lengths": _set(
        values=lambda: torch.tensor(VALUES, dtype=torch.int32),
        lengths=lambda: torch.tensor([1, 2, 2, 1], dtype=torch.int32),
    ),
    "integer nn.Parameter values": _set(values=lambda: torch.nn.Parameter(torch.tensor(VALUES), requires_grad=False)),
    "weights that require grad": _set(weights=lambda: torch.rand(6).requires_grad_()),
    "the same features in another order": lambda data: data[2].update(
        keys=["fb", "fa"], values=_t([4, 5, 6, 1, 2, 3])(), lengths=_t([2, 1, 1, 2])()
    ),
}


def _same_pooling(work: Path, r: Result) -> None:
    from dreamshard.documents import load_inventory

    assert {t.name: t.pooling_factor for t in load_inventory(work / "inv.yaml").tables} == POOLING, r.err


def _subclass_refused(work: Path) -> None:
    """An in-memory tensor subclass (a file cannot hold one under weights_only) is named, never converted."""
    from dreamshard.errors import InputFileError
    from dreamshard.integrations.torchrec_batches import load_batches

    class Logged(torch.Tensor):
        pass

    data = [good() for _ in range(3)]
    data[2]["values"] = torch.tensor(VALUES).as_subclass(Logged)
    with pytest.raises(InputFileError) as e:
        load_batches(data, B)
    msg = str(e.value)
    assert "batch 2" in msg and "'values'" in msg and "Logged" in msg and "\n" not in msg, msg


def _cases() -> list[Case]:
    cases: list[Case] = [Runs("the good batches", GOOD_COMMAND, _same_pooling)]
    cases += [
        Refused(what, COMMAND, needles, setup=batches(edit), seconds=20.0) for what, (edit, needles) in REFUSED.items()
    ]
    cases += [Runs(what, COMMAND, _same_pooling, setup=batches(edit)) for what, edit in READ.items()]
    cases.append(Holds("a tensor subclass in memory", _subclass_refused))
    return cases


TABLE = Table("torchrec batches", _cases(), world)
