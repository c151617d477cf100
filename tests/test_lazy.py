"""Packages whose re-exports load on first use, and command modules whose use cases do (dreamshard/lazy.py)."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from dreamshard.lazy import lazy_exports

ROOT = Path(__file__).resolve().parents[1]
LAZY_PACKAGES = ("dreamshard.gate", "dreamshard.evaluation", "dreamshard.profiling")


@pytest.mark.parametrize("package", LAZY_PACKAGES)
def test_every_name_a_lazy_package_exports_resolves_to_its_submodules_object(package: str) -> None:
    pkg = importlib.import_module(package)
    for name in pkg.__all__:
        value = getattr(pkg, name)
        assert value is not None and not isinstance(value, ModuleType), name
        assert name in dir(pkg)
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        _ = pkg.nope


def test_a_name_is_imported_once_and_kept_and_a_single_string_is_refused() -> None:
    importlib.import_module("dreamshard.gate")  # as when its __init__ calls lazy_exports
    getter, lister, names = lazy_exports("dreamshard.gate", {".bounds": ("ratio_bound",)})
    first = getter("ratio_bound")
    from dreamshard.gate.bounds import ratio_bound

    assert first is ratio_bound and "ratio_bound" in lister() and names == ["ratio_bound"]
    with pytest.raises(TypeError, match="not one string"):
        lazy_exports("dreamshard.gate", {".fallback": "fallback_plan"})  # ("fallback_plan") without the comma
    # a name that is also a submodule's: importing the submodule would bind the module there, over the name
    with pytest.raises(ImportError, match="'bounds', the name of one of its submodules"):
        lazy_exports("dreamshard.gate", {".core": ("bounds",)})


def _fresh(code: str) -> str:
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert res.returncode == 0, res.stderr
    return res.stdout.strip()


def test_reading_the_settings_and_the_gate_config_loads_no_torch_and_a_use_case_loads_it_when_used() -> None:
    assert (
        _fresh(
            "import sys\nfrom dreamshard.config.settings import resolve\nfrom dreamshard.gate import PublishConfig\n"
            "resolve(None)\nprint('torch' in sys.modules)"
        )
        == "False"
    )
    code = (
        "import sys\nimport dreamshard.cli.plan_cmd as c\nbefore = 'torch' in sys.modules\n"
        "c.plan_uc.PlanRequest\nprint(before, 'torch' in sys.modules)"
    )
    assert _fresh(code) == "False True"


def test_stopping_a_worker_and_running_a_simulated_batch_load_no_torch() -> None:
    """`stop-prefect.sh` runs dreamshard_flows.shutdown twice per worker, and a worker starts a process per
    profiling batch: neither loads torch unless the batch times on a device (1.2 s of CPU each, measured)."""
    code = (
        "import sys\nimport dreamshard_flows.shutdown, dreamshard_flows.batch_flow, dreamshard_flows.fanout\n"
        "from dreamshard.profiling.settings import ProfileConfig\nfrom dreamshard.profiling.corpus import hardware_id\n"
        "oracle = ProfileConfig(backend='simulator').oracle()\nkey = hardware_id('cpu')\n"
        "print('torch' in sys.modules)\n"
        "ProfileConfig(backend='cpu').oracle()\nprint('torch' in sys.modules)\n"
        "import torch\nprint(key.endswith(f'torch {torch.__version__}'))"  # the corpus's keys are as before
    )
    assert _fresh(code).split() == ["False", "True", "True"]
