"""The command line's names for the library's settings: library errors and warnings name a setting
(`plan.refine_seconds`), never a flag, because the flows and the DVC stages show the same text; the CLI adds the
flag that sets it where it renders one (`with_flags`: "plan.refine_seconds (--refine-seconds)")."""

from __future__ import annotations

import re

#: A setting (or a request's field, as the library words it) and the `dreamshard` option that sets it.
SETTING_FLAGS: dict[str, str] = {
    "plan.verify_rounds": "--verify-rounds",
    "plan.verify_confidence": "--verify-confidence",
    "plan.verify": "--verify",
    "plan.refine_seconds": "--refine-seconds",
    "plan.stage_budget": "--stage-budget",
    "plan.calibrate_seconds": "--calibrate-seconds",
    "plan.types": "--types",
    "plan.samples": "--samples",
    "plan.risk": "--risk",
    "plan.max_move_fraction": "--max-move-fraction",
    "plan.num_devices": "--devices",
    "evaluate.rounds": "--rounds",
    "publish.allow_simulated": "--allow-simulated",
    "release.allow_simulated": "--allow-simulated",
    "publish.allow_proxy": "--allow-proxy",
    "publish.min_improvement": "--min-improvement",
    "the gate's own measurement": "--measure",
    "a comparison file": "--comparison",
    "the incumbent's file": "--current",
    "an inventory file": "-i",
    "the inventory name": "--inventory-name",
    "a forced re-plan": "--force",
    "a forced run": "--force",
    "dispatch the batches locally": "--dispatch local",
    "topology.memory_per_device_gb": "--memory-gb",
    "an incumbent plan": "--incumbent",
    "the publisher's added baselines": "--sharders",
    "the explanation": "--explain",
    "the searching sharder": "--sharder dreamshard",
}


def with_flags(message: str) -> str:
    """`message` with each setting it names followed, at its first mention, by the flag that sets it (a setting
    already followed by its flag is left alone)."""
    for setting, flag in SETTING_FLAGS.items():
        pattern = rf"(?<![\w.]){re.escape(setting)}(?![\w.])(?! \({re.escape(flag)}\))"
        message = re.sub(pattern, f"{setting} ({flag})", message, count=1)
    return message
