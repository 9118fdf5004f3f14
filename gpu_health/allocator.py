"""The C allocator of a process that runs steps over ranges: freed memory kept for the next day's arrays.

A step over a day allocates and frees the same large arrays again and again (1.7 million GPU rows: a float column
is 14 MB, a frame's block of ten of them 140 MB). glibc's malloc serves a request above its mmap threshold (128 KB,
rising by itself to 32 MB at most) with fresh pages from the kernel and gives them back when freed, and gives back
the top of its heap above its trim threshold; every such page is faulted in and zeroed by the kernel again on the
next use: system time that grows with the number of days a process runs.

:func:`keep_freed_memory` raises both thresholds, so that freed arrays stay in the heap and are reused: less system
time, for a higher peak (freed memory up to the trim threshold stays the process's; ``bench/run.py --only
week_bulk`` measures both).
Only for processes that run range steps (the bulk path, its stage processes, the Dagster path's stage processes):
not for a long-lived server.

:func:`collect_less` does the same for Python's cyclic garbage collector (see there).
"""

import ctypes
import ctypes.util
import functools
import gc

# mallopt(3) parameters (malloc.h)
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
# Requests at least this large still get pages of their own (returned when freed): larger than any array a step
# over a day allocates at 1,200 GPUs, and a bound on what one freed array keeps from the rest of the machine.
MMAP_THRESHOLD = 256 * 2**20
# The top of the heap is given back once this much of it is free: a day's working set, kept for the next day.
TRIM_THRESHOLD = 1024 * 2**20


@functools.cache
def keep_freed_memory() -> bool:
    """Tune this process's malloc (glibc only; elsewhere nothing happens) as the module says; True when it did.
    Once per process: mallopt applies to every later allocation."""
    name = ctypes.util.find_library("c")
    if not name:
        return False
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # not glibc (musl has no mallopt), or no C library to load
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD))


# A collection of the youngest generation once this many container objects were allocated (CPython: 700); the older
# generations after 10 of the one younger each (as CPython's default).
YOUNG_THRESHOLD = 10_000


def collect_less() -> None:
    """Spare this process's cyclic garbage collector the objects it holds now (the imported modules of pandas,
    SQLAlchemy, pandera: hundreds of thousands, ``gc.freeze``) and collect the young generation less often. A step
    over a day creates and drops millions of pandas objects, and every older-generation collection traversed the
    imports again, a few percent of a step's CPU spent finding nothing to free. Garbage in reference cycles is still collected, at most YOUNG_THRESHOLD allocations
    later. Call it once the process has imported what it runs, in a process of its own (a pipelined run's stage):
    what is alive then is never collected."""
    gc.collect()  # no garbage of the start-up among the objects frozen
    gc.freeze()
    gc.set_threshold(YOUNG_THRESHOLD, 10, 10)
