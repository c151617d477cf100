"""Why a plan is as it is: its stats report (`stats`), what-if changes (`whatif`) and each unit's reason
(`reasons`) (docs/architecture/learning.md, "Plan stats and what-if")."""
