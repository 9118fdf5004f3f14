"""The 5-minute sensor in the field: a landing file that never arrives, a source that stops writing.

Three simulated days of ticks through the pure planner with a real ``LandingSource`` whose files are an
in-memory map (the file system would make 864 ticks slow; the source's own judgement -- late, absent, a
file's token -- is what runs); the same through Dagster's sensor over real files; and a range run over a
landing zone with a missing file, which must land the partition with a ``source_gaps`` row.
"""

import json

import pandas as pd
import pytest

from gpu_health.contracts import FIVE_MINUTE_SOURCES
from gpu_health.steps.readiness import ABSENT_MARK, SensorCursor, plan_requests
from gpu_health.sources import landing as landing_module
from gpu_health.sources.landing import LandingSource
from gpu_health.storage.warehouse import Warehouse
from gpu_health_tests.conftest import LANDING_END, LANDING_START
from gpu_health_tests.test_sensor import FIVE, T0, at, evaluate, key, land, landing, sensor_and_resources  # noqa: F401

LOOKBACK = pd.Timedelta(hours=24)
ABSENT_AFTER = pd.Timedelta(minutes=10)  # LandingSource's default (sources.base.DEFAULT_ABSENT_AFTER)
PLAN = {"partitions_start": T0, "grace": pd.Timedelta(seconds=60), "lookback": LOOKBACK,
        "initial_lookback": pd.Timedelta(minutes=60), "max_requests": 48}
DAYS = 3
HOLE = T0 + pd.Timedelta(hours=6)                 # its gpu_telemetry file never arrives
STOPS = T0 + pd.Timedelta(hours=36)               # network_telemetry is not written from here on
LATE = T0 + pd.Timedelta(hours=30)                # its node_telemetry file arrives 3 hours late
LATE_BY = pd.Timedelta(hours=3)


def arrives(table: str, start: pd.Timestamp) -> pd.Timestamp | None:
    """When the file of ``table`` for the partition at ``start`` lands (None: never)."""
    if (table == "gpu_telemetry" and start == HOLE) or (table == "network_telemetry" and start >= STOPS):
        return None
    on_time = start + FIVE + pd.Timedelta(seconds=90)  # a producer writing its file 90 s after the partition
    return on_time + LATE_BY if (table == "node_telemetry" and start == LATE) else on_time


def test_three_days_with_a_hole_and_a_silent_source_every_partition_runs_once_per_version(monkeypatch):
    landed: dict[tuple[str, pd.Timestamp], str] = {}
    # the source's view of the landing zone: a file's token once it has landed
    monkeypatch.setattr(landing_module, "file_version", lambda root, table, start=None: landed.get((table, start)))
    source = LandingSource("unused", absent_after=ABSENT_AFTER)
    pending = sorted((arrives(t, s), t, s) for s in pd.date_range(T0, T0 + pd.Timedelta(days=DAYS), freq="5min")
                     for t in FIVE_MINUTE_SOURCES if arrives(t, s) is not None)
    requested: dict[str, list[tuple[str, pd.Timestamp]]] = {}  # partition -> [(version, tick)]
    run_keys: list[str] = []
    waits: dict[pd.Timestamp, dict] = {}
    cursor = None
    now = T0 + pd.Timedelta(seconds=150)
    end = T0 + pd.Timedelta(days=DAYS)
    i = 0
    while now < end:
        while i < len(pending) and pending[i][0] <= now:
            _, table, start = pending[i]
            landed[(table, start)] = f"{start.value}:{table}:1"  # a token per file, as mtime:size is
            i += 1
        requests, cursor = plan_requests(source, SensorCursor.loads(cursor), now=now, **PLAN)
        assert len(requests) <= PLAN["max_requests"]
        for r in requests:
            requested.setdefault(r.partition_key, []).append((r.version, now))
            run_keys.append(r.run_key)
        cursor = cursor.dumps()
        state = json.loads(cursor)
        assert len(state["versions"]) <= LOOKBACK / FIVE + 1, "the records are bounded by count"
        if state.get("waiting"):
            waits[now] = state["waiting"]
        now += FIVE

    assert len(run_keys) == len(set(run_keys)), "a run key Dagster would drop as a duplicate was requested"
    checked = 0
    for start in pd.date_range(T0, end, freq="5min"):
        runs = requested.get(key((start - T0) / pd.Timedelta(minutes=1)), [])
        versions = [v for v, _ in runs]
        assert len(versions) == len(set(versions)), f"{start}: the same data requested twice"
        decided = start + FIVE + (ABSENT_AFTER if start in (HOLE, LATE) or start >= STOPS else pd.Timedelta(seconds=90))
        if decided + 2 * FIVE >= end:
            break  # decided too close to the last tick to be sure of
        checked += 1
        assert runs and decided <= runs[0][1] <= decided + 2 * FIVE, f"{start} requested late or never: {runs}"
        if start == HOLE or start >= STOPS:
            assert len(runs) == 1 and ABSENT_MARK in runs[0][0], f"{start}: once, as missing data: {runs}"
        elif start == LATE:
            assert len(runs) == 2, f"{start}: as missing data, then again when its file arrived: {runs}"
            assert ABSENT_MARK in runs[0][0] and ABSENT_MARK not in runs[1][0]
            assert start + FIVE + LATE_BY <= runs[1][1] <= start + FIVE + LATE_BY + 2 * FIVE
        else:
            assert len(runs) == 1 and ABSENT_MARK not in runs[0][0], f"{start}: {runs}"
    assert checked > DAYS * 288 - 12, "all but the last hour's partitions were checked"
    # while the hole was late, the cursor named it, its file and until when it waited
    hole_waits = [w for t, w in waits.items() if HOLE + FIVE < t < HOLE + FIVE + ABSENT_AFTER]
    assert hole_waits and all(w["partition"] == key((HOLE - T0) / pd.Timedelta(minutes=1)) for w in hole_waits)
    assert all(w["sources"] == ["gpu_telemetry"] and w["until"] == (HOLE + FIVE + ABSENT_AFTER).isoformat()
               and w["files"][0].endswith("gpu_telemetry/2026-11-03/2000.parquet") for w in hole_waits)


def test_a_partition_that_once_ran_with_a_file_is_not_run_again_when_the_file_goes(tmp_path):
    """A landing zone's retention removing an old file must not re-run its partition empty."""
    root = tmp_path / "landing"
    land(root, at(0))
    clock = {"now": at(7)}
    source = LandingSource(root, clock=lambda: clock["now"])
    first, cursor = plan_requests(source, SensorCursor(), now=at(7), **PLAN)
    assert [r.partition_key for r in first] == [key(0)]
    (root / "gpu_telemetry" / "2026-11-03" / "1400.parquet").unlink()
    later, _ = plan_requests(source, cursor, now=at(60), **PLAN)
    assert key(0) not in [r.partition_key for r in later]


def test_dagster_sensor_runs_a_hole_after_the_absence_timeout_and_says_what_it_waits_for(landing, sensor_and_resources):
    sensor, resources, defs = sensor_and_resources
    land(landing, at(0))
    land(landing, at(5), [t for t in FIVE_MINUTE_SOURCES if t != "gpu_telemetry"])  # its gpu file is late
    land(landing, at(10))
    first = evaluate(sensor, resources, None, now=at(16.5), defs=defs)
    assert [r.partition_key for r in first.run_requests] == [key(0), key(10)]
    waiting = json.loads(first.cursor).get("waiting") or {}
    assert waiting.get("partition") == key(5) and waiting["sources"] == ["gpu_telemetry"]
    assert waiting["until"] == at(20).isoformat()
    idle = evaluate(sensor, resources, first.cursor, now=at(18), defs=defs)
    assert not idle.run_requests
    assert "gpu_telemetry/2026-11-03/1405.parquet" in idle.skip_message and at(20).isoformat() in idle.skip_message

    gap = evaluate(sensor, resources, idle.cursor, now=at(20.5), defs=defs)  # 10 min past its end: missing data
    assert [r.partition_key for r in gap.run_requests] == [key(5)]
    assert ABSENT_MARK in gap.run_requests[0].tags["gpu_health/data_version"]
    assert SensorCursor.loads(gap.cursor).next_start == at(15)

    land(landing, at(5), ["gpu_telemetry"])  # the file arrives after all: the partition runs again with it
    late = evaluate(sensor, resources, gap.cursor, now=at(22), defs=defs)
    assert [r.partition_key for r in late.run_requests] == [key(5)]
    assert late.run_requests[0].run_key != gap.run_requests[0].run_key
    assert ABSENT_MARK not in late.run_requests[0].tags["gpu_health/data_version"]


@pytest.mark.parametrize("direct", [True, False], ids=["bulk", "dagster"])
def test_a_historical_partition_missing_a_file_lands_with_a_source_gap(copy_landing, tmp_path, direct):
    from gpu_health.cli import run

    landing = copy_landing()
    hole = LANDING_START + pd.Timedelta(minutes=10)
    (landing / "network_telemetry" / f"{hole:%Y-%m-%d}" / f"{hole:%H%M}.parquet").unlink()
    url = f"sqlite:///{tmp_path / 'wh.db'}"
    run(LANDING_START.isoformat(), LANDING_END.isoformat(), landing=str(landing), warehouse=url, quiet=True,
        direct=direct, partition_start=LANDING_START.strftime("%Y-%m-%d-%H:%M"))
    wh = Warehouse(url)
    gaps = wh.read_window("source_gaps")
    assert list(zip(gaps["source"], pd.to_datetime(gaps["partition_start"], utc=True))) == [("network_telemetry", hole)]
    assert "network_telemetry" in gaps["origin"].iloc[0] and "absent" in gaps["origin"].iloc[0]
    network = wh.read_window("network_telemetry", LANDING_START, LANDING_END)
    seen = set(pd.to_datetime(network["ts"], utc=True).dt.floor("5min"))
    assert hole not in seen and len(seen) == 5, "the other partitions of the table land"
    assert len(wh.read_window("gpu_telemetry", hole, hole + FIVE)), "the partition's other tables land"
    alerts = wh.read_window("alerts")
    silent = alerts[alerts["summary"].str.contains("silent: network_telemetry", regex=False)]
    assert len(silent) and set(silent["severity"]) == {"ticket"}, "the gap is ticketed, never paged"
    assert set(silent["cause_family"]) == {"missing_data"}


def test_a_source_without_an_absence_rule_never_starves_the_cursor():
    """A partition its source never decides is passed over (and reported) once the records could no longer cover
    the partitions after it; no partition after it is requested twice."""

    class Undecided:  # every file arrives on time, but the hole's gpu_telemetry never does, and is never judged absent
        def version(self, table, start, now=None):
            return None if (table == "gpu_telemetry" and start == at(10)) else "f"

    hour = {**PLAN, "lookback": pd.Timedelta(hours=1)}
    cursor, seen, report = SensorCursor(), [], None
    for minute in range(7, 4 * 60, 5):
        requests, cursor = plan_requests(Undecided(), cursor, now=at(minute + 0.5), **hour)
        seen += [r.run_key for r in requests]
        report = cursor.passed_over or report
    assert len(seen) == len(set(seen))
    assert sorted(k.split("@")[0] for k in seen) == [key(m) for m in range(0, 4 * 60 - 5, 5) if m != 10]
    assert report["partition"] == key(10) and report["sources"] == ["gpu_telemetry"]
    assert cursor.next_start == at(4 * 60 - 5)
