"""The Slurm adapter on real dumps (hb-jobinfo sacct, rivosinc squeue --json)."""

import os
import shutil
from pathlib import Path

import pandas as pd
import pytest

from gpu_health.contracts import CONTRACTS, columns
from gpu_health.sources.base import DataNotReady, SourceError
from gpu_health.sources.slurm import (
    HB_JOBINFO_FIELDS,
    SlurmSource,
    expand_nodelist,
    gpus_from_tres,
    map_state,
    parse_mem_gb,
    parse_sacct,
    parse_squeue_json,
    read_sacct,
    workload_class,
)

REAL = Path(__file__).resolve().parent / "fixtures" / "real-data"  # excerpts: fixtures/real-data/README.md
SACCT = REAL / "fixtures" / "slurm" / "hb-jobinfo" / "sacct.txt"
SQUEUE_JSON = REAL / "fixtures" / "slurm" / "rivosinc" / "squeue_out.json"
EDGE = Path(__file__).parent / "fixtures" / "slurm" / "sacct_parsable2_edge_cases.txt"



@pytest.fixture(scope="module")
def hb():
    return read_sacct(SACCT)


def _events(parsed, job_id):
    ev = parsed.scheduler_events
    return ev[ev.job_id == job_id].set_index("event")


# ----------------------------------------------------------------- real sacct dump


def test_real_dump_parses_every_line(hb):
    assert hb.rejects.empty
    assert hb.stats["lines"] == 242
    assert hb.stats["jobs"] == 100
    assert hb.stats["steps_folded"] == 142  # .batch, .extern and numbered steps are not jobs
    assert not hb.job_metadata.job_id.str.contains(r"\.").any()
    assert not hb.scheduler_events.job_id.str.contains(r"\.").any()


def test_exit_states_match_the_readme_counts(hb):
    ev = hb.scheduler_events
    ended = ev[ev.event == "ended"].exit_state.value_counts().to_dict()
    assert ended == {"completed": 66, "failed": 8, "cancelled": 8, "timeout": 7, "node_fail": 1}
    # PENDING 7: submitted only; RUNNING 3: started but not ended.
    per_job = ev.groupby("job_id").event.agg(frozenset)
    assert (per_job == frozenset({"submitted"})).sum() == 7
    assert (per_job == frozenset({"submitted", "started"})).sum() == 3
    assert set(_events(hb, "8202099").index) == {"submitted", "started"}


def test_cancelled_by_uid_keeps_the_text(hb):
    ended = _events(hb, "4034541").loc["ended"]
    assert ended.exit_state == "cancelled"
    assert ended.reason == "CANCELLED by 10304007"


def test_array_task_ids_are_job_ids(hb):
    e = _events(hb, "7216821_144")
    assert e.loc["ended"].exit_state == "timeout"
    assert e.loc["started"].ts == pd.Timestamp("2024-02-29T16:59:01Z")
    assert "7216821_144" in set(hb.job_metadata.job_id)


def test_node_lists_are_expanded(hb):
    assert _events(hb, "2296177").loc["started"].node_ids == "omni1,omni10,omni11,omni12"
    assert _events(hb, "8180204").loc["ended"].node_ids == "node11,node14,node18"
    assert _events(hb, "7971484").loc["started"].node_ids == "a100gpu2,a100gpu4"


def test_gpu_counts_come_from_tres(hb):
    # gres/gpu:a100=2 and gres/gpu=2 name the same two GPUs: not 4.
    assert _events(hb, "8150389").loc["started"].gpus == 2
    assert _events(hb, "7971484").loc["submitted"].gpus == 4
    md = hb.job_metadata.set_index("job_id")
    assert md.loc["7961058", "requested_gpus"] == 2
    # Pending GPU job: requested on submitted, never started.
    assert _events(hb, "8323312").loc["submitted"].gpus == 1
    # 2023 rows predate GPU TRES tracking: no gres, so 0.
    assert md.loc["4034541", "requested_gpus"] == 0


def test_unknown_and_none_times(hb):
    # Cancelled before it started: Start=None -> no started, ended with 0 GPUs and no placement.
    e = _events(hb, "4047445")
    assert set(e.index) == {"submitted", "ended"}
    assert e.loc["ended"].gpus == 0 and pd.isna(e.loc["ended"].node_ids)
    # NODE_FAIL with Start=None.
    assert _events(hb, "7336818").loc["ended"].exit_state == "node_fail"


def test_metadata_fields(hb):
    md = hb.job_metadata.set_index("job_id")
    row = md.loc["5908801_3"]
    assert row.team == "user23"  # no Account in this dump: default team is the user
    assert row.requested_mem_gb == pytest.approx(125000 / 1024)
    assert (row.model_type, row.dataset, row.container_image, row.framework_version) == ("unknown",) * 4
    assert md.loc["2296177", "workload_class"] == "distributed"  # 4 nodes
    assert md.loc["7939708", "workload_class"] == "batch"
    assert md.sla_deadline.isna().all()
    assert md.loc["4034541", "submitted_at"] == pd.Timestamp("2023-08-31T12:29:47Z")


def test_team_mapping_is_configurable():
    parsed = read_sacct(SACCT, team_map={"user424": "vision"})
    md = parsed.job_metadata.set_index("job_id")
    assert md.loc["4034541", "team"] == "vision"
    assert md.loc["5908801_3", "team"] == "user23"


def test_frames_satisfy_the_contracts(hb):
    CONTRACTS["scheduler_events"].validate(hb.scheduler_events, lazy=True)
    CONTRACTS["job_metadata"].validate(hb.job_metadata, lazy=True)
    assert list(hb.scheduler_events.columns) == columns("scheduler_events")
    assert hb.scheduler_events.event_id.is_unique


def test_parse_is_deterministic(hb):
    again = read_sacct(SACCT)
    pd.testing.assert_frame_equal(hb.scheduler_events, again.scheduler_events)


def test_parsable2_with_header_reads_the_same(hb):
    # Re-render the real dump as `sacct --parsable2` (header, '|', no trailing delimiter).
    lines = SACCT.read_text(encoding="utf-8").splitlines()
    rows = ["|".join(ln.split("☃")[:-1]) for ln in lines]
    text = "\n".join(["|".join(HB_JOBINFO_FIELDS), *rows]) + "\n"
    p2 = parse_sacct(text, origin="parsable2")
    assert p2.rejects.empty
    pd.testing.assert_frame_equal(hb.scheduler_events, p2.scheduler_events)
    pd.testing.assert_frame_equal(hb.job_metadata, p2.job_metadata)


def test_cluster_timezone_is_converted_to_utc():
    parsed = read_sacct(SACCT, cluster_tz="Europe/Amsterdam")
    # 2023-08-31 is summer time (UTC+2); 2024-03-03 is winter time (UTC+1).
    assert _events(parsed, "4034541").loc["submitted"].ts == pd.Timestamp("2023-08-31T10:29:47Z")
    assert _events(parsed, "7483822").loc["submitted"].ts == pd.Timestamp("2024-03-03T21:39:20Z")


def test_headerless_dump_with_unknown_layout_names_the_file():
    with pytest.raises(ValueError, match=r"my-dump\.txt.*3 fields"):
        parse_sacct("1|a|COMPLETED\n", origin="my-dump.txt")


# ----------------------------------------------------------------- hand-crafted edge cases


def test_edge_cases_are_parsed_or_rejected_never_dropped():
    parsed = read_sacct(EDGE)
    rj = parsed.rejects.set_index("line_no")
    assert sorted(rj.index) == [6, 7, 8, 9, 10, 11]
    assert "Submit 'yesterday'" in rj.loc[6, "reason"]
    assert "unknown State 'EXPLODED'" in rj.loc[7, "reason"]
    assert "expected 16" in rj.loc[8, "reason"]
    assert "JobID 'not-a-job'" in rj.loc[9, "reason"]
    assert "without its job row" in rj.loc[10, "reason"]
    assert "'lots'" in rj.loc[11, "reason"]
    assert rj.loc[6, "raw"].startswith("9100004|broken")
    assert set(parsed.job_metadata.job_id) == {"9100001", "9100002", "9100003"}


def test_out_of_memory_and_typed_gres_and_per_cpu_memory():
    parsed = read_sacct(EDGE)
    e = _events(parsed, "9100001")
    assert e.loc["ended"].exit_state == "failed"
    assert e.loc["ended"].reason.startswith("OUT_OF_MEMORY")
    assert "9100001.batch" in e.loc["ended"].reason
    assert e.loc["started"].node_ids == "gpu01,gpu02,gpu03,gpu07"
    assert e.loc["started"].gpus == 8  # only typed gres/gpu:a100=8
    assert e.loc["submitted"].priority == 4242
    md = parsed.job_metadata.set_index("job_id")
    assert md.loc["9100001", "requested_mem_gb"] == pytest.approx(4 * 32)  # 4Gc x 32 CPUs
    assert md.loc["9100001", "team"] == "vision"  # the account
    assert md.loc["9100002", "requested_mem_gb"] == pytest.approx(16)  # 16Gn x 1 node
    assert md.loc["9100002", "workload_class"] == "interactive"
    assert md.loc["9100003", "requested_gpus"] == 2
    assert set(_events(parsed, "9100002").index) == {"submitted", "started"}


# ----------------------------------------------------------------- helpers


@pytest.mark.parametrize(
    "text, expected",
    [
        ("gpu[01-03,07]", ["gpu01", "gpu02", "gpu03", "gpu07"]),
        ("a100gpu[2,4]", ["a100gpu2", "a100gpu4"]),
        ("node[08-10],login1", ["node08", "node09", "node10", "login1"]),
        ("rack[1-2]-n[1-2]", ["rack1-n1", "rack1-n2", "rack2-n1", "rack2-n2"]),
        ("omni24", ["omni24"]),
        ("None assigned", []),
    ],
)
def test_expand_nodelist(text, expected):
    assert expand_nodelist(text) == expected


@pytest.mark.parametrize("bad", ["gpu[01-03", "gpu01]", "gpu[a-b]", "gpu[5-3]"])
def test_expand_nodelist_rejects_malformed(bad):
    with pytest.raises(ValueError):
        expand_nodelist(bad)


def test_gpus_from_tres_forms():
    assert gpus_from_tres("cpu=8,gres/gpu:a100=2,gres/gpu=2,mem=32G") == 2
    assert gpus_from_tres("cpu=8,gres/gpu:a100=2,gres/gpu:v100=1") == 3
    assert gpus_from_tres("cpu=8,gres/gpumem=1G,gres/gpuutil=50") is None
    assert gpus_from_tres("gres:gpu:a100:2") == 2
    assert gpus_from_tres("") is None


def test_parse_mem_gb_forms():
    assert parse_mem_gb("4000M") == pytest.approx(4000 / 1024)
    assert parse_mem_gb("32G") == 32
    assert parse_mem_gb("4Gn", nnodes=3) == 12
    assert parse_mem_gb("4Gc", ncpus=8) == 32
    assert parse_mem_gb("") is None
    with pytest.raises(ValueError):
        parse_mem_gb("32 gigs")


def test_state_mapping():
    assert map_state("CANCELLED by 33677923") == ("cancelled", "CANCELLED by 33677923", "ended")
    assert map_state("NODE_FAIL")[0] == "node_fail"
    assert map_state("TIMEOUT")[0] == "timeout"
    assert map_state("OUT_OF_MEMORY")[:2] == ("failed", "OUT_OF_MEMORY")
    assert map_state("PENDING")[2] == "pending"
    with pytest.raises(ValueError):
        map_state("EXPLODED")


def test_workload_class_rule():
    assert workload_class(nnodes=2, partition="interactive", job_name="bash") == "distributed"
    assert workload_class(nnodes=1, partition="gpu-interactive", job_name="train") == "interactive"
    assert workload_class(nnodes=1, partition="gpu", job_name="jupyter-lab") == "interactive"
    assert workload_class(nnodes=1, partition="gpushort", job_name="train") == "batch"


# ----------------------------------------------------------------- squeue --json


def test_squeue_json():
    parsed = parse_squeue_json(SQUEUE_JSON.read_bytes(), origin=str(SQUEUE_JSON))
    assert parsed.rejects.empty
    running = _events(parsed, "26515966")
    assert set(running.index) == {"submitted", "started"}
    assert running.loc["started"].ts == pd.Timestamp(1684114921, unit="s", tz="UTC")
    assert running.loc["started"].node_ids == "cs75"
    assert running.loc["started"].priority == 1013
    pending = _events(parsed, "58948420")  # number-wrapped (newer OpenAPI) fields
    assert set(pending.index) == {"submitted"}
    assert pending.loc["submitted"].priority == 1368
    md = parsed.job_metadata.set_index("job_id")
    assert md.loc["26515966", "requested_mem_gb"] == pytest.approx(62.5)
    assert md.loc["58948420", "requested_mem_gb"] == pytest.approx(128)
    assert md.loc["26515966", "team"] == "account1"
    CONTRACTS["scheduler_events"].validate(parsed.scheduler_events, lazy=True)
    CONTRACTS["job_metadata"].validate(parsed.job_metadata, lazy=True)


def test_squeue_json_bad_job_is_a_reject():
    parsed = parse_squeue_json({"jobs": [{"job_id": 1, "job_state": "PENDING", "submit_time": 0}]})
    assert len(parsed.rejects) == 1 and "submit_time" in parsed.rejects.reason[0]


# ----------------------------------------------------------------- SlurmSource


@pytest.fixture()
def dump_dir(tmp_path):
    shutil.copy(SACCT, tmp_path / "sacct_2024-04-19.txt")
    return tmp_path


def test_source_reads_a_window(dump_dir):
    src = SlurmSource(dump_dir, complete_through="2024-05-01")
    assert src.tables() == {"scheduler_events", "job_metadata"}
    start, end = pd.Timestamp("2024-04-16T00:00Z"), pd.Timestamp("2024-04-17T00:00Z")
    ev = src.read("scheduler_events", start, end).frame
    assert len(ev) and ev.ts.between(start, end, inclusive="left").all()
    assert set(ev[ev.event == "ended"].job_id) >= {"8182578", "8182362"}
    md = src.read("job_metadata", start, end).frame
    assert md.submitted_at.between(start, end, inclusive="left").all()
    assert "8182362" in set(md.job_id)
    CONTRACTS["scheduler_events"].validate(ev, lazy=True)


def test_source_window_past_the_newest_dump_is_late_then_closed(dump_dir):
    start, end = pd.Timestamp("2024-04-19T12:00Z"), pd.Timestamp("2024-04-19T12:05Z")
    # less than absent_after since the window's end: the next dump may still cover it -> wait
    late = SlurmSource(dump_dir, complete_through="2024-04-19T12:00Z", clock=lambda: end + pd.Timedelta(minutes=9))
    with pytest.raises(DataNotReady, match="waiting up to"):
        late.read("scheduler_events", start, end)
    assert late.version("scheduler_events", start) is None
    # absent_after passed and no dump covers it: read as it is (what the dumps hold), its silence named
    closed = SlurmSource(dump_dir, complete_through="2024-04-19T12:00Z", clock=lambda: end + pd.Timedelta(minutes=10))
    got = closed.read("scheduler_events", start, end)
    assert list(got.frame["job_id"]) == ["8326038"]
    assert got.silent_family.startswith("slurm dumps") and "dumps absent" in got.origin
    assert closed.version("scheduler_events", start) == "closed"


def test_source_without_dumps_is_late_then_missing_data(tmp_path):
    start, end = pd.Timestamp("2024-01-01T00:00Z"), pd.Timestamp("2024-01-02T00:00Z")
    with pytest.raises(DataNotReady, match="no dumps"):
        SlurmSource(tmp_path, clock=lambda: end).read("job_metadata", start, end)
    got = SlurmSource(tmp_path).read("job_metadata", start, end)  # the real clock: long after the window
    assert got.frame.empty and list(got.frame.columns) == list(CONTRACTS["job_metadata"].to_schema().columns)
    assert got.silent_family is not None


def test_source_raises_on_rejects_or_collects_them(tmp_path):
    shutil.copy(EDGE, tmp_path / "sacct_edge.txt")
    start, end = pd.Timestamp("2024-03-10T00:00Z"), pd.Timestamp("2024-03-11T00:00Z")
    with pytest.raises(SourceError, match=r"sacct_edge\.txt:6"):
        SlurmSource(tmp_path, complete_through="2024-04-01").read("scheduler_events", start, end)
    src = SlurmSource(tmp_path, complete_through="2024-04-01", on_reject="collect")
    ev = src.read("scheduler_events", start, end).frame
    assert set(ev.job_id) == {"9100001", "9100002", "9100003"}
    assert len(src.rejects) == 6


def test_source_newer_dump_wins(tmp_path):
    lines = SACCT.read_text(encoding="utf-8").splitlines(keepends=True)
    (tmp_path / "sacct_1.txt").write_text("".join(lines), encoding="utf-8")
    # A later dump in which the RUNNING job 8202099 has completed.
    done = [
        ln.replace("☃RUNNING☃", "☃COMPLETED☃").replace("☃Unknown☃", "☃2024-04-20T01:00:00☃", 1)
        if ln.startswith("8202099☃") else ln
        for ln in lines
    ]
    (tmp_path / "sacct_2.txt").write_text("".join(done), encoding="utf-8")
    os.utime(tmp_path / "sacct_1.txt", (1_700_000_000, 1_700_000_000))
    os.utime(tmp_path / "sacct_2.txt", (1_700_000_100, 1_700_000_100))
    src = SlurmSource(tmp_path, complete_through="2024-05-01")
    ev = src.read("scheduler_events", pd.Timestamp("2023-01-01T00:00Z"), pd.Timestamp("2024-05-01T00:00Z")).frame
    assert ev.event_id.is_unique
    job = ev[ev.job_id == "8202099"].set_index("event")
    assert job.loc["ended", "exit_state"] == "completed"
    assert job.loc["ended", "ts"] == pd.Timestamp("2024-04-20T01:00:00Z")
