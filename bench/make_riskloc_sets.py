"""Generate RiskLoc's synthetic root-cause case sets S and L (causes of up to every dimension, anomalies covering most
of the cube) outside this repository, for ``bench/bench_rca.py --only RL``.

    python bench/make_riskloc_sets.py --mirror /work/.mirror/shaido987+riskloc/repo --out /work/scratch/rca/RL --num 100

The generator is RiskLoc's own ``generate_dataset.py`` (Kalander, "RiskLoc: Localization of Multi-dimensional Root
Causes by Weighted Risk", 2022; github.com/shaido987/riskloc, MIT licence), read from a git checkout or bare mirror of
that repository and run unchanged in a scratch folder, with the parameters its README gives for the paper's sets:

- ``S`` (seed 121): 5 dimensions (10 x 12 x 10 x 8 x 5 = 48,000 leaves), 1-3 causes of 1-5 dimensions, 1-3 elements
  each: two causes in five span 4-5 dimensions, and a cause on the 5-valued dimension can cover 60 % of the cube;
- ``L`` (seed 122): 4 dimensions (10 x 24 x 10 x 15 = 36,000 leaves), 1-5 causes, each a single leaf;
- ``W`` (seed 7, not a paper set): 4 dimensions (8 x 6 x 5 x 4 = 960 leaves), 1-2 causes of 2-4 elements: one
  cause can cover most of the cube.

``--num`` cases are made per set (the paper: 1000; the first N of the same seed are the paper's first N). Each set
is written as ``OUT/<set>/<case>.csv`` plus ``OUT/<set>/injection_info.csv`` -- the layout
:func:`gpu_health_tests.rca_benchmark.read_dataset` reads. Nothing generated enters the repository.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

# The README's command lines for the paper's sets (H, 24 M leaves of 6 dimensions per case, is left out: a
# memory benchmark, not a scoring set)
SETS = {
    "S": ["--seed", "121"],
    "L": ["--seed", "122", "--dims", "10", "24", "10", "15", "--noise-level", "0.0", "0.1", "--anomaly-severity",
          "0.5", "1.0", "--anomaly-deviation", "0.0", "0.0", "--num-anomaly", "1", "5", "--num-anomaly-elements",
          "1", "1", "--only-last-layer"],
    # not a paper set: a small cube (960 leaves) with 1-2 causes of 2-4 elements each, so that one cause can cover
    # 40-100 % of the cube (an anomaly named by its complement shows here)
    "W": ["--seed", "7", "--dims", "8", "6", "5", "4", "--num-anomaly", "1", "2", "--num-anomaly-elements", "2", "4"],
}


def _git_show(mirror: Path, path: str) -> str:
    return subprocess.run(["git", "-C", str(mirror), "show", f"HEAD:{path}"], check=True, capture_output=True,
                          text=True).stdout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mirror", type=Path, required=True, help="git directory of github.com/shaido987/riskloc")
    parser.add_argument("--out", type=Path, required=True, help="folder to write <set>/ into")
    parser.add_argument("--num", type=int, default=100, help="cases per set")
    parser.add_argument("--sets", nargs="+", default=["S", "L"], choices=list(SETS), help="sets to make (W: on request)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as work:
        (Path(work) / "utils").mkdir()
        (Path(work) / "utils" / "__init__.py").write_text("")
        (Path(work) / "utils" / "argument_parser.py").write_text(_git_show(args.mirror, "utils/argument_parser.py"))
        (Path(work) / "generate_dataset.py").write_text(_git_show(args.mirror, "generate_dataset.py"))
        for name in args.sets:
            command = [sys.executable, "generate_dataset.py", "--num", str(args.num), "--dataset-name", name,
                       "--data-root", str(args.out.resolve()), *SETS[name]]
            subprocess.run(command, cwd=work, check=True, stdout=subprocess.DEVNULL)
            print(f"{args.out / name}: {args.num} cases")


if __name__ == "__main__":
    main()
