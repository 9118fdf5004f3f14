"""A job that computed and then stopped progressing while it holds its GPUs busy is a stall, not gaming.

A hung collective spins the GPUs at ~100 % utilization with the SMs, tensor pipes and power near idle: on the
device it looks like a dummy load. What tells them apart is the job's own history: a dummy load never computed;
a hung job did, until it hung. The gaming detector reads that history through the context
(``job_gpu_history``: the GPU rows of given jobs before the partition) and leaves a job that computed out.
"""

import numpy as np
import pandas as pd

from gpu_health.diagnosis.detectors.gaming import detect_no_progress
from gpu_health_tests.test_detect_evidence import MIN, T0, context, dummy_on_n1, gpu_rows, meta


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
