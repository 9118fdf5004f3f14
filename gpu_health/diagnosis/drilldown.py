"""Drill-down of a change to the narrowest dimension values that explain it.

Given leaves -- one row per combination of dimension values (region, node,
sku, driver_version, ...) with an additive measure observed (``actual``) and
expected (``expected``), e.g. GPU-minutes in one loss state -- find the few
dimension values, or intersections of two or three of them, that carry most of
the total change ``F = sum(actual) - sum(expected)``.

Scores (Bhagwan et al., "Adtributor", NSDI 2014):

- explanatory power of a set S of leaves: ``EP(S) = (A_S - E_S) / F``, its
  signed share of the total change. It is positive for a set that moved with
  the total, so a state that *shrank* (F < 0) is handled like one that grew.
- surprise of S: its term of the Jensen-Shannon divergence (base 2) between
  the expected and the actual distribution over the leaves,
  ``0.5 * (p log2(2p/(p+q)) + q log2(2q/(p+q)))`` with ``p = E_S/E`` and
  ``q = A_S/A``. It is large when S's share of the total moved a lot, and it
  grows with the mass that moved, so a narrow set that carries the change
  beats both the wide set around it (``region`` around one ``node``) and the
  narrower pieces inside it (``node & team`` when every team on the node moved
  alike -- Squeeze's "ripple effect").

Search (Adtributor's scores over the cuboid lattice, in the spirit of Squeeze
(ISSRE 2019) and RiskLoc (2022)):

1. Candidates are the elements of every cuboid of 1..``max_combination``
   dimensions (``node=n17``; ``region=us-east & driver_version=550.1``).
   Cuboids that only repeat a coarser one are skipped: when one dimension
   determines another (``node`` determines ``region``), ``node & region`` has
   the same sets as ``node``. Elements are pruned level by level with an
   upper bound (a set's change in the direction of F is at most the sum of
   its leaves' positive parts, which only shrinks when a dimension is added).
2. A candidate is *eligible* -- a confident cause -- when all of these hold:

   - it carries enough of the change: ``EP >= min_explanatory_power``;
   - it is *concentrated*: ``excess = EP - p * F_R / F >= min_excess``, the
     share of the change it carries beyond its share ``p`` of the baseline
     (``F_R``: the change not yet explained). **A change spread evenly -- in
     proportion to the baseline -- gives every set ``EP == p``, so
     ``excess == 0``: nothing is eligible and the result is empty**, rather
     than a large, arbitrary slice such as "region=us-east carries 50%";
   - it stands out from the leaves' noise: its excess change is at least
     ``z`` noise sigmas, ``sigma_S = s * sqrt(sum over S of level_i**2)``
     with ``level = (|actual| + |expected|) / 2`` and ``s`` the robust spread
     (weighted MAD) of the leaves' relative changes ``(a - e) / level``.
     ``z`` is Bonferroni-corrected for the number of candidate sets (family
     level ``alpha``, about 4-5 sigma here), so a noisy frame with no cause
     yields no cause. Without noise (``s == 0``) this test is void.

3. Greedy: the eligible candidate with the highest surprise, discounted by
   ``combination_penalty`` per extra dimension (Occam: of two descriptions of
   the same leaves the shorter wins, and an intersection must buy its extra
   dimension with a higher surprise), becomes a cause -- narrowed by one more
   dimension value while the leaves that drops carry at most 5% of its change
   and moved at most half as much relatively (they stayed put, so they are not
   part of the cause; this matters where surprise saturates, i.e. when the
   baseline share is negligible). Its leaves are removed
   (as RiskLoc does) and the search repeats on the rest, up to ``max_causes``,
   while the change left unexplained is still at least
   ``min_explanatory_power`` of F in F's direction (once the causes are out,
   what is left is noise, and noise is not searched). Later causes are thus
   measured on leaves not attributed yet: explanatory powers add up and never
   count a GPU-minute twice.

Causes are returned ranked by explanatory power (the share of the drop they
carry, what an alert leads with). Ties are broken deterministically: fewer
dimensions, then the order of ``dimensions``, then the value's text.

Input handling: NaN / None dimension values become the value ``"unknown"``
(a real, reportable element: "telemetry without a driver label" is a finding);
NaN measures count as 0. Shares use a small pseudo-count per leaf
(``smoothing`` of the mean leaf mass), so zero or near-zero expected values
(a state that normally never occurs) give finite surprise: with an all-zero
baseline, the baseline share of a set falls back to its share of leaves.
A total change of (numerically) zero has nothing to explain: ``[]``.

:func:`adtributor` is the paper's per-dimension procedure, kept for evidence:
per dimension, elements ranked by surprise are accumulated until their
explanatory power reaches a target, and dimensions are ranked by how few
elements they need, then by surprise.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import combinations
from statistics import NormalDist

import numpy as np
import pandas as pd

UNKNOWN = "unknown"

# Group cells through a dense bincount when the key space is at most this many
# times the number of rows; otherwise through np.unique (sort based).
_DENSE_FACTOR = 8
# Narrowing a chosen set (see _narrower): the leaves dropped carry at most this
# share of its change, and moved at most this fraction as much, relatively.
_DROP_SHARE = 0.05
_DROP_RIPPLE = 0.5


@dataclass(frozen=True)
class Cause:
    """A set of leaves (one value per named dimension) that carries part of the change."""

    elements: dict[str, object]
    explanatory_power: float  # (actual - expected) / total change, signed
    surprise: float  # Jensen-Shannon term of the set (base 2), within its search round
    actual: float
    expected: float
    support: int  # leaf rows in the set
    expected_share: float = float("nan")  # share of the baseline (smoothed), within its round
    z_score: float = float("inf")  # excess change in noise sigmas (inf: the leaves show no noise)

    @property
    def change(self) -> float:
        return self.actual - self.expected

    @property
    def dimensions(self) -> tuple[str, ...]:
        return tuple(self.elements)

    def label(self) -> str:
        """``region=us-east & driver_version=550.1``."""
        return " & ".join(f"{dim}={value}" for dim, value in self.elements.items())

    def describe(self) -> str:
        change = self.change
        if self.expected != 0:
            relative = f" ({change / abs(self.expected):+.0%})"
        else:
            relative = " (from 0)"
        sigma = f"{self.z_score:.1f} sigma" if np.isfinite(self.z_score) else "leaves show no noise"
        return (
            f"{self.label()}: {change:+,.6g}{relative}, actual {self.actual:,.6g} vs expected "
            f"{self.expected:,.6g}; {self.explanatory_power:.0%} of the change "
            f"(baseline share {self.expected_share:.1%}), surprise {self.surprise:.3g}, "
            f"{sigma}, {self.support} leaves"
        )


@dataclass(frozen=True)
class DimensionExplanation:
    """Adtributor's answer for one dimension: few elements that explain the change."""

    dimension: str
    values: list[object]
    explanatory_power: float
    surprise: float

    def describe(self) -> str:
        values = ", ".join(str(v) for v in self.values)
        return (
            f"{self.dimension} in {{{values}}}: {self.explanatory_power:.0%} of the change, "
            f"surprise {self.surprise:.3f}"
        )


@dataclass
class _Leaves:
    dimensions: list[str]
    codes: np.ndarray  # (rows, dims) int64 codes into labels
    labels: list[np.ndarray]  # per dimension: value of each code (object)
    cards: list[int]
    actual: np.ndarray
    expected: np.ndarray


def drill_down(
    frame: pd.DataFrame,
    dimensions: list[str],
    actual: str = "actual",
    expected: str = "expected",
    *,
    max_causes: int = 3,
    max_combination: int = 3,
    min_explanatory_power: float = 0.1,
    min_excess: float = 0.1,
    combination_penalty: float = 0.1,
    alpha: float = 0.05,
    smoothing: float = 0.01,
) -> list[Cause]:
    """The narrowest dimension values (or intersections) explaining ``sum(actual) - sum(expected)``.

    ``frame`` holds one row per leaf: the ``dimensions`` columns and the
    additive measure observed (``actual``) and expected (``expected``).

    - ``max_causes``: at most this many causes.
    - ``max_combination``: largest number of dimensions in one cause.
    - ``min_explanatory_power``: smallest share of the total change a cause
      may carry; also the stop rule (less than this left unexplained).
    - ``min_excess``: smallest share carried beyond the cause's baseline share
      (the evenly-spread rule).
    - ``combination_penalty``: surprise discount per extra dimension.
    - ``alpha``: family-wise level of the noise test over all candidate sets
      (0 disables it).
    - ``smoothing``: pseudo-count per leaf, as a share of the mean leaf mass.

    See the module docstring for the method. Returns causes ranked by
    explanatory power; an empty list when there is no change, or no set is a
    confident cause (e.g. the change is spread evenly, or is within noise).
    """
    if max_causes < 1 or max_combination < 1:
        raise ValueError("max_causes and max_combination must be at least 1")
    if not 0 <= combination_penalty < 1:
        raise ValueError("combination_penalty must be in [0, 1)")
    leaves = _prepare(frame, dimensions, actual, expected)
    n = len(leaves.actual)
    if n == 0:
        return []
    a, e = leaves.actual, leaves.expected
    total = float(a.sum() - e.sum())
    scale = max(float(np.abs(a).sum()), float(np.abs(e).sum()))
    if scale == 0 or abs(total) <= 1e-9 * scale:
        return []

    cuboids = _cuboids(leaves, max_combination)
    hypotheses = sum(min(n, int(np.prod([leaves.cards[j] for j in c], dtype=float))) for c in cuboids)
    min_z = NormalDist().inv_cdf(1 - alpha / max(hypotheses, 1)) if alpha > 0 else 0.0
    alive = np.ones(n, dtype=bool)
    causes: list[Cause] = []
    for _ in range(max_causes):
        unexplained = (a[alive].sum() - e[alive].sum()) / total
        if unexplained < min_explanatory_power:
            break
        found = _best_candidate(
            leaves, alive, cuboids, total, min_explanatory_power, min_excess,
            combination_penalty, min_z, smoothing,
        )
        if found is None:
            break
        cuboid, cell, cause = found
        causes.append(cause)
        alive &= ~np.all(leaves.codes[:, list(cuboid)] == np.asarray(cell), axis=1)
    causes.sort(key=lambda c: -c.explanatory_power)  # stable: selection order breaks ties
    return causes


def adtributor(
    frame: pd.DataFrame,
    dimensions: list[str],
    actual: str = "actual",
    expected: str = "expected",
    *,
    target_explanatory_power: float = 0.67,
    min_element_power: float = 0.1,
    max_elements: int = 3,
    smoothing: float = 0.01,
) -> list[DimensionExplanation]:
    """Adtributor's per-dimension explanations, most succinct first.

    Per dimension: elements whose explanatory power is at least
    ``min_element_power``, ranked by surprise, are accumulated until their
    explanatory power reaches ``target_explanatory_power``; a dimension that
    needs more than ``max_elements`` elements has no explanation. Explanations
    are ranked by number of elements, then by surprise (descending).
    """
    leaves = _prepare(frame, dimensions, actual, expected)
    a, e = leaves.actual, leaves.expected
    total = float(a.sum() - e.sum())
    scale = max(float(np.abs(a).sum()), float(np.abs(e).sum()))
    if len(a) == 0 or scale == 0 or abs(total) <= 1e-9 * scale:
        return []
    p_leaf, q_leaf = _shares(a, e, smoothing)
    explanations = []
    for j, dim in enumerate(leaves.dimensions):
        codes = leaves.codes[:, j]
        card = leaves.cards[j]
        change = np.bincount(codes, weights=a - e, minlength=card)
        p = np.bincount(codes, weights=p_leaf, minlength=card)
        q = np.bincount(codes, weights=q_leaf, minlength=card)
        ep = change / total
        surprise = _js(p, q)
        order = sorted(
            (k for k in range(card) if ep[k] >= min_element_power),
            key=lambda k: (-surprise[k], str(leaves.labels[j][k])),
        )
        chosen, cumulative = [], 0.0
        for k in order:
            chosen.append(k)
            cumulative += ep[k]
            if cumulative >= target_explanatory_power:
                break
        present = int((np.bincount(codes, minlength=card) > 0).sum())
        if (
            chosen
            and cumulative >= target_explanatory_power
            and len(chosen) <= max_elements
            and len(chosen) < present  # every value of the dimension explains nothing
        ):
            explanations.append(
                DimensionExplanation(
                    dimension=dim,
                    values=[_plain(leaves.labels[j][k]) for k in chosen],
                    explanatory_power=float(cumulative),
                    surprise=float(surprise[chosen].sum()),
                )
            )
    explanations.sort(key=lambda x: (len(x.values), -x.surprise))
    return explanations


# --------------------------------------------------------------------------- internals


def _prepare(frame: pd.DataFrame, dimensions: list[str], actual: str, expected: str) -> _Leaves:
    if not dimensions:
        raise ValueError("drill-down needs at least one dimension")
    if len(set(dimensions)) != len(dimensions):
        raise ValueError(f"dimensions repeat a name: {dimensions}")
    missing = [c for c in [*dimensions, actual, expected] if c not in frame.columns]
    if missing:
        raise KeyError(f"columns missing from the frame: {missing}")
    codes = np.empty((len(frame), len(dimensions)), dtype=np.int64)
    labels, cards = [], []
    for j, dim in enumerate(dimensions):
        col_codes, uniques = pd.factorize(frame[dim], use_na_sentinel=True)
        values = np.asarray(uniques, dtype=object)
        if (col_codes < 0).any():
            known = np.flatnonzero(values == UNKNOWN)
            if known.size:
                unknown_code = int(known[0])
            else:
                unknown_code = len(values)
                values = np.append(values, np.array([UNKNOWN], dtype=object))
            col_codes = np.where(col_codes < 0, unknown_code, col_codes)
        codes[:, j] = col_codes
        labels.append(values)
        cards.append(max(len(values), 1))
    a = pd.to_numeric(frame[actual], errors="raise").to_numpy(dtype=float, na_value=np.nan)
    e = pd.to_numeric(frame[expected], errors="raise").to_numpy(dtype=float, na_value=np.nan)
    return _Leaves(
        dimensions=list(dimensions),
        codes=codes,
        labels=labels,
        cards=cards,
        actual=np.nan_to_num(a, nan=0.0),
        expected=np.nan_to_num(e, nan=0.0),
    )


def _cuboids(leaves: _Leaves, max_combination: int) -> list[tuple[int, ...]]:
    """Cuboids up to ``max_combination`` dimensions, without ones that repeat a coarser cuboid.

    A pair where one dimension determines the other (every value of one maps
    to a single value of the other, constant dimensions included) makes any
    cuboid holding both equal to a smaller one.
    """
    k = len(leaves.dimensions)
    present = [len(np.unique(leaves.codes[:, j])) for j in range(k)]
    dependent = set()
    for i, j in combinations(range(k), 2):
        key = leaves.codes[:, i] * leaves.cards[j] + leaves.codes[:, j]
        cells = len(np.unique(key))
        if cells == present[i] or cells == present[j]:
            dependent.add((i, j))
    result = []
    for size in range(1, min(max_combination, k) + 1):
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


def _noise_scale(change: np.ndarray, level: np.ndarray) -> float:
    """Robust spread of the leaves' relative changes around the typical one.

    Relative change ``change / level`` with ``level = (|actual| + |expected|) / 2``
    (Squeeze's deviation score, bounded by 2 in size); its median absolute
    deviation, weighted by level and scaled to a normal sigma. Causes move a
    minority of the mass, so they barely move this estimate.
    """
    ok = level > 0
    if not ok.any():
        return 0.0
    rel, w = change[ok] / level[ok], level[ok]
    center = _weighted_median(rel, w)
    return 1.4826 * _weighted_median(np.abs(rel - center), w)


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
    key = codes[:, 0].copy()
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
    cell_codes = np.empty((len(cell_keys), codes.shape[1]), dtype=np.int64)
    rest = cell_keys
    for j in range(codes.shape[1] - 1, -1, -1):
        rest, cell_codes[:, j] = np.divmod(rest, cards[j])
    return inverse, cell_codes


def _best_candidate(
    leaves: _Leaves,
    alive: np.ndarray,
    cuboids: list[tuple[int, ...]],
    total: float,
    min_ep: float,
    min_excess: float,
    penalty: float,
    min_z: float,
    smoothing: float,
) -> tuple[tuple[int, ...], tuple[int, ...], Cause] | None:
    rows = np.flatnonzero(alive)
    codes = leaves.codes[rows]
    a, e = leaves.actual[rows], leaves.expected[rows]
    d = a - e
    residual = float(d.sum())
    sign = 1.0 if total > 0 else -1.0
    positive = np.clip(sign * d, 0, None)  # each leaf's change in the direction of the total
    bound = min_ep * abs(total)
    p_leaf, q_leaf = _shares(a, e, smoothing)
    level = (np.abs(a) + np.abs(e)) / 2
    noise = _noise_scale(d, level)

    best_key, best = None, None
    promising: dict[tuple[int, ...], np.ndarray] = {}  # cuboid -> rows whose cell may hold causes
    for cuboid in cuboids:
        if len(cuboid) == 1:
            mask = None
        else:
            mask = np.ones(len(rows), dtype=bool)
            for sub in combinations(cuboid, len(cuboid) - 1):
                mask &= promising[sub]
            if not mask.any():
                promising[cuboid] = mask
                continue
        sel = slice(None) if mask is None else mask
        sub_codes = codes[sel][:, list(cuboid)]
        inverse, cell_codes = _group(sub_codes, [leaves.cards[j] for j in cuboid])
        cells = len(cell_codes)
        pos = np.bincount(inverse, weights=positive[sel], minlength=cells)
        ok_rows = pos[inverse] >= bound
        if mask is None:
            promising[cuboid] = ok_rows
        else:
            full = np.zeros(len(rows), dtype=bool)
            full[np.flatnonzero(mask)[ok_rows]] = True
            promising[cuboid] = full
        change = np.bincount(inverse, weights=d[sel], minlength=cells)
        p = np.bincount(inverse, weights=p_leaf[sel], minlength=cells)
        ep = change / total
        excess = (change - p * residual) / total
        eligible = np.flatnonzero((ep >= min_ep) & (excess >= min_excess))
        if eligible.size == 0:
            continue
        if noise > 0:
            spread = noise * np.sqrt(np.bincount(inverse, weights=level[sel] ** 2, minlength=cells))
            z = np.abs(excess * total)[eligible] / spread[eligible]
        else:
            z = np.full(eligible.size, np.inf)
        keep = z >= min_z
        eligible, z = eligible[keep], z[keep]
        if eligible.size == 0:
            continue
        q = np.bincount(inverse, weights=q_leaf[sel], minlength=cells)[eligible]
        surprise = _js(p[eligible], q)
        score = surprise * (1.0 - penalty) ** (len(cuboid) - 1)
        top = np.flatnonzero(np.isclose(score, score.max(), rtol=1e-9, atol=0.0))
        for t in top:
            cell = tuple(int(c) for c in cell_codes[eligible[t]])
            labels = tuple(str(leaves.labels[j][c]) for j, c in zip(cuboid, cell))
            key = (-round(float(score[t]), 12), len(cuboid), cuboid, labels)
            if best_key is None or key < best_key:
                best_key = key
                best = (cuboid, cell, float(surprise[t]), float(p[eligible[t]]), float(z[t]))
    if best is None:
        return None
    cuboid, cell, surprise, share, z_score = best
    in_set = np.all(codes[:, list(cuboid)] == np.asarray(cell), axis=1)
    pseudo = smoothing * (np.clip(a, 0, None).sum() + np.clip(e, 0, None).sum()) / (2 * len(a))
    while True:
        narrower = _narrower(leaves, codes, d, e, in_set, cuboid, cell, set(cuboids), pseudo)
        if narrower is None:
            break
        cuboid, cell, in_set = narrower
        share = float(p_leaf[in_set].sum())
        surprise = float(_js(np.array([share]), np.array([q_leaf[in_set].sum()]))[0])
        if noise > 0:
            spread = noise * np.sqrt((level[in_set] ** 2).sum())
            z_score = abs(d[in_set].sum() - share * residual) / spread
    a_set, e_set = float(a[in_set].sum()), float(e[in_set].sum())
    cause = Cause(
        elements={
            leaves.dimensions[j]: _plain(leaves.labels[j][c]) for j, c in zip(cuboid, cell)
        },
        explanatory_power=(a_set - e_set) / total,
        surprise=surprise,
        actual=a_set,
        expected=e_set,
        support=int(in_set.sum()),
        expected_share=share,
        z_score=z_score,
    )
    return cuboid, cell, cause


def _narrower(
    leaves: _Leaves,
    codes: np.ndarray,
    d: np.ndarray,
    e: np.ndarray,
    in_set: np.ndarray,
    cuboid: tuple[int, ...],
    cell: tuple[int, ...],
    allowed: set[tuple[int, ...]],
    pseudo: float,
) -> tuple[tuple[int, ...], tuple[int, ...], np.ndarray] | None:
    """The set narrowed by one more dimension value, when the leaves it drops did not move.

    Surprise saturates when a set's baseline share is negligible (a state that
    normally never occurs), so it cannot tell ``node=n22`` from
    ``node=n22 & team=risk`` when only the latter moved. Narrow when the
    dropped leaves carry at most ``_DROP_SHARE`` of the set's change and moved,
    relative to their baseline, at most ``_DROP_RIPPLE`` times as much as the
    kept ones: a root cause's leaves move together (Squeeze's ripple effect),
    so leaves that stayed put are not part of it.
    """
    rows = np.flatnonzero(in_set)
    change = d[rows].sum()
    best, best_change = None, None
    for k in range(len(leaves.dimensions)):
        if k in cuboid:
            continue
        wider = tuple(sorted((*cuboid, k)))
        if wider not in allowed:
            continue
        sub = codes[rows, k]
        card = leaves.cards[k]
        kept_change = np.bincount(sub, weights=d[rows], minlength=card)
        kept_base = np.bincount(sub, weights=np.clip(e[rows], 0, None), minlength=card)
        kept_n = np.bincount(sub, minlength=card)
        for v in np.flatnonzero((kept_n > 0) & (kept_n < len(rows))):
            dropped = change - kept_change[v]
            if abs(dropped) > _DROP_SHARE * abs(change):
                continue
            kept_rel = kept_change[v] / (kept_base[v] + pseudo * kept_n[v])
            dropped_rel = dropped / (kept_base.sum() - kept_base[v] + pseudo * (len(rows) - kept_n[v]))
            if abs(dropped_rel) > _DROP_RIPPLE * abs(kept_rel):
                continue
            if best is None or abs(kept_change[v]) > best_change:
                best, best_change = (k, int(v)), abs(kept_change[v])
    if best is None:
        return None
    k, v = best
    values = dict(zip(cuboid, cell)) | {k: v}
    narrowed = tuple(sorted(values))
    narrowed_cell = tuple(values[j] for j in narrowed)
    return narrowed, narrowed_cell, in_set & (codes[:, k] == v)


def _plain(value: object) -> object:
    """numpy scalars to Python scalars, so causes print and serialise plainly."""
    return value.item() if isinstance(value, np.generic) else value
