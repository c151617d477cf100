"""A team's own Python: the module a ``--model pkg.mod:build`` or a ``--constraints file.py`` names (docs/torchrec.md).

`import_user_module` imports ``path/to/file.py`` (by path) or ``pkg.mod`` (with importlib); any failure of the
user's code is one ConfigError line naming the option and the exception. Only for files the user trusts: importing
runs them.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

from dreamshard.errors import ConfigError, first_line


def import_user_module(target: str, what: str) -> ModuleType:
    """The module `target` names: a ``.py`` file path, else a dotted module name. `what` names the option in the
    one-line ConfigError (e.g. ``--model 'x.py:build'``). No bytecode is written beside the user's files (a
    command that reads a team's model leaves its folder as it was)."""
    writes = sys.dont_write_bytecode
    sys.dont_write_bytecode = True
    try:
        return _import(target, what)
    finally:
        sys.dont_write_bytecode = writes


def _import(target: str, what: str) -> ModuleType:
    try:
        if target.endswith(".py"):
            path = Path(target)
            if not path.is_file():
                raise ConfigError(f"{what}: file {path} not found")
            mod_name = f"_dreamshard_user_{abs(hash(str(path.resolve())))}"
            spec = importlib.util.spec_from_file_location(mod_name, path)
            if spec is None or spec.loader is None:
                raise ConfigError(f"{what}: {path} is not a Python file")
            module = importlib.util.module_from_spec(spec)
            sys.modules[mod_name] = module  # dataclasses resolve annotations through sys.modules
            spec.loader.exec_module(module)
            return module
        return importlib.import_module(target)
    except ConfigError:
        raise
    except SystemExit as e:  # the user's code ended the process while importing
        raise ConfigError(f"{what}: importing {target} called sys.exit({e.code!r})") from None
    except Exception as e:  # the user's code: any failure to import it
        raise ConfigError(f"{what}: cannot import {target} ({type(e).__name__}: {first_line(e)})") from None
