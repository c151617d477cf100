"""Inventories from DLRM trace files (facebookresearch/dlrm_datasets format), written by the test itself."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from dreamshard.cli.app import invoke
from dreamshard.errors import InputFileError
from dreamshard.inventory.indices import reuse_histogram
from dreamshard.inventory.trace import inventory_from_trace

T, B = 3, 64


def _trace(rng: np.random.Generator) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    lengths = torch.tensor(rng.integers(0, 4, size=(T, B)), dtype=torch.int64)
    lengths[2] = 0  # a table nobody looked up
    offsets = torch.zeros(T * B + 1, dtype=torch.int64)
    offsets[1:] = torch.cumsum(lengths.flatten(), 0)
    n = int(offsets[-1])
    indices = torch.tensor(rng.integers(0, 50, size=n), dtype=torch.int64)
    first = int(offsets[B])
    indices[:first] = torch.tensor(rng.integers(0, 5, size=first))  # table 0: few hot rows
    indices[first - 1] = 4
    return indices, offsets, lengths


@pytest.fixture
def trace_file(tmp_path: Path) -> tuple[Path, tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    data = _trace(np.random.default_rng(0))
    p = tmp_path / "fbgemm_t3_bs64.pt"
    torch.save(data, p)
    return p, data


def test_tables_rows_pooling_histogram(trace_file) -> None:
    p, (indices, offsets, lengths) = trace_file
    inv = inventory_from_trace(p)
    assert inv.name == "fbgemm_t3_bs64" and inv.table_names == ["t0000", "t0001", "t0002"]
    for t in range(2):
        tab = inv.tables[t]
        seg = indices[int(offsets[t * B]) : int(offsets[(t + 1) * B])].numpy()
        assert tab.num_embeddings == seg.max() + 1
        assert tab.pooling_factor == pytest.approx(lengths[t].sum().item() / B)
        np.testing.assert_allclose(tab.access_histogram, reuse_histogram(seg), atol=1e-6)
    assert inv.tables[0].num_embeddings == 5
    assert inv.tables[0].access_histogram[0] < inv.tables[1].access_histogram[0]  # hot table reuses more
    empty = inv.tables[2]
    assert empty.pooling_factor == 0 and empty.num_embeddings == 1 and empty.access_histogram is None


def test_batch_size_averages_per_batch_histograms(trace_file) -> None:
    p, (indices, offsets, _) = trace_file
    inv = inventory_from_trace(p, name="x", batch_size=16, max_tables=1)
    assert inv.name == "x" and inv.num_tables == 1
    per_batch = [reuse_histogram(indices[int(offsets[k * 16]) : int(offsets[(k + 1) * 16])].numpy()) for k in range(4)]
    np.testing.assert_allclose(inv.tables[0].access_histogram, np.mean(per_batch, axis=0), atol=1e-6)
    with pytest.raises(InputFileError, match="batch_size"):
        inventory_from_trace(p, batch_size=B + 1)


def _save(tmp_path: Path, obj: object) -> Path:
    p = tmp_path / "bad.pt"
    torch.save(obj, p)
    return p


def test_lengths_offsets_mismatch_names_table(tmp_path: Path) -> None:
    indices, offsets, lengths = _trace(np.random.default_rng(1))
    lengths = lengths.clone()
    lengths[1, 3] += 1
    with pytest.raises(InputFileError, match=r"table 1: lengths\[1, 3\]") as e:
        inventory_from_trace(_save(tmp_path, (indices, offsets, lengths)))
    assert "\n" not in str(e.value)


@pytest.mark.parametrize(
    "mutate,match",
    [
        (lambda i, o, ln: (i, o, ln.flatten()), r"lengths must have shape \[tables, batch\], got \[192\]"),
        (lambda i, o, ln: (i, o[:-1], ln), r"offsets must be flat of length tables\*batch\+1 = 193, got shape \[192\]"),
        (lambda i, o, ln: (i[:-1], o, ln), r"end at len\(indices\)"),
        (lambda i, o, ln: (i, o), r"expected a tuple \(indices, offsets, lengths\), got tuple of length 2"),
        (lambda i, o, ln: {"indices": i}, r"expected a tuple .* got dict"),
        (lambda i, o, ln: (i.float(), o, ln), r"indices must hold integers"),
        (lambda i, o, ln: (i * 0 - 1, o, ln), r"table 0: negative row index"),
    ],
)
def test_bad_files_one_line(tmp_path: Path, mutate, match: str) -> None:
    data = _trace(np.random.default_rng(2))
    with pytest.raises(InputFileError, match=match) as e:
        inventory_from_trace(_save(tmp_path, mutate(*data)))
    assert "\n" not in str(e.value)


def test_not_a_torch_file_and_missing(tmp_path: Path) -> None:
    p = tmp_path / "inv.yaml"
    p.write_text("name: x\n")
    with pytest.raises(InputFileError, match="not a torch file"):
        inventory_from_trace(p)
    with pytest.raises(InputFileError, match="not found"):
        inventory_from_trace(tmp_path / "missing.pt")


def _sparse() -> torch.Tensor:
    return torch.tensor([1, 2, 3]).to_sparse()


@pytest.mark.parametrize(
    ("which", "make", "needle"),
    [
        (0, _sparse, "indices is a sparse tensor"),
        (0, lambda: torch.empty(3, dtype=torch.int64, device="meta"), "indices is a meta tensor"),
        (2, lambda: torch.ones(1, 3, dtype=torch.bool), "lengths must hold integers"),
    ],
)
def test_tensors_that_load_safely_but_hold_no_plain_data_are_one_line(
    tmp_path: Path, which: int, make: Any, needle: str
) -> None:
    """A sparse or meta tensor in a trace was a TypeError / NotImplementedError traceback."""
    parts: list[Any] = [torch.tensor([1, 2, 3]), torch.tensor([0, 3]), torch.tensor([[3]])]
    parts[which] = make()
    p = tmp_path / "t.pt"
    torch.save(tuple(parts), p)
    code, _, err = invoke(["inventory", "from-trace", str(p), "-o", str(tmp_path / "inv.yaml")])
    assert code == 2 and needle in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "inv.yaml").exists()
