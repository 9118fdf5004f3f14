"""Daily GPU-hour demand of the public traces with months of job history, for the forecast's backtest.

Each loader reads the trace files (``../shared/real-data``; see its README for licences) and returns a frame
indexed by UTC day with allocated_gpu_hours, backlog_gpu_hours and demand_gpu_hours -- allocated = GPUs x
[start, end), backlog = GPUs x [submit, start), the definitions of :func:`gpu_health.metrics.forecast.daily_demand`.
Only whole days inside the trace's span are kept (a partial first or last day is not a low-demand day).

* ``philly``: the 5,910 sampled Philly jobs (Pass / Failed, > 1 GPU, last attempt only), 2017-10-03 .. 2017-12-13:
  a sample of the cluster's demand, not all of it, but with the cluster's weekly rhythm.
* ``openb``: Alibaba's openb pod list (gpu-v2023, ~149 days): GPUs = num_gpu x gpu_milli / 1000 (GPU sharing);
  pods still running at the trace's end run to its end.
* ``helios``: SenseTime Helios Earth, per-VC per-minute scheduler state for May 2020 (31 days):
  running_gpu_num (allocated) and pending_gpu_num (backlog) summed over the 16 VCs, GPU-minutes / 60; a day on which
  no VC records a single job (2020-05-10) is a recording gap, missing.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from gpu_health.metrics.forecast import interval_daily
from gpu_health.traces.common import default_data_dir


def _whole_days(frame: pd.DataFrame, first, last) -> pd.DataFrame:
    lo, hi = pd.Timestamp(first).ceil("D"), pd.Timestamp(last).floor("D")
    return frame[(frame.index >= lo) & (frame.index < hi)]


def philly_daily(data_dir: str | Path | None = None) -> pd.DataFrame:
    from gpu_health.traces.philly import load_jobs

    jobs = load_jobs(data_dir)
    j = pd.DataFrame({"submit": jobs.submitted_utc, "start": jobs.start_utc, "end": jobs.end_utc, "gpus": jobs.gpus})
    return _whole_days(interval_daily(j), j["start"].min(), j["end"].max())


def openb_daily(data_dir: str | Path | None = None) -> pd.DataFrame:
    from gpu_health.traces.alibaba import OPENB_ORIGIN, load_openb_pods

    pods = load_openb_pods(data_dir)
    at = lambda s: OPENB_ORIGIN + pd.to_timedelta(s, unit="s")  # noqa: E731
    scheduled = pods.scheduled_time.notna() & (pods.pod_phase != "Pending")
    end_s = pods[["creation_time", "deletion_time", "scheduled_time"]].max().max()
    j = pd.DataFrame({"submit": at(pods.creation_time), "start": at(pods.scheduled_time.where(scheduled)),
                      "end": at(pods.deletion_time), "gpus": pods.num_gpu * pods.gpu_milli.fillna(0) / 1000.0})
    return _whole_days(interval_daily(j, end=at(end_s)), at(0), at(end_s))


def helios_daily(data_dir: str | Path | None = None) -> pd.DataFrame:
    base = Path(data_dir or default_data_dir()) / "helios" / "earth_vc_sequence"
    total = None
    for f in sorted(base.glob("*.csv")):
        v = pd.read_csv(f, usecols=["time", "running_gpu_num", "pending_gpu_num", "total_job_num"], parse_dates=["time"])
        v = v.set_index("time")
        total = v if total is None else total.add(v, fill_value=0)
    total.index = total.index.tz_localize("UTC")  # HeliosArtifact's minute index (no zone given: read as UTC)
    # a day with no minute at all is missing (unknown), never a day of zero demand
    day = total.resample("D").sum(min_count=1) / 60.0
    # a day with minutes but not one job in any VC, running or queued (2020-05-10: every VC's rows are zero) is a
    # recording gap, not a day nobody asked for a GPU: a cluster with thousands of GPU-hours a day on either side
    # does not empty its queue and every VC for 24 hours. Unknown, like a day without minutes.
    day[day["total_job_num"] == 0] = float("nan")
    out = pd.DataFrame({"allocated_gpu_hours": day["running_gpu_num"], "backlog_gpu_hours": day["pending_gpu_num"]})
    out["demand_gpu_hours"] = out["allocated_gpu_hours"] + out["backlog_gpu_hours"]  # NaN stays NaN
    return out


LOADERS = {"philly": philly_daily, "openb": openb_daily, "helios": helios_daily}
