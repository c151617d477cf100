"""Reading a torch.distributed.checkpoint (DCP) checkpoint without running code it carries (docs/torchrec.md,
"Checkpoints are read, never run").

DCP reads a checkpoint's ``.metadata`` with ``pickle.load`` and its non-tensor entries with ``torch.load(...,
weights_only=False)``: a checkpoint is code. `SafeReader` reads ``.metadata`` with `MetadataUnpickler`, which
builds only DCP's metadata classes and the types a tensor's description needs (``torch.Size``, dtypes, layouts,
memory formats, a path) and refuses any other global in one line naming it; `SafeLoadPlanner` reads the
non-tensor entries with ``weights_only=True``. ``allow_pickle=True`` (``--allow-pickle``) reads them as DCP does:
trusted checkpoints only.
"""

from __future__ import annotations

import io
import pickle
import re
from pathlib import Path
from typing import Any

import torch
from torch.distributed.checkpoint import FileSystemReader
from torch.distributed.checkpoint._traverse import set_element
from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner
from torch.distributed.checkpoint.metadata import Metadata, StorageMeta
from torch.distributed.checkpoint.planner import ReadItem

from dreamshard.errors import CheckpointError, first_line

_METADATA = "torch.distributed.checkpoint.metadata"
#: The globals a DCP ``.metadata`` is built from (torch 2.13): DCP's metadata classes and the types a tensor's
#: description holds. Nothing here runs code when called with any arguments.
ALLOWED_GLOBALS: frozenset[tuple[str, str]] = frozenset(
    {
        *(
            (_METADATA, name)
            for name in (
                "Metadata",
                "TensorStorageMetadata",
                "BytesStorageMetadata",
                "ChunkStorageMetadata",
                "TensorProperties",
                "MetadataIndex",
                "StorageMeta",
                "_MEM_FORMAT_ENCODING",
            )
        ),
        ("torch.distributed.checkpoint.filesystem", "_StorageInfo"),
        ("torch", "Size"),
        ("torch.serialization", "_get_layout"),
        ("pathlib", "PosixPath"),
        ("pathlib", "PurePosixPath"),
        ("pathlib", "WindowsPath"),
        ("pathlib", "PureWindowsPath"),
        ("collections", "OrderedDict"),
    }
)
_TORCH_TYPES = (torch.dtype, torch.layout, torch.memory_format)
PICKLE_HINT = "pass --allow-pickle (allow_pickle=True) only for a checkpoint you trust"


class UnsafePickleError(CheckpointError):
    """A checkpoint's pickle names a global that DCP's metadata never holds: it may be code, and it was not run."""


class MetadataUnpickler(pickle.Unpickler):
    """An unpickler that builds DCP metadata only (`ALLOWED_GLOBALS`, torch's dtypes, layouts, memory formats)."""

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in ALLOWED_GLOBALS or (
            module == "torch" and isinstance(getattr(torch, name, None), _TORCH_TYPES)
        ):
            return super().find_class(module, name)
        raise UnsafePickleError(f"{module}.{name}")


def load_metadata(data: bytes, where: str) -> Metadata:
    """The Metadata pickled in `data` (a ``.metadata`` file's bytes), built by `MetadataUnpickler`. CheckpointError
    (one line) naming `where` and the refused global, or what is wrong with the file."""
    try:
        meta = MetadataUnpickler(io.BytesIO(data)).load()
    except UnsafePickleError as e:
        raise UnsafePickleError(
            f"{where}: it names {e}, which a DCP checkpoint's metadata never holds; a pickle is code, so it was "
            f"not read: {PICKLE_HINT}"
        ) from None
    except Exception as e:  # a truncated or corrupt pickle
        raise CheckpointError(f"{where}: unreadable metadata ({type(e).__name__}: {first_line(e)})") from None
    if not isinstance(meta, Metadata):
        raise CheckpointError(f"{where}: holds a {type(meta).__name__}, not DCP's Metadata")
    return meta


class SafeReader(FileSystemReader):
    """DCP's FileSystemReader reading ``.metadata`` through `load_metadata` (unless `allow_pickle`)."""

    def __init__(self, path: str | Path, allow_pickle: bool = False) -> None:
        super().__init__(str(path))
        self.allow_pickle = allow_pickle

    def read_metadata(self, *args: Any, **kwargs: Any) -> Metadata:
        if self.allow_pickle:
            return super().read_metadata(*args, **kwargs)
        rank = kwargs.get("rank")
        name = ".metadata" if rank is None else f"__{rank}.metadata"
        path = Path(str(self.path)) / name
        try:
            data = path.read_bytes()
        except OSError as e:
            raise CheckpointError(f"checkpoint {self.path}: unreadable metadata ({first_line(e)})") from None
        meta = load_metadata(data, f"checkpoint {self.path}: {name}")
        storage = getattr(meta, "storage_meta", None) or StorageMeta()
        storage.load_id = self.load_id
        meta.storage_meta = storage
        return meta


class SafeLoadPlanner(DefaultLoadPlanner):
    """DCP's default load planner reading non-tensor entries with ``torch.load(weights_only=True)`` (unless
    `allow_pickle`)."""

    def __init__(self, allow_pickle: bool = False) -> None:
        super().__init__()
        self.allow_pickle = allow_pickle

    def load_bytes(self, read_item: ReadItem, value: io.BytesIO) -> None:
        if self.allow_pickle:
            return super().load_bytes(read_item, value)
        fqn = read_item.dest_index.fqn
        try:
            obj = torch.load(value, weights_only=True)
        except pickle.UnpicklingError as e:
            found = re.search(r"Unsupported global: GLOBAL (\S+)", str(e))
            what = f"names {found.group(1)}" if found else first_line(e)
            raise UnsafePickleError(
                f"checkpoint entry '{fqn}': {what}, which torch.load(weights_only=True) does not build; {PICKLE_HINT}"
            ) from None
        if self.flatten_state_dict:
            set_element(self.original_state_dict, self.mappings[fqn], obj)
        else:
            self.state_dict[fqn] = obj
        return None
