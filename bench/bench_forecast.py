"""Rolling-origin backtest of the demand forecast: MASE, 80 % / 95 % interval coverage, interval score.

Data sets: the public traces with months of job history (gpu_health/traces/demand.py: Philly's sampled jobs,
Alibaba openb, Helios Earth's May) and a simulated quarter of the default 1,200-GPU cluster with demand growth
(gpu_health/sim/demand.py: the job plan, no telemetry). Daily rolling origins from MIN_TRAIN days of history to
the series' last day but one, each forecasting horizons 1-84 days and scored on the days that came
(backtest(..., partial=True)): every origin the history allows. Per series it backtests seasonal-naive and
"auto", the pipeline's rule (at each origin the method chosen by backtest on the data before it), and prints one
JSON line {"dataset", "days", "horizon", "min_train", "step", "origins", "outcomes", "seasonal_naive": {...},
"auto": {...}, "mase_ratio", "interval_score_ratio", "interval_score95_ratio"} (per method, "by_construction" /
"by_construction95": the coverage split-conformal's finite-sample rank gives its intervals, rank / (n + 1)); with --table, then the backtest
table (Markdown) and its pooled line; with --doc FILE, the table also replaces the block between
TABLE_BEGIN / TABLE_END in FILE (docs/capacity.md holds what this printed, never figures typed by hand).
Run from the repo root (PYTHONPATH=. so this checkout's gpu_health is imported, not an installed one):
  PYTHONPATH=. .venv/bin/python bench/bench_forecast.py --table [--doc docs/capacity.md] [--cache DIR]
      [--data-dir ../shared/real-data] [dataset ...]
Measured: docs/capacity.md.
"""

import argparse
import json
import re
from pathlib import Path

import numpy as np
import pandas as pd

from gpu_health.metrics.forecast import AUTO, HORIZON_DAYS, METHODS, backtest, wilson

QUARTER = {"seed": 7, "start": "2026-08-03T00:00:00Z", "end": "2026-11-02T00:00:00Z",
           # +5 % a week of job arrivals in us-east over the quarter (x1.8 by its end): growth that saturates it
           "incidents": [{"kind": "demand_growth", "start": "2026-08-03T00:00:00Z", "duration": "91d",
                          "magnitude": 0.05, "scope": {"region": "us-east"}}]}
# data set -> the history an origin needs: 4 weeks (the choice among methods scores them on 2 origins of at least a
# week after 2 weeks of history); Helios' May has 30 days, so it starts at 2 weeks (every origin then forecasts
# by seasonal-naive: too short to choose)
MIN_TRAIN = {"sim_quarter": 28, "philly": 28, "openb": 28, "helios": 14}
# "each public trace with enough history": its first origin has the 4 weeks the choice among methods needs; Helios'
# origins have 14-29 days (a choice is never made there, and its intervals rest on the few errors of days 14-28)
ENOUGH = 28
TABLE_BEGIN, TABLE_END = "<!-- backtest table: bench/bench_forecast.py --table -->", "<!-- end of backtest table -->"


def series(name: str, data_dir: str, cache: str | None = None) -> dict[str, pd.Series]:
    if name == "sim_quarter" and cache and (Path(cache) / "sim_quarter.parquet").exists():
        d = pd.read_parquet(Path(cache) / "sim_quarter.parquet")
        return {k: g.set_index("date")["demand_gpu_hours"] for k, g in d.groupby("series")}
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
        out = {f"sim_quarter/{r}/{s}": g.loc[(r, s)] for r, s in g.index.droplevel(2).unique()}
        if cache:  # planning the quarter takes minutes; its series are the same on every run of this seed
            Path(cache).mkdir(parents=True, exist_ok=True)
            pd.concat([v.rename("demand_gpu_hours").rename_axis("date").reset_index().assign(series=k)
                       for k, v in out.items()]).to_parquet(Path(cache) / "sim_quarter.parquet")
        return out
    from gpu_health.traces.demand import LOADERS

    return {name: LOADERS[name](data_dir)["demand_gpu_hours"]}


def run(key: str, y: pd.Series, min_train: int, methods) -> dict:
    res = {m: backtest(y, m, horizon=HORIZON_DAYS, min_train=min_train, step=1, partial=True) for m in methods}
    a, s = res[AUTO], res["seasonal_naive"]
    return {"dataset": key, "days": int(y.notna().sum()), "horizon": HORIZON_DAYS, "min_train": min_train, "step": 1,
            "origins": a.origins, "outcomes": a.outcomes,
            **{m: {"mase": round(r.mase, 3), "coverage": round(r.coverage, 4), "coverage95": round(r.coverage95, 4),
                   "hits": r.hits, "hits95": r.hits95, "outcomes": r.outcomes,
                   "coverage_se": round(r.binomial_se, 4), "coverage95_se": round(r.binomial_se95, 4),
                   "coverage_origin_se": round(r.coverage_se, 4), "coverage_hac_se": round(r.coverage_hac_se, 4),
                   "coverage95_hac_se": round(r.coverage95_hac_se, 4),
                   "by_construction": round(r.by_construction, 4), "by_construction95": round(r.by_construction95, 4),
                   "interval_score": round(r.interval_score, 2), "interval_score95": round(r.interval_score95, 2),
                   "chosen": r.chosen} for m, r in res.items()},
            "mase_ratio": round(a.mase / s.mase, 3),
            "interval_score_ratio": round(a.interval_score / s.interval_score, 3),
            "interval_score95_ratio": round(a.interval_score95 / s.interval_score95, 3)}


def _cov(hits: int, n: int, nominal: float, hac: float = float("nan")) -> str:
    """'80.1 ± 1.2 [77.7, 82.4] (3.1)': the share ± its binomial SE [Wilson], the SE over overlapping origins in
    parentheses; ✗ when more than two binomial SEs from the nominal level, ✗✗ when more than two of either."""
    if not n:
        return "--"
    p = hits / n
    se = np.sqrt(p * (1 - p) / n)
    lo, hi = wilson(hits, n)
    off = "" if abs(p - nominal) <= 2 * se else " ✗✗" if np.isfinite(hac) and abs(p - nominal) > 2 * hac else " ✗"
    sub = f" ({100 * hac:.1f})" if np.isfinite(hac) else ""
    return f"{100 * p:.1f} ± {100 * se:.1f} [{100 * lo:.1f}, {100 * hi:.1f}]{sub}{off}"


def table(rows: list[dict]) -> str:
    """The backtest table: per series and pooled (outcomes summed; ratios as geometric means, as MASE is pooled)."""
    out = ["| backtest | days | origins | outcomes | MASE / seasonal-naive | 80 % coverage ± SE [Wilson 95 %] (HAC SE) "
           "| 95 % coverage ± SE [Wilson 95 %] (HAC SE) | interval score / seasonal-naive's, 80 % / 95 % "
           "| chosen at origins | coverage by construction, 80 % / 95 % |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        a = r[AUTO]
        chosen = ", ".join(f"{m} {c}" for m, c in sorted(a["chosen"].items(), key=lambda kv: -kv[1]))
        out.append(f"| {r['dataset']} | {r['days']} | {r['origins']} | {r['outcomes']} | {r['mase_ratio']:.3f} | "
                   f"{_cov(a['hits'], a['outcomes'], 0.8, a['coverage_hac_se'])} | "
                   f"{_cov(a['hits95'], a['outcomes'], 0.95, a['coverage95_hac_se'])} | "
                   f"{r['interval_score_ratio']:.3f} / {r['interval_score95_ratio']:.3f} | {chosen} | "
                   f"{100 * a['by_construction']:.1f} / {100 * a['by_construction95']:.1f} |")
    enough = [r for r in rows if r["min_train"] >= ENOUGH]
    for name, pool in ((f"**pooled**, {len(enough)} backtests with {ENOUGH}+ days before every origin", enough),
                       (f"pooled, all {len(rows)} backtests", rows)):
        if not pool or (pool is rows and len(enough) == len(rows)):
            continue
        n = sum(r[AUTO]["outcomes"] for r in pool)
        # the backtests are of different series: their sampling errors add as independent
        hac = [float(np.sqrt(sum((r[AUTO][k] * r[AUTO]["outcomes"]) ** 2 for r in pool)) / n)
               for k in ("coverage_hac_se", "coverage95_hac_se")]
        geo = lambda k: float(np.exp(np.mean([np.log(r[k]) for r in pool])))  # noqa: E731
        out.append(f"| {name} | | {sum(r['origins'] for r in pool)} | {n} | "
                   f"{geo('mase_ratio'):.3f} (max {max(r['mase_ratio'] for r in pool):.3f}) | "
                   f"{_cov(sum(r[AUTO]['hits'] for r in pool), n, 0.8, hac[0])} | "
                   f"{_cov(sum(r[AUTO]['hits95'] for r in pool), n, 0.95, hac[1])} | "
                   f"{geo('interval_score_ratio'):.3f} / {geo('interval_score95_ratio'):.3f} | | |")
    return "\n".join(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("datasets", nargs="*", default=list(MIN_TRAIN))
    ap.add_argument("--data-dir", default="../shared/real-data")
    ap.add_argument("--all-methods", action="store_true", help="backtest every method, not only seasonal-naive and auto")
    ap.add_argument("--table", action="store_true", help="print the Markdown backtest table and its pooled line")
    ap.add_argument("--doc", help="write the table between the markers of this Markdown file")
    ap.add_argument("--cache", help="a folder to keep (and reuse) the simulated quarter's daily series in")
    args = ap.parse_args(argv)
    methods = (*METHODS, AUTO) if args.all_methods else ("seasonal_naive", AUTO)
    rows = []
    for ds in args.datasets:
        for key, y in series(ds, args.data_dir, args.cache).items():
            rows.append(run(key, y, MIN_TRAIN[ds], methods))
            print(json.dumps(rows[-1]), flush=True)
    if args.table or args.doc:
        text = table(rows)
        print(text)
        if args.doc:
            doc = Path(args.doc)
            body = doc.read_text()
            block = f"{TABLE_BEGIN}\n{text}\n{TABLE_END}"
            pattern = re.escape(TABLE_BEGIN) + ".*?" + re.escape(TABLE_END)
            doc.write_text(re.sub(pattern, lambda _: block, body, flags=re.S) if TABLE_BEGIN in body
                           else body.rstrip("\n") + "\n\n" + block + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
