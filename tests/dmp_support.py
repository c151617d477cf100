"""Real TorchRec training steps: ``DistributedModelParallel`` on CPU ranks over gloo, one plan or several.

A test and benchmark harness, not part of the library: tests/test_torchrec_dmp.py imports it as ``dmp_support``
(pytest puts tests/ on sys.path) and bench/dmp_step.py puts tests/ on sys.path first. torchrec and fbgemm_gpu
(optional dependencies) are imported inside the functions that need them.

``run_dmp(inventory, plans, settings)`` starts ``world_size`` fresh interpreters (never re-importing the
caller's ``__main__``; each imports this file from tests/) that join one gloo process group through a TCP store
the caller serves on 127.0.0.1 (the OS picks a free port). Each rank, for every plan:

1. builds the inventory's ``EmbeddingBagCollection`` on the meta device (rows optionally scaled down:
   ``rows[name]``) and wraps it in DMP with the plan (``dreamshard.integrations.torchrec.sharding_plan``);
   fused tables get exact SGD through the sharder's ``fused_params``, dense ones a torch SGD;
2. draws its local batches: ``batch_size // world_size`` samples per rank (so the global batch is
   ``batch_size``, the batch every device's operator sees in the cost model), lookups synthesised per table to
   its pooling factor and reuse histogram (``IndexBank``, as the profiler does);
3. trains: forward, loss = mean of the squared pooled embeddings, backward (the fused update runs inside it),
   optimizer step.

Interleaving: round r runs ``steps`` timed steps of every plan, the plans in an order rotated by r, each block
after a barrier and ``warmup`` untimed steps (first round only). Every rank reports the shards it holds
(``state_dict()`` sharded tensors: column and row ranges), whether each changed during training, the losses
and its step times; `DmpResult` combines them (a step finishes when its slowest rank does).
"""

from __future__ import annotations

import datetime
import json
import logging
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import torch
import torch.distributed as dist
from pydantic import BaseModel, ConfigDict, Field

from dreamshard.errors import ConfigError, ProfilingError, first_line
from dreamshard.integrations import require_torchrec
from dreamshard.integrations.torchrec import build_ebc, sharding_plan, torchrec_table_name
from dreamshard.integrations.torchrec_file import TorchRecPlanFile
from dreamshard.profiling.base import IndexBank
from dreamshard.values import Inventory

#: This file's directory (tests/): the rank processes import the harness from there.
HERE = Path(__file__).resolve().parent

#: (row_start, row_end, col_start, col_end) of one shard a rank holds
ShardBox = tuple[int, int, int, int]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class DmpSettings(_Model):
    """How `run_dmp` trains (module docstring)."""

    world_size: Annotated[int, Field(ge=1, le=64)] = 2
    #: ranks per host as TorchRec's sharding sees it (LOCAL_WORLD_SIZE of the ranks); None: every rank on one host
    local_world_size: Annotated[int, Field(ge=1, le=64)] | None = None
    batch_size: Annotated[int, Field(ge=1)] = 2048
    warmup: Annotated[int, Field(ge=0)] = 1
    steps: Annotated[int, Field(ge=1)] = 1
    rounds: Annotated[int, Field(ge=1)] = 1
    learning_rate: Annotated[float, Field(gt=0)] = 0.01
    threads: Annotated[int, Field(ge=1)] = 1
    seed: int = 0
    timeout_s: Annotated[float, Field(gt=0)] = 600.0


class RankReport(_Model):
    """What one rank saw: shards held and whether training changed them, losses, step times (ms)."""

    rank: int
    shards: dict[str, dict[str, tuple[ShardBox, ...]]]  # plan -> table -> shards on this rank
    changed: dict[str, dict[str, bool]]  # plan -> table -> every local shard of it changed
    losses: dict[str, tuple[float, ...]]  # plan -> loss of every step
    step_ms: dict[str, tuple[tuple[float, ...], ...]]  # plan -> round -> timed steps
    kernels: dict[str, dict[str, str]]  # plan -> table -> compute kernel TorchRec used
    output_error: dict[str, float]  # plan -> largest error of the pooled outputs for known weights


class DmpResult(_Model):
    settings: DmpSettings
    ranks: tuple[RankReport, ...]

    def round_ms(self, plan: str) -> list[float]:
        """Per round: the median over its timed steps of the step time of the slowest rank."""
        per_rank = [r.step_ms[plan] for r in self.ranks]
        out = []
        for rnd in range(len(per_rank[0])):
            steps = zip(*(pr[rnd] for pr in per_rank), strict=True)
            out.append(statistics.median(max(s) for s in steps))
        return out

    def step_ms(self, plan: str) -> float:
        """Median over rounds of `round_ms`."""
        return statistics.median(self.round_ms(plan))

    def holders(self, plan: str) -> dict[str, dict[int, tuple[ShardBox, ...]]]:
        """table -> rank -> shards that rank holds (ranks holding none left out)."""
        out: dict[str, dict[int, tuple[ShardBox, ...]]] = {}
        for r in self.ranks:
            for table, boxes in r.shards[plan].items():
                if boxes:
                    out.setdefault(table, {})[r.rank] = boxes
        return out

    def all_changed(self, plan: str) -> bool:
        """Training changed every shard of every table on every rank holding it."""
        return all(all(r.changed[plan].values()) for r in self.ranks)

    def output_error(self, plan: str) -> float:
        return max(r.output_error[plan] for r in self.ranks)

    def losses_finite(self, plan: str) -> bool:
        return all(math.isfinite(x) for r in self.ranks for x in r.losses[plan])


def expected_holders(
    doc: TorchRecPlanFile, rows: Mapping[str, int] | None = None
) -> dict[str, dict[int, tuple[ShardBox, ...]]]:
    """table -> rank -> shards the plan puts there, in the form `DmpResult.holders` reports (for checks)."""
    out: dict[str, dict[int, list[ShardBox]]] = {}
    for table, spec in doc.tables.items():
        n = int((rows or {}).get(table, spec.num_embeddings or 0))
        if spec.sharding_type in ("table_wise", "data_parallel", "row_wise", "table_row_wise") and (
            spec.embedding_dim is None or not n
        ):
            raise ConfigError(f"table '{table}': the plan file has no shape; export it with the inventory")
        if spec.sharding_type in ("table_wise", "data_parallel"):  # whole: on its rank, or a replica on every rank
            for rank in spec.ranks:
                out.setdefault(table, {}).setdefault(rank, []).append((0, n, 0, int(spec.embedding_dim or 0)))
        elif spec.sharding_type in ("row_wise", "table_row_wise"):  # row blocks of the (scaled) rows
            k = len(spec.ranks)
            block = -(-n // k)
            for i, rank in enumerate(spec.ranks):
                box = (min(i * block, n), min((i + 1) * block, n), 0, int(spec.embedding_dim or 0))
                out.setdefault(table, {}).setdefault(rank, []).append(box)
        else:
            for sh in spec.column_shards():
                out.setdefault(table, {}).setdefault(sh.device, []).append((0, n, sh.start, sh.end))
    return {t: {r: tuple(sorted(b)) for r, b in by_rank.items()} for t, by_rank in out.items()}


def scaled_document(doc: TorchRecPlanFile, rows: Mapping[str, int]) -> TorchRecPlanFile:
    """`doc` for the scaled-down module: each table's `num_embeddings` replaced by `rows[name]` where given."""
    tables = {
        name: spec.model_copy(update={"num_embeddings": int(rows[name])}) if name in rows else spec
        for name, spec in doc.tables.items()
    }
    return doc.model_copy(update={"tables": tables})


def run_dmp(
    inventory: Inventory,
    plans: Mapping[str, TorchRecPlanFile],
    settings: DmpSettings | None = None,
    rows: Mapping[str, int] | None = None,
) -> DmpResult:
    """Train every plan with DMP on `settings.world_size` CPU ranks (module docstring); one-line ProfilingError
    if a rank fails or the run exceeds `settings.timeout_s`."""
    require_torchrec()
    s = settings or DmpSettings()
    if not plans:
        raise ConfigError("run_dmp needs at least one plan")
    for name, doc in plans.items():
        if doc.world_size != s.world_size:
            raise ConfigError(f"plan '{name}' is for {doc.world_size} ranks; the run has world_size {s.world_size}")
    if s.batch_size < s.world_size:
        raise ConfigError(f"batch_size {s.batch_size} is smaller than world_size {s.world_size}")
    store = dist.TCPStore(
        "127.0.0.1",
        0,
        s.world_size + 1,
        is_master=True,
        wait_for_workers=False,
        timeout=datetime.timedelta(seconds=s.timeout_s),
    )
    with tempfile.TemporaryDirectory(prefix="dreamshard-dmp-") as tmp:
        job = Path(tmp) / "job.json"
        job.write_text(
            json.dumps(
                {
                    "inventory": inventory.model_dump(mode="json"),
                    "plans": {k: scaled_document(v, rows or {}).model_dump(mode="json") for k, v in plans.items()},
                    "settings": s.model_dump(mode="json"),
                    "rows": dict(rows or {}),
                    "port": store.port,
                }
            )
        )
        _run_ranks(job, Path(tmp), s)
        reports = [
            RankReport.model_validate_json((Path(tmp) / f"rank{r}.json").read_text()) for r in range(s.world_size)
        ]
    return DmpResult(settings=s, ranks=tuple(reports))


def _run_ranks(job: Path, tmp: Path, s: DmpSettings) -> None:
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]); from dmp_support import _worker_main; _worker_main(sys.argv[2:])"
    )
    env = {
        **os.environ,
        "OMP_NUM_THREADS": str(s.threads),
        "PYTHONWARNINGS": "ignore",
        "LOCAL_WORLD_SIZE": str(s.local_world_size or s.world_size),
    }
    logs = [open(tmp / f"rank{r}.log", "wb") for r in range(s.world_size)]  # noqa: SIM115 - closed below
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code, str(HERE), str(job), str(r)], stdout=logs[r], stderr=subprocess.STDOUT, env=env
        )
        for r in range(s.world_size)
    ]
    deadline = time.monotonic() + s.timeout_s
    try:
        for p in procs:
            p.wait(timeout=max(1.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        raise ProfilingError(
            f"DMP run exceeded {s.timeout_s:g} s; lower --rounds/--steps or raise the timeout"
        ) from None
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        for f in logs:
            f.close()
    failed = [r for r, p in enumerate(procs) if p.returncode != 0]
    if failed:
        raise ProfilingError(f"DMP rank {failed[0]} failed: {_last_error(tmp / f'rank{failed[0]}.log')}")


def _last_error(log: Path) -> str:
    lines = [ln.strip() for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
    errors = [ln for ln in lines if "Error" in ln.split(":", 1)[0] or ln.startswith("error")]
    return first_line(errors[-1] if errors else (lines[-1] if lines else "no output"))


# ------------------------------------------------------------------------------------------ rank side


def _worker_main(argv: Sequence[str]) -> None:
    """Entry of one rank started as ``python -c`` (see `run_dmp`): argv = job file, rank."""
    job_path, rank = Path(argv[0]), int(argv[1])
    job = json.loads(job_path.read_text())
    report = _rank(rank, job)
    (job_path.parent / f"rank{rank}.json").write_text(report.model_dump_json())


def _rank(rank: int, job: dict[str, Any]) -> RankReport:
    s = DmpSettings.model_validate(job["settings"])
    torch.set_num_threads(s.threads)
    logging.getLogger("torchrec").setLevel(logging.ERROR)
    if os.path.exists("/sys/class/net/lo"):
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    timeout = datetime.timedelta(seconds=s.timeout_s)
    store = dist.TCPStore("127.0.0.1", int(job["port"]), s.world_size + 1, is_master=False, timeout=timeout)
    dist.init_process_group("gloo", store=store, rank=rank, world_size=s.world_size, timeout=timeout)
    try:
        return _train(rank, job, s)
    finally:
        dist.destroy_process_group()


class _Contender:
    """One plan's DMP model on this rank, its optimizer and its batches."""

    def __init__(
        self, name: str, doc: TorchRecPlanFile, inventory: Inventory, rows: Mapping[str, int], s: DmpSettings, rank: int
    ) -> None:
        from fbgemm_gpu.split_embedding_configs import EmbOptimType  # optional dependency: fbgemm_gpu
        from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder  # optional dependency: torchrec
        from torchrec.distributed.model_parallel import DistributedModelParallel  # optional dependency: torchrec
        from torchrec.optim.keyed import CombinedOptimizer, KeyedOptimizerWrapper  # optional dependency: torchrec
        from torchrec.optim.optimizers import in_backward_optimizer_filter  # optional dependency: torchrec

        self.name = name
        self.back = {torchrec_table_name(t): t for t in inventory.table_names}
        sharder = EmbeddingBagCollectionSharder(
            fused_params={"optimizer": EmbOptimType.EXACT_SGD, "learning_rate": s.learning_rate}
        )
        ebc = build_ebc(inventory, "meta", rows)
        plan = sharding_plan(doc, ebc, s.world_size, sharders=[sharder])
        self.kernels = {self.back[t]: ps.compute_kernel for t, ps in plan.plan[""].items()}  # type: ignore[union-attr]
        self.model = DistributedModelParallel(ebc, device=torch.device("cpu"), plan=plan, sharders=[sharder])
        dense = dict(in_backward_optimizer_filter(self.model.named_parameters()))
        dense = {k: v for k, v in dense.items() if v.requires_grad}
        optimizers: list[Any] = [self.model.fused_optimizer]
        if dense and "dense" in self.kernels.values():
            optimizers.append(KeyedOptimizerWrapper(dense, lambda ps: torch.optim.SGD(ps, lr=s.learning_rate)))
        self.optimizer = CombinedOptimizer(optimizers)
        self.batches = _batches(inventory, rows, s, rank)
        self.losses: list[float] = []
        self.step_no = 0
        self.output_error = self._check_outputs()
        self.before = self._local_shards()

    def _blocks(self) -> list[tuple[str, int, int, Any]]:
        """(TorchRec table, row offset, column offset, local tensor) of every weight block this rank holds: the
        local shards of sharded weights, and the whole (replicated) weight of a data-parallel table."""
        out: list[tuple[str, int, int, Any]] = []
        for key, value in self.model.state_dict().items():
            if not key.endswith(".weight"):
                continue
            name = key.rsplit(".", 2)[-2]
            if hasattr(value, "local_shards"):
                for sh in value.local_shards():
                    (r0, c0) = sh.metadata.shard_offsets
                    out.append((name, int(r0), int(c0), sh.tensor))
            elif isinstance(value, torch.Tensor):
                out.append((name, 0, 0, value))
        return out

    def _check_outputs(self) -> float:
        """Give every weight a known value (`_known` of its global row and column) through this rank's shards,
        run one forward and return the largest error of the pooled outputs against the sums computed from the
        batch: shards in the wrong place or columns in the wrong order show up here."""
        with torch.no_grad():
            for _, r0, c0, tensor in self._blocks():
                nr, nc = tensor.shape
                tensor.copy_(_known(torch.arange(r0, r0 + nr).unsqueeze(1), torch.arange(c0, c0 + nc)))
            kjt = self.batches[0]
            out = self.model(kjt)
            pooled = out.wait() if hasattr(out, "wait") else out
            error = 0.0
            for key, dim in zip(pooled.keys(), pooled.length_per_key(), strict=True):
                jt = kjt[key]
                lengths = jt.lengths().long()
                rows = _known(jt.values().long().unsqueeze(1), torch.arange(dim))
                expected = torch.zeros(lengths.numel(), dim, dtype=torch.float64)
                expected.index_add_(0, torch.repeat_interleave(torch.arange(lengths.numel()), lengths), rows)
                error = max(error, float((pooled[key].double() - expected).abs().max()))
        return error

    def _local_shards(self) -> dict[str, list[tuple[ShardBox, tuple[float, float]]]]:
        """table -> [(shard box, checksum of its weights)] for the tables this rank holds shards of."""
        out: dict[str, list[tuple[ShardBox, tuple[float, float]]]] = {}
        for name, r0, c0, tensor in self._blocks():
            nr, nc = tensor.shape
            w = tensor.detach().double()
            box = (r0, r0 + int(nr), c0, c0 + int(nc))
            out.setdefault(self.back.get(name, name), []).append((box, (float(w.sum()), float(w.abs().sum()))))
        return out

    def step(self) -> None:
        kjt = self.batches[self.step_no % len(self.batches)]
        self.step_no += 1
        self.optimizer.zero_grad()
        out = self.model(kjt)
        values = out.wait().values() if hasattr(out, "wait") else out.values()
        loss = values.float().pow(2).mean()
        loss.backward()
        self.optimizer.step()
        self.losses.append(float(loss.detach()))

    def shards_and_changes(self) -> tuple[dict[str, tuple[ShardBox, ...]], dict[str, bool]]:
        """The shards this rank holds per table, and whether training changed every one of them."""
        after = {t: dict(v) for t, v in self._local_shards().items()}
        shards = {t: tuple(sorted(b for b, _ in v)) for t, v in self.before.items()}
        changed = {t: all(after[t][b] != sums for b, sums in v) for t, v in self.before.items()}
        return shards, changed


def _known(rows: Any, cols: Any) -> Any:
    """The known weight of (row, column), in float64: distinct across nearby rows and columns."""
    return ((rows * 31 + cols * 7) % 101).double() / 101.0


def _batches(inventory: Inventory, rows: Mapping[str, int], s: DmpSettings, rank: int) -> list[Any]:
    """This rank's local batches as KeyedJaggedTensors (keys = TorchRec table names, key-major)."""
    from torchrec.sparse.jagged_tensor import KeyedJaggedTensor  # optional dependency: torchrec

    local = s.batch_size // s.world_size
    bank = IndexBank(seed=s.seed * 1009 + rank)
    per_table = [bank.batches(t, int(rows.get(t.name, t.num_embeddings)), local) for t in inventory.tables]
    keys = [torchrec_table_name(t.name) for t in inventory.tables]
    out = []
    for b in range(len(per_table[0])):
        values = np.concatenate([batches[b][0] for batches in per_table])
        lengths = np.concatenate([np.diff(batches[b][1]) for batches in per_table])
        out.append(
            KeyedJaggedTensor(
                keys=keys,
                values=torch.from_numpy(values.astype(np.int64)),
                lengths=torch.from_numpy(lengths.astype(np.int32)),
            )
        )
    return out


def _train(rank: int, job: dict[str, Any], s: DmpSettings) -> RankReport:
    inventory = Inventory.model_validate(job["inventory"])
    rows = {k: int(v) for k, v in job["rows"].items()}
    contenders = [
        _Contender(name, TorchRecPlanFile.model_validate(doc), inventory, rows, s, rank)
        for name, doc in job["plans"].items()
    ]
    for c in contenders:
        for _ in range(s.warmup):
            c.step()
    times: dict[str, list[tuple[float, ...]]] = {c.name: [] for c in contenders}
    for rnd in range(s.rounds):
        k = rnd % len(contenders)
        for c in contenders[k:] + contenders[:k]:
            dist.barrier()
            block = []
            for _ in range(s.steps):
                t0 = time.perf_counter()
                c.step()
                block.append((time.perf_counter() - t0) * 1e3)
            times[c.name].append(tuple(block))
    shards: dict[str, dict[str, tuple[ShardBox, ...]]] = {}
    changed: dict[str, dict[str, bool]] = {}
    for c in contenders:
        shards[c.name], changed[c.name] = c.shards_and_changes()
    return RankReport(
        rank=rank,
        shards=shards,
        changed=changed,
        losses={c.name: tuple(c.losses) for c in contenders},
        step_ms={k: tuple(v) for k, v in times.items()},
        kernels={c.name: c.kernels for c in contenders},
        output_error={c.name: c.output_error for c in contenders},
    )
