"""The ``gpu-health`` command line.

    gpu-health simulate --scenario FILE [--start ISO --end ISO] --landing DIR
    gpu-health run --start ISO --end ISO [--scenario FILE | --landing DIR | --source prometheus --prometheus-url URL]
                   [--prometheus-region R] [--prometheus-labels COL=LABEL,...] [--slurm-dir DIR] [--warehouse URL]
                   [--direct [--workers N] [--only TABLES] [--chunk-hours H]]
    gpu-health serve-metrics [--warehouse URL] [--port 9464]
    gpu-health evaluate --scenarios DIR --out FILE.json [--workers N] [--static-rules]
    gpu-health export TABLE --start ISO --end ISO --out FILE.parquet|FILE.csv [--warehouse URL] [--telemetry-dir DIR]

``simulate`` writes the landing zone (contracts.md layout) and ``DIR/labels.parquet``.
``run`` materializes every asset of the code location for each partition in the
range, in-process (single-run ranges of at most a day), and exits non-zero on failure.
``export`` writes one table's rows for a range, from the SQL warehouse or the columnar telemetry store.

Where the minute-grain telemetry lives: ``--telemetry-dir``; else, with an explicit ``--warehouse``, beside that
warehouse (its own store: an evaluation's temporary warehouse never writes into the configured one; a PostgreSQL
database has no file to sit beside and gets ``var/telemetry/``); else ``$GPU_HEALTH_TELEMETRY_DIR``, else beside the
default warehouse (``var/telemetry/``). A store serves the warehouse that wrote it first and refuses any other
(``TelemetryStore``'s owner), so a second warehouse there fails with an error instead of mixing rows.
"""

import argparse
import logging
import os
import sys
import time
import warnings
from datetime import datetime
from pathlib import Path

import pandas as pd

from gpu_health.constants import PARTITION, PARTITION_FREQ, day_chunks
from gpu_health.contracts import FIVE_MINUTE_SOURCES, OPTIONAL_SOURCES, PARTITION_COLUMN, empty_frame
from gpu_health.landing import write_partition


ISO_EXAMPLE = "2026-11-02T00:00:00Z"
TIME_HELP = f"ISO 8601 with a timezone, on a 5-minute boundary, e.g. {ISO_EXAMPLE}"


class UsageError(ValueError):
    """A mistake on the command line, told in one line that names the flag (or variable) and the value it was given;
    ``gpu-health`` exits 2 on it, as argparse does on a flag it cannot parse."""

    def __init__(self, flag: str, value: str, problem: str):
        super().__init__(f"{flag} {value!r}: {problem}")


def _ts(text: str, flag: str = "--start") -> pd.Timestamp:
    """``text`` as a UTC partition boundary. ISO 8601 only: a form such as 03/12/2026 reads as March to one reader
    and December to another, and a monitoring range run on the wrong month is worse than a refusal."""
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        raise UsageError(flag, text, f"not an ISO 8601 time; write e.g. {ISO_EXAMPLE}") from None
    if parsed.tzinfo is None:
        raise UsageError(flag, text, f"has no timezone; write UTC explicitly, e.g. {ISO_EXAMPLE}")
    ts = pd.Timestamp(parsed).tz_convert("UTC")
    if ts != ts.floor(PARTITION_FREQ):
        raise UsageError(flag, text, f"is not on a 5-minute boundary (partitions start at :00, :05, ...), "
                                     f"e.g. {ISO_EXAMPLE}")
    return ts


def _range(start: str, end: str) -> tuple[pd.Timestamp, pd.Timestamp]:
    start_ts, end_ts = _ts(start, "--start"), _ts(end, "--end")
    if end_ts <= start_ts:
        raise UsageError("--end", end, f"must be after --start {start}")
    return start_ts, end_ts


class Progress:
    """Partitions done of a range, on stderr: on a terminal a live bar (done / total, rate, elapsed, time left,
    redrawn while a piece runs, so a long piece never looks hung); in a log a line per piece; with ``quiet``
    nothing. ``rich`` draws it: it finds out itself whether stderr is a terminal."""

    def __init__(self, start: pd.Timestamp, end: pd.Timestamp, verb: str, *, quiet: bool = False, console=None):
        from rich.console import Console
        from rich.progress import (BarColumn, MofNCompleteColumn, Progress as Bar, SpinnerColumn, TextColumn,
                                   TimeElapsedColumn, TimeRemainingColumn)

        self.verb, self.quiet, self.t0 = verb, quiet, time.time()
        console = console or Console(stderr=True)
        self.bar = None
        if not quiet and console.is_terminal:
            self.bar = Bar(SpinnerColumn(), TextColumn(f"{verb} [progress.description]{{task.description}}"),
                           BarColumn(), MofNCompleteColumn(), TextColumn("partitions"), TimeElapsedColumn(),
                           TimeRemainingColumn(), console=console, transient=False)
            self.task = self.bar.add_task(f"{start:%Y-%m-%d %H:%M}", total=int((end - start) / PARTITION))
            self.bar.start()

    def __call__(self, c_start: pd.Timestamp, c_end: pd.Timestamp) -> None:
        if self.bar is not None:
            self.bar.update(self.task, advance=int((c_end - c_start) / PARTITION), description=f"{c_end:%Y-%m-%d %H:%M}")
        elif not self.quiet:
            print(f"{self.verb} {c_start:%Y-%m-%d %H:%M} .. {c_end:%Y-%m-%d %H:%M} ({time.time() - self.t0:.0f}s)",
                  file=sys.stderr)

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, *exc) -> None:
        if self.bar is not None:
            self.bar.stop()


# --- simulate ----------------------------------------------------------------------------
def _simulated(scen, table: str) -> bool:
    """Whether the scenario's cluster produces the optional source ``table`` (serving, facility, platform knobs)."""
    from gpu_health.contracts import PLATFORM_SOURCES

    spec = scen.cluster.spec
    if table == "facility_telemetry":
        return bool(spec.facility)
    if table in PLATFORM_SOURCES:
        return bool(spec.platform)
    return bool(spec.serving)


def _simulate_day(scen, root: Path, d_start: pd.Timestamp, d_end: pd.Timestamp, rows: dict) -> int:
    """One day (or less) of the scenario's landing zone: every source's partition files and the day's capacity;
    adds the rows written to ``rows``, returns the files written."""
    from gpu_health.sim.telemetry import Window, cost_capacity

    win = Window(scen, d_start, d_end)
    starts = pd.date_range(d_start, d_end, freq=PARTITION_FREQ, inclusive="left")
    files = 0
    for table in FIVE_MINUTE_SOURCES + [t for t in OPTIONAL_SOURCES if _simulated(scen, t)]:
        frame = win.table(table)
        col = PARTITION_COLUMN[table]
        keys = frame[col].dt.floor(PARTITION_FREQ) if len(frame) else pd.Series([], dtype="datetime64[ns, UTC]")
        groups = dict(tuple(frame.groupby(keys, sort=False))) if len(frame) else {}
        for p in starts:
            part = groups.get(p)
            write_partition(root, table, p, part if part is not None else empty_frame(table))
            files += 1
        rows[table] = rows.get(table, 0) + len(frame)
    write_partition(root, "cost_capacity", d_start.normalize(), cost_capacity(scen, d_start))
    return files + 1


def simulate(scenario_path: str, landing: str, start: str | None, end: str | None, *, quiet: bool = False) -> dict:
    from gpu_health.sim.jobs import build_plan, to_s
    from gpu_health.sim.labels import labels_frame
    from gpu_health.sim.scenario import load_scenario
    from gpu_health.sim.telemetry import maintenance_windows

    _scenario(scenario_path)
    scen = load_scenario(scenario_path)
    start_ts = _ts(start, "--start") if start else scen.start
    end_ts = _ts(end, "--end") if end else scen.end
    root = Path(landing)
    root.mkdir(parents=True, exist_ok=True)
    rows = dict.fromkeys(FIVE_MINUTE_SOURCES, 0)
    files = 0
    t0 = time.time()
    with Progress(start_ts, end_ts, "simulated", quiet=quiet) as progress:
        for d_start, d_end in day_chunks(start_ts, end_ts):
            files += _simulate_day(scen, root, d_start, d_end, rows)
            progress(d_start, d_end)
    write_partition(root, "maintenance_windows", None, maintenance_windows(scen))
    # resolve the jobs an incident hit (hangs) for the ground truth
    for inc in scen.incidents:
        build_plan(scen, to_s(inc.start), to_s(inc.start) + 300)
    labels = labels_frame(scen, {inc.incident_id: inc.job_ids for inc in scen.incidents})
    labels.to_parquet(root / "labels.parquet", index=False)
    return {"landing": str(root), "files": files + 2, "rows": rows, "incidents": len(labels), "seconds": round(time.time() - t0, 1)}


def _warehouse_location(warehouse: str | None, telemetry_dir: str | None) -> tuple[str, str]:
    """(warehouse URL, telemetry dir or "" for the default beside it), as the module docstring says; a URL that
    does not parse or cannot connect is a :class:`UsageError` naming where it came from."""
    from gpu_health.defs.resources import WAREHOUSE_URL, default_resources, env_value

    configured = default_resources()["warehouse"]
    if warehouse:
        _check_warehouse(warehouse, "--warehouse")
        return warehouse, telemetry_dir or ""
    url = env_value(configured.url)
    _check_warehouse(url, f"${WAREHOUSE_URL.env_var_name}" if os.environ.get(WAREHOUSE_URL.env_var_name) else
                     "the default warehouse")
    return url, telemetry_dir or configured.telemetry_dir


def _check_warehouse(url: str, origin: str) -> None:
    """Connect once before any work: a typo in a URL is a one-line error here, not a failed run per partition."""
    import sqlalchemy as sa

    from gpu_health.storage.warehouse import engine_for, masked_url

    shown = masked_url(url)
    try:
        sa.engine.make_url(url)
    except sa.exc.ArgumentError:
        raise UsageError(origin, shown, "is not a SQLAlchemy URL, e.g. sqlite:///var/warehouse.db or "
                                        "postgresql+psycopg2://user@host:5432/gpu_health") from None
    try:
        with engine_for(url).connect():
            pass
    except ImportError as err:  # SQLAlchemy 2.1 reads postgresql:// as psycopg 3; this install has psycopg2
        raise UsageError(origin, shown, f"its database driver is not installed ({err.name}); for PostgreSQL write "
                                        "postgresql+psycopg2://user@host:5432/db") from None
    except (sa.exc.SQLAlchemyError, OSError) as err:
        first = str(getattr(err, "orig", None) or err).strip().splitlines()
        raise UsageError(origin, shown, f"cannot connect: {first[0] if first else type(err).__name__}") from None


def _scenario(path: str) -> None:
    """Validate the scenario file before a run starts on it (a run would fail on it in every partition)."""
    import yaml

    from gpu_health.sim.scenario import load_scenario

    if not Path(path).is_file():
        raise UsageError("--scenario", path, "no such file (scenarios/ holds examples; docs/scenarios.md the format)")
    try:
        load_scenario(path)
    except (ValueError, KeyError, TypeError, yaml.YAMLError) as err:
        first = str(err).strip().splitlines()
        raise UsageError("--scenario", path, f"does not validate: {first[0] if first else type(err).__name__}") from None


# --- run ---------------------------------------------------------------------------------
# `gpu-health run` flags -> TelemetrySourceResource fields (each also an environment variable, docs/running.md: Configuration)
SOURCE_FLAGS = {
    "prometheus_url": "--prometheus-url", "prometheus_region": "--prometheus-region",
    "prometheus_region_label": "--prometheus-region-label", "prometheus_selector": "--prometheus-selector",
    "prometheus_labels": "--prometheus-labels", "prometheus_step": "--prometheus-step",
    "prometheus_ready_lag": "--prometheus-ready-lag", "absent_after": "--absent-after", "slurm_dir": "--slurm-dir",
    "ipmi_racks": "--ipmi-racks", "ipmi_hall_metric": "--ipmi-hall-metric",
    "prometheus_kube_state_metrics": "--prometheus-kube-state-metrics",
    "prometheus_serving": "--prometheus-serving", "prometheus_serving_metrics": "--prometheus-serving-metrics",
}


def run(start: str, end: str, *, scenario: str | None = None, landing: str | None = None, source: str | None = None,
        prometheus_url: str | None = None, warehouse: str | None = None, partition_start: str | None = None,
        quiet: bool = False, telemetry_dir: str | None = None, direct: bool = False, workers: int = 1,
        targets: list[str] | None = None, chunk_hours: float | None = None, **source_options: str | None) -> dict:
    from gpu_health.defs.resources import TelemetrySourceResource, default_resources

    start_ts, end_ts = _range(start, end)
    if targets and not direct:
        raise UsageError("--only", ",".join(targets), "needs --direct (the Dagster path materializes every asset of "
                                                     "its jobs)")
    if chunk_hours is not None and not direct:
        raise UsageError("--chunk-hours", str(chunk_hours), "needs --direct (the Dagster path runs a day's partitions "
                                                             "as one run)")
    unknown = set(source_options) - set(SOURCE_FLAGS)
    if unknown:
        raise TypeError(f"unknown source options {sorted(unknown)}")
    resources = default_resources()
    env = resources["source"]  # the environment's settings; flags given here win
    kind = source or ("landing" if landing else ("simulator" if scenario or env.kind == "simulator" else env.kind))
    fields = {name: getattr(env, name) for name in SOURCE_FLAGS}
    fields.update({k: v for k, v in {**source_options, "prometheus_url": prometheus_url}.items() if v is not None})
    if kind == "prometheus" and not fields["prometheus_url"]:
        raise UsageError("--source", "prometheus", "needs --prometheus-url (or GPU_HEALTH_PROMETHEUS_URL)")
    if kind == "landing" and not Path(landing or env.landing_dir).is_dir():
        raise UsageError("--landing" if landing else "$GPU_HEALTH_LANDING_DIR", landing or env.landing_dir,
                         "no such directory (gpu-health simulate --landing DIR writes one)")
    if scenario:
        _scenario(scenario)
    url, tdir = _warehouse_location(warehouse, telemetry_dir)
    src = TelemetrySourceResource(kind=kind, scenario=scenario or "", landing_dir=landing or env.landing_dir, **fields)
    t0 = time.time()
    with Progress(start_ts, end_ts, "materialized", quiet=quiet) as progress:
        summary = _run_range(start_ts, end_ts, kind, src, url, tdir, direct=direct, workers=workers, targets=targets,
                             chunk_hours=chunk_hours, partition_start=partition_start, progress=progress)
    # findings about the data, not progress: on stderr even with --quiet
    for entry in summary.get("quarantined_files", []):
        print(f"warning: {entry['source']}: {entry['reason']}", file=sys.stderr)
    for table, cols in summary.get("dropped_columns", {}).items():
        for col, origins in cols.items():
            print(f"warning: {table}: extra column '{col}' dropped (not in the contract) in {len(origins)} file(s), "
                  f"e.g. {origins[0]}", file=sys.stderr)
    for entry in summary.get("failed_partitions", []):
        print(f"error: {entry['step']} {entry['partitions']}: {entry['reason']}", file=sys.stderr)
    summary["seconds"] = round(time.time() - t0, 1)
    if summary.get("failed_partitions"):  # raised once the range is done: every other piece has run
        raise RangeFailed(summary)
    return summary


def _run_range(start_ts, end_ts, kind, src, url, tdir, *, direct, workers, targets, chunk_hours, partition_start,
               progress) -> dict:
    """The range through the bulk path (``direct``) or Dagster runs; the summary without the CLI's additions."""
    from gpu_health.constants import PARTITION_KEY_FMT
    from gpu_health.defs.resources import SourceSpec
    from gpu_health.storage.warehouse import masked_url

    if direct:  # the bulk path: the same steps, no Dagster runs (gpu_health.steps.direct)
        from gpu_health.steps.direct import RUN_CHUNK, run_range
        from gpu_health.storage.warehouse import Warehouse, run_cache

        summary = {"warehouse": masked_url(url), "source": kind, "path": "direct"}
        summary.update(run_range(Warehouse(url, tdir or None, cache=run_cache()), src.get(), start_ts, end_ts,
                                 progress=progress, source_spec=SourceSpec(src) if workers > 1 else None,
                                 processes=workers, targets=targets,
                                 chunk=RUN_CHUNK if chunk_hours is None else pd.Timedelta(hours=chunk_hours)))
    else:  # Dagster runs (gpu_health.defs.range_runs), the code location's partitions covering the range
        from gpu_health.defs.range_runs import CodeLocation, run_range

        location = CodeLocation(url=url, telemetry_dir=tdir, source=SourceSpec(src),
                                partition_start=partition_start or start_ts.normalize().strftime(PARTITION_KEY_FMT))
        summary = {"warehouse": masked_url(url), "source": kind}
        summary.update(run_range(location, start_ts, end_ts, workers=workers, progress=progress))
    return summary


class RangeFailed(RuntimeError):
    """A range run with failed pieces, raised once its other pieces ran: ``summary`` is the run's (with its
    ``failed_partitions``), which ``gpu-health run`` prints before it exits 1."""

    def __init__(self, summary: dict):
        self.summary = summary
        super().__init__("; ".join(f"{e['step']} {e['partitions']} failed: {e['reason']}"
                                   for e in summary["failed_partitions"]))


def report_window(start: str, end: str, *, warehouse: str | None = None, scenario: str | None = None,
                  out: str | None = None, telemetry_dir: str | None = None) -> dict:
    from gpu_health.report import markdown
    from gpu_health.storage.warehouse import Warehouse

    start_ts, end_ts = _range(start, end)
    incidents = None
    if scenario:
        from gpu_health.sim.labels import labels_frame
        from gpu_health.sim.scenario import load_scenario

        labels = labels_frame(load_scenario(scenario))
        incidents = labels[(labels["start"] < end_ts) & (labels["end"] > start_ts)]
    url, tdir = _warehouse_location(warehouse, telemetry_dir)
    text = markdown(Warehouse(url, tdir or None), start_ts, end_ts, incidents=incidents)
    if out:
        Path(out).write_text(text)
        return {"report": out}
    print(text)
    return {}


def export(table: str, start: str, end: str, out: str, *, warehouse: str | None = None,
           telemetry_dir: str | None = None) -> dict:
    from gpu_health.storage.export import export_table
    from gpu_health.storage.warehouse import Warehouse

    start_ts, end_ts = _range(start, end)
    url, tdir = _warehouse_location(warehouse, telemetry_dir)
    return export_table(Warehouse(url, tdir or None), table, start_ts, end_ts, out)


def serve_metrics(warehouse: str | None, port: int, address: str, *, once: bool = False, quiet: bool = False) -> int:
    """Serve ``/metrics`` until interrupted (or print the exposition once)."""
    from gpu_health.defs.resources import default_resources, env_value
    from gpu_health.kpi_export import registry_for, serve
    from gpu_health.storage.warehouse import masked_url

    url = warehouse or env_value(default_resources()["warehouse"].url)
    if once:
        from prometheus_client.openmetrics.exposition import generate_latest

        sys.stdout.write(generate_latest(registry_for(url)).decode())
        return 0
    server, thread = serve(url, port, address)
    if not quiet:
        print(f"serving gpu_health metrics of {masked_url(url)} on http://{address}:{server.server_port}/metrics", file=sys.stderr)
    try:
        thread.join()
    except KeyboardInterrupt:
        server.shutdown()
    return 0


# --- the command line: one parser and one dispatch per sub-command --------------------------
_WAREHOUSE_HELP = "SQLAlchemy URL (default: $GPU_HEALTH_WAREHOUSE_URL or sqlite:///var/warehouse.db)"


def _add_simulate(sub) -> argparse.ArgumentParser:
    p_sim = sub.add_parser("simulate", help="write a scenario's landing zone and labels.parquet")
    p_sim.add_argument("--scenario", required=True, help="scenario YAML (docs/scenarios.md; examples in scenarios/)")
    p_sim.add_argument("--start", help=f"first partition written (default: the scenario's start); {TIME_HELP}")
    p_sim.add_argument("--end", help=f"end of the range, exclusive (default: the scenario's end); {TIME_HELP}")
    p_sim.add_argument("--landing", required=True, help="landing-zone directory to write (created if missing)")
    return p_sim


def _add_run_sources(p_run: argparse.ArgumentParser) -> None:
    """``run``'s flags naming where the telemetry comes from (a scenario, a landing zone, Prometheus, Slurm, IPMI)."""
    g = p_run.add_mutually_exclusive_group()
    g.add_argument("--scenario", help="simulate this scenario (the embedded default source)")
    g.add_argument("--landing", help="read the landing zone in this directory")
    p_run.add_argument("--source", choices=["simulator", "landing", "prometheus"],
                       help="where the telemetry comes from (default: --scenario or --landing if given, else "
                            "$GPU_HEALTH_SOURCE, else the simulator)")
    p_run.add_argument("--prometheus-url", help="Prometheus holding dcgm-exporter / node-exporter series")
    p_run.add_argument("--prometheus-region", help="static region for series without a region label")
    p_run.add_argument("--prometheus-region-label", help="label holding the region (default: region)")
    p_run.add_argument("--prometheus-selector", help='PromQL label matchers on every query, e.g. cluster="a",job=~"dcgm.*"')
    p_run.add_argument("--prometheus-labels", help="exporter label names per column, e.g. node_id=instance,gpu_uuid=gpu_uuid")
    p_run.add_argument("--prometheus-step", help="query step (60s: the contract's minute)")
    p_run.add_argument("--prometheus-ready-lag", help="how long after a window's end it may be read (default 2min)")
    p_run.add_argument("--absent-after", help="how long a window a live producer (an exporter, a Slurm dump, a landing "
                                              "file) has not covered is waited for before it is written empty as "
                                              "missing data (default 10min)")
    p_run.add_argument("--prometheus-kube-state-metrics", action="store_const", const="true",
                       help="also read kube_pods / kube_nodes from kube-state-metrics series in the same Prometheus")
    p_run.add_argument("--prometheus-serving", action="store_const", const="true",
                       help="also read inference_requests / inference_latency_buckets from a model server's latency "
                            "histograms in the same Prometheus")
    p_run.add_argument("--prometheus-serving-metrics",
                       help="the model server's metric families, e.g. latency=vllm:e2e_request_latency_seconds,"
                            "ttft=vllm:time_to_first_token_seconds,queue_depth=vllm:num_requests_waiting")
    p_run.add_argument("--slurm-dir", help="directory of sacct / squeue --json dumps (scheduler_events, job_metadata)")
    p_run.add_argument("--ipmi-racks", help="rack inventory (CSV/YAML: rack_id, region, node_ids, power_budget_kw): read "
                                            "facility_telemetry from ipmi_exporter series in the --prometheus-url Prometheus")
    p_run.add_argument("--ipmi-hall-metric", help="the hall power meter's metric (watts, region label) for PUE")


def _add_run(sub) -> argparse.ArgumentParser:
    p_run = sub.add_parser("run", help="materialize every asset for each partition in a range, in-process")
    p_run.add_argument("--start", required=True, help=f"first partition of the range; {TIME_HELP}")
    p_run.add_argument("--end", required=True, help=f"end of the range, exclusive; {TIME_HELP}")
    _add_run_sources(p_run)
    p_run.add_argument("--warehouse", help=_WAREHOUSE_HELP)
    p_run.add_argument("--partition-start", help="first partition key of the code location, YYYY-MM-DD-HH:MM "
                                                  "(default: the range start's day)")
    p_run.add_argument("--direct", action="store_true",
                       help="the bulk path: run the same steps over the range without Dagster runs (no run history "
                            "in a Dagster instance; the tables written are the same)")
    p_run.add_argument("--workers", type=int, default=1,
                       help="pipeline the range over this many processes, a stage each (2: one reads and stores each "
                            "day's sources while the other computes the day before; 3: the diagnosis steps of a day "
                            "run beside the loss tree and KPIs of the next); same tables. Without --direct each stage "
                            "runs its assets of a day as one Dagster run")
    p_run.add_argument("--only", help="with --direct: compute only the steps these tables need (comma-separated, "
                                      "e.g. alerts: the loss tree and the sources, not the KPIs, drill-down or finance)")
    p_run.add_argument("--chunk-hours", type=float,
                       help="with --direct: the pieces of each day the range runs in (default 8; 24: whole days). "
                            "Shorter pieces hold less memory at once for a little more CPU; the tables are the same")
    return p_run


def _add_evaluate(sub) -> argparse.ArgumentParser:
    p_eval = sub.add_parser("evaluate", help="score detection, attribution and false pages on a scenario suite")
    p_eval.add_argument("--scenarios", required=True, help="directory of scenario YAML files")
    p_eval.add_argument("--out", required=True, help="JSON report path")
    p_eval.add_argument("--workers", type=int, default=1, help="scenarios evaluated in parallel (processes)")
    p_eval.add_argument("--pattern", default="*.yaml", help="glob of the scenario files to run (default *.yaml)")
    p_eval.add_argument("--resume", action="store_true",
                        help="reuse the per-scenario results a previous run left in OUT.d/ (each is written as its "
                             "scenario finishes) and run only the others")
    p_eval.add_argument("--static-rules", action="store_true",
                        help="score the seeds' static Prometheus rules (deploy/prometheus/seed_rules.yml) on the same "
                             "simulated telemetry instead, replayed by a real Prometheus")
    return p_eval


def _add_report(sub) -> argparse.ArgumentParser:
    p_rep = sub.add_parser("report", help="a window's alerts and goodput decomposition, as Markdown")
    p_rep.add_argument("--warehouse", help=_WAREHOUSE_HELP)
    p_rep.add_argument("--start", required=True, help=f"start of the window; {TIME_HELP}")
    p_rep.add_argument("--end", required=True, help=f"end of the window, exclusive; {TIME_HELP}")
    p_rep.add_argument("--scenario", help="add this scenario's injected incidents (ground truth)")
    p_rep.add_argument("--out", help="write the Markdown here instead of printing it")
    return p_rep


def _add_export(sub) -> argparse.ArgumentParser:
    p_exp = sub.add_parser("export", help="write one table's rows for a range to Parquet or CSV, wherever it is stored")
    p_exp.add_argument("table", help="table name, e.g. gpu_telemetry, goodput_states, alerts")
    p_exp.add_argument("--start", required=True, help=f"start of the range; {TIME_HELP}")
    p_exp.add_argument("--end", required=True, help=f"end of the range, exclusive; {TIME_HELP}")
    p_exp.add_argument("--out", required=True, help="FILE.parquet or FILE.csv (the suffix picks the format)")
    p_exp.add_argument("--warehouse", help=_WAREHOUSE_HELP)
    return p_exp


def _add_serve_metrics(sub) -> argparse.ArgumentParser:
    p_srv = sub.add_parser("serve-metrics", help="expose the latest partition's north star, loss tree, KPIs, open alerts "
                                                 "and wasted spend for Prometheus to scrape (OpenMetrics)")
    p_srv.add_argument("--warehouse", help=_WAREHOUSE_HELP)
    p_srv.add_argument("--port", type=int, default=9464, help="TCP port to listen on (default 9464)")
    # loopback unless told otherwise: the metrics name regions, teams and spend, so exposing them is a choice
    p_srv.add_argument("--address", "--bind", dest="address", default="127.0.0.1",
                       help="listen address (default 127.0.0.1, this host only; 0.0.0.0 for every interface, e.g. "
                            "for a Prometheus on another host or in a container)")
    p_srv.add_argument("--once", action="store_true", help="print the exposition once and exit (no server)")
    return p_srv


def _add_slo(sub) -> argparse.ArgumentParser:
    p_slo = sub.add_parser("slo", help="the serving SLO catalogue (docs/slos.md)")
    slo_sub = p_slo.add_subparsers(dest="slo_command", required=True)
    p_slo_exp = slo_sub.add_parser("export", help="write the SLO catalogue as OpenSLO v1 YAML")
    p_slo_exp.add_argument("--out", help="write the YAML here instead of printing it")
    return p_slo


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="gpu-health", description=__doc__.replace("``", ""),
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    p_sim, p_run, p_eval = _add_simulate(sub), _add_run(sub), _add_evaluate(sub)
    p_rep, p_exp, p_srv = _add_report(sub), _add_export(sub), _add_serve_metrics(sub)
    p_slo = _add_slo(sub)
    for p in (p_run, p_rep, p_exp):
        p.add_argument("--telemetry-dir", help="the columnar telemetry store (default: $GPU_HEALTH_TELEMETRY_DIR, or "
                                               "beside a SQLite warehouse: var/warehouse.db -> var/telemetry/)")
    for p in (p_sim, p_run, p_eval, p_rep, p_exp, p_srv):
        p.add_argument("--quiet", action="store_true", help="no progress on stderr (warnings and errors still)")
    for p in (p_sim, p_run, p_eval, p_rep, p_exp, p_srv, p_slo):
        p.add_argument("--debug", action="store_true", help="on an error, the whole traceback instead of one line")
    return parser


def _slo(args) -> int:
    from gpu_health.metrics.slo_docs import openslo_yaml

    text = openslo_yaml()
    if args.out:
        Path(args.out).write_text(text)
        print(f"wrote {args.out}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0


def _evaluate(args) -> dict:
    from gpu_health.evaluation.scorer import detector_tables, table

    if args.static_rules:
        from gpu_health.evaluation.static_rules import evaluate_static

        report = evaluate_static(args.scenarios, args.out, pattern=args.pattern)
    else:
        from gpu_health.evaluation.harness import evaluate

        report = evaluate(args.scenarios, args.out, run=run, workers=args.workers, pattern=args.pattern,
                          resume=args.resume)
    print(table(report))
    print()
    print(detector_tables(report))
    return report["overall"]


def _run(args) -> dict:
    return run(args.start, args.end, scenario=args.scenario, landing=args.landing, source=args.source,
               warehouse=args.warehouse, partition_start=args.partition_start, quiet=args.quiet,
               telemetry_dir=args.telemetry_dir, direct=args.direct, workers=args.workers,
               targets=[t.strip() for t in args.only.split(",") if t.strip()] if args.only else None,
               chunk_hours=args.chunk_hours,
               **{name: getattr(args, name) for name in SOURCE_FLAGS})


# sub-command -> what it does with the parsed arguments; the result is printed as JSON, except for the commands in
# _EXIT_CODE_COMMANDS, which print their own output and return the exit code
_COMMANDS = {
    "slo": _slo,
    "simulate": lambda args: simulate(args.scenario, args.landing, args.start, args.end, quiet=args.quiet),
    "evaluate": _evaluate,
    "serve-metrics": lambda args: serve_metrics(args.warehouse, args.port, args.address, once=args.once, quiet=args.quiet),
    "report": lambda args: report_window(args.start, args.end, warehouse=args.warehouse, scenario=args.scenario,
                                         out=args.out, telemetry_dir=args.telemetry_dir),
    "export": lambda args: export(args.table, args.start, args.end, args.out, warehouse=args.warehouse,
                                  telemetry_dir=args.telemetry_dir),
    "run": _run,
}
_EXIT_CODE_COMMANDS = frozenset({"slo", "serve-metrics"})


def _quiet_libraries() -> None:
    """Deprecation, beta and preview warnings and Dagster's info logs off: the command's output is its result."""
    warnings.filterwarnings("ignore", category=DeprecationWarning)
    try:
        import dagster as dg

        warnings.filterwarnings("ignore", category=dg.BetaWarning)
        warnings.filterwarnings("ignore", category=dg.PreviewWarning)
    except (ImportError, AttributeError):
        pass
    logging.getLogger("dagster").setLevel(logging.WARNING)


def main(argv: list[str] | None = None) -> int:
    """Run one sub-command. A mistake on the command line (:class:`UsageError`) is one line and exit code 2; any
    other failure one line and exit code 1; ``--debug`` shows the traceback instead."""
    args = _parser().parse_args(argv)
    _quiet_libraries()
    try:
        out = _COMMANDS[args.command](args)
        if args.command in _EXIT_CODE_COMMANDS:
            return out
    except RangeFailed as failed:
        import json

        print(json.dumps(failed.summary, default=str))
        return 1
    except Exception as err:  # noqa: BLE001 -- the command line's last word: one line, unless --debug
        if args.debug:
            raise
        print(f"error: {err}" if isinstance(err, UsageError) else
              f"error: {type(err).__name__}: {_first_line(err)} (--debug shows the traceback)", file=sys.stderr)
        return 2 if isinstance(err, UsageError) else 1
    import json

    print(json.dumps(out, default=str))
    return 0


def _first_line(err: BaseException) -> str:
    lines = str(err).strip().splitlines()
    return lines[0] if lines else "(no message)"

if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
