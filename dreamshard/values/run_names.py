"""How runs and steps are named where an orchestrator lists them (the Prefect UI): `<inventory>-<kind>-<version>`
(docs/operations/prefect.md, "Run names and live stage logs"). A name, not a value type: it lives here so the
light processes (a worker's batch run, `stop-prefect.sh`'s shutdown module) name runs without importing the use
cases."""

from __future__ import annotations

import re

#: Characters of a fingerprint in a run name (as `plans list` and the logs show versions).
VERSION_CHARS = 12
_HEX = re.compile(r"[0-9a-f]+")


def run_name(inventory: str, kind: str, version: str) -> str:
    """`<inventory>-<kind>-<version>`: how the runner names a run or a step. A version of hex digits (an inventory
    fingerprint) is cut to VERSION_CHARS; any other (a UTC minute, `20261207t1600`) is kept whole: cut, two runs of
    one ten-minute span had one name."""
    short = version[:VERSION_CHARS] if _HEX.fullmatch(version) else version
    return f"{inventory}-{kind}-{short}"
