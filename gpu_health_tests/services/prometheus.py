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
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest

from gpu_health.evaluation.promexport import backfill
from gpu_health.evaluation.prometheus import PrometheusProcess


def require_binary(name: str) -> str:
    """Path of ``name``, or fail the test with how to install it."""
    path = shutil.which(name)
    if path is None:
        pytest.fail(f"{name!r} is not installed: the Prometheus integration tests need it (apt-get install -y --no-install-recommends prometheus)")
    return path


class PrometheusServer(PrometheusProcess):
    """The package's ``prometheus`` process over a data directory on loopback; a failed start fails the test."""

    def start(self) -> str:
        require_binary("prometheus")
        try:
            return super().start()
        except RuntimeError as err:
            pytest.fail(str(err))


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


def scrape_config(targets: Sequence[str], *, interval: str = "1s", rule_files: Sequence[str | os.PathLike] = ()) -> str:
    """prometheus.yml text scraping ``targets`` (host:port) every ``interval`` as job ``gpu_health``."""
    lines = ["global:", f"  scrape_interval: {interval}", f"  evaluation_interval: {interval}"]
    if rule_files:
        lines += ["rule_files:"] + [f"  - {Path(p)}" for p in rule_files]
    lines += ["scrape_configs:", "  - job_name: gpu_health", "    static_configs:",
              "      - targets: [" + ", ".join(f'"{t}"' for t in targets) + "]"]
    return "\n".join(lines) + "\n"


@pytest.fixture
def scraping_prometheus(tmp_path_factory) -> Iterator[Callable[..., str]]:
    """``start(targets, rule_files=()) -> base URL`` of a Prometheus scraping ``targets`` every second."""
    servers: list[PrometheusServer] = []

    def start(targets: Sequence[str], rule_files: Sequence[str | os.PathLike] = ()) -> str:
        workdir = tmp_path_factory.mktemp("prometheus-scrape")
        server = PrometheusServer(workdir / "data", workdir, config=scrape_config(targets, rule_files=rule_files))
        servers.append(server)
        return server.start()

    yield start
    for server in servers:
        server.stop()
