"""Rolling-origin backtest of the demand forecast (issue #18): MASE against seasonal-naive, 80 % interval coverage.

Data sets: the public traces with months of job history (gpu_health/traces/demand.py: Philly's sampled jobs,
Alibaba openb, Helios Earth's May) and a simulated quarter of the default 1,200-GPU cluster with demand growth
(gpu_health/sim/demand.py: the job plan, no telemetry). Prints one JSON line per data set x horizon:
{"dataset", "days", "horizon", "min_train", "step", "origins", "seasonal_naive": {mase, coverage},
 "dow_level": ..., "dow_trend": ..., "auto": ..., "mase_ratio"}: "auto" is the pipeline's rule (at each origin the
method chosen by backtest on the data before it), mase_ratio = auto's MASE / seasonal-naive's.
Run: PYTHONPATH=. .venv/bin/python bench/bench_forecast.py [--data-dir ../shared/real-data] [dataset ...]

Measured with the adaptive conformal level and the snaive_trend_mean candidate (auto = the pipeline's rule; bars:
MASE ratio <= 0.95, coverage 75-85 %; in brackets: before both, fixed percentiles and three methods):
  data set (days)                      horizon  auto MASE / seasonal-naive   80 % coverage
  philly (70)                          7 / 14   0.802 / 0.785 (same)          83.3 % / 81.4 %   (78.6 / 72.9)
  openb (149)                          28 / 84  0.728 / 0.543 (same)          65.1 % / 70.6 %   (57.4 / 57.1)
  helios (30 of 31 days, May 2020)     7        1.000 (too short to choose)   32.9 %            (32.9)
  sim_quarter us-east V100 (growth)    7 / 28   0.723 / 0.498 (0.953 / 0.918) 82.5 % / 78.6 %   (84.1 / 79.2)
  sim_quarter us-east H100 (growth)    7 / 28   0.861 / 0.748 (1.033 / 1.031) 69.8 % / 74.4 %   (66.7 / 66.7)
  sim_quarter eu-west V100 (flat)      7 / 28   1.000 / 1.000 (same)          82.5 % / 81.5 %   (71.4 / 77.4)
  sim_quarter eu-west H100 (flat)      7 / 28   0.801 / 0.795 (same)          68.3 % / 76.8 %   (73.0 / 78.6)
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

        d = plan_daily(load_scenario(QUARTER, name="sim_quarter"))
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
                    **{m: {"mase": round(r.mase, 3), "coverage": round(r.coverage, 3)} for m, r in res.items()},
                    "mase_ratio": round(res[AUTO].mase / res["seasonal_naive"].mase, 3)}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
