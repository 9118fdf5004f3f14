"""Telemetry beyond or outside Finance's installed capacity is a ticket naming it, never paid silently, never a
page (gpu_health.diagnosis.inventory). Small hand-built partitions: region r1, two nodes of 8 GPUs
(test_detect_evidence's helpers), Finance pricing 16 of them."""

import dataclasses

import pandas as pd

from gpu_health.contracts.models import conform
from gpu_health.diagnosis.detect import detect
from gpu_health_tests.test_detect_evidence import SKU, context, gpu_rows


def capacity(region="r1", gpus=16) -> pd.DataFrame:
    return conform(pd.DataFrame([{"date": pd.Timestamp("2026-11-03").date(), "region": region, "sku": SKU,
                                  "capacity_gpus": gpus, "reserved_gpus": gpus, "reserved_gpu_hour_usd": 2.0,
                                  "on_demand_gpu_hour_usd": 4.0, "on_demand_gpu_hours": 0.0}]), "cost_capacity")


def findings(gpu, cap):
    ctx = dataclasses.replace(context(gpu), capacity=cap)
    return [f for f in detect(ctx) if f.family == "missing_data" and f.key.split("|")[0] in
            ("inventory_excess", "unpriced", "gpu_identity")]


def copied(gpu: pd.DataFrame, copies: int) -> pd.DataFrame:
    """``gpu`` plus ``copies`` copies of its rows under new node names and GPU UUIDs (phantom rows)."""
    parts = [gpu] + [gpu.assign(node_id=gpu["node_id"].astype(str) + f"-copy{k}",
                                gpu_uuid=gpu["gpu_uuid"].astype(str) + f"-copy{k}") for k in range(copies)]
    return pd.concat(parts, ignore_index=True).astype(gpu.dtypes.to_dict())


def test_gpus_within_finances_capacity_raise_nothing():
    assert findings(gpu_rows(), capacity()) == []


def test_phantom_rows_beyond_capacity_are_a_ticket_naming_region_sku_nodes_and_count():
    found = findings(copied(gpu_rows(), 9), capacity())
    assert [f.key for f in found] == [f"inventory_excess|r1|{SKU}"]
    f = found[0]
    assert f.severity == "ticket" and f.region == "r1"
    assert (f.baseline, f.value) == (16.0, 160.0)
    assert "144 beyond" in f.evidence and SKU in f.evidence
    assert f.nodes and set(f.nodes) <= {f"n{i}-copy{k}" for i in (1, 2) for k in range(9)} | {"n1", "n2"}


def test_a_region_without_a_cost_row_is_a_ticket_not_zero_dollars():
    found = findings(gpu_rows(), capacity(region="r2"))
    assert [f.key for f in found] == [f"unpriced|r1|{SKU}"]
    assert found[0].severity == "ticket" and "no price" in found[0].summary and "not $0" in found[0].evidence


def test_a_region_spelled_with_other_case_names_the_priced_spelling():
    gpu = gpu_rows()
    gpu["region"] = gpu["region"].astype(object).replace("r1", "R1").astype(gpu["region"].dtype)
    found = findings(gpu, capacity())
    assert [f.key for f in found] == [f"unpriced|R1|{SKU}"]
    assert "Finance prices 'r1'" in found[0].evidence


def test_a_gpu_uuid_on_two_nodes_in_one_minute_is_an_identity_ticket():
    gpu = gpu_rows()
    n2 = (gpu["node_id"] == "n2").to_numpy()
    gpu.loc[n2, "gpu_uuid"] = gpu.loc[n2, "gpu_uuid"].astype(str).str.replace("n2", "n1").to_numpy()
    found = findings(gpu, capacity())
    assert [f.key for f in found] == ["gpu_identity|r1"]
    assert found[0].nodes == ["n1", "n2"] and found[0].severity == "ticket"
