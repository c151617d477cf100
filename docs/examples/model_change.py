"""A model change a training job survives: the walk-through of docs/torchrec.md, "When the model changes".

A ranking model (an EmbeddingBagCollection whose `user` table serves two features, and an MLP over the pooled
features) in two versions. v2 drops the `device` table, adds `merchant` (dim 16, so the MLP's first layer grows)
and renames `category` to `item_category`. Its 2-rank training job, run by torchrun::

    python docs/examples/model_change.py batches WORKDIR             # batches_v1.pt, batches_v2.pt
    torchrun --nproc-per-node 2 docs/examples/model_change.py train --version v1 --store store \\
        --steps 20 --save ckpt/v1                                     # trains, saves a DCP checkpoint
    torchrun --nproc-per-node 2 docs/examples/model_change.py train --version v2 --store store \\
        --resume ckpt/v1-for-v2 --steps 5                             # a checkpoint `torchrec migrate` wrote
    torchrun --nproc-per-node 2 docs/examples/model_change.py train --version v2 --store store \\
        --load-old ckpt/v1 --rename category=item_category --init mlp.0 --steps 5   # or moved in the job

The plan comes from the store (`load_current_sharding_plan`, by the model's tables); the tables train with fused
EXACT_ROWWISE_ADAGRAD, the MLP with torch's Adagrad (the job's own dense optimizer). CPU ranks over gloo.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist

#: (table, rows, dim, features) of each version.
TABLES = {
    "v1": [
        ("user", 4000, 16, ["user_id", "friend_id"]),
        ("item", 6000, 16, ["item_id"]),
        ("category", 300, 8, ["category"]),
        ("device", 40, 8, ["device"]),
    ],
    "v2": [
        ("user", 4000, 16, ["user_id", "friend_id"]),
        ("item", 6000, 16, ["item_id"]),
        ("item_category", 300, 8, ["category"]),
        ("merchant", 2000, 16, ["merchant"]),
    ],
}
POOLING = {"item_id": 4, "friend_id": 3}  # mean ids per sample (the others 1)
BATCH = 128  # samples per batch, per rank


class Ranker(torch.nn.Module):
    """Pooled features (in the model's order) -> MLP -> a score per sample."""

    def __init__(self, version: str) -> None:
        from torchrec.modules.embedding_configs import EmbeddingBagConfig
        from torchrec.modules.embedding_modules import EmbeddingBagCollection

        super().__init__()
        tables = TABLES[version]
        configs = [
            EmbeddingBagConfig(name=n, num_embeddings=r, embedding_dim=d, feature_names=f) for n, r, d, f in tables
        ]
        self.features = [f for _, _, _, fs in tables for f in fs]
        self.ebc = EmbeddingBagCollection(tables=configs, device=torch.device("meta"))
        width = sum(d * len(fs) for _, _, d, fs in tables)
        torch.manual_seed(0)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(width, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))

    def forward(self, kjt: object) -> torch.Tensor:
        pooled = self.ebc(kjt)
        return self.mlp(torch.cat([pooled[f] for f in self.features], dim=1)).squeeze(1)


def build_v1() -> torch.nn.Module:
    return Ranker("v1")


def build_v2() -> torch.nn.Module:
    return Ranker("v2")


def batches(version: str, n: int = 8, seed: int = 0) -> list[dict[str, torch.Tensor | list[str]]]:
    """`n` batches of BATCH samples of the version's features (dicts {keys, values, lengths}: torch.save them and
    `inventory from-torchrec` reads them with weights_only=True)."""
    g = torch.Generator().manual_seed(seed)
    keys = [(f, rows) for _, rows, _, fs in TABLES[version] for f in fs]
    out: list[dict[str, torch.Tensor | list[str]]] = []
    for _ in range(n):
        lengths = [torch.poisson(torch.full((BATCH,), float(POOLING.get(f, 1))), generator=g).long() for f, _ in keys]
        values = [
            (torch.rand(int(ln.sum()), generator=g) ** 3 * r).long() for ln, (_, r) in zip(lengths, keys, strict=True)
        ]
        out.append({"keys": [f for f, _ in keys], "values": torch.cat(values), "lengths": torch.cat(lengths)})
    return out


def _job(args: argparse.Namespace) -> None:
    """The training job on this rank (torchrun sets RANK, WORLD_SIZE, MASTER_ADDR/PORT)."""
    from fbgemm_gpu.split_embedding_configs import EmbOptimType
    from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder
    from torchrec.distributed.model_parallel import DistributedModelParallel
    from torchrec.optim.keyed import CombinedOptimizer, KeyedOptimizerWrapper
    from torchrec.optim.optimizers import in_backward_optimizer_filter
    from torchrec.sparse.jagged_tensor import KeyedJaggedTensor

    from dreamshard.integrations.torchrec_current import load_current_sharding_plan
    from dreamshard.integrations.torchrec_migrate import load_checkpoint

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    say = print if rank == 0 else (lambda *a, **k: None)
    fused = {"optimizer": EmbOptimType.EXACT_ROWWISE_ADAGRAD, "learning_rate": 0.05}
    sharders = [EmbeddingBagCollectionSharder(fused_params=fused)]
    model = Ranker(args.version)
    current = load_current_sharding_plan(args.store, model, world_size=world, sharders=sharders)
    say(f"plan: {current.reason}", flush=True)
    model = DistributedModelParallel(model, device=torch.device("cpu"), plan=current.require(), sharders=sharders)
    dense = dict(in_backward_optimizer_filter(model.named_parameters()))
    optimizer = CombinedOptimizer(
        [model.fused_optimizer, KeyedOptimizerWrapper(dense, lambda ps: torch.optim.Adagrad(ps, lr=0.05))]
    )
    optimizer.init_state()  # the state a checkpoint loads into
    t0 = time.perf_counter()
    if args.resume:  # a checkpoint `dreamshard torchrec migrate` wrote for this plan and model: plain DCP
        import torch.distributed.checkpoint as dcp

        state = {"model": model.state_dict(), "optim": optimizer.state_dict()}
        dcp.load(state, checkpoint_id=args.resume)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optim"])
        say(f"resumed from {args.resume} in {time.perf_counter() - t0:.2f} s", flush=True)
    elif args.load_old:  # the old checkpoint itself, moved in the job
        renames = dict(pair.split("=", 1) for pair in args.rename)
        report = load_checkpoint(args.load_old, model, optimizer, renames=renames, init=args.init)
        say(
            f"loaded {args.load_old}: tables carried {', '.join(report.carried_tables)}; initialised "
            f"{', '.join(report.initialised_tables) or 'none'}; dropped {', '.join(report.dropped_tables) or 'none'}; "
            f"renamed {', '.join(f'{a} -> {b}' for a, b in report.renamed_tables) or 'none'}; dense initialised "
            f"{', '.join(report.dense_initialised) or 'none'} ({report.seconds:.2f} s)",
            flush=True,
        )
    data = batches(args.version, seed=rank + 1)
    for step in range(args.steps):
        b = data[step % len(data)]
        kjt = KeyedJaggedTensor.from_lengths_sync(keys=b["keys"], values=b["values"], lengths=b["lengths"])
        optimizer.zero_grad()
        loss = model(kjt).pow(2).mean()
        loss.backward()
        optimizer.step()
        if step % 5 == 0 or step == args.steps - 1:
            say(f"step {step}: loss {float(loss.detach()):.6f}", flush=True)
    if args.save:
        import torch.distributed.checkpoint as dcp

        dcp.save({"model": model.state_dict(), "optim": optimizer.state_dict()}, checkpoint_id=args.save)
        say(f"saved {args.save}", flush=True)
    dist.destroy_process_group()


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("batches", help="write batches_v1.pt and batches_v2.pt into WORKDIR")
    b.add_argument("workdir", type=Path)
    t = sub.add_parser("train", help="one rank of the training job (run it with torchrun)")
    t.add_argument("--version", choices=sorted(TABLES), required=True)
    t.add_argument("--store", required=True)
    t.add_argument("--steps", type=int, default=10)
    t.add_argument("--save")
    t.add_argument("--resume")
    t.add_argument("--load-old")
    t.add_argument("--rename", action="append", default=[])
    t.add_argument("--init", action="append", default=[])
    args = parser.parse_args(argv)
    if args.command == "batches":
        args.workdir.mkdir(parents=True, exist_ok=True)
        for version in TABLES:
            torch.save(batches(version), args.workdir / f"batches_{version}.pt")
    else:
        _job(args)


if __name__ == "__main__":
    main(sys.argv[1:])
