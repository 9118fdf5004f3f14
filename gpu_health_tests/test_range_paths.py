"""The range paths (no per-partition loop where a group-by does the work) give exactly what the
per-partition computations give: step_baselines_range vs step_baseline partition by partition,
decompose_range vs decompose partition by partition, and the integer-code paths of maintenance_mask and
workload_step_stats vs their pandas joins."""

import numpy as np
import pandas as pd

from gpu_health.diagnosis.decompose import decompose, decompose_range
from gpu_health.metrics import baselines as B
from gpu_health.metrics.goodput import LEAF_DIMS, _maintenance_mask_by_rows, maintenance_mask
from gpu_health_tests.test_decompose import NODES, cluster, slow_down

T0 = pd.Timestamp("2026-11-04T10:00:00Z")
MIN5 = pd.Timedelta(minutes=5)


# --- step baselines -------------------------------------------------------------------------------------------


def stats_rows(rng, start, end, signatures, p_missing=0.3) -> pd.DataFrame:
    """workload_step_stats rows: each signature in a random ~70 % of the 5-minute partitions of [start, end)."""
    rows = []
    for p in pd.date_range(start, end, freq="5min", inclusive="left"):
        for model, sku, gpus in signatures:
            if rng.random() < p_missing:
                continue
            step = rng.choice([rng.uniform(0.2, 0.4), np.nan], p=[0.95, 0.05])
            rows.append({"partition_start": p, "model_type": model, "sku": sku, "gpus": gpus,
                         "healthy_minutes": int(rng.integers(1, 12)), "step_time_s": step,
                         "data_loader_time_s": rng.uniform(0.01, 0.05), "grad_sync_time_s": rng.uniform(0.02, 0.08)})
    return pd.DataFrame(rows, columns=B.STAT_COLUMNS)


def per_partition_baselines(hist_all: pd.DataFrame, current: pd.DataFrame, start, end) -> pd.DataFrame:
    """The specification: each hour's history baseline and each partition's cohort, by step_baseline."""
    out = []
    for hour in pd.date_range(start.floor("1h"), end, freq="1h", inclusive="left"):
        hist = hist_all[(hist_all["partition_start"] >= hour - B.LOOKBACK) & (hist_all["partition_start"] < hour)]
        base_h = B.step_baseline(hist, None)
        for p in pd.date_range(max(hour, start), min(hour + pd.Timedelta(hours=1), end), freq="5min", inclusive="left"):
            cur = current[current["partition_start"] == p]
            cohort = B.step_baseline(None, cur) if len(cur) else base_h.iloc[0:0]
            parts = [x for x in (base_h[base_h["history_minutes"] >= B.MIN_HISTORY_MINUTES], cohort) if len(x)]
            both = pd.concat(parts, ignore_index=True) if parts else base_h.iloc[0:0]
            both = both.drop_duplicates(B.SIGNATURE, keep="first")
            if len(both):
                out.append(both.assign(partition_start=p))
    cols = B.BASELINE_COLUMNS
    return pd.concat(out, ignore_index=True)[cols] if out else pd.DataFrame(columns=cols)


def test_step_baselines_range_equals_step_baseline_partition_by_partition():
    rng = np.random.default_rng(7)
    start, end = T0 + pd.Timedelta(minutes=25), T0 + pd.Timedelta(hours=3)  # a start inside its hour
    old = [("bert", "H100", 8), ("bert", "V100", 8), ("gpt", "H100", 64)]
    # history: two signatures for 8 days, one only in the last two hours (cold start -> its cohort), and
    # one signature that only ever appears in the window
    hist = pd.concat([stats_rows(rng, start - pd.Timedelta(days=8), start, old),
                      stats_rows(rng, start - pd.Timedelta(hours=2), end, [("llama", "H100", 16)], 0.6)],
                     ignore_index=True)
    current = pd.concat([stats_rows(rng, start, end, old + [("vit", "V100", 1)]),
                         hist[hist["partition_start"] >= start]], ignore_index=True)
    current = current.drop_duplicates(["partition_start", *B.SIGNATURE]).sort_values("partition_start", kind="stable")
    hist_all = pd.concat([hist[hist["partition_start"] < start], current], ignore_index=True)
    hist_all = hist_all[hist_all["partition_start"] >= start.floor("1h") - B.LOOKBACK]

    want = per_partition_baselines(hist_all, current, start, end)
    got = B.step_baselines_range(hist_all, current, start, end)
    assert set(want["baseline_source"]) == {"history", "cohort"}
    pd.testing.assert_frame_equal(got, want, check_exact=True)


def test_step_baselines_range_of_nothing_is_empty():
    empty = pd.DataFrame(columns=B.STAT_COLUMNS)
    got = B.step_baselines_range(empty, empty, T0, T0 + pd.Timedelta(hours=1))
    assert got.empty and list(got.columns) == B.BASELINE_COLUMNS


# --- decomposition --------------------------------------------------------------------------------------------


def test_decompose_range_equals_decompose_partition_by_partition():
    actual_parts, expected_parts = [], []
    for k in range(6):
        expected, actual = cluster(seed=k)
        p = T0 + k * MIN5
        if k in (1, 4):  # a slowdown on one node in two partitions
            actual = slow_down(actual, actual["node_id"] == NODES[17 + k], 0.5)
        if k == 2:  # a partition with a missing dimension value
            actual.loc[actual.index[:3], "queue"] = None
        actual_parts.append(actual.assign(partition_start=p))
        if k != 5:  # the last partition has no expected leaves: it is not decomposed
            expected_parts.append(expected.assign(partition_start=p))
    actual_all = pd.concat(actual_parts, ignore_index=True).sample(frac=1.0, random_state=3)  # any row order
    expected_all = pd.concat(expected_parts, ignore_index=True)

    exp_by = dict(tuple(expected_all.groupby("partition_start")))
    want = [decompose(act, exp_by[p], start=p, end=p + MIN5)
            for p, act in actual_all.groupby("partition_start") if p in exp_by]
    want = pd.concat([w for w in want if len(w)], ignore_index=True)
    got = decompose_range(actual_all, expected_all)
    assert want["partition_start"].nunique() >= 2
    pd.testing.assert_frame_equal(got, want, check_exact=True)


def test_decompose_range_without_expected_leaves_is_empty():
    _, actual = cluster()
    assert decompose_range(actual, actual.iloc[0:0]).empty


# --- integer-code paths ---------------------------------------------------------------------------------------


def test_maintenance_mask_by_codes_equals_the_row_comparisons():
    rng = np.random.default_rng(1)
    n = 5000
    ts = pd.Series(T0 + pd.to_timedelta(rng.integers(0, 600, n), unit="min"))
    region = pd.Series(rng.choice(["us-east", "eu-west", None], n), dtype=object)
    node = pd.Series(rng.choice(NODES + [None], n), dtype=object)
    windows = pd.DataFrame({
        "start": [T0, T0 + pd.Timedelta(hours=2), T0 + pd.Timedelta(hours=4), pd.NaT, T0 + pd.Timedelta(hours=6)],
        "end": [T0 + pd.Timedelta(hours=1), T0 + pd.Timedelta(hours=3), T0 + pd.Timedelta(hours=5), T0, T0 + pd.Timedelta(hours=9)],
        "region": ["*", "us-east", None, "eu-west", "ap-south"],
        "node_ids": ["n01,n02,n03", "*", "n05,nX", None, None],
    })
    got = maintenance_mask(ts, region, node, windows)
    want = _maintenance_mask_by_rows(ts, region, node, windows)
    assert want.any() and not want.all()
    np.testing.assert_array_equal(got, want)


def step_frames(rng, duplicate_node_rows=False) -> dict:
    minutes = pd.date_range(T0, periods=30, freq="1min")
    gpu, node, rt = [], [], []
    for t in minutes:
        for i, n_id in enumerate(NODES[:6]):
            node.append({"ts": t, "node_id": n_id, "health": rng.choice(["ok", "ok", "ok", "degraded"])})
            job = f"j{i // 2}" if rng.random() < 0.9 else None
            for gi in range(4):
                gpu.append({"ts": t, "region": "us-east", "node_id": n_id, "sku": "H100" if i < 4 else "V100",
                            "job_id": job, "throttle_reasons": int(rng.choice([0, 0, 0, 0x20])),
                            "xid": int(rng.choice([0] * 30 + [79]))})
        for j in range(3):
            rt.append({"ts": t, "job_id": f"j{j}", "steps": int(rng.choice([0, 5, 7])), "step_time_s": rng.uniform(0.2, 0.3),
                       "data_loader_time_s": rng.uniform(0, 0.1), "grad_sync_time_s": rng.uniform(0, 0.1)})
    node = pd.DataFrame(node)
    if duplicate_node_rows:
        node = pd.concat([node, node.iloc[:10]], ignore_index=True)
    return {"gpu_telemetry": pd.DataFrame(gpu).astype({"throttle_reasons": "Int64"}), "node_telemetry": node,
            "job_runtime_metrics": pd.DataFrame(rt)}


def test_workload_step_stats_by_codes_equals_the_joins():
    meta = pd.DataFrame({"job_id": ["j0", "j1", "j2"], "model_type": ["bert", "gpt", None]})
    windows = pd.DataFrame({"start": [T0 + pd.Timedelta(minutes=10)], "end": [T0 + pd.Timedelta(minutes=15)],
                            "region": ["us-east"], "node_ids": ["n01"]})
    for dup in (False, True):
        frames = step_frames(np.random.default_rng(5), duplicate_node_rows=dup)
        got = B.workload_step_stats(frames, meta=meta, maintenance=windows)
        want = B._workload_step_stats_joined(frames, meta=meta, maintenance=windows)
        assert len(want) > 3
        pd.testing.assert_frame_equal(got, want, check_exact=True)


# --- goodput chunks -------------------------------------------------------------------------------------------


def test_compute_states_range_equals_compute_states_chunk_by_chunk():
    """The shared job lookup and queue regions give each chunk what its own scheduler history gives it."""
    from gpu_health.metrics import goodput as G
    from gpu_health.sim.telemetry import Window, cost_capacity, maintenance_windows
    from gpu_health_tests.test_goodput import HISTORY, E, S, incident, inventory_of, scenario

    scen = scenario(incident("training_stall"), incident("fragmentation"))
    hist, frames = Window(scen, S - HISTORY, S).tables(), Window(scen, S, E).tables()
    tables = {k: pd.concat([hist[k], frames[k]], ignore_index=True) for k in frames}
    sched_all, rt_all, meta = tables["scheduler_events"], tables["job_runtime_metrics"], tables["job_metadata"]
    # a job running in the first chunk whose submitted / started events arrive late (stamped in the second):
    # the first chunk knows no queue for it yet
    running = set(frames["gpu_telemetry"].loc[frames["gpu_telemetry"]["ts"] < S + pd.Timedelta(minutes=20), "job_id"].dropna())
    late_job = sorted(running & set(sched_all.loc[sched_all["event"] == "submitted", "job_id"]))[0]
    late = (sched_all["job_id"] == late_job) & sched_all["event"].isin(["submitted", "started"])
    sched_all = sched_all.assign(ts=sched_all["ts"].where(~late, S + pd.Timedelta(minutes=25)))
    frames["scheduler_events"] = sched_all[sched_all["ts"] >= S]
    stats = B.workload_step_stats(tables, meta=meta, maintenance=None)
    baseline = B.step_baselines_range(stats, stats[stats["partition_start"] >= S], S, E)
    inv = inventory_of(tables)
    cuts = [S, S + pd.Timedelta(minutes=20), S + pd.Timedelta(minutes=40), E]
    chunks = [(a, b, inv) for a, b in zip(cuts[:-1], cuts[1:])]
    in_window = {k: frames[k] for k in ("gpu_telemetry", "node_telemetry", "job_runtime_metrics", "scheduler_events")}
    capacity, maint = cost_capacity(scen, S), maintenance_windows(scen)
    corroborated = pd.DataFrame({"partition_start": [S + MIN5], "node_id": [inv["node_id"].iloc[0]]})

    want_l, want_f = [], []
    for c0, c1, inventory in chunks:
        sub = {k: v[(v["ts"] >= c0) & (v["ts"] < c1)] for k, v in in_window.items()}
        leaves, failures = G.compute_states(
            sub, start=c0, end=c1, capacity=capacity, inventory=inventory, maintenance=maint, meta=meta,
            sched_history=sched_all[sched_all["ts"] < c1],
            baseline=baseline[(baseline["partition_start"] >= c0) & (baseline["partition_start"] < c1)],
            runtime_history=rt_all[(rt_all["ts"] >= c0 - G.FAILURE_LOOKBACK) & (rt_all["ts"] < c0)],
            hw_corroborated=corroborated[(corroborated["partition_start"] >= c0) & (corroborated["partition_start"] < c1)])
        want_l.append(leaves)
        want_f.append(failures)
    want_leaves = pd.concat(want_l, ignore_index=True)
    want_failures = pd.concat([f for f in want_f if len(f)] or want_f[:1], ignore_index=True)

    leaves, failures = G.compute_states_range(
        in_window, chunks, capacity=capacity, maintenance=maint, meta=meta, sched_history=sched_all,
        baseline=baseline, runtime_history=rt_all, hw_corroborated=corroborated)
    assert len(want_failures) and (want_leaves["state"] == "idle_blocked").any()
    pd.testing.assert_frame_equal(leaves, want_leaves, check_exact=True)
    pd.testing.assert_frame_equal(failures, want_failures, check_exact=True)
