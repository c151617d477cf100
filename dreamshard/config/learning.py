"""Typed configs for the learning stages, one per params.yaml section (tasks, train_cost, train_policy, train).

dreamshard.config.settings.resolve reads them (with the other sections) from params.yaml.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, field_validator, model_validator

from dreamshard.values import (
    DEFAULT_HOST_MEMORY_GB,
    DEFAULT_INTER_HOST_GBPS,
    MAX_BATCH,
    MAX_DEVICE_GB,
    DeviceType,
    MemoryModel,
    Number,
    Optimizer,
    Topology,
    World,
)
from dreamshard.values.base import StrictNumbers
from dreamshard.values.search_result import CANDIDATE_SOURCES, CandidateSource

#: `plan.unknown_skews`: uniform ids, the assumed Zipf(1.05) and very skewed ids (dreamshard.search.unknown_stats)
DEFAULT_UNKNOWN_SKEWS: tuple[float, ...] = (0.0, 1.05, 1.6)


class _Config(StrictNumbers):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class TasksConfig(_Config):
    """Section `tasks`: how a table pool is split into train and held-out planning tasks."""

    seed: int = 0
    test_fraction: Annotated[float, Field(gt=0, lt=1)] = 0.5
    train_num_tasks: Annotated[int, Field(ge=1)] = 16
    train_tables: tuple[Annotated[int, Field(ge=1)], Annotated[int, Field(ge=1)]] = (20, 40)
    train_devices: Annotated[int, Field(ge=1)] = 4
    test_tables: tuple[Annotated[int, Field(ge=1)], ...] = (10, 80, 160)
    test_devices: tuple[Annotated[int, Field(ge=1)], ...] = (2, 4, 8)
    test_tasks_per_cell: Annotated[int, Field(ge=1)] = 1

    @model_validator(mode="after")
    def _check(self) -> TasksConfig:
        lo, hi = self.train_tables
        if lo > hi:
            raise ValueError(f"train_tables min {lo} is larger than max {hi}")
        return self


class TopologyConfig(_Config):
    """Section `topology`: the device template; a task supplies the number of devices. `world` is set from the
    params' own section `world` (`Settings.template`), never in this one."""

    device_type: DeviceType = "cpu"
    memory_per_device_gb: Annotated[float, Number, Field(gt=0, le=MAX_DEVICE_GB)] = 4.0  # as Topology's
    batch_size: Annotated[int, Number, Field(ge=1, le=MAX_BATCH)] = 2048
    devices_per_host: Annotated[int, Number, Field(ge=1, le=4096)] | None = None  # None: one flat host
    inter_host_gbps: Annotated[float, Number, Field(gt=0, le=1e6)] = DEFAULT_INTER_HOST_GBPS
    optimizer: Optimizer = "sgd"
    memory_model: MemoryModel = "weights"
    memory_reserve: Annotated[float, Number, Field(ge=0.0, lt=1.0)] = 0.0
    # host (DDR) memory per device, for tables whose kernel keeps weights on the host (as Topology's)
    host_memory_per_device_gb: Annotated[float, Number, Field(gt=0, le=MAX_DEVICE_GB)] = DEFAULT_HOST_MEMORY_GB
    world: World | None = None  # the job's world (dreamshard.values.world)

    def topology(self, num_devices: int) -> Topology:
        """The template on `num_devices` in its world; hosts of `devices_per_host` when there is more than one
        host's worth (a task on fewer devices than one host is one host). ValueError when the world's hosts are
        not the template's."""
        per_host = self.devices_per_host if self.devices_per_host and num_devices > self.devices_per_host else None
        topology = Topology(
            num_devices=num_devices,
            device_type=self.device_type,
            memory_per_device_gb=self.memory_per_device_gb,
            batch_size=self.batch_size,
            devices_per_host=per_host,
            inter_host_gbps=self.inter_host_gbps,
            optimizer=self.optimizer,
            memory_model=self.memory_model,
            memory_reserve=self.memory_reserve,
            host_memory_per_device_gb=self.host_memory_per_device_gb,
        )
        return topology.in_world(self.world) if self.world is not None else topology

    @classmethod
    def of(cls, topology: Topology) -> TopologyConfig:
        """The template of `topology` (everything but the device count)."""
        return cls(**topology.model_dump(exclude={"num_devices"}))


class CostTrainConfig(_Config):
    """Section `train_cost`: cost-network architecture and its supervised training."""

    hidden: Annotated[int, Field(ge=1)] = 128
    latent: Annotated[int, Field(ge=1)] = 32
    head_hidden: Annotated[int, Field(ge=1)] = 64
    lr: Annotated[float, Field(gt=0)] = 5e-4
    batch_size: Annotated[int, Field(ge=1)] = 64
    steps: Annotated[int, Field(ge=0)] = 300
    cosine_decay: bool = False  # cosine LR decay to 5% over the steps of one fit
    test_fraction: Annotated[float, Field(ge=0, lt=1)] = 0.2  # held-out share of placement records
    use_singles: bool = True  # train on single-table records too (one table on one device)
    # weight of a relative-error term (squared log ratio of each device's predicted vs measured component
    # costs) added to the MSE: MSE alone is dominated by the big devices, so a device holding one or two
    # tables (the small tasks) gets large relative errors. 0 = MSE only.
    relative_loss_weight: Annotated[float, Field(ge=0)] = 0.0
    # members of the bootstrap ensemble (each fit on its own resample of the records); their spread is the
    # uncertainty planning is pessimistic about
    ensemble_size: Annotated[int, Field(ge=1, le=16)] = 3
    bootstrap: bool = True
    seed: int = 0


class PolicyTrainConfig(_Config):
    """Section `train_policy`: policy architecture and REINFORCE on the estimated MDP."""

    hidden: Annotated[int, Field(ge=1)] = 128
    latent: Annotated[int, Field(ge=1)] = 32
    head_hidden: Annotated[int, Field(ge=1)] = 64
    prior_weight: Annotated[float, Field(ge=0)] = 10.0  # initial cost-greedy prior weight (0 = none)
    lr: Annotated[float, Field(gt=0)] = 5e-4
    episodes: Annotated[int, Field(ge=0)] = 100
    episodes_per_update: Annotated[int, Field(ge=1)] = 10
    entropy_weight: Annotated[float, Field(ge=0)] = 0.001
    risk: Annotated[float, Field(ge=0, le=10)] = 1.0  # the rewards' cost: ensemble mean + risk x spread
    seed: int = 0


#: candidate sources of the plan-time search: the policy, LPT on predicted costs, heuristics, TorchRec
DEFAULT_CANDIDATES: tuple[CandidateSource, ...] = (
    "policy",
    "lpt",
    "dim_greedy",
    "lookup_greedy",
    "size_lookup_greedy",
    "size_greedy",
    "round_robin",
    "torchrec",
)


class SearchConfig(_Config):
    """How `--sharder dreamshard` plans: candidates scored by the pessimistic learned cost, the best refined."""

    risk: Annotated[float, Field(ge=0, le=10)] = 1.0  # planning cost = ensemble mean + risk x spread
    samples: Annotated[int, Field(ge=0, le=4096)] = 4  # sampled policy rollouts besides its argmax
    candidates: tuple[CandidateSource, ...] = DEFAULT_CANDIDATES
    refine_top: Annotated[int, Field(ge=0, le=64)] = 2  # local search on this many best candidates
    refine_rounds: Annotated[int, Field(ge=0, le=100_000)] = 64  # moves/swaps per refined candidate, at most
    # planning-time budget: sampled rollouts are cut so that all rollouts together place at most this many tables
    # (1,000 tables: the argmax and 1 sample), and TorchRec's planner (seconds on large inventories) is a
    # candidate only up to torchrec_max_tables tables
    max_rollout_tables: Annotated[int, Field(ge=1)] = 2_000
    torchrec_max_tables: Annotated[int, Field(ge=0)] = 400
    # sharding types the search may convert whole tables to, besides table-wise and column-wise
    # (dreamshard.search.sharding_types: row_wise, table_row_wise, data_parallel); () = none
    types: tuple[str, ...] = ()
    seed: int = 0

    @field_validator("candidates", mode="before")
    @classmethod
    def _known_sources(cls, v: object) -> object:
        """An unknown source in one line that names it (before pydantic's literal check lists every choice)."""
        for c in v if isinstance(v, (list, tuple)) else ():
            if c not in CANDIDATE_SOURCES:
                raise ValueError(f"unknown candidate source '{c}'; choose from {', '.join(sorted(CANDIDATE_SOURCES))}")
        return v

    @model_validator(mode="after")
    def _known(self) -> SearchConfig:
        choosable = ("row_wise", "table_row_wise", "data_parallel")  # dreamshard.search.sharding_types
        for t in self.types:
            if t not in choosable:
                raise ValueError(f"unknown sharding type '{t}'; the search chooses among {', '.join(choosable)}")
        return self


class LoopConfig(_Config):
    """Section `train`: the outer loop {measure placements -> fit cost net -> RL on the estimated MDP}.

    `cost` and `policy` are the `train_cost` / `train_policy` sections unless set here (dreamshard.config.settings
    fills them in).
    """

    iterations: Annotated[int, Field(ge=1)] = 3
    placements_per_iteration: Annotated[int, Field(ge=0)] = 10  # sampled policy rollouts measured per iteration
    search_per_iteration: Annotated[int, Field(ge=0)] = 4  # plans of the search planner measured per iteration
    perturb_per_iteration: Annotated[int, Field(ge=0)] = 4  # small perturbations of the best measured plans
    # start from the model shipped in the package ("pretrained": cost ensemble and policy warm-started, so
    # the retrain adapts a model that has seen a wide range of tables), from scratch ("none"), or from the model
    # the state dir's last run trained for another version of the inventory ("previous", else "pretrained"): an
    # incremental retrain of `incremental_iterations` iterations that measures only the train tasks the change
    # touched, plus `refresh_tasks` untouched ones (drift) -- dreamshard.learning.incremental
    init: Literal["pretrained", "none", "previous"] = "pretrained"
    incremental_iterations: Annotated[int, Field(ge=1)] = 1
    # an incremental retrain fine-tunes a model already fit to most of its data: its cost ensemble takes this
    # many steps per member (None: cost.steps, as a fresh fit); docs/architecture/pipeline.md, "The production loop"
    incremental_cost_steps: Annotated[int, Field(ge=1)] | None = None
    refresh_tasks: Annotated[int, Field(ge=0)] = 1
    final_lr_fraction: Annotated[float, Field(gt=0, le=1)] = 0.1  # linear LR decay from 1 to this
    # device counts for the placements measured each iteration (drawn per placement); empty = the task's own.
    # Mixing counts shows the cost net devices with more / fewer tables than training tasks give them.
    measure_devices: tuple[Annotated[int, Field(ge=1)], ...] = ()
    seed: int = 0
    cost: CostTrainConfig = CostTrainConfig()
    policy: PolicyTrainConfig = PolicyTrainConfig()

    def incremental(self) -> LoopConfig:
        """This config as an incremental retrain runs it: `incremental_iterations` iterations, and the cost
        ensemble fine-tuned for `incremental_cost_steps` steps per member when set."""
        cost = (
            self.cost
            if self.incremental_cost_steps is None
            else self.cost.model_copy(update={"steps": self.incremental_cost_steps})
        )
        return self.model_copy(update={"iterations": self.incremental_iterations, "cost": cost})

    def lr_factor(self, iteration: int) -> float:
        """Linear decay: 1.0 at iteration 0, final_lr_fraction at the last iteration."""
        if self.iterations <= 1:
            return 1.0
        frac = iteration / (self.iterations - 1)
        return 1.0 - frac * (1.0 - self.final_lr_fraction)


class PretrainConfig(_Config):
    """Section `pretrain`: the packaged model, pre-trained on tasks drawn from the wide table generator
    (dreamshard.inventory.families.wide_table) so it transfers to inventories it never saw.

    Each task has its own fresh tables, device count and batch size; per task `num_placements` random placements
    and one placement per `kinds` entry are measured (no single-table records), then the outer loop (`loop`) fits
    the cost ensemble and the policy and measures where they go. An old `batch_size: N` reads as
    `batch_sizes: [N, N]`.
    """

    seed: int = 0
    num_tasks: Annotated[int, Field(ge=1, le=100_000)] = 80
    tables: tuple[Annotated[int, Field(ge=1)], Annotated[int, Field(ge=1)]] = (5, 200)  # log-uniform per task
    devices: tuple[Annotated[int, Field(ge=1)], Annotated[int, Field(ge=1)]] = (2, 16)
    max_tables_per_device: Annotated[int, Field(ge=1)] = 60  # device counts are drawn to keep under this
    memory_per_device_gb: Annotated[float, Field(gt=0, le=1e6)] = 1024.0  # profiling scales tables down anyway
    # per task, log-uniform: each task is profiled and trained at its own batch size (the card records the span)
    batch_sizes: tuple[Annotated[int, Field(ge=1, le=MAX_BATCH)], Annotated[int, Field(ge=1, le=MAX_BATCH)]] = (
        2048,
        2048,
    )
    num_placements: Annotated[int, Field(ge=0)] = 1
    kinds: tuple[str, ...] = ("dim_greedy", "lookup_greedy", "size_lookup_greedy", "crowded")
    loop: LoopConfig = LoopConfig(init="none")

    @model_validator(mode="before")
    @classmethod
    def _old_batch_size(cls, data: Any) -> Any:
        """`batch_size: N` (before spans) reads as `batch_sizes: [N, N]`."""
        if isinstance(data, dict) and "batch_size" in data:
            if "batch_sizes" in data:
                raise ValueError("'batch_size' is the old form of 'batch_sizes'; give only 'batch_sizes'")
            out = {k: v for k, v in data.items() if k != "batch_size"}
            out["batch_sizes"] = (data["batch_size"], data["batch_size"])
            return out
        return data

    @model_validator(mode="after")
    def _check(self) -> PretrainConfig:
        for name, (lo, hi) in (("tables", self.tables), ("devices", self.devices), ("batch_sizes", self.batch_sizes)):
            if lo > hi:
                raise ValueError(f"{name} min {lo} is larger than max {hi}")
        if self.loop.init != "none":
            raise ValueError("loop.init must be 'none' (pretraining is what the others start from)")
        return self
