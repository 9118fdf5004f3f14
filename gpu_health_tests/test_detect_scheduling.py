"""The scheduling detector: GPUs idle while jobs that could use them wait (gpu_health.diagnosis.detect)."""

import json

import numpy as np
import pandas as pd
import pytest

from gpu_health.diagnosis import alerts as A
from gpu_health.diagnosis.context import PartitionContext
from gpu_health.diagnosis.detectors.scheduling import (
    AGED_WAIT,
    SCHED_MIN_JOBS,
    SCHED_PAGE_SHARE,
    SCHED_PAGE_SHARE_AFTER_CHANGE,
    SCHED_TICKET_SHARE,
    aged_blocked,
    detect_scheduling,
)

START = pd.Timestamp("2026-11-03T12:00:00Z")
FIVE = pd.Timedelta(minutes=5)
# r1: two 8-GPU batch nodes (b1, b2) and two 8-GPU notebook nodes (i1, i2), plus `filler` busy nodes of
# another pool that only make the region bigger (the bars are shares of its paid GPU-minutes)
NODES = ["b1", "b2", "i1", "i2"]


def inventory(filler: int = 0) -> pd.DataFrame:
    return pd.DataFrame({"node_id": NODES + [f"f{i}" for i in range(filler)], "region": "r1", "sku": "H100", "gpus": 8})


def gpu_minutes(start: pd.Timestamp, busy: dict[str, int], filler: int = 0) -> pd.DataFrame:
    """One row per GPU per minute of the partition; ``busy[node]`` GPUs of the node hold a job (filler: all)."""
    busy = busy | {f"f{i}": 8 for i in range(filler)}
    rows = []
    for minute in pd.date_range(start, start + FIVE, freq="1min", inclusive="left"):
        for node in inventory(filler)["node_id"]:
            for i in range(8):
                rows.append((minute, "r1", node, i, f"j-{node}" if i < busy.get(node, 0) else None, 0))
    return pd.DataFrame(rows, columns=["ts", "region", "node_id", "gpu_index", "job_id", "xid"])


def scheduler_events(waiting: list[tuple[str, str, int]], start: pd.Timestamp) -> pd.DataFrame:
    """Placements that teach each queue its nodes, and ``waiting`` jobs (queue, id, gpus) submitted 20 min before ``start``."""
    rows = [("e-p1", start - pd.Timedelta(hours=2), "p1", "submitted", "r1/batch", 8, None),
            ("e-p2", start - pd.Timedelta(hours=2), "p1", "started", "r1/batch", 8, "b1"),
            ("e-p3", start - pd.Timedelta(hours=2), "p2", "submitted", "r1/batch", 8, None),
            ("e-p4", start - pd.Timedelta(hours=2), "p2", "started", "r1/batch", 8, "b2"),
            ("e-p5", start - pd.Timedelta(hours=2), "p3", "submitted", "r1/notebooks", 1, None),
            ("e-p6", start - pd.Timedelta(hours=2), "p3", "started", "r1/notebooks", 1, "i1"),
            ("e-p7", start - pd.Timedelta(hours=2), "p4", "submitted", "r1/notebooks", 1, None),
            ("e-p8", start - pd.Timedelta(hours=2), "p4", "started", "r1/notebooks", 1, "i2")]
    for i, (queue, job, gpus) in enumerate(waiting):
        rows.append((f"e-w{i}", start - pd.Timedelta(minutes=20), job, "submitted", queue, gpus, None))
    return pd.DataFrame(rows, columns=["event_id", "ts", "job_id", "event", "queue", "gpus", "node_ids"])


def context(busy: dict[str, int], waiting, *, start=START, changes=None, open_baselines=None, filler=0,
            history_share: float | None = None) -> PartitionContext:
    """``history_share``: the region's idle_blocked share in the two hours before (default: no history)."""
    empty = pd.DataFrame()
    gpu = gpu_minutes(start, busy, filler)
    # the loss tree counts the region's idle GPU-minutes as idle_blocked while jobs wait
    leaves = pd.DataFrame({"state": ["idle_blocked"], "region": ["r1"], "gpu_minutes": [float(gpu["job_id"].isna().sum())]})
    history = pd.DataFrame(columns=["partition_start", "region", "share_idle_blocked"])
    if history_share is not None:
        parts = pd.date_range(start - pd.Timedelta(hours=2), start, freq="5min", inclusive="left")
        history = pd.DataFrame({"partition_start": parts, "region": "r1", "share_idle_blocked": history_share})
    return PartitionContext(
        start=start, end=start + FIVE, gpu=gpu, node=empty, network=empty, runtime=empty,
        sched=scheduler_events(waiting, start),
        changes=changes if changes is not None else pd.DataFrame(columns=["event_id", "ts", "kind", "scope"]),
        maintenance=pd.DataFrame(columns=["start", "end", "region", "node_ids"]),
        leaves=leaves, baselines=empty, meta=empty, inventory=inventory(filler), region_history=history,
        open_baselines=open_baselines or {})


def blocked(ctx) -> float:
    return float(aged_blocked(ctx).set_index("region").loc["r1", "blocked_gpu_minutes"])


FULL_BATCH = {"b1": 8, "b2": 8}


def test_idle_gpus_on_the_queues_own_nodes_block_a_waiting_job():
    # batch node b2 is idle; eight 1-GPU batch jobs have waited 20 minutes: 8 GPUs x 5 minutes blocked
    ctx = context({"b1": 8, "i1": 8, "i2": 8}, [("r1/batch", f"w{i}", 1) for i in range(8)])
    assert blocked(ctx) == 40.0
    assert aged_blocked(ctx).iloc[0]["aged_jobs"] == 8


def test_idle_gpus_of_another_pool_do_not_block():
    # the notebook nodes are idle, the batch nodes full: batch jobs wait for capacity, nothing is blocked
    assert blocked(context(FULL_BATCH, [("r1/batch", f"w{i}", 1) for i in range(8)])) == 0.0


def test_scattered_free_gpus_that_could_host_a_larger_request_together_are_fragmentation():
    # four GPUs free on each 8-GPU batch node: no node can host the 5-GPU job, a whole node's worth sits free in
    # pieces: fragmentation
    waiting = [("r1/batch", "w5", 5)]
    frag = aged_blocked(context({"b1": 4, "b2": 4, "i1": 8, "i2": 8}, waiting)).iloc[0]
    assert (frag["blocked_gpu_minutes"], frag["fragmented_gpu_minutes"]) == (25.0, 25.0)
    # five free on one node can host it: blocked, not fragmented
    fit = aged_blocked(context({"b1": 3, "b2": 4, "i1": 8, "i2": 8}, waiting)).iloc[0]
    assert (fit["blocked_gpu_minutes"], fit["fragmented_gpu_minutes"]) == (25.0, 0.0)
    # two free GPUs in all cannot host it however they are packed: nothing blocked
    assert blocked(context({"b1": 7, "b2": 7, "i1": 8, "i2": 8}, waiting)) == 0.0


def test_less_than_a_node_free_in_pieces_is_the_residue_of_packing_not_fragmentation():
    """Three GPUs free on each of two 8-GPU nodes beside a waiting 4-GPU job: six GPUs, less than the node the job
    runs on -- each node's last GPUs, the residue any packing leaves (the smaller requests fill it), not a node-sized
    block a scheduler could have kept whole."""
    row = aged_blocked(context({"b1": 5, "b2": 5, "i1": 8, "i2": 8}, [("r1/batch", "w4", 4)])).iloc[0]
    assert (row["fragmented_gpu_minutes"], row["shape_blocked_jobs"]) == (0.0, 0)


def test_a_request_larger_than_a_node_needs_whole_free_nodes_enough_at_once():
    waiting = [("r1/batch", "w16", 16)]
    assert blocked(context({"b1": 1, "b2": 1, "i1": 8, "i2": 8}, waiting)) == 0.0
    # both batch nodes free: the 16-GPU job fits, every idle GPU is held back from it
    assert blocked(context({"i1": 8, "i2": 8}, waiting)) == 80.0
    # one whole node free: a gang being assembled (a reservation draining nodes), not capacity the job can use
    assert blocked(context({"b1": 8, "i1": 8, "i2": 8}, waiting)) == 0.0
    # ... unless a smaller request waits beside it that the free node can host
    assert blocked(context({"b1": 8, "i1": 8, "i2": 8}, waiting + [("r1/batch", "w8", 8)])) == 40.0


def test_a_short_wait_is_not_blocking():
    ctx = context({"b1": 8, "i1": 8, "i2": 8}, [])
    recent = pd.DataFrame([("e-n", START - AGED_WAIT + pd.Timedelta(minutes=3), "n1", "submitted", "r1/batch", 1, None)],
                          columns=ctx.sched.columns)
    ctx.sched = pd.concat([ctx.sched, recent], ignore_index=True)
    # over AGED_WAIT old only at the middles of the partition's last two minutes
    assert blocked(ctx) == 2.0


def filler_for(share: float, blocked_gpu_minutes: float) -> int:
    """Filler nodes that make ``blocked_gpu_minutes`` this share of the region's paid GPU-minutes."""
    return round(blocked_gpu_minutes / share / (8 * 5)) - len(NODES)


NO_CHANGES = pd.DataFrame(columns=["event_id", "ts", "scope"])
WAITING = [("r1/batch", f"w{i}", 2) for i in range(8)]  # two-GPU requests: b2's 8 idle GPUs fit four of them
SINGLE = [("r1/batch", f"s{i}", 1) for i in range(8)]  # single-GPU requests: any idle GPU fits them
B2_IDLE = {"b1": 8, "i1": 8, "i2": 8}  # 8 idle batch GPUs: 40 blocked GPU-minutes with 8 jobs waiting


def test_a_pile_up_between_the_ticket_and_page_bars_is_a_ticket_and_pages_when_it_grows():
    between = filler_for((SCHED_TICKET_SHARE + SCHED_PAGE_SHARE) / 2, 40)
    first = detect_scheduling(context(B2_IDLE, WAITING, filler=between))
    assert [(f.detector, f.family, f.severity) for f in first] == [("scheduling_blocked", "scheduling", "ticket")]
    snap = A.step(A.empty(), first, START, rates={"r1": 2.0}, changes=NO_CHANGES)
    above = filler_for(SCHED_PAGE_SHARE * 1.2, 40)
    second = detect_scheduling(context(B2_IDLE, WAITING, start=START + FIVE, filler=above,
                                       open_baselines=A.open_baselines(snap)))
    assert [f.severity for f in second] == ["page"]
    snap2 = A.step(snap, second, START + FIVE, rates={"r1": 2.0}, changes=NO_CHANGES)
    assert len(snap2) == 1 and snap2.iloc[0]["alert_id"] == snap.iloc[0]["alert_id"]  # one incident, one alert
    assert snap2.iloc[0]["paged_at"] == START + 2 * FIVE
    assert json.loads(snap2.iloc[0]["scope"])["region"] == "r1"


def test_below_the_ticket_bar_nothing_opens():
    assert detect_scheduling(context(B2_IDLE, WAITING, filler=filler_for(SCHED_TICKET_SHARE * 0.8, 40))) == []


def test_a_pile_up_above_the_page_bar_pages_in_its_first_partition():
    found = detect_scheduling(context(B2_IDLE, WAITING))
    assert [f.severity for f in found] == ["page"]
    # the region's first partition: no seasonal baseline yet, and the evidence does not invent one
    assert "(no history yet)" in found[0].evidence and "0.0%)" not in found[0].evidence


def test_too_few_jobs_is_not_a_pile_up():
    assert detect_scheduling(context(B2_IDLE, WAITING[:3])) == []


def test_an_open_alert_stays_open_as_a_ticket_while_the_pile_up_thins():
    snap = A.step(A.empty(), detect_scheduling(context(B2_IDLE, WAITING)), START, rates={"r1": 2.0}, changes=NO_CHANGES)
    # two jobs still wait on idle GPUs: the share is above the bar, the pile-up below its job count
    weaker = context(B2_IDLE, WAITING[:2], start=START + FIVE, open_baselines=A.open_baselines(snap))
    found = detect_scheduling(weaker)
    assert [f.severity for f in found] == ["ticket"]
    snap2 = A.step(snap, found, START + FIVE, rates={"r1": 2.0}, changes=NO_CHANGES)
    assert snap2.iloc[0]["status"] == "firing" and snap2.iloc[0]["severity"] == "page"  # still the paged incident


def test_after_a_scheduler_change_the_page_bar_is_lower():
    changes = pd.DataFrame([("c1", START - pd.Timedelta(minutes=30), "scheduler_config", "r1")],
                           columns=["event_id", "ts", "kind", "scope"])
    between = filler_for((SCHED_PAGE_SHARE_AFTER_CHANGE + SCHED_PAGE_SHARE) / 2, 40)
    below = filler_for(SCHED_PAGE_SHARE_AFTER_CHANGE * 0.9, 40)
    assert [f.severity for f in detect_scheduling(context(B2_IDLE, WAITING, changes=changes, filler=below))] == [
        "ticket"]
    assert [f.severity for f in detect_scheduling(context(B2_IDLE, WAITING, filler=between))] == ["ticket"]
    found = detect_scheduling(context(B2_IDLE, WAITING, changes=changes, filler=between))
    assert [(f.severity, f.change_event) for f in found] == [("page", "c1")]
    # the change is the cause in evidence before a week of history: single-GPU requests held after it page too
    found = detect_scheduling(context(B2_IDLE, SINGLE, changes=changes, filler=between))
    assert [(f.severity, f.change_event) for f in found] == [("page", "c1")]


@pytest.mark.parametrize("busy", [FULL_BATCH, {"b1": 8, "b2": 8, "i1": 8, "i2": 8}])
def test_no_finding_without_usable_idle_gpus(busy):
    assert detect_scheduling(context(busy, [("r1/batch", f"w{i}", 1) for i in range(8)])) == []


def test_blocked_never_exceeds_the_idle_gpus_when_queues_share_nodes():
    ctx = context({"b1": 8, "i1": 8, "i2": 8}, [("r1/batch", f"w{i}", 1) for i in range(8)])
    # a second queue placing on the same batch nodes, with its own waiting jobs
    extra = pd.DataFrame([("e-x1", START - pd.Timedelta(hours=1), "x1", "started", "r1/batch-hi", 8, "b2")]
                         + [(f"e-y{i}", START - pd.Timedelta(minutes=20), f"y{i}", "submitted", "r1/batch-hi", 1, None)
                            for i in range(8)], columns=ctx.sched.columns)
    ctx.sched = pd.concat([ctx.sched, extra], ignore_index=True)
    # x1 started on b2 an hour ago but holds nothing now (b2 reports idle): both queues see 8 idle GPUs
    assert blocked(ctx) == 40.0
    assert np.isclose(aged_blocked(ctx).iloc[0]["paid_gpu_minutes"], 4 * 8 * 5)


def test_known_seasonality_does_not_page():
    # the same pile-up, but the region's idle_blocked share is as high as in the hours before (a retrain wave)
    paid = 4 * 8 * 5
    usual = 40 / paid  # B2_IDLE leaves 40 idle GPU-minutes
    assert [f.severity for f in detect_scheduling(context(B2_IDLE, WAITING, history_share=usual))] == ["ticket"]
    found = detect_scheduling(context(B2_IDLE, WAITING, history_share=usual - 0.05))
    assert [f.severity for f in found] == ["page"] and "seasonal" not in found[0].evidence


def _days_history(start: pd.Timestamp, by_day: dict[int, float], quiet: float = 0.0, days: int = 3) -> pd.DataFrame:
    """The region's idle_blocked share over ``days`` days before ``start``: ``by_day[d]`` around this hour d days ago."""
    parts = pd.date_range(start - pd.Timedelta(days=days, hours=1), start, freq="5min", inclusive="left")
    ago = ((start - parts) / pd.Timedelta(days=1)).round().astype(int)
    near = ((parts - parts.normalize()) - (start - start.normalize())).to_series().abs().to_numpy() <= pd.Timedelta(hours=1)
    share = np.where(near, [by_day.get(int(d), quiet) for d in ago], quiet)
    return pd.DataFrame({"partition_start": parts, "region": "r1", "share_idle_blocked": share})


def test_a_wave_seen_at_this_hour_last_week_is_known():
    paid = 4 * 8 * 5
    usual = 40 / paid
    ctx = context(B2_IDLE, WAITING)
    # a week of history: the pile-up happened at this hour a week ago (Thursday's retrain wave), not since
    ctx.region_history = _days_history(START, {7: usual}, days=7)
    found = detect_scheduling(ctx)
    assert [f.severity for f in found] == ["ticket"]
    assert "same hour last week" in found[0].evidence and "seasonal, not paged" in found[0].evidence
    # before a week of history (cold start): the median of the previous days at this hour; a wave seen on one
    # day of three is not yet known
    ctx.region_history = _days_history(START, {3: usual})
    found = detect_scheduling(ctx)
    assert [f.severity for f in found] == ["page"] and "median of the last 3 days" in found[0].evidence
    ctx.region_history = _days_history(START, {3: usual, 2: usual})
    assert [f.severity for f in detect_scheduling(ctx)] == ["ticket"]


def test_paged_partitions_do_not_teach_the_seasonal_baseline():
    from gpu_health.steps.diagnosis import _forget_paged

    paid = 4 * 8 * 5
    usual = 40 / paid
    hist = _days_history(START, {3: usual, 2: usual})  # yesterday-but-one and the day before: the same pile-up
    held = hist[hist["share_idle_blocked"] > 0].assign(cause_family="scheduling", severity="page", status="firing")
    ctx = context(B2_IDLE, WAITING)
    ctx.region_history = _forget_paged(hist, held)  # both were incidents that paged: they are not seasonality
    assert [f.severity for f in detect_scheduling(ctx)] == ["page"]
    as_ticket = held.assign(severity="ticket")  # a ticket (seasonal, not paged) does teach it
    ctx.region_history = _forget_paged(hist, as_ticket)
    assert [f.severity for f in detect_scheduling(ctx)] == ["ticket"]


def test_a_gpu_freed_a_moment_ago_is_being_placed_not_blocked():
    # in a saturated pool every job that ends leaves its GPUs idle for a dispatch: b2's GPUs are idle in
    # single minutes only (freed and placed again), so nothing is blocked
    ctx = context(FULL_BATCH, WAITING)
    minute = (ctx.gpu["ts"] - START) // pd.Timedelta(minutes=1)
    flicker = (ctx.gpu["node_id"] == "b2") & minute.isin([1, 3])
    ctx.gpu.loc[flicker, "job_id"] = None
    assert blocked(ctx) == 0.0
    # idle from minute 1 on: blocked from its third idle minute in a row (3, 4); the partition's first minutes
    # count as sampled (they have no minutes before them here)
    ctx = context(FULL_BATCH, WAITING)
    ctx.gpu.loc[(ctx.gpu["node_id"] == "b2") & (minute >= 1), "job_id"] = None
    assert blocked(ctx) == 2 * 8.0
    ctx = context(B2_IDLE, WAITING)
    assert blocked(ctx) == 5 * 8.0


def test_paged_partitions_are_read_from_the_warehouse_by_severity_and_status(sqlite_url):
    from gpu_health.diagnosis.finding import Finding
    from gpu_health.steps.diagnosis import _paged_partitions
    from gpu_health.steps.registry import inputs_for
    from gpu_health.storage.warehouse import Warehouse

    page = Finding("thermal_throttle", "hardware", "page", "r1", "thermal_throttle|r1", lost_gpu_minutes=50.0,
                   summary="Thermal throttling in r1", evidence="thermal clock-event bits")
    ticket = Finding("scheduling_blocked", "scheduling", "ticket", "r1", "scheduling_blocked|r1", lost_gpu_minutes=10.0,
                     summary="GPUs idle while jobs wait in r1", evidence="seasonal, not paged")
    prev, rows = A.empty(), []
    for i, found in enumerate([[page, ticket], [page, ticket], [ticket], [ticket]]):  # the page resolves at 2
        prev = A.step(prev, found, START + i * FIVE, rates={"r1": 1.0}, changes=pd.DataFrame())
        rows.append(prev)
    frame = pd.concat(rows, ignore_index=True)
    Warehouse(sqlite_url).replace_window("alerts", frame, START, START + 4 * FIVE)
    assert set(frame["status"]) > {"firing"} and set(frame["severity"]) >= {"page", "ticket"}
    # a firing page holds its partitions; a ticket and the page's resolved snapshot do not
    # (the decomposition step's declared alerts reach back before START: its window's own partitions are read)
    assert _paged_partitions(inputs_for("goodput_decomposition", Warehouse(sqlite_url), START, START + 4 * FIVE)) \
        == {START, START + FIVE}


def test_before_a_week_of_history_a_page_needs_its_cause_in_evidence():
    """A weekday retrain wave held by quotas cannot be told from a fault by its size before a week of history:
    without a scheduler change, a pile-up that holds single-GPU requests (any free GPU fits them: demand, quotas or
    priorities) is a ticket, one of multi-GPU requests only (capacity in the wrong shape) pages."""
    cold = detect_scheduling(context(B2_IDLE, SINGLE, history_share=0.0))
    assert [f.severity for f in cold] == ["ticket"] and "no cause in evidence" in cold[0].evidence
    shaped = detect_scheduling(context(B2_IDLE, WAITING, history_share=0.0))
    assert [f.severity for f in shaped] == ["page"] and "only multi-GPU requests held" in shaped[0].evidence
    # a few single-GPU requests beside the multi-GPU pile-up are not a pile-up of their own: still the shape
    mixed = WAITING + SINGLE[: SCHED_MIN_JOBS - 1]
    assert [f.severity for f in detect_scheduling(context(B2_IDLE, mixed, history_share=0.0))] == ["page"]
    mixed = WAITING + SINGLE[:SCHED_MIN_JOBS]
    assert [f.severity for f in detect_scheduling(context(B2_IDLE, mixed, history_share=0.0))] == ["ticket"]


def _weeks_history(start: pd.Timestamp, by_week: dict[int, float]) -> pd.DataFrame:
    """The region's idle_blocked share at this hour of the week (+-30 min), ``by_week[k]`` k weeks ago."""
    frames = [pd.DataFrame({"partition_start": pd.date_range(start - pd.Timedelta(days=7 * k, minutes=30),
                                                             start - pd.Timedelta(days=7 * k) + pd.Timedelta(minutes=30),
                                                             freq="5min", inclusive="left"),
                            "region": "r1", "share_idle_blocked": share}) for k, share in by_week.items()]
    return pd.concat(frames, ignore_index=True)


def test_a_level_alone_pages_only_on_weeks_of_this_hour_of_the_week():
    """One week gives one sample of each weekly slot: a rise over it cannot tell a weekly pattern from noise, so a
    pile-up with no cause in evidence is a ticket; on two or three weeks of this hour it pages above the highest
    share the region showed at that hour, not above one sample."""
    paid = 4 * 8 * 5
    now = 40 / paid  # B2_IDLE's idle share
    ctx = context(B2_IDLE, SINGLE)  # single-GPU requests: no shape, no change -- the level alone
    ctx.region_history = _weeks_history(START, {1: 0.0})
    (one,) = detect_scheduling(ctx)
    assert one.severity == "ticket" and "same hour last week" in one.evidence and "no cause in evidence" in one.evidence
    ctx.region_history = _weeks_history(START, {1: 0.0, 2: 0.0, 3: 0.0})
    (three,) = detect_scheduling(ctx)
    assert three.severity == "page" and "3 weeks" in three.evidence
    # the same rise, but one of the three weeks was as high at this hour: within the region's own weekly range
    ctx.region_history = _weeks_history(START, {1: 0.0, 2: now, 3: 0.0})
    (seasonal,) = detect_scheduling(ctx)
    assert seasonal.severity == "ticket" and "seasonal, not paged" in seasonal.evidence
    # a cause in evidence (multi-GPU requests only: the shape) pages on one week above its usual share
    ctx = context(B2_IDLE, WAITING)
    ctx.region_history = _weeks_history(START, {1: 0.0})
    assert [f.severity for f in detect_scheduling(ctx)] == ["page"]


@pytest.mark.parametrize("region", [None, "*"])
def test_a_window_that_names_only_its_nodes_is_of_their_region(region):
    """A window with a null or '*' region that names its nodes drains those nodes' region (the inventory's): no
    page inside it, and its backlog is planned after it."""
    ctx = context(B2_IDLE, WAITING)
    assert [f.severity for f in detect_scheduling(ctx)] == ["page"]
    ctx.maintenance = pd.DataFrame({"window_id": ["mw-1"], "start": [START - pd.Timedelta(hours=2)],
                                    "end": [START + pd.Timedelta(minutes=30)], "region": [region], "node_ids": ["i1,i2"],
                                    "reason": ["firmware"]})
    (f,) = detect_scheduling(ctx)
    assert f.severity == "ticket" and "mw-1" in f.evidence
    ctx.maintenance = ctx.maintenance.assign(end=START)  # it ended as the partition began: its backlog is planned
    assert detect_scheduling(ctx) == []
    ctx.maintenance = ctx.maintenance.assign(node_ids="elsewhere-7", end=START + pd.Timedelta(minutes=30))
    (f,) = detect_scheduling(ctx)  # a node the inventory does not know: its region is unknown, planned everywhere
    assert f.severity == "ticket"


def test_the_evidence_shows_no_nan():
    import re

    # no waiting job started in the partition: there is no queue wait to show, and it says so
    for found in (detect_scheduling(context(B2_IDLE, WAITING)), detect_scheduling(context(B2_IDLE, SINGLE))):
        assert found and not any(re.search(r"\bnan\b", f.evidence, re.IGNORECASE) for f in found)
        assert all("no queue wait recorded" in f.evidence for f in found)


def test_a_few_jobs_among_many_of_the_hour_are_no_pile_up():
    """SCHED_JOB_SHARE: eight waiting requests page in a region whose queues take in a few jobs a partition, not in
    one whose queues take in hundreds (churn); the GPU evidence is the same."""
    assert [f.severity for f in detect_scheduling(context(B2_IDLE, WAITING))] == ["page"]
    ctx = context(B2_IDLE, WAITING)
    busy = [(f"e-b{i}-{ev}", START - pd.Timedelta(minutes=50), f"b{i}", ev, "r1/other", 1, None if ev == "submitted" else "i1")
            for i in range(6000) for ev in ("submitted", "started")]
    ctx.sched = pd.concat([ctx.sched, pd.DataFrame(busy, columns=ctx.sched.columns)], ignore_index=True)
    (f,) = detect_scheduling(ctx)
    assert f.severity == "ticket" and "too few for a pile-up" in f.evidence


@pytest.mark.parametrize("scope", ["b1,b2", "r1/batch"])
def test_a_scheduler_change_scoped_by_nodes_or_queues_is_the_regions(scope):
    changes = pd.DataFrame([("c1", START - pd.Timedelta(minutes=30), "scheduler_config", scope)],
                           columns=["event_id", "ts", "kind", "scope"])
    found = detect_scheduling(context(B2_IDLE, SINGLE, changes=changes, history_share=0.0))
    assert [(f.severity, f.change_event) for f in found] == [("page", "c1")]
    elsewhere = changes.assign(scope="r2")
    assert [f.severity for f in detect_scheduling(context(B2_IDLE, SINGLE, changes=elsewhere, history_share=0.0))] \
        == ["ticket"]


def test_the_queue_of_a_maintenance_window_is_a_ticket_while_it_lasts():
    """Planned capacity makes jobs wait: maintenance never pages, and neither does the queue it causes while it
    lasts, nor its backlog afterwards (the jobs submitted before it ended, for as long again as it lasted); jobs
    submitted after it that pile up are judged like any other (a fault right after a window pages)."""
    ctx = context(B2_IDLE, WAITING)  # the waiting jobs were submitted 20 minutes before the partition
    ctx.maintenance = pd.DataFrame({"window_id": ["mw-1"], "start": [START - pd.Timedelta(hours=2)],
                                    "end": [START + pd.Timedelta(minutes=30)], "region": ["r1"], "node_ids": ["i1"],
                                    "reason": ["firmware"]})
    (f,) = detect_scheduling(ctx)
    assert f.severity == "ticket" and "mw-1" in f.evidence
    ctx.maintenance = ctx.maintenance.assign(end=START)  # it ended as the partition began: its backlog is planned
    assert detect_scheduling(ctx) == []
    ctx.maintenance = ctx.maintenance.assign(end=START - pd.Timedelta(minutes=25))  # the jobs came after it
    assert [f.severity for f in detect_scheduling(ctx)] == ["page"]
    # a 15-minute window that ended 10 minutes ago: its backlog is still planned ...
    ctx.maintenance = ctx.maintenance.assign(start=START - pd.Timedelta(minutes=25), end=START - pd.Timedelta(minutes=10))
    assert detect_scheduling(ctx) == []
    # ... a 10-minute one that ended 10 minutes ago is as long past as it lasted: its backlog is judged again
    ctx.maintenance = ctx.maintenance.assign(start=START - pd.Timedelta(minutes=20))
    assert [f.severity for f in detect_scheduling(ctx)] == ["page"]
    ctx.maintenance = ctx.maintenance.assign(region="r2", start=START - pd.Timedelta(hours=2),
                                             end=START + pd.Timedelta(minutes=30))  # another region's
    assert [f.severity for f in detect_scheduling(ctx)] == ["page"]


def test_the_idle_gpus_of_nodes_back_from_a_window_are_not_held_back_capacity_for_as_long_again():
    """A window's nodes come back to the pool one by one; while its backlog lasts their idle GPUs do not count.
    The jobs here came after the window: only the nodes' idle GPUs are judged."""
    ctx = context(B2_IDLE, WAITING)
    assert blocked(ctx) > 0  # b2 idle beside the waiting batch jobs
    ctx.maintenance = pd.DataFrame({"window_id": ["mw-1"], "start": [START - pd.Timedelta(minutes=70)],
                                    "end": [START - pd.Timedelta(minutes=30)], "region": ["r1"], "node_ids": ["b2"],
                                    "reason": ["firmware"]})
    assert blocked(ctx) == 0  # b2 came back 30 minutes ago from a 40-minute window: still returning
    ctx.maintenance = ctx.maintenance.assign(start=START - pd.Timedelta(minutes=55))  # a 25-minute one: back
    assert blocked(ctx) > 0
    ctx.maintenance = ctx.maintenance.assign(node_ids="i1", start=START - pd.Timedelta(minutes=70))  # another node
    assert blocked(ctx) > 0


def test_idle_cells_are_counted_as_np_unique_along_an_axis_counts_them():
    from gpu_health.diagnosis.detectors.scheduling import _count_cells

    rng = np.random.default_rng(1)
    for _ in range(200):
        n = int(rng.integers(0, 400))
        region = rng.integers(0, rng.integers(1, 4), n).astype(np.int64)
        node = rng.integers(0, rng.integers(1, 200), n).astype(np.int64)
        # minutes of a partition, some off the minute grid (each distinct timestamp is its own cell)
        ts = (1_790_000_000_000_000_000 + rng.integers(0, 6, n) * 60_000_000_000 + rng.integers(0, 2, n) * 7).astype(np.int64)
        got = _count_cells(region, node, ts)
        cell, counts = np.unique(np.stack([region, node, ts]), axis=1, return_counts=True)
        for a, b in zip(got, (cell[0], cell[1], cell[2], counts)):
            assert np.array_equal(a, b)


def test_a_scheduler_change_is_the_cause_only_of_a_pile_up_that_followed_it():
    """Before a week of history a change in flight is a pile-up's cause in evidence -- unless the region was piled
    up as high in the hour before it (a revert after an incident, a change in the middle of a retrain wave)."""
    paid = 4 * 8 * 5
    now = 40 / paid  # B2_IDLE's idle share
    change_at = START - pd.Timedelta(minutes=30)
    changes = pd.DataFrame([("c1", change_at, "scheduler_config", "r1")], columns=["event_id", "ts", "kind", "scope"])
    quiet_days = _days_history(START, {})  # three earlier days, quiet at this hour: the level now is unseasonal

    def with_hour_before(share):
        hist = quiet_days.copy()
        hour = (hist["partition_start"] >= change_at - pd.Timedelta(hours=1)) & (hist["partition_start"] < change_at)
        hist.loc[hour, "share_idle_blocked"] = share
        return hist

    ctx = context(B2_IDLE, SINGLE, changes=changes)
    ctx.region_history = with_hour_before(0.0)
    found = detect_scheduling(ctx)
    assert [(f.severity, f.change_event) for f in found] == [("page", "c1")]
    ctx = context(B2_IDLE, SINGLE, changes=changes)
    ctx.region_history = with_hour_before(now)
    found = detect_scheduling(ctx)
    assert [f.severity for f in found] == ["ticket"] and "not its cause" in found[0].evidence
    # a pile-up that scattered around this level in the hour before (a wave going on): one point above its median
    # is within its own scatter, not the change's effect
    ctx = context(B2_IDLE, SINGLE, changes=changes)
    hist = with_hour_before(now)
    hour = (hist["partition_start"] >= change_at - pd.Timedelta(hours=1)) & (hist["partition_start"] < change_at)
    hist.loc[hour, "share_idle_blocked"] = np.where(np.arange(int(hour.sum())) % 2, now, now - 0.04)
    ctx.region_history = hist
    assert [f.severity for f in detect_scheduling(ctx)] == ["ticket"]
    # the hour before it held by a paged incident (forgotten by the history): the pile-up predates it too
    ctx = context(B2_IDLE, SINGLE, changes=changes)
    hist = quiet_days.copy()
    ctx.region_history = hist[~((hist["partition_start"] >= change_at - pd.Timedelta(hours=1))
                                & (hist["partition_start"] < change_at))]
    assert [f.severity for f in detect_scheduling(ctx)] == ["ticket"]
    # multi-GPU requests only: the shape is a cause of its own, whatever preceded the change
    ctx = context(B2_IDLE, WAITING, changes=changes)
    ctx.region_history = with_hour_before(now)
    assert [f.severity for f in detect_scheduling(ctx)] == ["page"]



def _spread_context(busy: dict[str, int], waiting, filler: int = 6) -> PartitionContext:
    """A region of 10 x 8 GPUs whose batch queue places on b1, b2 and the filler nodes; ``busy[node]`` GPUs of each
    node hold a job (filler nodes included); no history yet."""
    ctx = context(busy, waiting, filler=filler, history_share=0.0)
    rows = [(minute, "r1", node, i, f"j-{node}" if i < busy.get(node, 0) else None, 0)
            for minute in pd.date_range(START, START + FIVE, freq="1min", inclusive="left")
            for node in inventory(filler)["node_id"] for i in range(8)]
    ctx.gpu = pd.DataFrame(rows, columns=["ts", "region", "node_id", "gpu_index", "job_id", "xid"])
    ctx.leaves = pd.DataFrame({"state": ["idle_blocked"], "region": ["r1"],
                               "gpu_minutes": [float(ctx.gpu["job_id"].isna().sum())]})
    taught = pd.DataFrame([(f"e-t{i}", START - pd.Timedelta(hours=2), f"t{i}", "started", "r1/batch", 8, f"f{i}")
                           for i in range(filler)], columns=ctx.sched.columns)
    ctx.sched = pd.concat([ctx.sched, taught], ignore_index=True)
    return ctx


def test_capacity_in_the_wrong_shape_is_judged_per_request_size():
    """Eight-GPU jobs wait beside 16 free GPUs spread two per node while single-GPU jobs wait too (a quota holds
    them): no node holds an 8-GPU request, the free GPUs summed would: fragmentation, its cause in evidence, though
    single-GPU requests pile up beside it. One whole free node hosts the 8-GPU requests: not fragmentation."""
    spread = {"b1": 6, "b2": 6, "i1": 8, "i2": 8} | {f"f{i}": 6 for i in range(6)}
    large = [("r1/batch", f"w8-{i}", 8) for i in range(SCHED_MIN_JOBS)]
    row = aged_blocked(_spread_context(spread, large + SINGLE)).iloc[0]
    assert row["aged_single_gpu_jobs"] == len(SINGLE)
    assert row["fragmented_gpu_minutes"] == 16 * 5  # every free GPU sits on a node holding fewer than 8
    assert row["shape_blocked_jobs"] == SCHED_MIN_JOBS
    ctx = _spread_context(spread, large + SINGLE)
    ctx.carried = {"scheduling_blocked|r1": {"shape_blocked_jobs": SCHED_MIN_JOBS}}  # (shape-blocked the partition before)
    found = detect_scheduling(ctx)
    assert [f.severity for f in found] == ["page"]
    assert "wrong shape" in found[0].evidence and "8-GPU" in found[0].evidence
    assert "largest free block 2 GPUs per node" in found[0].evidence
    # the same 16 free GPUs as two whole free nodes: the 8-GPU requests fit, nothing is in the wrong shape, and the
    # single-GPU pile-up has no cause in evidence before a week of history
    whole = {"b1": 0, "b2": 0, "i1": 8, "i2": 8} | {f"f{i}": 8 for i in range(6)}
    row = aged_blocked(_spread_context(whole, large + SINGLE)).iloc[0]
    assert (row["fragmented_gpu_minutes"], row["shape_blocked_jobs"]) == (0.0, 0)
    found = detect_scheduling(_spread_context(whole, large + SINGLE))
    assert [f.severity for f in found] == ["ticket"] and "wrong shape" not in found[0].evidence


def test_a_request_larger_than_a_node_is_shape_blocked_by_free_gpus_in_pieces():
    # a 16-GPU request beside four free GPUs on each of six nodes: 24 free, no whole node; single-GPU requests wait
    spread = {"b1": 8, "b2": 8, "i1": 8, "i2": 8} | {f"f{i}": 4 for i in range(6)}
    gang = [("r1/batch", f"w16-{i}", 16) for i in range(SCHED_MIN_JOBS)]
    row = aged_blocked(_spread_context(spread, gang + SINGLE)).iloc[0]
    assert row["shape_blocked_jobs"] == SCHED_MIN_JOBS and row["fragmented_gpu_minutes"] == 24 * 5


def test_a_job_whose_events_name_no_queue_is_matched_against_its_regions_nodes():
    """A collector that leaves the queue out of the scheduler's events must not blind the detector: the waiting
    job could run on any of the region's nodes, and is judged against them."""
    spread = {"b1": 6, "b2": 6, "i1": 8, "i2": 8} | {f"f{i}": 6 for i in range(6)}
    unnamed = [(None, f"w8-{i}", 8) for i in range(SCHED_MIN_JOBS)]
    row = aged_blocked(_spread_context(spread, unnamed)).iloc[0]
    assert (row["aged_jobs"], row["shape_blocked_jobs"]) == (SCHED_MIN_JOBS, SCHED_MIN_JOBS)
    assert [f.severity for f in detect_scheduling(_spread_context(spread, unnamed))] == ["page"]


def test_the_gpus_a_window_returns_leave_the_paid_denominator_as_their_idle_gpus_leave_the_numerator():
    """Nodes coming back from a window are out of the pool on purpose: out of the blocked GPU-minutes
    (_gpu_returning) and out of the paid ones, so the share is of the capacity the scheduler has."""
    between = filler_for((SCHED_TICKET_SHARE + SCHED_PAGE_SHARE) / 2, 40)
    assert [f.severity for f in detect_scheduling(context(B2_IDLE, WAITING, filler=between))] == ["ticket"]
    ctx = context(B2_IDLE, WAITING, filler=between)  # the waiting jobs came 20 minutes before, after the window
    ctx.maintenance = pd.DataFrame({"window_id": ["mw-1"], "start": [START - pd.Timedelta(minutes=50)],
                                    "end": [START - pd.Timedelta(minutes=21)], "region": [None],
                                    "node_ids": [",".join(f"f{i}" for i in range(between))], "reason": ["firmware"]})
    (f,) = detect_scheduling(ctx)
    assert f.severity == "page" and f.value > SCHED_PAGE_SHARE


def _started_jobs(queue: str, gpus: int, node: str, starts: pd.DatetimeIndex, wait: pd.Timedelta, tag: str) -> list:
    """Scheduler events of jobs of ``queue`` that started on ``node`` at ``starts`` after waiting ``wait``."""
    rows = []
    for i, t in enumerate(starts):
        rows.append((f"e-{tag}{i}s", t - wait, f"{tag}{i}", "submitted", queue, gpus, None))
        rows.append((f"e-{tag}{i}r", t, f"{tag}{i}", "started", queue, gpus, node))
    return rows


def test_a_change_that_demoted_one_queue_is_the_cause_of_a_pile_up_already_there():
    """A change in the middle of a pile-up (an evening's) is its cause when the jobs of one queue wait longer since
    it than that queue's own jobs did in the hour before, while the other queues' jobs do not: each queue is its own
    reference, so the region's level in the hour before does not hide it; a rise of every queue alike does not fake it."""
    paid = 4 * 8 * 5
    now = 40 / paid
    change_at = START - pd.Timedelta(minutes=30)
    changes = pd.DataFrame([("c1", change_at, "scheduler_config", "r1")], columns=["event_id", "ts", "kind", "scope"])
    hist = _days_history(START, {})
    hour = (hist["partition_start"] >= change_at - pd.Timedelta(hours=1)) & (hist["partition_start"] < change_at)
    hist.loc[hour, "share_idle_blocked"] = now  # piled up as high already: the level says nothing of the change
    before = pd.date_range(change_at - pd.Timedelta(minutes=58), change_at, freq="2min", inclusive="left")
    after = pd.date_range(change_at + pd.Timedelta(minutes=1), START + FIVE, freq="1min", inclusive="left")
    short, long = pd.Timedelta(minutes=2), pd.Timedelta(minutes=25)

    def judged(batch_wait_after, notebooks_wait_after):
        ctx = context(B2_IDLE, SINGLE, changes=changes)
        ctx.region_history = hist
        rows = (_started_jobs("r1/batch", 1, "b1", before, short, "bb") + _started_jobs("r1/notebooks", 1, "i1", before, short, "nb")
                + _started_jobs("r1/batch", 1, "b1", after, batch_wait_after, "ba")
                + _started_jobs("r1/notebooks", 1, "i1", after, notebooks_wait_after, "na"))
        ctx.sched = pd.concat([ctx.sched, pd.DataFrame(rows, columns=ctx.sched.columns)], ignore_index=True)
        return detect_scheduling(ctx)

    found = judged(long, short)  # batch demoted: its jobs wait long since the change, the notebooks' do not
    assert [(f.severity, f.change_event) for f in found] == [("page", "c1")]
    assert "r1/batch" in found[0].evidence and "nan" not in found[0].evidence
    # every queue waits longer alike (the region's demand, an evening): not the change's doing
    assert [f.severity for f in judged(long, long)] == ["ticket"]
    assert [f.severity for f in judged(short, short)] == ["ticket"]


def test_multi_gpu_requests_waiting_longer_while_single_gpu_ones_do_not_are_capacity_in_the_wrong_shape():
    """Single-GPU requests held too (a queue's demand, an evening) do not hide capacity in the wrong shape: the
    queue's multi-GPU jobs of the last half hour waited longer than their own hour before, its single-GPU jobs not."""
    waiting = [("r1/batch", f"w{i}", 2) for i in range(4)] + [("r1/batch", f"s{i}", 1) for i in range(SCHED_MIN_JOBS)]
    before = pd.date_range(START - pd.Timedelta(minutes=85), START - pd.Timedelta(minutes=25), freq="2min")
    recent = pd.date_range(START - pd.Timedelta(minutes=24), START + FIVE, freq="1min", inclusive="left")
    short, long = pd.Timedelta(minutes=2), pd.Timedelta(minutes=25)

    def judged(multi_wait_recent, single_wait_recent):
        ctx = context(B2_IDLE, waiting)
        rows = (_started_jobs("r1/batch", 2, "b1", before, short, "mb") + _started_jobs("r1/batch", 1, "b1", before, short, "sb")
                + _started_jobs("r1/batch", 2, "b1", recent, multi_wait_recent, "mr")
                + _started_jobs("r1/batch", 1, "b1", recent, single_wait_recent, "sr"))
        ctx.sched = pd.concat([ctx.sched, pd.DataFrame(rows, columns=ctx.sched.columns)], ignore_index=True)
        return detect_scheduling(ctx)

    found = judged(long, short)
    assert [f.severity for f in found] == ["page"]
    assert "wrong shape" in found[0].evidence and "nan" not in found[0].evidence
    assert [f.severity for f in judged(long, long)] == ["ticket"]  # both sizes wait longer: demand, not shape
    assert [f.severity for f in judged(short, short)] == ["ticket"]


def test_multi_gpu_requests_waiting_longer_in_a_demand_surge_are_not_capacity_in_the_wrong_shape():
    """The queue's submissions rose in the last half hour (an evening's start): a larger request waits longer to
    fit in a fuller pool, no evidence of the shape of the free capacity."""
    waiting = [("r1/batch", f"w{i}", 2) for i in range(4)] + [("r1/batch", f"s{i}", 1) for i in range(SCHED_MIN_JOBS)]
    before = pd.date_range(START - pd.Timedelta(minutes=85), START - pd.Timedelta(minutes=25), freq="6min")
    recent = pd.date_range(START - pd.Timedelta(minutes=24), START + FIVE, freq="1min", inclusive="left")
    short, long = pd.Timedelta(minutes=2), pd.Timedelta(minutes=25)
    ctx = context(B2_IDLE, waiting)
    rows = (_started_jobs("r1/batch", 2, "b1", before, short, "mb") + _started_jobs("r1/batch", 1, "b1", before, short, "sb")
            + _started_jobs("r1/batch", 2, "b1", recent, long, "mr") + _started_jobs("r1/batch", 1, "b1", recent, short, "sr")
            + _started_jobs("r1/batch", 1, "b2", recent, short, "sx"))
    ctx.sched = pd.concat([ctx.sched, pd.DataFrame(rows, columns=ctx.sched.columns)], ignore_index=True)
    assert [f.severity for f in detect_scheduling(ctx)] == ["ticket"]


def test_gpus_a_crash_looping_pod_holds_are_not_free_beside_waiting_jobs():
    """A container in CrashLoopBackOff runs no process between restarts, so DCGM maps no job to its GPUs, yet the
    kubelet keeps them allocated to the bound pod and nothing else can be placed there: its job's software fault
    (crash_loop), not capacity idling beside waiting jobs. A pod that requests fewer GPUs than the node holds
    leaves the rest free."""
    assert blocked(context(B2_IDLE, WAITING)) == 40.0

    def with_pod(gpus: int) -> PartitionContext:
        ctx = context(B2_IDLE, WAITING)
        minutes = pd.date_range(START, START + FIVE, freq="1min", inclusive="left")
        ctx.kube_pods = pd.DataFrame({"ts": minutes, "region": "r1", "namespace": "train", "pod": "trainer-0",
                                      "node_id": "b2", "phase": "Running", "reason": "CrashLoopBackOff",
                                      "gpu_request": gpus, "restarts": range(5), "job_id": None})
        return ctx

    assert blocked(with_pod(8)) == 0.0
    assert detect_scheduling(with_pod(8)) == []
    assert blocked(with_pod(4)) == 20.0  # four GPUs of b2 still free: two of the 2-GPU requests fit


def test_a_burst_of_jobs_submitted_at_one_instant_is_one_arrival_not_a_demand_surge():
    """A job array (or a batch a workflow submits at once) is one decision: its size does not make the queue's
    demand rise, so it does not excuse the longer waits of a queue a scheduler change demoted."""
    change_at = START - pd.Timedelta(minutes=30)
    changes = pd.DataFrame([("c1", change_at, "scheduler_config", "r1")], columns=["event_id", "ts", "kind", "scope"])
    hist = _days_history(START, {})
    hour = (hist["partition_start"] >= change_at - pd.Timedelta(hours=1)) & (hist["partition_start"] < change_at)
    hist.loc[hour, "share_idle_blocked"] = 40 / (4 * 8 * 5)  # piled up as high already: only the queues tell
    before = pd.date_range(change_at - pd.Timedelta(minutes=58), change_at, freq="2min", inclusive="left")
    after = pd.date_range(change_at + pd.Timedelta(minutes=1), START + FIVE, freq="2min", inclusive="left")
    short, long = pd.Timedelta(minutes=2), pd.Timedelta(minutes=25)

    def judged(burst: int):
        ctx = context(B2_IDLE, SINGLE, changes=changes)
        ctx.region_history = hist
        rows = (_started_jobs("r1/batch", 1, "b1", before, short, "bb") + _started_jobs("r1/notebooks", 1, "i1", before, short, "nb")
                + _started_jobs("r1/batch", 1, "b1", after, long, "ba")
                + _started_jobs("r1/notebooks", 1, "i1", after, short, "na"))
        at = change_at + pd.Timedelta(minutes=1)  # an array: every element submitted the same second, still waiting
        rows += [(f"e-arr{i}", at, f"arr{i}", "submitted", "r1/batch", 1, None) for i in range(burst)]
        ctx.sched = pd.concat([ctx.sched, pd.DataFrame(rows, columns=ctx.sched.columns)], ignore_index=True)
        return detect_scheduling(ctx)

    assert [(f.severity, f.change_event) for f in judged(0)] == [("page", "c1")]
    found = judged(60)
    assert [(f.severity, f.change_event) for f in found] == [("page", "c1")]
    assert "r1/batch" in found[0].evidence


def _shape_onset_case(multi_wait_after, single_wait_after, onset_ago=pd.Timedelta(minutes=10), share_filler=0):
    """One queue's multi-GPU and single-GPU jobs, two a minute each, waiting 2 min until an onset ``onset_ago``
    before the partition's end, then ``multi_wait_after`` / ``single_wait_after``; multi-GPU requests pile up."""
    waiting = [("r1/batch", f"w{i}", 2) for i in range(4)] + [("r1/batch", f"s{i}", 1) for i in range(SCHED_MIN_JOBS)]
    onset = START + FIVE - onset_ago
    before = pd.date_range(onset - pd.Timedelta(minutes=90), onset, freq="30s", inclusive="left")
    after = pd.date_range(onset, START + FIVE, freq="30s", inclusive="left")
    short = pd.Timedelta(minutes=2)
    ctx = context(B2_IDLE, waiting, filler=share_filler)
    rows = (_started_jobs("r1/batch", 2, "b1", before, short, "mb") + _started_jobs("r1/batch", 1, "b1", before, short, "sb")
            + _started_jobs("r1/batch", 2, "b1", after, multi_wait_after, "ma")
            + _started_jobs("r1/batch", 1, "b1", after, single_wait_after, "sa"))
    ctx.sched = pd.concat([ctx.sched, pd.DataFrame(rows, columns=ctx.sched.columns)], ignore_index=True)
    return detect_scheduling(ctx)


def test_multi_gpu_waits_rising_after_an_onset_while_single_gpu_waits_do_not_are_the_cause_within_minutes():
    """The shape test is anchored at the onset of the rise (difference in differences: the multi-GPU jobs after it
    against the same class before it, beside the single-GPU jobs after and before it): jobs of the half hour before
    the onset do not dilute it, so it stands ten minutes into the effect."""
    long = pd.Timedelta(minutes=12)
    found = _shape_onset_case(long, pd.Timedelta(minutes=2))
    assert [f.severity for f in found] == ["page"]
    assert "wrong shape" in found[0].evidence and "since" in found[0].evidence and "nan" not in found[0].evidence


def test_multi_and_single_gpu_waits_rising_together_after_an_onset_are_not_the_shape():
    """An evening pile-up holds both sizes alike: no cause in evidence, a ticket before the seasons are known."""
    long = pd.Timedelta(minutes=12)
    assert [f.severity for f in _shape_onset_case(long, long)] == ["ticket"]
    assert [f.severity for f in _shape_onset_case(pd.Timedelta(minutes=2), pd.Timedelta(minutes=2))] == ["ticket"]


def test_single_gpu_jobs_that_usually_wait_longer_than_the_time_since_an_onset_do_not_fake_a_shift():
    """Waits counted from an onset ten minutes ago cannot exceed ten minutes: single-GPU jobs a quota holds 25 minutes
    as usual could never be above their usual median while multi-GPU jobs that wait two minutes as usual could be.
    Nothing changed: not capacity in the wrong shape."""
    waiting = [("r1/batch", f"w{i}", 2) for i in range(4)] + [("r1/batch", f"s{i}", 1) for i in range(SCHED_MIN_JOBS)]
    starts = pd.date_range(START - pd.Timedelta(minutes=90), START + FIVE, freq="1min", inclusive="left")
    later = starts + pd.Timedelta(seconds=30)
    ctx = context(B2_IDLE, waiting)
    # (each class's waits vary about its median, as a queue's do)
    rows = (_started_jobs("r1/batch", 2, "b1", starts, pd.Timedelta(minutes=1), "m")
            + _started_jobs("r1/batch", 2, "b1", later, pd.Timedelta(minutes=3), "n")
            + _started_jobs("r1/batch", 1, "b1", starts, pd.Timedelta(minutes=20), "s")
            + _started_jobs("r1/batch", 1, "b1", later, pd.Timedelta(minutes=30), "t"))
    ctx.sched = pd.concat([ctx.sched, pd.DataFrame(rows, columns=ctx.sched.columns)], ignore_index=True)
    assert [f.severity for f in detect_scheduling(ctx)] == ["ticket"]


def _change_case(changes: pd.DataFrame, change_at: pd.Timestamp, rows: list) -> list:
    """A pile-up as high as the region's hour before ``change_at`` (only the queues can tell the change's effect),
    the scheduler events ``rows`` added; the findings."""
    hist = _days_history(START, {})
    hour = (hist["partition_start"] >= change_at - pd.Timedelta(hours=1)) & (hist["partition_start"] < change_at)
    hist.loc[hour, "share_idle_blocked"] = 40 / (4 * 8 * 5)
    ctx = context(B2_IDLE, SINGLE, changes=changes)
    ctx.region_history = hist
    ctx.sched = pd.concat([ctx.sched, pd.DataFrame(rows, columns=ctx.sched.columns)], ignore_index=True)
    return detect_scheduling(ctx)


def test_waits_counted_from_a_change_are_not_compared_with_whole_waits():
    """Waits counted from a change ten minutes ago cannot exceed ten minutes: a queue that waits 25 minutes as usual
    could never be above its usual median yet, so it is no control for a queue that waits two minutes as usual and
    now three. Against it the short-wait queue's rise would read as a demotion however the long-wait queue fares;
    it is not judged (nor is any queue: no other is left to compare with) until the time since the change passes
    its median."""
    change_at = START + FIVE - pd.Timedelta(minutes=10)
    changes = pd.DataFrame([("c1", change_at, "scheduler_config", "r1")], columns=["event_id", "ts", "kind", "scope"])
    starts = pd.date_range(START - pd.Timedelta(minutes=90), START + FIVE, freq="30s", inclusive="left")
    later = starts + pd.Timedelta(seconds=15)
    after = starts >= change_at
    # (each queue's waits vary about its median, as a queue's do)
    rows = (_started_jobs("r1/notebooks", 1, "i1", starts[~after], pd.Timedelta(minutes=1), "n")
            + _started_jobs("r1/notebooks", 1, "i1", starts[after], pd.Timedelta(minutes=3), "o")
            + _started_jobs("r1/notebooks", 1, "i1", later, pd.Timedelta(minutes=3), "m")
            + _started_jobs("r1/batch", 1, "b1", starts, pd.Timedelta(minutes=20), "b")
            + _started_jobs("r1/batch", 1, "b1", later, pd.Timedelta(minutes=30), "c"))
    found = _change_case(changes, change_at, rows)
    assert [f.severity for f in found] == ["ticket"] and "(its cause:" not in found[0].evidence


def test_a_revert_is_not_judged_against_the_hour_of_the_change_it_reverts():
    """A change reverted 40 minutes after it (an incident's rollback): the hour before the revert is the reverted
    change's, not the configuration the cluster usually runs. A queue that change favoured waits again as it did
    before it -- longer than in that hour, while the other queues do not -- which is no demotion by the revert.
    The same waits after a change whose hour before was the cluster's usual configuration are its effect."""
    revert_at = START - pd.Timedelta(minutes=25)
    deploy_at = revert_at - pd.Timedelta(minutes=40)
    usual = pd.date_range(deploy_at - pd.Timedelta(minutes=90), deploy_at, freq="1min", inclusive="left")
    favoured = pd.date_range(deploy_at, revert_at, freq="1min", inclusive="left")
    after = pd.date_range(revert_at + pd.Timedelta(minutes=1), START + FIVE, freq="1min", inclusive="left")
    short, long = pd.Timedelta(minutes=1), pd.Timedelta(minutes=12)
    rows = (_started_jobs("r1/batch", 1, "b1", usual, long, "bu") + _started_jobs("r1/batch", 1, "b1", favoured, short, "bf")
            + _started_jobs("r1/batch", 1, "b1", after, long, "ba")
            + _started_jobs("r1/notebooks", 1, "i1", usual.append(favoured).append(after), short, "n"))
    both = pd.DataFrame([("c1", deploy_at, "scheduler_config", "r1"), ("c1-revert", revert_at, "scheduler_config", "r1")],
                        columns=["event_id", "ts", "kind", "scope"])
    found = _change_case(both, revert_at, rows)
    assert [f.severity for f in found] == ["ticket"] and "(its cause:" not in found[0].evidence
    # the batch queue's short waits as the cluster's usual configuration, the long ones after a change: its effect
    usual_short = [r for r in rows if not r[2].startswith("bu")] + _started_jobs("r1/batch", 1, "b1", usual, short, "bu")
    alone = both.iloc[[1]]
    found = _change_case(alone, revert_at, usual_short)
    assert [(f.severity, f.change_event) for f in found] == [("page", "c1-revert")] and "r1/batch" in found[0].evidence


def test_a_queue_that_waits_as_it_did_is_not_demoted_because_the_others_wait_less():
    """A change that lets one queue through faster leaves the others' waits as they were: a queue whose jobs still
    wait above their own median half the time (what a median is) is not demoted, however lopsided the split
    against the queue that now waits less."""
    change_at = START - pd.Timedelta(minutes=30)
    changes = pd.DataFrame([("c1", change_at, "scheduler_config", "r1")], columns=["event_id", "ts", "kind", "scope"])
    before = pd.date_range(change_at - pd.Timedelta(minutes=60), change_at, freq="30s", inclusive="left")
    after = pd.date_range(change_at + pd.Timedelta(minutes=1), START + FIVE, freq="30s", inclusive="left")
    starts = before.append(after)
    rows = (_started_jobs("r1/notebooks", 1, "i1", starts, pd.Timedelta(minutes=1), "n")
            + _started_jobs("r1/notebooks", 1, "i1", starts + pd.Timedelta(seconds=15), pd.Timedelta(minutes=3), "m")
            + _started_jobs("r1/batch", 1, "b1", before, pd.Timedelta(minutes=12), "bb")
            + _started_jobs("r1/batch", 1, "b1", after, pd.Timedelta(minutes=1), "ba"))
    found = _change_case(changes, change_at, rows)
    assert [f.severity for f in found] == ["ticket"] and "(its cause:" not in found[0].evidence
