"""The cost planning minimises: a CostEnsemble bound to one topology, pessimistic where it is unsure
(docs/architecture/learning.md, "Learning").

Compute is the members' mean + `risk` x their spread, so the search and the policy stay away from the cost net's
blind spots. Communication uses the alpha-beta model of the collective each unit runs (dreamshard.profiling.comm:
all-to-all for whole tables and column shards, reduce-scatter for row shards, all-reduce for replicas), measured
or the declared figures of the topology's world (dreamshard.values.world), host-aware on a topology with hosts;
without a comm model, the ensemble's comm heads. As a CostEstimator (dreamshard.learning.estimator) a unit's state is
``[member latents (K x latent) | 1 | all-to-all output dim | reduce-scatter output dim | all-reduce elements]``
(output dim = `Table.output_elements_per_sample`: dim x the table's features, dim x its lookups for a sequence
table; `unit_exchange`); a device's state is the sum of its units' states.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Protocol

import torch

from dreamshard.learning.cost_model import COMM, COMPUTE, CostEnsemble
from dreamshard.learning.estimator import device_states
from dreamshard.learning.features import tables_features
from dreamshard.placement.expand import expand_plan
from dreamshard.profiling.comm import comm_model_for, declared, host_comm_model, world_model
from dreamshard.profiling.comm_fit import derive, distrust
from dreamshard.profiling.world import pool_backend
from dreamshard.values import Collective, CommModel, Costs, DeviceCost, Inventory, Plan, Table, Topology
from dreamshard.values.units import parse_unit
from dreamshard.values.world import MEASURED

if TYPE_CHECKING:  # pragma: no cover
    from dreamshard.learning.model_store import LoadedModel

log = logging.getLogger(__name__)

#: bytes of one pooled output element in the all-to-all (outputs are fp32 whatever the table dtype)
OUTPUT_BYTES = 4


class CollectiveSource(Protocol):
    """Where the collectives' alpha-beta models come from when planning for a backend: the oracle that verifies,
    refines and gates (``Oracle.collective_model``), so that search optimises what the hardware is judged by."""

    def collective_model(self, topology: Topology, collective: Collective) -> CommModel: ...


#: the collective each unit kind other than whole tables and column shards runs (they run the all-to-all)
UNIT_COLLECTIVES: tuple[tuple[str, Collective], ...] = (("row", "reduce_scatter"), ("replica", "all_reduce"))


def unit_exchange(table: Table, kind: str) -> list[float]:
    """A unit's comm columns of the state: [1, all-to-all output elements, reduce-scatter output elements,
    all-reduce elements] per sample (`Table.output_elements_per_sample`). Whole tables, column shards and a
    sequence table's row shards (the rows their lookups found) go by the all-to-all, a pooled table's row shards
    (partial sums of the whole batch) by the reduce-scatter, replicas' gradients by the all-reduce."""
    out = table.output_elements_per_sample
    a2a = kind in ("table", "column") or (kind == "row" and not table.pooled)
    return [
        1.0,
        out if a2a else 0.0,
        out if kind == "row" and table.pooled else 0.0,
        float(table.num_embeddings * table.embedding_dim) if kind == "replica" else 0.0,
    ]


class PlanningCost:
    """A CostEstimator for one topology: ensemble mean + risk x spread for compute, measured comm."""

    def __init__(
        self,
        ensemble: CostEnsemble,
        topology: Topology,
        comm: CommModel | None = None,
        risk: float = 1.0,
        source: CollectiveSource | None = None,
    ) -> None:
        if risk < 0:
            raise ValueError(f"risk must be >= 0, got {risk}")
        self.ensemble = ensemble
        self.topology = topology
        #: the backend's own fits of every collective, when planning for one (one objective); else `comm`
        self.source = source
        if source is not None and topology.num_devices > 1:
            comm = source.collective_model(topology, "all_to_all")
        self.comm = comm
        #: one device's all-to-all on this topology: `comm` itself when flat, with the inter-host tier when not
        self.device_comm = host_comm_model(topology, comm, "all_to_all") if comm is not None else None
        self.risk = float(risk)
        self.latent = ensemble.spec.latent
        self.k = ensemble.size
        self.base = self.k * self.latent  # state columns: base = 1, then a2a dims, rs dims, ar elements
        self.state_dim = self.base + 4
        self.cost_scale = ensemble.cost_scale or 1.0
        self.collectives: dict[str, CommModel] = {}  # reduce_scatter / all_reduce, host-aware, when needed

    def _collective(self, collective: Collective) -> CommModel | None:
        """One device's model of `collective` on this topology (None without a comm model)."""
        if self.comm is None or self.topology.num_devices <= 1:
            return None
        if collective not in self.collectives:
            n = self.topology.num_devices
            if self.source is not None:
                model = self.source.collective_model(self.topology, collective)
            elif (world := declared(self.topology)) is not None:
                model = world_model(world, n, collective)
            elif self.comm.backend.startswith(("simulated", "default")):  # no benchmark behind the all-to-all either
                model = self.comm.model_copy(update={"collective": collective})
            else:
                model = comm_model_for(n, collective=collective)
            self.collectives[collective] = host_comm_model(self.topology, model, collective)
        return self.collectives[collective]

    # -- CostEstimator ---------------------------------------------------------------------------------
    def encode(self, tables: Sequence[Table]) -> torch.Tensor:
        kinds = [parse_unit(t.name).kind for t in tables]
        batch = self.topology.batch_size
        # a replica runs its share of the batch; every other unit the whole batch
        feats = torch.from_numpy(
            tables_features(tables, [batch / self.topology.num_devices if k == "replica" else batch for k in kinds])
        )
        with torch.no_grad():
            z = self.ensemble.table_latents(feats)  # (K, N, L)
        n = z.shape[1]
        flat = z.permute(1, 0, 2).reshape(n, self.k * self.latent)
        cols = [unit_exchange(t, k) for t, k in zip(tables, kinds, strict=True)]
        for kind, collective in UNIT_COLLECTIVES:
            if any(k == kind and (t.pooled or kind != "row") for t, k in zip(tables, kinds, strict=True)):
                self._collective(collective)
        return torch.cat([flat, torch.tensor(cols, dtype=flat.dtype).reshape(n, 4)], dim=1)

    def member_costs(self, states: torch.Tensor) -> torch.Tensor:
        """(..., S) device states -> (K, ..., 4) each member's costs in ms (comm analytic when known)."""
        lat = states[..., : self.k * self.latent].unflatten(-1, (self.k, self.latent)).movedim(-2, 0)
        nonempty = states[..., self.base] > 0.5
        costs = self.ensemble.member_device_costs(lat, nonempty)
        if self.comm is not None:
            fwd = self.comm_ms(states)
            if torch.is_grad_enabled():
                costs = costs.clone()  # a fresh tensor without gradients: written in place
            costs[..., COMM[0]] = fwd
            costs[..., COMM[1]] = self.backward_comm_ms(states, fwd)
        return costs.clamp_min(0.0)

    @staticmethod
    def _alpha_beta(c: CommModel | None, mb: torch.Tensor, present: torch.Tensor) -> torch.Tensor:
        if c is None:
            return torch.zeros_like(mb)
        return present.to(mb.dtype) * (c.alpha_ms + c.beta_ms_per_mb * mb)

    def comm_ms(self, states: torch.Tensor) -> torch.Tensor:
        """(..., S) -> (...) each device's forward exchange under the comm models, host-aware on a topology with
        hosts (``comm.device_comm_ms``): the all-to-all of its outputs plus the reduce-scatter of its row shards'
        partial sums; 0 if empty or N=1."""
        n = self.topology.num_devices
        if self.device_comm is None or n <= 1:
            return torch.zeros(states.shape[:-1], dtype=states.dtype)
        per_mb = self.topology.batch_size * OUTPUT_BYTES * (n - 1) / n / 1e6
        a2a, rs = states[..., self.base + 1], states[..., self.base + 2]
        out = self._alpha_beta(self.device_comm, a2a * per_mb, a2a > 0)
        return out + self._alpha_beta(self.collectives.get("reduce_scatter"), rs * per_mb, rs > 0)

    def backward_comm_ms(self, states: torch.Tensor, fwd: torch.Tensor | None = None) -> torch.Tensor:
        """(..., S) -> (...) the backward exchange: the forward's (gradients of the outputs; `fwd` when the caller
        has it) plus the all-reduce of the data-parallel replicas' gradients (ring: 2 (N-1)/N of rows x dim x 4
        bytes)."""
        fwd = self.comm_ms(states) if fwd is None else fwd
        n = self.topology.num_devices
        if self.device_comm is None or n <= 1:
            return fwd
        ar = states[..., self.base + 3]
        return fwd + self._alpha_beta(
            self.collectives.get("all_reduce"), ar * OUTPUT_BYTES * 2 * (n - 1) / n / 1e6, ar > 0
        )

    def device_costs(self, states: torch.Tensor) -> torch.Tensor:
        """(..., S) -> (..., 4): member mean + risk x member spread per component (comm exact when known)."""
        member = self.member_costs(states)
        mean = member.mean(0)
        if self.k < 2 or self.risk == 0:
            return mean
        return mean + self.risk * member_std(member)  # comm members agree when it is analytic

    def overall(self, states: torch.Tensor) -> torch.Tensor:
        """(..., D, S) -> (...): the largest device total (what a measured overall cost is)."""
        return self.device_costs(states).sum(-1).amax(dim=-1).clamp_min(0.0)

    # -- reporting ---------------------------------------------------------------------------------------
    def fits(self) -> tuple[CommModel, ...]:
        """The collective models this cost charges (the all-to-all, then those its units needed), each with its
        quality record or its fallback's reason: the all-to-all as measured; the others as charged (on a topology
        with hosts, planned without a backend, with the inter-host tier added)."""
        n = self.topology.num_devices
        if self.comm is None or n <= 1:
            return ()
        models = [self.comm]
        for collective in sorted(self.collectives):
            if self.source is not None:
                models.append(self.source.collective_model(self.topology, collective))  # type: ignore[arg-type]
            else:
                models.append(self.collectives[collective])
        return tuple(models)

    def spread(self, states: torch.Tensor) -> torch.Tensor:
        """(..., S) -> (...): standard deviation over members of the predicted device compute (ms)."""
        member = self.member_costs(states)
        compute = member[..., COMPUTE[0]] + member[..., COMPUTE[1]]
        return member_std(compute) if self.k > 1 else torch.zeros_like(compute[0])

    def mean_device_costs(self, states: torch.Tensor) -> torch.Tensor:
        return self.member_costs(states).mean(0)

    def placement_states(self, tables: Sequence[Table], placement: dict[str, int]) -> torch.Tensor:
        """(D, S) device states of a placement of `tables`."""
        return device_states(self.encode(tables), [placement[t.name] for t in tables], self.topology.num_devices)

    def predict(self, tables: Sequence[Table], placement: dict[str, int], pessimistic: bool = False) -> Costs:
        """Per-device costs and overall cost (ms) of a placement: the members' mean (or the pessimistic cost)."""
        with torch.no_grad():
            dev = self.placement_states(tables, placement)
            per = self.device_costs(dev) if pessimistic else self.mean_device_costs(dev)
        return Costs.from_devices([DeviceCost.from_list(r.tolist()) for r in per])


def member_std(x: torch.Tensor) -> torch.Tensor:
    """The population standard deviation over the members (dim 0), as ``x.std(0, unbiased=False)``. Without
    gradients (planning: once a step of every rollout, over every device) it is computed in two passes in float64
    and rounded to x's dtype, which gives torch's figures (float64 accumulation, rounded) at a fraction of its
    reduction's time on a few members."""
    if torch.is_grad_enabled() or x.dtype != torch.float32:
        return x.std(0, unbiased=False)
    d = x.double()
    return (d - d.mean(0)).square().mean(0).sqrt().to(x.dtype)


def closest_comm(models: Sequence[CommModel], num_devices: int) -> CommModel | None:
    """The comm model whose world size is closest to `num_devices` (ties: the larger), None if there is none."""
    if not models:
        return None
    return min(models, key=lambda c: (abs(c.world_size - num_devices), -c.world_size))


def comm_for(topology: Topology, measured: Sequence[CommModel]) -> CommModel | None:
    """The all-to-all model planning uses on `topology`: its world's declared figures, else the closest measured
    (by world size) of those that pass the quality bar (`comm_fit.distrust`), derived for a larger world; when every
    fit given fails the bar, this machine's own fit (`comm.comm_model_for`). World `measured` takes the fits of the
    job's own process group (`pool_backend`: the profiling on its pool) when there are any. It is one device's
    intra-host rate; `PlanningCost` adds the inter-host tier of a topology with hosts (``comm.host_comm_model``).
    Models of other collectives (``CommModel.collective``) are skipped."""
    if (world := declared(topology)) is not None:
        return world_model(world, topology.num_devices)
    fits = [c for c in measured if c.collective == "all_to_all"]
    if topology.world is not None and topology.world.name == MEASURED:
        pool = [c for c in fits if c.backend.split(":")[0] == pool_backend(topology)]
        fits = pool or fits  # none from the job's pool: the host's, and the plan's world note says so
    trusted = []
    for c in fits:
        if why := distrust(c):
            log.info("not planning on the all-to-all fit for %d devices: %s", c.world_size, why)
        else:
            trusted.append(c)
    if fits and not trusted:  # every fit given fails the bar: measure this machine's (once, cached)
        return comm_model_for(topology.num_devices)
    best = closest_comm(trusted, topology.num_devices)
    return derive(best, topology.num_devices) if best is not None else None


def comm_models_of(records: Sequence[object], known: Sequence[CommModel] = ()) -> tuple[CommModel, ...]:
    """The measured comm models in `records` (dreamshard.values.Measurement), one per world size (the latest
    wins), merged over `known`; sorted by world size."""
    by_ws = {c.world_size: c for c in known}
    for m in records:
        c = getattr(m, "comm_model", None)
        if c is not None and c.world_size > 1 and not c.backend.startswith(("profile:", "world:")):
            by_ws[c.world_size] = c
    return tuple(by_ws[k] for k in sorted(by_ws))


def cost_factory(
    ensemble: CostEnsemble, comm_models: Sequence[CommModel], risk: float
) -> Callable[[Topology], PlanningCost]:
    """topology -> the PlanningCost of `ensemble` on it (comm from `comm_models` or the topology's profile)."""
    return lambda topo: PlanningCost(ensemble, topo, comm_for(topo, comm_models), risk)


def predict_plan(model: LoadedModel, inventory: Inventory, plan: Plan, risk: float = 0.0) -> Costs:
    """A model's predicted costs of any plan of `inventory` (column shards included): the ensemble mean
    (risk 0) or the pessimistic planning cost, with the comm model planning would use."""
    units, placement = expand_plan(inventory, plan)
    topo = plan.topology
    cost = PlanningCost(model.cost_net, topo, comm_for(topo, model.card.comm_models), risk)
    return cost.predict(list(units.tables), placement, pessimistic=risk > 0)
