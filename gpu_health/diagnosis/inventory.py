"""Inventory discrepancies: telemetry that does not match what Finance installed. Tickets, never pages.

Paid GPU-minutes come from Finance's installed capacity per region x SKU (``cost_capacity``; the loss tree's
:func:`gpu_health.metrics.goodput.bound_to_capacity`). What the telemetry says beyond it is not paid and not
silently dropped either: it is a discrepancy someone has to reconcile (an uploader replaying a buffer under new
GPU UUIDs, a node re-imaged under a new name, a region mistyped in a collector's config, a region Finance does
not price). Each finding names the region, the SKU, the nodes and how many GPUs. They belong to the
``missing_data`` family: a fault of the data about the cluster, never a GPU incident.

==========================  ==================================================================================
key                         tickets on
==========================  ==================================================================================
inventory_excess|R|S        more distinct GPUs reporting in the partition in region R, SKU S than Finance's
                            capacity_gpus for the day
unpriced|R|S                GPUs reporting in region R, SKU S with no cost_capacity row for the day (the loss
                            tree pays the GPUs seen, the spend stays unpriced: null, never $0); the evidence
                            names a priced region spelled the same but for case or whitespace
gpu_identity|R              a GPU UUID reported by two nodes in the same minute (one GPU sits in one node)
node_renamed|R              a node of the inventory that reports no GPU while the UUIDs it last reported report
                            under another name (re-imaged or renamed: gpu_health.steps.telemetry.moved_gpus); the
                            loss tree expects them under the new name only, and the old one is not missing
==========================  ==================================================================================
"""

import pandas as pd

from gpu_health.diagnosis.finding import Finding

FAMILY = "missing_data"
NAMED_NODES = 8  # nodes named in a finding's evidence (the rest counted)


def _names(nodes) -> str:
    nodes = sorted(nodes)
    return ", ".join(nodes[:NAMED_NODES]) + (f" and {len(nodes) - NAMED_NODES} more" if len(nodes) > NAMED_NODES else "")


def _key(text) -> str:
    """A region's spelling without case and surrounding whitespace (two spellings of one region)."""
    return str(text).strip().casefold()


def _twinned_nodes(g: pd.DataFrame) -> set:
    """Nodes whose every GPU row has a twin on another node: the same minute, job and readings value for value
    (a copy of a real GPU's rows under another identity; either side may be the copy)."""
    values = [c for c in ("ts", "job_id", "gpu_util_pct", "power_w", "temp_c", "sm_clock_mhz", "fb_used_mib") if c in g]
    if len(values) < 3:
        return set()
    sig = g.groupby(values, dropna=False, sort=False, observed=True).ngroup().to_numpy()  # (one group-by, no text)
    nodes_per_sig = pd.Series(g["node_id"].astype(object).to_numpy()).groupby(sig).nunique()
    twinned = nodes_per_sig.reindex(sig).to_numpy() > 1
    per_node = pd.Series(twinned, index=g["node_id"].astype(object).to_numpy()).groupby(level=0).all()
    return set(per_node[per_node].index)


def _renamed(moved) -> list[Finding]:
    """node_renamed per region: each old name, the name its GPUs report under now and how many moved."""
    if moved is None or not len(moved):
        return []
    moved = moved.astype({"region": object, "node_id": object, "new_node": object})
    out = []
    for region, rows in moved.groupby("region", sort=True):
        pairs = rows.groupby(["node_id", "new_node"], sort=True)["gpu_uuid"].nunique()
        said = [f"{old} -> {new} ({n} GPUs)" for (old, new), n in pairs.items()]
        nodes = set(rows["node_id"]) | set(rows["new_node"])
        (old, new), n = next(iter(pairs.items()))
        out.append(Finding(
            "node_renamed", FAMILY, "ticket", region, f"node_renamed|{region}", nodes=sorted(nodes),
            summary=f"Node {old} reports as {new} in {region} ({n} GPUs moved)" if len(pairs) == 1 else
                    f"{len(pairs)} nodes report under new names in {region}",
            evidence=f"The GPU UUIDs these nodes last reported now report under another name, and the old names "
                     f"report no GPU: {'; '.join(said[:NAMED_NODES])}{' and more' if len(said) > NAMED_NODES else ''}. "
                     f"A re-imaged or renamed host: the loss tree counts its GPUs under the new name only (the old "
                     f"name is not missing hardware). Fix the inventory's name or the collector's hostname label.",
            value=float(rows["gpu_uuid"].nunique())))
    return out


def detect_inventory(ctx) -> list[Finding]:
    """The partition's inventory discrepancies (module docstring); nothing but renamed nodes when the day's
    cost_capacity rows were not given (``ctx.capacity`` None or empty: a missing day is the cost source's own gap)."""
    cap_rows = getattr(ctx, "capacity", None)
    g = ctx.gpu
    renamed = _renamed(getattr(ctx, "moved", None))
    if cap_rows is None or not len(cap_rows) or g is None or g.empty:
        return renamed
    cap = cap_rows.groupby([cap_rows["region"].astype(object), cap_rows["sku"].astype(object)])["capacity_gpus"].max()
    priced = {_key(r): r for r in cap.index.get_level_values(0)}
    g = g[g["region"].notna() & g["sku"].notna() & g["gpu_uuid"].notna()]
    seen_by = g.groupby([g["region"].astype(object), g["sku"].astype(object)], sort=True, observed=True)["gpu_uuid"].nunique()
    out = []
    for (region, sku), seen in seen_by.items():
        if (region, sku) in cap.index and seen <= int(cap[(region, sku)]):
            continue  # (every slice of a healthy partition: its rows are looked at only when something is off)
        rows = g[(g["region"] == region).to_numpy() & (g["sku"] == sku).to_numpy()]
        rows = rows.assign(node_id=rows["node_id"].astype(object))
        nodes = set(rows["node_id"])
        if (region, sku) not in cap.index:
            known = priced.get(_key(region))
            spelled = (f" Finance prices {known!r}, the same region but for case or whitespace: fix the collectors' "
                       f"region label." if known is not None and known != region else "")
            out.append(Finding(
                "unpriced_telemetry", FAMILY, "ticket", region, f"unpriced|{region}|{sku}", nodes=sorted(nodes),
                summary=f"Region with telemetry but no price: {region!r} {sku}",
                evidence=f"{seen} GPUs on {len(nodes)} node(s) ({_names(nodes)}) report in region {region!r}, SKU {sku}, "
                         f"which has no cost_capacity row for the day: its GPU-minutes are paid as seen and their "
                         f"spend is unpriced (null, not $0).{spelled}", value=float(seen)))
            continue
        installed = int(cap[(region, sku)])
        if seen > installed:
            twins = _twinned_nodes(rows)
            named = twins or nodes
            what = ("node(s) whose rows copy another node's value for value" if twins else "node(s) reporting")
            out.append(Finding(
                "inventory_excess", FAMILY, "ticket", region, f"inventory_excess|{region}|{sku}", nodes=sorted(named),
                summary=f"{seen - installed} GPUs seen beyond Finance's capacity in {region} {sku}",
                evidence=f"{seen} distinct GPUs on {len(nodes)} node(s) report in {region}, {sku}; Finance installed "
                         f"{installed}. The {seen - installed} beyond it are an inventory discrepancy, not paid (the "
                         f"loss tree pays the capacity). {len(named)} {what}: {_names(named)}. Reconcile with Finance's "
                         f"inventory or find the collector that sends the extra GPUs.",
                baseline=float(installed), value=float(seen)))
    # one GPU in one node: a UUID two nodes report in the same minute is an identity conflict
    # (the contract's key is (ts, gpu_uuid) on minute-floored stamps: stored rows rarely repeat one, so the rows
    # are only looked at by node when some (minute, UUID) does repeat)
    minute = g["ts"].dt.floor("1min")
    repeated = pd.DataFrame({"m": minute.array, "u": g["gpu_uuid"].array}).duplicated(keep=False).to_numpy()
    if not repeated.any():
        return out + renamed
    g, minute = g[repeated], minute[repeated]
    pairs = pd.DataFrame({"m": minute.to_numpy(), "u": g["gpu_uuid"].astype(object).to_numpy(),
                          "n": g["node_id"].astype(object).to_numpy(), "r": g["region"].astype(object).to_numpy()}
                         ).drop_duplicates(["m", "u", "n"])
    clash = pairs[pairs.duplicated(["m", "u"], keep=False)]
    for region, rows in clash.groupby("r", sort=True):
        nodes = set(rows["n"])
        out.append(Finding(
            "gpu_identity", FAMILY, "ticket", region, f"gpu_identity|{region}", nodes=sorted(nodes),
            summary=f"{rows['u'].nunique()} GPU UUID(s) reported by two nodes in the same minute in {region}",
            evidence=f"GPU UUIDs such as {', '.join(sorted(rows['u'].unique())[:3])} are reported by more than one of "
                     f"{_names(nodes)} in the same minute: a GPU sits in one node, so one of the names is wrong (a "
                     f"copied file, a re-imaged host's stale exporter).", value=float(rows["u"].nunique())))
    return out + renamed
