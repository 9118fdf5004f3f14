"""The facility layer of the simulated cluster: racks, their power and cooling, the hall's draw.

Off unless ``ClusterSpec.facility`` (``cluster: {facility: true}``), so every other scenario's rows are unchanged.

* **Racks.** Each region's nodes of one SKU are cut, in order, into racks of ``ClusterSpec.rack_nodes`` nodes
  (a rack holds one kind of system, as real rows are provisioned). Rack ids are ``<region short>-<sku short>-rNN``.
* **Power.** A GPU draws what gpu_telemetry says (idle + load x (TDP - idle)); its share of the host (CPUs,
  memory, NICs, fans, PSU losses) draws up to :data:`HOST_SHARE_OF_TDP` x TDP, half of it at idle. A rack's
  ``power_kw`` is the sum over its nodes. Its nameplate is every node at full load; its ``power_budget_kw`` (the
  breaker rating) is the nameplate / :data:`CONTINUOUS_LOAD_SHARE` (NEC 210.20(A): a branch circuit carries a
  continuous load of at most 80 % of its rating, so circuits are sized at 125 % of the continuous load).
* **Cooling.** Inlet air sits inside ASHRAE's recommended envelope (:data:`INLET_BASE_C` + up to
  :data:`INLET_SPREAD_C`); the outlet is the inlet plus the temperature rise of the rack's air flow, proportional
  to its draw (:data:`RISE_AT_NAMEPLATE_C` at nameplate).
* **The hall.** ``facility_power_kw`` = the region's IT draw x ``ClusterSpec.pue`` (+ up to 0.05 of noise):
  cooling, power distribution and lighting on top of the IT load.

Incidents (scope ``{region, rack: <rack_id>}`` or ``{region}``: one rack picked deterministically):

* ``rack_cooling_failure``: the rack's inlet rises by ``magnitude`` C over :data:`COOLING_RAMP_S` (a CRAH or
  rear-door heat exchanger failing); an air-cooled GPU's temperature follows its inlet one for one at a given load,
  so its GPUs heat up with it and throttle (thermal clock-event bits, lower clocks and power) once at
  :data:`THERMAL_TEMP_C`.
* ``power_cap_hit``: the rack's budget is cut to ``magnitude`` x its rating (a PDU feed lost, a facility cap);
  the rack's power manager holds the draw at the budget by capping its busy GPUs (SW power cap bit 0x4, lower
  clocks and power).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from gpu_health.constants import CLOCKS_IDLE, SW_POWER_CAP, THERMAL_BITS, THERMAL_TEMP_C
from gpu_health.contracts import columns, conform, empty_frame
from gpu_health.sim import hashing as H

FACILITY_KINDS = ("rack_cooling_failure", "power_cap_hit")
# DGX H100: 10.2 kW system maximum with 8 x 700 W GPUs (5.6 kW) -> 4.6 kW of host, 0.82 x the GPUs' TDP;
# DGX-2 (16 x V100 350 W): 10 kW maximum -> 4.4 kW of host, 0.79 x. Half of it draws at idle (fans, CPUs, memory).
HOST_SHARE_OF_TDP = 0.8
HOST_IDLE_SHARE = 0.5
# NEC 210.20(A) / 215.3: continuous loads (3 h or more) at most 80 % of the overcurrent device's rating
CONTINUOUS_LOAD_SHARE = 0.8
# ASHRAE TC 9.9 recommended inlet envelope 18-27 C; halls run their set point in its lower half
INLET_BASE_C = 21.0
INLET_SPREAD_C = 2.5
RISE_AT_NAMEPLATE_C = 15.0  # a 40 kW rack moving ~2.3 m3/s of air warms it ~15 C at full load
COOLING_RAMP_S = 600        # a failed cooling unit: the inlet climbs to its new level over ~10 minutes
S_INLET, S_PUE, S_PICK = 161, 162, 163


def rack_table(cluster, rack_nodes: int) -> pd.DataFrame:
    """node_id, region, rack_id, node_row: each region's nodes of one node type in racks of ``rack_nodes``."""
    from gpu_health.sim.cluster import _region_short

    nodes = cluster.nodes
    k = max(1, int(rack_nodes))
    rows = []
    for (region, ti), grp in nodes.groupby(["region", "type_idx"], sort=False):
        short = cluster.spec.node_types[ti].short
        for j, nid in enumerate(grp["node_id"]):
            rows.append((nid, region, f"{_region_short(region)}-{short}-r{j // k + 1:02d}", cluster.node_index[nid]))
    return pd.DataFrame(rows, columns=["node_id", "region", "rack_id", "node_row"])


def _racks(scen) -> pd.DataFrame:
    cache = getattr(scen.cluster, "_racks", None)
    if cache is None:
        cache = rack_table(scen.cluster, scen.cluster.spec.rack_nodes)
        scen.cluster._racks = cache
    return cache


def resolve_rack(scen, inc, salt: str) -> None:
    """Point a facility incident at one rack: ``scope.rack`` (a rack id) or one picked in ``scope.region``."""
    racks = _racks(scen)
    want = inc.scope.get("rack")
    cand = racks if not inc.scope.get("region") else racks[racks["region"] == inc.scope["region"]]
    ids = sorted(cand["rack_id"].unique())
    if want is not None:
        if want not in set(racks["rack_id"]):
            raise ValueError(f"incident {inc.incident_id}: unknown rack {want!r}; e.g. {ids[:3]}")
        rack = want
    else:
        if not ids:
            raise ValueError(f"incident {inc.incident_id}: no rack in scope {inc.scope}")
        rack = ids[int(H.uniform(scen.seed, H.stable_id(salt), S_PICK)[()] * len(ids)) % len(ids)]
    members = racks[racks["rack_id"] == rack]
    inc.node_ids = tuple(members["node_id"])
    inc.region = str(members["region"].iloc[0])
    inc.scope = {**inc.scope, "rack": rack}


def _host_w(tdp, load):
    return HOST_SHARE_OF_TDP * tdp * (HOST_IDLE_SHARE + (1 - HOST_IDLE_SHARE) * load)


def gpu_effects(win, node_row, t, has, temp, clock, throttle, load, tdp, idle_w, thrclk, u_temp):
    """The facility incidents' marks on gpu_telemetry (called by Window._gpu_telemetry before power is derived);
    returns (temp, clock, throttle, load). Records each GPU-minute's draw for the rack rows."""
    scen = win.scen
    lo, hi = int(win.m_s[0]) if len(win.m_s) else 0, int(win.m_s[-1]) + 60 if len(win.m_s) else 0
    from gpu_health.sim.clock import to_s

    for _, inc in win._incidents("rack_cooling_failure"):
        s, e = to_s(inc.start), to_s(inc.end)
        hit = win._node_mask(node_row, inc.node_ids) & (t >= s) & (t < e)
        rise = inc.magnitude * np.clip((t - s + 60) / COOLING_RAMP_S, 0, 1)
        temp = np.where(hit, temp + rise, temp)
        hot = hit & (temp >= THERMAL_TEMP_C)
        throttle = np.where(hot, (throttle & ~CLOCKS_IDLE) | THERMAL_BITS, throttle)
        clock = np.where(hot & has, thrclk + 40 * u_temp, clock)
        load = np.where(hot & has, load * 0.8, load)
        temp = np.where(hot, np.minimum(temp, THERMAL_TEMP_C + 4 + 3 * u_temp), temp)  # throttling holds it near slowdown
    caps = [inc for _, inc in win._incidents("power_cap_hit")]
    if caps:
        racks = _racks(scen)
        rack_of = np.full(len(scen.cluster.nodes), -1)
        codes, uniq = pd.factorize(racks["rack_id"])
        rack_of[racks["node_row"].to_numpy()] = codes
        r = rack_of[node_row]
        budget = _rack_budget_w(scen, racks, uniq)
        for inc in caps:
            s, e = to_s(inc.start), to_s(inc.end)
            rack_ids = set(racks.loc[racks["node_id"].isin(inc.node_ids), "rack_id"])
            in_rack = np.isin(r, [i for i, x in enumerate(uniq) if x in rack_ids]) & (t >= s) & (t < e)
            if not in_rack.any():
                continue
            # draw = A + load x B per GPU-minute; solve the load scale that holds the rack at its cut budget
            a = idle_w + _host_w(tdp, 0.0)
            b = (tdp - idle_w) + HOST_SHARE_OF_TDP * tdp * (1 - HOST_IDLE_SHARE)
            key = r * (1 << 32) + (t // 60)
            sel = np.flatnonzero(in_rack)
            k_u, k_inv = np.unique(key[sel], return_inverse=True)
            A = np.bincount(k_inv, weights=a[sel])
            B = np.bincount(k_inv, weights=(load * b)[sel])
            cap = budget[r[sel]] * inc.magnitude
            cap_k = np.bincount(k_inv, weights=cap) / np.bincount(k_inv)
            scale = np.clip((cap_k * 0.985 - A) / np.maximum(B, 1e-9), 0.05, 1.0)
            sc = np.ones(len(t))
            sc[sel] = scale[k_inv]
            capped = in_rack & has & (sc < 1.0) & (load > 0)
            load = np.where(capped, load * sc, load)
            throttle = np.where(capped, (throttle & ~CLOCKS_IDLE) | SW_POWER_CAP, throttle)
            clock = np.where(capped, clock * (0.55 + 0.45 * sc), clock)
    win._facility_draw = (node_row, t, idle_w + load * (tdp - idle_w) + _host_w(tdp, load))
    return temp, clock, throttle, load


def _rack_budget_w(scen, racks: pd.DataFrame, uniq) -> np.ndarray:
    """Per rack (in ``uniq`` order): the breaker rating, W = nameplate / CONTINUOUS_LOAD_SHARE."""
    nodes = scen.cluster.nodes
    types = scen.cluster.spec.node_types
    per_node = np.array([types[ti].gpus * types[ti].tdp_w * (1 + HOST_SHARE_OF_TDP) for ti in nodes["type_idx"]])
    w = pd.Series(per_node[racks["node_row"].to_numpy()]).groupby(racks["rack_id"].to_numpy()).sum()
    return w.reindex(list(uniq)).to_numpy() / CONTINUOUS_LOAD_SHARE


def facility_telemetry(win) -> pd.DataFrame:
    """The ``facility_telemetry`` rows of the window (empty unless ``ClusterSpec.facility``)."""
    scen = win.scen
    spec = scen.cluster.spec
    if not spec.facility or not len(win.m_s):
        return empty_frame("facility_telemetry")
    from gpu_health.sim.clock import from_s, to_s

    win.aligned("gpu_telemetry")  # records the GPU-minutes' draw (gpu_effects)
    node_row, t, draw = win._facility_draw
    racks = _racks(scen)
    codes, uniq = pd.factorize(racks["rack_id"])
    rack_of = np.full(len(scen.cluster.nodes), -1)
    rack_of[racks["node_row"].to_numpy()] = codes
    R, M = len(uniq), len(win.m_s)
    mi = ((t - win.m_s[0]) // 60).astype(np.int64)
    power_w = np.bincount(rack_of[node_row] * M + mi, weights=draw, minlength=R * M)
    budget = _rack_budget_w(scen, racks, uniq)
    ri = np.repeat(np.arange(R), M)
    tt = np.tile(win.m_s, R)
    budget_w = budget[ri].copy()
    for _, inc in win._incidents("power_cap_hit"):
        on = np.isin(np.asarray(uniq)[ri], [inc.scope.get("rack")]) & (tt >= to_s(inc.start)) & (tt < to_s(inc.end))
        budget_w = np.where(on, budget_w * inc.magnitude, budget_w)
    first = racks.drop_duplicates("rack_id").set_index("rack_id")
    region = first["region"].reindex(list(uniq)).to_numpy()[ri]
    members = racks.groupby("rack_id", sort=False)["node_id"].agg(",".join).reindex(list(uniq)).to_numpy()[ri]
    nameplate = budget[ri] * CONTINUOUS_LOAD_SHARE
    inlet = INLET_BASE_C + INLET_SPREAD_C * H.uniform(scen.seed, S_INLET, ri, tt // 60)
    for _, inc in win._incidents("rack_cooling_failure"):
        s = to_s(inc.start)
        on = (np.asarray(uniq)[ri] == inc.scope.get("rack")) & (tt >= s) & (tt < to_s(inc.end))
        inlet = np.where(on, inlet + inc.magnitude * np.clip((tt - s + 60) / COOLING_RAMP_S, 0, 1), inlet)
    outlet = inlet + RISE_AT_NAMEPLATE_C * power_w / nameplate
    frame = pd.DataFrame({"ts": from_s(tt), "region": region, "rack_id": np.asarray(uniq, dtype=object)[ri],
                          "node_ids": members, "power_kw": np.round(power_w / 1000, 3),
                          "power_budget_kw": np.round(budget_w / 1000, 3),
                          "inlet_temp_c": np.round(inlet, 1), "outlet_temp_c": np.round(outlet, 1),
                          "psus_failed": pd.array(np.zeros(R * M, dtype=np.int64), dtype="Int64")})
    it = frame.groupby(["ts", "region"], sort=False)["power_kw"].transform("sum").to_numpy()
    region_code = pd.factorize(frame["region"])[0]
    pue = spec.pue + 0.05 * H.uniform(scen.seed, S_PUE, region_code, tt // 60)
    frame["facility_power_kw"] = np.round(it * pue, 3)
    frame = frame.sort_values(["ts", "region", "rack_id"]).reset_index(drop=True)
    return conform(frame[columns("facility_telemetry")], "facility_telemetry")
