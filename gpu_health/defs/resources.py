"""Resources: the warehouse, the telemetry source, the warehouse IO manager and Alertmanager; the set the
environment configures (:func:`default_resources`)."""

import itertools
import os
import threading
from pathlib import Path

import dagster as dg
import pandas as pd
from pydantic import PrivateAttr

from gpu_health.defs.retry import retry_transient
from gpu_health.sources.base import DEFAULT_ABSENT_AFTER
from gpu_health.storage.warehouse import Warehouse, masked_url, run_cache

DEFAULT_WAREHOUSE_URL = "sqlite:///var/warehouse.db"
# Definition metadata of an output its step already stored (Warehouse.replace_windows, all of the step's
# tables in one transaction): the IO manager leaves it alone instead of writing it again on its own.
STORED_BY_STEP = "gpu_health/stored_by_step"
_SOURCES: dict[tuple, object] = {}
_SOURCES_LOCK = threading.Lock()


class WarehouseResource(dg.ConfigurableResource):
    """SQLite by default; PostgreSQL by URL (``GPU_HEALTH_WAREHOUSE_URL``). The minute-grain telemetry lives in
    the columnar store at ``telemetry_dir`` (``GPU_HEALTH_TELEMETRY_DIR``; empty: beside a SQLite file,
    ``var/warehouse.db`` -> ``var/telemetry/``, and ``var/telemetry/`` for PostgreSQL)."""

    url: str = DEFAULT_WAREHOUSE_URL
    telemetry_dir: str = ""
    _cache: object = PrivateAttr(default=None)

    def setup_for_execution(self, context) -> None:
        # one write-through cache per run (storage.warehouse.FrameCache): a run's assets read what its upstream
        # assets just wrote without a database round trip
        self._cache = run_cache()

    def get(self) -> Warehouse:
        return Warehouse(env_value(self.url), self.telemetry_dir or None, cache=self._cache)


class TelemetrySourceResource(dg.ConfigurableResource):
    """Where source tables come from: ``simulator`` (default), ``landing`` or ``prometheus``.

    With the simulator, ``scenario`` is a scenario YAML (empty = the quiet default
    cluster) and ``live`` refuses windows that have not closed yet. ``prometheus``
    serves gpu/node/network telemetry from ``prometheus_url``; ``slurm_dir`` (any
    kind but the simulator) serves scheduler_events and job_metadata from
    ``sacct`` / ``squeue --json`` dumps; the other tables come from ``landing_dir``.

    Prometheus settings (docs/running.md: Configuration; :class:`~gpu_health.sources.prometheus.PrometheusSource`):
    ``prometheus_region`` (static region for series without a region label),
    ``prometheus_region_label``, ``prometheus_selector`` (PromQL label matchers put on
    every query), ``prometheus_labels`` (``COLUMN=LABEL,...`` exporter label names, e.g.
    ``node_id=instance,gpu_uuid=gpu_uuid``), ``prometheus_step`` (60s: the contract's
    minute), ``prometheus_ready_lag``. ``absent_after``: how long a window a live
    producer (an exporter, the Slurm dumps, a landing file) has not covered is waited for
    before it is written empty as missing data.
    """

    kind: str = "simulator"
    scenario: str = ""
    seed: int = 7
    live: bool = False
    landing_dir: str = "var/landing"
    prometheus_url: str = ""
    prometheus_region: str = ""
    prometheus_region_label: str = "region"
    prometheus_selector: str = ""
    prometheus_labels: str = ""
    prometheus_step: str = "60s"
    prometheus_ready_lag: str = "2min"
    absent_after: str = DEFAULT_ABSENT_AFTER
    slurm_dir: str = ""
    # facility_telemetry from ipmi_exporter series in the same Prometheus: the rack inventory file
    # (rack_id, region, node_ids, power_budget_kw) and, optionally, the hall meter's metric (watts, region label)
    ipmi_racks: str = ""
    ipmi_hall_metric: str = ""
    # "true": read kube_pods / kube_nodes from kube-state-metrics series in the same Prometheus (optional sources)
    prometheus_kube_state_metrics: str = "false"
    # "true": read inference_requests / inference_latency_buckets from a model server's histograms in the same
    # Prometheus; prometheus_serving_metrics renames the families ("latency=vllm:e2e_request_latency_seconds,...")
    prometheus_serving: str = "false"
    prometheus_serving_metrics: str = ""

    def _key(self) -> tuple:
        # every config field, read from the model: a field added above is part of the key without a second edit
        return tuple(getattr(self, name) for name in type(self).model_fields)

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
        if self.kind not in ("landing", "prometheus"):
            raise ValueError(f"unknown source kind {self.kind!r}: simulator | landing | prometheus")
        parts = []
        if self.kind == "prometheus":
            parts.append(make_source(
                "prometheus", self.prometheus_url, region=self.prometheus_region or None,
                region_label=self.prometheus_region_label, selector=self.prometheus_selector,
                labels=self.prometheus_labels, step=self.prometheus_step, ready_lag=self.prometheus_ready_lag,
                absent_after=self.absent_after,
                kube_state_metrics=self.prometheus_kube_state_metrics.strip().lower() in ("true", "1", "yes"),
                serving=self.prometheus_serving.strip().lower() in ("true", "1", "yes"),
                serving_metrics=self.prometheus_serving_metrics or None))
            if self.ipmi_racks:
                parts.insert(0, make_source(
                    "ipmi", self.prometheus_url, self.ipmi_racks, hall_metric=self.ipmi_hall_metric or None,
                    region=self.prometheus_region or None, region_label=self.prometheus_region_label,
                    selector=self.prometheus_selector))
        if self.slurm_dir:
            parts.append(make_source("slurm", self.slurm_dir, absent_after=self.absent_after))
        landing = make_source("landing", self.landing_dir, absent_after=self.absent_after)
        if not parts:
            return landing
        parts.append(landing)
        return RoutedSource(*parts)


class SourceSpec:
    """A picklable recipe for the source a :class:`TelemetrySourceResource` builds (its field values): what a
    second process needs to read the same source (``gpu_health.steps.direct``'s pipelined ingest)."""

    def __init__(self, resource: "TelemetrySourceResource"):
        self.fields = {name: getattr(resource, name) for name in type(resource).model_fields}

    def resource(self) -> "TelemetrySourceResource":
        return TelemetrySourceResource(**self.fields)

    def get(self):
        return self.resource().get()


class WarehouseIOManager(dg.ConfigurableIOManager):
    """Stores each asset in the table of the same name, by partition time window.

    Works for one partition and for single-run ranges (``asset_partitions_time_window``);
    a write replaces the window's rows in one transaction. An output whose definition
    metadata says :data:`STORED_BY_STEP` was written by its step together with the step's
    other tables (one transaction for all of them), so it is not written again here.
    """

    url: str = DEFAULT_WAREHOUSE_URL
    telemetry_dir: str = ""
    _wh: Warehouse | None = PrivateAttr(default=None)

    def _warehouse(self) -> Warehouse:
        if self._wh is None:
            self._wh = Warehouse(env_value(self.url), self.telemetry_dir or None)
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
        with retry_transient(context):  # the database gone mid-write: the step retries (TRANSIENT_RETRY)
            self._warehouse().replace_window(table, obj, start, end)

    def load_input(self, context: dg.InputContext) -> pd.DataFrame:
        table = context.asset_key.path[-1]
        start, end = self._window(context)
        with retry_transient(context):
            return self._warehouse().read_window(table, start, end)


class AlertmanagerResource(dg.ConfigurableResource):
    """Where alerts go (``GPU_HEALTH_ALERTMANAGER_URL``; empty: delivery is off)."""

    url: str = ""
    generator_url: str = ""  # e.g. the Dagster UI's alerts asset page; {alert_id} is filled in
    runbook_base_url: str = ""  # where docs/runbooks.md is served; each alert's runbook_url is under it
    timeout_s: float = 5.0


def default_runbook_base_url() -> str:
    """``$GPU_HEALTH_RUNBOOK_BASE_URL``, else the checkout's own folder as a file URL when it holds the runbooks
    (a development install: the link opens the page on the machine that runs it), else none."""
    configured = os.environ.get("GPU_HEALTH_RUNBOOK_BASE_URL", "")
    if configured:
        return configured
    checkout = Path(__file__).resolve().parents[2]
    return checkout.as_uri() + "/" if (checkout / "docs" / "runbooks.md").is_file() else ""


WAREHOUSE_URL = dg.EnvVar("GPU_HEALTH_WAREHOUSE_URL")
TELEMETRY_DIR = dg.EnvVar("GPU_HEALTH_TELEMETRY_DIR")
# TelemetrySourceResource's fields from the environment: field -> (variable, default) (docs/running.md: Configuration)
SOURCE_ENVIRONMENT = {
    "kind": ("GPU_HEALTH_SOURCE", "simulator"), "scenario": ("GPU_HEALTH_SCENARIO", ""),
    "live": ("GPU_HEALTH_LIVE", "false"), "landing_dir": ("GPU_HEALTH_LANDING_DIR", "var/landing"),
    "prometheus_url": ("GPU_HEALTH_PROMETHEUS_URL", ""), "prometheus_region": ("GPU_HEALTH_PROMETHEUS_REGION", ""),
    "prometheus_region_label": ("GPU_HEALTH_PROMETHEUS_REGION_LABEL", "region"),
    "prometheus_selector": ("GPU_HEALTH_PROMETHEUS_SELECTOR", ""), "prometheus_labels": ("GPU_HEALTH_PROMETHEUS_LABELS", ""),
    "prometheus_step": ("GPU_HEALTH_PROMETHEUS_STEP", "60s"),
    "prometheus_ready_lag": ("GPU_HEALTH_PROMETHEUS_READY_LAG", "2min"),
    "absent_after": ("GPU_HEALTH_ABSENT_AFTER", DEFAULT_ABSENT_AFTER), "slurm_dir": ("GPU_HEALTH_SLURM_DIR", ""),
    "ipmi_racks": ("GPU_HEALTH_IPMI_RACKS", ""), "ipmi_hall_metric": ("GPU_HEALTH_IPMI_HALL_METRIC", ""),
    "prometheus_kube_state_metrics": ("GPU_HEALTH_PROMETHEUS_KUBE_STATE_METRICS", "false"),
    "prometheus_serving": ("GPU_HEALTH_PROMETHEUS_SERVING", "false"),
    "prometheus_serving_metrics": ("GPU_HEALTH_PROMETHEUS_SERVING_METRICS", ""),
}


# where a --warehouse URL with a password is put for its resources to name (warehouse_url_field)
CLI_WAREHOUSE_URL = "GPU_HEALTH_CLI_WAREHOUSE_URL_"


def warehouse_url_field(url: str) -> str:
    """``url`` as the warehouse resources' ``url`` field. From ``$GPU_HEALTH_WAREHOUSE_URL``, and for any URL with
    a password, a ``dg.EnvVar`` naming a variable that holds it: Dagster reads an EnvVar when a run (or a sensor
    tick) starts and serializes only its name, so the password is in neither the repository snapshot the webserver
    and the daemon load nor the run records. A URL given another way (``--warehouse``) is put into this process's
    environment under a name of its own, which the processes it starts inherit (the stages of a pipelined range)."""
    if os.environ.get(WAREHOUSE_URL.env_var_name) == url:
        return WAREHOUSE_URL
    if masked_url(url) == url:  # no password: nothing to keep out
        return url
    held = [n for n in os.environ if n.startswith(CLI_WAREHOUSE_URL)]
    name = next((n for n in held if os.environ[n] == url), None)
    if name is None:
        name = next(f"{CLI_WAREHOUSE_URL}{i}" for i in itertools.count() if f"{CLI_WAREHOUSE_URL}{i}" not in held)
        os.environ[name] = url
    return dg.EnvVar(name)


def env_value(value: str) -> str:
    """A resource field's value: an EnvVar's variable read now. Inside a run Dagster has already resolved it; a
    resource used outside one (the command line, tests) still holds the EnvVar."""
    return value.get_value() if isinstance(value, dg.EnvVar) else value


def default_resources() -> dict:
    """Resources from the environment (docs/running.md: Configuration). Here, not beside the Definitions, so that the
    command line reads its settings without building every asset (a noticeable part of each ``gpu-health run``'s
    start)."""
    url = warehouse_url_field(WAREHOUSE_URL.get_value(DEFAULT_WAREHOUSE_URL))
    telemetry_dir = TELEMETRY_DIR.get_value("")  # empty: beside the warehouse (WarehouseResource)
    source = {field: dg.EnvVar(var).get_value(default) for field, (var, default) in SOURCE_ENVIRONMENT.items()}
    source["live"] = source["live"].lower() == "true"
    alertmanager_url = dg.EnvVar("GPU_HEALTH_ALERTMANAGER_URL")  # may carry basic-auth credentials: kept unresolved
    return {
        "warehouse": WarehouseResource(url=url, telemetry_dir=telemetry_dir),
        "warehouse_io_manager": WarehouseIOManager(url=url, telemetry_dir=telemetry_dir),
        "source": TelemetrySourceResource(**source),
        "alertmanager": AlertmanagerResource(
            url=alertmanager_url if alertmanager_url.get_value() else "",
            generator_url=dg.EnvVar("GPU_HEALTH_ALERT_LINK").get_value(""),
            runbook_base_url=default_runbook_base_url(),
        ),
    }
