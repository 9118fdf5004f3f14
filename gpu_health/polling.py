"""Bounded waits for a server: the one polling loop the dev backfill, the browser test and the start-up of the
Prometheus and Alertmanager processes (the evaluation's and the tests') share."""

import subprocess
import time
from collections.abc import Callable
from typing import TypeVar

import requests

T = TypeVar("T")


def poll(what: str, probe: Callable[[], T | None], timeout_s: float, every_s: float, *,
         check: Callable[[], None] | None = None) -> T:
    """``probe()``'s first answer that is not None, asked every ``every_s`` until ``timeout_s`` has passed, then
    once more; a server not up yet (or too busy to answer: the connection refused or timed out) counts as None.

    ``check()`` runs before each probe and may raise to stop the wait early (the process serving it has died).
    Raises :class:`TimeoutError` naming ``what`` once the time is up.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        if check is not None:
            check()
        try:
            found = probe()
        except (requests.ConnectionError, requests.Timeout):
            found = None
        if found is not None:
            return found
        if time.monotonic() > deadline:
            raise TimeoutError(f"gave up after {timeout_s:.0f} s waiting for {what}")
        time.sleep(every_s)


def wait_ready(proc: subprocess.Popen, url: str, timeout_s: float) -> bool:
    """True once ``url``'s ``/-/ready`` answers 200 (the readiness endpoint of both Prometheus and Alertmanager);
    False when ``proc`` exited first or ``timeout_s`` passed: the caller stops it and says why, from its log."""

    def answer() -> bool | None:
        if proc.poll() is not None:
            return False
        try:
            return True if requests.get(f"{url}/-/ready", timeout=2).status_code == 200 else None
        except requests.RequestException:  # still starting: it may drop a connection it has accepted
            return None

    try:
        return poll(f"{url}/-/ready", answer, timeout_s, every_s=0.05)
    except TimeoutError:
        return False
