"""The publish gate: verifies a plan, then approves it only if it beats every required baseline by a margin
beyond the measurement noise (docs/architecture/gate.md, "The publish gate").

* what the gate decides is a value, `dreamshard.values.GateDecision`; its rules are the `publish` section
  (`dreamshard.config.publish`);
* `trust`: who decides each field of a plan file (`trust_plan` makes the `TrustedPlan` every step below takes);
* `incumbent`: what the store's current plan is for the version (serves it, its extension, or why not);
* `decide`: `gate_plan` / `measure_and_gate`, every contender charged its moves (`moves`), the baselines that
  cannot honour a constraint shown beside (`references`);
* `checks`: the plan against its inventory, a comparison's contenders, baselines (recomputed) and figures;
* `rule`: the decision rule on verified figures (`evaluate_gate`); `bounds`: the bound on plan / baseline;
* `publish_policy`: what a decision means for the store's current plan (`publish_verdict`): constraints first;
* `fallback`: what becomes current when the plan does not and the current plan cannot stay.
"""

from dreamshard.lazy import lazy_exports

# each submodule is imported when one of its names is first used (dreamshard/lazy.py)
__getattr__, __dir__, _LAZY = lazy_exports(
    __name__,
    {
        "dreamshard.config.publish": (
            "ALWAYS_REQUIRED",
            "GATE_BASELINES",
            "PublishConfig",
            "check_baselines",
            "check_margin",
        ),
        ".current": ("current_samples",),
        ".decide": ("JUDGED", "Judgement", "gate_plan", "measure_and_gate", "required_baselines"),
        ".incumbent": ("CURRENT", "INCUMBENT_LABELS", "Incumbent", "current_contender", "incumbent_for"),
        ".fallback": ("fallback_plan",),
        ".moves": ("MoveCharge", "move_charges"),
        ".references": ("baseline_references",),
        ".publish_policy": ("PublishVerdict", "publish_verdict"),
        ".rule": ("MAX_MS", "evaluate_gate"),
        ".bounds": ("RatioBound", "ratio_bound"),
        ".trust": (
            "PLAN_FIELD_AUTHORITY",
            "UNTRUSTED_FIELDS",
            "TrustedPlan",
            "bound_to_inventory",
            "check_topology",
            "check_trust_table",
            "trust_plan",
            "trusted_plan",
        ),
        ".checks": ("Verified", "baseline_plan", "check_backend", "verify_comparison", "verify_plan"),
    },
)

__all__ = [*_LAZY]
