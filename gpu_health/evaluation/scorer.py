"""Score an alerts table against a scenario's ground truth: detection, attribution, false pages.

:func:`score` takes alert rows (the ``alerts`` table's columns, from the
pipeline or from the static-rules peer), the scenario's labels
(``labels_frame``, what ``labels.parquet`` holds) and its maintenance windows,
and returns one scenario's figures; :func:`overall` sums a suite; :func:`table`
prints one. It runs nothing: :mod:`gpu_health.evaluation.harness` runs the
pipeline, :mod:`gpu_health.evaluation.static_rules` runs Prometheus.

Definitions:

* a high-severity incident is **detected** when a page opens (``paged_at``)
  between its start and its end + 15 minutes, with a scope that touches the
  incident's (a shared node, the same region, team or cohort; an alert for the
  whole cluster touches every incident);
* **time to detect** = the first such page's ``paged_at`` - incident start, in
  data time (minutes);
* **top-1 accuracy**: the cause family of that first page equals the incident's;
* **false pages**: pages that match no incident (time window and scope), per
  simulated week; a page matching only a planned maintenance or a collector
  outage (families ``planned`` and ``missing_data``: nothing anyone should be
  paged for) is false as well; **maintenance pages**: pages whose nodes are
  inside a maintenance window when they open;
* low-severity incidents: the share that got a ticket (or a page) in the same window;
* **page precision** = pages matched to an incident / all pages (ByteDance's Minder publishes 0.904);
  false pages are also counted **per detector** (``false_pages_by_detector``), and the overall report
  splits every figure **per cluster profile** (``by_profile``: the scenario's ``cluster:`` profile name,
  ``default`` when it names none), so a detector's precision budget can be read per profile;
* **per detector** (``by_detector``, overall, per profile and per scenario), each detector's budget: its pages,
  matched and false pages, false pages per simulated week, precision (matched / pages, None without pages), the
  high-severity incidents whose first page was its own, with the incident's family or another
  (``detected_right_family`` / ``detected_wrong_family``), and its **misses**: the high-severity incidents of the
  families it emits (the registry's ``emits``) that no page detected. A missed incident is a miss of every
  detector that emits its family: which of them should have paged is not in the labels. A detector the registry
  does not know (a static rule) has ``misses`` None. Its **threshold margin** (``threshold_margin``): the
  smallest ``margin_at_page`` (how far a page's evidence cleared its bar, as a factor: diagnosis.finding) of its
  first pages that detected a high-severity incident with the right family -- the highest factor by which its bars
  could all be raised and every incident it caught would still have paged; None when none of them states one (a
  margin not stated is not a margin of 1).
"""

import json
import math

import numpy as np
import pandas as pd

from gpu_health.constants import PARTITION

GRACE = pd.Timedelta(minutes=15)
WEEK = pd.Timedelta(days=7)


def _alerts_summary(alerts: pd.DataFrame) -> pd.DataFrame:
    """One row per alert: when it opened and paged, its family and scope."""
    if alerts.empty:
        return pd.DataFrame(columns=["alert_id", "detector", "opened_at", "paged_at", "severity", "cause_family", "region", "nodes", "team", "cohort", "summary", "margin_at_page"])
    a = alerts.sort_values("partition_start")
    first = a.groupby("alert_id").first()
    paged = a[a["severity"] == "page"].groupby("alert_id")["paged_at"].min()
    last = a.groupby("alert_id").last()
    # a page's scope is what on-call received when it paged (an alert opened as a ticket may widen before it pages)
    at_page = a[a["severity"] == "page"].groupby("alert_id")["scope"].first()
    scope = at_page.reindex(first.index).fillna(first["scope"]).map(json.loads)
    # the margin stored in the partition it became a page (the alerts of a static rule state none)
    margin = (a[a["severity"] == "page"].groupby("alert_id")["margin_at_page"].first().reindex(first.index)
              if "margin_at_page" in a else pd.Series(np.nan, index=first.index))
    return pd.DataFrame({
        "alert_id": first.index, "detector": first["detector"].values, "opened_at": first["opened_at"].values,
        "paged_at": paged.reindex(first.index).values, "severity": last["severity"].values,
        "cause_family": first["cause_family"].values, "region": first["region"].values,
        "nodes": [set(s.get("nodes", [])) for s in scope], "team": [s.get("team") for s in scope],
        "cohort": [s.get("cohort") for s in scope], "summary": first["summary"].values,
        "margin_at_page": pd.to_numeric(margin, errors="coerce").values,
    }).reset_index(drop=True)


def _touches(alert, inc_scope: dict) -> bool:
    nodes = set(inc_scope.get("node_ids") or [])
    if alert["nodes"] and nodes and alert["nodes"] & nodes:
        return True
    if alert["region"] in ("*", None) or inc_scope.get("region") in (None, alert["region"]):
        if not alert["nodes"] or not nodes:
            return True
        # same region, other nodes: only when the incident is region-wide (scheduling, data, gaming)
        return inc_scope.get("region") == alert["region"] and len(nodes) > 8
    team = inc_scope.get("team")
    if team and alert["team"] and team in str(alert["team"]).split(","):
        return True
    fw = inc_scope.get("framework_version")
    return bool(fw and alert["cohort"] and fw in str(alert["cohort"]))


# Cause families whose incidents no pager is meant to see: a page on planned work or on a silent collector is a false
# page, and a capacity incident (demand growth) is scored on the capacity_headroom table (capacity_score), not on pages
NOT_PAGED = ["planned", "missing_data", "capacity"]


def capacity_score(labels: pd.DataFrame, headroom: pd.DataFrame | None) -> list[dict]:
    """Each capacity incident: detected when capacity_headroom, on a day from its start to its end, names a run-out
    date for a SKU of its region (all regions when it has none) -- the SKU(s) and the earliest run-out named."""
    out = []
    h = headroom if headroom is not None else pd.DataFrame(columns=["date", "region", "sku", "run_out_date"])
    for inc in labels[labels["family"] == "capacity"].itertuples(index=False):
        scope = json.loads(inc.scope)
        days = pd.to_datetime(h["date"])
        hit = h[(days >= inc.start.tz_localize(None).normalize()) & (days <= inc.end.tz_localize(None))
                & h["run_out_date"].notna()]
        if scope.get("region"):
            hit = hit[hit["region"] == scope["region"]]
        out.append({"incident_id": inc.incident_id, "kind": inc.kind, "detected": bool(len(hit)),
                    "skus": sorted(set(hit["sku"])), "run_out_date": str(min(hit["run_out_date"])) if len(hit) else None})
    return out


def score(alerts: pd.DataFrame, labels: pd.DataFrame, maintenance: pd.DataFrame, span: pd.Timedelta,
          headroom: pd.DataFrame | None = None) -> dict:
    capacity = capacity_score(labels, headroom)
    labels = labels[labels["family"] != "capacity"]
    s = _alerts_summary(alerts)
    pages = s[s["paged_at"].notna()].copy()
    pages["paged_at"] = pd.to_datetime(pages["paged_at"], utc=True)
    matched_pages: set = set()
    incidents = []
    for inc in labels.itertuples(index=False):
        scope = json.loads(inc.scope)
        lo, hi = inc.start, inc.end + GRACE
        cand = pages[(pages["paged_at"] >= lo) & (pages["paged_at"] <= hi)]
        cand = cand[np.array([_touches(a, scope) for a in cand.to_dict("records")], dtype=bool)]
        tickets = s[(pd.to_datetime(s["opened_at"], utc=True) >= lo) & (pd.to_datetime(s["opened_at"], utc=True) <= hi)]
        tickets = tickets[np.array([_touches(a, scope) for a in tickets.to_dict("records")], dtype=bool)]
        if inc.family not in NOT_PAGED:  # a page "matching" planned work or a silent collector is still false
            matched_pages |= set(cand["alert_id"])
        first = cand.sort_values("paged_at").iloc[0] if len(cand) else None
        incidents.append({
            "incident_id": inc.incident_id, "kind": inc.kind, "family": inc.family, "severity": inc.severity,
            "start": inc.start.isoformat(), "detected": first is not None,
            "ttd_min": float((first["paged_at"] - inc.start) / pd.Timedelta(minutes=1)) if first is not None else None,
            "page_family": first["cause_family"] if first is not None else None,
            "page_detector": first["detector"] if first is not None else None,
            "page_margin": _margin(first["margin_at_page"]) if first is not None else None,
            "ticketed": bool(len(tickets)),
            "alerts": sorted(set(cand["alert_id"]) | set(tickets["alert_id"])),
        })
    false_pages = pages[~pages["alert_id"].isin(matched_pages)]
    incidents_cols = ["incident_id", "kind", "family", "severity", "detected", "ttd_min", "page_family", "ticketed"]
    maint_pages = 0
    for p in pages.to_dict("records"):
        for w in maintenance.itertuples(index=False) if maintenance is not None else []:
            nodes = set(str(w.node_ids).split(",")) if w.node_ids != "*" else None
            if w.start <= p["paged_at"] < w.end + PARTITION and (nodes is None or (p["nodes"] and p["nodes"] <= nodes)):
                maint_pages += 1
                break
    inc = pd.DataFrame(incidents, columns=[*incidents_cols, "page_detector", "page_margin", "start", "alerts"])
    pages_by = {k: int(v) for k, v in pages["detector"].value_counts().items()}
    false_by = {k: int(v) for k, v in false_pages["detector"].value_counts().items()}
    return {"incidents": incidents,
            "false_page_alerts": false_pages[["alert_id", "detector", "paged_at", "cause_family", "summary"]].astype(str).to_dict("records"),
            "pages": int(len(pages)), "matched_pages": int(len(pages) - len(false_pages)),
            "pages_by_detector": pages_by, "false_pages_by_detector": false_by,
            "by_detector": by_detector(pages_by, false_by, inc, span),
            "capacity_incidents": capacity,
            **_metrics(inc, len(false_pages), maint_pages, span)}


def _scored_high(inc: pd.DataFrame) -> pd.DataFrame:
    """The high-severity incidents detection is scored on (planned work and silent collectors page no one)."""
    high = inc[inc["severity"] == "high"] if len(inc) else inc
    return high[~high["family"].isin(["planned", "missing_data"])] if len(high) else high


def _emitted_families() -> dict[str, set[str]]:
    """detector name (an alert's ``detector``) -> the cause families the registry says it raises."""
    from gpu_health.diagnosis.detectors import DETECTORS

    out: dict[str, set[str]] = {}
    for d in DETECTORS:
        for name, family in d.emits:
            out.setdefault(name, set()).add(family)
    return out


def by_detector(pages_by: dict, false_by: dict, inc: pd.DataFrame, span: pd.Timedelta) -> dict:
    """Each detector's budget (the module docstring's per-detector definitions) from its page counts and the
    scored incidents (``page_detector``: the detector of each incident's first page). Lists the detectors that
    paged, detected or missed something."""
    weeks = max(span / WEEK, 1e-9)
    high = _scored_high(inc)
    det = high[high["detected"].astype(bool)] if len(high) else high
    missed = high[~high["detected"].astype(bool)] if len(high) else high
    emits = _emitted_families()
    names = set(pages_by) | set(det["page_detector"].dropna() if len(det) else [])
    names |= {d for d, fams in emits.items() if len(missed) and missed["family"].isin(fams).any()}
    out = {}
    for d in sorted(names):
        pages, false = int(pages_by.get(d, 0)), int(false_by.get(d, 0))
        first = det[det["page_detector"] == d] if len(det) else det
        right = int((first["page_family"] == first["family"]).sum()) if len(first) else 0
        mine = missed[missed["family"].isin(emits[d])] if d in emits and len(missed) else missed.iloc[0:0]
        out[d] = {"pages": pages, "matched_pages": pages - false, "false_pages": false,
                  "false_pages_per_week": round(false / weeks, 4),
                  "precision": float((pages - false) / pages) if pages else None,
                  "detected_right_family": right, "detected_wrong_family": int(len(first)) - right,
                  "misses": int(len(mine)) if d in emits else None,
                  "missed_kinds": {k: int(v) for k, v in mine["kind"].value_counts().sort_index().items()},
                  "threshold_margin": _threshold_margin(first)}
    return out


def _margin(v) -> float | None:
    v = pd.to_numeric(v, errors="coerce")
    return float(v) if pd.notna(v) else None


def _threshold_margin(first: pd.DataFrame) -> float | None:
    """The smallest stated margin of a detector's first pages that detected their incident with its family."""
    if not len(first) or "page_margin" not in first:
        return None
    right = pd.to_numeric(first.loc[first["page_family"] == first["family"], "page_margin"], errors="coerce").dropna()
    return float(right.min()) if len(right) else None


def _metrics(inc: pd.DataFrame, false_pages: int, maintenance_pages: int, span: pd.Timedelta) -> dict:
    high = _scored_high(inc)
    low = inc[(inc["severity"] == "low") & ~inc["family"].isin(["planned"])] if len(inc) else inc
    det = high[high["detected"]] if len(high) else high
    ttd = det["ttd_min"].astype(float).to_numpy() if len(det) else np.array([])
    weeks = max(span / WEEK, 1e-9)
    return {
        "high_incidents": int(len(high)),
        "detection_rate": float(len(det) / len(high)) if len(high) else None,
        "ttd_p50_min": float(np.percentile(ttd, 50)) if len(ttd) else None,
        "ttd_p95_min": float(np.percentile(ttd, 95)) if len(ttd) else None,
        "ttd_max_min": float(ttd.max()) if len(ttd) else None,
        "top1_accuracy": float((det["page_family"] == det["family"]).mean()) if len(det) else None,
        "false_pages": int(false_pages),
        "false_pages_per_week": float(false_pages / weeks),
        "maintenance_pages": int(maintenance_pages),
        "low_incidents": int(len(low)),
        "ticket_rate": float(low["ticketed"].mean()) if len(low) else None,
        "simulated_days": round(span / pd.Timedelta(days=1), 3),
    }


def _sum_counts(dicts) -> dict:
    out: dict = {}
    for d in dicts:
        for k, v in (d or {}).items():
            out[k] = out.get(k, 0) + int(v)
    return dict(sorted(out.items()))


def _overall(results: list[dict]) -> dict:
    inc = pd.DataFrame([i for r in results for i in r["incidents"]],
                       columns=["incident_id", "kind", "family", "severity", "detected", "ttd_min", "page_family",
                                "page_detector", "page_margin", "ticketed"])
    span = pd.Timedelta(days=sum(r["simulated_days"] for r in results))
    out = _metrics(inc, sum(r["false_pages"] for r in results), sum(r["maintenance_pages"] for r in results), span)
    pages = sum(r.get("pages", 0) for r in results)
    out["pages"] = pages
    out["page_precision"] = float(sum(r.get("matched_pages", 0) for r in results) / pages) if pages else None
    out["false_pages_by_detector"] = _sum_counts(r.get("false_pages_by_detector") for r in results)
    weeks = max(span / WEEK, 1e-9)
    out["false_pages_per_week_by_detector"] = {k: round(v / weeks, 4) for k, v in out["false_pages_by_detector"].items()}
    out["pages_by_detector"] = _sum_counts(r.get("pages_by_detector") for r in results)
    out["by_detector"] = by_detector(out["pages_by_detector"], out["false_pages_by_detector"], inc, span)
    out["scenarios"] = len(results)
    return out


def overall(results: list[dict]) -> dict:
    """The suite's figures, and the same per cluster profile (``by_profile``)."""
    out = _overall(results)
    profiles = sorted({r.get("profile", "default") for r in results})
    out["by_profile"] = {p: _overall([r for r in results if r.get("profile", "default") == p]) for p in profiles}
    return out


def table(report: dict) -> str:
    cols = ["detection_rate", "ttd_p50_min", "ttd_p95_min", "ttd_max_min", "top1_accuracy", "false_pages_per_week",
            "maintenance_pages", "ticket_rate"]

    lines = ["| scenario | " + " | ".join(cols) + " |", "|---" * (len(cols) + 1) + "|"]
    for r in report["scenarios"]:
        lines.append(f"| {r['scenario']} | " + " | ".join(_fmt(r.get(c)) for c in cols) + " |")
    lines.append("| **overall** | " + " | ".join(_fmt(report["overall"].get(c)) for c in cols) + " |")
    return "\n".join(lines)


def _fmt(v) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    return f"{v:.2f}" if isinstance(v, float) else str(v)


def detector_tables(report: dict) -> str:
    """The per-detector budget as Markdown, overall and per cluster profile: ``detected`` is right family / wrong
    family of the incidents the detector paged first, ``margin`` its threshold margin (``-``: none stated)."""
    head = ["| detector | pages | false | false/week | precision | detected | misses | margin |", "|---" * 8 + "|"]
    blocks = []
    parts = [("overall", report["overall"])]
    parts += [(f"profile {p}", o) for p, o in report["overall"].get("by_profile", {}).items()]
    for title, o in parts:
        rows = [f"| {d} | {r['pages']} | {r['false_pages']} | {_fmt(float(r['false_pages_per_week']))} | "
                f"{_fmt(r['precision'])} | {r['detected_right_family']} / {r['detected_wrong_family']} | "
                f"{_fmt(r['misses'])} | {_fmt(r.get('threshold_margin'))} |" for d, r in o.get("by_detector", {}).items()]
        blocks.append("\n".join([f"per detector, {title}:", "", *head, *rows]))
    return "\n\n".join(blocks)
