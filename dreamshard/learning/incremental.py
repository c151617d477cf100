"""Incremental retraining (docs/architecture/pipeline.md, "The production loop"): after an inventory change, the outer
loop warm-starts from the model the state dir's last run trained for the previous version, not from the
packaged one, and measures only the train tasks whose content the change touched (plus a refresh sample).

`train.init: previous` asks for it. The previous model is copied into `<state_dir>/init/` with a marker naming
the pool it warm-starts, so a killed incremental run resumes from the same model after its checkpoints of the
previous version are gone; a state dir without a previous run, or whose last run was for this same pool
version, gives no previous model (the caller falls back to the packaged one).
"""

from __future__ import annotations

import json
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from dreamshard.documents import atomic_write_text
from dreamshard.errors import ModelError
from dreamshard.learning.loop_state import STATE_FILE, LoopState, last_checkpoint
from dreamshard.learning.model_store import LoadedModel, load_model
from dreamshard.values import Inventory
from dreamshard.values.model_files import CARD_FILE, COST_FILE, POLICY_FILE

INIT_DIR = "init"
MARKER_FILE = "warm-start.json"


@dataclass(frozen=True)
class WarmStart:
    """The previous version's model and the task signatures it was trained on."""

    model: LoadedModel
    tasks: dict[str, str]
    from_pool: str


def _load(init_dir: Path, pool: Inventory) -> WarmStart | None:
    marker = init_dir / MARKER_FILE
    if not marker.is_file():
        return None
    try:
        info = json.loads(marker.read_text())
        if info.get("for_pool") != pool.fingerprint():
            return None
        return WarmStart(load_model(init_dir, require_policy=True), dict(info["tasks"]), str(info["from_pool"]))
    except (ValueError, KeyError, TypeError, ModelError):
        return None  # a damaged copy: look at the checkpoints again


def previous_model(state_dir: Path, pool: Inventory) -> WarmStart | None:
    """The model the last run in `state_dir` trained for another version of `pool` (copied to `init/`), or the
    copy an interrupted incremental run of this version already made; None when there is neither."""
    state_dir = Path(state_dir)
    init_dir = state_dir / INIT_DIR
    kept = _load(init_dir, pool)
    if kept is not None:
        return kept
    ckpt = last_checkpoint(state_dir)
    if ckpt is None:
        return None
    _, src = ckpt
    try:
        state = LoopState.model_validate_json((src / STATE_FILE).read_text())
    except (OSError, ValueError):
        return None
    if not state.pool or state.pool == pool.fingerprint() or not state.tasks:
        return None  # same version (a rerun or a resume), or a state from before task signatures
    tmp = Path(tempfile.mkdtemp(prefix=".init-", dir=state_dir))
    try:
        for name in (COST_FILE, POLICY_FILE, CARD_FILE):
            shutil.copyfile(src / name, tmp / name)
        atomic_write_text(
            tmp / MARKER_FILE,
            json.dumps(
                {
                    "for_pool": pool.fingerprint(),
                    "from_pool": state.pool,
                    "model_version": state.model_version,
                    "tasks": state.tasks,
                },
                indent=2,
            )
            + "\n",
        )
        if init_dir.exists():
            shutil.rmtree(init_dir)
        tmp.rename(init_dir)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return _load(init_dir, pool)
