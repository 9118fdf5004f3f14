"""Simulated inference serving: model deployments answering requests (``ClusterSpec.serving``).

Each region runs the same few deployments (:data:`DEPLOYMENTS`): a real-time fraud scorer, an embedding service and
a generative assistant. Every minute of every deployment version yields one ``inference_requests`` row and the
cumulative bucket counts of its latency histogram (and, for the generative model, its time-to-first-token
histogram) as a classic Prometheus histogram stores them, per-minute increases:

* **load** follows the day: a deployment's request rate is its peak times ``0.55 + 0.45 cos`` of the hours from the
  region's local afternoon, drawn as Poisson counts per minute;
* **latency** is lognormal (service times of request/response systems are right-skewed; the lognormal is the
  usual model), its median rising with the replicas' load (queueing) and wobbling a little minute to minute;
  a bucket's count is the requests expected at or below its bound, rounded with one shared draw per
  histogram-minute so the counts stay cumulative and the ``+Inf`` bucket equals ``requests``;
* **errors** are Poisson at the deployment's base error rate;
* **versions** roll out every few days: for :data:`ROLLOUT_MIN` minutes after a deploy both versions serve, the new
  one's share of traffic rising linearly, so a new ``model_version`` appears and the old one fades (a benign deploy);
* **incidents** (scenario kinds ``serving_error_spike``, ``serving_budget_burn``: the model's error rate is the
  magnitude while active; ``serving_latency_regression``: the model serves a point release ``v<N>.1`` whose latency
  median is the magnitude times the usual) act on the scope's model (``scope: {region, model}``);
* **replicas** scale with the load (an autoscaler keeping each replica under its capacity), ``gpus`` = replicas x
  the GPUs a replica holds, ``queue_depth`` = requests in flight by Little's law.

Every draw is keyed by (minute, region, deployment, version), so a partition's rows do not depend on the window
that generated it (partition independence, like the rest of the simulator). With ``serving`` off both tables are
empty: the default and ``messy`` profiles' rows are unchanged.
"""

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy.special import ndtr
from scipy.stats import poisson

from gpu_health.contracts import columns, conform, empty_frame
from gpu_health.sim import hashing as H
from gpu_health.sim.jobs import from_s, to_s
from gpu_health.sim.scenario import SERVING_KINDS

S_REQ, S_ERR, S_WOBBLE, S_ROUND_LAT, S_ROUND_TTFT, S_ROUND_SUM = range(170, 176)

# prometheus_client's default Histogram buckets (seconds): what an instrumented service exports unless told otherwise
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, math.inf)
# vLLM's time_to_first_token_seconds buckets (up to 10 s): 0.3 s, the seeds' TTFT objective, lies between 0.25 and 0.5
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, math.inf)
ROLLOUT_MIN = 30
# UTC hour of each region's afternoon peak (local ~15:00)
PEAK_HOUR_UTC = {"us-east": 20, "eu-west": 14}


@dataclass(frozen=True)
class Deployment:
    model_name: str
    peak_rpm: float            # requests per minute at the daily peak, per region
    median_s: float            # latency median at low load
    sigma: float               # lognormal shape of latency
    error_rate: float          # base share of requests that fail
    replica_rpm: float         # requests per minute one replica serves at its target utilisation
    gpus_per_replica: int
    first_version: int
    deploy_every_days: int
    deploy_hour_utc: int
    ttft_median_s: float | None = None  # generative models only
    ttft_sigma: float = 0.35


DEPLOYMENTS = (
    Deployment("fraud-scorer", 9000.0, 0.035, 0.45, 0.0002, 1500.0, 1, 41, 3, 10),
    Deployment("txn-embedding", 3000.0, 0.060, 0.40, 0.0001, 800.0, 1, 7, 5, 11),
    Deployment("support-assistant", 240.0, 0.9, 0.35, 0.0003, 30.0, 2, 3, 4, 9, ttft_median_s=0.09),
)


def _rows(scen, m_s: np.ndarray) -> pd.DataFrame:
    """The (minute, region, deployment, version, traffic share) grid, one row per version serving that minute."""
    if not scen.cluster.spec.serving or len(m_s) == 0:
        return pd.DataFrame()
    parts = []
    for r, region in enumerate(scen.cluster.spec.regions):
        for d, dep in enumerate(DEPLOYMENTS):
            period = dep.deploy_every_days * 86400
            # deploys at the deployment's hour every few days from the scenario's first day (v<first> then)
            anchor = to_s(scen.start.floor("D")) + dep.deploy_hour_utc * 3600
            since = (m_s - anchor) % period
            k = (m_s - anchor) // period
            share_new = np.clip(since / (ROLLOUT_MIN * 60.0), 0.0, 1.0)
            for version, share in ((dep.first_version + k, share_new), (dep.first_version + k - 1, 1.0 - share_new)):
                keep = share > 0
                parts.append(pd.DataFrame({"t": m_s[keep], "r": r, "region": region, "d": d,
                                           "v": version[keep].astype(np.int64), "share": share[keep]}))
    return pd.concat(parts, ignore_index=True)


def _deployment_minutes(scen, m_s: np.ndarray) -> pd.DataFrame:
    """Per (minute, region, deployment, version): requests, errors, the latency median of the minute, replicas."""
    g = _rows(scen, m_s)
    if g.empty:
        return g
    seed = scen.seed
    dep = [DEPLOYMENTS[i] for i in g["d"]]
    peak = np.array([x.peak_rpm for x in dep])
    peak_h = g["region"].map(PEAK_HOUR_UTC).fillna(15 + 6 * g["r"]).to_numpy(dtype=float)
    hours = (g["t"].to_numpy() % 86400) / 3600.0
    diurnal = 0.55 + 0.45 * np.cos(2 * np.pi * (hours - peak_h) / 24.0)
    total_rpm = peak * diurnal  # the deployment's load this minute, all versions together
    coords = (g["t"].to_numpy() // 60, g["r"].to_numpy(), g["d"].to_numpy(), g["v"].to_numpy())
    lam = total_rpm * g["share"].to_numpy()
    requests = poisson.ppf(H.uniform(seed + S_REQ, *coords), lam).astype(np.int64)
    err_rate = np.array([x.error_rate for x in dep])
    median_factor = np.ones(len(g))
    label = np.array([f"v{v}" for v in g["v"]], dtype=object)
    model_names = np.array([x.model_name for x in dep], dtype=object)
    t_min = g["t"].to_numpy() // 60  # minutes since the simulator's origin, as Incident.active counts them
    for inc in scen.incidents:
        if inc.kind not in SERVING_KINDS:
            continue
        hit = inc.active(t_min) & (model_names == inc.scope.get("model", DEPLOYMENTS[0].model_name))
        if inc.region is not None:
            hit &= (g["region"] == inc.region).to_numpy()
        if inc.kind == "serving_latency_regression":
            median_factor[hit] *= inc.magnitude  # the point release is slow
            label[hit] = [f"{x}.1" for x in label[hit]]
        else:
            err_rate = np.where(hit, np.maximum(err_rate, inc.magnitude), err_rate)
    errors = np.minimum(poisson.ppf(H.uniform(seed + S_ERR, *coords), requests * err_rate).astype(np.int64), requests)
    replica_rpm = np.array([x.replica_rpm for x in dep])
    replicas = np.maximum(2, np.ceil(total_rpm / replica_rpm)).astype(np.int64)  # autoscaler, min 2 for redundancy
    utilisation = total_rpm / (replicas * replica_rpm)
    # queueing: the median grows like 1 / (1 - rho) of an M/M/1 server kept at utilisation rho by the autoscaler
    wobble = np.exp(0.05 * H.normal(seed + S_WOBBLE, *coords))
    median = np.array([x.median_s for x in dep]) * median_factor * wobble * (1.0 + 0.3 * utilisation / np.maximum(1e-3, 1.0 - 0.5 * utilisation))
    g = g.assign(requests=requests, errors=errors, median=median, sigma=[x.sigma for x in dep],
                 replicas=np.maximum(1, np.round(replicas * g["share"].to_numpy())).astype(np.int64),
                 gpus_per_replica=[x.gpus_per_replica for x in dep],
                 ttft_median=[x.ttft_median_s if x.ttft_median_s else np.nan for x in dep],
                 ttft_sigma=[x.ttft_sigma for x in dep],
                 model_name=[x.model_name for x in dep], model_version=label)
    return g


def inference_requests(scen, m_s: np.ndarray) -> pd.DataFrame:
    """The ``inference_requests`` rows of the minutes ``m_s`` (seconds since the simulator's origin)."""
    g = _deployment_minutes(scen, m_s)
    if g.empty:
        return empty_frame("inference_requests")
    mean_s = g["median"] * np.exp(g["sigma"] ** 2 / 2)  # the lognormal's mean
    latency_sum = g["requests"] * mean_s
    out = pd.DataFrame({
        "ts": from_s(g["t"].to_numpy()), "region": g["region"], "model_name": g["model_name"],
        "model_version": g["model_version"], "requests": g["requests"], "errors": g["errors"],
        "latency_sum_s": latency_sum.round(6),
        "queue_depth": (g["requests"] / 60.0 * mean_s).round(3),  # Little's law: in flight = rate x time in system
        "replicas": g["replicas"], "gpus": g["replicas"] * g["gpus_per_replica"],
    })
    return conform(out.sort_values(["ts", "region", "model_name", "model_version"])[columns("inference_requests")]
                   .reset_index(drop=True), "inference_requests")


def cumulative_counts(n: np.ndarray, median: np.ndarray, sigma: np.ndarray, bounds, u: np.ndarray) -> np.ndarray:
    """Cumulative bucket counts (rows x buckets) of ``n`` lognormal(median, sigma) values: ``floor(n F(le) + u)``
    with one ``u`` per row, so counts never decrease in ``le`` and the ``+Inf`` bucket (F = 1) is exactly ``n``."""
    le = np.asarray(bounds, dtype=float)
    with np.errstate(divide="ignore"):
        z = (np.log(le)[None, :] - np.log(median)[:, None]) / sigma[:, None]
    cdf = np.where(np.isposinf(le)[None, :], 1.0, ndtr(z))
    counts = np.floor(n[:, None] * cdf + u[:, None]).astype(np.int64)
    counts[:, np.isposinf(le)] = n[:, None]
    return np.minimum(counts, n[:, None])


def inference_latency_buckets(scen, m_s: np.ndarray) -> pd.DataFrame:
    """The ``inference_latency_buckets`` rows of the minutes ``m_s``: the latency histogram of every deployment
    version and the TTFT histogram of the generative ones."""
    g = _deployment_minutes(scen, m_s)
    if g.empty:
        return empty_frame("inference_latency_buckets")
    coords = (g["t"].to_numpy() // 60, g["r"].to_numpy(), g["d"].to_numpy(), g["v"].to_numpy())
    n = g["requests"].to_numpy()
    frames = []
    for histogram, bounds, med, sig, salt, keep in (
        ("latency", LATENCY_BUCKETS, g["median"], g["sigma"], S_ROUND_LAT, np.ones(len(g), dtype=bool)),
        ("ttft", TTFT_BUCKETS, g["ttft_median"], g["ttft_sigma"], S_ROUND_TTFT, g["ttft_median"].notna().to_numpy()),
    ):
        if not keep.any():
            continue
        # a failed generative request may never produce a first token: TTFT counts the successful ones
        total = n[keep] - (g["errors"].to_numpy()[keep] if histogram == "ttft" else 0)
        u = H.uniform(scen.seed + salt, *(c[keep] for c in coords))
        counts = cumulative_counts(total, med.to_numpy(dtype=float)[keep], sig.to_numpy(dtype=float)[keep], bounds, u)
        sub = g[keep]
        frames.append(pd.DataFrame({
            "ts": np.repeat(from_s(sub["t"].to_numpy()), len(bounds)),
            "region": np.repeat(sub["region"].to_numpy(), len(bounds)),
            "model_name": np.repeat(sub["model_name"].to_numpy(), len(bounds)),
            "model_version": np.repeat(sub["model_version"].to_numpy(), len(bounds)),
            "histogram": histogram,
            "le": np.tile(np.asarray(bounds, dtype=float), len(sub)),
            "count": counts.reshape(-1),
        }))
    out = pd.concat(frames, ignore_index=True)
    return conform(out.sort_values(["ts", "region", "model_name", "model_version", "histogram", "le"])
                   [columns("inference_latency_buckets")].reset_index(drop=True), "inference_latency_buckets")
