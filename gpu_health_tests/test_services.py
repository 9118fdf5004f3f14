"""The session fixtures' shared body (gpu_health_tests.services.serve_for_session): the URL while the tests run,
the server stopped afterwards, a failed start a failure of the tests (never a skip)."""

import pytest

from gpu_health_tests.services import serve_for_session


class StartError(RuntimeError):
    pass


def test_the_server_is_yielded_then_stopped():
    stopped = []

    def start(base_dir: str):
        return f"http://127.0.0.1:1/{base_dir}", lambda: stopped.append(True)

    body = serve_for_session(start, StartError)
    assert next(body).startswith("http://127.0.0.1:1/")
    assert not stopped
    body.close()  # the session ends
    assert stopped == [True]


def test_a_failed_start_fails_with_its_message_and_does_not_skip():
    def start(base_dir: str):
        raise StartError("postgres exited: the log's tail")

    with pytest.raises(pytest.fail.Exception, match="the log's tail"):
        next(serve_for_session(start, StartError))
