"""The facility layer's source: the ``facility_telemetry`` contract, the simulator's racks, the optional
source, and the older ``change_events`` files without ``actor`` / ``ticket``.

A cluster without facility data must run exactly as before: the knob off gives zero rows, an absent landing file
is zero rows (never a wait); the knob on gives one valid row per rack per minute whose power adds up from the GPUs
and whose incidents leave their marks on both the racks and the GPUs.
"""

import numpy as np
import pandas as pd
import pytest

from gpu_health.contracts.models import OPTIONAL_SOURCES, empty_frame
from gpu_health.contracts.validate import validate_frame
from gpu_health.landing import write_partition
from gpu_health.sim.facility import CONTINUOUS_LOAD_SHARE, HOST_SHARE_OF_TDP, rack_table
from gpu_health.sim.scenario import load_scenario
from gpu_health.sim.telemetry import Window
from gpu_health.sources.landing import LandingSource
from gpu_health.sources.read import read_window
from gpu_health.storage.schema import COLUMNAR_TABLES

T0 = pd.Timestamp("2026-11-03T10:00:00Z")
T1 = T0 + pd.Timedelta(minutes=20)
INC = pd.Timestamp("2026-11-03T10:02:00Z")


@pytest.fixture(scope="module")
def win():
    scen = load_scenario({
        "seed": 3, "start": "2026-11-03T09:00:00Z", "end": "2026-11-03T11:00:00Z",
        "cluster": {"gpus": 192, "facility": True, "rack_nodes": 2},
        "incidents": [
            # a rack of batch nodes (busy GPUs): an idle rack heats up too but does not reach the slowdown temperature
            {"kind": "rack_cooling_failure", "start": str(INC), "duration": "40m", "scope": {"rack": "use-v100-r02"}},
            {"kind": "power_cap_hit", "start": str(INC), "duration": "40m", "scope": {"region": "eu-west"}}]})
    return Window(scen, T0, T1)


def test_facility_is_an_optional_columnar_source():
    assert "facility_telemetry" in OPTIONAL_SOURCES and "facility_telemetry" in COLUMNAR_TABLES


def test_facility_off_by_default(win):
    for cluster in ("default", "messy"):
        w = Window(load_scenario({"seed": 7, "cluster": cluster}), T0, T0 + pd.Timedelta(minutes=5))
        assert w.table("facility_telemetry").empty


def test_rows_meet_the_contract_one_per_rack_minute(win):
    f = win.table("facility_telemetry")
    v = validate_frame(f, "facility_telemetry", start=T0, end=T1, origin="test")
    assert len(v.rejects) == 0 and len(v.valid) == len(f)
    racks = rack_table(win.scen.cluster, 2)
    assert len(f) == racks["rack_id"].nunique() * 20
    # every node is in exactly one rack, and the rack rows name them
    named = sorted(n for s in f.drop_duplicates("rack_id")["node_ids"] for n in s.split(","))
    assert named == sorted(win.scen.cluster.nodes["node_id"])


def test_power_budget_is_the_nameplate_over_the_continuous_load_share(win):
    f = win.table("facility_telemetry")
    quiet = f[f["ts"] < INC]
    # a healthy rack never reaches 80 % of its breaker rating: the nameplate is 80 % of it
    assert (quiet["power_kw"] < CONTINUOUS_LOAD_SHARE * quiet["power_budget_kw"]).all()
    # the hall draws more than its IT load: PUE between 1 and 2
    it = quiet.groupby(["ts", "region"])["power_kw"].sum()
    hall = quiet.groupby(["ts", "region"])["facility_power_kw"].first()
    assert ((hall / it) > 1.0).all() and ((hall / it) < 2.0).all()


def test_rack_power_follows_the_gpus(win):
    """A rack draws more than its GPUs (the host's share) and its host draws at most its share of the nameplate
    (HOST_SHARE_OF_TDP of the GPUs' TDP)."""
    f, g = win.table("facility_telemetry"), win.table("gpu_telemetry")
    f, g = f[f["ts"] < INC], g[g["ts"] < INC]
    racks = rack_table(win.scen.cluster, 2).set_index("node_id")["rack_id"]
    gpu_kw = g.assign(rack_id=g["node_id"].map(racks)).groupby(["ts", "rack_id"])["power_w"].sum() / 1000
    rack_kw = f.set_index(["ts", "rack_id"])["power_kw"]
    ratio = (rack_kw / gpu_kw).dropna()
    assert (ratio > 1.2).all()
    nameplate = f.set_index(["ts", "rack_id"])["power_budget_kw"] * CONTINUOUS_LOAD_SHARE
    host = (rack_kw - gpu_kw).dropna()
    assert (host <= nameplate.reindex(host.index) * HOST_SHARE_OF_TDP / (1 + HOST_SHARE_OF_TDP) + 0.01).all()


def test_rack_cooling_failure_raises_inlet_then_gpu_temperature(win):
    inc = next(i for i in win.scen.incidents if i.kind == "rack_cooling_failure")
    f, g = win.table("facility_telemetry"), win.table("gpu_telemetry")
    rack = f[f["rack_id"] == inc.scope["rack"]]
    assert rack.loc[rack["ts"] < INC, "inlet_temp_c"].max() <= 27.0
    assert rack.loc[rack["ts"] >= INC + pd.Timedelta(minutes=10), "inlet_temp_c"].min() > 27.0
    others = f[(f["rack_id"] != inc.scope["rack"])]
    assert others["inlet_temp_c"].max() <= 27.0
    mine = g[g["node_id"].isin(inc.node_ids)]
    assert mine.loc[mine["ts"] >= INC + pd.Timedelta(minutes=10), "temp_c"].median() >= \
        mine.loc[mine["ts"] < INC, "temp_c"].median() + 8
    hot = mine[(mine["ts"] >= INC + pd.Timedelta(minutes=10)) & mine["job_id"].notna()]
    assert len(hot) and ((hot["throttle_reasons"].astype("int64") & 0x60) > 0).mean() > 0.5


def test_power_cap_holds_the_rack_at_its_cut_budget(win):
    inc = next(i for i in win.scen.incidents if i.kind == "power_cap_hit")
    f, g = win.table("facility_telemetry"), win.table("gpu_telemetry")
    rack = f[(f["rack_id"] == inc.scope["rack"]) & (f["ts"] >= INC)]
    before = f[(f["rack_id"] == inc.scope["rack"]) & (f["ts"] < INC)]
    assert (rack["power_budget_kw"] < before["power_budget_kw"].min()).all()
    assert (rack["power_kw"] <= rack["power_budget_kw"]).all()
    assert (rack["power_kw"] >= 0.9 * rack["power_budget_kw"]).mean() > 0.8
    busy = g[g["node_id"].isin(inc.node_ids) & (g["ts"] >= INC) & g["job_id"].notna()]
    assert ((busy["throttle_reasons"].astype("int64") & 0x4) > 0).mean() > 0.5


def test_absent_facility_files_are_zero_rows_and_landed_ones_read(tmp_path, win):
    src = LandingSource(tmp_path)
    v, gaps = read_window(src, "facility_telemetry", T0, T1)
    assert len(v.valid) == 0 and len(v.rejects) == 0 and gaps.empty
    frame = win.table("facility_telemetry")
    part = frame[frame["ts"] < T0 + pd.Timedelta(minutes=5)]
    write_partition(tmp_path, "facility_telemetry", T0, part)
    v, _ = read_window(src, "facility_telemetry", T0, T0 + pd.Timedelta(minutes=5))
    assert len(v.valid) == len(part) and len(v.rejects) == 0


def test_bad_facility_rows_are_rejected_not_stored(win):
    frame = win.table("facility_telemetry").head(4).copy()
    frame.loc[frame.index[0], "power_budget_kw"] = 0.0        # a rack provisioned with no power is no reading
    frame.loc[frame.index[1], "power_kw"] = -3.0
    frame.loc[frame.index[2], "inlet_temp_c"] = np.nan         # not exported: null, kept
    v = validate_frame(frame, "facility_telemetry", start=T0, end=T1, origin="test")
    assert len(v.valid) == 2 and len(v.rejects) >= 2
    assert set(v.rejects["column"]) >= {"power_budget_kw", "power_kw"}


def test_old_change_files_without_actor_and_ticket_stay_valid(tmp_path):
    old = empty_frame("change_events").drop(columns=["actor", "ticket"])
    old = pd.concat([old, pd.DataFrame([{"event_id": "chg-1", "ts": T0 + pd.Timedelta(minutes=1),
                                         "kind": "driver_upgrade", "scope": "*", "from_version": "1",
                                         "to_version": "2", "description": "upgrade"}])], ignore_index=True)
    write_partition(tmp_path, "change_events", T0, old)
    v, _ = read_window(LandingSource(tmp_path), "change_events", T0, T0 + pd.Timedelta(minutes=5))
    assert len(v.rejects) == 0 and len(v.valid) == 1
    assert v.valid["actor"].isna().all() and v.valid["ticket"].isna().all()


def test_unticketed_change_incident_lands_a_change_with_an_actor_and_no_ticket():
    scen = load_scenario({
        "seed": 5, "start": "2026-11-03T09:00:00Z", "end": "2026-11-03T11:00:00Z", "cluster": {"gpus": 96},
        "incidents": [{"kind": "unticketed_change", "start": str(INC), "duration": "30m", "severity": "low",
                       "scope": {"region": "eu-west", "nodes": 2, "actor": "jdoe@example.com"}}],
        "changes": [{"kind": "bios_update", "ts": str(INC + pd.Timedelta(minutes=1)), "scope": {"region": "us-east", "nodes": 1},
                     "actor": "ops-bot", "ticket": "CHG-7", "to_version": "2.1"}]})
    ch = Window(scen, T0, T1).table("change_events").set_index("kind")
    assert ch.loc["node_taint", "actor"] == "jdoe@example.com" and pd.isna(ch.loc["node_taint", "ticket"])
    assert len(ch.loc["node_taint", "scope"].split(",")) == 2
    assert ch.loc["bios_update", "ticket"] == "CHG-7" and ch.loc["bios_update", "actor"] == "ops-bot"
    assert validate_frame(ch.reset_index(), "change_events", start=T0, end=T1, origin="t").rejects.empty


def test_simulate_writes_facility_files_only_when_the_knob_is_on(tmp_path):
    import yaml

    from gpu_health.cli import main
    from gpu_health.landing import partition_path

    for on in (False, True):
        scen = tmp_path / f"s{on}.yaml"
        scen.write_text(yaml.safe_dump({"seed": 1, "start": "2026-11-03T10:00:00Z", "end": "2026-11-03T10:10:00Z",
                                        "cluster": {"gpus": 96, "facility": on}}))
        land = tmp_path / f"land{on}"
        assert main(["simulate", "--scenario", str(scen), "--landing", str(land), "--quiet"]) == 0
        files = sorted(p.relative_to(land).as_posix() for p in (land / "facility_telemetry").rglob("*.parquet")) \
            if (land / "facility_telemetry").exists() else []
        if not on:
            assert files == []
            continue
        assert files == ["facility_telemetry/2026-11-03/1000.parquet", "facility_telemetry/2026-11-03/1005.parquet"]
        frame = pd.read_parquet(partition_path(land, "facility_telemetry", T0))
        assert len(frame) == 5 * frame["rack_id"].nunique() and frame["rack_id"].nunique() >= 2
