"""Against a real SeaweedFS S3 gateway (session fixture): publish, read back, current, rollback,
concurrent publishers, credential / endpoint / bucket errors, CLI publish, and a DVC push/pull round trip."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import boto3
import pytest
from conftest import SeaweedS3
from store_helpers import approve, make_plan, publish_or_reject, sibling, world
from test_store_concurrency import run_threaded_publishers

from dreamshard.cli.app import main
from dreamshard.errors import StoreError
from dreamshard.gate import evaluate_gate
from dreamshard.pipeline.dvc import find_dvc
from dreamshard.store import (
    get_current,
    get_pointer,
    list_plans,
    open_store,
    publish,
    rollback,
    show,
)
from dreamshard.store.keys import parse_key
from dreamshard.store.s3 import S3PlanStore

pytestmark = pytest.mark.integration


def _keys(s3: SeaweedS3, prefix: str) -> list[str]:
    client = boto3.client(
        "s3",
        endpoint_url=s3.endpoint_url,
        aws_access_key_id=s3.access_key,
        aws_secret_access_key=s3.secret_key,
        region_name="us-east-1",
    )
    resp = client.list_objects_v2(Bucket=s3.bucket, Prefix=prefix + "/")
    return sorted(o["Key"] for o in resp.get("Contents", []))


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_publish_read_back_current_rollback(s3_env: SeaweedS3, s3_prefix: str) -> None:
    store = open_store(f"s3://{s3_env.bucket}/{s3_prefix}")  # endpoint from DREAMSHARD_S3_ENDPOINT
    assert isinstance(store, S3PlanStore) and store.endpoint_url == s3_env.endpoint_url
    p1, p2 = make_plan(overall=9.0), make_plan(overall=8.0)
    r1 = publish(store, p1, approve(p1))
    assert get_current(store, "inv") == p1
    publish(store, p2, approve(p2))
    assert get_current(store, "inv") == p2
    keys = _keys(s3_env, s3_prefix)
    assert {
        f"{s3_prefix}/{r1.key}",
        f"{s3_prefix}/{sibling(r1.key, 'checksum')}",
        f"{s3_prefix}/{sibling(r1.key, 'record')}",
    } <= set(keys)
    assert f"{s3_prefix}/plans/inv/current.json" in keys
    assert [r.is_current for r in list_plans(store, "inv")] == [False, True]
    assert rollback(store, "inv").plan_id == p1.plan_id
    assert get_current(store, "inv") == p1
    rollback(store, "inv", to_plan_id=p2.plan_id)
    assert get_current(store, "inv") == p2 and show(store, p1.plan_id) == p1
    # a rejected plan lands under rejected/ and leaves current alone
    bad = make_plan(overall=50.0)
    ref = publish_or_reject(store, bad, evaluate_gate(bad, {"size_greedy": 10.0}, 0.0))
    parsed = parse_key(ref.key)
    assert ref.status == "rejected" and parsed is not None and parsed.status == "rejected"
    assert get_current(store, "inv") == p2


def test_corrupt_object_in_s3_is_detected(s3_env: SeaweedS3, s3_prefix: str) -> None:
    store = open_store(f"s3://{s3_env.bucket}/{s3_prefix}")
    plan = make_plan()
    ref = publish(store, plan, approve(plan))
    store.put_bytes(ref.key, b'{"tampered": true}')
    with pytest.raises(StoreError, match="checksum mismatch") as e:
        get_current(store, "inv")
    assert "\n" not in str(e.value)


def test_concurrent_publishers_on_s3_conditional_put(s3_env: SeaweedS3, s3_prefix: str) -> None:
    run_threaded_publishers(open_store(f"s3://{s3_env.bucket}/{s3_prefix}"), threads=3, per_thread=3)


def test_conditional_put_is_honoured(s3_env: SeaweedS3, s3_prefix: str) -> None:
    store = S3PlanStore(s3_env.bucket, s3_prefix, endpoint_url=s3_env.endpoint_url)
    assert store.put_if("k", b"1", None)
    assert not store.put_if("k", b"2", None)  # If-None-Match: *
    got = store.get_versioned("k")
    assert got is not None
    assert store.put_if("k", b"3", got[1])
    assert not store.put_if("k", b"4", got[1])  # stale ETag
    assert store.get_bytes("k") == b"3" and store._conditional_writes


def test_wrong_credentials_one_line_and_nothing_published(
    s3_env: SeaweedS3, s3_prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for var, bad in (("AWS_SECRET_ACCESS_KEY", "wrong-secret"), ("AWS_ACCESS_KEY_ID", "NOSUCHKEY")):
        with monkeypatch.context() as m:
            m.setenv(var, bad)
            store = open_store(f"s3://{s3_env.bucket}/{s3_prefix}")
            plan = make_plan()
            with pytest.raises(StoreError) as e:
                publish(store, plan, approve(plan))
        msg = str(e.value)
        assert msg.startswith(f"S3 rejected the credentials for endpoint {s3_env.endpoint_url}")
        assert ("SignatureDoesNotMatch" in msg) or ("InvalidAccessKeyId" in msg)
        assert "\n" not in msg and s3_env.secret_key not in msg and bad not in msg
    assert _keys(s3_env, s3_prefix) == []


def test_unreachable_endpoint_one_line(s3_env: SeaweedS3, s3_prefix: str) -> None:
    endpoint = f"http://127.0.0.1:{_closed_port()}"
    store = open_store(f"s3://{s3_env.bucket}/{s3_prefix}", endpoint_url=endpoint)
    plan = make_plan()
    with pytest.raises(StoreError, match=f"cannot reach S3 endpoint {endpoint}") as e:
        publish(store, plan, approve(plan))
    assert "\n" not in str(e.value)
    assert _keys(s3_env, s3_prefix) == []


def test_missing_bucket_one_line_and_not_created(s3_env: SeaweedS3, s3_prefix: str) -> None:
    store = open_store(f"s3://no-such-bucket-{s3_prefix}/plans")
    plan = make_plan()
    with pytest.raises(StoreError) as e:
        publish(store, plan, approve(plan))
    assert str(e.value) == f"bucket 'no-such-bucket-{s3_prefix}' does not exist at endpoint {s3_env.endpoint_url}"
    client = boto3.client("s3", endpoint_url=s3_env.endpoint_url, region_name="us-east-1")
    assert f"no-such-bucket-{s3_prefix}" not in [b["Name"] for b in client.list_buckets()["Buckets"]]


def test_cli_publish_to_s3_exit_codes(
    s3_env: SeaweedS3, s3_prefix: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The gate against S3: the inventory comes from the store's inventory versions (no -i), the costs from
    the comparison; the published plan carries the comparison's figures."""
    from dreamshard.store.inventories import push_inventory

    w = world()
    files = w.write(tmp_path)
    uri = f"s3://{s3_env.bucket}/{s3_prefix}"
    store = open_store(uri)
    args = [
        "plans",
        "publish",
        "--store",
        uri,
        "--comparison",
        str(files["comparison"]),
        "--params",
        str(files["params"]),
    ]
    with pytest.raises(SystemExit) as e:
        main([*args[:2], str(files["good"]), *args[2:]])
    assert e.value.code == 2 and "push it first" in capsys.readouterr().err  # no inventory: nothing trusted
    push_inventory(store, w.inventory)
    for plan_file, code in (("good", 0), ("worse", 1)):
        with pytest.raises(SystemExit) as e:
            main([*args[:2], str(files[plan_file]), *args[2:]])
        assert e.value.code == code
    err = capsys.readouterr().err
    assert "rejected" in err and "does not beat" in err
    current = get_current(store, "inv")
    entry = next(r for r in w.comparison.results if r.plan.plan_id == w.good.plan_id)
    assert current.plan_id == w.good.plan_id and current.measured == entry.plan.measured
    pointer = get_pointer(store, "inv")
    assert pointer is not None and pointer.plan_id == w.good.plan_id


def _git(args: list[str], cwd: Path) -> None:
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@t",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@t",
    }
    subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True)


def _dvc(args: list[str], cwd: Path) -> None:
    proc = subprocess.run([find_dvc(), *args], cwd=cwd, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_dvc_remote_round_trip_through_seaweedfs(s3_env: SeaweedS3, s3_prefix: str, tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(["init", "-q"], repo)
    _dvc(["init", "-q"], repo)
    url = f"s3://{s3_env.bucket}/{s3_prefix}/dvc"
    with pytest.raises(SystemExit) as e:
        main(
            ["remote", "s3", "--name", "seaweed", "--url", url, "--endpoint", s3_env.endpoint_url, "--repo", str(repo)]
        )
    assert e.value.code == 0
    config = (repo / ".dvc" / "config").read_text()
    assert url in config and s3_env.endpoint_url in config
    assert s3_env.access_key not in config and s3_env.secret_key not in config
    data = repo / "data.bin"
    payload = os.urandom(4096) + b"dreamshard"
    data.write_bytes(payload)
    _dvc(["add", "-q", "data.bin"], repo)
    _git(["add", "data.bin.dvc", ".gitignore", ".dvc/config"], repo)
    _git(["commit", "-qm", "data"], repo)
    _dvc(["push", "-q"], repo)
    assert any(k.startswith(f"{s3_prefix}/dvc/") for k in _keys(s3_env, s3_prefix))

    clone = tmp_path / "clone"
    _git(["clone", "-q", str(repo), str(clone)], tmp_path)
    assert not (clone / "data.bin").exists()
    _dvc(["pull", "-q"], clone)
    assert (clone / "data.bin").read_bytes() == payload
    shutil.rmtree(clone / ".dvc" / "cache", ignore_errors=True)


def test_seaweedfs_env_reads_any_data_dir_and_says_when_none_runs(
    seaweed: SeaweedS3, tmp_path_factory: pytest.TempPathFactory, tmp_path: Path
) -> None:
    """`infra/seaweedfs.py env --dir D` prints the exports of the server started from D (not only the default
    folder); a folder with no running server is one line naming it and the --dir to start with, exit 1."""
    script = Path(__file__).resolve().parents[1] / "infra" / "seaweedfs.py"
    running = next(p for p in tmp_path_factory.getbasetemp().glob("seaweedfs*") if (p / "seaweedfs.json").exists())
    out = subprocess.run(
        [sys.executable, str(script), "env", "--dir", str(running)],
        capture_output=True,
        text=True,
        check=False,
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr
    assert f"export DREAMSHARD_S3_ENDPOINT={seaweed.endpoint_url}" in out.stdout or seaweed.endpoint_url in out.stdout
    none = subprocess.run(
        [sys.executable, str(script), "env", "--dir", str(tmp_path / "nowhere")],
        capture_output=True,
        text=True,
        check=False,
        cwd=tmp_path,
    )
    lines = none.stderr.strip().splitlines()
    assert none.returncode == 1 and len(lines) == 1 and "Traceback" not in none.stderr
    assert "no SeaweedFS running from" in lines[0] and f"--dir {tmp_path / 'nowhere'}" in lines[0]


def test_gc_removes_an_orphan_on_s3_and_keeps_every_named_plan(s3_env: SeaweedS3, s3_prefix: str) -> None:
    """S3 died mid-publish (the plan object and its checksum written, no record): `plans list` warns
    and exits 0, gc keeps it within the grace period, then removes it and nothing a record or the pointer names."""
    from test_store_orphans import interrupted_publish

    from dreamshard.cli.app import invoke
    from dreamshard.store.orphans import remove_orphans

    uri = f"s3://{s3_env.bucket}/{s3_prefix}"
    store = open_store(uri)
    for overall in (9.0, 8.0):
        p = make_plan(overall=overall)
        publish(store, p, approve(p))
    named = _keys(s3_env, s3_prefix)
    orphan = make_plan(overall=7.0)
    interrupted_publish(store, orphan, 2)
    code, out, err = invoke(["plans", "list", "--store", uri])
    assert code == 0 and "CORRUPT" not in out and err.startswith("in flight or orphan: "), err
    assert remove_orphans(store).kept and len(_keys(s3_env, s3_prefix)) == len(named) + 2  # in flight: kept
    result = remove_orphans(store, grace_minutes=0)
    assert [o.plan_id for o in result.removed] == [orphan.plan_id]
    assert _keys(s3_env, s3_prefix) == named
    assert get_current(store, "inv").plan_id == p.plan_id and invoke(["plans", "fsck", "--store", uri])[0] == 0
