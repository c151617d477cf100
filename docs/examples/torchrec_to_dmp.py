"""From a TorchRec model to a plan in DMP: the README's example, run end to end by tests/test_torchrec_model.py.

    python docs/examples/torchrec_to_dmp.py WORKDIR [--sharder S] [--backend B]

(the test runs it on the simulator backend, which the gate accepts only when told:
``--allow-simulated --min-improvement 0``; the README's commands measure on the CPU.)

1. the model (`build`: a 10-table EmbeddingBagCollection, `item_id` shared by two features, and a 2-table
   EmbeddingCollection of sequence features, `history` shared by two), 8 batches of its KeyedJaggedTensors saved
   with torch.save (dict form, so they load with weights_only=True) and the team's constraints (constraints.yaml);
2. the platform side, three CLI commands (what the README shows); the inventory records the job (2 ranks of 1 GB)::

       dreamshard inventory from-torchrec --model docs/examples/torchrec_to_dmp.py:build \\
           --batches batches.pt --batch-size 256 --constraints constraints.yaml --world-size 2 --memory-gb 1 -o inv.yaml
       dreamshard plan -i inv.yaml -o plan.json
       dreamshard plans publish plan.json -i inv.yaml --measure --store store

3. the training job (`train`, on 2 CPU ranks over gloo): `load_current_sharding_plan` finds the plan by the
   model's tables and hands it to DistributedModelParallel; one training step.
"""

from __future__ import annotations

import datetime
import json
import os
import subprocess
import sys
from pathlib import Path

import torch
import torch.distributed as dist

TABLES = [  # (table, rows, dim, features)
    ("item_id", 5000, 32, ["clicked_item", "viewed_item"]), ("user_id", 4000, 32, ["user_id"]),
    ("category", 200, 16, ["category"]), ("brand", 800, 16, ["brand"]), ("city", 300, 8, ["city"]),
    ("device", 20, 8, ["device"]), ("query", 3000, 64, ["query"]), ("ad_id", 2500, 32, ["ad_id"]),
    ("hour", 24, 4, ["hour"]), ("lang", 50, 8, ["lang"]),
]
SEQUENCES = [("history", 5000, 16, ["clicked_seq", "viewed_seq"]), ("recent_query", 3000, 16, ["recent_query"])]
POOLING = {"clicked_item": 3, "viewed_item": 10, "query": 6, "brand": 2, "clicked_seq": 8, "viewed_seq": 20}
BATCH = 256  # POOLING: mean lookups per sample (others 1); a sequence feature's ids per sample
CONSTRAINTS = {"item_id": {"sharding_types": ["table_wise", "column_wise"]}, "history": {"compute_kernels": ["fused"]}}


class Model(torch.nn.Module):
    """Bags and sequences: an EBC and an EC on the meta device (DMP allocates only each rank's shards)."""

    def __init__(self) -> None:
        from torchrec.modules.embedding_configs import EmbeddingBagConfig, EmbeddingConfig
        from torchrec.modules.embedding_modules import EmbeddingBagCollection, EmbeddingCollection

        super().__init__()
        meta = torch.device("meta")
        self.ebc = EmbeddingBagCollection(tables=[EmbeddingBagConfig(name=n, num_embeddings=r, embedding_dim=d,
                                                                     feature_names=f) for n, r, d, f in TABLES], device=meta)
        self.ec = EmbeddingCollection(tables=[EmbeddingConfig(name=n, num_embeddings=r, embedding_dim=d, feature_names=f)
                                              for n, r, d, f in SEQUENCES], device=meta)

    def forward(self, kjt: object) -> torch.Tensor:
        """Loss of one batch: the squared pooled bags and sequence rows (each module gets its own features)."""
        from torchrec.sparse.jagged_tensor import KeyedJaggedTensor

        feats = kjt.to_dict()  # type: ignore[attr-defined]
        bags, seqs = ([f for _, _, _, fs in tables for f in fs] for tables in (TABLES, SEQUENCES))
        pooled = self.ebc(KeyedJaggedTensor.from_jt_dict({f: feats[f] for f in bags}))
        pooled = pooled.wait() if hasattr(pooled, "wait") else pooled
        rows = self.ec(KeyedJaggedTensor.from_jt_dict({f: feats[f] for f in seqs}))
        rows = rows.wait() if hasattr(rows, "wait") else rows
        return (pooled.values() ** 2).mean() + torch.cat([jt.values() for jt in rows.values()]).pow(2).mean()


def build() -> torch.nn.Module:
    """The model the CLI's --model names."""
    return Model()


def batches(n: int = 8, seed: int = 0) -> list[dict[str, object]]:
    """`n` batches of BATCH samples: Poisson bag lengths, Zipf-like rows (dicts {keys, values, lengths})."""
    g = torch.Generator().manual_seed(seed)
    keys = [(f, rows) for _, rows, _, feats in TABLES + SEQUENCES for f in feats]
    out = []
    for _ in range(n):
        lengths = [torch.poisson(torch.full((BATCH,), float(POOLING.get(f, 1))), generator=g).long() for f, _ in keys]
        values = [(torch.rand(int(ln.sum()), generator=g) ** 3 * rows).long() for ln, (_, rows) in zip(lengths, keys)]
        out.append({"keys": [f for f, _ in keys], "values": torch.cat(values), "lengths": torch.cat(lengths)})
    return out


def train(rank: int, world_size: int, store: str, port: int) -> None:
    """The training job: DMP boilerplate around the 3 lines that load the current plan."""
    from fbgemm_gpu.split_embedding_configs import EmbOptimType
    from torchrec.distributed.embedding import EmbeddingCollectionSharder
    from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder
    from torchrec.distributed.model_parallel import DistributedModelParallel
    from torchrec.sparse.jagged_tensor import KeyedJaggedTensor

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world_size, timeout=datetime.timedelta(seconds=120))
    fused = {"optimizer": EmbOptimType.EXACT_SGD, "learning_rate": 0.01}
    sharders = [EmbeddingBagCollectionSharder(fused_params=fused), EmbeddingCollectionSharder(fused_params=fused)]
    model = build()
    # --- the user code (README) ---
    from dreamshard.integrations.torchrec_current import load_current_sharding_plan
    current = load_current_sharding_plan(store, model, world_size=world_size, sharders=sharders)
    print(f"rank {rank}: {current.reason}", flush=True)
    model = DistributedModelParallel(model, device=torch.device("cpu"), plan=current.require(), sharders=sharders)
    # --- one step on this rank's share of a batch ---
    b = batches(1, seed=rank + 1)[0]
    kjt = KeyedJaggedTensor.from_lengths_sync(keys=b["keys"], values=b["values"], lengths=b["lengths"])
    loss = model(kjt)
    loss.backward()
    print(f"rank {rank}: plan {current.plan_id}, loss {float(loss.detach()):.6f}", flush=True)
    dist.destroy_process_group()


def main(workdir: Path, sharder: str = "dreamshard", backend: str = "cpu") -> None:
    from dreamshard.cli.app import main as cli
    from dreamshard.profiling.comm import _free_port

    workdir.mkdir(parents=True, exist_ok=True)
    os.chdir(workdir)
    torch.save(batches(), "batches.pt")
    Path("constraints.yaml").write_text(json.dumps(CONSTRAINTS))  # JSON is YAML
    here = Path(__file__).resolve()
    for argv in (["inventory", "from-torchrec", "--model", f"{here}:build", "--batches", "batches.pt", "--batch-size", str(BATCH),
                  "--constraints", "constraints.yaml", "--world-size", "2", "--memory-gb", "1", "-o", "inv.yaml"],
                 ["plan", "-i", "inv.yaml", "-s", sharder, "-o", "plan.json"],
                 ["plans", "publish", "plan.json", "-i", "inv.yaml", "--measure", "--backend", backend, "--rounds", "1",
                  "--store", "store", *(["--allow-simulated", "--min-improvement", "0"] if backend == "simulator" else [])]):
        try:
            cli(argv)
        except SystemExit as e:  # the CLI exits with its status
            if e.code not in (0, None):
                raise SystemExit(f"dreamshard {' '.join(argv)} exited {e.code}") from None
    port = _free_port()
    ranks = [subprocess.Popen([sys.executable, str(here), "--rank", str(r), "2", "store", str(port)]) for r in range(2)]
    if any(p.wait(timeout=300) != 0 for p in ranks):
        raise SystemExit("a training rank failed")


if __name__ == "__main__":
    if sys.argv[1] == "--rank":
        torch.set_num_threads(1)
        train(int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], int(sys.argv[5]))
    else:
        opts = dict(zip(sys.argv[2::2], sys.argv[3::2]))
        main(Path(sys.argv[1]), opts.get("--sharder", "dreamshard"), opts.get("--backend", "cpu"))
