#!/usr/bin/env bash
# Set up and run the main job: `dagster dev` on the embedded default
# (simulator -> SQLite warehouse under ./var, the 5-minute sensor running), with
# - the partitions starting DEV_DAYS (default 2) days back, at the beginning of that UTC day (unless
#   GPU_HEALTH_PARTITION_START is set); the days before the sensor's first hour (DEV_DAYS at most), and the day
#   before today's finance, are backfilled once in the background: a Dagster backfill, on the UI's Backfills page
#   (python -m gpu_health.dev backfill; $DAGSTER_HOME/dev_backfill.json marks it submitted);
# - a local Alertmanager with deploy/alertmanager.yml's routes, every notifier a webhook on this machine that
#   appends each notification to var/alerts/webhook.jsonl; the delivery sensor posts to it;
# - SCENARIO=path/to/scenario.yaml: the simulator runs that scenario, moved so that its first incident starts
#   SCENARIO_IN (default 5m) after this start (var/dev/scenario.yaml).
# Open http://127.0.0.1:3000 (HOST, PORT). Ctrl-C stops everything it started.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -n "${GPU_HEALTH_SKIP_SETUP:-}" ] || bash scripts/setup.sh   # set: the .venv is set up already
mkdir -p var/dagster_home var/dev var/alerts var/alertmanager
export DAGSTER_HOME="$PWD/var/dagster_home"
[ -f "$DAGSTER_HOME/dagster.yaml" ] || cp deploy/dagster_local.yaml "$DAGSTER_HOME/dagster.yaml"
PY=.venv/bin/python
HOST="${HOST:-127.0.0.1}" PORT="${PORT:-3000}"
export GPU_HEALTH_WAREHOUSE_URL="${GPU_HEALTH_WAREHOUSE_URL:-sqlite:///$PWD/var/warehouse.db}"
export GPU_HEALTH_SOURCE="${GPU_HEALTH_SOURCE:-simulator}"
export GPU_HEALTH_LIVE="${GPU_HEALTH_LIVE:-true}"   # the simulator follows the clock
# each alert sent to Alertmanager links back to the alerts asset of this UI
export GPU_HEALTH_ALERT_LINK="${GPU_HEALTH_ALERT_LINK:-http://$HOST:$PORT/assets/alerts}"
# computed once here: every Dagster process must see the same partitions
recent="$($PY -m gpu_health.dev start --days "${DEV_DAYS:-2}")"
export GPU_HEALTH_PARTITION_START="${GPU_HEALTH_PARTITION_START:-$recent}"
# the backfill covers DEV_DAYS at most, whatever the start (keys compare as text: zero-padded, largest unit first)
backfill_from="$GPU_HEALTH_PARTITION_START"
[[ "$recent" > "$backfill_from" ]] && backfill_from="$recent"
if [ -n "${SCENARIO:-}" ]; then
  $PY -m gpu_health.dev rebase "$SCENARIO" --incident-in="${SCENARIO_IN:-5m}" --out var/dev/scenario.yaml
  export GPU_HEALTH_SCENARIO="$PWD/var/dev/scenario.yaml"
fi

pids=()
stop() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap stop EXIT
free_port() { $PY -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# Alertmanager and its webhook, unless the user points delivery at an Alertmanager of their own
if [ -z "${GPU_HEALTH_ALERTMANAGER_URL:-}" ]; then
  am_bin="${GPU_HEALTH_ALERTMANAGER_BIN:-$(command -v prometheus-alertmanager || command -v alertmanager || true)}"
  if [ -z "$am_bin" ]; then
    echo "dev: no Alertmanager binary (scripts/setup.sh installs prometheus-alertmanager): alerts are not delivered" >&2
  else
    webhook_port="${WEBHOOK_PORT:-$(free_port)}"
    am_port="${ALERTMANAGER_PORT:-$(free_port)}"
    $PY -m gpu_health.dev webhook --port "$webhook_port" --log var/alerts/webhook.jsonl &
    pids+=($!)
    $PY -m gpu_health.dev alertmanager-config deploy/alertmanager.yml --webhook "http://127.0.0.1:$webhook_port/" \
      --out var/alertmanager/alertmanager.yml
    # 127.0.0.1 only; no cluster listener (it would gossip on every interface and delay the shutdown)
    "$am_bin" --config.file=var/alertmanager/alertmanager.yml --storage.path=var/alertmanager/data \
      --web.listen-address="127.0.0.1:$am_port" --cluster.listen-address= >var/alertmanager/log 2>&1 &
    pids+=($!)
    export GPU_HEALTH_ALERTMANAGER_URL="http://127.0.0.1:$am_port"
    echo "dev: Alertmanager $GPU_HEALTH_ALERTMANAGER_URL (its log: var/alertmanager/log); notifications: var/alerts/webhook.jsonl" >&2
  fi
fi

$PY -m gpu_health.dev backfill --graphql "http://$HOST:$PORT/graphql" --start "$backfill_from" \
  --marker "$DAGSTER_HOME/dev_backfill.json" --ui "http://$HOST:$PORT" &
pids+=($!)
echo "dev: partitions from $GPU_HEALTH_PARTITION_START; UI http://$HOST:$PORT" >&2
env --default-signal=INT,TERM .venv/bin/dagster dev -w workspace.yaml -h "$HOST" -p "$PORT"
