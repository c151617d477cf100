"""The job's world (docs/architecture/data-model.md, "The job's world"): declared in params, the job or `--world`;
a bad value is one line naming the key; a cuda job with no declared world is planned with a note, never silently; a
declared world reaches the plan file, `compare` and the gate, which charge it or say PROXY."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from flows_support import REPLAN_PARAMS, fast_path_workspace, tiny_inventory
from store_helpers import gate_measured

from dreamshard.cli.app import invoke
from dreamshard.config.settings import resolve
from dreamshard.config.world import world_overrides
from dreamshard.errors import ConfigError
from dreamshard.gate import PublishConfig
from dreamshard.gate.incumbent import incumbent_for
from dreamshard.inventory.synth import synth_inventory
from dreamshard.profiling import make_oracle
from dreamshard.profiling.comm import device_comm_bytes
from dreamshard.profiling.world import charged_world, world_note, world_proxy
from dreamshard.sharders import get_sharder
from dreamshard.usecases import plan as plan_uc
from dreamshard.usecases import replan as replan_uc
from dreamshard.values import CommModel, Inventory, JobTopology, Topology, World, named_world
from dreamshard.values.world import FAST, NVLINK_IB, gib_per_s

#: What a plan with the packaged model needs here: two devices, few candidates, no sampling, no TorchRec import.
PLAN = {
    "plan.num_devices": 2,
    "topology.memory_per_device_gb": 1.0,
    "plan.samples": 0,
    "plan.candidates": ["lpt", "dim_greedy"],
}
INV = synth_inventory(6, 0, name="w")
GLOO = CommModel(alpha_ms=0.1, beta_ms_per_mb=1.0, backend="gloo", world_size=2)


def _params(tmp_path: Path, **sections: object) -> Path:
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(sections))
    return path


# -- the values -----------------------------------------------------------------------------------------------------
def test_the_profiles_carry_their_figures_and_source() -> None:
    assert (FAST.alpha_ms, FAST.intra_host_gbps) == (0.02, 10.0)
    # TorchRec's constants are GiB/s written as bytes per ms: 600 * 1024**3 / 1000 bytes/ms
    assert NVLINK_IB.intra_host_gbps == pytest.approx(600 * 1024**3 / 1000 * 1000 / 1e9)
    assert NVLINK_IB.inter_host_gbps == pytest.approx(gib_per_s(12.5)) and "CROSS_NODE_BANDWIDTH" in NVLINK_IB.source
    assert named_world("host").measured and named_world("measured").alpha_ms is None
    with pytest.raises(ValueError, match="world 'ib200' needs intra_host_gbps"):
        World(name="ib200", alpha_ms=0.01)
    with pytest.raises(ValueError, match="world 'host' is measured"):
        World(name="host", alpha_ms=0.01)


def test_a_topology_written_with_the_former_interconnect_reads_as_its_world() -> None:
    fast = Topology.model_validate({"num_devices": 4, "memory_per_device_gb": 1.0, "interconnect": "fast"})
    assert fast.world == FAST
    plain = Topology.model_validate({"num_devices": 4, "memory_per_device_gb": 1.0, "interconnect": "measured"})
    assert plain.world is None and plain == Topology(num_devices=4, memory_per_device_gb=1.0)


def test_a_world_brings_its_hosts_and_network_and_refuses_other_hosts() -> None:
    topo = Topology(num_devices=16, memory_per_device_gb=1.0).in_world(named_world("nvlink-ib", devices_per_host=8))
    assert (topo.hosts, topo.inter_host_gbps) == (2, NVLINK_IB.inter_host_gbps)
    with pytest.raises(ValueError, match="8 devices per host, the topology 4"):
        Topology(num_devices=16, memory_per_device_gb=1.0, devices_per_host=4).in_world(
            named_world("fast", devices_per_host=8)
        )


# -- params, the job and --world --------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("world", "needle"),
    [
        ({"name": "ib200"}, "world.alpha_ms: world 'ib200' needs alpha_ms and intra_host_gbps"),
        ({"name": "ib200", "alpha_ms": 0.01, "intra_host_gbps": -3}, "world.intra_host_gbps: Input should be greater"),
        ({"alpha_ms": 0.01}, "world.alpha_ms: a world's figures need its name"),
        ({"name": "fast", "alpha_ms": 0.05}, "world.alpha_ms: world 'fast' is a named profile: it takes no alpha_ms"),
        ({"name": "host", "intra_host_gbps": 5}, "world.intra_host_gbps: world 'host' is measured"),
        ({"name": "Bad Name"}, "world.name: String should match pattern"),
        ({"name": "ib200", "alpha_ms": "fast", "intra_host_gbps": 1}, "world.alpha_ms: must be a number"),
    ],
)
def test_a_bad_world_is_one_line_naming_the_key(tmp_path: Path, world: dict[str, object], needle: str) -> None:
    with pytest.raises(ConfigError) as e:
        resolve(_params(tmp_path, world=world))
    assert needle in str(e.value) and "\n" not in str(e.value)


def test_a_world_whose_hosts_are_not_the_topologys_is_refused(tmp_path: Path) -> None:
    params = _params(tmp_path, world={"name": "fast", "devices_per_host": 8}, topology={"devices_per_host": 4})
    with pytest.raises(ConfigError, match="world.devices_per_host 8 is not topology.devices_per_host 4: say one"):
        resolve(params)
    job = JobTopology(world_size=8, devices_per_host=2)
    with pytest.raises(ConfigError, match="^world: world 'fast' has 8 devices per host, the topology 2"):
        resolve(_params(tmp_path, world={"name": "fast", "devices_per_host": 8})).topology_for_job(job)


def test_a_bad_world_on_the_command_line_exits_2_in_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "inv.json").write_text(INV.model_dump_json())
    code, _, err = invoke(["plan", "-i", "inv.json", "-s", "size_greedy", "-d", "2", "--world", "ib200"])
    assert code == 2 and "unknown world 'ib200' (world.name): choose fast, nvlink-ib, host, measured" in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    code, _, err = invoke(["plan", "-i", "inv.json", "-s", "size_greedy", "--interconnect", "fast", "--world", "host"])
    assert code == 2 and "--interconnect fast is --world fast, not --world host" in err


def test_the_named_world_wins_over_the_jobs_which_wins_over_the_params(tmp_path: Path) -> None:
    own = {"name": "ib200", "alpha_ms": 0.015, "intra_host_gbps": 300, "inter_host_gbps": 25, "source": "nccl-tests"}
    params = _params(tmp_path, world=own)
    job = JobTopology(world_size=4, device_type="cuda", world=named_world("nvlink-ib"))
    assert resolve(params).topology_for().world == World(**own)
    assert resolve(params).topology_for().inter_host_gbps == 25
    assert resolve(params).topology_for_job(job).world == named_world("nvlink-ib")  # the job's over the params'
    told = resolve(params, world_overrides("fast")).topology_for_job(job)
    assert told.world == FAST  # --world over both, the params' figures gone with the params' world
    assert resolve(params, world_overrides(None, "fast")).topology_for().world == FAST  # --interconnect fast
    assert resolve(_params(tmp_path, topology={"interconnect": "fast"})).topology_for().world == FAST  # older params


# -- planning ---------------------------------------------------------------------------------------------------------
def test_a_cuda_job_with_no_declared_world_is_planned_with_the_note() -> None:
    settings = resolve(None, {**PLAN, "topology.device_type": "cuda"})
    result = plan_uc.run(plan_uc.PlanRequest(settings=settings, inventory=INV))
    world = result.plan.world
    assert world is not None and not world.declared and world.backend.startswith("gloo")
    assert "a cuda job with no declared world is costed on this host's gloo" in world.note
    assert any("a cuda job with no declared world" in w for w in result.warnings)
    # a cpu job on the same fit, or a cuda job told its world, is planned without one
    cpu = plan_uc.run(plan_uc.PlanRequest(settings=resolve(None, PLAN), inventory=INV))
    assert cpu.plan.world is not None and cpu.plan.world.note == ""
    assert not any("declared world" in w for w in cpu.warnings)


def test_the_note_is_printed_by_plan(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "inv.json").write_text(INV.model_dump_json())
    base = ["plan", "-i", "inv.json", "-d", "2", "-m", "1", "--samples", "0", "--device-type", "cuda"]
    code, out, err = invoke([*base, "-o", "p.json"])
    assert code == 0 and "warning: plan " in err and "a cuda job with no declared world is costed on" in err
    assert "planned for world host (none declared)" in out
    assert "no declared world" in json.loads((tmp_path / "p.json").read_text())["world"]["note"]


def test_a_declared_world_reaches_the_plan_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "inv.json").write_text(INV.model_dump_json())
    params = _params(tmp_path, world={"name": "ib200", "alpha_ms": 0.015, "intra_host_gbps": 300, "source": "x"})
    argv = ["plan", "-i", "inv.json", "-d", "2", "-m", "1", "--samples", "0", "--device-type", "cuda", "--params"]
    code, _, err = invoke([*argv, str(params), "-o", "p.json"])
    plan = json.loads((tmp_path / "p.json").read_text())
    assert code == 0 and "declared world" not in err, err
    assert plan["topology"]["world"]["name"] == "ib200"
    w = plan["world"]
    assert (w["name"], w["backend"], w["declared"], w["note"]) == ("ib200", "world:ib200", True, "")
    assert (w["alpha_ms"], w["intra_host_gbps"]) == pytest.approx((0.015, 300.0))
    code, _, _ = invoke([*argv, str(params), "--world", "fast", "-o", "p2.json"])  # --world over the params
    assert code == 0 and json.loads((tmp_path / "p2.json").read_text())["world"]["name"] == "fast"


def test_world_measured_without_a_fit_from_the_jobs_pool_says_so() -> None:
    cuda = Topology(num_devices=2, memory_per_device_gb=1.0, device_type="cuda")
    measured = cuda.in_world(named_world("measured"))
    assert "world 'measured' has no nccl fit from the job's pool" in world_note(measured, GLOO)
    nccl = GLOO.model_copy(update={"backend": "nccl"})
    assert world_note(measured, nccl) == "" and world_note(cuda, nccl) == ""
    assert world_note(cuda.in_world(named_world("host")), GLOO) == ""  # asked for: the host's fit
    assert world_note(cuda.model_copy(update={"device_type": "cpu"}), GLOO) == ""


# -- compare and the gate ----------------------------------------------------------------------------------------------
def _gated(topology: Topology, inventory: Inventory) -> tuple[object, object, object]:
    plan = get_sharder("lookup_greedy").shard(inventory, topology).model_copy(update={"sharder": "dreamshard"})
    rules = PublishConfig(baselines=("round_robin", "torchrec"), allow_simulated=True, min_rounds=2)
    return gate_measured(plan, inventory, make_oracle("simulator"), rules)


def test_the_gate_charges_the_declared_world() -> None:
    inv = synth_inventory(8, 0, name="g")
    topo = Topology(num_devices=2, memory_per_device_gb=1.0, batch_size=512).in_world(named_world("fast"))
    judged, decision, cmp = _gated(topo, inv)
    assert judged.world is not None and (judged.world.name, judged.world.backend) == ("fast", "world:fast")
    assert decision.world.startswith("world fast: 0.020 ms + 10 GB/s") and "PROXY world" not in decision.reason
    assert decision.proxy == "" and "world fast" in decision.evidence
    # every device's exchange is the world's alpha + its bytes at 10 GB/s, not the simulator's own comm
    r = cmp.result("round_robin")
    units = {t.name: t for t in inv.tables}
    for d, cost in enumerate(r.plan.measured.per_device):
        dims = [units[t].output_elements_per_sample for t, dev in r.plan.placement.items() if dev == d]
        mb = device_comm_bytes(512, dims, 2) / 1e6
        assert cost.fwd_comm == pytest.approx(0.02 + mb / 10.0 if dims else 0.0)


def test_the_gate_says_proxy_for_a_cuda_job_with_no_declared_world() -> None:
    inv = synth_inventory(8, 0, name="g")
    topo = Topology(num_devices=2, memory_per_device_gb=1.0, batch_size=512, device_type="cuda")
    judged, decision, cmp = _gated(topo, inv)
    assert "PROXY world: charged world host (none declared)" in decision.reason
    assert "a cuda job with no declared world" in decision.proxy and cmp.world_proxy in decision.proxy
    assert judged.world is not None and judged.world.note == cmp.world_proxy
    assert "(PROXY for the plan's world)" in decision.evidence


def test_world_proxy_compares_the_figures_charged() -> None:
    topo = Topology(num_devices=4, memory_per_device_gb=1.0).in_world(named_world("fast"))
    assert world_proxy(topo, charged_world(topo, None)) == ""
    other = charged_world(topo.in_world(named_world("nvlink-ib")), None)
    assert "PROXY world: charged world nvlink-ib" in world_proxy(topo, other)
    assert "does not record the world" in world_proxy(topo, None)  # a comparison written before the world
    assert world_proxy(topo.model_copy(update={"num_devices": 1}), None) == ""  # one device exchanges nothing


def test_compare_prints_the_world_it_charged(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "inv.json").write_text(INV.model_dump_json())
    _params(tmp_path, profile={"backend": "simulator"})
    argv = ["compare", "-i", "inv.json", "-d", "2", "-m", "1", "--sharders", "round_robin", "--rounds", "1"]
    code, out, _ = invoke([*argv, "--params", "params.yaml", "--world", "nvlink-ib", "--json"])
    summary = json.loads(out)
    assert code == 0 and summary["world"]["name"] == "nvlink-ib" and summary["world_proxy"] == ""
    code, out, _ = invoke([*argv, "--params", "params.yaml", "--device-type", "cuda"])
    assert code == 0 and "PROXY world" in " ".join(out.split())


# -- replan and compare with a plan -----------------------------------------------------------------------------------
def test_replan_plans_and_gates_in_the_world_it_is_told(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    work = fast_path_workspace(tmp_path, monkeypatch, REPLAN_PARAMS)
    plain = tiny_inventory(work / "plain.yaml", num_tables=6)
    job = {"world_size": 2, "world": named_world("nvlink-ib").model_dump()}
    inv = Inventory.model_validate({**plain.model_dump(), "job": job})
    settings = resolve(work / "params.yaml", world_overrides("fast"))
    result = replan_uc.run(replan_uc.ReplanRequest(settings=settings, inventory=inv))
    assert result.plan is not None and result.plan.topology.world == FAST  # --world over the job's world
    decision = result.publication.decision if result.publication is not None else None
    assert decision is not None and decision.world.startswith("world fast"), result.reason
    assert "PROXY world" not in decision.reason
    # the job's own world when nothing is told
    again = replan_uc.run(replan_uc.ReplanRequest(settings=resolve(work / "params.yaml"), inventory=inv, force=True))
    assert again.plan is not None and again.plan.topology.world == named_world("nvlink-ib")


def test_compare_refuses_a_world_other_than_the_plans(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "inv.json").write_text(INV.model_dump_json())
    code, _, err = invoke(["plan", "-i", "inv.json", "-s", "size_greedy", "-d", "2", "--world", "fast", "-o", "p.json"])
    assert code == 0, err
    argv = ["compare", "-i", "inv.json", "-p", "p.json", "--sharders", "round_robin", "--backend", "simulator"]
    code, _, err = invoke([*argv, "--rounds", "1", "--world", "nvlink-ib"])
    assert code == 2 and "--world nvlink-ib: plan plan-" in err and "was planned for world fast" in err
    code, out, err = invoke([*argv, "--rounds", "1", "--world", "fast", "--json"])
    assert code == 0 and json.loads(out)["world"]["name"] == "fast", err


def test_a_current_plan_for_another_world_is_judged_again_as_it_places() -> None:
    inv = synth_inventory(6, 0, name="w")
    topo = Topology(num_devices=2, memory_per_device_gb=1.0)
    current = get_sharder("size_greedy").shard(inv, topo)
    fast = topo.in_world(named_world("fast"))
    got = incumbent_for("w", current.plan_id, current, None, inv, fast)
    assert "(planned for no declared world, the job's is world fast)" in (got.cannot_serve or "")
    assert got.contender is not None and got.contender.topology == fast  # its placement, in the job's world
    assert got.contender.placement == current.placement
