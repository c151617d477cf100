"""Deployments record absolute paths (a worker runs each flow in a temporary directory) and the
`inventory.changed` event carries the store the version was pushed to, which the triggered replan uses."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jinja2.sandbox
import pytest
from flows_support import tiny_inventory, write_params

from dreamshard.errors import InputFileError
from dreamshard.store import open_store, push_inventory


def _strings(value: Any) -> list[str]:
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, (list, tuple)):
        return [s for v in value for s in _strings(v)]
    return [value] if isinstance(value, str) else []


def _requests(deployments: list[Any]) -> list[dict[str, Any]]:
    out = [d.parameters.get("request", {}) for d in deployments]
    out += [t.parameters.get("request", {}) for d in deployments for t in (d.triggers or [])]
    return [r for r in out if r]


def test_every_registered_path_is_absolute(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from dreamshard_flows.deploy import build_deployments

    project = tmp_path / "project"
    project.mkdir()
    write_params(project / "params.yaml", publish={"store_uri": "plans"})
    monkeypatch.chdir(project)
    deployments = build_deployments("params.yaml", "runs/pipeline", None, work_pools=True, inventory_name="tiny")
    requests = _requests(deployments)
    assert len(requests) >= 6  # the deployments' own requests and their triggers'
    for r in requests:
        for key in ("params_path", "workspace"):
            if key in r:
                assert Path(r[key]).is_absolute(), (key, r[key])
        store = r.get("store_uri", "")
        assert str(project / "plans") in store, r  # the params' relative store, from the registering directory
    assert {r["params_path"] for r in requests if "params_path" in r} == {str(project / "params.yaml")}
    # the retrain runs' DVC remote (the params' relative pipeline.dvc_remote): 2 deployments and their 2 triggers
    remotes = [r["dvc_remote"] for r in requests if "dvc_remote" in r]
    assert remotes == [str(project / "runs" / "dvc-remote")] * 4


def test_a_missing_params_file_is_refused_at_registration(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from dreamshard_flows.deploy import build_deployments, main

    monkeypatch.chdir(tmp_path)
    with pytest.raises(InputFileError, match="params file not found"):
        build_deployments("params.yaml", "runs/pipeline", work_pools=True)
    with pytest.raises(SystemExit, match="error: params file not found"):
        main(["--work-pools"])


def _render(template: str, payload: dict[str, Any]) -> str:
    env = jinja2.sandbox.ImmutableSandboxedEnvironment()
    return env.from_string(template).render(event={"payload": payload})


def _server_render(template: str, payload: dict[str, Any]) -> Any:
    """What Prefect's server makes of a trigger parameter (RunDeployment.render_parameters): a one-expression
    template becomes `EXPR | tojson`, rendered and parsed as JSON; a failure is a HydrationError (no run)."""
    from prefect.server.events.actions import RunDeployment
    from prefect.utilities.schema_tools.hydration import HydrationContext, hydrate

    parameters = {"value": template}
    RunDeployment._upgrade_v1_templates(parameters)
    context = HydrationContext(raise_on_error=False, render_jinja=True, jinja_context={"event": {"payload": payload}})
    return hydrate(parameters, context)["value"]


@pytest.mark.parametrize("registered", ["/srv/plans", "/tmp/odd 'quote' }} {{ and \\ back\"slash"])
def test_the_event_store_wins_else_the_registered_one(tmp_path: Path, registered: str) -> None:
    from dreamshard_flows.deploy import inventory_changed_trigger

    trigger = inventory_changed_trigger(str(tmp_path / "params.yaml"), str(tmp_path / "ws"), registered)
    template = trigger.parameters["request"]["store_uri"]
    assert _render(template, {"store_uri": "s3://bucket/pushed"}) == "s3://bucket/pushed"
    assert _render(template, {}) == registered  # an event without a store: the one registered
    assert _render(trigger.parameters["request"]["inventory_name"], {"inventory_name": "tiny"}) == "tiny"
    # as the server renders them (a bare path from `a or "b" | tojson` was InvalidJSON: the event started nothing)
    for name, value in trigger.parameters["request"].items():
        payload = {"store_uri": "/srv/pushed", "inventory_name": "tiny", "fingerprint": "ab12"}
        assert isinstance(_server_render(value, payload), str), (name, _server_render(value, payload))
    assert _server_render(template, {"store_uri": "/srv/pushed"}) == "/srv/pushed"
    assert _server_render(template, {}) == registered


def test_the_event_carries_the_absolute_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import dreamshard_flows.events as events

    sent: list[dict[str, Any]] = []
    monkeypatch.setattr(events, "emit_event", lambda **kw: sent.append(kw))
    monkeypatch.chdir(tmp_path)
    ref = push_inventory(open_store("plans"), tiny_inventory(tmp_path / "inv.yaml"), store_uri="plans")
    events.emit_inventory_changed(ref)
    (event,) = sent
    assert event["payload"]["store_uri"] == str(tmp_path / "plans")
    assert json.loads(json.dumps(event["payload"]))["inventory_name"] == "tiny"
    bare = push_inventory(open_store("plans"), tiny_inventory(tmp_path / "inv.yaml"))  # pushed without a URI
    assert events.store_of(bare) == ""
