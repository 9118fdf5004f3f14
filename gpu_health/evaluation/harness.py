"""Run the pipeline over a suite of scenarios and score what it pages on.

For each scenario YAML: run the whole pipeline over the scenario's span into a
fresh SQLite warehouse (the simulator source, in-process, as ``gpu-health run
--scenario`` does), read the ``alerts`` table and score it against the
scenario's ground truth with :func:`gpu_health.evaluation.scorer.score` (the
definitions are stated there).

The pipeline runner is an argument (``run``: ``gpu_health.cli.run`` or any
callable with its signature), not an import: the CLI calls the harness, so
the harness importing the CLI back was an import cycle, and a runner passed in
lets the same harness score the Dagster path and a direct bulk path alike. It
must be a module-level function so ``workers > 1`` can send it to a process.
"""

from __future__ import annotations

import json
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, as_completed
from functools import partial
from pathlib import Path

import pandas as pd

from gpu_health.evaluation.scorer import _metrics, overall, score
from gpu_health.sim.labels import labels_frame
from gpu_health.sim.scenario import load_scenario
from gpu_health.sim.telemetry import maintenance_windows
from gpu_health.storage.warehouse import Warehouse

# run(start_iso, end_iso, *, scenario=path, warehouse=url, quiet=True, direct=True, targets=SCORED): the pipeline
# over the range
Runner = Callable[..., object]
# what the score reads: pages from the alerts, capacity incidents from the headroom. The run computes only the steps
# these need (the sources, the loss tree, baselines and detectors; not the KPIs, the drill-down or finance: about
# a third of a week's CPU), and they are the same tables a full run writes.
SCORED = ("alerts", "capacity_headroom")


def evaluate_scenario(path: str, run: Runner, workdir: str | None = None) -> dict:
    """Run the pipeline over one scenario into a fresh SQLite warehouse and score its ``alerts``.

    A pipeline failure is the scenario's result (``error``), not an exception: one broken
    scenario must not hide the figures of the others.
    """
    scen = load_scenario(path)
    profile = scenario_profile(path)
    t0 = time.time()
    with tempfile.TemporaryDirectory(dir=workdir) as tmp:
        url = f"sqlite:///{tmp}/warehouse.db"
        try:
            run(scen.start.isoformat(), scen.end.isoformat(), scenario=str(path), warehouse=url, quiet=True, direct=True,
                targets=list(SCORED))
        except Exception as err:  # noqa: BLE001 -- a pipeline failure is this scenario's result, reported, not hidden
            return {"scenario": Path(path).stem, "profile": profile, "error": f"{type(err).__name__}: {err}"[:2000],
                    "seconds": round(time.time() - t0, 1), "incidents": [], "false_page_alerts": [],
                    **_metrics(pd.DataFrame(), 0, 0, scen.end - scen.start)}
        alerts = Warehouse(url).read_window("alerts")
        headroom = Warehouse(url).read_window("capacity_headroom")  # capacity incidents are scored on it
    result = score(alerts, labels_frame(scen), maintenance_windows(scen), scen.end - scen.start, headroom)
    return {"scenario": Path(path).stem, "profile": profile, "seconds": round(time.time() - t0, 1), **result}


def scenario_profile(path) -> str:
    """The cluster profile a scenario runs on: its ``cluster:`` profile name, or a mapping's ``profile`` key;
    ``default`` when absent, as the simulator reads it (a mapping's other keys -- size, layers -- change the
    cluster, not the profile whose behaviours it has)."""
    import yaml

    raw = yaml.safe_load(Path(path).read_text()) or {}
    cluster = raw.get("cluster", "default")
    if isinstance(cluster, str):
        return cluster
    if isinstance(cluster, dict):
        return str(cluster.get("profile") or "default")
    return "default"


def evaluate(scenarios: str, out: str | None = None, *, run: Runner, workers: int = 1, pattern: str = "*.yaml",
             resume: bool = False) -> dict:
    """``{"overall", "scenarios"}`` over every ``pattern`` file of ``scenarios``, ``workers`` processes at once.

    With ``out``, each scenario's result is also written as it completes to ``OUT.d/NAME.json`` (a suite takes an
    hour or more: a run killed half way keeps the weeks it finished), and ``resume`` reuses those files instead of
    re-running their scenarios. A result that is an error is never reused.
    """
    paths = sorted(str(p) for p in Path(scenarios).glob(pattern))
    if not paths:
        raise FileNotFoundError(f"no scenario {pattern} in {scenarios}")
    parts = Path(f"{out}.d") if out else None
    done: dict[str, dict] = {}
    if parts is not None:
        parts.mkdir(parents=True, exist_ok=True)
        if resume:  # (the profile label is the scenario's, read again: it is not a result)
            done = {p: {**r, "profile": scenario_profile(p)} for p in paths
                    if (r := _finished(parts / f"{Path(p).stem}.json")) is not None}
    todo = [p for p in paths if p not in done]

    def keep(path: str, result: dict) -> None:
        done[path] = result
        if parts is not None:
            (parts / f"{Path(path).stem}.json").write_text(json.dumps(result, indent=2, default=str))

    if workers > 1 and len(todo) > 1:
        # a fresh process per scenario: a week's pipeline leaves heap a reused worker would carry into the next
        # scenario, growing with every week it runs
        with ProcessPoolExecutor(max_workers=workers, max_tasks_per_child=1) as pool:
            futures = {pool.submit(evaluate_scenario, p, run): p for p in todo}
            for future in as_completed(futures):
                keep(futures[future], future.result())
    else:
        for p in todo:
            keep(p, evaluate_scenario(p, run))
    results = [done[p] for p in paths]
    report = {"overall": overall(results), "scenarios": results}
    report["overall"]["errors"] = [r["scenario"] for r in results if r.get("error")]
    if out:
        Path(out).write_text(json.dumps(report, indent=2, default=str))
    return report


def _finished(path: Path) -> dict | None:
    """A scenario's earlier result from ``path``, or None if absent, unreadable or an error (then it runs again)."""
    try:
        result = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return None if not isinstance(result, dict) or result.get("error") else result
