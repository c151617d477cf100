"""`dreamshard release` (the end of `make pretrain`): the release gate for a new packaged model (section
`release`; dreamshard.release). The candidate replaces the shipped model only when the gate releases it;
otherwise the shipped model's directory stays byte-identical and the report lands beside the candidate."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from dreamshard.errors import ConfigError
from dreamshard.learning.model_store import load_card, load_model
from dreamshard.release.bench import TaskResult, run_bench
from dreamshard.release.promote import promote, shipped_directory, unwritable, write_report
from dreamshard.release.report import ReleaseReport, decide
from dreamshard.usecases.base import Request, Result
from dreamshard.values.model_files import has_model


class ReleaseRequest(Request):
    candidate: Path  # the new model's directory (what `pretrain --out` wrote)
    into: Path  # the shipped model's directory (dreamshard/pretrained)


class ReleaseResult(Result):
    report: ReleaseReport
    report_path: Path


def _check(request: ReleaseRequest) -> None:
    """Everything a release needs, before anything is measured (each refusal one line): a backend that measures
    (the simulator only with release.allow_simulated), a candidate that loads with every file's checksum on its
    card, and a shipped directory (or the one a link names) that can be replaced."""
    settings = request.settings
    if settings.profile.backend == "simulator" and not settings.release.allow_simulated:
        raise ConfigError(
            "release: profile.backend is simulator: a model released on the simulator's costs would ship untested "
            "on hardware; measure on cpu or cuda, or set release.allow_simulated (tests and scale studies only)"
        )
    if not has_model(request.candidate):
        raise ConfigError(f"release: {request.candidate} holds no model (no model.json); run `dreamshard pretrain`")
    if request.into.exists() and not request.into.is_dir():
        raise ConfigError(f"release: --into {request.into} is not a directory; give the shipped model's directory")
    try:
        target = shipped_directory(request.into)
    except (OSError, RuntimeError) as e:  # a link loop
        raise ConfigError(f"release: --into {request.into} cannot be followed ({e})") from None
    if request.candidate.resolve() == target.resolve():
        raise ConfigError(f"release: the candidate and the shipped model are the same directory ({request.into})")
    why = unwritable(target)
    if why is not None:
        raise ConfigError(f"release: --into {request.into} cannot be replaced: {why}; nothing was measured")
    load_model(request.candidate)  # a candidate that does not load is refused before anything is measured
    if has_model(request.into):
        load_model(request.into, require_policy=False)


def run_release(request: ReleaseRequest, done: Callable[[TaskResult], None] = lambda _r: None) -> ReleaseResult:
    """Bench the candidate against the shipped model and the heuristics; release or refuse (module docstring)."""
    _check(request)
    shipped = request.into if has_model(request.into) else None
    settings = request.settings
    oracle = settings.oracle()
    try:
        results = run_bench(
            settings.release, oracle, request.candidate, shipped, settings.topology.batch_size, done=done
        )  # fmt: skip
        backend = oracle.backend_info(settings.topology.batch_size)
    finally:
        oracle.close()
    report = decide(
        results,
        settings.release,
        load_card(request.candidate).version,
        load_card(shipped).version if shipped is not None else None,
        backend,
    )
    path = (
        promote(request.candidate, request.into, report) if report.released else write_report(request.candidate, report)
    )
    return ReleaseResult(report=report, report_path=path)
