"""A model directory with hostile weights, for the tests of the model files
(tests/test_training_data_and_model_files.py): the packaged model with its weights file replaced and its card's
checksum updated, so only the content is bad."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

from dreamshard.learning.model_store import PACKAGED_DIR
from dreamshard.values.model_files import CARD_FILE, COST_FILE


def model_with_weights(d: Path, data: bytes) -> Path:
    """The packaged model with its cost_net.pt replaced by `data` (card checksum updated: only the content is bad)."""
    shutil.copytree(PACKAGED_DIR, d)
    (d / COST_FILE).write_bytes(data)
    card = json.loads((d / CARD_FILE).read_text())
    card["files"][COST_FILE] = hashlib.sha256(data).hexdigest()
    (d / CARD_FILE).write_text(json.dumps(card))
    return d
