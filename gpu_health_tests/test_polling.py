"""The bounded wait for a server (gpu_health.polling.poll) that the dev backfill, the Prometheus process and the
test services share."""

import subprocess
import sys

import pytest
import requests

from gpu_health.polling import poll, wait_ready


def _answers(*answers):
    """A probe giving ``answers`` in turn; an exception among them is raised instead."""
    left = list(answers)

    def probe():
        answer = left.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        return answer

    return probe


def test_a_server_not_up_yet_counts_as_no_answer_and_the_first_answer_is_returned():
    probe = _answers(requests.ConnectionError("refused"), None, requests.Timeout("busy"), 0, "late")
    assert poll("the server", probe, timeout_s=60, every_s=0) == 0  # 0 is an answer; only None is not


def test_the_wait_is_bounded_and_names_what_it_waited_for():
    with pytest.raises(TimeoutError, match="waiting for the first tick"):
        poll("the first tick", lambda: None, timeout_s=0, every_s=0)


def test_an_error_that_is_not_a_server_not_up_yet_is_not_waited_out():
    with pytest.raises(requests.HTTPError):
        poll("the server", _answers(requests.HTTPError("500")), timeout_s=60, every_s=0)


def test_the_check_stops_the_wait_when_the_server_died():
    def died():
        raise RuntimeError("the server exited")

    probe = _answers("never asked")
    with pytest.raises(RuntimeError, match="exited"):
        poll("the server", probe, timeout_s=60, every_s=0, check=died)


@pytest.fixture
def ready_server():
    """A server whose ``/-/ready`` answers 200, as Prometheus's and Alertmanager's do once started."""
    import http.server
    import threading

    class Ready(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200 if self.path == "/-/ready" else 404)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Ready)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def _process(code: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", code])


def test_wait_ready_is_true_once_the_endpoint_answers_and_false_when_the_process_exited(ready_server):
    running = _process("import time; time.sleep(600)")
    try:
        assert wait_ready(running, ready_server, timeout_s=60) is True
    finally:
        running.kill()
        running.wait()
    exited = _process("pass")
    exited.wait()
    assert wait_ready(exited, ready_server, timeout_s=60) is False  # not waited for, even with a server there
