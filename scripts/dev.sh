#!/usr/bin/env bash
# Set up and run the main job: `dagster dev` on the embedded default
# (simulator -> SQLite warehouse under ./var, the 5-minute sensor running).
# Open http://127.0.0.1:3000 . Ctrl-C stops it.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
mkdir -p var/dagster_home
export DAGSTER_HOME="$PWD/var/dagster_home"
[ -f "$DAGSTER_HOME/dagster.yaml" ] || cp deploy/dagster_local.yaml "$DAGSTER_HOME/dagster.yaml"
export GPU_HEALTH_WAREHOUSE_URL="${GPU_HEALTH_WAREHOUSE_URL:-sqlite:///$PWD/var/warehouse.db}"
export GPU_HEALTH_SOURCE="${GPU_HEALTH_SOURCE:-simulator}"
export GPU_HEALTH_LIVE="${GPU_HEALTH_LIVE:-true}"   # the simulator follows the clock
# each alert sent to Alertmanager links back to the alerts asset of this UI
export GPU_HEALTH_ALERT_LINK="${GPU_HEALTH_ALERT_LINK:-http://${HOST:-127.0.0.1}:${PORT:-3000}/assets/alerts}"
exec env --default-signal=INT,TERM .venv/bin/dagster dev -w workspace.yaml -h "${HOST:-127.0.0.1}" -p "${PORT:-3000}"
