"""Hardware: node-level GPU faults (``hardware_fault``) and thermal throttling (``thermal_throttle``).

==================  ===========  =====================================================================
detector            family       pages on (the two witnesses) / tickets on
==================  ===========  =====================================================================
hardware_fault      hardware     two independent channels on one node: a GPU-fault Xid, the DBE
                                 counter, the GPU's rows gone, the node drained / down outside a
                                 window, a job killed by the GPU or node (Xid 79 + rows gone; Xid 48
                                 + DBE) -- not while a driver / kernel / firmware change rolls over
                                 the node (a ticket naming it) unless the ECC counter reports a DBE;
                                 >10 % of a region's nodes at once: one systemic alert naming what
                                 they share. Ticket: one channel, or GPUs still gone after a fault.
thermal_throttle    hardware     thermal clock-event bits AND temperature >= 83 C on busy GPUs (a GPU
                                 whose collector exposes no temperature or bits is not judged); pages
                                 with an impact (the loss tree's compute slowdown, or the busy GPUs'
                                 SM clock under their SKU's unthrottled one: jobs without step
                                 metrics) AND a cause (inlet, the node's cooling); the nodes of a
                                 rack with a hot inlet are left to rack_cooling
                                 (gpu_health.diagnosis.facility.defer_to_rack); a node throttling
                                 again within a day re-opens its one ticket (alerts.HISTORY_TICKETS)
==================  ===========  =====================================================================
"""

import re

import numpy as np
import pandas as pd

from gpu_health.constants import (KERNEL_ACTIVE_UTIL_PCT, SLOW_THROTTLE_BITS, THERMAL_BITS, THERMAL_TEMP_C,
                                  XID_GPU_FAULT, CauseFamily)
from gpu_health.diagnosis.context import (DEPLOY_LOOKBACK, MIN_MISSING_MINUTES, _MINUTE_NS, _NAT, PartitionContext,
                                          _gpu_codes, _gpu_maint, _gpu_minute, _gpu_xid_fault, _in_maintenance, _ns,
                                          _per_inventory, _scope_nodes, _state, _ts_slice, _windows_now)
from gpu_health.diagnosis.facility import defer_to_rack, thermal_causes
from gpu_health.diagnosis.finding import Detector, Finding, margin_of
from gpu_health.metrics.goodput import maintenance_mask


# a throttled GPU for a whole partition (or several for part of it): one minute's bit is a transient DCGM
# reports on any busy GPU
MIN_THERMAL_GPU_MINUTES = 5
# where a collector does not export the clock-event reasons (the field is null), a GPU at its slowdown temperature
# whose SM clock is this far below the median of the same SKU's other busy GPUs in the partition shows the
# slowdown itself: thermal slowdown steps the clock down by tens of percent, while load-dependent boost differs
# by a few percent between busy GPUs of one SKU
THERMAL_CLOCK_RATIO = 0.9


# Evidence channels a hardware verdict can rest on. Each comes from a different collector or subsystem, so
# two of them agreeing is two independent witnesses: the driver's Xid log (dcgm-exporter's XID field), the
# ECC counters, the GPU exporter's rows, the node's own agent (health), the scheduler's job outcomes.
HW_XID, HW_DBE, HW_GONE, HW_NODE_STATE, HW_JOB_FAILED, HW_PERSISTED = (
    "fatal Xid", "double-bit ECC", "GPU rows gone", "node drained/down", "job failed on it", "unavailable earlier")
HW_DIRECT = {HW_XID, HW_DBE, HW_GONE, HW_NODE_STATE, HW_JOB_FAILED}
# witnesses of a fault, as opposed to witnesses of unavailability (rows gone, a node drained): an admin's drain
# and the exporter stopping with it are one cause, so a page needs at least one fault witness among its two
HW_FAULT = {HW_XID, HW_DBE, HW_JOB_FAILED}
# A node-level fault pages on at least this many independent channels (the rule: a page names two
# independent pieces of evidence; e.g. Xid 79 and the GPU's rows gone, Xid 48 and the DBE counter).
HW_PAGE_SIGNALS = 2
# Many nodes at once is one systemic incident, not a fault per node (NVSentinel stops cordoning at 50 % of
# nodes; a pager should be stricter): above this share of a region's nodes within one partition the
# hardware finding becomes one alert naming what the nodes share.
SYSTEMIC_NODE_SHARE = 0.10
SYSTEMIC_MIN_NODES = 3
# Changes that reinstall or reboot the GPU stack: while one is rolling over a node its GPUs go missing,
# its node drains and its jobs fail, and none of that is a hardware fault.
ROLLOUT_KINDS = ("driver_upgrade", "kernel_upgrade", "firmware_update", "bios_update")
# The free-text reasons a scheduler gives for a job killed by its GPU or node (Slurm NODE_FAIL, the Xid
# text the driver logs); application Xids (13, 31, 43, 45) are the job's own and do not count.
_FAULT_REASON = r"(?i)ecc|fallen off the bus|node fail|nvlink|row remap"
_XID_IN_REASON = r"(?i)\bxid\s*:?\s*(\d+)"
_FAULT_RE, _XID_RE = re.compile(_FAULT_REASON), re.compile(_XID_IN_REASON)
_XID_FAULTS = frozenset(int(x) for x in XID_GPU_FAULT)


def _rollout_nodes(ctx: PartitionContext) -> dict[str, str]:
    """node -> the change in flight on it: a driver / kernel / firmware change whose scope covers the node
    within DEPLOY_LOOKBACK before the partition's end, or a node whose driver or kernel version changes
    inside the partition (a rollout the change calendar did not announce)."""
    out: dict[str, str] = {}
    ch = ctx.changes
    if ch is not None and len(ch):
        recent = ch[ch["kind"].isin(ROLLOUT_KINDS) & (ch["ts"] >= ctx.end - DEPLOY_LOOKBACK) & (ch["ts"] < ctx.end)]
        for ev in recent.sort_values("ts").itertuples(index=False):
            label = f"{ev.event_id} ({ev.kind} {ev.from_version} -> {ev.to_version} at {ev.ts:%H:%M})"
            for n in _scope_nodes(ev.scope, ctx.inventory):
                out[n] = label
    node = ctx.node
    # (a node's versions can only change when the partition's rows hold two versions of one column)
    if len(node) and (node["driver_version"].nunique() > 1 or node["kernel_version"].nunique() > 1):
        versions = node.groupby("node_id", observed=True)[["driver_version", "kernel_version"]].nunique()
        for n in versions.index[(versions > 1).any(axis=1)]:
            out.setdefault(str(n), "driver or kernel version changing on the node")
    return out


def _failed_on_fault(ctx: PartitionContext) -> dict[str, list[str]]:
    """node -> reasons of jobs placed on it that ended in the partition killed by their GPU or node."""
    prep = ctx.prepared
    if prep is not None and "sched" in prep.windows:  # the range's fault ends, judged once
        ts, nodes, why = _range_fault_ends(prep)
    else:  # the partition's rows first (a cheap comparison of timestamps), then the string tests on those few
        s = ctx.sched
        ts, nodes, why = _fault_ends(_ts_slice(s, ctx.start, ctx.end, ctx.memo) if s is not None and len(s) else s)
    out: dict[str, list[str]] = {}
    for i in np.flatnonzero((ts >= ctx.start.value) & (ts < ctx.end.value)):  # this partition's
        for n in nodes[i]:
            out.setdefault(n, []).append(why[i])
    return out


def _fault_ends(s: pd.DataFrame) -> tuple[np.ndarray, list, list]:
    """The scheduler events of ``s`` (in its order) that end a job killed by its GPU or node: their times (int64 ns),
    the nodes each names and the reason (the scheduler's text, else "node_fail")."""
    if s is None or s.empty:
        return np.zeros(0, dtype=np.int64), [], []
    # (plain Python and re on the ended jobs' values taken as arrays, not a filtered copy of every column)
    ended = np.flatnonzero(s["event"].eq("ended").to_numpy(dtype=bool, na_value=False))
    if not len(ended):
        return np.zeros(0, dtype=np.int64), [], []
    hit, nodes_of, why_of = [], [], []
    for k, nodes, reason, exit_state in zip(ended, *(s[c].to_numpy(dtype=object)[ended]
                                                      for c in ("node_ids", "reason", "exit_state"))):
        if pd.isna(nodes):
            continue
        why = "" if pd.isna(reason) else str(reason)
        dead = exit_state is not pd.NA and exit_state == "node_fail"
        code = _XID_RE.search(why)
        if dead or _FAULT_RE.search(why) or (code is not None and int(code.group(1)) in _XID_FAULTS):
            hit.append(k)
            nodes_of.append(str(nodes).split(","))
            why_of.append(why or "node_fail")
    return _ns(s["ts"].iloc[hit]) if hit else np.zeros(0, dtype=np.int64), nodes_of, why_of


def _range_fault_ends(prep: "RangePrep") -> tuple[np.ndarray, list, list]:
    """:func:`_fault_ends` of the range's scheduler events (``prep.windows["sched"]``), once per range: a partition
    takes those of its own five minutes (a few hundred ended jobs a day, nearly all of them clean; judged per
    partition, the ended rows were found and tested again for each of the day's 288)."""
    if "fault_ends" not in prep.derived:
        prep.derived["fault_ends"] = _fault_ends(prep.windows["sched"][0])
    return prep.derived["fault_ends"]


def _short_gpus(ctx: PartitionContext, expected: pd.Series) -> np.ndarray:
    """nodes x minutes of the partition: GPUs the inventory expects (``expected``, per node) minus the distinct
    GPUs that reported at that minute, at least 0."""
    minutes = pd.date_range(ctx.start, ctx.end, freq="1min", inclusive="left")
    gpu = ctx.gpu
    if not expected.index.is_unique:  # an inventory listing a node twice: the general (slower) path
        per_min = gpu.groupby(["node_id", "ts"], observed=True)["gpu_uuid"].nunique().unstack("ts", fill_value=0) if len(gpu) else pd.DataFrame()
        per_min = per_min.reindex(index=expected.index, columns=minutes, fill_value=0)
        return per_min.rsub(expected, axis=0).clip(lower=0).to_numpy(dtype=float)
    seen = np.zeros((len(expected), len(minutes)))
    prep = ctx.prepared
    if len(gpu) and prep is not None and isinstance(ctx.gpu_rows, slice) and prep.gpu_ts is not None \
            and {"node_id", "gpu_uuid"} <= set(prep.gpu_codes):
        # the range's (minute, node) cells and their distinct GPUs, counted once: this partition's five minutes
        t0, cells = _range_presence(prep)
        first = (ctx.start.value - t0) // _MINUTE_NS
        lo, hi = min(max(first, 0), len(cells)), min(max(first + len(minutes), 0), len(cells))
        row = _per_inventory(ctx, "presence_rows", lambda inv: pd.Index(expected.index).get_indexer(
            prep.gpu_codes["node_id"][1]))  # each range node's row of ``expected`` (-1: not in the inventory)
        on = row >= 0
        if hi > lo:
            seen[row[on], lo - first:hi - first] = cells[lo:hi, on].T
    elif len(gpu):
        node_code, node_uni = _gpu_codes(ctx, "node_id")
        node = np.append(pd.Index(expected.index).get_indexer(node_uni), -1)[node_code]
        minute = _gpu_minute(ctx)
        uuid, uniques = _gpu_codes(ctx, "gpu_uuid")
        ok = (node >= 0) & (minute >= 0) & (uuid >= 0)
        cell = node[ok].astype(np.int64) * len(minutes) + minute[ok]
        pairs = pd.unique(cell * max(len(uniques), 1) + uuid[ok])  # one per distinct GPU and cell (hashed)
        seen = np.bincount(pairs // max(len(uniques), 1), minlength=seen.size).reshape(seen.shape).astype(float)
    return np.clip(expected.to_numpy(dtype=float)[:, None] - seen, 0, None)


def _range_presence(prep: "RangePrep") -> tuple[int, np.ndarray]:
    """The number of distinct GPUs that reported in each (minute, node) cell of the range, counted once per range:
    ``(t0, cells)``, a (minutes x nodes) array, minutes counted from ``t0`` (ns), nodes by their ``prep.gpu_codes``
    code; rows off the minute grid or without node or GPU count nowhere (as _gpu_minute and _short_gpus read a
    partition's rows). A partition's cells are five rows of it. (The distinct (cell, GPU) pairs by one sort of
    their packed keys: a day's 1.7 million are nearly all distinct, which numpy's sort handles ~5x faster than a
    hash table, 0.03 s against 0.16.)"""
    if "presence" not in prep.derived:
        ts = prep.gpu_ts
        node, uuid = prep.gpu_codes["node_id"][0], prep.gpu_codes["gpu_uuid"][0]
        ok = (ts != _NAT) & (node >= 0) & (uuid >= 0)
        t0 = int(ts[ok].min()) // _MINUTE_NS * _MINUTE_NS if ok.any() else 0
        ok &= (ts - t0) % _MINUTE_NS == 0
        minute = (ts[ok] - t0) // _MINUTE_NS
        n_nodes, n_gpus = int(node.max()) + 1, int(uuid.max()) + 1
        n_minutes = int(minute.max()) + 1 if len(minute) else 0
        pairs = np.sort((minute * n_nodes + node[ok]) * n_gpus + uuid[ok])
        pairs = pairs[np.r_[True, pairs[1:] != pairs[:-1]]] if len(pairs) else pairs  # one per distinct GPU and cell
        prep.derived["presence"] = (t0, np.bincount(pairs // n_gpus, minlength=n_minutes * n_nodes)
                                    .reshape(n_minutes, n_nodes))
    return prep.derived["presence"]


# hardware_evidence() of a partition without evidence, built once: most partitions have none, and a frame's
# construction costs a millisecond where its copy costs a tenth of that
_NO_EVIDENCE = pd.DataFrame(columns=["region", "node_id", "signals", "detail", "rollout", "lost"])


def hardware_evidence(ctx: PartitionContext) -> pd.DataFrame:
    """One row per node with hardware evidence in the partition (outside maintenance): which independent
    channels saw it (``signals``), the GPUs involved, the change in flight on it, GPU-minutes lost."""
    gpu, node, inv = ctx.gpu, ctx.node, ctx.inventory
    cols = ["region", "node_id", "signals", "detail", "rollout", "lost"]
    signals: dict[str, set] = {}
    detail: dict[str, list[str]] = {}

    def add(n, sig, text):
        signals.setdefault(n, set()).add(sig)
        detail.setdefault(n, []).append(text)

    out_of_window = ~_gpu_maint(ctx)
    if len(gpu):
        xid = _gpu_xid_fault(ctx) & out_of_window
        for n, grp in (gpu[xid].groupby("node_id", observed=True) if xid.any() else ()):
            add(str(n), HW_XID, ", ".join(f"Xid {int(x)}" for x in sorted(set(grp["xid"]))) + f" on {grp['gpu_uuid'].nunique()} GPU(s)")
        dbe = (gpu["ecc_dbe_delta"].to_numpy(dtype=float, na_value=0.0) > 0) & out_of_window
        for n, grp in (gpu[dbe].groupby("node_id", observed=True) if dbe.any() else ()):
            add(str(n), HW_DBE, f"{int(grp['ecc_dbe_delta'].sum())} double-bit ECC error(s)")
    # GPUs the inventory expects that did not report in at least MIN_MISSING_MINUTES minutes, on nodes whose
    # region reports (a silent region is missing data, judged by missing_data)
    if len(inv):
        expected = _per_inventory(ctx, "expected_gpus", lambda i: i.set_index("node_id")["gpus"].astype(float))
        short = _short_gpus(ctx, expected)
        short_minutes = (short > 0).sum(axis=1)
        maint = np.zeros(len(expected), dtype=bool) if _windows_now(ctx) is None else _in_maintenance(
            ctx, pd.Series(expected.index), inv.set_index("node_id")["region"].reindex(expected.index).reset_index(drop=True))
        for i in np.flatnonzero((short_minutes >= MIN_MISSING_MINUTES) & ~maint):
            add(str(expected.index[i]), HW_GONE, f"{int(short[i].max())} GPU(s) not reporting for {int(short_minutes[i])} min")
    if len(node):
        unhealthy = node["health"].isin(["drained", "down"]).to_numpy(dtype=bool)
        state = node[unhealthy & ~_in_maintenance(ctx, node["node_id"], node["region"])] if unhealthy.any() else node.iloc[0:0]
        if len(state) and ctx.maintenance is not None and len(ctx.maintenance):
            # a drain is the scheduler's state at its row's instant: a row inside its node's window is planned, also
            # in the partition the window ends in (whose midpoint, where windows are matched, may lie after it)
            state = state[~maintenance_mask(state["ts"], state["region"], state["node_id"], ctx.maintenance)]
        for n, grp in state.groupby("node_id", observed=True):
            add(str(n), HW_NODE_STATE, f"node {grp['health'].iloc[-1]} outside maintenance")
    inv_nodes = _per_inventory(ctx, "node_set", lambda i: set(i["node_id"]))
    for n, reasons in _failed_on_fault(ctx).items():
        if n in signals or n in inv_nodes:
            add(n, HW_JOB_FAILED, f"{len(reasons)} job(s) failed: {reasons[0]}")
    hw = _state(ctx, "hw_unavailable", ["node_id"])
    for n, v in hw.items():  # the loss tree's verdict: unavailable, corroborated by a fault or a persisting gap
        if n != "unseen" and v >= MIN_MISSING_MINUTES and HW_XID not in signals.get(n, set()):
            add(str(n), HW_PERSISTED, f"{v:.0f} GPU-minutes unavailable since an earlier fault or for 15+ minutes")
    if not signals:
        return _NO_EVIDENCE.copy()
    # rows gone alone is an exporter gap (missing data), and a job killed on a node alone is the scheduler's word
    # for one job (Slurm's NODE_FAIL follows network blips too): each corroborates, neither opens a finding
    keep = [n for n, s in signals.items() if s - {HW_GONE, HW_JOB_FAILED}]
    if not keep:
        return _NO_EVIDENCE.copy()
    region_of = dict(zip(inv["node_id"], inv["region"]))
    if len(gpu):  # a node's region as its GPU rows say (the last row's, as a dict of every row would keep)
        node_code, node_uni = _gpu_codes(ctx, "node_id")
        last = len(node_code) - 1 - np.unique(node_code[::-1], return_index=True)[1]
        last = last[node_code[last] >= 0]
        region_of.update(zip(node_uni[node_code[last]], gpu["region"].astype(object).to_numpy()[last]))
    rollout = _rollout_nodes(ctx)
    return pd.DataFrame({
        "region": [region_of.get(n, "*") for n in keep], "node_id": keep, "signals": [signals[n] for n in keep],
        "detail": ["; ".join(detail[n]) for n in keep], "rollout": [rollout.get(n) for n in keep],
        "lost": [float(hw.get(n, 0.0)) for n in keep],
    }, columns=cols)


def _hardware_severity(signals: set, rollout: str | None) -> str:
    """Page on HW_PAGE_SIGNALS independent direct channels, one of them a fault witness (HW_FAULT: a node
    drained with its GPU rows gone is unavailable, not known broken); a node a driver/kernel/firmware change is rolling
    over is the rollout's (a ticket naming it) unless its ECC counters report double-bit errors, which no
    software change produces."""
    direct = signals & HW_DIRECT
    if len(direct) < HW_PAGE_SIGNALS or not direct & HW_FAULT:
        return "ticket"
    if rollout and HW_DBE not in direct:
        return "ticket"
    return "page"


def _shared(ev: pd.DataFrame, ctx: PartitionContext) -> str:
    """What the nodes of a systemic hardware finding have in common."""
    parts = []
    rollouts = ev["rollout"].dropna()
    if len(rollouts):
        top = rollouts.value_counts()
        parts.append(f"{top.iloc[0]} of them are in the change {top.index[0]}")
    node = ctx.node[ctx.node["node_id"].isin(ev["node_id"])] if len(ctx.node) else ctx.node
    if len(node):
        drv = node.groupby("node_id", observed=True)["driver_version"].last().value_counts()
        parts.append(f"driver {drv.index[0]} on {drv.iloc[0]}")
    skus = ctx.inventory[ctx.inventory["node_id"].isin(ev["node_id"])]["sku"].value_counts()
    if len(skus):
        parts.append(f"SKU {skus.index[0]} on {skus.iloc[0]}")
    return "; ".join(parts) or "the region"


def detect_hardware(ctx: PartitionContext) -> list[Finding]:
    """Node-level GPU faults, each verdict on independent evidence (``hardware_evidence``).

    Page: at least HW_PAGE_SIGNALS independent channels on one node -- a fatal Xid (XID_GPU_FAULT) and its
    GPU's rows gone (Xid 79), a fatal Xid and the double-bit ECC counter (Xid 48), a node drained or down
    outside maintenance and a job killed by it, ... -- and no driver/kernel/firmware change rolling over the
    node (then: a ticket naming the change; the deploy detector judges the change by its cohort).
    Ticket: one channel (a fatal Xid whose GPU stays and whose job survives, a node drained with no fault
    seen), or GPUs still unavailable after an earlier fault. GPU rows missing with nothing else is missing
    data (the missing_data detector), never hardware: exporters drop rows, files get rejected.
    Systemic: when more than SYSTEMIC_NODE_SHARE of a region's nodes (and at least SYSTEMIC_MIN_NODES) have
    hardware evidence in one partition, the region gets one alert that names what they share; it pages only
    on direct evidence on nodes no change is rolling over.
    """
    ev = hardware_evidence(ctx)
    out = []
    if ev.empty:
        return out
    for region, grp in ev.groupby("region"):
        sev = [_hardware_severity(s, r) for s, r in zip(grp["signals"], grp["rollout"])]
        grp = grp.assign(severity=sev)
        nodes = sorted(grp["node_id"])
        region_nodes = int((ctx.inventory["region"] == region).sum()) or len(nodes)
        lost = float(grp["lost"].sum())
        systemic = len(nodes) >= SYSTEMIC_MIN_NODES and len(nodes) > SYSTEMIC_NODE_SHARE * region_nodes
        paging = grp[grp["severity"] == "page"]
        rollouts = sorted(set(grp["rollout"].dropna()))
        if systemic:
            summary = (f"{len(nodes)} of {region_nodes} nodes in {region} show GPU faults at once: one systemic "
                       f"incident ({_shared(grp, ctx)})")
        elif len(paging):
            summary = f"GPU hardware fault in {region} on {', '.join(sorted(paging['node_id']))}"
        elif rollouts:
            summary = f"GPUs unavailable in {region} on {len(nodes)} node(s) during {rollouts[0]}"
        elif all(HW_PERSISTED in s for s in grp["signals"]):
            summary = f"GPUs still unavailable in {region} on {', '.join(nodes)} (after a fault, or for 15+ minutes)"
        else:
            summary = f"Possible GPU hardware fault in {region} on {', '.join(nodes)} (one witness so far)"
        evidence = "; ".join(
            f"{r.node_id}: {r.detail}" + (f" [change in flight: {r.rollout}]" if r.rollout else "")
            for r in grp.sort_values(["severity", "node_id"], ascending=[False, True]).head(12).itertuples())
        evidence += f"; {lost:.0f} GPU-minutes unavailable"
        faulty = sorted(paging["node_id"]) if len(paging) and not systemic else []
        # a node pages on its count of independent channels; the region's finding pages on any paging node
        margin = max((margin_of((len(s & HW_DIRECT), HW_PAGE_SIGNALS)) for s in paging["signals"]), default=None)
        out.append(Finding("hardware_fault", "hardware", "page" if len(paging) else "ticket", region,
                           f"hardware_fault|{region}", nodes=nodes, lost_gpu_minutes=lost, margin=margin,
                           change_event=None, summary=summary, evidence=evidence,
                           action=f"Cordon and drain {', '.join(faulty)}; run DCGM diagnostics (dcgmi diag -r 3) "
                                  "on them; reseat or RMA a GPU with Xid 48/79/94/95" if faulty else None))
    return out


def detect_thermal(ctx: PartitionContext) -> list[Finding]:
    """GPUs thermally throttled (THERMAL_BITS at THERMAL_TEMP_C, or a stepped-down clock where the bits are not
    exported) for MIN_THERMAL_GPU_MINUTES on a node, one finding per region.

    Page: on a node whose throttling costs work -- the loss tree's slowdown_compute on it reaches what the
    smallest thermal clock step costs on its throttled busy GPU-minutes (THERMAL_CLOCK_RATIO), or the device shows
    that cost itself (:func:`_clock_loss`: the SM clock of its throttled GPUs running kernels against the same SKU's
    unthrottled busy GPUs, for jobs that report no step time to slow) -- AND whose heat
    has a cause of its own (:func:`gpu_health.diagnosis.facility.thermal_causes`: its rack's inlet, or its GPUs
    warmer than the same SKU's elsewhere). Ticket otherwise: a GPU meeting its slowdown temperature under a heavy
    kernel with no job slowed is the node's history, kept under the region's one alert key (re-opened and
    updated each time it recurs), never a page of its own."""
    g = ctx.gpu
    out = []
    if not (g["temp_c"].to_numpy(dtype=float, na_value=np.nan) >= THERMAL_TEMP_C).any():
        return out  # no GPU at its slowdown temperature
    at_temp = (g["temp_c"] >= THERMAL_TEMP_C).to_numpy(dtype=bool, na_value=False)
    bits = (g["throttle_reasons"].fillna(0).astype("int64") & THERMAL_BITS) > 0
    by_clock = _clock_stepped_down(g, at_temp)
    throttled = (bits.to_numpy(dtype=bool) & at_temp) | by_clock
    hot = g[throttled].assign(ref_clock=_unthrottled_clock(g, at_temp)[throttled])
    hot = hot[~_in_maintenance(ctx, hot["node_id"], hot["region"])]
    no_bits = int(by_clock.sum())
    for region, grp in hot.groupby("region"):
        per_node = grp.groupby("node_id").size()
        per_node = per_node[per_node >= MIN_THERMAL_GPU_MINUTES]
        if per_node.empty:
            continue
        nodes = sorted(per_node.index)
        sub = grp[grp["node_id"].isin(nodes)]
        busy = sub[sub["job_id"].notna()].groupby("node_id").size()  # throttled GPU-minutes a job held
        slow = _state(ctx, "slowdown_compute", ["region", "node_id"])
        lost_on = {n: float(v) for (r, n), v in slow.items() if r == region and n in nodes}
        # a thermal step takes at least 1 - THERMAL_CLOCK_RATIO of the clock: a job bound by the GPU loses at least
        # that share of the throttled minutes; a loss tree showing less on the node saw no job slowed by it
        slowed = [n for n in nodes if busy.get(n, 0) > 0 and lost_on.get(n, 0.0) >= (1 - THERMAL_CLOCK_RATIO) * busy[n]]
        # the device's own measure, for jobs whose step time the loss tree cannot see (no training metrics)
        clock = _clock_loss(sub)
        by_device = [n for n in nodes if n not in slowed and n in clock.index
                     and clock.at[n, "busy"] >= MIN_THERMAL_GPU_MINUTES
                     and clock.at[n, "lost"] >= (1 - THERMAL_CLOCK_RATIO) * clock.at[n, "busy"]]
        slowed = sorted(slowed + by_device)
        for n in by_device:
            lost_on[n] = max(lost_on.get(n, 0.0), float(clock.at[n, "lost"]))
        lost = float(sum(lost_on.values()))
        causes = thermal_causes(ctx, nodes)
        paging = [n for n in slowed if n in causes]
        # a node pages on its throttled GPU-minutes and its loss each over their floor (its cause is a category,
        # no number); the region's finding pages on any paging node
        margins = []
        for n in paging:
            if n in by_device:  # the device's measure: its busy minutes have a floor of their own
                on, loss = clock.at[n, "busy"], clock.at[n, "lost"]
                margins.append(margin_of((per_node[n], MIN_THERMAL_GPU_MINUTES), (on, MIN_THERMAL_GPU_MINUTES),
                                         (loss, (1 - THERMAL_CLOCK_RATIO) * on)))
            else:
                margins.append(margin_of((per_node[n], MIN_THERMAL_GPU_MINUTES),
                                         (lost_on[n], (1 - THERMAL_CLOCK_RATIO) * busy[n])))
        margin = max((m for m in margins if m is not None), default=None)
        if paging:
            summary = f"Thermal throttling in {region} on {', '.join(nodes)} slows the jobs on {', '.join(paging)}"
        else:
            why = "no job slowed by it" if not slowed else "no cause of its own seen (inlet, node cooling)"
            summary = f"Thermal throttling in {region} on {', '.join(nodes)} ({why}): the nodes' history, no page"
        out.append(Finding("thermal_throttle", "hardware", "page" if paging else "ticket", region,
                           f"thermal_throttle|{region}", nodes=nodes, lost_gpu_minutes=lost, summary=summary,
                           margin=margin,
                           action=f"Check the cooling of {', '.join(paging or nodes)} (inlet, fans, airflow); drain "
                                  "them if it persists",
                           # the ticket's history over its episodes (alerts.HISTORY_TICKETS)
                           tally={"throttled_gpu_minutes": float(per_node.sum()),
                                  "max_temp_c": float(sub["temp_c"].max())},
                           evidence=f"{int(per_node.sum())} GPU-minutes thermally throttled at up to "
                                    f"{sub['temp_c'].max():.0f} C{_median_clock(sub)}; "
                                    f"{lost:.0f} GPU-minutes of compute slowdown"
                                    + (f" (jobs slowed on {', '.join(slowed)})" if slowed else "")
                                    + "".join(f"; {n}: {clock.at[n, 'lost']:.0f} GPU-minutes lost to the SM clock on "
                                              f"{clock.at[n, 'busy']:.0f} busy GPU-minutes (median "
                                              f"{clock.at[n, 'clock']:.0f} MHz against {clock.at[n, 'ref']:.0f} MHz on "
                                              "the SKU's unthrottled busy GPUs)" for n in by_device)
                                    + "".join(f"; {n}: {c}" for n, c in sorted(causes.items()))
                                    + (f" ({no_bits} of the GPU-minutes from a collector without clock-event reasons: "
                                       f"slowdown temperature and an SM clock under {THERMAL_CLOCK_RATIO:.0%} of the "
                                       "SKU's other busy GPUs)" if no_bits else "")))
    return out


def _median_clock(g: pd.DataFrame) -> str:
    """", SM clock median <n> MHz" of the throttled rows, empty where their collector exports no clock."""
    mhz = g["sm_clock_mhz"].median()
    return f", SM clock median {mhz:.0f} MHz" if pd.notna(mhz) else ""


def _clock_stepped_down(g: pd.DataFrame, at_temp: np.ndarray) -> np.ndarray:
    """Rows without clock-event reasons (not exported) at the slowdown temperature whose SM clock is under
    THERMAL_CLOCK_RATIO of the median clock of the same SKU's busy GPUs below it in the partition."""
    missing = g["throttle_reasons"].isna().to_numpy(dtype=bool)
    cand = missing & at_temp & g["job_id"].notna().to_numpy(dtype=bool)
    if not cand.any():
        return np.zeros(len(g), dtype=bool)
    clock = g["sm_clock_mhz"].to_numpy(dtype=float, na_value=np.nan)
    ref_row = _sku_median_clock(g, g["job_id"].notna().to_numpy(dtype=bool) & ~at_temp)
    return cand & np.isfinite(ref_row) & (clock < THERMAL_CLOCK_RATIO * ref_row)


def _sku_median_clock(g: pd.DataFrame, peers: np.ndarray) -> np.ndarray:
    """Per row of ``g``: the median SM clock of the ``peers`` rows of its SKU that report one (NaN without any)."""
    clock = g["sm_clock_mhz"].to_numpy(dtype=float, na_value=np.nan)
    sku = g["sku"].astype(object).to_numpy()
    peers = peers & np.isfinite(clock)
    ref = pd.Series(clock[peers]).groupby(sku[peers]).median()
    return pd.Series(sku).map(ref).to_numpy(dtype=float, na_value=np.nan)


def _kernel_active(g: pd.DataFrame) -> np.ndarray:
    """Rows whose GPU ran a kernel for a job in the minute (KERNEL_ACTIVE_UTIL_PCT)."""
    util = g["gpu_util_pct"].to_numpy(dtype=float, na_value=np.nan)
    return g["job_id"].notna().to_numpy(dtype=bool) & (util >= KERNEL_ACTIVE_UTIL_PCT)


def _unthrottled_clock(g: pd.DataFrame, at_temp: np.ndarray) -> np.ndarray:
    """Per row: the clock its SKU gives work when nothing slows it -- the median SM clock of the same SKU's GPUs
    running kernels in the partition below the slowdown temperature with no slow-down clock-event reason
    (SLOW_THROTTLE_BITS). Those GPUs run at the application clock, or boost above it (DCGM exports the application
    clock, but the telemetry contract carries only the actual one); the power cap is a loaded GPU's normal operating
    point and stays in. NaN where no such GPU of the SKU reports a clock: no reference, no measure."""
    reasons = g["throttle_reasons"].to_numpy(dtype=float, na_value=np.nan)
    slowed = np.isfinite(reasons) & ((np.nan_to_num(reasons).astype(np.int64) & SLOW_THROTTLE_BITS) > 0)
    return _sku_median_clock(g, _kernel_active(g) & ~at_temp & ~slowed)


def _clock_loss(rows: pd.DataFrame) -> pd.DataFrame:
    """Per node of the throttled ``rows``: GPU-minutes lost to the clock (``lost``) against their ``ref_clock``
    (:func:`_unthrottled_clock`) on the GPU-minutes a job ran kernels at a known clock and reference (``busy``), the
    median clock and reference. A kernel bound by the SMs
    runs in proportion to the SM clock, so a busy minute at ``clock`` does ``clock / ref`` of a minute's work
    (memory-bound kernels lose less: an upper bound, as the loss tree's step time is the measure where a job
    reports one). This needs no training metrics: a job that reports none is missing data, not unslowed."""
    clock = rows["sm_clock_mhz"].to_numpy(dtype=float, na_value=np.nan)
    ref = rows["ref_clock"].to_numpy(dtype=float)
    on = _kernel_active(rows) & np.isfinite(clock) & np.isfinite(ref) & (ref > 0)
    if not on.any():
        return pd.DataFrame(columns=["busy", "lost", "clock", "ref"])
    d = pd.DataFrame({"node_id": rows["node_id"].astype(object).to_numpy()[on], "clock": clock[on], "ref": ref[on],
                      "lost": np.clip(1 - clock[on] / ref[on], 0.0, 1.0)})
    return d.groupby("node_id").agg(busy=("lost", "size"), lost=("lost", "sum"), clock=("clock", "median"),
                                    ref=("ref", "median"))


RUNBOOKS = {
    CauseFamily.HARDWARE.value:
        "Cordon and drain the node(s); run DCGM diagnostics (dcgmi diag -r 3); reseat or RMA the GPU for "
        "Xid 48/79/94/95; check cooling and fans for thermal events. Runbook: docs/runbooks.md#hardware",
}
DETECTORS = [
    Detector(detect_hardware, emits=(("hardware_fault", CauseFamily.HARDWARE.value),),
             needs=("gpu", "node", "inventory", "maintenance", "sched", "changes", "leaves")),
    # a rack's cooling failure heats every GPU of the rack: those nodes are the rack's alert (rack_cooling)
    Detector(defer_to_rack(detect_thermal), emits=(("thermal_throttle", CauseFamily.HARDWARE.value),),
             needs=("gpu", "maintenance", "leaves", "facility")),
]
