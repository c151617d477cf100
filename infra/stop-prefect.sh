#!/usr/bin/env bash
# Stop what start-prefect.sh / start-worker.sh / `python -m dreamshard_flows.deploy` started, by PID file only.
# (A serve() process keeps running after its parent shell exits, hence the PID files.) Each gets SIGTERM, then
# SIGKILL after PREFECT_STOP_GRACE_S seconds (default 10) if it is still running.
#
# A worker starts each flow run in a session of its own, so stopping the worker's process group misses its runs.
# For each worker, in order:
#   1. its running flow runs are cancelled through the API (Prefect cancellation: the worker stops each run's
#      process and marks it Cancelled; `python -m dreamshard_flows.shutdown cancel NAME`), waiting up to the grace;
#   2. the worker's process group is stopped (SIGTERM, SIGKILL after the grace);
#   3. every process the worker had started (found before step 2) that is still running is stopped with its
#      process group, the same way;
#   4. a run still marked running is set Cancelled (`shutdown finish NAME`).
# serve() gets steps 2 and 3; the server stops last, so steps 1 and 4 can reach its API.
set -uo pipefail
cd "$(dirname "$0")/.."
RUN_DIR=${PREFECT_RUN_DIR:-$PWD/runs/prefect}
GRACE_S=${PREFECT_STOP_GRACE_S:-10}
[[ "$GRACE_S" =~ ^[0-9]+$ ]] || { echo "error: PREFECT_STOP_GRACE_S must be whole seconds, got '$GRACE_S'" >&2; exit 2; }
PY=${PYTHON:-${VENV_BIN:-$PWD/.venv/bin}/python}
export PREFECT_HOME=${PREFECT_HOME:-$PWD/.prefect}
export PREFECT_API_URL=${PREFECT_API_URL:-http://127.0.0.1:${PREFECT_PORT:-4200}/api}
export PREFECT_SERVER_ANALYTICS_ENABLED=false DO_NOT_TRACK=1

# Every process below PID $1 (children, grandchildren, ...), whatever its session.
descendants() {
  ps -e -o pid= -o ppid= | awk -v root="$1" '
    { parent[$1] = $2 }
    END { for (c in parent) { x = parent[c]; while (x != root && x > 1 && (x in parent)) x = parent[x]; if (x == root) print c } }'
}

# Running (a zombie has ended: it only waits for its parent to reap it).
alive() { [[ -r /proc/$1/stat ]] && [[ $(sed -E 's/.*\) ([A-Za-z]).*/\1/' "/proc/$1/stat" 2>/dev/null) != Z ]]; }

# Signal $1 to each PID in $2.. and to its process group when it leads one.
signal_all() {
  local sig=$1 p
  shift
  for p in "$@"; do
    [[ $(ps -o pgid= -p "$p" 2>/dev/null | tr -d ' ') == "$p" ]] && kill "-$sig" -- "-$p" 2>/dev/null
    kill "-$sig" "$p" 2>/dev/null
  done
}

# SIGTERM to the PIDs (and their groups), SIGKILL after the grace to any still alive.
stop_pids() {
  local p left
  signal_all TERM "$@"
  for _ in $(seq 1 $((GRACE_S * 2))); do
    left=0
    for p in "$@"; do alive "$p" && left=1; done
    ((left)) || return 0
    sleep 0.5
  done
  signal_all KILL "$@"
}

shopt -s nullglob
for pidfile in "$RUN_DIR"/worker-*.pid "$RUN_DIR"/serve.pid "$RUN_DIR"/server.pid; do
  [[ -f "$pidfile" ]] || continue  # serve.pid, server.pid: named, not globbed
  pid=$(cat "$pidfile")
  name=$(basename "$pidfile" .pid)
  if alive "$pid"; then
    worker=${name#worker-}
    [[ $name == worker-* ]] && "$PY" -m dreamshard_flows.shutdown cancel "$worker" --wait "$GRACE_S"
    spawned=()
    [[ $name != server ]] && mapfile -t spawned < <(descendants "$pid")
    # Each was started with setsid: its PID is its process group (uvicorn, the worker's own children).
    stop_pids "$pid"
    left=()
    for p in "${spawned[@]}"; do alive "$p" && left+=("$p"); done
    if ((${#left[@]})); then
      stop_pids "${left[@]}"
      echo "stopped ${#left[@]} processes $name had started (pids ${left[*]})"
    fi
    [[ $name == worker-* ]] && "$PY" -m dreamshard_flows.shutdown finish "$worker"
    echo "stopped $name (pid $pid)"
  fi
  rm -f "$pidfile"
done
