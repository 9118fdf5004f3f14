"""Multi-dimensional root-cause benchmark in the Squeeze / RiskLoc file format.

The semi-synthetic datasets of Squeeze (Li et al., ISSRE 2019,
github.com/NetManAIOps/Squeeze; datasets A, B0-B4, D) and the synthetic ones of
RiskLoc (Kalander 2022, github.com/shaido987/riskloc; datasets S, L, H) share
one layout, which this module writes and reads:

    <dataset>/<setting>/<timestamp>.csv      one case: one row per leaf
        a,b,c,d,real,predict                 dimension columns, then the
        a1,b3,c2,d1,118.2,97.45              observed value and the forecast
    <dataset>/<setting>/injection_info.csv   ground truth, one row per case
        timestamp,set,...                    set = root causes, ';' between
                                             causes, '&' inside one (sorted by
                                             dimension): a=a1&b=b3;a=a2

Settings are named ``B_cuboid_layer_<L>_n_ele_<K>``: every root cause lies in
a cuboid of L dimensions and the case has K of them. Values of dimension ``a``
are ``a1, a2, ...``. A method is scored as in Squeeze's ``run_evaluation.py``:
over all cases, a predicted cause is a true positive when its set string
equals a true one; F1 = 2TP / (2TP + FP + FN).

The datasets themselves cannot be downloaded here, so :func:`generate_case`
draws cases of the same shape (our own generator; the recipe follows the
RiskLoc paper): leaf forecasts from a Weibull distribution (a share of leaves
zero), real = forecast with relative Gaussian noise, and each root cause
scales the real value of all its leaves by the same factor ``1 -+ severity``
(Squeeze's generalized ripple effect), with a little per-leaf deviation.
Three conditions keep a case meaningful as "a change to explain": the
injected change is at least ``min_significance`` times the noise's net change;
every root cause carries at least ``min_cause_share`` of the injected change
(the drill-down reports nothing smaller than its ``min_explanatory_power``);
the root causes cover at most ``max_coverage`` of the leaves (when every value
of a dimension is a root cause, the change is spread evenly and has no
narrower explanation).

RobustSpot's real-incident dataset RS (video-service success rate, a ratio
KPI; shipped in RiskLoc's repository under ``data/RS``) has another layout,
which :func:`read_rs_dataset` reads:

    RS/<case>.csv      one row per leaf and minute: min (unix seconds), the
                       dimension columns, value (failed sessions), cnt (sessions)
    RS/anomaly.yaml    per case: data (the file stem), timestamp (the anomalous
                       minute), cause ({dimension: value} or a list of them)

A case's leaves are the rows of its anomalous minute; the KPI is the success
rate ``k = (cnt - value) / cnt``, so the numerator is ``cnt - value`` and the
denominator ``cnt``; the forecast of each is its mean over the 4 minutes before
(the preprocessing of the RobustSpot paper, as RiskLoc re-implements it: a leaf
absent from those minutes has forecast 0). The frame carries ``real_a`` /
``predict_a`` (numerator), ``real_b`` / ``predict_b`` (denominator) and
``real`` / ``predict`` (the ratio; the forecast ratio is the mean of the
per-minute ratios, as published).

Regenerate the committed fixtures with
``.venv/bin/python -m gpu_health_tests.rca_benchmark gpu_health_tests/fixtures/rca``.
"""

from __future__ import annotations

import itertools
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

FIXTURE_DIMENSIONS = {"a": 4, "b": 5, "c": 4, "d": 3}
FIXTURE_SETTINGS = [(1, 1), (1, 2), (2, 1), (2, 2), (3, 1), (3, 2)]
FIXTURE_CASES_PER_SETTING = 3
FIXTURE_SEED = 20240611


@dataclass(frozen=True)
class Case:
    setting: str
    timestamp: str
    frame: pd.DataFrame  # dimension columns, real, predict
    root_causes: frozenset[str]  # set strings, e.g. {"a=a1&b=b3", "a=a2"}


def setting_name(layer: int, n_elements: int) -> str:
    return f"B_cuboid_layer_{layer}_n_ele_{n_elements}"


def cause_string(elements: dict[str, object]) -> str:
    """``{"b": "b3", "a": "a1"}`` -> ``"a=a1&b=b3"`` (the format's canonical form)."""
    return "&".join(f"{dim}={value}" for dim, value in sorted(elements.items()))


def parse_set(text: str) -> frozenset[str]:
    """``"b=b3&a=a1;a=a2"`` -> ``{"a=a1&b=b3", "a=a2"}``."""
    causes = set()
    for cause in filter(None, (part.strip() for part in str(text).split(";"))):
        pairs = dict(pair.split("=", 1) for pair in cause.split("&"))
        causes.add(cause_string(pairs))
    return frozenset(causes)


def f1_score(predicted: list[frozenset[str]], truth: list[frozenset[str]]) -> dict[str, float]:
    """Squeeze's set-level F1 summed over cases."""
    tp = sum(len(p & t) for p, t in zip(predicted, truth, strict=True))
    fp = sum(len(p - t) for p, t in zip(predicted, truth, strict=True))
    fn = sum(len(t - p) for p, t in zip(predicted, truth, strict=True))
    precision = tp / (tp + fp) if tp + fp else 0.0
    recall = tp / (tp + fn) if tp + fn else 0.0
    f1 = 2 * tp / (2 * tp + fp + fn) if tp + fp + fn else 1.0
    return {"f1": f1, "precision": precision, "recall": recall, "tp": tp, "fp": fp, "fn": fn}


def generate_case(
    rng: np.random.Generator,
    dimensions: dict[str, int],
    layer: int,
    n_elements: int,
    *,
    noise: tuple[float, float] = (0.0, 0.1),
    severity: tuple[float, float] = (0.3, 0.9),
    deviation: float = 0.05,
    zero_rate: tuple[float, float] = (0.0, 0.1),
    min_significance: float = 3.0,
    min_cause_share: float = 0.15,
    max_coverage: float = 0.5,
) -> tuple[pd.DataFrame, frozenset[str]]:
    """One case: leaves with ``real`` and ``predict``, and its true root-cause set."""
    names = list(dimensions)
    values = [[f"{d}{i}" for i in range(1, n + 1)] for d, n in dimensions.items()]
    leaves = pd.DataFrame(list(itertools.product(*values)), columns=names)
    for _ in range(1000):
        alpha = rng.uniform(0.5, 1.0)
        predict = rng.weibull(alpha, len(leaves)) * 100
        predict *= rng.uniform(size=len(leaves)) >= rng.uniform(*zero_rate)
        real = np.clip(predict * (1 + rng.normal(0, rng.uniform(*noise), len(leaves))), 0, None)
        noise_change = real.sum() - predict.sum()

        causes, taken = [], np.zeros(len(leaves), dtype=bool)
        direction = rng.choice([-1.0, 1.0])
        injected = real.copy()
        for _ in range(n_elements):
            dims = sorted(rng.choice(names, size=layer, replace=False).tolist())
            cell = {d: f"{d}{rng.integers(1, dimensions[d] + 1)}" for d in dims}
            mask = np.logical_and.reduce([leaves[d].to_numpy() == v for d, v in cell.items()])
            if (mask & taken).any() or predict[mask].sum() == 0:
                break
            taken |= mask
            sev = rng.uniform(*severity)
            factor = 1 + direction * rng.normal(sev, deviation, mask.sum())
            injected[mask] = np.clip(predict[mask] * factor, 0, None)
            causes.append((cell, mask))
        if len(causes) < n_elements or taken.mean() > max_coverage:
            continue
        change = injected - real
        total_injected = change.sum()
        shares = [change[mask].sum() / total_injected for _, mask in causes]
        if abs(total_injected) < min_significance * abs(noise_change):
            continue
        if min(shares) < min_cause_share:
            continue
        frame = leaves.assign(real=np.round(injected, 2), predict=np.round(predict, 2))
        return frame, frozenset(cause_string(cell) for cell, _ in causes)
    raise RuntimeError("could not draw a case meeting the conditions; loosen them")


def generate_dataset(
    root: Path,
    *,
    dimensions: dict[str, int] = FIXTURE_DIMENSIONS,
    settings: list[tuple[int, int]] = FIXTURE_SETTINGS,
    cases_per_setting: int = FIXTURE_CASES_PER_SETTING,
    seed: int = FIXTURE_SEED,
    **case_options,
) -> None:
    """Write ``root/<setting>/<timestamp>.csv`` and ``injection_info.csv`` per setting."""
    rng = np.random.default_rng(seed)
    timestamp = 1_450_000_000
    for layer, n_elements in settings:
        folder = Path(root) / setting_name(layer, n_elements)
        folder.mkdir(parents=True, exist_ok=True)
        info = []
        for _ in range(cases_per_setting):
            timestamp += 300
            frame, causes = generate_case(rng, dimensions, layer, n_elements, **case_options)
            frame.to_csv(folder / f"{timestamp}.csv", index=False)
            info.append({"timestamp": timestamp, "set": ";".join(sorted(causes))})
        pd.DataFrame(info).to_csv(folder / "injection_info.csv", index=False)


def read_dataset(root: Path) -> list[Case]:
    """Every case under ``root`` (one level of setting folders), in a stable order."""
    cases = []
    for info_path in sorted(Path(root).glob("*/injection_info.csv")):
        info = pd.read_csv(info_path, dtype={"timestamp": str, "set": str})
        for row in info.itertuples(index=False):
            frame = pd.read_csv(info_path.parent / f"{row.timestamp}.csv", dtype=str)
            frame["real"] = frame["real"].astype(float)
            frame["predict"] = frame["predict"].astype(float)
            cases.append(
                Case(info_path.parent.name, row.timestamp, frame, parse_set(row.set))
            )
    return cases


MEASURE_COLUMNS = ("real", "predict", "real_a", "predict_a", "real_b", "predict_b")


def dimension_columns(frame: pd.DataFrame) -> list[str]:
    return [c for c in frame.columns if c not in MEASURE_COLUMNS]


RS_HISTORY_MINUTES = 4  # the RobustSpot paper's forecast: mean of the 4 minutes before


def read_rs_case(raw: pd.DataFrame, timestamp: int) -> pd.DataFrame:
    """One RS case's leaves at ``timestamp``: dimensions (as text), numerator, denominator, ratio."""
    dims = [c for c in raw.columns if c not in ("min", "value", "cnt")]
    raw = raw.assign(
        success=raw["cnt"] - raw["value"],
        ratio=(raw["cnt"] - raw["value"]) / raw["cnt"].where(raw["cnt"] != 0),
    )
    raw[dims] = raw[dims].astype(str)
    now = raw[raw["min"] == timestamp]
    history = raw[raw["min"].isin([timestamp - 60 * i for i in range(1, RS_HISTORY_MINUTES + 1)])]
    forecast = history.groupby(dims, sort=False)[["success", "cnt", "ratio"]].mean()
    forecast.columns = ["predict_a", "predict_b", "predict"]
    frame = now[dims + ["success", "cnt", "ratio"]].rename(
        columns={"success": "real_a", "cnt": "real_b", "ratio": "real"}
    )
    frame = frame.merge(forecast, left_on=dims, right_index=True, how="left")
    measures = ["real_a", "predict_a", "real_b", "predict_b", "real", "predict"]
    frame[measures] = frame[measures].astype(float).fillna(0.0)
    return frame[dims + measures].reset_index(drop=True)


def read_rs_dataset(root: Path) -> list[Case]:
    """Every case of RobustSpot's RS dataset under ``root`` (``anomaly.yaml`` + one csv a case)."""
    import yaml

    with open(Path(root) / "anomaly.yaml", encoding="utf-8") as handle:
        anomalies = yaml.safe_load(handle)
    cases = []
    for anomaly in anomalies:
        raw = pd.read_csv(Path(root) / f"{anomaly['data']}.csv", dtype={"min": "int64"})
        frame = read_rs_case(raw, int(anomaly["timestamp"]))
        causes = anomaly["cause"] if isinstance(anomaly["cause"], list) else [anomaly["cause"]]
        truth = frozenset(cause_string({k: str(v) for k, v in c.items()}) for c in causes)
        cases.append(Case("RS", str(anomaly["data"]), frame, truth))
    return cases


if __name__ == "__main__":
    generate_dataset(Path(sys.argv[1]))
