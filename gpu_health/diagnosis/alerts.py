"""Alert lifecycle: one incident = one alert, updated while it lasts, resolved when it ends.

Findings of a partition are matched to open alerts by their stable scope key
(detector + region / team / change event). A new key opens an alert
(``opened_at`` = end of the partition that opened it); a ticket that later
meets the page condition escalates (``paged_at``); an alert without findings
for :data:`CLEAR_PARTITIONS` consecutive partitions is resolved (``resolved_at``
= end of the partition that resolved it). Maintenance windows and known
seasonality never page: the detectors exclude nodes inside planned windows and
judge seasonal signals against the same hour of previous days.

The ``alerts`` table holds one snapshot row per alert per partition in which it
was open (idempotent partition writes); ``alerts_current`` (a view) is each
alert's latest row.
"""

import json

import numpy as np
import pandas as pd

from gpu_health.constants import PARTITION, SEVERITY_RANK
from gpu_health.diagnosis.detectors import RUNBOOKS
from gpu_health.diagnosis.finding import Finding

CLEAR_PARTITIONS = 2
FOLLOWS_WINDOW = pd.Timedelta(hours=2)
COLUMNS = ["partition_start", "alert_id", "key", "detector", "status", "severity", "cause_family", "region", "scope",
           "summary", "description", "usd_per_hour", "runbook", "opened_at", "first_partition_start", "paged_at",
           "updated_at", "resolved_at", "follows_change", "clear_count", "baseline_at_open", "lost_gpu_minutes"]


def empty() -> pd.DataFrame:
    """An alert snapshot with no rows (the table's columns and dtypes): a copy of one frame built once, since
    most partitions of a healthy cluster have no alert and a frame's construction costs milliseconds."""
    return _EMPTY.copy()


def _empty() -> pd.DataFrame:
    frame = pd.DataFrame({c: pd.Series(dtype="object") for c in COLUMNS})
    for c in ("partition_start", "opened_at", "first_partition_start", "paged_at", "updated_at", "resolved_at"):
        frame[c] = pd.Series(dtype="datetime64[ns, UTC]")
    for c in ("usd_per_hour", "baseline_at_open", "lost_gpu_minutes"):
        frame[c] = pd.Series(dtype="float64")
    frame["clear_count"] = pd.Series(dtype="int64")
    # consolidated once (a copy merges same-dtype blocks): a copy of the unconsolidated frame merged them again on
    # every call, ~1.8 ms of the ~2 ms a partition without alerts spent here
    return frame.copy()


_EMPTY = _empty()


def _follows(changes: pd.DataFrame, f: Finding, at: pd.Timestamp, inventory_nodes: dict,
             recent: pd.DataFrame | None = None) -> str | None:
    """The change a finding follows: its own change event, else the latest change of the FOLLOWS_WINDOW before
    ``at`` whose scope covers the finding (``recent``: those changes, latest first, when already known)."""
    if f.change_event is not None and changes is not None and len(changes):
        ev = changes[changes["event_id"] == f.change_event]
        if len(ev):
            e = ev.iloc[0]
            return f"{e['event_id']}: {e['description']} at {e['ts']:%Y-%m-%d %H:%M}Z"
    if changes is None or changes.empty:
        return None
    if recent is None:
        recent = _recent_changes(changes, at)
    for e in recent.itertuples(index=False):
        scope = str(e.scope)
        hit = scope == "*" or scope == f.region or bool(set(scope.split(",")) & set(f.nodes))
        if hit:
            return f"{e.event_id}: {e.description} at {e.ts:%Y-%m-%d %H:%M}Z"
    return None


def _recent_changes(changes: pd.DataFrame, at: pd.Timestamp) -> pd.DataFrame:
    """The changes of the FOLLOWS_WINDOW up to ``at``, latest first."""
    recent = changes[(changes["ts"] <= at) & (changes["ts"] >= at - FOLLOWS_WINDOW)]
    return recent.sort_values("ts", ascending=False)


def _scope_json(f: Finding) -> str:
    scope = {"region": f.region, "nodes": f.nodes}
    if f.team:
        scope["team"] = f.team
    if f.cohort:
        scope["cohort"] = f.cohort
    return json.dumps(scope, sort_keys=True)


def _describe(f: Finding, follows: str | None) -> str:
    parts = [f"What: {f.summary}.", f"Evidence: {f.evidence}."]
    if follows:
        parts.append(f"Follows deploy: {follows}.")
    parts.append(f"First action: {RUNBOOKS[f.family].split(' Runbook:')[0]}")
    return " ".join(parts)


def step(prev: pd.DataFrame, findings: list[Finding], start: pd.Timestamp, *, rates: dict, changes: pd.DataFrame,
         inventory_nodes: dict | None = None) -> pd.DataFrame:
    """Snapshot rows of partition ``start`` given the open alerts of the partition before it."""
    end = start + PARTITION
    open_prev = prev[prev["status"] != "resolved"] if len(prev) else prev
    by_key = {r["key"]: r for r in open_prev.to_dict("records")} if len(open_prev) else {}
    merged: dict[str, Finding] = {}
    for f in findings:  # several findings with one key in a partition: merge them
        if f.key in merged:
            m = merged[f.key]
            m.nodes = sorted(set(m.nodes) | set(f.nodes))
            m.lost_gpu_minutes += f.lost_gpu_minutes
            if SEVERITY_RANK[f.severity] > SEVERITY_RANK[m.severity]:
                m.severity = f.severity
            m.evidence = f"{m.evidence}; {f.evidence}"
        else:
            merged[f.key] = f
    rows = []
    used_ids = set(open_prev["alert_id"]) if len(open_prev) else set()
    recent = _recent_changes(changes, end) if merged and changes is not None and len(changes) else None
    for key, f in merged.items():
        rate = rates.get(f.region, rates.get("*", 0.0))
        usd_h = f.lost_gpu_minutes / 5.0 * rate  # lost GPU-minutes per 5 min -> GPU-hours per hour x USD per GPU-hour
        follows = _follows(changes, f, end, inventory_nodes or {}, recent)
        if key in by_key:
            r = dict(by_key.pop(key))
            old_scope = json.loads(r["scope"])
            f.nodes = sorted(set(f.nodes) | set(old_scope.get("nodes", [])))
            severity = f.severity if SEVERITY_RANK[f.severity] > SEVERITY_RANK[r["severity"]] else r["severity"]
            paged_at = r["paged_at"] if pd.notna(r["paged_at"]) else (end if severity == "page" else pd.NaT)
            follows = r["follows_change"] or follows
            r.update(status="firing", severity=severity, scope=_scope_json(f), summary=f.summary,
                     description=_describe(f, follows), usd_per_hour=usd_h, updated_at=end, paged_at=paged_at,
                     follows_change=follows, clear_count=0, lost_gpu_minutes=f.lost_gpu_minutes)
        else:
            r = {"alert_id": f"{f.detector}-{(f.team or f.region).replace('*', 'all')}-{start:%Y%m%d%H%M}", "key": key,
                 "detector": f.detector, "status": "firing", "severity": f.severity, "cause_family": f.family,
                 "region": f.region, "scope": _scope_json(f), "summary": f.summary, "description": _describe(f, follows),
                 "usd_per_hour": usd_h, "runbook": RUNBOOKS[f.family], "opened_at": end, "first_partition_start": start,
                 "paged_at": end if f.severity == "page" else pd.NaT, "updated_at": end, "resolved_at": pd.NaT,
                 "follows_change": follows, "clear_count": 0,
                 "baseline_at_open": f.baseline if f.baseline is not None else np.nan,
                 "lost_gpu_minutes": f.lost_gpu_minutes}
            # two incidents of one detector and region opening in one partition (two models' SLOs) are two
            # alerts: the second id gets a suffix, so ids stay unique and existing ones unchanged
            base, n = r["alert_id"], 1
            while r["alert_id"] in used_ids:
                n += 1
                r["alert_id"] = f"{base}-{n}"
        used_ids.add(r["alert_id"])
        rows.append(r)
    for key, r in by_key.items():  # open alerts with no finding this partition
        r = dict(r)
        r["clear_count"] = int(r["clear_count"]) + 1
        r["usd_per_hour"] = 0.0
        r["lost_gpu_minutes"] = 0.0
        if r["clear_count"] >= CLEAR_PARTITIONS:
            r.update(status="resolved", resolved_at=end, updated_at=end)
        else:
            r["status"] = "clearing"
        rows.append(r)
    if not rows:
        return empty()
    out = pd.DataFrame(rows)
    out["partition_start"] = start
    return out[COLUMNS]


def open_baselines(prev: pd.DataFrame) -> dict:
    if prev is None or prev.empty:
        return {}
    live = prev[(prev["status"] != "resolved") & prev["baseline_at_open"].notna()]
    return dict(zip(live["key"], live["baseline_at_open"].astype(float)))
