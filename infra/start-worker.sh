#!/usr/bin/env bash
# Start one process worker polling work pool $1 (default: "default"), named $2 (default: <pool>-<hostname>);
# its PID goes to runs/prefect/worker-<name>.pid. It runs one flow run at a time (--limit 1: one GPU, one batch).
#   infra/start-worker.sh gpu               # on each GPU host, pointed at the production server via PREFECT_API_URL
#   infra/start-worker.sh gpu gpu-2         # a second one on this host (one per GPU)
# The flow runs import the installed package `dreamshard_flows`; credentials for the plan store / S3 come from
# this environment (AWS_* or the boto3 chain), never from the deployment.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
POOL=${1:-default}
NAME=${2:-$POOL-$(hostname -s)}
PREFECT=${PREFECT:-${VENV_BIN:-$ROOT/.venv/bin}/prefect}
RUN_DIR=${PREFECT_RUN_DIR:-$ROOT/runs/prefect}
export PREFECT_HOME=${PREFECT_HOME:-$ROOT/.prefect}
export PREFECT_SERVER_ANALYTICS_ENABLED=false DO_NOT_TRACK=1 DVC_NO_ANALYTICS=1
export PREFECT_API_URL=${PREFECT_API_URL:-http://127.0.0.1:${PREFECT_PORT:-4200}/api}
mkdir -p "$RUN_DIR"
PIDFILE=$RUN_DIR/worker-$NAME.pid
if [[ -f $PIDFILE ]] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null; then
  echo "worker $NAME for pool '$POOL' already running (pid $(cat "$PIDFILE"))"
  exit 0
fi
"$PREFECT" work-pool inspect "$POOL" >/dev/null 2>&1 || "$PREFECT" work-pool create "$POOL" --type process >/dev/null
setsid nohup "$PREFECT" worker start --pool "$POOL" --type process --name "$NAME" --limit 1 \
  >"$RUN_DIR/worker-$NAME.log" 2>&1 &
echo $! >"$PIDFILE"
echo "worker $NAME for pool '$POOL' started (pid $!), log $RUN_DIR/worker-$NAME.log"
