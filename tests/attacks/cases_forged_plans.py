"""Attacks by a plan file that lies: a placement that does not place the inventory, a forged fingerprint, memory
figure or measured cost (`plans publish` judges the placement alone, docs/architecture/stores.md, "Trust boundary"),
metadata the store must not keep (lineage, model version, predicted costs), and a stored lineage
`plans reproduce` cannot check. The files: the World's (tests/store_helpers.py)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness import Case, Refused, Result, Runs, Table, cli, edited
from store_helpers import approve, world, world_inventory

from dreamshard.values.lineage import Lineage

GATE = "--store store --comparison cmp.json --params gate-params.yaml"


def _drop_first(data: dict[str, Any]) -> None:
    data["placement"].pop(next(iter(data["placement"])))


#: The World's good plan file edited: `plans publish` refuses it, with or without the inventory.
FORGERIES: dict[str, Callable[[dict[str, Any]], object]] = {
    "an empty placement": lambda d: d.update(placement={}, memory_per_device_gb=[0.0, 0.0]),
    "a table missing": _drop_first,
    "an extra table": lambda d: d["placement"].update(ghost=0),
    "an arbitrary fingerprint": lambda d: d.update(inventory_fingerprint="ab" * 32),
    "forged memory": lambda d: d.update(memory_per_device_gb=[0.001, 0.001]),
}


#: What a forged plan file says besides its placement (none of it may reach the store).
METADATA: dict[str, Any] = {
    "lineage": Lineage(
        inventory_fingerprint=world_inventory().fingerprint(),
        flow_run_id="fake-run",
        dvc_remote="https://user:hunter2@evil.example/x",
    ).model_dump(mode="json"),
    "model_version": "v-forged",
    "verification": None,
    "out_of_range": ["table t0 rows outside the trained range"],
}


def _forged_metadata(work: Path) -> None:
    data = json.loads((work / "good.json").read_text())
    data.update(METADATA, predicted=data.get("measured"))
    (work / "forged.json").write_text(json.dumps(data))


def _metadata_not_stored(work: Path, r: Result) -> None:
    plan_id = json.loads((work / "good.json").read_text())["plan_id"]
    shown = cli(["plans", "show", plan_id, "--store", "store"])
    data = json.loads(shown.out)
    assert data["lineage"] is None and data["predicted"] is None and data["model_version"] is None
    assert data["verification"] is None and data["out_of_range"] == METADATA["out_of_range"]
    assert data["measured_by"]["is_simulated"] is True
    lineage = cli(["plans", "show", plan_id, "--store", "store", "--lineage"])
    assert lineage.code == 2 and "hunter2" not in shown.out + lineage.out + lineage.err


def _forged_measured(work: Path) -> None:
    data = json.loads((work / "worse.json").read_text())
    data["measured"] = {
        "per_device": [{"fwd_compute": 0.001, "fwd_comm": 0, "bwd_comm": 0, "bwd_compute": 0}] * 2,
        "overall_ms": 0.001,
    }
    (work / "forged.json").write_text(json.dumps(data))


def _does_not_beat(work: Path, r: Result) -> None:
    assert "does not beat" in r.err, r.err


def _stored_with_lineage(**lineage: object) -> Callable[[Path], None]:
    """A setup: an older store's plan (the World's good one, measured) whose lineage passes every check but
    `lineage`, published to `repro-store`."""

    def setup(work: Path) -> None:
        from dreamshard.config.settings import installed_pipeline_file
        from dreamshard.documents import load_plan
        from dreamshard.store import open_store, publish

        w = world()
        fields: dict[str, Any] = {
            "inventory_fingerprint": w.inventory.fingerprint(),
            "dvc_lock": "schema: '2.0'\n",
            "params": "{}\n",
            "dvc_remote": str(work / "remote"),
            "dvc_yaml": installed_pipeline_file("dvc.yaml").read_text(),
            "model_md5": "a" * 32 + ".dir",
            "measurements_md5": "b" * 32,
            **lineage,
        }
        good = load_plan(work / "good.json")
        measured = next(r for r in w.comparison.results if r.plan.plan_id == w.good.plan_id).plan.measured
        plan = good.model_copy(update={"lineage": Lineage(**fields), "measured": measured})
        publish(open_store(str(work / "repro-store")), plan, approve(plan))

    return setup


def _reproduce(work: Path) -> list[str]:
    plan_id = json.loads((work / "good.json").read_text())["plan_id"]
    return ["plans", "reproduce", plan_id, "--store", "repro-store", "--into", "repro"]


def _cases() -> list[Case]:
    cases: list[Case] = [
        Refused(
            f"publish {'with' if with_i else 'without'} -i: {what}",
            f"plans publish forged.json {GATE}" + (" -i inv.yaml" if with_i else ""),
            setup=edited("good.json", "forged.json", edit),
        )
        for what, edit in FORGERIES.items()
        for with_i in (False, True)
    ]
    cases += [
        Runs(
            "publish with -i: forged measured costs (the gate measures the placement)",
            f"plans publish forged.json {GATE} -i inv.yaml",
            _does_not_beat,
            setup=_forged_measured,
            code=1,
        ),
        Runs(
            "a plan file's lineage, model_version, predicted costs and verification are not stored",
            f"plans publish forged.json {GATE} -i inv.yaml --allow-simulated",
            _metadata_not_stored,
            setup=_forged_metadata,
        ),
        Refused(
            "plans reproduce: a stored lineage with the md5s nulled",
            _reproduce,
            "no md5 for the model and the measurements",
            setup=_stored_with_lineage(model_md5=None, measurements_md5=None),
        ),
        Refused(
            "plans reproduce: a stored lineage whose dvc.yaml stage runs an arbitrary command",
            _reproduce,
            "not the installed pipeline's",
            setup=_stored_with_lineage(
                dvc_yaml="stages:\n  inventory:\n    cmd: sh -c 'touch pwned'\n    outs: [data/inventory.yaml]\n"
            ),
        ),
    ]
    return cases


TABLE = Table("forged plans", _cases(), lambda d: world().write(d))
