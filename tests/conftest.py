"""Shared fixtures. `seaweed` starts one real SeaweedFS S3 gateway (weed mini) per test session."""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any, NamedTuple

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


#: Where the suite keeps each test file's measured seconds (pytest's cache: .pytest_cache/v/dreamshard/...).
DURATIONS_KEY = "dreamshard/file_seconds"


#: The files' seconds as last recorded on a 2-core machine (`make test-seconds` rewrites it from pytest's cache): what
#: a clean clone, which has no cache, schedules by. Without it CI handed the 3-minute Prefect file to a worker 2
#: minutes in, and the other worker sat idle for the last minute.
RECORDED_SECONDS = Path(__file__).with_name("file_seconds.json")


def write_recorded_seconds(cache_dir: Path = ROOT / ".pytest_cache") -> None:
    """RECORDED_SECONDS from the files' seconds in pytest's cache (`make test-seconds`, after a full run)."""
    stored = json.loads((cache_dir / "v" / DURATIONS_KEY).read_text())
    RECORDED_SECONDS.write_text(json.dumps({k: round(v, 1) for k, v in sorted(stored.items())}, indent=0) + "\n")


def _file_seconds(config: pytest.Config) -> dict[str, float]:
    """Each test file's seconds: the recorded ones, updated by the runs in pytest's cache where there are any."""
    recorded = json.loads(RECORDED_SECONDS.read_text()) if RECORDED_SECONDS.exists() else {}
    cache = getattr(config, "cache", None)
    stored = cache.get(DURATIONS_KEY, {}) if cache is not None else {}
    merged = {**recorded, **(stored if isinstance(stored, dict) else {})}
    return {k: float(v) for k, v in merged.items()}


#: The files that use the session's Prefect server (`prefect_api`): `--dist loadfile` keeps a file on one worker, and
#: these share one (`pytest_xdist_make_scheduler`), which starts the server once (9 s of CPU on 2 cores) instead of
#: each worker starting its own.
PREFECT_SERVER_FILES = frozenset({"tests/test_orchestrator_integration.py", "tests/test_flows_operations.py"})


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Run `timing` tests first: the session-scoped SeaweedFS and Prefect servers keep working in the
    background once started, and on 2 cores that load skews wall-clock comparisons. Then the files by their
    measured seconds, longest first, so the two xdist workers (`--dist loadfile` gives each file to one worker)
    finish together; a file never measured keeps its place. The sort is stable: the order within a file is
    always kept."""
    seconds = _file_seconds(config)
    items.sort(key=lambda item: (item.get_closest_marker("timing") is None, -seconds.get(item.path.name, 0.0)))


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """`--dist loadfile`, with PREFECT_SERVER_FILES one unit of work (xdist's `loadgroup` marks do not reach the
    scheduler under pytest 9: xdist renames `item._nodeid`, which pytest 9 no longer reads)."""
    if config.getoption("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class FileScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            return "prefect-server" if path in PREFECT_SERVER_FILES else path

    return FileScheduling(config, log)


class _Durations:
    """Adds up the seconds of each test file's setup, call and teardown; writes them to pytest's cache at the end."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        name = Path(report.location[0]).name
        self.seconds[name] = self.seconds.get(name, 0.0) + report.duration

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        cache = getattr(session.config, "cache", None)
        if cache is None or not self.seconds:
            return
        merged = _file_seconds(session.config)
        merged.update({name: round(s, 2) for name, s in self.seconds.items()})
        cache.set(DURATIONS_KEY, merged)


def pytest_configure(config: pytest.Config) -> None:
    """Measure the files' seconds in the process that sees every report (the xdist controller, or the only one);
    a run narrowed by -k measures parts of files, so it records nothing."""
    if not os.environ.get("PYTEST_XDIST_WORKER") and not config.option.keyword:
        config.pluginmanager.register(_Durations(), "dreamshard-file-durations")


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
        sw.stop(data_dir, grace_s=0)  # its data is the session's tmp: no clean stop needed


def s3_environment(mp: pytest.MonkeyPatch, seaweed: SeaweedS3, home: Path) -> SeaweedS3:
    """`seaweed`'s AWS_* / DREAMSHARD_S3_ENDPOINT set through `mp`, isolated from ~/.aws (no config or credentials
    files: `home` holds none): for a fixture of any scope."""
    for var in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"):
        mp.delenv(var, raising=False)
    mp.setenv("AWS_CONFIG_FILE", str(home / "no-aws-config"))
    mp.setenv("AWS_SHARED_CREDENTIALS_FILE", str(home / "no-aws-credentials"))
    mp.setenv("AWS_EC2_METADATA_DISABLED", "true")
    for k, v in seaweed.env().items():
        mp.setenv(k, v)
    return seaweed


@pytest.fixture
def s3_env(seaweed: SeaweedS3, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> SeaweedS3:
    """`seaweed` plus AWS_* / DREAMSHARD_S3_ENDPOINT in the environment (isolated from ~/.aws)."""
    return s3_environment(monkeypatch, seaweed, tmp_path)


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
