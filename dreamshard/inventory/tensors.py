"""What a tensor read from a user's file must be before any of its data is read: a plain, dense tensor that holds
data (docs/architecture/rules.md, "Where each rule lives": one-line typed errors). One rule for the batch files
(integrations/torchrec_batches) and the DLRM traces (inventory/trace)."""

from __future__ import annotations

from typing import Any

import torch

#: The tensor types read: a plain tensor, or a parameter (what ``torch.load(weights_only=True)`` can give).
PLAIN_TENSORS = (torch.Tensor, torch.nn.Parameter)


def tensor_problem(x: Any) -> str | None:
    """Why `x` is not a plain dense tensor holding data ("is a sparse tensor", ...), None when it is. Nothing of a
    subclass is called (its methods are its own code)."""
    if type(x) not in PLAIN_TENSORS:
        sub = "tensor subclass " if isinstance(x, torch.Tensor) else ""
        return f"is a {sub}{type(x).__name__}"
    if x.is_nested:
        return "is a nested tensor"
    if x.layout != torch.strided:
        layout = "sparse" if x.is_sparse or "sparse" in str(x.layout) else str(x.layout).removeprefix("torch.")
        return f"is a {layout} tensor"
    if x.is_meta:
        return "is a meta tensor (it holds no data)"
    if x.is_quantized:
        return f"is a quantized tensor ({x.dtype})"
    return None
