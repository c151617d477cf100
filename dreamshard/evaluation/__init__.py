"""Evaluation: measure plans and compare sharders (docs/architecture/measuring.md, "Measuring"); rendering lives in
dreamshard.evaluation.render."""

from dreamshard.lazy import lazy_exports

# each submodule is imported when one of its names is first used (dreamshard/lazy.py)
__getattr__, __dir__, _LAZY = lazy_exports(
    __name__,
    {
        ".compare": (
            "BASELINE_SHARDERS",
            "Comparison",
            "LowerBound",
            "SharderResult",
            "check_plan_for",
            "compare_sharders",
            "evaluate_plan",
            "load_comparison",
            "measure_lower_bound",
            "median_costs",
            "validate_sharders",
        ),
        ".bounds": ("lower_bound",),
        ".report": ("plot_rows", "write_comparison_outputs"),
        ".render": (
            "device_rows",
            "comparison_markdown",
            "comparison_table",
            "device_table",
            "device_table_markdown",
            "plot_comparison",
            "plot_comparison_png",
        ),
    },
)

__all__ = [*_LAZY]
