"""The TorchRec plan file's hostile cases (issue 18 items 9 and 10), run by bench/hostile_cases.py.

18.9: `dreamshard torchrec export` of a plan that is not legal for its inventory (a table missing, an unknown
table, a table both whole and split, a device over its memory, a forged memory figure): it holds when the
export refuses in one line with exit 2 and writes nothing (the rule: `memory.check_plan`, as the gate's).
18.10: a file whose column ranges are not in column order: it holds when `torchrec import` and
`load_sharding_plan` put the same columns on the same ranks (both read the shards through
`TableSharding.column_shards`), and overlapping or gapped ranges are refused by both.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from hardening_support import TORCHREC_INV  # noqa: E402 - tests/ is not a package
from hostile_cases import one_line_2  # bench/ is the script's directory

from dreamshard.cli.app import invoke as cli  # noqa: E402
from dreamshard.documents import load_plan, save_inventory, save_plan
from dreamshard.errors import PlanError
from dreamshard.sharders import make_plan
from dreamshard.values import ColumnShard, Inventory, Table, Topology

Case = Callable[[str, str, str], Callable[[Callable[[], Any]], None]]

INV = TORCHREC_INV
ONE = Inventory(name="one", tables=(Table(name="t", num_embeddings=300, embedding_dim=16, pooling_factor=1.0),))
TOPO = Topology(num_devices=2, memory_per_device_gb=1.0)

#: 18.9: what is edited in a legal plan file, and what the one error line must name.
EDITS: dict[str, tuple[Callable[[dict[str, Any]], None], str]] = {
    "a table missing": (lambda p: p["placement"].pop("c"), "table 'c' has no device"),
    "an unknown table": (lambda p: p["placement"].update(ghost=1), "table 'ghost', which is not in inventory"),
    "a table both whole and split": (lambda p: p["placement"].update(b=1), "table 'b' is both placed whole and split"),
    "a shard of a whole table as a unit": (
        lambda p: p["placement"].update({"a@0:8": 1}),
        "table 'a@0:8', which is not",
    ),
    "a device over its memory": (lambda p: p["topology"].update(memory_per_device_gb=1e-6), "GB memory limit"),
    "a forged memory figure": (lambda p: p.update(memory_per_device_gb=[0.0, 0.0]), "states 0 GB on device 0"),
}


def _file(path: Path, ranges: list[list[int]]) -> Path:
    path.write_text(
        json.dumps(
            {
                "world_size": 2,
                "tables": {"t": {"sharding_type": "column_wise", "ranks": [0, 1], "column_ranges": ranges}},
            }
        )
    )
    return path


def _loaded(path: Path) -> list[tuple[int, int, int]]:
    from dreamshard.integrations.torchrec import build_ebc, load_sharding_plan  # torch + torchrec: only here

    ps = load_sharding_plan(path, build_ebc(ONE)).plan[""]["t"]
    return sorted(
        (int(s.shard_offsets[1]), int(s.shard_offsets[1] + s.shard_sizes[1]), s.placement.rank())
        for s in ps.sharding_spec.shards
    )


def cases(d: Path, case: Case) -> None:  # noqa: C901 - one flat list of cases reads best
    d.mkdir(parents=True, exist_ok=True)
    plan = make_plan(
        INV,
        TOPO,
        {"a": 0, "c": 1},
        "hand",
        column_shards={"b": (ColumnShard(start=0, end=16, device=1), ColumnShard(start=16, end=32, device=0))},
    )
    invf, planf = save_inventory(INV, d / "inv.yaml"), save_plan(plan, d / "plan.json")
    onef = save_inventory(ONE, d / "one.yaml")

    for what, (edit, needle) in EDITS.items():

        @case("18.9", f"torchrec export of a plan with {what}", "torchrec export edited.json -i inv.yaml -o tr.json")
        def _(edit: Callable[[dict[str, Any]], None] = edit, needle: str = needle) -> tuple[bool, str]:
            data = json.loads(planf.read_text())
            edit(data)
            edited, out = d / "edited.json", d / "tr.json"
            edited.write_text(json.dumps(data))
            out.unlink(missing_ok=True)
            r = cli(["torchrec", "export", str(edited), "-i", str(invf), "-o", str(out)])
            return one_line_2(r, needle) and not out.exists(), r[2].strip()[:80] or f"exit {r[0]}"

    @case("18.9", "torchrec export of the legal plan still writes the file", "torchrec export plan.json -i inv.yaml")
    def _() -> tuple[bool, str]:
        out = d / "legal-tr.json"
        r = cli(["torchrec", "export", str(planf), "-i", str(invf), "-o", str(out)])
        return r[0] == 0 and out.exists(), r[2].strip()[:80]

    for what, ranges in (("equal widths", [[8, 16], [0, 8]]), ("unequal widths", [[4, 16], [0, 4]])):

        @case(
            "18.10",
            f"column_ranges out of column order ({what}): import and load_sharding_plan agree",
            "torchrec import tr.json; load_sharding_plan(tr.json, ebc)",
        )
        def _(ranges: list[list[int]] = ranges) -> tuple[bool, str]:
            tr, out = _file(d / "order.json", ranges), d / "imported.json"
            out.unlink(missing_ok=True)
            r = cli(["torchrec", "import", str(tr), "-i", str(onef), "-m", "1", "-o", str(out)])
            if r[0] != 0:
                return False, r[2].strip()[:80]
            imported = sorted((sh.start, sh.end, sh.device) for sh in load_plan(out).column_shards["t"])
            loaded = _loaded(tr)
            expected = sorted((s, e, rank) for (s, e), rank in zip(ranges, [0, 1], strict=True))
            return imported == loaded == expected, f"import {imported}, load_sharding_plan {loaded}"

    for what, ranges in (("overlapping", [[8, 16], [0, 12]]), ("gapped", [[12, 16], [0, 8]])):

        @case(
            "18.10",
            f"{what} column ranges refused by import and load_sharding_plan",
            "torchrec import tr.json; load_sharding_plan(tr.json, ebc)",
        )
        def _(ranges: list[list[int]] = ranges) -> tuple[bool, str]:
            tr, out = _file(d / "bad.json", ranges), d / "bad-imported.json"
            r = cli(["torchrec", "import", str(tr), "-i", str(onef), "-m", "1", "-o", str(out)])
            try:
                _loaded(tr)
                loaded_refused = False
            except PlanError as e:
                loaded_refused = "gap or overlap" in str(e) and "\n" not in str(e)
            return (
                one_line_2(r, "gap or overlap") and not out.exists() and loaded_refused,
                r[2].strip()[:80] or f"exit {r[0]}",
            )
