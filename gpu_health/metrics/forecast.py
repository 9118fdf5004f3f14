"""GPU-hour demand, its forecast 1-12 weeks ahead, capacity headroom and the cheapest reserved mix.

Pure pandas / numpy / scikit-learn (no Dagster, no warehouse). Four parts:

* **Demand history** (:func:`daily_demand`): per UTC day x region x SKU x workload class, the GPU-hours jobs held
  (every *allocated* loss-tree state: :data:`ALLOCATED_STATES`) plus the GPU-hours jobs *waited* for -- the queue
  backlog (GPUs requested by submitted jobs not yet started, :func:`backlog_gpu_hours`) or, when the scheduler's
  events are missing, the loss tree's ``idle_blocked`` minutes (idle GPUs a pending job waited for, a subset of the
  backlog by construction: ``min(idle, pending)``). Demand is what users asked for, not what the cluster could run:
  a cluster at capacity still shows its growth, in the queue.
* **Forecasts** (:func:`forecast`): three methods, each with 80 % prediction intervals (p10 / p90) taken from the
  split-conformal quantile of its own absolute past forecast errors on rolling origins of the series' history (no
  distributional assumption), and the method a series uses is the one that beats seasonal-naive on that backtest
  by more than the backtest's sampling error, else seasonal-naive (:func:`select_method`): ``seasonal_naive`` (the last week repeated: the benchmark MASE is scaled by),
  ``dow_level`` (each weekday's mean over the last four weeks: seasonal-naive with its noise averaged) and
  ``dow_trend`` (ordinary least squares on a linear trend plus day-of-week effects over the last
  :data:`FIT_DAYS`, scikit-learn's ``LinearRegression``: a dependency already, and all an additive weekly
  shape plus trend needs -- statsmodels' ETS would be a new dependency for the same model class).
* **Backtest** (:func:`backtest`): rolling-origin MASE (scaled by the in-sample weekly seasonal-naive error) and the
  share of outcomes inside the 80 % interval, for any daily series (the simulator's, the public traces').
* **Headroom and reserved mix** (:func:`headroom`, :func:`cheapest_reserved`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from gpu_health.codes import factorize, first_rows
from gpu_health.metrics.goodput import STATES, first_node
from gpu_health.timestamps import as_utc

# Every loss-tree state a job holds the GPU in (the goodput package's rule 5): the GPU is allocated whether it computes,
# hangs, slows down or throws its work away. no_data / maintenance / hw_unavailable are not demand (no job asked),
# idle_no_demand is free capacity, idle_blocked is waiting demand (counted apart).
ALLOCATED_STATES = STATES[STATES.index("allocated_idle"):]
WAITING_STATE = "idle_blocked"
SEASON = 7  # days: the week is the period of human work (business days, weekday retrain waves) on any cluster
HORIZON_DAYS = 84  # 12 weeks: the longest horizon the issue asks for
# The dow_trend fit window: 8 weekly cycles give each day-of-week coefficient 8 observations (a standard error
# ~1/sqrt(8) of the day's noise) while a trend that bends (a new team, a finished project) is forgotten within
# two months.
FIT_DAYS = 56
# The fewest past errors a quantile of them may come from: the 10th / 90th percentile of fewer than 20 values is
# the smallest / largest value or worse; below it the intervals widen to the largest error seen. For a miss rate
# alpha the same rule -- at least two errors beyond each alpha / 2 quantile -- asks for 4 / alpha errors
# (min_errors): 80 for the 95 % interval.
MIN_ERRORS = 20
INTERVAL = (0.10, 0.90)  # an 80 % central prediction interval, the two-sided bar
MISS = INTERVAL[0] + (1 - INTERVAL[1])
# the wider interval the backtest also scores (and the forecast states): 95 %, the conventional "almost surely"
MISS_WIDE = 0.05
# The step of the adaptive conformal level (Gibbs & Candes 2021, "Adaptive conformal inference under distribution
# shift"): replaying the series' own past forecasts day by day, the miss level alpha moves by ACI_GAMMA x
# (target miss rate - the share of the outcomes known that day outside their intervals). Whatever the series
# does, the long-run miss rate is within (1 + gamma) / (gamma x T) of the target over T days, so a demand
# series whose level jumps (new teams, finished projects) widens its intervals instead of missing 40 % of
# outcomes. 0.05: the paper's largest recommended step; our histories are tens of origins, not thousands, and
# a smaller step would barely move from the start before the history ends.
ACI_GAMMA = 0.05
METHODS = ("seasonal_naive", "dow_level", "dow_trend", "snaive_trend_mean")
# the level-only model's window: 4 weekly cycles -- a level that has moved within a month is the trend model's case
LEVEL_DAYS = 28


# --- demand history -------------------------------------------------------------------------------------------
def allocated_daily(states: pd.DataFrame) -> pd.DataFrame:
    """goodput_states rows -> date x region x sku x workload_class: allocated and idle_blocked GPU-hours."""
    cols = ["date", "region", "sku", "workload_class", "allocated_gpu_hours", "idle_blocked_gpu_hours"]
    if states is None or states.empty:
        return pd.DataFrame(columns=cols)
    s = states[states["state"].isin(ALLOCATED_STATES + [WAITING_STATE])].copy()
    s["date"] = as_utc(s["partition_start"]).dt.floor("D")
    s["kind"] = np.where(s["state"] == WAITING_STATE, "idle_blocked_gpu_hours", "allocated_gpu_hours")
    out = s.pivot_table(index=["date", "region", "sku", "workload_class"], columns="kind", values="gpu_minutes",
                        aggfunc="sum", fill_value=0.0, observed=True) / 60.0
    out = out.reindex(columns=cols[4:], fill_value=0.0).reset_index()
    return out[cols]


def backlog_gpu_hours(sched: pd.DataFrame, day_start, day_end, place: pd.DataFrame) -> pd.DataFrame:
    """GPU-hours jobs waited in a queue inside ``[day_start, day_end)``, by region x sku x workload_class.

    A job waits from its ``submitted`` event to its first ``started`` (or ``ended`` without starting; still waiting
    at the day's end: to the day's end) with the GPUs it requested. ``place`` maps job_id -> region, sku,
    workload_class (:func:`job_places`); a job it cannot place is counted under ``unknown``, never dropped.
    """
    cols = ["region", "sku", "workload_class", "backlog_gpu_hours"]
    if sched is None or sched.empty:
        return pd.DataFrame(columns=cols)
    from gpu_health.metrics.goodput import queue_table

    jobs = queue_table(sched)
    day_start, day_end = pd.Timestamp(day_start), pd.Timestamp(day_end)
    left = jobs["left"].fillna(day_end)
    lo = jobs["sub"].clip(lower=day_start)
    hi = left.clip(upper=day_end)
    hours = ((hi - lo) / pd.Timedelta(hours=1)).clip(lower=0) * jobs["gpus"].astype(float)
    frame = pd.DataFrame({"backlog_gpu_hours": hours[hours > 0]})
    if frame.empty:
        return pd.DataFrame(columns=cols)
    frame = frame.join(place, how="left")
    for c in cols[:3]:
        frame[c] = frame[c].astype(object).where(frame[c].notna(), "unknown") if c in frame else "unknown"
    return frame.groupby(cols[:3], as_index=False)["backlog_gpu_hours"].sum()[cols]


def job_places(sched: pd.DataFrame, node_sku: dict, node_region: dict, classes: pd.Series) -> pd.DataFrame:
    """job_id -> region, sku, workload_class of the demand it stands for.

    Where it ran (its first placement's first node); a job that never started is placed where its queue's jobs run
    (the queue's most common region and SKU): a queue (Slurm partition, node pool) places on a fixed set of nodes.
    """
    cols = ["region", "sku", "workload_class"]
    if sched is None or sched.empty:
        return pd.DataFrame(columns=cols, index=pd.Index([], name="job_id"))
    s = sched.sort_values("ts", kind="stable")
    # each job (a missing id is one too) numbered in order of its first event: its first event's row and its first
    # placing event's row, from one hashing of the ids
    job, ids = factorize(s["job_id"], use_na_sentinel=False)
    n = len(ids)
    first_event = first_rows(job, np.ones(len(job), dtype=bool), n)
    placing = (s["node_ids"].notna() & s["event"].isin(["started", "ended", "preempted", "requeued"])).to_numpy(dtype=bool)
    first_placed = first_rows(job, placing, n)
    queue = s["queue"].astype(object).to_numpy()[first_event]
    # where each placed job ran (its first placement's first node), the jobs in the order they were first placed
    placed = np.flatnonzero(first_placed >= 0)
    placed = placed[np.argsort(first_placed[placed], kind="stable")]
    node = first_node(s["node_ids"].iloc[first_placed[placed]].reset_index(drop=True))
    where = pd.DataFrame({"region": node.map(node_region), "sku": node.map(node_sku)})
    ran = where.notna().all(axis=1).to_numpy()
    region = np.full(n, None, dtype=object)
    sku = np.full(n, None, dtype=object)
    if ran.any():  # a job never placed (or on a node of no inventory) goes where its queue's jobs mostly ran
        known = where[ran].assign(queue=queue[placed[ran]])
        mode = known.groupby("queue")[["region", "sku"]].agg(lambda v: v.value_counts().index[0])
        region = pd.Series(queue).map(mode["region"]).to_numpy(dtype=object, copy=True)  # (written into below)
        sku = pd.Series(queue).map(mode["sku"]).to_numpy(dtype=object, copy=True)
        region[placed[ran]] = where["region"].to_numpy(dtype=object)[ran]
        sku[placed[ran]] = where["sku"].to_numpy(dtype=object)[ran]
    index = pd.Index(s["job_id"].iloc[first_event], name="job_id")  # (the ids as the events hold them)
    out = pd.DataFrame({"region": region, "sku": sku,
                        "workload_class": index.map(classes) if classes is not None else None}, index=index)
    return out.astype(object).where(out.notna(), "unknown")


def daily_demand(allocated: pd.DataFrame, backlog: pd.DataFrame, date) -> pd.DataFrame:
    """One day's demand rows: allocated + waiting, where waiting = max(backlog, idle_blocked).

    The backlog counts every GPU a pending job requested; idle_blocked counts only those an idle GPU could have
    served (a subset), so the larger of the two is the waiting demand and nothing is counted twice. The loss tree
    books idle GPUs under workload class ``none``; its idle_blocked hours go to the classes that were waiting in the
    region x SKU, in proportion to their backlog (kept under ``none`` when nothing was waiting).
    """
    keys = ["region", "sku", "workload_class"]
    cols = ["date", *keys, "allocated_gpu_hours", "idle_blocked_gpu_hours", "backlog_gpu_hours", "demand_gpu_hours"]
    a = allocated.drop(columns=["date"], errors="ignore") if allocated is not None and len(allocated) else \
        pd.DataFrame(columns=keys + ["allocated_gpu_hours", "idle_blocked_gpu_hours"])
    b = backlog if backlog is not None and len(backlog) else pd.DataFrame(columns=keys + ["backlog_gpu_hours"])
    m = a.groupby(keys, as_index=False)[["allocated_gpu_hours", "idle_blocked_gpu_hours"]].sum().merge(
        b.groupby(keys, as_index=False)["backlog_gpu_hours"].sum(), on=keys, how="outer")
    m[["allocated_gpu_hours", "idle_blocked_gpu_hours", "backlog_gpu_hours"]] = \
        m[["allocated_gpu_hours", "idle_blocked_gpu_hours", "backlog_gpu_hours"]].astype(float).fillna(0.0)
    # spread each region x sku's idle_blocked over the classes waiting there
    blocked = m.groupby(["region", "sku"])["idle_blocked_gpu_hours"].transform("sum")
    waiting = m.groupby(["region", "sku"])["backlog_gpu_hours"].transform("sum")
    share = np.where(waiting > 0, m["backlog_gpu_hours"] / waiting.where(waiting > 0, 1.0),
                     np.where(m["idle_blocked_gpu_hours"] > 0, m["idle_blocked_gpu_hours"] / blocked.where(blocked > 0, 1.0), 0.0))
    m["idle_blocked_gpu_hours"] = blocked * share
    m["demand_gpu_hours"] = m["allocated_gpu_hours"] + np.maximum(m["backlog_gpu_hours"], m["idle_blocked_gpu_hours"])
    m = m[(m[["allocated_gpu_hours", "idle_blocked_gpu_hours", "backlog_gpu_hours"]] > 0).any(axis=1)]
    m.insert(0, "date", pd.Timestamp(date).tz_localize(None).normalize().date() if pd.Timestamp(date).tzinfo
             else pd.Timestamp(date).normalize().date())
    return m[cols].reset_index(drop=True)


# --- forecasting ----------------------------------------------------------------------------------------------
def _regular(y: pd.Series) -> np.ndarray:
    """A daily series on a regular calendar (missing days NaN: a day without data is unknown, never zero)."""
    y = y.sort_index()
    idx = pd.date_range(y.index.min(), y.index.max(), freq="D")
    return y.reindex(idx).to_numpy(dtype=float)


def seasonal_naive(y: np.ndarray, h: int) -> np.ndarray:
    """The last observed week repeated: day t+k forecast by the latest same weekday (a missing one: a week earlier)."""
    n = len(y)
    if n == 0:
        return np.full(h, np.nan)
    if n < SEASON:
        return np.full(h, np.nanmean(y) if np.isfinite(y).any() else np.nan)
    out = np.empty(h)
    for k in range(h):
        i = n - SEASON + (k % SEASON)
        while i >= 0 and not np.isfinite(y[i]):
            i -= SEASON
        out[k] = y[i] if i >= 0 else np.nanmean(y)
    return out


def dow_trend(y: np.ndarray, h: int, dow0: int = 0) -> np.ndarray:
    """OLS of a linear trend plus day-of-week effects over the last :data:`FIT_DAYS` days, extrapolated ``h`` days.

    ``dow0`` is the weekday of ``y[0]`` (only the alignment of the dummies matters for the fit). Under two weeks of
    history the trend is not separable from noise: the seasonal-naive forecast stands in.
    """
    from sklearn.linear_model import LinearRegression

    n = len(y)
    lo = max(0, n - FIT_DAYS)
    t = np.arange(lo, n)
    ok = np.isfinite(y[lo:])
    if ok.sum() < 2 * SEASON:
        return seasonal_naive(y, h)

    def design(tt):
        d = (tt + dow0) % SEASON
        return np.column_stack([tt.astype(float), *(d == k for k in range(1, SEASON))]).astype(float)

    model = LinearRegression().fit(design(t[ok]), y[lo:][ok])
    return model.predict(design(np.arange(n, n + h)))


def dow_level(y: np.ndarray, h: int, dow0: int = 0) -> np.ndarray:
    """Each weekday's mean over the last :data:`LEVEL_DAYS` days, repeated: the seasonal-naive forecast with its
    noise averaged over four weeks (no trend: where demand is flat, extrapolating a slope fitted to noise costs
    accuracy at long horizons)."""
    n = len(y)
    lo = max(0, n - LEVEL_DAYS)
    w = y[lo:]
    d = (np.arange(lo, n) + dow0) % SEASON
    if np.isfinite(w).sum() < 2 * SEASON:
        return seasonal_naive(y, h)
    means = np.array([np.nanmean(w[d == k]) if np.isfinite(w[d == k]).any() else np.nanmean(w) for k in range(SEASON)])
    return means[(np.arange(n, n + h) + dow0) % SEASON]


def snaive_trend_mean(y: np.ndarray, h: int, dow0: int = 0) -> np.ndarray:
    """The mean of the seasonal-naive and the trend forecasts: a combination (Bates & Granger 1969; the simple
    average of a few methods was among the most accurate forecasts of the M3 and M4 competitions). Where demand
    grows the trend alone over-reaches when growth bends and the last week alone lags; averaging the two halves
    both errors when they go opposite ways."""
    return (seasonal_naive(y, h) + dow_trend(y, h, dow0)) / 2


def point_forecast(method: str, y: np.ndarray, h: int, dow0: int = 0) -> np.ndarray:
    if method == "snaive_trend_mean":
        return snaive_trend_mean(y, h, dow0)
    if method == "seasonal_naive":
        return seasonal_naive(y, h)
    if method == "dow_level":
        return dow_level(y, h, dow0)
    if method == "dow_trend":
        return dow_trend(y, h, dow0)
    raise ValueError(f"unknown forecast method {method!r}")


def _origins(n: int, h: int, min_train: int, step: int) -> list[int]:
    """Rolling origins: the training prefix lengths, the latest first, each leaving ``h`` days to score."""
    return list(range(n - h, min_train - 1, -step))[::-1]


def level(y: np.ndarray) -> float:
    """The series' level: the mean of its last week (NaN when unknown or not positive)."""
    w = y[-SEASON:]
    v = float(np.nanmean(w)) if np.isfinite(w).any() else np.nan
    return v if v > 0 else np.nan


def past_errors(method: str, y: np.ndarray, h: int, dow0: int = 0, *, min_train: int = 2 * SEASON,
                step: int = 1) -> np.ndarray:
    """errors[o, k] = (actual - forecast of horizon k+1 from rolling origin o) / the level at o (NaN where unknown).

    Relative to the level, because a forecast's error grows with the demand it forecasts: errors made when a
    growing cluster asked for a tenth of today's GPU-hours say, in GPU-hours, nothing about today's."""
    rows = []
    for o in _origins(len(y), 1, min_train, step):
        f = point_forecast(method, y[:o], h, dow0)
        actual = np.full(h, np.nan)
        m = min(h, len(y) - o)
        actual[:m] = y[o:o + m]
        rows.append((actual - f) / level(y[:o]))
    return np.array(rows) if rows else np.empty((0, h))


def min_errors(miss: float) -> int:
    """The fewest past errors the ``1 - miss`` interval's quantiles come from (:data:`MIN_ERRORS` at 80 %)."""
    return max(MIN_ERRORS, int(np.ceil(4 / miss - 1e-9)))


def conformal_quantile(scores: np.ndarray, p: float) -> float:
    """The split-conformal quantile of ``scores`` at level ``p``: the ceil((n + 1) p)-th smallest of the n scores
    (the largest when that rank exceeds n). The next outcome's score is exchangeable with the n past ones, so it
    falls at or below this one with probability at least p; the sample quantile at p itself covers only about
    p n / (n + 1) -- 2-5 points short at the 20-80 errors an interval here rests on (Vovk et al. 2005; Lei et al.
    2018)."""
    n = len(scores)
    k = min(max(int(np.ceil((n + 1) * p - 1e-9)), 1), n)
    return float(np.partition(scores, k - 1)[k - 1])


# How a forecast's error grows with the horizon, when the series' own errors cannot say: like a random walk's,
# with the square root of the horizon -- between a stationary series' (no growth) and a mis-estimated slope's
# (linear growth)
RANDOM_WALK_GROWTH = 0.5


def error_growth(errors: np.ndarray) -> float:
    """The exponent b of the series' own error growth, spread ~ (horizon in weeks) ** b: the least-squares slope
    of log median |error| on log weeks, over the horizon weeks with at least :data:`MIN_ERRORS` errors, kept
    within [0, 1] -- from a stationary series' 0 (its level is known as well for week 12 as for week 1) to a
    slope error's 1. Fewer than two such weeks: :data:`RANDOM_WALK_GROWTH`. A fixed square root widens a
    stationary series' long horizons ~3.5x at 12 weeks and narrows a trending series' ones."""
    weeks = np.ceil(np.arange(1, errors.shape[1] + 1) / SEASON)
    pts = []
    for w in np.unique(weeks):
        e = np.abs(errors[:, weeks == w])
        e = e[np.isfinite(e)]
        if len(e) >= MIN_ERRORS and np.median(e) > 0:
            pts.append((np.log(w), np.log(np.median(e))))
    if len(pts) < 2:
        return RANDOM_WALK_GROWTH
    x, v = np.array(pts).T
    return float(np.clip(np.polyfit(x, v, 1)[0], 0.0, 1.0))


def interval_offsets(errors: np.ndarray, h: int, miss: float = MISS) -> tuple[np.ndarray, np.ndarray]:
    """Offsets of the central ``1 - miss`` interval (80 % by default) for horizons 1..h from past errors:
    split-conformal on the absolute error, p50 -/+ the :func:`conformal_quantile` of the horizon's own absolute
    errors where at least :func:`min_errors` exist; beyond that of the errors of all horizons, pooled in units of
    (horizon in weeks) ** b, b the series' own error growth (:func:`error_growth`: 0 for a stationary series,
    1/2 a random walk's, 1 a slope error's), rescaled to the horizon asked. The quantile of n errors at level
    p is the ceil((n + 1) p)-th smallest: the sample quantile at ceil((n + 1) p) / n, split-conformal's
    finite-sample level (85 % of 20 errors for an 80 % interval). Symmetric, because each tail's own quantile (alpha / 2 of the errors beyond
    it) rests on half the errors the absolute error's does, and a skew the past errors had (demand spikes, a
    growth phase that has ended) is not the next weeks' skew: intervals from each tail missed 20 % of outcomes
    on one side on the public traces and under-covered a region whose growth saturated. ``miss`` starts as the
    level and adapts to how the series' own past intervals fared (:func:`adaptive_alpha`)."""
    return conformal_offsets(errors, h, miss)[:2]


def conformal_offsets(errors: np.ndarray, h: int, miss: float = MISS) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`interval_offsets` and, per horizon, the coverage its intervals have by construction: the
    ceil((n + 1) p)-th smallest of n exchangeable errors bounds the next one with probability exactly
    rank / (n + 1), between p and p + 1 / (n + 1) (the largest error: n / (n + 1)) -- what a backtest's
    coverage is to be judged against before its sampling error."""
    lo, hi, cover = np.full(h, np.nan), np.full(h, np.nan), np.full(h, np.nan)
    if errors.size == 0:
        return lo, hi, cover
    b = error_growth(errors)
    scale = np.ceil(np.arange(1, errors.shape[1] + 1) / SEASON) ** b
    z = errors / scale
    pooled = np.abs(z[np.isfinite(z)])
    least = min_errors(miss)
    p = 1 - adaptive_alpha(z, miss)
    for k in range(h):
        e = errors[:, k][np.isfinite(errors[:, k])] if k < errors.shape[1] else np.empty(0)
        s = np.ceil((k + 1) / SEASON) ** b
        n = len(e) if len(e) >= least else len(pooled)
        if len(e) >= least:
            c = conformal_quantile(np.abs(e), p)
        elif len(pooled) >= least:
            c = conformal_quantile(pooled, p) * s
        elif len(pooled):
            c = pooled.max() * s
        else:
            continue
        rank = min(max(int(np.ceil((n + 1) * p - 1e-9)), 1), n) if n >= least else n
        lo[k], hi[k], cover[k] = -c, c, rank / (n + 1)
    return lo, hi, cover


# alpha stays inside (0, 1): at 0 the interval would be the widest error ever seen (ACI's infinite interval),
# which no quantile of a finite sample can express; 0.2 % of a few hundred errors is their extreme
_ALPHA_RANGE = (0.002, 0.998)


def adaptive_alpha(z: np.ndarray, target: float | None = None) -> float:
    """The miss level of the next interval by adaptive conformal inference (Gibbs & Candes 2021) over ``z``
    (origins x horizons, errors in units of (horizon in weeks) ** :func:`error_growth`, origins in time order,
    NaN where unknown), with delayed feedback: one step per realised day, on the outcomes that became known that
    day (an origin's horizon-k error is known k days after it), each judged against the interval its own origin
    states from the errors known at the origin -- the same symmetric intervals :func:`interval_offsets` states:
    per horizon the conformal quantile of its own absolute errors where it has :func:`min_errors` of them, else
    of all horizons' pooled -- at the current level. The level moves by :data:`ACI_GAMMA` x (target - the share
    of that day's outcomes missed).

    Each outcome counts once, when it is known: stepping once per origin on the origin's whole row would count
    its outcomes before they happen (up to a horizon early) and weight the latest origins' few outcomes most.
    Judged at the current level, not the level its origin had: an outcome known today was stated up to a
    horizon ago, and judging it at that old level makes the level answer its own moves up to 12 weeks late --
    an integrator with that delay overshoots (calm errors whose spread steps after the first week swung the
    level from 0.07 to 0.36). So each outcome keeps how many of its interval's n errors lie under it: at any
    level 1 - p it is missed when that count reaches the interval's rank ceil((n + 1) p)
    (:func:`conformal_quantile`), a comparison instead of a quantile per outcome per day."""
    target = MISS if target is None else target
    alpha, least = target, min_errors(target)
    n, h = z.shape
    finite = np.isfinite(z)
    known_at = np.arange(n)[:, None] + np.arange(1, h + 1)[None, :]  # origin + horizon
    below = np.full(z.shape, -1)  # per outcome: how many of its interval's errors lie under |z| (-1: no interval)
    size = np.zeros(z.shape, dtype=int)  # and how many errors that interval's quantile is taken from
    for t in range(n + 1):
        day = finite & (known_at == t) & (below >= 0)  # known today, each with the interval its origin stated
        if day.any():
            p = 1 - min(max(alpha, _ALPHA_RANGE[0]), _ALPHA_RANGE[1])
            rank = np.clip(np.ceil((size[day] + 1) * p - 1e-9), 1, size[day])
            alpha += ACI_GAMMA * (target - float(np.mean(below[day] >= rank)))
        if t == n:
            break
        cal = np.sort(np.abs(z[finite & (known_at <= t)]))
        if len(cal) < least:
            continue
        a = np.abs(z[t])
        below[t], size[t] = np.searchsorted(cal, a, side="left"), len(cal)
        for k in range(min(h, t - least + 1)):  # a horizon with its own errors: its own quantile
            own = np.abs(z[:t - k, k][finite[:t - k, k]])
            if len(own) >= least:
                below[t, k], size[t, k] = int(np.sum(own < a[k])), len(own)
    return min(max(alpha, _ALPHA_RANGE[0]), _ALPHA_RANGE[1])


AUTO = "auto"  # backtest the pipeline's rule: at each origin, the method choose_method picks on the data before it


def wilson(hits: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """Wilson score interval of a binomial proportion (Wilson 1927): unlike p +- z SE it stays inside [0, 1] and
    keeps its nominal coverage at the shares near 0.8 / 0.95 and the few hundred outcomes a backtest has."""
    if n <= 0:
        return float("nan"), float("nan")
    p = hits / n
    d = 1 + z * z / n
    mid = (p + z * z / (2 * n)) / d
    half = z * np.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / d
    return float(mid - half), float(mid + half)


def interval_score(actual: np.ndarray, lo: np.ndarray, hi: np.ndarray, miss: float) -> np.ndarray:
    """The interval (Winkler) score of a central ``1 - miss`` interval per outcome (Gneiting & Raftery 2007,
    a proper scoring rule): its width plus 2 / miss times how far the outcome fell outside it -- an interval too
    wide pays in width, one too narrow in misses; lower is better."""
    return (hi - lo) + 2.0 / miss * (np.maximum(lo - actual, 0.0) + np.maximum(actual - hi, 0.0))


def hac_se(hits: np.ndarray, n: np.ndarray, lag: int, *, whole: bool = False) -> float:
    """Standard error of a coverage sum(hits) / sum(n) pooled over origins in time order whose outcomes are
    correlated: Newey & West's (1987) estimator with Bartlett weights 1 - k / (lag + 1) on the origins'
    residuals hits - p n up to ``lag`` origins apart (the delta method for a ratio). Daily origins fewer than a
    horizon apart forecast the same days from almost the same history, and an origin's outcomes share its error:
    the binomial SE, which counts every outcome as independent, understates the sampling error several times.
    By default the lag is capped at half the origins (a short lag, as the selection test's, is left as it is).
    ``whole``: the lag covers the overlap, up to every origin -- a shorter one leaves out the correlation of
    origins that share outcome days -- and, as a lag that is a large share b = (lag + 1) / origins of the history
    biases the estimate low (the residuals sum to zero, so their long-range covariances cancel) by the factor
    1 - b + b ** 2 / 3 in expectation (Kiefer & Vogelsang 2005, the Bartlett kernel at a fixed bandwidth ratio
    b <= 1), it is divided by that factor: a coverage over fewer origins than its horizon is then not
    understated as much. Origins that all share the same outcome days still share a common error no
    origin-level estimate can see: over a history shorter than its horizon this SE remains a lower bound."""
    hits, n = np.asarray(hits, dtype=float), np.asarray(n, dtype=float)
    if len(n) < 2 or n.sum() <= 0:
        return float("nan")
    u = hits - hits.sum() / n.sum() * n
    var = float(u @ u)
    lag = min(lag, len(u) - 1 if whole else (len(u) - 1) // 2)
    for k in range(1, lag + 1):
        var += 2 * (1 - k / (lag + 1)) * float(u[k:] @ u[:-k])
    b = (lag + 1) / len(u) if whole else 0.0
    return float(np.sqrt(max(var, 0.0) / (1 - b + b * b / 3)) / n.sum())


@dataclass
class Backtest:
    """Rolling-origin scores of one method on one series."""

    method: str
    mase: float
    coverage: float  # share of outcomes inside [p10, p90]
    origins: int
    outcomes: int
    # standard error of ``coverage``: the standard deviation of the per-origin shares inside / sqrt(origins). An
    # origin's outcomes share its errors (a level that moved misses the whole horizon at once), so the origin is
    # the independent unit, not the outcome: with 6-14 origins this is 3-15 points, and a coverage 5 points from
    # 80 % says little about the method
    coverage_se: float = float("nan")
    # the 95 % interval's share of outcomes inside, and the outcomes inside each interval (for pooling)
    coverage95: float = float("nan")
    hits: int = 0
    hits95: int = 0
    # mean interval (Winkler) score of the 80 % / 95 % intervals, in the series' GPU-hours (lower is better)
    interval_score: float = float("nan")
    interval_score95: float = float("nan")
    # the methods chosen at the origins (AUTO), by count
    chosen: dict | None = None
    # the coverages' standard errors over overlapping origins (:func:`hac_se`, lag = the horizon, whole=True)
    coverage_hac_se: float = float("nan")
    coverage95_hac_se: float = float("nan")
    # each scored origin's MAE / its scale, in time order (their mean is ``mase``): the paired losses a selection
    # test compares
    origin_mase: np.ndarray | None = None
    # the coverage the 80 % / 95 % intervals have by construction (:func:`conformal_offsets`), averaged over the
    # outcomes: the nominal level plus split-conformal's finite-sample margin of up to 1 / (n + 1)
    by_construction: float = float("nan")
    by_construction95: float = float("nan")

    @property
    def binomial_se(self) -> float:
        """sqrt(p (1 - p) / n) over the outcomes: the sampling error of the 80 % coverage were the outcomes
        independent (they are not quite: an origin's share its errors)."""
        return float(np.sqrt(self.coverage * (1 - self.coverage) / self.outcomes)) if self.outcomes else float("nan")

    @property
    def binomial_se95(self) -> float:
        return float(np.sqrt(self.coverage95 * (1 - self.coverage95) / self.outcomes)) if self.outcomes else float("nan")


def backtest(y: pd.Series | np.ndarray, method: str, *, horizon: int, min_train: int = 4 * SEASON,
             step: int = SEASON, dow0: int | None = None, intervals: bool = True, partial: bool = False) -> Backtest:
    """Score ``method`` on rolling origins: at each origin (every ``step`` days from ``min_train``), forecast
    ``horizon`` days from the data before it only -- the intervals too, from that prefix's own past errors -- and
    compare with what came (``intervals=False``: MASE only, coverage NaN). MASE = mean over origins of MAE / the
    prefix's in-sample weekly seasonal-naive MAE (Hyndman & Koehler 2006, seasonal scaling), so a MASE below the
    seasonal-naive's means the method beats repeating the last week. ``method`` may be :data:`AUTO`.

    ``partial``: an origin closer to the series' end than ``horizon`` is scored on the days that came (horizons
    1..the days left), so a short history still gives an origin a day instead of only those a whole horizon
    before its end: daily origins over every day the history allows."""
    if isinstance(y, pd.Series):
        dow0 = int(y.sort_index().index.min().dayofweek) if dow0 is None else dow0
        y = _regular(y)
    dow0 = dow0 or 0
    ratios, inside, inside95, total, shares, score, score95, chosen = [], 0, 0, 0, [], [], [], {}
    per_origin = []  # (hits 80 %, hits 95 %, outcomes) of each scored origin, in time order
    built = []  # (80 %, 95 %) coverage by construction of each scored outcome's intervals
    nan = np.full(horizon, np.nan)
    for o in _origins(len(y), 1 if partial else horizon, min_train, step):
        train, actual = y[:o], np.concatenate([y[o:o + horizon], nan])[:horizon]
        m = choose_method(train, dow0) if method == AUTO else method
        f = point_forecast(m, train, horizon, dow0)
        lo = hi = lo95 = hi95 = by80 = by95 = nan
        if intervals:  # the chosen method's own past errors, per horizon
            errors = past_errors(m, train, horizon, dow0)
            (lo, hi, by80), (lo95, hi95, by95) = (conformal_offsets(errors, horizon, q) for q in (MISS, MISS_WIDE))
            lo, hi, lo95, hi95 = (v * level(train) for v in (lo, hi, lo95, hi95))
        scale = np.nanmean(np.abs(train[SEASON:] - train[:-SEASON]))
        ok = np.isfinite(actual) & np.isfinite(f)
        if not ok.any() or not np.isfinite(scale) or scale <= 0:
            continue
        chosen[m] = chosen.get(m, 0) + 1
        ratios.append(np.mean(np.abs(actual[ok] - f[ok])) / scale)
        ok &= np.isfinite(lo) & np.isfinite(hi) & np.isfinite(lo95) & np.isfinite(hi95)
        a, p = actual[ok], f[ok]
        # the intervals as the forecast states them: demand is never negative (forecast clips every quantile at 0)
        bounds = [(np.clip(p + np.minimum(lo_[ok], 0), 0, None), np.clip(p + np.maximum(hi_[ok], 0), 0, None))
                  for lo_, hi_ in ((lo, hi), (lo95, hi95))]
        hit = (a >= bounds[0][0]) & (a <= bounds[0][1])
        hit95 = int(((a >= bounds[1][0]) & (a <= bounds[1][1])).sum())
        per_origin.append((int(hit.sum()), hit95, int(ok.sum())))
        built.extend(zip(by80[ok], by95[ok]))
        inside += int(hit.sum())
        inside95 += hit95
        total += int(ok.sum())
        score.extend(interval_score(a, *bounds[0], MISS))
        score95.extend(interval_score(a, *bounds[1], MISS_WIDE))
        if ok.any():
            shares.append(float(hit.mean()))
    se = float(np.std(shares, ddof=1) / np.sqrt(len(shares))) if len(shares) > 1 else float("nan")
    mean = lambda v: float(np.mean(v)) if len(v) else float("nan")  # noqa: E731
    po = np.array(per_origin, dtype=float).reshape(-1, 3)
    return Backtest(method, mean(ratios), inside / total if total else float("nan"), len(ratios), total, se,
                    inside95 / total if total else float("nan"), inside, inside95, mean(score), mean(score95),
                    chosen, hac_se(po[:, 0], po[:, 2], horizon, whole=True),
                    hac_se(po[:, 1], po[:, 2], horizon, whole=True),
                    np.array(ratios), *(mean([b[i] for b in built]) for i in (0, 1)))


# Why a series uses its method (the forecast's ``selection``): the method beat seasonal-naive on the series'
# backtest by more than the backtest's sampling error; nothing did, so seasonal-naive (the benchmark) stands; the
# history is too short to backtest a choice
SELECTED, FALLBACK, TOO_SHORT = "backtest", "seasonal_naive_fallback", "too_short"
# The one-sided size of the test a method must pass to replace seasonal-naive (:func:`beats_benchmark`), shared
# by the candidates (Bonferroni): a method that forecasts no better than the benchmark is chosen at under 5 % of
# origins, whatever the series -- so "the chosen method never loses to seasonal-naive" holds up to that noise by
# construction, not by how the methods happen to fit one data set
SELECTION_SIZE = 0.05


@dataclass
class Selection:
    method: str
    reason: str  # SELECTED, FALLBACK or TOO_SHORT
    mase_ratio: float  # the method's backtest MASE / seasonal-naive's (NaN when too short to backtest)


def beats_benchmark(loss: np.ndarray, base: np.ndarray, lag: int, size: float) -> bool:
    """Whether per-origin losses beat the benchmark's on the same origins with evidence: a one-sided
    Diebold-Mariano test of the mean loss difference (Diebold & Mariano 1995) with the Harvey, Leybourne &
    Newbold (1997) small-sample form -- the difference's Newey-West standard error (:func:`hac_se`, ``lag`` =
    the origins one forecast window overlaps) and Student's t with origins - 1 degrees of freedom. With a few
    overlapping origins the bar is high (2 origins: t < -6.3 at 5 %), which is the point: little history is
    little evidence, and seasonal-naive stands."""
    from scipy.stats import t as student

    d = np.asarray(loss, dtype=float) - np.asarray(base, dtype=float)
    d = d[np.isfinite(d)]
    if len(d) < 2 or d.mean() >= 0:
        return False
    # hac_se divides by n; Student's t wants the variance on n - 1 degrees of freedom
    se = hac_se(d, np.ones(len(d)), lag) * np.sqrt(len(d) / (len(d) - 1))
    if not np.isfinite(se) or se <= 0:
        return False  # no spread to judge the difference by (two origins, or identical losses): no evidence
    return bool(d.mean() / se < student.ppf(size, len(d) - 1))


def select_method(y: np.ndarray, dow0: int = 0, *, horizon: int = 4 * SEASON) -> Selection:
    """The method that beats seasonal-naive on the series' own rolling-origin backtest by more than its sampling
    error (:func:`beats_benchmark` at :data:`SELECTION_SIZE`, shared by the candidates), the lowest MASE of those
    that do, and why; seasonal-naive (the benchmark) when none does, or when the history is too short to score
    them on two origins of at least a week's horizon. A lower MASE alone is not evidence: on a few origins the
    best of four methods beats the benchmark by chance, and loses to it on the weeks that follow.

    The scoring origins start at two weeks of history (the least dow_trend fits on), a week apart, and the
    horizon is up to four weeks: long enough to tell a trend from noise, short enough to score on a few months
    of history."""
    min_train = 2 * SEASON
    h = min(horizon, len(y) - min_train - SEASON)  # at least two origins
    if h < SEASON:
        return Selection("seasonal_naive", TOO_SHORT, float("nan"))
    runs = {m: backtest(y, m, horizon=h, dow0=dow0, min_train=min_train, intervals=False) for m in METHODS}
    base = runs["seasonal_naive"]
    others = [m for m in METHODS if m != "seasonal_naive"]
    lag = int(np.ceil(h / SEASON)) - 1  # origins a week apart share the days of forecast windows h days long
    won = [m for m in others if np.isfinite(runs[m].mase) and len(runs[m].origin_mase) == len(base.origin_mase)
           and beats_benchmark(runs[m].origin_mase, base.origin_mase, lag, SELECTION_SIZE / len(others))]
    if not won or not np.isfinite(base.mase) or base.mase <= 0:
        return Selection("seasonal_naive", FALLBACK, 1.0 if np.isfinite(base.mase) and base.mase > 0 else float("nan"))
    best = min(won, key=lambda m: runs[m].mase)
    return Selection(best, SELECTED, float(runs[best].mase / base.mase))


def choose_method(y: np.ndarray, dow0: int = 0, *, horizon: int = 4 * SEASON) -> str:
    """The method :func:`select_method` picks."""
    return select_method(y, dow0, horizon=horizon).method


def forecast(y: pd.Series, *, horizon: int = HORIZON_DAYS, method: str | None = None) -> pd.DataFrame:
    """Forecast a daily series ``horizon`` days past its last day: date, horizon_days, method, p10, p50, p90,
    selection (why the method: :func:`select_method`; ``given`` when the caller named it), mase_ratio (its
    backtest MASE / seasonal-naive's), p025 / p975 (the 95 % interval, the same way at a 5 % miss level).

    p50 is the method's point forecast; p10 / p90 bound its 80 % interval: p50 -/+ the conformal quantile of its
    past absolute errors (:func:`interval_offsets`: the 80th percentile on a series whose past intervals held,
    further out on one whose did not; relative to the level then, :func:`past_errors`) times today's level.
    Demand is never negative: every quantile is clipped at 0.
    """
    cols = ["date", "horizon_days", "method", "p10", "p50", "p90", "selection", "mase_ratio", "p025", "p975"]
    y = y.dropna()
    if y.empty:
        return pd.DataFrame(columns=cols)
    first, last = y.index.min(), y.index.max()
    arr = _regular(y)
    dow0 = int(pd.Timestamp(first).dayofweek)
    sel = Selection(method, "given", float("nan")) if method else select_method(arr, dow0)
    method = sel.method
    f = point_forecast(method, arr, horizon, dow0)
    errors = past_errors(method, arr, horizon, dow0)
    (lo, hi), (lo95, hi95) = (np.array(interval_offsets(errors, horizon, q)) * level(arr) for q in (MISS, MISS_WIDE))
    # no error history (a series of a few days): the interval is unknown (NaN), never p10 = p90 = p50 claiming certainty
    dates = pd.date_range(pd.Timestamp(last) + pd.Timedelta(days=1), periods=horizon, freq="D")
    return pd.DataFrame({"date": dates, "horizon_days": np.arange(1, horizon + 1), "method": method,
                         "p10": np.clip(f + np.minimum(lo, 0), 0, None), "p50": np.clip(f, 0, None),
                         "p90": np.clip(f + np.maximum(hi, 0), 0, None), "selection": sel.reason,
                         "mase_ratio": sel.mase_ratio, "p025": np.clip(f + np.minimum(lo95, 0), 0, None),
                         "p975": np.clip(f + np.maximum(hi95, 0), 0, None)})[cols]


# --- headroom and reserved mix --------------------------------------------------------------------------------
def run_out(capacity_gpus: float, demand_gpu_hours: pd.Series):
    """The first date on which daily demand (GPU-hours) exceeds what ``capacity_gpus`` can serve in a day
    (24 GPU-hours each), or None."""
    over = demand_gpu_hours[demand_gpu_hours > capacity_gpus * 24.0]
    return over.index.min() if len(over) else None


def cheapest_reserved(daily_gpu_hours: np.ndarray, reserved_usd: float, on_demand_usd: float) -> tuple[int, float]:
    """The reservation (whole GPUs) that would have served ``daily_gpu_hours`` at least cost, and that cost.

    Reserved GPUs are paid every hour whether used or not; demand above them is bought on demand. The cost of R
    reserved GPUs over the days is sum(24 R p_r + max(D - 24 R, 0) p_od), convex in R: its minimum lies at the
    (1 - p_r / p_od) quantile of daily demand in GPUs (the newsvendor critical ratio) -- each candidate at a
    demand level is evaluated exactly and the cheapest kept. Daily means hide intraday peaks: the answer is a
    floor for the on-demand share.
    """
    d = np.asarray(daily_gpu_hours, dtype=float)
    d = d[np.isfinite(d)]
    if not len(d) or reserved_usd <= 0 and on_demand_usd <= 0:
        return 0, 0.0
    candidates = np.unique(np.concatenate([[0], np.floor(d / 24.0), np.ceil(d / 24.0)])).astype(int)

    def cost(r):
        return float(np.sum(24.0 * r * reserved_usd + np.maximum(d - 24.0 * r, 0.0) * on_demand_usd))

    costs = [cost(r) for r in candidates]
    i = int(np.argmin(costs))
    return int(candidates[i]), costs[i]


def reserved_cost(daily_gpu_hours: np.ndarray, reserved_gpus: float, reserved_usd: float, on_demand_usd: float) -> float:
    """What serving ``daily_gpu_hours`` costs with ``reserved_gpus`` reserved and the rest on demand."""
    d = np.asarray(daily_gpu_hours, dtype=float)
    d = d[np.isfinite(d)]
    return float(np.sum(24.0 * reserved_gpus * reserved_usd + np.maximum(d - 24.0 * reserved_gpus, 0.0) * on_demand_usd))


# --- demand from job intervals (traces, the simulator's plan) -------------------------------------------------
def interval_daily(jobs: pd.DataFrame, start=None, end=None) -> pd.DataFrame:
    """Daily allocated and backlog GPU-hours from job intervals, for sources without a loss tree.

    ``jobs``: submit, start (NaT: never started), end (NaT: still running / still waiting at the trace's end, taken
    as ``end``), gpus; optional grouping columns are ignored. Allocated = gpus x [start, end); backlog = gpus x
    [submit, start) -- the same definitions :func:`daily_demand` applies to the loss tree and the scheduler's events.
    Returns a frame indexed by UTC day: allocated_gpu_hours, backlog_gpu_hours, demand_gpu_hours.
    """
    j = jobs.dropna(subset=["submit"])
    lo = pd.Timestamp(start) if start is not None else pd.to_datetime(j["submit"], utc=True).min().floor("D")
    hi = pd.Timestamp(end) if end is not None else \
        pd.concat([pd.to_datetime(j["start"], utc=True), pd.to_datetime(j["end"], utc=True)]).max().ceil("D")
    lo, hi = (t.tz_localize("UTC") if t.tzinfo is None else t for t in (lo, hi))
    days = pd.date_range(lo.floor("D"), hi.ceil("D"), freq="D")
    edges = days.asi8

    def ns(col, fill):
        v = pd.to_datetime(j[col], utc=True)
        return v.fillna(fill).astype("int64").to_numpy() if fill is not None else v.astype("int64").to_numpy()

    def spread(a, b, g):
        """GPU-hours of intervals [a, b) x g per day (ns arrays): GPU-ns before each day edge, differenced."""
        a = np.clip(a, edges[0], edges[-1])
        b = np.clip(b, edges[0], edges[-1])
        keep = b > a
        a, b, g = a[keep], b[keep], g[keep]
        before = np.array([np.sum(g * np.clip(e - a, 0, b - a)) for e in edges])
        return np.diff(before) / 3.6e12

    g = j["gpus"].to_numpy(dtype=float)
    ran = pd.to_datetime(j["start"], utc=True).notna().to_numpy()
    end_ = ns("end", hi)
    start_ = ns("start", hi)
    alloc = spread(start_[ran], end_[ran], g[ran])
    backlog = spread(ns("submit", None), np.where(ran, start_, end_), g)
    out = pd.DataFrame({"allocated_gpu_hours": alloc, "backlog_gpu_hours": backlog}, index=days[:-1])
    out["demand_gpu_hours"] = out["allocated_gpu_hours"] + out["backlog_gpu_hours"]
    return out
