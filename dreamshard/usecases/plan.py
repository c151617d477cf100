"""A plan from a sharder: the `plan` stage and `dreamshard plan` (docs/architecture.md, "Learning").

Settings used: topology (device template), plan (devices, search, verify), profile (the backend `--verify`
measures on). The result carries the plan, the search's scored candidates (sharders that search), and the
warnings the user must see (out of the model's ranges, a model learned from simulated costs).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dreamshard.config.settings import Settings, model_dir
from dreamshard.documents import check_outputs, load_inventory, save_plan
from dreamshard.errors import ConfigError, InputFileError
from dreamshard.evaluation import validate_sharders
from dreamshard.integrations.torchrec_file import check_kernel, save_torchrec_plan, torchrec_document
from dreamshard.measured.refine import refine_plan
from dreamshard.profiling.corpus import DeviceCorpus
from dreamshard.search.candidates import SearchResult
from dreamshard.search.sharders import ModelSharder
from dreamshard.sharders import accepted_options, get_sharder, options_for
from dreamshard.usecases.base import Request, Result
from dreamshard.values import Plan

#: The sharder that searches (and can verify its best candidates by measuring them).
SEARCHING_SHARDER = "dreamshard"
CORPUS_WRITER = "refine"  # this use case's file in the measurement corpus


class PlanRequest(Request):
    inventory: Path
    out: Path | None = None
    sharder: str = SEARCHING_SHARDER
    model: Path | None = None  # model dir of the learned sharders (default: settings.model_dir's lookup)
    seed: int = 0
    torchrec_out: Path | None = None
    torchrec_kernel: str = "fused"
    corpus: Path | None = None  # refinement's device timings are added to this measurement corpus
    incumbent: Plan | None = None  # the plan now current: adapted to this inventory, a search candidate (`current`)


class PlanResult(Result):
    plan: Plan
    search: SearchResult | None = None  # the scored candidates, for sharders that search


def sharder_options(name: str, settings: Settings, model: Path | None, seed: int) -> dict[str, Any]:
    """The options sharder `name` is built with from the settings: the seed, and for the learned sharders the
    model, the search and its samples and risk (each sharder gets those it takes: `options_for`)."""
    shared: dict[str, Any] = {
        "seed": seed,
        "samples": settings.plan.samples,
        "risk": settings.plan.risk,
        "search": settings.plan.search(seed),
    }
    if "model_dir" in accepted_options(name) and (found := model_dir(model)) is not None:
        shared["model_dir"] = found
    return options_for(name, shared)


def run(request: PlanRequest) -> PlanResult:
    s = request.settings
    (name,) = validate_sharders([request.sharder])
    kernel = check_kernel(request.torchrec_kernel, s.topology.device_type)
    check_outputs(
        {"--inventory": request.inventory, "--model": request.model, "--params": s.source},
        {"--out": request.out, "--torchrec-out": request.torchrec_out},
    )
    if request.torchrec_out is not None and request.torchrec_out.is_dir():
        raise InputFileError(f"cannot write {request.torchrec_out}: it is a directory")
    inv = load_inventory(request.inventory)
    topo = s.topology_for()
    verify = s.plan.verify if name == SEARCHING_SHARDER else 0
    refine = s.plan.refine_seconds if name == SEARCHING_SHARDER else 0.0
    corpus = DeviceCorpus(request.corpus, CORPUS_WRITER, reuse=False) if request.corpus is not None else None
    oracle = s.oracle() if verify or refine else None
    if oracle is not None:
        oracle.corpus = corpus  # fresh timings only (never read back), recorded as training data
    extra: dict[str, Any] = (
        {
            "verify": verify,
            "verify_rounds": s.plan.verify_rounds,
            "oracle": oracle,
            "verify_anchors": s.plan.verify_anchors,
            "verify_confidence": s.plan.verify_confidence,
        }
        if verify
        else {}
    )
    if request.incumbent is not None:
        require_searching(name, "--incumbent")
        extra["incumbent"] = request.incumbent
    sharder = get_sharder(name, **sharder_options(name, s, request.model, request.seed), **extra)
    searched: SearchResult | None = None
    warnings: list[str] = []
    try:
        if isinstance(sharder, ModelSharder):  # the learned sharders report their model, search and warnings
            report = sharder.shard_with_report(inv, topo)
            plan, searched, warnings = report.plan, report.search, list(report.warnings)
            if refine and oracle is not None:
                plan = refine_plan(
                    inv,
                    plan,
                    sharder.planning_cost(topo),
                    oracle,
                    refine,
                    s.plan.refine_rounds,
                    request.seed,
                    confirm=s.plan.refine_confirm_rounds,
                )
        else:
            plan = sharder.shard(inv, topo)
    finally:
        if oracle is not None:
            oracle.close()
    if plan.out_of_range:
        warnings.append(
            f"plan {plan.plan_id} records its out-of-range inputs: the publish gate will want a measured comparison"
        )
    torchrec_doc = torchrec_document(plan, inv, kernel) if request.torchrec_out is not None else None
    if request.out is not None:
        save_plan(plan, request.out)
    if request.torchrec_out is not None and torchrec_doc is not None:
        save_torchrec_plan(torchrec_doc, request.torchrec_out)
    return PlanResult(plan=plan, search=searched, warnings=warnings)


def require_searching(name: str, what: str) -> None:
    """`--verify` / `--explain` given for a sharder that does not search: an error naming both."""
    if name != SEARCHING_SHARDER:
        raise ConfigError(
            f"{what} needs --sharder {SEARCHING_SHARDER} (it acts on the search's candidates), not '{name}'"
        )
