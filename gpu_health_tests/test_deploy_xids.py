"""The deploy cohort judge's second witness: the GPUs' own Xids of the GPU software stack.

A wave's first minutes hold few finished jobs: two of four failing cannot reach the false-alarm rate by count. The
GPUs say it directly: jobs on two of the change's nodes report Xid 13 / 119 while the other nodes' many more
GPU-minutes report none. With the jobs failing as well (two signals, two collectors) the change pages; the same Xids
on unchanged nodes, or on one changed node alone (a GPU's or a node's fault), do not.
"""

import pandas as pd

from gpu_health.diagnosis.context import PartitionContext
from gpu_health.diagnosis.detectors.software import detect_deploys

DEPLOY = pd.Timestamp("2026-11-05T15:00:00Z")
END = DEPLOY + pd.Timedelta(minutes=15)  # the look: the wave's first partition
COHORT = [f"c{i}" for i in range(1, 5)]
OTHERS = [f"o{i}" for i in range(1, 81)]
GPUS = 4  # per job
INVENTORY = pd.DataFrame({"node_id": COHORT + OTHERS, "region": "r1", "sku": "H100", "gpus": 8})
CHANGES = pd.DataFrame([{"event_id": "chg-1", "ts": DEPLOY, "kind": "driver_upgrade", "scope": ",".join(COHORT),
                         "from_version": "550.127.08", "to_version": "550.144.03", "description": "driver upgrade"}])


def runs():
    """(job, node, start, end, state): four jobs started on the cohort's nodes 3 minutes before the look, still running;
    two per other node started since the change, still running; the hour before, 20 runs on the cohort's nodes and
    200 on the others, all completed."""
    out = [(f"w{i}", COHORT[i], END - pd.Timedelta(minutes=3), None, None) for i in range(4)]
    out += [(f"r{i}", OTHERS[i // 2], DEPLOY + pd.Timedelta(seconds=3 * i), None, None) for i in range(160)]
    out += [(f"h{i}", (COHORT if i < 20 else OTHERS)[i % (4 if i < 20 else 80)],
             DEPLOY - pd.Timedelta(minutes=55) + pd.Timedelta(seconds=10 * i),
             DEPLOY - pd.Timedelta(minutes=45) + pd.Timedelta(seconds=10 * i), "completed") for i in range(220)]
    return out


def context(xids: dict) -> PartitionContext:
    """The partition [END - 5 min, END): scheduler events of ``runs()``, and a GPU row per minute for each GPU of
    every running job; ``xids``: job -> the Xid its first GPU reports in the look's last minute."""
    ev, gpu = [], []
    for job, node, start, end, state in runs():
        ev.append({"event_id": f"s-{job}", "ts": start, "job_id": job, "event": "started", "scheduler": "slurm",
                   "node_ids": node, "exit_state": None, "reason": None})
        if end is not None:
            ev.append({"event_id": f"e-{job}", "ts": end, "job_id": job, "event": "ended", "scheduler": "slurm",
                       "node_ids": None, "exit_state": state, "reason": None})
            continue
        for ts in pd.date_range(max(start.ceil("min"), END - pd.Timedelta(minutes=5)), END, freq="min", inclusive="left"):
            for k in range(GPUS):
                xid = xids.get(job) if k == 0 and ts == END - pd.Timedelta(minutes=1) else None
                gpu.append({"ts": ts, "node_id": node, "gpu_uuid": f"GPU-{node}-{job}-{k}", "job_id": job, "xid": xid})
    empty = pd.DataFrame()
    sched = pd.DataFrame(ev).sort_values("ts", kind="stable").reset_index(drop=True)
    g = pd.DataFrame(gpu).astype({"xid": "Int64"})
    return PartitionContext(
        start=END - pd.Timedelta(minutes=5), end=END, gpu=g, node=empty, network=empty, runtime=empty, sched=sched,
        changes=CHANGES, maintenance=empty, leaves=pd.DataFrame(columns=["state", "node_id", "gpu_minutes"]),
        baselines=empty, meta=empty, inventory=INVENTORY, region_history=empty)


def test_xids_on_two_changed_nodes_page_with_few_jobs_started():
    """Two of the wave's four jobs, on two of its nodes, report Xid 13 / 119 (2 of 4 failed: too few to page by
    count) while the other nodes' 40 times as many GPU-minutes report none: the change pages, naming the Xids, with a
    margin over its bars."""
    (f,) = detect_deploys(context({"w0": 13, "w1": 119}))
    assert (f.family, f.severity, f.change_event) == ("software", "page", "chg-1")
    assert "Xid 119" in f.evidence and "c1" in f.evidence and "c2" in f.evidence
    assert f.margin is not None and f.margin >= 1


def test_the_same_xids_on_unchanged_nodes_do_not_page():
    assert detect_deploys(context({"r0": 13, "r5": 119})) == []


def test_the_cohort_share_of_xids_like_the_rest_does_not_page():
    """The two wave jobs' Xids among the other nodes' Xids at the same rate per GPU-minute: the cluster's, not the
    change's."""
    assert detect_deploys(context({"w0": 13, "w1": 119, **{f"r{i}": 13 for i in range(0, 160, 8)}})) == []


def test_one_changed_nodes_xids_alone_are_not_software():
    """Both Xid jobs on one changed node: that node's (or its GPU's) fault, the hardware detector's to judge."""
    ctx = context({"w0": 13})
    extra = ctx.gpu[ctx.gpu["job_id"] == "w0"].assign(job_id="w9")  # a second job on the same node, same minutes
    extra.loc[extra.index[-GPUS:], "xid"] = 119
    ctx.gpu = pd.concat([ctx.gpu, extra.assign(gpu_uuid=extra["gpu_uuid"] + "b")], ignore_index=True)
    s = ctx.sched
    add = s[s["job_id"] == "w0"].assign(job_id="w9", event_id="s-w9")
    ctx.sched = pd.concat([s, add], ignore_index=True).sort_values("ts", kind="stable").reset_index(drop=True)
    assert detect_deploys(ctx) == []
