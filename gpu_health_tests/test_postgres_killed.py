"""PostgreSQL killed mid-run (SIGKILL to the postmaster), then restarted: the run converges to the clean result.

A private server of the suite's kind (``services.postgres.start_postgres``: the session server is shared by
other tests, and this one is killed). The pipeline runs a 30-minute range of a small simulated cluster with
a thermal incident as one single-run range (``gpu-health run``); the postmaster is killed inside a step's
write transaction, and every warehouse table is then compared with a clean run of the same range on the
same server: the same rows. Each database's runs and reads happen in a folder of their own (cwd), so a
warehouse that keeps files beside its database URL's default location (``var/...``) never shares them.

* retried: the server comes back 2 s after the kill, while the step waits for its retry
  (TRANSIENT_RETRY), and the same run finishes (killed inside the loss tree's, the KPIs' and the alerts' writes);
* re-run: the server stays down past the retries, so the run fails; the loss tree's five tables are then
  all as before the step (none half written), and a re-run of the range after the restart converges.
"""

import contextlib
import os
import signal
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import dagster as dg
import pandas as pd
import psycopg2
import pytest
import sqlalchemy as sa
import yaml

from gpu_health.defs import retry
from gpu_health.storage.schema import metadata
from gpu_health.storage.warehouse import Warehouse, engine_for
from gpu_health_tests.services.postgres import _as_server_user, _bindir, start_postgres

START, END = "2026-11-03T11:30:00Z", "2026-11-03T12:00:00Z"
GPU_MINUTES = 112 * 30  # gpus: 96 rescales node counts to whole nodes: 112 GPUs report, 30 minutes
LOSS_TREE = ["goodput_leaves", "goodput_states", "goodput_node_states", "job_failures", "cluster_goodput"]
RESTART_TIMEOUT_S = 60  # a killed cluster's shared memory and lock file may take a moment to free


def _parent_of(pid: int) -> int | None:
    """The parent pid of ``pid`` (/proc/PID/stat's fourth field; the name in parentheses may hold spaces), or None
    when it has exited."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[1])


class Server:
    """The private server: its URL, and kill / restart of its postmaster."""

    def __init__(self, url: str):
        self.url = url
        u = sa.make_url(url)
        self.port = u.port
        with psycopg2.connect(host=u.host, port=u.port, user=u.username, dbname="postgres") as conn:
            with conn.cursor() as cur:
                cur.execute("SHOW data_directory")
                self.data = Path(cur.fetchone()[0])
        conn.close()
        self.kills = 0

    def kill(self) -> None:
        """SIGKILL the postmaster and its backends (no shutdown, no checkpoint: a crash of the host). The postmaster
        alone is not enough: a backend orphaned in the middle of a client's transaction notices its parent gone only
        at its next wait, and may still run the client's next statement and its COMMIT -- the write the test means
        to cut would land."""
        pid = int((self.data / "postmaster.pid").read_text().splitlines()[0])
        children = [int(d) for d in os.listdir("/proc") if d.isdigit() and _parent_of(int(d)) == pid]
        os.kill(pid, signal.SIGKILL)
        for child in children:
            with contextlib.suppress(ProcessLookupError):
                os.kill(child, signal.SIGKILL)
        self.kills += 1

    def restart(self) -> None:
        """Start the same cluster on the same port (crash recovery replays the WAL)."""
        options = f"-c listen_addresses=127.0.0.1 -p {self.port} -k {self.data.parent} -c fsync=off"
        cmd = [*_as_server_user(), str(_bindir() / "pg_ctl"), "-D", str(self.data), "-l",
               str(self.data.parent / "log"), "-w", "-o", options, "start"]
        deadline = time.monotonic() + RESTART_TIMEOUT_S
        while True:
            proc = subprocess.run(cmd, capture_output=True, text=True)
            if proc.returncode == 0:
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"restart failed: {proc.stdout}{proc.stderr}")
            time.sleep(0.5)

    def database(self, name: str) -> str:
        admin = sa.create_engine(self.url, isolation_level="AUTOCOMMIT")
        with admin.connect() as conn:
            conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
        admin.dispose()
        return sa.make_url(self.url).set(database=name).render_as_string(hide_password=False)


@pytest.fixture(scope="module")
def server():
    url, stop = start_postgres(tempfile.gettempdir())
    try:
        yield Server(url)
    finally:
        stop()


@pytest.fixture(scope="module")
def scenario(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("scenario") / "small.yaml"
    path.write_text(yaml.safe_dump({
        "seed": 5, "start": START, "end": END, "cluster": {"gpus": 96},
        "incidents": [{"kind": "thermal_throttle", "start": "2026-11-03T11:37:00Z", "duration": "15m",
                       "severity": "high", "scope": {"region": "us-east", "nodes": 1}, "magnitude": 0.38}]}))
    return str(path)


def _tables(url: str) -> dict[str, pd.DataFrame]:
    """Every table of the warehouse, rows sorted (read from the database, not this process's cache)."""
    wh = Warehouse(url)
    out = {}
    for name in sorted(metadata.tables):
        frame = wh.read_window(name)
        out[name] = frame.sort_values(list(frame.columns)).reset_index(drop=True) if len(frame) else frame
    return out


@pytest.fixture(scope="module")
def clean(server, scenario, tmp_path_factory):
    from gpu_health.cli import run

    url = server.database("clean")
    with contextlib.chdir(tmp_path_factory.mktemp("clean")):
        run(START, END, scenario=scenario, warehouse=url, quiet=True)
        tables = _tables(url)
    engine_for(url).dispose()
    return tables


def _assert_same(url: str, clean: dict) -> None:
    got = _tables(url)
    assert sorted(got) == sorted(clean)
    for name, frame in clean.items():
        pd.testing.assert_frame_equal(got[name], frame, obj=name)
    assert len(clean["alerts"]) and len(clean["gpu_telemetry"]) == GPU_MINUTES  # the comparison is not vacuous


def _kill_inside(monkeypatch, server, table: str, then=None) -> list:
    """SIGKILL the postmaster the first time ``table`` is about to be inserted (inside its write transaction,
    after the tables written before it in the same transaction); ``then()`` runs in a thread after the kill.
    Returns the list of insert attempts into ``table``."""
    real, calls = Warehouse._insert, []

    def insert(self, conn, tbl, frame):
        if tbl.name == table:
            calls.append(tbl.name)
            if len(calls) == 1:
                server.kill()
                if then is not None:
                    threading.Thread(target=then, daemon=True).start()
        return real(self, conn, tbl, frame)

    monkeypatch.setattr(Warehouse, "_insert", insert)
    return calls


@pytest.mark.parametrize("table", [
    "goodput_states",       # inside the loss tree's transaction (cluster_goodput written, the two columnar staged)
    "kpi_values",           # the IO manager's write of a one-table step
    "alerts",               # the alerts step's own write
])
def test_killed_mid_write_the_step_retries_and_converges(server, scenario, clean, monkeypatch, table, tmp_path):
    from gpu_health.cli import run

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(retry, "TRANSIENT_RETRY", dg.RetryPolicy(max_retries=3, delay=2, backoff=dg.Backoff.EXPONENTIAL))
    url = server.database(f"retried_{table}")

    def back_in_2s():
        time.sleep(2)
        server.restart()

    kills = server.kills
    attempts = _kill_inside(monkeypatch, server, table, then=back_in_2s)
    try:
        summary = run(START, END, scenario=scenario, warehouse=url, quiet=True)
        assert summary["partitions"] == 6 and server.kills == kills + 1
        assert len(attempts) >= 2  # the write into the killed server failed; a retry of the step wrote it
        _assert_same(url, clean)
    finally:
        engine_for(url).dispose()


def test_killed_past_the_retries_leaves_no_half_step_and_a_rerun_converges(server, scenario, clean, monkeypatch,
                                                                          tmp_path):
    from gpu_health.cli import run

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(retry, "TRANSIENT_RETRY", dg.RetryPolicy(max_retries=0))
    url = server.database("rerun")
    attempts = _kill_inside(monkeypatch, server, "goodput_states")
    try:
        with pytest.raises(RuntimeError, match="goodput"):
            run(START, END, scenario=scenario, warehouse=url, quiet=True)
        assert attempts == ["goodput_states"]
        server.restart()
        after = _tables(url)
        # cluster_goodput went into the killed transaction before goodput_states, and goodput_leaves and
        # goodput_node_states (columnar) were staged for it, published only at its commit: none stayed
        assert all(after[t].empty for t in LOSS_TREE), {t: len(after[t]) for t in LOSS_TREE}
        assert len(after["gpu_telemetry"]) == GPU_MINUTES  # the steps before it had committed
        run(START, END, scenario=scenario, warehouse=url, quiet=True)  # the sensor's re-request, or an operator
        _assert_same(url, clean)
    finally:
        engine_for(url).dispose()
