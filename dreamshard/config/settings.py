"""Settings: params.yaml resolved once (docs/architecture/index.md, "Settings and use cases").

`resolve(params_path, overrides, lookup)` is what every door calls (the CLI, the DVC stages through it, the
Prefect tasks): it finds the file (`Lookup`), applies overrides > the file > the section defaults (dotted keys;
None = not given), fills `train.cost` / `train.policy` in from their sections and validates the whole file
before anything runs. It is the one parser of params.yaml; other code at most copies its text (a workspace).
The pipeline's commands layer the file over a `base` (`pipeline_base()`, the installed params.yaml): overrides >
the file > the base > the section defaults, so a file holding only the keys a user changes is enough.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from dreamshard.config.job import job_topology
from dreamshard.config.learning import (
    CostTrainConfig,
    LoopConfig,
    PolicyTrainConfig,
    PretrainConfig,
    TasksConfig,
    TopologyConfig,
)
from dreamshard.config.publish import PublishConfig
from dreamshard.config.release import ReleaseConfig
from dreamshard.config.stages import DriftConfig, EvaluateConfig, InventoryConfig, PipelineSettings, PlanConfig
from dreamshard.config.world import WorldConfig, replaced_world
from dreamshard.documents import describe_validation_error, read_structured
from dreamshard.errors import ConfigError
from dreamshard.profiling.settings import ProfileConfig
from dreamshard.values import JobTopology, Topology
from dreamshard.values.model_files import has_model

if TYPE_CHECKING:  # pragma: no cover
    from dreamshard.profiling.oracle import Oracle

#: Where a params file is looked for when none is given: `given` (none: the defaults), `local` (./params.yaml
#: if it exists) or `installed` (./params.yaml, else the params.yaml installed with the package).
Lookup = Literal["given", "local", "installed"]
LOCAL_PARAMS = Path("params.yaml")


class Settings(BaseModel):
    """Every section of params.yaml, typed, with the overrides applied; `source` is the file read (None:
    defaults only)."""

    model_config = ConfigDict(frozen=True)

    inventory: InventoryConfig = InventoryConfig()
    tasks: TasksConfig = TasksConfig()
    topology: TopologyConfig = TopologyConfig()
    world: WorldConfig = WorldConfig()
    profile: ProfileConfig = ProfileConfig()
    train_cost: CostTrainConfig = CostTrainConfig()
    train_policy: PolicyTrainConfig = PolicyTrainConfig()
    train: LoopConfig = LoopConfig()
    pretrain: PretrainConfig = PretrainConfig()
    release: ReleaseConfig = ReleaseConfig()
    plan: PlanConfig = PlanConfig()
    evaluate: EvaluateConfig = EvaluateConfig()
    publish: PublishConfig = PublishConfig()
    pipeline: PipelineSettings = PipelineSettings()
    drift: DriftConfig = DriftConfig()
    source: Path | None = Field(default=None, exclude=True)
    # the override keys the caller gave (CLI options, a flow request's fields): what it said otherwise than the
    # params and the inventory's recorded job (`topology_for_job`)
    told: frozenset[str] = Field(default=frozenset(), exclude=True)
    # one line when a world the caller named replaced a params world that said more than its name (`resolve`)
    world_note: str | None = Field(default=None, exclude=True)

    @property
    def plan_devices(self) -> int:
        """Devices of the published plan: plan.num_devices, else the training tasks' device count."""
        return self.plan.num_devices or self.tasks.train_devices

    def topology_for(self, num_devices: int | None = None) -> Topology:
        """The topology template with `num_devices` (default: the published plan's), in the params' world."""
        try:
            return self.template.topology(num_devices or self.plan_devices)
        except ValidationError as e:
            raise ConfigError(f"topology {describe_validation_error(e)}") from None
        except ValueError as e:  # the world's hosts are not the topology's
            raise ConfigError(f"world: {e}") from None

    @property
    def template(self) -> TopologyConfig:
        """The params `topology` in the params' `world`: what training's task topologies are made from."""
        return self.topology.model_copy(update={"world": self.world.world()})

    def topology_for_job(self, job: JobTopology | None) -> Topology:
        """The topology a run plans for: the inventory's recorded `job` over the template, except what the caller
        was told (`told`); without a job, `topology_for()` (dreamshard.config.job). The world: the one the caller
        named, else the job's, else the params'."""
        return job_topology(self.topology, self.plan_devices, job, self.told, self.world.world())

    def oracle(self) -> Oracle:
        """The measuring backend of the `profile` section: the one construction every door uses."""
        return self.profile.oracle()

    def plan_stage_oracle(self) -> Oracle:
        """The plan stage's backend: the profile's, timing a contender plan.stage_repeats times after
        plan.stage_warmup warm-up runs in each round (the profile's where None)."""
        told = {"repeats": self.plan.stage_repeats, "warmup": self.plan.stage_warmup}
        return self.profile.model_copy(update={k: v for k, v in told.items() if v is not None}).oracle()

    def check_pipeline(self) -> None:
        """Rules across sections the pipeline needs (checked before it starts): the evaluate stage's comparison
        is what the publish gate decides on, so it must measure every required baseline, often enough."""
        if self.evaluate.rounds < self.publish.min_rounds:
            raise ConfigError(
                f"evaluate.rounds {self.evaluate.rounds} is below publish.min_rounds "
                f"{self.publish.min_rounds}: the gate could not decide on the evaluate stage's comparison"
            )
        measured = self.evaluate.sharders
        if measured is None:
            return  # every contender is measured, and every baseline is a contender
        missing = [b for b in self.publish.baselines if b not in measured]
        if missing:
            raise ConfigError(
                f"evaluate.sharders lacks the required baseline(s) {', '.join(missing)} "
                f"(publish.baselines): the gate could not decide on the evaluate stage's comparison"
            )


SECTIONS: tuple[str, ...] = tuple(n for n in Settings.model_fields if n not in ("source", "told", "world_note"))
#: Section fill-ins: (section, key) taken from another section when the file does not set it.
FILL_INS: tuple[tuple[str, str, str], ...] = (("train", "cost", "train_cost"), ("train", "policy", "train_policy"))


def installed_pipeline_file(name: Literal["dvc.yaml", "params.yaml"]) -> Path:
    """dvc.yaml / params.yaml as installed with the package (the repository's own files)."""
    return Path(str(resources.files("dreamshard") / "pipeline" / name))


def params_file(params_path: str | Path | None, lookup: Lookup = "given") -> Path | None:
    """The params file a command reads: the given one, else per `lookup` (`Lookup`)."""
    if params_path is not None:
        return Path(params_path)
    if lookup in ("local", "installed") and LOCAL_PARAMS.is_file():
        return LOCAL_PARAMS
    if lookup == "installed":
        return installed_pipeline_file("params.yaml")
    return None


def pipeline_base() -> Path:
    """The params a pipeline command's `--params` file layers over: the installed params.yaml (what a new workspace
    starts from; its values, not the sections' defaults, are the pipeline's, e.g. evaluate.rounds 5 for
    publish.min_rounds 5)."""
    return installed_pipeline_file("params.yaml")


def _raw(path: Path | None) -> dict[str, Any]:
    if path is None:
        return {}
    data: Any = read_structured(path)
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping of sections at top level")
    unknown = sorted(str(k) for k in data if k not in SECTIONS)
    if unknown:
        raise ConfigError(f"{path}: unknown section '{unknown[0]}'; sections are {', '.join(SECTIONS)}")
    for name, value in data.items():
        if value is not None and not isinstance(value, dict):
            raise ConfigError(f"{path}: section '{name}' must be a mapping")
    return {name: dict(value or {}) for name, value in data.items()}


def layered(base: Mapping[str, Any], top: Mapping[str, Any]) -> dict[str, Any]:
    """Raw params `top` over `base`: a mapping in both merges key by key (nested ones too: `pretrain.loop`), any
    other value of `top` (a list, a number, null) replaces the base's."""
    out = copy.deepcopy(dict(base))
    for key, value in top.items():
        below = out.get(key)
        out[key] = (
            layered(below, value) if isinstance(below, dict) and isinstance(value, dict) else copy.deepcopy(value)
        )
    return out


def _raw_over(path: Path | None, base: str | Path | None) -> dict[str, Any]:
    """The raw params of `path`, layered over those of `base` (None: none)."""
    raw = _raw(path)
    return raw if base is None else layered(_raw(Path(base)), raw)


def apply_overrides(data: dict[str, Any], overrides: Mapping[str, Any] | None) -> dict[str, Any]:
    """A copy of raw params `data` with the dotted-key `overrides` set (None values: not given, skipped); a world
    named by the caller (`world.name`) replaces the params' world, figures and all."""
    out = copy.deepcopy(data)
    if (overrides or {}).get("world.name") is not None:
        out["world"] = {}
    for key, value in (overrides or {}).items():
        if value is None:
            continue
        parts = key.split(".")
        if len(parts) < 2 or parts[0] not in SECTIONS:
            raise ConfigError(f"override '{key}': expected SECTION.KEY with a section of {', '.join(SECTIONS)}")
        node = out.setdefault(parts[0], {})
        for part in parts[1:-1]:
            child = node.get(part)
            node = node.setdefault(part, {}) if child is None else child
            if not isinstance(node, dict):
                raise ConfigError(f"override '{key}': '{part}' is not a mapping in the params")
        node[parts[-1]] = list(value) if isinstance(value, tuple) else value
    return out


def _fill_in(data: dict[str, Any]) -> dict[str, Any]:
    for section, key, source in FILL_INS:
        if key not in data.get(section, {}):
            data.setdefault(section, {})[key] = data.get(source, {})
    return _interconnect(data)


def _interconnect(data: dict[str, Any]) -> dict[str, Any]:
    """The former `topology.interconnect` read as the world it named: `fast` is world `fast` (unless the file names
    a world), `measured` none declared. The world is its own section, never a key of `topology`."""
    topology = data.get("topology")
    if isinstance(topology, dict) and "world" in topology:
        raise ConfigError("topology.world: the job's world is its own section, world (world.name and its figures)")
    said = topology.pop("interconnect", None) if isinstance(topology, dict) else None
    if said is None:
        return data
    if said not in ("measured", "fast"):
        raise ConfigError(f"topology.interconnect '{said}' is neither measured nor fast: name a world (world.name)")
    if said == "fast" and not (data.get("world") or {}).get("name"):
        data["world"] = {**(data.get("world") or {}), "name": "fast"}
    return data


def settings_from(data: Mapping[str, Any], source: Path | str | None = None) -> Settings:
    """Settings from already-parsed params `data` (fill-ins applied here); errors name the section and key."""
    raw = _fill_in({k: dict(v or {}) for k, v in data.items()})
    label = f"{source}: " if source is not None else ""
    sections: dict[str, Any] = {}
    for name in SECTIONS:
        model = Settings.model_fields[name].annotation
        assert isinstance(model, type) and issubclass(model, BaseModel)
        try:
            sections[name] = model.model_validate(raw.get(name, {}))
        except ValidationError as e:
            raise ConfigError(f"{label}{name}.{describe_validation_error(e)}") from None
    said, theirs = sections["world"].devices_per_host, sections["topology"].devices_per_host
    if said is not None and theirs is not None and said != theirs:
        raise ConfigError(f"{label}world.devices_per_host {said} is not topology.devices_per_host {theirs}: say one")
    return Settings(**sections, source=Path(source) if source is not None else None)


def resolve(
    params_path: str | Path | None = None,
    overrides: Mapping[str, Any] | None = None,
    lookup: Lookup = "given",
    base: str | Path | None = None,
) -> Settings:
    """THE settings of a command: overrides > the params file (found per `lookup`) > `base` (a params file the
    file layers over: a pipeline command's `pipeline_base()`; None: none) > section defaults."""
    path = params_file(params_path, lookup)
    told = frozenset(k for k, v in (overrides or {}).items() if v is not None)
    raw = _raw_over(path, base)
    if path is not None and told:  # the file whole, every section, before an override hides a bad value of it
        settings_from(raw, path)
    note = replaced_world(raw.get("world"), (overrides or {}).get("world.name"))
    settings = settings_from(apply_overrides(raw, overrides), path)
    return settings.model_copy(update={"told": told, "world_note": note})


def params_text(
    params_path: str | Path | None,
    overrides: Mapping[str, Any] | None = None,
    lookup: Lookup = "installed",
    base: str | Path | None = None,
) -> str:
    """The params.yaml text a pipeline workspace runs with (its DVC stages read it alone, no base): the file as it
    is (comments kept) when it says everything itself, else the file layered over `base` with the overrides set.
    Validated first, so a bad override fails in one line."""
    path = params_file(params_path, lookup)
    assert path is not None
    own = _raw(path)
    raw = apply_overrides(_raw_over(path, base), overrides)
    settings_from(raw, path)
    if raw == own:
        return path.read_text()
    return yaml.safe_dump(raw, sort_keys=False)


def model_dir(explicit: Path | None = None, cwd: Path | None = None) -> Path | None:
    """Where a command finds its model: the given directory, else ./models (what `make run` and `dreamshard
    train` write), else ./models/dreamshard (the DVC pipeline's), else None = the model shipped in the package."""
    if explicit is not None:
        return explicit
    here = cwd or Path.cwd()
    for candidate in (here / "models", here / "models" / "dreamshard"):
        if has_model(candidate):
            return candidate
    return None
