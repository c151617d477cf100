"""TorchRec batches that load safely but hold tensors no batch is made of (sparse, meta, bool, 2-d, a subclass,
lengths whose int64 sum wraps) or lack a feature another batch has: `load_batches` refuses each in one
InputFileError line naming the batch and the field or feature. The CLI's side (exit 2, nothing written) is the
attack table tests/attacks/cases_batches.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from dreamshard.errors import InputFileError
from dreamshard.integrations.torchrec_batches import load_batches

B = 2


def _good() -> dict[str, Any]:
    return {"keys": ["fa", "fb"], "values": torch.tensor([1, 2, 3, 4, 5, 6]), "lengths": torch.tensor([1, 2, 2, 1])}


def _refused(data: list[dict[str, Any]], *needles: str) -> str:
    with pytest.raises(InputFileError) as e:
        load_batches(data, B)
    msg = str(e.value)
    assert "\n" not in msg and all(n in msg for n in needles), msg
    return msg


@pytest.mark.parametrize("field", ["values", "lengths", "weights"])
def test_a_sparse_or_meta_tensor_is_named_with_its_batch_and_field(field: str) -> None:
    """Today: TypeError (sparse) / NotImplementedError (meta) tracebacks for values and lengths; weights unread."""
    dense = {
        "values": torch.tensor([1, 2, 3, 4, 5, 6]),
        "lengths": torch.tensor([1, 2, 2, 1]),
        "weights": torch.rand(6),
    }
    for kind, tensor in (
        ("sparse", dense[field].to_sparse()),
        ("meta", torch.empty_like(dense[field], device="meta")),
    ):
        data = [_good(), _good(), _good()]
        data[2][field] = tensor
        msg = _refused(data, "batch 2", f"'{field}'", kind)
        assert msg.startswith(f"batch 2: '{field}' is a {kind}"), msg


def test_a_saved_sparse_batch_is_refused_from_the_file(tmp_path: Path) -> None:
    data = [_good(), _good(), _good()]
    data[2]["values"] = data[2]["values"].to_sparse()
    torch.save(data, tmp_path / "b.pt")
    with pytest.raises(InputFileError, match=r"batch 2: 'values' is a sparse tensor; a dense 1-d integer tensor"):
        load_batches(tmp_path / "b.pt", B)


@pytest.mark.parametrize(
    ("field", "tensor", "needle"),
    [
        ("values", torch.tensor([1, 0, 1, 1, 0, 1]).bool(), "torch.bool"),
        ("values", torch.tensor([[1, 2, 3], [4, 5, 6]]), "2 dimensions"),
        ("lengths", torch.tensor([[1, 2], [2, 1]]), "2 dimensions"),
        ("weights", torch.rand(6, 1), "2 dimensions"),
        ("weights", torch.rand(5), "5 weights for the 6 values"),
        ("weights", torch.ones(6).bool(), "torch.bool"),
    ],
)
def test_bool_and_2d_tensors_are_refused_not_flattened(field: str, tensor: torch.Tensor, needle: str) -> None:
    """Today these are read: bools as ids 0/1, a 2-d tensor flattened, weights never looked at."""
    data = [_good(), _good(), _good()]
    data[2][field] = tensor
    _refused(data, "batch 2", f"'{field}'", needle)


def test_lengths_whose_int64_sum_wraps_are_refused_without_allocating() -> None:
    """Four lengths of ~2**62 sum, in int64, to the 6 values: today the batch is read."""
    big = 2**62
    data = [_good(), _good(), _good()]
    data[2]["lengths"] = torch.tensor([big, big, big, big + 6])
    _refused(data, "batch 2", "'lengths'", str(big + 6), "6 values")


def test_a_tensor_subclass_is_named_and_plain_variants_are_read() -> None:
    class Logged(torch.Tensor):
        pass

    data = [_good(), _good(), _good()]
    data[2]["values"] = torch.tensor([1, 2, 3, 4, 5, 6]).as_subclass(Logged)
    _refused(data, "batch 2", "'values'", "Logged")
    fine = [_good(), _good(), _good()]
    fine[0]["values"] = torch.tensor([1, 9, 2, 9, 3, 9, 4, 9, 5, 9, 6, 9])[::2]  # non-contiguous
    fine[1]["values"] = torch.nn.Parameter(torch.tensor([1, 2, 3, 4, 5, 6]), requires_grad=False)
    fine[2]["weights"] = torch.rand(6).requires_grad_()
    read = load_batches(fine, B)
    for batch in read:
        assert [v.tolist() for v, _ in batch.values()] == [[1, 2, 3], [4, 5, 6]]
        assert all(v.dtype == np.int64 and ln.dtype == np.int64 for v, ln in batch.values())


def test_a_batch_missing_a_feature_another_batch_has_is_refused() -> None:
    """Today batch 1 without 'fb' counts as zero lookups of 'fb': its pooling halved, silently."""
    data = [_good(), _good(), _good()]
    data[1] = {"keys": ["fa"], "values": torch.tensor([1, 2, 3]), "lengths": torch.tensor([1, 2])}
    _refused(data, "batch 1", "'fb'", "batch 0")
    data = [_good(), _good(), _good()]
    data[0] = {"keys": ["fb"], "values": torch.tensor([1, 2, 3]), "lengths": torch.tensor([2, 1])}
    _refused(data, "batch 0", "'fa'", "batch 1")
    reordered = [
        _good(),
        {"keys": ["fb", "fa"], "values": torch.tensor([4, 5, 6, 1, 2, 3]), "lengths": torch.tensor([2, 1, 1, 2])},
    ]
    assert load_batches(reordered, B)[1]["fa"][0].tolist() == [1, 2, 3]
