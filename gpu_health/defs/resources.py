"""Resources: the warehouse, the telemetry source, and the warehouse IO manager."""

import contextlib
import threading

import dagster as dg
import pandas as pd
from pydantic import PrivateAttr

from gpu_health.storage.warehouse import Warehouse

DEFAULT_WAREHOUSE_URL = "sqlite:///var/warehouse.db"
# Definition metadata of an output its step already stored (Warehouse.replace_windows, all of the step's
# tables in one transaction): the IO manager leaves it alone instead of writing it again on its own.
STORED_BY_STEP = "gpu_health/stored_by_step"
_SOURCES: dict[tuple, object] = {}
_SOURCES_LOCK = threading.Lock()


class WarehouseResource(dg.ConfigurableResource):
    """SQLite by default; PostgreSQL by URL (``GPU_HEALTH_WAREHOUSE_URL``)."""

    url: str = DEFAULT_WAREHOUSE_URL

    def get(self) -> Warehouse:
        return Warehouse(self.url)


class TelemetrySourceResource(dg.ConfigurableResource):
    """Where source tables come from: ``simulator`` (default), ``landing`` or ``prometheus``.

    With the simulator, ``scenario`` is a scenario YAML (empty = the quiet default
    cluster) and ``live`` refuses windows that have not closed yet. ``prometheus``
    serves gpu/node/network telemetry from ``prometheus_url``; its other tables
    come from ``landing_dir``.
    """

    kind: str = "simulator"
    scenario: str = ""
    seed: int = 7
    live: bool = False
    landing_dir: str = "var/landing"
    prometheus_url: str = ""
    slurm_dir: str = ""

    def _key(self) -> tuple:
        return (self.kind, self.scenario, self.seed, self.live, self.landing_dir, self.prometheus_url, self.slurm_dir)

    def get(self):
        with _SOURCES_LOCK:
            key = self._key()
            if key not in _SOURCES:
                _SOURCES[key] = self._build()
            return _SOURCES[key]

    def _build(self):
        from gpu_health.sim.scenario import default_scenario, load_scenario
        from gpu_health.sources.registry import RoutedSource, make_source

        if self.kind == "simulator":
            scen = load_scenario(self.scenario) if self.scenario else default_scenario(seed=self.seed)
            return make_source("simulator", scen, live=self.live)
        if self.kind == "landing":
            return make_source("landing", self.landing_dir)
        if self.kind == "prometheus":
            parts = [make_source("prometheus", self.prometheus_url)]
            if self.slurm_dir:
                parts.append(make_source("slurm", self.slurm_dir))
            parts.append(make_source("landing", self.landing_dir))
            return RoutedSource(*parts)
        raise ValueError(f"unknown source kind {self.kind!r}: simulator | landing | prometheus")


class WarehouseIOManager(dg.ConfigurableIOManager):
    """Stores each asset in the table of the same name, by partition time window.

    Works for one partition and for single-run ranges (``asset_partitions_time_window``);
    a write replaces the window's rows in one transaction. An output whose definition
    metadata says :data:`STORED_BY_STEP` was written by its step together with the step's
    other tables (one transaction for all of them), so it is not written again here.
    """

    url: str = DEFAULT_WAREHOUSE_URL
    _wh: Warehouse | None = PrivateAttr(default=None)

    def _warehouse(self) -> Warehouse:
        if self._wh is None:
            self._wh = Warehouse(self.url)
        return self._wh

    @staticmethod
    def _window(context) -> tuple[pd.Timestamp | None, pd.Timestamp | None]:
        if context.has_asset_partitions:
            tw = context.asset_partitions_time_window
            return pd.Timestamp(tw.start).tz_convert("UTC"), pd.Timestamp(tw.end).tz_convert("UTC")
        return None, None

    def handle_output(self, context: dg.OutputContext, obj: pd.DataFrame) -> None:
        if obj is None or (context.definition_metadata or {}).get(STORED_BY_STEP):
            return
        table = context.asset_key.path[-1]
        start, end = self._window(context)
        with _retry_transient(context):  # the database gone mid-write: the step retries (TRANSIENT_RETRY)
            self._warehouse().replace_window(table, obj, start, end)

    def load_input(self, context: dg.InputContext) -> pd.DataFrame:
        table = context.asset_key.path[-1]
        start, end = self._window(context)
        with _retry_transient(context):
            return self._warehouse().read_window(table, start, end)


@contextlib.contextmanager
def _retry_transient(context):
    from gpu_health.defs.common import transient_retry

    try:
        yield
    except Exception as exc:
        retry = transient_retry(context, exc)
        if retry is None:
            raise
        raise retry from exc
