"""The drill-down's arithmetic (gpu_health.diagnosis.drilldown): the leaves as integer codes, cells grouped by their
codes, the leaves' noise model (a per-leaf variance from the frame's own scatter) and the bar a single leaf must
clear (the cells' lattice, their scoring and the shuffled-noise bar: drilldown_lattice). Pure numpy; no search here.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import combinations

import numpy as np
import pandas as pd
from scipy.special import ndtri

from gpu_health.constants import MAD_TO_SIGMA


# Group cells through a dense bincount when the key space is at most this many
# times the number of rows; otherwise through np.unique (sort based).
_DENSE_FACTOR = 8


@dataclass
class _Leaves:
    dimensions: list[str]
    codes: np.ndarray  # (rows, dims) int64 codes into labels
    labels: list[np.ndarray]  # per dimension: value of each code (object)
    cards: list[int]
    actual: np.ndarray
    expected: np.ndarray  # a ratio: the numerator expected at the observed denominator
    base_actual: np.ndarray | None = None  # a ratio: the denominator observed
    base_expected: np.ndarray | None = None  # a ratio: the denominator expected
    history: np.ndarray | None = None  # a ratio: the numerator expected (as given)
    sampling: np.ndarray | None = None  # a ratio: the numerator's sampling variance at the observed denominator
    volume: np.ndarray | None = None  # a ratio: the observed denominator at the common ratio


def _numbers(frame: pd.DataFrame, column: str) -> np.ndarray:
    values = pd.to_numeric(frame[column], errors="raise").to_numpy(dtype=float, na_value=np.nan)
    return np.nan_to_num(values, nan=0.0, posinf=0.0, neginf=0.0)


def _cuboids(leaves: _Leaves, max_combination: int | None) -> list[tuple[int, ...]]:
    """Cuboids up to ``max_combination`` dimensions (None: all), without ones that repeat a coarser cuboid.

    A pair where one dimension determines the other (every value of one maps
    to a single value of the other, constant dimensions included) makes any
    cuboid holding both equal to a smaller one.
    """
    k = len(leaves.dimensions)
    present = [len(np.unique(leaves.codes[:, j])) for j in range(k)]
    dependent = set()
    for i, j in combinations(range(k), 2):
        key = leaves.codes[:, i].astype(np.int64) * leaves.cards[j] + leaves.codes[:, j]
        space = leaves.cards[i] * leaves.cards[j]
        if space <= _DENSE_FACTOR * max(len(key), 128):
            cells = int((np.bincount(key, minlength=space) > 0).sum())
        else:
            cells = len(np.unique(key))
        if cells == present[i] or cells == present[j]:
            dependent.add((i, j))
    result = []
    for size in range(1, min(max_combination or k, k) + 1):
        for cuboid in combinations(range(k), size):
            if size > 1 and any(pair in dependent for pair in combinations(cuboid, 2)):
                continue
            result.append(cuboid)
    return result


def _shares(a: np.ndarray, e: np.ndarray, smoothing: float) -> tuple[np.ndarray, np.ndarray]:
    """Per-leaf shares of the expected and the actual total, with a pseudo-count per leaf."""
    a_pos, e_pos = np.clip(a, 0, None), np.clip(e, 0, None)
    pseudo = smoothing * (a_pos.sum() + e_pos.sum()) / (2 * len(a))
    if pseudo == 0:
        pseudo = 1.0
    a_s, e_s = a_pos + pseudo, e_pos + pseudo
    return e_s / e_s.sum(), a_s / a_s.sum()


def _weighted_median(x: np.ndarray, w: np.ndarray) -> float:
    order = np.argsort(x, kind="stable")
    cumulative = np.cumsum(w[order])
    return float(x[order][np.searchsorted(cumulative, cumulative[-1] / 2)])


def _js(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """Each element's term of the Jensen-Shannon divergence (base 2); 0 log 0 = 0."""
    m = p + q
    with np.errstate(divide="ignore", invalid="ignore"):
        tp = np.where(p > 0, p * np.log2(2 * p / m), 0.0)
        tq = np.where(q > 0, q * np.log2(2 * q / m), 0.0)
    return 0.5 * (tp + tq)


def _group(codes: np.ndarray, cards: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """Cell id of each row (0..cells-1) and each cell's code tuple, for the given columns."""
    key = codes[:, 0].astype(np.int64)
    space = cards[0]
    for j in range(1, codes.shape[1]):
        key = key * cards[j] + codes[:, j]
        space *= cards[j]
    if space <= _DENSE_FACTOR * max(len(key), 128):
        present = np.bincount(key, minlength=space) > 0
        cell_keys = np.flatnonzero(present)
        lookup = np.cumsum(present) - 1
        inverse = lookup[key]
    else:
        cell_keys, inverse = np.unique(key, return_inverse=True)
    # the smallest integers that hold every code: a leaf's codes are most of what stays in memory per leaf
    cell_codes = np.empty((len(cell_keys), codes.shape[1]), dtype=np.min_scalar_type(-max(cards)))
    rest = cell_keys
    for j in range(codes.shape[1] - 1, -1, -1):
        rest, cell_codes[:, j] = np.divmod(rest, cards[j])
    return inverse, cell_codes
# Noise model fit (_noise_variance): at most this many level groups, of at
# least this many leaves each (a median of 20 values is within about 30 % of
# the spread; only the ratio between groups matters for the choice of model).
_NOISE_BUCKETS = 8
_NOISE_BUCKET_LEAVES = 20
# ... on at most this many leaves (every k-th by level): medians of 5,000 are
# within about 2 % of the spread, and the fit stays fast on large frames.
_NOISE_SAMPLE = 5000
# Candidate crossover levels of the two noise sources, in multiples of the
# median leaf level: a geometric grid (factor 4) wide enough to cover leaves
# from a 1000th to 1000 times the typical one.
_KAPPA_GRID = (1 / 1024, 1 / 256, 1 / 64, 1 / 16, 1 / 4, 1.0, 4.0, 16.0, 64.0, 256.0, 1024.0)
# Relative noise floor: measures are floats; without a floor a noise-free
# frame would make every difference infinitely significant.
_NOISE_FLOOR = 1e-6
# _shuffled_max: shuffles of the leaves' deviations per round (the largest of 9
# null maxima is about their 90th percentile: see _shuffled_max) and the fixed
# seed that makes the answer reproducible.
_SHUFFLES = 9
_SHUFFLE_SEED = 20_190_901
# _single_leaf_bar: a single leaf is named when noise alone would reach its deviation in one frame of a thousand
# (a false-alarm budget per test: a search makes a few such tests), judged on the leaves' tail beyond their
# 1 % largest, at least 20 leaves (fewer fit no tail).
_SINGLE_LEAF_ALARM = 1e-3
_TAIL_LEAVES = 20


@dataclass
class _LeafStats:
    d: np.ndarray  # actual - expected
    dev: np.ndarray  # change beyond the typical leaf's move (0 on uninformative leaves)
    x: np.ndarray  # weight * level * dev
    h: np.ndarray  # weight * level ** 2 (information)
    informative: np.ndarray  # level > 0


def _typical_move(d: np.ndarray, level: np.ndarray, expected: np.ndarray,
                  pseudo: float) -> tuple[float, np.ndarray | None]:
    """The typical leaf's relative move ``d / level``: the densest value (half-sample mode); and the leaves
    the noise is to be fitted on when most of them moved (None: all of them).

    Leaves that carry no cause share one move (none, or a change spread evenly
    over every leaf) up to noise, so they form the densest cluster of moves,
    while causes move their leaves by different amounts. The half-sample mode
    (Bickel & Fruehwirth 2006: keep, repeatedly, the half of the sorted values
    with the smallest range) finds that cluster even when causes move up to
    half of the leaves, where a median would slide toward them; and 0 (no
    move) is kept unless most leaves are closer to the mode than to 0, or the
    leaves closer to 0 are where the forecast held (:func:`_forecast_holds`:
    an anomaly covering most of the cube) -- then the noise is theirs, not the
    anomaly's, and is fitted on them. Each leaf counts once (mass would let a
    few large leaves decide); leaves whose expected value is under the
    pseudo-count have no baseline to move from and do not count; with none
    left the typical move is 0.
    """
    based = (np.abs(expected) > pseudo) & (level > 0)
    if not based.any():
        return 0.0, None
    moves = d[based] / level[based]
    mode = _half_sample_mode(moves)
    # "nothing moved" wins unless most leaves sit closer to the mode than to 0
    # (half the leaves moving alike is an incident, not the typical leaf)
    nearer_zero = np.abs(moves) <= np.abs(moves - mode)
    if nearer_zero.sum() * 2 >= len(moves):
        return 0.0, None
    if _forecast_holds(moves[nearer_zero], moves[~nearer_zero], mode):
        with np.errstate(divide="ignore", invalid="ignore"):
            every = np.where(level > 0, d / level, 0.0)
        return 0.0, np.abs(every) <= np.abs(every - mode)
    return mode, None


def _forecast_holds(rest: np.ndarray, crowd: np.ndarray, mode: float) -> bool:
    """True when the leaves nearer 0 than the crowd's move ``mode`` form a cluster at 0: the forecast held for them.

    Most leaves moving alike is either the forecast's error spread over every
    leaf (then the crowd is normal) or an anomaly covering most of the cube
    (then the leaves left where the forecast put them are normal: a cause
    ``e in {e1, e2, e3}`` over 60 % of the leaves is no less a deviation from
    the forecast than one over 10 %). The forecast defines normal, so the rest
    is normal when it looks as the forecast's noise predicts: its densest value
    (half-sample mode) within one of its own sigmas of 0 -- a move no larger
    than the leaves' noise is no move, the bar a cause's leaves must clear --
    and apart from the crowd: the two clusters' one-sigma ranges do not meet (a
    rest that reaches into the crowd is the crowd's own scatter, not a cluster
    of its own). The tail of a crowd whose forecast erred everywhere sits at
    the crowd's edge, half way to 0: within its own sigma of 0 it would reach
    into the crowd, so it never passes both. With a forecast exact to the digit
    the rest's spread is 0 and its centre must be 0 exactly.
    """
    if len(rest) < 2 or len(crowd) < 2:
        return False
    centre = _half_sample_mode(rest)
    spread = MAD_TO_SIGMA * float(np.median(np.abs(rest - centre)))
    crowd_spread = MAD_TO_SIGMA * float(np.median(np.abs(crowd - mode)))
    return abs(centre) <= spread and abs(mode - centre) > spread + crowd_spread


def _rose_from_zero(leaves: _Leaves, rows: np.ndarray, sign: float) -> np.ndarray:
    """Which of the leaves ``rows`` rose from a forecast of 0 in the direction ``sign``: they moved by their whole
    value -- the largest relative move there is (the symmetric relative deviation's bound) -- whatever their size
    beside the typical leaf whose level scales them, so they never count as having stayed put."""
    return (leaves.expected[rows] == 0) & (sign * leaves.actual[rows] > 0)


def _half_sample_mode(values: np.ndarray) -> float:
    x = np.sort(values)
    while len(x) > 3:
        half = (len(x) + 1) // 2
        widths = x[half - 1:] - x[: len(x) - half + 1]
        start = int(np.argmin(widths))
        x = x[start:start + half]
    if len(x) == 3:
        x = x[:2] if x[1] - x[0] < x[2] - x[1] else x[1:] if x[1] - x[0] > x[2] - x[1] else x[1:2]
    return float(np.mean(x))


def _noise_variance(dev: np.ndarray, level: np.ndarray, informative: np.ndarray) -> np.ndarray:
    """Each leaf's noise variance, ``s**2 * (level**2 + kappa * level)``, fitted on the leaves.

    Two sources of noise hold for any measure: a relative one (a forecast
    off by a few percent: sd proportional to the level) and a counting one
    (events, sessions, GPU-minutes of a few jobs: Poisson-like, variance
    proportional to the level); ``kappa`` is the level where they are equal.
    Of the candidate ``kappa`` (0: purely relative; multiples of the leaves'
    median level; infinite: purely counting) the one under which the
    standardized deviations ``dev / sqrt(level**2 + kappa * level)`` have the
    same robust spread at every level is kept: leaves are cut into up to
    ``_NOISE_BUCKETS`` groups by level, and the spread of the groups'
    log-spreads is minimized (ties: the smaller ``kappa``). ``s`` is the robust
    spread (1.4826 x the median absolute value) of the standardized
    deviations, so causes, a minority of the leaves, barely count. A floor of
    ``_NOISE_FLOOR`` relative keeps scores finite on noise-free data.
    """
    lv, dv = level[informative], np.abs(dev[informative])
    order = np.argsort(lv, kind="stable")
    if order.size > _NOISE_SAMPLE:  # every k-th leaf by level: the same spread, fewer medians to take
        order = order[:: order.size // _NOISE_SAMPLE + 1]
    lv, dv = lv[order], dv[order]
    buckets = max(1, min(_NOISE_BUCKETS, len(lv) // _NOISE_BUCKET_LEAVES))
    typical = float(np.median(lv))
    kappas = [0.0, *(typical * f for f in _KAPPA_GRID), np.inf]
    z = np.stack([dv / (np.sqrt(lv) if np.isinf(kappa) else np.sqrt(lv**2 + kappa * lv)) for kappa in kappas])
    # the medians of every kappa at once (one call per shape, not one per kappa and group: the same values)
    spreads = MAD_TO_SIGMA * np.median(z, axis=1)
    locals_ = MAD_TO_SIGMA * _group_medians(z, buckets)
    best = None
    for kappa, spread, local in zip(kappas, spreads, locals_):
        spread = float(spread)
        if spread <= 0:
            continue
        local = np.where(local > 0, local, spread)
        dispersion = float(((np.log(local / spread)) ** 2).sum())
        if best is None or dispersion < best[0] - 1e-12:
            best = (dispersion, kappa, spread)
    if best is None:
        return (_NOISE_FLOOR * level) ** 2 + np.finfo(float).tiny
    _, kappa, spread = best
    base2 = level if np.isinf(kappa) else level**2 + kappa * level
    return spread**2 * base2 + (_NOISE_FLOOR * level) ** 2 + np.finfo(float).tiny


def _group_medians(z: np.ndarray, groups: int) -> np.ndarray:
    """Per row of ``z``, the median of each of ``groups`` consecutive groups of its columns, cut as
    ``np.array_split`` cuts them (the first ``columns % groups`` groups one longer)."""
    n = z.shape[1]
    size, longer = divmod(n, groups)
    cut = longer * (size + 1)
    parts = []
    if longer:
        parts.append(np.median(z[:, :cut].reshape(len(z), longer, size + 1), axis=2))
    if groups > longer:
        parts.append(np.median(z[:, cut:].reshape(len(z), groups - longer, size), axis=2))
    return np.concatenate(parts, axis=1)


def _single_leaf_bar(stats: _LeafStats, outside: np.ndarray, move: float) -> float:
    """The bar (squared sigmas) a single leaf must clear: what the largest of the ``N`` leaves outside it reaches
    by noise alone, but for one frame in ``1 / _SINGLE_LEAF_ALARM``.

    Shuffling cannot test one leaf: its deviation is one of the shuffled values, so the largest leaf always
    stands out from the rest, noise or not. A single leaf is instead one of ``N`` comparisons: the tail of the
    leaves' own squared deviations is fitted (the ``k`` largest, ``k`` = 1 % of the leaves and at least
    ``_TAIL_LEAVES``, beyond the next one, ``t``: exponential excesses, the tail of a normal's or any
    light-tailed noise's square, their scale ``beta`` from the median excess, so that a few causes among them do
    not move it) and the bar is where ``k`` such leaves exceed it with probability ``_SINGLE_LEAF_ALARM``:
    ``t + beta ln(k / alarm)``. Wider tails widen ``beta`` and raise the bar, though a power-law tail is
    underestimated by an exponential fit; the leaves that moved against ``move`` (noise moves leaves both ways
    alike, a cause one way) show what noise reached, so the bar is never below their largest.
    """
    rows = np.flatnonzero(outside & stats.informative)
    u2 = stats.x[rows] ** 2 / stats.h[rows]
    k = max(_TAIL_LEAVES, rows.size // 100)
    if rows.size < 2 * k:
        return np.inf  # too few leaves to tell the tail of their noise: a single leaf is not named
    top = np.sort(u2)[-(k + 1):]
    beta = float(np.median(top[1:] - top[0])) / np.log(2.0)
    bar = float(top[0]) + beta * np.log(k / _SINGLE_LEAF_ALARM)
    opposite = u2[stats.x[rows] * move < 0]
    return max(bar, float(opposite.max()) if opposite.size else 0.0)
