"""Facility and change-policy detectors: racks' cooling and power, changes without a ticket or window.

Pure pandas; each detector takes the :class:`~gpu_health.diagnosis.context.PartitionContext` of one partition
(the registry and the facility runbook: gpu_health.diagnosis.detectors.facility).
The rule of every detector holds here: **a page rests on two independent witnesses**, and **an absent optional
signal is missing data** -- a cluster without ``facility_telemetry`` (``ctx.facility`` None or empty), a rack
whose inlet or PSU count is null, GPUs whose exporter has no clock-event bitmask: each is not judged, never
paged on.

==================  ===========  =====================================================================
detector            family       pages on (the two witnesses) / tickets on
==================  ===========  =====================================================================
rack_cooling        facility     the rack's inlet above 27 C (the facility's sensors: BMC / rack
                                 probes) AND its GPUs running hot on several of its nodes (DCGM:
                                 thermal clock-event bits at >= 83 C, or GPUs 5 C hotter than the
                                 same SKU's GPUs in the same state elsewhere in the region). Ticket:
                                 the inlet alone (ASHRAE's recommended maximum crossed).
rack_power_cap      facility     the rack held at its power budget (PDU draw >= 95 % of it) AND its
                                 busy GPUs power-capped (DCGM 0x4 / 0x80 on most of their minutes)
                                 on several of its nodes. Ticket: the draw alone (a breaker near
                                 tripping); rack_psu: failed PSUs (redundancy lost);
                                 rack_power_headroom: over 80 % of the rating all partition (NEC).
change_policy       software     never pages. Ticket: a change with no ticket reference, or a change
                                 of a kind that needs a maintenance window made outside one.
==================  ===========  =====================================================================

A rack's cooling failure heats every GPU of the rack, so the GPU-level ``thermal_throttle`` detector sees it
too: :func:`defer_to_rack` hands those nodes to the rack's alert (one incident, one alert, the facility named),
and a hot GPU in a rack whose inlet is normal stays the hardware detector's.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from gpu_health.constants import POWER_BITS, REPORTED_BUSY_UTIL_PCT, THERMAL_BITS, THERMAL_TEMP_C


# ASHRAE TC 9.9 (Thermal Guidelines for Data Processing Environments): the recommended inlet envelope for IT
# equipment is 18-27 C; above 27 C the equipment is outside its recommended range (the vendor's allowable range
# A1-A4 reaches 32-45 C, with reliability lost on the way)
INLET_MAX_C = 27.0
# one reading over the line is one sample (a probe near a door, a scrape mid-transient); two minutes of the
# partition are a condition
MIN_MINUTES = 2
# An air-cooled GPU's temperature is its inlet plus load x a thermal resistance fixed by the SKU's heatsink: GPUs
# of one SKU in one state (busy or not) in one hall differ by their inlets. The racks of a hall share its supply
# air inside ASHRAE's 18-27 C recommended band; 5 C is over half that band's width, more than the spread of a hall
# held to its set point, so a node whose GPUs run 5 C over their peers' median has lost that much cooling.
GPU_WARMER_C = 5.0
# A power manager (a Redfish PowerControl limit, a rack power-capping controller) regulates a rack's draw to its
# budget within a few percent; a rack provisioned by the NEC continuous-load rule draws at most 80 % of its rating
# when healthy, so 95 % of it held for minutes is the rack at its limit, not a peak.
HELD_SHARE = 0.95
HELD_MINUTES = 3
# A rack's cap throttles all of its busy GPUs at once: the power bit on at least half of a node's busy GPU-minutes.
# The bit on one GPU now and then is that GPU meeting its own power limit under a heavy kernel (a transient).
CAPPED_SHARE = 0.5
# NEC 210.20(A): a continuous load (3 hours or more) may draw at most 80 % of its circuit's rating. A partition is
# five minutes, so a rack above the line for every reported minute of it is a capacity ticket (the plan must move
# load or add power before it has run three hours), never a page: it is not yet a fault.
CONTINUOUS_LOAD_SHARE = 0.8
# kinds whose change must land inside a maintenance window: they reboot, drain or re-flash nodes (a driver, kernel,
# firmware or BIOS install) -- the calendar exists so that such work is planned, announced and excluded from paging
WINDOW_KINDS = ("driver_upgrade", "kernel_upgrade", "firmware_update", "bios_update")


def _several(hit: int, nodes: int) -> bool:
    """Several of a rack's reporting nodes: at least two (one if the rack reports only one) and at least half."""
    return nodes > 0 and hit >= min(2, nodes) and hit * 2 >= nodes


def _several_margin(hit: int, nodes: int) -> tuple[float, float]:
    """(hit, the count :func:`_several` asks of ``nodes`` reporting nodes): a margin_of pair."""
    return hit, max(min(2, nodes), nodes / 2)


def _racks(ctx) -> pd.DataFrame:
    from gpu_health.metrics.facility import node_racks

    return node_racks(ctx.facility)


def _partition_rows(ctx) -> pd.DataFrame | None:
    f = getattr(ctx, "facility", None)
    if f is None or f.empty:
        return None
    f = f[(f["ts"] >= ctx.start) & (f["ts"] < ctx.end)]
    return f if len(f) else None


# hot_racks() of a partition with no hot rack, built once (a copy costs a tenth of a new frame; most partitions
# of most clusters have none, or no facility data at all)
_NO_HOT_RACKS = pd.DataFrame(columns=["region", "rack_id", "minutes", "inlet_max"])


def hot_racks(ctx) -> pd.DataFrame:
    """Racks whose inlet was above INLET_MAX_C for MIN_MINUTES of the partition: region, rack_id, minutes, inlet_max."""
    f = _partition_rows(ctx)
    if f is None:
        return _NO_HOT_RACKS.copy()
    inlet = f["inlet_temp_c"].to_numpy(dtype=float, na_value=np.nan)
    hot = f[inlet > INLET_MAX_C]  # null inlet: not exported, never hot
    if hot.empty:
        return _NO_HOT_RACKS.copy()
    agg = hot.groupby([hot["region"].astype(object), hot["rack_id"].astype(object)]).agg(
        minutes=("ts", "nunique"), inlet_max=("inlet_temp_c", "max")).reset_index()
    return agg[agg["minutes"] >= MIN_MINUTES].reset_index(drop=True)


def _gpu_heat_by_node(ctx) -> pd.DataFrame:
    """Per node: thermal GPU-minutes (bits at >= 83 C) and the median excess temperature of its GPUs over the same
    SKU's GPUs in the same state elsewhere in the region in the same minutes (NaN without peers or temperature)."""
    g = ctx.gpu
    if g is None or g.empty:
        return pd.DataFrame(columns=["node_id", "thermal", "excess"])
    temp = g["temp_c"].to_numpy(dtype=float, na_value=np.nan)
    thr = g["throttle_reasons"].to_numpy(dtype=float, na_value=np.nan)
    bits = np.nan_to_num(thr).astype(np.int64)
    d = pd.DataFrame({"ts": g["ts"].to_numpy(), "region": g["region"].astype(object).to_numpy(),
                      "node_id": g["node_id"].astype(object).to_numpy(), "sku": g["sku"].astype(object).to_numpy(),
                      "busy": g["gpu_util_pct"].to_numpy(dtype=float) >= REPORTED_BUSY_UTIL_PCT, "temp": temp,
                      "thermal": ~np.isnan(thr) & ((bits & THERMAL_BITS) > 0) & (temp >= THERMAL_TEMP_C)})
    racks = _racks(ctx)
    rack = d["node_id"].map(racks.set_index("node_id")["rack_id"]) if len(racks) else pd.Series(np.nan, index=d.index)
    # a node in no known rack (no facility data for it) is its own unit of cooling: its peers are the other nodes
    d["rack_id"] = rack.astype(object).where(rack.notna(), "node:" + d["node_id"].astype(str))
    d = d[~np.isnan(d["temp"].to_numpy())]
    # peers: the same region, SKU, state and minute in other racks (a median per rack, then over the racks, so a
    # big rack does not outvote the rest)
    key = ["region", "sku", "busy", "ts"]
    per_rack = d.groupby(key + ["rack_id"], dropna=False)["temp"].median().rename("rack_med").reset_index()
    tot = per_rack.groupby(key)["rack_med"].agg(["sum", "count"]).reset_index()
    d = d.merge(per_rack, on=key + ["rack_id"], how="left").merge(tot, on=key, how="left")
    peers = d["count"] - 1
    peer_mean = (d["sum"] - d["rack_med"]) / peers.where(peers > 0)
    d["excess"] = d["temp"] - peer_mean
    return d.groupby("node_id").agg(thermal=("thermal", "sum"), excess=("excess", "median")).reset_index()


def thermal_causes(ctx, nodes) -> dict[str, str]:
    """node -> the cause its GPUs' heat has, for those of ``nodes`` with one: its rack's inlet above INLET_MAX_C
    (hot_racks), or its GPUs GPU_WARMER_C over the same SKU's GPUs in the same state elsewhere in the region (its
    own cooling lost: fans, airflow, heatsink). A node as hot as its peers has no cause of its own: the load (or
    a hall too warm for all, which its racks' inlets name)."""
    out: dict[str, str] = {}
    hot = hot_racks(ctx)
    if len(hot):
        racks = _racks(ctx).merge(hot, on=["region", "rack_id"])
        for r in racks[racks["node_id"].isin(nodes)].itertuples(index=False):
            out[r.node_id] = f"rack {r.rack_id}'s inlet {r.inlet_max:.1f} C above the {INLET_MAX_C:.0f} C ASHRAE limit"
    heat = _gpu_heat_by_node(ctx)
    warm = heat[heat["node_id"].isin(nodes) & (heat["excess"] >= GPU_WARMER_C)]
    for n, excess in zip(warm["node_id"], warm["excess"]):
        out.setdefault(n, f"its GPUs {excess:.1f} C warmer than the same SKU's GPUs elsewhere in the region")
    return out


def detect_rack_cooling(ctx) -> list:
    """Page: the rack's inlet above 27 C AND its GPUs hot on several of its nodes; ticket: the inlet alone."""
    from gpu_health.diagnosis.finding import Finding, margin_of

    hot = hot_racks(ctx)
    if hot.empty:
        return []
    racks = _racks(ctx)
    heat = _gpu_heat_by_node(ctx).set_index("node_id")
    reporting = set(heat.index)
    out = []
    for r in hot.itertuples(index=False):
        nodes = sorted(racks.loc[(racks["rack_id"] == r.rack_id) & (racks["region"] == r.region), "node_id"])
        seen = [n for n in nodes if n in reporting]
        h = heat.reindex(seen)
        witness = (h["thermal"] > 0) | (h["excess"] >= GPU_WARMER_C)
        n_hot = int(witness.sum())
        page = _several(n_hot, len(seen))
        gpu_text = (f"GPUs hot on {n_hot} of its {len(seen)} reporting nodes ({int(h['thermal'].sum())} GPU-minutes "
                    f"of thermal throttling at >= {THERMAL_TEMP_C:.0f} C; median excess over the same SKU's GPUs "
                    f"elsewhere {h['excess'].max():.1f} C)" if len(seen) else "no GPU of the rack reports temperature")
        out.append(Finding(
            "rack_cooling", "facility", "page" if page else "ticket", r.region, f"rack_cooling|{r.region}|{r.rack_id}",
            nodes=nodes, margin=margin_of((r.inlet_max, INLET_MAX_C), (r.minutes, MIN_MINUTES),
                                          _several_margin(n_hot, len(seen))) if page else None,
            summary=f"Rack {r.rack_id} in {r.region}: cooling degraded, inlet {r.inlet_max:.1f} C above the "
                    f"{INLET_MAX_C:.0f} C ASHRAE limit" + ("" if page else " (GPUs not yet affected)"),
            evidence=f"facility_telemetry: inlet above {INLET_MAX_C:.0f} C for {int(r.minutes)} minutes (max "
                     f"{r.inlet_max:.1f} C); gpu_telemetry: {gpu_text}; nodes {', '.join(nodes)}",
            value=float(r.inlet_max), baseline=INLET_MAX_C))
    return out


def detect_rack_power(ctx) -> list:
    """Page: the rack held at its budget AND its busy GPUs power-capped on several nodes; ticket: the draw alone,
    or failed PSUs."""
    from gpu_health.diagnosis.finding import Finding, margin_of

    f = _partition_rows(ctx)
    if f is None:
        return []
    f = f.assign(region=f["region"].astype(object), rack_id=f["rack_id"].astype(object))
    held = f[f["power_kw"] >= HELD_SHARE * f["power_budget_kw"]]
    racks = _racks(ctx)
    out = []
    if len(held):
        agg = held.groupby(["region", "rack_id"]).agg(minutes=("ts", "nunique"), draw=("power_kw", "max"),
                                                      budget=("power_budget_kw", "min")).reset_index()
        agg = agg[agg["minutes"] >= HELD_MINUTES]
        capped = _capped_by_node(ctx)
        for r in agg.itertuples(index=False):
            nodes = sorted(racks.loc[(racks["rack_id"] == r.rack_id) & (racks["region"] == r.region), "node_id"])
            c = capped.reindex([n for n in nodes if n in capped.index])
            n_cap = int((c["share"] >= CAPPED_SHARE).sum()) if len(c) else 0
            page = _several(n_cap, len(c))
            out.append(Finding(
                "rack_power_cap", "facility", "page" if page else "ticket", r.region,
                f"rack_power_cap|{r.region}|{r.rack_id}", nodes=nodes,
                margin=margin_of((r.draw, HELD_SHARE * r.budget), (r.minutes, HELD_MINUTES),
                                 _several_margin(n_cap, len(c))) if page else None,
                summary=f"Rack {r.rack_id} in {r.region}: held at its power budget ({r.draw:.1f} of "
                        f"{r.budget:.1f} kW)" + (", GPUs power-capped" if page else ""),
                evidence=f"facility_telemetry: draw >= {HELD_SHARE:.0%} of power_budget_kw for {int(r.minutes)} "
                         f"minutes; gpu_telemetry: power clock-event bits (0x4 / 0x80) on >= {CAPPED_SHARE:.0%} of "
                         f"the busy GPU-minutes of {n_cap} of {len(c)} nodes reporting the bitmask",
                value=float(r.draw), baseline=float(r.budget)))
    over = f.assign(o=(f["power_kw"] > CONTINUOUS_LOAD_SHARE * f["power_budget_kw"]) &
                    (f["power_kw"] < HELD_SHARE * f["power_budget_kw"]))
    agg = over.groupby(["region", "rack_id"]).agg(minutes=("ts", "nunique"), over=("o", "sum"),
                                                 draw=("power_kw", "max"), budget=("power_budget_kw", "min")).reset_index()
    held_racks = {f_.key for f_ in out}
    for r in agg[(agg["over"] == agg["minutes"]) & (agg["minutes"] >= HELD_MINUTES)].itertuples(index=False):
        if f"rack_power_cap|{r.region}|{r.rack_id}" in held_racks:
            continue
        nodes = sorted(racks.loc[(racks["rack_id"] == r.rack_id) & (racks["region"] == r.region), "node_id"])
        out.append(Finding(
            "rack_power_headroom", "facility", "ticket", r.region, f"rack_power_headroom|{r.region}|{r.rack_id}",
            nodes=nodes,
            summary=f"Rack {r.rack_id} in {r.region}: above its continuous-load limit ({r.draw:.1f} kW of "
                    f"{CONTINUOUS_LOAD_SHARE:.0%} x {r.budget:.1f} kW)",
            evidence=f"facility_telemetry: draw over {CONTINUOUS_LOAD_SHARE:.0%} of power_budget_kw in all "
                     f"{int(r.minutes)} minutes (NEC 210.20(A) continuous-load limit)",
            value=float(r.draw), baseline=float(CONTINUOUS_LOAD_SHARE * r.budget)))
    psu = f["psus_failed"].astype("Float64").to_numpy(dtype=float, na_value=np.nan)
    bad = f[psu > 0]
    if len(bad):
        agg = bad.groupby(["region", "rack_id"]).agg(minutes=("ts", "nunique"), psus=("psus_failed", "max")).reset_index()
        for r in agg[agg["minutes"] >= MIN_MINUTES].itertuples(index=False):
            nodes = sorted(racks.loc[(racks["rack_id"] == r.rack_id) & (racks["region"] == r.region), "node_id"])
            out.append(Finding(
                "rack_psu", "facility", "ticket", r.region, f"rack_psu|{r.region}|{r.rack_id}", nodes=nodes,
                summary=f"Rack {r.rack_id} in {r.region}: {int(r.psus)} power supplies failed (redundancy lost)",
                evidence=f"facility_telemetry.psus_failed = {int(r.psus)} for {int(r.minutes)} minutes"))
    return out


def _capped_by_node(ctx) -> pd.DataFrame:
    """Per node: the share of its busy GPU-minutes (that report the bitmask) carrying a power bit."""
    g = ctx.gpu
    if g is None or g.empty:
        return pd.DataFrame(columns=["share"])
    thr = g["throttle_reasons"].to_numpy(dtype=float, na_value=np.nan)
    busy = (g["gpu_util_pct"].to_numpy(dtype=float) >= REPORTED_BUSY_UTIL_PCT) & ~np.isnan(thr)
    bits = np.nan_to_num(thr).astype(np.int64)
    d = pd.DataFrame({"node_id": g["node_id"].astype(object).to_numpy()[busy],
                      "capped": ((bits & POWER_BITS) > 0)[busy]})
    return d.groupby("node_id")["capped"].mean().rename("share").to_frame()


def defer_to_rack(detector):
    """``detector`` (the GPU-level thermal detector) without the nodes of racks whose inlet is above the limit in
    the partition: their heat is the rack's (rack_cooling names it); a hot GPU in a rack with a normal inlet -- or
    on a cluster without facility data -- stays the detector's (a hardware alert)."""

    def run(ctx) -> list:
        found = detector(ctx)
        hot = hot_racks(ctx)
        if hot.empty or not found:
            return found
        racks = _racks(ctx)
        facility_nodes = set(racks.merge(hot[["region", "rack_id"]], on=["region", "rack_id"])["node_id"])
        out = []
        for f in found:
            rest = [n for n in f.nodes if n not in facility_nodes]
            if len(rest) == len(f.nodes):
                out.append(f)
            elif rest:
                f.nodes = rest
                f.evidence += f"; nodes of racks with a hot inlet left to rack_cooling"
                out.append(f)
        return out

    run.__name__ = getattr(detector, "__name__", "detector")
    run.__doc__ = detector.__doc__
    return run


# --- change and access monitoring --------------------------------------------------------------------------------

def _scope_nodes(scope: str, inventory: pd.DataFrame) -> set[str] | None:
    """The nodes a change's scope names (None = every node: '*', a region, or a team's jobs)."""
    s = str(scope or "").strip()
    if s in ("", "*") or s in set(inventory["region"].astype(object)):
        return None
    return {x.strip() for x in s.split(",") if x.strip()}


def _in_window(ev, maintenance: pd.DataFrame, inventory: pd.DataFrame) -> bool:
    """The change took effect inside a maintenance window covering its scope (region or every node it names)."""
    if maintenance is None or maintenance.empty:
        return False
    m = maintenance[(maintenance["start"] <= ev.ts) & (maintenance["end"] > ev.ts)]
    if m.empty:
        return False
    nodes = _scope_nodes(ev.scope, inventory)
    region_of = dict(zip(inventory["node_id"].astype(object), inventory["region"].astype(object)))
    for w in m.itertuples(index=False):
        w_nodes = None if str(w.node_ids).strip() in ("", "*") else {x.strip() for x in str(w.node_ids).split(",")}
        if nodes is None:
            scope = str(ev.scope).strip()
            if w_nodes is None and (str(w.region) in ("*", scope) or scope == "*" and str(w.region) == "*"):
                return True
            continue
        if w_nodes is None:
            if str(w.region) == "*" or all(region_of.get(n) == str(w.region) for n in nodes):
                return True
        elif nodes <= w_nodes:
            return True
    return False


def detect_change_policy(ctx) -> list:
    """Ticket (software, never a page) for each change of the partition made without a ticket reference, or, for
    a kind that reboots, drains or re-flashes nodes (WINDOW_KINDS), outside a maintenance window covering it.

    Only changes whose producer records change management are judged: a row with neither ``actor`` nor
    ``ticket`` comes from a producer without those fields (a deploy pipeline, an older file read with them null),
    and their absence is missing data, not a change made without a ticket."""
    from gpu_health.diagnosis.finding import Finding

    ch = ctx.changes
    if ch is None or ch.empty or "ticket" not in ch.columns:
        return []
    ch = ch[(ch["ts"] >= ctx.start) & (ch["ts"] < ctx.end)]
    out = []
    if ch.empty:
        return out  # (most partitions hold no change: no lookup built, no empty itertuples)
    inv = ctx.inventory
    region_of = dict(zip(inv["node_id"].astype(object), inv["region"].astype(object))) if len(inv) else {}
    has_actor = "actor" in ch.columns
    for ev in ch.itertuples(index=False):
        problems = []
        ticket = ev.ticket if not pd.isna(ev.ticket) else None
        actor = ev.actor if has_actor and not pd.isna(ev.actor) else None
        if ticket is None and actor is None:
            continue  # the producer records no change management: missing data
        if ticket is None or not str(ticket).strip():
            problems.append("no change ticket")
        if ev.kind in WINDOW_KINDS and not _in_window(ev, ctx.maintenance, inv):
            problems.append("outside any maintenance window")
        if not problems:
            continue
        nodes = _scope_nodes(ev.scope, inv)
        node_list = sorted(nodes) if nodes else []
        regions = {region_of.get(n) for n in node_list} - {None}
        region = regions.pop() if len(regions) == 1 else (str(ev.scope) if str(ev.scope) in set(region_of.values()) else "*")
        actor = actor or "unknown actor"
        out.append(Finding(
            "change_policy", "software", "ticket", region, f"change_policy|{ev.event_id}", nodes=node_list,
            change_event=ev.event_id,
            summary=f"Change {ev.event_id} ({ev.kind}) by {actor}: {' and '.join(problems)}",
            evidence=f"change_events: {ev.kind} on {ev.scope} at {pd.Timestamp(ev.ts):%Y-%m-%d %H:%M}Z by {actor}, "
                     f"ticket {ticket or 'none'}: {ev.description}"))
    return out
