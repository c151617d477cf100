"""Inputs shared by the second hardening round's tests and its bench case tables (bench/hostile_*_cases.py put
tests/ on sys.path): a model whose weights are replaced, the small TorchRec inventory, and the attack tables of
the row-wise / data-parallel / topology surfaces (tests/test_hardening_types.py, bench/hostile_types_cases.py)."""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dreamshard.learning.model_store import CARD_FILE, COST_FILE, PACKAGED_DIR
from dreamshard.values import Inventory, Plan, Table, Topology

TORCHREC_INV = Inventory(
    name="small",
    tables=(
        Table(name="a", num_embeddings=300, embedding_dim=16, pooling_factor=1.0),
        Table(name="b", num_embeddings=500, embedding_dim=32, pooling_factor=3.0),
        Table(name="c", num_embeddings=40, embedding_dim=8, pooling_factor=0.5),
    ),
)


def model_with_weights(d: Path, data: bytes) -> Path:
    """The packaged model with its cost_net.pt replaced by `data` (card checksum updated: only the content is bad)."""
    shutil.copytree(PACKAGED_DIR, d)
    (d / COST_FILE).write_bytes(data)
    card = json.loads((d / CARD_FILE).read_text())
    card["files"][COST_FILE] = hashlib.sha256(data).hexdigest()
    (d / CARD_FILE).write_text(json.dumps(card))
    return d


# -- The sharding types that landed with row-wise / data-parallel (tests/test_hardening_types.py and
# bench/hostile_types_cases.py run the same tables) --------------------------------------------------------------
TYPES_INV = Inventory(
    name="types",
    tables=(
        Table(name="a", num_embeddings=300, embedding_dim=16, pooling_factor=1.0),
        Table(name="b", num_embeddings=500, embedding_dim=32, pooling_factor=3.0),
        Table(name="c", num_embeddings=40, embedding_dim=8, pooling_factor=0.5),
        Table(name="e", num_embeddings=100, embedding_dim=8, pooling_factor=0.5),
    ),
)
TYPES_TOPO = Topology(num_devices=2, memory_per_device_gb=1.0, batch_size=512)


def types_plan() -> Plan:
    """A legal plan of TYPES_INV with every new field: a and e whole, b row-wise over both devices, c data-parallel."""
    from dreamshard.sharders.base import make_plan
    from dreamshard.values.units import row_shards_for

    return make_plan(
        TYPES_INV,
        TYPES_TOPO,
        {"a": 0, "e": 1},
        "dreamshard",
        row_shards={"b": row_shards_for(500, [0, 1])},
        data_parallel=["c"],
    )


def _rows(p: dict[str, Any], shards: list[dict[str, Any]]) -> None:
    p["row_shards"]["b"] = shards


def _dev(p: dict[str, Any], device: Any) -> None:
    p["row_shards"]["b"][1]["device"] = device


HUGE = 100_000
#: A legal plan file of `types_plan()` edited (in place) by the function; the one error line must hold the needle.
PLAN_ATTACKS: dict[str, tuple[Callable[[dict[str, Any]], None], str]] = {
    "a table twice in data_parallel": (
        lambda p: p.update(data_parallel=["c", "c"]),
        "table 'c' is listed twice in data_parallel",
    ),
    f"{HUGE} copies of a table in data_parallel": (
        lambda p: p.update(data_parallel=["c"] * HUGE),
        "table 'c' is listed twice in data_parallel",
    ),
    "a table data-parallel and row-sharded": (
        lambda p: p.update(data_parallel=["c", "b"]),
        "table 'b' is both split into row shards and data-parallel",
    ),
    "a table data-parallel and whole": (
        lambda p: p.update(data_parallel=["c", "a"]),
        "table 'a' is both placed whole and data-parallel",
    ),
    "a row shard on device 5 of 2": (lambda p: _dev(p, 5), "row shard 250:500 of table 'b' placed on device 5"),
    "row shards on a duplicated device": (lambda p: _dev(p, 0), "row shards of table 'b' are on devices [0, 0]"),
    "a row shard on device -1": (lambda p: _dev(p, -1), "row_shards.b[1].device"),
    "a row shard on device true": (lambda p: _dev(p, True), "row_shards.b[1].device: must be a number, got bool"),
    "a row shard on device 1.5": (lambda p: _dev(p, 1.5), "row_shards.b[1].device"),
    "a row shard on device '1'": (lambda p: _dev(p, "1"), "row_shards.b[1].device: must be a number, got str"),
    "row shards past the table's rows": (
        lambda p: p["row_shards"]["b"][1].update(end=600),
        "row shards of table 'b' are [(0, 250), (250, 600)]",
    ),
    "row shards not TorchRec's blocks": (
        lambda p: _rows(p, [{"start": 0, "end": 100, "device": 0}, {"start": 100, "end": 500, "device": 1}]),
        "ceil(rows / shards)",
    ),
    "an empty list of row shards": (lambda p: _rows(p, []), "table 'b' has an empty list of row shards"),
    "the row-sharded table dropped": (lambda p: p.update(row_shards={}), "table 'b' has no device"),
    f"{HUGE} row shards on device 0": (
        lambda p: _rows(p, [{"start": i, "end": i + 1, "device": 0} for i in range(HUGE)]),
        f"({HUGE - 8} more, {HUGE} in all)",
    ),
    f"{HUGE} row shards on devices 0..{HUGE - 1}": (
        lambda p: _rows(p, [{"start": i, "end": i + 1, "device": i} for i in range(HUGE)]),
        "row shard 2:3 of table 'b' placed on device 2 but topology has 2 devices",
    ),
    "a row-shard unit name as a placement key": (
        lambda p: p["placement"].update({"b@r0:250": 0}),
        "table 'b@r0:250', which is not in inventory",
    ),
    "a column-shard unit name as a placement key": (
        lambda p: p["placement"].update({"a@0:4": 0}),
        "table 'a@0:4', which is not in inventory",
    ),
    "a replica unit name as a placement key": (
        lambda p: p["placement"].update({"c@dp0": 0}),
        "table 'c@dp0', which is not in inventory",
    ),
    "a unit name as a row_shards key": (
        lambda p: p["row_shards"].update(
            {"a@r0:10": [{"start": 0, "end": 150, "device": 0}, {"start": 150, "end": 300, "device": 1}]}
        ),
        "table 'a@r0:10', which is not in inventory",
    ),
    "a unit name in data_parallel": (
        lambda p: p.update(data_parallel=["c", "a@dp0"]),
        "table 'a@dp0', which is not in inventory",
    ),
    "a unit name as a column_shards key": (
        lambda p: p.update(
            column_shards={"e@0:4": [{"start": 0, "end": 4, "device": 0}, {"start": 4, "end": 8, "device": 1}]}
        ),
        "table 'e@0:4', which is not in inventory",
    ),
    "forged memory of a typed plan": (lambda p: p.update(memory_per_device_gb=[0.0, 0.0]), "states 0 GB on device 0"),
}

#: whatif on `types_plan()`: moving or swapping a row shard or a replica is refused naming it.
WHATIF_ATTACKS: dict[str, list[str]] = {
    "--move b@r0:250:1 (a row shard)": ["--move", "b@r0:250:1"],
    "--move b@r250:500:9 (a row shard, bad device)": ["--move", "b@r250:500:9"],
    "--move c@dp0:1 (a replica)": ["--move", "c@dp0:1"],
    "--swap b@r0:250,e (a row shard)": ["--swap", "b@r0:250,e"],
    "--swap c@dp0,e (a replica)": ["--swap", "c@dp0,e"],
}

#: `dreamshard plan` topology options (on -i TYPES_INV -s size_greedy -m 1): the one error line holds the needle.
TOPOLOGY_ATTACKS: dict[str, tuple[list[str], str]] = {
    "--hosts 0": (["--hosts", "0", "--devices-per-host", "2"], "--hosts"),
    "--devices-per-host 0": (["--hosts", "2", "--devices-per-host", "0"], "--devices-per-host"),
    "--devices-per-host -1": (["--hosts", "2", "--devices-per-host", "-1"], "--devices-per-host"),
    "--devices-per-host nan": (["--hosts", "2", "--devices-per-host", "nan"], "--devices-per-host"),
    "--devices-per-host true": (["--hosts", "2", "--devices-per-host", "true"], "--devices-per-host"),
    "--hosts 4096 --devices-per-host 4096": (["--hosts", "4096", "--devices-per-host", "4096"], "at most 4096"),
    "-d 3 --hosts 2 --devices-per-host 2": (
        ["-d", "3", "--hosts", "2", "--devices-per-host", "2"],
        "--devices 3 is not --hosts 2 x --devices-per-host 2",
    ),
    "-d 3 --devices-per-host 2": (["-d", "3", "--devices-per-host", "2"], "devices_per_host must divide num_devices"),
    "--hosts 2 without --devices-per-host": (["-d", "4", "--hosts", "2"], "--hosts needs --devices-per-host"),
    "--optimizer lamb": (["-d", "2", "--optimizer", "lamb"], "topology.optimizer"),
    "--optimizer ''": (["-d", "2", "--optimizer", ""], "topology.optimizer"),
    "--memory-model x": (["-d", "2", "--memory-model", "x"], "topology.memory_model"),
    "--memory-reserve -0.1": (["-d", "2", "--memory-reserve", "-0.1"], "--memory-reserve"),
    "--memory-reserve 1": (["-d", "2", "--memory-reserve", "1"], "--memory-reserve"),
    "--memory-reserve nan": (["-d", "2", "--memory-reserve", "nan"], "--memory-reserve"),
    "--memory-reserve inf": (["-d", "2", "--memory-reserve", "inf"], "--memory-reserve"),
    "--memory-reserve 0.99: every table too big (names table and limit)": (
        ["-d", "2", "-m", "0.001", "--memory-reserve", "0.99"],
        "table 'a' (0.018 MB) fits on no device (largest free memory 0.010 MB)",
    ),
    "--memory-reserve 0.99 --memory-model torchrec": (
        ["-d", "2", "-m", "0.001", "--memory-reserve", "0.99", "--memory-model", "torchrec"],
        "fits on no device",
    ),
    "-m nan": (["-d", "2", "-m", "nan"], "--memory-gb"),
    "--types row_wise,bogus": (
        ["-d", "2", "-s", "dreamshard", "--types", "row_wise,bogus"],
        "unknown sharding type 'bogus'",
    ),
    "--types table_wise": (
        ["-d", "2", "-s", "dreamshard", "--types", "table_wise"],
        "unknown sharding type 'table_wise'",
    ),
}

#: params.yaml `topology:` fields (with -d 4): the one error line holds the needle.
PARAMS_ATTACKS: dict[str, tuple[str, str, str]] = {
    f"{field}: {value}": (field, value, needle)
    for field, value, needle in (
        ("devices_per_host", "0", "topology.devices_per_host: Input should be greater than or equal to 1"),
        ("devices_per_host", "-2", "topology.devices_per_host"),
        ("devices_per_host", "true", "topology.devices_per_host: must be a number, got bool"),
        ("devices_per_host", "2.5", "topology.devices_per_host"),
        ("devices_per_host", "'2'", "topology.devices_per_host: must be a number, got str"),
        ("devices_per_host", "3", "4 devices do not make whole hosts of 3 devices"),
        ("devices_per_host", "100000", "topology.devices_per_host: Input should be less than or equal to 4096"),
        ("inter_host_gbps", "0", "topology.inter_host_gbps"),
        ("inter_host_gbps", "-1", "topology.inter_host_gbps"),
        ("inter_host_gbps", ".nan", "topology.inter_host_gbps: Input should be a finite number"),
        ("inter_host_gbps", ".inf", "topology.inter_host_gbps: Input should be a finite number"),
        ("inter_host_gbps", "1.0e+300", "topology.inter_host_gbps: Input should be less than or equal to 1000000"),
        ("inter_host_gbps", "true", "topology.inter_host_gbps: must be a number, got bool"),
        ("inter_host_gbps", "fast", "topology.inter_host_gbps: must be a number, got str"),
        ("optimizer", "3", "topology.optimizer"),
        ("optimizer", "Adam", "topology.optimizer"),
        ("memory_model", "null", "topology.memory_model"),
        ("memory_model", "[weights]", "topology.memory_model"),
        ("memory_reserve", "1.0", "topology.memory_reserve: Input should be less than 1"),
        ("memory_reserve", "-0.0001", "topology.memory_reserve"),
        ("memory_reserve", ".nan", "topology.memory_reserve: Input should be a finite number"),
        ("memory_reserve", "true", "topology.memory_reserve: must be a number, got bool"),
        ("memory_reserve", "'0.5'", "topology.memory_reserve: must be a number, got str"),
        ("memory_reserve", "0.99", "table 'a' (0.018 MB) fits on no device"),
    )
}


def _tr_rows(x: dict[str, Any], ranks: list[Any], ranges: list[list[int]], kind: str | None = None) -> None:
    b = x["tables"]["b"]
    b["ranks"], b["row_ranges"] = ranks, ranges
    if kind:
        b["sharding_type"] = kind


def _tr_four(x: dict[str, Any], local: int | None = None) -> None:
    x["world_size"] = 4
    x["tables"]["c"]["ranks"] = [0, 1, 2, 3]
    if local:
        x["local_world_size"] = local


#: The TorchRec plan file of `types_plan()` edited: refused (one line naming the needle) by `torchrec import` and
#: by `load_sharding_plan` alike.
TORCHREC_ATTACKS: dict[str, tuple[Callable[[dict[str, Any]], None], str]] = {
    "row_ranges fewer than ranks": (lambda x: _tr_rows(x, [0, 1], [[0, 500]]), "one [start, end] row range per rank"),
    "uneven row blocks": (lambda x: _tr_rows(x, [0, 1], [[0, 100], [100, 500]]), "ceil(rows / shards)"),
    "overlapping row ranges": (lambda x: _tr_rows(x, [0, 1], [[0, 300], [250, 500]]), "ceil(rows / shards)"),
    "row ranges past the table": (
        lambda x: _tr_rows(x, [0, 1], [[0, 250], [250, 600]]),
        "row ranges end at 600, the table has 500 rows",
    ),
    "row ranks reversed": (lambda x: _tr_rows(x, [1, 0], [[0, 250], [250, 500]]), "on devices [1, 0]"),
    "a row rank past world_size": (
        lambda x: _tr_rows(x, [0, 2], [[0, 250], [250, 500]]),
        "table 'b' is on rank 2, but world_size is 2",
    ),
    "a row rank duplicated": (lambda x: _tr_rows(x, [0, 0], [[0, 250], [250, 500]]), "on devices [0, 0]"),
    "a row rank -1": (lambda x: _tr_rows(x, [0, -1], [[0, 250], [250, 500]]), "tables.b.ranks[1]"),
    "a row rank true": (lambda x: _tr_rows(x, [0, True], [[0, 250], [250, 500]]), "tables.b.ranks[1]"),
    "a row rank 1.0": (lambda x: _tr_rows(x, [0, 1.0], [[0, 250], [250, 500]]), "tables.b.ranks[1]"),
    "row_wise on 2 of 4 ranks": (
        lambda x: (_tr_four(x), _tr_rows(x, [0, 1], [[0, 250], [250, 500]])),
        "row-wise sharding needs devices 0..3 in order",
    ),
    "table_row_wise on a one-host file": (
        lambda x: _tr_rows(x, [0, 1], [[0, 250], [250, 500]], "table_row_wise"),
        "table 'b' is table_row_wise in the plan, but its row ranges",
    ),
    "table_row_wise across two hosts": (
        lambda x: (_tr_four(x, 2), _tr_rows(x, [1, 2], [[0, 250], [250, 500]], "table_row_wise")),
        "or the 2 devices of one host in order",
    ),
    "row_wise on the ranks of one host": (
        lambda x: (_tr_four(x, 2), _tr_rows(x, [2, 3], [[0, 250], [250, 500]], "row_wise")),
        "table 'b' is row_wise in the plan, but its row ranges on ranks [2, 3] are table_row_wise",
    ),
    "data_parallel on a subset of ranks": (
        lambda x: x["tables"]["c"].update(ranks=[0]),
        "data_parallel table 'c' is on ranks [0]",
    ),
    "data_parallel on a duplicated rank": (
        lambda x: x["tables"]["c"].update(ranks=[0, 0]),
        "data_parallel table 'c' is on ranks [0, 0]",
    ),
    "data_parallel with a fused kernel": (
        lambda x: x["tables"]["c"].update(compute_kernel="fused"),
        "uses compute kernel 'dense', not 'fused'",
    ),
    "data_parallel with row_ranges": (
        lambda x: x["tables"]["c"].update(row_ranges=[[0, 20], [20, 40]]),
        "a data_parallel table has no row_ranges",
    ),
    f"{HUGE} data_parallel ranks": (
        lambda x: x["tables"]["c"].update(ranks=[0] * HUGE),
        f"({HUGE - 8} more, {HUGE} in all)",
    ),
    f"{HUGE} row ranges": (
        lambda x: (_tr_rows(x, [0] * HUGE, [[i, i + 1] for i in range(HUGE)]), x["tables"]["b"].pop("num_embeddings")),
        f"({HUGE - 8} more, {HUGE} in all)",
    ),
    "local_world_size 3 of world_size 2": (
        lambda x: x.update(local_world_size=3),
        "world_size 2 is not a whole number of hosts of local_world_size 3",
    ),
    "local_world_size 0": (lambda x: x.update(local_world_size=0), "local_world_size"),
    "local_world_size true": (lambda x: x.update(local_world_size=True), "local_world_size"),
    "local_world_size '2'": (lambda x: x.update(local_world_size="2"), "local_world_size"),
    "a unit name b@r0:250 as a table": (
        lambda x: x["tables"].update({"b@r0:250": {"sharding_type": "table_wise", "ranks": [0]}}),
        "'b@r0:250'",
    ),
    "a unit name c@dp0 as a table": (
        lambda x: x["tables"].update({"c@dp0": {"sharding_type": "table_wise", "ranks": [0]}}),
        "'c@dp0'",
    ),
}

#: What an error line may be at most (a hostile file of 100k shards must not make a 300 kB one).
MAX_ERROR_LINE = 500


# -- Running the attacks (one place for the bench table and the tests) ------------------------------------------
PLAN_COMMANDS = ("plans publish --measure", "compare --plan", "torchrec export", "whatif")


def refused(r: tuple[int, str, str], needle: str, outputs: tuple[Path, ...] = ()) -> tuple[bool, str]:
    """(held, the error line): exit 2, one short line holding `needle`, no traceback, none of `outputs` written."""
    lines = r[2].strip().splitlines()
    line = lines[0] if lines else r[1].strip()[-200:]
    ok = (
        r[0] == 2
        and len(lines) == 1
        and "Traceback" not in r[1] + r[2]
        and needle in line
        and len(line) <= MAX_ERROR_LINE
        and not any(p.exists() for p in outputs)
    )
    return ok, line[:300]


def types_files(d: Path) -> tuple[Path, Path, dict[str, Any]]:
    """(inventory file, legal plan file, the plan as JSON data) under `d`."""
    from dreamshard.documents import save_inventory, save_plan

    d.mkdir(parents=True, exist_ok=True)
    invf = save_inventory(TYPES_INV, d / "inv.yaml")
    planf = save_plan(types_plan(), d / "plan.json")
    return invf, planf, json.loads(planf.read_text())


def plan_argv(command: str, plan: Path, invf: Path, d: Path) -> tuple[list[str], tuple[Path, ...]]:
    """The command line of one of PLAN_COMMANDS on `plan`, and what it must not write."""
    store, out = d / "store", d / "out.json"
    if command == "plans publish --measure":
        return (
            [
                "plans",
                "publish",
                str(plan),
                "-i",
                str(invf),
                "--measure",
                "--store",
                str(store),
                "--backend",
                "simulator",
                "--allow-simulated",
                "--sharders",
                "round_robin",
            ],
            (store,),
        )
    if command == "compare --plan":
        return (
            [
                "compare",
                "-i",
                str(invf),
                "--plan",
                str(plan),
                "--backend",
                "simulator",
                "--rounds",
                "1",
                "--sharders",
                "round_robin",
                "--out",
                str(out),
            ],
            (out,),
        )
    if command == "torchrec export":
        return ["torchrec", "export", str(plan), "-i", str(invf), "-o", str(out)], (out,)
    return ["whatif", str(plan), "-i", str(invf), "--move", "a:1", "-o", str(out)], (out,)


def run_plan_attack(d: Path, what: str, command: str) -> tuple[bool, str]:
    """PLAN_ATTACKS[what] through `command`: refused in one line naming the field, nothing written, in seconds."""
    import time

    from dreamshard.cli.app import invoke

    invf, _, data = types_files(d)
    edit, needle = PLAN_ATTACKS[what]
    edit(data)
    bad = d / "bad.json"
    bad.write_text(json.dumps(data))
    argv, outputs = plan_argv(command, bad, invf, d)
    t0 = time.perf_counter()
    ok, line = refused(invoke(argv), needle, outputs)
    wall = time.perf_counter() - t0
    return ok and wall < 10.0, f"{wall:.2f} s: {line}"


def run_truncated(d: Path, command: str) -> tuple[bool, str]:
    """A typed plan file cut in half through `command`."""
    from dreamshard.cli.app import invoke

    invf, planf, _ = types_files(d)
    text = planf.read_text()
    cut = d / "cut.json"
    cut.write_text(text[: len(text) // 2])
    argv, outputs = plan_argv(command, cut, invf, d)
    return refused(invoke(argv), "not valid JSON/YAML", outputs)


def run_whatif_attack(d: Path, what: str) -> tuple[bool, str]:
    from dreamshard.cli.app import invoke

    invf, planf, _ = types_files(d)
    out = d / "moved.json"
    return refused(
        invoke(["whatif", str(planf), "-i", str(invf), *WHATIF_ATTACKS[what], "-o", str(out)]),
        "cannot move on its own",
        (out,),
    )


def run_topology_attack(d: Path, what: str) -> tuple[bool, str]:
    from dreamshard.cli.app import invoke

    invf, _, _ = types_files(d)
    extra, needle = TOPOLOGY_ATTACKS[what]
    out = d / "p.json"
    return refused(
        invoke(
            ["plan", "-i", str(invf), "-m", "1", "-s", "size_greedy", "--batch-size", "512", *extra, "-o", str(out)]
        ),
        needle,
        (out,),
    )


def run_params_attack(d: Path, what: str) -> tuple[bool, str]:
    from dreamshard.cli.app import invoke

    invf, _, _ = types_files(d)
    field, value, needle = PARAMS_ATTACKS[what]
    params = d / "params.yaml"
    params.write_text(f"topology:\n  memory_per_device_gb: 0.001\n  batch_size: 512\n  {field}: {value}\n")
    out = d / "p.json"
    return refused(
        invoke(["plan", "-i", str(invf), "-d", "4", "-s", "size_greedy", "--params", str(params), "-o", str(out)]),
        needle,
        (out,),
    )


def torchrec_file(d: Path) -> tuple[Path, dict[str, Any]]:
    """(inventory file, the TorchRec plan file of `types_plan()` as JSON data)."""
    from dreamshard.integrations.torchrec_file import torchrec_document

    invf, _, _ = types_files(d)
    doc = torchrec_document(types_plan(), TYPES_INV)
    return invf, json.loads(doc.model_dump_json(exclude_none=True))


def run_torchrec_attack(d: Path, what: str, via: str) -> tuple[bool, str]:
    """TORCHREC_ATTACKS[what] read by `torchrec import` (via 'import') or `load_sharding_plan` (via 'load')."""
    from dreamshard.cli.app import invoke
    from dreamshard.errors import PlanError

    invf, data = torchrec_file(d)
    edit, needle = TORCHREC_ATTACKS[what]
    edit(data)
    bad = d / "bad-torchrec.json"
    bad.write_text(json.dumps(data))
    if via == "import":
        out = d / "imported.json"
        return refused(
            invoke(["torchrec", "import", str(bad), "-i", str(invf), "-m", "1", "-o", str(out)]), needle, (out,)
        )
    from dreamshard.integrations.torchrec import build_ebc, load_sharding_plan

    try:
        load_sharding_plan(bad, build_ebc(TYPES_INV))
    except PlanError as e:
        msg = str(e)
        return needle in msg and "\n" not in msg and len(msg) <= MAX_ERROR_LINE, msg[:300]
    return False, "accepted"


def run_show(d: Path, tamper: bool) -> tuple[bool, str]:
    """`plans show ID --torchrec` of a stored typed plan: prints its row_wise and data_parallel tables; with the
    stored file edited (c listed twice in data_parallel, its sidecar checksum rewritten to match) refused in
    one line."""
    import hashlib as _hashlib

    from dreamshard.cli.app import invoke
    from dreamshard.evaluation import evaluate_plan
    from dreamshard.gate import evaluate_gate
    from dreamshard.profiling import make_oracle
    from dreamshard.store import open_store, publish

    plan = evaluate_plan(TYPES_INV, types_plan(), make_oracle("simulator"))
    cost = plan.best_costs.overall_ms if plan.best_costs else 1.0
    store = d / "store"
    publish(open_store(str(store)), plan, evaluate_gate(plan, {"size_greedy": cost * 2}, 0.0))
    argv = ["plans", "show", plan.plan_id, "--store", str(store), "--torchrec"]
    if not tamper:
        r = invoke(argv)
        return r[0] == 0 and '"row_wise"' in r[1] and '"data_parallel"' in r[1], r[2].strip()[:200]
    f = next(p for p in store.rglob(f"{plan.plan_id}.json"))
    data = json.loads(f.read_text())
    data["data_parallel"] = ["c", "c"]
    f.write_text(json.dumps(data))
    (f.parent / (f.name + ".sha256")).write_text(_hashlib.sha256(f.read_bytes()).hexdigest() + "  x\n")
    return refused(invoke(argv), "")


def run_types_lenient(d: Path, types: str) -> tuple[bool, str]:
    """`plan -s dreamshard --types` with duplicated or empty entries reads them as the set of the named types
    (documented: comma-separated, blanks ignored): a legal plan, no traceback, only the named types used."""
    from dreamshard.cli.app import invoke
    from dreamshard.documents import load_plan

    invf, _, _ = types_files(d)
    out = d / "p.json"
    r = invoke(
        [
            "plan",
            "-i",
            str(invf),
            "-d",
            "2",
            "-m",
            "1",
            "-s",
            "dreamshard",
            "--batch-size",
            "512",
            "--types",
            types,
            "-o",
            str(out),
        ]
    )
    if r[0] != 0 or "Traceback" in r[2]:
        return False, r[2].strip()[-200:]
    named = {t for t in types.split(",") if t} | {"table_wise", "column_wise"}
    used = set(load_plan(out).sharding_types())
    return used <= named, f"types used {sorted(used)}"
