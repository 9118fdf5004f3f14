"""The benchmarks' whole-run memory (``bench/run.py``'s ``peak_total_mib``): what a measurement and every process
it started hold at once, hand-over files included -- not only its largest process (``peak_mib``)."""

import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench" / "run.py"
MIB = 2**20

pytestmark = pytest.mark.skipif(not Path("/proc/self/smaps_rollup").exists(), reason="Linux /proc only")


def _bench():
    spec = importlib.util.spec_from_file_location("bench_run", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_whole_runs_peak_counts_every_descendant_and_the_hand_over_files():
    bench = _bench()
    alone = bench.TotalMemory._sample() / 1024  # this process alone, MiB
    # a grandchild holding 300 MiB (a pipelined run's stages are its measurement's children's children)
    hold = "import subprocess, sys; subprocess.run([sys.executable, '-c', " \
           "'import time; x = bytearray(300 * 2**20); x[::4096] = b\"1\" * len(x[::4096]); time.sleep(4)'])"
    folder = Path(tempfile.mkdtemp(prefix=f"gpu-health-days-{os.getpid()}-", dir="/dev/shm"
                                   if os.access("/dev/shm", os.W_OK) else None))
    try:
        (folder / "day.pkl").write_bytes(b"\0" * (64 * MIB))  # a day handed over, not yet taken
        memory = bench.TotalMemory()
        memory.start()
        subprocess.run([sys.executable, "-c", hold], check=True)
        total = memory.stop()
    finally:
        shutil.rmtree(folder)
    assert total >= alone + 300 + 64 - 16, (alone, total)
    assert memory.cpu["user"] + memory.cpu["sys"] > 0  # its own CPU, taken out of the measurement's
