"""Days through a pipeline of processes: the plumbing both range paths share.

A run over a range cut into stages (:func:`gpu_health.steps.direct.stages`) runs each stage in a process of its own
(forked from a fork server: :func:`stage_context`), a day at a time: a stage starts a day once the stage before it
handed that day over, so on two cores the sources of one day are read while the loss tree of the day before is
computed and the alerts of the day before that. The bulk path (:mod:`gpu_health.steps.direct`) hands each day's
frames over with it; the Dagster path (:mod:`gpu_health.defs.range_runs`) only the day (each stage's run reads the
warehouse).

Both sides of it are here: :func:`stage_loop` in a stage's process, :func:`run_stages` in the parent, which
collects every stage's reports and raises the first error a stage reports (or the exit of one that died without a
word), after which no stage waits for ever. Between two stages, a :class:`Handover`.
"""

from __future__ import annotations

import contextlib
import io
import mmap
import os
import pickle
import queue
import shutil
import tempfile
import traceback
from collections.abc import Callable

from gpu_health.allocator import collect_less, keep_freed_memory


class Handover:
    """The days one stage hands the next: a queue holding one day at most (a stage that outruns the next, as the
    sources do, blocks instead of holding every day's frames, ~0.3 GB a day at 1,200 GPUs), each day's payload in a
    file of ``folder`` rather than through the queue's pipe.

    Through the pipe, a day's frames were pickled into one bytes object, written 64 KB at a time, read back into
    another and unpickled: copies of the 0.3 GB and thousands of context switches between two busy processes (in a
    profile of the bulk week on 2 cores, 13 % of the samples were in that pickling and piping). In a file, pickled
    with protocol 5, the arrays' memory is written once, out of band, and the next stage maps the file (privately:
    its writes stay its own) and unpickles arrays pointing into the mapping, copying nothing; it unlinks the file at
    once, so the memory goes when the frames do. Each table in a file of its own: a day's file kept mapped whole
    while the next stage kept one of its tables (14 days of KPI rows for the baselines) would hold the rest too.
    ``folder`` is best in memory (:func:`handover_folder`); a payload that cannot be written there (no room) goes
    through the pipe as before.

    A middle stage hands on the sources' frames it took in, unchanged (a day of GPU telemetry travels from the
    sources to the loss tree's stage and on to the diagnosis'): it keeps their files (``get(keep=True)``) and
    passes each such item's file on as it is (``put(..., passing=inbox)``) instead of pickling the frame into a
    new one (and a second copy of the frame in memory); the files of the
    day it does not pass on go once it handed the day on (:meth:`release`)."""

    ALIGN = 64  # each array's buffer starts on a cache line, as numpy's own allocations do

    def __init__(self, ctx, folder: str | None):
        self.queue, self.folder = ctx.Queue(maxsize=1), folder
        self._kept: dict[int, dict] = {}  # (receiving side) chunk -> {id(frame): (item, its file)} kept

    def put(self, i: int, payload, passing: "Handover | None" = None) -> None:
        """Hand chunk ``i``'s ``payload`` on. A list: an item each in a file of its own (an item's arrays keep only
        their own mapping alive); an item that ``passing`` kept from chunk ``i`` unchanged, as the file it came in."""
        if isinstance(payload, list):
            packed = ("list", [(passing is not None and passing._take(i, item)) or self._pack(item) for item in payload])
        else:
            packed = None if payload is None else self._pack(payload)
        self.queue.put((i, packed))

    def get(self, keep: bool = False):
        """(chunk index, payload), or ("error", None) when the stage before failed. ``keep``: the files of a
        list's items stay, for :meth:`put` to pass unchanged items on as they came, until :meth:`release`."""
        i, packed = self.queue.get()
        if packed is not None and packed[0] == "list":
            items = [(self._unpack(p, unlink=not keep), p) for p in packed[1]]
            if keep:
                self._kept[i] = {id(item[-1]): (item, p) for item, p in items if p[0] == "file"}
            return i, [item for item, _ in items]
        return i, None if packed is None else self._unpack(packed)

    def _take(self, i: int, item):
        """The file ``item`` came in, if it is an item kept from chunk ``i``: the same frame (the object itself, as
        the run's cache holds it) of the same table and window. It is then the next stage's to unlink."""
        kept = self._kept.get(i, {}).get(id(item[-1]))
        if kept is None or kept[0][-1] is not item[-1] or tuple(kept[0][:-1]) != tuple(item[:-1]):
            return None
        del self._kept[i][id(item[-1])]
        return kept[1]

    def release(self, i: int) -> None:
        """Unlink the files kept from chunk ``i`` that were not passed on: their mappings stay while this process
        holds their frames, and their memory goes with them."""
        for _, p in self._kept.pop(i, {}).values():
            with contextlib.suppress(FileNotFoundError):
                os.unlink(p[1])

    def fail(self) -> None:
        """Tell the next stage that no more days come, so that it ends instead of waiting for ever."""
        try:
            self.queue.put(("error", None), timeout=60)  # the next stage may be gone: the parent ends the run anyway
        except queue.Full:  # nobody left to tell
            pass

    def _pack(self, payload):
        if self.folder is None:
            return ("inline", payload)
        buffers: list[pickle.PickleBuffer] = []
        pickled = io.BytesIO()
        _SharedTextPickler(pickled, protocol=5, buffer_callback=buffers.append).dump(payload)
        inband = pickled.getbuffer()
        spans, at, path = [], 0, None
        try:
            fd, path = tempfile.mkstemp(dir=self.folder, suffix=".day")
            with os.fdopen(fd, "wb") as out:
                for part in (memoryview(inband), *(b.raw() for b in buffers)):
                    pad = -at % self.ALIGN
                    out.write(b"\0" * pad)
                    spans.append((at + pad, part.nbytes))
                    out.write(part)
                    at += pad + part.nbytes
        except OSError:  # no room (a small /dev/shm) or no folder: this payload through the pipe
            if path is not None:
                os.unlink(path)
            return ("inline", payload)
        return ("file", path, spans)

    @staticmethod
    def _unpack(packed, unlink: bool = True):
        if packed[0] == "inline":
            return packed[1]
        _, path, spans = packed
        with open(path, "rb") as f:
            mapped = mmap.mmap(f.fileno(), 0, flags=mmap.MAP_PRIVATE | getattr(mmap, "MAP_POPULATE", 0),
                               prot=mmap.PROT_READ | mmap.PROT_WRITE)
        if unlink:
            os.unlink(path)
        view = memoryview(mapped)
        (at, n), *rest = spans
        return pickle.loads(view[at:at + n], buffers=[view[a:a + m] for a, m in rest])


class _SharedTextPickler(pickle.Pickler):
    """Pickles a text column (pandas ``string[python]`` array, or an object array) whose rows share a few
    thousand string objects -- as every text column read from the landing zone or the telemetry store does
    (``arrow_text.text_values``) -- as each row's integer code (out of band, like any array) and the distinct
    objects once (:func:`_shared_objects` rebuilds it), instead of a reference per row pickled and unpickled one by
    one. Rows that held one object still do, so identity-based shortcuts (``codes.factorize``) keep working, and
    both ends do less (each day is unpickled by two stages). Any other object pickles as it always does."""

    def reducer_override(self, obj):
        import numpy as np
        import pandas as pd

        if isinstance(obj, pd.arrays.StringArray) and obj.dtype == _text_dtype():
            objects, text = obj._ndarray, True
        elif type(obj) is np.ndarray and obj.dtype == object:
            objects, text = obj, False
        else:
            return NotImplemented
        if objects.size < _SHARED_MIN_ROWS or not objects.flags.c_contiguous:
            return NotImplemented
        from gpu_health.codes import _addresses

        codes, distinct = pd.factorize(_addresses(objects.reshape(-1)))  # by object identity, not by value
        if len(distinct) > objects.size // 2:  # mostly an object per row (text read from SQL): nothing to share
            return NotImplemented
        # codes are numbered in order of first appearance: a code's first row is where it exceeds all before it
        first = np.flatnonzero(np.r_[True, codes[1:] > np.maximum.accumulate(codes)[:-1]])
        return _shared_objects, (codes.astype(np.int32), objects.reshape(-1)[first], objects.shape, text)


_SHARED_MIN_ROWS = 1_024  # below it the codes save nothing worth a factorization


def _text_dtype():
    """The dtype :func:`arrow_text.wrap_strings` rebuilds (``string[python]``, missing values ``pd.NA``)."""
    from gpu_health.arrow_text import _TEXT_PROTOTYPE

    return _TEXT_PROTOTYPE.dtype


def _shared_objects(codes, distinct, shape, text: bool):
    """The array :class:`_SharedTextPickler` pickled: ``distinct[codes]`` in ``shape``, as a ``string[python]``
    array when ``text`` (its values were checked when it was built)."""
    values = distinct.take(codes).reshape(shape)
    if not text:
        return values
    from gpu_health.arrow_text import wrap_strings

    return wrap_strings(values)


# Room a run's hand-overs may take in memory-backed /dev/shm before they go to the temporary directory instead: two
# days in flight per hand-over at 1,200 GPUs are ~1.4 GB; a container's default /dev/shm (64 MB) is too small.
SHM_ROOM = 2 * 2**30


_FOLDER_PREFIX = "gpu-health-days-"


def handover_folder() -> str | None:
    """A fresh folder for a run's hand-over files, named for the process running it: in /dev/shm when it has
    :data:`SHM_ROOM` free, else in the temporary directory (its pages stay in the page cache: the files live
    seconds). The folders of runs whose process is gone (killed before it could remove its folder: in /dev/shm the
    files would hold memory until the machine restarts) are removed first. None where files cannot be mapped
    privately (not POSIX): the payloads go through the pipe."""
    if not hasattr(mmap, "MAP_PRIVATE"):
        return None
    base = None
    try:
        free = os.statvfs("/dev/shm")
        if free.f_bavail * free.f_frsize >= SHM_ROOM and os.access("/dev/shm", os.W_OK):
            base = "/dev/shm"
    except OSError:  # no /dev/shm (not Linux)
        pass
    where = base or tempfile.gettempdir()
    for name in os.listdir(where):
        pid = _folder_pid(name)
        if pid is not None and not _alive(pid):
            shutil.rmtree(os.path.join(where, name), ignore_errors=True)
    return tempfile.mkdtemp(prefix=f"{_FOLDER_PREFIX}{os.getpid()}-", dir=where)


def handover_folders(pids) -> list[str]:
    """The hand-over folders (:func:`handover_folder`) that the processes ``pids`` made and still have, wherever
    they were made (``bench/run.py`` counts their files as the run's memory)."""
    out = []
    for base in {"/dev/shm", tempfile.gettempdir()}:
        with contextlib.suppress(OSError):
            out += [os.path.join(base, name) for name in os.listdir(base) if _folder_pid(name) in pids]
    return out


def _folder_pid(name: str) -> int | None:
    """The process a hand-over folder's name says made it; None for any other name."""
    pid = name[len(_FOLDER_PREFIX):].split("-", 1)[0] if name.startswith(_FOLDER_PREFIX) else ""
    return int(pid) if pid.isdigit() else None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's
        return True
    return True


def stage_loop(k: int, chunks, inbox, outbox, reports, setup: Callable) -> None:
    """Stage ``k`` over ``chunks`` in its process. ``setup()`` builds the stage's worker ``work(i, start, end,
    handed)`` -> (summary fragment, step seconds, what to hand the next stage); for each chunk, wait for the stage
    before to hand it over (``inbox``, a :class:`Handover`: (chunk index, what it handed)), work, hand the chunk on
    (``outbox``) and report (stage, chunk index, fragment, seconds) on ``reports``. On an error: report ("error",
    stage, text) and hand "error" on."""
    keep_freed_memory()
    try:
        work = setup()
        collect_less()
        for i, (c0, c1) in enumerate(chunks):
            handed = None
            if inbox is not None:
                got, handed = inbox.get(keep=outbox is not None)
                if got == "error":  # a stage before failed: tell the next one, which waits on this one
                    _hand_on_error(outbox)
                    return
            fragment, seconds, forward = work(i, c0, c1, handed)
            if outbox is not None:
                outbox.put(i, forward, passing=inbox)
            if inbox is not None:
                inbox.release(i)
            reports.put((k, i, fragment, seconds))
    except Exception:  # noqa: BLE001 -- reported to the parent, which raises it
        reports.put(("error", k, traceback.format_exc()))
        _hand_on_error(outbox)


def _hand_on_error(outbox) -> None:
    if outbox is not None:
        outbox.fail()


def _next(reports, workers):
    """The stages' next report; an error when one died without reporting."""
    while True:
        try:
            return reports.get(timeout=5)
        except queue.Empty:
            for k, worker in enumerate(workers):
                if not worker.is_alive() and worker.exitcode != 0:
                    return ("error", k, f"stage {k}'s process exited with code {worker.exitcode} without finishing")


def merge_findings(summary: dict, fragment: dict) -> None:
    """A stage's findings about a chunk (``failed_checks``, ``quarantined_files``, ``dropped_columns``,
    ``failed_partitions``) into the run's summary, each once."""
    for name in fragment.get("failed_checks", []):
        if name not in summary.setdefault("failed_checks", []):
            summary["failed_checks"].append(name)
    for entry in fragment.get("quarantined_files", []):
        if entry not in summary.setdefault("quarantined_files", []):
            summary["quarantined_files"].append(entry)
    for table, cols in fragment.get("dropped_columns", {}).items():
        summary.setdefault("dropped_columns", {}).setdefault(table, {}).update(cols)
    for entry in fragment.get("failed_partitions", []):
        if entry not in summary.setdefault("failed_partitions", []):
            summary["failed_partitions"].append(entry)


def stage_context(preload=()):
    """The multiprocessing context stage processes start from: forked by a fork server (a fresh interpreter started
    per run, single-threaded, never the parent itself) that imported ``preload`` first, so each stage starts with
    the modules its steps run (pandas, pyarrow, SQLAlchemy, pandera, the pipeline's) imported once, not once per
    stage: seconds of imports paid once per run instead of once per stage. A spawned process imported them all
    itself. :func:`run_stages` stops the server when its stages are done (:func:`_stop_fork_server`)."""
    import multiprocessing

    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(list(preload))  # (a fork server already running keeps its own)
    return ctx


def _stop_fork_server() -> None:
    """Stop the fork server once a run's stages are joined, and reap it: the CPU time of the server and of the stages
    it forked (and reaped) then counts among this process's children, where ``time``, ``wait4`` and bench/run.py
    read it; left running, the server would outlive the run until this process exits, and its stages' CPU would be
    counted nowhere. (multiprocessing's own stop, private but unchanged since Python 3.4; without it the server
    still exits with its parent.)"""
    from multiprocessing import forkserver

    stop = getattr(getattr(forkserver, "_forkserver", None), "_stop", None)
    if stop is not None:
        stop()


def run_stages(target: Callable, stage_args: list[tuple], chunks, summary: dict, seconds: dict,
               on_chunk: Callable[[int], None], on_stage: Callable[[int, int], None] | None = None,
               preload: tuple[str, ...] = ()) -> None:
    """One process per stage (:func:`stage_context`; ``preload``: the modules its fork server imports, beside
    ``target``'s), ``target(k, *stage_args[k], chunks, inbox, outbox, reports)`` (a module-level
    function calling :func:`stage_loop`), joined by hand-overs (:class:`Handover`) that hold one day at most; each
    report's findings merged into ``summary`` and its step seconds added to ``seconds``; ``on_stage(k, i)`` when
    stage ``k`` finished chunk ``i`` (every stage before it has finished it too), then ``on_chunk(i)`` when the last
    stage finished chunk ``i``. Raises ``RuntimeError`` with a stage's traceback when one fails."""
    ctx = stage_context((target.__module__, *preload))
    reports = ctx.Queue()
    folder = handover_folder()
    handovers = [Handover(ctx, folder) for _ in stage_args[1:]]
    last = len(stage_args) - 1
    workers = [ctx.Process(target=target, daemon=True,
                           args=(k, *args, chunks, handovers[k - 1] if k > 0 else None,
                                 handovers[k] if k < last else None, reports))
               for k, args in enumerate(stage_args)]
    for worker in workers:
        worker.start()
    try:
        finished = 0
        while finished < len(chunks):
            got = _next(reports, workers)
            if got[0] == "error":
                raise RuntimeError(f"stage {got[1]} of the pipelined run failed:\n{got[2]}")
            k, i, fragment, secs = got
            merge_findings(summary, fragment)
            for name, sec in secs.items():
                seconds[name] = seconds.get(name, 0.0) + sec
            if on_stage is not None:
                on_stage(k, i)
            if k == last:
                finished += 1
                on_chunk(i)
    finally:
        for worker in workers:
            worker.join(timeout=60)
            if worker.is_alive():
                worker.terminate()
                worker.join(timeout=10)
        _stop_fork_server()
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)  # the days a failed run's stages never took
