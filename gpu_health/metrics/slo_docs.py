"""``docs/slos.md`` and OpenSLO v1 YAML, both generated from the SLO catalogue (the catalogue is the only source).

``python -m gpu_health.metrics.slo_docs`` rewrites docs/slos.md (a test fails when it is stale);
``gpu-health slo export [--out FILE]`` writes the catalogue as OpenSLO v1 documents (one ``Service``, one ``SLO`` per
entry, ``apiVersion: openslo/v1``), whose SLIs are ratio metrics (``counter: true``: the queries name the raw
counters, the evaluating tool takes their increase over its windows) over the Prometheus series a ``prometheus_client``
service exports (``gpu_health.serving_families``): a latency SLO counts ``_bucket{le="<threshold>"}``
against ``_count``, an availability SLO the error counter against ``_count``.
"""

import sys
from pathlib import Path

import yaml

from gpu_health.metrics.slo import BURN_WINDOWS, MIN_BAD_EVENTS
from gpu_health.metrics.slo_catalog import CATALOG, WINDOW_DAYS, Slo
from gpu_health.serving_families import SERVING_FAMILIES, SERVING_HISTOGRAMS

DOC_PATH = Path(__file__).resolve().parents[2] / "docs" / "slos.md"
REGENERATE = "python -m gpu_health.metrics.slo_docs"
SERVICE = "model-serving"
ERRORS_TOTAL = SERVING_FAMILIES["errors"]
ANNOTATION = "gpu-health.io"


def _window_text(td) -> str:
    minutes = int(td.total_seconds() // 60)
    return f"{minutes // 1440} d" if minutes % 1440 == 0 else f"{minutes // 60} h" if minutes % 60 == 0 else f"{minutes} min"


def _le_label(threshold: float) -> str:
    return repr(float(threshold))


def openslo_documents(catalog=CATALOG) -> list[dict]:
    """The catalogue as OpenSLO v1 documents: a Service, then one SLO per entry."""
    docs: list[dict] = [{"apiVersion": "openslo/v1", "kind": "Service",
                         "metadata": {"name": SERVICE, "displayName": "Model serving"},
                         "spec": {"description": "Online inference: real-time scoring and generative models "
                                                 "(gpu_health SLO catalogue)."}}]
    for s in catalog:
        by = " by (region, model_name)"
        if s.histogram is not None:
            family = SERVING_HISTOGRAMS[s.histogram]
            ratio = {"counter": True,
                     "good": {"metricSource": {"type": "Prometheus", "spec": {
                         "query": f'sum{by} ({family}_bucket{{le="{_le_label(s.threshold_s)}"}})'}}},
                     "total": {"metricSource": {"type": "Prometheus", "spec": {
                         "query": f"sum{by} ({family}_count)"}}}}
        else:
            family = SERVING_HISTOGRAMS["latency"]
            ratio = {"counter": True,
                     "bad": {"metricSource": {"type": "Prometheus", "spec": {
                         "query": f"sum{by} ({ERRORS_TOTAL})"}}},
                     "total": {"metricSource": {"type": "Prometheus", "spec": {
                         "query": f"sum{by} ({family}_count)"}}}}
        annotations = {f"{ANNOTATION}/seed-row": s.seed_row, f"{ANNOTATION}/owner": s.owner,
                       f"{ANNOTATION}/alert-intent": s.alert_intent, f"{ANNOTATION}/applies-to": s.applies_to}
        if s.threshold_s is not None:
            annotations[f"{ANNOTATION}/threshold-seconds"] = repr(float(s.threshold_s))
            annotations[f"{ANNOTATION}/interpolated-unless-bucket-bound"] = (
                f'the good query needs a bucket le="{_le_label(s.threshold_s)}"; without one gpu_health interpolates '
                f"linearly within the bucket and flags the SLI as interpolated")
        docs.append({
            "apiVersion": "openslo/v1", "kind": "SLO",
            "metadata": {"name": s.name, "displayName": s.title, "annotations": annotations},
            "spec": {
                "description": s.description, "service": SERVICE,
                "indicator": {"metadata": {"name": f"{s.name}-sli"}, "spec": {"ratioMetric": ratio}},
                "timeWindow": [{"duration": f"{WINDOW_DAYS}d", "isRolling": True}],
                "budgetingMethod": "Occurrences",
                "objectives": [{"displayName": s.title, "target": s.objective}],
            },
        })
    return docs


def openslo_yaml(catalog=CATALOG) -> str:
    """The OpenSLO v1 documents as one multi-document YAML stream."""
    return yaml.safe_dump_all(openslo_documents(catalog), sort_keys=False, allow_unicode=True, width=120)


def _row(s: Slo) -> str:
    threshold = f"{s.threshold_s:g} s" if s.threshold_s is not None else "-"
    return (f"| `{s.name}` | {s.title} | {s.sli} | {threshold} | {s.objective:.3%} | {s.budget:.3%} | {s.window} | "
            f"{s.applies_to} | {s.owner} | {s.alert_intent} | {s.seed_row.replace('|', '/')} |")


def render_slo_docs(catalog=CATALOG) -> str:
    """The Markdown of docs/slos.md."""
    lines = [
        "# Serving SLOs",
        "",
        f"<!-- Generated from gpu_health/metrics/slo_catalog.py by `{REGENERATE}`; do not edit by hand. -->",
        "",
        "Each SLO is a ratio of good events to all events of a model (all its versions) in a region over a rolling "
        f"{WINDOW_DAYS}-day window; its error budget is `1 - objective`. `slo_error_budgets` holds each SLO's events, "
        "bad events and budget remaining per 5-minute partition; the `slo_burn` detector turns burn rates into "
        "alerts; `gpu-health slo export` writes this catalogue as OpenSLO v1 YAML.",
        "",
        "| SLO | title | SLI | threshold | objective | budget | window | applies to | owner | alert intent | seeds' row |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
        *[_row(s) for s in catalog],
        "",
        "## Burn-rate alerts",
        "",
        "Burn rate over a window = (bad events / events) / budget: 1 spends the budget exactly over the SLO window. "
        "An alert needs the long **and** the short window above the factor (the SRE workbook's multi-window, "
        "multi-burn-rate rule, Sloth's windows):",
        "",
        "| long window | short window | factor | severity (page-intent SLO) |",
        "|---|---|---|---|",
        *[f"| {_window_text(lw)} | {_window_text(sw)} | {f:g}x | {sev} |" for lw, sw, f, sev in BURN_WINDOWS],
        "",
        "A ticket-intent SLO tickets on every window. **Minimum traffic:** each window must hold at least "
        f"{MIN_BAD_EVENTS} bad events, so a handful of requests never pages. **Absent SLI:** a series that reported "
        "within the last hour and reports nothing now is a ticket (family `missing_data`); burns are family "
        "`software`.",
        "",
        "**Interpolated, not measured.** A latency threshold that is no bucket bound of the histogram (the seeds' "
        "TTFT 300 ms between vLLM's 0.25 and 0.5 s buckets; 2 s between prometheus_client's 1 and 2.5 s) is counted "
        "by linear interpolation within its bucket, Prometheus' own rule: an estimate. `slo_error_budgets."
        "interpolated` marks such rows and an alert resting on them says so. Add the threshold as a bucket bound to "
        "measure it.",
        "",
    ]
    for s in catalog:
        lines += [f"## `{s.name}` — {s.title}", "", s.description, "",
                  f"- **Alert intent: {s.alert_intent}.** {s.intent_rationale}", ""]
    return "\n".join(lines)


if __name__ == "__main__":  # pragma: no cover - a developer command
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else DOC_PATH
    target.write_text(render_slo_docs())
    print(f"wrote {target}")
