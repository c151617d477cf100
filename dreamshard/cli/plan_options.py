"""The options of `dreamshard plan` that no other command takes, grouped in `--help`: the search (sharders that
search: `dreamshard`), measuring its candidates, and what the command writes and prints."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from dreamshard.cli.options import MEASURING

SEARCH = "Search"
OUTPUT = "Output"

SharderOpt = Annotated[str, typer.Option("--sharder", "-s", help="Sharder name (see `dreamshard sharders`).")]
OutOpt = Annotated[Path, typer.Option("--out", "-o", rich_help_panel=OUTPUT, help="Plan JSON to write.")]
SamplesOpt = Annotated[
    int | None,
    typer.Option(
        "--samples",
        min=0,
        max=4096,
        rich_help_panel=SEARCH,
        help="Learned sharders: sampled policy rollouts besides the argmax (plan.samples; default 4).",
    ),
]
RiskOpt = Annotated[
    float | None,
    typer.Option(
        "--risk",
        min=0.0,
        max=10.0,
        rich_help_panel=SEARCH,
        help="Learned sharders: plan on ensemble mean + RISK x spread (plan.risk; default 1).",
    ),
]
TypesOpt = Annotated[
    str | None,
    typer.Option(
        "--types",
        rich_help_panel=SEARCH,
        help="dreamshard: sharding types a whole table may also get, comma-separated: row_wise, table_row_wise, "
        "data_parallel (plan.types; default none).",
    ),
]
IncumbentOpt = Annotated[
    Path | None,
    typer.Option(
        "--incumbent",
        rich_help_panel=SEARCH,
        help="dreamshard: the plan the job runs now (a plan, or a `plans incumbent` file): the search starts "
        "from it, and the new plan's moves against it are shown.",
    ),
]
VerifyOpt = Annotated[
    int | None,
    typer.Option(
        "--verify",
        min=0,
        max=64,
        rich_help_panel=MEASURING,
        help="dreamshard: race the search-only plan, the K best candidates, every heuristic's plan and TorchRec's on "
        "--backend and keep the best measured (plan.verify; default 0).",
    ),
]
VerifyRoundsOpt = Annotated[
    int | None,
    typer.Option(
        "--verify-rounds",
        min=1,
        max=100,
        rich_help_panel=MEASURING,
        help="Interleaved rounds of the race at most; a contender behind the leader beyond the noise is dropped "
        "(plan.verify_rounds; default 5).",
    ),
]
VerifyConfidenceOpt = Annotated[
    float | None,
    typer.Option(
        "--verify-confidence",
        min=0.5,
        max=0.9999,
        rich_help_panel=MEASURING,
        help="With --verify and --incumbent: the confidence a challenger's straight wins must give before it "
        "replaces the current plan (plan.verify_confidence; default 0.95).",
    ),
]
CalibrateSecondsOpt = Annotated[
    float | None,
    typer.Option(
        "--calibrate-seconds",
        min=0.0,
        max=600.0,
        rich_help_panel=MEASURING,
        help="dreamshard: before searching, measure groups of the inventory's tables on --backend for this long and "
        "correct the cost model for them (plan.calibrate_seconds; default 0 = off).",
    ),
]
MaxMoveFractionOpt = Annotated[
    float | None,
    typer.Option(
        "--max-move-fraction",
        min=0.0,
        max=1.0,
        rich_help_panel=MEASURING,
        help="With --incumbent (a re-plan): move at most this share of the current plan's tables; every move is "
        "charged its state's transfer over publish.move_horizon_steps (plan.max_move_fraction; default 1.0 = any).",
    ),
]
RefineSecondsOpt = Annotated[
    float | None,
    typer.Option(
        "--refine-seconds",
        min=0.0,
        max=86_400.0,
        rich_help_panel=MEASURING,
        help="dreamshard: refine the kept plan on --backend for at most this long (and what --stage-budget leaves), "
        "keeping only moves confirmed beyond the noise (plan.refine_seconds; default 0 = off).",
    ),
]
StageBudgetOpt = Annotated[
    float | None,
    typer.Option(
        "--stage-budget",
        min=0.0,
        max=1000.0,
        rich_help_panel=MEASURING,
        help="dreamshard: the whole plan takes at most this many times the search alone; the race measures every "
        "contender once whatever it says (plan.stage_budget; default 3; 0 = no budget).",
    ),
]
ExplainOpt = Annotated[
    bool,
    typer.Option(
        "--explain",
        rich_help_panel=OUTPUT,
        help="dreamshard: print the search's scored candidates and, per device, why its units are there.",
    ),
]
StatsOpt = Annotated[
    bool,
    typer.Option(
        "--stats",
        rich_help_panel=OUTPUT,
        help="Print the stats report: each unit's share of its device, what sets the maximum, imbalance, "
        "input/output MB per device.",
    ),
]
PlanJsonOpt = Annotated[
    bool,
    typer.Option(
        "--json",
        rich_help_panel=OUTPUT,
        help="Print the plan's devices (and the reports asked for) as JSON instead of tables.",
    ),
]
TorchrecOutOpt = Annotated[
    Path | None,
    typer.Option(
        "--torchrec-out",
        rich_help_panel=OUTPUT,
        help="Also write TorchRec's plan file (dreamshard.integrations.torchrec.load_sharding_plan reads it).",
    ),
]
TorchrecKernelOpt = Annotated[
    str,
    typer.Option(
        "--torchrec-kernel",
        rich_help_panel=OUTPUT,
        help="Compute kernel in the TorchRec file: fused or dense (cuda also: fused_uvm, fused_uvm_caching).",
    ),
]


def types_override(types: str | None) -> list[str] | None:
    """--types as the plan.types list (None: not given)."""
    return [t.strip() for t in types.split(",") if t.strip()] if types is not None else None


def searching_options(**given: object) -> tuple[str, ...]:
    """The search settings the user gave (`plan.verify` for verify=3), each an error unless the sharder searches; the
    incumbent is the request's, not a setting."""
    return tuple(
        "an incumbent plan" if name == "incumbent" else f"plan.{name}" for name, value in given.items() if value
    )
