"""A job that computed and then stopped progressing while it holds its GPUs busy is a stall, not gaming.

A hung collective spins the GPUs at ~100 % utilization with the SMs, tensor pipes and power near idle: on the
device it looks like a dummy load. What tells them apart is the job's own history: a dummy load never computed;
a hung job did, until it hung. The gaming detector reads that history through the context
(``job_gpu_history``: the GPU rows of given jobs before the partition) and leaves a job that computed out; the
stall detector takes it into its region's stall.
"""

import numpy as np
import pandas as pd

from gpu_health.diagnosis.detectors.gaming import detect_no_progress
from gpu_health.diagnosis.detectors.stalls import detect_stalls
from gpu_health_tests.test_detect_evidence import MIN, T0, context, dummy_on_n1, gpu_rows, meta, runtime_rows


def history_of(frame: pd.DataFrame):
    """job_gpu_history over ``frame`` (rows before the partition), recording the jobs asked for."""
    asked = []

    def read(jobs):
        asked.append(sorted(jobs))
        return frame[frame["job_id"].isin(list(jobs))]
    return read, asked


def earlier(minutes: int, **device) -> pd.DataFrame:
    """n1's job in the ``minutes`` minutes before the partition, with the device values given."""
    rows = gpu_rows(nodes=("n1",), minutes=range(minutes), **device)
    return rows.assign(ts=rows["ts"] - minutes * MIN)


def teams():
    return pd.concat([meta(["job-n1"], team="xgb"), meta(["job-n2"], team="honest")])


def test_a_job_that_computed_then_hung_is_not_gaming():
    # it trained (SMs busy, full power) until the partition, then spins at 100 % with the device idle
    read, asked = history_of(earlier(20, sm=0.6, tensor=0.0, power=560.0))
    ctx = context(dummy_on_n1(sm=0.02, power=160.0), meta_frame=teams())
    ctx.job_gpu_history = read
    assert [f for f in detect_no_progress(ctx) if f.severity == "page"] == []
    assert asked == [["job-n1"]]


def test_computed_earlier_without_profiling_fields_is_judged_on_power():
    # dcgm-exporter's default counters: no SM activity; a GBDT job uses no tensor cores; power says it computed
    gpu = dummy_on_n1(sm=0.02, power=160.0)
    gpu["sm_active"] = np.nan
    before = earlier(20, sm=np.nan, tensor=0.0, power=560.0)
    read, _ = history_of(before)
    ctx = context(gpu, meta_frame=teams())
    ctx.job_gpu_history = read
    assert [f for f in detect_no_progress(ctx) if f.severity == "page"] == []


def test_a_dummy_load_that_never_computed_still_pages():
    for sm in (0.02, np.nan):
        gpu = dummy_on_n1(sm=0.02, power=110.0)
        gpu.loc[gpu["node_id"] == "n1", "sm_active"] = sm
        read, asked = history_of(earlier(20, sm=sm, tensor=0.0, power=110.0))  # busy and idle since it started
        ctx = context(gpu, meta_frame=teams())
        ctx.job_gpu_history = read
        (f,) = detect_no_progress(ctx)
        assert (f.family, f.severity, f.team) == ("gaming", "page", "xgb")
        assert asked == [["job-n1"]]


def test_a_dummy_load_without_history_still_pages():
    # the job started in the partition: nothing before it
    read, _ = history_of(earlier(0))
    ctx = context(dummy_on_n1(sm=0.02, power=110.0), meta_frame=teams())
    ctx.job_gpu_history = read
    (f,) = detect_no_progress(ctx)
    assert (f.family, f.severity) == ("gaming", "page")


def test_a_moment_of_compute_is_not_a_history_of_it():
    # one GPU drew power for one minute in the past hour: less than one minute of the job's allocation
    before = earlier(20, sm=0.02, tensor=0.0, power=110.0)
    before.loc[before.index[0], ["sm_active", "power_w"]] = [0.6, 560.0]
    read, _ = history_of(before)
    ctx = context(dummy_on_n1(sm=0.02, power=110.0), meta_frame=teams())
    ctx.job_gpu_history = read
    (f,) = detect_no_progress(ctx)
    assert f.severity == "page"


# --- the stall judgement: a job without training metrics that computed, then spins idle, is the stall's ----

def test_a_hung_job_without_metrics_joins_its_regions_stall():
    # n1: an uninstrumented job that computed, now spinning idle; n2: a reporting job that stopped stepping
    gpu = gpu_rows(sm=0.02, tensor=0.0, power=160.0)
    gpu = pd.concat([gpu, gpu_rows(nodes=("n3",), sm=0.7, tensor=0.3, power=600.0)], ignore_index=True)
    read, _ = history_of(earlier(20, sm=0.6, tensor=0.0, power=560.0))
    ctx = context(gpu, runtime=runtime_rows("job-n2", last_step=500), nodes=("n1", "n2", "n3"))
    ctx.job_gpu_history = read
    (f,) = detect_stalls(ctx)
    assert (f.family, f.severity, f.nodes) == ("software", "page", ["n1", "n2"])
    assert "job-n1" in f.evidence and "reporting no training metrics" in f.evidence


def test_a_hung_job_without_metrics_alone_is_a_stall_ticket():
    read, _ = history_of(earlier(20, sm=0.6, tensor=0.0, power=560.0))
    ctx = context(dummy_on_n1(sm=0.02, power=160.0), meta_frame=teams())
    ctx.job_gpu_history = read
    (f,) = detect_stalls(ctx)
    assert (f.family, f.severity, f.nodes) == ("software", "ticket", ["n1"])


def test_a_dummy_load_is_no_stall():
    read, _ = history_of(earlier(20, sm=0.02, tensor=0.0, power=110.0))
    ctx = context(dummy_on_n1(sm=0.02, power=110.0), meta_frame=teams())
    ctx.job_gpu_history = read
    assert detect_stalls(ctx) == []


def test_a_working_job_dipping_for_a_minute_is_no_stall():
    gpu = gpu_rows(nodes=("n1",), sm=0.6, tensor=0.0, power=560.0)
    gpu.loc[gpu["ts"] == gpu["ts"].max(), ["sm_active", "power_w"]] = [0.02, 160.0]  # its last minute idles
    gpu = pd.concat([gpu, gpu_rows(nodes=("n2",), sm=0.7, tensor=0.3, power=600.0)], ignore_index=True)
    read, asked = history_of(earlier(20, sm=0.6, tensor=0.0, power=560.0))
    ctx = context(gpu, runtime=runtime_rows("job-n2", last_step=500, steps=10))
    ctx.job_gpu_history = read
    assert detect_stalls(ctx) == [] and asked == []


def test_the_alerts_step_declares_the_history_it_reads(sqlite_url):
    """The history is a filtered read of gpu_telemetry the alerts step declares (steps/registry.py), COMPUTE_HISTORY
    back from each partition it judges."""
    from gpu_health.diagnosis.detectors.gaming import COMPUTE_HISTORY
    from gpu_health.steps.diagnosis import _job_gpu_history
    from gpu_health.steps.registry import inputs_for, step
    from gpu_health.storage.warehouse import Warehouse

    reads = [r for r in step("alerts").reads if r.table == "gpu_telemetry" and r.filtered and r.before >= COMPUTE_HISTORY]
    assert reads
    inputs = inputs_for("alerts", Warehouse(sqlite_url), T0, T0 + 5 * MIN)
    assert _job_gpu_history(inputs, T0, ["job-n1"]).empty  # inside the declaration: no UndeclaredRead
