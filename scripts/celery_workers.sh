#!/usr/bin/env bash
# The distributed profile's broker and workers on one host, without docker:
#
#   scripts/celery_workers.sh start DIR PORT N   # redis-server on 127.0.0.1:PORT, N `dagster-celery` workers
#   scripts/celery_workers.sh stop DIR           # stops them all (each its own process group)
#
# DIR holds the pid files, logs and Redis' working directory. Each process starts in a session of its own
# (setsid), so its pid is its process group: `stop` (and a test killing one worker) signals the whole group,
# the worker's pool processes included. The workers inherit the environment: DAGSTER_HOME (with
# deploy/dagster_distributed.yaml as dagster.yaml), DAGSTER_PG_*, GPU_HEALTH_* (warehouse, telemetry store,
# source) and PYTHONPATH, the same as the process that launches the runs. GPU_HEALTH_CELERY_CONFIG names the
# executor YAML (default deploy/celery.yaml); GPU_HEALTH_CELERY_BROKER / _BACKEND are set here from PORT.
# Each worker runs one step at a time (--concurrency 1): N workers are N steps at once.
set -euo pipefail

here="$(cd "$(dirname "$0")/.." && pwd)"
bin="${VIRTUAL_ENV:-$here/.venv}/bin"
export PATH="$bin:$PATH"  # dagster-celery runs `celery` from the PATH
config="${GPU_HEALTH_CELERY_CONFIG:-$here/deploy/celery.yaml}"

die() { echo "celery_workers: $*" >&2; exit 1; }

wait_for() {  # wait_for SECONDS DESCRIPTION COMMAND...
  local deadline=$(( SECONDS + $1 )) what=$2; shift 2
  until "$@" >/dev/null 2>&1; do
    (( SECONDS < deadline )) || { echo "celery_workers: timed out waiting for $what" >&2; return 1; }
    sleep 0.5
  done
}

stop() {
  local dir=$1 pid
  for f in "$dir"/worker*.pid "$dir"/redis.pid; do
    [[ -f $f ]] || continue
    pid=$(cat "$f")
    kill -TERM -- "-$pid" 2>/dev/null || true
    for _ in $(seq 1 20); do kill -0 -- "-$pid" 2>/dev/null || break; sleep 0.5; done
    kill -KILL -- "-$pid" 2>/dev/null || true
    rm -f "$f"
  done
}

start() {
  local dir=$1 port=$2 n=$3 i
  command -v redis-server >/dev/null || die "redis-server not found (apt-get install redis-server)"
  [[ -n ${DAGSTER_HOME:-} ]] || die "DAGSTER_HOME is not set (it holds the instance the workers report to)"
  mkdir -p "$dir"
  trap 'stop "$dir"' ERR  # nothing half-started is left behind
  # the instance's storage created once, before N workers would race to create it
  "$bin/python" -c 'import dagster; dagster.DagsterInstance.get().dispose()'
  setsid redis-server --bind 127.0.0.1 --port "$port" --dir "$dir" --save "" --appendonly no \
    --protected-mode yes --logfile "$dir/redis.log" </dev/null >/dev/null 2>&1 &
  echo $! > "$dir/redis.pid"
  wait_for 20 "redis-server on 127.0.0.1:$port" redis-cli -h 127.0.0.1 -p "$port" ping
  export GPU_HEALTH_CELERY_BROKER="redis://127.0.0.1:$port/0" GPU_HEALTH_CELERY_BACKEND="redis://127.0.0.1:$port/1"
  for i in $(seq 1 "$n"); do
    setsid "$bin/dagster-celery" worker start -y "$config" -n "worker$i-$port" -A dagster_celery.app \
      -- --concurrency 1 </dev/null >"$dir/worker$i.log" 2>&1 &
    echo $! > "$dir/worker$i.pid"
  done
  for i in $(seq 1 "$n"); do
    wait_for 120 "worker $i (see $dir/worker$i.log)" grep -q "ready\." "$dir/worker$i.log"
  done
  trap - ERR
  echo "broker redis://127.0.0.1:$port/0, $n workers (pids in $dir)"
}

case "${1:-}" in
  start) [[ $# -eq 4 ]] || die "usage: $0 start DIR PORT N"; start "$2" "$3" "$4" ;;
  stop) [[ $# -eq 2 ]] || die "usage: $0 stop DIR"; stop "$2" ;;
  *) die "usage: $0 start DIR PORT N | stop DIR" ;;
esac
