"""The params.yaml sections of the pipeline's stages: the input pool (`inventory`), the published plan (`plan`),
the comparison (`evaluate`), the pipeline's plumbing (`pipeline`) and the drift monitor (`drift`).

The other sections live beside them in dreamshard.config (`profile`, `publish`, the learning ones);
dreamshard.config.settings puts them all together (docs/architecture/index.md, "Settings and use cases").
"""

from __future__ import annotations

from typing import Annotated

from pydantic import ConfigDict, Field, field_validator

from dreamshard.config.learning import DEFAULT_CANDIDATES, DEFAULT_UNKNOWN_SKEWS, SearchConfig
from dreamshard.errors import ConfigError
from dreamshard.inventory.synth import check_dims, synth_inventory
from dreamshard.sharders import BASELINE_SHARDERS, contender_names, sharder_names
from dreamshard.values import Inventory
from dreamshard.values.base import StrictNumbers
from dreamshard.values.search_result import CandidateSource


class Section(StrictNumbers):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


#: The most tables `inventory synth` (and the pipeline's synthetic pool) draw: each table's reuse histogram is
#: simulated from a batch of lookups, a few milliseconds a table on a 2-core machine, so this many take minutes
#: (docs/user-guide/inventories.md, "Where inventories come from"). Larger inventories come from traces or models.
MAX_SYNTH_TABLES = 10_000


class InventoryConfig(Section):
    """Section `inventory`: the synthetic pool the pipeline starts from."""

    name: Annotated[str, Field(min_length=1)] = "pool"
    num_tables: Annotated[int, Field(ge=1, le=MAX_SYNTH_TABLES)] = 120
    seed: int = 0
    dims: tuple[int, ...] = (16, 32, 64, 128)

    @field_validator("dims")
    @classmethod
    def _dims(cls, v: tuple[int, ...]) -> tuple[int, ...]:
        try:
            return check_dims(v)
        except ConfigError as e:
            raise ValueError(str(e).removeprefix("dims: ")) from None

    def synthesize(self) -> Inventory:
        return synth_inventory(self.num_tables, self.seed, dims=self.dims, name=self.name)


class PlanConfig(Section):
    """Section `plan`: how the published plan is made (`dreamshard plan --sharder dreamshard`: search on the
    learned cost, then the `verify` best candidates measured on the profile backend)."""

    num_devices: Annotated[int, Field(ge=1)] | None = None  # default: tasks.train_devices
    samples: Annotated[int, Field(ge=0, le=4096)] = 4  # sampled policy rollouts besides the argmax
    risk: Annotated[float, Field(ge=0, le=10)] = 1.0  # ensemble mean + risk x spread
    candidates: tuple[CandidateSource, ...] = DEFAULT_CANDIDATES
    # the race (dreamshard.measured.verify): the search-only plan, this many best predicted candidates, every
    # heuristic's own plan and TorchRec's, measured interleaved; the best measured kept (0 = trust predictions)
    verify: Annotated[int, Field(ge=0, le=64)] = 0
    verify_rounds: Annotated[int, Field(ge=1, le=100)] = 5  # the race's rounds at most
    # a contender is dropped from the race once it is behind the leader with this confidence (the gate's paired
    # interval); with an incumbent (a re-plan): another candidate replaces the current plan's only after enough
    # straight paired wins that chance alone, over all challengers, would explain them less often than 1 - this
    # (dreamshard.measured.verify.rounds_to_replace: 8 rounds at 0.95 over 10 challengers)
    verify_confidence: Annotated[float, Field(ge=0.5, le=0.9999)] = 0.95
    # calibration before the search (dreamshard.measured.calibrate): seconds of probe timings on the profile
    # backend, fitted into a per-inventory correction of the cost model that search, verify and refinement use
    calibrate_seconds: Annotated[float, Field(ge=0, le=600)] = 0.0
    # tables that declare no access histogram: the id distributions (Zipf exponents, 0 = uniform) the plan must hold
    # under; candidates ranked by worst-case regret over them, verified under each (dreamshard.search.unknown_stats)
    unknown_skews: tuple[Annotated[float, Field(ge=0, le=4)], ...] = DEFAULT_UNKNOWN_SKEWS
    # measured refinement of the kept plan (dreamshard.measured.refine): at most this many seconds of proposals
    # measured on the profile backend, two devices each, interleaved with the incumbent's (0 = off); with a
    # stage_budget, at most what the race left of it
    refine_seconds: Annotated[float, Field(ge=0, le=86_400)] = 0.0
    # the whole plan (search, race, refinement) takes at most this many times the search alone (0 = no budget): the
    # race measures every contender once whatever it says, then rounds while it lasts; refinement gets the rest
    stage_budget: Annotated[float, Field(ge=0, le=1000)] = 3.0
    # how the plan stage times one contender in one round: this many repeats after this many warm-up runs (None:
    # profile.repeats / profile.warmup). The race's interleaved rounds are its statistics, so a round need not
    # repeat as much as a profile: the round-to-round noise (5-7% a round on 2 cores) is the machine's, not the
    # repeats' (bench/results/race_repeats.md): 1 warm-up and 1 repeat, 1.4x cheaper than 1 and 2
    stage_repeats: Annotated[int, Field(ge=1, le=100)] | None = 1
    stage_warmup: Annotated[int, Field(ge=0, le=100)] | None = 1
    refine_rounds: Annotated[int, Field(ge=1, le=100)] = 3
    # a proposal that passes its refine_rounds is measured again for this many fresh rounds and kept only when
    # those pass too (0 = no second block): one noise pass in 20 (3 rounds, no real difference) becomes one in
    # 400, which a long refinement's hundreds of proposals need (bench/refine_noise.py)
    refine_confirm_rounds: Annotated[int, Field(ge=0, le=100)] = 3
    # the fast path's refinement (`dreamshard replan`, the replan-on-inventory-change flow): off by default, the
    # fast path publishes in well under a minute; the retrain path's plan stage refines for refine_seconds
    replan_refine_seconds: Annotated[float, Field(ge=0, le=86_400)] = 0.0
    # a re-plan (an incumbent): candidates ranked by predicted step time plus the move of the job's tables (weights
    # and optimizer state, sent once) spread over this many steps (None: publish.move_horizon_steps, the gate's;
    # 0: moves are free), and none may move more than this share of the incumbent's tables
    # (dreamshard.search.moves)
    move_horizon_steps: Annotated[int, Field(ge=0, le=10**9)] | None = None
    max_move_fraction: Annotated[float, Field(ge=0, le=1)] = 1.0
    # sharding types the search may give a whole table besides table-wise and column-wise (row_wise,
    # table_row_wise, data_parallel): converted where the learned cost says it pays
    types: tuple[str, ...] = ()

    @field_validator("candidates")
    @classmethod
    def _candidates(cls, v: tuple[CandidateSource, ...]) -> tuple[CandidateSource, ...]:
        return SearchConfig(candidates=v).candidates  # names the unknown source

    @field_validator("types")
    @classmethod
    def _types(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        return SearchConfig(types=v).types  # names the unknown type

    def search(self, seed: int = 0) -> SearchConfig:
        return SearchConfig(
            risk=self.risk, samples=self.samples, candidates=self.candidates, types=self.types, seed=seed
        )


class EvaluateConfig(Section):
    """Section `evaluate`: the contenders measured against dreamshard and the interleaved rounds."""

    # None: every contender, listed when the comparison runs (`contenders`): listing them loads the learned
    # sharders' module, and with it torch, which reading the settings must not
    sharders: tuple[str, ...] | None = None
    rounds: Annotated[int, Field(ge=1, le=100)] = 3
    # With one plan to judge (`compare --plan`, the evaluate stage): stop measuring once an early look of the publish
    # gate (publish.early_rounds) approves or rejects it; the gate reads the comparison with the same rule.
    stop_early: bool = True

    @field_validator("sharders")
    @classmethod
    def _known(cls, v: tuple[str, ...] | None) -> tuple[str, ...] | None:
        known = sharder_names()
        for name in v or ():
            if name not in known:
                raise ValueError(f"unknown sharder '{name}'; choose from {', '.join(known)}")
        return v

    def contenders(self) -> tuple[str, ...]:
        """The sharders a comparison measures: `sharders`, or every contender when it is not set."""
        return self.sharders if self.sharders is not None else contender_names()


class PipelineSettings(Section):
    """Section `pipeline`: where a workspace pushes its data and models (the DVC remote) and how profiling fans
    out to workers. Nothing here changes a result, so no DVC stage lists it as a param."""

    dvc_remote: Annotated[str, Field(min_length=1)] = "runs/dvc-remote"  # a directory, or s3://bucket/path
    dvc_remote_endpoint: str | None = None  # S3 endpoint (SeaweedFS, MinIO); None: AWS / environment
    items_per_batch: Annotated[int, Field(ge=1, le=100_000)] = 64  # planned measurements per profiling batch
    batch_attempts: Annotated[int, Field(ge=1, le=20)] = 3  # runs of one batch before the profile stage fails
    batch_timeout_s: Annotated[float, Field(gt=0, le=7 * 24 * 3600)] = 6 * 3600.0  # all batches, waiting included
    profile_deployment: Annotated[str, Field(pattern=r"^[^/]+/[^/]+$")] = "profile-batch/profile-batch"


class DriftConfig(Section):
    """Section `drift`: the monitor measures the current published plan interleaved with a reference plan and
    flags it when plan / reference moved by more than `threshold` (a fraction) from the same ratio when the plan
    was published, beyond the noise: the whole `confidence` interval over `rounds` paired rounds
    (docs/architecture/pipeline.md, "Drift")."""

    threshold: Annotated[float, Field(gt=0, le=10)] = 0.2
    rounds: Annotated[int, Field(ge=2, le=100)] = 5  # paired rounds (an interval needs two)
    confidence: Annotated[float, Field(gt=0.5, lt=1)] = 0.95
    # the reference when the gate's record names no baseline to re-plan: the first of these heuristics whose plan
    # places differently from the current plan (its ratio anchored by the first check)
    reference_sharders: tuple[str, ...] = ("dim_greedy", "size_greedy", "round_robin")
    history: Annotated[int, Field(ge=1, le=10_000)] = 200  # drift checks kept per inventory (the trend report)

    @field_validator("reference_sharders")
    @classmethod
    def _heuristics(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        if not v:
            raise ValueError("name at least one heuristic")
        known = [n for n in sharder_names() if n in BASELINE_SHARDERS and n != "torchrec"]
        for name in v:
            if name not in known:
                raise ValueError(f"unknown reference sharder '{name}'; choose from {', '.join(known)}")
        return v
