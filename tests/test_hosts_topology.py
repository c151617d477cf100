"""Comm on a topology with hosts: flat figures unchanged, the inter-host tier (a topology parameter) costed per
device and collective, in the planning cost and the simulator alike."""

from __future__ import annotations

import pytest
import torch

from dreamshard.learning.cost_model import CostEnsemble
from dreamshard.learning.planning_cost import PlanningCost, comm_for
from dreamshard.profiling import comm
from dreamshard.profiling.simulator import SimulatorBackend
from dreamshard.values import DEFAULT_INTER_HOST_GBPS, CommModel, Table, Topology

#: one device's measured (intra-host) rates: an NVLink-like one and gloo on CPU loopback (fits on this machine)
FAST = CommModel(alpha_ms=0.05, beta_ms_per_mb=0.01, backend="nccl", world_size=4)
GLOO = CommModel(alpha_ms=0.18, beta_ms_per_mb=0.95, backend="gloo", world_size=2)
COLLECTIVES = ("all_to_all", "reduce_scatter", "all_reduce")
SIZES = (1.0, 4096.0, 1e6, 3.3e7)


def topo(n: int = 4, per_host: int | None = None, **kw: object) -> Topology:
    return Topology(num_devices=n, memory_per_device_gb=64, devices_per_host=per_host, **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize("flat", [topo(4), topo(4, 4), topo(1), topo(1, 1)])
@pytest.mark.parametrize("model", [FAST, GLOO])
def test_flat_topologies_cost_exactly_as_before(flat: Topology, model: CommModel) -> None:
    assert flat.hosts == 1
    for c in COLLECTIVES:
        assert comm.host_comm_model(flat, model, c) is model  # type: ignore[arg-type]
        assert comm.inter_host_fraction(flat, c) == 0.0  # type: ignore[arg-type]
        for b in (0.0, *SIZES):
            assert comm.device_comm_ms(flat, model, b, c) == model.cost_ms(b)  # type: ignore[arg-type]


def test_inter_host_fraction_per_collective() -> None:
    assert comm.inter_host_fraction(topo(4, 2)) == pytest.approx(2 / 3)  # 2 of 3 peers on the other host
    assert comm.inter_host_fraction(topo(8, 4)) == pytest.approx(4 / 7)
    assert comm.inter_host_fraction(topo(4, 1)) == 1.0  # one device per host: every peer is remote
    for ring in ("reduce_scatter", "all_reduce"):  # a ring waits for its slowest (inter-host) hop
        assert comm.inter_host_fraction(topo(8, 4), ring) == 1.0  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="unknown collective"):
        comm.inter_host_fraction(topo(4, 2), "gather")  # type: ignore[arg-type]


@pytest.mark.parametrize("model", [FAST, GLOO])
def test_two_hosts_cost_more_than_flat_at_the_default_bandwidth(model: CommModel) -> None:
    two, flat = topo(4, 2), topo(4)
    assert two.inter_host_gbps == DEFAULT_INTER_HOST_GBPS
    for c in COLLECTIVES:
        for b in SIZES:
            more = comm.device_comm_ms(two, model, b, c)  # type: ignore[arg-type]
            assert more > comm.device_comm_ms(flat, model, b, c)  # type: ignore[arg-type]
    # the formula: max(alpha, latency) + (beta + f / gbps) x MB, f = 2/3 for the all-to-all on 2 x 2
    mb = 8.0
    want = max(model.alpha_ms, comm.INTER_HOST_LATENCY_MS) + (model.beta_ms_per_mb + (2 / 3) / 12.5) * mb
    assert comm.device_comm_ms(two, model, mb * 1e6) == pytest.approx(want)
    eff = comm.host_comm_model(two, model)
    assert "12.5 GB/s (parameter)" in eff.backend and eff.collective == "all_to_all"
    assert comm.device_comm_ms(two, model, 0.0) == 0.0


def test_a_huge_inter_host_bandwidth_converges_to_flat() -> None:
    flat = topo(4)
    for c in COLLECTIVES:
        costs = [
            comm.device_comm_ms(topo(4, 2, inter_host_gbps=g), FAST, 4e6, c)  # type: ignore[arg-type]
            for g in (1.0, 12.5, 100.0, 1e6)
        ]
        assert costs == sorted(costs, reverse=True)
        assert costs[-1] == pytest.approx(comm.device_comm_ms(flat, FAST, 4e6, c), rel=1e-4)  # type: ignore[arg-type]
    # a model whose fitted alpha is below the assumed network latency: within that latency of flat
    no_alpha = FAST.model_copy(update={"alpha_ms": 0.0})
    gap = comm.device_comm_ms(topo(4, 2, inter_host_gbps=1e6), no_alpha, 4e6) - no_alpha.cost_ms(4e6)
    assert 0 < gap <= comm.INTER_HOST_LATENCY_MS + 1e-5


def test_the_collective_defaults_to_the_models_own() -> None:
    rs = FAST.model_copy(update={"collective": "reduce_scatter"})
    two = topo(4, 2)
    assert comm.device_comm_ms(two, rs, 1e6) == comm.device_comm_ms(two, FAST, 1e6, "reduce_scatter")
    assert comm.device_comm_ms(two, rs, 1e6) > comm.device_comm_ms(two, FAST, 1e6)  # ring: every byte remote


def _tables() -> list[Table]:
    return [
        Table(name=f"t{i}", num_embeddings=1000 * (i + 1), embedding_dim=16 * (1 + i % 4), pooling_factor=2.0 + i)
        for i in range(8)
    ]


@pytest.mark.parametrize("model", [FAST, GLOO])
def test_planning_cost_of_a_plan_is_higher_on_two_hosts(model: CommModel) -> None:
    torch.manual_seed(0)
    ens = CostEnsemble(size=2)
    tables = _tables()
    placement = {t.name: i % 4 for i, t in enumerate(tables)}
    flat, two = topo(4, batch_size=2048), topo(4, 2, batch_size=2048)
    c_flat = PlanningCost(ens, flat, comm_for(flat, [model]))
    c_two = PlanningCost(ens, two, comm_for(two, [model]))
    assert c_flat.device_comm is model  # flat: the measured model itself, today's figures
    p_flat, p_two = c_flat.predict(tables, placement), c_two.predict(tables, placement)
    assert p_two.overall_ms > p_flat.overall_ms
    for d, (a, b) in enumerate(zip(p_flat.per_device, p_two.per_device, strict=True)):
        assert a.fwd_compute == pytest.approx(b.fwd_compute)  # only the comm differs
        dims = [t.output_dim for t in tables if placement[t.name] == d]
        nbytes = comm.device_comm_bytes(2048, dims, 4)
        assert a.fwd_comm == pytest.approx(model.cost_ms(nbytes), rel=1e-5)
        assert b.fwd_comm == b.bwd_comm == pytest.approx(comm.device_comm_ms(two, model, nbytes), rel=1e-5)
        assert b.fwd_comm > a.fwd_comm


def test_planning_comm_takes_only_all_to_all_models() -> None:
    ar = FAST.model_copy(update={"collective": "all_reduce"})
    assert comm_for(topo(4), [ar]) is None
    assert comm_for(topo(4), [ar, GLOO]) is GLOO


def test_simulator_comm_is_host_aware_and_per_collective() -> None:
    sim = SimulatorBackend()
    flat, two = topo(4), topo(4, 2)
    for c in COLLECTIVES:
        m = sim.comm_model(4, c)  # type: ignore[arg-type]
        assert m.collective == c and m.backend == "simulated"
        assert sim.device_comm_ms(flat, 1e6, c) == m.cost_ms(1e6)  # type: ignore[arg-type]
        assert sim.device_comm_ms(two, 1e6, c) > sim.device_comm_ms(flat, 1e6, c)  # type: ignore[arg-type]
    assert sim.comm_model(1).cost_ms(1e9) == 0.0 and sim.device_comm_ms(topo(1), 1e9) == 0.0
