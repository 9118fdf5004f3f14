"""Helpers of the browser test (test_browser.py): ``make dev`` started in a folder of its own, and Debian's headless
Chromium driven by selenium.

``start_dev`` runs ``scripts/dev.sh`` (what ``make dev`` runs) from a checkout made of symbolic links to this
repository's top-level entries, every one but ``var/``: the script works from its checkout's root, so its
``var/`` (the Dagster instance, the warehouse, Alertmanager, the webhook's log) is the test's own, in a temporary
folder, and the repository's own ``var/`` is never touched. The script and everything it starts (Alertmanager, the
webhook, the backfill, ``dagster dev`` with its webserver, daemon, code server and runs) run in a session of
their own, stopped as a process group.

``chrome`` starts Chromium through its chromium-driver, both from Debian, by path: selenium-manager never looks
for (or downloads) a browser or a driver. A missing package fails the test: ``scripts/setup.sh`` installs both.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pytest

from gpu_health.polling import poll

REPO = Path(__file__).resolve().parents[1]
CHROMIUM, CHROMEDRIVER = Path("/usr/bin/chromium"), Path("/usr/bin/chromedriver")
STOP_WAIT_S = 45.0  # dagster dev stops its webserver, daemon and code server in turn before it exits


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def checkout(root: Path) -> Path:
    """``root``/checkout: a symbolic link to each of the repository's top-level entries but ``var/`` and
    ``.git``."""
    out = root / "checkout"
    out.mkdir()
    for entry in REPO.iterdir():
        if entry.name not in ("var", ".git"):
            (out / entry.name).symlink_to(entry)
    return out


@dataclass
class Dev:
    """A running ``make dev``: its UI, its checkout (``var/`` under it), its log, when it started, and what the
    test set it to (``start``: the first partition; ``region``: the scenario incident's)."""

    ui: str
    root: Path
    log: Path
    proc: subprocess.Popen
    started_at: pd.Timestamp
    start: pd.Timestamp | None = None
    region: str | None = None

    @property
    def var(self) -> Path:
        return self.root / "var"

    def log_tail(self, lines: int = 40) -> str:
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        kept = [line for line in text.splitlines() if "Warning" not in line]
        return "\n".join(kept[-lines:])

    def alive(self) -> None:
        """Fail the test with the log's tail when ``scripts/dev.sh`` has exited."""
        if self.proc.poll() is not None:
            pytest.fail(f"scripts/dev.sh exited with {self.proc.returncode}:\n{self.log_tail()}", pytrace=False)

    def stop(self) -> None:
        """TERM to the session's process group (what Ctrl-C's INT does for a user), KILL after ``STOP_WAIT_S``."""
        for sig, wait_s in ((signal.SIGTERM, STOP_WAIT_S), (signal.SIGKILL, 10.0)):
            try:
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:
                return
            deadline = time.monotonic() + wait_s
            while time.monotonic() < deadline:
                self.proc.poll()
                try:
                    os.killpg(self.proc.pid, 0)  # anyone left in the group?
                except ProcessLookupError:
                    return
                time.sleep(0.5)


def start_dev(root: Path, env_extra: dict[str, str], **facts) -> Dev:
    """``scripts/dev.sh`` from a checkout under ``root``, on a free port, with the caller's settings; the
    environment's own ``GPU_HEALTH_*`` and ``DAGSTER_*`` settings are left out (they would point elsewhere)."""
    tree = checkout(root)
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GPU_HEALTH_", "DAGSTER_"))}
    env.update(PYTHONPATH=str(REPO), GPU_HEALTH_SKIP_SETUP="1", HOST="127.0.0.1", PORT=str(port), **env_extra)
    log = root / "dev.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(["bash", str(tree / "scripts" / "dev.sh")], cwd=tree, env=env, stdout=out,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
    return Dev(f"http://127.0.0.1:{port}", tree, log, proc, pd.Timestamp.now(tz="UTC"), **facts)


def wait_for(what: str, probe, dev: Dev, timeout_s: float, every_s: float = 2.0):
    """``probe()``'s first answer that is not None (a server not answering yet counts as None), polled until
    ``timeout_s``; fails with ``what`` and the log's tail (a bounded wait, not a timing assertion)."""
    try:
        return poll(what, probe, timeout_s, every_s, check=dev.alive)
    except TimeoutError as exc:
        pytest.fail(f"{exc}\n{dev.log_tail()}", pytrace=False)


def chrome(download_dir: Path):
    """Headless Chromium (Debian's) through chromium-driver, both by path."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    for binary in (CHROMIUM, CHROMEDRIVER):
        if not binary.exists():
            pytest.fail(f"{binary} is missing: apt-get install -y --no-install-recommends chromium chromium-driver "
                        f"(scripts/setup.sh does)", pytrace=False)
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                "--window-size=1600,1200", f"--user-data-dir={download_dir / 'chromium-profile'}"):
        options.add_argument(arg)
    return webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
