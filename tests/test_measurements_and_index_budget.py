"""Hostile inputs of measurement files, index generation (sized before it runs) and preset names.

Each bad input is one line on stderr, exit 2, no traceback, nothing written or changed. The allocation cases
guard the generators (a guard raises if a batch beyond the budget is ever drawn), so a regression fails fast
instead of allocating tens of GiB.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pytest

from dreamshard.cli.app import invoke
from dreamshard.documents import append_measurement, iter_measurements, save_inventory
from dreamshard.errors import InputFileError
from dreamshard.inventory import synth
from dreamshard.profiling import base, make_oracle
from dreamshard.sharders import get_sharder
from dreamshard.values import Feature, Inventory, Table, Topology

TOPO = Topology(num_devices=2, memory_per_device_gb=1.0, batch_size=512)


def one_line_2(r: tuple[int, str, str]) -> str:
    code, _, err = r
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and "Traceback" not in err, r
    return lines[0]


def snapshot(d: Path) -> dict[str, bytes]:
    return {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


def small_inventory() -> Inventory:
    return synth.synth_inventory(6, 0, name="inv")


# -- a one-line file without newline that is not a measurements file -------------------------------------
@pytest.mark.parametrize("content", ["minified-plan", '{"a": 1}', "hello"])
def test_profile_refuses_a_one_line_file_that_is_not_measurements(tmp_path: Path, content: str) -> None:
    inv = small_inventory()
    invf = save_inventory(inv, tmp_path / "inv.yaml")
    target = tmp_path / "plan.json"
    if content == "minified-plan":
        plan = get_sharder("lookup_greedy").shard(inv, TOPO)
        content = json.dumps(plan.model_dump(mode="json"), separators=(",", ":"))
    target.write_text(content)  # one line, no trailing newline
    before = snapshot(tmp_path)
    line = one_line_2(
        invoke(
            [
                "profile",
                "-i",
                str(invf),
                "-d",
                "2",
                "-m",
                "1",
                "--backend",
                "simulator",
                "-o",
                str(target),
                "--no-progress",
                "-k",
                "1",
            ]
        )
    )
    assert "InputFileError" in line and str(target) in line and "not a measurements file" in line
    assert snapshot(tmp_path) == before


def test_append_and_iter_refuse_a_file_that_is_not_measurements(tmp_path: Path) -> None:
    m = make_oracle("simulator").measure(small_inventory(), {"t0000": 0}, TOPO, kind="single")
    for text in ('{"plan_id":"p","placement":{}}', '\n\n{"x": 1', "name: inv"):
        p = tmp_path / "x.jsonl"
        p.write_text(text)
        with pytest.raises(InputFileError, match="not a measurements file"):
            list(iter_measurements(p))
        with pytest.raises(InputFileError, match="not a measurements file"):
            append_measurement(p, m)
        assert p.read_text() == text


def test_a_killed_writers_partial_record_is_still_recovered(tmp_path: Path) -> None:
    oracle = make_oracle("simulator")
    inv = small_inventory()
    m1, m2 = (oracle.measure(inv, {t: 0}, TOPO, kind="single") for t in ("t0000", "t0001"))
    p = tmp_path / "m.jsonl"
    # Killed during the first record: the unfinished start of a record, nothing before it.
    p.write_text(m1.model_dump_json()[:50])
    assert list(iter_measurements(p)) == []
    append_measurement(p, m2)
    assert [m.measurement_id for m in iter_measurements(p)] == [m2.measurement_id]
    # Killed after some records: whatever unterminated line follows measurements is cut.
    p.write_text(m1.model_dump_json() + "\n" + "garbage")
    assert [m.measurement_id for m in iter_measurements(p)] == [m1.measurement_id]
    append_measurement(p, m2)
    assert [m.measurement_id for m in iter_measurements(p)] == [m1.measurement_id, m2.measurement_id]


# -- index generation is sized before it runs --------------------------------------------------------------
@pytest.fixture
def guarded(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail (instead of allocating) if a batch beyond the budget is ever drawn."""
    real_ranks, real_feature = synth.zipf_ranks, base.feature_indices

    def ranks(num_rows: int, exponent: float, size: int, rng: np.random.Generator) -> np.ndarray:
        if size > 10**8:
            raise RuntimeError(f"zipf_ranks asked for {size} lookups")
        return real_ranks(num_rows, exponent, size, rng)

    def feature(table: Table, batch_size: int, rng: np.random.Generator, rows: int) -> tuple[np.ndarray, np.ndarray]:
        if table.pooling_factor * batch_size > 10**8:
            raise RuntimeError(f"indices of {table.name} drawn at pooling {table.pooling_factor}")
        return real_feature(table, batch_size, rng, rows)

    monkeypatch.setattr(synth, "zipf_ranks", ranks)
    monkeypatch.setattr(base, "feature_indices", feature)


@pytest.mark.parametrize(("pooling", "needle"), [("1e7", "pooling factor must be"), ("1e6", "MAX_INDEX_BYTES")])
def test_preset_huge_pooling_is_refused_before_allocating(
    tmp_path: Path, guarded: None, pooling: str, needle: str
) -> None:
    t0 = time.perf_counter()
    line = one_line_2(
        invoke(["inventory", "preset", "criteo-kaggle", "--pooling", pooling, "-o", str(tmp_path / "x.yaml")])
    )
    assert time.perf_counter() - t0 < 10 and needle in line and not list(tmp_path.iterdir())
    if pooling == "1e6":
        assert "IndexBudgetError" in line and "'t_cat_0'" in line and "pooling_factor" in line and "2.000 GB" in line


@pytest.mark.parametrize("backend", ["cpu"])
def test_evaluate_huge_in_bounds_pooling_is_refused_before_allocating(
    tmp_path: Path, guarded: None, backend: str
) -> None:
    inv = Inventory(
        name="big",
        tables=(
            Table(name="huge", num_embeddings=1000, embedding_dim=16, pooling_factor=1e6),
            Table(name="small", num_embeddings=100, embedding_dim=16, pooling_factor=1.0),
        ),
    )
    invf = save_inventory(inv, tmp_path / "big.yaml")
    topo = Topology(num_devices=2, memory_per_device_gb=1.0, batch_size=2048)
    planf = tmp_path / "plan.json"
    planf.write_text(get_sharder("lookup_greedy").shard(inv, topo).model_dump_json())
    before = snapshot(tmp_path)
    t0 = time.perf_counter()
    line = one_line_2(
        invoke(
            [
                "evaluate",
                "-i",
                str(invf),
                "-p",
                str(planf),
                "--backend",
                backend,
                "--repeats",
                "1",
                "--warmup",
                "0",
                "-o",
                str(tmp_path / "ev.json"),
            ]
        )
    )
    assert time.perf_counter() - t0 < 30
    assert (
        "IndexBudgetError" in line and "'huge'" in line and "pooling_factor 1e+06" in line and "MAX_INDEX_BYTES" in line
    )
    assert snapshot(tmp_path) == before


def test_the_index_budget_counts_features_batches_and_tables(guarded: None) -> None:
    from dreamshard.inventory.indices import (
        MAX_INDEX_BYTES,
        IndexBudgetError,
        batches_within_budget,
        check_index_budget,
        index_bytes,
        synthesize_indices,
    )
    from dreamshard.profiling.embedding_bag_backend import EmbeddingBagBackend
    from dreamshard.profiling.scaling import CPU_RULE

    shared = Table(
        name="s",
        num_embeddings=10,
        embedding_dim=4,
        features=(Feature(name="a", pooling_factor=1.5), Feature(name="b", pooling_factor=2.0)),
    )
    # 8 bytes per lookup (round(p x B) per feature) and per offset (k x B + 1), per batch.
    assert index_bytes([shared], 10, num_batches=3) == 3 * 8 * (15 + 20 + 2 * 10 + 1)
    assert check_index_budget([shared], 10, 3) == index_bytes([shared], 10, 3)
    # A device whose 3 batches do not fit cycles through fewer; one batch that does not fit is refused, naming the
    # table with the most lookups (nothing is drawn: the guard would raise).
    third = MAX_INDEX_BYTES // 8 // 2048 // 3  # pooling that fills a third of the budget with one batch
    two = [Table(name=f"t{i}", num_embeddings=100, embedding_dim=4, pooling_factor=float(third)) for i in range(2)]
    assert batches_within_budget(two[:1], 2048, 3, "x") == 2 and batches_within_budget(two, 2048, 3, "x") == 1
    assert batches_within_budget([shared], 2048, 3, "x") == 3
    many = [Table(name=f"t{i}", num_embeddings=100, embedding_dim=4, pooling_factor=float(third + i)) for i in range(4)]
    with pytest.raises(IndexBudgetError, match=r"table 't3': pooling_factor .* at batch size 2048 .* 2\.000 GB"):
        EmbeddingBagBackend("cpu", "cpu", CPU_RULE).time_device(many, 2048, 0, 1)
    with pytest.raises(IndexBudgetError, match="table 'x'"):
        synthesize_indices(
            Table(name="x", num_embeddings=10, embedding_dim=4, pooling_factor=1e6), 2**24, np.random.default_rng(0)
        )
    with pytest.raises(IndexBudgetError, match="table 'y'.*reuse histogram"):
        synth.zipf_histogram(100, 1e6, 1.0, np.random.default_rng(0), name="y")
    # Ordinary work is untouched.
    assert synth.zipf_histogram(100, 3.0, 1.0, np.random.default_rng(0)) is not None


def test_fewer_batches_are_the_first_of_the_same_seeded_stream() -> None:
    bank = base.IndexBank(seed=3)
    t = Table(name="t", num_embeddings=1000, embedding_dim=4, pooling_factor=2.0)
    one = [tuple(a.copy() for a in b) for b in bank.batches(t, 1000, 64, 1)]
    three = base.IndexBank(seed=3).batches(t, 1000, 64)
    assert len(one) == 1 and len(three) == 3
    assert all(np.array_equal(x, y) for x, y in zip(one[0], three[0], strict=True))
    assert (
        len(bank.batches(t, 1000, 64)) == 3 and len(bank.batches(t, 1000, 64, 2)) == 2
    )  # the cache grows, then serves


# -- preset names follow the inventory-name rule -----------------------------------------------------------
@pytest.mark.parametrize("name", ["../x", "a/b", "..", "", "x" * 201])
def test_preset_refuses_an_unsafe_name_up_front(tmp_path: Path, name: str) -> None:
    line = one_line_2(invoke(["inventory", "preset", "criteo-kaggle", "--name", name, "-o", str(tmp_path / "x.yaml")]))
    assert "InventoryNameError" in line and "--name" in line and not list(tmp_path.iterdir())


def test_preset_with_a_safe_name_loads_back(tmp_path: Path) -> None:
    out = tmp_path / "x.yaml"
    assert invoke(["inventory", "preset", "criteo-kaggle", "--name", "kaggle.v2", "-o", str(out)])[0] == 0
    assert invoke(["inventory", "validate", str(out)])[0] == 0
