"""Where the CLI looks for a model when --model is not given (the library itself is told, never searches).

Order: ./models (what `make run` and `dreamshard train` write), ./models/dreamshard (the DVC pipeline's),
else None, which the learned sharders read as "the model shipped in the package".
"""

from __future__ import annotations

from pathlib import Path


def default_model_dir(explicit: Path | None = None, cwd: Path | None = None) -> Path | None:
    from dreamshard.learning.model_store import has_model

    if explicit is not None:
        return explicit
    here = cwd or Path.cwd()
    for candidate in (here / "models", here / "models" / "dreamshard"):
        if has_model(candidate):
            return candidate
    return None
