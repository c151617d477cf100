"""A package's re-exports, each imported when first asked for (PEP 562 module `__getattr__`; docs/architecture/index.md,
"Layers": light commands start without torch).

Importing a submodule runs its package's `__init__.py` first; an `__init__` that imported every submodule would load
the package's measuring code, and torch, for any one of its names. A package built with `lazy_exports` imports a
submodule only when one of its names is used, so `from dreamshard.gate import X` loads X's module alone.
"""

from __future__ import annotations

import importlib
import pkgutil
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any


def lazy_exports(
    package: str, exports: Mapping[str, Sequence[str]]
) -> tuple[Callable[[str], Any], Callable[[], list[str]], list[str]]:
    """`(__getattr__, __dir__, names)` for `package`, whose `exports` maps a module (a submodule relative to the
    package, e.g. ".rule", or an absolute name, e.g. "dreamshard.config.publish") to the names it re-exports
    (`names`: all of them, for `__all__`). A name is imported from its module on first use and kept in the
    package."""
    if any(isinstance(names, str) for names in exports.values()):
        raise TypeError(f"{package}: each submodule's exports are a sequence of names, not one string")
    where = {
        name: f"{package}{module}" if module.startswith(".") else module
        for module, names in exports.items()
        for name in names
    }
    # importing a submodule binds its name in the package, over a re-exported name equal to it
    clash = sorted(set(where) & {m.name for m in pkgutil.iter_modules(sys.modules[package].__path__)})
    if clash:
        raise ImportError(f"{package} re-exports '{clash[0]}', the name of one of its submodules: rename one")

    def __getattr__(name: str) -> Any:
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        return sorted({*where, *vars(sys.modules[package])})

    return __getattr__, __dir__, list(where)


class LazyModule:
    """Module `name` as a command module holds it: imported when one of its attributes is first read, for a
    command module whose commands need torch while listing them (or running a light one) must not. A stand-in,
    never entered in sys.modules: torch's import walks sys.modules (inspect.getmodule), and a lazily executed
    module there would be imported in the middle of torch's own import (importlib.util.LazyLoader fails so)."""

    def __init__(self, name: str) -> None:
        object.__setattr__(self, "_name", name)

    def __getattr__(self, attr: str) -> Any:
        return getattr(importlib.import_module(object.__getattribute__(self, "_name")), attr)

    def __setattr__(self, attr: str, value: Any) -> None:  # a test's monkeypatch reaches the module itself
        setattr(importlib.import_module(object.__getattribute__(self, "_name")), attr, value)

    def __repr__(self) -> str:
        return f"<lazy module {object.__getattribute__(self, '_name')!r}>"


def lazy_module(name: str) -> Any:
    """`LazyModule(name)`: the module, imported on first use."""
    return LazyModule(name)
