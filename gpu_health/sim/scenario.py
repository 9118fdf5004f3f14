"""Scenario files: the cluster, the time span and the incidents to inject.

Format (YAML; see docs/scenarios.md)::

    seed: 7
    start: 2026-11-02T00:00:00Z
    end: 2026-11-09T00:00:00Z
    cluster: default            # or a mapping overriding ClusterSpec fields
    incidents:
      - kind: thermal_throttle
        start: 2026-11-03T14:10:00Z
        duration: 90m
        severity: high          # high | low
        scope: {region: us-east, nodes: 2}
        magnitude: 0.38
    changes:                    # optional benign change events (no incident)
      - kind: kernel_upgrade
        ts: 2026-11-04T10:00:00Z
        scope: {region: eu-west, nodes: 4}
        to_version: 6.8.0-51-generic
      - kind: driver_upgrade    # a rolling upgrade: 4 batches 30 minutes apart over a quarter of the nodes,
        ts: 2026-11-05T09:00:00Z  # each batch drained for 6 minutes while its driver installs
        scope: {fraction: 0.25, batches: 4, every: 30m, drain: 6m}
        to_version: 550.144.03

Scope keys: ``region``; ``nodes`` (a count, picked deterministically) or
``node_ids`` (a list); ``pool`` (interactive | batch | distributed);
``team``; ``fraction`` (share of the jobs / lanes in scope); ``gpus`` (GPUs
per node for GPU-level faults, default 1); ``storage: remote`` (an ``io_bottleneck`` of
shared storage: no local disk saturates).

A ``driver_regression`` may instead arrive as a real rollout does, in waves (``rollout``)::

      - kind: driver_regression
        start: 2026-11-08T10:07:00Z   # the first wave's drain
        duration: 2h                  # then the rollback
        magnitude: 0.5                # share of the jobs starting on an upgraded node that fail
        scope: {fraction: 0.25}       # share of the scope's nodes (as a change's scope), or nodes / node_ids
        rollout: {waves: 5, every: 20m, drain: 8m, fail_within: 5m, failure_xids: [13, 31, 119], requeue: 0.4}

Each wave's nodes are drained (no job starts there, running jobs are requeued), take the new driver and return;
a job starting on a returned node fails with probability ``magnitude`` within ``fail_within`` of its start, its
GPUs raising one of ``failure_xids``; a ``requeue`` share of the failed Slurm jobs is requeued and runs again.
"""

import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from gpu_health.sim.clock import ORIGIN  # noqa: F401  (re-exported: a Monday, integer minutes count from it)
from gpu_health.sim.cluster import Cluster, ClusterSpec
from gpu_health.sim.hashing import stable_id, uniform


@dataclass(frozen=True)
class KindInfo:
    family: str
    magnitude: float
    meaning: str
    default_pool: str | None = None


# kind -> cause family, default magnitude and what the magnitude means
KINDS: dict[str, KindInfo] = {
    "gpu_ecc_fault": KindInfo("hardware", 1.0, "DBE count at onset (Xid 48); the node is drained until the end", None),
    "gpu_fell_off_bus": KindInfo("hardware", 1.0, "GPUs per node that fall off the bus (Xid 79) and stop reporting", None),
    "thermal_throttle": KindInfo("hardware", 0.38, "relative step-time increase on throttled GPUs (temp > 83 C, SM clock down)", None),
    "driver_regression": KindInfo("software", 0.6, "probability that a job on the upgraded cohort fails within minutes", None),
    "framework_regression": KindInfo("software", 0.25, "relative step-time increase of jobs on the new framework version", None),
    "priority_change": KindInfo("scheduling", 3.0, "factor by which idle gaps and queue waits grow in the region's batch pool", "batch"),
    "fragmentation": KindInfo("scheduling", 4.0, "single-GPU jobs a spreading scheduler places on each node of a free "
                              "multi-GPU slot (at least enough that its free pieces are smaller than the smallest "
                              "multi-GPU request, at most all its GPUs but one): the slot's next job waits until they leave "
                              "(sim/spread.py)", None),
    "io_bottleneck": KindInfo("data_io", 0.5, "relative step-time increase from data-loader wait (storage saturated)", None),
    "network_degradation": KindInfo("network", 0.4, "relative step-time increase of multi-node jobs from gradient sync", "distributed"),
    "dummy_workload": KindInfo("gaming", 0.5, "share of the scope's batch lanes held by ~100%-util dummy jobs", "batch"),
    "training_stall": KindInfo("software", 1.0, "share of the scope's running distributed jobs that hang", "distributed"),
    "maintenance": KindInfo("planned", 1.0, "(unused) nodes drained inside a calendar window", None),
    "collector_outage": KindInfo("missing_data", 1.0, "(unused) a region's exporters go silent: missing data, not a GPU incident", None),
}

# The serving layer's incidents (they need ``cluster: {serving: true}``, and act on nothing else): scope
# {region, model} (model default: the fraud scorer). Kept apart from KINDS, the training cluster's incidents, whose
# every kind has a GPU-telemetry signature test; these are tested on the serving tables (test_slo.py).
SERVING_INCIDENT_KINDS: dict[str, KindInfo] = {
    "serving_error_spike": KindInfo("software", 0.1, "share of the model's requests that fail (HTTP 5xx)", None),
    "serving_budget_burn": KindInfo("software", 0.004, "share of the model's requests that fail: a slow error-budget burn", None),
    "serving_latency_regression": KindInfo("software", 40.0, "factor on the latency median of the point release "
                                           "(v<N>.1) the model serves from the incident's start", None),
}
SERVING_KINDS = tuple(SERVING_INCIDENT_KINDS)

# The facility layer's incidents (they need ``cluster: {facility: true}``): scope {region} or {rack: id},
# one rack (gpu_health.sim.facility). Kept apart from KINDS like the serving kinds: their signatures are tested on
# the facility table and the GPUs of the rack (test_facility_source.py).
FACILITY_INCIDENT_KINDS: dict[str, KindInfo] = {
    "rack_cooling_failure": KindInfo("facility", 14.0, "degrees C the rack's inlet rises over 10 minutes (a failed CRAH / rear-door unit)", None),
    "power_cap_hit": KindInfo("facility", 0.55, "share of its rating the rack's power budget is cut to; its GPUs are power-capped to fit", None),
}
CHANGE_INCIDENT_KINDS: dict[str, KindInfo] = {
    # change and access monitoring: a change made by hand, with no change ticket and outside any window.
    # scope {region, nodes, change_kind (default node_taint), actor}; it leaves a change_events row only (severity low:
    # the expected alert is a software ticket, never a page)
    "unticketed_change": KindInfo("software", 1.0, "(unused) a node change made with no ticket, outside any window", None),
}
# The platform layer's incidents (kube_pods / kube_nodes need ``cluster: {platform: true}``, and
# cpu_fallback also marks the GPU and runtime tables): gpu_health.sim.platform says what each leaves.
PLATFORM_INCIDENT_KINDS: dict[str, KindInfo] = {
    "cpu_fallback": KindInfo("software", 100.0, "factor by which the scope's training jobs slow down on the CPU "
                             "(their pods request no nvidia.com/gpu)", None),
    "pods_pending_taint": KindInfo("scheduling", 6.0, "pods of a new job pending on the GPU taint they do not tolerate", None),
    "crash_loop": KindInfo("software", 4.0, "pods of a new job in CrashLoopBackOff on the scope's nodes", None),
    "device_plugin_missing": KindInfo("software", 1.0, "(unused) the scope's nodes advertise 0 allocatable GPUs", None),
    # the application layer's: acts on job_runtime_metrics only (no platform knob needed)
    "diverging_run": KindInfo("software", 1.0, "growth of the scope's jobs' loss per hour from the start (1.0 = doubles)", None),
}
# Capacity incidents: they change how much work arrives, not how it runs -- no GPU-telemetry signature,
# so they are kept apart from KINDS; the capacity_headroom table is what sees them (test_forecast.py). scope {region,
# pool}; demand grows from the start and holds its level after the end.
CAPACITY_INCIDENT_KINDS: dict[str, KindInfo] = {
    "demand_growth": KindInfo("capacity", 0.05, "weekly compounding growth of the scope's job arrival rate "
                              "(0.05 = +5 % a week) from the start; the level reached at the end holds", None),
}

# kinds whose targets include specific jobs (labels carry their job_ids)
JOB_TARGETED_KINDS = ("training_stall", "dummy_workload")

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|m|min|h|d)\s*$")


def parse_duration(text) -> pd.Timedelta:
    if isinstance(text, int | float):
        return pd.Timedelta(minutes=float(text))
    m = _DURATION.match(str(text))
    if not m:
        raise ValueError(f"duration {text!r}: expected e.g. 45s, 90m, 2h, 1d")
    unit = {"s": "s", "m": "min", "min": "min", "h": "h", "d": "D"}[m.group(2)]
    return pd.Timedelta(float(m.group(1)), unit=unit)


def parse_ts(value, what: str) -> pd.Timestamp:
    ts = pd.Timestamp(value)
    if ts.tzinfo is None:
        raise ValueError(f"{what}: {value!r} has no timezone; write UTC explicitly (e.g. 2026-11-02T00:00:00Z)")
    return ts.tz_convert("UTC")


@dataclass(frozen=True)
class Rollout:
    """How a driver_regression's upgrade reaches its nodes: in waves, each drained while it installs."""
    waves: int = 4
    every_s: int = 1200         # between the waves' drains
    drain_s: int = 480          # each wave's nodes drained (GPUs unavailable) while the driver installs
    fail_within_s: int = 300    # a failing job dies this soon after it starts (set-up, first kernels)
    failure_xids: tuple[int, ...] = (13, 31, 119)
    requeue: float = 0.4        # share of the failed Slurm jobs requeued (``--requeue``), run once more


ROLLOUT_KEYS = {"waves", "every", "drain", "fail_within", "failure_xids", "requeue"}


def parse_rollout(spec, what: str) -> Rollout:
    if not isinstance(spec, dict):
        raise ValueError(f"{what}: rollout must be a mapping with keys {sorted(ROLLOUT_KEYS)}")
    unknown = set(spec) - ROLLOUT_KEYS
    if unknown:
        raise ValueError(f"{what}: unknown rollout key(s) {sorted(unknown)}; known: {sorted(ROLLOUT_KEYS)}")
    d = Rollout()
    secs = lambda key, default: int(parse_duration(spec[key]).total_seconds()) if key in spec else default  # noqa: E731
    out = Rollout(waves=max(1, int(spec.get("waves", d.waves))), every_s=secs("every", d.every_s),
                  drain_s=secs("drain", d.drain_s), fail_within_s=secs("fail_within", d.fail_within_s),
                  failure_xids=tuple(int(x) for x in spec.get("failure_xids", d.failure_xids)),
                  requeue=float(spec.get("requeue", d.requeue)))
    if out.drain_s < 120:
        raise ValueError(f"{what}: rollout drain {spec.get('drain')!r} is under 2 minutes")
    if out.fail_within_s < 60 or not out.failure_xids or not 0.0 <= out.requeue <= 1.0:
        raise ValueError(f"{what}: rollout needs fail_within >= 1m, at least one failure Xid and 0 <= requeue <= 1")
    return out


@dataclass
class Incident:
    incident_id: str
    kind: str
    family: str
    severity: str
    start: pd.Timestamp
    end: pd.Timestamp
    magnitude: float
    scope: dict
    region: str | None = None
    node_ids: tuple[str, ...] = ()
    gpu_uuids: tuple[str, ...] = ()
    team: str | None = None
    fraction: float = 1.0
    pool: str | None = None
    from_version: str | None = None
    to_version: str | None = None
    job_ids: tuple[str, ...] = ()
    rollout: Rollout | None = None

    def waves(self) -> list[tuple[pd.Timestamp, tuple[str, ...]]]:
        """A rollout's waves: (drain start, nodes), every ``every_s`` from the start, before the rollback."""
        r = self.rollout
        if r is None:
            return []
        out = [(self.start + pd.Timedelta(seconds=k * r.every_s), self.node_ids[k::r.waves]) for k in range(r.waves)]
        return [(ts, part) for ts, part in out if part and ts < self.end]

    def active(self, t_min: np.ndarray) -> np.ndarray:
        """Boolean mask of minutes (int minutes since epoch origin) inside the incident."""
        return (t_min >= _minute(self.start)) & (t_min < _minute(self.end))


@dataclass
class Change:
    event_id: str
    ts: pd.Timestamp
    kind: str
    scope: str
    from_version: str | None
    to_version: str | None
    description: str
    node_ids: tuple[str, ...] = ()
    drain_s: int = 0    # the nodes are drained (GPUs unavailable) for this long from ts while the change installs
    actor: str | None = None   # who made it (change_events.actor)
    ticket: str | None = None  # its change-request reference (change_events.ticket)
    requeue: bool = False  # the drain requeues the Slurm jobs running there (they run again after it)


@dataclass
class Scenario:
    seed: int
    start: pd.Timestamp
    end: pd.Timestamp
    cluster: Cluster
    incidents: list[Incident] = field(default_factory=list)
    changes: list[Change] = field(default_factory=list)
    name: str = "scenario"

    @property
    def key(self) -> int:
        return stable_id(f"{self.name}:{self.seed}")




def _minute(ts: pd.Timestamp) -> int:
    return int((pd.Timestamp(ts) - ORIGIN) // pd.Timedelta(minutes=1))


def load_scenario(path_or_dict, *, name: str | None = None) -> Scenario:
    """Parse and resolve a scenario (a YAML path or an already-loaded mapping)."""
    if isinstance(path_or_dict, str | Path):
        path = Path(path_or_dict)
        raw = yaml.safe_load(path.read_text())
        name = name or path.stem
    else:
        raw = dict(path_or_dict)
    if not isinstance(raw, dict):
        raise ValueError(f"scenario {name}: expected a mapping at the top level")
    unknown = set(raw) - {"seed", "start", "end", "cluster", "incidents", "changes", "description", "name"}
    if unknown:
        raise ValueError(f"scenario {name}: unknown key(s) {sorted(unknown)}")
    seed = int(raw.get("seed", 0))
    start = parse_ts(raw.get("start", "2026-11-02T00:00:00Z"), "start")
    end = parse_ts(raw.get("end", start + pd.Timedelta(days=7)), "end")
    cluster = Cluster(ClusterSpec.from_config(raw.get("cluster", "default")))
    scen = Scenario(seed=seed, start=start, end=end, cluster=cluster, name=raw.get("name") or name or "scenario")
    for i, spec in enumerate(raw.get("incidents") or []):
        scen.incidents.append(_resolve_incident(scen, i, spec))
    for i, spec in enumerate(raw.get("changes") or []):
        scen.changes.extend(_resolve_change(scen, i, spec))
    scen.changes.extend(_incident_changes(scen))
    scen.changes.sort(key=lambda c: c.ts)
    return scen


def default_scenario(seed: int = 7, start="2026-11-02T00:00:00Z", days: int = 7) -> Scenario:
    """A quiet scenario on the default cluster (what `dagster dev` runs live)."""
    start = parse_ts(start, "start")
    return load_scenario({"seed": seed, "start": start, "end": start + pd.Timedelta(days=days)}, name="default")


def _pick(seed: int, salt: str, items: list, k: int) -> list:
    if k >= len(items):
        return list(items)
    keys = uniform(seed, stable_id(salt), np.arange(len(items)))
    return [items[i] for i in np.argsort(keys)[:k]]


def _resolve_incident(scen: Scenario, i: int, spec: dict) -> Incident:
    spec = dict(spec)
    kind = spec.get("kind")
    ops_kinds = {**FACILITY_INCIDENT_KINDS, **CHANGE_INCIDENT_KINDS, **PLATFORM_INCIDENT_KINDS, **CAPACITY_INCIDENT_KINDS}
    if kind not in KINDS and kind not in SERVING_INCIDENT_KINDS and kind not in ops_kinds:
        raise ValueError(f"incident {i}: unknown kind {kind!r}; known kinds: {sorted(KINDS)}, serving: {sorted(SERVING_INCIDENT_KINDS)}, "
                         f"facility, changes, platform and capacity: {sorted(ops_kinds)}")
    info = KINDS.get(kind) or SERVING_INCIDENT_KINDS.get(kind) or ops_kinds[kind]
    start = parse_ts(spec["start"], f"incident {i} start")
    if "end" in spec:
        end = parse_ts(spec["end"], f"incident {i} end")
    else:
        end = start + parse_duration(spec.get("duration", "60m"))
    severity = spec.get("severity", "high")
    if severity not in ("high", "low"):
        raise ValueError(f"incident {i}: severity must be high or low, got {severity!r}")
    scope = dict(spec.get("scope") or {})
    nodes = scen.cluster.nodes
    region = scope.get("region")
    if region is not None and region not in set(nodes["region"]):
        raise ValueError(f"incident {i}: unknown region {region!r}")
    pool = scope.get("pool", info.default_pool)
    cand = nodes
    if region:
        cand = cand[cand["region"] == region]
    if pool:
        cand = cand[cand["pool"] == pool]
    if "sku" in scope:
        cand = cand[cand["sku"] == scope["sku"]]
    salt = f"{scen.name}:{i}:{kind}"
    if "node_ids" in scope:
        node_ids = tuple(scope["node_ids"])
        missing = set(node_ids) - set(nodes["node_id"])
        if missing:
            raise ValueError(f"incident {i}: unknown node_ids {sorted(missing)}")
    elif "nodes" in scope:
        want = int(scope["nodes"])
        ids = cand["node_id"].tolist()
        if pool == "distributed" or kind in ("network_degradation", "training_stall"):
            # whole distributed groups, so a multi-node job sits on the chosen nodes
            lanes = scen.cluster.lanes
            lanes = lanes[lanes["pool"] == "distributed"]
            if region:
                lanes = lanes[lanes["region"] == region]
            groups = [g for g in lanes["node_ids"] if set(g) <= set(ids)]
            chosen = []
            for g in _pick(scen.seed, salt, groups, len(groups)):
                if len(chosen) >= want:
                    break
                chosen.extend(g)
            node_ids = tuple(chosen[:max(want, 1)]) if chosen else tuple(_pick(scen.seed, salt, ids, want))
        else:
            node_ids = tuple(_pick(scen.seed, salt, ids, want))
    elif "fraction" in scope and kind == "driver_regression" and spec.get("rollout") is not None:
        # a rollout's share of the scope's nodes, picked as a change's fraction is
        ids = cand["node_id"].tolist()
        node_ids = tuple(_pick(scen.seed, salt, ids, max(1, round(float(scope["fraction"]) * len(ids)))))
    elif region or pool:
        node_ids = tuple(cand["node_id"])
    else:
        node_ids = tuple(nodes["node_id"])
    if region is None and node_ids:
        regions = set(nodes.loc[nodes["node_id"].isin(node_ids), "region"])
        region = regions.pop() if len(regions) == 1 else None
    gpu_uuids: tuple[str, ...] = ()
    if kind in ("gpu_ecc_fault", "gpu_fell_off_bus"):
        per_node = int(scope.get("gpus", max(1, int(spec.get("magnitude", 1))) if kind == "gpu_fell_off_bus" else 1))
        g = scen.cluster.gpus
        chosen = []
        for nid in node_ids:
            chosen.extend(_pick(scen.seed, f"{salt}:{nid}", g.loc[g["node_id"] == nid, "gpu_uuid"].tolist(), per_node))
        gpu_uuids = tuple(chosen)
    inc = Incident(
        incident_id=f"inc-{i + 1:03d}-{kind}",
        kind=kind, family=info.family, severity=severity, start=start, end=end,
        magnitude=float(spec.get("magnitude", info.magnitude)), scope=scope,
        region=region, node_ids=node_ids, gpu_uuids=gpu_uuids, team=scope.get("team"),
        fraction=float(scope.get("fraction", 1.0)), pool=pool,
    )
    if kind in FACILITY_INCIDENT_KINDS:
        from gpu_health.sim.facility import resolve_rack
        resolve_rack(scen, inc, salt)
    if kind == "driver_regression":
        inc.from_version = spec.get("from_version", scen.cluster.spec.driver_version)
        inc.to_version = spec.get("to_version", "560.35.03")
        if spec.get("rollout") is not None:
            inc.rollout = parse_rollout(spec["rollout"], f"incident {i}")
            inc.fraction = 1.0  # the scope's fraction chose the nodes: every job there is exposed
    if kind == "framework_regression":
        inc.from_version = spec.get("from_version")
        inc.to_version = spec.get("to_version", "torch-2.14.0")
    return inc


def _scope_text(region: str | None, node_ids, all_nodes: int) -> str:
    if node_ids and len(node_ids) < all_nodes:
        return ",".join(node_ids)
    return region or "*"


def _resolve_change(scen: Scenario, i: int, spec: dict) -> list[Change]:
    """One change event, or one per batch of a rolling change.

    Scope keys: ``region``; ``nodes`` (a count) or ``node_ids`` or ``fraction`` (share of the scope's nodes);
    ``batches`` (rolled out in that many batches, ``every`` apart, default 30m); ``drain`` (each batch's nodes
    drained, their GPUs unavailable, for that long from the batch's start while the change installs).
    """
    kind = spec.get("kind")
    from gpu_health.contracts.models import CHANGE_KINDS
    if kind not in CHANGE_KINDS:
        raise ValueError(f"change {i}: unknown kind {kind!r}; known: {CHANGE_KINDS}")
    ts = parse_ts(spec["ts"], f"change {i} ts")
    scope = dict(spec.get("scope") or {})
    nodes = scen.cluster.nodes
    if scope.get("region") and scope["region"] not in set(nodes["region"]):
        raise ValueError(f"change {i}: unknown region {scope['region']!r}")
    cand = nodes[nodes["region"] == scope["region"]] if scope.get("region") else nodes
    if "node_ids" in scope:
        node_ids = tuple(scope["node_ids"])
    elif "nodes" in scope:
        node_ids = tuple(_pick(scen.seed, f"change:{i}", cand["node_id"].tolist(), int(scope["nodes"])))
    elif "fraction" in scope:
        want = max(1, round(float(scope["fraction"]) * len(cand)))
        node_ids = tuple(_pick(scen.seed, f"change:{i}", cand["node_id"].tolist(), want))
    else:
        node_ids = tuple(cand["node_id"])
    batches = max(1, int(scope.get("batches", 1)))
    every = parse_duration(scope.get("every", "30m"))
    drain_s = int(parse_duration(scope["drain"]).total_seconds()) if "drain" in scope else 0
    if drain_s and drain_s < 120:
        raise ValueError(f"change {i}: drain {scope['drain']!r} is under 2 minutes")
    description = spec.get("description", f"{kind} (benign)")
    out = []
    for b in range(batches):
        part = node_ids[b::batches] if batches > 1 else node_ids
        if not part:
            continue
        out.append(Change(
            event_id=f"chg-{i + 1:03d}" + (f"-b{b + 1}" if batches > 1 else ""), ts=ts + b * every, kind=kind,
            scope=_scope_text(scope.get("region"), part, len(nodes)),
            from_version=spec.get("from_version"), to_version=spec.get("to_version"),
            description=description + (f" (batch {b + 1} of {batches})" if batches > 1 else ""), node_ids=part,
            drain_s=drain_s, actor=spec.get("actor"), ticket=spec.get("ticket"),
        ))
    return out


def _incident_changes(scen: Scenario) -> list[Change]:
    """The change events an incident's story includes (the deploy, and its rollback)."""
    out = []
    n_nodes = len(scen.cluster.nodes)
    for inc in scen.incidents:
        scope = _scope_text(inc.region, inc.node_ids, n_nodes)
        if inc.kind == "driver_regression" and inc.rollout is not None:
            waves = inc.waves()
            for k, (ts, part) in enumerate(waves):
                out.append(Change(f"{inc.incident_id}-deploy-w{k + 1}", ts, "driver_upgrade",
                                  _scope_text(inc.region, part, n_nodes), inc.from_version, inc.to_version,
                                  f"NVIDIA driver {inc.from_version} -> {inc.to_version} (wave {k + 1} of {len(waves)})",
                                  part, drain_s=inc.rollout.drain_s, requeue=True))
            out.append(Change(f"{inc.incident_id}-rollback", inc.end, "driver_upgrade", scope, inc.to_version, inc.from_version,
                              f"rollback NVIDIA driver {inc.to_version} -> {inc.from_version}", inc.node_ids))
        elif inc.kind == "driver_regression":
            out.append(Change(f"{inc.incident_id}-deploy", inc.start, "driver_upgrade", scope, inc.from_version, inc.to_version,
                              f"NVIDIA driver {inc.from_version} -> {inc.to_version}", inc.node_ids))
            out.append(Change(f"{inc.incident_id}-rollback", inc.end, "driver_upgrade", scope, inc.to_version, inc.from_version,
                              f"rollback NVIDIA driver {inc.to_version} -> {inc.from_version}", inc.node_ids))
        elif inc.kind == "framework_regression":
            out.append(Change(f"{inc.incident_id}-deploy", inc.start, "framework_release", inc.team or "*", inc.from_version, inc.to_version,
                              f"framework release {inc.to_version}" + (f" for team {inc.team}" if inc.team else ""), ()))
            out.append(Change(f"{inc.incident_id}-rollback", inc.end, "framework_release", inc.team or "*", inc.to_version, inc.from_version,
                              f"rollback of {inc.to_version}", ()))
        elif inc.kind == "unticketed_change":
            kind = inc.scope.get("change_kind", "node_taint")
            out.append(Change(f"{inc.incident_id}-change", inc.start, kind, scope, None, inc.scope.get("to_version"),
                              inc.scope.get("description", f"{kind} applied by hand"), inc.node_ids,
                              actor=inc.scope.get("actor", "operator@example.com"), ticket=None))
        elif inc.kind == "priority_change":
            out.append(Change(f"{inc.incident_id}-deploy", inc.start, "scheduler_config", inc.region or "*", None, None,
                              f"scheduler priority/backfill config change in {inc.region or 'all regions'}", inc.node_ids))
            out.append(Change(f"{inc.incident_id}-rollback", inc.end, "scheduler_config", inc.region or "*", None, None,
                              "revert scheduler priority/backfill config", inc.node_ids))
    return out
