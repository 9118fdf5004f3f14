"""The real-trace report: a window of a real trace through the whole pipeline, and what came out.

:func:`run_report` imports ``[start, end)`` of a trace into a temporary landing
zone, runs every asset over it through Dagster runs (:func:`run_pipeline`, what
``gpu-health run --landing`` runs) into a temporary SQLite warehouse, and reads
back:

* rows landed per source, and what the contract does with them -- first as it
  stands with the trace's gaps left null (validated in memory: rows it would
  quarantine, by reason, and whether the share blocks downstream), then in the
  pipeline run: rows accepted, rows quarantined per reason (``source_rejects``);
* the KPIs: per series, partitions ``ok`` / ``degraded`` / ``no_data``, the
  optional fields it needs that the trace lacks, and the placeholders it read;
* the alerts (family, severity, summary, opened / resolved);
* for each known outage of the trace in the window (derived from the trace's
  own files, see :func:`outages`): whether a ``missing_data`` alert fires in its
  partitions, whether any GPU / hardware alert or page does, the loss tree's
  ``no_data`` share there, and the same read outside the outage (a flag that
  fires everywhere says nothing about the outage).

Placeholders. Some contract fields stay required although these traces lack
them (Philly's GPU memory, SM clock and Xid, host disk and NVMe counters and
requested memory; Zhejiang's packet loss and port state). Left null, every row
is quarantined, and a partition over 5 % rejected is quarantined whole. So
the pipeline run fills them with the values in :data:`PLACEHOLDERS` -- explicit
and recorded (the importer's ``placeholders``), never silently -- and the report
names every series that read one: such a value is not a measurement.

Sources a trace does not cover at all (Philly has no network or training
metrics, Zhejiang only the network) are landed as zero-row files, and an empty
calendar: the run needs every source's partitions, and the report says which
sources were absent.

    python -m gpu_health.traces.report --run philly 2017-10-25T18:00Z 2017-10-27T04:00Z \\
        --run zhejiang 2024-05-23T16:00Z 2024-05-23T17:00Z --out docs/real-traces.md
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from gpu_health.constants import PARTITION
from gpu_health.contracts import CONTRACTS, FIVE_MINUTE_SOURCES, PARTITION_COLUMN, columns, empty_frame
from gpu_health.contracts.validate import validate_frame
from gpu_health.landing import DAILY_SOURCES, WHOLE_SOURCES, partition_path, write_partition
from gpu_health.steps.ingest import ERROR_REJECT_SHARE, REJECT_SHARE_CHECK
from gpu_health.traces import BUILDERS, philly, zhejiang
from gpu_health.traces.common import TraceFrames, default_data_dir, write_trace

# Share of a partition's rows rejected above which the partition is quarantined whole: the source step's rule
BLOCKING_REJECT_SHARE = ERROR_REJECT_SHARE
WITHHELD_WHOLE = "good rows of a partition quarantined whole (over 5 % of its rows rejected)"
OUTAGE_MIN_MINUTES = 2  # a partition counts as "in the outage" when at least this many of its minutes are
SENSOR_EVERY_PARTITION_UP_TO = 24  # partitions re-run alone: all of a window up to two hours, else hourly
HARDWARE_FAMILIES = ("hardware",)
MISSING_DATA = "missing_data"


@dataclass(frozen=True)
class Placeholder:
    """A value standing in for a required field the trace lacks, and the series / detectors that read it."""

    value: object
    feeds: tuple[str, ...]


PLACEHOLDERS: dict[str, dict[str, dict[str, Placeholder]]] = {
    "philly": {
        "gpu_telemetry": {
            "fb_used_mib": Placeholder(0.0, ()),
            "sm_clock_mhz": Placeholder(0.0, ("thermal_throttle evidence",)),
            "xid": Placeholder(0, ("hw_fault_rate.xid", "hardware_fault detector", "step-time baselines' healthy filter")),
        },
        "node_telemetry": {
            "disk_read_mbps": Placeholder(0.0, ("data_io_slowdown evidence",)),
            "disk_write_mbps": Placeholder(0.0, ()),
            "nvme_util_pct": Placeholder(0.0, ("data_io_slowdown severity",)),
        },
        "job_metadata": {"requested_mem_gb": Placeholder(0.0, ())},
    },
    "zhejiang": {
        "network_telemetry": {
            "packet_loss_pct": Placeholder(0.0, ("comm_health.packet_loss", "network_slowdown severity")),
            "link_up": Placeholder(True, ("comm_health.link_down",)),
        },
    },
}


# A source a trace lacks is landed as zero-row files, which say "nothing happened": where a series or a
# detector reads that as a finding, it stands on the absence, not on a measurement.
ABSENT_SOURCE_FEEDS: dict[str, tuple[str, ...]] = {
    "job_runtime_metrics": ("gaming_guardrails.busy_without_progress", "busy_no_progress detector",
                            "loss tree allocated_unproductive"),
}


@dataclass(frozen=True)
class Outage:
    """A stretch of minutes in which a trace's collectors were silent."""

    name: str
    region: str
    source: str  # the telemetry table whose collectors went silent
    start: pd.Timestamp  # first silent minute, UTC
    end: pd.Timestamp  # first minute reporting again
    evidence: str

    def partitions(self, lo: pd.Timestamp, hi: pd.Timestamp) -> pd.DatetimeIndex:
        """5-minute partitions of ``[lo, hi)`` with at least OUTAGE_MIN_MINUTES of their minutes in the outage."""
        parts = pd.date_range(lo, hi, freq=PARTITION, inclusive="left")
        overlap = [(min(p + PARTITION, self.end) - max(p, self.start)) / pd.Timedelta(minutes=1) for p in parts]
        return parts[[o >= OUTAGE_MIN_MINUTES for o in overlap]]


def _runs(minutes: pd.DatetimeIndex) -> list[tuple[pd.Timestamp, pd.Timestamp]]:
    """Consecutive minutes -> [(first, last + 1 minute)]."""
    if minutes.empty:
        return []
    minutes = minutes.sort_values()
    breaks = np.flatnonzero(np.diff(minutes.asi8) != pd.Timedelta(minutes=1).value)
    starts = np.r_[0, breaks + 1]
    ends = np.r_[breaks, len(minutes) - 1]
    return [(minutes[a], minutes[b] + pd.Timedelta(minutes=1)) for a, b in zip(starts, ends)]


def philly_outages(data_dir: str | Path) -> list[Outage]:
    """Minutes in which under half of Philly's fleet reported GPU telemetry, or the liveness file has no row.

    Under half is the missing-data detector's own rule. The second (PST) occurrence of the DST fold hour
    has no row of its own in the source (one row per wall-clock minute): not an outage.
    """
    live = philly.fleet_liveness(data_dir)
    fold_second = pd.DatetimeIndex(live.loc[live.dst_ambiguous, "ts"]) + pd.Timedelta(hours=1)
    silent = live.source_row_missing | (live.active_fraction < 0.5)
    silent &= ~live.ts.isin(fold_second)
    out = []
    for lo, hi in _runs(pd.DatetimeIndex(live.loc[silent, "ts"])):
        span = live[(live.ts >= lo) & (live.ts < hi)]
        missing = int(span.source_row_missing.sum())
        zero = int((span.active_nodes == 0).sum())
        fleet = int(live.loc[live.ts < lo, "total_nodes"].dropna().iloc[-1]) if (live.ts < lo).any() else 0
        out.append(Outage(
            name=f"Philly fleet GPU telemetry gap {lo:%Y-%m-%d %H:%M}Z", region=philly.REGION,
            source="gpu_telemetry", start=lo, end=hi,
            evidence=f"philly_node_sequence.csv: {len(span)} minutes with under half of the fleet reporting GPU "
                     f"telemetry ({missing} without a row, {zero} with 0 of the {fleet} machines active)"))
    return out


def zhejiang_outages(data_dir: str | Path) -> list[Outage]:
    """Minutes inside the rollup's span for which no switch port has a row (the collector was silent)."""
    path = Path(data_dir) / "zhejianglab-a100" / "trafficinfo" / "all_switches_port_minute_rollup.csv"
    roll = pd.read_csv(path, usecols=["minute_utc", "device", "port"])
    per_minute = roll.groupby(pd.to_datetime(roll.minute_utc, utc=True, format="ISO8601")).size()
    full = pd.date_range(per_minute.index.min(), per_minute.index.max(), freq="min")
    ports = len(roll[["device", "port"]].drop_duplicates())
    return [Outage(name=f"Zhejiang switch-port collector gap {lo:%Y-%m-%d %H:%M}Z", region=zhejiang.REGION,
                   source="network_telemetry", start=lo, end=hi,
                   evidence=f"all_switches_port_minute_rollup.csv: no row for any of the {ports} ports in "
                            f"{int((hi - lo) / pd.Timedelta(minutes=1))} minutes")
            for lo, hi in _runs(full.difference(per_minute.index))]


OUTAGE_FINDERS = {"philly": philly_outages, "zhejiang": zhejiang_outages}


def outages(trace: str, data_dir: str | Path | None = None) -> list[Outage]:
    """The known collector outages of ``trace``, from its own files (none known: empty)."""
    finder = OUTAGE_FINDERS.get(trace)
    return finder(Path(data_dir) if data_dir is not None else default_data_dir()) if finder else []


# --------------------------------------------------------------------------- landing


def _window(df: pd.DataFrame, table: str, start: pd.Timestamp, end: pd.Timestamp) -> pd.DataFrame:
    col = PARTITION_COLUMN[table]
    if table in DAILY_SOURCES:
        day = pd.to_datetime(df[col].astype(str))
        return df[(day >= start.tz_localize(None).normalize()) & (day < end.tz_localize(None))]
    return df[(df[col] >= start) & (df[col] < end)]


def contract_findings(frames: TraceFrames, start: pd.Timestamp, end: pd.Timestamp,
                      fills: dict[str, dict[str, object]] | None = None) -> dict:
    """Per source: what the contract does with the window's rows (``fills`` applied to null cells first).

    Rows, rows quarantined (and per reason: a row counts under each reason it breaks), the share, and the
    5-minute partitions whose quarantined share exceeds :data:`BLOCKING_REJECT_SHARE` -- where a
    partition-by-partition run (the sensor's) would stop downstream.
    """
    out = {}
    for table, df in frames.tables.items():
        win = _window(df, table, start, end).reset_index(drop=True)
        for col, value in (fills or {}).get(table, {}).items():
            win[col] = win[col].fillna(value)
        daily = table in DAILY_SOURCES
        v = validate_frame(win, table, start=None if daily else start, end=None if daily else end,
                           origin=f"{frames.trace}:{table}")
        bad = np.zeros(len(win), dtype=bool)
        if len(v.rejects):
            bad[v.rejects["row_index"].unique()] = True
        blocking = []
        if not daily and len(win):
            part = pd.Series(bad).groupby(win[PARTITION_COLUMN[table]].dt.floor(PARTITION).to_numpy()).mean()
            blocking = [p.isoformat() for p, share in part.items() if share > BLOCKING_REJECT_SHARE]
        out[table] = {"rows": len(win), "quarantined": int(bad.sum()), "share": float(bad.mean()) if len(win) else 0.0,
                      "blocking_partitions": blocking,
                      "by_reason": {str(k): int(n) for k, n in v.reject_counts.items()}}
    return out


def land_absent_sources(landing: str | Path, covered: set[str], start: pd.Timestamp, end: pd.Timestamp) -> list[str]:
    """Zero-row files for the sources a trace does not cover, over ``[start, end)``; returns their names."""
    absent = []
    for table in FIVE_MINUTE_SOURCES:
        if table in covered:
            continue
        empty = empty_frame(table)
        for p in pd.date_range(start.floor(PARTITION), end, freq=PARTITION, inclusive="left"):
            write_partition(landing, table, p, empty)
        absent.append(table)
    for table in DAILY_SOURCES:
        if table in covered:
            continue
        for day in pd.date_range(start.normalize(), end, freq="D", inclusive="left"):
            if not partition_path(landing, table, day).exists():
                write_partition(landing, table, day, empty_frame(table))
        absent.append(table)
    for table in WHOLE_SOURCES:
        if table not in covered and not partition_path(landing, table).exists():
            write_partition(landing, table, None, empty_frame(table))
            absent.append(table)
    return absent


# --------------------------------------------------------------------------- reading the run


def _counts_by_reason(rejects: pd.DataFrame) -> dict[str, dict[str, int]]:
    """source -> reason -> quarantined rows (a row counted under each reason it breaks); the good rows of the
    partitions quarantined whole for their reject share under one reason of their own."""
    if rejects.empty:
        return {}
    whole = rejects["check"] == REJECT_SHARE_CHECK if "check" in rejects else pd.Series(False, index=rejects.index)
    rows = rejects[~whole].drop_duplicates(["source", "partition_start", "row_index", "reason"])
    counts = rows.groupby(["source", "reason"]).size()
    out: dict[str, dict[str, int]] = {}
    for (source, reason), n in counts.items():
        out.setdefault(str(source), {})[str(reason)] = int(n)
    rejected = rows[rows["row_index"] >= 0].drop_duplicates(["source", "partition_start", "row_index"])
    rejected = rejected.groupby(["source", "partition_start"]).size()
    for r in rejects[whole].itertuples():
        withheld = int(json.loads(r.row_json)["rows"]) - int(rejected.get((r.source, r.partition_start), 0))
        reason = WITHHELD_WHOLE
        out.setdefault(str(r.source), {})[reason] = out.get(str(r.source), {}).get(reason, 0) + withheld
    return out


def _quarantined_rows(rejects: pd.DataFrame) -> dict[str, int]:
    """source -> rows the run withheld: its rejected rows, and every row of a partition quarantined whole for its
    reject share (the reject standing for it says how many rows the file held)."""
    if rejects.empty:
        return {}
    whole = rejects[rejects["check"] == REJECT_SHARE_CHECK] if "check" in rejects else rejects.iloc[0:0]
    held = {(s, p): int(json.loads(r)["rows"]) for s, p, r in zip(whole["source"], whole["partition_start"], whole["row_json"])}
    rows = rejects[rejects["row_index"] >= 0].drop_duplicates(["source", "partition_start", "row_index"])
    counts = rows.groupby(["source", "partition_start"]).size().to_dict()
    counts.update(held)
    out: dict[str, int] = {}
    for (source, _), n in counts.items():
        out[str(source)] = out.get(str(source), 0) + int(n)
    return out


def _lacking_fields(wh, start: pd.Timestamp, end: pd.Timestamp, covered: set[str]) -> dict[str, list[str]]:
    """Per covered 5-minute source: nullable contract columns null in every accepted row of the window."""
    out = {}
    for table in FIVE_MINUTE_SOURCES:
        if table not in covered:
            continue
        df = wh.read_window(table, start, end)
        schema = CONTRACTS[table].to_schema()
        if df.empty:
            continue
        out[table] = [c for c in columns(table) if schema.columns[c].nullable and df[c].isna().all()]
    return out


def kpi_summary(kpis: pd.DataFrame, lacking: dict[str, list[str]], placeholder_feeds: dict[str, list[str]]) -> list[dict]:
    """Per KPI series: partitions by status, the optional fields it needs that the trace lacks, placeholders read."""
    from gpu_health.metrics.kpi_catalog import CATALOG

    absent = {f"{t}.{c}" for t, cols in lacking.items() for c in cols}
    rows = []
    for k in CATALOG:
        comps = {c.name: c for c in k.components}
        for series in k.series():
            comp = comps.get(series.partition(".")[2]) if "." in series else None
            needs = comp.needs if comp is not None else k.needs
            sel = kpis[kpis["kpi"] == series] if len(kpis) else kpis
            status = sel.groupby("partition_start")["status"].agg(_partition_status) if len(sel) else pd.Series(dtype=object)
            counts = status.value_counts()
            rows.append({
                "series": series, "owner": k.owner,
                "ok": int(counts.get("ok", 0)), "degraded": int(counts.get("degraded", 0)),
                "no_data": int(counts.get("no_data", 0)),
                "missing_fields": sorted(n for n in needs if n in absent),
                "placeholders": sorted(placeholder_feeds.get(series, [])),
            })
    return rows


def _partition_status(s: pd.Series) -> str:
    """A series' status in a partition over its slices: ok if any slice is, else degraded if any is."""
    values = set(s)
    return "ok" if "ok" in values else "degraded" if "degraded" in values else "no_data"


def alert_summary(alerts: pd.DataFrame) -> list[dict]:
    """One entry per alert: its latest snapshot, highest severity and the partitions it fired in."""
    if alerts.empty:
        return []
    a = alerts.sort_values(["alert_id", "partition_start"])
    out = []
    for alert_id, g in a.groupby("alert_id", sort=False):
        last = g.iloc[-1]
        fired = g[g["status"] == "firing"]
        out.append({
            "alert_id": str(alert_id), "detector": str(last["detector"]), "family": str(last["cause_family"]),
            "severity": "page" if (g["severity"] == "page").any() else str(last["severity"]),
            "region": str(last["region"]), "summary": str(last["summary"]),
            "opened_at": last["opened_at"].isoformat(),
            "resolved_at": None if pd.isna(last["resolved_at"]) else last["resolved_at"].isoformat(),
            "firing_partitions": int(len(fired)), "last_evidence": str(last["description"]).split("\n")[0],
        })
    return sorted(out, key=lambda r: (r["opened_at"], r["alert_id"]))


def partition_run_flags(wh, region: str, parts: pd.DatetimeIndex) -> dict[pd.Timestamp, bool]:
    """Whether ``missing_data`` fires for ``region`` in each partition of ``parts`` computed alone, as the
    sensor computes it (the inventory as of the partition: :func:`gpu_health.steps.telemetry.inventory_segments`)
    -- :func:`gpu_health.steps.diagnosis.alerts` over ``[p, p + 5 min)`` on the run's warehouse, read only. A range
    run judges each partition against the same inventory; they can still differ through the open alerts carried
    from the previous partition."""
    from gpu_health.steps.diagnosis import alerts as partition_alerts
    from gpu_health.steps.registry import inputs_for

    out = {}
    for p in parts:
        a = partition_alerts(inputs_for("alerts", wh, p, p + PARTITION))
        out[p] = bool(len(a) and ((a["status"] == "firing") & (a["cause_family"] == MISSING_DATA)
                                  & a["region"].isin([region, "*"])).any())
    return out


def sensor_sample(start: pd.Timestamp, end: pd.Timestamp, outage: Outage) -> pd.DatetimeIndex:
    """The partitions re-run alone: every partition of a window up to two hours, else one an hour plus the
    outage's first and last partitions."""
    every = pd.date_range(start, end, freq=PARTITION, inclusive="left")
    if len(every) <= SENSOR_EVERY_PARTITION_UP_TO:
        return every
    inside = outage.partitions(start, end)
    hourly = pd.date_range(start.ceil("1h"), end, freq="1h", inclusive="left")
    edges = inside[[0, -1]] if len(inside) else inside
    return hourly.union(edges)


def outage_verdict(outage: Outage, alerts: pd.DataFrame, states: pd.DataFrame, reporting: pd.Series,
                   start: pd.Timestamp, end: pd.Timestamp, sensor: dict[pd.Timestamp, bool] | None = None) -> dict:
    """Whether ``outage`` reads as missing data in the run: computed from the alerts and the loss tree."""
    lo, hi = max(outage.start, start), min(outage.end, end)
    inside = outage.partitions(start, end)
    every = pd.date_range(start, end, freq=PARTITION, inclusive="left")
    outside = every.difference(inside)
    firing = alerts[alerts["status"] == "firing"] if len(alerts) else alerts
    region = firing[firing["region"].isin([outage.region, "*"])] if len(firing) else firing

    def share_firing(parts: pd.DatetimeIndex, mask) -> float | None:
        if not len(parts):
            return None
        hit = set(region.loc[mask(region), "partition_start"]) if len(region) else set()
        return sum(p in hit for p in parts) / len(parts)

    is_missing = lambda f: f["cause_family"] == MISSING_DATA  # noqa: E731
    in_outage = region[region["partition_start"].isin(inside)] if len(region) else region
    gpu_alerts = in_outage[in_outage["cause_family"].isin(HARDWARE_FAMILIES)] if len(in_outage) else in_outage
    pages = in_outage[(in_outage["severity"] == "page") & (in_outage["cause_family"] != MISSING_DATA)] if len(in_outage) else in_outage

    def state_share(parts: pd.DatetimeIndex, state: str) -> float | None:
        if states.empty or not len(parts):
            return None
        s = states[states["partition_start"].isin(parts) & (states["region"] == outage.region)]
        paid = float(s["gpu_minutes"].sum())
        return float(s.loc[s["state"] == state, "gpu_minutes"].sum()) / paid if paid else None

    def median_rows(parts: pd.DatetimeIndex) -> float | None:
        return float(reporting.reindex(parts, fill_value=0).median()) if len(parts) else None

    covered = share_firing(inside, is_missing)
    elsewhere = share_firing(outside, is_missing)
    sensor = sensor or {}
    sensor_in = [p for p in sorted(sensor) if p in set(inside)]
    sensor_out = [p for p in sorted(sensor) if p not in set(inside)]
    if not len(inside):
        verdict = "not in the window"
    elif covered == 1.0 and gpu_alerts.empty and pages.empty:
        verdict = "flagged as missing data, no GPU incident"
    elif covered and covered > 0:
        verdict = "partly flagged as missing data" if gpu_alerts.empty and pages.empty else \
                  "missing data flagged, but a GPU incident or page was raised too"
    else:
        verdict = "NOT flagged as missing data" + ("; a GPU incident or page was raised" if len(gpu_alerts) or len(pages) else "")
    specific = None if not covered or elsewhere is None else elsewhere < 0.5
    return {
        "outage": outage.name, "region": outage.region, "source": outage.source,
        "start": outage.start.isoformat(), "end": outage.end.isoformat(),
        "evidence": outage.evidence,
        "in_window": [lo.isoformat(), hi.isoformat()] if lo < hi else None,
        "partitions": len(inside), "missing_data_share": covered, "missing_data_share_elsewhere": elsewhere,
        "specific_to_outage": specific,
        "gpu_alerts": sorted(set(gpu_alerts["detector"])) if len(gpu_alerts) else [],
        "pages": sorted(set(pages["detector"])) if len(pages) else [],
        "no_data_share": state_share(inside, "no_data"), "no_data_share_elsewhere": state_share(outside, "no_data"),
        "hw_unavailable_share": state_share(inside, "hw_unavailable"),
        "hw_unavailable_share_elsewhere": state_share(outside, "hw_unavailable"),
        "telemetry_rows_median": median_rows(inside), "telemetry_rows_median_elsewhere": median_rows(outside),
        "partition_runs": len(sensor_in), "partition_runs_elsewhere": len(sensor_out),
        "partition_run_share": (sum(sensor[p] for p in sensor_in) / len(sensor_in)) if sensor_in else None,
        "partition_run_share_elsewhere": (sum(sensor[p] for p in sensor_out) / len(sensor_out)) if sensor_out else None,
        "partition_runs_not_flagged": [p.isoformat() for p in sensor_in if not sensor[p]],
        "verdict": verdict,
    }


# --------------------------------------------------------------------------- the report


@dataclass
class ReportRun:
    """Where a report's run happens (temporary unless given)."""

    workdir: Path
    landing: Path = field(init=False)
    warehouse_url: str = field(init=False)

    def __post_init__(self):
        self.landing = self.workdir / "landing"
        self.warehouse_url = f"sqlite:///{self.workdir / 'warehouse.db'}"


def run_report(trace: str, start, end, *, data_dir: str | Path | None = None, workdir: str | Path | None = None,
               limit: int | None = None, placeholders: dict | None = None) -> dict:
    """Import ``[start, end)`` of ``trace``, run the pipeline over it and report (see the module docstring).

    ``placeholders`` defaults to :data:`PLACEHOLDERS` of the trace (pass ``{}`` for none: with required
    fields null the contract checks then block the run, which the report records). ``workdir`` keeps the
    landing zone and warehouse (a temporary directory, removed afterwards, by default).
    """
    if trace not in BUILDERS:
        raise ValueError(f"unknown trace {trace!r}; choose one of {sorted(BUILDERS)}")
    start, end = _utc(start), _utc(end)
    if end <= start or start != start.floor(PARTITION) or end != end.floor(PARTITION):
        raise ValueError("the window must be 5-minute aligned with end after start")
    data = Path(data_dir) if data_dir is not None else default_data_dir()
    specs = PLACEHOLDERS.get(trace, {}) if placeholders is None else placeholders
    fills = {t: {c: (p.value if isinstance(p, Placeholder) else p) for c, p in cols.items()} for t, cols in specs.items()}
    feeds: dict[str, list[str]] = {}
    for table, cols in specs.items():
        for col, p in cols.items():
            for series in (p.feeds if isinstance(p, Placeholder) else ()):
                feeds.setdefault(series, []).append(f"{table}.{col}")

    if workdir is None:
        with tempfile.TemporaryDirectory(prefix=f"trace-report-{trace}-") as tmp:
            return _run(trace, start, end, data, ReportRun(Path(tmp)), limit, fills, feeds)
    Path(workdir).mkdir(parents=True, exist_ok=True)
    return _run(trace, start, end, data, ReportRun(Path(workdir)), limit, fills, feeds)


def run_pipeline(landing: Path, warehouse_url: str, start: pd.Timestamp, end: pd.Timestamp) -> dict:
    """Every asset over ``[start, end)`` from ``landing`` into ``warehouse_url``, through the Dagster range runs
    ``gpu-health run --landing`` starts (:func:`gpu_health.defs.range_runs.run_range`), with the environment's
    source settings as that command reads them; returns the range's summary. Raises ``RuntimeError`` naming each
    failed piece once the range has run, as the command fails."""
    from gpu_health.defs.range_runs import CodeLocation, run_range
    from gpu_health.defs.resources import SOURCE_ENVIRONMENT, SourceSpec, TelemetrySourceResource, default_resources
    from gpu_health.constants import PARTITION_KEY_FMT

    env = default_resources()["source"]
    settings = {k: getattr(env, k) for k in SOURCE_ENVIRONMENT if k not in ("kind", "scenario", "live", "landing_dir")}
    source = TelemetrySourceResource(kind="landing", landing_dir=str(landing), **settings)
    location = CodeLocation(url=warehouse_url, telemetry_dir="", source=SourceSpec(source),
                            partition_start=start.normalize().strftime(PARTITION_KEY_FMT))
    summary = run_range(location, start, end)
    if summary.get("failed_partitions"):
        raise RuntimeError("; ".join(f"{e['step']} {e['partitions']} failed: {e['reason']}"
                                     for e in summary["failed_partitions"]))
    return summary


def _run(trace, start, end, data, where: ReportRun, limit, fills, feeds) -> dict:
    from gpu_health.storage.warehouse import Warehouse

    frames = BUILDERS[trace](data, limit=limit)
    as_it_stands = contract_findings(frames, start, end)
    with_placeholders = contract_findings(frames, start, end, fills) if fills else as_it_stands
    imported = write_trace(where.landing, frames, start=start, end=end, placeholders=fills)
    covered = set(frames.tables)
    absent = land_absent_sources(where.landing, covered, start, end)
    for source in absent:
        for series in ABSENT_SOURCE_FEEDS.get(source, ()):
            feeds.setdefault(series, []).append(f"{source} (absent)")
    try:
        run = run_pipeline(where.landing, where.warehouse_url, start, end)
        error = None
    except RuntimeError as err:  # the run failed (e.g. a blocking contract check): report what got stored
        run, error = None, str(err)

    wh = Warehouse(where.warehouse_url)
    rejects = wh.read_window("source_rejects")
    accepted = {t: len(wh.read_window(t, start, end)) for t in sorted(covered)}
    quarantined = _quarantined_rows(rejects)
    kpis = wh.read_window("kpi_values", start, end)
    alerts = wh.read_window("alerts", start, end)
    states = wh.read_window("goodput_states", start, end)
    lacking = _lacking_fields(wh, start, end, covered)
    known = outages(trace, data)
    return {
        "trace": trace, "window": [start.isoformat(), end.isoformat()],
        "partitions": int((end - start) / PARTITION),
        "landed": imported["rows"], "skipped_at_import": imported["skipped"],
        "absent_sources": absent,
        "contract_as_it_stands": as_it_stands,
        "contract_with_placeholders": with_placeholders,
        "placeholders": {t: {c: _jsonable(v) for c, v in cols.items()} for t, cols in fills.items()},
        "placeholder_feeds": feeds,
        "pipeline": {"ok": error is None, "error": error,
                     "failed_checks": sorted(set(run.get("failed_checks", []))) if run else None},
        "accepted": accepted,
        "quarantined": {t: quarantined.get(t, 0) for t in sorted(covered)},
        "quarantined_by_reason": _counts_by_reason(rejects),
        "fields_the_trace_lacks": lacking,
        "kpis": kpi_summary(kpis, lacking, feeds),
        "alerts": alert_summary(alerts),
        "outages": [outage_verdict(o, alerts, states, _rows_per_partition(wh, o.source, o.region, start, end), start, end,
                                   partition_run_flags(wh, o.region, sensor_sample(start, end, o)) if error is None else None)
                    for o in known if o.end > start and o.start < end],
    }


def _rows_per_partition(wh, source: str, region: str, start: pd.Timestamp, end: pd.Timestamp) -> pd.Series:
    """Accepted rows of ``source`` in ``region`` per 5-minute partition."""
    df = wh.read_window(source, start, end, columns=["ts", "region"])
    return df.loc[df["region"] == region, "ts"].dt.floor(PARTITION).value_counts().sort_index()


def _utc(ts) -> pd.Timestamp:
    ts = pd.Timestamp(ts)
    return ts.tz_localize("UTC") if ts.tzinfo is None else ts.tz_convert("UTC")


def _jsonable(v):
    return v.item() if isinstance(v, np.generic) else v


# --------------------------------------------------------------------------- markdown


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.0f} %"


def _num(x: float | None) -> str:
    return "n/a" if x is None else f"{x:,.0f}" if float(x).is_integer() else f"{x:,.1f}"


def _table(header: list[str], rows: list[list]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return out


FINDINGS_BEGIN = "<!-- findings: written by hand, kept when the figures are regenerated -->"
FINDINGS_END = "<!-- end of findings -->"


def kept_findings(text: str) -> str:
    """The hand-written findings block of an existing report (markers included), or ''."""
    if FINDINGS_BEGIN not in text or FINDINGS_END not in text:
        return ""
    return text[text.index(FINDINGS_BEGIN):text.index(FINDINGS_END) + len(FINDINGS_END)]


def render_markdown(reports: list[dict], command: str, findings: str = "") -> str:
    """The report as markdown: hand-written ``findings`` (kept as given), then one section of figures per
    run, taken only from the reports."""
    lines = ["# Real traces through the pipeline", "",
             "Figures generated by `gpu_health.traces.report` from the real public traces in `../shared/real-data` "
             "(what they are: `../shared/real-data/README.md`). Regenerate with:", "",
             "    " + command, ""]
    if findings:
        lines += [findings, ""]
    for r in reports:
        lines += _section(r)
    return "\n".join(lines).rstrip() + "\n"


def _section(r: dict) -> list[str]:
    """One run's figures: its rows, what the trace lacks, KPIs, alerts and known outages."""
    lo, hi = r["window"]
    return ([f"## `{r['trace']}`: {lo} to {hi} ({r['partitions']} partitions)", ""] + _absent_sources_part(r) + _rows_part(r) + _lacks_part(r)
            + _kpis_part(r) + _alerts_part(r) + _outages_part(r))


def _absent_sources_part(r: dict) -> list[str]:
    """The sources the trace lacks, landed as zero-row files, and what reads them."""
    lines: list[str] = []
    if r["absent_sources"]:
        lines += [f"Sources not in the trace, landed as zero-row files: {', '.join(f'`{s}`' for s in r['absent_sources'])}.", ""]
        read = [[f"`{s}`", ", ".join(sorted(k for k, v in r["placeholder_feeds"].items() if f"{s} (absent)" in v))]
                for s in r["absent_sources"] if any(f"{s} (absent)" in v for v in r["placeholder_feeds"].values())]
        if read:
            lines += ["Zero rows say \"nothing happened\"; what reads them as a finding stands on the absence:", ""]
            lines += _table(["absent source", "read by"], read) + [""]
    return lines


def _rows_part(r: dict) -> list[str]:
    """Rows landed, accepted and quarantined per source; the placeholders; the run's outcome."""
    lines = ["### Rows: landed, accepted, quarantined", ""]
    stands, filled = r["contract_as_it_stands"], r["contract_with_placeholders"]
    rows = []
    for t in sorted(r["landed"]):
        s, f = stands.get(t, {}), filled.get(t, {})
        rows.append([f"`{t}`", r["landed"][t], f"{s.get('quarantined', 0)} ({_pct(s.get('share'))})",
                     len(s.get("blocking_partitions", [])), f"{f.get('quarantined', 0)} ({_pct(f.get('share'))})",
                     len(f.get("blocking_partitions", [])), r["accepted"].get(t, 0), r["quarantined"].get(t, 0)])
    lines += _table(["source", "landed", "quarantined, gaps left null", "partitions blocked, gaps left null",
                     "quarantined with placeholders", "partitions blocked with placeholders",
                     "accepted in the run", "quarantined in the run"], rows)
    lines += ["", "A partition is blocked when over 5 % of its rows are quarantined: it is then quarantined whole "
              "(its minutes are missing data, never a sample the contract chose), on every path and whatever the "
              "length of the run; the other partitions land.", ""]
    blocked = [[f"`{t}`", ", ".join(f["blocking_partitions"])] for t, f in sorted(filled.items()) if f["blocking_partitions"]]
    if blocked:
        lines += ["Partitions blocked with placeholders:", ""] + _table(["source", "partitions"], blocked) + [""]
    reasons = [[f"`{t}`", reason, n] for t, s in sorted(stands.items()) for reason, n in s["by_reason"].items()]
    if reasons:
        lines += ["Contract as it stands, the trace's gaps left null -- rows quarantined per reason (a row counts "
                  "under each reason it breaks):", ""]
        lines += _table(["source", "reason", "rows"], reasons) + [""]
    if r["placeholders"]:
        lines += ["The run fills those required fields with explicit placeholders (not measurements):", ""]
        ph = []
        for t, cols in r["placeholders"].items():
            for c, v in cols.items():
                readers = sorted(s for s, fields in r["placeholder_feeds"].items() if f"{t}.{c}" in fields)
                ph.append([f"`{t}.{c}`", f"`{v!r}`", ", ".join(readers) or "nothing"])
        lines += _table(["field", "placeholder", "read by"], ph) + [""]
    run_reasons = [[f"`{t}`", reason, n] for t, by in sorted(r["quarantined_by_reason"].items()) for reason, n in by.items()]
    lines += (["Quarantined in the run (`source_rejects`), per reason:", ""] + _table(["source", "reason", "rows"], run_reasons)
              if run_reasons else ["Nothing was quarantined in the run."]) + [""]
    p = r["pipeline"]
    if not p["ok"]:
        lines += [f"**The pipeline run failed:** {p['error']}", ""]
    elif p["failed_checks"]:
        lines += [f"Contract checks that did not pass (WARN unless over 5 % rejected): "
                  f"{', '.join(f'`{c}`' for c in p['failed_checks'])}.", ""]
    skipped = {k: v for k, v in r["skipped_at_import"].items() if "outside the requested window" not in k}
    if skipped:
        lines += ["Not landed by the importer (whole trace, by reason): "
                  + "; ".join(f"{k}: {v:,}" for k, v in skipped.items()) + ".", ""]
    return lines


def _lacks_part(r: dict) -> list[str]:
    """The nullable fields null in every accepted row."""
    lines = ["### What the trace lacks", ""]
    lack = [[f"`{t}`", ", ".join(f"`{c}`" for c in cols) or "--"] for t, cols in r["fields_the_trace_lacks"].items()]
    lines += (_table(["source", "nullable fields null in every accepted row"], lack) if lack else ["(no accepted rows)"]) + [""]
    return lines


def _kpis_part(r: dict) -> list[str]:
    """Partitions per KPI status; which KPIs stand on real readings."""
    lines = ["### KPIs", "", "Partitions per status (over the series' slices: ok if any slice is ok).", ""]
    krows = [[f"`{k['series']}`", k["ok"], k["degraded"], k["no_data"],
              ", ".join(f"`{f}`" for f in k["missing_fields"]) or "--",
              ", ".join(f"`{f}`" for f in k["placeholders"]) or "--"] for k in r["kpis"]]
    lines += _table(["series", "ok", "degraded", "no_data", "degraded by (missing field)",
                     "reads a placeholder or an absent source"], krows)
    computed = [k["series"] for k in r["kpis"] if k["ok"] and not k["placeholders"]]
    fake = [k["series"] for k in r["kpis"] if k["ok"] and k["placeholders"]]
    degraded = [k["series"] for k in r["kpis"] if k["degraded"]]
    lines += ["", f"Computed from real readings: {', '.join(f'`{s}`' for s in computed) or 'none'}. "
              f"Computed from a placeholder or an absent source (not a measurement): "
              f"{', '.join(f'`{s}`' for s in fake) or 'none'}. "
              f"Degraded: {', '.join(f'`{s}`' for s in degraded) or 'none'}.", ""]
    return lines


def _alerts_part(r: dict) -> list[str]:
    """The alerts raised, with their last evidence."""
    lines = ["### Alerts", ""]
    if r["alerts"]:
        lines += _table(["family", "detector", "severity", "region", "opened", "resolved", "firing partitions", "summary"],
                        [[a["family"], a["detector"], a["severity"], a["region"], a["opened_at"],
                          a["resolved_at"] or "open", a["firing_partitions"], a["summary"]] for a in r["alerts"]])
        lines += ["", "Last evidence per alert:", ""] + [f"- `{a['alert_id']}`: {a['last_evidence']}" for a in r["alerts"]]
    else:
        lines += ["No alert was raised."]
    lines += [""]
    return lines


def _outages_part(r: dict) -> list[str]:
    """Each known outage of the window against the other partitions: the verdict."""
    lines = ["### Known outages", ""]
    if not r["outages"]:
        lines += ["No known outage of the trace lies in the window.", ""]
    for o in r["outages"]:
        lines += [f"**{o['outage']}** ({o['start']} to {o['end']}; {o['evidence']}). "
                  f"Verdict: **{o['verdict']}**.", ""]
        lines += _table(["", "outage partitions", "other partitions of the window"], [
            ["partitions", o["partitions"], r["partitions"] - o["partitions"]],
            ["`missing_data` alert firing", _pct(o["missing_data_share"]), _pct(o["missing_data_share_elsewhere"])],
            ["loss tree `no_data` share of paid GPU-minutes", _pct(o["no_data_share"]), _pct(o["no_data_share_elsewhere"])],
            ["loss tree `hw_unavailable` share of paid GPU-minutes", _pct(o["hw_unavailable_share"]),
             _pct(o["hw_unavailable_share_elsewhere"])],
            [f"`{o['source']}` rows accepted per partition (median)", _num(o["telemetry_rows_median"]),
             _num(o["telemetry_rows_median_elsewhere"])],
            ["partitions re-run alone (as the sensor runs them)", o["partition_runs"], o["partition_runs_elsewhere"]],
            ["`missing_data` firing when run alone", _pct(o["partition_run_share"]),
             _pct(o["partition_run_share_elsewhere"])],
        ])
        if o["partition_runs_not_flagged"]:
            lines += ["", "Outage partitions re-run alone in which `missing_data` does not fire: "
                      + ", ".join(o["partition_runs_not_flagged"]) + "."]
        lines += ["", f"GPU / hardware alerts in the outage: {', '.join(o['gpu_alerts']) or 'none'}; pages: "
                      f"{', '.join(o['pages']) or 'none'}. "
                  + ("The missing-data flag is specific to the outage." if o["specific_to_outage"] else
                     "The missing-data flag is NOT specific to the outage: it fires as much outside it."
                     if o["specific_to_outage"] is False else ""), ""]
    return lines


# --------------------------------------------------------------------------- CLI


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gpu_health.traces.report", description=__doc__.split("\n\n")[0])
    parser.add_argument("--run", nargs=3, action="append", metavar=("TRACE", "START", "END"), default=[],
                        help="a trace and a UTC window (repeatable)")
    parser.add_argument("--trace", help="one trace (with --start and --end), same as one --run")
    parser.add_argument("--start")
    parser.add_argument("--end")
    parser.add_argument("--limit", type=int, help="first N jobs / links of the trace (see import_trace)")
    parser.add_argument("--data-dir", help="the real-data folder (default: ../shared/real-data)")
    parser.add_argument("--out", help="markdown report path (default: stdout)")
    parser.add_argument("--json", help="also write the figures as JSON here")
    parser.add_argument("--workdir", help="keep each run's landing zone and warehouse under this directory")
    args = parser.parse_args(argv)
    runs = list(args.run)
    if args.trace:
        if not (args.start and args.end):
            parser.error("--trace needs --start and --end")
        runs.append([args.trace, args.start, args.end])
    if not runs:
        parser.error("give --run TRACE START END (or --trace/--start/--end)")
    reports = [run_report(t, s, e, data_dir=args.data_dir, limit=args.limit,
                          workdir=Path(args.workdir) / f"{i}-{t}" if args.workdir else None)
               for i, (t, s, e) in enumerate(runs)]
    command = "python -m gpu_health.traces.report " + " ".join(
        f"--run {t} {s} {e}" for t, s, e in runs) + (f" --limit {args.limit}" if args.limit else "") + (
        f" --out {args.out}" if args.out else "") + (f" --json {args.json}" if args.json else "")
    previous = Path(args.out).read_text() if args.out and Path(args.out).exists() else ""
    text = render_markdown(reports, shlex.join(shlex.split(command)), kept_findings(previous))
    if args.json:
        Path(args.json).write_text(json.dumps(reports, indent=1, default=str) + "\n")
    if args.out:
        Path(args.out).write_text(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
