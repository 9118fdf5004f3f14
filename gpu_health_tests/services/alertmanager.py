"""A throwaway Alertmanager (Debian ``prometheus-alertmanager`` 0.25) for tests.

Started as ``shared/design/stack-notes.md`` says: ``--web.listen-address`` on
127.0.0.1 and a free port, and ``--cluster.listen-address=`` (empty) so that
it does not gossip on every interface nor delay its shutdown. The fixture's
default configuration routes everything to a receiver without notifiers, so
nothing ever leaves the machine.

Use from tests::

    from gpu_health_tests.services.alertmanager import alertmanager_url  # noqa: F401

``start_alertmanager(base_dir, config_text)`` starts one with any
configuration (e.g. ``deploy/alertmanager.yml`` with its notifiers removed)
and returns ``(base_url, stop)``.

``GPU_HEALTH_ALERTMANAGER_BIN`` overrides the binary (default: the first of
``prometheus-alertmanager``, ``alertmanager`` on ``PATH``). A missing binary
fails the tests, it never skips them: CI installs ``prometheus-alertmanager``.
"""

import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from gpu_health.polling import wait_ready
from gpu_health_tests.services import serve_for_session

ENV_BIN = "GPU_HEALTH_ALERTMANAGER_BIN"
READY_WAIT_S = 30.0  # upper bound for start-up, not an expectation (ready in ~0.1 s)
_START_ATTEMPTS = 3  # a free port can be taken between probing and binding

DEFAULT_CONFIG = """\
# Test configuration: group like deploy/alertmanager.yml, notify nobody.
route:
  receiver: blackhole
  group_by: [alertname, cause_family, region]
receivers:
  - name: blackhole
"""


class AlertmanagerStartError(RuntimeError):
    """The throwaway Alertmanager could not be started; the message says why."""


def alertmanager_binary() -> str:
    """Path of the Alertmanager binary, or ``AlertmanagerStartError``."""
    explicit = os.environ.get(ENV_BIN)
    candidates = [explicit] if explicit else ["prometheus-alertmanager", "alertmanager"]
    for name in candidates:
        found = shutil.which(name)
        if found:
            return found
    raise AlertmanagerStartError(
        f"Alertmanager binary not found (tried {candidates}). Install it (Debian 12: "
        "`apt-get install -y --no-install-recommends prometheus-alertmanager`) "
        f"or point {ENV_BIN} at it."
    )


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _log_tail(log: Path) -> str:
    if not log.exists():
        return ""
    return "\n".join(log.read_text(errors="replace").splitlines()[-30:])


def _stop_process(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _wait_ready(proc: subprocess.Popen, url: str, log: Path) -> bool:
    """True once ``/-/ready`` answers 200; False if the process exited first."""
    if wait_ready(proc, url, READY_WAIT_S):
        return True
    if proc.poll() is not None:
        return False
    _stop_process(proc)
    raise AlertmanagerStartError(
        f"Alertmanager at {url} not ready after {READY_WAIT_S:.0f} s\n{_log_tail(log)}"
    )


def start_alertmanager(
    base_dir: str | os.PathLike[str], config_text: str = DEFAULT_CONFIG, port: int | None = None
) -> tuple[str, Callable[[], None]]:
    """Start Alertmanager with ``config_text``; return ``(base_url, stop)``.

    ``port``: listen there (e.g. where a client already points, to bring an
    Alertmanager "back up"); default a free port.

    Config, storage and log go to a fresh directory under ``base_dir``.
    ``base_url`` is ``http://127.0.0.1:PORT`` (no trailing slash), returned
    once ``/-/ready`` answers. ``stop()`` terminates the process and removes
    the directory; it is idempotent.
    """
    binary = alertmanager_binary()
    root = Path(tempfile.mkdtemp(prefix="gh-am-", dir=base_dir))
    config, storage, log = root / "alertmanager.yml", root / "data", root / "log"
    config.write_text(config_text)
    storage.mkdir()

    fixed_port = port
    for attempt in range(1, _START_ATTEMPTS + 1):
        port = fixed_port or _free_port()
        url = f"http://127.0.0.1:{port}"
        with log.open("ab") as log_file:
            proc = subprocess.Popen(
                [
                    binary,
                    f"--config.file={config}",
                    f"--storage.path={storage}",
                    f"--web.listen-address=127.0.0.1:{port}",
                    "--cluster.listen-address=",
                ],
                stdout=log_file,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        try:
            ready = _wait_ready(proc, url, log)
        except BaseException:
            shutil.rmtree(root, ignore_errors=True)
            raise
        if ready:
            break
        tail = _log_tail(log)
        if attempt < _START_ATTEMPTS and "address already in use" in tail and not fixed_port:
            continue
        shutil.rmtree(root, ignore_errors=True)
        raise AlertmanagerStartError(
            f"Alertmanager exited with code {proc.returncode} before it was ready\n{tail}"
        )

    def stop() -> None:
        _stop_process(proc)
        shutil.rmtree(root, ignore_errors=True)

    return url, stop


@pytest.fixture(scope="session")
def alertmanager_url() -> Iterator[str]:
    """Base URL (``http://127.0.0.1:PORT``) of an Alertmanager for this session.

    Configured with ``DEFAULT_CONFIG`` (grouping as in production, no
    notifiers); terminated and removed at the end of the session. Alerts
    persist across tests: give each test its own ``alert_id`` labels.
    """
    yield from serve_for_session(start_alertmanager, AlertmanagerStartError)
