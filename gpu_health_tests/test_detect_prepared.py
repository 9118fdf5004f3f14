"""The detectors' shortcuts give what the plain computation gives (gpu_health.diagnosis.detect).

prepare_range() computes once per range what every partition used to recompute (the job table as known at a
partition's end, the team lookup, time windows of range frames); the per-partition fast paths (maintenance
windows at the partition's midpoint, reporting GPUs per node-minute, an empty alert snapshot) must agree with
the definitions they replace, row for row.
"""

import dataclasses

import numpy as np
import pandas as pd
import pytest

from gpu_health.codes import refactorize
from gpu_health.diagnosis import alerts as A
from gpu_health.diagnosis import context as C
from gpu_health.diagnosis import detect as D
from gpu_health.diagnosis.detectors import hardware as H
from gpu_health.diagnosis.context import PartitionContext, job_table, jobs_as_of, prepare_range
from gpu_health.diagnosis.detectors.gaming import detect_no_progress
from gpu_health.diagnosis.detectors.scheduling import aged_blocked, detect_scheduling
from gpu_health.diagnosis.detectors.software import detect_deploys
from gpu_health.metrics.goodput import maintenance_mask
from gpu_health_tests import test_detect_evidence as EV
from gpu_health_tests import test_detect_scheduling as SC

LOOKBACK = pd.Timedelta(hours=6)


def prepared(ctx: PartitionContext, meta=None) -> PartitionContext:
    """The same partition, its job table and team lookup from prepare_range (as pipeline.alerts builds it)."""
    meta = ctx.meta if meta is None else meta
    jobs = job_table(ctx.sched, ctx.inventory)
    return dataclasses.replace(ctx, jobs=None, meta=meta,
                               prepared=prepare_range(jobs, meta, job_lookback=LOOKBACK))


@pytest.mark.parametrize("busy, waiting", [
    ({"b1": 8, "i1": 8, "i2": 8}, [("r1/batch", f"w{i}", 1) for i in range(8)]),   # blocked
    ({"b1": 4, "b2": 4, "i1": 8, "i2": 8}, [("r1/batch", "w5", 5)]),               # fragmented: a node's worth in pieces
    ({"b1": 8, "b2": 8}, [("r1/batch", f"w{i}", 1) for i in range(8)]),             # another pool idle
    ({"i1": 8, "i2": 8}, [("r1/batch", "big", 16)]),                                 # whole free nodes
])
def test_the_prepared_job_table_blocks_what_the_partitions_own_does(busy, waiting):
    ctx = SC.context(busy, waiting, filler=20)
    own = dataclasses.replace(ctx, jobs=jobs_as_of(job_table(ctx.sched, ctx.inventory), ctx.end))
    pd.testing.assert_frame_equal(aged_blocked(prepared(ctx)), aged_blocked(own))
    assert detect_scheduling(prepared(ctx)) == detect_scheduling(own)
    assert aged_blocked(own)["blocked_gpu_minutes"].sum() > 0 or busy == {"b1": 8, "b2": 8}


def test_a_job_submitted_after_the_partition_or_before_the_lookback_is_not_in_the_prepared_table():
    ctx = SC.context({"b1": 8, "i1": 8, "i2": 8}, [("r1/batch", f"w{i}", 1) for i in range(8)], filler=20)
    late = pd.DataFrame([("e-late", ctx.end, "late", "submitted", "r1/batch", 1, None),
                         ("e-old", ctx.end - LOOKBACK - pd.Timedelta(minutes=1), "old", "submitted", "r1/batch", 1, None)],
                        columns=ctx.sched.columns)
    sched = pd.concat([ctx.sched, late], ignore_index=True)
    rows = prepared(ctx).prepared  # the table of the original events ...
    more = prepare_range(job_table(sched, ctx.inventory), ctx.meta, job_lookback=LOOKBACK)  # ... and with the two
    a, b = rows.jobs_between(ctx.end - LOOKBACK, ctx.end), more.jobs_between(ctx.end - LOOKBACK, ctx.end)
    assert len(a["sub"]) == len(b["sub"]) > 0
    assert (np.sort(a["sub"]) == np.sort(b["sub"])).all()


def test_a_queues_region_comes_from_placements_before_the_partition_not_later_in_the_range():
    """A queue first placed after the partition has no region yet in a run of that partition alone, so its
    waiting jobs hold nothing back there; a range run reaching past the placement must judge the partition
    alike (it did not: a week's range paged a Monday 04:10 scheduling incident no run of 04:10 alone saw)."""
    ctx = SC.context({"b1": 8, "i1": 8, "i2": 8}, [("r1/new", f"w{i}", 1) for i in range(8)], filler=20)
    later = pd.DataFrame([("e-n1", ctx.end + pd.Timedelta(hours=1), "n1", "submitted", "r1/new", 1, None),
                          ("e-n2", ctx.end + pd.Timedelta(hours=1), "n1", "started", "r1/new", 1, "b2")],
                         columns=ctx.sched.columns)
    whole = pd.concat([ctx.sched, later], ignore_index=True)  # what a range run reaching 1 h further reads
    node_region = dict(zip(ctx.inventory["node_id"], ctx.inventory["region"]))
    own = dataclasses.replace(ctx, jobs=jobs_as_of(job_table(ctx.sched, ctx.inventory), ctx.end))
    ranged = dataclasses.replace(ctx, jobs=None, prepared=prepare_range(
        job_table(whole, ctx.inventory), ctx.meta, job_lookback=LOOKBACK, sched=whole, node_region=node_region))
    assert aged_blocked(own)["blocked_gpu_minutes"].sum() == 0  # the new queue's jobs have no region yet
    pd.testing.assert_frame_equal(aged_blocked(ranged), aged_blocked(own))
    # once the placement is inside the partition's look-back the queue has its region, in both paths
    moved = later.assign(ts=ctx.start - pd.Timedelta(minutes=30))
    sched = pd.concat([ctx.sched, moved], ignore_index=True)
    ctx2 = dataclasses.replace(ctx, sched=sched)
    own2 = dataclasses.replace(ctx2, jobs=jobs_as_of(job_table(sched, ctx.inventory), ctx.end))
    ranged2 = dataclasses.replace(ctx2, jobs=None, prepared=prepare_range(
        job_table(sched, ctx.inventory), ctx.meta, job_lookback=LOOKBACK, sched=sched, node_region=node_region))
    assert aged_blocked(own2)["blocked_gpu_minutes"].sum() > 0
    pd.testing.assert_frame_equal(aged_blocked(ranged2), aged_blocked(own2))


@pytest.mark.parametrize("ordered", [True, False])
def test_between_cuts_like_a_mask(ordered):
    rng = np.random.default_rng(7)
    ts = pd.Timestamp("2026-11-03T00:00Z") + pd.to_timedelta(np.sort(rng.integers(0, 3600, 400)), unit="s")
    frame = pd.DataFrame({"ts": ts, "v": np.arange(400)})
    if not ordered:
        frame = frame.sample(frac=1.0, random_state=3).reset_index(drop=True)
    prep = prepare_range(pd.DataFrame(columns=["sub", "gpus", "queue", "left", "region"]), pd.DataFrame(),
                         job_lookback=LOOKBACK, windows={"f": frame})
    for lo, hi in [(10, 20), (0, 60), (55, 61), (30, 30)]:
        lo_t, hi_t = ts[0].floor("min") + pd.Timedelta(minutes=lo), ts[0].floor("min") + pd.Timedelta(minutes=hi)
        want = frame[(frame["ts"] >= lo_t) & (frame["ts"] < hi_t)]
        pd.testing.assert_frame_equal(prep.between("f", lo_t, hi_t), want)
        pd.testing.assert_frame_equal(prep.between("f", None, hi_t), frame[frame["ts"] < hi_t])


def test_the_prepared_team_lookup_keeps_the_first_metadata_row_of_a_job():
    m = pd.concat([EV.meta(["job-n1"], team="gamers"), EV.meta(["job-n2"], team="honest"),
                   EV.meta(["job-n1"], team="later-row"), EV.meta(["other"], team="x")], ignore_index=True)
    ctx = EV.context(EV.dummy_on_n1(), meta_frame=m)
    (slow,) = detect_no_progress(ctx)
    (fast,) = detect_no_progress(prepared(ctx))
    assert slow == fast and fast.team == "gamers"


def test_a_job_without_metadata_is_unknown_either_way():
    ctx = EV.context(EV.dummy_on_n1(), meta_frame=EV.meta(["job-n2"], team="honest"))
    assert detect_no_progress(ctx) == detect_no_progress(prepared(ctx))
    assert [f.team for f in detect_no_progress(prepared(ctx))] == ["unknown"]


def test_maintenance_is_judged_against_every_window_covering_the_partition():
    ctx = EV.context(EV.gpu_rows(nodes=("n1", "n2", "n3")), nodes=("n1", "n2", "n3"))
    mid = ctx.start + pd.Timedelta(minutes=2, seconds=30)
    windows = pd.DataFrame({
        "window_id": ["w-node", "w-region-other", "w-later", "w-all-ended"],
        "start": [ctx.start, ctx.start - pd.Timedelta(hours=1), mid + pd.Timedelta(seconds=1), ctx.start - pd.Timedelta(hours=2)],
        "end": [ctx.end, ctx.end, ctx.end + pd.Timedelta(hours=1), mid],
        "region": ["r1", "r2", "*", "*"], "node_ids": ["n1,n3", "*", "*", "*"], "reason": "planned"})
    ctx = dataclasses.replace(ctx, maintenance=windows)
    g = ctx.gpu
    want = maintenance_mask(pd.Series(mid, index=g.index), g["region"], g["node_id"], windows)
    assert (C._in_maintenance(ctx, g["node_id"], g["region"]) == want).all()
    assert (C._gpu_maint(ctx) == want).all()
    assert want.sum() == 2 * 8 * 5  # n1 and n3, every minute


def test_reporting_gpus_are_counted_once_per_node_and_minute():
    gpu = EV.gpu_rows(skip={("n1", 3, m) for m in range(1, 5)} | {("n2", i, 4) for i in range(8)})
    dup = gpu[(gpu["node_id"] == "n1") & (gpu["gpu_index"] == 0)]
    stray = gpu.head(8).assign(node_id="not-in-inventory")
    gpu = pd.concat([gpu, dup, stray], ignore_index=True)  # a GPU reported twice in a minute counts once
    ctx = EV.context(gpu)
    expected = ctx.inventory.set_index("node_id")["gpus"].astype(float)
    minutes = pd.date_range(ctx.start, ctx.end, freq="1min", inclusive="left")
    per_min = gpu.groupby(["node_id", "ts"], observed=True)["gpu_uuid"].nunique().unstack("ts", fill_value=0)
    want = per_min.reindex(index=expected.index, columns=minutes, fill_value=0).rsub(expected, axis=0).clip(lower=0)
    got = H._short_gpus(ctx, expected)
    assert (got == want.to_numpy(dtype=float)).all()
    assert got[0].tolist() == [0, 1, 1, 1, 1] and got[1].tolist() == [0, 0, 0, 0, 8]


def test_an_empty_snapshot_is_a_fresh_frame_each_time():
    a = A.empty()
    a.loc[0, "key"] = "changed"
    b = A.empty()
    assert b.empty and list(b.columns) == A.COLUMNS
    pd.testing.assert_series_equal(b.dtypes, A._empty().dtypes)


def test_prepared_rollout_groups_follow_each_partitions_change_events():
    """A range computes a window's rollout groups once: a rollback entering the window is a new window."""
    from gpu_health_tests import test_detect_deploys as DP

    prep = prepare_range(pd.DataFrame(columns=["sub", "gpus", "queue", "left", "region"]), pd.DataFrame(),
                         job_lookback=LOOKBACK)
    end = DP.DEPLOY + 4 * DP.FIVE
    rollback = DP.CHANGES.assign(event_id="chg-2", ts=DP.DEPLOY + DP.FIVE, from_version="550.144.03",
                                 to_version="550.127.08")
    seen = []
    for changes in (DP.CHANGES, pd.concat([DP.CHANGES, rollback], ignore_index=True), DP.CHANGES):
        ctx = dataclasses.replace(DP.context(end, **DP.BORDERLINE), changes=changes)
        fast = detect_deploys(dataclasses.replace(ctx, prepared=prep))
        assert fast == detect_deploys(ctx)
        seen.append([f.change_event for f in fast])
    # while the rollback is in the window it supersedes the upgrade (and is judged itself)
    assert seen == [["chg-1"], ["chg-2"], ["chg-1"]]


def test_a_context_derived_with_other_frames_does_not_reuse_the_first_ones_views():
    ctx = EV.context(EV.xid79_and_gone())
    assert [f.severity for f in H.detect_hardware(ctx)] == ["page"]
    healthy = dataclasses.replace(ctx, gpu=EV.gpu_rows())
    assert H.detect_hardware(healthy) == []


def test_the_prepared_framework_cohort_finds_what_the_full_metadata_merge_finds():
    """Six jobs on a new framework version step 50 % slower than six on the old one in the same minutes."""
    from gpu_health.contracts.models import columns, conform

    nodes = tuple(f"n{i}" for i in range(1, 13))
    new_jobs = {f"job-n{i}" for i in range(1, 7)}
    gpu = EV.gpu_rows(nodes=nodes)
    rng = np.random.default_rng(5)
    rt = conform(pd.DataFrame([
        {"ts": EV.T0 + m * EV.MIN, "job_id": f"job-{n}", "steps": 10, "samples": 640, "last_step": 1000 + m,
         "step_time_s": (1.5 if f"job-{n}" in new_jobs else 1.0) + rng.uniform(0, 0.05),
         "data_loader_time_s": 0.0, "grad_sync_time_s": 0.0, "checkpoint_time_s": 0.0, "loss": 1.0,
         "last_checkpoint_step": 900} for m in range(-5, 5) for n in nodes],
        columns=columns("job_runtime_metrics")), "job_runtime_metrics")
    meta = pd.DataFrame({"job_id": [f"job-{n}" for n in nodes] + ["job-n1", "job-elsewhere"],
                         "team": [("fast-movers" if f"job-{n}" in new_jobs else "steady") for n in nodes] + ["dup", "x"],
                         "workload_class": "distributed", "model_type": "llm",
                         "framework_version": [("torch-2.14.0" if f"job-{n}" in new_jobs else "torch-2.13.0") for n in nodes]
                         + ["torch-2.13.0", "torch-2.14.0"]})
    changes = pd.DataFrame([{"event_id": "chg-fw", "ts": EV.T0 - 10 * EV.MIN, "kind": "framework_release", "scope": "*",
                             "from_version": "torch-2.13.0", "to_version": "torch-2.14.0", "description": "torch"}])
    baselines = pd.DataFrame({"model_type": ["llm"], "sku": [EV.SKU], "gpus": [8], "step_time_s": [1.0]})
    ctx = dataclasses.replace(EV.context(gpu, runtime=rt, meta_frame=meta, changes=changes, nodes=nodes),
                              baselines=baselines)
    (slow,) = detect_deploys(ctx)
    (fast,) = detect_deploys(prepared(ctx))
    assert slow == fast
    assert (fast.severity, fast.cohort, fast.team) == ("page", "framework torch-2.14.0", "fast-movers,x")
    assert fast.margin is not None and fast.margin >= 1  # the effect over its floor, log p / log alpha


def test_refactorize_is_factorize_of_the_slice():
    """A partition's codes refactorized from the range's codes are pd.factorize of its own rows: numbered in order
    of first appearance, -1 for a missing value, the uniques in that order (with a missing value first, last, in
    between and absent, and an empty slice)."""
    rng = np.random.default_rng(5)
    names = np.array(["n1", "n2", None, "n3", "n4"], dtype=object)
    for _ in range(200):
        values = pd.Series(names[rng.integers(0, len(names), rng.integers(0, 30))]).astype("string")
        codes, uniques = pd.factorize(values)
        lo, hi = sorted(rng.integers(0, len(values) + 1, 2))
        got_codes, got_uniques = refactorize(codes.astype(np.int64)[lo:hi], np.asarray(uniques, dtype=object))
        want_codes, want_uniques = pd.factorize(values.iloc[lo:hi])
        np.testing.assert_array_equal(got_codes, want_codes)
        assert list(got_uniques) == list(np.asarray(want_uniques, dtype=object))


def test_detectors_on_range_codes_find_what_the_partitions_own_codes_find():
    """A context cut from a range frame (its GPU codes refactorized from the range's) raises the same findings as
    the same rows factorized on their own: an Xid 79 GPU gone silent (the hardware evidence and short-GPU counts
    read node, region, job and GPU codes), the range frame holding other nodes' rows, in another order, before it."""
    ctx = prepared(EV.context(EV.xid79_and_gone()))
    before = EV.gpu_rows(nodes=("n9", "n2", "n1"), job=lambda node, i: f"job-x{i}").assign(ts=lambda f: f["ts"] - 5 * EV.MIN)
    whole = pd.concat([before, ctx.gpu], ignore_index=True)
    prep = prepare_range(job_table(ctx.sched, ctx.inventory), ctx.meta, job_lookback=LOOKBACK, gpu=whole)
    cut = dataclasses.replace(ctx, gpu=whole.iloc[len(before):], gpu_rows=slice(len(before), len(whole)), prepared=prep)
    assert C._gpu_codes(cut, "node_id")[1].tolist() == C._gpu_codes(ctx, "node_id")[1].tolist()
    own, ranged = D.detect(ctx), D.detect(cut)
    assert any(f.family == "hardware" for f in own)
    assert ranged == own


def test_reporting_gpus_counted_once_per_range_are_each_partitions_own_counts():
    """_short_gpus of a context cut from a range frame (the range's cells counted once, _range_presence) equals the
    count over the partition's rows alone: a GPU reported twice in a minute, a node outside the inventory, a row off
    the minute grid, a GPU without a UUID, the range holding the partitions before and after it."""
    gpu = EV.gpu_rows(skip={("n1", 3, m) for m in range(1, 5)} | {("n2", i, 4) for i in range(8)})
    dup = gpu[(gpu["node_id"] == "n1") & (gpu["gpu_index"] == 0)]
    stray = gpu.head(8).assign(node_id="not-in-inventory")
    off_grid = gpu.head(2).assign(ts=EV.T0 + pd.Timedelta(seconds=90), gpu_uuid=["GPU-late-0", "GPU-late-1"])
    no_uuid = gpu.head(1).assign(gpu_uuid=pd.array([pd.NA], dtype=gpu["gpu_uuid"].dtype))
    part = pd.concat([gpu, dup, stray, off_grid, no_uuid], ignore_index=True)
    before = EV.gpu_rows(nodes=("n1", "n9")).assign(ts=lambda f: f["ts"] - 5 * EV.MIN)
    after = EV.gpu_rows(skip={("n2", 1, m) for m in range(5)}).assign(ts=lambda f: f["ts"] + 5 * EV.MIN)
    ctx = EV.context(part)
    expected = ctx.inventory.set_index("node_id")["gpus"].astype(float)
    whole = pd.concat([before, part, after], ignore_index=True)
    prep = prepare_range(job_table(ctx.sched, ctx.inventory), ctx.meta, job_lookback=LOOKBACK, gpu=whole)
    a, b = len(before), len(before) + len(part)
    cut = dataclasses.replace(ctx, gpu=whole.iloc[a:b], gpu_rows=slice(a, b), prepared=prep)
    own = H._short_gpus(ctx, expected)
    assert own[0].tolist() == [0, 1, 1, 1, 1] and own[1].tolist() == [0, 0, 0, 0, 8]
    assert (H._short_gpus(cut, expected) == own).all()
    assert "presence" in prep.derived  # (the range path was the one taken)
    later = dataclasses.replace(EV.context(after), start=EV.T0 + 5 * EV.MIN, end=EV.T0 + 10 * EV.MIN)
    cut_later = dataclasses.replace(later, gpu=whole.iloc[b:], gpu_rows=slice(b, len(whole)), prepared=prep)
    assert H._short_gpus(later, expected)[1].tolist() == [1, 1, 1, 1, 1]
    assert (H._short_gpus(cut_later, expected) == H._short_gpus(later, expected)).all()


def test_jobs_killed_by_their_node_are_found_once_per_range_as_each_partition_finds_them():
    """_failed_on_fault through a prepared range (the range's ended jobs judged once, _range_fault_ends) names what
    the partition's own scheduler events name: only jobs ending inside the partition, by exit state or reason
    (ECC, Xid 79; not an application Xid 13), every node of a multi-node job, reasons in event order."""
    def ended(i, minute, nodes, exit_state, reason):
        return {"event_id": f"e{i}", "ts": EV.T0 + minute * EV.MIN, "job_id": f"job-{i}", "event": "ended",
                "scheduler": "slurm", "queue": "batch", "priority": 1, "gpus": 8, "node_ids": nodes,
                "exit_state": exit_state, "reason": reason}
    sched = pd.DataFrame([
        ended(1, -3, "n1", "node_fail", "NODE_FAIL"),                      # before the partition
        ended(2, 1, "n1,n2", "failed", "Xid 79: GPU has fallen off the bus"),
        ended(3, 2, "n2", "failed", "Xid 13: graphics engine exception"),  # the application's own
        ended(4, 3, "n1", "node_fail", None),
        ended(5, 4, None, "node_fail", "NODE_FAIL"),                      # no nodes named
        ended(6, 6, "n2", "failed", "uncorrectable ECC error"),           # after it
    ])
    from gpu_health.contracts.models import conform

    sched = conform(sched.assign(ts=pd.to_datetime(sched["ts"], utc=True)), "scheduler_events")
    ctx = EV.context(EV.gpu_rows(), sched=sched[(sched["ts"] >= EV.T0 - 6 * EV.MIN) & (sched["ts"] < EV.T0 + 5 * EV.MIN)])
    prep = prepare_range(job_table(sched, ctx.inventory), ctx.meta, job_lookback=LOOKBACK, windows={"sched": sched})
    own = H._failed_on_fault(ctx)
    assert own == {"n1": ["Xid 79: GPU has fallen off the bus", "node_fail"], "n2": ["Xid 79: GPU has fallen off the bus"]}
    assert H._failed_on_fault(dataclasses.replace(ctx, prepared=prep)) == own
    assert "fault_ends" in prep.derived
