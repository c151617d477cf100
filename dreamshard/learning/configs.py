"""Typed configs for the learning stages, one per params.yaml section (tasks, train_cost, train_policy, train).

Load with ``dreamshard.config.load_section(path, "train_cost", CostTrainConfig)``.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, model_validator

from dreamshard.types import DeviceType, Topology


class _Config(BaseModel):
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
    """Section `topology`: the device template; a task supplies the number of devices."""

    device_type: DeviceType = "cpu"
    memory_per_device_gb: Annotated[float, Field(gt=0)] = 4.0
    batch_size: Annotated[int, Field(ge=1)] = 2048

    def topology(self, num_devices: int) -> Topology:
        return Topology(
            num_devices=num_devices,
            device_type=self.device_type,
            memory_per_device_gb=self.memory_per_device_gb,
            batch_size=self.batch_size,
        )


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
    seed: int = 0


class LoopConfig(_Config):
    """Section `train`: the outer loop {measure placements -> fit cost net -> RL on the estimated MDP}.

    `cost` and `policy` default to the `train_cost` / `train_policy` sections (the CLI fills them in).
    """

    iterations: Annotated[int, Field(ge=1)] = 3
    placements_per_iteration: Annotated[int, Field(ge=0)] = 10
    final_lr_fraction: Annotated[float, Field(gt=0, le=1)] = 0.1  # linear LR decay from 1 to this
    # device counts for the placements measured each iteration (drawn per placement); empty = the task's own.
    # Mixing counts shows the cost net devices with more / fewer tables than training tasks give them.
    measure_devices: tuple[Annotated[int, Field(ge=1)], ...] = ()
    seed: int = 0
    cost: CostTrainConfig = CostTrainConfig()
    policy: PolicyTrainConfig = PolicyTrainConfig()

    def lr_factor(self, iteration: int) -> float:
        """Linear decay: 1.0 at iteration 0, final_lr_fraction at the last iteration."""
        if self.iterations <= 1:
            return 1.0
        frac = iteration / (self.iterations - 1)
        return 1.0 - frac * (1.0 - self.final_lr_fraction)
