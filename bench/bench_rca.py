"""Score drill_down on the public multi-dimensional root-cause benchmarks.

    python bench/bench_rca.py --data /work/scratch/rca            # B0 and RS, every case
    python bench/bench_rca.py --data DIR --limit 20               # the first 20 cases of each B0 setting
    python bench/bench_rca.py --data DIR --only RS --json
    python bench/bench_rca.py --data DIR --only RL --limit 50     # RiskLoc's generated sets S and L

``DIR`` holds ``B0/`` (Squeeze's semi-synthetic dataset B0, ISSRE 2019: nine
settings ``B_cuboid_layer_L_n_ele_K`` of 100 cases, 21,600 leaves each) and
``RS/`` (RobustSpot's real incidents, a ratio KPI: ``anomaly.yaml`` and 135
csv files); ``--only NAME`` reads ``DIR/NAME/<set>/`` in B0's layout (``RL``:
RiskLoc's synthetic sets S and L, made by its own generator with
bench/make_riskloc_sets.py). None is in this repository; docs/rca.md says
where to get them. Every case is localized by
:func:`gpu_health.diagnosis.drilldown.drill_down` with its **default
parameters** -- one parameter set for both datasets -- and scored as the
benchmarks' authors score: a predicted cause counts only when it equals a true
one exactly (every dimension and value); micro F1, precision and recall over
all cases. RS is drilled as the ratio it is: numerator ``cnt - value`` and
denominator ``cnt`` (``--rs-summed`` drills the ratio summed over leaves
instead, the old, wrong treatment, for comparison).

Prints a Markdown table (per B0 setting, B0, RS) with F1, P, R, TP/FP/FN and
seconds per case (drill_down only, reading excluded).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gpu_health.diagnosis.drilldown import drill_down  # noqa: E402
from gpu_health_tests import rca_benchmark as rca  # noqa: E402


def localize(case: rca.Case, ratio: bool) -> tuple[frozenset[str], float]:
    dims = rca.dimension_columns(case.frame)
    start = time.perf_counter()
    if ratio:
        causes = drill_down(case.frame, dims, "real_a", "predict_a", actual_base="real_b", expected_base="predict_b")
    else:
        causes = drill_down(case.frame, dims, "real", "predict")
    seconds = time.perf_counter() - start
    return frozenset(rca.cause_string(c.elements) for c in causes), seconds


def score(rows: list[tuple[rca.Case, frozenset[str], float]]) -> dict[str, float]:
    result = rca.f1_score([p for _, p, _ in rows], [c.root_causes for c, _, _ in rows])
    result["cases"] = len(rows)
    result["seconds_per_case"] = sum(s for _, _, s in rows) / max(len(rows), 1)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, required=True, help="folder holding B0/ and RS/")
    parser.add_argument("--only", help="one dataset only: B0, RS, or a folder of DIR in B0's layout (RL)")
    parser.add_argument("--limit", type=int, default=0, help="first N cases of each B0 (or generated) setting (0: all)")
    parser.add_argument("--rs-summed", action="store_true", help="drill RS's ratio summed over leaves")
    parser.add_argument("--json", action="store_true", help="also print one JSON line per row")
    parser.add_argument("--misses", action="store_true", help="print every case scored below F1 = 1")
    args = parser.parse_args()

    table: list[tuple[str, dict[str, float]]] = []
    misses = []
    if args.only != "RS":
        name = args.only or "B0"
        cases = rca.read_dataset(args.data / name)
        if args.limit:
            kept: dict[str, int] = {}
            cases = [c for c in cases if kept.setdefault(c.setting, 0) < args.limit and not kept.update(
                {c.setting: kept[c.setting] + 1})]
        rows = [(c, *localize(c, ratio=False)) for c in cases]
        for setting in sorted({c.setting for c in cases}):
            table.append((f"{name} {setting}", score([r for r in rows if r[0].setting == setting])))
        table.append((name, score(rows)))
        misses += [r for r in rows if r[1] != r[0].root_causes]
    if args.only in (None, "RS"):
        cases = rca.read_rs_dataset(args.data / "RS")
        rows = [(c, *localize(c, ratio=not args.rs_summed)) for c in cases]
        table.append(("RS" + (" (summed ratio)" if args.rs_summed else ""), score(rows)))
        misses += [r for r in rows if r[1] != r[0].root_causes]

    print("| data | cases | F1 | precision | recall | TP / FP / FN | s / case |")
    print("|---|---|---|---|---|---|---|")
    for name, s in table:
        print(f"| {name} | {s['cases']} | {s['f1']:.3f} | {s['precision']:.3f} | {s['recall']:.3f} | "
              f"{s['tp']} / {s['fp']} / {s['fn']} | {s['seconds_per_case']:.3f} |")
    if args.json:
        for name, s in table:
            print(json.dumps({"name": name, **s}))
    if args.misses:
        for case, predicted, _ in misses:
            print(f"{case.setting} {case.timestamp}: true {sorted(case.root_causes)} predicted {sorted(predicted)}")


if __name__ == "__main__":
    main()
