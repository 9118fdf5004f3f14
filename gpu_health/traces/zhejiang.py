"""Zhejiang Lab ``cluster_2000_A100`` (CC-BY-4.0 + Terms of Access) -> ``network_telemetry``.

Input: ``zhejianglab-a100/trafficinfo/all_switches_port_minute_rollup.csv`` -- a
per (minute, switch, port) rollup of the 0.5-second counters of all 2,160
ports of the 24 RoCE leaf switches, 2024-05-23 16:00-16:59 UTC -- and
``topology_cluster_topology.csv`` (server NIC <-> leaf port).

Mapping
-------
* A leaf port wired to a server NIC in the topology becomes that server's
  link: ``node_id`` = the server (``sysname``), ``link_id`` = its NIC's netdev
  name (``ens11np0``; the ``mlx5_N`` names of ``topology_GPU_NIC_info.csv`` are
  keyed by an IP range that does not join to the topology's server IPs). Two
  NICs of ``GPU-153`` have no name in the topology: their ``link_id`` is
  placeholder ``nic@<leaf>:<port>`` (e.g. ``nic@Leaf-12:TwoHundredGigE1/0/17:2``).
* Direction is the server's: the switch port's *in* octets are what the
  server sent, so ``tx_gbps`` = ``in_octets``·8/60/1e9 and ``rx_gbps`` =
  ``out_octets``·8/60/1e9 (octets are per-sample deltas summed over the minute).
* ``region`` = ``zhejiang``.
* Ports not wired to a server (400GE spine uplinks, unused 200GE ports, the
  management port) are skipped and counted -- the contract's ``node_id`` is a
  host; ``include_switch_ports=True`` keeps them with ``node_id`` = switch,
  ``link_id`` = port and the switch's direction (rx = in, tx = out).
* ``link_up`` = True in a minute with traffic (traffic proves the link is up),
  null otherwise (no traffic says nothing about the port state, which the
  counters do not carry). ``packet_loss_pct``, ``retransmits`` and
  ``latency_us`` are not in the counters: null. The contract accepts null
  retransmits and latency (switch-port counters never have them);
  ``packet_loss_pct`` and ``link_up`` are required (``NULL_REQUIRED_COLUMNS``):
  such rows are quarantined unless explicit placeholders fill them.

Real artefacts kept as they are: the collector was silent for every port
from 16:00:01 to 16:04:14 UTC, so minutes 16:01-16:03 have **no rows**
(absence, not zero traffic); the 16:00 minute holds ~0.5 s of samples
(rates understated) and the 16:04 minute the counters' catch-up (~4x normal
bytes). Detectors must not read either as a network event.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd

from gpu_health.traces.common import TraceFrames, conform, default_data_dir

TRACE = "zhejiang"
REGION = "zhejiang"
NULL_REQUIRED_COLUMNS: dict[str, tuple[str, ...]] = {
    "network_telemetry": ("packet_loss_pct", "link_up"),
}
_ROLLUP_COLUMNS = ["minute_utc", "device", "port", "in_octets", "out_octets", "in_pkts", "out_pkts"]


def _dir(data_dir: str | Path | None) -> Path:
    return Path(data_dir or default_data_dir()) / "zhejianglab-a100"


def gbps(octets: pd.Series) -> pd.Series:
    """Octets in a minute -> Gbit/s."""
    return octets.astype("float64") * 8 / 60 / 1e9


def build(data_dir: str | Path | None = None, *, limit: int | None = None,
          include_switch_ports: bool = False) -> TraceFrames:
    """Rollup + topology -> network_telemetry (first ``limit`` server links by switch/port when given)."""
    d = _dir(data_dir)
    skipped: Counter = Counter()
    roll = pd.read_csv(d / "trafficinfo" / "all_switches_port_minute_rollup.csv", usecols=_ROLLUP_COLUMNS)
    topo = pd.read_csv(d / "topology_cluster_topology.csv", usecols=["switchname", "portname", "sysname", "nicname"])
    topo = topo.apply(lambda s: s.str.strip())
    # Two NICs of one server have no name in the topology: name the link by its leaf port.
    leaf = topo.switchname.str.extract(r"(Leaf-\d+)")[0].fillna(topo.switchname)
    topo["nicname"] = topo.nicname.fillna("nic@" + leaf + ":" + topo.portname)
    dup = topo.duplicated(["switchname", "portname"])
    if dup.any():
        raise ValueError(f"{d / 'topology_cluster_topology.csv'}: switch port wired twice, e.g. "
                         f"{topo[dup].head(3).to_dict('records')}")
    roll["ts"] = pd.to_datetime(roll.minute_utc, utc=True, format="ISO8601")
    bad_ts = roll.ts.isna()
    skipped["network_telemetry: unparseable minute_utc"] += int(bad_ts.sum())
    roll = roll[~bad_ts].merge(topo, left_on=["device", "port"], right_on=["switchname", "portname"], how="left")
    wired = roll.sysname.notna()

    links = roll.loc[wired, ["device", "port"]].drop_duplicates().sort_values(["device", "port"])
    if limit is not None:
        chosen = links.head(limit)
        keep = roll.set_index(["device", "port"]).index.isin(pd.MultiIndex.from_frame(chosen))
        roll, wired = roll[keep | ~wired], wired[keep | ~wired]

    server = roll[wired]
    frames = [pd.DataFrame({
        "ts": server.ts, "node_id": server.sysname, "link_id": server.nicname,
        "rx_gbps": gbps(server.out_octets), "tx_gbps": gbps(server.in_octets),
        "traffic": (server.in_pkts + server.out_pkts) > 0,
    })]
    other = roll[~wired]
    if include_switch_ports:
        frames.append(pd.DataFrame({
            "ts": other.ts, "node_id": other.device, "link_id": other.port,
            "rx_gbps": gbps(other.in_octets), "tx_gbps": gbps(other.out_octets),
            "traffic": (other.in_pkts + other.out_pkts) > 0,
        }))
    elif limit is None:
        kind = other.port.str.extract(r"^([A-Za-z-]+)")[0].fillna("?")
        for k, n in kind.value_counts().items():
            skipped[f"network_telemetry: {k} port-minutes not wired to a server in the topology"] += int(n)
    df = pd.concat(frames, ignore_index=True)
    df["region"] = REGION
    df["link_up"] = pd.Series(np.where(df.traffic, True, pd.NA), dtype="boolean")
    df = df.drop(columns="traffic").sort_values(["ts", "node_id", "link_id"], kind="stable")
    net = conform(df, "network_telemetry", nullable=NULL_REQUIRED_COLUMNS["network_telemetry"])
    return TraceFrames(TRACE, {"network_telemetry": net}, Counter({k: v for k, v in skipped.items() if v}),
                       null_required=NULL_REQUIRED_COLUMNS)
