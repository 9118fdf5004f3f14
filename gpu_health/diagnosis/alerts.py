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
# A cause paged this recently that is detected again re-opens its alert instead of paging anew. A day, because that is
# how long a cause already acted on keeps showing: jobs that adopted a bad version keep running (and failing or
# slowing) after its rollback until they end or restart, training jobs run for hours to days, and a node that
# overheats does so again whenever the load of the day's cycle returns to it -- while whoever was paged still owns
# it. A cause that returns after a day of quiet is news (its fix did not hold), so it pages again.
RECENT = pd.Timedelta(hours=24)
# Tickets whose repeats are one ticket carrying its history: a node that throttles briefly and repeatedly is the
# node's story (cooling, a hot slot, one job's kernels), not a new ticket per episode.
HISTORY_TICKETS = ("thermal_throttle",)
COLUMNS = ["partition_start", "alert_id", "key", "detector", "status", "severity", "cause_family", "region", "scope",
           "summary", "description", "usd_per_hour", "runbook", "opened_at", "first_partition_start", "paged_at",
           "updated_at", "resolved_at", "follows_change", "clear_count", "baseline_at_open", "lost_gpu_minutes",
           "margin_at_page"]


def empty() -> pd.DataFrame:
    """An alert snapshot with no rows (the table's columns and dtypes): a copy of one frame built once, since
    most partitions of a healthy cluster have no alert and a frame's construction costs milliseconds."""
    return _EMPTY.copy()


def _empty() -> pd.DataFrame:
    frame = pd.DataFrame({c: pd.Series(dtype="object") for c in COLUMNS})
    for c in ("partition_start", "opened_at", "first_partition_start", "paged_at", "updated_at", "resolved_at"):
        frame[c] = pd.Series(dtype="datetime64[ns, UTC]")
    for c in ("usd_per_hour", "baseline_at_open", "lost_gpu_minutes", "margin_at_page"):
        frame[c] = pd.Series(dtype="float64")
    frame["clear_count"] = pd.Series(dtype="int64")
    # consolidated once (a copy merges same-dtype blocks): a copy of the unconsolidated frame merged them again on
    # every call, ~1.8 ms of the ~2 ms a partition without alerts spent here
    return frame.copy()


_EMPTY = _empty()
# the description of an alert a re-run withdrew begins with this (gpu_health.steps.diagnosis.WITHDRAWN)
WITHDRAWN_PREFIX = "Withdrawn:"


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


def _scope_json(f: Finding, history: dict | None = None) -> str:
    scope = {"region": f.region, "nodes": f.nodes}
    if f.team:
        scope["team"] = f.team
    if f.cohort:
        scope["cohort"] = f.cohort
    if history:
        scope["history"] = history
    if f.carry:
        scope["carry"] = f.carry
    return json.dumps(scope, sort_keys=True)


def _history(old: dict | None, f: Finding, *, reopened: pd.Timestamp | None = None) -> dict | None:
    """The alert's history after this partition's finding: its episodes (one more when ``reopened``, with when)
    and the finding's ``tally`` numbers summed over its partitions (``max_*`` keys: the maximum)."""
    if old is None and not f.tally and reopened is None:
        return None
    h = dict(old or {"episodes": 1})
    if reopened is not None:
        h["episodes"] = int(h.get("episodes", 1)) + 1
        h["reopened_at"] = f"{reopened:%Y-%m-%dT%H:%MZ}"
    for k, v in (f.tally or {}).items():
        if v is None or not np.isfinite(v):
            continue
        h[k] = round(max(h.get(k, v), v) if k.startswith("max_") else h.get(k, 0.0) + v, 1)
    return h


def _history_text(h: dict | None) -> str:
    if not h or int(h.get("episodes", 1)) < 2:
        return ""
    nums = ", ".join(f"{k.removeprefix('max_').replace('_', ' ')} {'max ' if k.startswith('max_') else ''}{v:g}"
                     for k, v in sorted(h.items()) if isinstance(v, float))
    return f" History: {h['episodes']} episodes, re-opened at {h['reopened_at']}" + (f"; {nums}." if nums else ".")


def _describe(f: Finding, follows: str | None, history: dict | None = None) -> str:
    parts = [f"What: {f.summary}.", f"Evidence: {f.evidence}."]
    if follows:
        parts.append(f"Follows deploy: {follows}.")
    parts.append(f"First action: {f.action or RUNBOOKS[f.family].split(' Runbook:')[0]}")
    return " ".join(parts) + _history_text(history)


def _same_cause(f: Finding, r: dict, changed_at: dict | None = None) -> bool:
    """Whether finding ``f`` is the cause alert row ``r`` was raised for: the same detector and the same change
    event (its key names it), else the same version cohort (for a node change: while that alert still fires), else an overlapping team, else overlapping nodes (the
    identity of region-keyed detectors, whose key names only the region). A finding and an alert that both name a
    cohort (or a team) and differ in it are two causes, whatever nodes they share."""
    if r["detector"] != f.detector:
        return False
    if f.change_event is not None and r["key"] == f.key:
        return True
    # another change event putting the same version on nodes again after that alert resolved is a new deploy (the
    # earlier one was rolled back or cleared): its own change to roll back, its own page; while the alert still
    # fires it is the same rollout going on. A release without nodes (a framework for a team) is its version --
    # jobs that adopted it before its rollback run slow for hours under other events of it -- unless the event was
    # made after that alert resolved (``changed_at``: event id -> its time): a release of the version again, after
    # the rollback, is a new deploy like any other.
    if f.change_event is not None and r["status"] == "resolved":
        made = (changed_at or {}).get(f.change_event)
        if f.nodes or (made is not None and pd.notna(r.get("resolved_at")) and made >= pd.Timestamp(r["resolved_at"])):
            return False
    scope = json.loads(r["scope"])
    if f.cohort and scope.get("cohort"):
        return f.cohort == scope["cohort"]
    if f.team and scope.get("team"):
        return bool(set(f.team.split(",")) & set(str(scope["team"]).split(",")))
    return bool(f.nodes) and bool(set(f.nodes) & set(scope.get("nodes") or []))


# the columns of a stored alert row a re-opening keeps or judges by (step overwrites the others; resolved_at: whether
# a change came after the alert resolved, _same_cause)
RECALL_COLUMNS = ["partition_start", "alert_id", "key", "detector", "status", "severity", "cause_family", "region",
                  "scope", "description", "runbook", "opened_at", "first_partition_start", "paged_at", "follows_change",
                  "baseline_at_open", "margin_at_page", "resolved_at"]


def recalled(rows: pd.DataFrame) -> dict:
    """alert_id -> the latest row of each alert in ``rows`` (alert snapshots, any order) that :func:`step` may
    re-open: the paged alerts and the HISTORY_TICKETS tickets, none withdrawn by a re-run."""
    if rows is None or not len(rows):
        return {}
    keep = (rows["severity"] == "page") | ((rows["severity"] == "ticket") & rows["detector"].isin(HISTORY_TICKETS))
    if "description" in rows:
        keep &= ~rows["description"].astype(str).str.startswith(WITHDRAWN_PREFIX)
    rows = rows[keep].sort_values("partition_start", kind="stable").drop_duplicates("alert_id", keep="last")
    # the stored rows are read with RECALL_COLUMNS only: a range run's memory holds the same, so both paths judge
    # a re-opening on the same facts
    rows = rows[[c for c in RECALL_COLUMNS if c in rows]]
    return {r["alert_id"]: r for r in rows.to_dict("records")}


def remember(memory: dict, snap: pd.DataFrame, at: pd.Timestamp) -> dict:
    """``memory`` (:func:`recalled`) with partition ``snap``'s rows, those older than RECENT before ``at`` dropped:
    what :func:`recalled` gives of the stored rows of [at - RECENT, at) (a range run carries it from partition to
    partition as a later run would read it)."""
    if len(snap):
        memory.update(recalled(snap))
    for k in [k for k, r in memory.items() if r["partition_start"] < at - RECENT]:
        del memory[k]
    return memory


def step(prev: pd.DataFrame, findings: list[Finding], start: pd.Timestamp, *, rates: dict, changes: pd.DataFrame,
         inventory_nodes: dict | None = None, recent: dict | None = None) -> pd.DataFrame:
    """Snapshot rows of partition ``start`` given the open alerts of the partition before it and ``recent``
    (:func:`remember`: the alerts of the RECENT before it that a finding of the same cause re-opens)."""
    end = start + PARTITION
    open_prev = prev[prev["status"] != "resolved"] if len(prev) else prev
    by_key = {r["key"]: r for r in open_prev.to_dict("records")} if len(open_prev) else {}
    merged: dict[str, Finding] = {}
    for f in findings:  # several findings with one key in a partition: merge them
        if f.key in merged:
            m = merged[f.key]
            m.nodes = sorted(set(m.nodes) | set(f.nodes))
            m.lost_gpu_minutes += f.lost_gpu_minutes
            # the merged page pages on whichever of its findings paged: its margin is the widest of theirs
            margins = [g.margin for g in (m, f) if _page_margin(g) is not None]
            m.margin = max(margins) if margins else None
            if SEVERITY_RANK[f.severity] > SEVERITY_RANK[m.severity]:
                m.severity = f.severity
            m.evidence = f"{m.evidence}; {f.evidence}"
            m.carry = {**(m.carry or {}), **(f.carry or {})} or None
        else:
            merged[f.key] = f
    rows = []
    used_ids = set(open_prev["alert_id"]) if len(open_prev) else set()
    latest = _recent_changes(changes, end) if merged and changes is not None and len(changes) else None
    changed_at = dict(zip(changes["event_id"], pd.to_datetime(changes["ts"], utc=True))) if (
        merged and changes is not None and len(changes) and "event_id" in changes) else {}
    for key, f in merged.items():
        rate = rates.get(f.region, rates.get("*", 0.0))
        usd_h = f.lost_gpu_minutes / 5.0 * rate  # lost GPU-minutes per 5 min -> GPU-hours per hour x USD per GPU-hour
        follows = _follows(changes, f, end, inventory_nodes or {}, latest)
        old = by_key.pop(key, None) or _reopen(f, recent, start, used_ids, changed_at)
        if old is not None:
            r = dict(old)
            old_scope = json.loads(r["scope"])
            f.nodes = sorted(set(f.nodes) | set(old_scope.get("nodes", [])))
            severity = f.severity if SEVERITY_RANK[f.severity] > SEVERITY_RANK[r["severity"]] else r["severity"]
            paged_at = r["paged_at"] if pd.notna(r["paged_at"]) else (end if severity == "page" else pd.NaT)
            # the margin of the partition it became a page in: kept while it lasts and when it re-opens
            margin = r.get("margin_at_page", np.nan) if pd.notna(r["paged_at"]) else _margin_cell(f, severity)
            follows = r["follows_change"] or follows
            reopened = end if r["key"] != key or r["status"] == "resolved" else None
            history = _history(old_scope.get("history"), f, reopened=reopened)
            r.update(key=key, status="firing", severity=severity, scope=_scope_json(f, history), summary=f.summary,
                     description=_describe(f, follows, history), usd_per_hour=usd_h, updated_at=end,
                     paged_at=paged_at, resolved_at=pd.NaT, follows_change=follows, clear_count=0,
                     lost_gpu_minutes=f.lost_gpu_minutes, margin_at_page=margin)
        else:
            r = {"alert_id": f"{f.detector}-{(f.team or f.region).replace('*', 'all')}-{start:%Y%m%d%H%M}", "key": key,
                 "detector": f.detector, "status": "firing", "severity": f.severity, "cause_family": f.family,
                 "region": f.region, "scope": _scope_json(f, _history(None, f)), "summary": f.summary,
                 "description": _describe(f, follows),
                 "usd_per_hour": usd_h, "runbook": RUNBOOKS[f.family], "opened_at": end, "first_partition_start": start,
                 "paged_at": end if f.severity == "page" else pd.NaT, "updated_at": end, "resolved_at": pd.NaT,
                 "follows_change": follows, "clear_count": 0,
                 "baseline_at_open": f.baseline if f.baseline is not None else np.nan,
                 "lost_gpu_minutes": f.lost_gpu_minutes, "margin_at_page": _margin_cell(f, f.severity)}
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


def _page_margin(f: Finding) -> float | None:
    return f.margin if f.severity == "page" else None


def _margin_cell(f: Finding, severity: str) -> float:
    """The alert's margin_at_page as the partition's finding ``f`` leaves it when the alert is ``severity`` now
    and was no page before: the finding's own margin when it pages (NaN when not stated or a ticket)."""
    m = _page_margin(f) if severity == "page" else None
    return float(m) if m is not None else np.nan


def _reopen(f: Finding, recent: dict | None, start: pd.Timestamp, used: set, changed_at: dict | None = None) -> dict | None:
    """The latest row of the alert of ``recent`` that finding ``f`` re-opens (:func:`_same_cause`, last seen within
    RECENT, no row of this partition yet), else None; the latest such alert when several are."""
    if not recent:
        return None
    hits = [r for r in recent.values() if r["alert_id"] not in used and r["partition_start"] >= start - RECENT
            and _same_cause(f, r, changed_at)]
    return max(hits, key=lambda r: (r["partition_start"], r["alert_id"])) if hits else None


def carried(prev: pd.DataFrame) -> dict:
    """Alert key -> the ``carry`` of the finding that raised it in ``prev`` (the previous partition's snapshot):
    only rows a finding fired in that partition (a clearing row's scope is an older partition's)."""
    if prev is None or prev.empty:
        return {}
    live = prev[(prev["status"] == "firing") & (prev["clear_count"] == 0)]
    scopes = ((k, json.loads(s)) for k, s in zip(live["key"], live["scope"]) if isinstance(s, str))
    return {k: sc["carry"] for k, sc in scopes if sc.get("carry")}


def open_baselines(prev: pd.DataFrame) -> dict:
    if prev is None or prev.empty:
        return {}
    live = prev[(prev["status"] != "resolved") & prev["baseline_at_open"].notna()]
    return dict(zip(live["key"], live["baseline_at_open"].astype(float)))
