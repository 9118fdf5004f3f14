"""Score RiskLoc's published method on the same generated case sets as ``bench/bench_rca.py --only DIR``: the
"best published method" column of docs/rca.md.

    python bench/bench_riskloc.py --mirror /work/.mirror/shaido987+riskloc/repo --data /work/scratch/rca/RL

RiskLoc (Kalander, 2022; github.com/shaido987/riskloc, MIT licence) is read from a git checkout or bare mirror of that
repository -- its ``algorithms/riskloc.py`` and the ``utils`` modules it imports -- into a scratch folder and run
unchanged with its own defaults (``derived=False``: the sets' KPI is additive) and its own post-processing of the
causes it returns. The scoring is this project's (``gpu_health_tests.rca_benchmark.f1_score``, exact match of the
cause sets), so the two methods' F1 are comparable case by case. Nothing of RiskLoc enters the repository.
"""

from __future__ import annotations

import argparse
import importlib
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from gpu_health_tests import rca_benchmark as rca  # noqa: E402

# the files of RiskLoc's repository its localisation needs (the package markers are this script's: the repository
# runs them from its root)
SOURCES = ("algorithms/riskloc.py", "utils/element_scores.py", "utils/evaluation.py")


def _load(mirror: Path, work: Path):
    for path in SOURCES:
        target = work / path
        target.parent.mkdir(parents=True, exist_ok=True)
        (target.parent / "__init__.py").touch()
        target.write_text(subprocess.run(["git", "-C", str(mirror), "show", f"HEAD:{path}"], check=True,
                                         capture_output=True, text=True).stdout)
    sys.path.insert(0, str(work))
    return (importlib.import_module("algorithms.riskloc").riskloc,
            importlib.import_module("utils.evaluation").root_cause_postprocessing)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mirror", type=Path, required=True, help="git directory of github.com/shaido987/riskloc")
    parser.add_argument("--data", type=Path, required=True, help="a folder of case sets in B0's layout (RL, RLW)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as work:
        riskloc, postprocess = _load(args.mirror, Path(work))
        rows: dict[str, list] = {}
        for case in rca.read_dataset(args.data):
            frame = case.frame.copy()
            dims = rca.dimension_columns(frame)
            frame[dims] = frame[dims].astype(str)
            t = time.perf_counter()
            predicted = frozenset(postprocess(riskloc(frame, dims, derived=False, debug=False), "riskloc"))
            rows.setdefault(case.setting, []).append((predicted, case.root_causes, time.perf_counter() - t))
    print("| data | cases | F1 | precision | recall | TP / FP / FN | s / case |\n|---|---|---|---|---|---|---|")
    for setting, r in sorted(rows.items()):
        s = rca.f1_score([p for p, _, _ in r], [t for _, t, _ in r])
        print(f"| RiskLoc {args.data.name} {setting} | {len(r)} | {s['f1']:.3f} | {s['precision']:.3f} | "
              f"{s['recall']:.3f} | {s['tp']} / {s['fp']} / {s['fn']} | {sum(x for _, _, x in r) / len(r):.3f} |")


if __name__ == "__main__":
    main()
