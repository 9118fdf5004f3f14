"""A correction re-derives what it changes: the later partitions that read it through a declared look-back.

The zone is the simulated 30 minutes (conftest ``landing_zone``). Its first partition's ``job_metadata`` file is
re-delivered with another team for its jobs (a late correction), after the whole zone ran; the partition is run
again, as the sensor runs a replaced partition. The jobs keep running in the later partitions, whose loss tree and
KPIs are judged with the team of the metadata they look back to.
"""

import pandas as pd
import pytest

from gpu_health.cli import run
from gpu_health.landing import partition_path, write_partition
from gpu_health.steps import diagnosis as D
from gpu_health.steps import rederive as R
from gpu_health.storage.warehouse import Warehouse
from gpu_health_tests.conftest import LANDING_END, LANDING_START

FIVE = pd.Timedelta(minutes=5)
FIXED = LANDING_START  # the corrected partition
TEAM = "corrected-team"
DERIVED = ["goodput_states", "goodput_leaves", "kpi_values", "alerts"]
FINANCE = ["cluster_goodput_daily", "wasted_spend"]


def _relabel(landing, ts: pd.Timestamp = FIXED, team: str = TEAM) -> None:
    """Re-deliver the partition's job_metadata file with ``team`` for every job in it."""
    frame = pd.read_parquet(partition_path(landing, "job_metadata", ts))
    write_partition(landing, "job_metadata", ts, frame.assign(team=team))


def _table(url: str, name: str, start=None) -> pd.DataFrame:
    frame = Warehouse(url).read_window(name, start, None)
    frame = frame.astype({c: str for c in frame.columns if frame[c].dtype == object})
    return frame.sort_values(list(frame.columns), kind="stable").reset_index(drop=True)


def _iso(ts: pd.Timestamp) -> str:
    return ts.isoformat()


@pytest.fixture(params=["direct", "dagster"])
def corrected(copy_landing, tmp_path, request):
    """(landing zone, warehouse run before the correction and re-run on the corrected partition alone, warehouse
    of a fresh run of the corrected zone, the re-run's summary), by the bulk path or through Dagster runs."""
    landing = copy_landing()
    url, fresh = f"sqlite:///{tmp_path / 'wh.db'}", f"sqlite:///{tmp_path / 'fresh.db'}"
    direct = request.param == "direct"
    run(_iso(LANDING_START), _iso(LANDING_END), landing=str(landing), warehouse=url, quiet=True, direct=direct)
    _relabel(landing)
    summary = run(_iso(FIXED), _iso(FIXED + FIVE), landing=str(landing), warehouse=url, quiet=True, direct=direct)
    run(_iso(LANDING_START), _iso(LANDING_END), landing=str(landing), warehouse=fresh, quiet=True, direct=True)
    return landing, url, fresh, summary


def test_a_corrected_partition_re_derives_the_later_partitions_as_a_fresh_run_does(corrected):
    _, url, fresh, summary = corrected
    later = FIXED + FIVE
    states = _table(url, "goodput_states", later)
    assert TEAM in set(states["team"]), "the later partitions carry the corrected team"
    for name in DERIVED:
        pd.testing.assert_frame_equal(_table(url, name, later), _table(fresh, name, later), check_dtype=False,
                                      check_exact=False, rtol=1e-9, obj=name)
    for name in FINANCE:  # the day's finance, already stored, re-derived from the corrected loss tree
        pd.testing.assert_frame_equal(_table(url, name), _table(fresh, name), check_dtype=False,
                                      check_exact=False, rtol=1e-9, obj=name)
    assert summary["rederived"] == {"from": _iso(later), "until": _iso(LANDING_END), "partitions": 5}
    assert "stale" not in summary


def test_partitions_past_the_bound_are_reported_stale_and_keep_their_rows(copy_landing, tmp_path, monkeypatch):
    landing = copy_landing()
    url = f"sqlite:///{tmp_path / 'wh.db'}"
    run(_iso(LANDING_START), _iso(LANDING_END), landing=str(landing), warehouse=url, quiet=True, direct=True)
    bound = pd.Timedelta(minutes=10)
    monkeypatch.setattr(D, "ALERT_LOOKAHEAD", bound)
    past = FIXED + FIVE + bound
    before = _table(url, "goodput_states", past)
    _relabel(landing)
    summary = run(_iso(FIXED), _iso(FIXED + FIVE), landing=str(landing), warehouse=url, quiet=True, direct=True)
    assert summary["rederived"] == {"from": _iso(FIXED + FIVE), "until": _iso(past), "partitions": 2}
    assert summary["stale"] == {"from": _iso(past), "until": _iso(LANDING_END), "partitions": 3}
    states = _table(url, "goodput_states")
    assert TEAM in set(states[states["partition_start"] < past]["team"])
    pd.testing.assert_frame_equal(_table(url, "goodput_states", past), before)  # past the bound: as they were


def test_the_plan_follows_the_stored_partitions_up_to_the_bound(copy_landing, tmp_path):
    landing = copy_landing()
    url = f"sqlite:///{tmp_path / 'wh.db'}"
    hole = LANDING_START + 4 * FIVE  # 14:20 never ran: the later partitions are not an unbroken run
    run(_iso(LANDING_START), _iso(hole), landing=str(landing), warehouse=url, quiet=True, direct=True)
    run(_iso(hole + FIVE), _iso(LANDING_END), landing=str(landing), warehouse=url, quiet=True, direct=True)
    wh = Warehouse(url)
    plan = R.plan(wh, FIXED + FIVE)
    assert (plan.start, plan.stop, plan.stale) == (FIXED + FIVE, hole, None)
    plan = R.plan(wh, FIXED + FIVE, bound=FIVE)
    assert (plan.stop, plan.stale) == (FIXED + 2 * FIVE, (FIXED + 2 * FIVE, hole))
    assert R.plan(wh, LANDING_END).stop == LANDING_END  # nothing after the zone: nothing to re-derive
    # why the whole bounded window is re-derived: inside it a partition may still read the corrected one
    assert R.reach() > R.default_bound()
