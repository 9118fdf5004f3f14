"""Microsoft Philly (Jeon et al., ATC'19; CC-BY-4.0) -> landing zone.

Inputs (``<real-data>/philly/``, see its README section 2.1):

* ``philly_sampled_jobs.json`` -- 5,910 Pass/Failed jobs (last attempt only);
* ``philly_jobwindow_{gpu_util,cpu_util,mem_free_pct}.csv`` -- per-GPU / per-machine
  minute values at offsets -10 … +3 minutes around each job's start;
* ``cluster_machine_list.csv`` (GPUs per machine and GPU memory);
* ``philly_node_sequence.csv`` -- machines reporting GPU telemetry per minute.

Times are US/Pacific wall clock (PDT -> PST on 2017-11-05) and converted to
UTC. A job time in the fall-back hour (01:00-01:59 on 2017-11-05 happened
twice) is read as its first (PDT) occurrence: the trace cannot tell, since
its ``runtime_min`` is the plain wall-clock difference (so a job running
through the fold really ran 60 minutes longer than ``runtime_min`` says,
which the UTC times show). A window cell is resolved to the occurrence
nearest ``start + offset`` in elapsed time. The CPU window stores both
occurrences of a duplicated minute as one cell holding a stringified pandas
Series (first value = first, PDT occurrence; second = PST: the second
continues into 02:00): such a cell is parsed into two rows, one per UTC
minute.

Tables and what is not in the trace
-----------------------------------
``gpu_telemetry`` (GPU-minutes from the GPU window): ``region`` = ``philly``;
``node_id`` = machine; ``gpu_index`` from ``m127_gpu3``; ``gpu_uuid`` =
placeholder ``philly:<machine>:gpu<N>`` (the trace has no UUIDs); ``sku`` =
placeholder ``Philly GPU 12GB`` / ``Philly GPU 24GB`` from the machine list
(the trace gives memory, not the model; ``unknown`` for unlisted machines);
``job_id`` = the job for offsets >= 0, null before its start (the GPU's
holder then is not in the trace). ``gpu_util_pct`` is the only reading.
Optional DCGM fields, ``power_w`` and ``temp_c`` are null (the contract
accepts null there: the collector did not expose them); the *required*
``fb_used_mib``, ``sm_clock_mhz`` and ``xid`` are also null (no reading
exists; 0 would be a false reading) -- the contract quarantines such rows
(see ``NULL_REQUIRED_COLUMNS``) unless explicit placeholders fill them. Cells skipped, with
counts: empty, ``-1`` (NA in the source), out of 0–100, unparseable, and
every cell in a minute where ``philly_node_sequence`` says no machine
reported GPU telemetry (``active == 0``, e.g. the 2017-10-26 00:00–18:00
outage): the re-cut filled those with 0.0, which is not a reading.

``node_telemetry`` (machine-minutes): ``cpu_util_pct``, ``mem_used_pct`` =
100 − free %; disk/NVMe columns null (required: quarantined as above);
``driver_version``/``kernel_version`` placeholder ``unknown``; ``health`` =
placeholder ``ok`` (the machine reported; its GPU fault state is unknown).

``scheduler_events``: ``submitted``/``started``/``ended`` per job at the UTC
times; ``queue`` = virtual cluster (``vc``); ``priority`` 0 (not in the
trace); ``gpus`` = GPUs in ``detail``; ``node_ids`` = its machines;
``exit_state`` Pass->completed, Failed->failed. ``scheduler`` = ``yarn``
(Philly's gang scheduler ran on YARN: job ids are YARN application ids).
``event_id`` = ``philly:<jobid>:<event>``.

``job_metadata``: ``team`` = the virtual cluster (Philly's VCs are per product
group); ``workload_class`` = ``distributed`` on >1 machine, else ``batch``;
``requested_gpus`` = GPUs in ``detail``; ``requested_mem_gb`` null (not in the
trace; required: quarantined); ``model_type``, ``dataset``,
``container_image``, ``framework_version`` = ``unknown``; ``sla_deadline`` null.

``cost_capacity`` (daily over the trace's days): ``capacity_gpus`` per SKU from
``cluster_machine_list.csv`` (the revised list disagrees -- an inventory
inconsistency left to capacity reconciliation); ``reserved_gpus`` =
capacity (an owned, on-premises fleet); prices from :data:`RATE_CARD`, an
illustrative placeholder (the trace has no prices); ``on_demand_gpu_hours`` 0.

Derived side file ``_derived/philly_fleet_liveness.parquet``: per UTC minute
``active_nodes``, ``total_nodes``, ``active_fraction``, ``fleet_silent``
(``active == 0``), ``source_row_missing`` (the minute has no row in the
source) and ``dst_ambiguous`` (the source's single row for a duplicated
01:xx minute, placed at its first occurrence).
"""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd

from gpu_health.traces.common import UNKNOWN, TraceFrames, conform, default_data_dir, numeric_cells

TRACE = "philly"
TZ = "America/Los_Angeles"
REGION = "philly"
SCHEDULER = "yarn"
EXIT_STATE = {"Pass": "completed", "Failed": "failed"}
# Illustrative USD per GPU-hour (placeholders, not Microsoft's costs): on-demand
# near 2017 public-cloud list prices for 12 GB (K80-class) and 24 GB (P40-class)
# GPUs, reserved at ~2/3 of that.
RATE_CARD: dict[str, dict[str, float]] = {
    "Philly GPU 12GB": {"reserved_gpu_hour_usd": 0.60, "on_demand_gpu_hour_usd": 0.90},
    "Philly GPU 24GB": {"reserved_gpu_hour_usd": 1.40, "on_demand_gpu_hour_usd": 2.07},
}
NULL_REQUIRED_COLUMNS: dict[str, tuple[str, ...]] = {
    "gpu_telemetry": ("fb_used_mib", "sm_clock_mhz", "xid"),
    "node_telemetry": ("disk_read_mbps", "disk_write_mbps", "nvme_util_pct"),
    "job_metadata": ("requested_mem_gb",),
}
_OFFSET = re.compile(r"^-?\d+$")


def _dir(data_dir: str | Path | None) -> Path:
    return Path(data_dir or default_data_dir()) / "philly"


def pacific_to_utc(naive: pd.Series, near: pd.Series | None = None) -> pd.Series:
    """US/Pacific wall clock -> UTC. Ambiguous minutes go to the occurrence nearest ``near`` (UTC), else the first.

    The result keeps ``naive``'s index; ``near`` must be aligned with it.
    """
    naive = pd.to_datetime(pd.Series(naive))
    n = len(naive)
    first = naive.dt.tz_localize(TZ, ambiguous=np.ones(n, dtype=bool), nonexistent="shift_forward").dt.tz_convert("UTC")
    if near is None:
        return first
    second = naive.dt.tz_localize(TZ, ambiguous=np.zeros(n, dtype=bool), nonexistent="shift_forward").dt.tz_convert("UTC")
    near = pd.to_datetime(pd.Series(near), utc=True).set_axis(naive.index)
    take_second = (second != first) & ((second - near).abs() < (first - near).abs())
    return first.where(~take_second, second)


def is_ambiguous(naive: pd.Series) -> pd.Series:
    """True for wall-clock times that occur twice (the fall-back hour)."""
    naive = pd.to_datetime(pd.Series(naive))
    n = len(naive)
    a = naive.dt.tz_localize(TZ, ambiguous=np.ones(n, dtype=bool), nonexistent="shift_forward")
    b = naive.dt.tz_localize(TZ, ambiguous=np.zeros(n, dtype=bool), nonexistent="shift_forward")
    return a != b


# --------------------------------------------------------------------------- jobs


def load_jobs(data_dir: str | Path | None = None, *, limit: int | None = None,
              skipped: Counter | None = None) -> pd.DataFrame:
    """The sampled jobs with UTC times (first ``limit`` by submission when given)."""
    skipped = Counter() if skipped is None else skipped
    raw = json.loads((_dir(data_dir) / "philly_sampled_jobs.json").read_text())
    jobs = pd.DataFrame(raw)
    ok_status = jobs.status.isin(EXIT_STATE)
    for status, n in jobs.loc[~ok_status, "status"].value_counts().items():
        skipped[f"jobs: status {status!r} has no exit_state mapping"] += int(n)
    times = jobs[["submitted_time", "start_time", "end_time"]].apply(pd.to_datetime, errors="coerce")
    ok_times = times.notna().all(axis=1)
    skipped["jobs: missing or unparseable time"] += int((ok_status & ~ok_times).sum())
    jobs = pd.concat([jobs.drop(columns=times.columns), times], axis=1)[ok_status & ok_times]
    jobs = jobs.sort_values(["submitted_time", "jobid"], kind="stable").reset_index(drop=True)
    if limit is not None:
        jobs = jobs.head(limit).reset_index(drop=True)
    jobs["machines"] = jobs.detail.map(lambda d: [m["ip"] for m in d])
    jobs["gpus"] = jobs.detail.map(lambda d: sum(len(m["gpus"]) for m in d)).astype("int64")
    jobs["submitted_utc"] = pacific_to_utc(jobs.submitted_time)
    jobs["start_utc"] = pacific_to_utc(jobs.start_time)
    jobs["end_utc"] = pacific_to_utc(jobs.end_time)
    jobs["anchor_naive"] = jobs.start_time.dt.floor("min")
    jobs["anchor_utc"] = jobs.start_utc.dt.floor("min")
    return jobs


def scheduler_events(jobs: pd.DataFrame) -> pd.DataFrame:
    """submitted / started / ended per job (see the module docstring)."""
    base = pd.DataFrame({
        "job_id": jobs.jobid, "scheduler": SCHEDULER, "queue": jobs.vc,
        "priority": 0, "gpus": jobs.gpus,
    })
    nodes = jobs.machines.map(",".join)
    parts = []
    for event, ts, node_ids, exit_state in (
        ("submitted", jobs.submitted_utc, None, None),
        ("started", jobs.start_utc, nodes, None),
        ("ended", jobs.end_utc, nodes, jobs.status.map(EXIT_STATE)),
    ):
        p = base.assign(event=event, ts=ts, node_ids=node_ids, exit_state=exit_state, reason=None)
        p["event_id"] = "philly:" + jobs.jobid + ":" + event
        parts.append(p)
    ev = pd.concat(parts, ignore_index=True).sort_values(["ts", "event_id"], kind="stable")
    return conform(ev, "scheduler_events")


def job_metadata(jobs: pd.DataFrame) -> pd.DataFrame:
    md = pd.DataFrame({
        "job_id": jobs.jobid,
        "submitted_at": jobs.submitted_utc,
        "team": jobs.vc,
        "model_type": UNKNOWN,
        "workload_class": np.where(jobs.machines.map(len) > 1, "distributed", "batch"),
        "dataset": UNKNOWN,
        "requested_gpus": jobs.gpus,
        "requested_mem_gb": np.nan,
        "container_image": UNKNOWN,
        "framework_version": UNKNOWN,
        "sla_deadline": pd.NaT,
    })
    return conform(md, "job_metadata")


# --------------------------------------------------------------------------- machines, liveness


def machine_skus(data_dir: str | Path | None = None) -> pd.DataFrame:
    """``machine, gpus, sku`` from the original machine list."""
    ml = pd.read_csv(_dir(data_dir) / "cluster_machine_list.csv", skipinitialspace=True)
    ml.columns = [c.strip() for c in ml.columns]
    return pd.DataFrame({
        "machine": ml["machineId"].astype(str).str.strip(),
        "gpus": ml["number of GPUs"].astype("int64"),
        "sku": "Philly GPU " + ml["single GPU mem"].astype(str).str.strip(),
    })


def cost_capacity(machines: pd.DataFrame, days: pd.DatetimeIndex) -> pd.DataFrame:
    cap = machines.groupby("sku", as_index=False).gpus.sum()
    unknown = sorted(set(cap.sku) - set(RATE_CARD))
    if unknown:
        raise KeyError(f"philly: no RATE_CARD entry for SKU(s) {unknown}")
    rows = [
        {"date": d.date(), "region": REGION, "sku": r.sku, "capacity_gpus": int(r.gpus), "reserved_gpus": int(r.gpus),
         **RATE_CARD[r.sku], "on_demand_gpu_hours": 0.0}
        for d in days for r in cap.itertuples()
    ]
    return conform(pd.DataFrame(rows, columns=["date", "region", "sku", "capacity_gpus", "reserved_gpus",
                                               "reserved_gpu_hour_usd", "on_demand_gpu_hour_usd",
                                               "on_demand_gpu_hours"]), "cost_capacity")


def fleet_liveness(data_dir: str | Path | None = None) -> pd.DataFrame:
    """Per UTC minute: machines reporting GPU telemetry (see the module docstring)."""
    s = pd.read_csv(_dir(data_dir) / "philly_node_sequence.csv")
    naive = pd.to_datetime(s.time)
    frame = pd.DataFrame({
        "ts": pacific_to_utc(naive),
        "active_nodes": s.active.astype("Int64"),
        "total_nodes": s.total.astype("Int64"),
        "dst_ambiguous": is_ambiguous(naive),
    }).drop_duplicates("ts").set_index("ts")
    full = pd.date_range(frame.index.min(), frame.index.max(), freq="min", name="ts")
    out = frame.reindex(full)
    out["source_row_missing"] = out.active_nodes.isna()
    out["dst_ambiguous"] = out.dst_ambiguous.astype("boolean").fillna(False).astype(bool)
    out["active_fraction"] = (out.active_nodes.astype("Float64") / out.total_nodes.astype("Float64")).astype("float64")
    out["fleet_silent"] = (out.active_nodes == 0).fillna(False).astype(bool)
    return out.reset_index()[["ts", "active_nodes", "total_nodes", "active_fraction", "fleet_silent",
                              "source_row_missing", "dst_ambiguous"]]


# --------------------------------------------------------------------------- minute windows


def _series_cell_values(text: str) -> list[float] | None:
    """Values of a stringified pandas Series cell (one per data line), None if not parseable."""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    body = [ln for ln in lines[1:] if not ln.startswith("Name:")]
    try:
        return [float(ln.split()[-1]) for ln in body]
    except (ValueError, IndexError):
        return None


def _window_cells(path: Path, jobs: pd.DataFrame, all_job_ids: set, skipped: Counter, label: str) -> pd.DataFrame:
    """Long format: jobid, name, offset, ts (UTC), value -- cells resolved, skips counted."""
    wide = pd.read_csv(path, dtype={"jobid": str, "name": str})  # a column with text cells stays object
    not_listed = ~wide.jobid.isin(all_job_ids)
    if not_listed.any():
        skipped[f"{label}: job not in philly_sampled_jobs.json (rows)"] += int(not_listed.sum())
    wide = wide[wide.jobid.isin(set(jobs.jobid))]
    offsets = [c for c in wide.columns if _OFFSET.match(c)]
    long = wide.melt(id_vars=["jobid", "name"], value_vars=offsets, var_name="offset", value_name="raw")
    long["offset"] = long.offset.astype("int64")
    long = long.merge(jobs[["jobid", "anchor_naive", "anchor_utc"]], on="jobid", how="inner")
    delta = pd.to_timedelta(long.offset, unit="min")
    naive = long.anchor_naive + delta

    is_series = long.raw.map(lambda v: isinstance(v, str) and "Name:" in v).astype(bool)
    plain = long[~is_series].copy()
    plain["ts"] = pacific_to_utc(naive[~is_series], near=(long.anchor_utc + delta)[~is_series])
    value, bad = numeric_cells(plain.raw)
    plain["value"] = value
    skipped[f"{label}: unparseable cell"] += int(bad.sum())
    skipped[f"{label}: empty cell"] += int((value.isna() & ~bad).sum())

    extra = []
    if is_series.any():
        ser = long[is_series]
        ser_naive = naive[is_series]
        values = ser.raw.map(_series_cell_values)
        two = values.map(lambda v: v is not None and len(v) == 2)
        for occurrence, ambiguous in ((0, True), (1, False)):  # first (PDT) then second (PST) occurrence
            ts = ser_naive.dt.tz_localize(TZ, ambiguous=np.full(len(ser_naive), ambiguous)).dt.tz_convert("UTC")
            vals = [v[occurrence] if ok else np.nan for v, ok in zip(values, two)]
            extra.append(ser.assign(ts=ts, value=np.asarray(vals, dtype="float64")))
        skipped[f"{label}: DST-duplicate cell not holding two values"] += int((~two).sum())
        skipped[f"{label}: DST-duplicate cell parsed into two minutes"] += int(two.sum())
    cells = pd.concat([plain, *extra], ignore_index=True)
    return cells[cells.value.notna()][["jobid", "name", "offset", "ts", "value"]]


def gpu_telemetry(data_dir: str | Path | None, jobs: pd.DataFrame, all_job_ids: set,
                  silent_minutes: pd.DatetimeIndex, skus: pd.DataFrame, skipped: Counter) -> pd.DataFrame:
    label = "gpu_telemetry"
    cells = _window_cells(_dir(data_dir) / "philly_jobwindow_gpu_util.csv", jobs, all_job_ids, skipped, label)
    names = pd.Series(cells.name.unique())
    parsed = names.str.extract(r"^(?P<node>[^_]+)_gpu(?P<idx>\d+)$").set_index(names)
    parts = pd.DataFrame({"node": cells.name.map(parsed.node), "idx": cells.name.map(parsed.idx)})
    bad_name = parts.node.isna()
    skipped[f"{label}: GPU name not <machine>_gpu<N>"] += int(bad_name.sum())
    na = cells.value == -1
    skipped[f"{label}: -1 (NA in the source)"] += int(na.sum())
    out_of_range = ~na & ((cells.value < 0) | (cells.value > 100))
    skipped[f"{label}: utilisation outside 0-100"] += int(out_of_range.sum())
    silent = cells.ts.isin(silent_minutes)
    skipped[f"{label}: fleet silent (node_sequence active==0): re-cut zero fill, not a reading"] += int(
        (silent & ~na & ~out_of_range & ~bad_name).sum())
    keep = ~(bad_name | na | out_of_range | silent)
    cells, parts = cells[keep], parts[keep]
    sku = parts.node.map(skus.set_index("machine").sku).fillna(UNKNOWN)
    df = pd.DataFrame({
        "ts": cells.ts,
        "region": REGION,
        "node_id": parts.node,
        "gpu_index": parts.idx.astype("int64"),
        "gpu_uuid": "philly:" + parts.node + ":gpu" + parts.idx,
        "sku": sku,
        "job_id": cells.jobid.where(cells.offset >= 0, None),
        "gpu_util_pct": cells.value,
    })
    df = df.assign(_held=df.job_id.notna()).sort_values(["ts", "gpu_uuid", "_held"], ascending=[True, True, False])
    dup = df.duplicated(["ts", "gpu_uuid"])
    skipped[f"{label}: duplicate GPU-minute from overlapping job windows"] += int(dup.sum())
    df = df[~dup].drop(columns="_held")
    return conform(df, label, nullable=NULL_REQUIRED_COLUMNS[label])


def node_telemetry(data_dir: str | Path | None, jobs: pd.DataFrame, all_job_ids: set,
                   skus: pd.DataFrame, skipped: Counter) -> pd.DataFrame:
    label = "node_telemetry"
    d = _dir(data_dir)
    frames = {}
    for kind, file in (("cpu", "philly_jobwindow_cpu_util.csv"), ("mem", "philly_jobwindow_mem_free_pct.csv")):
        cells = _window_cells(d / file, jobs, all_job_ids, skipped, f"{label} ({kind})")
        na = cells.value == -1
        out = ~na & ((cells.value < 0) | (cells.value > 100))
        skipped[f"{label} ({kind}): -1 (NA in the source)"] += int(na.sum())
        skipped[f"{label} ({kind}): value outside 0-100"] += int(out.sum())
        cells = cells[~(na | out)]
        dup = cells.duplicated(["name", "ts"])
        skipped[f"{label} ({kind}): duplicate machine-minute from overlapping job windows"] += int(dup.sum())
        frames[kind] = cells[~dup].set_index(["name", "ts"]).value.rename(kind)
    both = pd.concat([frames["cpu"], frames["mem"]], axis=1).reset_index()
    df = pd.DataFrame({
        "ts": both.ts,
        "region": REGION,
        "node_id": both.name,
        "sku": both.name.map(skus.set_index("machine").sku).fillna(UNKNOWN),
        "cpu_util_pct": both.cpu,
        "mem_used_pct": 100.0 - both.mem,
        "driver_version": UNKNOWN,
        "kernel_version": UNKNOWN,
        "health": "ok",
    }).sort_values(["ts", "node_id"])
    return conform(df, label, nullable=NULL_REQUIRED_COLUMNS[label])


# --------------------------------------------------------------------------- entry


def build(data_dir: str | Path | None = None, *, limit: int | None = None) -> TraceFrames:
    """All Philly tables (first ``limit`` jobs by submission time when given) plus the liveness side file."""
    skipped: Counter = Counter()
    all_ids = set(pd.DataFrame(json.loads((_dir(data_dir) / "philly_sampled_jobs.json").read_text())).jobid)
    jobs = load_jobs(data_dir, limit=limit, skipped=skipped)
    live = fleet_liveness(data_dir)
    silent = pd.DatetimeIndex(live.loc[live.fleet_silent, "ts"])
    skus = machine_skus(data_dir)
    tables = {
        "gpu_telemetry": gpu_telemetry(data_dir, jobs, all_ids, silent, skus, skipped),
        "node_telemetry": node_telemetry(data_dir, jobs, all_ids, skus, skipped),
        "scheduler_events": scheduler_events(jobs),
        "job_metadata": job_metadata(jobs),
    }
    stamps = [t[c] for t, c in ((tables["scheduler_events"], "ts"), (tables["job_metadata"], "submitted_at"),
                                (tables["gpu_telemetry"], "ts"), (tables["node_telemetry"], "ts")) if len(t)]
    if stamps:
        lo = min(s.min() for s in stamps).tz_localize(None).normalize()
        hi = max(s.max() for s in stamps).tz_localize(None).normalize()
        days = pd.date_range(lo, hi, freq="D")
    else:
        days = pd.DatetimeIndex([])
    tables["cost_capacity"] = cost_capacity(skus, days)
    return TraceFrames(
        trace=TRACE,
        tables=tables,
        skipped=Counter({k: v for k, v in skipped.items() if v}),
        derived={"philly_fleet_liveness": live},
        null_required=NULL_REQUIRED_COLUMNS,
    )
