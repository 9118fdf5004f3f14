"""The peer: allocation and utilization computed by Prometheus recording rules over the same telemetry.

    python bench/bench_peer.py [--data DIR] [--hours 24]

One simulated day of the 1,200-GPU cluster (the suite's quiet week, first day) is written to the landing zone and
run through the bulk path (``gpu-health run --direct``). The same day's ``gpu_telemetry`` is then exported as
dcgm-exporter series (``DCGM_FI_DEV_GPU_UTIL`` with the ``hpc_job`` label of a Slurm-mapped exporter), backfilled
into a real Prometheus TSDB with ``promtool tsdb create-blocks-from openmetrics``, and the project's own recording
rules for allocation and utilization (``deploy/prometheus/recording_rules.yml``:
``region_model:dcgm_gpu_allocation:ratio``, ``region_model:dcgm_gpu_utilization:ratio``) are evaluated over the
day at the partition width, as the rule manager would have every 5 minutes (``/api/v1/query_range``).

One JSON line: the pipeline's seconds for the day (whole bulk path, and its ``kpi_values`` step, which computes
allocation with every other KPI), the peer's seconds (export + backfill, rule evaluation), their ratios, and how far
the two allocation rates are apart (mean absolute difference over region x partition: the pipeline averages a
partition's minutes, the rule samples an instant, so they agree to within the minute-to-minute churn).
"""

import argparse
import json
import resource
import sys
import tempfile
import time
import warnings
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DAY = ("2026-11-02T00:00:00Z", "2026-11-03T00:00:00Z")
KEEP = {"ts", "region", "node_id", "gpu_uuid", "gpu_index", "sku", "job_id", "gpu_util_pct"}
RULES = {  # the expressions of deploy/prometheus/recording_rules.yml, inlined (each rule's record's expr)
    "allocation": "(count by (region) ((DCGM_FI_DEV_GPU_UTIL{hpc_job!=\"\"} <= 100)))"
                  " / (count by (region) (DCGM_FI_DEV_GPU_UTIL <= 100))",
    "utilization": "avg by (region) (DCGM_FI_DEV_GPU_UTIL <= 100) / 100",
}


def _rules_match_the_deploy_kit() -> None:
    """The inlined expressions are the deploy kit's rules (by region instead of region x model)."""
    import yaml

    rules = yaml.safe_load((REPO / "deploy" / "prometheus" / "recording_rules.yml").read_text())
    exprs = {r["record"]: r["expr"] for g in rules["groups"] for r in g["rules"] if "record" in r}
    assert "DCGM_FI_DEV_GPU_UTIL <= 100" in exprs["region_model:dcgm_gpu_utilization:ratio"]
    assert "hpc_job" in exprs["region_model:dcgm_gpus_allocated:count"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", help="work directory (default: a temporary one)")
    args = ap.parse_args()
    warnings.filterwarnings("ignore")
    import pandas as pd

    from gpu_health.cli import run, simulate
    from gpu_health.evaluation.prometheus import PrometheusProcess
    from gpu_health.evaluation.static_rules import query_range
    from gpu_health.evaluation.promexport import backfill, write_openmetrics_chunks
    from gpu_health.storage.warehouse import Warehouse

    _rules_match_the_deploy_kit()
    with tempfile.TemporaryDirectory(dir=args.data) as tmp:
        tmp = Path(tmp)
        scen = tmp / "day.yaml"
        scen.write_text((REPO / "scenarios" / "suite" / "quiet_week.yaml").read_text())
        simulate(str(scen), str(tmp / "landing"), *DAY, quiet=True)
        url = f"sqlite:///{tmp / 'w.db'}"
        t = time.perf_counter()
        summary = run(*DAY, landing=str(tmp / "landing"), warehouse=url, quiet=True, direct=True)
        pipeline_s = time.perf_counter() - t
        kpi_s = summary["step_seconds"]["kpi_values"]
        wh = Warehouse(url)
        gpu = wh.read_window("gpu_telemetry", *DAY)

        t = time.perf_counter()
        # only the field the rules read: the other DCGM columns nulled are omitted (promexport nulls="omit")
        util_only = gpu.assign(**{c: None for c in gpu.columns if c not in KEEP})
        write_openmetrics_chunks(tmp / "om", gpu=util_only, gpu_labels={"job_id": "hpc_job"})
        backfill(tmp / "om", tmp / "tsdb", parallel=2)
        ingest_s = time.perf_counter() - t
        start, end = (int(pd.Timestamp(x).timestamp()) for x in DAY)
        with PrometheusProcess(tmp / "tsdb", tmp) as prom:
            t = time.perf_counter()
            results = {name: query_range(prom.url, expr, start, end - 300, step=300) for name, expr in RULES.items()}
            rules_s = time.perf_counter() - t
        peer = pd.DataFrame([{"region": s["metric"].get("region"), "partition_start": pd.Timestamp(int(v[0]), unit="s", tz="UTC"),
                              "peer": float(v[1])} for s in results["allocation"] for v in s["values"]])
        kpis = wh.read_window("kpi_values", *DAY)
        ours = kpis[(kpis["kpi"] == "allocation_rate")]
        ours = ours.groupby(["partition_start", "region"], as_index=False)["value"].mean() if "region" in ours else ours
        both = peer.merge(ours, on=["partition_start", "region"], how="inner")
        out = {"name": "prometheus_peer", "gpus": int(gpu["gpu_uuid"].nunique()), "partitions": summary["partitions"],
               "pipeline_day_seconds": round(pipeline_s, 1), "pipeline_kpi_values_seconds": kpi_s,
               "peer_export_backfill_seconds": round(ingest_s, 1), "peer_rules_seconds": round(rules_s, 2),
               "ratio_kpi_values_to_rules": round(kpi_s / max(rules_s, 1e-9), 2),
               "ratio_pipeline_day_to_peer": round(pipeline_s / max(ingest_s + rules_s, 1e-9), 2),
               "allocation_compared_slices": len(both),
               "allocation_mean_abs_diff": round(float((both["peer"] - both["value"]).abs().mean()), 4) if len(both) else None,
               "peak_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}
        print(json.dumps(out), flush=True)


if __name__ == "__main__":
    sys.exit(main())
