"""A real ``prometheus`` serving a TSDB directory on 127.0.0.1: the engine of the static-rules peer.

The static-rules peer (:mod:`gpu_health.evaluation.static_rules`) backfills a
scenario's telemetry into a TSDB and replays the seeds' rules against this
process; the integration tests start the same class to test the Prometheus
source. It scrapes nothing and evaluates no rules (the replay queries the
rule expressions over history itself), binds a free port, and is stopped on
exit even when the caller fails.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
from pathlib import Path

from gpu_health.polling import wait_ready

# How long a cold Prometheus may take to replay its WAL and open a backfilled week of blocks before it is
# declared broken (seconds; a healthy one is ready in 1-3 s, a week of 2h blocks in tens of seconds on 2 cores).
READY_WAIT_S = 120.0
# Scrape nothing; the 1-minute interval matches the telemetry's sample spacing, so range queries at a 60 s step
# see one sample per step.
PROMETHEUS_CONFIG = "global:\n  scrape_interval: 1m\n  evaluation_interval: 1m\n"


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PrometheusProcess:
    """``prometheus`` serving ``data_dir`` on 127.0.0.1 (no scraping, no rules); a context manager."""

    def __init__(self, data_dir: Path, workdir: Path, binary: str = "prometheus", config: str | None = None):
        self.data_dir, self.workdir, self.binary = Path(data_dir), Path(workdir), binary
        self.config = config  # prometheus.yml text (default: scrape nothing)
        self.proc: subprocess.Popen | None = None
        self.url = ""
        self.log_path = self.workdir / "prometheus.log"

    def __enter__(self) -> "PrometheusProcess":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self) -> str:
        exe = shutil.which(self.binary)
        if exe is None:
            raise FileNotFoundError(f"{self.binary!r} not found: install Prometheus (apt-get install -y --no-install-recommends prometheus)")
        config = self.workdir / "prometheus.yml"
        config.write_text(self.config or PROMETHEUS_CONFIG)
        for _ in range(3):  # the probed port may be taken before prometheus binds it
            port = _free_port()
            self.url = f"http://127.0.0.1:{port}"
            with open(self.log_path, "wb") as logf:
                self.proc = subprocess.Popen(
                    [exe, f"--config.file={config}", f"--storage.tsdb.path={self.data_dir}",
                     "--storage.tsdb.retention.time=100y", f"--web.listen-address=127.0.0.1:{port}",
                     # min = max block duration: no background compaction of the backfilled blocks into
                     # larger ones (minutes of CPU at startup for a week, competing with the replay queries)
                     "--storage.tsdb.min-block-duration=2h", "--storage.tsdb.max-block-duration=2h"],
                    stdout=logf, stderr=subprocess.STDOUT, cwd=self.workdir)
            if wait_ready(self.proc, self.url, READY_WAIT_S):
                return self.url
            self.stop()
        raise RuntimeError(f"prometheus did not become ready; log:\n{self.log_tail()}")

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
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None
