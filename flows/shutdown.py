"""Stopping a worker without orphans (infra/stop-prefect.sh): Prefect cancellation of the flow runs it took.

A process worker starts each flow run in a session of its own, so a signal to the worker's process group never
reaches the run: it kept running, an orphan, after the worker stopped. And a worker left polling while its runs are
cancelled takes the next scheduled run into a process about to be stopped. So the script freezes the worker
first; then its running and pending runs (those labelled with its name, `prefect.worker.name`) are set to
Cancelling here, the script stops their processes, and `finish` marks each run of the worker that is still active,
or that the stop's termination signal crashed, as Cancelled: the UI never shows a run of a stopped worker as
running, and a run an operator stopped reads Cancelled.

    python -m dreamshard_flows.shutdown cancel WORKER [--wait S]          # set its runs Cancelling, wait up to S s
    python -m dreamshard_flows.shutdown finish WORKER [--since ISO-TIME]  # after the kill: mark them Cancelled

Without a reachable API it says so in one line and exits 0: the script still kills the processes.
"""

from __future__ import annotations

import argparse
import time
from datetime import datetime
from typing import Any

from dreamshard_flows.fanout import WORKER_LABEL

#: The states of a run that a worker still holds.
ACTIVE = ("RUNNING", "PENDING", "CANCELLING")
#: Seconds to reach the API before giving up (the server may be down: the script kills the processes anyway).
API_TIMEOUT_S = 5.0


def _active_runs(client: Any, worker: str) -> list[Any]:
    """The worker's flow runs that are running, pending or being cancelled."""
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterState, FlowRunFilterStateType
    from prefect.client.schemas.objects import StateType

    state = FlowRunFilterState(type=FlowRunFilterStateType(any_=[StateType(s) for s in ACTIVE]))
    runs = client.read_flow_runs(flow_run_filter=FlowRunFilter(state=state), limit=200)
    return [r for r in runs if (r.labels or {}).get(WORKER_LABEL) == worker]


def cancel_worker_runs(worker: str, wait_s: float, poll_s: float = 0.5) -> list[str]:
    """Set every active run of `worker` to Cancelling and wait up to `wait_s` for the worker to end them; returns
    the names of the runs it cancelled."""
    from prefect.client.orchestration import get_client
    from prefect.states import Cancelling

    with get_client(sync_client=True) as client:
        runs = _active_runs(client, worker)
        for run in runs:
            if run.state is None or run.state.type.value != "CANCELLING":
                client.set_flow_run_state(run.id, Cancelling(message=f"worker {worker} is stopping"), force=True)
        deadline = time.monotonic() + wait_s
        while runs and time.monotonic() < deadline and _active_runs(client, worker):
            time.sleep(poll_s)
    return [r.name for r in runs]


def _crashed_since(client: Any, worker: str, since: datetime) -> list[Any]:
    """The worker's flow runs that crashed at or after `since` (the stop's termination signal ended them)."""
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterState, FlowRunFilterStateType
    from prefect.client.schemas.objects import StateType

    state = FlowRunFilterState(type=FlowRunFilterStateType(any_=[StateType.CRASHED]))
    runs = client.read_flow_runs(flow_run_filter=FlowRunFilter(state=state), limit=200)
    return [
        r
        for r in runs
        if (r.labels or {}).get(WORKER_LABEL) == worker and r.state is not None and r.state.timestamp >= since
    ]


def mark_cancelled(worker: str, since: datetime | None = None) -> list[str]:
    """Every run of `worker` still active (its process was killed with the worker), and every one that crashed at
    or after `since` (stopped by the stop's termination signal), marked Cancelled."""
    from prefect.client.orchestration import get_client
    from prefect.states import Cancelled

    with get_client(sync_client=True) as client:
        runs = _active_runs(client, worker) + ([] if since is None else _crashed_since(client, worker, since))
        for run in runs:
            client.set_flow_run_state(run.id, Cancelled(message=f"worker {worker} stopped"), force=True)
    return [r.name for r in runs]


def api_reachable() -> str | None:
    """None when the Prefect API answers its health check, else why not (one line)."""
    import httpx
    from prefect.settings import PREFECT_API_URL

    url = PREFECT_API_URL.value()
    if not url:
        return "PREFECT_API_URL is not set"
    try:
        httpx.get(f"{str(url).rstrip('/')}/health", timeout=API_TIMEOUT_S).raise_for_status()
    except httpx.HTTPError as e:
        return f"Prefect API {url} does not answer ({type(e).__name__})"
    return None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("action", choices=["cancel", "finish"])
    ap.add_argument("worker", help="The worker's name (its PID file is runs/prefect/worker-NAME.pid)")
    ap.add_argument("--wait", type=float, default=10.0, help="Seconds to wait for the cancelled runs to end")
    ap.add_argument(
        "--since",
        type=datetime.fromisoformat,
        default=None,
        help="finish: also mark Cancelled the worker's runs that crashed from this time on (ISO 8601, with zone)",
    )
    args = ap.parse_args(argv)
    why = api_reachable()
    if why is not None:
        print(f"worker {args.worker}: runs not cancelled through the API: {why}; its processes are killed")
        return 0
    if args.action == "cancel":
        names = cancel_worker_runs(args.worker, args.wait)
        print(f"worker {args.worker}: cancelled {len(names)} flow runs{': ' + ', '.join(names) if names else ''}")
    else:
        names = mark_cancelled(args.worker, args.since)
        if names:
            print(f"worker {args.worker}: marked {len(names)} flow runs Cancelled: {', '.join(names)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
