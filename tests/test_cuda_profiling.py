"""The cuda backend: same code path as cpu on a GPU (skipped cleanly without one)."""

from __future__ import annotations

import pytest
import torch

from dreamshard.profiling import make_oracle
from dreamshard.values import CommModel, Inventory, Table, Topology

pytestmark = [pytest.mark.cuda, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


def test_cuda_oracle_measures_and_responds_to_pooling() -> None:
    o = make_oracle("cuda", warmup=3, repeats=5)
    info = o.info
    assert info.name == "cuda" and info.device.startswith("cuda") and not info.is_simulated
    assert info.operator in {"fbgemm_tbe", "embedding_bag"}
    o.set_comm_model(2, CommModel(alpha_ms=0.01, beta_ms_per_mb=0.01, backend="test-fixed", world_size=2))
    light = Table(name="light", num_embeddings=1_000_000, embedding_dim=64, pooling_factor=2)
    heavy = Table(name="heavy", num_embeddings=1_000_000, embedding_dim=64, pooling_factor=80)
    inv = Inventory(name="g", tables=(light, heavy))
    topo = Topology(num_devices=2, device_type="cuda", memory_per_device_gb=8, batch_size=65536)
    m = o.measure(inv, {"light": 0, "heavy": 1}, topo)
    a, b = m.costs.per_device
    assert a.fwd_compute > 0 and b.bwd_compute > 0
    assert b.fwd_compute + b.bwd_compute > a.fwd_compute + a.bwd_compute
    empty = o.measure(inv, {"light": 0, "heavy": 0}, topo).costs.per_device[1]
    assert empty.total == 0.0


def test_cuda_fallback_operator(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DREAMSHARD_DISABLE_FBGEMM", "1")
    o = make_oracle("cuda", warmup=1, repeats=2)
    assert o.info.operator == "embedding_bag"
    t = Table(name="t", num_embeddings=100_000, embedding_dim=32, pooling_factor=10)
    m = o.measure(
        Inventory(name="g", tables=(t,)), {"t": 0}, Topology(num_devices=1, device_type="cuda", memory_per_device_gb=8)
    )
    assert m.overall_ms > 0
