"""The cluster at a glance: the page an on-call engineer reads first, one per 5-minute partition.

It says, in this order, what an engineer coming on call asks: is the north star where it should be (goodput
against its baseline, the loss-state share ``share_productive`` of ``kpi_baselines``), what is open and what to do
first (the pages, then the tickets, each with the first action its alert quotes), which KPIs have moved furthest
from their baselines, and where the numbers stand on missing data (sources written empty, rows quarantined, KPIs
degraded). Frames in, one row per partition out (the ``cluster_status`` table): the numbers as columns for plots,
the page as Markdown. Nothing here judges: the alerts are the detectors', the baselines the baselines'; a figure
that has nothing to stand on (no paid minutes, no baseline yet) is said to be missing, never shown as zero.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from gpu_health.constants import MAD_TO_SIGMA, RUNBOOK_PATH

ALL = "*"
SLICE = ("region", "sku", "workload_class", "team")
NORTH_STAR_SERIES = "share_productive"  # goodput = productive / paid: its baseline is this share's
OPEN = ("firing", "clearing")  # an alert not yet resolved
SEVERITY_ORDER = {"page": 0, "ticket": 1}
WORST_KPIS = 5
FIRST_ACTION = "First action: "  # how an alert's description quotes its first action (diagnosis.alerts._describe)
COLUMNS = ["partition_start", "goodput", "goodput_expected", "open_pages", "open_tickets", "worst_kpi", "worst_kpi_z",
           "gap_sources", "rejected_rows", "markdown"]


def _cell(value) -> str:
    """A Markdown table cell: no pipe or line break may split the row."""
    if value is None or (isinstance(value, float) and not np.isfinite(value)):
        return "-"
    return str(value).replace("|", "\\|").replace("\n", " ")


def _table(header: list[str], rows: list[list]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header),
            *("| " + " | ".join(_cell(v) for v in row) + " |" for row in rows)]


def first_action(description: str) -> str:
    """The first action an alert's description quotes (its finding's, else its runbook's), '' when it names none."""
    text = str(description or "")
    if FIRST_ACTION not in text:
        return ""
    return text.split(FIRST_ACTION, 1)[1].split(" History:", 1)[0].strip()


def _cluster(frame: pd.DataFrame) -> pd.DataFrame:
    """The rows of ``frame`` at the cluster-wide slice (every dimension '*')."""
    if not len(frame):
        return frame
    dims = [d for d in SLICE if d in frame]
    return frame[(frame[dims].astype(str) == ALL).all(axis=1)]


def kpi_deviations(kpis: pd.DataFrame, baselines: pd.DataFrame) -> pd.DataFrame:
    """Each cluster-wide KPI series measured (status ok) beside its baseline of the same partition, with its robust z
    ``(value - expected) / (1.4826 MAD)`` (the q10-q90 spread as a normal's when the MAD is 0; none when both are 0
    or there is no baseline): partition_start, series, value, expected, method, z."""
    cols = ["partition_start", "series", "value", "expected", "method", "z"]
    k = _cluster(kpis)
    k = k[k["status"].astype(str) == "ok"] if len(k) else k
    b = _cluster(baselines)
    if not len(k) or not len(b):
        return pd.DataFrame(columns=cols)
    k = k.rename(columns={"kpi": "series"})[["partition_start", "series", "value"]]
    both = k.merge(b[["partition_start", "series", "expected", "mad", "q10", "q90", "method"]],
                   on=["partition_start", "series"], how="inner")
    scale = (both["mad"] * MAD_TO_SIGMA).where(both["mad"] > 0, (both["q90"] - both["q10"]) / 2.5631)
    both["z"] = (both["value"] - both["expected"]) / scale.where(scale > 0)
    return both[cols]


def _goodput_line(g, exp, method) -> str:
    if g is None:
        return "**Goodput: no data** (nothing paid in this partition)."
    line = f"**Goodput {g:.1%}**"
    if exp is None:
        return line + " (no baseline yet)."
    return line + f" against a baseline of {exp:.1%} ({method}): {100 * (g - exp):+.1f} points."


def _alert_rows(open_alerts: pd.DataFrame) -> list[list]:
    rows = []
    for a in open_alerts.itertuples():
        since = pd.Timestamp(a.opened_at).strftime("%Y-%m-%d %H:%M") if pd.notna(a.opened_at) else "-"
        usd = f"{a.usd_per_hour:,.0f}" if pd.notna(a.usd_per_hour) else "-"
        rows.append([a.severity, a.status, a.summary, a.region, since, usd,
                     first_action(a.description) or "(see runbook)", _runbook_page(a.runbook)])
    return rows


def _runbook_page(runbook) -> str:
    """The runbook's page (its path) where the runbook text names one, else the text: the first action it also
    holds has a column of its own."""
    found = RUNBOOK_PATH.search(str(runbook).strip()) if isinstance(runbook, str) else None
    return found.group(1) if found else (runbook if isinstance(runbook, str) else "-")


def render(p: pd.Timestamp, goodput, expected, method, open_alerts: pd.DataFrame, worst: pd.DataFrame,
           gaps: pd.DataFrame, rejects: pd.DataFrame, degraded: list[str]) -> str:
    """The status page of partition ``p`` (Markdown)."""
    pages = int((open_alerts["severity"] == "page").sum()) if len(open_alerts) else 0
    tickets = int((open_alerts["severity"] == "ticket").sum()) if len(open_alerts) else 0
    out = [f"## Cluster status, {pd.Timestamp(p):%Y-%m-%d %H:%M} UTC", "", _goodput_line(goodput, expected, method), "",
           f"**{pages} page{'s' * (pages != 1)} and {tickets} ticket{'s' * (tickets != 1)} open.**", "",
           "### Open pages and tickets", ""]
    out += _table(["severity", "status", "what", "region", "since (UTC)", "USD/h", "first action", "runbook"],
                  _alert_rows(open_alerts)) if len(open_alerts) else ["None open."]
    out += ["", "### KPIs furthest from their baseline", ""]
    out += _table(["KPI", "value", "baseline", "robust z", "baseline from"],
                  [[w.series, f"{w.value:.4g}", f"{w.expected:.4g}", f"{w.z:+.1f}", w.method]
                   for w in worst.itertuples()]) if len(worst) else ["No KPI has a baseline yet."]
    out += ["", "### Data gaps", ""]
    lines = [f"- `{g.source}` written empty: {g.reason}" for g in gaps.itertuples()]
    for source, rows in (rejects.groupby("source", sort=True) if len(rejects) else []):
        whole = int((rows["row_index"] == -1).sum())
        reasons = ", ".join(sorted(rows["reason"].astype(str).str.slice(0, 80).unique())[:3])
        lines.append(f"- `{source}`: {int((rows['row_index'] != -1).sum())} rows and {whole} files quarantined "
                     f"({reasons})")
    if degraded:
        lines.append(f"- KPIs without a value (degraded or no data): {', '.join(sorted(degraded))}")
    out += lines or ["None: every source arrived and every KPI has a value."]
    return "\n".join(out)


def _by_partition(frame: pd.DataFrame, keep=None) -> dict:
    """partition start -> its rows of ``frame`` (those ``keep`` selects); {} for an empty frame (whatever its
    columns)."""
    if not len(frame):
        return {}
    if keep is not None:
        frame = frame[keep(frame)]
    return {pd.Timestamp(p): rows for p, rows in frame.groupby("partition_start", sort=False)}


def _open(alerts: pd.DataFrame) -> pd.Series:
    return alerts["status"].isin(OPEN) & alerts["severity"].isin(list(SEVERITY_ORDER))


def _ordered(opened: pd.DataFrame) -> pd.DataFrame:
    """The pages first, then the tickets, each by USD per hour burning."""
    rank = opened.assign(_rank=opened["severity"].map(SEVERITY_ORDER))
    return rank.sort_values(["_rank", "usd_per_hour"], ascending=[True, False]).drop(columns="_rank")


def _row(p, goodput, north, opened, dev, kpi_star, gaps, rejects) -> dict:
    """The cluster_status row of partition ``p`` from its rows of each input (None: it has none)."""
    g = goodput["goodput"].dropna() if goodput is not None else pd.Series(dtype=float)
    has_base = north is not None and pd.notna(north["expected"].iloc[0])
    expected = float(north["expected"].iloc[0]) if has_base else None
    method = str(north["method"].iloc[0]) if has_base else None
    opened = _ordered(opened) if opened is not None else pd.DataFrame(columns=["severity"])
    dev = dev.dropna(subset=["z"]) if dev is not None else pd.DataFrame(columns=["series", "z"])
    worst = dev.reindex(dev["z"].abs().sort_values(ascending=False).index).head(WORST_KPIS)
    degraded = sorted(set(kpi_star.loc[kpi_star["status"].astype(str) != "ok", "kpi"].astype(str))) \
        if kpi_star is not None else []
    gaps = gaps if gaps is not None else pd.DataFrame(columns=["source", "reason"])
    rejects = rejects if rejects is not None else pd.DataFrame(columns=["source", "row_index", "reason"])
    value = float(g.iloc[0]) if len(g) else None
    return {"partition_start": p, "goodput": value, "goodput_expected": expected,
            "open_pages": int((opened["severity"] == "page").sum()),
            "open_tickets": int((opened["severity"] == "ticket").sum()),
            "worst_kpi": str(worst["series"].iloc[0]) if len(worst) else None,
            "worst_kpi_z": float(worst["z"].iloc[0]) if len(worst) else None,
            "gap_sources": int(gaps["source"].nunique()), "rejected_rows": int(len(rejects)),
            "markdown": render(p, value, expected, method, opened, worst, gaps, rejects, degraded)}


def status_rows(partitions, goodput: pd.DataFrame, baselines: pd.DataFrame, kpis: pd.DataFrame,
                alerts: pd.DataFrame, gaps: pd.DataFrame, rejects: pd.DataFrame) -> pd.DataFrame:
    """One ``cluster_status`` row per partition start in ``partitions``, from that partition's rows of
    ``cluster_goodput``, ``kpi_baselines``, ``kpi_values``, ``alerts``, ``source_gaps`` and ``source_rejects``."""
    parts = {
        "goodput": _by_partition(goodput, lambda f: f["region"] == ALL),
        "north": _by_partition(_cluster(baselines), lambda f: f["series"] == NORTH_STAR_SERIES),
        "opened": _by_partition(alerts, _open),
        "dev": _by_partition(kpi_deviations(kpis, baselines)),
        "kpi_star": _by_partition(_cluster(kpis)),
        "gaps": _by_partition(gaps), "rejects": _by_partition(rejects),
    }
    out = [_row(p, **{k: v.get(pd.Timestamp(p)) for k, v in parts.items()}) for p in partitions]
    frame = pd.DataFrame(out, columns=COLUMNS)
    frame["partition_start"] = pd.to_datetime(frame["partition_start"], utc=True)
    return frame
