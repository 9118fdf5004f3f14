"""Trace importers on excerpts of the real public traces (gpu_health_tests/fixtures/real-data, see its README)."""

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from pandera.errors import SchemaErrors

from gpu_health.contracts import CONTRACTS, columns
from gpu_health.landing import partition_path
from gpu_health.traces import TRACES, alibaba, import_trace, philly, zhejiang

REAL = Path(__file__).resolve().parent / "fixtures" / "real-data"  # excerpts: fixtures/real-data/README.md


def assert_contract_except(df: pd.DataFrame, table: str, null_columns: tuple[str, ...]) -> None:
    """The frame breaks its contract only by nulls in the documented columns, and nowhere else."""
    try:
        CONTRACTS[table].validate(df, lazy=True)
    except SchemaErrors as exc:
        fc = exc.failure_cases
        assert set(fc.column) <= set(null_columns), fc.groupby(["column", "check"]).size()
        checks = fc.check.astype(str)
        assert (checks.eq("not_nullable") | checks.str.match(r"(coerce_)?dtype\(")).all(), fc  # nulls, nothing else
    # With those columns filled by any valid value, the rest satisfies the contract.
    filled = df.copy()
    for col in null_columns:
        filled[col] = filled[col].fillna(True if col == "link_up" else 0)
    CONTRACTS[table].validate(filled, lazy=True)


# ----------------------------------------------------------------- Philly


@pytest.fixture(scope="module")
def ph():
    return philly.build(REAL)


@pytest.fixture(scope="module")
def ph_jobs():
    return pd.DataFrame(json.loads((REAL / "philly" / "philly_sampled_jobs.json").read_text())).set_index("jobid")


def _job_events(frames, job_id):
    ev = frames.tables["scheduler_events"]
    return ev[ev.job_id == job_id].set_index("event")


def test_philly_jobs_become_events_and_metadata(ph, ph_jobs):
    ev, md = ph.tables["scheduler_events"], ph.tables["job_metadata"]
    # the excerpt's 310 of the 5,910 sampled jobs: 196 Pass, 114 Failed in the JSON
    assert len(md) == len(ph_jobs) == 310
    assert ev.event.value_counts().to_dict() == {"submitted": 310, "started": 310, "ended": 310}
    assert ev[ev.event == "ended"].exit_state.value_counts().to_dict() == {
        "completed": int((ph_jobs.status == "Pass").sum()), "failed": int((ph_jobs.status == "Failed").sum())}
    assert (ph_jobs.status == "Pass").sum() == 196
    CONTRACTS["scheduler_events"].validate(ev, lazy=True)
    assert set(ev.scheduler) == {"yarn"}  # YARN application ids
    assert_contract_except(md, "job_metadata", philly.NULL_REQUIRED_COLUMNS["job_metadata"])
    row = md.set_index("job_id").loc["application_1506638472019_14199"]
    assert (row.team, row.requested_gpus, row.workload_class) == ("ee9e8c", 8, "batch")


def test_philly_times_are_utc_across_the_dst_fold(ph):
    # October: PDT (UTC-7).
    e = _job_events(ph, "application_1506638472019_14199")
    assert e.loc["submitted", "ts"] == pd.Timestamp("2017-10-07T08:11:39Z")
    # December: PST (UTC-8).
    dec = ph.tables["scheduler_events"]
    last = dec[dec.event == "ended"].ts.max()
    assert last == pd.Timestamp("2017-12-13T10:06:39-08:00")
    # Ended at 01:42:54 on 2017-11-05, a wall-clock time that happened twice: the first (PDT) one.
    e = _job_events(ph, "application_1508364558011_23178")
    assert e.loc["ended", "ts"] == pd.Timestamp("2017-11-05T08:42:54Z")
    # Started 02:03:36 on 2017-11-05, after the fold: PST.
    assert _job_events(ph, "application_1508364558011_27851").loc["started", "ts"] == pd.Timestamp("2017-11-05T10:03:36Z")


def test_philly_elapsed_times_gain_the_fold_hour(ph, ph_jobs):
    # runtime_min is a wall-clock difference: a job running through 2017-11-05 02:00 PDT
    # really ran 60 minutes longer; every other job's UTC elapsed time equals runtime_min.
    ev = ph.tables["scheduler_events"]
    st = ev[ev.event == "started"].set_index("job_id").ts.sort_index()
    en = ev[ev.event == "ended"].set_index("job_id").ts.sort_index()
    sub = ev[ev.event == "submitted"].set_index("job_id").ts.sort_index()
    assert ((sub <= st) & (st <= en)).all()
    elapsed = (en - st).dt.total_seconds() / 60
    fold = pd.Timestamp("2017-11-05T09:00Z")  # 02:00 PDT -> 01:00 PST
    spans = (st < fold) & (en >= fold)
    extra = elapsed - ph_jobs.runtime_min.reindex(elapsed.index)
    assert spans.sum() >= 50
    assert np.allclose(extra[spans], 60, atol=1 / 60)
    assert np.allclose(extra[~spans], 0, atol=1 / 60)


def test_philly_gpu_window_values_and_job_mapping(ph, ph_jobs):
    gpu = ph.tables["gpu_telemetry"].set_index(["gpu_uuid", "ts"])
    start = pd.Timestamp(ph_jobs.loc["application_1504131676014_11327", "start_time"])
    anchor = start.floor("min").tz_localize("America/Los_Angeles").tz_convert("UTC")
    before = gpu.loc[("philly:m127:gpu0", anchor - pd.Timedelta(minutes=10))]
    at = gpu.loc[("philly:m127:gpu0", anchor)]
    assert before.gpu_util_pct == 95.0 and pd.isna(before.job_id)  # before the start: holder unknown
    assert at.gpu_util_pct == 100.0 and at.job_id == "application_1504131676014_11327"
    assert at.node_id == "m127" and at.gpu_index == 0


def test_philly_gpu_rows_satisfy_the_contract_but_for_documented_nulls(ph):
    gpu = ph.tables["gpu_telemetry"]
    assert list(gpu.columns) == columns("gpu_telemetry")
    assert gpu[["gpu_util_pct", "ts", "node_id", "gpu_uuid"]].notna().all().all()
    assert gpu.sm_active.isna().all() and gpu.power_w.isna().all() and gpu.xid.isna().all()
    assert_contract_except(gpu, "gpu_telemetry",
                           philly.NULL_REQUIRED_COLUMNS["gpu_telemetry"])
    assert not gpu.duplicated(["ts", "gpu_uuid"]).any()
    assert set(gpu.sku) == {"Philly GPU 12GB", "Philly GPU 24GB"}


def test_philly_outage_has_no_gpu_rows(ph, ph_jobs):
    # Fleet silent 2017-10-26 00:00-18:00 PDT = 07:00Z .. 01:00Z (+1 minute).
    lo, hi = pd.Timestamp("2017-10-26T07:00Z"), pd.Timestamp("2017-10-27T01:01Z")
    starts = pd.to_datetime(ph_jobs.start_time)
    assert ((starts >= "2017-10-26 00:10") & (starts < "2017-10-26 17:50")).sum() > 50  # windows exist there...
    gpu = ph.tables["gpu_telemetry"]
    assert not gpu.ts.between(lo, hi, inclusive="left").any()  # ...but hold no GPU reading
    key = "gpu_telemetry: fleet silent (node_sequence active==0): re-cut zero fill, not a reading"
    assert ph.skipped[key] > 0
    # The CPU collector kept reporting through the GPU-telemetry outage.
    node = ph.tables["node_telemetry"]
    assert node.ts.between(lo, hi, inclusive="left").sum() > 500
    # The day before and the day after, GPU rows exist.
    assert gpu.ts.between(lo - pd.Timedelta(days=1), lo, inclusive="left").sum() > 500
    assert gpu.ts.between(hi, hi + pd.Timedelta(days=1), inclusive="left").sum() > 500


def test_philly_liveness_side_file(ph):
    live = ph.derived["philly_fleet_liveness"]
    silent = live[live.fleet_silent]
    oct26 = silent[silent.ts.between(pd.Timestamp("2017-10-26T07:00Z"), pd.Timestamp("2017-10-27T01:00Z"))]
    assert len(oct26) == 1081
    assert oct26.ts.diff().dropna().eq(pd.Timedelta(minutes=1)).all()
    assert len(silent) == 1081  # the excerpt (10-24 .. 11-06) leaves out December's 10 + 40 minutes
    # 599 minutes missing in the source, +60 for the fold hour's second (PST) occurrence.
    assert live.source_row_missing.sum() == 599 + 60
    assert live.dst_ambiguous.sum() == 60
    assert live.loc[live.dst_ambiguous, "total_nodes"].eq(174).all()
    assert live.ts.is_monotonic_increasing and live.ts.is_unique


def test_philly_dst_duplicate_cells_are_parsed_into_both_minutes(ph):
    node = ph.tables["node_telemetry"].set_index(["node_id", "ts"])
    # Cell for 01:53 on m280 held "81.74 / 71.25": first occurrence PDT (08:53Z), second PST (09:53Z).
    assert node.loc[("m280", pd.Timestamp("2017-11-05T08:53Z")), "cpu_util_pct"] == 81.74
    assert node.loc[("m280", pd.Timestamp("2017-11-05T09:53Z")), "cpu_util_pct"] == 71.25
    assert ph.skipped["node_telemetry (cpu): DST-duplicate cell parsed into two minutes"] == 80
    assert "node_telemetry (cpu): unparseable cell" not in ph.skipped


def test_philly_node_rows(ph, ph_jobs):
    node = ph.tables["node_telemetry"]
    assert not node.duplicated(["ts", "node_id"]).any()
    both = node.dropna(subset=["cpu_util_pct", "mem_used_pct"])
    assert_contract_except(both, "node_telemetry", philly.NULL_REQUIRED_COLUMNS["node_telemetry"])
    # mem_used = 100 - free: job 11327's first cell on m127 (offset -10) is 25.959% free.
    start = pd.Timestamp(ph_jobs.loc["application_1504131676014_11327", "start_time"])
    t = start.floor("min").tz_localize("America/Los_Angeles").tz_convert("UTC") - pd.Timedelta(minutes=10)
    row = node.set_index(["node_id", "ts"]).loc[("m127", t)]
    assert row.mem_used_pct == pytest.approx(100 - 25.95921766704601)
    assert row.cpu_util_pct == pytest.approx(17.13)


def test_philly_cost_capacity(ph):
    cc = ph.tables["cost_capacity"]
    CONTRACTS["cost_capacity"].validate(cc, lazy=True)
    per_day = cc.groupby("sku").capacity_gpus.first().to_dict()
    assert per_day == {"Philly GPU 12GB": 321 * 2, "Philly GPU 24GB": 231 * 8}
    assert (cc.reserved_gpus == cc.capacity_gpus).all() and (cc.on_demand_gpu_hours == 0).all()
    days = pd.to_datetime(pd.Series(sorted(set(cc.date))))
    assert days.diff().dropna().eq(pd.Timedelta(days=1)).all()
    assert days.min() == pd.Timestamp("2017-09-18") and days.max() == pd.Timestamp("2017-12-13")


def test_philly_limit_takes_the_first_jobs():
    f = philly.build(REAL, limit=20)
    assert len(f.tables["job_metadata"]) == 20
    assert f.tables["job_metadata"].submitted_at.max() < pd.Timestamp("2017-10-01T00:00Z")
    assert set(f.tables["gpu_telemetry"].job_id.dropna()) <= set(f.tables["job_metadata"].job_id)


# ----------------------------------------------------------------- Alibaba


@pytest.fixture(scope="module")
def genai():
    return alibaba.build_genai(REAL)


def test_genai_gpu_series(genai):
    gpu = genai.tables["gpu_telemetry"]
    assert gpu.gpu_uuid.nunique() == 6  # the excerpt's 5 util + 1 memory-only container (of 143 + 1)
    assert gpu.ts.min() == pd.Timestamp("2022-09-11T01:12Z") and gpu.ts.max() == pd.Timestamp("2022-09-12T00:00Z")
    assert gpu.gpu_util_pct.dropna().between(0, 100).all()
    row = gpu.set_index(["gpu_uuid", "ts"]).loc[("23b8eba99c14e73d454503a55ae96989", pd.Timestamp("2022-09-11T01:12Z"))]
    assert row.fb_used_mib == 33879490560 / 2**20
    assert (gpu.node_id == gpu.gpu_uuid).all() and (gpu.job_id == gpu.gpu_uuid).all()
    both = gpu.dropna(subset=["gpu_util_pct", "fb_used_mib"])
    assert_contract_except(both, "gpu_telemetry", alibaba.NULL_REQUIRED_COLUMNS["gpu_telemetry"])


def test_genai_memory_drop_to_zero_is_kept(genai):
    # README: 25 of the 144 containers' GPU memory drops to 0 after being > 0; the excerpt keeps some.
    gpu = genai.tables["gpu_telemetry"].sort_values("ts")

    def drops(s):
        s = s.dropna().to_numpy()
        return bool(((s == 0) & (np.maximum.accumulate(s) > 0)).any())

    raw = pd.read_csv(REAL / "alibaba-clusterdata" / "v2026-GenAI" / "pod_gpu_memory_used_bytes_anon.csv")
    in_source = raw.sort_values("timestamp_anon", kind="stable").groupby("container_ip").value.apply(drops)
    kept = gpu.groupby("gpu_uuid").fb_used_mib.apply(drops)
    assert in_source.sum() >= 2
    assert set(kept[kept].index) == set(in_source[in_source].index)


@pytest.fixture(scope="module")
def openb():
    return alibaba.build_openb(REAL)


def test_openb_pod_phases(openb):
    ev, md = openb.tables["scheduler_events"], openb.tables["job_metadata"]
    # the excerpt: the first 800 of the 8,152 pods and the 34 still Running at the trace's last second;
    # its pod_phase column: 269 Failed, 20 Succeeded, 75 Pending, 451 Running
    assert len(md) == 815
    CONTRACTS["scheduler_events"].validate(ev, lazy=True)
    CONTRACTS["job_metadata"].validate(md, lazy=True)
    ended = ev[ev.event == "ended"]
    assert (ended.exit_state == "failed").sum() == 269
    assert (ended.exit_state == "completed").sum() == 20
    never = ended[ended.reason == "deleted while Pending (never scheduled)"]
    assert len(never) == 75 and (never.gpus == 0).all()
    assert (ev.event == "started").sum() == 815 - 75
    # Running pods deleted at the trace's last second were still running: no ended event.
    assert (ev.event == "ended").sum() == 815 - 34
    assert set(ev.scheduler) == {"kubernetes"} and set(ev.queue) == {"LS", "BE", "Burstable", "Guaranteed"}


def test_openb_times_from_the_documented_origin(openb):
    e = openb.tables["scheduler_events"].set_index(["job_id", "event"])
    # openb-pod-0001: created 427061 s, scheduled 427061 s, Running to the end of the trace.
    assert e.loc[("openb-pod-0001", "submitted"), "ts"] == alibaba.OPENB_ORIGIN + pd.Timedelta(seconds=427061)
    assert ("openb-pod-0001", "ended") not in e.index
    # openb-pod-0000: deleted at 12537496 s while Running.
    assert e.loc[("openb-pod-0000", "ended"), "ts"] == alibaba.OPENB_ORIGIN + pd.Timedelta(seconds=12537496)
    md = openb.tables["job_metadata"].set_index("job_id")
    assert md.loc["openb-pod-0000", "requested_mem_gb"] == 16.0
    assert md.loc["openb-pod-0000", "workload_class"] == "interactive"  # QoS LS


# ----------------------------------------------------------------- Zhejiang


@pytest.fixture(scope="module")
def zj():
    return zhejiang.build(REAL)


def test_zhejiang_collector_gap_is_absent_not_zero(zj):
    net = zj.tables["network_telemetry"]
    minutes = net.ts.dt.strftime("%H:%M")
    assert not minutes.isin(["16:01", "16:02", "16:03"]).any()
    per_minute = minutes.value_counts()
    # every server link of the excerpt (24 of 1012), every minute but the gap
    assert len(per_minute) == 57 and (per_minute == 24).all()
    assert len(net) == 57 * 24


def test_zhejiang_rates_and_direction(zj):
    roll = pd.read_csv(REAL / "zhejianglab-a100" / "trafficinfo" / "all_switches_port_minute_rollup.csv")
    src = roll[(roll.device == "NH-DC-NM129-B03-ROCE-Leaf-1.GPU.S9825") & (roll.port == "TwoHundredGigE1/0/1:2")
               & (roll.minute_utc == "2024-05-23T16:05:00Z")].iloc[0]
    net = zj.tables["network_telemetry"].set_index(["node_id", "link_id", "ts"])
    row = net.loc[("NH-DC-NM129-A01-28U-GPU-1", "ens11np0", pd.Timestamp("2024-05-23T16:05Z"))]
    assert row.tx_gbps == pytest.approx(src.in_octets * 8 / 60 / 1e9)  # switch in = server transmit
    assert row.rx_gbps == pytest.approx(src.out_octets * 8 / 60 / 1e9)
    # The catch-up minute after the gap carries several times the usual bytes (kept, documented).
    totals = zj.tables["network_telemetry"].groupby("ts").tx_gbps.sum()
    assert totals[pd.Timestamp("2024-05-23T16:04Z")] > 3 * totals.median()


def test_zhejiang_contract_and_link_state(zj):
    net = zj.tables["network_telemetry"]
    assert net.link_up.isna().any() and not (net.link_up == False).any()  # noqa: E712
    assert net.retransmits.isna().all() and net.latency_us.isna().all()  # accepted null: not in the counters
    assert_contract_except(net, "network_telemetry", zhejiang.NULL_REQUIRED_COLUMNS["network_telemetry"])
    skipped = sum(v for k, v in zj.skipped.items() if "not wired to a server" in k)
    assert skipped == 24 * 57  # the excerpt's 24 ports wired to no server (of 2160 - 1012)


# ----------------------------------------------------------------- import_trace


def test_import_zhejiang_writes_every_partition(tmp_path):
    summary = import_trace("zhejiang", tmp_path, data_dir=REAL)
    assert summary["rows"] == {"network_telemetry": 57 * 24}
    assert summary["partitions"] == {"network_telemetry": 12}
    assert summary["span"] == ("2024-05-23T16:00:00+00:00", "2024-05-23T17:00:00+00:00")
    assert summary["null_required_columns"]["network_telemetry"] == list(zhejiang.NULL_REQUIRED_COLUMNS["network_telemetry"])
    first = pd.read_parquet(partition_path(tmp_path, "network_telemetry", pd.Timestamp("2024-05-23T16:00Z")))
    assert sorted(first.ts.dt.strftime("%H:%M").unique()) == ["16:00", "16:04"]
    assert list(first.columns) == columns("network_telemetry")
    total = sum(len(pd.read_parquet(p)) for p in (tmp_path / "network_telemetry").rglob("*.parquet"))
    assert total == 57 * 24


def test_import_philly_window_writes_zero_row_files(tmp_path):
    summary = import_trace("philly", tmp_path, data_dir=REAL, start="2017-10-26T06:00Z", end="2017-10-26T08:00Z")
    assert summary["partitions"]["gpu_telemetry"] == 24
    assert summary["partitions"]["cost_capacity"] == 1
    for minute in range(0, 120, 5):
        p = pd.Timestamp("2017-10-26T06:00Z") + pd.Timedelta(minutes=minute)
        gpu = pd.read_parquet(partition_path(tmp_path, "gpu_telemetry", p))
        assert list(gpu.columns) == columns("gpu_telemetry")
        if p >= pd.Timestamp("2017-10-26T07:00Z"):
            assert gpu.empty  # the outage: nothing reported
    node_rows = sum(len(pd.read_parquet(partition_path(tmp_path, "node_telemetry", pd.Timestamp("2017-10-26T07:00Z") + pd.Timedelta(minutes=m))))
                    for m in range(0, 60, 5))
    assert node_rows > 0
    live = pd.read_parquet(summary["derived"]["philly_fleet_liveness"])
    assert live.fleet_silent.sum() == 1081  # the outage of 10-26 (the excerpt holds no other)
    assert pd.read_parquet(partition_path(tmp_path, "cost_capacity", pd.Timestamp("2017-10-26T00:00Z"))).capacity_gpus.sum() == 2490


def test_import_with_explicit_placeholders(tmp_path):
    fills = {"gpu_telemetry": {"power_w": 0.0, "temp_c": 0.0, "sm_clock_mhz": 0.0, "xid": 0}}
    summary = import_trace("alibaba-genai", tmp_path, data_dir=REAL, limit=3, placeholders=fills,
                           start="2022-09-11T06:00Z", end="2022-09-11T07:00Z")
    assert summary["placeholders"] == fills
    assert set(summary["null_required_columns"].get("gpu_telemetry", [])) <= {"gpu_util_pct", "fb_used_mib"}
    frames = [pd.read_parquet(p) for p in (tmp_path / "gpu_telemetry").rglob("*.parquet")]
    landed = pd.concat([f for f in frames if len(f)], ignore_index=True)
    assert landed.gpu_uuid.nunique() == 3
    assert (landed.xid == 0).all() and landed.power_w.eq(0).all()
    assert summary["partitions"]["gpu_telemetry"] == len(frames) == 12
    assert summary["empty_partitions"]["gpu_telemetry"] == sum(1 for f in frames if f.empty)


def test_import_alibaba_group_and_unknown_name(tmp_path):
    summary = import_trace("alibaba", tmp_path, data_dir=REAL, limit=2,
                           start="2022-09-11T06:00Z", end="2022-09-11T06:10Z")
    assert set(summary["parts"]) == {"alibaba-genai", "alibaba-openb"}
    assert summary["parts"]["alibaba-genai"]["partitions"] == {"gpu_telemetry": 2}
    assert summary["parts"]["alibaba-openb"]["rows"] == {"scheduler_events": 0, "job_metadata": 0}
    assert summary["parts"]["alibaba-openb"]["partitions"] == {"scheduler_events": 2, "job_metadata": 2}
    assert "alibaba" in TRACES
    with pytest.raises(ValueError, match="unknown trace"):
        import_trace("helios", tmp_path, data_dir=REAL)
