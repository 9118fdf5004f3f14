"""Serving SLIs from classic Prometheus histograms: quantiles exactly as Prometheus computes them.

``serving_slis`` holds one row per region x model x version x 5-minute partition: requests, errors, error rate and
p50 / p95 / p99 latency and p99 time to first token, each quantile computed from the partition's summed bucket counts
-- what ``histogram_quantile(q, sum by (le) (increase(x_bucket[5m])))`` answers. The rules are Prometheus' own
(``promql/quantile.go``, ``bucketQuantile``), so a number here and on a Grafana panel over the same series agree:

* the buckets are sorted by ``le``; without a ``+Inf`` bucket the quantile is undefined (NaN), as with fewer than two
  buckets or no observations at all;
* counts are made monotone in ``le`` (a smaller bucket's count never exceeds a larger one's: scrape races between
  bucket series can break that, Prometheus takes the running maximum);
* the rank ``q x total`` is found in the first bucket whose cumulative count reaches it, and the value is interpolated
  **linearly within that bucket**, from the bucket below's bound (0 for the lowest bucket, when its bound is positive)
  to its own;
* a rank that falls in the ``+Inf`` bucket returns the highest finite bound (nothing larger can be known);
* ``q < 0`` is ``-Inf``, ``q > 1`` is ``+Inf``.

The interpolation is an estimate: a quantile that lands inside a bucket is **interpolated, not measured**. Only the
bucket bounds are measured values (see :func:`threshold_on_bucket_bound` and the SLO catalogue's flag).
"""

import math

import numpy as np
import pandas as pd

from gpu_health.constants import PARTITION

SLI_QUANTILES = {"p50_s": 0.50, "p95_s": 0.95, "p99_s": 0.99}
DEPLOYMENT = ["region", "model_name", "model_version"]


def histogram_quantile(q: float, le, counts) -> float:
    """Prometheus' ``histogram_quantile(q, ...)`` over one histogram's cumulative bucket counts (see module doc)."""
    if math.isnan(q):
        return math.nan
    if q < 0:
        return -math.inf
    if q > 1:
        return math.inf
    le = np.asarray(le, dtype="float64")
    counts = np.asarray(counts, dtype="float64")
    if len(le) == 0:
        return math.nan
    order = np.argsort(le, kind="stable")
    le, counts = le[order], counts[order]
    if not np.isposinf(le[-1]):
        return math.nan
    # coalesce buckets with the same bound (summed series can repeat an le), then force monotonicity
    uniq, start = np.unique(le, return_index=True)
    counts = np.add.reduceat(counts, start)
    le = uniq
    counts = np.maximum.accumulate(counts)
    if len(le) < 2:
        return math.nan
    total = counts[-1]
    if total == 0:
        return math.nan
    rank = q * total
    # sort.Search over all but the last bucket: first i with counts[i] >= rank, else len - 1
    hits = np.flatnonzero(counts[:-1] >= rank)
    b = int(hits[0]) if len(hits) else len(le) - 1
    if b == len(le) - 1:
        return float(le[-2])
    if b == 0 and le[0] <= 0:
        return float(le[0])
    bucket_start, bucket_end, count = 0.0, float(le[b]), float(counts[b])
    if b > 0:
        bucket_start = float(le[b - 1])
        count -= counts[b - 1]
        rank -= counts[b - 1]
    with np.errstate(divide="ignore", invalid="ignore"):
        return float(bucket_start + (bucket_end - bucket_start) * np.float64(rank) / np.float64(count))


def count_at_or_below(threshold: float, le, counts) -> tuple[float, bool]:
    """Observations at or below ``threshold`` by the same linear rule (the inverse of :func:`histogram_quantile`),
    and whether the number was interpolated (``threshold`` is not a bucket bound).

    Above the highest finite bound nothing more can be known: the count there is that bound's count (observations in
    the ``+Inf`` bucket are counted as over the threshold, the conservative reading)."""
    le = np.asarray(le, dtype="float64")
    counts = np.maximum.accumulate(np.asarray(counts, dtype="float64")[np.argsort(le, kind="stable")])
    le = np.sort(le)
    exact = np.flatnonzero(le == threshold)
    if len(exact):
        return float(counts[exact[-1]]), False
    finite = np.flatnonzero(np.isfinite(le))
    if not len(finite) or threshold > le[finite[-1]]:
        return (float(counts[finite[-1]]) if len(finite) else 0.0), True
    b = int(np.searchsorted(le, threshold))  # first bound above the threshold
    lo_le, lo_count = (float(le[b - 1]), float(counts[b - 1])) if b > 0 else (0.0, 0.0)
    frac = (threshold - lo_le) / (float(le[b]) - lo_le)
    return lo_count + (float(counts[b]) - lo_count) * frac, True


def threshold_on_bucket_bound(threshold: float, le) -> bool:
    """True when ``threshold`` is one of the histogram's bucket bounds: the share of requests under it is then
    counted, not interpolated."""
    return bool(np.any(np.asarray(le, dtype="float64") == threshold))


def summed_buckets(buckets: pd.DataFrame, by: list[str]) -> pd.DataFrame:
    """``sum by (by..., le) (increase(..._bucket[5m]))``: bucket counts summed over each group's minutes."""
    return buckets.groupby(by + ["le"], sort=True, observed=True)["count"].sum().reset_index()


def _quantiles(summed: pd.DataFrame, by: list[str], qs: dict[str, float]) -> pd.DataFrame:
    rows = []
    for key, g in summed.groupby(by, sort=False, observed=True):
        le, counts = g["le"].to_numpy(), g["count"].to_numpy()
        rows.append({**dict(zip(by, key if isinstance(key, tuple) else (key,))),
                     **{name: histogram_quantile(q, le, counts) for name, q in qs.items()}})
    return pd.DataFrame(rows, columns=by + list(qs))


def serving_slis(requests: pd.DataFrame, buckets: pd.DataFrame) -> pd.DataFrame:
    """One row per 5-minute partition x region x model x version (see the module docstring).

    ``requests`` and ``errors`` are the partition's sums; ``error_rate`` = errors / requests (null without
    requests); a quantile is null where Prometheus' is NaN (no observations, no ``+Inf`` bucket) and ``ttft_p99_s``
    is null for a model without a TTFT histogram."""
    cols = ["partition_start", *DEPLOYMENT, "requests", "errors", "error_rate", "p50_s", "p95_s", "p99_s", "ttft_p99_s"]
    if requests.empty and buckets.empty:
        return pd.DataFrame({c: pd.Series(dtype="object") for c in cols})
    key = ["partition_start", *DEPLOYMENT]
    req = requests.assign(partition_start=requests["ts"].dt.floor(PARTITION))
    out = req.groupby(key, sort=True, observed=True)[["requests", "errors"]].sum().reset_index()
    b = buckets.assign(partition_start=buckets["ts"].dt.floor(PARTITION))
    lat = _quantiles(summed_buckets(b[b["histogram"] == "latency"], key), key, SLI_QUANTILES)
    ttft = _quantiles(summed_buckets(b[b["histogram"] == "ttft"], key), key, {"ttft_p99_s": 0.99})
    out = out.merge(lat, on=key, how="outer").merge(ttft, on=key, how="left")
    out["requests"] = out["requests"].fillna(0).astype("int64")
    out["errors"] = out["errors"].fillna(0).astype("int64")
    with np.errstate(divide="ignore", invalid="ignore"):
        out["error_rate"] = np.where(out["requests"] > 0, out["errors"] / out["requests"].where(out["requests"] > 0), np.nan)
    for c in ("p50_s", "p95_s", "p99_s", "ttft_p99_s"):
        out[c] = pd.to_numeric(out[c], errors="coerce").astype("float64").replace([np.inf, -np.inf], np.nan)
    return out[cols].sort_values(key).reset_index(drop=True)
