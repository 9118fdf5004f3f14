"""Supporting KPIs: the catalog, the generated docs, exact arithmetic on hand-built
frames, and the signature each simulated incident leaves in the KPIs.

Simulated tests share one 1-hour window per incident (10:00-11:00 UTC on Tuesday
2026-11-03, the incident spanning it) with 2 hours of history before it (the
step-time baseline, the pending backlog) and 4 days of job metadata (the
lookup the pipeline passes for long-running jobs). Each is compared with the
same seed without the incident.
"""

from dataclasses import dataclass

import numpy as np
import pandas as pd
import pytest

from gpu_health.contracts.models import CONTRACTS, columns, conform
from gpu_health.metrics import kpi_docs
from gpu_health.metrics.baselines import step_baseline, workload_step_stats
from gpu_health.metrics.kpi_catalog import (
    ALERT_INTENTS, CATALOG, DIMENSIONS, FACILITY_KPIS, INVENTORY_KPIS, KINDS, OWNERS, SUPPORTING,
)
from gpu_health.metrics.kpis import PENDING_GRACE, KpiValues, _group_quantile, compute_kpis, pending_jobs
from gpu_health.sim.scenario import load_scenario
from gpu_health.sim.telemetry import Window

T0 = pd.Timestamp("2026-11-03T10:00:00Z")
MIN = pd.Timedelta(minutes=1)
STATES_COLUMNS = ["partition_start", "region", "sku", "workload_class", "team", "state", "gpu_minutes"]
NO_STATES = pd.DataFrame(columns=STATES_COLUMNS)
SKU = "NVIDIA H100 80GB HBM3"


# --- the catalog and its docs ------------------------------------------------------------------

NON_CONTRACT_INPUTS = {"step_baseline", "pending", "cost_capacity", "goodput_states"}


def test_catalog_has_8_to_10_kpis_with_valid_fields():
    # the north star's supporting KPIs number 8-10 (the framework); the facility's and the inventory's stand beside them
    assert 8 <= len(SUPPORTING) <= 10 and set(CATALOG) == set(SUPPORTING) | set(FACILITY_KPIS) | set(INVENTORY_KPIS)
    names = [k.name for k in CATALOG]
    assert len(set(names)) == len(names)
    for k in CATALOG:
        for text in (k.title, k.definition, k.formula, k.guards_against, k.owner_rationale,
                     k.intent_rationale, k.degraded_when):
            assert isinstance(text, str) and len(text.strip()) > 10, (k.name, text)
        assert isinstance(k.unit, str) and k.unit.strip(), k.name
        assert k.owner in OWNERS and k.kind in KINDS and k.alert_intent in ALERT_INTENTS, k.name
        assert k.dimensions and set(k.dimensions) <= set(DIMENSIONS), k.name
        for need in k.needs + tuple(n for c in k.components for n in c.needs):
            if need in NON_CONTRACT_INPUTS:
                continue
            table, _, col = need.partition(".")
            assert col in columns(table), f"{k.name} needs {need}: not a contract column"
        comp_names = [c.name for c in k.components]
        assert len(set(comp_names)) == len(comp_names)
        assert all(c.unit and c.definition for c in k.components)
        assert set(n for c in k.components for n in c.needs) <= set(k.needs), k.name
    # every owner and intent is used; the brief's coverage list is there
    assert {k.owner for k in CATALOG} == set(OWNERS)
    assert {k.alert_intent for k in CATALOG} == set(ALERT_INTENTS)
    assert {k.kind for k in CATALOG} == set(KINDS)
    series = {s for k in CATALOG for s in k.series()}
    for required in ("allocation_rate", "job_failure_rate", "queue_wait_p95", "sla_attainment",
                     "step_time_inflation.data_io", "step_time_inflation.network", "step_time_inflation.checkpoint",
                     "step_time_inflation.compute", "hw_fault_rate.xid", "hw_fault_rate.dbe", "hw_fault_rate.throttled",
                     "comm_health.grad_sync_share", "comm_health.retransmits", "comm_health.packet_loss",
                     "fragmentation", "cost_per_productive_gpu_hour", "gaming_guardrails.busy_without_progress",
                     "gaming_guardrails.util_power_divergence"):
        assert required in series


def test_optional_dcgm_fields_needed_are_nullable_in_the_contract():
    for k in CATALOG:
        for need in k.needs:
            table, _, col = need.partition(".")
            if table == "gpu_telemetry":
                assert CONTRACTS[table].to_schema().columns[col].nullable, need


def test_the_brief_is_answered_first_north_star_then_its_supporting_kpis_then_the_layers():
    """docs/kpis.md opens with the north star and exactly the supporting set (6-10: owner, leading / lagging, alert
    intent), the layers' indicators after them; every kpi_values series keeps its name, whatever its tier."""
    from gpu_health.metrics.kpi_catalog import LAYERS, NORTH_STAR, TIERS

    assert NORTH_STAR.tier == "north_star" and NORTH_STAR not in CATALOG
    assert 6 <= len(SUPPORTING) <= 10 and all(k.tier == "supporting" and k.layer is None for k in SUPPORTING)
    assert all(k.tier in TIERS and (k.tier == "layer") == (k.layer in LAYERS) for k in CATALOG)
    text = kpi_docs.render_kpi_docs()
    first = lambda name: text.index(f"`{name}`")  # noqa: E731
    layers, supporting = text.index("## Layer indicators"), text.index(f"## The {len(SUPPORTING)} supporting KPIs")
    assert text.index("## The north star") < first(NORTH_STAR.name) < supporting < layers
    table = text[supporting:layers]
    assert [line.split("`")[1] for line in table.splitlines() if line.startswith("| `")] == \
        [k.name for k in SUPPORTING]
    assert all(first(k.name) > layers for k in CATALOG if k.tier == "layer")
    assert "### Serving" in text[layers:text.index("## Reading `kpi_values`")]


def test_docs_are_generated_from_the_catalog_and_not_stale():
    text = kpi_docs.render_kpi_docs()
    for k in CATALOG:
        assert f"### `{k.name}`" in text and k.owner_rationale in text and k.degraded_when in text
    on_disk = kpi_docs.DOC_PATH.read_text() if kpi_docs.DOC_PATH.exists() else ""
    assert on_disk == text, f"docs/kpis.md is stale: run `{kpi_docs.REGENERATE}`"


# --- hand-built frames -----------------------------------------------------------------------------

GPU_DEFAULTS = {"region": "r1", "sku": SKU, "job_id": None, "gpu_util_pct": 0.0, "sm_active": 0.0,
                "tensor_active": 0.0, "fb_used_mib": 0.0, "power_w": 70.0, "temp_c": 35.0, "sm_clock_mhz": 1980.0,
                "throttle_reasons": 0, "ecc_sbe_delta": 0, "ecc_dbe_delta": 0, "xid": 0}


def gpu_frame(rows: list[dict]) -> pd.DataFrame:
    out = []
    for r in rows:
        row = {**GPU_DEFAULTS, **r}
        row.setdefault("gpu_uuid", f"GPU-{row['node_id']}-{row['gpu_index']}")
        out.append(row)
    return conform(pd.DataFrame(out, columns=columns("gpu_telemetry")), "gpu_telemetry")


def gpus(node, n, minutes, **fields) -> list[dict]:
    """n GPUs of a node for each minute offset in ``minutes`` (fields may be per-GPU lists)."""
    rows = []
    for m in minutes:
        for i in range(n):
            row = {"ts": T0 + m * MIN, "node_id": node, "gpu_index": i}
            for k, v in fields.items():
                row[k] = v[i] if isinstance(v, list) else v
            rows.append(row)
    return rows


def node_frame(rows: list[dict]) -> pd.DataFrame:
    d = {"region": "r1", "sku": SKU, "cpu_util_pct": 10.0, "mem_used_pct": 10.0, "disk_read_mbps": 0.0,
         "disk_write_mbps": 0.0, "nvme_util_pct": 0.0, "driver_version": "550", "kernel_version": "6.8", "health": "ok"}
    return conform(pd.DataFrame([{**d, **r} for r in rows], columns=columns("node_telemetry")), "node_telemetry")


_event_seq = iter(range(10**6))


def events(rows: list[dict]) -> pd.DataFrame:
    d = {"scheduler": "slurm", "queue": "batch", "priority": 50, "gpus": 1, "node_ids": None, "exit_state": None,
         "reason": None}
    out = [{**d, "event_id": f"e{next(_event_seq)}", **r} for r in rows]
    return conform(pd.DataFrame(out, columns=columns("scheduler_events")), "scheduler_events")


def metadata(rows: list[dict]) -> pd.DataFrame:
    d = {"submitted_at": T0 - pd.Timedelta(hours=1), "team": "t1", "model_type": "m1", "workload_class": "batch",
         "dataset": "d", "requested_gpus": 1, "requested_mem_gb": 64.0, "container_image": "img",
         "framework_version": "torch-2.13.0", "sla_deadline": pd.NaT}
    return conform(pd.DataFrame([{**d, **r} for r in rows], columns=columns("job_metadata")), "job_metadata")


def runtime(rows: list[dict]) -> pd.DataFrame:
    d = {"samples": 0, "last_step": 0, "data_loader_time_s": np.nan, "grad_sync_time_s": np.nan,
         "checkpoint_time_s": 0.0, "loss": 1.0, "last_checkpoint_step": pd.NA}
    out = []
    for r in rows:
        row = {**d, **r}
        row.setdefault("step_time_s", np.nan)
        out.append(row)
    return conform(pd.DataFrame(out, columns=columns("job_runtime_metrics")), "job_runtime_metrics")


def kpis(frames, *, minutes=5, states=NO_STATES, **kwargs) -> pd.DataFrame:
    out = compute_kpis(frames, states, start=T0, end=T0 + minutes * MIN, **kwargs)
    KpiValues.validate(out, lazy=True)
    return out


def row(out: pd.DataFrame, kpi: str, **dims) -> pd.Series:
    sel = out[(out["kpi"] == kpi) & (out["partition_start"] == dims.pop("p", T0))]
    for k, v in dims.items():
        sel = sel[sel[k] == v]
    assert len(sel) == 1, (kpi, dims, sel)
    return sel.iloc[0]


def inventory(start=T0, end=T0 + 10 * MIN, nodes=(("n1", "r1", SKU, 2),)):
    """One inventory segment (as steps.telemetry.inventory_segments gives them) over [start, end)."""
    return [(start, end, pd.DataFrame(list(nodes), columns=["node_id", "region", "sku", "gpus"]))]


def test_output_contract_every_series_every_partition_and_no_data_rows():
    g = gpu_frame(gpus("n1", 2, range(5), job_id=["j1", None], gpu_util_pct=[90.0, 0.0]))
    out = kpis({"gpu_telemetry": g}, minutes=10, inventory=inventory())
    assert set(out["kpi"]) == {s for k in CATALOG for s in k.series()}
    assert set(out["partition_start"]) == {T0, T0 + 5 * MIN}
    assert not out.duplicated(["partition_start", "kpi", *DIMENSIONS]).any()
    for k in CATALOG:  # dimensions not sliced are '*'
        for col in set(DIMENSIONS) - set(k.dimensions):
            assert (out.loc[out["kpi"].isin(k.series()), col] == "*").all()
    # the second partition has no telemetry: its allocation rate is no_data, value NaN, counts 0
    r = row(out, "allocation_rate", p=T0 + 5 * MIN, region="r1", sku=SKU)
    assert r["status"] == "no_data" and np.isnan(r["value"]) and r["denominator"] == 0
    assert (out.loc[out["status"] != "ok", "value"].isna()).all()
    # without an inventory that knows r1 x SKU, the silent partition has the series' '*' row only: its rows
    # never come from a later partition's GPU rows
    bare = kpis({"gpu_telemetry": g}, minutes=10)
    later = bare[(bare["partition_start"] == T0 + 5 * MIN) & (bare["kpi"] == "allocation_rate")]
    assert later[["region", "sku", "status"]].values.tolist() == [["*", "*", "no_data"]]


def test_a_partitions_rows_are_the_same_computed_alone_or_in_a_longer_window():
    """The sensor computes one partition at a time, a backfill a day: slices seen in a later partition (team t2,
    node n2's SKU) never give an earlier partition rows, and neither do later events."""
    other = "NVIDIA A100-SXM4-80GB"
    g = gpu_frame(gpus("n1", 2, range(5), job_id=["j1", None], gpu_util_pct=[90.0, 0.0])
                  + gpus("n2", 2, range(5, 10), job_id=["j2", "j2"], sku=other, gpu_util_pct=[95.0, 95.0]))
    meta = metadata([{"job_id": "j1"}, {"job_id": "j2", "team": "t2", "submitted_at": T0 + 6 * MIN}])
    ev = events([{"job_id": "j2", "event": "submitted", "ts": T0 + 6 * MIN, "gpus": 2},
                 {"job_id": "j2", "event": "started", "ts": T0 + 6 * MIN, "node_ids": "n2", "gpus": 2},
                 {"job_id": "j1", "event": "ended", "ts": T0 + 8 * MIN, "exit_state": "failed",
                  "reason": "NCCL timeout", "node_ids": "n1", "gpus": 1}])
    frames = {"gpu_telemetry": g, "job_metadata": meta, "scheduler_events": ev}
    inv = inventory(nodes=(("n1", "r1", SKU, 2),))
    both = kpis(frames, minutes=10, inventory=inv)
    for p in (T0, T0 + 5 * MIN):
        seen = {k: v[v["submitted_at" if k == "job_metadata" else "ts"] < p + 5 * MIN] for k, v in frames.items()}
        alone = compute_kpis(seen, NO_STATES, start=p, end=p + 5 * MIN, inventory=inv)  # what its own run reads
        part = both[both["partition_start"] == p].reset_index(drop=True)
        pd.testing.assert_frame_equal(alone.reset_index(drop=True), part)


def test_allocation_rate_counts_schedulable_gpu_minutes():
    g = gpu_frame(
        gpus("n1", 4, [0], job_id=["a", "b", "c", None]) + gpus("n1", 4, [1], job_id=["a", None, None, None])
        + gpus("n2", 2, [0, 1]))
    n = node_frame([{"ts": T0 + m * MIN, "node_id": "n1"} for m in (0, 1)]
                   + [{"ts": T0 + m * MIN, "node_id": "n2", "health": "drained"} for m in (0, 1)])
    r = row(kpis({"gpu_telemetry": g, "node_telemetry": n}), "allocation_rate", region="r1", sku=SKU)
    assert (r["numerator"], r["denominator"], r["value"], r["status"]) == (4, 8, 0.5, "ok")
    n2_ok = node_frame([{"ts": T0 + m * MIN, "node_id": x} for m in (0, 1) for x in ("n1", "n2")])
    assert row(kpis({"gpu_telemetry": g, "node_telemetry": n2_ok}), "allocation_rate", region="r1")["value"] == 4 / 12


def test_job_failure_rate_by_reason_class():
    place = {"node_ids": "n1", "gpus": 1}
    ended = [("completed", None)] * 6 + [
        ("failed", "Xid 79: GPU has fallen off the bus"), ("failed", "NCCL timeout"), ("failed", "CUDA out of memory"),
        ("node_fail", "node failure"), ("cancelled", "cancelled by user")]
    ev = events([{"job_id": f"j{i}", "event": "ended", "ts": T0 + 20 * pd.Timedelta(seconds=1) * i, "exit_state": e,
                  "reason": r, **place} for i, (e, r) in enumerate(ended)]
                + [{"job_id": "never", "event": "ended", "ts": T0 + MIN, "exit_state": "cancelled", "gpus": 0},
                   {"job_id": "ghost", "event": "ended", "ts": T0 + MIN, "exit_state": "failed",
                    "reason": "Python exception: RuntimeError", **place}])
    meta = metadata([{"job_id": f"j{i}"} for i in range(len(ended))])
    g = gpu_frame(gpus("n1", 1, [0]))
    out = kpis({"gpu_telemetry": g, "scheduler_events": ev, "job_metadata": meta})
    total = row(out, "job_failure_rate", region="r1", workload_class="batch")
    assert (total["numerator"], total["denominator"]) == (4, 11)  # cancelled counts as ended, not failed
    expect = {"gpu_xid": 1, "nccl": 1, "oom": 1, "node_fail": 1, "app_error": 0, "timeout": 0}
    for comp, k in expect.items():
        r = row(out, f"job_failure_rate.{comp}", region="r1", workload_class="batch")
        assert r["value"] == pytest.approx(k / 11), comp
    # a job whose metadata never arrived is counted under 'unknown', never dropped; a job that never ran is not counted
    ghost = row(out, "job_failure_rate.app_error", region="r1", workload_class="unknown")
    assert (ghost["numerator"], ghost["denominator"]) == (1, 1)


def test_queue_wait_p95_exact_with_backlog_lookup_and_requeue():
    waits = np.arange(10, 201, 10).astype(float)  # 20 batch jobs
    rows = []
    for i, w in enumerate(waits[:-3]):
        start = T0 + (i + 1) * 10 * pd.Timedelta(seconds=1)
        rows += [{"job_id": f"b{i}", "event": "submitted", "ts": start - pd.Timedelta(seconds=w)},
                 {"job_id": f"b{i}", "event": "started", "ts": start, "node_ids": "n1"}]
    s = pd.Timedelta(seconds=1)
    # b17: submitted before the window (in the backlog); b18: only job_metadata.submitted_at; b19: requeued
    rows += [{"job_id": "b17", "event": "started", "ts": T0 + 200 * s, "node_ids": "n1"},
             {"job_id": "b18", "event": "started", "ts": T0 + 210 * s, "node_ids": "n1"},
             {"job_id": "b19", "event": "submitted", "ts": T0 - 3600 * s},
             {"job_id": "b19", "event": "started", "ts": T0 - 3000 * s},
             {"job_id": "b19", "event": "requeued", "ts": T0 + 20 * s},
             {"job_id": "b19", "event": "started", "ts": T0 + 220 * s, "node_ids": "n1"},
             {"job_id": "nb", "event": "submitted", "ts": T0, "queue": "notebooks"},
             {"job_id": "nb", "event": "started", "ts": T0 + 7 * s, "queue": "notebooks"}]
    ev = events(rows)
    meta = metadata([{"job_id": f"b{i}"} for i in range(18)] + [{"job_id": "nb", "workload_class": "interactive"}])
    lookup = metadata([{"job_id": "b18", "submitted_at": T0 + 210 * s - 190 * s},
                       {"job_id": "b19", "submitted_at": T0 - 3600 * s}])
    pending = pd.DataFrame({"job_id": ["b17"], "submitted_at": [T0 + 200 * s - 180 * s], "gpus": [1]})
    out = kpis({"scheduler_events": ev, "job_metadata": meta}, job_metadata_lookup=lookup, pending=pending)
    batch = row(out, "queue_wait_p95", workload_class="batch")
    assert batch["denominator"] == 20 and np.isnan(batch["numerator"])
    assert batch["value"] == pytest.approx(np.percentile(waits, 95))  # b19 waits 200 s from its requeue
    assert row(out, "queue_wait_p95", workload_class="interactive")["value"] == 7.0


def test_group_quantile_equals_series_quantile_bit_for_bit():
    """queue_wait_p95 takes every group's quantile in one sort: it must return Series.quantile's floats exactly
    (ties, NaN waits, single-value and all-NaN groups, values of very different magnitudes)."""
    rng = np.random.default_rng(3)
    for trial in range(60):
        groups, rows = int(rng.integers(1, 25)), int(rng.integers(1, 300))
        codes = rng.integers(0, groups, rows)
        values = rng.exponential(100.0, rows) * rng.choice([1.0, 1e-3, 1e5], rows)
        values[rng.random(rows) < 0.15] = np.nan
        if trial % 3 == 0:
            values = np.round(values)  # ties
        expected = (pd.Series(values).groupby(codes)
                    .agg(lambda w: w.quantile(0.95) if w.notna().any() else np.nan).reindex(range(groups)).to_numpy())
        got = _group_quantile(codes, values, groups, 0.95)
        assert np.array_equal(got, expected, equal_nan=True)


def test_sla_attainment_counts_each_outcome_once():
    s = pd.Timedelta(seconds=1)
    dl = T0 + 120 * s
    meta = metadata([{"job_id": j, "sla_deadline": dl} for j in ("met", "late", "failed", "running", "done_before")]
                    + [{"job_id": "no_sla"}])
    ev = events([
        {"job_id": "met", "event": "ended", "ts": T0 + 60 * s, "exit_state": "completed", "node_ids": "n1"},
        {"job_id": "late", "event": "ended", "ts": T0 + 200 * s, "exit_state": "completed", "node_ids": "n1"},
        {"job_id": "failed", "event": "ended", "ts": T0 + 30 * s, "exit_state": "failed", "node_ids": "n1"},
        {"job_id": "no_sla", "event": "ended", "ts": T0 + 30 * s, "exit_state": "completed", "node_ids": "n1"},
    ])
    g = gpu_frame(gpus("n1", 1, range(5), job_id="running") + gpus("n2", 1, range(4), job_id="late"))
    out = kpis({"gpu_telemetry": g, "scheduler_events": ev, "job_metadata": meta})
    r = row(out, "sla_attainment", workload_class="batch")
    # met: 'met'; missed: 'failed' (ended before the deadline, not completed), 'late' and 'running' (alive at the
    # deadline, counted once there); 'done_before' ended before the window and was counted then
    assert (r["numerator"], r["denominator"]) == (1, 4)


def _step_frames(loader=(0.3, 0.1)):
    g = gpu_frame(gpus("n1", 2, [0, 1], job_id="j", gpu_util_pct=95.0, tensor_active=0.3, power_w=600.0))
    rt = runtime([
        {"ts": T0, "job_id": "j", "steps": 50, "step_time_s": 1.2, "data_loader_time_s": loader[0], "grad_sync_time_s": 0.2},
        {"ts": T0 + MIN, "job_id": "j", "steps": 40, "step_time_s": 1.5, "data_loader_time_s": loader[1],
         "grad_sync_time_s": 0.5, "checkpoint_time_s": 6.0},
    ])
    meta = metadata([{"job_id": "j", "model_type": "m1", "requested_gpus": 2}])
    return {"gpu_telemetry": g, "job_runtime_metrics": rt, "job_metadata": meta}


BASELINE = pd.DataFrame({"model_type": ["m1"], "sku": [SKU], "gpus": [2], "step_time_s": [1.0],
                         "data_loader_time_s": [0.1], "grad_sync_time_s": [0.2]})


def test_step_time_inflation_components_exact_and_add_up():
    out = kpis(_step_frames(), step_baseline=BASELINE)
    dims = {"region": "r1", "sku": SKU, "workload_class": "batch"}
    den = 2 * (50 * 1.0 + 40 * 1.0)  # baseline GPU-seconds of the work done
    expect = {"data_io": 2 * 50 * 0.2, "network": 2 * 40 * 0.3, "compute": 2 * 40 * 0.2, "checkpoint": 2 * 6.0}
    for comp, num in expect.items():
        r = row(out, f"step_time_inflation.{comp}", **dims)
        assert (r["numerator"], r["denominator"]) == (pytest.approx(num), pytest.approx(den)), comp
    total = row(out, "step_time_inflation", **dims)
    assert total["value"] == pytest.approx(sum(expect.values()) / den) == pytest.approx(0.4)


def test_step_time_inflation_degrades_without_baseline_or_loader_time():
    dims = {"region": "r1", "sku": SKU, "workload_class": "batch"}
    out = kpis(_step_frames())  # no baseline
    for s in ("step_time_inflation", "step_time_inflation.data_io", "step_time_inflation.compute"):
        r = row(out, s, **dims)
        assert r["status"] == "degraded" and np.isnan(r["value"])
    out = kpis(_step_frames(loader=(np.nan, np.nan)), step_baseline=BASELINE)
    assert row(out, "step_time_inflation.data_io", **dims)["status"] == "degraded"
    assert row(out, "step_time_inflation.compute", **dims)["status"] == "degraded"
    assert row(out, "step_time_inflation.network", **dims)["value"] == pytest.approx(24 / 180)


def _frag_nodes(minutes=range(5)):
    return gpu_frame(gpus("n1", 8, minutes, job_id=["x"] * 7 + [None])  # 1 free
                     + gpus("n2", 8, minutes, job_id=["y"] * 5 + [None] * 3)  # 3 free
                     + gpus("n3", 8, minutes))  # 8 free: a whole node


def test_fragmentation_counts_free_gpus_that_cannot_host_the_smallest_blocked_job():
    g = _frag_nodes()
    meta = metadata([{"job_id": "big", "requested_gpus": 4}, {"job_id": "dist", "workload_class": "distributed"},
                     {"job_id": "late", "requested_gpus": 2}])
    # 'big' (4 GPUs) blocked since before the window; 'dist' needs 16 GPUs (two whole nodes); 'late' is
    # submitted inside the window and not blocked (pending < 3 minutes) before the partition ends
    assert PENDING_GRACE == 3 * MIN
    pending = pd.DataFrame({"job_id": ["big", "dist"], "submitted_at": [T0 - 10 * MIN, T0 - MIN],
                            "gpus": [4, 16]})
    ev = events([{"job_id": "late", "event": "submitted", "ts": T0 + 3 * MIN, "gpus": 2}])
    out = kpis({"gpu_telemetry": g, "scheduler_events": ev, "job_metadata": meta}, pending=pending)
    batch = row(out, "fragmentation", region="r1", sku=SKU, workload_class="batch")
    assert (batch["numerator"], batch["denominator"], batch["value"]) == (4 * 5, 5, 4.0)  # n1 + n2 each minute
    dist = row(out, "fragmentation", region="r1", sku=SKU, workload_class="distributed")
    assert dist["value"] == pytest.approx(4 * 3 / 5)  # blocked from T0+2 min (3-minute grace)
    assert row(out, "fragmentation", region="r1", sku=SKU, workload_class="interactive")["value"] == 0.0
    # a blocked single-GPU job fits anywhere: nothing is stranded (policy, not fragmentation)
    one = pd.concat([pending, pd.DataFrame({"job_id": ["small"], "submitted_at": [T0 - 10 * MIN], "gpus": [1]})])
    out = kpis({"gpu_telemetry": g, "job_metadata": metadata([{"job_id": "small"}, {"job_id": "big"}])}, pending=one)
    assert row(out, "fragmentation", region="r1", sku=SKU, workload_class="batch")["value"] == 0.0
    # without the backlog the KPI cannot tell: degraded, never a false zero
    out = kpis({"gpu_telemetry": g})
    r = row(out, "fragmentation", region="r1", sku=SKU, workload_class="batch")
    assert r["status"] == "degraded" and np.isnan(r["value"])


def test_pending_jobs_carries_the_backlog():
    ev = events([{"job_id": "a", "event": "submitted", "ts": T0 - 10 * MIN, "gpus": 4},
                 {"job_id": "b", "event": "submitted", "ts": T0 - 9 * MIN, "gpus": 2},
                 {"job_id": "b", "event": "started", "ts": T0 - 2 * MIN, "gpus": 2},
                 {"job_id": "c", "event": "submitted", "ts": T0 - 8 * MIN},
                 {"job_id": "c", "event": "ended", "ts": T0 - 7 * MIN, "exit_state": "cancelled", "gpus": 0}])
    back = pending_jobs(ev, T0)
    assert back["job_id"].tolist() == ["a"] and back["gpus"].tolist() == [4]
    later = pending_jobs(events([{"job_id": "a", "event": "started", "ts": T0 + MIN, "gpus": 4},
                                 {"job_id": "d", "event": "submitted", "ts": T0 + MIN, "gpus": 1}]), T0 + 5 * MIN, back)
    assert later["job_id"].tolist() == ["d"]
    # a backlog read back from storage (string ids, microsecond timestamps) is the same backlog
    stored = back.astype({"job_id": "string", "submitted_at": "datetime64[us, UTC]", "gpus": "int64"})
    assert pending_jobs(events([]), T0 + MIN, stored)["job_id"].tolist() == ["a"]
    g = _frag_nodes()
    assert row(kpis({"gpu_telemetry": g}, pending=stored), "fragmentation", region="r1", sku=SKU,
               workload_class="unknown")["value"] == 4.0  # 'a' has no metadata: its class is unknown


def test_hw_fault_rate_exact_and_degraded_when_ecc_and_throttle_fields_are_off():
    g = gpu_frame(gpus("n1", 10, [0], xid=[79] + [0] * 9, ecc_dbe_delta=[0, 2] + [0] * 8,
                       throttle_reasons=[0, 0, 0x40, 0x40 | 0x20, 0x4] + [1] * 5))
    out = kpis({"gpu_telemetry": g})
    got = {s: row(out, f"hw_fault_rate.{s}", region="r1", sku=SKU)["value"] for s in ("xid", "dbe", "throttled")}
    assert got == {"xid": 0.1, "dbe": 0.1, "throttled": 0.2}  # the software power cap (0x4) is not a fault
    off = g.assign(ecc_dbe_delta=pd.array([pd.NA] * 10, dtype="Int64"), ecc_sbe_delta=pd.array([pd.NA] * 10, dtype="Int64"),
                   throttle_reasons=pd.array([pd.NA] * 10, dtype="Int64"))
    out = kpis({"gpu_telemetry": off})
    for s in ("dbe", "throttled"):
        r = row(out, f"hw_fault_rate.{s}", region="r1", sku=SKU)
        assert r["status"] == "degraded" and np.isnan(r["value"]), s
    assert row(out, "hw_fault_rate.xid", region="r1", sku=SKU)["value"] == 0.1


def test_cost_per_productive_gpu_hour_exact():
    states = pd.DataFrame({"partition_start": [T0] * 3, "region": "r1", "sku": SKU, "workload_class": "batch",
                           "team": "t1", "state": ["productive", "idle_no_demand", "slowdown_data_io"],
                           "gpu_minutes": [30.0, 20.0, 10.0]})
    cost = conform(pd.DataFrame({"date": [T0.date()], "region": ["r1"], "sku": [SKU], "capacity_gpus": [10],
                                 "reserved_gpus": [5], "reserved_gpu_hour_usd": [2.0], "on_demand_gpu_hour_usd": [4.0],
                                 "on_demand_gpu_hours": [12.0]}), "cost_capacity")
    # blended: (5 x 24 x 2 + 12 x 4) / (10 x 24) = 1.2 USD per paid GPU-hour; 1 paid hour, 0.5 productive
    r = row(kpis({}, states=states, cost=cost), "cost_per_productive_gpu_hour", region="r1", sku=SKU)
    assert (r["numerator"], r["denominator"], r["value"]) == (pytest.approx(1.2), 0.5, pytest.approx(2.4))
    r = row(kpis({}, states=states), "cost_per_productive_gpu_hour", region="r1", sku=SKU)
    assert r["status"] == "degraded" and np.isnan(r["value"])


def test_inventory_excess_counts_gpus_seen_beyond_finances_capacity():
    """12 distinct GPUs report (4 of them copies under new UUIDs on a phantom node) where Finance installed 8:
    4 beyond, a third of those seen; none beyond at capacity; degraded (not zero) where Finance has no row."""
    def cost(gpus, region="r1"):
        return conform(pd.DataFrame({"date": [T0.date()], "region": [region], "sku": [SKU], "capacity_gpus": [gpus],
                                     "reserved_gpus": [gpus], "reserved_gpu_hour_usd": [2.0],
                                     "on_demand_gpu_hour_usd": [4.0], "on_demand_gpu_hours": [0.0]}), "cost_capacity")

    gpu = gpu_frame(gpus("n1", 4, range(5)) + gpus("n2", 4, range(5)) + gpus("n1-copy", 4, range(5)))
    r = row(kpis({"gpu_telemetry": gpu}, cost=cost(8)), "inventory_excess", region="r1", sku=SKU)
    assert (r["numerator"], r["denominator"], r["status"]) == (4.0, 12.0, "ok") and r["value"] == pytest.approx(1 / 3)
    r = row(kpis({"gpu_telemetry": gpu}, cost=cost(12)), "inventory_excess", region="r1", sku=SKU)
    assert (r["numerator"], r["value"]) == (0.0, 0.0)
    r = row(kpis({"gpu_telemetry": gpu}, cost=cost(8, region="r2")), "inventory_excess", region="r1", sku=SKU)
    assert r["status"] == "degraded" and np.isnan(r["value"])


def _gaming_frames(profiling=True, power=True):
    act = (lambda v: v) if profiling else (lambda v: np.nan)
    pw = (lambda v: v) if power else (lambda v: np.nan)
    g = gpu_frame(
        gpus("n1", 4, [0, 1], job_id="dummy", gpu_util_pct=100.0, tensor_active=act(0.0), sm_active=act(0.1), power_w=pw(150.0))
        + gpus("n2", 4, [0, 1], job_id="train", gpu_util_pct=95.0, tensor_active=act(0.3), sm_active=act(0.7), power_w=pw(600.0))
        + gpus("n3", 1, [0, 1], job_id="orphan", gpu_util_pct=90.0, tensor_active=act(0.3), sm_active=act(0.7), power_w=pw(590.0))
        + gpus("n4", 1, [0, 1], job_id="nb", gpu_util_pct=80.0, tensor_active=act(0.1), sm_active=act(0.5), power_w=pw(300.0)))
    rt = runtime([{"ts": T0 + m * MIN, "job_id": "train", "steps": 10, "step_time_s": 0.5} for m in (0, 1)])
    meta = metadata([{"job_id": "dummy", "team": "gamer"}, {"job_id": "train", "team": "honest"},
                     {"job_id": "nb", "team": "notebooks", "workload_class": "interactive"}])
    return {"gpu_telemetry": g, "job_runtime_metrics": rt, "job_metadata": meta}


def test_gaming_guardrails_by_team():
    out = kpis(_gaming_frames())
    bwp = {t: row(out, "gaming_guardrails.busy_without_progress", team=t)["value"] for t in ("gamer", "honest", "unknown")}
    assert bwp == {"gamer": 1.0, "honest": 0.0, "unknown": 1.0}  # no metadata: 'unknown', never dropped
    assert not ((out["kpi"] == "gaming_guardrails.busy_without_progress") & (out["team"] == "notebooks")).any()
    div = {t: row(out, "gaming_guardrails.util_power_divergence", team=t)["value"]
           for t in ("gamer", "honest", "unknown", "notebooks")}
    assert div == {"gamer": 1.0, "honest": 0.0, "unknown": 0.0, "notebooks": 0.0}


def test_divergence_is_degraded_not_zero_without_profiling_fields():
    out = kpis(_gaming_frames(profiling=False))
    div = out[out["kpi"] == "gaming_guardrails.util_power_divergence"]
    assert len(div) == 4 and (div["status"] == "degraded").all() and div["value"].isna().all()
    assert row(out, "gaming_guardrails.busy_without_progress", team="gamer")["value"] == 1.0


def test_divergence_is_degraded_not_zero_without_power():
    # a utilisation-only collector (Philly's nvidia-smi log) has no power: "low power" cannot be told
    out = kpis(_gaming_frames(power=False))
    div = out[out["kpi"] == "gaming_guardrails.util_power_divergence"]
    assert len(div) == 4 and (div["status"] == "degraded").all() and div["value"].isna().all()
    assert row(out, "gaming_guardrails.busy_without_progress", team="gamer")["value"] == 1.0


def network_frame(rows: list[dict]) -> pd.DataFrame:
    d = {"region": "r1", "link_id": "mlx5_0", "rx_gbps": 100.0, "tx_gbps": 100.0, "packet_loss_pct": 0.0,
         "retransmits": 0, "latency_us": 2.0, "link_up": True}
    return conform(pd.DataFrame([{**d, **r} for r in rows], columns=columns("network_telemetry")), "network_telemetry")


def test_fabric_series_without_retransmits_or_latency_are_degraded_not_zero():
    # switch-port counters: no retransmits, no latency; packet loss and port state still judge the fabric
    links = [{"ts": T0 + m * MIN, "node_id": f"n{i}", "link_id": "mlx5_0", "retransmits": None, "latency_us": None,
              "packet_loss_pct": 0.4 if i == 0 else 0.0, "link_up": i != 3} for m in range(5) for i in range(4)]
    nodes = node_frame([{"ts": T0 + m * MIN, "node_id": f"n{i}"} for m in range(5) for i in range(4)])
    out = kpis({"network_telemetry": network_frame(links), "node_telemetry": nodes})
    r = row(out, "comm_health.retransmits", region="r1", sku=SKU)
    assert r["status"] == "degraded" and np.isnan(r["value"])
    r = row(out, "comm_health.packet_loss", region="r1", sku=SKU)
    assert (r["status"], r["value"]) == ("ok", pytest.approx(0.1))
    assert row(out, "comm_health.link_down", region="r1", sku=SKU)["value"] == pytest.approx(0.25)


def test_retransmits_are_averaged_over_the_link_minutes_that_report_them():
    links = [{"ts": T0 + m * MIN, "node_id": f"n{i}", "retransmits": None if i == 3 else 10 * (i + 1)}
             for m in range(5) for i in range(4)]
    nodes = node_frame([{"ts": T0 + m * MIN, "node_id": f"n{i}"} for m in range(5) for i in range(4)])
    r = row(kpis({"network_telemetry": network_frame(links), "node_telemetry": nodes}), "comm_health.retransmits",
            region="r1", sku=SKU)
    assert (r["status"], r["numerator"], r["denominator"], r["value"]) == ("ok", 5 * 60, 15, 20.0)


def test_fabric_series_are_summed_per_region_and_node_sku_the_node_telemetry_names():
    # links of two regions and two SKUs, over two partitions; a node the node telemetry never names is of an
    # "unknown" SKU; a link without a node id too (the series are grouped on codes of the names: the same groups)
    nodes = node_frame([{"ts": T0 + m * MIN, "node_id": n, "region": r, "sku": k}
                        for m in range(10) for n, r, k in (("n0", "r1", "A"), ("n1", "r1", "A"), ("n2", "r2", "B"))])
    where = {"n0": "r1", "n1": "r1", "n2": "r2", "n9": "r2", None: "r2"}
    links = [{"ts": T0 + m * MIN, "node_id": n, "region": where[n], "packet_loss_pct": float(i + 1) + m / 10,
              "link_up": not (n == "n1" and m % 2)} for m in range(10) for i, n in enumerate(where)]
    out = kpis({"network_telemetry": network_frame(links), "node_telemetry": nodes}, minutes=10)
    loss = out[out["kpi"] == "comm_health.packet_loss"]
    got = {(r.partition_start, r.region, r.sku): (r.numerator, r.denominator) for r in loss.itertuples()}
    want = {}
    for link in links:
        sku = {"n0": "A", "n1": "A", "n2": "B"}.get(link["node_id"], "unknown")
        key = (link["ts"].floor("5min"), link["region"], sku)
        num, den = want.get(key, (0.0, 0))
        want[key] = (num + link["packet_loss_pct"], den + 1)
    assert got.keys() == want.keys()
    for key, (num, den) in want.items():
        assert got[key][0] == pytest.approx(num) and got[key][1] == den
    down = out[out["kpi"] == "comm_health.link_down"]
    assert down.loc[down["sku"] == "A", "numerator"].tolist() == [2.0, 3.0]  # n1's odd minutes: 1, 3 | 5, 7, 9


# --- simulated incidents ---------------------------------------------------------------------------

S, E = T0, T0 + pd.Timedelta(hours=1)
HISTORY = pd.Timedelta(hours=2)
META_LOOKBACK = pd.Timedelta(days=4)
V100 = "Tesla V100-SXM3-32GB"


def _split(tables, at):
    before, after = {}, {}
    for name, df in tables.items():
        col = "submitted_at" if name == "job_metadata" else "ts"
        before[name], after[name] = df[df[col] < at], df[df[col] >= at]
    return before, after


class Sim:
    """Memoized runs for one seed: scenario -> the incident hour's frames, its history and kpi_values.

    The job metadata submitted before the history (the 4-day lookup) is generated once: incidents start
    at S, so it is the same in every scenario here.
    """

    def __init__(self):
        self._cache = {}
        self._old_meta = None

    def __call__(self, kind=None, scope=None, cluster="default", **extra):
        key = (kind, repr(scope), repr(cluster), repr(extra))
        if key not in self._cache:
            incidents = [{"kind": kind, "start": S.isoformat(), "end": E.isoformat(), "scope": scope, **extra}] if kind else []
            scen = load_scenario({"seed": 7, "start": "2026-11-02T00:00:00Z", "end": "2026-11-04T00:00:00Z",
                                  "cluster": cluster, "incidents": incidents})
            hist, frames = _split(Window(scen, S - HISTORY, E).tables(), S)
            if self._old_meta is None:
                self._old_meta = Window(scen, S - META_LOOKBACK, S - HISTORY).table("job_metadata")
            lookup = pd.concat([self._old_meta, hist["job_metadata"]], ignore_index=True)
            baseline = step_baseline(workload_step_stats(hist, meta=lookup, maintenance=None), None)
            out = compute_kpis(frames, NO_STATES, start=S, end=E, job_metadata_lookup=lookup, step_baseline=baseline,
                               pending=pending_jobs(hist["scheduler_events"], S))
            self._cache[key] = Run(scen, hist, frames, lookup, baseline, out)
        return self._cache[key]


@dataclass
class Run:
    scen: object
    hist: dict
    frames: dict
    lookup: pd.DataFrame
    baseline: pd.DataFrame
    out: pd.DataFrame


@pytest.fixture(scope="module")
def sim():
    return Sim()


def pooled(out, kpi, by):
    """Ratio of summed numerators to summed denominators over the window's ok rows, per ``by``."""
    o = out[(out["kpi"] == kpi) & (out["status"] == "ok")]
    g = o.groupby(by)[["numerator", "denominator"]].sum()
    return g["numerator"] / g["denominator"]


def mean_value(out, kpi, **dims):
    o = out[(out["kpi"] == kpi) & (out["status"] == "ok")]
    for k, v in dims.items():
        o = o[o[k] == v]
    return o["value"].mean()


def test_simulated_window_validates_and_is_partition_independent(sim):
    run = sim()
    out = run.out
    KpiValues.validate(out, lazy=True)
    assert set(out["partition_start"]) == set(pd.date_range(S, E, freq="5min", inclusive="left"))
    # the first six partitions computed one at a time, each with what came before it as history
    lookup, events_so_far = run.lookup, run.hist["scheduler_events"]
    key = ["partition_start", "kpi", *DIMENSIONS]
    for p in pd.date_range(S, S + pd.Timedelta(minutes=30), freq="5min", inclusive="left"):
        part = {k: v[(v[c] >= p) & (v[c] < p + 5 * MIN)]
                for k, v in run.frames.items() for c in ["submitted_at" if k == "job_metadata" else "ts"]}
        one = compute_kpis(part, NO_STATES, start=p, end=p + 5 * MIN, job_metadata_lookup=lookup,
                           step_baseline=run.baseline, pending=pending_jobs(events_so_far, p))
        both = one.merge(out, on=key, suffixes=("", "_w"), how="left")
        assert both["status_w"].notna().all(), both.loc[both["status_w"].isna(), key + ["status", "value"]].to_string()
        assert (both["status"] == both["status_w"]).all()
        np.testing.assert_allclose(both["value"].to_numpy(float), both["value_w"].to_numpy(float), rtol=1e-9)
        lookup = pd.concat([lookup, part["job_metadata"]], ignore_index=True)
        events_so_far = pd.concat([events_so_far, part["scheduler_events"]], ignore_index=True)


def test_dummy_workload_raises_utilization_and_the_guardrails_name_the_team(sim):
    scope = {"region": "us-east", "team": "ml-research"}
    quiet_run, run = sim(), sim("dummy_workload", scope, magnitude=0.5)
    quiet_frames, quiet, frames, out = quiet_run.frames, quiet_run.out, run.frames, run.out
    util = lambda f: f["gpu_telemetry"].loc[f["gpu_telemetry"]["region"] == "us-east", "gpu_util_pct"].mean()  # noqa: E731
    assert util(frames) > util(quiet_frames) + 2  # a utilization dashboard sees more work
    bwp = pooled(out, "gaming_guardrails.busy_without_progress", "team")
    assert bwp.idxmax() == "ml-research" and bwp["ml-research"] > 0.3
    assert bwp.drop("ml-research").max() < 0.05
    assert pooled(quiet, "gaming_guardrails.busy_without_progress", "team").max() < 0.05
    div = pooled(out, "gaming_guardrails.util_power_divergence", "team")
    assert div.idxmax() == "ml-research" and div["ml-research"] > 0.3
    assert pooled(quiet, "gaming_guardrails.util_power_divergence", "team").max() < 0.05


def test_without_profiling_fields_the_divergence_guardrail_is_degraded_never_zero(sim):
    out = sim("dummy_workload", {"region": "us-east", "team": "ml-research"}, cluster={"profiling_fields": False},
              magnitude=0.5).out
    div = out[out["kpi"] == "gaming_guardrails.util_power_divergence"]
    assert len(div) and set(div["status"]) <= {"degraded", "no_data"} and div["value"].isna().all()
    assert (div.loc[div["team"] == "ml-research", "status"] == "degraded").all()
    bwp = pooled(out, "gaming_guardrails.busy_without_progress", "team")  # needs no profiling field
    assert bwp.idxmax() == "ml-research"


def test_driver_regression_raises_job_failure_rate_on_the_cohort_region(sim):
    quiet = sim().out
    out = sim("driver_regression", {"region": "us-east", "nodes": 8}).out
    q, f = pooled(quiet, "job_failure_rate", "region"), pooled(out, "job_failure_rate", "region")
    assert f["us-east"] > 2 * q["us-east"]
    assert f["eu-west"] == pytest.approx(q["eu-west"])  # the other region is untouched
    assert pooled(out, "job_failure_rate.gpu_xid", "region")["us-east"] > 10 * max(
        pooled(quiet, "job_failure_rate.gpu_xid", "region")["us-east"], 1e-3)


# A priority change holds every batch job of the region; fragmentation only its multi-GPU share, and those until the
# pieces coalesce, so they start (and their waits count) largely after the window: a rise, not the same factor.
@pytest.mark.parametrize("kind,factor", [("fragmentation", 1.0), ("priority_change", 1.4)])
def test_scheduling_incidents_raise_batch_queue_wait_p95(sim, kind, factor):
    quiet = sim().out
    out = sim(kind, {"region": "us-east"}).out
    assert mean_value(out, "queue_wait_p95", workload_class="batch") > factor * mean_value(
        quiet, "queue_wait_p95", workload_class="batch")
    assert mean_value(out, "queue_wait_p95", workload_class="interactive") == pytest.approx(
        mean_value(quiet, "queue_wait_p95", workload_class="interactive"))


def test_priority_change_blocks_single_gpu_jobs_too_so_nothing_counts_as_fragmentation(sim):
    frag = lambda o: o[(o["kpi"] == "fragmentation") & (o["workload_class"] == "batch")]["value"].mean()  # noqa: E731
    fragmented = frag(sim("fragmentation", {"region": "us-east"}).out)
    held_back = frag(sim("priority_change", {"region": "us-east"}).out)
    assert fragmented > 0.5  # GPUs stranded on average while multi-GPU jobs wait
    assert held_back < 0.2 * fragmented


def test_io_bottleneck_raises_data_io_step_time_inflation(sim):
    quiet = sim().out
    out = sim("io_bottleneck", {"region": "us-east", "nodes": 3}).out
    q, f = pooled(quiet, "step_time_inflation.data_io", "region"), pooled(out, "step_time_inflation.data_io", "region")
    assert f["us-east"] > 0.02 and f["us-east"] > 20 * abs(q["us-east"])
    assert f["eu-west"] == pytest.approx(q["eu-west"])
    # the other components do not take the blame
    assert pooled(out, "step_time_inflation.network", "region")["us-east"] < 0.01


def test_network_degradation_raises_grad_sync_share_and_retransmits(sim):
    quiet = sim().out
    out = sim("network_degradation", {"region": "us-east", "sku": V100, "nodes": 4}).out
    by = ["region", "sku"]
    gs_q, gs = pooled(quiet, "comm_health.grad_sync_share", by), pooled(out, "comm_health.grad_sync_share", by)
    assert gs[("us-east", V100)] > gs_q[("us-east", V100)] + 0.02
    assert gs[("eu-west", V100)] == pytest.approx(gs_q[("eu-west", V100)])
    rtx_q, rtx = pooled(quiet, "comm_health.retransmits", by), pooled(out, "comm_health.retransmits", by)
    assert rtx[("us-east", V100)] > 100 * rtx_q[("us-east", V100)]
    assert pooled(out, "comm_health.packet_loss", by)[("us-east", V100)] > 10 * pooled(
        quiet, "comm_health.packet_loss", by)[("us-east", V100)]
    net = pooled(out, "step_time_inflation.network", by)
    assert net[("us-east", V100)] > 0.01 > abs(pooled(quiet, "step_time_inflation.network", by)[("us-east", V100)])


def test_thermal_throttle_raises_throttled_gpu_minutes(sim):
    quiet = sim().out
    out = sim("thermal_throttle", {"region": "us-east", "nodes": 2}).out
    thr = out[(out["kpi"] == "hw_fault_rate.throttled") & (out["region"] == "us-east")]
    assert thr["numerator"].sum() >= 2 * 8 * 60 * 0.9  # at least ~2 H100-node-hours (or more on V100 nodes)
    assert quiet.loc[quiet["kpi"] == "hw_fault_rate.throttled", "numerator"].sum() == 0
    assert (out.loc[(out["kpi"] == "hw_fault_rate.throttled") & (out["region"] == "eu-west"), "numerator"] == 0).all()
    assert pooled(out, "step_time_inflation.compute", "region")["us-east"] > pooled(
        quiet, "step_time_inflation.compute", "region")["us-east"] + 0.005
