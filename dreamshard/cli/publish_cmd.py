"""`dreamshard plans publish`: the gate decides on a plan file, and the store records the decision."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from dreamshard.cli.plans_common import EndpointOpt, ParamsOpt, StoreOpt, plans_settings
from dreamshard.cli.progress import lines_on_stderr
from dreamshard.cli.publication_view import finish, publication_json, show_publication
from dreamshard.cli.review import terminal_reviewer
from dreamshard.documents import load_inventory, load_plan
from dreamshard.lazy import lazy_module

# the use case imports torch: it loads when the command runs (dreamshard/lazy.py)
if TYPE_CHECKING:  # pragma: no cover
    from dreamshard.usecases import publish as publish_uc
else:
    publish_uc = lazy_module("dreamshard.usecases.publish")


def publish_cmd(
    plan_file: Annotated[Path, typer.Argument(help="Plan JSON/YAML to gate and publish.")],
    store: StoreOpt = None,
    comparison: Annotated[
        Path | None,
        typer.Option(
            "--comparison",
            "--baselines",
            help="Comparison holding this plan and the baselines, measured interleaved "
            "(`dreamshard compare --plan PLAN --out FILE`, or the pipeline's data/comparison.json).",
        ),
    ] = None,
    measure: Annotated[
        bool, typer.Option("--measure", help="The gate measures the plan and the baselines itself (trusts no file).")
    ] = False,
    min_improvement: Annotated[
        float | None,
        typer.Option(
            "--min-improvement",
            min=0.0,
            max=0.999999,
            help="Fraction the plan must beat the best baseline by (default: params).",
        ),
    ] = None,
    params: ParamsOpt = None,
    endpoint: EndpointOpt = None,
    inventory: Annotated[
        Path | None,
        typer.Option(
            "--inventory",
            "-i",
            help="The plan's inventory (default: the version pushed to the store with this fingerprint).",
        ),
    ] = None,
    backend: Annotated[
        str | None,
        typer.Option(
            "--backend",
            help="--measure: cpu, cuda or simulator (default: params profile.backend); "
            "--comparison: the backend it must have been measured on.",
        ),
    ] = None,
    sharders: Annotated[
        str | None,
        typer.Option(
            "--sharders",
            help="Baselines to add to params publish.baselines (a comma list, "
            "'heuristics' or 'all'); the required ones are never removed.",
        ),
    ] = None,
    rounds: Annotated[
        int | None,
        typer.Option(
            "--rounds",
            min=1,
            max=100,
            help="--measure: interleaved rounds (default: params evaluate.rounds; at least publish.min_rounds).",
        ),
    ] = None,
    allow_simulated: Annotated[
        bool,
        typer.Option(
            "--allow-simulated",
            help="Let a plan whose costs come from the simulator become current (params publish.allow_simulated).",
        ),
    ] = False,
    allow_proxy: Annotated[
        bool,
        typer.Option(
            "--allow-proxy",
            help="Gate a plan for other devices (cuda) on this backend's timings (cpu), labelled PROXY: UVM tables "
            "timed with the fused kernel (params publish.allow_proxy).",
        ),
    ] = False,
    model: Annotated[
        Path | None,
        typer.Option(
            "--model",
            help="The model that made the plan: its out-of-range check is added to the plan's (never cleared).",
        ),
    ] = None,
    seed: Annotated[
        int | None,
        typer.Option("--seed", min=0, max=2**32 - 1, help="Seed of the `random` baseline (params profile.seed)."),
    ] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print what happened as JSON (the diff against the current plan included).")
    ] = False,
) -> None:
    """Verify a plan against its inventory and a comparison, run the gate; publish if approved (exit 0), else keep
    it as rejected, equivalent or inconclusive (exit 1: the current plan stays; when the current plan cannot stay,
    for another schema or a constraint it breaks, an equivalent or inconclusive plan becomes current, and for a
    rejected one the fallback: the current plan extended, else the best measured baseline). With
    publish.require_human a reviewer answers first (at this terminal); with none to answer the change waits (exit
    3; `dreamshard plans approve PLAN_ID`). A plan or comparison that does not check out is an error (exit 2),
    nothing stored. A plan id already decided for this inventory version keeps its decision."""
    settings = plans_settings(
        params,
        {
            "publish.min_improvement": min_improvement,
            "evaluate.rounds": rounds,
            "profile.backend": backend if measure else None,
            "profile.seed": seed,
            "publish.allow_simulated": True if allow_simulated else None,
            "publish.allow_proxy": True if allow_proxy else None,
        },
    )
    compared, source = publish_uc.read_comparison(comparison) if comparison is not None else (None, "comparison")
    request = publish_uc.PublishRequest(
        settings=settings,
        plan=load_plan(plan_file),
        comparison=compared,
        comparison_source=source,
        measure=measure,
        baseline_spec=sharders,
        inventory=load_inventory(inventory) if inventory is not None else None,
        model=model,
        backend=None if measure else backend,
        store=store,
        endpoint_url=endpoint,
    )
    with lines_on_stderr("gate") as progress:
        done = publish_uc.publish(request.model_copy(update={"progress": progress}), terminal_reviewer())
    if as_json:
        typer.echo(publication_json(done))
    else:
        show_publication(done)
    finish(done)
