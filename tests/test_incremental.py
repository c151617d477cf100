"""The production loop's incremental path: the measurement corpus keyed by content, stable tasks
and placements, the profile stage measuring only what a one-table change touches, and the outer loop
warm-starting from the previous version's model on the changed tasks only."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from dreamshard.cli.app import invoke
from dreamshard.config.settings import resolve
from dreamshard.documents import load_inventory, load_measurements, save_inventory
from dreamshard.errors import InputFileError
from dreamshard.inventory.synth import synth_inventory
from dreamshard.learning.incremental import INIT_DIR, previous_model
from dreamshard.profiling import make_oracle
from dreamshard.profiling.corpus import DeviceCorpus
from dreamshard.usecases import profile as profile_uc
from dreamshard.usecases import train as train_uc
from dreamshard.values import Inventory, Topology

TOPO = Topology(num_devices=4, memory_per_device_gb=4.0, batch_size=512)


def changed(inv: Inventory) -> Inventory:
    """One table's pooling x1.5 and one new table (a copy of another under a new name)."""
    t0, t1 = inv.tables[0], inv.tables[1]
    return Inventory(
        name=inv.name,
        tables=(
            t0.model_copy(update={"pooling_factor": t0.pooling_factor * 1.5}),
            *inv.tables[1:],
            t1.model_copy(update={"name": f"{t1.name}_new"}),
        ),
    )


class CountingBackend:
    """Counts the device timings the oracle asks its backend for."""

    def __init__(self, inner: object) -> None:
        self.inner, self.calls = inner, 0

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)

    def time_device(self, *a: object, **kw: object) -> object:
        self.calls += 1
        return self.inner.time_device(*a, **kw)  # type: ignore[attr-defined]


def counting_oracle(corpus: DeviceCorpus | None):
    oracle = make_oracle("simulator", warmup=0, repeats=1)
    oracle.backend = CountingBackend(oracle.backend)  # type: ignore[assignment]
    oracle.corpus = corpus
    return oracle


def test_the_corpus_reuses_a_device_only_for_the_same_tables_and_settings(tmp_path: Path) -> None:
    inv = synth_inventory(8, 0, name="inv")
    placement = {t.name: i % 4 for i, t in enumerate(inv.tables)}
    first = counting_oracle(DeviceCorpus(tmp_path / "corpus", "a"))
    m1 = first.measure(inv, placement, TOPO)
    assert first.backend.calls == 4  # type: ignore[attr-defined]
    again = counting_oracle(DeviceCorpus(tmp_path / "corpus", "b"))  # another writer reads the same directory
    assert again.measure(inv, placement, TOPO).costs == m1.costs and again.backend.calls == 0  # type: ignore[attr-defined]
    # one table's statistics change: only its device is measured again
    t0 = inv.tables[0]
    v2 = inv.model_copy(
        update={"tables": (t0.model_copy(update={"pooling_factor": t0.pooling_factor * 2}), *inv.tables[1:])}
    )
    again.measure(v2, placement, TOPO)
    assert again.backend.calls == 1  # type: ignore[attr-defined]
    # another batch size is another setting: nothing reused
    again.measure(inv, placement, TOPO.model_copy(update={"batch_size": 1024}))
    assert again.backend.calls == 1 + 4  # type: ignore[attr-defined]
    assert again.corpus is not None and again.corpus.stats()["device_timings_reused"] == 4 + 3


def test_a_corpus_that_is_not_a_directory_or_holds_foreign_lines_is_refused(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    with pytest.raises(InputFileError, match="not a directory"):
        DeviceCorpus(tmp_path / "file", "profile")
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "x.jsonl").write_text('{"not": "an entry"}\n{"key": 1}\n')
    with pytest.raises(InputFileError, match="x.jsonl:1: not a corpus entry"):
        DeviceCorpus(tmp_path / "c", "profile")
    with pytest.raises(InputFileError, match="plain file name"):
        DeviceCorpus(tmp_path / "d", "../up")


PARAMS = {
    "topology": {"memory_per_device_gb": 4.0, "batch_size": 512},
    "tasks": {
        "train_num_tasks": 8,
        "train_tables": [8, 14],
        "train_devices": 4,
        "test_tables": [6],
        "test_devices": [2],
    },
    "profile": {
        "backend": "simulator",
        "warmup": 0,
        "repeats": 1,
        "num_placements": 3,
        "kinds": ["dim_greedy", "crowded"],
        "incremental_tasks": 2,
    },
    "train": {
        "init": "previous",
        "iterations": 2,
        "incremental_iterations": 1,
        "refresh_tasks": 1,
        "placements_per_iteration": 4,
        "search_per_iteration": 1,
        "perturb_per_iteration": 1,
        "incremental_cost_steps": 7,
    },
    "train_cost": {"steps": 20, "ensemble_size": 3},
    "train_policy": {"episodes": 4, "episodes_per_update": 2},
}


def _stage(work: Path, inv: Inventory, tag: str) -> profile_uc.BatchedProfileResult:
    save_inventory(inv, work / f"{tag}.yaml")
    assert (
        invoke(
            [
                "tasks",
                "-i",
                str(work / f"{tag}.yaml"),
                "--params",
                str(work / "params.yaml"),
                "-o",
                str(work / f"{tag}-tasks.json"),
            ]
        )[0]
        == 0
    )
    return profile_uc.run_batched(
        profile_uc.BatchedProfileRequest(
            settings=resolve(work / "params.yaml"),
            inventory=load_inventory(work / f"{tag}.yaml"),
            tasks=work / f"{tag}-tasks.json",
            out=work / f"{tag}.jsonl",
            corpus=work / "corpus",
        ),
        log=lambda _m: None,
    )


@pytest.mark.parametrize("kinds", [["dim_greedy", "crowded"], ["dim_greedy", "crowded", "row_wise", "data_parallel"]])
def test_a_one_table_change_measures_only_the_devices_it_touches_and_a_few_tasks(
    tmp_path: Path, kinds: list[str]
) -> None:
    """With the typed kinds too: a device holding a replica is two fused operators (two corpus entries), and the
    check of which tasks need timings must look them up so, or every task looks changed and none is left out."""
    (tmp_path / "params.yaml").write_text(yaml.safe_dump({**PARAMS, "profile": {**PARAMS["profile"], "kinds": kinds}}))
    v1 = synth_inventory(40, 0, name="pool")
    first = _stage(tmp_path, v1, "v1")
    before = len((tmp_path / "corpus" / "profile.jsonl").read_text().splitlines())
    second = _stage(tmp_path, changed(v1), "v2")
    fresh = first.corpus["device_timings_measured"]
    assert fresh > 50  # (a first run already reuses some: singles and small devices repeat across placements)
    assert 0 < second.corpus["device_timings_measured"] <= fresh // 3  # what the change touched, 2 tasks of it
    # every device measured for v2 is one of a task the change touched (it holds the changed or the new table, or
    # lost the table the new one displaced) or a changed/new table alone
    tasks = [(json.loads((tmp_path / f"{v}-tasks.json").read_text())["train"]) for v in ("v1", "v2")]
    touched = [
        set(b["tables"]) for a, b in zip(*tasks, strict=True) if a["tables"] != b["tables"] or "t0000" in b["tables"]
    ]
    new_entries = [json.loads(x) for x in (tmp_path / "corpus" / "profile.jsonl").read_text().splitlines()[before:]]
    assert len(new_entries) == second.corpus["device_timings_measured"]
    for e in new_entries:
        names = {n.split("@")[0] for n in e["tables"]}  # a unit of a table (row shard, replica) is that table's
        assert names in ({"t0000"}, {"t0001_new"}) or any(names <= t for t in touched), e["tables"]
    v2_records = load_measurements(tmp_path / "v2.jsonl")
    assert {m.task for m in v2_records if m.task} < {m.task for m in load_measurements(tmp_path / "v1.jsonl") if m.task}
    again = _stage(tmp_path, changed(v1), "v2b")  # the same version again: everything from the corpus
    assert again.corpus["device_timings_measured"] == 0
    assert (tmp_path / "corpus" / "profile.jsonl").is_file()


def _train(work: Path, tag: str) -> train_uc.TrainResult:
    return train_uc.run(
        train_uc.TrainRequest(
            settings=resolve(work / "params.yaml"),
            inventory=load_inventory(work / f"{tag}.yaml"),
            tasks=work / f"{tag}-tasks.json",
            model_dir=work / "model",
            measurements=work / f"{tag}.jsonl",
            state_dir=work / "state",
            corpus=work / "corpus",
        )
    )


def card_train(work: Path) -> dict:
    """The train config the model in `work`/model was trained with, as its card records it."""
    return json.loads((work / "model" / "model.json").read_text())["configs"]["train"]


def test_the_retrain_after_a_change_warm_starts_from_the_previous_model_on_the_changed_tasks(tmp_path: Path) -> None:
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(PARAMS))
    v1 = synth_inventory(40, 0, name="pool")
    _stage(tmp_path, v1, "v1")
    fresh = _train(tmp_path, "v1")
    assert not fresh.summary.incremental and fresh.summary.iterations_run == [0, 1]
    assert fresh.summary.tasks_measured == 8
    first_version = fresh.summary.model_version
    assert card_train(tmp_path)["cost"]["steps"] == 20 and card_train(tmp_path)["iterations"] == 2

    _stage(tmp_path, changed(v1), "v2")
    inc = _train(tmp_path, "v2")
    assert inc.summary.incremental and inc.summary.init == first_version
    assert inc.summary.iterations_run == [0]  # train.incremental_iterations
    # a fine-tune: train.incremental_cost_steps per member, recorded in the card (the fresh fit took cost.steps)
    assert card_train(tmp_path)["cost"]["steps"] == 7 and card_train(tmp_path)["iterations"] == 1
    tasks = [(json.loads((tmp_path / f"{v}-tasks.json").read_text())["train"]) for v in ("v1", "v2")]
    touched = sum(a["tables"] != b["tables"] or "t0000" in b["tables"] for a, b in zip(*tasks, strict=True))
    assert 0 < touched < 8 and inc.summary.tasks_measured == touched + 1  # + train.refresh_tasks
    assert inc.summary.measured_now <= fresh.summary.measured_now // 2
    marker = json.loads((tmp_path / "state" / INIT_DIR / "warm-start.json").read_text())
    assert marker["model_version"] == first_version
    # the same version again: nothing to do (the checkpoint of this version resumes), same warm start kept
    assert _train(tmp_path, "v2").iterations == []
    ws = previous_model(tmp_path / "state", changed(v1))
    assert ws is not None and ws.model.card.version == first_version


def test_the_profile_and_train_commands_take_the_corpus(tmp_path: Path) -> None:
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(PARAMS))
    save_inventory(synth_inventory(6, 0, name="inv"), tmp_path / "inv.yaml")
    args = [
        "profile",
        "-i",
        str(tmp_path / "inv.yaml"),
        "--params",
        str(tmp_path / "params.yaml"),
        "-d",
        "2",
        "--corpus",
        str(tmp_path / "corpus"),
        "--no-progress",
    ]
    code, out, _ = invoke([*args, "-o", str(tmp_path / "a.jsonl")])
    assert code == 0 and "device timings measured" in out and " 0 reused" in out
    code, out, _ = invoke([*args, "-o", str(tmp_path / "b.jsonl")])
    assert code == 0 and "corpus: 0 device timings measured" in out
    (tmp_path / "notadir").write_text("x")
    code, _, err = invoke([*args[:-3], "--corpus", str(tmp_path / "notadir"), "-o", str(tmp_path / "c.jsonl")])
    assert code == 2 and "not a directory" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "c.jsonl").exists()


def timed_ops(plan) -> int:
    """Fused operators one measurement of `plan` times: per device, one for its units and one for its replicas."""
    from dreamshard.values.units import parse_unit

    kinds = [{parse_unit(u).kind == "replica" for u in units} for units in plan.device_tables()]
    return sum(len(k) for k in kinds)


def test_compare_reuses_only_the_lower_bounds_singles_and_the_gate_measures_no_lower_bound(tmp_path: Path) -> None:
    from store_helpers import gate_measured

    from dreamshard.evaluation import compare_sharders, comparison_markdown
    from dreamshard.gate import PublishConfig
    from dreamshard.sharders import get_sharder

    inv = synth_inventory(8, 0, name="inv")
    sharders = ["round_robin", "dim_greedy"]
    first = counting_oracle(None)
    cmp1 = compare_sharders(inv, TOPO, sharders, first, rounds=2, corpus=DeviceCorpus(tmp_path / "c", "evaluate"))
    fresh_calls = first.backend.calls  # type: ignore[attr-defined]
    again = counting_oracle(None)
    cmp2 = compare_sharders(inv, TOPO, sharders, again, rounds=2, corpus=DeviceCorpus(tmp_path / "c", "evaluate"))
    contenders = sum(timed_ops(r.plan) for r in cmp2.results) * 2
    assert again.backend.calls == contenders < fresh_calls  # type: ignore[attr-defined]  # singles: all reused
    assert cmp2.lower_bound_ms == pytest.approx(cmp1.lower_bound_ms) and cmp2.has_lower_bound
    assert again.corpus is None  # the caller's oracle gets its own corpus back
    # the gate decides on the plans alone: no single-table timing at all, and its report says so
    gate_oracle = counting_oracle(None)
    plan = get_sharder("size_greedy").shard(inv, TOPO)
    _, _, cmp = gate_measured(
        plan,
        inv,
        gate_oracle,
        PublishConfig(baselines=("round_robin", "torchrec"), min_rounds=2, allow_simulated=True),
        rounds=2,
    )
    measured = sum(timed_ops(r.plan) for r in cmp.results) * 2
    assert gate_oracle.backend.calls == measured and not cmp.has_lower_bound  # type: ignore[attr-defined]
    assert "LB not measured" in comparison_markdown(cmp) and "| - |" in comparison_markdown(cmp)


def test_workers_send_their_timings_back_and_the_next_version_measures_only_what_changed(
    tmp_path: Path, monkeypatch
) -> None:
    """Worker-dispatched profiling grows the corpus too: each batch's shard carries the timings its worker made
    (keyed by the worker's hardware, which is not the dispatcher's), the dispatcher adds them to the corpus, and the
    next version's profile stage limits its tasks by what the workers already measured."""
    from dreamshard.profiling import corpus as corpus_mod
    from dreamshard.profiling.corpus import WORKERS_WRITER
    from dreamshard.store import open_store

    def fake_workers(batches, store_uri, endpoint, settings, **_kw):  # what the `gpu` pool's workers do
        with pytest.MonkeyPatch.context() as mp:  # another machine
            mp.setattr(corpus_mod, "hardware_id", lambda _device: "gpu-host | H200")
            # the dispatcher writes each pending batch's spec, a worker measures it into its shard
            keys = {b.batch_id: batches.submit(b) for b in batches.pending()}
            return {bid: profile_uc.measure_stored_batch(open_store(store_uri), key) for bid, key in keys.items()}

    monkeypatch.setattr(profile_uc, "dispatcher", lambda _name: fake_workers)
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(PARAMS))

    def stage(inv: Inventory, tag: str) -> profile_uc.BatchedProfileResult:
        save_inventory(inv, tmp_path / f"{tag}.yaml")
        assert (
            invoke(
                [
                    "tasks",
                    "-i",
                    str(tmp_path / f"{tag}.yaml"),
                    "--params",
                    str(tmp_path / "params.yaml"),
                    "-o",
                    str(tmp_path / f"{tag}-tasks.json"),
                ]
            )[0]
            == 0
        )
        return profile_uc.run_batched(
            profile_uc.BatchedProfileRequest(
                settings=resolve(tmp_path / "params.yaml"),
                inventory=load_inventory(tmp_path / f"{tag}.yaml"),
                tasks=tmp_path / f"{tag}-tasks.json",
                out=tmp_path / f"{tag}.jsonl",
                corpus=tmp_path / "corpus",
                dispatch="workers",
                store_uri=str(tmp_path / "store"),
            ),
            log=lambda _m: None,
        )

    v1 = synth_inventory(40, 0, name="pool")
    stage(v1, "v1")
    sent = [json.loads(x) for x in (tmp_path / "corpus" / f"{WORKERS_WRITER}.jsonl").read_text().splitlines()]
    assert len(sent) > 50 and {e["hardware"] for e in sent} == {"gpu-host | H200"}
    assert all(e["info"]["name"] == "simulator" and e["seed"] == 0 for e in sent)
    assert DeviceCorpus(tmp_path / "corpus", "x").worker_backend["simulator"][0] == "gpu-host | H200"
    stage(changed(v1), "v2")
    v1_tasks = {m.task for m in load_measurements(tmp_path / "v1.jsonl") if m.task}
    v2_tasks = {m.task for m in load_measurements(tmp_path / "v2.jsonl") if m.task}
    assert len(v2_tasks) <= 2 + 1 < len(v1_tasks)  # incremental_tasks (2) of the touched ones (+ untouched: none new)
    # a dispatcher that meets no worker timings for the backend measures every task (a first run on that pool)
    (tmp_path / "corpus" / f"{WORKERS_WRITER}.jsonl").unlink()
    stage(changed(v1), "v2c")
    assert {m.task for m in load_measurements(tmp_path / "v2c.jsonl") if m.task} == v1_tasks
