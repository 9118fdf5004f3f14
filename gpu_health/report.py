"""What the framework says about a window: its alerts and the decomposition of its goodput change.

``gpu-health report --warehouse URL --start ... --end ...`` prints it as Markdown
(the brief's findings in ``docs/runbooks.md`` are this command's output). It
reads a warehouse the pipeline has filled; it computes nothing the assets do
not, except the decomposition of the whole window against the same slots of
the previous days (the ``goodput_decomposition`` asset decomposes one
partition at a time).
"""

import json

import pandas as pd

from gpu_health.storage.warehouse import Warehouse, masked_url

ALERT_COLUMNS = ["alert_id", "severity", "cause_family", "region", "opened_at", "paged_at", "resolved_at", "summary",
                 "usd_per_hour", "follows_change", "description"]


def alert_timeline(wh: Warehouse, start: pd.Timestamp, end: pd.Timestamp) -> pd.DataFrame:
    """One row per alert open in [start, end): its latest state in the window, its peak USD/h, and the
    description it carried when it paged."""
    a = wh.read_window("alerts", start, end)
    if a.empty:
        return pd.DataFrame(columns=ALERT_COLUMNS)
    a = a.sort_values("partition_start")
    last = a.groupby("alert_id").last()
    last["usd_per_hour"] = a.groupby("alert_id")["usd_per_hour"].max()
    last["paged_at"] = a.groupby("alert_id")["paged_at"].min()
    # the description as it read when the alert paged (what on-call received), else its latest
    paged_rows = a[a["severity"] == "page"].groupby("alert_id").first()
    last.loc[paged_rows.index, "description"] = paged_rows["description"]
    return last.reset_index().sort_values(["opened_at", "alert_id"])[ALERT_COLUMNS].reset_index(drop=True)


def window_decomposition(wh: Warehouse, start: pd.Timestamp, end: pd.Timestamp, *, max_causes: int = 3) -> pd.DataFrame:
    """Ranked causes of the window's goodput change against the same slots of the previous days."""
    from gpu_health.diagnosis.decompose import decompose
    from gpu_health.steps.diagnosis import actual_and_expected_leaves
    from gpu_health.steps.registry import inputs_for

    actual, expected = actual_and_expected_leaves(inputs_for("goodput_decomposition", wh, start, end))
    if actual.empty or expected.empty:
        return pd.DataFrame()
    return decompose(actual, expected, start=start, end=end, max_causes=max_causes)


def _ts(v) -> str:
    return "" if pd.isna(v) else pd.Timestamp(v).strftime("%m-%d %H:%M")


def _cell(v) -> str:
    return "" if v is None or (not isinstance(v, str) and pd.isna(v)) else str(v).replace("|", "/").replace("\n", " ")


def markdown(wh: Warehouse, start, end, *, incidents: pd.DataFrame | None = None) -> str:
    """The report of [start, end) as Markdown; ``incidents`` (labels) adds the ground truth when known."""
    start, end = pd.Timestamp(start), pd.Timestamp(end)
    lines = [f"Window {start:%Y-%m-%d %H:%M} to {end:%Y-%m-%d %H:%M} UTC, warehouse `{masked_url(wh.url)}`.", ""]
    if incidents is not None and len(incidents):
        lines += ["Injected incidents (ground truth):", "", "| kind | family | start | end | scope |", "|---|---|---|---|---|"]
        for i in incidents.itertuples(index=False):
            lines.append(f"| {i.kind} | {i.family} | {_ts(i.start)} | {_ts(i.end)} | {_cell(i.scope)} |")
        lines.append("")
    alerts = alert_timeline(wh, start, end)
    lines += [f"Alerts ({len(alerts)}):", "", "| opened | paged | resolved | severity | family | region | summary | USD/h (peak) | follows |",
              "|---|---|---|---|---|---|---|---|---|"]
    for a in alerts.itertuples(index=False):
        lines.append(f"| {_ts(a.opened_at)} | {_ts(a.paged_at)} | {_ts(a.resolved_at)} | {a.severity} | {a.cause_family} | "
                     f"{a.region} | {_cell(a.summary)} | {a.usd_per_hour:,.0f} | {_cell(a.follows_change)} |")
    for a in alerts[alerts["severity"] == "page"].itertuples(index=False):
        lines += ["", f"- `{a.alert_id}`: {_cell(a.description)}"]
    dec = window_decomposition(wh, start, end)
    lines += ["", "Decomposition of the window's goodput change (against the same slots of the previous days):", ""]
    if dec.empty:
        lines.append("(nothing to decompose: no history or no paid GPU-minutes)")
    else:
        lines += ["| rank | state | family | share of drop | carried by | explanatory power | evidence |",
                  "|---|---|---|---|---|---|---|"]
        for d in dec.itertuples(index=False):
            share = "" if pd.isna(d.share_of_drop) else f"{d.share_of_drop:.0%}"
            elements = ", ".join(f"{k}={v}" for k, v in json.loads(d.elements).items()) or "(spread)"
            lines.append(f"| {d.rank} | {d.state} | {d.cause_family} | {share} | {_cell(elements)} | "
                         f"{d.explanatory_power:.0%} | {_cell(d.evidence)} |")
    return "\n".join(lines) + "\n"
