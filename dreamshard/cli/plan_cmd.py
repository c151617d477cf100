"""`dreamshard plan`, `dreamshard evaluate`, `dreamshard compare`."""

from __future__ import annotations

import json
import sys
from contextlib import nullcontext
from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from dreamshard.cli.options import (
    BackendOpt,
    BatchOpt,
    DevicesOpt,
    DeviceTypeOpt,
    InterconnectOpt,
    InventoryOpt,
    JsonOpt,
    MemoryOpt,
    RepeatsOpt,
    RoundsOpt,
    SeedOpt,
    ThreadsOpt,
    WarmupOpt,
    MAX_REPEATS,
    MAX_THREADS,
    build_oracle,
    make_topology,
)
from dreamshard.errors import ConfigError, InputFileError
from dreamshard.evaluation import (
    compare_sharders,
    comparison_table,
    device_rows,
    device_table,
    evaluate_plan,
    validate_sharders,
    write_comparison_outputs,
)
from dreamshard.evaluation.compare import contender_name
from dreamshard.io import check_outputs, load_inventory, load_plan, save_plan
from dreamshard.sharders import ALL_SHARDERS, HEURISTICS, get_sharder, learned_options

console = Console()


def _sharder_options(model: Path | None, samples: int | None, seed: int, risk: float | None = None) -> dict[str, Any]:
    from dreamshard.cli.models import default_model_dir

    opts: dict[str, Any] = {"seed": seed}
    model = default_model_dir(model)
    if model is not None:
        opts["model_dir"] = model
    if samples is not None:
        opts["samples"] = samples
    if risk is not None:
        opts["risk"] = risk
    return opts


def _warn(lines: Any, what: str) -> None:
    err = Console(stderr=True, highlight=False)
    for line in lines:
        err.print(f"warning: {what}: {line}", markup=False, soft_wrap=True)


def _search_table(result: Any) -> Any:
    from rich.table import Table as RichTable

    t = RichTable(title=f"candidates under the learned cost ({result.wall_s:.2f} s)", title_style="bold",
                  caption="pessimistic = ensemble mean + risk x spread (what search minimises); the plan records "
                          "the mean")
    t.add_column("#", justify="right")
    t.add_column("source")
    t.add_column("predicted ms (pessimistic)", justify="right")
    for i, c in enumerate(result.candidates[:10], 1):
        t.add_row(str(i), c.source, f"{c.predicted_ms:.3f}")
    for source in result.failed:
        t.add_row("-", source, "no plan (below)")
    if not result.failed:
        return t
    from rich.console import Group
    from rich.text import Text

    reasons = [Text(f"{source}: no plan: {why}") for source, why in result.failed.items()]
    return Group(t, *reasons)


def _verification_table(v: Any) -> Any:
    from rich.table import Table as RichTable

    t = RichTable(title=f"verified on {v.backend.name} ({v.rounds} interleaved rounds)", title_style="bold")
    for col in ("source", "predicted ms", "measured ms", "spread"):
        t.add_column(col, justify="left" if col == "source" else "right")
    for c in v.candidates:
        mark = " (kept)" if c.source == v.chosen else ""
        t.add_row(c.source + mark, f"{c.predicted_ms:.3f}", f"{c.measured_ms:.3f}", f"{c.spread:.1%}")
    return t


def plan(
    inventory: InventoryOpt,
    devices: DevicesOpt,
    memory_gb: MemoryOpt,
    sharder: Annotated[str, typer.Option("--sharder", "-s", help="Sharder name (see `dreamshard sharders`).")] = "dreamshard",
    out: Annotated[Path, typer.Option("--out", "-o", help="Plan JSON to write.")] = Path("plan.json"),
    model: Annotated[Optional[Path], typer.Option("--model", help="DreamShard model dir (default: ./models, else the packaged model).")] = None,
    samples: Annotated[Optional[int], typer.Option("--samples", min=0, max=4096, help="Learned sharders: sampled policy rollouts besides the argmax (default 4).")] = None,
    risk: Annotated[Optional[float], typer.Option("--risk", min=0.0, max=10.0, help="Learned sharders: plan on ensemble mean + RISK x spread (default 1).")] = None,
    verify: Annotated[Optional[int], typer.Option("--verify", min=0, max=64, help="dreamshard: measure the K best candidates on --backend, keep the best measured (default 0, or params plan.verify).")] = None,
    verify_rounds: Annotated[Optional[int], typer.Option("--verify-rounds", min=1, max=100, help="Interleaved rounds per verified candidate (default 3).")] = None,
    backend: Annotated[Optional[str], typer.Option("--backend", help="Backend --verify measures on: cpu, cuda or simulator (default cpu, or params profile.backend).")] = None,
    warmup: Annotated[Optional[int], typer.Option("--warmup", min=0, max=MAX_REPEATS, help="Warm-up iterations per measurement.")] = None,
    repeats: Annotated[Optional[int], typer.Option("--repeats", min=1, max=MAX_REPEATS, help="Timed repeats per measurement.")] = None,
    threads: Annotated[Optional[int], typer.Option("--threads", min=1, max=MAX_THREADS, help="Intra-op threads for CPU timing.")] = None,
    params: Annotated[Optional[Path], typer.Option("--params", help="params.yaml: defaults from its `plan` section (search, verify) and `profile` section (backend).")] = None,
    seed: SeedOpt = 0,
    batch_size: BatchOpt = 2048,
    device_type: DeviceTypeOpt = "cpu",
    interconnect: Annotated[Optional[str], typer.Option("--interconnect", help="How the all-to-all is costed: measured (this machine's fit) or fast (~10 GB/s profile); default measured, or params topology.interconnect.")] = None,
    explain: Annotated[bool, typer.Option("--explain", help="dreamshard: print the scored candidates of the search.")] = False,
    torchrec_out: Annotated[Optional[Path], typer.Option("--torchrec-out", help="Also write the TorchRec plan file: dreamshard.integrations.torchrec.load_sharding_plan(FILE, model) turns it into TorchRec's ShardingPlan.")] = None,
    torchrec_kernel: Annotated[str, typer.Option("--torchrec-kernel", help="Compute kernel in the TorchRec file: fused or dense (cuda also: fused_uvm, fused_uvm_caching).")] = "fused",
) -> None:
    """Place every table of an inventory on a device with one sharder and write the plan."""
    from dreamshard.integrations.torchrec_file import check_kernel, save_torchrec_plan, torchrec_document

    (name,) = validate_sharders([sharder])
    kernel = check_kernel(torchrec_kernel, device_type)
    check_outputs({"--inventory": inventory, "--model": model, "--params": params},
                  {"--out": out, "--torchrec-out": torchrec_out})
    opts = _sharder_options(model, samples, seed, risk)
    prof = None
    if params is not None:
        from dreamshard.pipeline_config import load_pipeline_config

        cfg = load_pipeline_config(params)
        opts["search"] = cfg.plan.search(seed)
        verify = cfg.plan.verify if verify is None else verify
        verify_rounds = cfg.plan.verify_rounds if verify_rounds is None else verify_rounds
        prof = cfg.profile
        interconnect = interconnect or cfg.topology.interconnect
    verify = verify or 0
    if verify and name != "dreamshard":
        raise ConfigError(f"--verify needs --sharder dreamshard (it measures the search's candidates), not '{name}'")
    inv = load_inventory(inventory)
    topo = make_topology(devices, memory_gb, batch_size, device_type, interconnect or "measured")
    backend = backend or (prof.backend if prof else "cpu")
    oracle = build_oracle(backend, warmup if warmup is not None else (prof.warmup if prof else 3),
                          repeats if repeats is not None else (prof.repeats if prof else 7),
                          threads if threads is not None else (prof.num_threads if prof else 1), seed) if verify else None
    if oracle is not None:
        opts.update(verify=verify, verify_rounds=verify_rounds or 3, oracle=oracle)
    sharder_obj = get_sharder(name, **opts)
    try:
        with console.status(f"measuring the {verify} best candidates on {backend}", spinner="dots") if verify else nullcontext():
            p = sharder_obj.shard(inv, topo)
    finally:
        if oracle is not None:
            oracle.close()
    _warn(p.out_of_range, f"outside the model's training ranges (plan {p.plan_id} records it; the publish gate "
                          f"will want a measured comparison)")
    card = getattr(getattr(sharder_obj, "model", None), "card", None)
    if card is not None and card.learned_from_simulation:
        _warn([f"model {card.version} learned from the {card.backend} backend"], "predicted costs are SIMULATED")
    if explain and getattr(sharder_obj, "last_search", None) is None:
        _warn([f"'{name}' does not search (--sharder dreamshard does)"], "--explain ignored")
    torchrec_doc = torchrec_document(p, inv, kernel) if torchrec_out is not None else None
    if torchrec_out is not None and torchrec_out.is_dir():
        raise InputFileError(f"cannot write {torchrec_out}: it is a directory")
    save_plan(p, out)
    if torchrec_out is not None and torchrec_doc is not None:
        save_torchrec_plan(torchrec_doc, torchrec_out)
    if explain and getattr(sharder_obj, "last_search", None) is not None:
        console.print(_search_table(sharder_obj.last_search))
    if p.verification is not None:
        console.print(_verification_table(p.verification))
    console.print(device_table(p))
    console.print(f"wrote {out}")


def evaluate(
    inventory: InventoryOpt,
    plan_file: Annotated[Path, typer.Option("--plan", "-p", help="Plan JSON to measure.")],
    backend: BackendOpt = "cpu",
    warmup: WarmupOpt = 3,
    repeats: RepeatsOpt = 7,
    threads: ThreadsOpt = 1,
    rounds: Annotated[int, typer.Option("--rounds", min=1, max=100, help="Repeat the whole measurement and take medians.")] = 1,
    as_json: JsonOpt = False,
    out: Annotated[Optional[Path], typer.Option("--out", "-o", help="Write the plan with measured costs here.")] = None,
) -> None:
    """Measure a plan: per-device fwd compute / fwd comm / bwd comm / bwd compute / memory and overall ms."""
    check_outputs({"--inventory": inventory, "--plan": plan_file}, {"--out": out})
    inv = load_inventory(inventory)
    p = load_plan(plan_file)
    oracle = build_oracle(backend, warmup, repeats, threads)
    with console.status(f"measuring {p.plan_id} on {backend}", spinner="dots") if not as_json else nullcontext():
        measured = evaluate_plan(inv, p, oracle, rounds=rounds)
    if out is not None:
        save_plan(measured, out)
    if as_json:
        assert measured.measured is not None
        payload = {
            "plan_id": measured.plan_id,
            "sharder": measured.sharder,
            "backend": oracle.info.model_dump(mode="json"),
            "overall_ms": measured.measured.overall_ms,
            "per_device": device_rows(measured),
        }
        typer.echo(json.dumps(payload, indent=2))
    else:
        console.print(device_table(measured))
        b = oracle.info
        console.print(f"backend {b.name} ({b.operator}, {b.num_threads} thread(s), warm-up {b.warmup}, repeats {b.repeats})"
                      + (" — SIMULATED, not a measurement" if b.is_simulated else ""))


def compare(
    inventory: InventoryOpt,
    devices: DevicesOpt,
    memory_gb: MemoryOpt,
    sharders: Annotated[str, typer.Option("--sharders", help="Comma-separated sharder names, or 'heuristics' / 'all'.")] = "heuristics",
    rounds: RoundsOpt = 3,
    backend: BackendOpt = "cpu",
    warmup: WarmupOpt = 3,
    repeats: RepeatsOpt = 7,
    threads: ThreadsOpt = 1,
    batch_size: BatchOpt = 2048,
    device_type: DeviceTypeOpt = "cpu",
    interconnect: InterconnectOpt = "measured",
    model: Annotated[Optional[Path], typer.Option("--model", help="Model dir for the learned sharders (default: ./models, else the packaged model).")] = None,
    samples: Annotated[Optional[int], typer.Option("--samples", min=0, max=4096)] = None,
    seed: SeedOpt = 0,
    as_json: JsonOpt = False,
    out: Annotated[Optional[Path], typer.Option("--out", "-o", help="Write the full comparison JSON here.")] = None,
    markdown_out: Annotated[Optional[Path], typer.Option("--markdown-out", help="Write a markdown table here.")] = None,
    plot_out: Annotated[Optional[Path], typer.Option("--plot-out", help="Write a PNG of per-device costs here.")] = None,
    plans_dir: Annotated[Optional[Path], typer.Option("--plans-dir", help="Save every contender's plan here.")] = None,
    plan_files: Annotated[Optional[list[Path]], typer.Option("--plan", "-p", help="Also measure this plan (repeatable); `plans publish --comparison` needs its plan in the comparison.")] = None,
) -> None:
    """Plan with several sharders and measure all plans interleaved in one run; ratios to the best and to LB."""
    names = expand_sharders(sharders)
    extra_files = list(plan_files or [])
    extra = [load_plan(p) for p in extra_files]
    outputs: dict[str, Path | None] = {"--out": out, "--markdown-out": markdown_out, "--plot-out": plot_out}
    if plans_dir is not None:  # the names Comparison.label will give (a new plan's id is not known yet: fresh)
        made_by = [*names, *(p.sharder for p in extra)]
        outputs.update({f"--plans-dir ({n})": plans_dir / f"{n}.json" for n in names if made_by.count(n) == 1})
        outputs.update({f"--plans-dir ({p.plan_id})":
                        plans_dir / f"{contender_name(p.sharder, p.plan_id, made_by.count(p.sharder) > 1)}.json"
                        for p in extra})
    check_outputs({"--inventory": inventory, "--model": model, **{"--plan" + (f" #{i + 1}" if len(extra_files) > 1 else ""): p for i, p in enumerate(extra_files)}}, outputs)
    inv = load_inventory(inventory)
    topo = make_topology(devices, memory_gb, batch_size, device_type, interconnect)
    oracle = build_oracle(backend, warmup, repeats, threads, seed)
    opts = {**learned_options(**_sharder_options(model, samples, seed)), "random": {"seed": seed}}
    total = len(names) + 1 + rounds * (len(names) + len(extra))
    with Progress(
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
        console=Console(stderr=True), disable=as_json or not sys.stderr.isatty(), transient=True,
    ) as bar:
        task = bar.add_task("comparing", total=total)

        def tick(msg: str) -> None:
            bar.update(task, description=msg, advance=1)

        cmp = compare_sharders(inv, topo, names, oracle, rounds=rounds, sharder_options=opts, progress=tick, seed=seed,
                               extra_plans=extra)
    write_comparison_outputs(cmp, json_path=out, markdown_path=markdown_out, plot_path=plot_out, plans_dir=plans_dir)
    if as_json:
        summary = cmp.summary()
        summary["results"] = [
            {
                "sharder": r.sharder,
                "plan_id": r.plan.plan_id,
                "overall_ms": r.overall_ms,
                "spread": r.spread,
                "ratio_to_best": r.ratio_to_best,
                "ratio_to_lower_bound": r.ratio_to_lower_bound,
                "samples_ms": r.samples_ms,
                "per_device": device_rows(r.plan),
            }
            for r in cmp.results
        ]
        typer.echo(json.dumps(summary, indent=2))
    else:
        console.print(comparison_table(cmp))


def expand_sharders(spec: str) -> list[str]:
    """'heuristics' -> the six heuristics; 'all' -> heuristics + torchrec + dreamshard; else a comma list."""
    parts: list[str] = []
    for item in spec.split(","):
        item = item.strip()
        if item == "heuristics":
            parts += list(HEURISTICS)
        elif item == "all":
            parts += list(ALL_SHARDERS)
        elif item:
            parts.append(item)
    return validate_sharders(parts)


def sharders_list() -> None:
    """List the available sharders."""
    from dreamshard.sharders import sharder_names

    for n in sharder_names():
        typer.echo(n)


def register(app: typer.Typer) -> None:
    app.command("plan")(plan)
    app.command("evaluate")(evaluate)
    app.command("compare")(compare)
    app.command("sharders")(sharders_list)
