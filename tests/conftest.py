"""Shared fixtures. `seaweed` starts one real SeaweedFS S3 gateway (weed mini) per test session."""

from __future__ import annotations

import importlib.util
import os
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import NamedTuple

import pytest

ROOT = Path(__file__).resolve().parents[1]

# Telemetry off for every tool the tests start.
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("DO_NOT_TRACK", "1")
os.environ.setdefault("DVC_NO_ANALYTICS", "1")

# Under pytest-xdist (`make test` runs the suite on 2 workers) each worker keeps torch to one thread, and so do
# the processes it starts: two workers each spreading over every core cost a 10 s test 100 s. The profiling paths
# that time kernels set their own thread count (profiling.base.pinned_threads) and run in the serial first step.
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ["OMP_NUM_THREADS"] = "1"
    import torch

    torch.set_num_threads(1)


#: The longest test files (seconds of one `make test` on 2 cores), handed to the xdist workers first: `--dist
#: loadfile` gives each file to one worker, and a 335 s file started late leaves the other worker idle for minutes
#: (the Makefile turns off xdist's own reorder, which puts files with the most tests first, not the longest).
LONGEST_FILES = (
    "test_orchestrator_integration.py",  # 335 s
    "test_dvc_pipeline.py",  # 60
    "test_workspace.py",  # 35
    "test_hardening_types.py",  # 31
    "test_fuzz_cli.py",  # 28
    "test_import_rules.py",  # 24
    "test_torchrec_dmp.py",  # 22
    "test_torchrec_model.py",  # 21
    "test_s3_integration.py",
)  # 21


def _order(item: pytest.Item) -> tuple[bool, int]:
    name = item.path.name
    return item.get_closest_marker("timing") is None, LONGEST_FILES.index(name) if name in LONGEST_FILES else len(
        LONGEST_FILES
    )


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Run `timing` tests first: the session-scoped SeaweedFS and Prefect servers keep working in the
    background once started, and on 2 cores that load skews wall-clock comparisons. Then the longest files
    (`LONGEST_FILES`), so the two workers finish together; the order within a file is kept (stable sort)."""
    items.sort(key=_order)


def load_infra_module(name: str) -> ModuleType:
    """Import infra/<name>.py (infra/ is scripts, not a package)."""
    path = ROOT / "infra" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"infra_{name}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve annotations through sys.modules
    spec.loader.exec_module(module)
    return module


class SeaweedS3(NamedTuple):
    """A running S3 gateway: unpacks as (endpoint_url, access_key, secret_key, bucket)."""

    endpoint_url: str
    access_key: str
    secret_key: str
    bucket: str

    def env(self) -> dict[str, str]:
        return {
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
            "AWS_DEFAULT_REGION": "us-east-1",
            "DREAMSHARD_S3_ENDPOINT": self.endpoint_url,
        }


@pytest.fixture(scope="session")
def seaweed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SeaweedS3]:
    """One SeaweedFS on 127.0.0.1, free ports, a tmp data dir and fresh random credentials."""
    sw = load_infra_module("seaweedfs")
    data_dir = tmp_path_factory.mktemp("seaweedfs")
    inst = sw.start(data_dir, bucket="dreamshard-test", s3_port=0, timeout=60)
    try:
        yield SeaweedS3(inst.endpoint_url, inst.access_key, inst.secret_key, inst.bucket)
    finally:
        sw.stop(data_dir)


@pytest.fixture
def s3_env(seaweed: SeaweedS3, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> SeaweedS3:
    """`seaweed` plus AWS_* / DREAMSHARD_S3_ENDPOINT in the environment (isolated from ~/.aws)."""
    for var in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-aws-credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    for k, v in seaweed.env().items():
        monkeypatch.setenv(k, v)
    return seaweed


@pytest.fixture
def s3_prefix() -> str:
    """A fresh key prefix so S3 tests sharing the session bucket never see each other's objects."""
    return f"t-{uuid.uuid4().hex[:10]}"


@pytest.fixture(scope="session")
def prefect_api() -> Iterator[str]:
    """One temporary Prefect server (SQLite) for every flow test in the session; yields its API URL.

    Added by the orchestration tests (flows/); shared because a server start costs ~20 s on 2 cores.
    """
    from prefect.settings import PREFECT_API_URL
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=120):
        yield str(PREFECT_API_URL.value())
