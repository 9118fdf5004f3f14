"""The real-trace report: outages found in the traces' own files, a small real slice through the whole
pipeline (its figures checked against the warehouse), and the outage verdict computed from the alerts."""

import json
from pathlib import Path

import pandas as pd
import pytest

from gpu_health.steps.ingest import REJECT_SHARE_CHECK
from gpu_health.storage.warehouse import Warehouse
from gpu_health.traces import report as R
from gpu_health.traces.report import Outage, Placeholder, outage_verdict, render_markdown, run_report

REAL = Path(__file__).resolve().parent / "fixtures" / "real-data"  # excerpts: fixtures/real-data/README.md
T0 = pd.Timestamp("2024-05-23T16:00Z")
FIVE = pd.Timedelta(minutes=5)


# --- the known outages, from the traces' files -------------------------------------------------------

def test_philly_outage_is_the_fleet_gap_around_2017_10_26_in_utc():
    found = R.philly_outages(REAL)
    (gap,) = [o for o in found if o.start.date() == pd.Timestamp("2017-10-25").date()]
    # no row from 14:01 PDT on 10-25, 0 of 420 machines 00:00-18:00 PDT on 10-26, under half until 18:06 PDT
    # (the excerpt's liveness covers 2017-10-24 .. 2017-11-06 Pacific: this outage and the DST fold)
    assert (gap.start, gap.end) == (pd.Timestamp("2017-10-25T21:01Z"), pd.Timestamp("2017-10-27T01:06Z"))
    assert gap.source == "gpu_telemetry" and gap.region == "philly"
    assert "599 without a row" in gap.evidence and "1081 with 0 of the 420 machines" in gap.evidence
    # the DST fold's second hour has no row of its own: not an outage
    fold = pd.Timestamp("2017-11-05T09:00Z")
    assert not any(o.start <= fold < o.end for o in found)


def test_zhejiang_outage_is_the_silent_minutes_of_every_port():
    (gap,) = R.zhejiang_outages(REAL)
    assert (gap.start, gap.end) == (T0 + pd.Timedelta(minutes=1), T0 + pd.Timedelta(minutes=4))
    assert gap.source == "network_telemetry" and "48 ports" in gap.evidence  # the excerpt's 48 (of 2160)
    assert list(gap.partitions(T0, T0 + 6 * FIVE)) == [T0]


# --- the verdict, from hand-built alerts ---------------------------------------------------------------

def _alerts(rows):
    return pd.DataFrame([{"partition_start": p, "cause_family": fam, "detector": det, "severity": sev,
                          "status": status, "region": "r1"} for p, fam, det, sev, status in rows])


OUT = Outage("gap", "r1", "gpu_telemetry", T0 + FIVE, T0 + 3 * FIVE, "test")
WINDOW = (T0, T0 + 6 * FIVE)
NO_STATES = pd.DataFrame(columns=["partition_start", "region", "state", "gpu_minutes"])
ROWS = pd.Series({T0: 40, T0 + FIVE: 0, T0 + 2 * FIVE: 0, T0 + 3 * FIVE: 40, T0 + 4 * FIVE: 40, T0 + 5 * FIVE: 40})


def test_verdict_missing_data_over_the_whole_outage_and_nothing_else():
    a = _alerts([(T0 + FIVE, "missing_data", "missing_data", "ticket", "firing"),
                 (T0 + 2 * FIVE, "missing_data", "missing_data", "ticket", "firing"),
                 (T0 + 3 * FIVE, "missing_data", "missing_data", "ticket", "clearing")])
    v = outage_verdict(OUT, a, NO_STATES, ROWS, *WINDOW)
    assert v["verdict"] == "flagged as missing data, no GPU incident"
    assert (v["partitions"], v["missing_data_share"], v["missing_data_share_elsewhere"]) == (2, 1.0, 0.0)
    assert v["specific_to_outage"] is True
    assert (v["telemetry_rows_median"], v["telemetry_rows_median_elsewhere"]) == (0, 40)


def test_verdict_names_a_gpu_incident_raised_in_the_outage():
    a = _alerts([(T0 + FIVE, "missing_data", "missing_data", "ticket", "firing"),
                 (T0 + 2 * FIVE, "missing_data", "missing_data", "ticket", "firing"),
                 (T0 + 2 * FIVE, "hardware", "hardware_fault", "page", "firing")])
    v = outage_verdict(OUT, a, NO_STATES, ROWS, *WINDOW)
    assert v["verdict"] == "missing data flagged, but a GPU incident or page was raised too"
    assert v["gpu_alerts"] == ["hardware_fault"] and v["pages"] == ["hardware_fault"]


def test_verdict_not_flagged_and_not_specific():
    v = outage_verdict(OUT, _alerts([(T0 + 4 * FIVE, "hardware", "thermal_throttle", "page", "firing")]),
                       NO_STATES, ROWS, *WINDOW)
    assert v["verdict"] == "NOT flagged as missing data" and v["missing_data_share"] == 0.0
    assert v["specific_to_outage"] is None and v["pages"] == []  # the page lies outside the outage
    everywhere = _alerts([(p, "missing_data", "missing_data", "ticket", "firing")
                          for p in pd.date_range(*WINDOW, freq=FIVE, inclusive="left")])
    v = outage_verdict(OUT, everywhere, NO_STATES, ROWS, *WINDOW)
    assert v["missing_data_share"] == v["missing_data_share_elsewhere"] == 1.0 and v["specific_to_outage"] is False


DETECTORS_AND_STAGES = {"hardware_fault", "thermal_throttle", "data_io_slowdown", "network_slowdown",
                        "busy_no_progress", "step-time", "loss"}


def test_placeholder_feeds_name_real_series_or_detectors():
    from gpu_health.contracts import CONTRACTS, columns
    from gpu_health.metrics.kpi_catalog import CATALOG

    series = {s for k in CATALOG for s in k.series()}
    for trace, tables in R.PLACEHOLDERS.items():
        for table, cols in tables.items():
            for col, p in cols.items():
                assert col in columns(table), (trace, table, col)
                for fed in p.feeds:
                    assert fed in series or fed.split()[0] in DETECTORS_AND_STAGES, fed
    for source, feeds in R.ABSENT_SOURCE_FEEDS.items():
        assert source in CONTRACTS
        for fed in feeds:
            assert fed in series or fed.split()[0] in DETECTORS_AND_STAGES, fed


# --- a real slice through the whole pipeline ---------------------------------------------------------

@pytest.fixture(scope="module")
def zhejiang_slice(tmp_path_factory):
    """30 minutes of 20 Zhejiang server links, packet loss filled, port state left null where the trace has none."""
    work = tmp_path_factory.mktemp("zhejiang-report")
    fills = {"network_telemetry": {"packet_loss_pct": Placeholder(0.0, ("comm_health.packet_loss",))}}
    rep = run_report("zhejiang", T0, T0 + 6 * FIVE, data_dir=REAL, workdir=work, limit=20, placeholders=fills)
    return rep, Warehouse(f"sqlite:///{work / 'warehouse.db'}")


def test_report_rows_match_the_warehouse(zhejiang_slice):
    rep, wh = zhejiang_slice
    assert rep["pipeline"]["ok"], rep["pipeline"]
    net = "network_telemetry"
    rejects = wh.read_window("source_rejects")
    rows = rejects[rejects["row_index"] >= 0].drop_duplicates(["partition_start", "row_index"])
    assert rep["landed"][net] == 6 * 5 * 20 - 20 * 3  # 20 links x 30 minutes, minus the 3 silent minutes
    # the port-state gaps are over 5 % of the 16:00 partition's rows: it is quarantined whole, all its rows withheld
    (whole,) = rejects[rejects["check"] == REJECT_SHARE_CHECK].itertuples()
    assert whole.partition_start == T0
    assert rep["quarantined"][net] == json.loads(whole.row_json)["rows"] > len(rows) > 0
    assert rep["accepted"][net] == len(wh.read_window(net)) == rep["landed"][net] - rep["quarantined"][net]
    by_reason = rows.groupby("reason").size().to_dict()
    assert by_reason == {"null in required field link_up": len(rows)}
    assert rep["quarantined_by_reason"][net]["null in required field link_up"] == len(rows)
    # as the contract stands, every row lacks packet loss: all quarantined, every partition blocked
    stands = rep["contract_as_it_stands"][net]
    assert stands["quarantined"] == rep["landed"][net] and len(stands["blocking_partitions"]) == 6
    # with the placeholder only the port-state gaps remain; they block the 16:00 partition (0.5 s of samples)
    filled = rep["contract_with_placeholders"][net]
    assert filled["quarantined"] == len(rows)
    assert filled["blocking_partitions"] == [T0.isoformat()]
    assert set(rep["absent_sources"]) >= {"gpu_telemetry", "scheduler_events", "cost_capacity"}


def test_report_kpis_say_what_is_missing_and_what_is_a_placeholder(zhejiang_slice):
    rep, wh = zhejiang_slice
    k = {r["series"]: r for r in rep["kpis"]}
    # the 16:00 partition is quarantined whole (its port-state gaps): the five others have network rows to judge
    judged = 6 - 1
    assert k["comm_health.retransmits"]["degraded"] == judged and k["comm_health.retransmits"]["ok"] == 0
    assert k["comm_health.retransmits"]["missing_fields"] == ["network_telemetry.retransmits"]
    assert k["comm_health.packet_loss"]["ok"] == judged
    assert k["comm_health.packet_loss"]["placeholders"] == ["network_telemetry.packet_loss_pct"]
    assert rep["fields_the_trace_lacks"]["network_telemetry"] == ["retransmits", "latency_us"]
    kv = wh.read_window("kpi_values")
    status = kv[(kv["kpi"] == "comm_health.retransmits")].set_index("partition_start")["status"]
    assert status[T0] == "no_data"  # the quarantined partition: missing data, never a measured value
    assert (status.drop(T0) == "degraded").all() and len(status) == 6


def test_report_outage_verdict_is_read_from_the_alerts(zhejiang_slice):
    rep, wh = zhejiang_slice
    (o,) = rep["outages"]
    alerts = wh.read_window("alerts")
    firing = alerts[(alerts["status"] == "firing") & (alerts["cause_family"] == "missing_data")] if len(alerts) else alerts
    assert o["partitions"] == 1
    assert o["missing_data_share"] == (1.0 if (firing["partition_start"] == T0).any() else 0.0)
    expected = "flagged as missing data, no GPU incident" if o["missing_data_share"] == 1.0 else "NOT flagged as missing data"
    assert o["verdict"].startswith(expected)
    assert o["telemetry_rows_median"] < o["telemetry_rows_median_elsewhere"]  # the gap shows in the rows
    # re-run alone (the sensor's way) with no history before the slice, the partition reads as in the range run
    assert o["partition_runs"] == 1 and o["partition_run_share"] == o["missing_data_share"]
    text = render_markdown([rep], "python -m gpu_health.traces.report --run zhejiang ...")
    assert f"Verdict: **{o['verdict']}**" in text
    nulls = rep["quarantined_by_reason"]["network_telemetry"]["null in required field link_up"]
    assert f"| `network_telemetry` | null in required field link_up | {nulls} |" in text
