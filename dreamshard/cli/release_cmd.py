"""`dreamshard release CANDIDATE --into DIR`: the release gate for a new packaged model (dreamshard.usecases.release;
`make pretrain` ends with it). Exit 0: released into DIR; exit 1: refused, DIR byte-identical."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.progress import Progress

from dreamshard.cli.options import BackendOverride, ParamsOpt
from dreamshard.config.settings import resolve
from dreamshard.lazy import lazy_module

if TYPE_CHECKING:  # pragma: no cover
    from dreamshard.usecases import release as release_uc
else:
    release_uc = lazy_module("dreamshard.usecases.release")

console = Console(highlight=False, soft_wrap=True)
err_console = Console(stderr=True, highlight=False, soft_wrap=True)


def release(
    candidate: Annotated[Path, typer.Argument(help="The new model's directory (what `pretrain --out` wrote).")],
    into: Annotated[Path, typer.Option("--into", help="The shipped model's directory, replaced if released.")] = Path(
        "dreamshard/pretrained"
    ),
    params: ParamsOpt = None,
    backend: BackendOverride = None,
    allow_simulated: Annotated[
        bool,
        typer.Option(
            "--allow-simulated",
            help="Let the simulator's costs decide a release (params release.allow_simulated; tests and scale "
            "studies, never the shipped model).",
        ),
    ] = False,
    progress: Annotated[bool, typer.Option("--progress/--no-progress", help="Show a progress bar.")] = True,
) -> None:
    """Bench a new model against the shipped one and the heuristics on held-out families (params `release`); it
    replaces the shipped model only if the paired bootstrap's upper ends are within the bounds."""
    request = release_uc.ReleaseRequest(
        settings=resolve(
            params, {"profile.backend": backend, "release.allow_simulated": True if allow_simulated else None}
        ),
        candidate=candidate,
        into=into,
    )
    total = len(request.settings.release.tasks)
    with Progress(console=console, disable=not (progress and console.is_terminal), transient=True) as bar:
        job = bar.add_task("release bench", total=total)
        result = release_uc.run_release(request, done=lambda r: bar.update(job, advance=1, description=r.label))
    for r in result.report.tasks:
        console.print(f"{r.label}: best heuristic {r.best_heuristic} {r.median(r.best_heuristic):.2f} ms", markup=False)
    line = f"{result.report.summary()}; report {result.report_path}"
    if not result.report.released:
        err_console.print(f"{line}; {request.into} unchanged", markup=False)
        raise typer.Exit(1)
    console.print(line, markup=False)


def register(app: typer.Typer) -> None:
    """Add this module's commands to the main app."""
    app.command("release")(release)
