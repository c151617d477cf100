"""Saving and loading a model directory (docs/architecture/stores.md, "Stores"): cost_net.pt (the cost ensemble),
policy.pt and model.json (the card).

model.json is written LAST and records the sha256 of each weights file, so a directory caught between
writes (or edited by hand) is detected as corrupt rather than silently mixing two models. Weight files
are first written into a temp directory next to the target, then moved in with os.replace.
Other files in the directory are left alone.

A saved model is byte-deterministic: the same weights and card fields give the same files (the card holds
no wall-clock time and the version is a hash of the weights), so a pipeline that retrains from the same
measurements produces the same model hash. Where a model is looked for is the caller's business (the CLI
passes --model or its default); `load_model(None)` loads the model shipped in the package.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import re
import shutil
import stat
import tempfile
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol, TypeVar

import torch
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from dreamshard.documents import atomic_write_text, describe_validation_error
from dreamshard.errors import InputFileError, ModelError, first_line
from dreamshard.learning.cost_model import CostEnsemble, CostNetSpec
from dreamshard.learning.features import FEATURE_SPEC_VERSION
from dreamshard.learning.policy import Policy, PolicySpec
from dreamshard.learning.ranges import DEVICE_BACKENDS, FeatureRanges, device_type_check
from dreamshard.parsing import load_json
from dreamshard.values import CommModel, Table, Topology
from dreamshard.values.model_files import CARD_FILE, COST_FILE, POLICY_FILE

MODEL_FORMAT_VERSION = 2
PACKAGED_DIR = Path(__file__).resolve().parent.parent / "pretrained"
SIMULATED_BACKENDS = frozenset({"simulator", "toy"})


class ModelCard(BaseModel):
    """What a model is, what it was trained on, and how well its cost net predicts held-out placements."""

    model_config = ConfigDict(extra="forbid")
    format_version: int = MODEL_FORMAT_VERSION
    version: str  # ds-<hash of the weights>
    feature_spec_version: str = FEATURE_SPEC_VERSION
    cost_spec: CostNetSpec
    ensemble_size: int = Field(default=1, ge=1, le=64, strict=True)
    policy_spec: PolicySpec | None = None
    # measured all-to-all models of the training records, one per world size (planning costs comm with them)
    comm_models: tuple[CommModel, ...] = ()
    feature_ranges: FeatureRanges | None = None  # what the cost net was trained on (planning warns outside)
    configs: dict[str, Any] = Field(default_factory=dict)  # training configs by params section
    inventory_name: str = ""
    inventory_fingerprint: str = ""
    backend: str = ""  # cpu | cuda | simulator | toy
    cost_metrics: dict[str, Any] = Field(default_factory=dict)  # held-out error of the cost net
    policy_metrics: dict[str, Any] = Field(default_factory=dict)
    provenance: dict[str, Any] = Field(default_factory=dict)  # command, iterations, measurements, ...
    files: dict[str, str] = Field(default_factory=dict)  # file name -> sha256

    @property
    def learned_from_simulation(self) -> bool:
        """Trained on the analytic simulator (or a test's toy cost): its predictions say nothing of hardware."""
        return self.backend in SIMULATED_BACKENDS

    @property
    def device_types(self) -> tuple[str, ...]:
        """The device types the model learned from: its ranges' record, else (a card written before device types
        were recorded) the backend it records when that is a device (cpu / cuda); () when simulated."""
        recorded = self.feature_ranges.device_types if self.feature_ranges is not None else ()
        return recorded or ((self.backend,) if self.backend in DEVICE_BACKENDS else ())

    @property
    def ranges(self) -> FeatureRanges | None:
        """`feature_ranges` with the device types filled in as `device_types` reads them."""
        if self.feature_ranges is None or self.feature_ranges.device_types == self.device_types:
            return self.feature_ranges
        return self.feature_ranges.model_copy(update={"device_types": self.device_types})

    def out_of_range(self, tables: Sequence[Table], topology: Topology) -> list[str]:
        """Planning `tables` on `topology` outside what the model was trained on, one line per kind."""
        ranges = self.ranges
        return ranges.check(tables, topology) if ranges is not None else device_type_check(self.device_types, topology)


class LoadedModel(BaseModel):
    model_config = ConfigDict(arbitrary_types_allowed=True)
    card: ModelCard
    cost_net: CostEnsemble
    policy: Policy | None
    directory: Path


def _state_bytes(module: torch.nn.Module) -> bytes:
    buf = io.BytesIO()
    torch.save(module.state_dict(), buf)
    return buf.getvalue()


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def first_non_finite(module: torch.nn.Module) -> str | None:
    """The name of the first parameter or buffer of `module` holding a NaN or an infinity (None: all finite)."""
    for name, t in (*module.named_parameters(), *module.named_buffers()):
        if t.is_floating_point() and not bool(torch.isfinite(t).all()):
            return name
    return None


def check_model_dir(directory: Path, what: str = "model directory") -> None:
    """InputFileError unless `directory` is a directory or can be created as one (no part of it is a file)."""
    p = Path(directory)
    for q in (p, *p.parents):
        if q.is_dir():
            return
        if q.exists() or q.is_symlink():
            raise InputFileError(
                f"cannot write the {what} {p}: " + ("it is not a directory" if q == p else f"{q} is not a directory")
            )


def _regular_file(path: Path) -> bool:
    """Whether `path` is a regular file (a FIFO or a device would block or never end a read)."""
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except OSError:
        return False


def save_model(
    directory: Path,
    cost_net: CostEnsemble,
    policy: Policy | None,
    **card_fields: Any,
) -> ModelCard:
    """Write the model into `directory` (created if needed) and return its card. Weights with a NaN or an
    infinity are never saved: ModelError, nothing written."""
    directory = Path(directory)
    for file, module in ((COST_FILE, cost_net), (POLICY_FILE, policy)):
        bad = first_non_finite(module) if module is not None else None
        if bad is not None:
            raise ModelError(
                f"refusing to save {directory / file}: weight '{bad}' is not finite (training diverged: "
                "check the measurements, or lower the learning rate); nothing written"
            )
    check_model_dir(directory)
    directory.mkdir(parents=True, exist_ok=True)
    blobs = {COST_FILE: _state_bytes(cost_net)}
    if policy is not None:
        blobs[POLICY_FILE] = _state_bytes(policy)
    files = {name: _sha(b) for name, b in blobs.items()}
    weights_hash = _sha("".join(files[k] for k in sorted(files)).encode())[:10]
    card = ModelCard(
        version=f"ds-{weights_hash}",
        cost_spec=cost_net.spec,
        ensemble_size=cost_net.size,
        policy_spec=policy.spec if policy is not None else None,
        files=files,
        **card_fields,
    )
    tmp = Path(tempfile.mkdtemp(prefix=".model-", dir=directory))
    try:
        for name, data in blobs.items():
            with open(tmp / name, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
        for name in blobs:
            os.replace(tmp / name, directory / name)
        if policy is None:
            with contextlib.suppress(FileNotFoundError):
                os.remove(directory / POLICY_FILE)
        atomic_write_text(directory / CARD_FILE, card.model_dump_json(indent=2) + "\n")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return card


def _check_format(path: Path, raw: object) -> None:
    """An older (or newer) card is named as such before its fields are validated: its fields differ."""
    version = raw.get("format_version") if isinstance(raw, dict) else None
    if isinstance(version, int) and not isinstance(version, bool) and version != MODEL_FORMAT_VERSION:
        raise ModelError(
            f"{path}: model format {version}, this dreamshard reads {MODEL_FORMAT_VERSION}; retrain "
            "(`dreamshard train`, or `make run`) or point --model elsewhere"
        )


def load_card(directory: Path) -> ModelCard:
    path = Path(directory) / CARD_FILE
    if path.exists() and not _regular_file(path):
        raise ModelError(f"{path}: not a regular file; a model card is a JSON file")
    if not path.is_file():
        raise ModelError(
            f"no dreamshard model in {directory} (missing {CARD_FILE}): run `dreamshard train` or pass --model"
        )
    try:
        text = path.read_text()
        _check_format(path, load_json(text))  # refuses repeated keys and nesting past parsing.MAX_NESTING
        card = ModelCard.model_validate_json(text)
    except ValidationError as e:
        raise ModelError(f"{path}: corrupt model card ({describe_validation_error(e)})") from None
    except (ValueError, OSError) as e:
        raise ModelError(f"{path}: corrupt model card ({first_line(e)})") from None
    if card.feature_spec_version != FEATURE_SPEC_VERSION:
        raise ModelError(
            f"{path}: model uses table features v{card.feature_spec_version}, this dreamshard computes "
            f"v{FEATURE_SPEC_VERSION}; retrain with `dreamshard train`"
        )
    return card


#: Terminal escapes (torch bolds parts of its messages).
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def _load_state(directory: Path, name: str, card: ModelCard, module: torch.nn.Module) -> None:
    path = directory / name
    if path.exists() and not _regular_file(path):
        raise ModelError(f"{path}: not a regular file; model weights are a file written by `dreamshard train`")
    try:
        data = path.read_bytes()
    except OSError:
        raise ModelError(f"{path}: missing model weights; the model directory is incomplete") from None
    expected = card.files.get(name)
    if expected is None:
        raise ModelError(
            f"{path}: {CARD_FILE} records no checksum for {name}, so the weights cannot be verified; "
            "use a model as `dreamshard train` or `pretrain` saved it (its card lists each file's sha256)"
        )
    if _sha(data) != expected:
        raise ModelError(f"{path}: checksum differs from {CARD_FILE} (corrupt or partially written model)")
    try:
        with warnings.catch_warnings():  # torch warns (several lines) before some failures: the error says it
            warnings.simplefilter("ignore")
            state = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
            module.load_state_dict(state)
    except Exception as e:  # noqa: BLE001 - any unpickling/shape error means an unusable file
        first = _ANSI.sub("", first_line(e))
        raise ModelError(f"{path}: cannot load weights ({first[:200]})") from None
    bad = first_non_finite(module)
    if bad is not None:
        raise ModelError(f"{path}: weight '{bad}' is not finite (a diverged or edited model); retrain it")


def load_model(directory: Path | None, require_policy: bool = True) -> LoadedModel:
    """Load a model directory (None: the model shipped in the package); ModelError (one line) if missing,
    corrupt or incompatible."""
    directory = PACKAGED_DIR if directory is None else Path(directory)
    card = load_card(directory)
    cost_net = CostEnsemble(card.cost_spec, card.ensemble_size)
    _load_state(directory, COST_FILE, card, cost_net)
    cost_net.eval()
    policy = None
    if card.policy_spec is not None:
        policy = Policy(card.policy_spec)
        _load_state(directory, POLICY_FILE, card, policy)
        policy.eval()
    elif require_policy:
        raise ModelError(f"model in {directory} has a cost net but no policy: run `dreamshard train-policy`")
    return LoadedModel(card=card, cost_net=cost_net, policy=policy, directory=directory)


class _HasSpec(Protocol):
    spec: Any


N = TypeVar("N", bound=_HasSpec)


def warm_start(init: N | None, spec: Any, build: Callable[[Any], N], what: str) -> N:
    """`init` if given and built with `spec` (ModelError otherwise), else a fresh `build(spec)`."""
    if init is None:
        return build(spec)
    if init.spec != spec:
        raise ModelError(f"{what} architecture {init.spec} differs from config {spec}; retrain from scratch")
    return init
