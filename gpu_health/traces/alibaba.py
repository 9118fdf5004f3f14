"""Alibaba cluster traces -> landing zone (research/study use; cite the papers named upstream).

Two independent sub-traces with different clocks, imported separately:

``genai`` -- cluster-trace-v2026-GenAI (GenTD26, SoCC'25), Stable-Diffusion serving
-------------------------------------------------------------------------------------
``v2026-GenAI/pod_gpu_duty_cycle_anon.csv`` (``value`` = GPU utilisation %) and
``pod_gpu_memory_used_bytes_anon.csv`` (``value`` = bytes) -> ``gpu_telemetry``.
``timestamp_anon`` is used as given (shifted epoch seconds, decoding to
2022-09-11 01:12 -> 2022-09-12 00:00 UTC) and floored to the minute; the
series sample every ~57-60 s, so a container occasionally has two samples
in one minute (counted in the summary): utilisation, itself a duty cycle
over the sampling interval, is averaged; memory, a gauge, keeps the
minute's first sample -- an average of 0 and 30 GB is a reading that never
existed, and would hide the drop-to-zero of a restarting container. A
minute without a sample has no row (absence is data).
Each container is one GPU: ``node_id`` = ``gpu_uuid`` = ``job_id`` =
``container_ip`` (the MD5 that joins the files; the container holds the
GPU, so the minute is allocated), ``gpu_index`` 0, ``region`` =
``alibaba-genai``, ``sku`` = placeholder ``unknown`` (not in the trace).
``fb_used_mib`` = bytes / 2**20. Util and memory are joined on
(container, minute); a minute present in only one series has the other
column null (``gpu_util_pct`` / ``fb_used_mib`` are required, so such a
minute is quarantined). ``power_w`` and ``temp_c`` are not in the trace:
null (the contract accepts null there). ``sm_clock_mhz`` and ``xid`` are
required by the contract but not in the trace: null too (see
``NULL_REQUIRED_COLUMNS``; the contract quarantines those rows unless
explicit placeholders fill them).

``openb`` -- cluster-trace-gpu-v2023 (Weng et al., ATC'23), ``openb_pod_list_default.csv``
-------------------------------------------------------------------------------------------
Times are seconds from the trace start; the trace publishes no calendar
origin, so :data:`OPENB_ORIGIN` (2023-01-01T00:00Z) is a documented
placeholder. Per pod -> ``scheduler_events`` (``scheduler`` = kubernetes,
``queue`` = QoS class, ``priority`` 0, ``event_id`` = ``openb:<pod>:<event>``):

* ``submitted`` at ``creation_time`` (``gpus`` = ``num_gpu``; a GPU-sharing
  pod with ``gpu_milli`` < 1000 asks for one shared GPU and counts 1);
* ``started`` at ``scheduled_time`` when it is set (never for ``Pending``);
* ``ended`` at ``deletion_time`` (the only end time the trace has):
  ``Succeeded``->completed, ``Failed``->failed, ``Pending``->cancelled (reason
  ``deleted while Pending (never scheduled)``, ``gpus`` 0), ``Running``->
  cancelled (reason ``deleted while Running``) -- except a ``Running`` pod
  whose deletion time is the trace's last timestamp, which was still running
  when the trace was cut: no ``ended`` event.

``job_metadata`` per pod: ``team`` placeholder ``unknown`` (no owner in the
trace); ``workload_class`` = ``interactive`` for QoS ``LS`` (latency-sensitive
serving), else ``batch`` (pods are single-node, never ``distributed``);
``requested_gpus`` as above; ``requested_mem_gb`` = ``memory_mib`` / 1024;
``model_type``, ``dataset``, ``container_image``, ``framework_version`` =
``unknown``; ``sla_deadline`` null.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd

from gpu_health.traces.common import UNKNOWN, TraceFrames, conform, default_data_dir, first_n

REGION_GENAI = "alibaba-genai"
OPENB_ORIGIN = pd.Timestamp("2023-01-01T00:00:00Z")
OPENB_EXIT = {"Succeeded": ("completed", None), "Failed": ("failed", None),
              "Pending": ("cancelled", "deleted while Pending (never scheduled)"),
              "Running": ("cancelled", "deleted while Running")}
NULL_REQUIRED_COLUMNS: dict[str, tuple[str, ...]] = {
    "gpu_telemetry": ("gpu_util_pct", "fb_used_mib", "sm_clock_mhz", "xid"),
}


def _dir(data_dir: str | Path | None) -> Path:
    return Path(data_dir or default_data_dir()) / "alibaba-clusterdata"


# --------------------------------------------------------------------------- GenAI


def _series(path: Path, name: str, containers: set | None, skipped: Counter, how: str) -> pd.Series:
    df = pd.read_csv(path, usecols=["timestamp_anon", "value", "container_ip"],
                     dtype={"container_ip": str, "timestamp_anon": "float64", "value": "float64"})
    bad = df.timestamp_anon.isna() | df.value.isna() | df.container_ip.isna()
    skipped[f"gpu_telemetry: {name} sample with an empty field"] += int(bad.sum())
    df = df[~bad]
    if containers is not None:
        df = df[df.container_ip.isin(containers)]
    df = df.sort_values("timestamp_anon", kind="stable")
    df["ts"] = pd.to_datetime(df.timestamp_anon, unit="s", utc=True).dt.floor("min")
    g = df.groupby(["container_ip", "ts"]).value
    surplus = int((g.size() - 1).sum())
    verb = "averaged into" if how == "mean" else "dropped from"
    skipped[f"gpu_telemetry: {name} sample {verb} an already-sampled minute"] += surplus
    return g.agg(how).rename(name)


def genai_containers(data_dir: str | Path | None = None, limit: int | None = None) -> set | None:
    if limit is None:
        return None
    ids = pd.read_csv(_dir(data_dir) / "v2026-GenAI" / "pod_gpu_duty_cycle_anon.csv", usecols=["container_ip"]).container_ip
    return first_n(pd.Series(sorted(ids.dropna().unique())), limit)


def genai_gpu_telemetry(data_dir: str | Path | None = None, *, limit: int | None = None,
                        skipped: Counter | None = None) -> pd.DataFrame:
    skipped = Counter() if skipped is None else skipped
    d = _dir(data_dir) / "v2026-GenAI"
    containers = genai_containers(data_dir, limit)
    util = _series(d / "pod_gpu_duty_cycle_anon.csv", "util", containers, skipped, "mean")
    mem = _series(d / "pod_gpu_memory_used_bytes_anon.csv", "mem", containers, skipped, "first")
    both = pd.concat([util, mem], axis=1).reset_index().sort_values(["ts", "container_ip"])
    out = (both.util < 0) | (both.util > 100)
    skipped["gpu_telemetry: utilisation outside 0-100"] += int(out.sum())
    both.loc[out, "util"] = np.nan
    df = pd.DataFrame({
        "ts": both.ts,
        "region": REGION_GENAI,
        "node_id": both.container_ip,
        "gpu_index": 0,
        "gpu_uuid": both.container_ip,
        "sku": UNKNOWN,
        "job_id": both.container_ip,
        "gpu_util_pct": both.util,
        "fb_used_mib": both.mem / 2**20,
    })
    return conform(df, "gpu_telemetry", nullable=NULL_REQUIRED_COLUMNS["gpu_telemetry"])


def build_genai(data_dir: str | Path | None = None, *, limit: int | None = None) -> TraceFrames:
    """GenAI per-container series -> gpu_telemetry (first ``limit`` containers by id when given)."""
    skipped: Counter = Counter()
    gpu = genai_gpu_telemetry(data_dir, limit=limit, skipped=skipped)
    return TraceFrames("alibaba-genai", {"gpu_telemetry": gpu}, Counter({k: v for k, v in skipped.items() if v}),
                       null_required=NULL_REQUIRED_COLUMNS)


# --------------------------------------------------------------------------- openb


def load_openb_pods(data_dir: str | Path | None = None, *, limit: int | None = None,
                    skipped: Counter | None = None) -> pd.DataFrame:
    skipped = Counter() if skipped is None else skipped
    pods = pd.read_csv(_dir(data_dir) / "gpu-v2023" / "openb_pod_list_default.csv")
    unknown_phase = ~pods.pod_phase.isin(OPENB_EXIT)
    for phase, n in pods.loc[unknown_phase, "pod_phase"].value_counts(dropna=False).items():
        skipped[f"openb: pod_phase {phase!r} has no mapping"] += int(n)
    no_create = pods.creation_time.isna()
    skipped["openb: pod without creation_time"] += int((no_create & ~unknown_phase).sum())
    pods = pods[~unknown_phase & ~no_create].sort_values(["creation_time", "name"], kind="stable")
    if limit is not None:
        pods = pods.head(limit)
    return pods.reset_index(drop=True)


def _at(seconds: pd.Series) -> pd.Series:
    return OPENB_ORIGIN + pd.to_timedelta(seconds, unit="s")


def openb_scheduler_events(pods: pd.DataFrame, *, trace_end_s: float) -> pd.DataFrame:
    base = pd.DataFrame({"job_id": pods.name, "scheduler": "kubernetes", "queue": pods.qos.fillna(UNKNOWN),
                         "priority": 0})
    scheduled = pods.scheduled_time.notna() & (pods.pod_phase != "Pending")
    exit_state = pods.pod_phase.map(lambda p: OPENB_EXIT[p][0])
    reason = pods.pod_phase.map(lambda p: OPENB_EXIT[p][1])
    still_running = (pods.pod_phase == "Running") & (pods.deletion_time >= trace_end_s)
    ended = pods.deletion_time.notna() & ~still_running
    parts = [
        base.assign(event="submitted", ts=_at(pods.creation_time), gpus=pods.num_gpu, node_ids=None,
                    exit_state=None, reason=None),
        base[scheduled].assign(event="started", ts=_at(pods.scheduled_time[scheduled]),
                               gpus=pods.num_gpu[scheduled], node_ids=None, exit_state=None, reason=None),
        base[ended].assign(event="ended", ts=_at(pods.deletion_time[ended]),
                           gpus=pods.num_gpu.where(scheduled, 0)[ended], node_ids=None,
                           exit_state=exit_state[ended], reason=reason[ended]),
    ]
    ev = pd.concat(parts, ignore_index=True)
    ev["event_id"] = "openb:" + ev.job_id + ":" + ev.event
    return conform(ev.sort_values(["ts", "event_id"], kind="stable"), "scheduler_events")


def openb_job_metadata(pods: pd.DataFrame) -> pd.DataFrame:
    md = pd.DataFrame({
        "job_id": pods.name,
        "submitted_at": _at(pods.creation_time),
        "team": UNKNOWN,
        "model_type": UNKNOWN,
        "workload_class": np.where(pods.qos == "LS", "interactive", "batch"),
        "dataset": UNKNOWN,
        "requested_gpus": pods.num_gpu,
        "requested_mem_gb": pods.memory_mib / 1024.0,
        "container_image": UNKNOWN,
        "framework_version": UNKNOWN,
        "sla_deadline": pd.NaT,
    })
    return conform(md, "job_metadata")


def build_openb(data_dir: str | Path | None = None, *, limit: int | None = None) -> TraceFrames:
    """openb pod list -> scheduler_events + job_metadata (first ``limit`` pods by creation when given)."""
    skipped: Counter = Counter()
    all_pods = pd.read_csv(_dir(data_dir) / "gpu-v2023" / "openb_pod_list_default.csv",
                           usecols=["creation_time", "deletion_time", "scheduled_time"])
    trace_end_s = float(all_pods.max().max())
    pods = load_openb_pods(data_dir, limit=limit, skipped=skipped)
    tables = {"scheduler_events": openb_scheduler_events(pods, trace_end_s=trace_end_s),
              "job_metadata": openb_job_metadata(pods)}
    return TraceFrames("alibaba-openb", tables, Counter({k: v for k, v in skipped.items() if v}))
