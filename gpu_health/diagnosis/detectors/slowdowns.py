"""Slowdowns: loader wait (``data_io_slowdown``) and gradient sync (``network_slowdown``) above their baselines,
judged per node, each paged with the storage or link counters as its second witness.

==================  ===========  =====================================================================
detector            family       pages on (the two witnesses) / tickets on
==================  ===========  =====================================================================
data_io_slowdown    data_io      step time above baseline by loader wait above its baseline
                                 (slowdown_data_io: the trainer) AND the jobs' GPUs idle that share
                                 of the time (DCGM) or local storage saturated on those nodes, with
                                 an impact past IMPACT_PAGE_SHARE of the region's paid GPU-minutes on
                                 IMPACT_MIN_JOBS jobs; a ticket otherwise (remote storage needs no
                                 local disk: its saturation is a cause in evidence, not a witness
                                 the page waits for)
network_slowdown    network      gradient-sync time above its baseline AND IB loss or retransmits on
                                 the jobs' links, with an impact past IMPACT_PAGE_SHARE of the
                                 region's paid GPU-minutes; a ticket without the link witness or
                                 below the impact floor (a blip)
==================  ===========  =====================================================================
"""


import numpy as np
import pandas as pd

from gpu_health.constants import CauseFamily
from gpu_health.diagnosis.context import PartitionContext, _leaf_rows
from gpu_health.diagnosis.finding import Detector, Finding, margin_of


# a component's excess over the workload's own healthy baseline on 10 % of a node's allocated (multi-node, for
# network) GPU-minutes: the same effect-size floor as the step-time cohort judge (STEP_EFFECT_FLOOR)
NODE_SLOW_SHARE = 0.10
NODE_SLOW_MIN_GPU_MINUTES = 5  # one GPU's whole partition
# InfiniBand is lossless by design (credit-based flow control) and RoCE runs lossless with PFC: sustained loss
# of 0.1 % of packets, or 100 retransmits on a link in a minute, is a link fault, not traffic
LINK_RETRANSMITS = 100
LINK_LOSS_PCT = 0.1
LINK_FAULT_MINUTES = 3  # a link failing three minutes of a partition is a fault, not a burst
# The impact a slowdown page needs, by definition: the GPU-minutes it cost (compute the jobs did not do) are at
# least half a percentage point of the region's paid GPU-minutes of the partition (every paid GPU-minute is in one
# loss-tree state, so the leaves' sum is the region's paid time) -- five times the smallest state change the
# drill-down attributes (diagnosis.decompose.MIN_STATE_GROWTH, 0.1 point): a paged slowdown is one the region's
# goodput shows unambiguously; a smaller one (a blip) waits for working hours as a ticket
IMPACT_PAGE_SHARE = 0.005
# data_io is the shared storage path: one job's slow input is its own pipeline (workers, dataset format), its
# team's ticket; two jobs slowed at once are the fewest that point at something they share
IMPACT_MIN_JOBS = 2
# DCGM's GPU utilization is the share of time a kernel runs; during the step-time excess a job spends waiting on
# its input no kernel runs, so GPUs really starved for data show at most 100 % x (1 - that share). 5 points cover
# the exporter's sampling of a minute; above it the GPUs contradict the loader wait (prefetch hides it)
UTIL_SLACK_PCT = 5.0


# the loss-tree states of minutes whose jobs report step progress (where a slowdown can be measured)
MEASURED_STATES = ["productive", "slowdown_data_io", "slowdown_network", "slowdown_checkpoint", "slowdown_compute"]
ALLOC_STATES = ["allocated_idle", "allocated_unproductive", "failure_loss", "slowdown_data_io", "slowdown_network",
                "slowdown_checkpoint", "slowdown_compute", "productive"]


def _slow_nodes(lv: pd.DataFrame, state: str, denominator: pd.Series, rows: np.ndarray | None = None,
                pooled: bool = False) -> pd.DataFrame:
    """Nodes where ``state`` holds at least NODE_SLOW_SHARE of the denominator GPU-minutes (``rows``: the
    positions of the leaves in ``state``, when known) and NODE_SLOW_MIN_GPU_MINUTES of them -- on each node, or
    (``pooled``) over the region's nodes showing the share together: a shared storage's jobs spread over many
    nodes, few of them reporting loader time on each, show the effect size on every node and the minutes only
    together."""
    slow = lv[lv["state"] == state] if rows is None else lv.iloc[rows]
    slow = slow.groupby(["region", "node_id"])["gpu_minutes"].sum()
    frame = pd.DataFrame({"slow": slow, "den": denominator.reindex(slow.index).fillna(0.0)})
    frame = frame[(frame["slow"] > 0) & (frame["slow"] >= NODE_SLOW_SHARE * frame["den"])]
    if not pooled:
        return frame[frame["slow"] >= NODE_SLOW_MIN_GPU_MINUTES].reset_index()
    total = frame.groupby(level="region")["slow"].transform("sum")
    return frame[total >= NODE_SLOW_MIN_GPU_MINUTES].reset_index()


_NO_SLOW_NODES = pd.DataFrame({"region": pd.Series(dtype=object), "node_id": pd.Series(dtype=object),
                               "slow": pd.Series(dtype=float), "den": pd.Series(dtype=float)})


def _no_slow_nodes() -> pd.DataFrame:
    """_slow_nodes() finding none (one shared frame: its readers never modify it)."""
    return _NO_SLOW_NODES


def _may_reach(ctx: PartitionContext, rows: np.ndarray, floor: float) -> bool:
    """Whether some (region, node) of the leaves at ``rows`` can hold ``floor`` GPU-minutes: a cheap,
    conservative pre-check (plain per-node sums, a margin for their rounding) before the exact group-by."""
    if not len(rows):
        return False
    if "leaf_nodes" not in ctx.memo:
        lv = ctx.leaves
        region, node = pd.factorize(lv["region"])[0], pd.factorize(lv["node_id"])[0]
        codes = np.where((region >= 0) & (node >= 0), region.astype(np.int64) * (len(lv) + 1) + node, -1)
        ctx.memo["leaf_nodes"] = (codes, lv["gpu_minutes"].to_numpy(dtype=float, na_value=0.0))
    codes, minutes = ctx.memo["leaf_nodes"]
    c, w = codes[rows], minutes[rows]
    ok = c >= 0
    if not ok.any():
        return False
    sums = np.bincount(np.unique(c[ok], return_inverse=True)[1], weights=w[ok])
    return bool(np.nanmax(sums) >= floor - 1e-6)


# no (region, node) pair: built once (an index is immutable; building an empty MultiIndex costs ~0.5 ms, and most
# partitions have no saturated storage)
_NO_NODES = pd.MultiIndex.from_tuples([], names=["region", "node_id"])


def _saturated_storage(ctx: PartitionContext) -> pd.MultiIndex:
    """(region, node) pairs whose local storage was saturated (NVMe >= 95 % busy) in 3+ minutes of the partition."""
    node = ctx.node
    if node is None or node.empty:
        return _NO_NODES
    saturated = node["nvme_util_pct"].to_numpy(dtype=float, na_value=np.nan) >= 95
    if not saturated.any():
        return _NO_NODES
    hot = node[saturated].groupby(["region", "node_id"], observed=True)["ts"].nunique()
    return hot[hot >= LINK_FAULT_MINUTES].index


def detect_slowdowns(ctx: PartitionContext) -> list[Finding]:
    """Loader wait (data_io) and gradient sync (network) above their baselines, judged per node:
    storage or fabric trouble hits a set of nodes, which a region-wide share would dilute."""
    out = []
    lv = ctx.leaves
    if lv.empty:
        return _faulty_links(ctx, set())
    # the share is of the minutes where a slowdown can be measured (jobs reporting step progress): minutes of
    # uninstrumented jobs cannot show a slowdown and must not dilute one
    # (the denominators only matter where a slowdown can reach its floor, or storage is saturated)
    hot_nodes = _saturated_storage(ctx)
    io_rows, net_rows = _leaf_rows(ctx, "slowdown_data_io"), _leaf_rows(ctx, "slowdown_network")
    io_ok = len(io_rows) > 0 and lv["gpu_minutes"].to_numpy()[io_rows].sum() >= NODE_SLOW_MIN_GPU_MINUTES - 1e-6
    net_ok = _may_reach(ctx, net_rows, NODE_SLOW_MIN_GPU_MINUTES)
    if len(hot_nodes) or io_ok or net_ok:
        measured = lv[lv["state"].isin(MEASURED_STATES)]
        per_node = measured.groupby(["region", "node_id"])["gpu_minutes"].sum()
        multi = measured[measured["workload_class"] == "distributed"].groupby(["region", "node_id"])["gpu_minutes"].sum()
    else:
        per_node = multi = pd.Series(dtype=float)
    io_nodes = _slow_nodes(lv, "slowdown_data_io", per_node, io_rows, pooled=True) if io_ok else _no_slow_nodes()
    # storage saturated on several nodes at once (a shared filesystem, a hot dataset) is judged over those nodes
    # together: few of their jobs may report loader time, each node's share alone would be too thin to see
    if len(hot_nodes):
        slow_io = lv[lv["state"] == "slowdown_data_io"].groupby(["region", "node_id"])["gpu_minutes"].sum()
        pooled = pd.DataFrame({"slow": slow_io.reindex(hot_nodes).fillna(0.0), "den": per_node.reindex(hot_nodes).fillna(0.0)})
        pooled = pooled[pooled["slow"] > 0].reset_index()
        for region, grp in pooled.groupby("region"):
            slow, den = grp["slow"].sum(), grp["den"].sum()
            if slow >= NODE_SLOW_MIN_GPU_MINUTES and slow >= NODE_SLOW_SHARE * den:
                io_nodes = pd.concat([io_nodes[io_nodes["region"] != region], grp], ignore_index=True)
    # an open data-loader alert stays open while its storage witness lasts (the loader share of a few
    # instrumented jobs comes and goes around its bar; the incident does not)
    for region in sorted({r for r, _ in hot_nodes} - set(io_nodes["region"])):
        if f"data_io_slowdown|{region}" in ctx.open_keys:
            nodes = sorted(n for r, n in hot_nodes if r == region)
            out.append(Finding("data_io_slowdown", "data_io", "ticket", region, f"data_io_slowdown|{region}", nodes=nodes,
                               summary=f"Storage still saturated in {region} on {len(nodes)} node(s)",
                               evidence=f"NVMe >= 95 % busy on {', '.join(nodes[:8])}; loader wait this partition under "
                                        "the bar (few jobs report it)"))
    for region, grp in io_nodes.groupby("region"):
        out.append(_data_io_finding(ctx, region, grp))
    net_nodes = _slow_nodes(lv, "slowdown_network", multi, net_rows) if net_ok else _no_slow_nodes()
    for region, grp in net_nodes.groupby("region"):
        nodes = sorted(grp["node_id"])
        links = ctx.network[(ctx.network["region"] == region) & ctx.network["node_id"].isin(nodes)]
        bad = links[(links["retransmits"].fillna(0) >= LINK_RETRANSMITS) | (links["packet_loss_pct"].fillna(0) >= LINK_LOSS_PCT)]
        # switch-port and node-exporter IB counters have no retransmits: absence is not "0 retransmits"
        retransmits = ("no link telemetry" if links.empty
                       else f"{int(links['retransmits'].fillna(0).sum())} retransmits" if links["retransmits"].notna().any()
                       else "retransmits not exported")
        total = float(grp["slow"].sum())
        bad_nodes = sorted(set(bad["node_id"])) or nodes
        # (the loss is the slowdown_network leaves: step times the jobs reported, so it has its jobs by construction;
        # no count of them is asked beside the GPU-minutes floor)
        matters, impact, impact_margin = _impact(ctx, region, total, 0, jobs_needed=0)
        # the page's margin: the impact's, the best slow node's (minutes and share) and the worst link's counter
        link = np.r_[bad["retransmits"].astype(float) / LINK_RETRANSMITS, bad["packet_loss_pct"].astype(float) / LINK_LOSS_PCT]
        margin = margin_of((impact_margin, 1.0), (_slow_margin(grp), 1.0),
                           (np.nanmax(link) if np.isfinite(link).any() else None, 1.0))
        out.append(Finding("network_slowdown", "network", "page" if len(bad) and matters else "ticket", region,
                           f"network_slowdown|{region}", nodes=bad_nodes, lost_gpu_minutes=total,
                           margin=margin if len(bad) and matters else None,
                           value=float(total / max(grp["den"].sum(), 1e-9)),
                           summary=f"Collective-communication slowdown in {region} on {len(bad_nodes)} node(s)",
                           evidence=f"{total:.0f} GPU-minutes ({total / max(grp['den'].sum(), 1e-9):.0%} of multi-node jobs' "
                                    f"time there) lost to gradient sync above baseline; {bad['link_id'].nunique() if len(bad) else 0} "
                                    f"link(s) with loss up to {links['packet_loss_pct'].max() if len(links) else 0:.2f} % and "
                                    f"{retransmits}; {impact}"))
    out += _faulty_links(ctx, {n for f in out if f.family == "network" for n in f.nodes})
    return out


def _measured_jobs(ctx: PartitionContext, nodes) -> set:
    """Jobs on ``nodes`` (the GPU exporter's mapping) that report step progress in the partition: the jobs whose
    slowdown the loss tree measured there."""
    rt = ctx.runtime
    if rt is None or rt.empty or ctx.gpu is None or ctx.gpu.empty:
        return set()
    rt = rt[(rt["ts"] >= ctx.start) & (rt["ts"] < ctx.end) & (rt["steps"] > 0)]
    on = ctx.gpu.loc[ctx.gpu["node_id"].isin(nodes), "job_id"].dropna()
    return set(on.astype(object)) & set(rt["job_id"].astype(object))


def _slow_margin(grp: pd.DataFrame) -> float | None:
    """How far the slow nodes ``grp`` (_slow_nodes) cleared their bars: the best node's smaller ratio of its slow
    GPU-minutes to NODE_SLOW_MIN_GPU_MINUTES and to NODE_SLOW_SHARE of its measured time (one node pages)."""
    return max((m for r in grp.itertuples() if (m := margin_of((r.slow, NODE_SLOW_MIN_GPU_MINUTES),
                                                                 (r.slow, NODE_SLOW_SHARE * r.den))) is not None),
               default=None)


def _impact(ctx: PartitionContext, region: str, lost: float, jobs: int,
            jobs_needed: int) -> tuple[bool, str, float | None]:
    """Whether ``lost`` GPU-minutes on ``jobs`` jobs reach the page's impact floor (IMPACT_PAGE_SHARE of the
    region's paid GPU-minutes, ``jobs_needed`` jobs), the sentence saying so, and how far they cleared it (the
    smaller of lost / floor and jobs / jobs_needed)."""
    paid = float(ctx.leaves.loc[ctx.leaves["region"] == region, "gpu_minutes"].sum())
    floor = IMPACT_PAGE_SHARE * paid
    matters = paid > 0 and lost >= floor and jobs >= jobs_needed
    return matters, (f"impact {lost:.0f} GPU-minutes" + (f" on {jobs} job(s)" if jobs_needed else "")
                     + f" against a page floor of {floor:.0f} ({IMPACT_PAGE_SHARE:.1%} of the region's {paid:.0f} "
                     "paid GPU-minutes)" + (f" and {jobs_needed} job(s)" if jobs_needed else "")
                     + ("" if matters else ": under the floor, a ticket")), margin_of((lost, floor), (jobs, jobs_needed))


def _data_io_finding(ctx: PartitionContext, region: str, grp: pd.DataFrame) -> Finding:
    """The data-loader finding of ``region`` over its slow nodes ``grp`` (slow, den GPU-minutes per node).

    Witness 1, the trainer: step time above the signature's baseline by loader wait above its baseline (the
    slowdown_data_io state). Witness 2, the device: DCGM shows the jobs' GPUs idle at least that share of the time
    (UTIL_SLACK_PCT), or, where the storage is local, the nodes' NVMe saturated (the cause, seen). A page also
    needs the impact floor (:func:`_impact`, IMPACT_MIN_JOBS jobs) on the loss over the nodes' allocated time; a
    ticket otherwise."""
    nodes = sorted(grp["node_id"])
    sat = ctx.node[(ctx.node["region"] == region) & ctx.node["node_id"].isin(nodes)]
    hot = sat[sat["nvme_util_pct"] >= 95]
    total, den = float(grp["slow"].sum()), float(max(grp["den"].sum(), 1e-9))
    share = min(total / den, 1.0)
    jobs = _measured_jobs(ctx, nodes)
    # the jobs there that report no loader time read from the same storage: the measured share of the nodes'
    # instrumented time, over all their allocated time, estimates the loss (the measured minutes are its floor)
    lv = ctx.leaves
    alloc = float(lv.loc[(lv["region"] == region) & lv["node_id"].isin(nodes) & lv["state"].isin(ALLOC_STATES),
                         "gpu_minutes"].sum())
    lost = max(total, share * alloc)
    g = ctx.gpu[ctx.gpu["node_id"].isin(nodes) & ctx.gpu["job_id"].isin(jobs)] if jobs else ctx.gpu.iloc[0:0]
    util = float(g["gpu_util_pct"].median()) if len(g) and g["gpu_util_pct"].notna().any() else None
    bound = 100.0 * (1.0 - share) + UTIL_SLACK_PCT
    idle = util is not None and util <= bound
    matters, impact, impact_margin = _impact(ctx, region, lost, len(jobs), IMPACT_MIN_JOBS)
    # the page's margin: the impact's, the slowdown's (minutes and share over their bars) and the better device
    # witness's (GPUs at most `bound` % utilized; NVMe at least 95 % busy)
    # (at 0 % the utilization witness is unbounded: the other bars decide)
    alternatives = ([np.inf if util == 0 else bound / util] if idle else []) + \
        ([hot["nvme_util_pct"].max() / 95.0] if len(hot) else [])
    witness = max(alternatives, default=None)
    margin = margin_of((impact_margin, 1.0), (total, NODE_SLOW_MIN_GPU_MINUTES), (share, NODE_SLOW_SHARE),
                       (witness, 1.0))
    device = ("their GPUs' utilization not reported" if util is None else
              f"their GPUs {util:.0f} % utilized (median; GPUs waiting that share of the time show at most "
              f"{bound:.0f} %: " + ("they do" if idle else "they compute through it, the wait is hidden") + ")")
    storage = (f"local storage saturated on {hot['node_id'].nunique()} node(s) (NVMe >= 95 %, read "
               f"{sat['disk_read_mbps'].median():.0f} MB/s median)" if len(hot)
               else "no local storage saturated (remote storage, or not exported)")
    page = (idle or len(hot)) and matters
    return Finding("data_io_slowdown", "data_io", "page" if page else "ticket", region,
                   f"data_io_slowdown|{region}", nodes=nodes, lost_gpu_minutes=total, value=float(share),
                   margin=margin if page else None,
                   summary=f"Data-loader slowdown in {region} on {len(nodes)} node(s)",
                   evidence=f"{total:.0f} GPU-minutes ({share:.0%} of those nodes' measured training time) lost to "
                            f"loader wait above baseline on {len(jobs)} job(s) reporting it (~{lost:.0f} over all "
                            f"{alloc:.0f} allocated GPU-minutes there); {device}; {storage}; {impact}")


def _faulty_links(ctx: PartitionContext, judged: set) -> list[Finding]:
    """Links failing on the port counters while a job uses the node, where no job reports gradient-sync time
    (uninstrumented or unknown jobs: the slowdown cannot be measured, the fault can).

    Page: on one link, packet loss >= LINK_LOSS_PCT AND retransmits >= LINK_RETRANSMITS in the same minute (two
    counters: the link layer's losses and the transport's retries) for LINK_FAULT_MINUTES minutes, on a node
    whose GPUs hold a job. One counter only (e.g. retransmits not exported): a ticket."""
    net = ctx.network
    if net is None or net.empty:
        return []
    if not ((net["packet_loss_pct"].to_numpy(dtype=float, na_value=0.0) >= LINK_LOSS_PCT).any()
            or (net["retransmits"].to_numpy(dtype=float, na_value=0.0) >= LINK_RETRANSMITS).any()):
        return []  # no link over either bar
    net = net[~net["node_id"].isin(judged)]
    loss = net["packet_loss_pct"].fillna(0) >= LINK_LOSS_PCT
    retr = net["retransmits"].fillna(0) >= LINK_RETRANSMITS
    bad = net[loss | retr].assign(both=(loss & retr)[loss | retr])
    if bad.empty:
        return []
    busy_nodes = set(ctx.gpu.loc[ctx.gpu["job_id"].notna(), "node_id"].astype(object)) if len(ctx.gpu) else set()
    per_link = bad.groupby(["region", "node_id", "link_id"], observed=True).agg(
        minutes=("ts", "nunique"), both=("both", "sum"), loss=("packet_loss_pct", "max"), retr=("retransmits", "sum"))
    per_link = per_link[per_link["minutes"] >= LINK_FAULT_MINUTES].reset_index()
    per_link = per_link[per_link["node_id"].isin(busy_nodes)]
    out = []
    for region, grp in per_link.groupby("region"):
        paging = grp[grp["both"] >= LINK_FAULT_MINUTES]
        rows = paging if len(paging) else grp
        nodes = sorted(set(rows["node_id"]))
        # one link pages: the best one's minutes with both counters over their bars, and its loss over its bar
        margin = max((m for r in paging.itertuples() if (m := margin_of((r.both, LINK_FAULT_MINUTES),
                                                                          (r.loss, LINK_LOSS_PCT))) is not None),
                     default=None)
        out.append(Finding("network_slowdown", "network", "page" if len(paging) else "ticket", region,
                           f"network_slowdown|{region}", nodes=nodes, margin=margin,
                           summary=f"InfiniBand / RoCE link faults in {region} on {len(nodes)} node(s) running jobs",
                           evidence=f"{len(rows)} link(s) failing for {int(rows['minutes'].max())}+ minutes: packet loss up "
                                    f"to {rows['loss'].max():.2f} % and {int(rows['retr'].fillna(0).sum())} retransmits "
                                    + ("(both counters)" if len(paging) else "(one counter: the other is not exported or "
                                       "below its bar)") + "; the jobs there report no gradient-sync time, so the slowdown "
                                    "itself cannot be measured"))
    return out


RUNBOOKS = {
    CauseFamily.DATA_IO.value:
        "Check the shared filesystem / object store throughput and the dataset's hot partitions; raise data "
        "loader workers or stage data to local NVMe. Runbook: docs/runbooks.md#data_io",
    CauseFamily.NETWORK.value:
        "Check the IB / RoCE links with errors (ibdiagnet, port counters), reseat or replace cables, "
        "drain the nodes from multi-node jobs. Runbook: docs/runbooks.md#network",
}
DETECTORS = [
    Detector(detect_slowdowns, emits=(("data_io_slowdown", CauseFamily.DATA_IO.value),
                                      ("network_slowdown", CauseFamily.NETWORK.value)),
             needs=("leaves", "node", "network", "gpu", "runtime", "open_keys")),
]
