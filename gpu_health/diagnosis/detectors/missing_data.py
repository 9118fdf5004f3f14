"""Missing data: a region's collectors silent, nodes' rows missing with no fault, rows a contract rejected, sources
written empty, Finance's cost file missing (``missing_data``): tickets, never pages (not a GPU incident).

==================  ===========  =====================================================================
detector            family       pages on (the two witnesses) / tickets on
==================  ===========  =====================================================================
missing_data        missing_data a region's collectors silent, nodes' GPU rows missing with no fault,
                                 rows rejected by a contract, a day's cost file not arrived or
                                 quarantined (never a page: not a GPU incident)
==================  ===========  =====================================================================
"""


import numpy as np
import pandas as pd

from gpu_health.constants import CauseFamily
from gpu_health.contracts.validate import WHOLE_FILE
from gpu_health.diagnosis.context import (MIN_MISSING_MINUTES, PartitionContext, _gpu_codes, _gpu_minute,
                                          _per_inventory, _state)
from gpu_health.diagnosis.finding import Detector, Finding


# a node's GPU-minutes missing without a fault to explain them are a missing_data ticket from one GPU's
# whole partition (5) up: single lost rows are the exporter's noise
MISSING_NODE_GPU_MINUTES = 5


def detect_missing_data(ctx: PartitionContext) -> list[Finding]:
    """Missing data, never an incident of the cluster: a ticket at most.

    * a region's collectors silent (under half of its expected GPUs report in MIN_MISSING_MINUTES minutes);
    * GPU-minutes the loss tree put in ``no_data`` on nodes of a reporting region: GPUs or whole nodes
      missing with no fault to explain them (an exporter gap, a rejected file), at least
      MISSING_NODE_GPU_MINUTES on a node;
    * rows a contract rejected (``source_rejects``) for the partition, with the file and the count;
    * sources written empty because their producer was silent past its grace (``source_gaps``: an absent
      exporter or Slurm dump), naming the silent metric family;
    * Finance's cost file of the partition's day or the day before not arrived, quarantined or with rows rejected
      (``cost_rejects``): one ticket per day, naming the file and the reason, until the file lands and the day
      re-runs (its rejects are then gone).
    """
    inv = ctx.inventory
    out = []
    minutes = pd.date_range(ctx.start, ctx.end, freq="1min", inclusive="left")
    silent_regions = set()
    if len(inv):
        exp = _per_inventory(ctx, "paid_gpus", lambda i: i.groupby("region")["gpus"].sum())
        # GPU rows per region and minute of the partition
        region_code, region_uni = _gpu_codes(ctx, "region")
        minute = _gpu_minute(ctx)
        ok = (region_code >= 0) & (minute >= 0)
        rep = np.bincount(region_code[ok] * len(minutes) + minute[ok],
                          minlength=len(region_uni) * len(minutes)).reshape(len(region_uni), len(minutes))
        region_pos = {r: i for i, r in enumerate(region_uni)}
        for region, expected in exp.items():
            row = rep[region_pos[region]] if region in region_pos else np.zeros(len(minutes), dtype=np.int64)
            silent = int((row < 0.5 * expected).sum())
            if silent >= MIN_MISSING_MINUTES:
                silent_regions.add(region)
                out.append(Finding("missing_data", "missing_data", "ticket", region, f"missing_data|{region}",
                                   summary=f"Telemetry missing for {region}",
                                   evidence=f"{silent} of {len(minutes)} minutes with under half of the region's {int(expected)} "
                                            f"GPUs reporting: missing data, not a GPU incident"))
    gaps = _state(ctx, "no_data", ["region", "node_id"])
    if len(gaps):
        gaps = gaps[(gaps >= MISSING_NODE_GPU_MINUTES) & (gaps.index.get_level_values("node_id") != "unseen")]
        for region, grp in gaps.groupby(level="region"):
            if region in silent_regions:
                continue
            nodes = sorted(grp.index.get_level_values("node_id"))
            out.append(Finding("missing_data", "missing_data", "ticket", region, f"missing_data|{region}|nodes", nodes=nodes,
                               summary=f"Telemetry gaps on {len(nodes)} node(s) in {region}",
                               evidence=f"{grp.sum():.0f} GPU-minutes not reported on {', '.join(nodes[:8])}"
                                        f"{' ...' if len(nodes) > 8 else ''} with no fatal Xid, ECC error or unhealthy node "
                                        "state to explain them: missing data (exporter gap or rejected rows), not a GPU fault"))
    rej = ctx.rejects
    if rej is not None and len(rej):
        per_file = rej.groupby(["source", "origin"]).size().sort_values(ascending=False)
        text = "; ".join(f"{src}: {n} row(s) rejected from {origin}" for (src, origin), n in per_file.head(5).items())
        reasons = rej["reason"].astype(str).value_counts().head(3)
        out.append(Finding("missing_data", "missing_data", "ticket", "*", "missing_data|rejects",
                           summary=f"{len(rej)} source row(s) quarantined by their contract",
                           evidence=text + "; top reasons: " + "; ".join(f"{r} ({k})" for r, k in reasons.items())
                                    + ". The rows are in source_rejects; the GPU-minutes they cover are no_data"))
    gaps = ctx.source_gaps
    if gaps is not None and len(gaps):
        out.append(Finding("missing_data", "missing_data", "ticket", "*", "missing_data|sources",
                           summary=f"{gaps['source'].nunique()} source(s) silent: {', '.join(sorted(gaps['source'].unique()))}",
                           evidence="; ".join(f"{r.source}: no {r.missing_family} ({r.reason})" for r in gaps.itertuples())
                                    + ". Written empty so the rest is computed: judgements that need these sources "
                                      "cannot be made for the partition"))
    if ctx.cost_rejects is not None and len(ctx.cost_rejects):
        out += [_cost_day_finding(pd.Timestamp(day), rej) for day, rej in ctx.cost_rejects.groupby("partition_start")]
    return out


def _cost_day_finding(day: pd.Timestamp, rej: pd.DataFrame) -> Finding:
    """The ticket of a day whose cost file was not used whole (not arrived, or quarantined: its money is null) or
    lost rows (priced without them); keyed by the day, so one missing day is one alert however long it lasts."""
    whole = rej[rej["row_index"] == WHOLE_FILE]
    reasons = (whole if len(whole) else rej)["reason"].astype(str).drop_duplicates()
    evidence = "; ".join(reasons.head(3))
    if len(whole):
        summary = f"Finance's cost file for {day:%Y-%m-%d} not arrived or quarantined: the day's money is null"
        evidence += (". Until the file lands and the day re-runs, wasted_spend keeps the day's GPU-hours with the "
                     "money null and the loss tree pays against the last capacity Finance sent: ask Finance (or the "
                     "uploader of its file) for it")
    else:
        summary = f"{len(rej)} row(s) of Finance's cost file for {day:%Y-%m-%d} rejected"
        evidence += ". The day is priced without them until a corrected file lands and the day re-runs"
    return Finding("missing_data", "missing_data", "ticket", "*", f"missing_data|cost_capacity|{day:%Y-%m-%d}",
                   summary=summary, evidence=evidence)


RUNBOOKS = {
    CauseFamily.MISSING_DATA.value:
        "Check the collectors (dcgm-exporter, node-exporter, the landing-zone uploader) of the region; "
        "GPU incidents cannot be judged until data flows. Runbook: docs/runbooks.md#missing_data",
}
DETECTORS = [
    Detector(detect_missing_data, emits=(("missing_data", CauseFamily.MISSING_DATA.value),),
             needs=("inventory", "gpu", "leaves", "rejects", "source_gaps", "cost_rejects")),
]
