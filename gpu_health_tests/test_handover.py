"""What one stage of a pipelined run hands the next (:class:`gpu_health.steps.pipeline.Handover`): a day's frames,
through a file the next stage maps, arrive whole, writable and alone; a file that cannot be written sends them
through the pipe instead, and leaves nothing behind."""

import multiprocessing
import os
import subprocess
import sys
import textwrap

import numpy as np
import pandas as pd
import pytest

from gpu_health.steps.pipeline import Handover, handover_folder

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="private file mappings (POSIX)")


def _frames(n: int = 50_000) -> list[tuple]:
    """Cache entries as a stage hands them on, with every kind of column the tables have."""
    ts = pd.date_range("2026-11-03", periods=n, freq="s", tz="UTC")
    gpu = pd.DataFrame({
        "ts": ts,
        "node_id": pd.array([f"node-{i % 80:03d}" for i in range(n)], dtype="string"),
        "gpu_util_pct": np.linspace(0, 100, n),
        "xid": np.arange(n, dtype=np.int64) % 3,
        "ecc_dbe_delta": pd.array([None if i % 7 else i for i in range(n)], dtype="Int64"),
        "ok": np.arange(n) % 2 == 0,
    })
    small = pd.DataFrame({"ts": ts[:3], "kind": pd.array(["deploy", None, "x"], dtype="string")})
    start, end = pd.Timestamp("2026-11-03", tz="UTC"), pd.Timestamp("2026-11-04", tz="UTC")
    return [("gpu_telemetry", "ts", start, end, gpu), ("change_events", "ts", start, end, small),
            ("kube_pods", "ts", start, end, small.iloc[:0])]


def _hand(handover, payload):
    handover.put(3, payload)
    return handover.get()


def _assert_same(got, sent):
    assert len(got) == len(sent)
    for (name, col, s, e, frame), (name0, col0, s0, e0, frame0) in zip(got, sent):
        assert (name, col, s, e) == (name0, col0, s0, e0)
        pd.testing.assert_frame_equal(frame, frame0, obj=name)


def test_a_days_frames_arrive_whole_and_writable_through_a_file_each_deleted_once_mapped(tmp_path):
    ctx = multiprocessing.get_context("spawn")
    handover = Handover(ctx, str(tmp_path))
    sent = _frames()
    handover.put(3, sent)
    assert len(os.listdir(tmp_path)) == len(sent)  # a file per table: one table's arrays keep only its own alive
    i, got = handover.get()
    assert i == 3 and os.listdir(tmp_path) == []
    _assert_same(got, sent)
    gpu = got[0][4]
    gpu.loc[0, "gpu_util_pct"] = -1.0  # a step may write into what it was handed; the sender's frame is its own
    gpu.iloc[1, gpu.columns.get_loc("gpu_util_pct")] = -2.0
    assert gpu["gpu_util_pct"].iloc[:2].tolist() == [-1.0, -2.0] and sent[0][4]["gpu_util_pct"].iloc[0] == 0.0
    assert _hand(handover, None) == (3, None)
    assert _hand(handover, {"any": "thing"}) == (3, {"any": "thing"})
    handover.fail()
    assert handover.get() == ("error", None)


def test_a_middle_stage_passes_the_frames_it_hands_on_unchanged_as_the_files_they_came_in(tmp_path):
    """Stage 1 takes the sources' day in (keeping its files), hands on two of its tables as it got them and one
    it wrote itself: the unchanged ones travel on as the same files (nothing pickled again), the new one in a
    file of its own; the file it did not pass on goes once the day is handed on, the rest once stage 2 maps them."""
    ctx = multiprocessing.get_context("spawn")
    (tmp_path / "in").mkdir()
    (tmp_path / "out").mkdir()
    inbox, outbox = Handover(ctx, str(tmp_path / "in")), Handover(ctx, str(tmp_path / "out"))
    sent = _frames()
    inbox.put(5, sent)
    i, got = inbox.get(keep=True)
    assert i == 5 and len(os.listdir(tmp_path / "in")) == 3  # kept for passing on
    _assert_same(got, sent)
    gpu, changes, pods = got
    own = ("kpi_values", "partition_start", gpu[2], gpu[3], pd.DataFrame({"value": [1.0, 2.0]}))
    # a frame of the same window but another object (a step wrote the table again): not the file it came in
    rewritten = (*changes[:4], changes[4].copy())
    outbox.put(5, [gpu, own, rewritten, pods], passing=inbox)
    assert len(os.listdir(tmp_path / "in")) == 3 and len(os.listdir(tmp_path / "out")) == 2  # own, rewritten
    inbox.release(5)
    assert len(os.listdir(tmp_path / "in")) == 2  # change_events' file went; gpu_telemetry's and kube_pods' passed on
    j, onward = outbox.get()
    assert j == 5 and os.listdir(tmp_path / "in") == [] and os.listdir(tmp_path / "out") == []
    _assert_same(onward, [sent[0], own, sent[1], sent[2]])
    inbox.release(5)  # (nothing left to release)


def test_text_columns_sharing_their_objects_travel_as_codes_and_arrive_as_they_were(tmp_path):
    """Text read from the landing zone or the store: every row points at one of a few hundred string objects. Such
    a column goes as codes and its distinct objects (a file a fraction of plain pickling's), and arrives with the
    same values, dtypes and missing-value kinds (None stays None, NaN stays NaN), its rows again sharing objects;
    a column whose rows each hold their own object pickles as before."""
    n = 60_000
    names = np.array([f"node-{i:03d}" for i in range(80)] + [pd.NA], dtype=object)
    kinds = np.array(["started", "ended", None, np.nan], dtype=object)
    frame = pd.DataFrame({
        "node_id": pd.arrays.StringArray(names[np.arange(n) % 81]),  # string[python], pd.NA for every 81st row
        "event": kinds[np.arange(n) % 4], "reason": kinds[(np.arange(n) // 3) % 4],  # one 2-D object block
        "own": pd.array([f"job-{i}" for i in range(n)], dtype="string"),  # an object per row
        "value": np.arange(n, dtype=float),
    })
    sent = [("scheduler_events", "ts", pd.Timestamp("2026-11-03", tz="UTC"), pd.Timestamp("2026-11-04", tz="UTC"),
             frame)]
    handover = Handover(multiprocessing.get_context("spawn"), str(tmp_path))
    handover.put(1, sent)
    (day_file,) = os.listdir(tmp_path)
    assert b"_shared_objects" in (tmp_path / day_file).read_bytes()  # codes and distinct objects, rebuilt by it
    _, got = handover.get()
    _assert_same(got, sent)
    back = got[0][4]
    assert back["event"].iloc[2] is None and back["event"].iloc[3] is not None and pd.isna(back["event"].iloc[3])
    assert back["node_id"].array._ndarray[0] is back["node_id"].array._ndarray[81]  # one object, as sent


def test_without_a_folder_the_frames_go_through_the_pipe():
    handover = Handover(multiprocessing.get_context("spawn"), None)
    sent = _frames(1_000)
    _assert_same(_hand(handover, sent)[1], sent)


# A folder with no room: the process may write files of 64 KB at most (RLIMIT_FSIZE; a write past it fails with
# EFBIG once SIGXFSZ is ignored), as a full /dev/shm fails with ENOSPC. The large frame goes through the pipe,
# the small ones still through files, and no partial file stays.
_FULL = textwrap.dedent("""
    import multiprocessing, os, resource, signal, sys
    import pandas as pd
    from gpu_health.steps.pipeline import Handover
    from gpu_health_tests.test_handover import _frames, _assert_same
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (64 * 1024, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
    handover = Handover(multiprocessing.get_context("spawn"), sys.argv[1])
    sent = _frames()
    handover.put(0, sent)
    print(len(os.listdir(sys.argv[1])))
    _assert_same(handover.get()[1], sent)
    print(len(os.listdir(sys.argv[1])))
""")


def test_a_frame_too_large_for_the_folder_goes_through_the_pipe_and_leaves_no_file(tmp_path):
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = subprocess.run([sys.executable, "-c", _FULL, str(tmp_path)], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": repo}, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["2", "0"]  # the two small frames in files, the large one inline; then none


def test_a_runs_handover_folder_is_fresh_and_its_own_and_a_killed_runs_is_removed():
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                          check=True)
    a = handover_folder()
    base = os.path.dirname(a)
    left = os.path.join(base, f"gpu-health-days-{gone.stdout.strip()}-x1")  # a run killed with a day in flight
    os.makedirs(left)
    open(os.path.join(left, "tmp1.day"), "wb").close()
    b = handover_folder()
    try:
        assert a != b and os.listdir(a) == [] and os.access(a, os.W_OK)
        assert os.path.basename(a).startswith(f"gpu-health-days-{os.getpid()}-")
        assert not os.path.exists(left), "the folder of a run whose process is gone"
        assert os.path.exists(a), "the folder of a live run (this one) stays"
    finally:
        os.rmdir(a)
        os.rmdir(b)
