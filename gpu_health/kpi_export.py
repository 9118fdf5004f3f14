"""The KPIs back into Prometheus: the latest partition of the warehouse, exposed for scrape.

``gpu-health serve-metrics --warehouse URL --port 9464`` serves ``/metrics``
(OpenMetrics when the scraper asks for it, as Prometheus does; the classic
text format otherwise), rendered by ``prometheus_client`` from a collector
that reads the warehouse on every scrape. No Dagster: the server runs beside
the code location (or anywhere that can read the warehouse).

What is exposed (one metric name per meaning and unit, Prometheus naming:
``gpu_health_`` prefix, base units, ``_ratio`` for 0..1 fractions; label
values ``*`` mean "not sliced by this dimension", as in the warehouse):

* ``gpu_health_cluster_goodput_ratio{region}``: the north star, provisional
  (``cluster_goodput.goodput`` of the latest partition; ``region="*"`` = the
  cluster);
* ``gpu_health_loss_tree_share_ratio{region,state}``: each loss-tree state's
  share of the paid GPU-minutes (they add to 1 per region);
* ``gpu_health_paid_gpu_seconds{region}`` and
  ``gpu_health_productive_gpu_seconds{region}``: the partition's
  denominator and numerator, in GPU-seconds (base unit);
* ``gpu_health_kpi_<series>_<unit>{region,sku,workload_class,team}``: every
  KPI series of ``kpi_values`` whose status is ok (:data:`UNIT_SUFFIX` maps the
  catalog's units; a ``.`` in a series name becomes ``_``); a degraded or
  no-data series is absent, not 0. Every ratio series also has its
  cluster-wide sample, every dimension ``*`` (:func:`cluster_rollup`: the
  ratio of the summed numerators and denominators of its slices);
* ``gpu_health_partition_start_timestamp_seconds``: which partition the values
  are (freshness: ``time() - gpu_health_partition_start_timestamp_seconds``);
* ``gpu_health_alerts_open{severity,cause_family,region}`` and
  ``gpu_health_alert_usd_per_hour{severity,cause_family,region}``: alerts
  open (firing or clearing) in the latest alerts partition, and the USD per
  hour they burn;
* ``gpu_health_wasted_spend_usd{region,sku,state,cause_family,team}`` and
  ``gpu_health_wasted_spend_date_timestamp_seconds``: the latest settled day of
  ``wasted_spend`` (productive included, so a panel can show the whole bill);
* ``gpu_health_source_gaps{source,missing_family}``: tables written empty for
  missing data in the latest partition (an absent exporter).

Samples carry no timestamp: Prometheus stamps them at scrape time, so a
query at "now" returns the latest partition (an old explicit timestamp would
be out of bounds for its head block).
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import pandas as pd
import sqlalchemy as sa
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector, CollectorRegistry

from gpu_health.constants import PARTITION
from gpu_health.storage.warehouse import Warehouse

PREFIX = "gpu_health"
DIMENSIONS = ["region", "sku", "workload_class", "team"]
# catalog unit -> (metric-name suffix, factor to the exposed unit). A unit not listed is an error, so
# a new catalog unit gets a deliberate, stable name instead of a made-up one.
UNIT_SUFFIX: dict[str, tuple[str, float]] = {
    "ratio": ("ratio", 1.0),
    "s": ("seconds", 1.0),
    "pct": ("ratio", 0.01),  # Prometheus exposes fractions as ratios, never percent
    "gpus": ("gpus", 1.0),
    "retransmits per link-minute": ("per_link_minute", 1.0),  # comm_health.retransmits -> ..._retransmits_per_link_minute
    "usd per productive gpu-hour": ("usd", 1.0),  # cost_per_productive_gpu_hour -> ..._cost_per_productive_gpu_hour_usd
}
# Units whose value is numerator / denominator with both additive over disjoint slices, so the cluster's value is
# sum(numerator) / sum(denominator) (kpi_values' contract). Not here: fragmentation's GPUs (stranded GPU-minutes over
# the minutes of the slice: the minutes do not add across regions) and the quantile (queue_wait_p95, no numerator).
ROLLUP_UNITS = frozenset({"ratio", "pct", "retransmits per link-minute", "usd per productive gpu-hour"})
_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*\Z")


def kpi_metric_name(series: str, unit: str) -> tuple[str, float]:
    """``gpu_health_kpi_<series>_<unit suffix>`` and the factor to its unit (ValueError for an unknown unit)."""
    if unit not in UNIT_SUFFIX:
        raise ValueError(f"KPI unit {unit!r} of {series!r} has no Prometheus name; add it to UNIT_SUFFIX")
    suffix, factor = UNIT_SUFFIX[unit]
    name = f"{PREFIX}_kpi_{series.replace('.', '_')}"
    if not name.endswith(f"_{suffix}"):
        name = f"{name}_{suffix}"
    if not _NAME.match(name):
        raise ValueError(f"{name!r} is not a valid Prometheus metric name")
    return name, factor


def _latest(wh: Warehouse, table: str, column: str = "partition_start"):
    """The latest value of ``column`` in ``table`` (None when the table is empty)."""
    t = wh.table(table)
    with wh.engine.connect() as conn:
        value = conn.execute(sa.select(sa.func.max(t.c[column]))).scalar()
    if value is None:
        return None
    return pd.Timestamp(value).tz_localize("UTC") if pd.Timestamp(value).tzinfo is None else pd.Timestamp(value).tz_convert("UTC")


def _partition(wh: Warehouse, table: str, start: pd.Timestamp, width: pd.Timedelta = PARTITION) -> pd.DataFrame:
    return wh.read_window(table, start, start + width)


def metric_families(wh: Warehouse) -> list[GaugeMetricFamily]:
    """Every metric of the latest partition (module docstring), read from ``wh`` now."""
    wh.create_all()
    out: list[GaugeMetricFamily] = []
    latest = _latest(wh, "cluster_goodput")
    goodput = GaugeMetricFamily(f"{PREFIX}_cluster_goodput_ratio",
                                "Cluster goodput (north star, provisional): productive / paid GPU-minutes of the latest "
                                "5-minute partition; region=\"*\" is the cluster.", labels=["region"])
    shares = GaugeMetricFamily(f"{PREFIX}_loss_tree_share_ratio",
                               "Share of paid GPU-minutes in each loss-tree state, latest partition.", labels=["region", "state"])
    paid = GaugeMetricFamily(f"{PREFIX}_paid_gpu_seconds", "Paid GPU-seconds of the latest partition.", labels=["region"])
    productive = GaugeMetricFamily(f"{PREFIX}_productive_gpu_seconds", "Productive GPU-seconds of the latest partition.",
                                   labels=["region"])
    stamp = GaugeMetricFamily(f"{PREFIX}_partition_start_timestamp_seconds",
                              "Start (Unix time) of the partition the gpu_health metrics describe.")
    out += [goodput, shares, paid, productive, stamp]
    if latest is None:
        return out
    stamp.add_metric([], latest.timestamp())
    cg = _partition(wh, "cluster_goodput", latest)
    for row in cg.itertuples(index=False):
        region = str(row.region)
        if pd.notna(row.goodput):
            goodput.add_metric([region], float(row.goodput))
        paid.add_metric([region], float(row.paid_gpu_minutes) * 60.0)
        productive.add_metric([region], float(row.productive_gpu_minutes) * 60.0)
        for col in cg.columns:
            value = getattr(row, col)
            if col.startswith("share_") and pd.notna(value):
                shares.add_metric([region, col[len("share_"):]], float(value))

    kv = _partition(wh, "kpi_values", latest)
    kv = pd.concat([kv.loc[kv["status"].astype(str) == "ok"], cluster_rollup(kv)], ignore_index=True)
    families: dict[str, GaugeMetricFamily] = {}
    for row in kv.itertuples(index=False):
        name, factor = kpi_metric_name(str(row.kpi), str(row.unit))
        fam = families.get(name)
        if fam is None:
            fam = families[name] = GaugeMetricFamily(name, f"KPI {row.kpi} ({row.unit}), latest partition; see docs/kpis.md.",
                                                     labels=DIMENSIONS)
        fam.add_metric([str(getattr(row, d)) for d in DIMENSIONS], float(row.value) * factor)
    out += [families[k] for k in sorted(families)]

    out += _alerts(wh)
    out += _wasted(wh)
    gaps = GaugeMetricFamily(f"{PREFIX}_source_gaps", "Source tables written empty for missing data (silent producer) "
                             "in the latest partition.", labels=["source", "missing_family"])
    g = _partition(wh, "source_gaps", latest)
    for (source, family), n in g.groupby(["source", "missing_family"]).size().items():
        gaps.add_metric([str(source), str(family)], float(n))
    out.append(gaps)
    return out


def cluster_rollup(kv: pd.DataFrame) -> pd.DataFrame:
    """The cluster-wide row (every dimension ``*``) of each ratio series of ``kv`` (one partition) that lacks one.

    kpi_values stores the finest slices only; their ratios neither add nor average into the cluster's (an
    allocation rate summed over SKUs exceeds 1), their numerators and denominators do. A series with a degraded
    slice gets no cluster-wide row: its sum would silently leave that slice's unmeasured part out. No slice
    measured anything (zero denominator): no row either, a missing reading is never 0."""
    cols = ["kpi", *DIMENSIONS, "value", "unit", "status"]
    if kv.empty:
        return pd.DataFrame(columns=cols)
    kv = kv.assign(kpi=kv["kpi"].astype(str), unit=kv["unit"].astype(str), status=kv["status"].astype(str))
    star = (kv[DIMENSIONS].astype(str) == "*").all(axis=1)
    rows = []
    for (kpi, unit), grp in kv.loc[kv["unit"].isin(ROLLUP_UNITS)].groupby(["kpi", "unit"]):
        if star[grp.index].any() or (grp["status"] == "degraded").any():
            continue
        num, den = pd.to_numeric(grp["numerator"]).sum(), pd.to_numeric(grp["denominator"]).sum()
        if den > 0 and pd.notna(num):
            rows.append({"kpi": kpi, **{d: "*" for d in DIMENSIONS}, "value": float(num / den), "unit": unit, "status": "ok"})
    return pd.DataFrame(rows, columns=cols)


def _alerts(wh: Warehouse) -> list[GaugeMetricFamily]:
    labels = ["severity", "cause_family", "region"]
    count = GaugeMetricFamily(f"{PREFIX}_alerts_open", "Alerts open (firing or clearing) in the latest alerts partition.",
                              labels=labels)
    usd = GaugeMetricFamily(f"{PREFIX}_alert_usd_per_hour", "USD per hour burning under the open alerts.", labels=labels)
    latest = _latest(wh, "alerts")
    if latest is not None:
        a = _partition(wh, "alerts", latest)
        a = a.loc[a["status"].astype(str) != "resolved"]
        for key, grp in a.groupby(labels):
            count.add_metric([str(k) for k in key], float(len(grp)))
            usd.add_metric([str(k) for k in key], float(grp["usd_per_hour"].sum()))
    return [count, usd]


def _wasted(wh: Warehouse) -> list[GaugeMetricFamily]:
    labels = ["region", "sku", "state", "cause_family", "team"]
    usd = GaugeMetricFamily(f"{PREFIX}_wasted_spend_usd", "USD by loss-tree state of the latest settled day "
                            "(state=\"productive\" is the productive spend).", labels=labels)
    day = GaugeMetricFamily(f"{PREFIX}_wasted_spend_date_timestamp_seconds", "Start (Unix time) of the day wasted_spend describes.")
    latest = _latest(wh, "wasted_spend", "date")
    if latest is not None:
        w = wh.read_window("wasted_spend", latest.normalize(), latest.normalize() + pd.Timedelta(days=1))
        day.add_metric([], latest.normalize().timestamp())
        for key, value in w.groupby(labels)["usd"].sum().items():
            usd.add_metric([str(k) for k in key], float(value))
    return [usd, day]


class WarehouseCollector(Collector):
    """A ``prometheus_client`` collector reading the warehouse on each scrape."""

    def __init__(self, url: str):
        self.url = url
        self._wh: Warehouse | None = None

    def collect(self) -> Iterator[GaugeMetricFamily]:
        if self._wh is None:
            self._wh = Warehouse(self.url)
        yield from metric_families(self._wh)


def registry_for(url: str) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(WarehouseCollector(url))
    return registry


def serve(url: str, port: int = 9464, address: str = "127.0.0.1"):
    """Start the HTTP server in a background thread; returns ``(server, thread)`` (``server.shutdown()`` stops it).

    Port 9464 is the one OpenTelemetry's Prometheus exporter registered; any free port works.
    """
    from prometheus_client import start_http_server

    return start_http_server(port, addr=address, registry=registry_for(url))
