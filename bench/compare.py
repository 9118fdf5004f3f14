"""Two revisions of the pipeline on the same days at the same moment: which one costs less CPU, and do they write
the same tables.

    python bench/compare.py 839d6a2 HEAD --landing /tmp/wk/landing          # 3 days, 8-hour pieces, 2 rounds
    python bench/compare.py main my-branch --landing DIR --days 1 --chunk-hours 24 --rounds 3

The machines this project runs on change speed by up to 2x within an hour (``bench/run.py``'s reference work took 1.3 s in
one run and 3.0 s in another), so two runs one after another differ by more than most changes do: the bulk week of
one commit measured 237.6 and 246.1 s back to back. Here each round runs both revisions at once, each ``gpu-health
run --direct --workers 1`` in a process of its own (on 2 cores, a core each), so both see the same machine; the
order they start in alternates. Each run's CPU seconds (user + system, from the kernel's accounting of the process
and its children) and wall are reported, and the ratio new / old per round: a change of 3-4 % that the week's
back-to-back runs could not show came out the same in both rounds of a pair (2026-12-03).

The revisions are checked out as git worktrees (anything ``git worktree add`` takes: a commit, a branch, a tag) in
a temporary folder, with this checkout's Python environment. The landing zone comes from ``bench/run.py --only
simulate --data DIR`` (its ``DIR/landing``) or ``gpu-health simulate``. Unless ``--no-tables``, every table of the
catalogue written by the two revisions in the first round is read back and compared (rows sorted by their first
columns): the tables that differ are named.

Prints one JSON line: ``{"name": "compare", "old": ..., "new": ..., "rounds": [{"old": {"cpu_seconds",
"seconds"}, "new": {...}, "cpu_ratio"}], "cpu_ratio_median", "differing_tables"}``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _worktree(rev: str, where: Path) -> Path:
    subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", "-f", str(where), rev], check=True,
                   capture_output=True, text=True)
    return where


def _start(tree: Path, landing: str, out: Path, start: str, end: str, chunk_hours: float):
    out.mkdir(parents=True)
    cmd = [sys.executable, "-m", "gpu_health.cli", "run", "--start", start, "--end", end, "--landing", landing,
           "--warehouse", f"sqlite:///{out / 'w.db'}", "--telemetry-dir", str(out / "w.telemetry"), "--direct",
           "--workers", "1", "--chunk-hours", str(chunk_hours), "--quiet"]
    env = dict(os.environ, PYTHONPATH=str(tree), PYTHONWARNINGS="ignore")
    with open(out / "run.log", "w") as log:  # (the child keeps its own copy of the descriptor)
        return subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=str(out)), time.perf_counter()


def _wait(proc, t0: float, out: Path) -> dict:
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - t0
    if os.waitstatus_to_exitcode(status) != 0:  # (its folder goes with the temporary one: its log's end here)
        tail = (out / "run.log").read_text(errors="replace")[-2000:]
        raise SystemExit(f"the run in {out} failed; the end of its log:\n{tail}")
    return {"cpu_seconds": round(usage.ru_utime + usage.ru_stime, 1), "seconds": round(seconds, 1)}


def differing_tables(a: Path, b: Path, name: str = "w") -> list[str]:
    """The catalogue's tables whose rows differ between the warehouses ``name``.db (and their telemetry stores,
    ``name``.telemetry) in ``a`` and ``b`` (``bench/run.py``'s week writes ``bulk``)."""
    import pandas as pd

    sys.path.insert(0, str(REPO))
    from gpu_health.catalog import CATALOG
    from gpu_health.storage.warehouse import Warehouse

    wa = Warehouse(f"sqlite:///{a / f'{name}.db'}", str(a / f"{name}.telemetry"))
    wb = Warehouse(f"sqlite:///{b / f'{name}.db'}", str(b / f"{name}.telemetry"))
    differ = []
    for table in sorted(CATALOG):
        x, y = wa.read_window(table), wb.read_window(table)
        cols = list(x.columns)
        if set(cols) != set(y.columns) or len(x) != len(y):
            differ.append(table)
            continue
        key = cols[:min(6, len(cols))]
        x = x.sort_values(key, kind="stable").reset_index(drop=True)
        y = y[cols].sort_values(key, kind="stable").reset_index(drop=True)
        try:
            pd.testing.assert_frame_equal(x, y, check_dtype=False)
        except AssertionError:
            differ.append(table)
    return differ


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("old")
    ap.add_argument("new")
    ap.add_argument("--landing", required=True, help="a landing zone (e.g. bench/run.py --only simulate's)")
    ap.add_argument("--start", default="2026-11-02T00:00:00Z")
    ap.add_argument("--days", type=float, default=3)
    ap.add_argument("--chunk-hours", type=float, default=8)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--no-tables", action="store_true", help="do not compare the tables written")
    args = ap.parse_args(argv)
    import pandas as pd

    start = pd.Timestamp(args.start)
    end = (start + pd.Timedelta(days=args.days)).isoformat()
    landing = str(Path(args.landing).resolve())
    rounds, differ = [], None
    with tempfile.TemporaryDirectory(prefix="gh_compare_") as tmp:
        tmp = Path(tmp)
        trees = {k: _worktree(rev, tmp / f"tree_{k}") for k, rev in (("old", args.old), ("new", args.new))}
        try:
            for r in range(args.rounds):
                order = ("old", "new") if r % 2 == 0 else ("new", "old")
                running = {k: _start(trees[k], landing, tmp / f"round{r}_{k}", start.isoformat(), end,
                                     args.chunk_hours) for k in order}
                done = {k: _wait(*running[k], tmp / f"round{r}_{k}") for k in order}
                rounds.append({**done, "cpu_ratio": round(done["new"]["cpu_seconds"] / done["old"]["cpu_seconds"], 3)})
            if not args.no_tables:
                differ = differing_tables(tmp / "round0_old", tmp / "round0_new")
        finally:
            for tree in trees.values():
                subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "-f", str(tree)], capture_output=True)
    out = {"name": "compare", "old": args.old, "new": args.new, "start": start.isoformat(), "end": end,
           "chunk_hours": args.chunk_hours, "rounds": rounds,
           "cpu_ratio_median": statistics.median(r["cpu_ratio"] for r in rounds), "differing_tables": differ}
    print(json.dumps(out))
    return out


if __name__ == "__main__":
    main()
