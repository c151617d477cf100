#!/usr/bin/env bash
# Stop what start-prefect.sh / start-worker.sh / `python -m dreamshard_flows.deploy` started, by PID file only.
# (A serve() process keeps running after its parent shell exits, hence the PID files.) Each gets SIGTERM, then
# SIGKILL after PREFECT_STOP_GRACE_S seconds (default 10) if it is still running.
#
# A worker starts each flow run in a session of its own, so stopping the worker's process group misses its runs;
# and a worker left polling while its runs are stopped takes the next scheduled run (a profiling batch) into a
# process that is about to be killed. For each worker, in order:
#   1. the processes it started are found, and the worker is frozen (SIGSTOP): from here it takes no run;
#   2. its running and pending flow runs are set Cancelling through the API (`python -m dreamshard_flows.shutdown
#      cancel NAME --wait 0`; Prefect then lets such a run end only as Cancelled);
#   3. every process the worker had started is stopped with its process group (SIGTERM, SIGKILL after the grace);
#   4. the frozen worker's process group is killed (it has nothing left to finish);
#   5. a run still marked active, or crashed by step 3's signal, is set Cancelled (`shutdown finish NAME --since T`).
# serve() gets SIGTERM to its group, then its processes the same way; the server stops last, so steps 2 and 5 can
# reach its API.
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

# A worker, by steps 1-5 above: $1 its PID, $2 its name.
stop_worker() {
  local pid=$1 worker=$2 p spawned left since
  since=$(date -u +%Y-%m-%dT%H:%M:%S+00:00)
  mapfile -t spawned < <(descendants "$pid")
  signal_all STOP "$pid"
  "$PY" -m dreamshard_flows.shutdown cancel "$worker" --wait 0
  left=()
  for p in "${spawned[@]}"; do alive "$p" && left+=("$p"); done
  if ((${#left[@]})); then
    stop_pids "${left[@]}"
    echo "stopped ${#left[@]} processes worker-$worker had started (pids ${left[*]})"
  fi
  signal_all KILL "$pid"
  "$PY" -m dreamshard_flows.shutdown finish "$worker" --since "$since"
}

shopt -s nullglob
for pidfile in "$RUN_DIR"/worker-*.pid "$RUN_DIR"/serve.pid "$RUN_DIR"/server.pid; do
  [[ -f "$pidfile" ]] || continue  # serve.pid, server.pid: named, not globbed
  pid=$(cat "$pidfile")
  name=$(basename "$pidfile" .pid)
  if alive "$pid"; then
    if [[ $name == worker-* ]]; then
      stop_worker "$pid" "${name#worker-}"
    else
      spawned=()
      [[ $name != server ]] && mapfile -t spawned < <(descendants "$pid")
      # Each was started with setsid: its PID is its process group (uvicorn, serve()'s own children).
      stop_pids "$pid"
      left=()
      for p in "${spawned[@]}"; do alive "$p" && left+=("$p"); done
      if ((${#left[@]})); then
        stop_pids "${left[@]}"
        echo "stopped ${#left[@]} processes $name had started (pids ${left[*]})"
      fi
    fi
    echo "stopped $name (pid $pid)"
  fi
  rm -f "$pidfile"
done
