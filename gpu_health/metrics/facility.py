"""Facility KPIs: PUE from energy, rack power headroom, GPUs throttled for power or heat.

Pure pandas. Two outputs:

* **rack_facility** (a derived table, one row per rack per 5-minute partition): the rack's energy, peak draw
  against its budget, its headroom below the continuous-load limit, its hottest inlet, its failed PSUs, and its
  GPUs throttled for power and for heat (the GPUs of the nodes the rack row names, from gpu_telemetry).
* **KPI rows** for :mod:`gpu_health.metrics.kpis` (``pue``, ``rack_power_headroom``, ``gpus_throttled``; the
  catalog entries are in :mod:`gpu_health.metrics.kpi_catalog`).

Rules, each with its reason:

* **PUE is energy over energy**: the sum over the partition's minutes of the hall's draw over the sum of the
  racks' draw (each minute's kW x 1/60 h). One instant's ratio is not PUE (The Green Grid's PUE definition is
  annual energy; a cooling plant cycles over minutes, so an instant can read anywhere), and summed numerators and
  denominators roll up to any period as energy.
* **Headroom is against 80 % of the rating**: ``power_budget_kw`` is the rack's provisioned power (its breaker
  rating). NEC 210.20(A) / 215.3 allow a continuous load (3 hours or more, which a training rack is) of at most
  80 % of the overcurrent device's rating, so the usable budget is 0.8 x the rating and headroom = 0.8 x rating -
  peak draw. A rack past it trips its breaker on a sustained load, and a rack near it cannot take another node.
* **Throttle bits are DCGM's** clock-event reasons (``DCGM_FI_DEV_CLOCKS_EVENT_REASONS``): power = SW power cap
  (0x4) or HW power brake (0x80); heat = SW thermal (0x20) or HW thermal (0x40). A GPU counts once per partition
  if any of its minutes carried the bit. A GPU whose exporter has no bitmask (null) is not counted either way:
  the rack's count is then null when none of its GPUs report it (missing data is never a zero).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from gpu_health.constants import PARTITION, PARTITION_FREQ, POWER_BITS, THERMAL_BITS
from gpu_health.contracts.derived import RackFacility

CONTINUOUS_LOAD_SHARE = 0.8  # NEC 210.20(A): a continuous load at most 80 % of the circuit's rating


def node_racks(facility: pd.DataFrame) -> pd.DataFrame:
    """node_id -> region, rack_id, from the rack rows' node lists (the latest row of each rack wins)."""
    if facility is None or facility.empty:
        return pd.DataFrame(columns=["node_id", "region", "rack_id"])
    last = facility.sort_values("ts").drop_duplicates(["region", "rack_id"], keep="last")
    rows = [(n.strip(), r, k) for r, k, ns in zip(last["region"].astype(object), last["rack_id"].astype(object),
                                                   last["node_ids"].astype(object)) for n in str(ns).split(",") if n.strip()]
    return pd.DataFrame(rows, columns=["node_id", "region", "rack_id"]).drop_duplicates("node_id", keep="last")


def gpu_throttle_by_rack(gpu: pd.DataFrame, racks: pd.DataFrame) -> pd.DataFrame:
    """Per partition x region x rack: GPUs reporting, and GPUs with a power / thermal bit in any minute (null when
    none of the rack's GPUs report the bitmask)."""
    cols = ["p", "region", "rack_id", "gpus", "gpus_throttled_power", "gpus_throttled_thermal"]
    if gpu is None or gpu.empty or racks.empty:
        return pd.DataFrame(columns=cols)
    g = gpu.assign(node_id=gpu["node_id"].astype(object))[["ts", "node_id", "gpu_uuid", "throttle_reasons"]]
    g = g.merge(racks.astype(object), on="node_id", how="inner")
    if g.empty:
        return pd.DataFrame(columns=cols)
    thr = g["throttle_reasons"].to_numpy(dtype=float, na_value=np.nan)
    known = ~np.isnan(thr)
    bits = np.nan_to_num(thr).astype(np.int64)
    g = g.assign(p=g["ts"].dt.floor(PARTITION_FREQ), known=known, pw=known & ((bits & POWER_BITS) > 0),
                 th=known & ((bits & THERMAL_BITS) > 0))
    per_gpu = g.groupby(["p", "region", "rack_id", "gpu_uuid"], sort=False)[["known", "pw", "th"]].any()
    out = per_gpu.groupby(level=[0, 1, 2]).agg(gpus=("known", "size"), known=("known", "sum"),
                                               gpus_throttled_power=("pw", "sum"),
                                               gpus_throttled_thermal=("th", "sum")).reset_index()
    for c in ("gpus_throttled_power", "gpus_throttled_thermal"):
        out[c] = pd.array(out[c].astype("int64"), dtype="Int64")
        out.loc[out["known"] == 0, c] = pd.NA
    return out[cols]


def rack_facility(facility: pd.DataFrame, gpu: pd.DataFrame, start, end) -> pd.DataFrame:
    """The ``rack_facility`` rows of ``[start, end)`` (see the module docstring)."""
    cols = list(RackFacility.to_schema().columns)
    if facility is None or facility.empty:
        return RackFacility.to_schema().coerce_dtype(pd.DataFrame({c: pd.Series(dtype="object") for c in cols}))
    f = facility[(facility["ts"] >= start) & (facility["ts"] < end)]
    f = f.assign(p=f["ts"].dt.floor(PARTITION_FREQ), region=f["region"].astype(object), rack_id=f["rack_id"].astype(object),
                 psus=f["psus_failed"].astype("Float64").to_numpy(dtype=float, na_value=np.nan),
                 inlet=f["inlet_temp_c"].to_numpy(dtype=float, na_value=np.nan))
    agg = f.groupby(["p", "region", "rack_id"], sort=False).agg(
        minutes=("ts", "size"), power_sum=("power_kw", "sum"), peak_power_kw=("power_kw", "max"),
        power_budget_kw=("power_budget_kw", "min"), inlet_max_c=("inlet", "max"), psus_failed=("psus", "max")).reset_index()
    agg["energy_kwh"] = agg["power_sum"] / 60.0
    limit = CONTINUOUS_LOAD_SHARE * agg["power_budget_kw"]
    agg["headroom_kw"] = limit - agg["peak_power_kw"]
    agg["headroom_share"] = agg["headroom_kw"] / limit
    agg["psus_failed"] = pd.array([pd.NA if np.isnan(x) else int(x) for x in agg["psus_failed"]], dtype="Int64")
    thr = gpu_throttle_by_rack(gpu[(gpu["ts"] >= start) & (gpu["ts"] < end)] if gpu is not None and len(gpu) else gpu,
                               node_racks(facility))
    out = agg.merge(thr, on=["p", "region", "rack_id"], how="left")
    out["gpus"] = pd.to_numeric(out["gpus"], errors="coerce").fillna(0).astype("int64")
    out = out.rename(columns={"p": "partition_start"})[cols].sort_values(["partition_start", "region", "rack_id"])
    return RackFacility.to_schema().coerce_dtype(out.reset_index(drop=True))


# --- KPI rows (raw: p, kpi, dims, numerator, denominator, n, covered) ----------------------------------------------

def kpi_rows(facility: pd.DataFrame | None, start, end) -> list[pd.DataFrame]:
    """The raw rows of ``pue`` and ``rack_power_headroom`` (per region) for
    :func:`gpu_health.metrics.kpis.compute_kpis`. Without facility rows there are none (the KPIs then read
    no_data). ``gpus_throttled.{power,thermal}`` (per region x sku, from gpu_telemetry alone with this module's
    POWER_BITS / THERMAL_BITS) are counted in kpis with the other region x SKU KPIs of the GPU rows, in one
    grouping of them."""
    out = []
    if facility is not None and len(facility):
        f = facility[(facility["ts"] >= start) & (facility["ts"] < end)]
        if len(f):
            f = f.assign(p=f["ts"].dt.floor(PARTITION_FREQ), region=f["region"].astype(object))
            # PUE: the hall's energy over the racks' energy. facility_power_kw repeats on each rack row of a
            # region-minute: take it once per region-minute; a minute without it is left out of both sums
            it = f.groupby(["p", "region", "ts"], sort=False).agg(it=("power_kw", "sum"), hall=("facility_power_kw", "first"))
            has = it["hall"].notna()
            pue = pd.DataFrame({"numerator": np.where(has, it["hall"].fillna(0.0), 0.0) / 60.0,
                                "denominator": np.where(has, it["it"], 0.0) / 60.0, "n": 1.0,
                                "covered": has.astype(float)}, index=it.index).groupby(level=[0, 1]).sum().reset_index()
            out.append(pue.assign(kpi="pue"))
            rf = rack_facility(facility, None, start, end)
            limit = CONTINUOUS_LOAD_SHARE * rf["power_budget_kw"]
            head = pd.DataFrame({"p": rf["partition_start"], "region": rf["region"].astype(object),
                                 "numerator": rf["headroom_kw"], "denominator": limit, "n": 1.0})
            out.append(head.groupby(["p", "region"], sort=False).sum().reset_index().assign(kpi="rack_power_headroom"))
    return out
