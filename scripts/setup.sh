#!/usr/bin/env bash
# Set up everything the project needs on a fresh machine (idempotent):
#   - Debian packages: PostgreSQL 15 server binaries, Prometheus, Alertmanager, Redis (the distributed
#     executor's broker), Chromium and its driver (the browser test) -- installed only when missing; needs root,
#     as on the project's machines
#   - .venv with the pinned dependency set (requirements.lock) and gpu_health itself
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
[ -x /usr/lib/postgresql/15/bin/initdb ] || need_apt+=(postgresql-15)
command -v prometheus >/dev/null 2>&1 || need_apt+=(prometheus)
command -v promtool >/dev/null 2>&1 || need_apt+=(prometheus)
command -v prometheus-alertmanager >/dev/null 2>&1 || need_apt+=(prometheus-alertmanager)
command -v redis-server >/dev/null 2>&1 || need_apt+=(redis-server)
command -v chromium >/dev/null 2>&1 || need_apt+=(chromium)
command -v chromedriver >/dev/null 2>&1 || need_apt+=(chromium-driver)
if [ ${#need_apt[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "setup: missing Debian packages ${need_apt[*]}; run as root or install them" >&2
    exit 1
  fi
  echo "setup: installing ${need_apt[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q >/dev/null
  apt-get install -y -q --no-install-recommends "${need_apt[@]}" >/dev/null
  # the Debian packages start services on some systems; the project starts its own
  systemctl stop prometheus prometheus-alertmanager postgresql redis-server >/dev/null 2>&1 || true
fi

PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null 2>&1 || PY=python3
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
stamp=.venv/.gpu_health-installed
if [ ! -f "$stamp" ] || [ requirements.lock -nt "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  .venv/bin/python -m pip install -q --upgrade pip >/dev/null
  .venv/bin/python -m pip install -q -c requirements.lock -e ".[dev]"
  touch "$stamp"
fi
# the package's bytecode, written here once: where PYTHONDONTWRITEBYTECODE is set (as on this project's machines)
# every process would compile the package from source again -- ~0.7 CPU s of each run's, each pipeline stage's
# and each test process's start on 2 cores; a file edited later is compiled again here (stale bytecode is never
# used: Python checks the source's size and time)
.venv/bin/python -m compileall -q gpu_health >/dev/null
echo "setup: ok ($(.venv/bin/python --version), dagster $(.venv/bin/python -c 'import dagster; print(dagster.__version__)'))" >&2
