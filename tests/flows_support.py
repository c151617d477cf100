"""Tiny params and inventories for the flow / orchestrator / DVC tests (simulator backend: fast, labelled)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from dreamshard.documents import save_inventory
from dreamshard.inventory.synth import synth_inventory
from dreamshard.values import Inventory

TINY_PARAMS: dict[str, Any] = {
    "inventory": {"name": "tiny", "num_tables": 14, "seed": 0, "dims": [4, 64]},
    "tasks": {
        "seed": 0,
        "test_fraction": 0.3,
        "train_num_tasks": 2,
        "train_tables": [4, 6],
        "train_devices": 2,
        "test_tables": [4],
        "test_devices": [2],
        "test_tasks_per_cell": 1,
    },
    "topology": {"device_type": "cpu", "memory_per_device_gb": 1.0, "batch_size": 256},
    "world": {"name": None},  # none declared; the profile, train and plan stages depend on the section (dvc.yaml)
    "profile": {
        "backend": "simulator",
        "num_placements": 4,
        "warmup": 0,
        "repeats": 1,
        "num_threads": 1,
        "seed": 0,
        "kinds": ["dim_greedy", "crowded"],
    },
    "train_cost": {"hidden": 16, "latent": 8, "head_hidden": 8, "lr": 0.005, "batch_size": 16, "steps": 30, "seed": 0},
    "train_policy": {"lr": 0.005, "episodes": 10, "episodes_per_update": 5, "entropy_weight": 0.001, "seed": 0},
    "train": {
        "iterations": 1,
        "placements_per_iteration": 2,
        "search_per_iteration": 1,
        "perturb_per_iteration": 1,
        "init": "none",
    },
    # TorchRec's planner is a baseline of every gate (evaluate, publish) but no search candidate here: its import
    # costs a stage process 5-7 s, and these runs test the pipeline, not the search
    "plan": {
        "samples": 8,
        "num_devices": 2,
        "candidates": ["policy", "lpt", "dim_greedy", "round_robin"],
        "verify": 2,
        "verify_rounds": 1,
    },
    "evaluate": {"sharders": ["round_robin", "torchrec", "dreamshard"], "rounds": 2},
    # The simulator backend: its plans may become current here; two rounds are enough for its exact figures.
    "publish": {
        "min_improvement": 0.0,
        "require_human": False,
        "store_uri": "store",
        "baselines": ["round_robin", "torchrec"],
        "min_rounds": 2,
        "allow_simulated": True,
        # the gate's measurement settings the evaluate stage depends on (dvc.yaml): DVC needs each in the file
        "confidence": 0.95,
        "early_rounds": [3, 4],
        "early_share": 0.2,
        "target_spread": 0.03,
        "max_rounds": 15,
        "timing_passes": 3,
        "timing_clock": "thread",
    },
}


def write_params(path: Path, **overrides: dict[str, Any]) -> Path:
    data = {k: dict(v) for k, v in TINY_PARAMS.items()}
    for section, values in overrides.items():
        data[section] = {**data.get(section, {}), **values}
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def tiny_inventory(path: Path, num_tables: int = 14, seed: int = 0) -> Inventory:
    inv = synth_inventory(num_tables, seed, dims=(4, 64), name="tiny")
    save_inventory(inv, path)
    return inv


def _edit_first_table(inv: Inventory, path: Path, **update: object) -> Inventory:
    """`inv` with its first table's fields `update`d, validated again and saved to `path`."""
    t0 = inv.tables[0]
    changed = inv.model_copy(update={"tables": (t0.model_copy(update=update), *inv.tables[1:])})
    changed = Inventory.model_validate(changed.model_dump())
    save_inventory(changed, path)
    return changed


def change_one_table(inv: Inventory, path: Path) -> Inventory:
    """Same inventory with the first table's pooling factor changed (a new fingerprint, the same schema)."""
    return _edit_first_table(inv, path, pooling_factor=inv.tables[0].pooling_factor + 3.0)


def resize_one_table(inv: Inventory, path: Path) -> Inventory:
    """`inv` with its first table 7 rows larger: another table schema (the current plan cannot serve it)."""
    return _edit_first_table(inv, path, num_embeddings=inv.tables[0].num_embeddings + 7)


def jsonl_ids(path: Path) -> list[str]:
    import json

    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line)["measurement_id"])
        except (ValueError, KeyError):
            pass  # a truncated last line from a killed writer
    return out


#: The fast path's params (`replan`): search candidates that include the heuristics' own plans, all verified: on the
#: (deterministic) simulator the kept plan is at least as good as the best heuristic, so the gate can approve it.
REPLAN_PARAMS: dict[str, Any] = {
    "topology": {"memory_per_device_gb": 1.0, "batch_size": 2048},  # the packaged model's batch size
    "profile": {"backend": "simulator", "warmup": 0, "repeats": 1},
    "plan": {
        "num_devices": 2,
        "candidates": ["dim_greedy", "lookup_greedy", "size_greedy", "size_lookup_greedy"],
        "verify": 8,
        "verify_rounds": 1,
        "samples": 0,
    },
    "evaluate": {
        "sharders": ["round_robin", "dim_greedy", "lookup_greedy", "size_greedy", "size_lookup_greedy", "torchrec"],
        "rounds": 5,
    },
    "publish": {"store_uri": "store", "allow_simulated": True},
}


def fast_path_workspace(tmp_path: Path, monkeypatch: Any, params: dict[str, Any]) -> Path:
    """`tmp_path` as the working directory with `params` as its params.yaml, profiling and training forbidden (the
    fast path must do neither)."""
    import dreamshard.learning.loop
    import dreamshard.profiling.runner

    monkeypatch.chdir(tmp_path)
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))

    def forbidden(*_a: object, **_k: object) -> None:
        raise AssertionError("the fast path must not profile or train")

    monkeypatch.setattr(dreamshard.profiling.runner, "profile_inventory", forbidden)
    monkeypatch.setattr(dreamshard.learning.loop, "train", forbidden)
    return tmp_path


class Orchestrator:
    """Stands in for the retrain flow (`pipeline run`'s orchestrator): records what it was handed and returns an empty
    summary for `inventory_name`."""

    def __init__(self, inventory_name: str) -> None:
        self.inventory_name = inventory_name
        self.prepared: list[Any] = []

    def __call__(self, prepared: Any) -> Any:
        from dreamshard.usecases.pipeline_steps import RunSummary

        self.prepared.append(prepared)
        return RunSummary(
            inventory_name=self.inventory_name, inventory_fingerprint="0" * 64, workspace=str(prepared.workspace)
        )


def stub_orchestrator(monkeypatch: Any, cwd: Path, inventory_name: str) -> Orchestrator:
    """`pipeline run` in-process with its orchestrator replaced by an `Orchestrator`, run from `cwd`, with no
    Prefect API set."""
    import dreamshard_flows.cli as cli

    stub = Orchestrator(inventory_name)
    monkeypatch.setattr(cli, "_orchestrate", stub)
    monkeypatch.chdir(cwd)
    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    return stub
