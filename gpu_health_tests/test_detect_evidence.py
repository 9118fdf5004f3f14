"""Pages rest on direct evidence, never on the absence of an optional signal.

Small hand-built partitions, one rule each: dummy load is judged on the device (SM / tensor activity
and power), never on missing step metrics; a GPU fault pages on two independent witnesses and never
while a driver rollout is reinstalling the node; GPU rows missing with nothing else are missing data;
a stall is progress that stopped while the device computes nothing; the loss tree keeps an exporter
gap out of hw_unavailable.
"""

import numpy as np
import pandas as pd

from gpu_health.contracts.models import columns, conform, empty_frame
from gpu_health.diagnosis.context import PartitionContext
from gpu_health.diagnosis.detect import detect
from gpu_health.diagnosis.detectors.gaming import detect_no_progress
from gpu_health.diagnosis.detectors.hardware import detect_hardware
from gpu_health.diagnosis.detectors.missing_data import detect_missing_data
from gpu_health.diagnosis.detectors.stalls import detect_stalls
from gpu_health.metrics import goodput as G
from gpu_health.contracts.derived import GoodputLeaves

T0 = pd.Timestamp("2026-11-03T10:00:00Z")
MIN = pd.Timedelta(minutes=1)
SKU = "NVIDIA H100 80GB HBM3"


def gpu_rows(nodes=("n1", "n2"), minutes=range(5), job=lambda node, i: f"job-{node}", util=95.0, sm=0.7,
             tensor=0.3, power=600.0, xid=0, dbe=0, skip=()) -> pd.DataFrame:
    """8 GPUs per node; ``skip`` = (node, gpu_index, minute) rows not reported."""
    rows = [{"ts": T0 + m * MIN, "region": "r1", "node_id": node, "gpu_index": i, "gpu_uuid": f"GPU-{node}-{i}",
             "sku": SKU, "job_id": job(node, i), "gpu_util_pct": util, "sm_active": sm, "tensor_active": tensor,
             "fb_used_mib": 1000.0, "power_w": power, "temp_c": 60.0, "sm_clock_mhz": 1980.0,
             "throttle_reasons": 0, "ecc_sbe_delta": 0, "ecc_dbe_delta": 0, "xid": 0}
            for m in minutes for node in nodes for i in range(8) if (node, i, m) not in skip]
    frame = conform(pd.DataFrame(rows, columns=columns("gpu_telemetry")), "gpu_telemetry")
    return frame


def node_rows(nodes=("n1", "n2"), health="ok", driver="550.54") -> pd.DataFrame:
    rows = [{"ts": T0 + m * MIN, "region": "r1", "node_id": n, "sku": SKU, "cpu_util_pct": 20.0, "mem_used_pct": 30.0,
             "disk_read_mbps": 10.0, "disk_write_mbps": 5.0, "nvme_util_pct": 5.0, "driver_version": driver,
             "kernel_version": "6.8", "health": health if not callable(health) else health(n)}
            for m in range(5) for n in nodes]
    return conform(pd.DataFrame(rows, columns=columns("node_telemetry")), "node_telemetry")


def meta(jobs, team="t1", cls="batch") -> pd.DataFrame:
    return pd.DataFrame({"job_id": list(jobs), "team": team, "workload_class": cls, "model_type": "gbdt",
                         "framework_version": "xgboost-2.1"})


def context(gpu, node=None, runtime=None, sched=None, changes=None, leaves=None, meta_frame=None, nodes=("n1", "n2"),
            rejects=None) -> PartitionContext:
    return PartitionContext(
        start=T0, end=T0 + 5 * MIN, gpu=gpu, node=node if node is not None else node_rows(nodes),
        network=empty_frame("network_telemetry"),
        runtime=runtime if runtime is not None else empty_frame("job_runtime_metrics"),
        sched=sched if sched is not None else empty_frame("scheduler_events"),
        changes=changes if changes is not None else empty_frame("change_events"),
        maintenance=empty_frame("maintenance_windows"),
        leaves=leaves if leaves is not None else GoodputLeaves.validate(pd.DataFrame(columns=columns_of_leaves())),
        baselines=pd.DataFrame(), meta=meta_frame if meta_frame is not None else empty_frame("job_metadata"),
        inventory=pd.DataFrame({"node_id": list(nodes), "region": "r1", "sku": SKU, "gpus": 8}),
        region_history=pd.DataFrame(columns=["partition_start", "region", "share_idle_blocked"]), rejects=rejects)


def columns_of_leaves():
    return ["partition_start", "region", "node_id", "sku", "driver_version", "team", "workload_class", "model_type",
            "framework_version", "queue", "state", "gpu_minutes"]


def leaves(state, node, minutes) -> pd.DataFrame:
    return GoodputLeaves.validate(pd.DataFrame([{
        "partition_start": T0, "region": "r1", "node_id": node, "sku": SKU, "driver_version": "550.54", "team": "none",
        "workload_class": "none", "model_type": "none", "framework_version": "none", "queue": "none", "state": state,
        "gpu_minutes": float(minutes)}]))


def dummy_on_n1(sm=0.02, tensor=0.0, power=110.0):
    """n1: a team's uninstrumented job spinning a kernel; n2: another job really computing (the SKU's
    working reference power)."""
    a = gpu_rows(nodes=("n1",), sm=sm, tensor=tensor, power=power)
    b = gpu_rows(nodes=("n2",), sm=0.7, tensor=0.3, power=600.0)
    return pd.concat([a, b], ignore_index=True)


# --- gaming: device-level evidence --------------------------------------------------------------------

def test_dummy_load_pages_on_idle_device_and_near_idle_power():
    m = pd.concat([meta(["job-n1"], team="gamers"), meta(["job-n2"], team="honest")])
    (f,) = detect_no_progress(context(dummy_on_n1(), meta_frame=m))
    assert (f.family, f.severity, f.team) == ("gaming", "page", "gamers")
    assert "SM activity median 0.02" in f.evidence and "power median 110 W" in f.evidence


def test_uninstrumented_jobs_that_compute_never_page():
    """GBDT on GPU: no step metrics, no tensor cores, but SMs busy and power drawn."""
    gpu = gpu_rows(sm=0.6, tensor=0.0, power=450.0)
    assert detect_no_progress(context(gpu, meta_frame=meta(["job-n1", "job-n2"]))) == []


def test_one_witness_is_a_ticket_that_says_what_is_missing():
    gpu = dummy_on_n1()
    gpu[["sm_active", "tensor_active"]] = np.nan  # profiling fields not exported (dcgm-exporter's default)
    m = pd.concat([meta(["job-n1"], team="gamers"), meta(["job-n2"], team="honest")])
    (f,) = detect_no_progress(context(gpu, meta_frame=m))
    assert (f.severity, f.team) == ("ticket", "gamers")
    assert "profiling fields (SM / tensor activity) not exported" in f.evidence


def test_dummy_load_in_a_notebook_is_a_ticket():
    m = pd.concat([meta(["job-n1"], team="gamers", cls="interactive"), meta(["job-n2"], team="honest")])
    (f,) = detect_no_progress(context(dummy_on_n1(), meta_frame=m))
    assert f.severity == "ticket"


def test_a_job_reporting_training_metrics_is_not_judged_as_gaming():
    rt = conform(pd.DataFrame([{"ts": T0 + m * MIN, "job_id": "job-n1", "steps": 0, "samples": 0, "last_step": 100,
                                "step_time_s": np.nan, "data_loader_time_s": np.nan, "grad_sync_time_s": np.nan,
                                "checkpoint_time_s": 0.0, "loss": np.nan, "last_checkpoint_step": 90}
                               for m in range(5)], columns=columns("job_runtime_metrics")), "job_runtime_metrics")
    m = pd.concat([meta(["job-n1"], team="gamers"), meta(["job-n2"], team="honest")])
    assert detect_no_progress(context(dummy_on_n1(), runtime=rt, meta_frame=m)) == []


# --- hardware: two independent witnesses ---------------------------------------------------------------

def xid79_and_gone():
    """GPU 3 of n1 raises Xid 79 in minute 0 and reports nothing after."""
    gpu = gpu_rows(skip={("n1", 3, m) for m in range(1, 5)})
    gpu.loc[(gpu["node_id"] == "n1") & (gpu["gpu_index"] == 3), "xid"] = 79
    return gpu


def test_xid79_with_the_gpu_gone_pages():
    (f,) = detect_hardware(context(xid79_and_gone()))
    assert (f.severity, f.nodes) == ("page", ["n1"])
    assert "Xid 79" in f.evidence and "not reporting" in f.evidence


def test_gpu_rows_missing_with_the_node_ok_and_no_xid_is_missing_data_not_hardware():
    gpu = gpu_rows(skip={("n1", i, m) for i in range(8) for m in range(5)})  # a whole node's GPU rows gone
    ctx = context(gpu)
    assert detect_hardware(ctx) == []
    ctx.leaves = leaves("no_data", "n1", 40)
    (f,) = [f for f in detect(ctx) if f.severity == "page" or f.family != "missing_data"] or [None]
    assert f is None
    (m,) = detect_missing_data(ctx)
    assert m.severity == "ticket" and m.nodes == ["n1"]


def test_a_driver_rollout_taking_gpus_away_is_a_ticket_naming_it():
    gpu = xid79_and_gone()
    changes = conform(pd.DataFrame([{"event_id": "chg-7", "ts": T0 - 20 * MIN, "kind": "driver_upgrade", "scope": "n1",
                                     "from_version": "550.54", "to_version": "560.28",
                                     "description": "rolling driver upgrade"}],
                                   columns=columns("change_events")), "change_events")
    node = node_rows(health=lambda n: "drained" if n == "n1" else "ok")
    (f,) = detect_hardware(context(gpu, node=node, changes=changes))
    assert f.severity == "ticket" and "chg-7" in f.summary + f.evidence


def test_a_double_bit_error_pages_even_during_a_rollout():
    gpu = gpu_rows()
    hit = (gpu["node_id"] == "n1") & (gpu["gpu_index"] == 2) & (gpu["ts"] == T0)
    gpu.loc[hit, ["xid", "ecc_dbe_delta"]] = [48, 1]
    changes = conform(pd.DataFrame([{"event_id": "chg-7", "ts": T0 - 20 * MIN, "kind": "driver_upgrade", "scope": "n1",
                                     "from_version": "550.54", "to_version": "560.28", "description": "upgrade"}],
                                   columns=columns("change_events")), "change_events")
    (f,) = detect_hardware(context(gpu, changes=changes))
    assert f.severity == "page"


def test_a_lone_fatal_xid_is_a_ticket():
    gpu = gpu_rows()
    gpu.loc[(gpu["node_id"] == "n1") & (gpu["gpu_index"] == 2) & (gpu["ts"] == T0), "xid"] = 74
    (f,) = detect_hardware(context(gpu))
    assert f.severity == "ticket"


def test_many_nodes_at_once_is_one_systemic_alert():
    nodes = tuple(f"n{i}" for i in range(10))
    gpu = gpu_rows(nodes=nodes, skip={(n, 0, m) for n in nodes[:4] for m in range(1, 5)})
    gpu.loc[gpu["node_id"].isin(nodes[:4]) & (gpu["gpu_index"] == 0), "xid"] = 79
    found = detect_hardware(context(gpu, node=node_rows(nodes), nodes=nodes))
    assert len(found) == 1
    assert "systemic" in found[0].summary and len(found[0].nodes) == 4


# --- stalls: progress that stopped, confirmed by the device --------------------------------------------

def runtime_rows(job, last_step, steps=0):
    return conform(pd.DataFrame([{"ts": T0 + m * MIN, "job_id": job, "steps": steps, "samples": 0, "last_step": last_step,
                                  "step_time_s": np.nan, "data_loader_time_s": np.nan, "grad_sync_time_s": np.nan,
                                  "checkpoint_time_s": 0.0, "loss": np.nan, "last_checkpoint_step": 0}
                                 for m in range(5)], columns=columns("job_runtime_metrics")), "job_runtime_metrics")


def test_a_hung_job_on_spinning_gpus_pages():
    gpu = dummy_on_n1(sm=0.02, power=150.0)
    (f,) = detect_stalls(context(gpu, runtime=runtime_rows("job-n1", last_step=500)))
    assert (f.family, f.severity) == ("software", "page")


def test_a_job_still_in_set_up_is_not_a_stall():
    gpu = dummy_on_n1(sm=0.02, power=150.0)
    assert detect_stalls(context(gpu, runtime=runtime_rows("job-n1", last_step=0))) == []


def test_zero_steps_on_a_gpu_computing_at_full_power_is_evaluation_not_a_stall():
    gpu = gpu_rows(sm=0.8, tensor=0.4, power=650.0)
    assert detect_stalls(context(gpu, runtime=runtime_rows("job-n1", last_step=500))) == []


# --- missing data: rejects are named, never a GPU incident ---------------------------------------------

def test_rejected_rows_are_a_ticket_naming_the_file():
    rejects = pd.DataFrame({"source": ["gpu_telemetry"] * 3, "partition_start": T0,
                            "origin": ["landing/gpu_telemetry/2026-11-03/1000.parquet"] * 3,
                            "reason": ["gpu_util_pct: not a number"] * 3})
    (f,) = detect_missing_data(context(gpu_rows(), rejects=rejects))
    assert f.severity == "ticket" and "1000.parquet" in f.evidence and "3 row(s)" in f.evidence


# --- loss tree: an exporter gap is no_data; a fault or a persisting gap is hw_unavailable --------------

def states_of_gap(hw_corroborated, health="ok", xid_first_minute=0):
    gpu = gpu_rows(nodes=("n1", "n2"), skip={("n1", 3, m) for m in range(1, 5)})
    if xid_first_minute:
        gpu.loc[(gpu["node_id"] == "n1") & (gpu["gpu_index"] == 3) & (gpu["ts"] == T0), "xid"] = 79
    frames = {"gpu_telemetry": gpu, "node_telemetry": node_rows(health=lambda n: health if n == "n1" else "ok"),
              "job_runtime_metrics": empty_frame("job_runtime_metrics"), "scheduler_events": empty_frame("scheduler_events")}
    inv = pd.DataFrame({"node_id": ["n1", "n2"], "region": "r1", "sku": SKU, "gpus": 8})
    leaves_, _ = G.compute_states(frames, start=T0, end=T0 + 5 * MIN, capacity=None, inventory=inv, maintenance=None,
                                  meta=None, sched_history=None, baseline=None, hw_corroborated=hw_corroborated)
    n1 = leaves_[leaves_["node_id"] == "n1"].groupby("state")["gpu_minutes"].sum()
    return n1.get("no_data", 0.0), n1.get("hw_unavailable", 0.0)


NONE = pd.DataFrame(columns=["partition_start", "node_id"])


def test_an_exporter_gap_is_no_data():
    assert states_of_gap(NONE) == (4.0, 0.0)


def test_a_gap_after_a_gpu_fault_or_on_a_degraded_node_is_hardware():
    assert states_of_gap(NONE, xid_first_minute=1)[1] >= 4.0
    assert states_of_gap(NONE, health="degraded") == (0.0, 4.0)
    assert states_of_gap(pd.DataFrame({"partition_start": [T0], "node_id": ["n1"]})) == (0.0, 4.0)


def test_hardware_corroboration_from_fault_history_and_persisting_gaps():
    five = pd.Timedelta(minutes=5)
    parts = [T0 - k * five for k in range(3, 0, -1)]
    recent = pd.DataFrame({"partition_start": parts * 3, "node_id": ["gap"] * 3 + ["ok"] * 3 + ["fault"] * 3,
                           "gpus_seen": [7, 7, 7] + [8, 8, 8] + [8, 8, 8], "fatal_gpus": 0})
    usual = pd.Series({"gap": 8, "ok": 8, "fault": 8})
    # 'gap' was short in the 3 partitions before T0; 'fault' raised a GPU fault 2 hours ago
    last_fault = pd.Series({"fault": T0 - pd.Timedelta(hours=2)})
    got = G.hardware_corroboration(recent, last_fault, usual, T0, T0 + five)
    assert set(got["node_id"]) == {"gap", "fault"}
    recent.loc[recent["partition_start"] == parts[1], "gpus_seen"] = 8  # the gap is shorter than 15 minutes
    last_fault = pd.Series({"fault": T0 - pd.Timedelta(hours=25)})       # the fault is older than a day
    assert set(G.hardware_corroboration(recent, last_fault, usual, T0, T0 + five)["node_id"]) == set()
    # a node with no rows at all for 15 minutes while others report is gone, not a hiccup ...
    assert set(G.hardware_corroboration(recent[recent["node_id"] != "ok"], last_fault, usual, T0, T0 + five)["node_id"]) == {"ok"}
    # ... but partitions nobody reported in (before the warehouse's first partition) say nothing
    assert G.hardware_corroboration(recent.iloc[0:0], last_fault, usual, T0, T0 + five).empty
    # a fault inside the window corroborates its own and the later partitions
    recent2 = pd.concat([recent, pd.DataFrame({"partition_start": [T0], "node_id": ["ok"], "gpus_seen": [7], "fatal_gpus": [1]})])
    got = G.hardware_corroboration(recent2, pd.Series(dtype=object), usual, T0, T0 + 2 * five)
    assert set(zip(got["partition_start"], got["node_id"])) == {(T0, "ok"), (T0 + five, "ok")}


def test_a_node_drained_with_its_gpus_gone_but_no_fault_seen_is_a_ticket():
    """Unavailability witnesses alone (an admin's drain and the exporter stopping with it) are one cause."""
    gpu = gpu_rows(skip={("n1", i, m) for i in range(8) for m in range(5)})
    (f,) = detect_hardware(context(gpu, node=node_rows(health=lambda n: "drained" if n == "n1" else "ok")))
    assert f.severity == "ticket"


def test_a_job_killed_on_a_node_alone_opens_no_hardware_finding():
    sched = pd.DataFrame([{"event_id": "e1", "ts": T0 + 2 * MIN, "job_id": "job-n1", "event": "ended", "scheduler": "slurm",
                           "queue": "batch", "priority": 1, "gpus": 8, "node_ids": "n1", "exit_state": "node_fail",
                           "reason": "NODE_FAIL"}])
    assert detect_hardware(context(gpu_rows(), sched=sched)) == []
    # ... but it is the second witness of a fault Xid on that node
    gpu = gpu_rows()
    gpu.loc[(gpu["node_id"] == "n1") & (gpu["gpu_index"] == 0) & (gpu["ts"] == T0), "xid"] = 74
    (f,) = detect_hardware(context(gpu, sched=sched))
    assert f.severity == "page"


def test_an_absent_exporter_is_a_ticket_naming_its_metric_family():
    gaps = pd.DataFrame({"source": ["node_telemetry"], "partition_start": [T0],
                         "missing_family": ["node_cpu_seconds_total"], "reason": ["no series for 10 min"]})
    ctx = context(gpu_rows())
    ctx.source_gaps = gaps
    (f,) = detect_missing_data(ctx)
    assert f.severity == "ticket" and "node_cpu_seconds_total" in f.evidence
    assert [x for x in detect(ctx) if x.severity == "page"] == []


def test_a_gap_on_one_node_does_not_mute_the_regions_other_evidence():
    """Another node's exporter gap (missing data) must not silence a GPU fault elsewhere in the region."""
    gpu = xid79_and_gone()
    gpu = gpu[~((gpu["node_id"] == "n2") & (gpu["gpu_index"] < 4))]  # n2: half its GPUs' rows lost, node ok
    ctx = context(gpu)
    ctx.leaves = leaves("no_data", "n2", 20)
    found = detect(ctx)
    assert {(f.detector, f.severity) for f in found} == {("hardware_fault", "page"), ("missing_data", "ticket")}


# --- network: a failing link pages on its two counters where the jobs report no sync time ---------------

def link_rows(nodes=("n1",), loss=2.0, retransmits=1500, minutes=range(5)):
    rows = [{"ts": T0 + m * MIN, "region": "r1", "node_id": n, "link_id": f"mlx5_{k}", "rx_gbps": 100.0, "tx_gbps": 100.0,
             "packet_loss_pct": loss, "retransmits": retransmits, "latency_us": 5.0, "link_up": True}
            for m in minutes for n in nodes for k in range(2)]
    return conform(pd.DataFrame(rows, columns=columns("network_telemetry")), "network_telemetry")


def test_a_failing_link_under_an_uninstrumented_job_pages_on_both_counters():
    from gpu_health.diagnosis.detectors.slowdowns import detect_slowdowns

    ctx = context(gpu_rows())
    ctx.network = link_rows()
    (f,) = detect_slowdowns(ctx)
    assert (f.family, f.severity, f.nodes) == ("network", "page", ["n1"]) and "both counters" in f.evidence
    ctx.network = link_rows(retransmits=None)  # retransmits not exported: one counter
    (f,) = detect_slowdowns(ctx)
    assert f.severity == "ticket"
    ctx.network = link_rows(minutes=range(2))  # a burst, not a fault
    assert detect_slowdowns(ctx) == []


# --- slowdowns: a page needs the job side, the device side and an impact that matters ---------------------------

def slow_leaves(slow: dict, state="slowdown_data_io", per_node=40.0, cls="batch", other_paid=0.0,
                uninstrumented=0.0) -> pd.DataFrame:
    """Per node of ``slow`` (node -> GPU-minutes in ``state``) the rest of its 8 GPUs' partition productive
    (``uninstrumented`` of it busy without step metrics); plus ``other_paid`` GPU-minutes idle on the region's other
    nodes (its paid capacity)."""
    rows = []
    for node, minutes in slow.items():
        rows += [(node, state, minutes, cls), (node, "productive", per_node - minutes - uninstrumented, cls)]
        if uninstrumented:
            rows.append((node, "allocated_unproductive", uninstrumented, cls))
    if other_paid:
        rows.append(("n-other", "idle_no_demand", other_paid, "none"))
    return GoodputLeaves.validate(pd.DataFrame([{
        "partition_start": T0, "region": "r1", "node_id": n, "sku": SKU, "driver_version": "550.54", "team": "t1",
        "workload_class": c, "model_type": "m", "framework_version": "f", "queue": "q", "state": s,
        "gpu_minutes": float(m)} for n, s, m, c in rows]))


def progress_rows(jobs) -> pd.DataFrame:
    rows = [{"ts": T0 + m * MIN, "job_id": j, "steps": 40, "samples": 1280, "last_step": 1000 + 40 * m,
             "step_time_s": 1.5, "data_loader_time_s": 0.6, "grad_sync_time_s": 0.1, "checkpoint_time_s": 0.0,
             "loss": 1.0, "last_checkpoint_step": 900, "grad_norm": None} for m in range(5) for j in jobs]
    return conform(pd.DataFrame(rows, columns=columns("job_runtime_metrics")), "job_runtime_metrics")


FOUR = ("n1", "n2", "n3", "n4")


def remote_storage_slowdown(util=60.0, other_paid=0.0, nodes=FOUR, nvme=5.0):
    """Four jobs on four nodes: a third of their time lost to loader wait, no local disk busy (remote storage)."""
    from gpu_health.diagnosis.detectors.slowdowns import detect_slowdowns

    node = node_rows(nodes).assign(nvme_util_pct=nvme)
    ctx = context(gpu_rows(nodes=nodes, util=util), node=node, runtime=progress_rows([f"job-{n}" for n in nodes]),
                  nodes=nodes, leaves=slow_leaves({n: 13.3 for n in nodes}, other_paid=other_paid))
    return [f for f in detect_slowdowns(ctx) if f.family == "data_io"]


def test_a_remote_storage_slowdown_of_many_jobs_pages_without_local_disk_saturation():
    """Loader wait above baseline on many jobs (the trainer) with their GPUs idle that share of the time (DCGM)
    pages; a saturated local disk is a cause in evidence, not a requirement."""
    (f,) = remote_storage_slowdown()
    assert f.severity == "page" and f.nodes == list(FOUR)
    assert "4 job(s)" in f.evidence and "nan" not in f.evidence


def test_a_loader_wait_the_gpus_do_not_show_is_a_ticket():
    """The GPUs computing at full rate contradict the loader wait (prefetch overlaps it): one witness, a ticket."""
    (f,) = remote_storage_slowdown(util=95.0)
    assert f.severity == "ticket"


def test_a_data_io_slowdown_below_the_impact_floor_tickets_even_with_a_saturated_disk():
    (f,) = remote_storage_slowdown(other_paid=20000.0, nvme=99.0)  # 53 of 20,160: 0.3 %
    assert f.severity == "ticket" and "floor" in f.evidence
    (f,) = remote_storage_slowdown(nvme=99.0, nodes=("n1",))  # one job: its own input pipeline, the team's ticket
    assert f.severity == "ticket"


def test_a_storage_slowdown_thin_on_each_of_many_nodes_is_judged_over_them_together():
    """Jobs of one storage spread over many nodes, few reporting loader time on each: every node shows the effect
    size (>= 10 % of its measured time) but under the minutes floor alone; together they page."""
    from gpu_health.diagnosis.detectors.slowdowns import detect_slowdowns

    nodes = tuple(f"n{k}" for k in range(1, 9))
    ctx = context(gpu_rows(nodes=nodes, util=60.0), runtime=progress_rows([f"job-{n}" for n in nodes]), nodes=nodes,
                  leaves=slow_leaves({n: 3.0 for n in nodes}, uninstrumented=20.0))
    (f,) = [x for x in detect_slowdowns(ctx) if x.family == "data_io"]
    assert f.severity == "page" and f.nodes == sorted(nodes)


def network_slowdown(slow: dict, other_paid: float):
    from gpu_health.diagnosis.detectors.slowdowns import detect_slowdowns

    nodes = tuple(slow)
    ctx = context(gpu_rows(nodes=nodes), runtime=progress_rows([f"job-{n}" for n in nodes]), nodes=nodes,
                  leaves=slow_leaves(slow, state="slowdown_network", cls="distributed", other_paid=other_paid))
    ctx.network = link_rows(nodes=nodes)
    return [f for f in detect_slowdowns(ctx) if f.family == "network"]


def test_a_network_blip_below_the_impact_floor_tickets_and_a_real_degradation_pages():
    (f,) = network_slowdown({"n1": 6.0}, other_paid=2000.0)  # 6 GPU-minutes of a 2,040 GPU-minute region: 0.3 %
    assert f.severity == "ticket" and "floor" in f.evidence
    (f,) = network_slowdown({n: 12.0 for n in FOUR}, other_paid=2000.0)  # 48 of 2,160: 2.2 %
    assert f.severity == "page" and "nan" not in f.evidence
