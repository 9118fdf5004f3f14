"""A real Prometheus for tests: backfill OpenMetrics with promtool, serve it on loopback.

``prometheus_factory`` (function-scoped fixture) returns ``start(openmetrics)``
which backfills one or more OpenMetrics files into a fresh TSDB, starts
``prometheus`` on ``127.0.0.1:<free port>`` with a configuration that scrapes
nothing, waits for ``/-/ready`` and returns the base URL. Every server is
stopped at teardown. A missing ``prometheus`` or ``promtool`` FAILS the test
(CI installs them: ``apt-get install prometheus``); nothing is skipped.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest
import requests

from gpu_health.promexport import backfill

READY_WAIT_S = 60.0  # an upper bound on waiting, not a timing assertion
MINIMAL_CONFIG = "global:\n  scrape_interval: 1m\n  evaluation_interval: 1m\n"


def require_binary(name: str) -> str:
    """Path of ``name``, or fail the test with how to install it."""
    path = shutil.which(name)
    if path is None:
        pytest.fail(f"{name!r} is not installed: the Prometheus integration tests need it (apt-get install -y --no-install-recommends prometheus)")
    return path


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PrometheusServer:
    """One ``prometheus`` process over a data directory, bound to loopback."""

    def __init__(self, data_dir: Path, workdir: Path):
        self.data_dir = data_dir
        self.workdir = workdir
        self.proc: subprocess.Popen | None = None
        self.url = ""
        self.log_path = workdir / "prometheus.log"

    def start(self) -> str:
        exe = require_binary("prometheus")
        config = self.workdir / "prometheus.yml"
        config.write_text(MINIMAL_CONFIG)
        for _ in range(3):  # the free port may be taken between probe and bind
            port = free_port()
            self.url = f"http://127.0.0.1:{port}"
            log = open(self.log_path, "wb")
            self.proc = subprocess.Popen(
                [
                    exe,
                    f"--config.file={config}",
                    f"--storage.tsdb.path={self.data_dir}",
                    "--storage.tsdb.retention.time=100y",
                    f"--web.listen-address=127.0.0.1:{port}",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.workdir,
            )
            log.close()
            if self._wait_ready():
                return self.url
            self.stop()
        pytest.fail(f"prometheus did not become ready; log:\n{self.log_tail()}")

    def _wait_ready(self) -> bool:
        deadline = time.monotonic() + READY_WAIT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return False
            try:
                if requests.get(f"{self.url}/-/ready", timeout=1).status_code == 200:
                    return True
            except requests.RequestException:
                pass
            time.sleep(0.05)
        return False

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None


@pytest.fixture
def prometheus_factory(tmp_path_factory) -> Iterator[Callable[[str | os.PathLike | Sequence], str]]:
    """``start(openmetrics_files) -> base URL`` of a Prometheus serving their samples."""
    servers: list[PrometheusServer] = []

    def start(openmetrics: str | os.PathLike | Sequence[str | os.PathLike]) -> str:
        require_binary("promtool")
        workdir = tmp_path_factory.mktemp("prometheus")
        data_dir = workdir / "data"
        backfill(openmetrics, data_dir, parallel=2)
        server = PrometheusServer(data_dir, workdir)
        servers.append(server)
        return server.start()

    yield start
    for server in servers:
        server.stop()
