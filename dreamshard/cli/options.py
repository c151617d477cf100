"""Options shared by several commands, grouped in `--help` by what they set (topology, measuring), and the
helpers that turn them into settings overrides.

Every numeric option has bounds (typer rejects values outside them with one usage line, exit 2), so no value
reaches arithmetic that could overflow or allocate without limit (docs/architecture/rules.md, "Where each rule lives").
An option that overrides a params.yaml key says which (None = not given: the params file, else the section
default; dreamshard.config.settings.resolve applies them).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from dreamshard.config.job import MAX_DEVICES
from dreamshard.config.job import host_overrides as host_overrides  # the --devices/--hosts rule (flows use it too)
from dreamshard.config.world import INTERCONNECT_HELP, WORLD_HELP
from dreamshard.config.world import world_overrides as world_overrides  # --world and its alias --interconnect
from dreamshard.values import MAX_BATCH, MAX_DEVICE_GB

#: The `--help` groups.
TOPOLOGY = "Topology"
MEASURING = "Measuring"

InventoryOpt = Annotated[Path, typer.Option("--inventory", "-i", help="Inventory file (YAML or JSON).")]
#: Bounds of the counts users type (seeds fit numpy's 32-bit generators).
MAX_REPEATS = 1000
MAX_THREADS = 1024
MAX_ROUNDS = 100
MAX_SEED = 2**32 - 1

MemoryOpt = Annotated[
    float, typer.Option("--memory-gb", "-m", min=0.0, max=MAX_DEVICE_GB, help="Memory per device in GB.")
]
BatchOpt = Annotated[int, typer.Option("--batch-size", min=1, max=MAX_BATCH, help="Global batch size.")]
SeedOpt = Annotated[int, typer.Option("--seed", min=0, max=MAX_SEED, help="Random seed.")]
ParamsOpt = Annotated[
    Path | None,
    typer.Option("--params", help="params.yaml: defaults for the options below (CLI > params > defaults)."),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]
ModelOpt = Annotated[
    Path | None,
    typer.Option(
        "--model",
        help="Model dir of the learned sharders (default: ./models, ./models/dreamshard, else the packaged model).",
    ),
]
CorpusOpt = Annotated[
    Path | None,
    typer.Option(
        "--corpus",
        rich_help_panel=MEASURING,
        help="Measurement corpus directory: device timings of the same tables, hardware and settings are reused "
        "from it and new ones added.",
    ),
]

# -- the topology (params.yaml `topology`, `plan.num_devices`) -----------------------------------------------------
DevicesOverride = Annotated[
    int | None,
    typer.Option(
        "--devices",
        "-d",
        min=1,
        max=MAX_DEVICES,
        rich_help_panel=TOPOLOGY,
        help="Number of devices (plan.num_devices; default: the job the inventory records, else "
        "tasks.train_devices = 4).",
    ),
]
MemoryOverride = Annotated[
    float | None,
    typer.Option(
        "--memory-gb",
        "-m",
        min=0.0,
        max=MAX_DEVICE_GB,
        rich_help_panel=TOPOLOGY,
        help="Memory per device in GB (topology.memory_per_device_gb; default: the job's, else 4).",
    ),
]
BatchOverride = Annotated[
    int | None,
    typer.Option(
        "--batch-size",
        min=1,
        max=MAX_BATCH,
        rich_help_panel=TOPOLOGY,
        help="Global batch size (topology.batch_size; default 2048).",
    ),
]
DeviceTypeOverride = Annotated[
    str | None,
    typer.Option("--device-type", rich_help_panel=TOPOLOGY, help="cpu or cuda (topology.device_type; default cpu)."),
]
WorldOverride = Annotated[str | None, typer.Option("--world", rich_help_panel=TOPOLOGY, help=WORLD_HELP)]
InterconnectOverride = Annotated[
    str | None, typer.Option("--interconnect", rich_help_panel=TOPOLOGY, help=INTERCONNECT_HELP)
]
OptimizerOverride = Annotated[
    str | None,
    typer.Option(
        "--optimizer",
        rich_help_panel=TOPOLOGY,
        help="The job's fused optimizer, whose state counts in device memory: sgd, rowwise_adagrad or adam "
        "(topology.optimizer; default sgd).",
    ),
]
MemoryModelOverride = Annotated[
    str | None,
    typer.Option(
        "--memory-model",
        rich_help_panel=TOPOLOGY,
        help="weights (weights + optimizer state) or torchrec (also the io buffers and --memory-reserve, as "
        "TorchRec counts) (topology.memory_model; default weights).",
    ),
]
MemoryReserveOverride = Annotated[
    float | None,
    typer.Option(
        "--memory-reserve",
        min=0.0,
        max=0.99,
        rich_help_panel=TOPOLOGY,
        help="Fraction of each device's memory kept free (topology.memory_reserve; default 0).",
    ),
]
HostsOverride = Annotated[
    int | None,
    typer.Option(
        "--hosts",
        min=1,
        max=MAX_DEVICES,
        rich_help_panel=TOPOLOGY,
        help="Hosts of --devices-per-host devices each: the plan's devices are hosts x devices-per-host.",
    ),
]
DevicesPerHostOverride = Annotated[
    int | None,
    typer.Option(
        "--devices-per-host",
        min=1,
        max=MAX_DEVICES,
        rich_help_panel=TOPOLOGY,
        help="Local devices per host; links between hosts run at topology.inter_host_gbps "
        "(topology.devices_per_host; default: one host).",
    ),
]

# -- measuring (params.yaml `profile`, `evaluate`) -----------------------------------------------------------------
BackendOverride = Annotated[
    str | None,
    typer.Option(
        "--backend",
        rich_help_panel=MEASURING,
        help="Measuring backend: cpu, cuda or simulator (profile.backend; default cpu).",
    ),
]
WarmupOverride = Annotated[
    int | None,
    typer.Option(
        "--warmup",
        min=0,
        max=MAX_REPEATS,
        rich_help_panel=MEASURING,
        help="Warm-up iterations per measurement (profile.warmup; default 3).",
    ),
]
RepeatsOverride = Annotated[
    int | None,
    typer.Option(
        "--repeats",
        min=1,
        max=MAX_REPEATS,
        rich_help_panel=MEASURING,
        help="Timed repeats per measurement, median (profile.repeats; default 7).",
    ),
]
ThreadsOverride = Annotated[
    int | None,
    typer.Option(
        "--threads",
        min=1,
        max=MAX_THREADS,
        rich_help_panel=MEASURING,
        help="Intra-op threads for CPU timing, pinned (profile.num_threads; default 1).",
    ),
]
SeedOverride = Annotated[
    int | None,
    typer.Option(
        "--seed", min=0, max=MAX_SEED, rich_help_panel=MEASURING, help="Random seed (profile.seed; default 0)."
    ),
]
RoundsOverride = Annotated[
    int | None,
    typer.Option(
        "--rounds",
        min=1,
        max=MAX_ROUNDS,
        rich_help_panel=MEASURING,
        help="Interleaved measurement rounds (evaluate.rounds; default 3).",
    ),
]


def memory_overrides(optimizer: str | None, memory_model: str | None, reserve: float | None) -> dict[str, object]:
    return {"topology.optimizer": optimizer, "topology.memory_model": memory_model, "topology.memory_reserve": reserve}


def measuring_overrides(
    backend: str | None, warmup: int | None, repeats: int | None, threads: int | None
) -> dict[str, object]:
    """The params keys the measuring options set."""
    return {
        "profile.backend": backend,
        "profile.warmup": warmup,
        "profile.repeats": repeats,
        "profile.num_threads": threads,
    }
