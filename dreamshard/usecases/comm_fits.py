"""`dreamshard profile comm`: the collective fits this machine has cached, their points and quality, whether
planning may reuse each, and what each gives for a world of N devices (docs/architecture/measuring.md, "Communication
costs"). `refit` measures them again first."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict

from dreamshard.profiling import comm
from dreamshard.profiling.comm_fit import derive
from dreamshard.usecases.base import Request, Result
from dreamshard.values import Collective, CommModel

COLLECTIVES: tuple[Collective, ...] = ("all_to_all", "reduce_scatter", "all_reduce")


class CommFitsRequest(Request):
    """Which worlds to show (and, with `refit`, to measure for); the process group's backend."""

    devices: tuple[int, ...] = ()
    refit: bool = False
    backend: str = "gloo"


class CommFitRow(BaseModel):
    """One cached fit: its file, the model (None: unreadable), why planning will refit it ("" if it reuses it),
    and what it gives for each asked world."""

    model_config = ConfigDict(frozen=True)

    path: Path
    model: CommModel | None
    refit_reason: str
    derived: tuple[CommModel, ...] = ()


class CommFitsResult(Result):
    rows: list[CommFitRow]
    cache_dir: Path


def run(request: CommFitsRequest) -> CommFitsResult:
    """Refit when asked (every collective, for each asked world, at most the cores' ranks), then list the cache."""
    if request.refit:  # once per rank count: the worlds above the cores share the fit at the cores' ranks
        ranks = {comm.benchmark_ranks(n, request.backend)[0]: n for n in request.devices or (2,)}
        for n in ranks.values():
            for collective in COLLECTIVES:
                comm.comm_model_for(n, request.backend, refit=True, collective=collective)
    rows = []
    for path, model, why in comm.cached_fits(request.backend):
        derived: tuple[CommModel, ...] = ()
        if model is not None and model.measured_ranks is not None:  # an older fit is shown as it is
            derived = tuple(derive(model, n) for n in request.devices if n > model.world_size)
        rows.append(CommFitRow(path=path, model=model, refit_reason=why, derived=derived))
    return CommFitsResult(rows=rows, cache_dir=comm.cache_dir())
