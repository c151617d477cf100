"""Deployments: the orchestrator nightly and on `dreamshard.inventory.changed`; each stage flow on its pool.

    python -m flows.deploy                 # serve all deployments from this process (local runner; PID file)
    python -m flows.deploy --work-pools    # register them on work pools `default` and `gpu` (process pools
                                           # locally, see infra/start-prefect.sh; a GPU host in production)

The same deployments are declared for `prefect deploy --all` in infra/prefect.yaml.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from dreamshard.events import INVENTORY_CHANGED_EVENT

ROOT = Path(__file__).resolve().parents[1]
NIGHTLY_CRON = "0 3 * * *"
DEFAULT_POOL = "default"
GPU_POOL = "gpu"


def _request(params_path: str, workspace: str, store_uri: str | None, **extra: Any) -> dict[str, Any]:
    req: dict[str, Any] = {"params_path": params_path, "workspace": {"root": workspace}}
    if store_uri:
        req["store_uri"] = store_uri
    return {"request": {**req, **extra}}


def inventory_changed_trigger(params_path: str, workspace: str, store_uri: str | None) -> Any:
    """Run the orchestrator for the inventory named in the event (its current version in the store)."""
    from prefect.events import DeploymentEventTrigger

    return DeploymentEventTrigger(
        name="inventory-changed",
        description="A new inventory version was pushed (`dreamshard inventory push`)",
        expect={INVENTORY_CHANGED_EVENT},
        match={"prefect.resource.id": "dreamshard.inventory.*"},
        parameters=_request(params_path, workspace, store_uri,
                            inventory_name="{{ event.payload.inventory_name }}"),
    )


def build_deployments(
    params_path: str = "params.yaml",
    workspace: str = "runs/pipeline",
    store_uri: str | None = None,
    work_pools: bool = False,
) -> list[Any]:
    """RunnerDeployments for serve() (work_pools=False) or for work pools (work_pool_name set)."""
    from flows.orchestrator import retrain_on_inventory_change
    from flows.profile_flow import profile_flow
    from flows.publish_flow import plan_and_publish_flow
    from flows.train_flows import train_cost_flow, train_policy_flow

    def pool(name: str) -> dict[str, Any]:
        return {"work_pool_name": name} if work_pools else {}

    stage = _request(params_path, workspace, None)
    return [
        retrain_on_inventory_change.to_deployment(
            name="nightly-and-on-change",
            cron=NIGHTLY_CRON,
            triggers=[inventory_changed_trigger(params_path, workspace, store_uri)],
            parameters=_request(params_path, workspace, store_uri),
            concurrency_limit=1,  # one pipeline per workspace at a time (plus the workspace file lock)
            tags=["dreamshard", "orchestrator"],
            description="Re-profile / retrain / re-publish only what the inventory fingerprint says is needed",
            **pool(DEFAULT_POOL),
        ),
        profile_flow.to_deployment(name="profile", parameters=stage, tags=["dreamshard", "gpu"], **pool(GPU_POOL)),
        train_cost_flow.to_deployment(name="train-cost", parameters=stage, tags=["dreamshard"], **pool(DEFAULT_POOL)),
        train_policy_flow.to_deployment(name="train-policy", parameters=stage, tags=["dreamshard"],
                                        **pool(DEFAULT_POOL)),
        plan_and_publish_flow.to_deployment(name="plan-and-publish", parameters=_request(params_path, workspace,
                                            store_uri), tags=["dreamshard"], **pool(DEFAULT_POOL)),
    ]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--params", default="params.yaml")
    ap.add_argument("--workspace", default="runs/pipeline")
    ap.add_argument("--store", default=None, help="Plan store URI (default: publish.store_uri)")
    ap.add_argument("--work-pools", action="store_true", help="Register on work pools instead of serving")
    args = ap.parse_args(argv)
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    os.environ.setdefault("DO_NOT_TRACK", "1")
    if args.work_pools:
        # Process pools run the flow from this checkout (the worker's working directory is the deployment path).
        for d in build_deployments(args.params, args.workspace, args.store, work_pools=True):
            print(f"registered {d.flow_name}/{d.name} -> pool {d.work_pool_name}: {d.apply()}")
        return
    from prefect import serve

    run_dir = Path(os.environ.get("PREFECT_RUN_DIR", ROOT / "runs" / "prefect"))
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "serve.pid").write_text(f"{os.getpid()}\n")  # infra/stop-prefect.sh stops it by this PID
    serve(*build_deployments(args.params, args.workspace, args.store))


if __name__ == "__main__":
    main()
