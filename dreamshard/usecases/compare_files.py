"""The files of `dreamshard compare` (also the evaluate DVC stage) and `dreamshard evaluate`: the doors' adapter
for the evaluate use case (dreamshard.usecases.evaluate), which takes and returns values. Reading checks the inputs
in one line before anything is loaded (each plan given once: not the same file, not the same bytes, not the same
plan id), and no output may be an input or another output."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from dreamshard.documents import check_outputs, load_inventory, load_plan, same_file
from dreamshard.errors import ConfigError
from dreamshard.evaluation import write_comparison_outputs
from dreamshard.evaluation.compare import contender_name
from dreamshard.pipeline.incumbent import load_incumbent
from dreamshard.usecases.evaluate import CompareRequest, CompareResult, contender_names, repeated_plan, run
from dreamshard.values import Inventory, Plan


class CompareOutputs(BaseModel):
    """Where the comparison goes: its JSON, markdown, plot, each contender's plan, a summary, the plot's data."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    comparison: Path | None = None
    markdown: Path | None = None
    plot: Path | None = None
    plans_dir: Path | None = None
    summary: Path | None = None
    plot_data: Path | None = None


class CompareFiles(BaseModel):
    """The files of one comparison: the inventory, the plans measured beside the contenders', the incumbent file
    (`plans incumbent`), the model and params read, and the outputs."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    inventory: Path
    plans: tuple[Path, ...] = ()
    current: Path | None = None
    model: Path | None = None
    params: Path | None = None
    outputs: CompareOutputs = CompareOutputs()


class CompareInputs(BaseModel):
    """What the files hold, checked."""

    model_config = ConfigDict(frozen=True, extra="forbid", arbitrary_types_allowed=True)

    inventory: Inventory
    plans: tuple[Plan, ...]
    current: Plan | None


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
    if plans is not None and (pair := repeated_plan(plans)) is not None:
        i, j = pair
        raise ConfigError(
            f"{_plan_option(i, paths)} and {_plan_option(j, paths)} both hold plan "
            f"{plans[i].plan_id} ({plans[i].sharder}); give each plan once"
        )


def read(files: CompareFiles) -> CompareInputs:
    """The inventory, the plans and the incumbent, each plan checked distinct before and after loading."""
    check_distinct_plans(files.plans)  # one line before anything is loaded, planned or measured
    plans = tuple(load_plan(p) for p in files.plans)
    check_distinct_plans(files.plans, plans)
    current = load_incumbent(files.current) if files.current is not None else None
    return CompareInputs(inventory=load_inventory(files.inventory), plans=plans, current=current)


def _output_paths(files: CompareFiles, names: list[str], extra: Sequence[Plan]) -> dict[str, Path | None]:
    o = files.outputs
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


def compare(
    files: CompareFiles, request: CompareRequest, progress: Callable[[str], None] | None = None
) -> CompareResult:
    """`request` (made of `read(files)`) measured, its outputs checked against the inputs before anything is
    measured, then written."""
    inputs = {
        "--inventory": files.inventory,
        "--model": files.model,
        "--params": files.params,
        "--current": files.current,
        **{"--plan" + (f" #{i + 1}" if len(files.plans) > 1 else ""): p for i, p in enumerate(files.plans)},
    }
    check_outputs(inputs, _output_paths(files, contender_names(request), request.plans))
    result = run(request, progress)
    o = files.outputs
    write_comparison_outputs(
        result.comparison,
        json_path=o.comparison,
        markdown_path=o.markdown,
        plot_path=o.plot,
        plans_dir=o.plans_dir,
        summary_path=o.summary,
        plot_data_path=o.plot_data,
    )
    return result


def read_measured(inventory: Path, plan: Path, out: Path | None) -> tuple[Inventory, Plan]:
    """`dreamshard evaluate`'s inventory and plan (`out`, where the measured plan goes, checked to be neither)."""
    check_outputs({"--inventory": inventory, "--plan": plan}, {"--out": out})
    return load_inventory(inventory), load_plan(plan)
