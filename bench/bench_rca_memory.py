"""Peak memory and wall time of drill_down, with its defaults, on a large 5-dimension cube.

    python bench/bench_rca_memory.py                 # 2.4 M and 4.8 M leaves
    python bench/bench_rca_memory.py --leaves 24M    # the 24 M-leaf cube alone (about 4 GB at most)

Each size runs in a fresh subprocess, so its peak resident set (``resource.getrusage(...).ru_maxrss``) is its own:
building the frame, preparing the leaves and the search, all included. The cube is every combination of five
dimensions (cardinalities in ``SIZES``), a lognormal forecast per leaf, 5 % relative noise, and one planted cause
of two dimensions (``d0=0 & d3=1`` up by half); the found causes are printed, so a run shows it still finds it.
Prints one JSON line per size: {"leaves", "cards", "seconds", "cpu_seconds", "peak_rss_mb", "causes"}.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

SIZES = {
    "2.4M": (20, 15, 25, 16, 20),
    "4.8M": (40, 15, 25, 16, 20),
    "24M": (40, 30, 25, 20, 40),
}


def cube(cards: tuple[int, ...], seed: int = 0):
    import numpy as np
    import pandas as pd

    rng = np.random.default_rng(seed)
    n = int(np.prod(cards))
    columns = {}
    rest = np.arange(n, dtype=np.int64)
    for j in range(len(cards) - 1, -1, -1):
        rest, code = np.divmod(rest, cards[j])
        columns[f"d{j}"] = code.astype(np.int16)
    del rest
    frame = pd.DataFrame({f"d{j}": columns[f"d{j}"] for j in range(len(cards))})
    expected = rng.lognormal(3.0, 1.0, n)
    actual = expected * (1.0 + 0.05 * rng.standard_normal(n))
    cause = (frame["d0"].to_numpy() == 0) & (frame["d3"].to_numpy() == 1)
    actual[cause] *= 1.5
    frame["expected"], frame["actual"] = expected, actual
    return frame


def child(size: str) -> None:
    from gpu_health.diagnosis.drilldown import drill_down

    cards = SIZES[size]
    start = time.perf_counter()
    frame = cube(cards)
    causes = drill_down(frame, [f"d{j}" for j in range(len(cards))])
    seconds = time.perf_counter() - start
    usage = resource.getrusage(resource.RUSAGE_SELF)
    # CPU time (user + system) as well as wall time: on a shared, loaded machine the wall time measures the load
    print(json.dumps({"leaves": len(frame), "cards": cards, "seconds": round(seconds, 1),
                      "cpu_seconds": round(usage.ru_utime + usage.ru_stime, 1),
                      "peak_rss_mb": round(usage.ru_maxrss / 1024),  # kilobytes on Linux
                      "causes": [c.label() for c in causes]}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--leaves", choices=sorted(SIZES), action="append",
                        help="cube size (repeatable; default 2.4M and 4.8M)")
    parser.add_argument("--child", choices=sorted(SIZES), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child)
        return
    for size in args.leaves or ["2.4M", "4.8M"]:  # one at a time: each big case holds GBs
        result = subprocess.run([sys.executable, __file__, "--child", size], capture_output=True, text=True)
        print(result.stdout.strip() or result.stderr.strip().splitlines()[-1], flush=True)


if __name__ == "__main__":
    main()
