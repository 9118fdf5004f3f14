"""Bounded waits for a server: the one polling loop the dev backfill, the Prometheus and Alertmanager processes the
evaluation and the tests start, and the browser test share."""

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
