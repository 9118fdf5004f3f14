"""inference_requests and inference_latency_buckets from a serving runtime's Prometheus series.

A model server instrumented with a Prometheus client library exports each latency as a classic histogram: the
counters ``<family>_bucket{le}``, ``<family>_count`` and ``<family>_sum``. The mapping, written once (series ->
contract column; the family names are configurable, :data:`DEFAULT_FAMILIES`, e.g. vLLM's
``vllm:e2e_request_latency_seconds`` and ``vllm:time_to_first_token_seconds``):

=====================================================  ==============================================================
series                                                 column
=====================================================  ==============================================================
``<latency>_count``                                    ``requests``: its per-minute increase, summed over the series
                                                       of a deployment (status, code, instance, ...)
``<latency>_count{status="error"}`` or a 5xx ``code``  ``errors`` (the same increase, of the failed requests' series);
/ ``status_code``; ``<errors>_total``                  plus an errors counter where the server keeps one
``<latency>_sum``                                      ``latency_sum_s``
``<latency>_bucket{le}`` / ``<ttft>_bucket{le}``       ``inference_latency_buckets``: ``count`` per ``le``
                                                       (``histogram`` = ``latency`` / ``ttft``)
``<queue_depth>`` (a gauge)                            ``queue_depth``: the last value in the minute
``<replicas>`` / ``<gpus>`` (gauges)                   ``replicas`` / ``gpus``: summed over the deployment's series
=====================================================  ==============================================================

A deployment is (region, ``model_name``, ``model_version``): labels ``model_name`` / ``model`` and
``model_version`` / ``version`` (a server that exports no version, like vLLM, is one version, ``unversioned``).

Counters are read as the Prometheus source reads node counters: the last sample in each minute, the increase from
the minute before, and a drop is a restart (the increase is the new value) -- Prometheus' own counter-reset rule.
A minute without a sample in the minute before is unknown and left out (never read as zero requests). A server
that exports no error signal at all (no status label, no errors counter) is logged once: its error-rate SLI is
blind, and its rows carry 0 errors -- the latency SLIs still hold. An exporter with no serving series gives zero
rows (an optional source: the SLO detector's absent-SLI ticket says so), never a wait. Minute ``ts`` is the minute
whose last sample is read, as everywhere in the Prometheus source.
"""

from __future__ import annotations

import logging
import re

import numpy as np
import pandas as pd

from gpu_health.contracts import SERVING_SOURCES, columns, conform, empty_frame
from gpu_health.serving_families import SERVING_FAMILIES
from gpu_health.sources.prom_frames import _K, _V, _coalesce_labels, _increase

log = logging.getLogger(__name__)

SERVING_TABLES = frozenset(SERVING_SOURCES)  # the serving family of the catalogue
# a prometheus_client service's names, which the simulator's exposition writes too
DEFAULT_FAMILIES = dict(SERVING_FAMILIES)
MODEL_LABELS = ("model_name", "model")
VERSION_LABELS = ("model_version", "version")
UNVERSIONED = "unversioned"
DEPLOYMENT = ["region", "model_name", "model_version"]
_STATUS_LABELS = ("status", "outcome", "result")
_CODE_LABELS = ("code", "status_code", "http_status")
_FAILED_STATUS = re.compile(r"(?i)^(error|errors|fail|failed|failure|5\d\d)$")


def parse_families(text: str | dict | None) -> dict[str, str]:
    """``latency=vllm:e2e_request_latency_seconds,ttft=...`` (or a mapping) over :data:`DEFAULT_FAMILIES`."""
    out = dict(DEFAULT_FAMILIES)
    if not text:
        return out
    pairs = text.items() if isinstance(text, dict) else (p.split("=", 1) for p in str(text).split(",") if p.strip())
    for key, name in pairs:
        key, name = key.strip(), name.strip()
        if key not in DEFAULT_FAMILIES:
            raise ValueError(f"serving metric {key!r} is not one of {sorted(DEFAULT_FAMILIES)}")
        out[key] = name
    return out


def _deployments(df: pd.DataFrame, region) -> pd.DataFrame:
    """The range frame with region, model_name and model_version columns (rows without a model are dropped)."""
    if df.empty:
        return df.assign(region=pd.Series(dtype=object), model_name=pd.Series(dtype=object),
                         model_version=pd.Series(dtype=object))
    model = _coalesce_labels(df, MODEL_LABELS)
    version = _coalesce_labels(df, VERSION_LABELS).fillna(UNVERSIONED)
    df = df.assign(region=region(df).to_numpy(), model_name=model.to_numpy(), model_version=version.to_numpy())
    return df[df["model_name"].notna()]


def _series_increase(df: pd.DataFrame) -> pd.DataFrame:
    """Per series (all its labels) and minute, the counter's increase since the minute before: ``__inc``
    (the Prometheus source's rule, :func:`~gpu_health.sources.prom_frames._increase`)."""
    return _increase(df, [c for c in df.columns if c not in (_K, _V)])


def _summed(df: pd.DataFrame, by: list[str], name: str) -> pd.DataFrame:
    """Sum of known increases per ``by`` and minute (minute 0, the look-back, has none)."""
    if df.empty:
        return pd.DataFrame(columns=[*by, _K, name])
    known = df[df["__inc"].notna() & (df[_K] >= 1)]
    return known.groupby([*by, _K], as_index=False)["__inc"].sum().rename(columns={"__inc": name})


def _failed(df: pd.DataFrame) -> pd.Series:
    """Rows of ``_count`` series that count failed requests (a status or HTTP code label saying so)."""
    status = _coalesce_labels(df, _STATUS_LABELS)
    code = _coalesce_labels(df, _CODE_LABELS)
    return (status.fillna("").astype(str).str.match(_FAILED_STATUS)
            | code.fillna("").astype(str).str.match(r"^5\d\d$"))


def requests_frame(series: dict[str, pd.DataFrame], ts, region) -> pd.DataFrame:
    """``inference_requests`` rows from the range frames (keys: count, sum, errors, queue_depth, replicas, gpus)."""
    count = _deployments(series["count"], region)
    if count.empty:
        return empty_frame("inference_requests")
    inc = _series_increase(count)
    rows = _summed(inc, DEPLOYMENT, "requests")
    if rows.empty:
        return empty_frame("inference_requests")
    has_status = any(c in count.columns for c in (*_STATUS_LABELS, *_CODE_LABELS))
    errors = _summed(inc[_failed(inc)], DEPLOYMENT, "errors")
    counter = _deployments(series["errors"], region)
    if len(counter):
        errors = pd.concat([errors, _summed(_series_increase(counter), DEPLOYMENT, "errors")], ignore_index=True)
        errors = errors.groupby([*DEPLOYMENT, _K], as_index=False)["errors"].sum()
    elif not has_status:
        log.warning("serving series carry no status / code label and no errors counter: error-rate SLIs are blind "
                    "(0 errors written)")
    latency_sum = _summed(_series_increase(_deployments(series["sum"], region)), DEPLOYMENT, "latency_sum_s")
    gauges = []
    for name, how in (("queue_depth", "last"), ("replicas", "sum"), ("gpus", "sum")):
        g = _deployments(series[name], region)
        g = g[g[_K] >= 1] if len(g) else g
        if g.empty:
            gauges.append(pd.DataFrame(columns=[*DEPLOYMENT, _K, name]))
            continue
        agg = g.groupby([*DEPLOYMENT, _K], as_index=False)[_V]
        gauges.append((agg.sum() if how == "sum" else agg.mean()).rename(columns={_V: name}))
    for extra in (errors, latency_sum, *gauges):
        rows = rows.merge(extra, on=[*DEPLOYMENT, _K], how="left")
    rows["requests"] = rows["requests"].round().astype(np.int64)
    rows["errors"] = rows["errors"].fillna(0).round().clip(upper=rows["requests"]).astype(np.int64)
    rows["latency_sum_s"] = rows["latency_sum_s"].astype(float).fillna(0.0).clip(lower=0.0)
    rows["queue_depth"] = rows["queue_depth"].astype(float)
    for name in ("replicas", "gpus"):
        rows[name] = rows[name].astype(float).round().astype("Int64")
    rows["ts"] = ts(rows[_K]).to_numpy()
    out = rows[columns("inference_requests")].sort_values(["ts", *DEPLOYMENT])
    return conform(out.reset_index(drop=True), "inference_requests")


def buckets_frame(series: dict[str, pd.DataFrame], ts, region) -> pd.DataFrame:
    """``inference_latency_buckets`` rows from the ``_bucket`` range frames (keys: latency, ttft)."""
    parts = []
    for histogram in ("latency", "ttft"):
        b = _deployments(series[histogram], region)
        if b.empty or "le" not in b.columns:
            continue
        b = b.assign(le=pd.to_numeric(b["le"].replace({"+Inf": "inf", "Inf": "inf"}), errors="coerce"))
        b = b[b["le"].notna()]
        per_le = _summed(_series_increase(b), [*DEPLOYMENT, "le"], "count")
        parts.append(per_le.assign(histogram=histogram))
    if not parts:
        return empty_frame("inference_latency_buckets")
    rows = pd.concat(parts, ignore_index=True)
    rows["count"] = rows["count"].round().astype(np.int64)
    # cumulative in le, as the exposition format promises; a racing scrape can break it: the running maximum
    rows = rows.sort_values([*DEPLOYMENT, "histogram", _K, "le"], kind="stable")
    rows["count"] = rows.groupby([*DEPLOYMENT, "histogram", _K], sort=False)["count"].cummax()
    rows["ts"] = ts(rows[_K]).to_numpy()
    out = rows[columns("inference_latency_buckets")].sort_values(["ts", *DEPLOYMENT, "histogram", "le"])
    return conform(out.reset_index(drop=True), "inference_latency_buckets")


def read_serving(source, table: str, window, families: dict[str, str]) -> pd.DataFrame:
    """One serving table for ``window`` through a :class:`~gpu_health.sources.prometheus.PrometheusSource` (its
    selector, region rules and retries apply)."""
    def get(metric: str) -> pd.DataFrame:
        return source._range(source._last(metric), window)

    if table == "inference_latency_buckets":
        series = {h: get(f"{families[h]}_bucket") for h in ("latency", "ttft")}
        return buckets_frame(series, window.ts, source._region)
    series = {"count": get(f"{families['latency']}_count"), "sum": get(f"{families['latency']}_sum"),
              **{name: get(families[name]) for name in ("errors", "queue_depth", "replicas", "gpus")}}
    return requests_frame(series, window.ts, source._region)
