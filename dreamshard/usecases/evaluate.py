"""Measuring plans: one plan on the backend (`dreamshard evaluate`), and plans of several sharders measured
interleaved in one run (`dreamshard compare`, the `evaluate` stage: the plan vs every contender of the
`evaluate` section, on the plan's topology). Settings: profile (backend, repeats, seed), evaluate (contenders,
rounds), plan (samples of the learned contenders), topology."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from dreamshard.config.settings import Settings
from dreamshard.documents import check_outputs, load_inventory, load_plan, same_file, save_plan
from dreamshard.errors import ConfigError
from dreamshard.evaluation import compare_sharders, evaluate_plan, validate_sharders, write_comparison_outputs
from dreamshard.evaluation.compare import Comparison, contender_name
from dreamshard.gate.current import serving_contender
from dreamshard.gate.sequential import gate_rounds, stop_rule
from dreamshard.pipeline.incumbent import load_incumbent
from dreamshard.profiling.corpus import DeviceCorpus
from dreamshard.usecases.base import Request, Result
from dreamshard.usecases.explain import stats_of
from dreamshard.usecases.plan import sharder_options
from dreamshard.usecases.sharders import expand, heuristics
from dreamshard.values import BackendInfo, Inventory, Plan, Topology
from dreamshard.values.reports import PlanStats

CORPUS_WRITER = "evaluate"  # this use case's file in the measurement corpus (the lower bound's singles)


class MeasureRequest(Request):
    inventory: Path
    plan: Path
    out: Path | None = None  # the plan with its measured costs
    stats: bool = False  # the stats report (measured shares beside the learned model's predicted ones)
    model: Path | None = None  # the model whose learned cost predicts the stats (default: settings.model_dir's)


class MeasureResult(Result):
    plan: Plan
    backend: BackendInfo
    inventory: Inventory | None = None  # the plan's inventory (its memory breakdown is the door's to show)
    stats: PlanStats | None = None


def measure(request: MeasureRequest) -> MeasureResult:
    """One plan measured `evaluate.rounds` times on the profile backend (medians)."""
    check_outputs({"--inventory": request.inventory, "--plan": request.plan}, {"--out": request.out})
    inv = load_inventory(request.inventory)
    plan = load_plan(request.plan)
    oracle = request.settings.oracle()
    try:
        measured = evaluate_plan(inv, plan, oracle, rounds=request.settings.evaluate.rounds)
        info = oracle.info
    finally:
        oracle.close()
    if request.out is not None:
        save_plan(measured, request.out)
    stats = stats_of(inv, measured, request.model) if request.stats else None
    return MeasureResult(plan=measured, backend=info, inventory=inv, stats=stats)


class CompareOutputs(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    comparison: Path | None = None
    markdown: Path | None = None
    plot: Path | None = None
    plans_dir: Path | None = None
    summary: Path | None = None
    plot_data: Path | None = None


class CompareRequest(Request):
    inventory: Path
    sharders: tuple[str, ...] | None = None  # None: evaluate.sharders less the sharders of `plans`
    sharder_spec: str | None = None  # `--sharders`: a comma list, 'heuristics' or 'all' (wins over `sharders`)
    heuristics_by_default: bool = False  # no spec and no params file read: the heuristics
    plans: tuple[Path, ...] = ()  # plans measured beside the sharders' (the evaluate stage: data/plan.json)
    # an incumbent file (`plans incumbent`): the plan current now, measured as the contender `current` when it can
    # serve this inventory's job and places otherwise (the publish gate requires it then: gate.current)
    current: Path | None = None
    num_devices: int | None = None  # None with plans: the first plan's topology; else the job's (or the params')
    model: Path | None = None
    outputs: CompareOutputs = CompareOutputs()
    corpus: Path | None = None  # the lower bound's single-table timings from/to this corpus (contenders: always fresh)


class CompareResult(Result):
    comparison: Comparison


def contenders(settings: Settings, plans: list[Plan]) -> list[str]:
    """The evaluate section's contenders; a plan given stands for its own sharder (measured once, as itself)."""
    made = {p.sharder for p in plans}
    return [s for s in settings.evaluate.contenders() if s not in made]


def _output_paths(request: CompareRequest, names: list[str], extra: list[Plan]) -> dict[str, Path | None]:
    o = request.outputs
    outputs: dict[str, Path | None] = {
        "--out": o.comparison,
        "--markdown-out": o.markdown,
        "--plot-out": o.plot,
        "--summary-out": o.summary,
        "--plot-data-out": o.plot_data,
    }
    if o.plans_dir is not None:  # the names Comparison.label will give (a new plan's id is not known yet: fresh)
        made_by = [*names, *(p.sharder for p in extra)]
        outputs.update({f"--plans-dir ({n})": o.plans_dir / f"{n}.json" for n in names if made_by.count(n) == 1})
        outputs.update(
            {
                f"--plans-dir ({p.plan_id})": o.plans_dir
                / f"{contender_name(p.sharder, p.plan_id, made_by.count(p.sharder) > 1)}.json"
                for p in extra
            }
        )
    return outputs


def _plan_option(i: int, paths: Sequence[Path]) -> str:
    return f"--plan #{i + 1} ({paths[i]})" if len(paths) > 1 else f"--plan ({paths[i]})"


def check_distinct_plans(paths: Sequence[Path], plans: Sequence[Plan] | None = None) -> None:
    """ConfigError unless every `--plan` is a different plan: not the same file (path, link), not the same bytes,
    and (once loaded, `plans`) not the same plan id or contender label. A plan measured twice would make a
    comparison that lists one plan twice, which the publish gate rightly refuses as forged."""
    contents: dict[bytes, int] = {}
    for i, path in enumerate(paths):
        for j in range(i):
            if same_file(path, paths[j]):
                raise ConfigError(
                    f"{_plan_option(i, paths)} is the same file as {_plan_option(j, paths)}; give each plan once"
                )
        try:
            data = path.read_bytes() if path.is_file() else None
        except OSError:
            data = None  # load_plan says why
        if data is not None and (j := contents.setdefault(data, i)) != i:
            raise ConfigError(
                f"{_plan_option(i, paths)} has the same content as {_plan_option(j, paths)}; give each plan once"
            )
    if plans is None:
        return
    ids: dict[str, int] = {}
    labels: dict[str, int] = {}
    for i, plan in enumerate(plans):
        j = ids.setdefault(plan.plan_id, i)
        j = j if j != i else labels.setdefault(contender_name(plan.sharder, plan.plan_id, True), i)
        if j != i:
            raise ConfigError(
                f"{_plan_option(i, paths)} and {_plan_option(j, paths)} both hold plan "
                f"{plan.plan_id} ({plan.sharder}); give each plan once"
            )


def _names(request: CompareRequest, extra: list[Plan]) -> list[str]:
    """The sharders whose plans are measured: the spec, else the names given, else the heuristics (without a params
    file, when asked) or the evaluate section's contenders."""
    if request.sharder_spec is not None:
        return expand(request.sharder_spec)
    if request.sharders is not None:
        return validate_sharders(list(request.sharders))
    if request.heuristics_by_default and request.settings.source is None:
        return validate_sharders(heuristics())
    return validate_sharders(contenders(request.settings, extra))


def _topology(request: CompareRequest, inv: Inventory, plans: list[Plan]) -> Topology:
    """What the contenders are measured on: the first plan's topology, else `num_devices`, else the job the inventory
    records (unless the caller said otherwise: dreamshard.config.job)."""
    s = request.settings
    if plans and request.num_devices is None:
        return plans[0].topology
    if request.num_devices is not None:  # told: as --devices
        plan = s.plan.model_copy(update={"num_devices": request.num_devices})
        s = s.model_copy(update={"plan": plan, "told": s.told | {"plan.num_devices"}})
    return s.topology_for_job(inv.job)


def current_rival(path: Path | None, inv: Inventory, topology: Topology, plans: Sequence[Plan]) -> Plan | None:
    """The incumbent file's plan as the contender `current` (`gate.current.serving_contender`); None when the file
    says none was current, the plan cannot serve this job, or one of `plans` places as it does."""
    current = load_incumbent(path) if path is not None else None
    if current is None or any(p.units() == current.units() for p in plans):
        return None
    return serving_contender(current, inv, topology)


def run(request: CompareRequest, progress: Callable[[str], None] | None = None) -> CompareResult:
    s = request.settings
    check_distinct_plans(request.plans)  # one line before anything is loaded, planned or measured
    extra = [load_plan(p) for p in request.plans]
    check_distinct_plans(request.plans, extra)
    names = _names(request, extra)
    inputs = {
        "--inventory": request.inventory,
        "--model": request.model,
        "--params": s.source,
        "--current": request.current,
        **{"--plan" + (f" #{i + 1}" if len(request.plans) > 1 else ""): p for i, p in enumerate(request.plans)},
    }
    check_outputs(inputs, _output_paths(request, names, extra))
    inv = load_inventory(request.inventory)
    topo = _topology(request, inv, extra)
    rival = current_rival(request.current, inv, topo, extra)
    seed = s.profile.seed
    options = {name: sharder_options(name, s, request.model, seed) for name in names}
    oracle = s.oracle()
    corpus = DeviceCorpus(request.corpus, CORPUS_WRITER) if request.corpus is not None else None
    # one plan to judge: measuring ends where the publish gate's sequential rule decides on it, and goes on past
    # evaluate.rounds (up to publish.max_rounds) while the spreads are high; its devices timed publish.timing_passes
    gated = s.evaluate.stop_early and len(extra) == 1
    stop = stop_rule(s.publish, extra[0].plan_id, s.evaluate.rounds) if gated else None
    try:
        cmp = compare_sharders(
            inv,
            topo,
            names,
            oracle,
            rounds=gate_rounds(s.publish, s.evaluate.rounds) if gated else s.evaluate.rounds,
            sharder_options=options,
            progress=progress,
            seed=seed,
            extra_plans=[*extra, rival] if rival is not None else extra,
            corpus=corpus,
            stop=stop,
            timing_passes=s.publish.timing_passes if gated else 1,
            timing_clock=s.publish.timing_clock if gated else "wall",
        )
    finally:
        oracle.close()
    o = request.outputs
    write_comparison_outputs(
        cmp,
        json_path=o.comparison,
        markdown_path=o.markdown,
        plot_path=o.plot,
        plans_dir=o.plans_dir,
        summary_path=o.summary,
        plot_data_path=o.plot_data,
    )
    return CompareResult(comparison=cmp)
