"""The files of a saved model directory, by name, and whether a directory holds one (read by the settings' model
lookup without loading torch; written by dreamshard.learning.model_store)."""

from __future__ import annotations

from pathlib import Path

#: The model card: version, training backend and ranges (its presence makes a directory a model).
CARD_FILE = "model.json"
#: The cost ensemble's weights.
COST_FILE = "cost_net.pt"
#: The RL policy's weights (a model may have none).
POLICY_FILE = "policy.pt"


def has_model(directory: Path | None) -> bool:
    """Whether `directory` holds a saved model (its card)."""
    return directory is not None and (Path(directory) / CARD_FILE).is_file()
