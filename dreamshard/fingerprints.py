"""What the pipeline last did, by fingerprint: the last trained model and the last published plan.

The orchestrator compares the current inventory fingerprint (and the fingerprint of the training
parameters) with this state to decide what to re-run. The state is one small JSON file in the
pipeline workspace, written atomically.
"""

from __future__ import annotations

import hashlib
import json
from datetime import datetime
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from dreamshard.io import atomic_write_text
from dreamshard.types import utcnow

STATE_FILE = "pipeline-state.json"


def params_fingerprint(params: dict[str, Any], sections: tuple[str, ...]) -> str:
    """sha256 of the named params sections (canonical JSON), so a changed setting is a changed fingerprint."""
    chosen = {s: params.get(s) for s in sections}
    return hashlib.sha256(json.dumps(chosen, sort_keys=True, default=str).encode()).hexdigest()


class TrainedModelState(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    inventory_fingerprint: str
    params_fingerprint: str
    model_dir: str
    trained_at: datetime = Field(default_factory=utcnow)


class PublishedPlanState(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    inventory_fingerprint: str
    model_fingerprint: str  # params fingerprint of the model that planned it
    plan_id: str
    approved: bool
    uri: str | None = None
    reason: str = ""
    decided_at: datetime = Field(default_factory=utcnow)


class PipelineState(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    trained: TrainedModelState | None = None
    published: PublishedPlanState | None = None


def load_state(workspace: str | Path) -> PipelineState:
    path = Path(workspace) / STATE_FILE
    if not path.exists():
        return PipelineState()
    return PipelineState.model_validate_json(path.read_text())


def save_state(workspace: str | Path, state: PipelineState) -> Path:
    return atomic_write_text(Path(workspace) / STATE_FILE, state.model_dump_json(indent=2))


def needs_training(state: PipelineState, inventory_fp: str, params_fp: str) -> bool:
    """True when no model exists for this inventory and these training params."""
    t = state.trained
    return t is None or t.inventory_fingerprint != inventory_fp or t.params_fingerprint != params_fp or not Path(
        t.model_dir
    ).exists()


def needs_publishing(state: PipelineState, inventory_fp: str, params_fp: str) -> bool:
    """True when the last decided plan was not made for this inventory by this model."""
    p = state.published
    return p is None or p.inventory_fingerprint != inventory_fp or p.model_fingerprint != params_fp


def retire_stale_measurements(path: str | Path, inventory_fp: str) -> int:
    """Move records of other inventory fingerprints out of `path` into ``<stem>.<fp12>.jsonl`` next to it.

    A changed inventory must not train on the old inventory's measurements, while a resumed run for the
    same inventory keeps every record it already has. Returns how many records were moved.
    """
    from dreamshard.io import iter_measurements

    p = Path(path)
    if not p.exists():
        return 0
    keep: list[str] = []
    stale: dict[str, list[str]] = {}
    for m in iter_measurements(p):
        line = m.model_dump_json()
        if m.inventory_fingerprint == inventory_fp:
            keep.append(line)
        else:
            stale.setdefault(m.inventory_fingerprint, []).append(line)
    if not stale:
        return 0
    for fp, lines in stale.items():
        with open(p.with_name(f"{p.stem}.{fp[:12]}{p.suffix}"), "a") as f:
            f.write("".join(x + "\n" for x in lines))
    atomic_write_text(p, "".join(x + "\n" for x in keep))
    return sum(len(v) for v in stale.values())
