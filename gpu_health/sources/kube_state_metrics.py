"""kube_pods and kube_nodes from kube-state-metrics series in Prometheus (the platform layer).

The mapping, written once (series -> contract column; kube-state-metrics v2 names and labels):

==========================================================================  ===========================================
series                                                                      column
==========================================================================  ===========================================
``kube_pod_status_phase{namespace,pod,phase} == 1``                         ``phase`` (a pod's row exists while it does)
``kube_pod_info{namespace,pod,node}``                                       ``node_id`` (``node=""`` while unscheduled)
``kube_pod_container_status_waiting_reason{reason} == 1``                   ``reason`` (CrashLoopBackOff, ...)
``kube_pod_status_unschedulable == 1``                                      ``reason`` = ``Unschedulable`` (no waiting
                                                                            reason: no container was created yet)
``kube_pod_container_resource_requests{resource="nvidia_com_gpu"}``         ``gpu_request``, summed over containers
                                                                            (no series = 0: nothing requested)
``kube_pod_container_status_restarts_total``                                ``restarts``, summed over containers
                                                                            (cumulative, as the contract keeps it)
``kube_pod_container_info{image}``                                          ``container_image`` (the first container)
``kube_pod_owner{owner_kind,owner_name}``                                   ``job_id`` = the owning Job's (or other
                                                                            controller's) name
``kube_node_info{node}``                                                    a ``kube_nodes`` row
``kube_node_status_capacity`` / ``_allocatable{resource="nvidia_com_gpu"}`` ``gpu_capacity`` / ``gpu_allocatable``
                                                                            (no series = 0: no GPU advertised)
``kube_node_spec_taint{key,value,effect}``                                  ``taints`` (``key=value:effect``, sorted)
``kube_node_status_condition{condition="Ready",status="true"}``             ``ready``
``kube_node_spec_unschedulable``                                            ``unschedulable``
==========================================================================  ===========================================

``message`` comes from the Kubernetes event stream, which kube-state-metrics does not export: it is null here, so a
pending pod read from Prometheus alone is not classified (taint vs. a full cluster) -- missing data, never a page.
Both tables are optional sources: a Prometheus without kube-state-metrics yields zero rows, never a wait.
Minute semantics are the Prometheus source's: the last sample in each minute (``last_over_time(...[59999ms])``).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from gpu_health.contracts import PLATFORM_SOURCES, columns, conform, empty_frame
from gpu_health.sources.prom_frames import _K, _V

KUBE_TABLES = frozenset(PLATFORM_SOURCES)  # the platform family of the catalogue
GPU_RESOURCE_LABEL = "nvidia_com_gpu"  # kube-state-metrics sanitizes nvidia.com/gpu into a label value this way
POD_KEY = ["namespace", "pod"]


def _ones(df: pd.DataFrame) -> pd.DataFrame:
    """Rows of a 0/1 state series that hold 1 (the current state), minute 0 (the look-back) dropped."""
    if df.empty:
        return df
    return df[(df[_V] == 1) & (df[_K] >= 1)]


def _first_by(df: pd.DataFrame, key: list[str], label: str) -> pd.DataFrame:
    if df.empty or label not in df:
        return pd.DataFrame(columns=[*key, _K, label])
    return df.sort_values([*key, _K, label]).drop_duplicates([*key, _K])[[*key, _K, label]]


def _sum_by(df: pd.DataFrame, key: list[str], name: str) -> pd.DataFrame:
    if df.empty:
        return pd.DataFrame(columns=[*key, _K, name])
    return df.groupby([*key, _K], as_index=False)[_V].sum().rename(columns={_V: name})


def pods_frame(series: dict[str, pd.DataFrame], ts, region) -> pd.DataFrame:
    """``kube_pods`` rows from the range frames of the series above (keys: phase, info, waiting, unschedulable,
    requests, restarts, image, owner); ``ts`` maps minute indexes to timestamps, ``region`` a frame to regions."""
    phase = _ones(series["phase"])
    if phase.empty or "phase" not in phase:
        return empty_frame("kube_pods")
    rows = phase.sort_values([*POD_KEY, _K]).drop_duplicates([*POD_KEY, _K])
    rows = rows.assign(region=region(rows).to_numpy())[[*POD_KEY, _K, "phase", "region"]]
    info = _first_by(series["info"], POD_KEY, "node").rename(columns={"node": "node_id"})
    waiting = _first_by(_ones(series["waiting"]), POD_KEY, "reason")
    unsched = _ones(series["unschedulable"])
    unsched = unsched[[*POD_KEY, _K]].drop_duplicates().assign(unschedulable=True) if len(unsched) else \
        pd.DataFrame(columns=[*POD_KEY, _K, "unschedulable"])
    image = _first_by(series["image"], POD_KEY, "image").rename(columns={"image": "container_image"})
    owner = _first_by(series["owner"], POD_KEY, "owner_name").rename(columns={"owner_name": "job_id"})
    for extra in (info, waiting, unsched, image, owner, _sum_by(series["requests"], POD_KEY, "gpu_request"),
                  _sum_by(series["restarts"], POD_KEY, "restarts")):
        rows = rows.merge(extra, on=[*POD_KEY, _K], how="left")
    node = rows["node_id"].astype(object)
    rows["node_id"] = node.where(node.notna() & (node != ""), None)
    reason = rows["reason"].astype(object)
    rows["reason"] = reason.where(reason.notna(), np.where(rows["unschedulable"].eq(True), "Unschedulable", None))
    rows["message"] = None
    rows["gpu_request"] = rows["gpu_request"].fillna(0).round().astype(np.int64)
    rows["restarts"] = rows["restarts"].fillna(0).round().astype(np.int64)
    owner_name = rows["job_id"].astype(object)
    rows["job_id"] = owner_name.where(owner_name.notna() & (owner_name != "<none>"), None)
    rows["container_image"] = rows["container_image"].astype(object).fillna("")
    rows["ts"] = ts(rows[_K]).to_numpy()
    out = rows[columns("kube_pods")].sort_values(["ts", "namespace", "pod"]).reset_index(drop=True)
    return conform(out, "kube_pods")


def _taint_text(df: pd.DataFrame) -> pd.DataFrame:
    if df.empty:
        return pd.DataFrame(columns=["node", _K, "taints"])
    value = df.get("value", pd.Series("", index=df.index)).fillna("").astype(str)
    text = df["key"].astype(str) + np.where(value != "", "=" + value, "") + ":" + df["effect"].astype(str)
    return (df.assign(t=text).groupby(["node", _K])["t"].agg(lambda s: ",".join(sorted(set(s))))
            .rename("taints").reset_index())


def nodes_frame(series: dict[str, pd.DataFrame], ts, region) -> pd.DataFrame:
    """``kube_nodes`` rows from the range frames (keys: info, capacity, allocatable, taint, ready,
    unschedulable)."""
    info = series["info"]
    info = info[info[_K] >= 1] if len(info) else info
    if info.empty or "node" not in info:
        return empty_frame("kube_nodes")
    rows = info.sort_values(["node", _K]).drop_duplicates(["node", _K])
    rows = rows.assign(region=region(rows).to_numpy())[["node", _K, "region"]]
    ready = _ones(series["ready"])
    ready = ready[["node", _K]].drop_duplicates().assign(ready=True) if len(ready) else pd.DataFrame(columns=["node", _K, "ready"])
    cordon = _ones(series["unschedulable"])
    cordon = cordon[["node", _K]].drop_duplicates().assign(unschedulable=True) if len(cordon) else \
        pd.DataFrame(columns=["node", _K, "unschedulable"])
    for extra in (_sum_by(series["capacity"], ["node"], "gpu_capacity"),
                  _sum_by(series["allocatable"], ["node"], "gpu_allocatable"),
                  _taint_text(_ones(series["taint"]) if len(series["taint"]) else series["taint"]), ready, cordon):
        rows = rows.merge(extra, on=["node", _K], how="left")
    rows["gpu_capacity"] = rows["gpu_capacity"].fillna(0).round().astype(np.int64)
    rows["gpu_allocatable"] = rows["gpu_allocatable"].fillna(0).round().astype(np.int64)
    rows["ready"] = rows["ready"].eq(True)
    rows["unschedulable"] = rows["unschedulable"].eq(True)
    rows["taints"] = rows["taints"].astype(object).where(rows["taints"].notna(), None)
    rows["ts"] = ts(rows[_K]).to_numpy()
    rows = rows.rename(columns={"node": "node_id"})
    out = rows[columns("kube_nodes")].sort_values(["ts", "node_id"]).reset_index(drop=True)
    return conform(out, "kube_nodes")


POD_QUERIES = {
    "phase": ("kube_pod_status_phase", None),
    "info": ("kube_pod_info", None),
    "waiting": ("kube_pod_container_status_waiting_reason", None),
    "unschedulable": ("kube_pod_status_unschedulable", None),
    "requests": ("kube_pod_container_resource_requests", {"resource": GPU_RESOURCE_LABEL}),
    "restarts": ("kube_pod_container_status_restarts_total", None),
    "image": ("kube_pod_container_info", None),
    "owner": ("kube_pod_owner", None),
}
NODE_QUERIES = {
    "info": ("kube_node_info", None),
    "capacity": ("kube_node_status_capacity", {"resource": GPU_RESOURCE_LABEL}),
    "allocatable": ("kube_node_status_allocatable", {"resource": GPU_RESOURCE_LABEL}),
    "taint": ("kube_node_spec_taint", None),
    "ready": ("kube_node_status_condition", {"condition": "Ready", "status": "true"}),
    "unschedulable": ("kube_node_spec_unschedulable", None),
}


def read_kube(source, table: str, window) -> pd.DataFrame:
    """One kube table for ``window`` through a :class:`~gpu_health.sources.prometheus.PrometheusSource` (its
    selector, region rules and retries apply)."""
    queries = POD_QUERIES if table == "kube_pods" else NODE_QUERIES
    series = {name: source._range(source._last(metric, regex), window) for name, (metric, regex) in queries.items()}
    build = pods_frame if table == "kube_pods" else nodes_frame
    return build(series, window.ts, source._region)
