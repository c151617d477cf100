"""Loading and saving value objects as JSON / YAML / JSONL files: validated on the way in (errors name the file,
the table and the field), written atomically, measurements appended and resumed (docs/architecture/stores.md, "Trust
boundary")."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from dreamshard.errors import DreamshardError, InputFileError, InventoryError, PlanError, first_line
from dreamshard.parsing import DuplicateKeyError, NestingError, load_json, load_yaml
from dreamshard.values import Inventory, Measurement, Plan
from dreamshard.values.names import check_inventory_names

M = TypeVar("M", bound=BaseModel)


def _read_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


_UMASK = _read_umask()


def describe_validation_error(err: ValidationError, data: Any = None) -> str:
    """First error of a pydantic ValidationError as 'tables[3] (table 'foo').embedding_dim: message'."""
    first = err.errors()[0]
    loc = first.get("loc", ())
    parts: list[str] = []
    table_label = ""
    for i, p in enumerate(loc):
        if isinstance(p, int):
            parts[-1:] = [f"{parts[-1] if parts else ''}[{p}]"]
            if loc[:i] == ("tables",) and isinstance(data, dict):
                tables = data.get("tables")
                if isinstance(tables, list) and p < len(tables) and isinstance(tables[p], dict):
                    name = tables[p].get("name")
                    if name:
                        table_label = f" (table '{name}')"
                        parts[-1] += table_label
        else:
            parts.append(str(p))
    where = ".".join(parts) if parts else "input"
    msg = str(first.get("msg", "invalid"))
    msg = msg.removeprefix("Value error, ")
    return f"{where}: {msg}"


def read_text(p: Path) -> str:
    """A regular file's text, with unreadable / non-UTF-8 files and anything that is not a regular file (a
    directory, a FIFO that would block the reader, a device) as one-line InputFileErrors. Newlines are read as
    Python's text mode reads them (universal newlines)."""
    return read_bytes_and_text(p)[1].replace("\r\n", "\n").replace("\r", "\n")


def read_bytes_and_text(p: Path) -> tuple[bytes, str]:
    """A regular file's bytes (read once) and their UTF-8 text as read (newlines untranslated), with `read_text`'s
    one-line errors."""
    if p.exists() and not p.is_file():
        raise InputFileError(f"{p}: not a regular file")
    try:
        raw = p.read_bytes()
    except OSError as e:
        raise InputFileError(f"cannot read {p}: {e.strerror}") from None
    try:
        return raw, raw.decode()
    except UnicodeDecodeError:
        raise InputFileError(f"{p}: not a UTF-8 text file") from None


def read_structured(path: str | Path) -> Any:
    """Read a JSON or YAML file (by suffix; YAML also parses JSON)."""
    return read_structured_digest(path)[0]


def read_structured_digest(path: str | Path) -> tuple[Any, str]:
    """`read_structured`, and the sha256 of the very bytes parsed (evidence that names the file read)."""
    p = Path(path)
    if not p.exists():
        raise InputFileError(f"file not found: {p}")
    if p.is_dir():
        raise InputFileError(f"expected a file, got a directory: {p}")
    raw, text = read_bytes_and_text(p)
    try:
        data = load_json(text) if p.suffix.lower() == ".json" else load_yaml(text)
    except (DuplicateKeyError, NestingError) as e:
        raise InputFileError(f"{p}: {e}") from None
    except (json.JSONDecodeError, yaml.YAMLError) as e:
        first = first_line(e)
        raise InputFileError(f"{p}: not valid JSON/YAML ({first})") from None
    return data, hashlib.sha256(raw).hexdigest()


def atomic_write_text(path: str | Path, text: str) -> Path:
    """Write text to path via a temp file + rename, so readers never see a partial file."""
    return atomic_write_bytes(path, text.encode())


def atomic_write_bytes(path: str | Path, data: bytes) -> Path:
    """Write bytes to path via a temp file in the same directory + fsync + rename."""
    p = Path(path)
    if p.is_dir():
        raise InputFileError(f"cannot write {p}: it is a directory")
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=p.parent)
    except OSError as e:
        raise InputFileError(f"cannot write {p}: {e.strerror}") from None
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o666 & ~_UMASK)  # mkstemp creates 0600; give the file the usual permissions
        os.replace(tmp, p)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return p


#: libyaml's safe dumper where PyYAML was built with it (the same text as PyYAML's own, several times faster: large
#: inventories are written in seconds), else PyYAML's.
_SAFE_DUMPER: Any = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


def model_yaml(model: BaseModel) -> str:
    """A model as YAML text, fields in declaration order (what save_inventory writes)."""
    return yaml.dump(model.model_dump(mode="json"), Dumper=_SAFE_DUMPER, sort_keys=False)


def model_json(model: BaseModel) -> str:
    """A model as indented JSON text (what dump_model writes to a .json file)."""
    return json.dumps(model.model_dump(mode="json"), indent=2) + "\n"


def dump_model(model: BaseModel, path: str | Path) -> Path:
    """Save a model as YAML (.yaml/.yml) or JSON (anything else)."""
    p = Path(path)
    return atomic_write_text(p, model_yaml(model) if p.suffix.lower() in {".yaml", ".yml"} else model_json(model))


def validate_mapping(data: Any, cls: type[M], error: type[DreamshardError], where: str) -> M:
    """Build `cls` from parsed data that must be a mapping; failures are one `error` line prefixed by `where`."""
    if not isinstance(data, dict):
        raise error(f"{where}: expected a mapping")
    try:
        return cls.model_validate(data)
    except ValidationError as e:
        raise error(f"{where}: {describe_validation_error(e, data)}") from None


def _load(path: str | Path, cls: type[M], error: type[DreamshardError], what: str) -> M:
    return validate_mapping(read_structured(path), cls, error, f"{what} {path}")


def load_inventory(path: str | Path) -> Inventory:
    """An inventory file, validated: fields, types, bounds, and names in the safe set (values.names)."""
    return check_inventory_names(_load(path, Inventory, InventoryError, "inventory"), f"inventory {path}")


#: The names an inventory file may have (YAML or JSON).
INVENTORY_SUFFIXES = frozenset({".yaml", ".yml", ".json"})


def save_inventory(inv: Inventory, path: str | Path) -> Path:
    """YAML (.yaml/.yml) or JSON (.json); any other name is refused before anything is written."""
    if Path(path).suffix.lower() not in INVENTORY_SUFFIXES:
        raise InputFileError(f"cannot write inventory {path}: name it .yaml, .yml or .json")
    return dump_model(inv, path)


def load_plan(path: str | Path) -> Plan:
    return _load(path, Plan, PlanError, "plan")


def save_plan(plan: Plan, path: str | Path) -> Path:
    return dump_model(plan, path)


def _not_measurements(p: Path, lineno: int, why: str) -> InputFileError:
    return InputFileError(
        f"{p}:{lineno}: not a measurement record ({why}): {p} is not a measurements file; nothing was changed: "
        f"write to another file or move that one aside"
    )


#: How every measurement record starts (`Measurement.model_dump_json`: `measurement_id` is its first field).
_RECORD_START = re.compile(rb'\s*\{\s*"measurement_id"\s*:')


def _partial_record(line: bytes, after_measurements: bool) -> bool:
    """THE rule for an invalid last line without its newline: a killed writer's partial record (ignored by
    `iter_measurements`, cut by `append_measurement`) when the lines before it are measurements, or, with none
    before it, when it is the unfinished start of a record (a writer killed during the file's first record: it
    opens like one and is not complete JSON). Anything else (a one-line plan, minified JSON, any other file) is
    not a measurements file: refused, never read as empty nor modified."""
    if after_measurements:
        return True
    if not _RECORD_START.match(line):
        return False
    try:
        json.loads(line)
    except ValueError:
        return True
    return False


def iter_measurements(path: str | Path) -> Iterator[Measurement]:
    """Stream records from a JSONL file; any bad line is a one-line InputFileError naming it, except a partial
    last record (`_partial_record`), which is ignored."""
    p = Path(path)
    if not p.exists():
        raise InputFileError(f"file not found: {p}")
    text = read_text(p)
    lines = text.splitlines()
    seen = False
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            m = Measurement.model_validate_json(line)
        except ValidationError as e:
            if i == len(lines) - 1 and not text.endswith("\n"):
                if _partial_record(line.encode(), seen):
                    return
                raise _not_measurements(p, i + 1, describe_validation_error(e)) from None
            raise InputFileError(f"{p}:{i + 1}: {describe_validation_error(e)}") from None
        seen = True
        yield m


def load_measurements(path: str | Path) -> list[Measurement]:
    return list(iter_measurements(path))


def _is_measurement(line: bytes) -> bool:
    try:
        Measurement.model_validate_json(line)
    except ValidationError:
        return False
    return True


def append_measurement(path: str | Path, m: Measurement) -> None:
    """Append one record as one line and fsync it (crash-safe resume relies on this).

    A last line without its newline is either a complete record (an editor or a copy dropped the newline:
    it is kept and terminated) or a partial write of a killed writer (`_partial_record`: cut off before
    appending); any other file is refused with an InputFileError and left as it is."""
    p = Path(path)
    if p.is_dir():
        raise InputFileError(f"cannot write {p}: it is a directory")
    p.parent.mkdir(parents=True, exist_ok=True)
    if p.exists() and p.stat().st_size > 0:
        with open(p, "rb+") as f:
            f.seek(-1, os.SEEK_END)
            if f.read(1) != b"\n":
                data = p.read_bytes()
                cut = data.rfind(b"\n") + 1
                if _is_measurement(data[cut:]):
                    f.write(b"\n")
                else:
                    head = [line for line in data[:cut].splitlines() if line.strip()]
                    if not all(_is_measurement(line) for line in head) or not _partial_record(data[cut:], bool(head)):
                        raise _not_measurements(
                            p,
                            data[:cut].count(b"\n") + 1,
                            "an unterminated last line that is no partial measurement record",
                        )
                    f.truncate(cut)
    with open(p, "a") as f:
        f.write(m.model_dump_json() + "\n")
        f.flush()
        os.fsync(f.fileno())


def same_file(a: Path, b: Path) -> bool:
    """Same resolved path, or (both existing) the same inode: symlinks and hard links count (False for a path
    that cannot be read: its reader names the problem)."""
    try:
        return a.resolve() == b.resolve() or os.path.samefile(a, b)
    except OSError:
        return False


def read_checked_inventory(
    inputs: Mapping[str, str | Path | None], inventory: Path, outputs: Mapping[str, str | Path | None]
) -> Inventory:
    """The inventory at `inventory` (`--inventory`), read once no output is an input (`check_outputs`)."""
    check_outputs({**inputs, "--inventory": inventory}, outputs)
    return load_inventory(inventory)


def check_outputs(inputs: Mapping[str, str | Path | None], outputs: Mapping[str, str | Path | None]) -> None:
    """Refuse (InputFileError, before anything is written) an output that is the same file as an input or as
    another output. Keys are the option names shown to the user ("--out", "--inventory")."""
    ins = [(k, Path(v)) for k, v in inputs.items() if v is not None]
    outs = [(k, Path(v)) for k, v in outputs.items() if v is not None]
    for i, (oname, opath) in enumerate(outs):
        for iname, ipath in ins:
            if same_file(opath, ipath):
                raise InputFileError(
                    f"{oname} {opath} is the same file as {iname} {ipath}; nothing was written: choose another "
                    f"output path"
                )
        for oname2, opath2 in outs[:i]:
            if same_file(opath, opath2):
                raise InputFileError(f"{oname} {opath} and {oname2} {opath2} are the same file; choose two paths")
