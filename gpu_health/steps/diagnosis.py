"""Bodies of the diagnosis steps: the alerts (and their re-derivation after a re-run), the goodput decomposition
and the drill-down behind it (the actual and expected leaves).

No Dagster and no warehouse here: each body reads what its step declares (``registry.py``) through the
:class:`~gpu_health.steps.resolve.Inputs` it is given and calls the detectors of ``diagnosis``.
"""

from functools import partial

import numpy as np
import pandas as pd

from gpu_health.constants import PARTITION, PARTITION_FREQ
from gpu_health.metrics import goodput as G
from gpu_health.steps.finance import blended_rate_by_region, capacity_as_of
from gpu_health.steps.resolve import Inputs
from gpu_health.steps.telemetry import FIVE, SCHED_LOOKBACK, inventory_segments, inventory_union, moved_gpus

# the days before a partition's own whose cost file it tickets when missing or quarantined: live, the daily job
# settles a day after it ends (its cost file lands the next morning), so only the next day's partitions run after
# its reject is stored; a reject older than that is no longer news (it stays in source_rejects and on the check)
COST_REJECT_DAYS = pd.Timedelta(days=1)
# a partition's expected leaves: the same slot on each of the previous DECOMPOSITION_DAYS days
# (gpu_health.diagnosis.decompose)
DECOMPOSITION_DAYS = 3


FIRING_PAGE = {"severity": "page", "status": "firing"}  # alert rows of a partition in which a page was firing


def _firing_pages(alerts: pd.DataFrame) -> pd.DataFrame:
    """The FIRING_PAGE rows of ``alerts``: incident minutes never teach a baseline."""
    if not len(alerts):
        return alerts
    return alerts[np.logical_and.reduce([alerts[k] == v for k, v in FIRING_PAGE.items()])]


def _forget_paged(hist: pd.DataFrame, alerts: pd.DataFrame) -> pd.DataFrame:
    """``hist`` with the idle_blocked share blanked where a scheduling page was firing in the region."""
    if not len(alerts) or not len(hist):
        return hist
    paged = _firing_pages(alerts[alerts["cause_family"] == "scheduling"])
    if not len(paged):
        return hist
    keys = pd.MultiIndex.from_frame(paged[["partition_start", "region"]])
    hit = pd.MultiIndex.from_frame(hist[["partition_start", "region"]]).isin(keys)
    if not hit.any():
        return hist
    hist = hist.copy()
    hist.loc[hit, "share_idle_blocked"] = np.nan
    return hist


def _by_partition(frame: pd.DataFrame, col: str, start: pd.Timestamp, end: pd.Timestamp) -> dict:
    """partition start -> the rows of ``frame`` whose ``col`` falls in that partition of [start, end) (partitions
    without rows absent), each in the frame's order with its index: what a group-by on the floored column gives.
    A frame sorted by ``col`` (the stores return telemetry in time order) is cut into slices at the partition
    bounds, where a group-by would hash and copy every row; any other frame is grouped."""
    if not len(frame):
        return {}
    ts = pd.DatetimeIndex(frame[col])
    ns = ts.as_unit("ns").asi8
    if ts.tz is None or ns[0] == np.iinfo(np.int64).min or np.any(ns[1:] < ns[:-1]) or start != start.floor(PARTITION_FREQ):
        return {p: part for p, part in frame.groupby(frame[col].dt.floor(PARTITION_FREQ))}
    parts = pd.date_range(start, end, freq=PARTITION_FREQ, inclusive="left")
    lo = np.searchsorted(ns, parts.as_unit("ns").asi8, "left")
    hi = np.searchsorted(ns, (parts + PARTITION).as_unit("ns").asi8, "left")
    return {p: frame.iloc[a:b] for p, a, b in zip(parts, lo, hi) if b > a}


def _rows_in(part: pd.DataFrame, frame: pd.DataFrame) -> slice | None:
    """The positions of ``part`` in ``frame`` as a slice, where its index says them (``frame`` numbered 0..n-1
    as reads give it, ``part`` a run of it), else None."""
    whole, idx = frame.index, part.index
    if (isinstance(whole, pd.RangeIndex) and whole.start == 0 and whole.step == 1
            and isinstance(idx, pd.RangeIndex) and idx.step == 1):
        return slice(idx.start, idx.stop)
    return None


def alerts(inputs: Inputs, *, unstored: tuple[pd.Timestamp, pd.DataFrame] | None = None) -> pd.DataFrame:
    """Alert snapshots of every partition in the window [start, end), carrying the open alerts forward.

    ``unstored`` = (since, snapshots): the alert snapshots of [since, start) computed by this step but not
    stored yet (alerts_after_rerun). They stand in for the stored rows of those partitions: the open alerts
    carried into ``start`` and the partitions a scheduling page held come from them.
    """
    from gpu_health.diagnosis import alerts as A
    from gpu_health.diagnosis.convergence import CONVERGENCE_LOOKBACK
    from gpu_health.diagnosis.detect import PartitionContext, detect, job_table, prepare_range
    from gpu_health.diagnosis.platform import RESTART_WINDOW
    from gpu_health.metrics.slo import LOOKBACK as SLO_LOOKBACK
    from gpu_health.metrics.slo import RELEASE_LOOKBACK

    start, end = inputs.start, inputs.end
    five = PARTITION
    frames = {t: inputs.in_window(t) for t in ("gpu_telemetry", "node_telemetry", "network_telemetry")}
    facility = inputs.in_window("facility_telemetry")  # optional source: empty without facility data
    fac_p = _by_partition(facility, "ts", start, end)
    runtime = inputs.span("job_runtime_metrics", start - five, end)
    sched = inputs.window("scheduler_events")
    changes = inputs.window("change_events")
    maint = inputs.window("maintenance_windows")
    leaves = inputs.in_window("goodput_leaves")
    baselines = inputs.in_window("step_time_baselines")
    meta = inputs.window("job_metadata",
                         columns=["job_id", "team", "workload_class", "model_type", "framework_version"])
    segments = inventory_segments(inputs)
    inventory_at = {p: inv for s0, s1, inv in segments for p in pd.date_range(s0, s1, freq=five, inclusive="left")}
    moved_p = _by_partition(moved_gpus(inputs, segments, frames["gpu_telemetry"]), "ts", start, end)
    # the seasonal baseline of the scheduling detector: the declared history of the loss tree
    hist, prev = _history(inputs, unstored)
    recent = _recent_alerts(inputs, unstored)  # the alerts a finding of their cause re-opens (alerts.RECENT)
    cost = capacity_as_of(inputs)
    rates = blended_rate_by_region(cost)
    cost_days = dict(tuple(cost.groupby(pd.to_datetime(cost["date"].astype(str)).dt.date))) if len(cost) else {}
    rejects_p, cost_p, gaps_p = _data_tickets(inputs)
    slo_rows = inputs.window("slo_error_budgets",
                             columns=["partition_start", "slo", "region", "model_name", "total_events", "bad_events",
                                      "interpolated", "error_budget_remaining"])
    slo_rows = slo_rows.sort_values("partition_start", kind="stable").reset_index(drop=True)
    release_rows = inputs.window("slo_version_events")
    release_rows = release_rows.sort_values("partition_start", kind="stable").reset_index(drop=True)
    kube_pods = inputs.window("kube_pods")  # optional sources: empty when not exported
    kube_pods = kube_pods.sort_values("ts", kind="stable").reset_index(drop=True)
    kube_nodes = inputs.in_window("kube_nodes")
    kube_nodes_p = _by_partition(kube_nodes, "ts", start, end)
    loss_hist = inputs.window("job_runtime_metrics",  # (the convergence detector's look-back, the widest)
                              columns=["ts", "job_id", "steps", "loss", "checkpoint_time_s", "last_checkpoint_step",
                                       "grad_norm"])
    loss_hist = loss_hist.sort_values("ts", kind="stable").reset_index(drop=True)
    union = inventory_union(segments)
    jobs = job_table(sched, union)  # node -> region only: where each queue's jobs run
    placed = G.placements(sched)
    prep = prepare_range(jobs, meta, job_lookback=SCHED_LOOKBACK,
                         windows={"runtime": runtime, "sched": sched, "changes": changes}, loss_history=loss_hist,
                         sched=sched, node_region=dict(zip(union["node_id"], union["region"])),
                         gpu=frames["gpu_telemetry"])

    def by_partition(frame, col="ts"):
        return _by_partition(frame, col, start, end)

    g_p, n_p, net_p = (by_partition(frames[t]) for t in ("gpu_telemetry", "node_telemetry", "network_telemetry"))
    leaves_p, base_p = by_partition(leaves, "partition_start"), by_partition(baselines, "partition_start")
    empty = {t: frames[t].iloc[0:0] for t in frames}
    # (the time columns the loop cuts windows from, taken out of their frames once)
    placed_ts, pods_ts, slo_ps, loss_ts = placed["ts"], kube_pods["ts"], slo_rows["partition_start"], loss_hist["ts"]
    release_ps = release_rows["partition_start"]
    out = []
    for p in pd.date_range(start, end, freq=PARTITION_FREQ, inclusive="left"):
        gpu = g_p.get(p, empty["gpu_telemetry"])
        ctx = PartitionContext(
            start=p, end=p + five, gpu=gpu, gpu_rows=_rows_in(gpu, frames["gpu_telemetry"]),
            node=n_p.get(p, empty["node_telemetry"]),
            network=net_p.get(p, empty["network_telemetry"]),
            runtime=prep.between("runtime", p - five, p + five),
            sched=prep.between("sched", p + five - SCHED_LOOKBACK, p + five),
            changes=prep.between("changes", None, p + five), maintenance=maint, leaves=leaves_p.get(p, leaves.iloc[0:0]),
            baselines=base_p.get(p, baselines.iloc[0:0]), meta=meta, inventory=inventory_at[p],
            region_history=hist[hist["partition_start"] < p], open_baselines=A.open_baselines(prev),
            prepared=prep,
            placements=placed.iloc[placed_ts.searchsorted(p + five - SCHED_LOOKBACK):placed_ts.searchsorted(p + five)],
            rejects=rejects_p.get(p), source_gaps=gaps_p.get(p),
            slo_events=slo_rows.iloc[slo_ps.searchsorted(p + five - SLO_LOOKBACK):slo_ps.searchsorted(p + five)]
            if len(slo_rows) else None,
            slo_versions=release_rows.iloc[release_ps.searchsorted(p + five - RELEASE_LOOKBACK):release_ps.searchsorted(p + five)]
            if len(release_rows) else None,
            open_keys=frozenset(prev.loc[prev["status"] != "resolved", "key"]) if len(prev) else frozenset(),
            carried=A.carried(prev),
            facility=fac_p.get(p), capacity=cost_days.get(p.date()), moved=moved_p.get(p),
            cost_rejects=_days_rejects(cost_p, p.normalize() - COST_REJECT_DAYS, p.normalize()),
            kube_pods=kube_pods.iloc[pods_ts.searchsorted(p - RESTART_WINDOW):pods_ts.searchsorted(p + five)]
            if len(kube_pods) else None,
            kube_nodes=kube_nodes_p.get(p),
            loss_history=loss_hist.iloc[loss_ts.searchsorted(p + five - CONVERGENCE_LOOKBACK):loss_ts.searchsorted(p + five)]
            if len(loss_hist) else None,
            job_gpu_history=partial(_job_gpu_history, inputs, p),
        )
        snap = A.step(prev, detect(ctx), p, rates=rates, changes=ctx.changes, recent=recent)
        A.remember(recent, snap, p + five)
        if len(snap):
            out.append(snap)
            hist = _forget_paged(hist, snap)
        prev = snap
    return pd.concat(out, ignore_index=True) if out else A.empty()


def _job_gpu_history(inputs: Inputs, p: pd.Timestamp, jobs: list) -> pd.DataFrame:
    """PartitionContext.job_gpu_history of partition ``p``: the GPU rows of ``jobs`` in the COMPUTE_HISTORY before
    it (a filtered read: the gaming and stall detectors ask for a few suspect jobs, only when they would raise a
    finding)."""
    from gpu_health.diagnosis.detectors.gaming import COMPUTE_HISTORY

    return inputs.span("gpu_telemetry", p - COMPUTE_HISTORY, p, where={"job_id": list(jobs)},
                       columns=["ts", "job_id", "gpu_uuid", "sku", "gpu_util_pct", "sm_active", "tensor_active",
                                "power_w"])


def _history(inputs: Inputs, unstored) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The loss tree's history the scheduling detector's seasonal baseline reads (the partitions a scheduling page
    held forgotten: incident minutes do not teach it) and the alert snapshot of the partition before the window;
    ``unstored``: as :func:`alerts` takes it."""
    from gpu_health.diagnosis import alerts as A

    start, five = inputs.start, PARTITION
    hist = inputs.window("cluster_goodput", columns=["partition_start", "region", "share_idle_blocked"])
    held = inputs.span("alerts", inputs.since("alerts"), start,
                       columns=["partition_start", "region", "cause_family", "severity", "status"],
                       where={"cause_family": "scheduling", **FIRING_PAGE})
    prev = inputs.span("alerts", start - five, start)
    if unstored is not None:
        since, fresh = unstored
        held = pd.concat([held[held["partition_start"] < since], _firing_pages(fresh)[held.columns]]) if len(fresh) else \
            held[held["partition_start"] < since]
        if since <= start - five:
            prev = fresh[fresh["partition_start"] == start - five] if len(fresh) else A.empty()
    return _forget_paged(hist, held), prev


def _recent_alerts(inputs: Inputs, unstored) -> dict:
    """The alerts of the RECENT before the window that a finding of the same cause re-opens (alerts.recalled: the
    paged ones and the HISTORY_TICKETS tickets), read as the loop carries them on (``alerts.remember``), so a range
    run, its partitions run one by one and a re-run (``unstored``: as :func:`alerts` takes it) see the same."""
    from gpu_health.diagnosis import alerts as A

    lo, start = inputs.start - A.RECENT, inputs.start
    rows = [inputs.span("alerts", lo, start, columns=A.RECALL_COLUMNS, where={"severity": "page"}),
            inputs.span("alerts", lo, start, columns=A.RECALL_COLUMNS,
                        where={"severity": "ticket", "detector": list(A.HISTORY_TICKETS)})]
    if unstored is not None:
        since, fresh = unstored
        fresh = fresh[fresh["partition_start"] < start] if len(fresh) else fresh
        rows = [r[r["partition_start"] < since] for r in rows] + ([fresh[A.RECALL_COLUMNS]] if len(fresh) else [])
    rows = [r for r in rows if len(r)]
    return A.recalled(pd.concat(rows, ignore_index=True)) if rows else {}


def _data_tickets(inputs: Inputs) -> tuple[dict, dict, dict]:
    """partition -> its source rejects, day -> Finance's cost-file rejects, partition -> its source gaps."""
    start, end = inputs.start, inputs.end
    rejects = inputs.in_window("source_rejects", columns=["source", "partition_start", "origin", "reason"])
    # a cost_capacity reject is filed under its day's midnight: a ticket of its day (cost_p), not of one partition
    rejects = rejects[rejects["source"] != "cost_capacity"] if len(rejects) else rejects
    rejects_p = dict(tuple(rejects.groupby("partition_start"))) if len(rejects) else {}
    # Finance's cost file of each partition's day and of the day before: live, a day is settled (its cost file
    # read) after its partitions ran, so its reject is stored while the next day's partitions run
    cost_rejects = inputs.span("source_rejects", start.normalize() - COST_REJECT_DAYS, end,
                               columns=["partition_start", "origin", "row_index", "reason"],
                               where={"source": "cost_capacity"})
    cost_p = dict(tuple(cost_rejects.groupby(cost_rejects["partition_start"].dt.normalize()))) if len(cost_rejects) else {}
    gaps = inputs.in_window("source_gaps", columns=["source", "partition_start", "missing_family", "reason"])
    gaps_p = dict(tuple(gaps.groupby("partition_start"))) if len(gaps) else {}
    return rejects_p, cost_p, gaps_p


def _days_rejects(by_day: dict, first: pd.Timestamp, last: pd.Timestamp) -> pd.DataFrame | None:
    """The cost_capacity rejects of the days ``first`` .. ``last`` (None: none)."""
    days = [by_day[d] for d in pd.date_range(first, last, freq="D") if d in by_day]
    return pd.concat(days, ignore_index=True) if len(days) > 1 else days[0] if days else None


# A re-run partition re-derives the alerts of the partitions after it that were already computed (their snapshots
# carry the re-run partition's open alerts forward), until a partition's snapshot comes out as stored (from there on
# every later one would too), at most this far: the longest window one run of the alerts step covers anyway
# (`gpu-health run` and a backfill run a range as day-long runs), so a re-run costs at most one ordinary range run.
# An alert whose state still differs past it (an incident open for over a day) keeps its stored later rows; the
# step's metadata says so (alerts_rederive_converged = false). The same bound holds for every derived table after a
# correction (steps/rederive.py: the later partitions re-derived, those past it reported stale).
ALERT_LOOKAHEAD = pd.Timedelta(hours=24)
# Partitions re-derived per pass: the first pass is one partition (a re-run whose data did not change converges at
# once), later passes an hour (reads amortized over 12 partitions).
_LOOKAHEAD_PASSES = (PARTITION, pd.Timedelta(hours=1))
WITHDRAWN = "Withdrawn: the data behind this alert was replaced and its partitions re-derived without it."


def _comparable(v):
    if v is None or (not isinstance(v, str) and pd.isna(v)):
        return None
    if isinstance(v, float | np.floating):
        return float(f"{v:.9g}")  # a float through the database and back: the same to 9 digits
    if isinstance(v, int | np.integer):
        return int(v)
    if isinstance(v, pd.Timestamp):
        return pd.Timestamp(v).tz_convert("UTC")
    return str(v)


def _snapshot_key(frame: pd.DataFrame) -> list[tuple]:
    """A partition's alert snapshot as sorted comparable tuples (the same rows stored or just computed)."""
    from gpu_health.diagnosis.alerts import COLUMNS

    rows = [tuple(_comparable(v) for v in r) for r in frame[COLUMNS].astype(object).itertuples(index=False)]
    return sorted(rows, key=repr)


def _sched_pages(frame: pd.DataFrame) -> set:
    pages = _firing_pages(frame[frame["cause_family"] == "scheduling"]) if len(frame) else frame
    return set(zip(pages["partition_start"], pages["region"])) if len(pages) else set()


def _carried(frame: pd.DataFrame) -> tuple:
    """What later partitions carry of these snapshots besides the previous one: the partitions scheduling pages
    held and the alerts a finding of their cause re-opens (alerts.recalled), comparable stored or just computed."""
    from gpu_health.diagnosis.alerts import recalled

    again = {k: (_comparable(r["partition_start"]), r["key"], r["scope"]) for k, r in recalled(frame).items()}
    return _sched_pages(frame), again


def computed_until(read, end, horizon: pd.Timedelta) -> pd.Timestamp:
    """The end of the later partitions already computed: the unbroken run of partitions with a stored loss tree
    from ``end`` on, up to ``horizon`` past it (a partition that never ran stops it; its own run re-derives what
    follows it). ``read(table, lo, hi, columns=, where=)``: the alerts step's ``Inputs.span`` (its declared reach
    past its window), or the warehouse's own window read for the re-derivation's plan (``rederive.plan``), which
    is no step: it asks which partitions are stored, for no data of theirs."""
    end = pd.Timestamp(end)
    done = set(read("cluster_goodput", end, end + horizon, columns=["partition_start"],
                    where={"region": "*"})["partition_start"])
    limit = end
    while limit in done:
        limit += FIVE
    return limit


def alerts_after_rerun(inputs: Inputs, frame: pd.DataFrame, *,
                       horizon: pd.Timedelta | None = None) -> tuple[pd.DataFrame, pd.Timestamp, dict]:
    """The alert snapshots of [start, stop): ``frame`` (this step's [start, end)) and the later partitions re-derived
    from it, plus a tombstone for each alert the re-derivation no longer opens.

    Rule: the partitions after ``end`` whose loss tree is already stored (cluster_goodput rows, an unbroken run of
    them up to ``horizon``, default ALERT_LOOKAHEAD) were judged with the open alerts of the partition before
    them, so when [start, end) re-runs (its landing files replaced) they are re-derived in order from the new
    snapshots, until one comes out exactly as stored while the same partitions are held by scheduling pages and
    the same alerts are there to re-open (:func:`_carried`): an alert's state is the previous snapshot, the
    seasonal baseline of the scheduling detector forgets the partitions a scheduling page held, and a finding
    re-opens an alert of its cause paged within a day, so with all equal every later partition would come out as
    stored too. ``stop`` is that partition. An alert
    stored in [start, stop) that the re-derivation no longer produces (its evidence vanished) gets one ``resolved``
    row at the partition it opened in, saying it was withdrawn (WITHDRAWN), so ``alerts_current`` and Alertmanager
    see it resolve instead of a page left firing. Returns the rows to store for [start, stop), ``stop`` and
    metadata (partitions re-derived, whether it converged inside the horizon, the withdrawn alert ids).
    """
    from gpu_health.diagnosis import alerts as A

    start, end = inputs.start, inputs.end
    horizon = ALERT_LOOKAHEAD if horizon is None else horizon
    limit = computed_until(inputs.span, end, horizon)
    parts, t, hit, passes = [frame], end, None, 0
    while t < limit and hit is None:
        t1 = min(t + _LOOKAHEAD_PASSES[min(passes, 1)], limit)
        passes += 1
        fresh = pd.concat([p for p in parts if len(p)] or [A.empty()], ignore_index=True)
        new = alerts(inputs.at(t, t1), unstored=(start, fresh))
        old = inputs.span("alerts", t, t1)
        new_p = dict(tuple(new.groupby("partition_start"))) if len(new) else {}
        old_p = dict(tuple(old.groupby("partition_start"))) if len(old) else {}
        same_held = _carried(inputs.span("alerts", start, t)) == _carried(fresh)
        for p in pd.date_range(t, t1, freq=FIVE, inclusive="left"):
            a, b = new_p.get(p, A.empty()), old_p.get(p, A.empty())
            if same_held and _snapshot_key(a) == _snapshot_key(b):
                hit = p
                break
            same_held = same_held and _carried(a) == _carried(b)
        parts.append(new[new["partition_start"] < hit] if hit is not None and len(new) else new)
        t = t1
    stop = hit if hit is not None else t
    # not converged: the horizon cut the re-derivation short of a partition that came out as stored
    converged = hit is not None or inputs.span("cluster_goodput", stop, stop + FIVE, columns=["partition_start"],
                                               where={"region": "*"}).empty
    rows = pd.concat([p for p in parts if len(p)] or [A.empty()], ignore_index=True)
    stored = inputs.span("alerts", start, stop)
    gone = sorted(set(stored["alert_id"]) - set(rows["alert_id"])) if len(stored) else []
    if gone:
        first = stored[stored["alert_id"].isin(gone)].sort_values("partition_start").drop_duplicates("alert_id")
        at = first["partition_start"] + FIVE
        text = first["description"].astype(str)
        first = first.assign(status="resolved", resolved_at=at, updated_at=at, usd_per_hour=0.0, lost_gpu_minutes=0.0,
                             description=text.where(text.str.startswith(WITHDRAWN), WITHDRAWN + " " + text))
        rows = pd.concat([rows, first[A.COLUMNS]], ignore_index=True) if len(rows) else first[A.COLUMNS]
    meta = {"alerts_rederived_partitions": int((stop - end) / FIVE), "alerts_rederive_converged": bool(converged),
            "alerts_withdrawn": gone}
    return rows, stop, meta



def _paged_partitions(inputs: Inputs) -> set:
    """Partitions in which a page was firing (FIRING_PAGE) over the declared span of the alerts (the window's own
    included), filtered in the database."""
    a = inputs.window("alerts", columns=["partition_start"], where=FIRING_PAGE)
    return set(a["partition_start"])


def _slices(start, end, days: int, pad: pd.Timedelta) -> list[tuple[pd.Timestamp, pd.Timestamp]]:
    """The same time of day on each of the previous ``days`` days (padded), plus the trailing two hours."""
    out = [(start - pd.Timedelta(days=d) - pad, end - pd.Timedelta(days=d) + pad) for d in range(days, 0, -1)]
    return out + [(start - pd.Timedelta(hours=2), start)]


def _read_disjoint(inputs: Inputs, table: str, slices) -> pd.DataFrame:
    """:func:`_read_slices` of a table whose rows are unique (a primary key): each slice reads only what the
    slices before it did not cover, so no row is read twice and none needs dropping -- the same rows in the
    same order (a day's trailing two hours are inside the day before it: a read and a duplicate scan of ~300,000
    rows saved)."""
    parts, covered = [], []
    for a, b in slices:
        for lo, hi in _uncovered(a, b, covered):
            part = inputs.span(table, lo, hi)
            if len(part):
                parts.append(part)
        covered.append((a, b))
    return pd.concat(parts, ignore_index=True) if parts else inputs.span(table, slices[-1][1], slices[-1][1])


def _uncovered(a, b, covered) -> list[tuple[pd.Timestamp, pd.Timestamp]]:
    """The parts of [a, b) outside every interval of ``covered``, in time order."""
    pieces = [(a, b)]
    for c0, c1 in covered:
        pieces = [q for lo, hi in pieces for q in ((lo, min(hi, c0)), (max(lo, c1), hi)) if q[0] < q[1]]
    return sorted(pieces)


def actual_and_expected_leaves(inputs: Inputs) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The goodput leaves of every partition of the window and their expected leaves (same slot of the previous
    DECOMPOSITION_DAYS days, paged partitions excluded, else the trailing 2 hours; gpu_health.diagnosis.decompose)."""
    from gpu_health.diagnosis.decompose import expected_leaves_from_history

    start, end = inputs.start, inputs.end
    actual = inputs.in_window("goodput_leaves")
    history = _read_disjoint(inputs, "goodput_leaves", _slices(start, end, DECOMPOSITION_DAYS, pd.Timedelta(0)))
    history = history[history["partition_start"] < start]
    # the window's pages too: at cold start a partition's trailing two hours include the window before it
    exclude = _paged_partitions(inputs)
    parts = pd.date_range(start, end, freq=PARTITION_FREQ, inclusive="left")
    # expected leaves of every partition at once, each from what its own run reads (decompose's docstring)
    expected = expected_leaves_from_history(history, parts, actual_leaves=actual, exclude=exclude,
                                           lookback_days=DECOMPOSITION_DAYS)
    return actual, expected.drop(columns=["method"], errors="ignore")


def decomposition(inputs: Inputs) -> pd.DataFrame:
    """Ranked causes of each partition's goodput change against its expected leaves (actual_and_expected_leaves)."""
    from gpu_health.diagnosis.decompose import decompose_range

    actual, expected = actual_and_expected_leaves(inputs)
    return decompose_range(actual, expected)


