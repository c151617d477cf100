"""Hostile inputs of issue 18 items 5, 7 and 16, run by bench/hostile_cases.py (`cases(directory, case)`).

A case holds when the command refuses the input in one line (exit 2, no traceback) and leaves every file as it
was, or when the documented recovery still works. The allocation cases (18.7) run with guards on the index
generators: a batch beyond the index budget is never drawn, even by a regression, so each case takes seconds.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np
from hostile_cases import one_line_2, snap  # bench/ is the script's directory

from dreamshard.cli.app import invoke as cli
from dreamshard.documents import iter_measurements, save_inventory
from dreamshard.inventory import synth
from dreamshard.profiling import base, make_oracle
from dreamshard.sharders import get_sharder
from dreamshard.values import Inventory, Table, Topology

Case = Callable[[str, str, str], Callable[[Callable[[], Any]], None]]

#: Lookups a guarded generator refuses to draw (well below what the refused inputs ask for).
GUARD_LOOKUPS = 10**8


@contextmanager
def _guarded() -> Iterator[None]:
    """The index generators, refusing (RuntimeError) any batch beyond GUARD_LOOKUPS instead of allocating it."""
    real_ranks, real_feature = synth.zipf_ranks, base.feature_indices

    def ranks(num_rows: int, exponent: float, size: int, rng: np.random.Generator) -> np.ndarray:
        if size > GUARD_LOOKUPS:
            raise RuntimeError(f"zipf_ranks asked for {size:,} lookups")
        return real_ranks(num_rows, exponent, size, rng)

    def feature(table: Table, batch_size: int, rng: np.random.Generator, rows: int) -> tuple[np.ndarray, np.ndarray]:
        if table.pooling_factor * batch_size > GUARD_LOOKUPS:
            raise RuntimeError(f"indices of table '{table.name}' drawn at pooling {table.pooling_factor:g}")
        return real_feature(table, batch_size, rng, rows)

    with mock.patch.object(synth, "zipf_ranks", ranks), mock.patch.object(base, "feature_indices", feature):
        yield


def cases(d: Path, case: Case) -> None:  # noqa: C901 - one flat list of cases reads best
    d.mkdir(parents=True, exist_ok=True)
    inv = synth.synth_inventory(6, 0, name="inv")
    topo = Topology(num_devices=2, memory_per_device_gb=1.0, batch_size=512)
    invf = save_inventory(inv, d / "inv.yaml")
    profile = ["profile", "-i", str(invf), "-d", "2", "-m", "1", "--backend", "simulator", "--no-progress", "-k", "1"]
    minified = json.dumps(get_sharder("lookup_greedy").shard(inv, topo).model_dump(mode="json"), separators=(",", ":"))

    # -- 18.5: `profile -o FILE` on a one-line file without newline that is not a measurements file
    for what, name, text in (
        ("a minified JSON plan", "plan.json", minified),
        ("a one-line text file", "notes.txt", "do not delete me"),
        ("a one-line JSON object", "obj.json", '{"a": 1}'),
    ):

        @case("18.5", f"profile -o on {what} (no trailing newline): refused, file kept", f"profile ... -o {name}")
        def _(name: str = name, text: str = text) -> bool:
            target = d / "18.5" / name
            target.parent.mkdir(exist_ok=True)
            target.write_text(text)
            before = snap(target.parent)
            r = cli([*profile, "-o", str(target)])
            return (
                one_line_2(r, "InputFileError", str(target), "not a measurements file")
                and snap(target.parent) == before
            )

    @case("18.5", "a killed writer's unfinished first record is still recovered", "profile ... -o m.jsonl (partial)")
    def _() -> bool:
        target = d / "18.5" / "m.jsonl"
        target.parent.mkdir(exist_ok=True)
        m = make_oracle("simulator").measure(inv, {"t0000": 0}, topo, kind="single")
        target.write_text(m.model_dump_json()[:60])
        return cli([*profile, "-o", str(target)])[0] == 0 and len(list(iter_measurements(target))) > 0

    # -- 18.7: index generation sized before it runs (guarded: nothing large is ever drawn)
    for pooling, needles in (
        ("1e7", ("ConfigError", "pooling factor")),
        ("1e6", ("IndexBudgetError", "'t_cat_0'", "pooling_factor", "MAX_INDEX_BYTES")),
    ):

        @case(
            "18.7",
            f"inventory preset --pooling {pooling}: refused before allocating",
            f"inventory preset criteo-kaggle --pooling {pooling} -o x.yaml",
        )
        def _(pooling: str = pooling, needles: tuple[str, ...] = needles) -> tuple[bool, str]:
            out = d / "18.7" / f"preset-{pooling}.yaml"
            out.parent.mkdir(exist_ok=True)
            t0 = time.perf_counter()
            with _guarded():
                r = cli(["inventory", "preset", "criteo-kaggle", "--pooling", pooling, "-o", str(out)])
            wall = time.perf_counter() - t0
            return one_line_2(r, *needles) and not out.exists() and wall < 10.0, f"{wall:.2f} s"

    @case(
        "18.7",
        "evaluate --backend cpu, pooling_factor 1000000 (in bounds): refused before allocating",
        "evaluate -i big.yaml -p plan.json --backend cpu",
    )
    def _() -> tuple[bool, str]:
        work = d / "18.7" / "evaluate"
        work.mkdir(parents=True, exist_ok=True)
        big = Inventory(
            name="big",
            tables=(
                Table(name="huge", num_embeddings=1000, embedding_dim=16, pooling_factor=1e6),
                Table(name="small", num_embeddings=100, embedding_dim=16, pooling_factor=1.0),
            ),
        )
        bigf = save_inventory(big, work / "big.yaml")
        planf = work / "plan.json"
        planf.write_text(
            get_sharder("lookup_greedy").shard(big, topo.model_copy(update={"batch_size": 2048})).model_dump_json()
        )
        before = snap(work)
        t0 = time.perf_counter()
        with _guarded():
            r = cli(
                [
                    "evaluate",
                    "-i",
                    str(bigf),
                    "-p",
                    str(planf),
                    "--backend",
                    "cpu",
                    "--repeats",
                    "1",
                    "--warmup",
                    "0",
                    "-o",
                    str(work / "ev.json"),
                ]
            )
        wall = time.perf_counter() - t0
        ok = one_line_2(r, "IndexBudgetError", "'huge'", "pooling_factor", "MAX_INDEX_BYTES")
        return ok and snap(work) == before and wall < 30.0, f"{wall:.2f} s"

    # -- 18.16: the preset's --name follows the inventory-name rule
    for name in ("../x", "a/b"):

        @case(
            "18.16",
            f"inventory preset --name {name}: refused up front",
            f"inventory preset criteo-kaggle --name {name}",
        )
        def _(name: str = name) -> bool:
            out = d / "18.16" / "x.yaml"
            out.parent.mkdir(exist_ok=True)
            r = cli(["inventory", "preset", "criteo-kaggle", "--name", name, "-o", str(out)])
            return one_line_2(r, "InventoryNameError", "--name") and not out.exists()
