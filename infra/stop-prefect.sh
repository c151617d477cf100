#!/usr/bin/env bash
# Stop what start-prefect.sh / start-worker.sh / `python -m dreamshard_flows.deploy` started, by PID file only.
# (A serve() process keeps running after its parent shell exits, hence the PID files.) Each gets SIGTERM, then
# SIGKILL after PREFECT_STOP_GRACE_S seconds (default 10) if it is still running.
set -uo pipefail
cd "$(dirname "$0")/.."
RUN_DIR=${PREFECT_RUN_DIR:-$PWD/runs/prefect}
GRACE_S=${PREFECT_STOP_GRACE_S:-10}
[[ "$GRACE_S" =~ ^[0-9]+$ ]] || { echo "error: PREFECT_STOP_GRACE_S must be whole seconds, got '$GRACE_S'" >&2; exit 2; }
shopt -s nullglob
for pidfile in "$RUN_DIR"/worker-*.pid "$RUN_DIR"/serve.pid "$RUN_DIR"/server.pid; do
  [[ -f "$pidfile" ]] || continue  # serve.pid, server.pid: named, not globbed
  pid=$(cat "$pidfile")
  if kill -0 "$pid" 2>/dev/null; then
    # Each was started with setsid: its PID is its process group, so this also stops its children (uvicorn, flow runs).
    kill -- "-$pid" 2>/dev/null || kill "$pid"
    for _ in $(seq 1 $((GRACE_S * 2))); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
    kill -0 "$pid" 2>/dev/null && { kill -9 -- "-$pid" 2>/dev/null || kill -9 "$pid"; }
    echo "stopped $(basename "$pidfile" .pid) (pid $pid)"
  fi
  rm -f "$pidfile"
done
