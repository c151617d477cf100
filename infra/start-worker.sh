#!/usr/bin/env bash
# Start one process worker polling work pool $1 (default: "default"); its PID goes to runs/prefect/worker-<pool>.pid.
#   infra/start-worker.sh gpu     # on the GPU host, pointed at the production server via PREFECT_API_URL
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
POOL=${1:-default}
PREFECT=${PREFECT:-${VENV_BIN:-$ROOT/.venv/bin}/prefect}
RUN_DIR=${PREFECT_RUN_DIR:-$ROOT/runs/prefect}
export PREFECT_HOME=${PREFECT_HOME:-$ROOT/.prefect}
export PREFECT_SERVER_ANALYTICS_ENABLED=false DO_NOT_TRACK=1 DVC_NO_ANALYTICS=1
export PREFECT_API_URL=${PREFECT_API_URL:-http://127.0.0.1:${PREFECT_PORT:-4200}/api}
mkdir -p "$RUN_DIR"
PIDFILE=$RUN_DIR/worker-$POOL.pid
if [[ -f $PIDFILE ]] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null; then
  echo "worker for pool '$POOL' already running (pid $(cat "$PIDFILE"))"
  exit 0
fi
"$PREFECT" work-pool inspect "$POOL" >/dev/null 2>&1 || "$PREFECT" work-pool create "$POOL" --type process >/dev/null
setsid nohup "$PREFECT" worker start --pool "$POOL" --type process >"$RUN_DIR/worker-$POOL.log" 2>&1 &
echo $! >"$PIDFILE"
echo "worker for pool '$POOL' started (pid $!), log $RUN_DIR/worker-$POOL.log"
