"""Serving SLOs: the catalogue, events and error budgets, multi-window burn rates and the slo_burn detector."""

import numpy as np
import pandas as pd
import pytest

from gpu_health.diagnosis.context import PartitionContext
from gpu_health.diagnosis.detectors import DETECTORS
from gpu_health.diagnosis.detectors.serving import detect_slo_burn
from gpu_health.metrics.slo import (
    BURN_WINDOWS,
    MIN_BAD_EVENTS,
    error_budgets,
    evaluate_burns,
    generative_models,
    slo_events,
)
from gpu_health.metrics.slo_catalog import BY_NAME, CATALOG, validate_catalog
from gpu_health.sim.scenario import load_scenario
from gpu_health.sim.telemetry import Window

FIVE = pd.Timedelta(minutes=5)
T0 = pd.Timestamp("2026-11-03T14:00:00Z")


# --- the catalogue ----------------------------------------------------------------------------------------------
def test_the_catalogue_is_well_formed():
    validate_catalog()


def test_the_seeds_slo_table_is_expressed_as_written():
    # seeds/001 "Inference Serving Alerting": p99 < 2 s, p95 < 500 ms, availability > 99.9 %, TTFT < 300 ms,
    # error rate < 0.1 %
    got = {(s.sli, s.threshold_s, s.objective) for s in CATALOG}
    assert ("latency", 2.0, 0.99) in got
    assert ("latency", 0.5, 0.95) in got
    assert ("availability", None, 0.999) in got
    assert ("ttft", 0.3, 0.99) in got
    assert BY_NAME["error-rate"].budget == pytest.approx(0.001)
    assert all(s.window == "30d" for s in CATALOG)


# --- events and budgets ------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def serving():
    win = Window(load_scenario({"seed": 7, "cluster": {"serving": True}}), T0, T0 + 2 * FIVE)
    return win.table("inference_requests"), win.table("inference_latency_buckets")


def test_events_per_slo_model_and_partition(serving):
    req, buckets = serving
    ev = slo_events(req, buckets)
    first = ev[ev["partition_start"] == T0]
    fraud = first[(first["model_name"] == "fraud-scorer") & (first["region"] == "us-east")].set_index("slo")
    assert set(fraud.index) == {"latency-p99", "latency-p95", "availability", "error-rate"}  # not generative
    part = req[(req["ts"] < T0 + FIVE) & (req["model_name"] == "fraud-scorer") & (req["region"] == "us-east")]
    assert fraud.loc["availability", "total_events"] == part["requests"].sum()
    assert fraud.loc["availability", "bad_events"] == part["errors"].sum()
    assert fraud.loc["latency-p99", "total_events"] == part["requests"].sum()  # the +Inf bucket
    # 0.5 s is a bucket bound of prometheus_client's defaults, 2 s is not (1, 2.5): measured vs interpolated
    assert not fraud.loc["latency-p95", "interpolated"] and fraud.loc["latency-p99", "interpolated"]
    gen = first[first["model_name"] == "support-assistant"].set_index(["region", "slo"])
    assert {s for _, s in gen.index} == {"ttft-p99", "availability", "error-rate"}
    assert gen["interpolated"].xs("ttft-p99", level="slo").all()  # 0.3 s lies between 0.25 and 0.5


def test_a_generative_model_whose_ttft_goes_absent_stays_generative(serving):
    req, buckets = serving
    history = slo_events(req[req["ts"] < T0 + FIVE], buckets[buckets["ts"] < T0 + FIVE])
    later = slo_events(req[req["ts"] >= T0 + FIVE], buckets[(buckets["ts"] >= T0 + FIVE) & (buckets["histogram"] != "ttft")],
                       generative_models(history))
    gen = later[later["model_name"] == "support-assistant"]
    assert "latency-p99" not in set(gen["slo"])
    ttft = gen[gen["slo"] == "ttft-p99"]
    assert len(ttft) == 2 and ttft["total_events"].isna().all()  # absent, not zero


def _rows(n_partitions: int, total: float, bad, slo="availability", start=T0, region="us-east", model="fraud-scorer"):
    bad = np.broadcast_to(np.asarray(bad, dtype=float), (n_partitions,))
    p = pd.date_range(start - (n_partitions - 1) * FIVE, start, freq="5min")
    return pd.DataFrame({"partition_start": p, "slo": slo, "region": region, "model_name": model,
                         "objective": BY_NAME[slo].objective, "total_events": float(total), "bad_events": bad,
                         "interpolated": False})


def test_error_budget_remaining_over_the_rolling_window():
    rows = _rows(12, 1000.0, 0.5)  # 0.05 % bad against a 0.1 % budget: half the budget
    out = error_budgets(rows.iloc[6:], rows.iloc[:6])
    assert len(out) == 6 and out["partition_start"].min() == rows["partition_start"].iloc[6]
    assert out["window_total_events"].iloc[-1] == 12_000
    assert out["error_budget_remaining"].iloc[-1] == pytest.approx(0.5)


# --- burn rates ------------------------------------------------------------------------------------------------
def test_a_healthy_model_raises_nothing():
    assert evaluate_burns(_rows(864, 6000.0, 1.0), T0).empty  # 0.017 % errors: 0.17x


def test_a_fast_burn_pages_on_the_one_hour_and_five_minute_windows():
    bad = np.r_[np.full(852, 1.0), np.full(12, 120.0)]  # 2 % errors for the last hour: 20x
    got = evaluate_burns(_rows(864, 6000.0, bad), T0)
    assert len(got) == 1
    r = got.iloc[0]
    assert (r["kind"], r["severity"], r["factor"]) == ("burn", "page", 14.4)
    assert r["long_window"] == pd.Timedelta(hours=1) and r["long_burn"] == pytest.approx(20.0)


def test_a_blip_in_the_short_window_alone_does_not_page():
    bad = np.r_[np.full(863, 1.0), 200.0]  # one bad partition: 5-minute burn 33x, one hour 3.6x
    assert evaluate_burns(_rows(864, 6000.0, bad), T0).empty


def test_a_slow_burn_tickets_on_the_three_day_window():
    got = evaluate_burns(_rows(864, 6000.0, 9.0), T0)  # 0.15 %: 1.5x for three days
    assert len(got) == 1
    assert got.iloc[0]["severity"] == "ticket" and got.iloc[0]["long_window"] == pd.Timedelta(days=3)


def test_the_minimum_traffic_guard_keeps_a_handful_of_requests_from_paging():
    # a quiet model: 20 requests a partition, 1 failure in the last one and 3 in the hour: 1.25 % = 12.5x... and
    # 4 of 20 in the last partition is 200x, but four failures are no evidence
    bad = np.r_[np.zeros(852), np.zeros(11), [4.0]]
    assert evaluate_burns(_rows(864, 20.0, bad), T0).empty
    bad[-1] = MIN_BAD_EVENTS  # the same at five failures in both windows pages
    assert evaluate_burns(_rows(864, 20.0, bad), T0).iloc[0]["severity"] == "page"


def test_a_ticket_intent_slo_never_pages():
    bad = np.r_[np.full(852, 1.0), np.full(12, 120.0)]
    got = evaluate_burns(_rows(864, 6000.0, bad, slo="error-rate"), T0)
    assert list(got["severity"]) == ["ticket"]


def test_an_absent_sli_series_is_a_ticket():
    rows = _rows(24, 6000.0, 1.0)
    rows.loc[rows.index[-1], ["total_events", "bad_events"]] = np.nan  # the histogram or counter vanished
    got = evaluate_burns(rows, T0)
    assert list(zip(got["kind"], got["severity"])) == [("absent", "ticket")]
    # the same when the row itself is missing
    got = evaluate_burns(rows.iloc[:-1], T0)
    assert list(got["kind"]) == ["absent"]


def test_the_windows_are_sloths():
    assert [(w[0], w[1], w[2], w[3]) for w in BURN_WINDOWS] == [
        (pd.Timedelta(hours=1), pd.Timedelta(minutes=5), 14.4, "page"),
        (pd.Timedelta(hours=6), pd.Timedelta(minutes=30), 6.0, "page"),
        (pd.Timedelta(days=1), pd.Timedelta(hours=2), 3.0, "ticket"),
        (pd.Timedelta(days=3), pd.Timedelta(hours=6), 1.0, "ticket")]


# --- the detector -----------------------------------------------------------------------------------------------
def _ctx(slo_rows) -> PartitionContext:
    empty = pd.DataFrame()
    return PartitionContext(start=T0, end=T0 + FIVE, gpu=empty, node=empty, network=empty, runtime=empty, sched=empty,
                            changes=empty, maintenance=empty, leaves=empty, baselines=empty, meta=empty,
                            inventory=empty, region_history=empty, slo_events=slo_rows)


def test_the_detector_pages_with_family_software_and_says_when_the_sli_is_interpolated():
    assert detect_slo_burn in [d.run for d in DETECTORS]
    bad = np.r_[np.full(852, 10.0), np.full(12, 1200.0)]  # 20 % over 0.3 s for the last hour: 20x a 1 % budget
    rows = _rows(864, 6000.0, bad, slo="ttft-p99", model="support-assistant")
    rows["interpolated"] = True
    found = detect_slo_burn(_ctx(rows))
    assert [(f.detector, f.family, f.severity, f.region) for f in found] == [("slo_burn", "software", "page", "us-east")]
    assert found[0].key == "slo_burn|us-east|support-assistant"
    assert "interpolated" in found[0].evidence and "14.4x" in found[0].evidence


def test_a_burn_at_the_first_look_or_with_windows_not_filled_does_not_page():
    # the service's first partition: every window holds these five minutes, none is filled
    first = detect_slo_burn(_ctx(_rows(1, 6000.0, 1200.0, slo="ttft-p99", model="support-assistant")))
    assert [f.severity for f in first] == ["ticket"]
    # forty minutes of data: the one-hour window is not yet covered
    part = detect_slo_burn(_ctx(_rows(8, 6000.0, 1200.0, slo="ttft-p99", model="support-assistant")))
    assert [f.severity for f in part] == ["ticket"]


def test_a_chronic_breach_is_a_ticket_naming_the_objective_and_a_new_burn_pages():
    # TTFT p99 over its objective for three days: the service's own history burns as much, nothing new
    chronic = detect_slo_burn(_ctx(_rows(864, 6000.0, 1200.0, slo="ttft-p99", model="support-assistant")))
    assert [(f.detector, f.severity) for f in chronic] == [("slo_burn", "ticket")]
    assert f"{BY_NAME['ttft-p99'].objective:.3%}" in chronic[0].summary and "chronic" in chronic[0].summary
    # the same burn after two healthy hours: new against the service's history, a page
    bad = np.r_[np.full(24, 10.0), np.full(12, 1200.0)]
    (f,) = detect_slo_burn(_ctx(_rows(36, 6000.0, bad, slo="ttft-p99", model="support-assistant")))
    assert f.severity == "page"


def test_the_detector_tickets_an_absent_sli_as_missing_data_and_is_silent_without_serving():
    rows = _rows(24, 6000.0, 1.0).iloc[:-1]
    found = detect_slo_burn(_ctx(rows))
    assert [(f.family, f.severity) for f in found] == [("missing_data", "ticket")]
    assert detect_slo_burn(_ctx(None)) == [] and detect_slo_burn(_ctx(pd.DataFrame())) == []


def test_a_quiet_simulated_hour_raises_nothing():
    scen = load_scenario({"seed": 7, "cluster": {"serving": True}})
    win = Window(scen, T0 - pd.Timedelta(hours=1), T0 + FIVE)
    ev = error_budgets(slo_events(win.table("inference_requests"), win.table("inference_latency_buckets")))
    assert len(ev) and evaluate_burns(ev, T0).empty


def test_the_five_minute_job_fills_slo_error_budgets_and_alerts_reads_them(sqlite_url, tmp_path):
    import dagster as dg

    from gpu_health.defs.build import build_definitions
    from gpu_health.defs.resources import TelemetrySourceResource, WarehouseIOManager, WarehouseResource
    from gpu_health.settings import Settings
    from gpu_health.storage.warehouse import Warehouse

    path = tmp_path / "serving.yaml"
    path.write_text("seed: 7\nstart: 2026-11-02T00:00:00Z\nend: 2026-11-09T00:00:00Z\ncluster: {gpus: 120, serving: true}\n")
    res = {"warehouse": WarehouseResource(url=sqlite_url), "warehouse_io_manager": WarehouseIOManager(url=sqlite_url),
           "source": TelemetrySourceResource(kind="simulator", scenario=str(path))}
    job = build_definitions(Settings(), res).resolve_job_def("five_minute_job")
    result = job.execute_in_process(partition_key=T0.strftime("%Y-%m-%d-%H:%M"), instance=dg.DagsterInstance.ephemeral(),
                                    run_config={"loggers": {"console": {"config": {"log_level": "WARNING"}}}})
    assert result.success
    wh = Warehouse(sqlite_url)
    budgets = wh.read_window("slo_error_budgets", T0, T0 + FIVE)
    assert set(budgets["slo"]) == {s.name for s in CATALOG}
    assert budgets["error_budget_remaining"].notna().all()
    alerts = wh.read_window("alerts", T0, T0 + FIVE)
    assert alerts.empty or "slo_burn" not in set(alerts["detector"])


# --- generated docs and OpenSLO ----------------------------------------------------------------------------------
def test_docs_slos_md_is_generated_from_the_catalogue():
    from gpu_health.metrics import slo_docs

    assert slo_docs.DOC_PATH.read_text() == slo_docs.render_slo_docs(), f"docs/slos.md is stale: run `{slo_docs.REGENERATE}`"


def test_openslo_export_expresses_every_slo(tmp_path):
    import yaml

    from gpu_health.cli import main

    out = tmp_path / "slos.yaml"
    assert main(["slo", "export", "--out", str(out)]) == 0
    docs = list(yaml.safe_load_all(out.read_text()))
    assert docs[0]["kind"] == "Service" and all(d["apiVersion"] == "openslo/v1" for d in docs)
    slos = {d["metadata"]["name"]: d for d in docs if d["kind"] == "SLO"}
    assert set(slos) == {s.name for s in CATALOG}
    for s in CATALOG:
        spec = slos[s.name]["spec"]
        assert spec["service"] == docs[0]["metadata"]["name"]
        assert spec["objectives"][0]["target"] == s.objective
        assert spec["timeWindow"] == [{"duration": "30d", "isRolling": True}] and spec["budgetingMethod"] == "Occurrences"
        ratio = spec["indicator"]["spec"]["ratioMetric"]
        assert ratio["counter"] is True and "total" in ratio and (("good" in ratio) != ("bad" in ratio))
        if s.threshold_s is not None:
            assert f'le="{float(s.threshold_s)!r}"' in ratio["good"]["metricSource"]["spec"]["query"]


# --- simulated serving incidents -------------------------------------------------------------------------------
def _judged(kind: str, start: str, magnitude=None, hours_before=1, minutes_after=30, history_days=0):
    """Page / ticket time of the slo_burn rule on a simulated serving incident in us-east's fraud scorer."""
    inc = {"kind": kind, "start": start, "duration": "3h", "scope": {"region": "us-east", "model": "fraud-scorer"}}
    if magnitude is not None:
        inc["magnitude"] = magnitude
    scen = load_scenario({"seed": 7, "start": "2026-11-02T00:00:00Z", "cluster": {"serving": True}, "incidents": [inc]})
    t0 = pd.Timestamp(start)
    win = Window(scen, t0 - pd.Timedelta(hours=hours_before) - pd.Timedelta(days=history_days),
                 t0 + pd.Timedelta(minutes=minutes_after))
    rows = error_budgets(slo_events(win.table("inference_requests"), win.table("inference_latency_buckets")))
    out = []
    for p in sorted(rows["partition_start"].unique()):
        for _, r in evaluate_burns(rows, p).iterrows():
            out.append((p + FIVE - t0, r["slo"], r["region"], r["model_name"], r["severity"]))
    return out


def test_an_error_spike_pages_on_availability_within_15_minutes():
    found = _judged("serving_error_spike", "2026-11-03T14:02:00Z")
    pages = [f for f in found if f[4] == "page"]
    assert pages and pages[0][1:4] == ("availability", "us-east", "fraud-scorer")
    assert pages[0][0] <= pd.Timedelta(minutes=15)
    assert all(f[0] > pd.Timedelta(0) for f in found)  # nothing before the spike


def test_a_latency_regression_release_pages_on_the_p99_slo():
    found = _judged("serving_latency_regression", "2026-11-03T14:02:00Z", minutes_after=60)
    pages = [f for f in found if f[4] == "page" and f[1] == "latency-p99"]
    assert pages and pages[0][2:4] == ("us-east", "fraud-scorer")


def test_a_burn_finding_becomes_an_alert_and_an_alertmanager_payload():
    from gpu_health.delivery.alertmanager import alert_to_payload
    from gpu_health.diagnosis import alerts as A
    from gpu_health.contracts.derived import Alerts

    bad = np.r_[np.full(852, 1.0), np.full(12, 120.0)]
    found = detect_slo_burn(_ctx(_rows(864, 6000.0, bad)))
    snap = A.step(A.empty(), found, T0, rates={}, changes=pd.DataFrame(columns=["event_id", "ts", "kind", "scope", "description"]))
    Alerts.validate(snap, lazy=True)
    row = snap.iloc[0]
    assert (row["detector"], row["severity"], row["cause_family"], row["status"]) == ("slo_burn", "page", "software", "firing")
    assert "availability" in row["summary"] and "Burn rate" in row["description"]
    # the page's margin: the smaller of its two windows' burn over the factor, both above it
    burns = evaluate_burns(_rows(864, 6000.0, bad), T0)
    burn = burns[burns["severity"] == "page"].sort_values("long_burn").iloc[-1]
    f = found[0]
    assert f.margin == pytest.approx(min(burn["long_burn"], burn["short_burn"]) / burn["factor"]) and f.margin > 1
    assert row["margin_at_page"] == pytest.approx(f.margin)
    payload = alert_to_payload(row.to_dict(), now=(T0 + FIVE).to_pydatetime())
    assert payload["labels"]["severity"] == "page" and payload["labels"]["cause_family"] == "software"
    assert payload["labels"]["region"] == "us-east"


def test_one_alert_per_model_and_distinct_alerts_for_two_models_opening_together():
    from gpu_health.diagnosis import alerts as A

    bad = np.r_[np.full(852, 1.0), np.full(12, 120.0)]
    rows = pd.concat([_rows(864, 6000.0, bad, slo=slo, model=model)
                      for slo in ("availability", "error-rate") for model in ("fraud-scorer", "txn-embedding")],
                     ignore_index=True).sort_values("partition_start", kind="stable").reset_index(drop=True)
    found = detect_slo_burn(_ctx(rows))
    assert len(found) == 4 and found[0].severity == "page"
    snap = A.step(A.empty(), found, T0, rates={}, changes=pd.DataFrame(columns=["event_id", "ts", "kind", "scope", "description"]))
    assert len(snap) == 2 and snap["alert_id"].is_unique  # availability + error-rate merged per model
    assert set(snap["severity"]) == {"page"}
    assert all("availability" in s for s in snap["summary"])


# --- a release judged against the version it replaced (release_regression) -----------------------------------------
def _versions(bad_old, bad_new, first_new: int, n: int = 12, total=6000.0, slo="latency-p99", old_serves_with_new=0):
    """slo_version_events rows of the hour up to T0: v1 serves until partition ``first_new`` (and
    ``old_serves_with_new`` partitions beside v2: a rollout), v2 from then on, each partition ``total`` events."""
    p = pd.date_range(T0 - (n - 1) * FIVE, T0, freq="5min")
    rows = []
    for i, ps in enumerate(p):
        for version, bad, serving in (("v1", bad_old, i < first_new + old_serves_with_new), ("v2", bad_new, i >= first_new)):
            if serving:
                rows.append({"partition_start": ps, "slo": slo, "region": "us-east", "model_name": "fraud-scorer",
                             "model_version": version, "objective": BY_NAME[slo].objective, "total_events": total,
                             "bad_events": float(bad), "interpolated": True})
    return pd.DataFrame(rows)


def test_a_new_version_burning_where_the_old_one_did_not_is_judged_a_release():
    from gpu_health.metrics.slo import RELEASE_FACTOR, release_burns

    got = release_burns(_versions(bad_old=6.0, bad_new=1200.0, first_new=10), T0)  # 0.1 % vs 20 % over 2 s: 0.1x vs 20x
    assert len(got) == 1
    r = got.iloc[0]
    assert (r["model_version"], r["previous_version"], r["severity"]) == ("v2", "v1", "page")
    assert r["since"] == T0 - FIVE and r["burn_since"] == pytest.approx(20.0) and r["burn_before"] == pytest.approx(0.1)
    assert RELEASE_FACTOR == BURN_WINDOWS[0][2]


def test_a_release_is_not_judged_in_its_first_partition_nor_without_a_version_before_it():
    from gpu_health.metrics.slo import release_burns

    assert release_burns(_versions(6.0, 1200.0, first_new=11), T0).empty  # warm-up: its first partition
    assert release_burns(_versions(6.0, 1200.0, first_new=0), T0).empty   # served the whole hour: not new
    alone = _versions(6.0, 1200.0, first_new=10)
    assert release_burns(alone[alone["model_version"] == "v2"], T0).empty  # no earlier version to contrast


def test_a_benign_release_a_model_already_burning_and_a_rollout_burning_on_both_versions_are_not_releases():
    from gpu_health.metrics.slo import release_burns

    assert release_burns(_versions(6.0, 8.0, first_new=8), T0).empty  # v2 as healthy as v1
    assert release_burns(_versions(1200.0, 1200.0, first_new=8), T0).empty  # burned before the release: slo_burn's
    rollout = _versions(6.0, 1200.0, first_new=8, old_serves_with_new=5)  # v1 still serves beside v2 at T0
    assert release_burns(rollout, T0).iloc[0]["model_version"] == "v2"
    rollout.loc[(rollout["model_version"] == "v1") & (rollout["partition_start"] == T0), "bad_events"] = 1200.0
    assert release_burns(rollout, T0).empty  # v1 burns beside it now: the load or the platform, not the release
    few = release_burns(_versions(0.0, 4.0, first_new=10, total=20.0), T0)  # 20 % of 20 requests: 4 bad events
    assert few.empty  # the minimum-traffic guard


def test_the_detector_names_the_release_first_and_merges_it_with_the_burn_of_the_same_model():
    from gpu_health.diagnosis import alerts as A

    ctx = _ctx(None)
    ctx.slo_versions = _versions(6.0, 1200.0, first_new=10)
    found = detect_slo_burn(ctx)
    assert [(f.detector, f.family, f.severity) for f in found] == [("release_regression", "software", "page")]
    assert found[0].key == "slo_burn|us-east|fraud-scorer" and "Roll back to v1" in found[0].evidence
    bad = np.r_[np.full(852, 1.0), np.full(12, 120.0)]
    ctx.slo_events = _rows(864, 6000.0, bad)
    both = detect_slo_burn(ctx)
    assert [f.detector for f in both] == ["release_regression", "slo_burn"]
    snap = A.step(A.empty(), both, T0, rates={}, changes=pd.DataFrame(columns=["event_id", "ts", "kind", "scope", "description"]))
    assert len(snap) == 1 and snap.iloc[0]["detector"] == "release_regression"


def test_per_version_events_add_up_to_the_models(serving):
    req, buckets = serving
    model = slo_events(req, buckets).set_index(["partition_start", "slo", "region", "model_name"])
    by_version = slo_events(req, buckets, by_version=True)
    assert {"model_version"} <= set(by_version.columns)
    summed = by_version.groupby(["partition_start", "slo", "region", "model_name"])[["total_events", "bad_events"]].sum()
    avail = model.xs("availability", level="slo")[["total_events", "bad_events"]]
    pd.testing.assert_frame_equal(summed.xs("availability", level="slo"), avail, check_like=True)


def test_a_latency_regression_release_pages_within_15_minutes_as_a_release():
    inc = {"kind": "serving_latency_regression", "start": "2026-11-03T14:02:00Z", "duration": "3h",
           "scope": {"region": "us-east", "model": "fraud-scorer"}}
    scen = load_scenario({"seed": 7, "start": "2026-11-02T00:00:00Z", "cluster": {"serving": True}, "incidents": [inc]})
    from gpu_health.metrics.slo import release_burns

    t0 = pd.Timestamp(inc["start"])
    win = Window(scen, t0 - pd.Timedelta(hours=1), t0 + pd.Timedelta(minutes=30))
    rows = slo_events(win.table("inference_requests"), win.table("inference_latency_buckets"), by_version=True)
    judged = [(p + FIVE - t0, r) for p in sorted(rows["partition_start"].unique())
              for _, r in release_burns(rows, p).iterrows()]
    assert judged and all(d > pd.Timedelta(0) for d, _ in judged)  # nothing before the release
    first, r = judged[0]
    assert first <= pd.Timedelta(minutes=15) and r["slo"].startswith("latency") and r["severity"] == "page"
    assert (r["region"], r["model_name"], r["previous_version"]) == ("us-east", "fraud-scorer", r["previous_version"])
    assert r["model_version"].endswith(".1")
