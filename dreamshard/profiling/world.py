"""What a plan was costed in, and what a comparison charged: the job's world as charged (dreamshard.values.world),
the one-line note when that is not the job's own world, and the proxy sentence when a comparison charges another
world than the plan was planned for (docs/architecture/measuring.md, "The job's world")."""

from __future__ import annotations

from dreamshard.values import ChargedWorld, CommModel, Topology
from dreamshard.values.world import HOST, MEASURED

#: How to declare the job's world, in the notes.
DECLARE = (
    "declare the job's world (params world.name or --world: fast, nvlink-ib, or your own alpha_ms and GB/s) or "
    "measure it on the job's pool (world.name: measured, profiled on the gpu pool)"
)


def pool_backend(topology: Topology) -> str:
    """The process group a job of `topology` runs its collectives on: nccl on cuda devices, gloo on cpu."""
    return "nccl" if topology.device_type == "cuda" else "gloo"


def _family(backend: str) -> str:
    """A comm model's process group ("gloo", "nccl"), or its label ("world", "simulated", "default")."""
    return backend.split(":")[0]


def _rate(comm: CommModel) -> str:
    gbps = f"{1.0 / comm.beta_ms_per_mb:.3g} GB/s" if comm.beta_ms_per_mb > 0 else "no bytes charged"
    return f"{comm.backend} {comm.alpha_ms:.3f} ms + {gbps}"


def world_note(topology: Topology, comm: CommModel | None) -> str:
    """One line when the all-to-all `comm` (None: the cost model's learned exchange heads) is not the job's own
    world: a cuda job with no declared world planned on anything but an NCCL fit, or world `measured` without a fit
    from the job's pool; "" otherwise (a declared world is charged as declared; `host` is what it says)."""
    w = topology.world
    if topology.num_devices <= 1 or (w is not None and not w.measured) or (w is not None and w.name == HOST):
        return ""
    pool = pool_backend(topology)
    if comm is not None and _family(comm.backend) == pool:
        return ""
    on = f"this host's {_rate(comm)} fit" if comm is not None else "the exchange costs the model learned on its hosts"
    if w is None and topology.device_type == "cuda":
        return f"a cuda job with no declared world is costed on {on}, not its interconnect: {DECLARE}"
    if w is not None and w.name == MEASURED:
        return (
            f"world 'measured' has no {pool} fit from the job's pool: costed on {on}; profile on the job's pool "
            f"(profile.backend {topology.device_type}, a worker with >= 2 devices) or declare the world"
        )
    return ""


def charged_world(topology: Topology, comm: CommModel | None) -> ChargedWorld:
    """The world `comm` (one device's all-to-all as charged on `topology`; None: nothing charged, or the cost
    model's exchange heads) stands for, with `world_note`."""
    w = topology.world
    hosts = topology.hosts > 1
    if comm is not None and comm.world_size > 1:
        alpha: float | None = comm.alpha_ms
        intra = 1.0 / comm.beta_ms_per_mb if comm.beta_ms_per_mb > 0 else None
        backend = comm.backend
        source = w.source if w is not None and not w.measured else comm.describe()
    else:
        alpha = w.alpha_ms if w is not None else None
        intra = w.intra_host_gbps if w is not None else None
        backend = ""
        source = w.source if w is not None else ""
    return ChargedWorld(
        name=w.name if w is not None else HOST,
        declared=w is not None,
        alpha_ms=alpha,
        intra_host_gbps=intra,
        inter_host_gbps=topology.inter_host_gbps if hosts else (w.inter_host_gbps if w is not None else None),
        backend=backend,
        source=source,
        note=world_note(topology, comm),
    )


def world_proxy(topology: Topology, charged: ChargedWorld | None) -> str:
    """ "" when a comparison that charged `charged` charged the world a plan of `topology` was planned for; else the
    one-line PROXY sentence. A declared world must be charged with its own figures; world `measured` with a fit of
    the job's own process group (NCCL for cuda); a cuda job with no declared world is judged on the host's fit, a
    proxy."""
    if topology.num_devices <= 1:
        return ""
    w = topology.world
    said = f"world '{w.name}'" if w is not None else "no declared world"
    if charged is None:
        return f"PROXY world: the comparison does not record the world it charged; the plan is for {said}"
    why = ""
    if w is not None and not w.measured:
        expected = charged_world(topology, None)
        same = charged.name == w.name and charged.backend in ("", f"world:{w.name}")
        if not (same and charged.same_figures(expected)):
            why = f"the plan is for world {w.describe()}"
    elif charged.note:
        why = charged.note
    if not why:
        return ""
    return f"PROXY world: charged {charged.describe(with_source=False)}; {why}"
