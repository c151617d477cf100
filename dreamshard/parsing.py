"""Text to data: the one safe YAML parser and the one JSON parser every file and stored document goes through
(dreamshard.documents reads files with them). Both refuse a mapping that repeats a key and a document nested deeper
than MAX_NESTING, each as a ValueError naming what is wrong."""

from __future__ import annotations

import json
import re
from typing import Any

import yaml

#: libyaml's safe loader where PyYAML was built with it (the same documents, several times faster: nearly every
#: command reads an inventory), else PyYAML's own.
_SAFE_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class DuplicateKeyError(ValueError):
    """A mapping in a document names one key twice (a YAML/JSON parser would silently keep the last)."""


class _UniqueKeyLoader(_SAFE_LOADER):  # libyaml's loader or PyYAML's, chosen at import time
    """The safe loader, refusing a mapping that repeats a key."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            if not isinstance(key, (str, int, float, bool)):
                continue  # an unhashable key: the base constructor reports it
            if key in seen:
                line = key_node.start_mark.line + 1
                raise DuplicateKeyError(f"duplicate key '{str(key)[:64]}' (line {line})")
            seen.add(key)
        return dict(super().construct_mapping(node, deep=deep))


#: The deepest a document may nest. An inventory, a params file or a plan nests a handful of levels; Python's parsers
#: recurse once per level and stop at the interpreter's recursion limit with a RecursionError.
MAX_NESTING = 100


class NestingError(ValueError):
    """A document nests lists or mappings deeper than MAX_NESTING levels."""

    def __init__(self) -> None:
        super().__init__(f"lists or mappings nested deeper than {MAX_NESTING} levels")


def _check_nesting(data: Any) -> Any:
    """`data` (parsed), or NestingError when it nests deeper than MAX_NESTING (walked without recursion)."""
    stack: list[tuple[Any, int]] = [(data, 0)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, (dict, list)):
            if depth >= MAX_NESTING:
                raise NestingError
            children = node.values() if isinstance(node, dict) else node
            stack.extend((child, depth + 1) for child in children)
    return data


def _unique_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """json.loads' object hook refusing a repeated key."""
    out: dict[str, Any] = {}
    for k, v in pairs:
        if k in out:
            raise DuplicateKeyError(f"duplicate key '{k[:64]}'")
        out[k] = v
    return out


#: libyaml's own refusal of a document nested past its limit (its context or problem text).
_YAML_TOO_DEEP = re.compile(r"increasing (flow|block) level|maximum nesting depth")


def load_yaml(text: str) -> Any:
    """`yaml.safe_load(text)` (libyaml's loader when there is one, `_SAFE_LOADER`), refusing repeated keys
    (DuplicateKeyError) and nesting deeper than MAX_NESTING (NestingError)."""
    try:
        return _check_nesting(yaml.load(text, Loader=_UniqueKeyLoader))  # a safe loader either way
    except RecursionError:
        raise NestingError from None
    except yaml.MarkedYAMLError as e:
        if _YAML_TOO_DEEP.search(f"{e.context} {e.problem}"):
            raise NestingError from None
        raise


def load_json(text: str | bytes) -> Any:
    """`json.loads(text)`, refusing repeated keys (DuplicateKeyError) and nesting deeper than MAX_NESTING
    (NestingError)."""
    try:
        return _check_nesting(json.loads(text, object_pairs_hook=_unique_pairs))
    except RecursionError:
        raise NestingError from None
