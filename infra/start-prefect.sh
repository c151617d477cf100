#!/usr/bin/env bash
# Start a local Prefect server (SQLite, 127.0.0.1:4200), the process work pools and one worker on each.
# PIDs land in $PREFECT_RUN_DIR (default runs/prefect) so stop-prefect.sh stops exactly what this started.
#
#   infra/start-prefect.sh            # server + pools "default" and "gpu" + one worker on each
#   infra/stop-prefect.sh
#
# In production the server runs once, `default` workers run the orchestrator, and every GPU host runs
# `infra/start-worker.sh gpu NAME` pointed at the server: each profiling batch is one flow run a gpu worker pulls.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
VENV_BIN=${VENV_BIN:-$ROOT/.venv/bin}
PREFECT=${PREFECT:-$VENV_BIN/prefect}
HOST=${PREFECT_HOST:-127.0.0.1}
PORT=${PREFECT_PORT:-4200}
RUN_DIR=${PREFECT_RUN_DIR:-$ROOT/runs/prefect}
export PREFECT_HOME=${PREFECT_HOME:-$ROOT/.prefect}
export PREFECT_SERVER_ANALYTICS_ENABLED=false DO_NOT_TRACK=1 DVC_NO_ANALYTICS=1
export PREFECT_API_URL="http://$HOST:$PORT/api"
mkdir -p "$RUN_DIR" "$PREFECT_HOME"

if [[ -f $RUN_DIR/server.pid ]] && kill -0 "$(cat "$RUN_DIR/server.pid")" 2>/dev/null; then
  echo "prefect server already running (pid $(cat "$RUN_DIR/server.pid"))"
else
  setsid nohup "$PREFECT" server start --host "$HOST" --port "$PORT" >"$RUN_DIR/server.log" 2>&1 &
  echo $! >"$RUN_DIR/server.pid"
  echo "prefect server starting (pid $!), log $RUN_DIR/server.log"
fi

# Wait for the API (about 10 s on a first start: database migrations).
for _ in $(seq 1 90); do
  if curl -fsS "$PREFECT_API_URL/health" >/dev/null 2>&1; then break; fi
  sleep 1
done
curl -fsS "$PREFECT_API_URL/health" >/dev/null || { echo "prefect server did not answer; see $RUN_DIR/server.log" >&2; exit 1; }
echo "prefect API at $PREFECT_API_URL (UI: http://$HOST:$PORT)"

# Work pools: "default" runs the orchestrator, "gpu" runs profiling batches and the drift monitor (a process pool
# locally; one worker per GPU host in production).
for pool in default gpu; do
  "$PREFECT" work-pool inspect "$pool" >/dev/null 2>&1 || "$PREFECT" work-pool create "$pool" --type process >/dev/null
done
"$ROOT/infra/start-worker.sh" default
"$ROOT/infra/start-worker.sh" gpu
echo "export PREFECT_API_URL=$PREFECT_API_URL   # then: python -m dreamshard_flows.deploy --work-pools"
echo "                                          # (or: DREAMSHARD_ROOT=\$PWD prefect deploy --all --prefect-file infra/prefect.yaml)"
