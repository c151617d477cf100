"""Deployments, declared in one place (mirrored for `prefect deploy --all` in infra/prefect.yaml):

    replan-on-inventory-change/on-inventory-change
        trigger on dreamshard.inventory.changed: the fast path (plan with the production model, gate, publish; no
        profiling, no training) (gpu pool)
    retrain-on-inventory-change/nightly-and-when-due
        cron 03:00 + trigger on dreamshard.retrain.due (a version outside the model's ranges): profile, train,
        plan, publish (default pool)
    retrain-on-inventory-change/retrain-on-drift
        trigger on dreamshard.plan.drifted whose check chose the retrain path (the hardware or the model's ranges
        changed): re-profile, retrain (default pool)
    replan-on-inventory-change/replan-on-drift
        trigger on dreamshard.plan.drifted whose check chose the replan path (only the measured costs moved): the
        fast path, forced for the version already decided (gpu pool)
    profile-batch/profile-batch
        one profiling batch; the orchestrator submits one run per batch (gpu pool)
    drift-check/drift-monitor
        hourly: measure every inventory's current plan beside its reference (paired rounds); emit
        dreamshard.plan.drifted with the path its check chose (gpu pool)
    publish-plan/publish-plan
        gate + lineage + publish a workspace's plan by hand (default pool)

    python -m dreamshard_flows.deploy                 # serve them all from this process (local runner; PID file)
    python -m dreamshard_flows.deploy --work-pools    # register them on work pools `default` and `gpu` (process
                                                      # workers: infra/start-prefect.sh, infra/start-worker.sh gpu)

    python -m dreamshard_flows.deploy --work-pools --root /srv/dreamshard
                                                      # paths under /srv/dreamshard on the worker hosts, not this
                                                      # host's (with the store and DVC remote on s3://)

Entry points are module paths (dreamshard_flows.<module>.<flow>): a worker runs the installed package, whatever
its working directory. Paths in the parameters: dreamshard_flows.deploy_paths.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

from dreamshard_flows.deploy_paths import host_bound, registered_paths, registered_remote
from dreamshard_flows.events import INVENTORY_CHANGED_EVENT
from dreamshard_flows.replan import RETRAIN_DUE_EVENT

from dreamshard.errors import DreamshardError
from dreamshard.usecases.drift import DRIFT_PATH_LABEL, PLAN_DRIFTED_EVENT

NIGHTLY_CRON = "0 3 * * *"
DRIFT_CRON = "0 * * * *"
DEFAULT_POOL = "default"
GPU_POOL = "gpu"


def _orchestrator_request(params_path: str, workspace: str, store_uri: str | None, **extra: Any) -> dict[str, Any]:
    req: dict[str, Any] = {"params_path": params_path, "workspace": workspace}
    if store_uri:
        req["store_uri"] = store_uri
    return {"request": {**req, **extra}}


def _jinja_string(text: str) -> str:
    """`text` as a Jinja string literal (a path is data: quotes, braces and backslashes stay inside the literal)."""
    return json.dumps(text, ensure_ascii=False)


def _trigger(
    name: str,
    description: str,
    event: str,
    resources: str,
    parameters: dict[str, Any],
    labels: dict[str, str] | None = None,
) -> Any:
    """A trigger on `event` for the resources matching `resources` (and carrying `labels`, when given)."""
    from prefect.events import DeploymentEventTrigger

    return DeploymentEventTrigger(
        name=name,
        description=description,
        expect={event},
        match={"prefect.resource.id": resources, **(labels or {})},
        parameters=parameters,
    )


def inventory_changed_trigger(params_path: str, workspace: str, store_uri: str | None) -> Any:
    """Re-plan the inventory named in the event (its current version in the store it was pushed to, which the
    event carries) with the production model."""
    return _trigger(
        "inventory-changed",
        "A new inventory version was pushed (`dreamshard inventory push`)",
        INVENTORY_CHANGED_EVENT,
        "dreamshard.inventory.*",
        {
            "request": {
                **_named_request("{{ event.payload.inventory_name }}", params_path, workspace, store_uri)["request"],
                # the store the version was pushed to (dreamshard_flows.events), else the registered one; in
                # parentheses: Prefect renders a one-expression template as `EXPR | tojson` and parses the JSON, and
                # the filter binds tighter than `or` (the event's path would come out bare: InvalidJSON, no run)
                "store_uri": "{{ (event.payload.store_uri or " + _jinja_string(store_uri or "") + ") }}",
                "reason": "inventory {{ event.payload.inventory_name }} changed to version "
                "{{ event.payload.fingerprint }}",
            }
        },
    )


def retrain_due_trigger(params_path: str, workspace: str, store_uri: str | None, dvc_remote: str | None = None) -> Any:
    """Retrain for the inventory whose new version the production model could not plan (out of its ranges)."""
    return _trigger(
        "retrain-due",
        "The fast path found a version outside the model's training ranges",
        RETRAIN_DUE_EVENT,
        "dreamshard.retrain.*",
        _orchestrator_request(
            params_path,
            workspace,
            store_uri,
            **_remote(dvc_remote),
            inventory_name="{{ event.payload.inventory_name }}",
            reason="retrain due: {{ event.payload.reason }}",
        ),
    )


#: What a drift-triggered run says about why it ran: the paired figure the check decided on and the path's reason.
DRIFT_REASON = (
    "the published plan drifted: plan/{{ event.payload.reference }} moved {{ event.payload.drift }} from "
    "{{ event.payload.published_ratio }} ({{ event.payload.ratio_source }}); {{ event.payload.path_reason }}"
)


def plan_drifted_trigger(params_path: str, workspace: str, store_uri: str | None, dvc_remote: str | None = None) -> Any:
    """Re-profile and retrain the inventory whose published plan drifted (`drift-check`) on other hardware or out of
    the production model's ranges (the check's path `retrain`)."""
    return _trigger(
        "plan-drifted-retrain",
        "The published plan lost (or gained) ground against its reference, and the hardware or the model's ranges "
        "changed: re-profile and retrain",
        PLAN_DRIFTED_EVENT,
        "dreamshard.plan.*",
        _orchestrator_request(
            params_path,
            workspace,
            store_uri,
            **_remote(dvc_remote),
            reprofile=True,
            inventory_name="{{ event.payload.inventory_name }}",
            reason=DRIFT_REASON,
        ),
        labels={DRIFT_PATH_LABEL: "retrain"},
    )


def drift_replan_trigger(params_path: str, workspace: str, store_uri: str | None) -> Any:
    """Re-plan, with the production model, the inventory whose published plan drifted while the hardware and the
    model's ranges stayed (the check's path `replan`): the fast path, forced (the version was decided already)."""
    named = _named_request("{{ event.payload.inventory_name }}", params_path, workspace, store_uri)["request"]
    return _trigger(
        "plan-drifted-replan",
        "The published plan lost (or gained) ground against its reference; hardware and model ranges unchanged: "
        "re-plan with the production model",
        PLAN_DRIFTED_EVENT,
        "dreamshard.plan.*",
        {"request": {**named, "force": True, "reason": DRIFT_REASON}},
        labels={DRIFT_PATH_LABEL: "replan"},
    )


def _pool(work_pools: bool, name: str) -> dict[str, Any]:
    """Where a deployment runs: module-path entrypoints, on work pool `name` when registering on pools."""
    from prefect.deployments.runner import EntrypointType

    common: dict[str, Any] = {"entrypoint_type": EntrypointType.MODULE_PATH}
    return {**common, "work_pool_name": name} if work_pools else common


def _named_request(inventory_name: str, params_path: str, workspace: str, store_uri: str | None) -> dict[str, Any]:
    """The parameters of a flow that works on one inventory's current plan (drift monitor, fast path)."""
    store = {"store_uri": store_uri} if store_uri else {}
    return {"request": {"inventory_name": inventory_name, "params_path": params_path, "workspace": workspace, **store}}


def _remote(dvc_remote: str | None) -> dict[str, str]:
    return {"dvc_remote": dvc_remote} if dvc_remote else {}


def _retrain_deployments(
    params_path: str, workspace: str, store_uri: str | None, work_pools: bool, dvc_remote: str | None = None
) -> list[Any]:
    """The orchestrator's two deployments: nightly and when a retrain is due; on drift (re-profiling). Each records
    the DVC remote (`registered_remote`): a relative one would name a directory of the run's temporary cwd."""
    from dreamshard_flows.orchestrator import retrain_on_inventory_change

    orchestrator = _orchestrator_request(params_path, workspace, store_uri, **_remote(dvc_remote))["request"]
    return [
        retrain_on_inventory_change.to_deployment(
            name="nightly-and-when-due",
            cron=NIGHTLY_CRON,
            triggers=[retrain_due_trigger(params_path, workspace, store_uri, dvc_remote)],
            parameters={"request": {**orchestrator, "reason": "nightly schedule"}},
            concurrency_limit=1,  # one pipeline per workspace at a time (plus the workspace file lock)
            tags=["dreamshard", "orchestrator"],
            description="Run the dvc.yaml stages DVC says changed, push, gate and publish with lineage",
            **_pool(work_pools, DEFAULT_POOL),
        ),
        retrain_on_inventory_change.to_deployment(
            name="retrain-on-drift",
            triggers=[plan_drifted_trigger(params_path, workspace, store_uri, dvc_remote)],
            parameters={"request": {**orchestrator, "reprofile": True}},
            concurrency_limit=1,
            tags=["dreamshard", "orchestrator", "drift"],
            description="The published plan drifted: measure afresh, retrain, re-plan, publish",
            **_pool(work_pools, DEFAULT_POOL),
        ),
    ]


def _drift_request(params_path: str, workspace: str, store_uri: str | None) -> dict[str, Any]:
    """The drift monitor's parameters: no inventory name, so each round checks every inventory with a current plan
    (one without is skipped with the reason)."""
    store = {"store_uri": store_uri} if store_uri else {}
    return {"request": {"params_path": params_path, "workspace": workspace, **store}}


def _other_deployments(params_path: str, workspace: str, store_uri: str | None, work_pools: bool) -> list[Any]:
    """The profile-batch, drift-monitor and publish-plan deployments."""
    from dreamshard_flows.batch_flow import profile_batch_flow
    from dreamshard_flows.drift import drift_check_flow
    from dreamshard_flows.publish import publish_workspace_plan

    return [
        profile_batch_flow.to_deployment(
            name="profile-batch",
            tags=["dreamshard", "gpu"],
            description="One profiling batch -> one shard in object storage (submitted by the profile stage)",
            **_pool(work_pools, GPU_POOL),
        ),
        drift_check_flow.to_deployment(
            name="drift-monitor",
            cron=DRIFT_CRON,
            parameters=_drift_request(params_path, workspace, store_uri),
            tags=["dreamshard", "gpu", "drift"],
            description="Measure every inventory's current plan beside its reference; emit dreamshard.plan.drifted "
            "(with its path) when plan/reference moved past drift.threshold",
            **_pool(work_pools, GPU_POOL),
        ),
        publish_workspace_plan.to_deployment(
            name="publish-plan",
            parameters={"request": {"workspace": workspace, **({"store_uri": store_uri} if store_uri else {})}},
            tags=["dreamshard"],
            description="Gate, attach lineage and publish the workspace's current plan",
            **_pool(work_pools, DEFAULT_POOL),
        ),
    ]


def build_deployments(
    params_path: str = "params.yaml",
    workspace: str = "runs/pipeline",
    store_uri: str | None = None,
    work_pools: bool = False,
    inventory_name: str = "pool",
    root: str | None = None,
) -> list[Any]:
    """RunnerDeployments for serve() (work_pools=False) or for work pools (work_pool_name set), every path in
    their parameters absolute: this host's, or under `root` on the worker hosts (`deploy_paths`)."""
    from dreamshard_flows.replan import replan_on_inventory_change

    dvc_remote = registered_remote(params_path, root)
    params_path, workspace, store_uri = registered_paths(params_path, workspace, store_uri, root)

    replan = replan_on_inventory_change.to_deployment(
        name="on-inventory-change",
        triggers=[inventory_changed_trigger(params_path, workspace, store_uri)],
        parameters=_named_request(inventory_name, params_path, workspace, store_uri),
        concurrency_limit=1,
        tags=["dreamshard", "replan", "gpu"],
        description="A new inventory version: plan with the production model, gate, publish (no profiling, no "
        "training); out of the model's ranges: emit dreamshard.retrain.due",
        **_pool(work_pools, GPU_POOL),
    )
    replan_on_drift = replan_on_inventory_change.to_deployment(
        name="replan-on-drift",
        triggers=[drift_replan_trigger(params_path, workspace, store_uri)],
        parameters={
            "request": {**_named_request(inventory_name, params_path, workspace, store_uri)["request"], "force": True}
        },
        concurrency_limit=1,
        tags=["dreamshard", "replan", "gpu", "drift"],
        description="The published plan drifted, hardware and model ranges unchanged: re-plan the current version "
        "with the production model, gate, publish (no profiling, no training)",
        **_pool(work_pools, GPU_POOL),
    )
    return [
        replan,
        *_retrain_deployments(params_path, workspace, store_uri, work_pools, dvc_remote),
        replan_on_drift,
        *_other_deployments(params_path, workspace, store_uri, work_pools),
    ]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--params", default="params.yaml")
    ap.add_argument("--workspace", default="runs/pipeline")
    ap.add_argument("--store", default=None, help="Plan store URI (default: publish.store_uri)")
    ap.add_argument(
        "--inventory-name", default="pool", help="Inventory the fast path re-plans when it runs without an event"
    )
    ap.add_argument(
        "--root",
        default=None,
        help="Record relative paths under this directory of the worker hosts, not this host's (see deploy_paths)",
    )
    ap.add_argument("--work-pools", action="store_true", help="Register on work pools instead of serving")
    args = ap.parse_args(argv)
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    os.environ.setdefault("DO_NOT_TRACK", "1")
    try:
        deployments = build_deployments(
            args.params, args.workspace, args.store, args.work_pools, args.inventory_name, args.root
        )
    except DreamshardError as e:
        raise SystemExit(f"error: {e}") from None
    if args.root is not None:
        retrain = next(d for d in deployments if d.name == "nightly-and-when-due").parameters["request"]
        for line in host_bound(retrain["store_uri"], retrain["dvc_remote"]):
            print(f"warning: {line}")
    if args.work_pools:
        for d in deployments:
            print(f"registered {d.flow_name}/{d.name} -> pool {d.work_pool_name}: {d.apply()}")
        return
    from prefect import serve

    run_dir = Path(os.environ.get("PREFECT_RUN_DIR", "runs/prefect"))
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "serve.pid").write_text(f"{os.getpid()}\n")  # infra/stop-prefect.sh stops it by this PID
    serve(*deployments)


if __name__ == "__main__":
    main()
