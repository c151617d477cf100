"""Options shared by several commands, and the helpers that turn them into value objects.

Every numeric option has bounds (typer rejects values outside them with one usage line, exit 2), so no value
reaches arithmetic that could overflow or allocate without limit (docs/architecture.md, "where each rule lives").
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from pydantic import ValidationError

from dreamshard.errors import TopologyError
from dreamshard.io import describe_validation_error
from dreamshard.types import MAX_BATCH, MAX_DEVICE_GB, Topology

if TYPE_CHECKING:  # pragma: no cover
    from dreamshard.profiling import Oracle

InventoryOpt = Annotated[Path, typer.Option("--inventory", "-i", help="Inventory file (YAML or JSON).")]
#: Bounds of the counts users type (seeds fit numpy's 32-bit generators).
MAX_DEVICES = 4096
MAX_REPEATS = 1000
MAX_THREADS = 1024
MAX_ROUNDS = 100
MAX_SEED = 2**32 - 1

DevicesOpt = Annotated[int, typer.Option("--devices", "-d", min=1, max=MAX_DEVICES, help="Number of devices.")]
MemoryOpt = Annotated[float, typer.Option("--memory-gb", "-m", min=0.0, max=MAX_DEVICE_GB, help="Memory per device in GB.")]
BatchOpt = Annotated[int, typer.Option("--batch-size", min=1, max=MAX_BATCH, help="Global batch size.")]
DeviceTypeOpt = Annotated[str, typer.Option("--device-type", help="cpu or cuda.")]
BackendOpt = Annotated[str, typer.Option("--backend", help="Measuring backend: cpu, cuda or simulator.")]
WarmupOpt = Annotated[int, typer.Option("--warmup", min=0, max=MAX_REPEATS, help="Warm-up iterations per measurement.")]
RepeatsOpt = Annotated[int, typer.Option("--repeats", min=1, max=MAX_REPEATS, help="Timed repeats per measurement (median).")]
ThreadsOpt = Annotated[int, typer.Option("--threads", min=1, max=MAX_THREADS, help="Intra-op threads for CPU timing (pinned).")]
RoundsOpt = Annotated[int, typer.Option("--rounds", min=1, max=MAX_ROUNDS, help="Interleaved measurement rounds.")]
SeedOpt = Annotated[int, typer.Option("--seed", min=0, max=MAX_SEED, help="Random seed.")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]


InterconnectOpt = Annotated[str, typer.Option(
    "--interconnect", help="How the all-to-all is costed: measured (this machine's fit) or fast (~10 GB/s profile).")]


def make_topology(devices: int, memory_gb: float, batch_size: int, device_type: str,
                  interconnect: str = "measured") -> Topology:
    try:
        return Topology(
            num_devices=devices,
            memory_per_device_gb=memory_gb,
            batch_size=batch_size,
            device_type=device_type,  # type: ignore[arg-type]
            interconnect=interconnect,  # type: ignore[arg-type]
        )
    except ValidationError as e:
        raise TopologyError(f"topology {describe_validation_error(e)}") from None


def build_oracle(backend: str, warmup: int, repeats: int, threads: int, seed: int = 0) -> Oracle:
    from dreamshard.profiling import make_oracle

    return make_oracle(backend, warmup=warmup, repeats=repeats, num_threads=threads, seed=seed)
