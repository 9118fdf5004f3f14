"""The deployment kit in deploy/: Prometheus config and rules, the Grafana dashboard.

No Grafana server is packaged for Debian or PyPI here, so the dashboard is
checked as a JSON model (structure, datasource, layout, variables) and every
PromQL expression in it is run against a real Prometheus (here: parse and
evaluate with the kit's rules loaded; with data behind them:
test_stock_deployment.py, where Prometheus scrapes ``gpu-health
serve-metrics``).

The main scrape config (static targets) must pass ``promtool check config`` on
the Prometheus the project installs (Debian's, built without Kubernetes service
discovery). Its Kubernetes variant is checked with each ``kubernetes_sd_configs``
replaced by static targets that carry the ``__meta_kubernetes_*`` labels
Kubernetes discovery would set: the relabelling itself runs in the real
Prometheus and the targets it keeps, drops and labels are read back from its API.

Grafana's variable interpolation is reproduced here from its documentation
(:func:`grafana_format`, :func:`render`), so the queries Prometheus receives are
the ones Grafana would send for "All" and for each value a variable offers
(test_stock_deployment.py runs them over data for every value).
"""

import json
import re
import subprocess
import time
from pathlib import Path

import pytest
import requests
import yaml

from gpu_health_tests.services.prometheus import PrometheusServer, require_binary

DEPLOY = Path(__file__).resolve().parents[1] / "deploy"
PROMETHEUS_YML = DEPLOY / "prometheus" / "prometheus.yml"
KUBERNETES_YML = DEPLOY / "prometheus" / "prometheus-kubernetes.yml"
RULES = DEPLOY / "prometheus" / "recording_rules.yml"
RULES_TEST = DEPLOY / "prometheus" / "recording_rules_test.yml"
DASHBOARD = DEPLOY / "grafana" / "dashboards" / "gpu_health.json"
DATASOURCES = DEPLOY / "grafana" / "provisioning" / "datasources" / "gpu_health.yaml"
PANEL_TYPES = {"row", "stat", "timeseries", "bargauge", "table"}
# Grafana's documented format options the dashboard may use explicitly (the datasource's own default for a bare
# `$var` is left out: it is the datasource's choice, not documented, so the dashboard always names a format).
FORMATS = ("regex", "pipe", "csv")
ALL = "$__all"
# Grafana's regex escape (kbn.regexEscape): these characters get a backslash before them
_REGEX_SPECIAL = re.compile(r"[\\^$*+?.()|\[\]{}/]")
_REFERENCE = re.compile(r"\$\{(\w+)(?::(\w+))?\}|\$(\w+)")
THERMAL_LINE_C = 83  # the seed rules' GPUHighTemperature threshold (deploy/prometheus/seed_rules.yml), DCGM's slowdown range
STOCK_DCGM_DASHBOARD = "https://grafana.com/grafana/dashboards/12239"

# Discovered targets as Kubernetes would present them: (job, address, meta labels, expected after relabelling
# -- None when the job's relabelling must drop it).
DISCOVERED = [
    ("dcgm-exporter", "127.0.0.1:19400", {"__meta_kubernetes_pod_label_app_kubernetes_io_name": "dcgm-exporter",
                                          "__meta_kubernetes_pod_container_port_number": "9400",
                                          "__meta_kubernetes_pod_node_name": "dgx-a01"},
     {"node": "dgx-a01", "region": "us-east"}),
    ("dcgm-exporter", "127.0.0.1:19401", {"__meta_kubernetes_pod_label_app": "nvidia-dcgm-exporter",  # GPU Operator
                                          "__meta_kubernetes_pod_container_port_number": "9400",
                                          "__meta_kubernetes_pod_node_name": "dgx-a02"},
     {"node": "dgx-a02", "region": "us-east"}),
    ("dcgm-exporter", "127.0.0.1:19402", {"__meta_kubernetes_pod_label_app_kubernetes_io_name": "jupyter",
                                          "__meta_kubernetes_pod_container_port_number": "9400",
                                          "__meta_kubernetes_pod_node_name": "dgx-a01"}, None),
    ("dcgm-exporter", "127.0.0.1:19403", {"__meta_kubernetes_pod_label_app_kubernetes_io_name": "dcgm-exporter",
                                          "__meta_kubernetes_pod_container_port_number": "8080",
                                          "__meta_kubernetes_pod_node_name": "dgx-a01"}, None),
    ("node-exporter", "127.0.0.1:19100", {"__meta_kubernetes_pod_label_app_kubernetes_io_name": "prometheus-node-exporter",
                                          "__meta_kubernetes_pod_container_port_number": "9100",
                                          "__meta_kubernetes_pod_node_name": "dgx-a01"},
     {"node": "dgx-a01", "region": "us-east"}),
    ("kube-state-metrics", "127.0.0.1:18080", {"__meta_kubernetes_service_label_app_kubernetes_io_name": "kube-state-metrics",
                                               "__meta_kubernetes_endpoint_port_name": "http"},
     {"region": "us-east"}),
    ("kube-state-metrics", "127.0.0.1:18081", {"__meta_kubernetes_service_label_app_kubernetes_io_name": "kube-state-metrics",
                                               "__meta_kubernetes_endpoint_port_name": "telemetry"}, None),
]


def grafana_format(values: list[str], fmt: str | None, all_value: str | None = None) -> str:
    """What Grafana writes for ``${var:fmt}`` with ``values`` selected (Grafana docs, "Advanced variable format
    options"): ``regex`` escapes each value and joins several as ``(a|b)``; ``pipe`` joins with ``|``; ``csv`` with
    ``,``. A custom all value ("All" selected) is written as it is, never escaped ("Custom all value")."""
    if all_value is not None:
        return all_value
    if fmt == "regex":
        escaped = [_REGEX_SPECIAL.sub(lambda m: "\\" + m.group(0), v) for v in values]
        return escaped[0] if len(escaped) == 1 else "(" + "|".join(escaped) + ")"
    if fmt == "pipe":
        return "|".join(values)
    if fmt == "csv":
        return ",".join(values)
    raise ValueError(f"format {fmt!r} is not one the dashboard may use ({FORMATS})")


def render(text: str, selection: dict[str, list[str] | str], dashboard: dict | None = None) -> str:
    """``text`` with every variable reference interpolated for ``selection`` (name -> values, or ALL)."""
    variables = {v["name"]: v for v in (dashboard or json.loads(DASHBOARD.read_text()))["templating"]["list"]}

    def one(match: re.Match) -> str:
        name, fmt = (match.group(1), match.group(2)) if match.group(1) else (match.group(3), None)
        if name.startswith("__"):  # Grafana's built-ins ($__rate_interval, ...): not ours to render
            return match.group(0)
        var, chosen = variables[name], selection[name]
        if var["type"] == "datasource":
            return chosen if isinstance(chosen, str) else chosen[0]
        if chosen == ALL:
            return grafana_format(list(selection.get(f"{name}:options", [])), fmt, var.get("allValue") or None)
        return grafana_format(list(chosen), fmt)

    return _REFERENCE.sub(one, text)


def dashboard_exprs(dashboard: dict | None = None, selection: dict | None = None) -> list[tuple[str, str]]:
    """``(panel title, PromQL)`` of every target, rendered for ``selection`` (default: "All" everywhere)."""
    dashboard = dashboard or json.loads(DASHBOARD.read_text())
    selection = selection or {v["name"]: ALL for v in dashboard["templating"]["list"]}
    return [(panel["title"], render(target["expr"], selection, dashboard))
            for panel in dashboard["panels"] for target in panel.get("targets", [])]


def test_grafana_format_follows_the_documented_examples():
    assert grafana_format(["test.", "test2"], "regex") == "(test\\.|test2)"
    assert grafana_format(["test.com"], "regex") == "test\\.com"
    assert grafana_format(["*"], "regex") == "\\*"
    assert grafana_format(["test.", "test2"], "pipe") == "test.|test2"
    assert grafana_format(["test1", "test2"], "csv") == "test1,test2"
    assert grafana_format(["a", "b"], "regex", all_value=".*") == ".*"


def test_main_scrape_config_passes_promtool_on_the_installed_prometheus(tmp_path):
    """The check the deployment guide runs, on the deployed file itself (its rules beside it)."""
    done = _promtool("check", "config", str(PROMETHEUS_YML))
    assert done.returncode == 0, done.stdout + done.stderr
    jobs = {j["job_name"]: j for j in yaml.safe_load(PROMETHEUS_YML.read_text())["scrape_configs"]}
    assert {"dcgm-exporter", "node-exporter", "gpu_health"} <= set(jobs)
    assert jobs["gpu_health"].get("honor_labels") is True


def _static_config(tmp_path: Path) -> Path:
    """deploy/prometheus/prometheus-kubernetes.yml with Kubernetes discovery replaced by DISCOVERED, beside its rules."""
    config = yaml.safe_load(KUBERNETES_YML.read_text())
    config["global"]["scrape_interval"] = "1h"  # the fake targets are never scraped in this test
    for job in config["scrape_configs"]:
        if "kubernetes_sd_configs" in job:
            del job["kubernetes_sd_configs"]
            job["static_configs"] = [{"targets": [addr], "labels": meta}
                                     for name, addr, meta, _ in DISCOVERED if name == job["job_name"]]
    (tmp_path / "recording_rules.yml").write_text(RULES.read_text())
    path = tmp_path / "prometheus.yml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def _promtool(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([require_binary("promtool"), *args], capture_output=True, text=True, timeout=60)


def test_rules_check_and_unit_tests_pass():
    for rules in (RULES, DEPLOY / "prometheus" / "seed_rules.yml"):
        done = _promtool("check", "rules", str(rules))
        assert done.returncode == 0, done.stdout + done.stderr
    done = _promtool("test", "rules", str(RULES_TEST))
    assert done.returncode == 0 and "SUCCESS" in done.stdout, done.stdout + done.stderr


def test_scrape_config_relabels_stock_exporters(tmp_path):
    config = _static_config(tmp_path)
    done = _promtool("check", "config", str(config))
    assert done.returncode == 0, done.stdout + done.stderr
    server = PrometheusServer(tmp_path / "data", tmp_path, config=config.read_text())
    url = server.start()
    try:
        deadline = time.monotonic() + 30
        expected = [d for d in DISCOVERED if d[3] is not None]
        while True:
            data = requests.get(f"{url}/api/v1/targets", params={"state": "any"}, timeout=10).json()["data"]
            active = [t for t in data["activeTargets"] if t["labels"]["job"] != "gpu_health"]
            if len(active) >= len(expected) or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        got = {t["labels"]["instance"]: t["labels"] for t in active}
        for job, addr, _, labels in DISCOVERED:
            if labels is None:
                assert addr not in got, f"{job} target {addr} should be dropped"
                continue
            assert got[addr]["job"] == job
            for name, value in labels.items():
                assert got[addr][name] == value, (addr, name)
        # no discovery label leaks into the series
        assert not any(k.startswith("__") for labels in got.values() for k in labels)
        gpu_health = [t for t in data["activeTargets"] if t["labels"]["job"] == "gpu_health"]
        # gpu_health's own endpoint: no region stamped on it (its series carry the pipeline's region)
        assert len(gpu_health) == 1 and set(gpu_health[0]["labels"]) == {"job", "instance"}
        jobs = {j["job_name"]: j for j in yaml.safe_load(KUBERNETES_YML.read_text())["scrape_configs"]}
        assert jobs["gpu_health"].get("honor_labels") is True and jobs["kube-state-metrics"].get("honor_labels") is True
        # the recording rules load, and every dashboard expression parses and evaluates here
        groups = requests.get(f"{url}/api/v1/rules", timeout=10).json()["data"]["groups"]
        assert {g["name"] for g in groups} == {"gpu_health_dcgm", "gpu_health_kube", "gpu_health_kpis"}
        for title, expr in dashboard_exprs():
            body = requests.get(f"{url}/api/v1/query", params={"query": expr}, timeout=10).json()
            assert body["status"] == "success", (title, expr, body)
    finally:
        server.stop()


def _datasource_uids(node) -> set[str]:
    """Every ``datasource.uid`` the dashboard JSON names, at any depth."""
    if isinstance(node, list):
        return {u for v in node for u in _datasource_uids(v)}
    if not isinstance(node, dict):
        return set()
    found = {node["datasource"]["uid"]} if isinstance(node.get("datasource"), dict) else set()
    return found.union(*(_datasource_uids(v) for v in node.values()))


def test_dashboard_json_model():
    dash = json.loads(DASHBOARD.read_text())
    assert dash["uid"] and dash["title"] and isinstance(dash["schemaVersion"], int) and dash["schemaVersion"] >= 36
    variables = {v["name"]: v for v in dash["templating"]["list"]}
    assert set(variables) == {"datasource", "region", "host", "gpu"}
    # a datasource variable, no hard-coded uid: the dashboard imports into any Grafana with a Prometheus
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    provisioned = yaml.safe_load(DATASOURCES.read_text())["datasources"][0]["uid"]
    assert provisioned not in DASHBOARD.read_text()
    assert _datasource_uids(dash) == {"${datasource}"}
    for name in ("region", "host", "gpu"):
        var = variables[name]
        assert var["type"] == "query" and var["includeAll"] and var["multi"] and var["datasource"]["uid"] == "${datasource}"
        assert var["current"]["value"] == [ALL], f"{name} starts on All"
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    cells = set()
    for p in dash["panels"]:
        assert p["type"] in PANEL_TYPES, p["type"]
        g = p["gridPos"]
        assert all(isinstance(g[k], int) for k in "xywh") and 0 <= g["x"] and g["x"] + g["w"] <= 24 and g["h"] > 0
        for x in range(g["x"], g["x"] + g["w"]):
            for y in range(g["y"], g["y"] + g["h"]):
                assert (x, y) not in cells, f"panel {p['title']!r} overlaps another at {(x, y)}"
                cells.add((x, y))
        if p["type"] == "row":
            continue
        assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        refs = [t["refId"] for t in p["targets"]]
        assert refs and len(refs) == len(set(refs))
        for t in p["targets"]:
            assert t["datasource"] == p["datasource"] and t["expr"].strip()
            # every variable used is defined and names a documented format
            for m in _REFERENCE.finditer(t["expr"]):
                assert m.group(1) in variables and m.group(2) in FORMATS, (p["title"], m.group(0))
    titles = {p["title"].lower(): p for p in dash["panels"]}
    for needed in ("goodput", "loss tree", "allocation", "open alerts", "wasted dollars", "temperature", "power",
                   "sm clock", "framebuffer", "xid", "throttle"):
        assert any(needed in t for t in titles), needed
    temp = next(p for t, p in titles.items() if "temperature" in t)
    steps = temp["fieldConfig"]["defaults"]["thresholds"]["steps"]
    assert THERMAL_LINE_C in [s["value"] for s in steps]
    assert temp["fieldConfig"]["defaults"]["custom"]["thresholdsStyle"]["mode"] in ("line", "line+area", "dashed")
    assert any(STOCK_DCGM_DASHBOARD in link.get("url", "") for link in dash["links"])


@pytest.mark.parametrize("path", sorted((DEPLOY / "grafana" / "provisioning").rglob("*.yaml")))
def test_grafana_provisioning_files_are_valid(path):
    doc = yaml.safe_load(path.read_text())
    assert doc["apiVersion"] == 1 and (doc.get("datasources") or doc.get("providers"))
