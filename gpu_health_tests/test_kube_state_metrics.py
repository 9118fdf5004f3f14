"""kube_pods / kube_nodes from kube-state-metrics series in a real Prometheus (backfilled with promtool).

The scrapes are written in kube-state-metrics v2's exposition (metric and label names as its docs list them,
``docs/metrics/workload/pod-metrics.md`` and ``docs/metrics/cluster/node-metrics.md``): a GPU job's pod running,
a pod crash-looping with its restart counter rising, a pod unschedulable, a CPU-only system pod; a GPU node and a
GPU node whose device plugin is gone (allocatable 0).
"""

import pandas as pd
import pytest

from gpu_health.contracts.validate import validate_frame
from gpu_health.evaluation.promexport import scrape_to_openmetrics
from gpu_health.sources.prometheus import PrometheusSource
from gpu_health_tests.services.prometheus import prometheus_factory  # noqa: F401  (fixture)

T0 = pd.Timestamp("2026-01-05 10:00", tz="UTC")
MIN = pd.Timedelta(minutes=1)
PHASES = ("Pending", "Running", "Succeeded", "Failed", "Unknown")


def _pod(ns, pod, node, phase, *, gpus=0, restarts=0, waiting=None, unschedulable=False, owner=None, image="img:1"):
    uid = f'uid="{pod}-uid"'
    lines = [f'kube_pod_info{{namespace="{ns}",pod="{pod}",{uid},host_ip="",pod_ip="",node="{node}",'
             f'created_by_kind="Job",created_by_name="{owner or ""}",priority_class="",host_network="false"}} 1']
    lines += [f'kube_pod_status_phase{{namespace="{ns}",pod="{pod}",{uid},phase="{p}"}} {int(p == phase)}' for p in PHASES]
    if phase != "Pending" or node:
        lines.append(f'kube_pod_container_info{{namespace="{ns}",pod="{pod}",{uid},container="main",image_spec="{image}",'
                     f'image="{image}",image_id="",container_id=""}} 1')
        lines.append(f'kube_pod_container_status_restarts_total{{namespace="{ns}",pod="{pod}",{uid},container="main"}} {restarts}')
    if gpus:
        lines.append(f'kube_pod_container_resource_requests{{namespace="{ns}",pod="{pod}",{uid},container="main",node="{node}",'
                     f'resource="nvidia_com_gpu",unit="integer"}} {gpus}')
    lines.append(f'kube_pod_container_resource_requests{{namespace="{ns}",pod="{pod}",{uid},container="main",node="{node}",'
                 f'resource="cpu",unit="core"}} 4')
    if waiting:
        lines.append(f'kube_pod_container_status_waiting_reason{{namespace="{ns}",pod="{pod}",{uid},container="main",reason="{waiting}"}} 1')
    if unschedulable:
        lines.append(f'kube_pod_status_unschedulable{{namespace="{ns}",pod="{pod}",{uid}}} 1')
    if owner:
        lines.append(f'kube_pod_owner{{namespace="{ns}",pod="{pod}",{uid},owner_kind="Job",owner_name="{owner}",owner_is_controller="true"}} 1')
    return lines


def _node(node, capacity, allocatable, *, ready=True, cordoned=False):
    return [
        f'kube_node_info{{node="{node}",kernel_version="6.8.0-49-generic",os_image="Ubuntu 22.04",container_runtime_version="containerd://1.7",'
        f'kubelet_version="v1.30.2",kubeproxy_version="v1.30.2",provider_id="",pod_cidr="",internal_ip="10.0.0.1",system_uuid=""}} 1',
        f'kube_node_status_capacity{{node="{node}",resource="nvidia_com_gpu",unit="integer"}} {capacity}',
        f'kube_node_status_allocatable{{node="{node}",resource="nvidia_com_gpu",unit="integer"}} {allocatable}',
        f'kube_node_status_capacity{{node="{node}",resource="cpu",unit="core"}} 224',
        f'kube_node_spec_taint{{node="{node}",key="nvidia.com/gpu",value="present",effect="NoSchedule"}} 1',
        f'kube_node_status_condition{{node="{node}",condition="Ready",status="true"}} {int(ready)}',
        f'kube_node_status_condition{{node="{node}",condition="Ready",status="false"}} {int(not ready)}',
        f'kube_node_status_condition{{node="{node}",condition="Ready",status="unknown"}} 0',
        f'kube_node_spec_unschedulable{{node="{node}"}} {int(cordoned)}',
    ]


def scrape(i: int) -> str:
    """kube-state-metrics' /metrics at minute ``i``: the crash-looping pod's counter rises 0, 1, 2, 2, 3, 3."""
    families: dict[str, list[str]] = {}
    lines = (_pod("fraud-ml", "train-llm-0", "gpu-1", "Running", gpus=8, owner="train-llm", image="reg/llm:0.9")
             + _pod("fraud-ml", "train-bad-0", "gpu-1", "Running", gpus=0, restarts=[0, 1, 2, 2, 3, 3][i],
                    waiting="CrashLoopBackOff", owner="train-bad")
             + _pod("research", "train-new-0", "", "Pending", gpus=8, unschedulable=True, owner="train-new")
             + _pod("kube-system", "nvidia-device-plugin-x2k8q", "gpu-1", "Running")
             + _node("gpu-1", 8, 8) + _node("gpu-2", 8, 0))
    for line in lines:
        families.setdefault(line.split("{", 1)[0], []).append(line)
    out = []
    for name, rows in families.items():
        kind = "counter" if name.endswith("_total") else "gauge"
        out.append(f"# TYPE {name} {kind}")
        out.extend(rows)
    return "\n".join(out) + "\n"


@pytest.fixture
def ksm_prometheus(prometheus_factory, tmp_path):  # noqa: F811
    om = scrape_to_openmetrics([scrape(i) for i in range(6)], [T0 + i * MIN for i in range(6)], tmp_path / "ksm.om")
    return prometheus_factory(om)


def test_kube_state_metrics_series_become_contract_rows(ksm_prometheus):
    source = PrometheusSource(ksm_prometheus, region="lab", kube_state_metrics=True)
    assert {"kube_pods", "kube_nodes"} <= source.tables()
    pods = source.read("kube_pods", T0 + MIN, T0 + 6 * MIN).frame
    nodes = source.read("kube_nodes", T0 + MIN, T0 + 6 * MIN).frame
    for frame, table in ((pods, "kube_pods"), (nodes, "kube_nodes")):
        v = validate_frame(frame, table, start=T0, end=T0 + 10 * MIN, origin="test")
        assert len(v.rejects) == 0, v.rejects.to_string()
    assert sorted(pods["ts"].unique()) == [T0 + i * MIN for i in range(1, 6)]
    at = pods[pods["ts"] == T0 + 2 * MIN].set_index("pod")
    llm = at.loc["train-llm-0"]
    assert (llm.phase, llm.node_id, llm.gpu_request, llm.job_id, llm.container_image, llm.region) == (
        "Running", "gpu-1", 8, "train-llm", "reg/llm:0.9", "lab")
    assert pd.isna(llm.reason) and pd.isna(llm.message)
    bad = pods[pods["pod"] == "train-bad-0"].sort_values("ts")
    assert bad["restarts"].tolist() == [1, 2, 2, 3, 3] and (bad["reason"] == "CrashLoopBackOff").all()
    assert (bad["gpu_request"] == 0).all()  # no nvidia_com_gpu series: nothing requested, not unknown
    new = at.loc["train-new-0"]
    assert (new.phase, new.reason, new.gpu_request) == ("Pending", "Unschedulable", 8) and pd.isna(new.node_id)
    plugin = at.loc["nvidia-device-plugin-x2k8q"]
    assert pd.isna(plugin.job_id) and plugin.gpu_request == 0
    n = nodes[nodes["ts"] == T0 + 2 * MIN].set_index("node_id")
    assert (n.loc["gpu-2", "gpu_capacity"], n.loc["gpu-2", "gpu_allocatable"]) == (8, 0)
    assert n["taints"].tolist() == ["nvidia.com/gpu=present:NoSchedule"] * 2
    assert n["ready"].all() and not n["unschedulable"].any()


def test_without_the_flag_or_without_kube_state_metrics_there_is_no_kube_data(ksm_prometheus, prometheus_factory, tmp_path):  # noqa: F811
    assert not {"kube_pods", "kube_nodes"} & PrometheusSource(ksm_prometheus, region="lab").tables()
    # a Prometheus that never scraped kube-state-metrics: zero rows, not an error and not a wait
    om = scrape_to_openmetrics(["# TYPE up gauge\nup{job=\"dcgm\"} 1\n"] * 3, [T0 + i * MIN for i in range(3)], tmp_path / "up.om")
    source = PrometheusSource(prometheus_factory(om), region="lab", kube_state_metrics=True)
    assert source.read("kube_pods", T0 + MIN, T0 + 3 * MIN).frame.empty
    assert source.read("kube_nodes", T0 + MIN, T0 + 3 * MIN).frame.empty


def test_the_source_resource_turns_it_on(ksm_prometheus):
    from gpu_health.defs.resources import TelemetrySourceResource

    on = TelemetrySourceResource(kind="prometheus", prometheus_url=ksm_prometheus, prometheus_region="lab",
                                 prometheus_kube_state_metrics="true").get()
    assert on.for_table("kube_pods").name == "prometheus" and on.for_table("kube_nodes").name == "prometheus"
    assert len(on.read("kube_nodes", T0 + MIN, T0 + 3 * MIN).frame) == 4
    # off: the kube tables fall through to the landing zone (files a collector drops there, or zero rows)
    off = TelemetrySourceResource(kind="prometheus", prometheus_url=ksm_prometheus, prometheus_region="lab").get()
    assert off.for_table("kube_pods").name == "landing"
