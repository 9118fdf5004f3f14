"""What the collectors hand over, beside what the simulator generated: scrape instants and renamed hosts.

The simulator builds every table on the contract's grain (minute starts, one host name per node for the whole
scenario), and its own modules join those frames with each other. Real collectors differ in two ways a
cluster profile can turn on (both off on the default and messy profiles, whose rows stay as they were):

* ``scrape_offset_s``: a Prometheus server spreads its targets over the scrape interval (each target's offset is a
  hash of its labels), so a node's rows carry the instant it was scraped, the same second of every minute plus a
  little jitter, never the minute's start. The landing path floors a minute-grain table's ``ts`` to its minute
  (gpu_health.contracts.timestamps); the rows stay in their minute and their 5-minute partition.
* ``renamed_nodes``: a node re-imaged under another host name part-way through the scenario. From that instant
  every row that names the node (telemetry, Kubernetes, the scheduler's node lists) names it by its new name; the
  GPUs keep their UUIDs. Nodes an incident, change or maintenance window names keep theirs, so that the ground
  truth still names the nodes it is about.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from gpu_health.contracts.models import MINUTE_GRAIN_SOURCES
from gpu_health.sim import hashing as H
from gpu_health.sim.clock import ORIGIN, to_s

S_SCRAPE, S_SCRAPE_JITTER, S_RENAME, S_RENAME_AT = 300, 301, 302, 303
NODE_COLUMNS = ("node_id", "node_ids")


def renames(scen) -> pd.DataFrame:
    """The scenario's renamed nodes: old name, new name, and the second (simulator clock) from which it holds."""
    spec, nodes = scen.cluster.spec, scen.cluster.nodes
    cols = ["node_id", "new_name", "from_s"]
    if spec.renamed_nodes <= 0 or nodes.empty:
        return pd.DataFrame(columns=cols)
    named = {n for inc in scen.incidents for n in inc.node_ids} | {n for ch in scen.changes for n in ch.node_ids}
    free = nodes.loc[~nodes["node_id"].isin(named), "node_id"].to_numpy()
    keys = np.array([H.stable_id(n) for n in free], dtype=np.int64)
    pick = free[np.argsort(H.uniform(scen.key, S_RENAME, keys))[: spec.renamed_nodes]]
    lo, hi = to_s(scen.start), to_s(scen.end)
    # part-way through: between 30 % and 70 % of the scenario, on a whole minute (the re-imaged host's first scrape)
    at = lo + (0.3 + 0.4 * H.uniform(scen.key, S_RENAME_AT, np.array([H.stable_id(n) for n in pick], dtype=np.int64))) * (hi - lo)
    # the host comes back under the name of a slot nobody held: its own name with a number past the inventory's
    taken = set(nodes["node_id"])
    new = [_new_name(n, len(nodes), taken) for n in pick]
    return pd.DataFrame({"node_id": pick, "new_name": new, "from_s": (at // 60 * 60).astype(np.int64)}, columns=cols)


def _new_name(old: str, n_nodes: int, taken: set) -> str:
    stem = old.rstrip("0123456789")
    name = f"{stem}{int(old[len(stem):]) + n_nodes}" if len(stem) < len(old) else f"{old}-r"
    return name if name not in taken else f"{old}-r"


def collector_view(scen, name: str, frame: pd.DataFrame, renamed: pd.DataFrame) -> pd.DataFrame:
    """``frame`` (table ``name``, on the contract's grain) as the profile's collectors deliver it."""
    spec = scen.cluster.spec
    if len(renamed) and len(frame) and "ts" in frame.columns:
        frame = _renamed(frame, renamed)
    if spec.scrape_offset_s > 0 and name in MINUTE_GRAIN_SOURCES and len(frame) and "ts" in frame.columns:
        frame = _scrape_stamped(scen, frame)
    return frame


def _renamed(frame: pd.DataFrame, renamed: pd.DataFrame) -> pd.DataFrame:
    t = ((frame["ts"] - ORIGIN) // pd.Timedelta(seconds=1)).to_numpy()
    out = frame
    for old, new, from_s in renamed.itertuples(index=False):
        after = t >= from_s
        if not after.any():
            continue
        for col in NODE_COLUMNS:
            if col not in out.columns:
                continue
            values = out[col].astype(object)
            if col == "node_id":
                hit = after & (values == old).to_numpy()
                fixed = values.where(~hit, new)
            else:  # a comma-separated node list
                hit = after & values.notna().to_numpy()
                fixed = values.where(~hit, values[hit].map(lambda s: ",".join(new if x == old else x for x in s.split(","))))
            if hit.any():
                out = out.copy() if out is frame else out
                out[col] = pd.array(fixed, dtype=frame[col].dtype)
    return out


def _scrape_stamped(scen, frame: pd.DataFrame) -> pd.DataFrame:
    """Rows stamped at their node's (or job's) scrape second of the minute, with sub-second jitter."""
    spec = scen.cluster.spec
    who = next((c for c in ("node_id", "job_id", "model", "rack_id") if c in frame.columns), None)
    ids = frame[who].astype(object).fillna("").to_numpy() if who else np.full(len(frame), "")
    codes, uniq = pd.factorize(ids)
    offset = H.uniform(scen.key, S_SCRAPE, np.array([H.stable_id(str(u)) for u in uniq], dtype=np.int64))[codes]
    minute = (frame["ts"].dt.as_unit("ns").array.asi8 // 60_000_000_000).astype(np.int64)
    jitter = H.uniform(scen.key, S_SCRAPE_JITTER, codes, minute)
    # the node's second plus up to a second of jitter, never past the minute's last millisecond
    ms = np.minimum(offset * spec.scrape_offset_s * 1000 + jitter * 1000, 59_999).astype(np.int64)
    out = frame.copy()
    out["ts"] = frame["ts"] + pd.to_timedelta(ms, unit="ms")
    return out
