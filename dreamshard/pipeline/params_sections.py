"""A workspace's params.yaml topped up with the sections a newer stage graph reads (docs/operations/pipeline.md,
"Upgrading a workspace"): DVC refuses a stage whose `params:` names a section the file lacks ("Parameters 'world'
are missing"), so a workspace created before a section existed gets it, at its defaults, appended after what the
team wrote. Nothing the team wrote is changed; a file that is not a mapping is left to the stages to refuse."""

from __future__ import annotations

from typing import Any

import yaml

from dreamshard.parsing import load_yaml

HEADER = "# added by dreamshard: a section the stage graph reads, at its defaults (docs/operations/pipeline.md)"


def missing_sections(text: str, defaults: str) -> list[str]:
    """The top-level sections of `defaults` that `text` (a workspace's params.yaml) lacks, in the defaults' order;
    none when `text` does not read as a mapping."""
    return _missing(text, _mapping(defaults))


def topped_up(text: str, defaults: str) -> tuple[str, list[str]]:
    """`text` with every section it lacks appended at the defaults' values, and the sections' names."""
    wanted = _mapping(defaults)
    missing = _missing(text, wanted)
    if not missing:
        return text, []
    block = yaml.safe_dump({k: wanted[k] for k in missing}, sort_keys=False, default_flow_style=False)
    sep = "" if text.endswith("\n") or not text else "\n"
    return f"{text}{sep}\n{HEADER}\n{block}", missing


def _mapping(defaults: str) -> dict[str, Any]:
    """The pipeline's own params (installed with the package: a mapping, or nothing to add)."""
    wanted = load_yaml(defaults)
    return wanted if isinstance(wanted, dict) else {}


def _missing(text: str, wanted: dict[str, Any]) -> list[str]:
    """The keys of `wanted` that `text` lacks; none when `text` does not read as a mapping."""
    try:
        have = load_yaml(text)
    except (ValueError, yaml.YAMLError):  # refused by the stages themselves, in their own words
        return []
    return [k for k in wanted if k not in have] if isinstance(have, dict) else []
