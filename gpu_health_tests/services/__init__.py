"""Real services for the tests (PostgreSQL, Alertmanager, Prometheus) on loopback: a missing binary or a failed
start fails the tests, it never skips them."""

import tempfile
from collections.abc import Callable, Iterator

import pytest


def serve_for_session(start: Callable[[str], tuple[str, Callable[[], None]]],
                      start_error: type[Exception]) -> Iterator[str]:
    """The body of a session fixture: ``start(temp dir)``'s URL, yielded, and its ``stop()`` afterwards; a failed
    start (``start_error``) fails the tests with its message (it says why: the binary, the log's tail)."""
    try:
        url, stop = start(tempfile.gettempdir())
    except start_error as exc:
        pytest.fail(str(exc), pytrace=False)
    try:
        yield url
    finally:
        stop()
