"""The publish gate: verifies a plan, then approves it only if it beats every required baseline by a margin
beyond the measurement noise (docs/architecture/gate.md, "The publish gate").

* what the gate decides is a value, `dreamshard.values.GateDecision`; its rules are the `publish` section
  (`dreamshard.config.publish`);
* `trust`: who decides each field of a plan file (`trusted_plan`, `bound_to_inventory`, `check_topology`);
* `decide`: `gate_plan` / `measure_and_gate`;
* `checks`: the plan against its inventory, a comparison's contenders, baselines (recomputed) and figures;
* `rule`: the decision rule on verified figures (`evaluate_gate`); `bounds`: the bound on plan / baseline;
* `publish_policy`: what a decision means given what the store's current plan can serve (`publish_verdict`);
* `fallback`: a rejected plan for a version nothing current can serve: the best measured baseline instead.
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
        ".current": ("CURRENT", "current_contender", "current_samples", "serving_contender"),
        ".decide": ("gate_plan", "measure_and_gate", "required_baselines"),
        ".fallback": ("fallback_plan",),
        ".publish_policy": (
            "CurrentPlan",
            "PolicyOutcome",
            "PublishVerdict",
            "cannot_serve",
            "current_plan",
            "publish_verdict",
        ),
        ".rule": ("MAX_MS", "evaluate_gate"),
        ".bounds": ("RatioBound", "ratio_bound"),
        ".trust": (
            "PLAN_FIELD_AUTHORITY",
            "UNTRUSTED_FIELDS",
            "bound_to_inventory",
            "check_topology",
            "check_trust_table",
            "trusted_plan",
        ),
        ".checks": ("Verified", "baseline_plan", "verify_comparison", "verify_plan"),
    },
)

__all__ = [*_LAZY]
