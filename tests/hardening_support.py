"""Inputs shared by the second hardening round's tests and its bench case tables (bench/hostile_*_cases.py put
tests/ on sys.path): a model whose weights are replaced, and the small TorchRec inventory."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

from dreamshard.learning.model_store import CARD_FILE, COST_FILE, PACKAGED_DIR
from dreamshard.types import Inventory, Table

TORCHREC_INV = Inventory(
    name="small",
    tables=(
        Table(name="a", num_embeddings=300, embedding_dim=16, pooling_factor=1.0),
        Table(name="b", num_embeddings=500, embedding_dim=32, pooling_factor=3.0),
        Table(name="c", num_embeddings=40, embedding_dim=8, pooling_factor=0.5),
    ),
)


def model_with_weights(d: Path, data: bytes) -> Path:
    """The packaged model with its cost_net.pt replaced by `data` (card checksum updated: only the content is bad)."""
    shutil.copytree(PACKAGED_DIR, d)
    (d / COST_FILE).write_bytes(data)
    card = json.loads((d / CARD_FILE).read_text())
    card["files"][COST_FILE] = hashlib.sha256(data).hexdigest()
    (d / CARD_FILE).write_text(json.dumps(card))
    return d
