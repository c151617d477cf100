"""Fuzzing the classes of the second hardening round: store names, training records, measurement-file
tails, index budgets. The property, for every input: the command succeeds with valid output, or exits 2 with
one line and changes nothing; no input of one kind can destroy another's data."""

from __future__ import annotations

import json
import math
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from store_helpers import approve, world

from dreamshard.cli.app import invoke
from dreamshard.documents import save_inventory
from dreamshard.errors import DreamshardError
from dreamshard.evaluation import evaluate_plan
from dreamshard.inventory.indices import MAX_INDEX_BYTES, check_index_budget, index_bytes
from dreamshard.inventory.synth import synth_inventory
from dreamshard.learning.model_store import load_model
from dreamshard.profiling import make_oracle
from dreamshard.store import list_plans, open_store, publish, show
from dreamshard.values import Table

FUZZ = settings(max_examples=30, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))

ID_PARTS = ["p", ".record", ".json", ".sha256", "rejected", "current", ".", "-", "_", "x"]
plan_ids = st.lists(st.sampled_from(ID_PARTS), min_size=1, max_size=4).map("".join)


@settings(FUZZ)
@given(ids=st.lists(plan_ids, min_size=2, max_size=3, unique=True))
def test_fuzz_plan_ids_never_collide_in_the_store(ids: list[str]) -> None:
    """Store names (18.1): any set of distinct ids publishes to distinct objects, or one is refused up front."""
    w = world()
    measured = evaluate_plan(w.inventory, w.good, make_oracle("simulator"))
    with tempfile.TemporaryDirectory() as d:
        store = open_store(d)
        kept: dict[str, Any] = {}
        for pid in ids:
            plan = measured.model_copy(update={"plan_id": pid})
            try:
                publish(store, plan, approve(plan))
            except DreamshardError:
                continue  # a refused name: nothing stored under it
            kept[pid] = plan
        for pid, plan in kept.items():
            assert show(store, pid) == plan
        assert {r.plan_id for r in list_plans(store, w.inventory.name)} == set(kept)


# -- training records (18.6, 18.14) ------------------------------------------------------------------------
_FIELDS = ["fwd_compute", "bwd_compute", "fwd_comm", "bwd_comm"]
bad_values = st.sampled_from([math.nan, math.inf, -1.0, 1e308, 1e12, 0.0, 3.5])


@pytest.fixture(scope="module")
def profile(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("fuzz-train")
    inv = save_inventory(synth_inventory(5, 0, name="inv"), d / "inv.yaml")
    (d / "params.yaml").write_text("profile: {backend: simulator}\ntrain_cost: {steps: 2, ensemble_size: 1}\n")
    assert (
        invoke(
            [
                "profile",
                "-i",
                str(inv),
                "-d",
                "2",
                "-m",
                "1",
                "--backend",
                "simulator",
                "-o",
                str(d / "m.jsonl"),
                "--no-progress",
                "-k",
                "3",
            ]
        )[0]
        == 0
    )
    return {"dir": d, "inventory": inv, "params": d / "params.yaml", "measurements": d / "m.jsonl"}


@settings(FUZZ, max_examples=20)
@given(
    which=st.integers(min_value=0, max_value=7),
    field=st.sampled_from(_FIELDS),
    value=bad_values,
    edit=st.sampled_from(["cost", "overall", "device", "duplicate"]),
)
def test_fuzz_training_records_give_a_finite_model_or_one_line(
    profile: dict[str, Path], which: int, field: str, value: float, edit: str
) -> None:
    rows = [json.loads(x) for x in profile["measurements"].read_text().splitlines()]
    r = rows[which % len(rows)]
    if edit == "cost":
        r["costs"]["per_device"][0][field] = value
    elif edit == "overall":
        r["costs"]["overall_ms"] = value
    elif edit == "device":
        r["placement"][next(iter(r["placement"]))] = int(value) if math.isfinite(value) else 99
    else:
        dup = json.loads(json.dumps(r))
        dup["costs"]["overall_ms"] = value
        rows.append(dup)
    with tempfile.TemporaryDirectory() as d:
        bad = Path(d) / "bad.jsonl"
        bad.write_text("".join(json.dumps(x, allow_nan=True) + "\n" for x in rows))
        model = Path(d) / "model"
        code, _, err = invoke(
            [
                "train-cost",
                "-i",
                str(profile["inventory"]),
                "--measurements",
                str(bad),
                "--params",
                str(profile["params"]),
                "--model-dir",
                str(model),
            ]
        )
        assert "Traceback" not in err
        if code == 0:
            loaded = load_model(model, require_policy=False)  # refuses non-finite weights
            assert loaded.cost_net is not None
        else:
            assert code == 2 and len(err.strip().splitlines()) == 1, err
            assert not model.exists()


# -- measurement-file tails (18.5) -------------------------------------------------------------------------
tails = st.one_of(st.binary(max_size=40), st.sampled_from([b'{"plan_id": "x"}', b'{"measurement_id": "pl', b"}", b""]))


@settings(FUZZ, max_examples=25)
@given(tail=tails, valid_first=st.booleans())
def test_fuzz_a_measurement_file_is_resumed_or_refused_never_cut(
    profile: dict[str, Path], tail: bytes, valid_first: bool
) -> None:
    with tempfile.TemporaryDirectory() as d:
        out = Path(d) / "m.jsonl"
        head = profile["measurements"].read_bytes().splitlines(keepends=True)[:2] if valid_first else []
        out.write_bytes(b"".join(head) + tail)
        before = out.read_bytes()
        code, _, err = invoke(
            [
                "profile",
                "-i",
                str(profile["inventory"]),
                "-d",
                "2",
                "-m",
                "1",
                "--backend",
                "simulator",
                "-o",
                str(out),
                "--no-progress",
                "-k",
                "1",
            ]
        )
        assert "Traceback" not in err
        if code == 2:
            assert len(err.strip().splitlines()) == 1 and out.read_bytes() == before
        else:
            assert code == 0
            after = out.read_bytes()
            kept = before[: before.rfind(b"\n") + 1] if not before.endswith(b"\n") else before
            assert after.startswith(kept)  # at most a killed writer's partial last record was dropped


# -- index budgets (18.7) ----------------------------------------------------------------------------------
@settings(FUZZ, max_examples=60)
@given(
    pooling=st.floats(min_value=0, max_value=1e6),
    batch=st.integers(min_value=1, max_value=2**20),
    batches=st.integers(min_value=1, max_value=3),
)
def test_fuzz_the_index_budget_is_decided_before_anything_is_drawn(pooling: float, batch: int, batches: int) -> None:
    t = Table(name="t", num_embeddings=1000, embedding_dim=8, pooling_factor=pooling)
    need = index_bytes([t], batch, batches)
    if need <= MAX_INDEX_BYTES:
        assert check_index_budget([t], batch, batches) == need
    else:
        with pytest.raises(DreamshardError, match="pooling_factor"):
            check_index_budget([t], batch, batches)
