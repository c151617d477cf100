"""`inventory from-torchrec` records the job's world when TorchRec's `Topology` states it (its intra- and inter-host
bandwidths), or when `--world` names one (docs/torchrec.md, "Sequence tables, constraints and the job")."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from dreamshard.cli.app import invoke
from dreamshard.documents import load_inventory
from dreamshard.errors import InventoryError
from dreamshard.integrations.torchrec_job import job_of, job_topology, torchrec_topology, world_of
from dreamshard.values import Topology, named_world

pytest.importorskip("torchrec")
from torchrec.distributed.planner.types import Topology as TorchRecTopology  # noqa: E402

MODEL = """
from torchrec.modules.embedding_configs import EmbeddingBagConfig
from torchrec.modules.embedding_modules import EmbeddingBagCollection
from torchrec.distributed.planner.types import Topology


def build():
    return EmbeddingBagCollection(tables=[
        EmbeddingBagConfig(name="a", num_embeddings=100, embedding_dim=8, feature_names=["a"]),
        EmbeddingBagConfig(name="b", num_embeddings=50, embedding_dim=16, feature_names=["b"]),
    ])


def gpus():
    return Topology(world_size=16, local_world_size=8, compute_device="cuda")


def own():
    return Topology(world_size=4, compute_device="cuda", intra_host_bw=300e9 / 1000, inter_host_bw=25e9 / 1000)
"""


def test_torchrecs_default_gpu_topology_is_nvlink_ib_with_its_hosts() -> None:
    job = job_topology(topology=TorchRecTopology(world_size=16, local_world_size=8, compute_device="cuda"))
    assert job is not None and (job.world_size, job.devices_per_host, job.device_type) == (16, 8, "cuda")
    assert job.world == named_world("nvlink-ib", devices_per_host=8)


def test_a_topology_with_its_own_bandwidths_records_them() -> None:
    world = world_of(TorchRecTopology(world_size=4, compute_device="cuda", intra_host_bw=3e8, inter_host_bw=2.5e7))
    assert world is not None and world.name == "torchrec-topology"
    assert (world.intra_host_gbps, world.inter_host_gbps) == pytest.approx((300.0, 25.0))
    assert "intra_host_bw 300 GB/s" in world.source


def test_a_cpu_topology_on_torchrecs_defaults_states_no_world() -> None:
    assert world_of(TorchRecTopology(world_size=2, compute_device="cpu")) is None
    assert "world" not in job_of(TorchRecTopology(world_size=2, compute_device="cpu"))


def test_an_option_that_disagrees_with_the_topology_is_refused_naming_both() -> None:
    topo = TorchRecTopology(world_size=16, local_world_size=8, compute_device="cuda")
    with pytest.raises(InventoryError, match="^--world-size 8 is not the TorchRec topology's world_size 16: give one"):
        job_topology(world_size=8, topology=topo)
    with pytest.raises(InventoryError, match="--world fast and the TorchRec topology's bandwidths"):
        job_topology(topology=topo, world="fast")
    with pytest.raises(InventoryError, match="--world 'ib200': choose fast, nvlink-ib, host, measured"):
        job_topology(world_size=2, world="ib200")
    with pytest.raises(InventoryError, match="intra_host_bw is -1.0: a bandwidth is positive"):
        world_of(SimpleNamespace(intra_host_bw=-1.0, inter_host_bw=1.0, compute_device="cuda"))


def test_torchrecs_planner_plans_in_a_declared_world() -> None:
    ours = Topology(num_devices=8, memory_per_device_gb=1.0, device_type="cuda", devices_per_host=4)
    fast = torchrec_topology(ours.in_world(named_world("fast")), 2**30)
    assert (fast.intra_host_bw, fast.inter_host_bw) == pytest.approx((10e9 / 1000, 12.5e9 / 1000))
    assert (fast.world_size, fast.local_world_size) == (8, 4)
    plain = torchrec_topology(ours, 2**30)  # none declared: TorchRec's own defaults
    assert plain.intra_host_bw == pytest.approx(600 * 1024**3 / 1000)


def test_cli_from_torchrec_records_the_world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "job_model.py").write_text(MODEL)
    (tmp_path / "c.yaml").write_text("a: {pooling_factors: [2.0]}\nb: {pooling_factors: [1.0]}\n")
    base = ["inventory", "from-torchrec", "--model", "job_model.py:build", "--constraints", "c.yaml"]
    code, out, err = invoke([*base, "--torchrec-topology", "job_model.py:gpus", "-o", "inv.yaml"])
    assert code == 0, err
    assert "job 16 ranks in world nvlink-ib" in out
    job = load_inventory(tmp_path / "inv.yaml").job
    assert job is not None and job.world is not None and job.world.name == "nvlink-ib" and job.devices_per_host == 8
    code, _, err = invoke([*base, "--torchrec-topology", "job_model.py:own", "-o", "own.yaml"])
    own = load_inventory(tmp_path / "own.yaml").job
    assert code == 0 and own is not None and own.world is not None
    assert own.world.intra_host_gbps == pytest.approx(300.0)
    code, _, err = invoke([*base, "--world-size", "2", "--world", "fast", "-o", "fast.yaml"])
    fast = load_inventory(tmp_path / "fast.yaml").job
    assert code == 0 and fast is not None and fast.world == named_world("fast")
    code, _, err = invoke([*base, "--torchrec-topology", "job_model.py:nothing", "-o", "x.yaml"])
    assert code == 2 and "--torchrec-topology 'job_model.py:nothing': job_model.py has no 'nothing'" in err
    # the job's world is what `plan` plans for
    code, out, err = invoke(["plan", "-i", "inv.yaml", "-s", "size_greedy", "-m", "1", "-o", "p.json"])
    assert code == 0 and "planned for world nvlink-ib" in out, err
