"""The range processes' memory tuning: freed arrays are reused, not faulted in from the kernel again; the garbage
collector spares what the process imported."""

import subprocess
import sys
import textwrap

import pytest

from gpu_health.allocator import keep_freed_memory

# An array of 100 MB, written and freed: glibc's default gives its pages back to the kernel (it is above the 32 MB
# its dynamic mmap threshold can reach), so the process's resident memory drops by its size and the next such array
# is faulted in and zeroed again; tuned, the pages stay with the process for the next array.
_PROBE = textwrap.dedent("""
    import os, sys
    import numpy as np
    from gpu_health.allocator import keep_freed_memory
    if sys.argv[1] == "tuned":
        assert keep_freed_memory()
    def resident():
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    a = np.ones(100 * 2**20 // 8)
    before = resident()
    del a
    print((before - resident()) // 2**20)
""")


def _released_mib(mode: str) -> int:
    out = subprocess.run([sys.executable, "-c", _PROBE, mode], capture_output=True, text=True, check=True)
    return int(out.stdout.strip())


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_a_freed_array_is_reused_once_the_allocator_keeps_freed_memory():
    if not keep_freed_memory():
        pytest.skip("not glibc")
    assert _released_mib("default") >= 90  # the premise: by default the freed pages go back to the kernel
    assert _released_mib("tuned") < 10


# A stage process's collector after collect_less: what was alive is frozen (never traversed again), the young
# generation collected every YOUNG_THRESHOLD allocations -- and a reference cycle dropped later is still collected
# within that many allocations.
_COLLECTOR = textwrap.dedent("""
    import gc, weakref
    from gpu_health.allocator import YOUNG_THRESHOLD, collect_less
    before = gc.get_freeze_count()
    collect_less()
    assert gc.get_freeze_count() > before and gc.get_threshold()[0] == YOUNG_THRESHOLD
    class Node:
        pass
    a, b = Node(), Node()
    a.other, b.other = b, a
    alive = weakref.ref(a)
    del a, b
    assert alive() is not None  # a cycle: reference counting alone never frees it
    keep = [[] for _ in range(2 * YOUNG_THRESHOLD)]
    print(alive() is None)
""")


def test_a_stage_collects_less_often_but_still_collects_its_cycles():
    out = subprocess.run([sys.executable, "-c", _COLLECTOR], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "True"
