"""What the command line tells a user who gets something wrong, or waits: one line naming the flag and the value
(exit code 2, the traceback only with ``--debug``), help text on every flag, and a progress display that counts
partitions on a terminal and writes a line per piece into a log."""

import argparse
import io

import pandas as pd
import pytest
from rich.console import Console

from gpu_health.cli import Progress, _parser, main

SMOKE_QUIET = "scenarios/smoke/00_quiet.yaml"
RANGE = ["--start", "2026-11-02T00:00:00Z", "--end", "2026-11-02T00:05:00Z"]


def _one_line_usage_error(capsys, argv) -> str:
    code = main(argv)
    out, err = capsys.readouterr()
    assert code == 2 and not out, (code, out, err)
    assert err.count("\n") == 1 and err.startswith("error: ") and "Traceback" not in err, err
    return err


def test_a_landing_directory_that_does_not_exist_is_one_line(tmp_path, capsys):
    missing = tmp_path / "no-such-landing"
    err = _one_line_usage_error(capsys, ["run", *RANGE, "--landing", str(missing),
                                         "--warehouse", f"sqlite:///{tmp_path / 'w.db'}"])
    assert f"--landing '{missing}': no such directory" in err


@pytest.mark.parametrize("url, problem", [
    ("sqlte:/var/w.db", "is not a SQLAlchemy URL"),
    # a port nothing listens on: refused at once, before any run starts
    ("postgresql+psycopg2://gpu@127.0.0.1:9/gpu_health", "cannot connect: "),
    # SQLAlchemy 2.1 reads a bare postgresql:// as psycopg 3, which this install does not have
    ("postgresql://gpu@127.0.0.1:9/gpu_health", "its database driver is not installed"),
])
def test_a_warehouse_url_that_does_not_parse_or_connect_is_one_line(url, problem, tmp_path, capsys):
    err = _one_line_usage_error(capsys, ["run", *RANGE, "--scenario", SMOKE_QUIET, "--warehouse", url])
    assert f"--warehouse '{url}': {problem}" in err
    err = _one_line_usage_error(capsys, ["export", "alerts", *RANGE, "--out", str(tmp_path / "a.csv"),
                                         "--warehouse", url])
    assert f"--warehouse '{url}': {problem}" in err


def test_a_password_in_a_bad_warehouse_url_is_not_printed(capsys):
    err = _one_line_usage_error(capsys, ["run", *RANGE, "--scenario", SMOKE_QUIET,
                                         "--warehouse", "postgresql+psycopg2://gpu:s3cret@127.0.0.1:9/gpu_health"])
    assert "s3cret" not in err and "cannot connect" in err


@pytest.mark.parametrize("text, problem", [
    ("seed: [1, 2\n", "does not validate"),                       # not YAML
    ("seed: 1\nstart: '2026-11-02T00:00:00Z'\nincident: []\n", "unknown key(s) ['incident']"),
    ("- just\n- a list\n", "expected a mapping"),
])
def test_a_scenario_that_does_not_validate_is_one_line(text, problem, tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text(text)
    for argv in (["simulate", "--scenario", str(bad), "--landing", str(tmp_path / "zone")],
                 ["run", *RANGE, "--scenario", str(bad), "--warehouse", f"sqlite:///{tmp_path / 'w.db'}"]):
        err = _one_line_usage_error(capsys, argv)
        assert f"--scenario '{bad}': does not validate" in err and problem in err, err
    assert not (tmp_path / "zone").exists()  # refused before anything was written


def test_debug_shows_the_traceback(tmp_path):
    with pytest.raises(ValueError, match="no such directory"):
        main(["run", *RANGE, "--landing", str(tmp_path / "none"), "--debug"])


def _flags(parser: argparse.ArgumentParser, path=()):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _flags(sub, (*path, name))
        elif not isinstance(action, argparse._HelpAction):
            yield " ".join(path), "/".join(action.option_strings) or action.dest, action.help


def test_every_flag_explains_itself():
    silent = [(cmd, flag) for cmd, flag, text in _flags(_parser()) if not (text and text.strip())]
    assert not silent, silent
    times = [(cmd, flag) for cmd, flag, text in _flags(_parser()) if flag in ("--start", "--end")]
    assert times and all("ISO 8601" in text and "2026-11-02T00:00:00Z" in text
                         for cmd, flag, text in _flags(_parser()) if flag in ("--start", "--end"))
    assert "``" not in _parser().format_help()


def test_progress_counts_partitions_on_a_terminal_and_writes_lines_in_a_log(capsys):
    start, end = pd.Timestamp("2026-11-02T00:00:00Z"), pd.Timestamp("2026-11-03T00:00:00Z")
    pieces = [(start, start + pd.Timedelta(hours=8)), (start + pd.Timedelta(hours=8), end)]
    screen = io.StringIO()
    with Progress(start, end, "materialized", console=Console(file=screen, force_terminal=True, width=120)) as bar:
        for piece in pieces:
            bar(*piece)
    assert "288/288" in screen.getvalue() and "partitions" in screen.getvalue()
    assert capsys.readouterr().err == ""  # the bar went to its console, nothing else to stderr
    log = io.StringIO()
    with Progress(start, end, "materialized", console=Console(file=log, force_terminal=False)) as lines:
        for piece in pieces:
            lines(*piece)
    err = capsys.readouterr().err.splitlines()
    assert [line.split(" (")[0] for line in err] == ["materialized 2026-11-02 00:00 .. 2026-11-02 08:00",
                                                     "materialized 2026-11-02 08:00 .. 2026-11-03 00:00"]
    with Progress(start, end, "materialized", quiet=True, console=Console(file=screen, force_terminal=True)) as quiet:
        quiet(*pieces[0])
    assert capsys.readouterr().err == ""


def test_loading_the_code_location_writes_no_beta_warnings():
    """Every process of `make dev` that loads the code location (the code server, each run) would otherwise write
    one BetaWarning per asset into the log a user reads."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-W", "default", "-c", "import gpu_health.definitions"],
                          capture_output=True, text=True, timeout=300, check=True)
    assert "BetaWarning" not in done.stderr, done.stderr[:2000]
