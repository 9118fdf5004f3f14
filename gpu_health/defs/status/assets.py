"""The cluster at a glance: the status page an on-call engineer reads first (group ``status``)."""

import dagster as dg
import pandas as pd

from gpu_health.defs.common import derived_asset, preview

# the numbers of the status page that Dagster plots, one point per materialization (the window's last partition)
PLOTTED = ("goodput", "goodput_expected", "open_pages", "open_tickets", "worst_kpi_z", "gap_sources",
           "rejected_rows")


def status_metadata(frame: pd.DataFrame) -> dict:
    """The window's last partition's page (``status``, Markdown) and numbers; a number with nothing to stand on
    (no paid minutes, no baseline yet) is left out, never plotted as 0. The preview leaves the pages out."""
    if not len(frame):
        return {}
    last = frame.sort_values("partition_start").iloc[-1]
    numbers = {k: float(last[k]) for k in PLOTTED if pd.notna(last[k])}
    return {**numbers, "status": dg.MetadataValue.md(str(last["markdown"])),
            "preview": preview(frame.drop(columns=["markdown"]).tail(5))}


def build_status_assets(five_minute) -> list:
    return [derived_asset("cluster_status", partitions_def=five_minute,
                          checks=lambda result, wh, start, end: ([], status_metadata(result.tables["cluster_status"])))]
