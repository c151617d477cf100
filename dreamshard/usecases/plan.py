"""A plan from a sharder: the `plan` stage and `dreamshard plan` (docs/architecture/learning.md, "Learning").

Settings used: topology (device template), plan (devices, search, verify), profile (the backend `--verify`
measures on). The request holds the inventory and the incumbent as values: reading and writing files is the
door's (`dreamshard plan`, the replan use case plans in memory). The result carries the plan, the search's scored
candidates (sharders that search), the TorchRec plan document when asked for, and the warnings the user must see
(out of the model's ranges, a model learned from simulated costs).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import Field

from dreamshard.config.settings import Settings, model_dir
from dreamshard.errors import ConfigError
from dreamshard.evaluation import validate_sharders
from dreamshard.integrations.torchrec_file import TorchRecPlanFile, check_kernel, torchrec_document
from dreamshard.measured.steps import MeasuredStep, measured_steps
from dreamshard.pipeline.incumbent import load_incumbent
from dreamshard.placement.diff import PlanDiff, plan_diff
from dreamshard.profiling.corpus import DeviceCorpus
from dreamshard.profiling.world import charged_world
from dreamshard.search.model_sharder import ModelSharder
from dreamshard.sharders import accepted_options, get_sharder, options_for
from dreamshard.usecases.base import Request, Result
from dreamshard.usecases.explain import reasons_of, stats_of
from dreamshard.values import Inventory, Plan
from dreamshard.values.progress import Progress
from dreamshard.values.reports import PlanStats, UnitReason
from dreamshard.values.search_result import SearchResult

#: The sharder that searches (and can verify its best candidates by measuring them).
SEARCHING_SHARDER = "dreamshard"
CORPUS_WRITER = "refine"  # this use case's file in the measurement corpus


class PlanRequest(Request):
    inventory: Inventory
    sharder: str = SEARCHING_SHARDER
    model: Path | None = None  # model dir of the learned sharders (default: settings.model_dir's lookup)
    seed: int = 0
    torchrec_kernel: str | None = None  # the TorchRec plan document's compute kernel; None: no document
    corpus: Path | None = None  # refinement's device timings are added to this measurement corpus
    incumbent: Plan | None = None  # the plan now current: adapted to this inventory, a search candidate (`current`)
    searching_options: tuple[str, ...] = ()  # options given that act on the search (`--verify`): the sharder must
    explain: bool = False  # why each unit is on its device (sharders that search)
    stats: bool = False  # the stats report of the plan
    # the progress hook (dreamshard.values.progress): a line per measurement of the searching sharder's measured
    # steps ("verify: round 2/3: measuring dreamshard"); the doors make it a status line, stderr lines or log lines
    progress: Progress | None = Field(default=None, exclude=True)

    def measuring(self) -> str:
        """What planning measures on the backend, in words ("" when it measures nothing): the door's progress."""
        if self.sharder != SEARCHING_SHARDER:
            return ""
        p = self.settings.plan
        doing = ([f"racing the {p.verify} best candidates and the baselines"] if p.verify else []) + (
            [f"refining for up to {p.refine_seconds:g} s"] if p.refine_seconds else []
        )
        return f"{' then '.join(doing)} on {self.settings.profile.backend}" if doing else ""


class PlanResult(Result):
    plan: Plan
    search: SearchResult | None = None  # the scored candidates, for sharders that search
    inventory: Inventory | None = None  # the inventory planned (its memory breakdown is the door's to show)
    incumbent: Plan | None = None  # the incumbent the search started from
    diff: PlanDiff | None = None  # the plan against the incumbent: what a training job would reshard
    reasons: list[list[UnitReason]] | None = None  # `explain`: per device, why each unit is there
    stats: PlanStats | None = None  # `stats`: the stats report
    torchrec: TorchRecPlanFile | None = None  # the TorchRec plan document (`torchrec_kernel` given)


def sharder_options(name: str, settings: Settings, model: Path | None, seed: int) -> dict[str, Any]:
    """The options sharder `name` is built with from the settings: the seed, and for the learned sharders the
    model, the search and its samples and risk (each sharder gets those it takes: `options_for`)."""
    shared: dict[str, Any] = {
        "seed": seed,
        "samples": settings.plan.samples,
        "risk": settings.plan.risk,
        "search": settings.plan.search(seed),
        "unknown_skews": settings.plan.unknown_skews,
    }
    if "model_dir" in accepted_options(name) and (found := model_dir(model)) is not None:
        shared["model_dir"] = found
    return options_for(name, shared)


def _checked(request: PlanRequest, name: str) -> None:
    """Every option checked before anything is loaded or measured."""
    for option in request.searching_options:
        require_searching(name, option)
    if request.incumbent is not None:
        require_searching(name, "an incumbent plan")


def _measured_steps(settings: Settings) -> tuple[MeasuredStep, ...]:
    """The searching sharder's measured steps from the plan settings (dreamshard.measured.steps)."""
    p = settings.plan
    return measured_steps(
        verify=p.verify,
        verify_rounds=p.verify_rounds,
        verify_confidence=p.verify_confidence,
        calibrate_seconds=p.calibrate_seconds,
        refine_seconds=p.refine_seconds,
        refine_rounds=p.refine_rounds,
        refine_confirm_rounds=p.refine_confirm_rounds,
    )


def _shard(
    request: PlanRequest, name: str, inv: Inventory, incumbent: Plan | None
) -> tuple[Plan, SearchResult | None, list[str]]:
    """The plan of sharder `name`: for the searching one with its measured steps (calibrate, verify, refine)."""
    s = request.settings
    topo = s.topology_for_job(inv.job)  # the job the inventory records, unless the caller said otherwise
    steps = _measured_steps(s) if name == SEARCHING_SHARDER else ()
    corpus = DeviceCorpus(request.corpus, CORPUS_WRITER, reuse=False) if request.corpus is not None else None
    oracle = s.plan_stage_oracle() if steps else None
    if oracle is not None:
        oracle.corpus = corpus  # fresh timings only (never read back), recorded as training data
    extra: dict[str, Any] = {}
    if steps:
        extra = {"steps": steps, "oracle": oracle, "progress": request.progress, "stage_budget": s.plan.stage_budget}
    if incumbent is not None:
        horizon = s.plan.move_horizon_steps
        extra |= {
            "incumbent": incumbent,
            "move_horizon_steps": s.publish.move_horizon_steps if horizon is None else horizon,
            "max_move_fraction": s.plan.max_move_fraction,
        }
    sharder = get_sharder(name, **sharder_options(name, s, request.model, request.seed), **extra)
    try:
        if not isinstance(sharder, ModelSharder):
            return sharder.shard(inv, topo), None, []
        report = sharder.shard_with_report(inv, topo)  # the learned sharders report their search and warnings
        return report.plan, report.search, list(report.warnings)
    finally:
        if oracle is not None:
            oracle.close()


def run(request: PlanRequest) -> PlanResult:
    (name,) = validate_sharders([request.sharder])
    _checked(request, name)
    inv, incumbent = request.inventory, request.incumbent
    topology = request.settings.topology_for_job(inv.job)
    kernel = check_kernel(request.torchrec_kernel, topology.device_type) if request.torchrec_kernel else None
    plan, searched, warnings = _shard(request, name, inv, incumbent)
    if plan.world is None:  # a sharder that costs no exchange: the world it was planned for, as declared
        plan = plan.model_copy(update={"world": charged_world(plan.topology, None)})
    if plan.world is not None and plan.world.note:  # never silently on another world than the job's
        warnings.append(f"plan {plan.plan_id}: {plan.world.note}")
    if plan.out_of_range:
        warnings.append(
            f"plan {plan.plan_id} records its out-of-range inputs: the publish gate will want a measured comparison"
        )
    if request.explain and searched is None:
        warnings.append(f"the explanation is skipped: '{name}' does not search (the searching sharder does)")
    return PlanResult(
        plan=plan,
        search=searched,
        warnings=warnings,
        inventory=inv,
        incumbent=incumbent,
        diff=plan_diff(incumbent, plan, inv) if incumbent is not None else None,
        reasons=reasons_of(inv, plan, request.model) if request.explain and searched is not None else None,
        stats=stats_of(inv, plan, request.model) if request.stats else None,
        torchrec=torchrec_document(plan, inv, kernel) if kernel is not None else None,
    )


def read_incumbent(path: Path | None) -> Plan | None:
    """The plan an incumbent file (`plans incumbent`) holds: None without a file, or when it says no plan was
    current."""
    return load_incumbent(path) if path is not None else None


def require_searching(name: str, what: str) -> None:
    """A search setting (`plan.verify`, ...) or an incumbent given for a sharder that does not search: an error
    naming both (the CLI adds the flags: dreamshard.cli.flags)."""
    if name != SEARCHING_SHARDER:
        raise ConfigError(
            f"{what} needs the searching sharder '{SEARCHING_SHARDER}' (it acts on the search's candidates), "
            f"not '{name}'"
        )
