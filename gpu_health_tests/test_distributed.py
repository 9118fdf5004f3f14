"""The distributed production profile, for real: Redis on 127.0.0.1, two `dagster-celery` worker processes
(``scripts/celery_workers.sh``), the instance of ``deploy/dagster_distributed.yaml`` on PostgreSQL, and a 2-hour
range of a 120-GPU cluster (a landing zone with an ECC fault that pages) run through the Celery executor
(``python -m gpu_health.defs.distributed``) into a PostgreSQL warehouse. Every table (SQL and the shared
telemetry store) holds the rows a single-process run of the same range writes; the steps ran on both workers.

Then the same range again with a worker SIGKILLed (its whole process group) while it runs a step: the broker
hands the unacknowledged step to the other worker (late acks, a short visibility timeout here), the run
completes, and the tables are again those of one process.
"""

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import sqlalchemy as sa
import yaml

from gpu_health.cli import main, run
from gpu_health_tests.conftest import warehouse_tables
from gpu_health_tests.services.postgres import _free_port, fresh_database

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts" / "celery_workers.sh"
START, END = "2026-11-03T10:00:00Z", "2026-11-03T12:00:00Z"
PARTITION_START = "2026-11-03-00:00"  # the command line's for this range (its first day)
ECC = {"kind": "gpu_ecc_fault", "start": "2026-11-03T10:22:00Z", "duration": "60m", "severity": "high",
       "scope": {"region": "us-east", "nodes": 1}}
# the broker hands a dead worker's step to another after this (production: deploy/celery.yaml's hour)
VISIBILITY_TIMEOUT_S = 20
RUN_TIMEOUT_S = 1200
RECEIVED = re.compile(r"Task execute_plan\[([0-9a-f-]+)\] received")
SUCCEEDED = re.compile(r"Task execute_plan\[([0-9a-f-]+)\] succeeded")


@pytest.fixture(scope="module")
def landing(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("distributed")
    spec = folder / "scenario.yaml"
    spec.write_text(yaml.safe_dump({"seed": 11, "start": START, "end": END, "cluster": {"gpus": 120},
                                    "incidents": [ECC]}))
    zone = folder / "zone"
    assert main(["simulate", "--scenario", str(spec), "--start", START, "--end", END, "--landing", str(zone),
                 "--quiet"]) == 0
    return zone




def _assert_same(got: dict, want: dict, what: str) -> None:
    assert set(got) == set(want)
    for name in want:
        pd.testing.assert_frame_equal(got[name], want[name], check_dtype=False, obj=f"{name} ({what})")


def _log_tasks(log: Path) -> tuple[list[str], set[str]]:
    text = log.read_text(errors="replace") if log.exists() else ""
    return RECEIVED.findall(text), set(SUCCEEDED.findall(text))


class Workers:
    """The broker and two workers of ``scripts/celery_workers.sh`` in ``folder``, stopped on exit."""

    def __init__(self, folder: Path, env: dict):
        self.dir, self.env, self.port = folder, env, _free_port()
        env.update(GPU_HEALTH_CELERY_BROKER=f"redis://127.0.0.1:{self.port}/0",
                   GPU_HEALTH_CELERY_BACKEND=f"redis://127.0.0.1:{self.port}/1")

    def __enter__(self):
        try:
            subprocess.run([str(SCRIPT), "start", str(self.dir), str(self.port), "2"], env=self.env, check=True,
                           capture_output=True, text=True, timeout=300)
        except subprocess.CalledProcessError as exc:
            self.__exit__()
            pytest.fail(f"the broker and workers did not start:\n{exc.stdout}{exc.stderr}")
        return self

    def __exit__(self, *exc):
        subprocess.run([str(SCRIPT), "stop", str(self.dir)], env=self.env, capture_output=True, timeout=120)

    def log(self, i: int) -> Path:
        return self.dir / f"worker{i}.log"

    def kill_busy_worker(self, after_tasks: int) -> tuple[int, list[str]] | None:
        """SIGKILL the process group of a worker running a step, once the workers took ``after_tasks`` steps:
        (its number, the steps it held), or None while no worker is busy yet."""
        taken = {i: _log_tasks(self.log(i)) for i in (1, 2)}
        if sum(len(r) for r, _ in taken.values()) < after_tasks:
            return None
        for i, (received, succeeded) in taken.items():
            held = [t for t in received if t not in succeeded]
            if held:
                os.killpg(int((self.dir / f"worker{i}.pid").read_text()), signal.SIGKILL)
                return i, held
        return None


# The sensors and schedules stopped in the instance, as `dagster sensor stop` / `dagster schedule stop` do, in one
# process: the daemon would otherwise also run the live partition sensor (its wall-clock partition, "missing
# data" in this landing zone) and the calendar schedule, runs that are not the backfill's
STOP_AUTOMATION = """
import dagster as dg
from dagster._cli.workspace.cli_target import get_repository_from_cli_opts
from dagster_shared.cli import WorkspaceOpts

with dg.DagsterInstance.get() as instance, get_repository_from_cli_opts(
        instance, dg.__version__, WorkspaceOpts(workspace=["workspace.yaml"]), None) as repo:
    for s in repo.get_sensors():
        instance.stop_sensor(s.get_remote_origin_id(), s.selector_id, s)
    for s in repo.get_schedules():
        instance.stop_schedule(s.get_remote_origin_id(), s.selector_id, s)
"""


class Daemon:
    """``dagster-daemon run`` on the workspace (its own process group: the code server and the run workers it
    starts are in it), stopped on exit, its log in ``log``."""

    def __init__(self, env: dict, log: Path):
        self.env, self.log, self.proc = env, log, None

    def __enter__(self):
        with self.log.open("w") as out:
            self.proc = subprocess.Popen([str(Path(sys.executable).parent / "dagster-daemon"), "run", "-w",
                                          str(REPO / "workspace.yaml")], env=self.env, cwd=REPO, stdout=out,
                                         stderr=subprocess.STDOUT, start_new_session=True)
        return self

    def __exit__(self, *exc):
        for sig, wait in ((signal.SIGTERM, 30), (signal.SIGKILL, 10)):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, sig)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(wait)
                break


def _orchestrate(env: dict, on_tick=None, extra: tuple = ()) -> dict:
    """``python -m gpu_health.defs.distributed`` over the range (its own process group, killed on failure);
    ``on_tick()`` is called every half second while it runs."""
    import json

    proc = subprocess.Popen([sys.executable, "-m", "gpu_health.defs.distributed", "--start", START, "--end", END,
                             *extra], env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        deadline = time.monotonic() + RUN_TIMEOUT_S
        while proc.poll() is None:
            assert time.monotonic() < deadline, "the distributed range did not finish"
            if on_tick is not None:
                on_tick()
            time.sleep(0.5)
        out, err = proc.communicate()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 0, f"the distributed range failed:\n{out[-3000:]}\n{err[-6000:]}"
    return json.loads(out.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def reference(landing, postgres_url, tmp_path_factory) -> dict[str, pd.DataFrame]:
    """Every table of a single-process run of the range (computed once for the tests of this module)."""
    telemetry = str(tmp_path_factory.mktemp("reference") / "telemetry")
    with fresh_database(postgres_url, "ref") as ref:
        run(START, END, landing=str(landing), warehouse=ref, telemetry_dir=telemetry, quiet=True)
        want = warehouse_tables(ref, telemetry)
    assert (want["alerts"]["severity"] == "page").any(), "the ECC fault pages"
    return want


def _profile_env(tmp_path: Path, instance: str, landing: Path) -> dict:
    """The distributed profile's environment: the instance of deploy/dagster_distributed.yaml on ``instance``,
    the Celery executor (with a short visibility timeout), the landing zone as the source."""
    home = tmp_path / "dagster_home"
    home.mkdir()
    (home / "dagster.yaml").write_text((REPO / "deploy" / "dagster_distributed.yaml").read_text())
    celery = yaml.safe_load((REPO / "deploy" / "celery.yaml").read_text())
    celery["execution"]["config"]["config_source"]["broker_transport_options"]["visibility_timeout"] = \
        VISIBILITY_TIMEOUT_S
    (tmp_path / "celery.yaml").write_text(yaml.safe_dump(celery))
    pg = sa.make_url(instance)
    return {**os.environ, "PYTHONPATH": str(REPO), "DAGSTER_HOME": str(home),
            "DAGSTER_PG_HOST": pg.host, "DAGSTER_PG_PORT": str(pg.port), "DAGSTER_PG_DB": pg.database,
            "DAGSTER_PG_USERNAME": pg.username, "DAGSTER_PG_PASSWORD": pg.password or "",
            "GPU_HEALTH_EXECUTOR": "celery", "GPU_HEALTH_CELERY_CONFIG": str(tmp_path / "celery.yaml"),
            "GPU_HEALTH_SOURCE": "landing", "GPU_HEALTH_LANDING_DIR": str(landing),
            "GPU_HEALTH_PARTITION_START": PARTITION_START}


def test_a_range_on_celery_workers_writes_what_one_process_writes_even_with_a_worker_killed(
        landing, reference, postgres_url, tmp_path):
    want = reference
    with contextlib.ExitStack() as stack:
        base_env = _profile_env(tmp_path, stack.enter_context(fresh_database(postgres_url, "instance")), landing)

        for attempt in ("spread", "killed"):
            warehouse = stack.enter_context(fresh_database(postgres_url, attempt))
            telemetry = str(tmp_path / f"{attempt}_telemetry")
            env = {**base_env, "GPU_HEALTH_WAREHOUSE_URL": warehouse, "GPU_HEALTH_TELEMETRY_DIR": telemetry}
            with Workers(tmp_path / attempt, env) as workers:
                killed = []

                def kill_once():
                    if not killed:
                        hit = workers.kill_busy_worker(after_tasks=4)
                        if hit is not None:
                            killed.append(hit)

                summary = _orchestrate(env, kill_once if attempt == "killed" else None)
                assert not summary.get("failed_partitions") and summary["partitions"] == 24, summary
                done = {i: _log_tasks(workers.log(i))[1] for i in (1, 2)}
                if attempt == "spread":
                    assert all(done.values()), "both workers ran steps"
                else:
                    assert killed, "a worker was killed while it ran a step"
                    dead, held = killed[0]
                    survivor = 3 - dead
                    assert set(held) <= done[survivor], "the survivor ran the killed worker's step again"
            _assert_same(warehouse_tables(warehouse, telemetry), want, attempt)


def test_a_backfill_launched_to_the_daemon_runs_on_both_workers_and_writes_what_one_process_writes(
        landing, reference, postgres_url, tmp_path):
    """The range as one Dagster asset backfill (every asset: the calendar, the day, the 5-minute partitions),
    submitted to the instance and left to ``dagster-daemon``: its backfill daemon plans the runs from the assets'
    dependencies (an asset reading its own earlier partitions runs its range in a run of its own, after what it
    reads), the QueuedRunCoordinator starts them under deploy/dagster_distributed.yaml's limits, each run's
    steps go to the two Celery workers. Every run succeeds, both workers ran steps, and every table holds what
    one process writes."""
    with contextlib.ExitStack() as stack:
        env = _profile_env(tmp_path, stack.enter_context(fresh_database(postgres_url, "instance")), landing)
        warehouse = stack.enter_context(fresh_database(postgres_url, "backfill"))
        telemetry = str(tmp_path / "backfill_telemetry")
        env.update(GPU_HEALTH_WAREHOUSE_URL=warehouse, GPU_HEALTH_TELEMETRY_DIR=telemetry)
        workers = stack.enter_context(Workers(tmp_path / "backfill", env))
        subprocess.run([sys.executable, "-c", STOP_AUTOMATION], env=env, cwd=REPO, check=True, capture_output=True,
                       timeout=300)
        stack.enter_context(Daemon(env, tmp_path / "daemon.log"))
        summary = _orchestrate(env, extra=("--backfill", "--timeout", str(RUN_TIMEOUT_S)))
        assert summary["status"] == "COMPLETED_SUCCESS" and set(summary["runs_by_status"]) == {"SUCCESS"}, summary
        done = {i: _log_tasks(workers.log(i))[1] for i in (1, 2)}
        assert all(done.values()), f"both workers ran steps: {summary}"
        print(f"backfill: {summary['runs']} runs, at most {summary['max_runs_at_once']} at once, steps per worker "
              f"{ {i: len(d) for i, d in done.items()} }, {summary['seconds']:.0f} s")
        _assert_same(warehouse_tables(warehouse, telemetry), reference, "backfill")


@pytest.mark.parametrize("path", ["deploy/dagster_distributed.yaml", "deploy/k8s/dagster.yaml"])
def test_the_distributed_instance_configs_pass_dagsters_schema(path, tmp_path):
    """Both instance files load under Dagster's instance schema (the Kubernetes launcher's own fields are
    dagster-k8s', not installed: only their shape is checked), with the queue's limits per job and per range."""
    from dagster._core.instance.config import dagster_instance_config

    (tmp_path / "dagster.yaml").write_text((REPO / path).read_text())
    config, _ = dagster_instance_config(str(tmp_path))
    limits = config["run_coordinator"]["config"]["tag_concurrency_limits"]
    assert {"gpu_health/job", "dagster/partition", "dagster/asset_partition_range_start"} <= {x["key"] for x in limits}
    assert "postgres" in config["storage"]


def test_the_executor_is_in_process_unless_the_profile_asks_for_celery(monkeypatch):
    from gpu_health.defs.build import build_definitions
    from gpu_health.defs.jobs import JOB_TAG
    from gpu_health.settings import Settings

    monkeypatch.delenv("GPU_HEALTH_EXECUTOR", raising=False)
    default = build_definitions(Settings.from_env()).resolve_job_def("five_minute_job")
    assert default.executor_def.name == "in_process" and default.tags[JOB_TAG] == "five_minute_job"
    monkeypatch.setenv("GPU_HEALTH_EXECUTOR", "celery")
    assert build_definitions(Settings.from_env()).resolve_job_def("daily_job").executor_def.name == "gpu_health_celery"
    monkeypatch.setenv("GPU_HEALTH_EXECUTOR", "dask")
    with pytest.raises(ValueError, match="GPU_HEALTH_EXECUTOR"):
        Settings.from_env()
