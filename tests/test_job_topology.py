"""The job's topology travels with the model through the loop: `plan`, `compare`, `replan`, the
pipeline's incumbent and the gate plan for the job the inventory records (`Inventory.job`) unless told otherwise;
a decision for one topology is not "already current" for another; the gate refuses a plan for another topology
(one line naming both); `replan` moves the store's inventory version only when it records a decision."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from flows_support import REPLAN_PARAMS, fast_path_workspace, tiny_inventory

from dreamshard.cli.app import invoke
from dreamshard.config.settings import resolve
from dreamshard.documents import load_inventory, load_plan, save_inventory
from dreamshard.errors import ConfigError, PlanError
from dreamshard.gate.trust import check_topology
from dreamshard.sharders import get_sharder
from dreamshard.store import get_current, get_current_inventory, list_plans, open_store
from dreamshard.store.lookup import approved_plan_for
from dreamshard.usecases import replan as replan_uc
from dreamshard.values import Inventory, JobTopology, Topology

#: The fast path params (flows_support.REPLAN_PARAMS), but planning for 4 devices (the default): only the job says 2.
PARAMS = {**REPLAN_PARAMS, "plan": {**REPLAN_PARAMS["plan"], "num_devices": 4}}

JOB = JobTopology(world_size=2)


def with_job(inv: Inventory, job: JobTopology | None = JOB, path: Path | None = None) -> Inventory:
    out = Inventory.model_validate({**inv.model_dump(), "job": job.given() if job is not None else None})
    if path is not None:
        save_inventory(out, path)
    return out


@pytest.fixture
def work(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return fast_path_workspace(tmp_path, monkeypatch, PARAMS)


def _replan(work: Path, overrides: dict[str, object] | None = None, **kw: object) -> replan_uc.ReplanResult:
    settings = resolve(work / "params.yaml", overrides)
    if isinstance(kw.get("inventory"), Path):  # the door reads the file
        kw["inventory"] = load_inventory(kw["inventory"])  # type: ignore[arg-type]
    return replan_uc.run(replan_uc.ReplanRequest(settings=settings, **kw))  # type: ignore[arg-type]


# -- the settings ---------------------------------------------------------------------------------------------------
def test_the_job_fills_the_template_and_what_the_caller_says_wins() -> None:
    job = JobTopology(world_size=8, devices_per_host=4, memory_per_device_gb=16, optimizer="adam")
    plain = resolve().topology_for_job(job)
    assert (plain.num_devices, plain.devices_per_host, plain.memory_per_device_gb, plain.optimizer) == (
        8,
        4,
        16.0,
        "adam",
    )
    assert plain.batch_size == resolve().topology_for().batch_size  # what the job does not record: the params'
    assert resolve().topology_for_job(None) == resolve().topology_for()
    memory = resolve(None, {"topology.memory_per_device_gb": 2.0}).topology_for_job(job)
    assert (memory.num_devices, memory.memory_per_device_gb, memory.optimizer) == (8, 2.0, "adam")
    # a device count told: the params' host layout (one host here), not the job's 4 per host
    six = resolve(None, {"plan.num_devices": 6}).topology_for_job(job)
    assert (six.num_devices, six.devices_per_host) == (6, None)
    hosts = resolve(None, {"topology.devices_per_host": 2}).topology_for_job(job)
    assert (hosts.num_devices, hosts.devices_per_host) == (8, 2)
    with pytest.raises(ConfigError, match=r"^topology: 8 devices do not make whole hosts of 3 devices each"):
        resolve(None, {"topology.devices_per_host": 3}).topology_for_job(job)
    # the params file is not "told": the job wins over plan.num_devices there
    assert resolve(None, None).told == frozenset()


def test_plan_and_compare_plan_for_the_job_unless_told_otherwise(tmp_path: Path) -> None:
    inv = with_job(tiny_inventory(tmp_path / "plain.yaml", num_tables=6), path=tmp_path / "inv.yaml")
    assert inv.job == JOB
    code, _, err = invoke(
        ["plan", "-i", str(tmp_path / "inv.yaml"), "-s", "size_greedy", "-o", str(tmp_path / "p.json")]
    )
    assert code == 0, err
    assert load_plan(tmp_path / "p.json").topology.num_devices == 2  # the params' default is 4
    code, _, err = invoke(
        ["plan", "-i", str(tmp_path / "inv.yaml"), "-s", "size_greedy", "-o", str(tmp_path / "p4.json"), "-d", "4"]
    )
    assert code == 0, err
    assert load_plan(tmp_path / "p4.json").topology.num_devices == 4
    code, _, err = invoke(
        ["plan", "-i", str(tmp_path / "plain.yaml"), "-s", "size_greedy", "-o", str(tmp_path / "p0.json")]
    )
    assert code == 0 and load_plan(tmp_path / "p0.json").topology.num_devices == 4  # no job: as before
    code, out, err = invoke(
        [
            "compare",
            "-i",
            str(tmp_path / "inv.yaml"),
            "--sharders",
            "size_greedy",
            "--backend",
            "simulator",
            "--rounds",
            "1",
            "--out",
            str(tmp_path / "c.json"),
        ]
    )
    assert code == 0, err
    assert json.loads((tmp_path / "c.json").read_text())["topology"]["num_devices"] == 2


# -- the gate -------------------------------------------------------------------------------------------------------
def test_the_gate_refuses_a_plan_for_another_topology_than_the_jobs_or_the_requests(tmp_path: Path) -> None:
    inv = with_job(tiny_inventory(tmp_path / "i.yaml", num_tables=6))
    two = get_sharder("size_greedy").shard(inv, Topology(num_devices=2, memory_per_device_gb=1.0))
    four = get_sharder("size_greedy").shard(inv, Topology(num_devices=4, memory_per_device_gb=1.0))
    check_topology(two, inv)
    with pytest.raises(PlanError) as e:
        check_topology(four, inv)
    line = str(e.value)
    assert "\n" not in line and "is for 4 x cpu" in line and "the job inventory 'tiny' records is 2 x cpu" in line
    check_topology(four, inv, four.topology)  # the request says 4: told otherwise
    with pytest.raises(PlanError, match=r"is for 2 x cpu .*, the request is for 4 x cpu .*num_devices differ"):
        check_topology(two, inv, four.topology)
    check_topology(four, with_job(inv, None))  # no job, no request: the comparison's check is all
    # the job's memory, when it records one, is part of its topology
    with pytest.raises(PlanError, match=r"records is 2 x cpu \(16 GB"):
        check_topology(two, with_job(inv, JobTopology(world_size=2, memory_per_device_gb=16)))


def test_plans_publish_refuses_a_plan_for_another_topology_in_one_line(work: Path) -> None:
    with_job(tiny_inventory(work / "plain.yaml", num_tables=6), path=work / "inv.yaml")
    code, _, err = invoke(["plan", "-i", "inv.yaml", "-s", "size_greedy", "-o", "p4.json", "-d", "4"])
    assert code == 0, err
    code, _, err = invoke(["plans", "publish", "p4.json", "-i", "inv.yaml", "--measure", "--allow-simulated"])
    assert code == 2 and err.count("\n") == 1, err
    assert "is for 4 x cpu" in err and "records is 2 x cpu" in err
    assert not (work / "store").exists() or list_plans(open_store("store")) == []


# -- replan ---------------------------------------------------------------------------------------------------------
def test_replan_plans_for_the_job_and_a_decision_for_one_topology_is_not_one_for_another(work: Path) -> None:
    inv = with_job(tiny_inventory(work / "plain.yaml"), path=work / "v1.yaml")
    told = _replan(work, {"plan.num_devices": 4}, inventory=work / "v1.yaml")
    assert told.outcome == "published" and told.plan is not None and told.plan.topology.num_devices == 4
    # today: "already current" until --force; the job is on 2 ranks
    job = _replan(work, inventory=work / "v1.yaml")
    assert job.outcome == "published", job.reason
    assert job.plan is not None and job.plan.topology.num_devices == 2 and job.topology == job.plan.topology
    store = open_store("store")
    assert get_current(store, inv.name).plan_id == job.plan.plan_id
    assert job.diff is None  # nothing ran on 2 ranks before: nothing to reshard
    again = _replan(work, inventory=work / "v1.yaml")
    assert again.outcome == "current" and again.plan is not None and again.plan.plan_id == job.plan.plan_id
    back = _replan(work, {"plan.num_devices": 4}, inventory=work / "v1.yaml")
    assert back.outcome == "already-decided" and "for this topology" in back.reason
    assert told.plan.plan_id in back.reason


def test_replan_cli_takes_the_topology_options(work: Path) -> None:
    with_job(tiny_inventory(work / "plain.yaml"), path=work / "v1.yaml")
    code, out, err = invoke(["replan", "-i", "v1.yaml", "--hosts", "2", "--devices-per-host", "2", "--json"])
    assert code == 0, err
    answer = json.loads(out)
    assert answer["outcome"] == "published"
    assert (answer["topology"]["num_devices"], answer["topology"]["devices_per_host"]) == (4, 2)
    code, out, err = invoke(["replan", "-i", "v1.yaml"])
    assert code == 0 and "planned for 2 x cpu (1 GB" in out and "published: tiny" in out, out + err
    code, _, err = invoke(["replan", "-i", "v1.yaml", "--hosts", "2"])
    assert code == 2 and "--hosts needs --devices-per-host" in err


def test_replan_moves_the_inventory_version_only_with_a_decision(work: Path) -> None:
    """A version that cannot be planned leaves the store's current inventory as it was."""
    v1 = with_job(tiny_inventory(work / "plain.yaml"), path=work / "v1.yaml")
    assert _replan(work, inventory=work / "v1.yaml").outcome == "published"
    t0 = v1.tables[0]
    huge = t0.model_copy(update={"num_embeddings": 10**9, "embedding_dim": 64})
    v2 = Inventory.model_validate(
        {**v1.model_dump(), "tables": [huge.model_dump(), *(t.model_dump() for t in v1.tables[1:])]}
    )
    save_inventory(v2, work / "v2.yaml")
    code, _, err = invoke(["replan", "-i", "v2.yaml"])
    assert code == 2 and err.count("\n") == 1, err
    current = get_current_inventory(open_store("store"), "tiny")
    assert current is not None and current[0].fingerprint() == v1.fingerprint()


# -- the store: two model versions, each job finds its own plan --------------------------------------------------
def test_two_model_versions_each_find_their_plan_and_another_world_size_names_the_nearest(work: Path) -> None:
    v1 = with_job(tiny_inventory(work / "plain.yaml"), path=work / "v1.yaml")
    first = _replan(work, inventory=work / "v1.yaml")
    assert first.outcome == "published" and first.plan is not None
    t0 = v1.tables[0]
    grown = t0.model_copy(update={"num_embeddings": t0.num_embeddings * 2})  # another schema: a table reshaped
    v2 = Inventory.model_validate(
        {**v1.model_dump(), "tables": [grown.model_dump(), *(t.model_dump() for t in v1.tables[1:])]}
    )
    assert v2.schema_fingerprint() != v1.schema_fingerprint()
    save_inventory(v2, work / "v2.yaml")
    second = _replan(work, inventory=work / "v2.yaml")
    assert second.outcome in ("published", "fallback"), second.reason
    store = open_store("store")
    now = get_current(store, "tiny")
    assert now.inventory_fingerprint == v2.fingerprint()
    # today: "no current plan ... for this model's tables" for the job still on v1
    old = approved_plan_for(store, v1.schema_fingerprint(), 2)
    assert old.plan is not None and old.plan.plan_id == first.plan.plan_id and old.tier == "history"
    new = approved_plan_for(store, v2.schema_fingerprint(), 2)
    assert new.plan is not None and new.plan.plan_id == now.plan_id and new.tier == "current"
    # a 4-rank job of v1: no plan, the nearest one refused is named (its world size is what differs)
    four = approved_plan_for(store, v1.schema_fingerprint(), 4)
    assert four.plan is None and four.refused is not None and four.refused.plan_id == first.plan.plan_id
    assert approved_plan_for(store, "0" * 64, 2).refused is None  # another model: nothing near


def test_plans_list_shows_world_size_schema_and_the_types(work: Path) -> None:
    inv = with_job(tiny_inventory(work / "plain.yaml"), path=work / "v1.yaml")
    job = _replan(work, inventory=work / "v1.yaml")
    assert job.plan is not None
    code, out, err = invoke(["plans", "list", "--json"])
    assert code == 0, err
    (listed,) = json.loads(out)
    assert listed["world_size"] == 2 and listed["schema_fingerprint"] == inv.schema_fingerprint()
    assert listed["sharding_types"] == job.plan.sharding_types() and sum(listed["sharding_types"].values()) == 14
    code, out, err = invoke(["plans", "list"])
    assert code == 0, err
    assert "ranks" in out and "schema" in out and "types" in out
    assert inv.schema_fingerprint()[:12] in out and "TW" in out


def test_the_replan_flow_request_carries_the_topology_options(work: Path) -> None:
    from dreamshard_flows.replan import library_request
    from dreamshard_flows.requests import ReplanRequest as FlowReplanRequest

    told = library_request(FlowReplanRequest(inventory_name="tiny", hosts=2, devices_per_host=2, memory_gb=2.0))
    topology = told.settings.topology_for_job(JOB)
    assert (topology.num_devices, topology.devices_per_host, topology.memory_per_device_gb) == (4, 2, 2.0)
    plain = library_request(FlowReplanRequest(inventory_name="tiny"))
    assert plain.settings.told == frozenset()  # nothing said: the job decides
    assert plain.settings.topology_for_job(JOB).num_devices == 2  # the job's, as the CLI
