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
