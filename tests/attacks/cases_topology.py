"""Attacks on the topology: `plan`'s options (hosts, devices per host, optimizer, memory model and reserve,
`--types`) and the `topology:` fields of params.yaml: zero, negative, huge, NaN/inf, bools, strings, hosts that do
not divide the devices, a reserve that leaves no table room (the line names the table and the limit)."""

from __future__ import annotations

from pathlib import Path

from cases_plan_files import TYPES_INV
from harness import Case, Refused, Result, Runs, Table, written

from dreamshard.documents import save_inventory

#: `plan -i inv.yaml -m 1 -s size_greedy` with these options: the one error line holds the needle.
OPTIONS: dict[str, str] = {
    "--hosts 0 --devices-per-host 2": "--hosts",
    "--hosts 2 --devices-per-host 0": "--devices-per-host",
    "--hosts 2 --devices-per-host -1": "--devices-per-host",
    "--hosts 2 --devices-per-host nan": "--devices-per-host",
    "--hosts 2 --devices-per-host true": "--devices-per-host",
    "--hosts 4096 --devices-per-host 4096": "at most 4096",
    "-d 3 --hosts 2 --devices-per-host 2": "--devices 3 is not --hosts 2 x --devices-per-host 2",
    "-d 3 --devices-per-host 2": "devices_per_host must divide num_devices",
    "-d 4 --hosts 2": "--hosts needs --devices-per-host",
    "-d 2 --optimizer lamb": "topology.optimizer",
    "-d 2 --optimizer ''": "topology.optimizer",
    "-d 2 --memory-model x": "topology.memory_model",
    "-d 2 --memory-reserve -0.1": "--memory-reserve",
    "-d 2 --memory-reserve 1": "--memory-reserve",
    "-d 2 --memory-reserve nan": "--memory-reserve",
    "-d 2 --memory-reserve inf": "--memory-reserve",
    "-d 2 -m 0.001 --memory-reserve 0.99": "fits on no device (largest free memory 0.010 MB)",
    "-d 2 -m 0.001 --memory-reserve 0.99 --memory-model torchrec": "fits on no device",
    "-d 2 -m nan": "--memory-gb",
    "-d 2 -s dreamshard --types row_wise,bogus": "unknown sharding type 'bogus'",
    "-d 2 -s dreamshard --types table_wise": "unknown sharding type 'table_wise'",
}

#: params.yaml `topology:` fields (with -d 4): the one error line holds the needle.
PARAMS: tuple[tuple[str, str, str], ...] = (
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
    ("memory_reserve", "0.99", "fits on no device (largest free memory"),
)


def world(d: Path) -> None:
    save_inventory(TYPES_INV, d / "inv.yaml")


def _only_the_named_types(types: str) -> object:
    """`--types` with repeated or blank entries is read as the set of the named types (documented:
    comma-separated, blanks ignored): the plan uses no other."""

    def then(work: Path, r: Result) -> None:
        from dreamshard.documents import load_plan

        named = {t for t in types.split(",") if t} | {"table_wise", "column_wise"}
        used = set(load_plan(work / "p.json").sharding_types())
        assert used <= named, f"types used {sorted(used)}"

    return then


def _cases() -> list[Case]:
    cases: list[Case] = [
        Refused(f"plan {options}", f"plan -i inv.yaml -m 1 -s size_greedy --batch-size 512 {options} -o p.json", needle)
        for options, needle in OPTIONS.items()
    ]
    cases += [
        Runs(
            f"plan --types '{types}': read as the set of the named types",
            f"plan -i inv.yaml -d 2 -m 1 -s dreamshard --batch-size 512 --types '{types}' -o p.json",
            _only_the_named_types(types),
        )
        for types in ("row_wise,row_wise", "row_wise,,data_parallel", "")
    ]
    cases += [
        Refused(
            f"params.yaml topology.{field}: {value}",
            "plan -i inv.yaml -d 4 -s size_greedy --params params.yaml -o p.json",
            needle,
            setup=written(
                "params.yaml", f"topology:\n  memory_per_device_gb: 0.001\n  batch_size: 512\n  {field}: {value}\n"
            ),
        )
        for field, value, needle in PARAMS
    ]
    return cases


TABLE = Table("topology", _cases(), world)
