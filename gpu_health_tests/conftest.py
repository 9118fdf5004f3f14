"""Shared test fixtures: the real services (registered once) and small data.

The service fixtures are imported here and nowhere else when they are
session-scoped: a fixture imported into a test module becomes a second
definition with its own session cache, so it would start a second server.

Small shared data:

* ``sqlite_url`` -- a fresh SQLite warehouse URL in the test's tmp dir;
* ``landing_zone`` -- a landing zone written once per session by
  ``gpu-health simulate`` for the 30 minutes ``LANDING_START`` ..
  ``LANDING_END`` of ``scenarios/thermal_week.yaml``. Treat it as read-only:
  copy it (``copy_landing``) before changing a file.
"""

import shutil
from pathlib import Path

import pandas as pd
import pytest

from gpu_health_tests.services.alertmanager import alertmanager_url  # noqa: F401  (session fixture)
from gpu_health_tests.services.postgres import postgres_url  # noqa: F401  (session fixture)
from gpu_health_tests.services.prometheus import prometheus_factory, scraping_prometheus  # noqa: F401  (fixtures)

REPO = Path(__file__).resolve().parents[1]
THERMAL_WEEK = REPO / "scenarios" / "thermal_week.yaml"
# a Tuesday afternoon, the thermal incident starting at 14:10 inside it
LANDING_START = pd.Timestamp("2026-11-03T14:00:00Z")
LANDING_END = pd.Timestamp("2026-11-03T14:30:00Z")

_DAGSTER_NOISE = ("BetaWarning", "PreviewWarning", "SupersessionWarning")


def pytest_configure(config):
    # the same filters as pyproject's, kept here too so that running a single file with another
    # rootdir / -c stays quiet; they apply to collection (imports, asset decorators) and tests
    for name in _DAGSTER_NOISE:
        config.addinivalue_line("filterwarnings", f"ignore::dagster.{name}")


# Tests that take a large part of the suite's wall time on their own: collected first, so that under pytest-xdist a
# worker starts on them while the others share the rest (collected last, the suite waits for them at its end).
LONG_TESTS = ("test_live_soak.py", "test_distributed.py", "test_browser.py")


def pytest_collection_modifyitems(config, items):
    items.sort(key=lambda item: item.path.name not in LONG_TESTS)  # stable: the order is otherwise kept


def iso(ts: pd.Timestamp) -> str:
    return ts.strftime("%Y-%m-%dT%H:%M:%SZ")


# The messy profile at a fifth of its size (26 nodes: same regions, SKUs, node names, teams, queues, cron retrains
# and collector quirks); its 5 % of nodes without power / temperature raised to 25 % so that so few nodes still
# include some (two of the 26).
MESSY_FIFTH = {"profile": "messy", "gpus": 240, "no_power_temp_share": 0.25}


def benign_rollout(ts) -> dict:
    """A rolling driver upgrade that breaks nothing: a quarter of the nodes in four batches 30 minutes apart, each
    drained six minutes while its driver installs."""
    return {"kind": "driver_upgrade", "ts": ts.isoformat(), "from_version": "550.90.07", "to_version": "550.127.08",
            "scope": {"fraction": 0.25, "batches": 4, "every": "30m", "drain": "6m"},
            "description": "rolling driver upgrade"}


def warehouse_tables(url: str, telemetry_dir: str | None = None) -> dict[str, pd.DataFrame]:
    """Every table of the warehouse at ``url`` (its SQL tables and its columnar store's), each sorted on all its
    columns with object columns as text: two runs wrote the same rows exactly when their frames are equal."""
    from gpu_health.storage.schema import COLUMNAR_TABLES, metadata
    from gpu_health.storage.warehouse import Warehouse

    wh = Warehouse(url, telemetry_dir)
    wh.create_all()
    out = {}
    for name in sorted(set(metadata.tables) | COLUMNAR_TABLES):
        frame = wh.read_window(name)
        frame = frame.astype({c: str for c in frame.columns if frame[c].dtype == object})
        out[name] = frame.sort_values(list(frame.columns), kind="stable").reset_index(drop=True)
    wh.engine.dispose()
    return out


def run_scenario(tmp: Path, name: str, spec: dict, targets=None) -> tuple[str, str]:
    """``spec`` written as ``tmp/name`` (the file's name salts the simulator's draws: keep a test's name) and run
    through the bulk path (`gpu-health run --direct --scenario`) into a fresh SQLite warehouse in ``tmp``; returns
    the scenario's path and the warehouse's URL. ``targets``: the steps to compute (None: every step)."""
    import yaml

    from gpu_health.cli import run

    path = tmp / name
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    url = f"sqlite:///{tmp}/warehouse.db"
    run(spec["start"], spec["end"], scenario=str(path), warehouse=url, quiet=True, direct=True, targets=targets)
    return str(path), url


def simulate(folder: Path, spec: dict) -> Path:
    """``spec`` written as ``folder/scenario.yaml`` and simulated by ``gpu-health simulate`` over its own start ..
    end into the landing zone ``folder/zone``, which is returned."""
    import yaml

    from gpu_health.cli import main

    path = folder / "scenario.yaml"
    path.write_text(yaml.safe_dump(spec))
    zone = folder / "zone"
    assert main(["simulate", "--scenario", str(path), "--landing", str(zone), "--quiet"]) == 0, "simulate failed"
    return zone


@pytest.fixture
def sqlite_url(tmp_path) -> str:
    """A SQLite warehouse of this test alone (created on first use)."""
    return f"sqlite:///{tmp_path / 'warehouse.db'}"


@pytest.fixture(scope="session")
def landing_zone(tmp_path_factory) -> Path:
    """The 30-minute landing zone written by ``gpu-health simulate`` (read-only)."""
    from gpu_health.cli import main

    root = tmp_path_factory.mktemp("landing") / "zone"
    code = main(["simulate", "--scenario", str(THERMAL_WEEK), "--start", iso(LANDING_START),
                 "--end", iso(LANDING_END), "--landing", str(root), "--quiet"])
    assert code == 0, "gpu-health simulate failed"
    return root


@pytest.fixture
def copy_landing(landing_zone, tmp_path):
    """``copy_landing()`` -> a private copy of the landing zone to break files in."""

    def copy() -> Path:
        target = tmp_path / "landing"
        shutil.copytree(landing_zone, target)
        return target

    return copy
