"""Hostile cases of the sharding types that landed with row-wise and data-parallel plans, run by
bench/hostile_cases.py (`cases(directory, case)`); tests/test_hardening_types.py holds the same behaviour as tests
(both run the attack tables of tests/hardening_support.py).

- plan files with the new fields (`row_shards`, `data_parallel`): duplicated, colliding, out-of-range, mistyped,
  huge (100k shards) and truncated, through `plans publish --measure`, `compare --plan`, `torchrec export` and
  `whatif`; a stored typed plan through `plans show`;
- `whatif` moving or swapping a row shard or a replica;
- topology options of `plan` and the `topology:` fields of params.yaml (hosts, devices per host, inter-host
  bandwidth, optimizer, memory model and reserve, `--types`);
- TorchRec plan files with row ranges, data-parallel ranks and local_world_size that do not fit, via
  `torchrec import` and `load_sharding_plan`.

A case holds when the input is refused in one short line (exit 2, no traceback) naming the table or field, and
nothing is written; or, for the lenient `--types` spellings and `plans show` of a legal plan, when it works.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
import hardening_support as hs  # noqa: E402 - tests/ is not a package

Case = Callable[[str, str, str], Callable[[Callable[[], Any]], None]]


def cases(d: Path, case: Case) -> None:  # noqa: C901 - one flat list of cases reads best
    d.mkdir(parents=True, exist_ok=True)
    n = iter(range(10**6))

    def fresh() -> Path:
        return d / str(next(n))

    for what in hs.PLAN_ATTACKS:
        for command in hs.PLAN_COMMANDS:

            @case("types.plan", f"{command}: {what}", f"{command} bad.json -i inv.yaml")
            def _(what: str = what, command: str = command) -> tuple[bool, str]:
                return hs.run_plan_attack(fresh(), what, command)

    for command in hs.PLAN_COMMANDS:

        @case("types.plan", f"{command}: a typed plan file cut in half", f"{command} cut.json -i inv.yaml")
        def _(command: str = command) -> tuple[bool, str]:
            return hs.run_truncated(fresh(), command)

    for tamper in (False, True):

        @case(
            "types.plan",
            "plans show --torchrec: a stored typed plan"
            + (
                ", edited (c twice in data_parallel, sidecar rewritten): refused"
                if tamper
                else ": row_wise and data_parallel shown"
            ),
            "plans show ID --store S --torchrec",
        )
        def _(tamper: bool = tamper) -> tuple[bool, str]:
            return hs.run_show(fresh(), tamper)

    for what, argv in hs.WHATIF_ATTACKS.items():

        @case(
            "types.whatif", f"whatif {what}: refused naming the unit", f"whatif plan.json -i inv.yaml {' '.join(argv)}"
        )
        def _(what: str = what) -> tuple[bool, str]:
            return hs.run_whatif_attack(fresh(), what)

    for what, (argv, _needle) in hs.TOPOLOGY_ATTACKS.items():

        @case("types.topology", f"plan {what}", f"plan -i inv.yaml -m 1 -s size_greedy {' '.join(argv)}")
        def _(what: str = what) -> tuple[bool, str]:
            return hs.run_topology_attack(fresh(), what)

    for types in ("row_wise,row_wise", "row_wise,,data_parallel", ""):

        @case(
            "types.topology",
            f"plan --types '{types}': read as the set of the named types",
            f"plan -s dreamshard --types '{types}'",
        )
        def _(types: str = types) -> tuple[bool, str]:
            return hs.run_types_lenient(fresh(), types)

    for what in hs.PARAMS_ATTACKS:

        @case("types.params", f"params.yaml topology.{what}", "plan -i inv.yaml -d 4 --params params.yaml")
        def _(what: str = what) -> tuple[bool, str]:
            return hs.run_params_attack(fresh(), what)

    for what in hs.TORCHREC_ATTACKS:
        for via, command in (
            ("import", "torchrec import bad.json -i inv.yaml -m 1"),
            ("load", "load_sharding_plan(bad.json, ebc)"),
        ):

            @case("types.torchrec", f"{via}: {what}", command)
            def _(what: str = what, via: str = via) -> tuple[bool, str]:
                return hs.run_torchrec_attack(fresh(), what, via)
