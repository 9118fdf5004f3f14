"""The seeds' static Prometheus alert rules, replayed on simulated telemetry and scored like our pipeline.

How would a team that pasted the seeds' rules
(``deploy/prometheus/seed_rules.yml``: GPU util < 30 % for 15m, temperature
> 83 C, any double-bit ECC error, any Xid, training stall) do on the same
scenarios? :func:`evaluate_static_rules` answers with Prometheus itself:

1. **simulate** the scenario one day at a time (``Window(scen, day, day+1)``,
   memory bounded by a day) and keep only the metric families the rules read:
   ``DCGM_FI_DEV_GPU_UTIL``, ``DCGM_FI_DEV_GPU_TEMP``,
   ``DCGM_FI_DEV_ECC_DBE_VOL_TOTAL``, ``DCGM_FI_DEV_XID_ERRORS`` (with the
   exporter's ``DCGM_EXP_XID_ERRORS_TOTAL``, which the writer adds) and
   ``training_last_step_timestamp_seconds``. The other GPU columns are nulled,
   so :mod:`gpu_health.evaluation.promexport` omits them (no change to the writer);
2. **write** each day as OpenMetrics chunk files (``write_openmetrics_chunks``)
   and **backfill** them with ``promtool tsdb create-blocks-from openmetrics``
   (``backfill(..., parallel=2)``), deleting the text after each day;
3. **serve** the TSDB with a real ``prometheus`` on 127.0.0.1 (a free port;
   stopped in ``finally``: :class:`gpu_health.evaluation.prometheus.PrometheusProcess`);
4. **replay** each rule: Prometheus evaluates alerting rules only in real time
   (and ``promtool test rules`` wants its own input-series notation, not a
   TSDB), so the rule's ``expr`` is evaluated with ``/api/v1/query_range`` at
   a 60 s step over the whole span -- exactly what the rule manager would have
   computed at each evaluation (``time()`` in a range query is each step's
   time, so the stall rule works on history) -- and the rule manager's ``for``
   logic is applied to the result: a series becomes pending at the first step
   it is returned (``activeAt``), fires at the first step ``T`` with ``T -
   activeAt >= for`` if it was returned at every step in between, and resolves
   at the first step it is missing; a later return starts a new alert. One
   alert row per (rule, series) firing episode;
5. **score** the alert rows with :func:`gpu_health.evaluation.scorer.score` against
   ``labels_frame(scen)`` and ``maintenance_windows(scen)``: the same
   definitions (detection window, scope touch, time to detect, false pages)
   as ``gpu-health evaluate``, so the two tables compare directly.

Alert rows (the columns ``scorer._alerts_summary`` reads): ``alert_id``,
``partition_start`` (firing start floored to 5 min), ``opened_at`` =
``paged_at`` = when it started firing (after ``for``, as Prometheus sends it
to Alertmanager), ``severity`` 'page' (the rule's label), ``cause_family``
from :data:`RULE_FAMILY`, ``region`` (the series' ``region`` label), ``scope``
JSON ``{"nodes": [Hostname], ...}``, ``summary`` (the rule's annotation with
``$labels`` / ``$value`` filled in), ``status`` ('firing' at the span's end,
else 'resolved'), plus ``rule``, ``active_at``, ``resolved_at``.

The training-progress series carries only ``job_id`` (as an application
metric does); the node and region of its alert are the job's GPUs' (taken from
the simulated GPU rows), which is what a Kubernetes scrape's pod labels
(``__meta_kubernetes_pod_node_name``) would attach.

Known artefacts of exporting day by day (the simulator is partition
independent, the exporter state is not carried): counters restart at 0 at
each day (a reset, never an increase, for ``increase()``), and the held Xid
gauge restarts at 0, so a repeat of the same code on a GPU after midnight
pages again where the real gauge would not have changed. The training-progress
gauge *is* carried: each day starts with the job's last progress time of the
day before (an identical duplicate sample), so a stall across midnight still
pages.

Cost: a simulated day of 1,200 GPUs is millions of samples (a gigabyte of
OpenMetrics text); promtool's backfill is the bottleneck (the run reports
seconds per stage and per simulated day). Prometheus runs with min = max block duration
(2h) so that it does not spend minutes compacting the backfilled week into
larger blocks while the replay queries run (that tripled the query time).
``timings`` in each result measures it again.

CLI: ``python -m gpu_health.evaluation.static_rules --scenarios DIR --out FILE.json
[--pattern GLOB]`` writes ``{"overall": ..., "scenarios": [...]}`` with the
keys of ``gpu-health evaluate`` and prints the same table.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import math
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import requests
import yaml

from gpu_health.constants import PARTITION_FREQ, day_chunks
from gpu_health.evaluation.prometheus import PrometheusProcess
from gpu_health.evaluation.scorer import _metrics, overall, score, table
from gpu_health.sim.labels import labels_frame
from gpu_health.sim.scenario import load_scenario
from gpu_health.sim.telemetry import maintenance_windows
from gpu_health.sources import dcgm_fields as F

log = logging.getLogger(__name__)

RULES_PATH = Path(__file__).resolve().parents[2] / "deploy" / "prometheus" / "seed_rules.yml"

# Which cause family a team running these rules assumes when each one pages
# (what the runbook it links to would say):
# - low utilisation: the seeds read it as idle capacity to consolidate (002
#   "Consider consolidation"; 003 "Poor job scheduling", "operational
#   inefficiency"): the scheduler / capacity owner -> scheduling;
# - temperature, double-bit ECC, Xid: the GPU or node is faulty (001 "cordon
#   node", "hardware/driver faults") -> hardware;
# - training stall: the job stopped making progress (hang, NCCL, code) and its
#   owner is paged -> software.
RULE_FAMILY: dict[str, str] = {
    "LowGPUUtilization": "scheduling",
    "GPUHighTemperature": "hardware",
    "GPUDoubleBitECCError": "hardware",
    "GPUXidError": "hardware",
    "TrainingJobStalled": "software",
}

# GPU columns the rules need (everything else is nulled before export).
GPU_KEEP = ("ts", "region", "node_id", "gpu_index", "gpu_uuid", "sku", "job_id", "gpu_util_pct", "temp_c", "ecc_dbe_delta", "xid")
JOB_KEEP = ("ts", "job_id", "steps")
STEP_S = 60
QUERY_WINDOW_S = 6 * 3600  # steps per query_range call: 360 (Prometheus allows 11,000)
HTTP_TIMEOUT_S = 600.0


# --- the rule file --------------------------------------------------------------------------------
@dataclass(frozen=True)
class AlertRule:
    name: str
    expr: str
    for_s: int
    labels: dict = field(default_factory=dict)
    annotations: dict = field(default_factory=dict)


_DURATION = re.compile(r"(\d+)(ms|s|m|h|d|w|y)")
_UNIT_S = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400, "y": 365 * 86400}


def parse_prom_duration(text) -> int:
    """Seconds in a Prometheus duration (``15m``, ``1h30m``, ``0s``; a bare number is seconds)."""
    if text is None:
        return 0
    if isinstance(text, int | float):
        return int(text)
    text = str(text).strip()
    if text == "0":
        return 0
    parts = _DURATION.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise ValueError(f"not a Prometheus duration: {text!r}")
    return int(sum(int(n) * _UNIT_S[u] for n, u in parts))


def load_rules(path: str | Path = RULES_PATH) -> list[AlertRule]:
    """The alerting rules of a Prometheus rule file (recording rules are ignored)."""
    doc = yaml.safe_load(Path(path).read_text())
    rules = []
    for group in doc.get("groups") or []:
        for r in group.get("rules") or []:
            if "alert" not in r:
                continue
            rules.append(AlertRule(r["alert"], r["expr"].strip(), parse_prom_duration(r.get("for")),
                                   dict(r.get("labels") or {}), dict(r.get("annotations") or {})))
    return rules


def check_rules(path: str | Path = RULES_PATH, promtool: str = "promtool") -> str:
    """``promtool check rules``: its output, or RuntimeError with it."""
    exe = shutil.which(promtool)
    if exe is None:
        raise FileNotFoundError(f"{promtool!r} not found: install Prometheus (apt-get install -y --no-install-recommends prometheus)")
    proc = subprocess.run([exe, "check", "rules", str(path)], capture_output=True, text=True)
    out = (proc.stdout + proc.stderr).strip()
    if proc.returncode != 0:
        raise RuntimeError(f"promtool check rules {path} failed: {out}")
    return out


# --- export: simulated days -> TSDB ------------------------------------------------------------
@dataclass
class ExportStats:
    days: int = 0
    samples: int = 0
    simulate_s: float = 0.0
    write_s: float = 0.0
    backfill_s: float = 0.0
    job_nodes: dict = field(default_factory=dict)  # job_id -> (set of node_ids, region or None)


def _gpu_frame(gpu: pd.DataFrame) -> pd.DataFrame:
    """Only the columns the rules read; the others null, so the writer omits their families."""
    out = gpu[list(GPU_KEEP)].copy()
    for col in gpu.columns:
        if col not in GPU_KEEP:
            out[col] = np.nan
    return out


def _jobs_frame(jobs: pd.DataFrame, carried: dict[str, int]) -> pd.DataFrame:
    """The day's job rows, preceded by each job's last progress minute of the day before (if any).

    The prepended row reproduces the sample the day before already wrote
    (value = that minute), so the held progress time carries across midnight.
    """
    df = jobs[list(JOB_KEEP)]
    if carried and len(df):
        ids = [j for j in pd.unique(df["job_id"]) if j in carried]
        if ids:
            prev = pd.DataFrame({"ts": pd.to_datetime([carried[j] for j in ids], unit="s", utc=True),
                                 "job_id": ids, "steps": 1})
            df = pd.concat([prev.astype({"ts": df["ts"].dtype}), df], ignore_index=True)
    return df


def export_scenario(scen, data_dir: Path, scratch: Path, *, parallel: int = 2, on_day=None) -> ExportStats:
    """Simulate ``scen`` day by day and backfill the rules' metric families into ``data_dir``."""
    from gpu_health.evaluation.promexport import backfill, write_openmetrics_chunks
    from gpu_health.sim.telemetry import Window

    stats = ExportStats()
    carried: dict[str, int] = {}
    for d0, d1 in day_chunks(scen.start, scen.end):
        t0 = time.perf_counter()
        w = Window(scen, d0, d1)
        gpu = w.table("gpu_telemetry")
        jobs = w.table("job_runtime_metrics")
        t1 = time.perf_counter()
        om = scratch / f"om-{int(d0.timestamp())}"
        summary = write_openmetrics_chunks(om, gpu=_gpu_frame(gpu), jobs=_jobs_frame(jobs, carried))
        t2 = time.perf_counter()
        if summary.paths:
            backfill(om, data_dir, parallel=parallel)
        shutil.rmtree(om, ignore_errors=True)
        t3 = time.perf_counter()
        # state for the next day and for the stall alerts' scope
        if len(jobs):
            prog = jobs.loc[jobs["steps"] > 0, ["job_id", "ts"]]
            last = prog.groupby("job_id")["ts"].max()
            running = set(jobs["job_id"])
            carried = {j: c for j, c in carried.items() if j in running}
            carried.update({j: int(ts.timestamp()) for j, ts in last.items()})
        placed = gpu.loc[gpu["job_id"].notna(), ["job_id", "node_id", "region"]].drop_duplicates()
        for job, grp in placed.groupby("job_id"):
            nodes, regions = stats.job_nodes.get(job, (set(), set()))
            stats.job_nodes[job] = (nodes | set(grp["node_id"]), regions | set(grp["region"]))
        stats.days += 1
        stats.samples += summary.total_samples
        stats.simulate_s += t1 - t0
        stats.write_s += t2 - t1
        stats.backfill_s += t3 - t2
        if on_day:
            on_day(d0, summary.total_samples, t1 - t0, t2 - t1, t3 - t2)
        del w, gpu, jobs
    return stats


# --- replay ----------------------------------------------------------------------------------
@dataclass
class Episode:
    """One alert of one rule on one series: pending from ``active_at``, firing from ``fired_at``."""

    rule: str
    labels: dict
    active_at: int
    fired_at: int
    value: float
    resolved_at: int | None  # first step the series was missing (None: still firing at the end)


def query_range(url: str, expr: str, start: int, end: int, step: int = STEP_S, session: requests.Session | None = None) -> list[dict]:
    """``/api/v1/query_range`` (``end`` inclusive), the result's series; errors name the expression."""
    http = session or requests
    resp = http.get(f"{url}/api/v1/query_range", params={"query": expr, "start": start, "end": end, "step": step},
                    timeout=HTTP_TIMEOUT_S)
    try:
        body = resp.json()
    except ValueError:
        body = {}
    if resp.status_code != 200 or body.get("status") != "success":
        raise RuntimeError(f"query_range {expr!r} [{start}, {end}] failed ({resp.status_code}): "
                           f"{body.get('errorType')}: {body.get('error') or resp.text[:500]}")
    return body["data"]["result"]


def replay_rule(url: str, rule: AlertRule, start: int, end: int, *, step: int = STEP_S, window_s: int = QUERY_WINDOW_S,
                session: requests.Session | None = None) -> list[Episode]:
    """Firing episodes of ``rule`` evaluated every ``step`` at ``start, start+step, ... < end``.

    The rule manager's logic: a series returned at evaluation ``T`` for the
    first time (or after a miss) is pending with ``activeAt = T``; it fires at
    the first evaluation with ``T - activeAt >= for`` when returned at every
    evaluation since; it resolves at the first evaluation that misses it.
    Queried in windows of ``window_s``; runs continue across windows.
    """
    hold = math.ceil(rule.for_s / step) * step  # evaluations happen on the step grid
    open_runs: dict[tuple, dict] = {}  # series -> {labels, start, last, fired, value}
    episodes: list[Episode] = []

    def close(run: dict, resolved_at: int | None) -> None:
        if run["fired"] is not None:
            episodes.append(Episode(rule.name, run["labels"], run["start"], run["fired"], run["value"], resolved_at))

    for a in range(start, end, window_s):
        b = min(a + window_s, end)
        last_step = a + (b - 1 - a) // step * step
        seen = set()
        for series in query_range(url, rule.expr, a, last_step, step, session):
            labels = {k: v for k, v in series["metric"].items() if k != "__name__"}
            key = tuple(sorted(labels.items()))
            seen.add(key)
            ts = np.array([int(round(float(v[0]))) for v in series["values"]], dtype=np.int64)
            vals = np.array([float(v[1]) for v in series["values"]])
            breaks = np.flatnonzero(np.diff(ts) != step) + 1
            bounds = np.concatenate([[0], breaks, [len(ts)]])
            for i in range(len(bounds) - 1):
                lo, hi = bounds[i], bounds[i + 1]  # ts[lo:hi] consecutive steps
                run = open_runs.pop(key, None)
                if run is not None and run["last"] + step != ts[lo]:
                    close(run, run["last"] + step)
                    run = None
                if run is None:
                    run = {"labels": labels, "start": int(ts[lo]), "last": int(ts[lo]), "fired": None, "value": math.nan}
                run["last"] = int(ts[hi - 1])
                if run["fired"] is None and run["start"] + hold <= run["last"]:
                    j = lo + int(np.searchsorted(ts[lo:hi], run["start"] + hold))
                    run["fired"], run["value"] = int(ts[j]), float(vals[j])
                if run["last"] == last_step:
                    open_runs[key] = run  # may continue in the next window
                else:
                    close(run, run["last"] + step)
        for key in [k for k in open_runs if k not in seen]:
            run = open_runs.pop(key)
            close(run, run["last"] + step)
    for run in open_runs.values():
        close(run, None)
    return sorted(episodes, key=lambda e: (e.fired_at, sorted(e.labels.items())))


# --- episodes -> alert rows ------------------------------------------------------------------------
_TEMPLATE = re.compile(r"{{\s*(\$labels\.(\w+)|\$value)\s*}}")


def render(template: str, labels: dict, value: float) -> str:
    """Prometheus annotation templates' ``{{ $labels.x }}`` and ``{{ $value }}`` (the only forms the rules use)."""
    def sub(m):
        if m.group(2):
            return str(labels.get(m.group(2), ""))
        return f"{value:g}" if not math.isnan(value) else ""
    return _TEMPLATE.sub(sub, template)


ALERT_COLUMNS = ["alert_id", "detector", "partition_start", "opened_at", "paged_at", "severity", "cause_family", "region",
                 "scope", "summary", "status", "rule", "active_at", "resolved_at"]


def alerts_frame(episodes: list[Episode], rules: list[AlertRule], job_nodes: dict | None = None) -> pd.DataFrame:
    """One alert row per firing episode, in the columns ``evaluate._alerts_summary`` reads."""
    if not episodes:
        return pd.DataFrame(columns=ALERT_COLUMNS)
    by_name = {r.name: r for r in rules}
    job_nodes = job_nodes or {}
    node_label, job_label = F.GPU_LABELS["node_id"][0], F.JOB_ID_LABEL
    ids, severity, family, region, scope, summary = [], [], [], [], [], []
    for e in episodes:
        rule = by_name[e.rule]
        nodes = [e.labels[node_label]] if e.labels.get(node_label) else []
        reg = e.labels.get(F.DEFAULT_REGION_LABEL)
        if not nodes and e.labels.get(job_label) in job_nodes:
            job_n, job_r = job_nodes[e.labels[job_label]]
            nodes = sorted(job_n)
            reg = reg or (next(iter(job_r)) if len(job_r) == 1 else None)
        key = json.dumps(sorted(e.labels.items()))
        ids.append(f"static-{e.rule}-{hashlib.sha1(f'{e.rule}|{key}|{e.active_at}'.encode()).hexdigest()[:12]}")
        severity.append(rule.labels.get("severity", "page"))
        family.append(RULE_FAMILY.get(e.rule))
        region.append(reg)
        scope.append(json.dumps({"nodes": nodes, "rule": e.rule, "labels": e.labels}))
        summary.append(render(rule.annotations.get("summary", e.rule), e.labels, e.value))

    def ts(values) -> pd.Series:
        return pd.Series(pd.to_datetime(np.array(values, dtype="float64"), unit="s", utc=True))

    fired = ts([e.fired_at for e in episodes])
    resolved = [e.resolved_at for e in episodes]
    return pd.DataFrame({
        "alert_id": ids, "detector": [f"static:{e.rule}" for e in episodes],  # false pages are counted per rule
        "partition_start": fired.dt.floor(PARTITION_FREQ), "opened_at": fired, "paged_at": fired,
        "severity": severity, "cause_family": family, "region": region, "scope": scope, "summary": summary,
        "status": ["firing" if r is None else "resolved" for r in resolved],
        "rule": [e.rule for e in episodes],
        "active_at": ts([e.active_at for e in episodes]),
        "resolved_at": ts([np.nan if r is None else r for r in resolved]),
    }, columns=ALERT_COLUMNS)


# --- one scenario, a suite -------------------------------------------------------------------------
def evaluate_static_rules(scenario_path: str | Path, workdir: str | Path | None = None, *, rules_path: str | Path = RULES_PATH,
                          parallel: int = 2, return_alerts: bool = False) -> dict:
    """Score the static rules on one scenario; the dict shape of ``harness.evaluate_scenario``.

    Extra keys: ``alerts_by_rule`` (firing episodes per rule), ``timings``
    (seconds per stage and per simulated day, samples backfilled) and, with
    ``return_alerts``, ``alerts`` (the alert frame).
    """
    t_start = time.time()
    scen = load_scenario(scenario_path)
    name = Path(scenario_path).stem
    span = scen.end - scen.start
    try:
        check_rules(rules_path)
        rules = load_rules(rules_path)
        unmapped = [r.name for r in rules if r.name not in RULE_FAMILY]
        if unmapped:
            raise ValueError(f"rules without a cause family in RULE_FAMILY: {unmapped}")
        if workdir is not None:
            Path(workdir).mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=workdir, prefix="static-rules-") as tmp:
            tmp = Path(tmp)
            stats = export_scenario(scen, tmp / "data", tmp, parallel=parallel,
                                    on_day=lambda d, n, s, w, b: log.info("%s %s: %d samples, simulate %.1fs write %.1fs backfill %.1fs",
                                                                          name, d.date(), n, s, w, b))
            t_q = time.perf_counter()
            with PrometheusProcess(tmp / "data", tmp) as prom, requests.Session() as http:
                start, end = int(scen.start.timestamp()), int(scen.end.timestamp())
                episodes = [e for r in rules for e in replay_rule(prom.url, r, start, end, session=http)]
            query_s = time.perf_counter() - t_q
    except Exception as err:  # noqa: BLE001 -- a failure is this scenario's result, reported, not hidden
        return {"scenario": name, "error": f"{type(err).__name__}: {err}"[:2000], "seconds": round(time.time() - t_start, 1),
                "incidents": [], "false_pages": [], **_metrics(pd.DataFrame(), 0, 0, span)}
    t_s = time.perf_counter()
    alerts = alerts_frame(episodes, rules, stats.job_nodes)
    result = score(alerts, labels_frame(scen), maintenance_windows(scen), span)
    score_s = time.perf_counter() - t_s
    days = span / pd.Timedelta(days=1)
    total = stats.simulate_s + stats.write_s + stats.backfill_s + query_s + score_s
    out = {
        "scenario": name, "seconds": round(time.time() - t_start, 1), **result,
        "alerts_by_rule": {r.name: int((alerts["rule"] == r.name).sum()) for r in rules},
        "timings": {
            "samples": stats.samples, "simulate_s": round(stats.simulate_s, 1), "write_s": round(stats.write_s, 1),
            "backfill_s": round(stats.backfill_s, 1), "query_s": round(query_s, 1), "score_s": round(score_s, 1),
            "seconds_per_simulated_day": round(total / days, 1) if days else None,
        },
    }
    if return_alerts:
        out["alerts"] = alerts
    return out


def evaluate_static(scenarios: str | Path, out: str | Path | None = None, *, pattern: str = "*.yaml",
                    workdir: str | Path | None = None, parallel: int = 2) -> dict:
    """``{"overall", "scenarios"}`` over a suite, the report shape of ``harness.evaluate``."""
    paths = sorted(str(p) for p in Path(scenarios).glob(pattern))
    if not paths:
        raise FileNotFoundError(f"no scenario {pattern} in {scenarios}")
    results = []
    for p in paths:
        r = evaluate_static_rules(p, workdir, parallel=parallel)
        log.info("%s: %s", r["scenario"], r.get("error") or f"{r['seconds']} s")
        results.append(r)
    report = {"overall": overall(results), "scenarios": results}
    report["overall"]["errors"] = [r["scenario"] for r in results if r.get("error")]
    report["overall"]["rules"] = str(RULES_PATH)
    if out:
        Path(out).write_text(json.dumps(report, indent=2, default=str))
    return report


def main_static(argv: list[str] | None = None) -> int:
    """``python -m gpu_health.evaluation.static_rules --scenarios DIR --out FILE.json [--pattern GLOB]``."""
    parser = argparse.ArgumentParser(prog="python -m gpu_health.evaluation.static_rules",
                                     description="Score the seeds' static Prometheus rules on a scenario suite (same table as gpu-health evaluate).")
    parser.add_argument("--scenarios", required=True, help="directory of scenario YAML files")
    parser.add_argument("--out", required=True, help="JSON report path")
    parser.add_argument("--pattern", default="*.yaml")
    parser.add_argument("--workdir", help="where the TSDB and OpenMetrics scratch go (default: the system temp dir)")
    parser.add_argument("--parallel", type=int, default=2, help="promtool processes per day")
    parser.add_argument("--quiet", action="store_true")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING if args.quiet else logging.INFO, format="%(asctime)s %(message)s")
    logging.getLogger("gpu_health.evaluation.promexport").setLevel(logging.WARNING)  # one line per chunk file
    try:
        report = evaluate_static(args.scenarios, args.out, pattern=args.pattern, workdir=args.workdir, parallel=args.parallel)
    except (RuntimeError, ValueError, FileNotFoundError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    print(table(report))
    print(json.dumps(report["overall"], default=str))
    return 1 if report["overall"]["errors"] else 0


if __name__ == "__main__":
    sys.exit(main_static(sys.argv[1:]))
