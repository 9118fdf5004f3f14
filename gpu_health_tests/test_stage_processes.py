"""The stage processes of a pipelined run (gpu_health.steps.pipeline): forked from a fork server that lives as
long as the run, so that nothing outlives it and every stage's CPU time is this process's children's."""

import os
import resource
import time
from pathlib import Path

from gpu_health.steps.pipeline import run_stages, stage_loop

BURN = 0.15  # CPU seconds each stage spends on each chunk


def _burning_stage(k, chunks, inbox, outbox, reports):
    def setup():
        def work(i, c0, c1, handed):
            t0 = time.process_time()
            n = 0
            while time.process_time() - t0 < BURN:
                n += 1
            return {}, {f"cpu{k}": time.process_time() - t0}, i
        return work

    stage_loop(k, chunks, inbox, outbox, reports, setup)


def _children() -> dict[int, str]:
    """This process's live children: pid -> command line."""
    pids = set()
    for task in Path(f"/proc/{os.getpid()}/task").iterdir():
        pids |= {int(p) for p in (task / "children").read_text().split()}
    out = {}
    for pid in pids:
        try:
            out[pid] = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except FileNotFoundError:  # (gone meanwhile)
            pass
    return out


def test_the_stages_cpu_is_this_processs_childrens_and_no_process_outlives_the_run():
    before_children = _children()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    chunks = [(0, 1), (1, 2), (2, 3)]
    summary, seconds, done = {}, {}, []
    run_stages(_burning_stage, [(), (), ()], chunks, summary, seconds, done.append)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    assert done == [0, 1, 2]
    spent = sum(seconds.values())  # what the stages measured of their own work
    assert spent >= 3 * len(chunks) * BURN
    # the fork server reaped the stages and was reaped itself: their CPU is counted here (and nothing is left)
    assert (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime) >= spent
    # (multiprocessing's resource tracker, started with the run's queues, lives as long as this process: as before)
    left = {pid: cmd for pid, cmd in _children().items() if pid not in before_children and "resource_tracker" not in cmd}
    assert left == {}
