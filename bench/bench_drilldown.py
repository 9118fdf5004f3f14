"""Time drill_down on ~50k leaves x 8 dimensions with one injected intersection cause.

Prints one JSON line: {"name", "rows", "dimensions", "seconds", "causes"}.
Run: .venv/bin/python bench/bench_drilldown.py [rows]
"""

import json
import sys
import time

import numpy as np
import pandas as pd

from gpu_health.diagnosis.drilldown import drill_down

DIMENSIONS = {
    "region": 2,
    "node": 80,
    "sku": 3,
    "driver_version": 4,
    "framework_version": 5,
    "queue": 6,
    "team": 12,
    "model_type": 20,
}


def leaves(rows: int, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    frame = pd.DataFrame(
        {dim: rng.integers(0, card, rows) for dim, card in DIMENSIONS.items()}
    )
    frame["region"] = np.where(frame["node"] < 40, "us-east", "us-west")
    frame["node"] = "n" + frame["node"].astype(str)
    frame = frame.drop_duplicates(list(DIMENSIONS)).reset_index(drop=True)
    frame["expected"] = rng.gamma(2.0, 30.0, len(frame))
    frame["actual"] = frame["expected"] * rng.normal(1.0, 0.1, len(frame)).clip(0)
    cause = (frame["region"] == "us-east") & (frame["driver_version"] == 2)
    frame.loc[cause, "actual"] *= 1.8
    return frame


def main() -> None:
    rows = int(sys.argv[1]) if len(sys.argv) > 1 else 50_000
    frame = leaves(rows)
    start = time.perf_counter()
    causes = drill_down(frame, list(DIMENSIONS))
    seconds = time.perf_counter() - start
    print(json.dumps({
        "name": "drill_down",
        "rows": len(frame),
        "dimensions": len(DIMENSIONS),
        "seconds": round(seconds, 3),
        "causes": [c.label() for c in causes],
    }))


if __name__ == "__main__":
    main()
