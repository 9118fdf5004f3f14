"""The deploy cohort judge on failures: the false-alarm rate is spent over the looks at a change."""

import pandas as pd

from gpu_health.diagnosis.context import PartitionContext
from gpu_health.diagnosis.detectors.software import detect_deploys

DEPLOY = pd.Timestamp("2026-11-05T15:00:00Z")
FIVE = pd.Timedelta(minutes=5)
COHORT = ["n1", "n2"]
OTHERS = [f"n{i}" for i in range(3, 11)]
INVENTORY = pd.DataFrame({"node_id": COHORT + OTHERS, "region": "r1", "sku": "H100", "gpus": 8})
CHANGES = pd.DataFrame([{"event_id": "chg-1", "ts": DEPLOY, "kind": "driver_upgrade", "scope": "n1,n2",
                         "from_version": "550.127.08", "to_version": "550.144.03", "description": "driver upgrade"}])


def ended_jobs(end: pd.Timestamp, *, cohort_failed: int, cohort_total: int, other_failed: int, other_total: int):
    """Jobs that ended in the 20 minutes before ``end``, on the cohort's nodes and elsewhere."""
    rows = []
    for nodes, failed, total in ((COHORT, cohort_failed, cohort_total), (OTHERS, other_failed, other_total)):
        for i in range(total):
            rows.append({"event_id": f"e-{nodes[0]}-{i}", "ts": end - pd.Timedelta(minutes=1 + i % 20), "job_id": f"j-{nodes[0]}-{i}",
                         "event": "ended", "node_ids": nodes[i % len(nodes)],
                         "exit_state": "failed" if i < failed else "completed",
                         "reason": "NCCL error: unhandled cuda error" if i < failed else None})
    return pd.DataFrame(rows)


def context(end: pd.Timestamp, **jobs) -> PartitionContext:
    empty = pd.DataFrame()
    return PartitionContext(
        start=end - FIVE, end=end, gpu=empty, node=empty, network=empty, runtime=empty, sched=ended_jobs(end, **jobs),
        changes=CHANGES, maintenance=empty, leaves=pd.DataFrame(columns=["state", "node_id", "gpu_minutes"]),
        baselines=empty, meta=empty, inventory=INVENTORY, region_history=empty)


# 7 of 20 cohort jobs failed vs 3 of 100 elsewhere: Fisher p ~ 1.1e-4
BORDERLINE = {"cohort_failed": 7, "cohort_total": 20, "other_failed": 3, "other_total": 100}


def test_a_cohort_failing_right_after_the_deploy_pages():
    found = detect_deploys(context(DEPLOY + 4 * FIVE, **BORDERLINE))
    assert [(f.detector, f.family, f.severity, f.change_event) for f in found] == [
        ("deploy_regression", "software", "page", "chg-1")]
    assert found[0].nodes == COHORT
    # the margin of an exact test: log(p) / log(alpha), over 1 where it paged
    assert found[0].margin is not None and found[0].margin > 1


def test_the_same_evidence_hours_later_does_not_page_by_chance():
    # 36 looks at the change by then: the bar is 1e-3 / 36
    assert detect_deploys(context(DEPLOY + pd.Timedelta(hours=3), **BORDERLINE)) == []


def test_an_overwhelming_failure_rate_still_pages_late():
    assert len(detect_deploys(context(DEPLOY + pd.Timedelta(hours=3), cohort_failed=15, cohort_total=20,
                                      other_failed=3, other_total=100))) == 1


def test_a_rollout_announced_node_by_node_is_judged_as_one_cohort():
    """One change event per node (a rolling upgrade): each node alone has too few jobs to test."""
    per_node = pd.DataFrame([{"event_id": f"chg-{n}", "ts": DEPLOY + i * pd.Timedelta(minutes=2), "kind": "driver_upgrade",
                              "scope": n, "from_version": "550.127.08", "to_version": "550.144.03",
                              "description": f"driver upgrade {n}"} for i, n in enumerate(COHORT)])
    ctx = context(DEPLOY + 4 * FIVE, **BORDERLINE)
    ctx.changes = per_node
    (f,) = detect_deploys(ctx)
    assert (f.severity, f.change_event, f.nodes) == ("page", "chg-n1", COHORT)


def test_the_cohort_is_whoever_reports_the_new_version():
    """The change calendar names a scope the inventory does not know; the nodes' own driver version says
    which nodes run it."""
    ctx = context(DEPLOY + 4 * FIVE, **BORDERLINE)
    ctx.changes = CHANGES.assign(scope="rack-7")
    ctx.node = pd.DataFrame({"node_id": COHORT + OTHERS[:2], "driver_version": ["550.144.03"] * 2 + ["550.127.08"] * 2,
                             "kernel_version": "6.8"})
    (f,) = detect_deploys(ctx)
    assert f.severity == "page" and set(COHORT) <= set(f.nodes)



def run_events(runs, until: pd.Timestamp, *, ended_nodes: bool = False) -> pd.DataFrame:
    """A scheduler stream up to ``until`` of runs given as (node, start, end, exit_state) tuples; the ``ended``
    events name no node unless ``ended_nodes`` (the contract allows either: many streams place a job only on its
    ``started`` event)."""
    rows = []
    for i, (node, start, end, exit_state) in enumerate(runs):
        job = f"j{i}"
        rows.append({"event_id": f"s{i}", "ts": start, "job_id": job, "event": "started", "scheduler": "slurm",
                     "node_ids": node, "exit_state": None, "reason": None})
        rows.append({"event_id": f"e{i}", "ts": end, "job_id": job, "event": "ended", "scheduler": "slurm",
                     "node_ids": node if ended_nodes else None, "exit_state": exit_state,
                     "reason": "Xid 13: Graphics Engine Exception" if exit_state == "failed" else None})
    s = pd.DataFrame(rows)
    return s[s["ts"] < until].sort_values("ts", kind="stable").reset_index(drop=True)


def started_after(at: pd.Timestamp, nodes, *, failed: int, total: int):
    """``total`` runs started on ``nodes`` from ``at`` on, one a minute: the first ``failed`` of them fail 3 minutes
    in, the others complete after 8 minutes."""
    out = []
    for i in range(total):
        start = at + pd.Timedelta(minutes=i % 15)
        out.append((nodes[i % len(nodes)], start, start + pd.Timedelta(minutes=3 if i < failed else 8),
                    "failed" if i < failed else "completed"))
    return out


def runs_context(end: pd.Timestamp, runs, **kw) -> PartitionContext:
    ctx = context(end, cohort_failed=0, cohort_total=0, other_failed=0, other_total=0)
    ctx.sched = run_events(runs, end, **kw)
    return ctx


def test_jobs_placed_only_on_their_started_event_are_judged():
    """The ended events carry no node_ids: each job's placement comes from its own started event."""
    ctx = runs_context(DEPLOY + 4 * FIVE, started_after(DEPLOY + FIVE, COHORT, failed=7, total=20)
                       + started_after(DEPLOY + FIVE, OTHERS, failed=3, total=100))
    (f,) = detect_deploys(ctx)
    assert (f.family, f.severity, f.change_event, f.nodes) == ("software", "page", "chg-1", COHORT)
    assert "Xid 13" in f.evidence and "roll back chg-1" in f.summary


def test_the_cohort_is_the_jobs_started_after_the_change():
    """Jobs that started on the cohort's nodes before the change ran the old version: their normal ends do not
    dilute the failures of the jobs started after it."""
    end = DEPLOY + 4 * FIVE
    before = [(COHORT[i % 2], DEPLOY - pd.Timedelta(minutes=30 + i), end - pd.Timedelta(minutes=1 + i % 15), "completed")
              for i in range(40)]
    ctx = runs_context(end, before + started_after(DEPLOY + FIVE, COHORT, failed=4, total=6)
                       + started_after(DEPLOY + FIVE, OTHERS, failed=3, total=100), ended_nodes=True)
    (f,) = detect_deploys(ctx)
    assert f.severity == "page" and "4 of 6 jobs started on the new version" in f.evidence


def test_a_rollout_drained_first_is_judged_from_its_first_job_on_the_new_version():
    """No job starts on a drained node: the looks before the first start on the new version spend no false-alarm
    rate, so borderline evidence in the first partitions after it pages as it would right after a change."""
    back = DEPLOY + pd.Timedelta(hours=2)
    ctx = runs_context(back + 4 * FIVE, started_after(back + FIVE, COHORT, failed=7, total=20)
                       + started_after(back + FIVE, OTHERS, failed=3, total=100), ended_nodes=True)
    assert len(detect_deploys(ctx)) == 1


def test_one_node_failing_its_jobs_is_not_the_change():
    """Every failure of the cohort on one of its nodes: that node's fault (hardware judges it), not the driver's."""
    ctx = runs_context(DEPLOY + 4 * FIVE, started_after(DEPLOY + FIVE, ["n1"], failed=10, total=10)
                       + started_after(DEPLOY + FIVE, ["n2"], failed=0, total=10)
                       + started_after(DEPLOY + FIVE, OTHERS, failed=3, total=100), ended_nodes=True)
    assert detect_deploys(ctx) == []


def test_one_node_failing_on_the_gpu_stack_is_the_change_when_its_other_nodes_ran_nothing():
    """n2 ran no job since the change (idle): n1's failures are all the change has shown. Naming the GPU software
    stack they are the change's; a lone node's Xid 79 stays its GPU's."""
    stack = runs_with_reasons(DEPLOY + FIVE, ["n1"], ["Xid 13: Graphics Engine Exception"] * 6, total=8)
    others = runs_with_reasons(DEPLOY + FIVE, OTHERS, [USER_ERRORS[i % 4] for i in range(3)], total=100,
                               every=pd.Timedelta(seconds=6))
    found = detect_deploys(reasons_context(DEPLOY + 4 * FIVE, stack + others))
    assert [(f.detector, f.family, f.severity) for f in found] == [("deploy_regression", "software", "page")]
    bus = runs_with_reasons(DEPLOY + FIVE, ["n1"], ["Xid 79: GPU has fallen off the bus"] * 6, total=8)
    assert detect_deploys(reasons_context(DEPLOY + 4 * FIVE, bus + others)) == []


def test_a_run_requeued_for_a_gpu_error_failed_and_one_requeued_by_a_drain_did_not():
    from gpu_health.diagnosis.context import job_runs

    t = DEPLOY + FIVE
    ctx = context(DEPLOY + 4 * FIVE, cohort_failed=0, cohort_total=0, other_failed=0, other_total=0)
    ctx.sched = pd.DataFrame([
        {"event_id": "1", "ts": t, "job_id": "a", "event": "started", "node_ids": "n1", "exit_state": None, "reason": None},
        {"event_id": "2", "ts": t + FIVE, "job_id": "a", "event": "requeued", "node_ids": "n1", "exit_state": None,
         "reason": "NCCL error: unhandled cuda error"},
        {"event_id": "3", "ts": t, "job_id": "b", "event": "started", "node_ids": "n3", "exit_state": None, "reason": None},
        {"event_id": "4", "ts": t + FIVE, "job_id": "b", "event": "requeued", "node_ids": "n3", "exit_state": None,
         "reason": "node drained for driver upgrade"},
        {"event_id": "5", "ts": t + 2 * FIVE, "job_id": "a", "event": "started", "node_ids": "n2", "exit_state": None, "reason": None},
    ])
    runs = job_runs(ctx, DEPLOY)
    assert sorted(zip(runs["node_ids"], runs["failed"])) == [("n1", True), ("n2", False), ("n3", False)]


def test_a_node_is_in_the_cohort_by_the_version_it_reports_last():
    """A node that took the new driver inside the partition (its first rows still the old version) is the
    change's; a node of the scope still reporting the old version at the end is not reached yet."""
    end = DEPLOY + 4 * FIVE
    ctx = context(end, **BORDERLINE)
    ctx.changes = CHANGES.assign(scope="n1,n2,n3")
    ctx.node = pd.DataFrame([{"ts": end - FIVE + pd.Timedelta(minutes=m), "node_id": n, "kernel_version": "6.8",
                              "driver_version": "550.144.03" if n != "n3" and m >= 2 else "550.127.08"}
                             for m in range(5) for n in ("n1", "n2", "n3")])
    (f,) = detect_deploys(ctx)
    assert f.nodes == COHORT


def runs_with_reasons(at: pd.Timestamp, nodes, reasons, *, total: int, every=pd.Timedelta(minutes=1)):
    """``total`` runs started on ``nodes`` from ``at`` on, one per ``every``: the first ``len(reasons)`` fail 3 minutes
    in with those reasons, the others complete after 8 minutes."""
    out = []
    for i in range(total):
        start = at + i * every
        failed = i < len(reasons)
        out.append((nodes[i % len(nodes)], start, start + pd.Timedelta(minutes=3 if failed else 8),
                    "failed" if failed else "completed", reasons[i] if failed else None))
    return out


def reasons_context(end: pd.Timestamp, runs) -> PartitionContext:
    ctx = context(end, cohort_failed=0, cohort_total=0, other_failed=0, other_total=0)
    rows = []
    for i, (node, start, stop, exit_state, reason) in enumerate(runs):
        rows.append({"event_id": f"s{i}", "ts": start, "job_id": f"j{i}", "event": "started", "scheduler": "slurm",
                     "node_ids": node, "exit_state": None, "reason": None})
        rows.append({"event_id": f"e{i}", "ts": stop, "job_id": f"j{i}", "event": "ended", "scheduler": "slurm",
                     "node_ids": None, "exit_state": exit_state, "reason": reason})
    s = pd.DataFrame(rows)
    ctx.sched = s[s["ts"] < end].sort_values("ts", kind="stable").reset_index(drop=True)
    return ctx


# a cluster where a quarter of the jobs fail in the normal course, for their own reasons
USER_ERRORS = ["Python exception: RuntimeError", "CUDA out of memory", "NCCL timeout", "data loader worker killed (OOM)"]


def test_failures_naming_the_gpu_page_over_a_high_baseline_failure_rate():
    """6 of 21 cohort jobs fail with Xid 13 / 31 / 119 while a quarter of the other jobs fail for their own
    reasons: all failures alike the cohort is not worse (Fisher p ~ 0.4), but none of the other jobs' failures names
    the GPU stack."""
    end = DEPLOY + 4 * FIVE
    xids = ["Xid 13: Graphics Engine Exception", "Xid 31: GPU memory page fault", "Xid 119: GSP RPC timeout",
            "NCCL error: unhandled cuda error", "CUDA error: unspecified launch failure", "Xid 13: Graphics Engine Exception"]
    others = [USER_ERRORS[i % 4] for i in range(65)]
    ctx = reasons_context(end, runs_with_reasons(DEPLOY + FIVE, COHORT, xids, total=21, every=pd.Timedelta(seconds=40))
                          + runs_with_reasons(DEPLOY + FIVE, OTHERS, others, total=260, every=pd.Timedelta(seconds=3)))
    (f,) = detect_deploys(ctx)
    assert (f.family, f.severity, f.change_event) == ("software", "page", "chg-1")
    assert "Xid 13" in f.evidence


def test_one_gpu_failing_off_the_bus_on_a_changed_node_is_not_the_change():
    """Xid 79 on one node's jobs: a GPU fault, the hardware detector's to page, whatever change that node took."""
    end = DEPLOY + 4 * FIVE
    ctx = reasons_context(end, runs_with_reasons(DEPLOY + FIVE, ["n1"], ["Xid 79: GPU has fallen off the bus"] * 8, total=10)
                          + runs_with_reasons(DEPLOY + FIVE, ["n2"], [], total=10)
                          + runs_with_reasons(DEPLOY + FIVE, OTHERS, [USER_ERRORS[i % 4] for i in range(25)], total=100))
    assert detect_deploys(ctx) == []


def test_the_cohort_accumulates_evidence_since_the_change():
    """A wave's failures 40 minutes before the look still count: every look judges everything started on the new
    version since the change, not only its last half hour."""
    end = DEPLOY + pd.Timedelta(minutes=50)
    ctx = reasons_context(end, runs_with_reasons(DEPLOY + FIVE, COHORT, ["Xid 13: Graphics Engine Exception"] * 6,
                                                 total=12)
                          + runs_with_reasons(DEPLOY + FIVE, OTHERS, [USER_ERRORS[i % 4] for i in range(20)], total=200,
                                              every=pd.Timedelta(seconds=12)))
    (f,) = detect_deploys(ctx)
    assert f.severity == "page" and f.change_event == "chg-1"


def test_nodes_failing_as_they_did_in_their_own_hour_before_are_not_the_change():
    """The cohort's nodes failed their jobs with Xid 13 as often in the hour before the change: the change did not
    make them worse, however rarely the other nodes' jobs fail."""
    end = DEPLOY + 4 * FIVE
    xid = "Xid 13: Graphics Engine Exception"
    before = runs_with_reasons(DEPLOY - pd.Timedelta(minutes=55), COHORT, [xid] * 12, total=40)
    ctx = reasons_context(end, before + runs_with_reasons(DEPLOY + FIVE, COHORT, [xid] * 6, total=20)
                          + runs_with_reasons(DEPLOY + FIVE, OTHERS, USER_ERRORS[:3], total=200,
                                              every=pd.Timedelta(seconds=4)))
    assert detect_deploys(ctx) == []


def xid_rows(runs, failing: dict, at: pd.Timestamp) -> pd.DataFrame:
    """GPU telemetry of the partition: the GPU of each run ``i`` in ``failing`` reports Xid ``failing[i]`` at ``at``,
    under the run's job (the job_id the events of ``run_events`` give it)."""
    return pd.DataFrame([{"ts": at, "node_id": runs[i][0], "gpu_uuid": f"GPU-{i}", "xid": xid, "job_id": f"j{i}"}
                         for i, xid in failing.items()])


def first_wave(end: pd.Timestamp, failing: dict, *, other_failing: dict | None = None) -> PartitionContext:
    """A wave's first minutes: 13 runs started on the two nodes from 4 minutes before ``end``, none ended yet; the
    other nodes' 60 runs of the same minutes and 280 of the hour before, none failed by their scheduler."""
    wave = [(COHORT[i % 2], end - pd.Timedelta(seconds=240 - 15 * i), end + pd.Timedelta(minutes=30), "completed")
            for i in range(13)]
    same = [(OTHERS[i % 8], end - pd.Timedelta(seconds=240 - 4 * i), end + pd.Timedelta(minutes=30), "completed")
            for i in range(60)]
    hour = [(OTHERS[i % 8], DEPLOY - pd.Timedelta(minutes=59) + pd.Timedelta(seconds=13 * i),
             DEPLOY - pd.Timedelta(minutes=50) + pd.Timedelta(seconds=13 * i), "completed") for i in range(280)]
    runs = wave + same + hour
    ctx = runs_context(end, runs)
    gpu = [xid_rows(runs, failing, end - pd.Timedelta(minutes=1))]
    if other_failing:
        gpu.append(xid_rows(runs, {13 + i: x for i, x in other_failing.items()}, end - pd.Timedelta(minutes=1)))
    ctx.gpu = pd.concat(gpu, ignore_index=True)
    return ctx


def test_a_wave_pages_on_the_xids_of_its_running_jobs_before_their_scheduler_ends_them():
    """Three of a wave's 13 jobs, on both its nodes, report Xid 13 / 31 / 119 on their GPUs in the wave's first
    partition, before the scheduler writes them failed: they failed, and against the other nodes' jobs of the same
    minutes and of the hour before (none failing) the wave pages in that partition, naming the Xids."""
    ctx = first_wave(DEPLOY + pd.Timedelta(minutes=15), {0: 13, 1: 119, 2: 31})
    (f,) = detect_deploys(ctx)
    assert (f.family, f.severity, f.change_event) == ("software", "page", "chg-1")
    assert "3 of 13 jobs started" in f.evidence and "Xid 119" in f.evidence


def test_the_same_xids_on_the_other_nodes_jobs_are_no_change_of_the_cohort():
    """The other nodes' jobs report the same Xids as often: the cluster's, not the change's."""
    ctx = first_wave(DEPLOY + pd.Timedelta(minutes=15), {0: 13, 1: 119, 2: 31},
                     other_failing={i: 13 for i in range(0, 60, 4)})
    assert detect_deploys(ctx) == []


def test_a_job_requeued_after_its_xid_is_judged_on_its_run_that_failed():
    """The Xid's job restarted after the Xid's minute (a requeue): that later run has not failed."""
    end = DEPLOY + pd.Timedelta(minutes=15)
    ctx = first_wave(end, {0: 13, 1: 119, 2: 31})
    ctx.gpu = ctx.gpu.assign(ts=end - pd.Timedelta(minutes=5))  # before every run of the wave started
    assert detect_deploys(ctx) == []
