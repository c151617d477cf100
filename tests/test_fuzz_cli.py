"""Fuzzing the boundary: random inventories, plans, store corruptions and CLI arguments.

The property, for every input: exit 0 with valid output (exit 1 where a command documents it: a gate
rejection, a listing with corrupt plans), or exit 2 with exactly one line on stderr, no traceback, and nothing
written or changed. The CLI runs in-process (`dreamshard.cli.app.main`), the backend is the simulator and
inventories are tiny, so the whole file stays well under a minute.
"""

from __future__ import annotations

import contextlib
import json
import math
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from store_helpers import WORLD_BASELINES, gate_file_plan, world, world_inventory

from dreamshard.cli.app import invoke
from dreamshard.documents import load_inventory, load_plan
from dreamshard.gate import baseline_plan
from dreamshard.placement.validate import check_plan
from dreamshard.store import get_current, list_plans, open_store, show
from dreamshard.store.fsck import fsck
from dreamshard.store.inventories import push_inventory

FUZZ = settings(max_examples=40, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))


def snapshot(d: Path) -> dict[str, bytes]:
    return {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


def assert_one_line_error(code: int, err: str) -> None:
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error: "), (code, err)
    assert "Traceback" not in err


@contextlib.contextmanager
def workdir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory() as d:
        yield Path(d)


# -- values a hostile user types -----------------------------------------------------------------------------
weird_numbers = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([True, False, None, "12", "1e3", "", [], {}, 0, 1, 4, 16, 2**40, 2**41, 1e300, -0.0]),
)
weird_names = st.one_of(
    st.text(min_size=0, max_size=12),
    st.sampled_from(["t0", "a/b", "..", "../x", ".h", "t@0:4", "x" * 201, "ok-name_1.v2", "-x", "a b", "ü"]),
    st.integers(),
    st.none(),
)


def table_dicts() -> st.SearchStrategy[dict[str, Any]]:
    plain = st.fixed_dictionaries(
        {
            "name": st.sampled_from(["t0", "t1", "t2"]),
            "num_embeddings": st.integers(min_value=1, max_value=10**6),
            "embedding_dim": st.sampled_from([4, 8, 16, 64]),
            "pooling_factor": st.floats(min_value=0, max_value=50),
        }
    )
    hostile = st.fixed_dictionaries(
        {
            "name": weird_names,
            "num_embeddings": weird_numbers,
            "embedding_dim": weird_numbers,
            "pooling_factor": weird_numbers,
        },
        optional={
            "dtype": st.sampled_from(["fp32", "fp16", "int8", 4]),
            "access_histogram": st.lists(weird_numbers, max_size=18),
            "extra": st.just(1),
        },
    )
    return st.one_of(plain, hostile)


inventory_dicts = st.fixed_dictionaries(
    {"name": weird_names, "tables": st.lists(table_dicts(), min_size=0, max_size=4)},
    optional={"unknown": st.just(1)},
)


@settings(FUZZ, max_examples=80)
@given(data=inventory_dicts, as_yaml=st.booleans())
def test_fuzz_inventory_validate(data: dict[str, Any], as_yaml: bool) -> None:
    with workdir() as d:
        src = d / ("inv.yaml" if as_yaml else "inv.json")
        try:
            src.write_text(json.dumps(data, allow_nan=True))  # YAML parses JSON too
        except (TypeError, ValueError):
            return
        out = d / "out.yaml"
        code, stdout, err = invoke(["inventory", "validate", str(src), "-o", str(out)])
        if code == 0:
            inv = load_inventory(out)
            assert inv.fingerprint() in stdout and all(math.isfinite(t.size_gb) for t in inv.tables)
        else:
            assert_one_line_error(code, err)
            assert not out.exists()


# -- random plans through the gate ------------------------------------------------------------------------
def _mutations() -> st.SearchStrategy[tuple[str, Any]]:
    inventory = world_inventory()  # at import: the world itself (a comparison with TorchRec's planner) waits for a test
    tables = [t.name for t in inventory.tables]
    return st.one_of(
        st.tuples(
            st.just("placement"),
            st.dictionaries(st.sampled_from([*tables, "ghost", "t@0:4"]), weird_numbers, max_size=14),
        ),
        st.tuples(st.just("placement"), st.fixed_dictionaries({t: st.integers(0, 1) for t in tables})),
        st.tuples(st.just("inventory_fingerprint"), st.one_of(st.text(max_size=70), st.just(inventory.fingerprint()))),
        st.tuples(st.just("memory_per_device_gb"), st.lists(weird_numbers, max_size=3)),
        st.tuples(st.just("plan_id"), weird_names),
        st.tuples(st.just("inventory_name"), weird_names),
        st.tuples(st.just("sharder"), st.sampled_from(["dreamshard", "dim_greedy", "round_robin", ""])),
        st.tuples(
            st.just("measured"),
            st.sampled_from(
                [
                    None,
                    {"per_device": [], "overall_ms": 0.0},
                    {
                        "per_device": [{"fwd_compute": 0.0, "fwd_comm": 0.0, "bwd_comm": 0.0, "bwd_compute": 0.0}] * 2,
                        "overall_ms": 0.0,
                    },
                ]
            ),
        ),
        st.tuples(st.just("out_of_range"), st.lists(st.text(max_size=5), max_size=2)),
        st.tuples(
            st.just("column_shards"),
            st.dictionaries(
                st.sampled_from(tables[:2]),
                st.lists(
                    st.fixed_dictionaries({"start": weird_numbers, "end": weird_numbers, "device": weird_numbers}),
                    max_size=3,
                ),
                max_size=1,
            ),
        ),
        st.tuples(
            st.just("topology"),
            st.fixed_dictionaries({"num_devices": weird_numbers, "memory_per_device_gb": weird_numbers}),
        ),
    )


@settings(FUZZ, max_examples=40)
@given(
    base=st.sampled_from(["good", "bad", "worse"]),
    edits=st.lists(_mutations(), max_size=3),
    margin=st.sampled_from([None, "0", "0.05", "0.99", "1", "-1", "nan", "x"]),
)
def test_fuzz_plans_through_the_gate(base: str, edits: list[tuple[str, Any]], margin: str | None) -> None:
    w = world()
    with workdir() as d:
        paths = w.write(d)
        plan = json.loads(paths[base].read_text())
        for key, value in edits:
            plan[key] = value
        try:
            paths[base].write_text(json.dumps(plan, allow_nan=True))
        except (TypeError, ValueError):
            return
        argv = [
            "plans",
            "publish",
            str(paths[base]),
            "--store",
            str(paths["store"]),
            "--comparison",
            str(paths["comparison"]),
            "-i",
            str(paths["inventory"]),
            "--params",
            str(paths["params"]),
        ]
        if margin is not None:
            argv += ["--min-improvement", margin]
        code, _, err = invoke(argv)
        if code == 2:
            assert_one_line_error(code, err)
            assert not paths["store"].exists()
            return
        assert code in (0, 1), (code, err)
        store = open_store(str(paths["store"]))
        assert fsck(store) == []
        if code == 0:  # approved: the current plan is a legal plan of the inventory with the comparison's costs
            current = get_current(store, w.inventory.name)
            check_plan(w.inventory, current)
            entry = next(r for r in w.comparison.results if r.plan.plan_id == current.plan_id)
            assert current.measured == entry.plan.measured


# -- relabelled, duplicated and dropped comparison entries -----------------------------
def _entry_edits() -> st.SearchStrategy[list[tuple[str, int, str]]]:
    labels = [*WORLD_BASELINES, "lookup_greedy", "random", "dreamshard"]
    return st.lists(
        st.tuples(st.sampled_from(["relabel", "duplicate", "drop"]), st.integers(0, 6), st.sampled_from(labels)),
        min_size=1,
        max_size=3,
    )


@settings(FUZZ, max_examples=25)
@given(base=st.sampled_from(["good", "bad", "worse"]), edits=_entry_edits())
def test_fuzz_edited_comparison_entries_never_approve_more(base: str, edits: list[tuple[str, int, str]]) -> None:
    """Whatever entries are relabelled, copied or deleted (labels and plan fields alike), the gate either refuses
    the comparison (exit 2, nothing stored) or decides exactly as on the genuine comparison."""
    w = world()
    decision = gate_file_plan(getattr(w, base), w.inventory, w.comparison, w.rules)[1]
    genuine = decision.outcome
    with workdir() as d:
        paths = w.write(d)
        data = json.loads(paths["comparison"].read_text())
        for op, i, label in edits:
            results = data["results"]
            r = json.loads(json.dumps(results[i % len(results)]))
            if op == "drop":
                results.remove(results[i % len(results)])
                continue
            r["sharder"] = r["plan"]["sharder"] = label
            if op == "duplicate":
                r["plan"]["plan_id"] = f"copy-{i}"
                results.append(r)
            else:
                results[i % len(results)] = r
        paths["comparison"].write_text(json.dumps(data))
        code, _, err = invoke(
            [
                "plans",
                "publish",
                str(paths[base]),
                "--store",
                str(paths["store"]),
                "--comparison",
                str(paths["comparison"]),
                "-i",
                str(paths["inventory"]),
                "--params",
                str(paths["params"]),
            ]
        )
        if code == 2:
            assert_one_line_error(code, err)
            assert not paths["store"].exists()
            return
        recs = list_plans(open_store(str(paths["store"])))
        (rec,) = [r for r in recs if r.plan_id == getattr(w, base).plan_id]
        assert rec.outcome == genuine, (edits, err)
        # rejected with nothing current: a baseline's own plan (recomputed, never an edited entry) became current
        fallbacks = [r for r in recs if r.outcome == "fallback"]
        assert len(fallbacks) == (1 if genuine == "rejected" else 0), edits
        for f in fallbacks:
            stored = show(open_store(str(paths["store"])), f.plan_id)
            assert stored.units() == baseline_plan(f.sharder, w.inventory, stored.topology, 0).units(), edits


# -- store pointer corruptions -------------------------------------------------------------------------------
corruptions = st.one_of(
    st.binary(max_size=64),
    st.sampled_from([b"", b"{}", b"null", b"[]", b'{"inventory": "inv"}', b"\xff\xfe"]),
    st.builds(
        lambda k, v: json.dumps({k: v}).encode(),
        st.sampled_from(["key", "sha256", "plan_id", "history", "inventory"]),
        st.one_of(st.text(max_size=8), st.integers(), st.none()),
    ),
)


_SEEDED: dict[str, bytes] = {}


def _seeded_store(paths: dict[str, Path]) -> None:
    """A store with the inventory pushed and two plans published (built once, then copied per example)."""
    if not _SEEDED:
        store_arg = ["--store", str(paths["store"])]
        push_inventory(open_store(str(paths["store"])), load_inventory(paths["inventory"]))
        for argv in (
            [
                "plans",
                "publish",
                str(paths[n]),
                *store_arg,
                "--comparison",
                str(paths["comparison"]),
                "--params",
                str(paths["params"]),
            ]
            for n in ("bad", "good")
        ):
            code, _, err = invoke(argv)
            assert code == 0, (argv, err)
        _SEEDED.update(snapshot(paths["store"]))
        return
    for rel, data in _SEEDED.items():
        (paths["store"] / rel).parent.mkdir(parents=True, exist_ok=True)
        (paths["store"] / rel).write_bytes(data)


@settings(FUZZ, max_examples=12)
@given(damage=corruptions, which=st.sampled_from(["plans", "inventories"]))
def test_fuzz_store_pointer_corruption(damage: bytes, which: str) -> None:
    w = world()
    with workdir() as d:
        paths = w.write(d)
        store_arg = ["--store", str(paths["store"])]
        _seeded_store(paths)
        (paths["store"] / which / "inv" / "current.json").write_bytes(damage)
        for argv in (
            ["plans", "list", *store_arg],
            ["plans", "show", "current", *store_arg, "--inventory", "inv"],
            ["plans", "fsck", *store_arg],
            ["plans", "rollback", *store_arg, "--inventory", "inv"],
            [
                "plans",
                "publish",
                str(paths["worse"]),
                *store_arg,
                "--comparison",
                str(paths["comparison"]),
                "--params",
                str(paths["params"]),
            ],
        ):
            before = snapshot(paths["store"])
            code, _, err = invoke(argv)
            assert "Traceback" not in err
            if code == 2:
                assert_one_line_error(code, err)
                assert snapshot(paths["store"]) == before, argv
            else:
                assert code in (0, 1), (argv, code, err)
        # the documented repairs always work
        push_inventory(open_store(str(paths["store"])), load_inventory(paths["inventory"]))
        code, _, err = invoke(["plans", "rollback", *store_arg, "--inventory", "inv", "--to", w.bad.plan_id])
        assert code == 0 or "already current" in err, err
        assert get_current(open_store(str(paths["store"])), "inv").plan_id == w.bad.plan_id


# -- CLI arguments ---------------------------------------------------------------------------------------
option_values = st.one_of(
    st.integers(min_value=-(2**66), max_value=2**66).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.sampled_from(["1", "2", "0", "-1", "1e300", "inf", "nan", "", "x", "0x10", "4096", "4097"]),
)


@settings(FUZZ, max_examples=60)
@given(
    cmd=st.sampled_from(["plan", "compare", "profile", "evaluate"]),
    devices=option_values,
    memory=option_values,
    other=st.sampled_from(["--batch-size", "--seed", "--warmup", "--repeats", "--threads", "--rounds", "--samples"]),
    value=option_values,
)
def test_fuzz_numeric_options(cmd: str, devices: str, memory: str, other: str, value: str) -> None:
    w = world()
    with workdir() as d:
        paths = w.write(d)
        out = d / "out.json"
        argv = {
            "plan": [
                "plan",
                "-i",
                str(paths["inventory"]),
                "-d",
                devices,
                "-m",
                memory,
                "-s",
                "size_greedy",
                "-o",
                str(out),
            ],
            "compare": [
                "compare",
                "-i",
                str(paths["inventory"]),
                "-d",
                devices,
                "-m",
                memory,
                "--backend",
                "simulator",
                "--sharders",
                "round_robin",
                "--rounds",
                "1",
                "--out",
                str(out),
            ],
            "profile": [
                "profile",
                "-i",
                str(paths["inventory"]),
                "-d",
                devices,
                "-m",
                memory,
                "--backend",
                "simulator",
                "-k",
                "1",
                "-o",
                str(out),
                "--no-progress",
            ],
            "evaluate": [
                "evaluate",
                "-i",
                str(paths["inventory"]),
                "-p",
                str(paths["good"]),
                "--backend",
                "simulator",
                "-o",
                str(out),
            ],
        }[cmd]
        argv += [other, value]
        before = snapshot(d)
        code, _, err = invoke(argv)
        if code == 0:
            assert out.exists()
            if cmd in ("plan", "evaluate"):
                check_plan(w.inventory, load_plan(out))
        else:
            assert_one_line_error(code, err)
            assert snapshot(d) == before
