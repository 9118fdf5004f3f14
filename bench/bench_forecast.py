"""Rolling-origin backtest of the demand forecast: MASE against seasonal-naive, 80 % interval coverage.

Data sets: the public traces with months of job history (gpu_health/traces/demand.py: Philly's sampled jobs,
Alibaba openb, Helios Earth's May) and a simulated quarter of the default 1,200-GPU cluster with demand growth
(gpu_health/sim/demand.py: the job plan, no telemetry). Prints one JSON line per data set x horizon:
{"dataset", "days", "horizon", "min_train", "step", "origins", "seasonal_naive": {mase, coverage, coverage_se},
 "dow_level": ..., "dow_trend": ..., "auto": ..., "mase_ratio"}: "auto" is the pipeline's rule (at each origin the
method chosen by backtest on the data before it), mase_ratio = auto's MASE / seasonal-naive's.
Run from the repo root (PYTHONPATH=. so this checkout's gpu_health is imported, not an installed one):
  PYTHONPATH=. .venv/bin/python bench/bench_forecast.py [--data-dir ../shared/real-data] [dataset ...]

Measured (auto = the pipeline's rule; bars: MASE ratio <= 0.95, coverage 75-85 %; coverage +- its standard error
over origins; in brackets: the simulated quarter planned from its first day, whose first Monday is a warm-up):
  data set (days)                      horizon  auto MASE / seasonal-naive   80 % coverage
  philly (70)                          7 / 14   0.802 / 0.785                 83.3 +- 6.8 / 81.4 +- 6.6 %
  openb (149)                          28 / 84  0.728 / 0.543                 65.1 +- 7.6 / 70.6 +- 14.5 %
  helios (30 of 31 days, May 2020)     7        1.000 (too short to choose)   32.9 +- 6.4 %
  sim_quarter us-east V100 (growth)    7 / 28   0.784 / 0.590 (0.723 / 0.498) 79.4 +- 6.8 / 61.9 +- 14.7 % (82.5 / 78.6)
  sim_quarter us-east H100 (growth)    7 / 28   0.936 / 0.873 (0.861 / 0.748) 66.7 +- 9.8 / 55.4 +- 12.1 % (69.8 / 74.4)
  sim_quarter eu-west V100 (flat)      7 / 28   0.914 / 0.956 (1.000 / 1.000) 81.0 +- 4.1 / 76.8 +- 5.7 % (82.5 / 81.5)
  sim_quarter eu-west H100 (flat)      7 / 28   0.783 / 0.773 (0.801 / 0.795) 68.3 +- 7.1 / 81.5 +- 6.3 % (68.3 / 76.8)
"""

import argparse
import json

import pandas as pd

from gpu_health.metrics.forecast import AUTO, METHODS, backtest

QUARTER = {"seed": 7, "start": "2026-08-03T00:00:00Z", "end": "2026-11-02T00:00:00Z",
           # +5 % a week of job arrivals in us-east over the quarter (x1.8 by its end): growth that saturates it
           "incidents": [{"kind": "demand_growth", "start": "2026-08-03T00:00:00Z", "duration": "91d",
                          "magnitude": 0.05, "scope": {"region": "us-east"}}]}
# data set -> (horizon, min_train, step) runs: the longest horizon the history allows with >= 4 origins, and 1 week
RUNS = {"sim_quarter": [(28, 28, 7), (7, 28, 7)], "philly": [(14, 28, 7), (7, 28, 7)],
        "openb": [(84, 28, 7), (28, 28, 7)], "helios": [(7, 14, 1)]}


def series(name: str, data_dir: str) -> dict[str, pd.Series]:
    if name == "sim_quarter":
        from gpu_health.sim.demand import plan_daily
        from gpu_health.sim.scenario import load_scenario

        # planned from a week before the quarter, that week then dropped: plan_daily counts a job in the week it
        # was submitted in, so a plan's first day lacks the jobs submitted before it that still run (planned from
        # the quarter's start, its first Monday is the lowest Monday of all four series, 6-9 % under the others:
        # a warm-up, not demand; the days after it are the same either way)
        start = pd.Timestamp(QUARTER["start"])
        d = plan_daily(load_scenario(QUARTER, name="sim_quarter"), start - pd.Timedelta(days=7))
        d = d[pd.to_datetime(d["date"], utc=True) >= start]
        g = d.groupby(["region", "sku", "date"])["demand_gpu_hours"].sum()
        return {f"sim_quarter/{r}/{s}": g.loc[(r, s)] for r, s in g.index.droplevel(2).unique()}
    from gpu_health.traces.demand import LOADERS

    return {name: LOADERS[name](data_dir)["demand_gpu_hours"]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("datasets", nargs="*", default=list(RUNS))
    ap.add_argument("--data-dir", default="../shared/real-data")
    args = ap.parse_args(argv)
    for ds in args.datasets:
        for key, y in series(ds, args.data_dir).items():
            for h, min_train, step in RUNS[ds]:
                res = {m: backtest(y, m, horizon=h, min_train=min_train, step=step) for m in (*METHODS, AUTO)}
                print(json.dumps({
                    "dataset": key, "days": int(y.notna().sum()), "horizon": h, "min_train": min_train, "step": step,
                    "origins": res[AUTO].origins,
                    **{m: {"mase": round(r.mase, 3), "coverage": round(r.coverage, 3),
                           "coverage_se": round(r.coverage_se, 3)} for m, r in res.items()},
                    "mase_ratio": round(res[AUTO].mase / res["seasonal_naive"].mase, 3)}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
