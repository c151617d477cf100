"""The trust boundary of a plan file (docs/architecture/stores.md, "Trust boundary"): no field but the placement steers
the gate, the store's order or a training job's lookup. A forged `schema_fingerprint` once flipped a rejection into a
fallback and an inconclusive plan into an approval; with a 2099 `created_at` it hid a model's plan from its job."""

from __future__ import annotations

import json
import shutil
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from store_helpers import NoisyOracle, world

from dreamshard.cli.app import invoke
from dreamshard.config.settings import resolve
from dreamshard.documents import load_inventory, load_plan, save_plan
from dreamshard.errors import DreamshardError
from dreamshard.gate import PLAN_FIELD_AUTHORITY, check_trust_table
from dreamshard.inventory.synth import synth_inventory
from dreamshard.store import get_current, open_store, publish, push_inventory
from dreamshard.store.lookup import current_plan_for_schema
from dreamshard.usecases.publish import PublishRequest, read_comparison
from dreamshard.usecases.publish import publish as publish_plan
from dreamshard.usecases.review import NoReviewer
from dreamshard.values import GateDecision, Plan

FORGED = "f" * 64
#: The fields a plan file may set freely: what the gate judges (nested shard models included).
PLACEMENT = {"placement", "column_shards", "row_shards", "data_parallel"}


def one_line_2(r: tuple[int, str, str]) -> str:
    lines = r[2].strip().splitlines()
    assert r[0] == 2 and len(lines) == 1 and "Traceback" not in r[1] + r[2], r
    return lines[0]


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The World's files and a store whose current plan is the World's good plan (approved)."""
    from dreamshard.evaluation import compare_sharders

    w = world()
    files = w.write(tmp_path_factory.mktemp("trust"))
    # `bad` measured with 5% noise per measurement: inconclusive (its +2% is inside the noise)
    noisy = compare_sharders(
        w.inventory, w.topology, w.baselines, NoisyOracle(0, 0.05), rounds=5, extra_plans=[w.bad, w.good]
    )  # the current plan (good) measured too: the gate judges bad against it
    files["noisy"] = files["dir"] / "noisy.json"
    files["noisy"].write_text(noisy.model_dump_json())
    r = invoke(
        [
            "plans",
            "publish",
            str(files["good"]),
            "--store",
            str(files["store"]),
            "-i",
            str(files["inventory"]),
            "--comparison",
            str(files["comparison"]),
            "--params",
            str(files["params"]),
        ]
    )
    assert r[0] == 0 and "published" in r[1], r
    return files


@pytest.fixture()
def files(pristine: dict[str, Path], tmp_path: Path) -> dict[str, Path]:
    out = {k: v for k, v in pristine.items()}
    out["store"] = tmp_path / "store"
    shutil.copytree(pristine["store"], out["store"])
    return out


def _forge(path: Path, out: Path, **fields: Any) -> Path:
    out.write_text(json.dumps({**json.loads(path.read_text()), **fields}))
    return out


#: each case's plan and the comparison it is judged on: `worse` is rejected, `bad` inconclusive
CASES = {"worse": "comparison", "bad": "noisy"}


def _publish(files: dict[str, Path], plan: Path, comparison: str) -> tuple[int, str, str]:
    return invoke(
        [
            "plans",
            "publish",
            str(plan),
            "--store",
            str(files["store"]),
            "-i",
            str(files["inventory"]),
            "--comparison",
            str(files[comparison]),
            "--params",
            str(files["params"]),
        ]
    )


def test_every_plan_field_has_an_authority() -> None:
    check_trust_table()
    with pytest.raises(TypeError, match="without a trust decision: \\['new_field'\\]"):
        check_trust_table([*Plan.model_fields, "new_field"])


@pytest.mark.parametrize("plan", ["worse", "bad"])
def test_a_forged_schema_fingerprint_is_refused_and_the_current_plan_stays(files: dict[str, Path], plan: str) -> None:
    """Defect 1: `worse` is rejected (and the current plan serves its version: no fallback); `bad` is inconclusive
    (the current plan stays). Either one with only its schema fingerprint edited became current."""
    before = get_current(open_store(str(files["store"])), "inv").plan_id
    forged = _forge(files[plan], files["dir"] / f"forged-{plan}.json", schema_fingerprint=FORGED)
    line = one_line_2(_publish(files, forged, CASES[plan]))
    assert "schema_fingerprint" in line and "recomputes it from the inventory" in line
    assert get_current(open_store(str(files["store"])), "inv").plan_id == before
    r = _publish(files, files[plan], CASES[plan])  # unedited: decided on its merits, the current plan stays
    assert r[0] == 1 and ("rejected" if plan == "worse" else "inconclusive") in r[1] + r[2], r
    assert get_current(open_store(str(files["store"])), "inv").plan_id == before


def test_a_forged_schema_and_date_cannot_hide_a_models_plan(files: dict[str, Path]) -> None:
    """Defect 2: a plan of an unrelated inventory carrying the model's schema and a 2099 date was what the job
    found. The gate refuses the file; a store written around the gate still answers with the model's plan: the
    schema is recomputed from the stored inventory version, the order is the store's own."""
    w = world()
    schema = w.inventory.schema_fingerprint()
    store = open_store(str(files["store"]))
    assert current_plan_for_schema(store, schema).plan.plan_id == w.good.plan_id  # type: ignore[union-attr]

    other = synth_inventory(6, 3, name="other")
    plan = w.good.__class__.model_validate(
        {
            **json.loads(save_plan(_other_plan(other), files["dir"] / "o.json").read_text()),
            "schema_fingerprint": schema,
            "created_at": "2099-01-01T00:00:00Z",
        }
    )
    forged = save_plan(plan, files["dir"] / "other-forged.json")
    from dreamshard.documents import save_inventory

    inv_file = save_inventory(other, files["dir"] / "other.yaml")
    r = invoke(
        [
            "plans",
            "publish",
            str(forged),
            "--store",
            str(files["store"]),
            "-i",
            str(inv_file),
            "--measure",
            "--params",
            str(files["params"]),
            "--allow-simulated",
        ]
    )
    assert "schema_fingerprint" in one_line_2(r)

    # Around the gate (a store written by hand, or before this check existed): the forgery is in the store.
    push_inventory(store, other)
    publish(store, plan, GateDecision(approved=True, outcome="approved", reason="forged", plan_id=plan.plan_id))
    found = current_plan_for_schema(store, schema)
    assert found.plan is not None and found.plan.plan_id == w.good.plan_id and found.matches == ("inv",)


def _other_plan(inv: Any) -> Plan:
    from dreamshard.sharders import get_sharder

    return get_sharder("dim_greedy").shard(inv, world().topology)


def test_the_store_orders_by_its_own_writes(files: dict[str, Path]) -> None:
    """`plans list` and the lookup order by the store's write, never by a plan file's `created_at`."""
    w = world()
    store = open_store(str(files["store"]))
    early = w.good.model_copy(
        update={"plan_id": "plan-dated-1999", "created_at": datetime(1999, 1, 1, tzinfo=timezone.utc)}
    )
    publish(store, early, GateDecision(approved=True, outcome="approved", reason="r", plan_id=early.plan_id))
    assert current_plan_for_schema(store, w.inventory.schema_fingerprint()).plan.plan_id == early.plan_id  # type: ignore[union-attr]
    r = invoke(["plans", "list", "--store", str(files["store"]), "--json"])
    listed = [x["plan_id"] for x in json.loads(r[1]) if x["status"] == "approved"]
    assert listed == [w.good.plan_id, early.plan_id]


# -- the property: any one field but the placement, changed, decides nothing --------------------------------------
def _leaves(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in _leaves(v, (*path, k))] or [path]
    if isinstance(value, list) and value:
        return [p for i, v in enumerate(value) for p in _leaves(v, (*path, i))]
    return [path]


def _changed(value: Any, how: int) -> Any:
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return [value + 1, 0, 10**9][how % 3]
    if isinstance(value, float):
        return [value * 1.5 + 1.0, 0.0, 1e300][how % 3]
    if isinstance(value, str):
        if value[:4].isdigit() and "T" in value:  # a date
            return ["2099-01-01T00:00:00Z", "1970-01-01T00:00:00Z", value][how % 3]
        return [value + "x", FORGED, ""][how % 3]
    if isinstance(value, list):
        return [[], value + value, None][how % 3]
    if isinstance(value, dict):
        return [{}, None, {"x": 1}][how % 3]
    return ["x", 1, {}][how % 3]  # None: something where nothing was


def _filled(plan: Plan) -> dict[str, Any]:
    """The plan as JSON with every optional field given a value, so its nested fields are walked too."""
    w = world()
    entry = next(r for r in w.comparison.results if r.plan.plan_id == plan.plan_id)  # any measured figures do
    data = json.loads(plan.model_dump_json())
    extra = json.loads(
        entry.plan.model_copy(
            update={
                "predicted": entry.plan.measured,
                "model_version": "v-1",
                "schema_fingerprint": w.inventory.schema_fingerprint(),
            }
        ).model_dump_json()
    )
    for key in ("predicted", "measured", "measured_by", "model_version", "schema_fingerprint"):
        data[key] = extra[key]
    return data


def _outcome(files: dict[str, Path], data: dict[str, Any], name: str, comparison: str) -> tuple[Any, ...] | None:
    """(decision, fallback, what the job finds) for this plan file; None when the file is refused."""
    path = files["dir"] / f"{name}.json"
    path.write_text(json.dumps(data))
    store = open_store(str(files["store"]))
    try:  # as `plans publish` reads the files, then gates and stores
        compared, source = read_comparison(files[comparison])
        request = PublishRequest(
            plan=load_plan(path),
            comparison=compared,
            comparison_source=source,
            inventory=load_inventory(files["inventory"]),
            settings=resolve(files["params"]),
            store=str(files["store"]),
        )
        done = publish_plan(request, NoReviewer())
    except (DreamshardError, ValueError):
        return None
    d, plan = done.decision, done.plan
    assert d is not None and plan is not None
    found = current_plan_for_schema(store, world().inventory.schema_fingerprint()).plan
    return (
        d.outcome,
        d.approved,
        d.best_baseline,
        round(d.improvement or 0.0, 9),
        done.fallback_ref is None,
        plan.schema_fingerprint,
        plan.inventory_fingerprint,
        found and found.plan_id,
    )


_PATHS: dict[str, list[tuple[Any, ...]]] = {}


def _paths(name: str) -> list[tuple[Any, ...]]:
    if name not in _PATHS:
        plan = getattr(world(), name)
        _PATHS[name] = [p for p in _leaves(_filled(plan)) if p[0] not in PLACEMENT]
        top = {p[0] for p in _PATHS[name]}
        assert top == set(Plan.model_fields) - PLACEMENT, "every non-placement field is walked"
        assert top <= set(PLAN_FIELD_AUTHORITY)
    return _PATHS[name]


@pytest.mark.parametrize("name", ["worse", "bad"])
@settings(
    max_examples=40,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
def test_no_field_but_the_placement_steers_the_gate_or_the_lookup(
    name: str, files: dict[str, Path], data: st.DataObject
) -> None:
    """For any one field changed (nested ones too), the gate's decision, the fallback and the job's lookup are the
    unchanged plan's, or the file is refused. Each example runs on a fresh copy of the store."""
    base_data = _filled(getattr(world(), name))
    path = data.draw(st.sampled_from(_paths(name)), label="field")
    how = data.draw(st.integers(0, 2), label="how")
    changed = json.loads(json.dumps(base_data))
    node = changed
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = _changed(node[path[-1]], how)
    store = files["store"]
    fresh = store.parent / f"fresh-{abs(hash((path, how)))}"
    shutil.copytree(store, fresh)
    base = _outcome({**files, "store": fresh}, base_data, "base", CASES[name])
    shutil.rmtree(fresh)
    shutil.copytree(store, fresh)
    got = _outcome({**files, "store": fresh}, changed, "changed", CASES[name])
    shutil.rmtree(fresh)
    assert base is not None
    assert got is None or got == base, (path, how, got, base)
