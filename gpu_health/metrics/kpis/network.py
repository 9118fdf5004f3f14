"""Network KPIs: the fabric's health (comm_health)."""

import numpy as np
import pandas as pd

from gpu_health.codes import factorize
from gpu_health.constants import PARTITION_FREQ
from gpu_health.metrics.kpis.context import UNKNOWN, _Context, _job_minutes


def _comm_health(ctx: _Context) -> pd.DataFrame:
    out = []
    d = _job_minutes(ctx)
    if len(d):
        multi = (d["steps"] > 0).to_numpy() & (d["gpus"] > 1).to_numpy()
        known = multi & d["sync"].notna().to_numpy()
        w = (d["gpus"] * d["steps"]).to_numpy()
        f = pd.DataFrame({"p": d["p"], "region": d["region"], "sku": d["sku"], "n": multi.astype(float),
                          "covered": known.astype(float),
                          "numerator": np.where(known, np.nan_to_num(w * d["sync"].to_numpy()), 0.0),
                          "denominator": np.where(known, np.nan_to_num(w * d["step"].to_numpy()), 0.0)})
        agg = f.groupby(["p", "region", "sku"], sort=False).sum().reset_index()
        out.append(agg[agg["n"] > 0].assign(kpi="comm_health.grad_sync_share"))
    net = ctx.network
    if len(net):
        # retransmits: null where the collector does not expose them (switch-port and node-exporter IB
        # counters): averaged over the link-minutes that report them, degraded when under half do
        rtx = pd.to_numeric(net["retransmits"]).to_numpy(dtype=float, na_value=np.nan)
        # grouped by partition, region and the node's SKU as integer codes (each distinct node and region looked up
        # once, not a day's million link-minutes' strings): the groups, their order (first appearance) and their
        # sums are the strings' -- a link-minute without a region in no group, as a group-by on None leaves it out
        region, regions = factorize(net["region"])
        node, nodes = factorize(net["node_id"])
        node_sku = pd.Series(np.append(np.asarray(nodes, dtype=object), None)).map(ctx.node_sku).fillna(UNKNOWN)
        sku_of_node, skus = factorize(node_sku.to_numpy(dtype=object))  # (a node without a SKU: UNKNOWN)
        f = pd.DataFrame({"p": net["ts"].dt.floor(PARTITION_FREQ), "region": np.where(region >= 0, region, np.nan),
                          "sku": sku_of_node[node],  # (code -1, a missing node: the appended None's, UNKNOWN)
                          "rtx": np.nan_to_num(rtx), "rtx_known": (~np.isnan(rtx)).astype(float),
                          "loss": net["packet_loss_pct"].to_numpy(dtype=float),
                          "down": ~net["link_up"].to_numpy(dtype=bool)})
        agg = f.groupby(["p", "region", "sku"], sort=False).agg(
            n=("rtx", "size"), rtx=("rtx", "sum"), rtx_known=("rtx_known", "sum"), loss=("loss", "sum"),
            down=("down", "sum")).reset_index()
        agg["region"] = np.asarray(regions, dtype=object)[agg["region"].to_numpy(dtype=np.int64)]
        agg["sku"] = np.asarray(skus, dtype=object)[agg["sku"].to_numpy(dtype=np.int64)]
        keys = agg[["p", "region", "sku", "n"]]
        out.append(keys.assign(kpi="comm_health.retransmits", numerator=agg["rtx"], denominator=agg["rtx_known"],
                               covered=agg["rtx_known"]))
        for series, col in (("packet_loss", "loss"), ("link_down", "down")):
            out.append(keys.assign(kpi=f"comm_health.{series}", numerator=agg[col].astype(float), denominator=agg["n"]))
    return pd.concat(out, ignore_index=True) if out else pd.DataFrame()
