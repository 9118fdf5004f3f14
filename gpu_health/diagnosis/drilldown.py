"""Drill-down of a change to the dimension values whose leaves moved, beyond noise.

Given leaves -- one row per combination of dimension values (region, node,
sku, driver_version, ...) with a measure observed (``actual``) and expected
(``expected``), e.g. GPU-minutes in one loss state -- find every set of
leaves (a dimension value, or an intersection of any number of them) that moved
together beyond the leaves' noise: the root causes.

A ratio KPI (failure rate, a state's share of paid GPU-minutes, queue wait per
job) is drilled by its numerator and denominator (as RiskLoc and RobustSpot
do): ``actual`` / ``expected`` are the numerator, ``actual_base`` /
``expected_base`` the denominator. Each leaf's expected numerator is taken at
its *observed* denominator (``base_actual * rate``, the leaf's expected rate
shrunk toward the common one by a median leaf's worth of history), so more
traffic is not a cause and a lower rate is; the leaf's sampling noise
(binomial for a rate in [0, 1], counting otherwise) is added to its noise; and
moves are measured in units of the common ratio times the leaf's volume, so a
change that shifts every leaf's ratio alike is spread evenly.

Method (after Squeeze, ISSRE 2019 -- the generalized ripple effect -- and
RiskLoc, 2022 -- remove a found cause and search again; no code of theirs):

1. Each leaf's move: ``d = actual - expected`` beyond the typical leaf's move
   ``c * level`` (``level``: what the leaf was expected to carry; for a leaf
   that appears from nothing, what a typical leaf was expected to carry).
   ``c`` is the half-sample mode of the leaves' relative moves -- 0 unless
   most leaves moved alike: a change spread evenly over the leaves is no
   cause, whatever its size.
2. Each leaf's noise: ``s**2 * (level**2 + kappa * level)`` (relative and
   counting noise), fitted robustly on the leaves (:func:`_noise_variance`);
   a leaf that more than doubled is judged at half what it carries, so a leaf
   grown from a near-zero forecast stays within a bounded number of sigmas.
3. A set's score ``G = (sum w level dev)**2 / sum w level**2`` (``w``: the
   inverse noise variance) is the squared z of the set's common move under the
   ripple model (every leaf of a cause moves by the same factor). It is
   largest for the exact cause: a wider set dilutes it with leaves that did
   not move, a narrower one holds fewer of the moved leaves. It does not care
   about the sign of the net change: causes that move against it count, and
   its share of the net change plays no part.
4. A candidate is eligible when ``G`` passes Bonferroni over all candidate
   sets (``alpha``) and its leaves move, on average, ``min_leaf_z`` of their
   own noise sigmas (a slight tilt of many leaves is not a cause). The best
   eligible candidate (score discounted by ``combination_penalty`` per extra
   dimension, Occam) must *move as one* (:func:`_moves_as_one`: no part of it
   holding a third of its evidence stayed put, leaf by leaf or split by a
   further dimension -- else it is a wider set around the real causes) and is
   then *widened* while the set without one of its dimensions also moves as
   one (:func:`_widest`: its siblings moved too, so that dimension explains
   nothing).
5. Stop rule: the chosen set must also beat what the leaves not attributed
   yet reach when their deviations are shuffled across them
   (:func:`_shuffled_max`), unless the leaves outside it show no deviation at
   all. This is the noise test on the data's own deviations: heavy tails and
   clusters of odd leaves are in it. A single leaf (one of its own shuffled
   values) must instead beat what the largest of the other leaves reaches by
   noise alone, from the tail of their deviations (:func:`_single_leaf_bar`).
   When the best candidates fail it, what is left is noise and the search
   stops.
6. The cause's leaves are removed and the search repeats (``max_causes`` at
   most): later causes are measured on leaves not attributed yet, so
   explanatory powers add up and never count a GPU-minute twice. Causes found as children of one parent
   whose other leaves moved with them are reported as the parent (:mod:`.drilldown_parent`).

Causes are returned ranked by explanatory power, ``(A_S - E_S) / F`` with
``F`` the net change (negative for a cause against the net change: those come
last). Ties are broken deterministically: fewer dimensions, then the order of
``dimensions``, then the value's text. ``surprise`` (Adtributor's
Jensen-Shannon term of the set, base 2) and ``expected_share`` are reported as
evidence; ``z_score`` is ``sqrt(G)``.

Measured with one parameter set (the defaults) by ``bench/bench_rca.py``; see
docs/rca.md.

Input handling: NaN / None dimension values become the value ``"unknown"``
(a real, reportable element: "telemetry without a driver label" is a finding);
NaN measures count as 0; duplicate rows of a leaf are summed. No change (or a
change spread evenly) has nothing to explain: ``[]``.

:func:`adtributor` is Adtributor's per-dimension procedure (Bhagwan et al.,
NSDI 2014), kept for evidence: per dimension, elements ranked by surprise are
accumulated until their explanatory power reaches a target, and dimensions are
ranked by how few elements they need, then by surprise.
"""

from __future__ import annotations

from dataclasses import dataclass
from statistics import NormalDist

import numpy as np
import pandas as pd

from gpu_health.codes import factorize
from gpu_health.diagnosis.drilldown_lattice import _Cells, _Lattice, _lattice, _score_cells, _shuffled_max
from gpu_health.diagnosis.drilldown_parent import _prefer_parents
from gpu_health.diagnosis.drilldown_stats import (_cuboids, _group, _js, _LeafStats, _Leaves, _noise_variance,
                                                  _numbers, _rose_from_zero, _shares, _single_leaf_bar,
                                                  _typical_move)

UNKNOWN = "unknown"
# Default cap on causes: the stop rule (no candidate beyond noise) ends the
# search first on any data whose causes are fewer; the cap only bounds the
# time and the length of an alert.
MAX_CAUSES = 5
# A cause's leaves move, on average, at least 1 of their own noise sigmas: a
# root cause shows in its leaves (Squeeze's ripple effect), not only in the sum
# of hundreds of them (a tilt of a fraction of a sigma over many leaves is
# significant in sum, yet no leaf shows it). One sigma -- a move as large as
# the leaf's noise -- is the smallest a single leaf can be said to show; a
# stricter bar (2 sigma) drops causes whose parts move unevenly (a bitrate
# failing on every device, some more than others). The same bar tells a part
# that "stayed put" (_moves_as_one).
MIN_LEAF_Z = 1.0
# _moves_as_one: a set does not move as one when the parts of it that stayed
# put carry at least a third of its evidence (information): then at least one
# leaf in three did not move, and the set overstates the cause's breadth by
# half or more; a smaller share (a few odd leaves inside a cause, a device
# that barely moved) leaves the set the best description of what moved.
_STAYED_SHARE = 1 / 3
# Candidates per round tested against the shuffled noise before the search
# stops: the best ones failing means what is left is noise (bounds the time).
_NULL_CHECKS = 3
# Candidates checked by _moves_as_one per round, best first (bounds the time).
_MAX_CHECKS = 200


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
    z_score: float = float("inf")  # the set's common move in noise sigmas
    ratio_actual: float = float("nan")  # a ratio KPI: the set's observed ratio
    ratio_expected: float = float("nan")  # a ratio KPI: the set's expected ratio

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
        ratio = ""
        if np.isfinite(self.ratio_actual) or np.isfinite(self.ratio_expected):
            ratio = f"ratio {self.ratio_actual:.4g} vs {self.ratio_expected:.4g} expected; "
        return (
            f"{self.label()}: {ratio}{change:+,.6g}{relative}, actual {self.actual:,.6g} vs expected "
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


def drill_down(
    frame: pd.DataFrame,
    dimensions: list[str],
    actual: str = "actual",
    expected: str = "expected",
    *,
    max_causes: int = MAX_CAUSES,
    max_combination: int | None = None,
    min_explanatory_power: float = 0.0,
    min_excess: float = 0.0,
    combination_penalty: float = 0.1,
    alpha: float = 0.05,
    smoothing: float = 0.01,
    min_leaf_z: float = MIN_LEAF_Z,
    actual_base: str | None = None,
    expected_base: str | None = None,
) -> list[Cause]:
    """The dimension values (or intersections) whose leaves moved together, beyond noise.

    ``frame`` holds one row per leaf: the ``dimensions`` columns and the
    measure observed (``actual``) and expected (``expected``). An additive
    measure (GPU-minutes) is drilled as it is; a ratio KPI (failure rate,
    goodput share, queue wait per job) by its numerator and denominator: pass
    the numerator as ``actual`` / ``expected`` and the denominator as
    ``actual_base`` / ``expected_base`` (see the module docstring).

    - ``max_causes``: at most this many causes (the stop rule usually ends
      the search before: it stops when no candidate stands out from noise).
    - ``max_combination``: largest number of dimensions in one cause (None: all).
    - ``min_explanatory_power``: smallest share of the net change, in size,
      a cause may carry (0: any share; causes moving against the net count).
    - ``min_excess``: smallest common move of a cause's leaves beyond the
      typical leaf's, relative to their level (0.1: ten percent).
    - ``combination_penalty``: score discount per extra dimension (Occam).
    - ``alpha``: family-wise level of the Bonferroni test over all candidate
      sets; 0 disables it and the shuffled-noise test.
    - ``smoothing``: pseudo-count per leaf, as a share of the mean leaf mass.
    - ``min_leaf_z``: the cause's leaves must move, on average, at least this
      many of their own noise sigmas (a root cause shows in its leaves).
    - ``actual_base`` / ``expected_base``: the ratio's denominator columns.

    Returns causes ranked by explanatory power (with the net change first,
    against it last); an empty list when no set of leaves stands out (no
    change, a change spread evenly, or one within noise).

    The defaults are one parameter set for any data, each bound by a reason
    that holds whatever the measure: ``alpha`` = 0.05 (the usual family-wise
    level), ``min_leaf_z`` = 1 (a cause shows in its typical leaf:
    :data:`MIN_LEAF_Z`), no share or size floor (``min_explanatory_power`` =
    ``min_excess`` = 0: a cause is judged by its own deviation against
    noise), ``max_causes`` = 5 (a bound on time and alert length; the stop
    rule ends the search first), ``max_combination`` = None (a cause may
    span every dimension, down to a single leaf) and
    ``combination_penalty`` = 0.1. The same set scores Squeeze's B0
    and RobustSpot's RS in ``bench/bench_rca.py`` (docs/rca.md).
    """
    _check_parameters(max_causes, max_combination, combination_penalty, actual_base, expected_base)
    leaves = _prepare(frame, dimensions, actual, expected, actual_base, expected_base)
    return _drill(leaves, max_causes=max_causes, max_combination=max_combination,
                  min_explanatory_power=min_explanatory_power, min_excess=min_excess,
                  combination_penalty=combination_penalty, alpha=alpha, smoothing=smoothing, min_leaf_z=min_leaf_z)


class LeafSet:
    """Leaves given as integer codes, grouped once, for drilling several measures over the same leaves
    (:func:`drill_down_codes`; decompose drills every state of one kind in a partition over one set).

    ``codes[:, j]`` numbers dimension ``j``'s values (``labels[j]``) in order of first appearance over the rows,
    as ``pd.factorize`` numbers them (which fixes the order of the leaves and so of every sum); no label may be
    null (``drill_down`` reads a null as ``"unknown"``). Rows with the same codes are one leaf. The cuboid
    lattice of the leaves is built on first use and kept with the set (it depends on the codes only).
    """

    def __init__(self, dimensions: list[str], codes: np.ndarray, labels: list[np.ndarray]):
        if not dimensions:
            raise ValueError("drill-down needs at least one dimension")
        self.dimensions = list(dimensions)
        self.labels = list(labels)
        self.cards = [max(len(v), 1) for v in labels]
        codes = np.asarray(codes, dtype=np.int64).reshape(-1, len(self.dimensions))
        self.rows = len(codes)
        self.inverse, self.codes = _group(codes, self.cards) if len(codes) else (np.zeros(0, dtype=np.int64), codes)
        self._lattices: dict[int, _Lattice] = {}

    def leaves(self, measures: np.ndarray, ratio: bool) -> _Leaves:
        return _leaves_of(self.dimensions, self.codes, self.labels, self.cards, self.inverse, measures, ratio)

    def lattice(self, leaves: _Leaves, max_combination: int | None) -> _Lattice:
        if max_combination not in self._lattices:
            self._lattices[max_combination] = _lattice(leaves, _cuboids(leaves, max_combination))
        return self._lattices[max_combination]


def drill_down_codes(
    leaf_set: LeafSet,
    actual: np.ndarray,
    expected: np.ndarray,
    *,
    actual_base: np.ndarray | None = None,
    expected_base: np.ndarray | None = None,
    max_causes: int = MAX_CAUSES,
    max_combination: int | None = None,
    min_explanatory_power: float = 0.0,
    min_excess: float = 0.0,
    combination_penalty: float = 0.1,
    alpha: float = 0.05,
    smoothing: float = 0.01,
    min_leaf_z: float = MIN_LEAF_Z,
) -> list[Cause]:
    """:func:`drill_down` of the leaves of ``leaf_set`` with these measures (one value per row of its codes):
    the causes ``drill_down`` finds in the frame whose column ``dimensions[j]`` holds ``labels[j][codes[:, j]]``
    beside the measure columns. A caller drilling many frames cut from one table (decompose: every state of
    every partition) factorizes the table once and derives each frame's codes with integer operations, instead
    of hashing its strings again per frame.
    """
    _check_parameters(max_causes, max_combination, combination_penalty, actual_base, expected_base)
    measures = [np.nan_to_num(np.asarray(m, dtype=float), nan=0.0, posinf=0.0, neginf=0.0)
                for m in (actual, expected, *(b for b in (actual_base, expected_base) if b is not None))]
    leaves = leaf_set.leaves(np.column_stack(measures), actual_base is not None)
    return _drill(leaves, max_causes=max_causes, max_combination=max_combination,
                  min_explanatory_power=min_explanatory_power, min_excess=min_excess,
                  combination_penalty=combination_penalty, alpha=alpha, smoothing=smoothing, min_leaf_z=min_leaf_z,
                  lattice=lambda: leaf_set.lattice(leaves, max_combination))


def _check_parameters(max_causes, max_combination, combination_penalty, actual_base, expected_base) -> None:
    if max_causes < 1 or (max_combination is not None and max_combination < 1):
        raise ValueError("max_causes and max_combination must be at least 1")
    if not 0 <= combination_penalty < 1:
        raise ValueError("combination_penalty must be in [0, 1)")
    if (actual_base is None) != (expected_base is None):
        raise ValueError("a ratio needs both actual_base and expected_base (or neither)")


def _drill(leaves: _Leaves, *, max_causes: int, max_combination: int | None, min_explanatory_power: float,
           min_excess: float, combination_penalty: float, alpha: float, smoothing: float,
           min_leaf_z: float, lattice=None) -> list[Cause]:
    """The search of :func:`drill_down` (module docstring, steps 1-6) on prepared leaves (``lattice``: a
    function giving their lattice, when it is kept with them; else built here)."""
    n = len(leaves.actual)
    if n == 0:
        return []
    a, e = leaves.actual, leaves.expected
    d = a - e
    scale = max(float(np.abs(a).sum()), float(np.abs(e).sum()))
    if scale == 0 or float(np.abs(d).sum()) <= 1e-9 * scale:
        return []
    total = float(d.sum())
    pseudo = smoothing * scale / n
    # each leaf's base: what it was expected to carry; where nothing was
    # expected, what a typical leaf was expected to carry (or, when nothing was
    # expected anywhere, carries): a leaf that appears from 0 is measured
    # against the size of its siblings, not against 0
    informative = (np.abs(a) + np.abs(e)) > 1e-12 * scale
    if leaves.volume is not None:  # a ratio: a leaf with volume shows its ratio, even one of 0
        informative |= leaves.volume > 0
    expected_somewhere = np.abs(e) > 0
    typical = float(np.median(np.abs(e[expected_somewhere]))) if expected_somewhere.any() else float(
        np.median(np.abs(a[informative])))
    level = np.where(informative, np.where(expected_somewhere, np.abs(e), typical), 0.0)
    if leaves.volume is not None:  # a ratio: moves of the ratio, in units of the common ratio
        level = np.where(informative & (leaves.volume > 0), leaves.volume, level)
    center, quiet = _typical_move(d, level, e, pseudo)
    dev = np.where(informative, d - center * level, 0.0)
    if float(np.abs(dev).sum()) <= 1e-9 * scale:
        return []
    # an additive leaf's noise scale: the larger of its forecast and half its actual -- a leaf grown from a
    # near-zero forecast has its relative deviation bounded by 2 (the symmetric relative deviation's bound), not
    # exploding; moves up to a doubling keep the forecast's scale. Ratios: already at their observed volume.
    noise_level = level if leaves.volume is not None else np.where(
        informative & expected_somewhere, np.maximum(0.5 * np.abs(a), level), level)
    variance = _noise_variance(dev, noise_level, informative if quiet is None else informative & quiet)
    if leaves.sampling is not None:
        variance = variance + leaves.sampling
    weight = np.where(informative, 1.0 / variance, 0.0)
    score_x = weight * level * dev  # per leaf: sum over a set / its information = the set's common move
    score_h = weight * level**2
    stats = _LeafStats(d=d, dev=dev, x=score_x, h=score_h, informative=informative)

    del level, noise_level, variance, weight  # in stats now: the search holds O(leaves) arrays, few of them
    lattice = lattice() if lattice is not None else _lattice(leaves, _cuboids(leaves, max_combination))
    alive = np.ones(n, dtype=bool)
    bonferroni = None
    rounds = []
    # Occam: the score discounted per extra dimension (one factor per cuboid, as a Python float)
    discount = [(1.0 - combination_penalty) ** (len(c) - 1) for c in lattice.cuboids]
    floors = (min_leaf_z, min_excess, min_explanatory_power * (abs(total) if total != 0 else np.inf))
    for round_ in range(max_causes):
        cells = _score_cells(lattice, stats, alive, floors, discount, _MAX_CHECKS)
        if bonferroni is None:
            hypotheses = cells.hypotheses if cells is not None else 0
            bonferroni = NormalDist().inv_cdf(1 - alpha / max(hypotheses, 1)) if alpha > 0 else 0.0
        found = _select(leaves, stats, alive, lattice, cells, bonferroni, min_leaf_z, round_ if alpha > 0 else None)
        if found is None:
            break
        rounds.append((*found, alive.copy()))
        alive &= ~found[3]
    causes = [_cause(leaves, was_alive, in_set, cuboid, cell, g, total, smoothing)
              for cuboid, cell, g, in_set, was_alive in _prefer_parents(leaves, stats, rounds, min_leaf_z)]
    causes.sort(key=lambda c: -c.explanatory_power if np.isfinite(c.explanatory_power) else 0.0)
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


def _prepare(
    frame: pd.DataFrame,
    dimensions: list[str],
    actual: str,
    expected: str,
    actual_base: str | None = None,
    expected_base: str | None = None,
) -> _Leaves:
    if not dimensions:
        raise ValueError("drill-down needs at least one dimension")
    if len(set(dimensions)) != len(dimensions):
        raise ValueError(f"dimensions repeat a name: {dimensions}")
    bases = [c for c in (actual_base, expected_base) if c is not None]
    missing = [c for c in [*dimensions, actual, expected, *bases] if c not in frame.columns]
    if missing:
        raise KeyError(f"columns missing from the frame: {missing}")
    codes = np.empty((len(frame), len(dimensions)), dtype=np.min_scalar_type(-len(frame) - 1))  # + "unknown"
    labels, cards = [], []
    for j, dim in enumerate(dimensions):
        col_codes, uniques = factorize(frame[dim], use_na_sentinel=True)
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
    measures = np.column_stack([_numbers(frame, c) for c in (actual, expected, *bases)])
    # one row per leaf: duplicate rows of a leaf (partitions, halves) are summed
    inverse, codes = _group(codes, cards) if len(codes) else (np.zeros(0, dtype=np.int64), codes)
    return _leaves_of(list(dimensions), codes, labels, cards, inverse, measures, bool(bases))


def _leaves_of(dimensions: list[str], codes: np.ndarray, labels: list[np.ndarray], cards: list[int],
               inverse: np.ndarray, measures: np.ndarray, ratio: bool) -> _Leaves:
    """The leaves ``codes`` (distinct code tuples, sorted; ``inverse``: the leaf of each row) with the rows'
    measures (columns: actual, expected, and for a ratio actual_base, expected_base) summed per leaf."""
    if len(codes) < len(inverse):
        measures = np.column_stack(
            [np.bincount(inverse, weights=measures[:, j], minlength=len(codes)) for j in range(measures.shape[1])]
        )
    elif len(codes):
        order = np.empty(len(inverse), dtype=np.int64)
        order[inverse] = np.arange(len(inverse))
        measures = measures[order]
    leaves = _Leaves(
        dimensions=list(dimensions), codes=codes, labels=labels, cards=cards,
        actual=measures[:, 0], expected=measures[:, 1],
    )
    if ratio:
        leaves.base_actual, leaves.base_expected = measures[:, 2], measures[:, 3]
        leaves.history = measures[:, 1]
        leaves.expected, leaves.sampling, leaves.volume = _expected_at_actual_volume(
            measures[:, 1], measures[:, 3], measures[:, 2]
        )
    return leaves


def _select(
    leaves: _Leaves,
    stats: _LeafStats,
    alive: np.ndarray,
    lattice: _Lattice,
    cells: _Cells | None,
    min_z: float,
    min_leaf_z: float,
    null_round: int | None,
) -> tuple[tuple[int, ...], tuple[int, ...], float, np.ndarray] | None:
    """The best eligible cell that moved as one and beats its siblings' noise: candidates, best score first,
    must move as one (:func:`_moves_as_one`; then widened by :func:`_widest`) and score above what the leaves
    not attributed yet reach when shuffled (:func:`_shuffled_max`; ``null_round``: the search round, or None to
    skip) -- unless the leaves outside it show no deviation at all. After ``_NULL_CHECKS`` fail, the rest is noise.
    """
    if cells is None:
        return None
    eligible = np.flatnonzero(cells.g >= min_z**2)
    if eligible.size == 0:
        return None
    # best first; equal scores in the order of the cells (cuboid, then key), as the pass lists them
    top = eligible[np.argsort(-cells.score[eligible], kind="stable")[:_MAX_CHECKS]]
    tested = 0
    for cuboid_i, key, g, move in _ranked(leaves, lattice, cells, top):
        cuboid = lattice.cuboids[cuboid_i]
        cell = lattice.cell_codes(cuboid_i, key)
        in_set = alive & lattice.members(cuboid_i, key)
        if not _moves_as_one(leaves, stats, in_set, cuboid, move, min_z, min_leaf_z):
            continue
        found = _widest(leaves, stats, alive, cuboid, cell, g, move, min_z, min_leaf_z)
        if null_round is None:
            return found
        # noise: what the leaves not attributed yet reach when shuffled, drawn from the leaves outside the set (a
        # set over most of the cube, shuffled into the null, would set its own bar); a set resting on one leaf is
        # that leaf: an additive one meets _single_leaf_bar, a ratio's (its sampling noise one-sided near a rate
        # of 0 or 1) the bar shuffled from every leaf, its own among them; a set whose siblings show no deviation
        # at all is beyond any noise
        outside = alive & ~found[3]
        one_leaf = _one_leaf_shows_it(stats, found[3], min_z)
        if leaves.volume is None and one_leaf:
            passed = found[2] > _single_leaf_bar(stats, outside, move)
        else:
            bar = _shuffled_max(lattice, stats, alive, null_round, pool=None if one_leaf else outside)
            passed = found[2] > bar**2
        if passed or not stats.x[outside].any():
            return found
        tested += 1
        if tested >= _NULL_CHECKS:
            break
    return None


def _one_leaf_shows_it(stats: _LeafStats, in_set: np.ndarray, min_z: float) -> bool:
    """True when the set's evidence is one leaf's: without its strongest leaf the rest is within ``min_z``.

    Such a set (a parent holding one odd leaf beside leaves that barely moved) is as good as a single leaf and is
    judged by the single-leaf bar; the shuffled bar, drawn from the leaves outside the set, would not contain
    that leaf and so could not tell it apart from the noise of any one leaf."""
    rows = np.flatnonzero(in_set & stats.informative)
    if rows.size <= 1:
        return True
    x, h = stats.x[rows], stats.h[rows]
    top = int(np.argmax(x * x / h))
    rest_h = float(h.sum() - h[top])
    return rest_h <= 0 or (float(x.sum()) - float(x[top])) ** 2 / rest_h < min_z**2


def _ranked(leaves: _Leaves, lattice: _Lattice, cells: _Cells, top: np.ndarray):
    """The candidates ``top`` (best raw score first) in the order the search tries them: by score
    rounded to 9 significant digits (descending), then fewer dimensions, the cuboid, the values' text.

    Yields ``(cuboid index, cell key, g, move)``, one run of equal rounded scores at a time: rounding is
    monotone, so a run is contiguous in ``top`` and only a run of ties needs its labels (most searches stop at
    the first candidate, so the labels of the rest are never built).
    """
    rounded = [float(f"{float(s):.9g}") for s in cells.score[top]]
    i = 0
    while i < len(top):
        j = i + 1
        while j < len(top) and rounded[j] == rounded[i]:
            j += 1
        run = []
        for t in top[i:j]:
            ci, key = int(cells.cuboid[t]), int(cells.key[t])
            cuboid = lattice.cuboids[ci]
            labels = (tuple(str(leaves.labels[d][v]) for d, v in zip(cuboid, lattice.cell_codes(ci, key)))
                      if j - i > 1 else ())
            run.append(((len(cuboid), cuboid, labels), ci, key, float(cells.g[t]), float(cells.move[t])))
        run.sort(key=lambda r: r[0])  # stable: equal keys keep the raw-score order
        for _, ci, key, g, move in run:
            yield ci, key, g, move
        i = j


def _widest(
    leaves: _Leaves,
    stats: _LeafStats,
    alive: np.ndarray,
    cuboid: tuple[int, ...],
    cell: tuple[int, ...],
    g: float,
    move: float,
    min_z: float,
    min_leaf_z: float,
) -> tuple[tuple[int, ...], tuple[int, ...], float, np.ndarray]:
    """The chosen set widened, one dimension dropped at a time, while the wider set moves as one.

    A cause whose leaves moved by different amounts (a bad bitrate hurting
    every device, some more than others) can score its worst part above the
    whole. When the set without one of its dimensions moved the same way,
    beyond noise and per leaf, and none of its parts stayed put
    (:func:`_moves_as_one`), the wider set is the cause: its siblings moved
    too, so the dropped dimension is not part of the explanation (Squeeze's
    ripple effect, read upward).
    """
    while len(cuboid) > 1:
        best = None
        for j in range(len(cuboid)):
            wider = cuboid[:j] + cuboid[j + 1:]
            wider_cell = cell[:j] + cell[j + 1:]
            in_wider = alive & np.all(leaves.codes[:, list(wider)] == np.asarray(wider_cell), axis=1)
            members = in_wider & stats.informative
            sh = float(stats.h[members].sum())
            if sh <= 0:
                continue
            sx = float(stats.x[members].sum())
            g_w, move_w = sx * sx / sh, sx / sh
            if move_w * move <= 0 or g_w < min_z**2 or g_w / max(int(members.sum()), 1) < min_leaf_z**2:
                continue
            if not _moves_as_one(leaves, stats, in_wider, wider, move_w, min_z, min_leaf_z):
                continue
            if best is None or g_w > best[2]:
                best = (wider, wider_cell, g_w, move_w)
        if best is None:
            break
        cuboid, cell, g, move = best
    in_set = alive & np.all(leaves.codes[:, list(cuboid)] == np.asarray(cell), axis=1)
    return cuboid, cell, g, in_set


def _moves_as_one(
    leaves: _Leaves,
    stats: _LeafStats,
    in_set: np.ndarray,
    cuboid: tuple[int, ...],
    move: float,
    min_z: float,
    min_leaf_z: float,
) -> bool:
    """False when part of the set stayed put while the rest moved.

    A root cause moves all its leaves alike (Squeeze's generalized ripple
    effect). A part "stayed put" when its leaves moved, on average, less than
    ``min_leaf_z`` of their noise sigmas in the set's direction -- the bar a
    cause itself must clear. Parts are taken leaf by leaf, then by each split
    of the set along one more dimension; the set fails when the parts that
    stayed put carry at least ``_STAYED_SHARE`` of its information and their
    move differs from the rest's by at least ``min_z`` sigmas. This rejects a
    wide set (``region``, ``team=risk``) that holds one or several narrower
    causes (two nodes of it) beside leaves that did not move; the narrower
    causes are then found on their own.
    """
    rows = np.flatnonzero(in_set & stats.informative)
    sign = 1.0 if move >= 0 else -1.0
    # leaf by leaf first: leaves that stayed put, wherever they are in the set
    x, h = stats.x[rows], stats.h[rows]
    stayed_leaf = (sign * x < min_leaf_z * np.sqrt(h)) & ~_rose_from_zero(leaves, rows, sign)
    if _split_differs(x, h, stayed_leaf, min_z):
        return False
    for k in range(len(leaves.dimensions)):
        if k in cuboid:
            continue
        sub = leaves.codes[rows, k]
        card = leaves.cards[k]
        sx = np.bincount(sub, weights=stats.x[rows], minlength=card)
        sh = np.bincount(sub, weights=stats.h[rows], minlength=card)
        present = sh > 0
        if present.sum() < 2:
            continue
        count = np.bincount(sub, minlength=card)
        # a part moved when its leaves moved, on average, beyond their noise
        # in the set's direction (the per-leaf rule a cause itself must meet)
        stayed = present & (sign * sx < min_leaf_z * np.sqrt(sh * np.maximum(count, 1)))
        if _split_differs(sx[present], sh[present], stayed[present], min_z):
            return False
    return True


def _split_differs(x: np.ndarray, h: np.ndarray, stayed: np.ndarray, min_z: float) -> bool:
    """True when the parts that stayed carry at least ``_STAYED_SHARE`` of the information and moved differently."""
    if not stayed.any() or stayed.all():
        return False
    h_st, h_mv = h[stayed].sum(), h[~stayed].sum()
    if h_st < _STAYED_SHARE * (h_st + h_mv) or h_mv <= 0:
        return False
    m_st, m_mv = x[stayed].sum() / h_st, x[~stayed].sum() / h_mv
    return (m_mv - m_st) ** 2 / (1.0 / h_st + 1.0 / h_mv) >= min_z**2


def _cause(
    leaves: _Leaves,
    alive: np.ndarray,
    in_set: np.ndarray,
    cuboid: tuple[int, ...],
    cell: tuple[int, ...],
    g: float,
    total: float,
    smoothing: float,
) -> Cause:
    a, e = leaves.actual, leaves.expected
    a_set, e_set = float(a[in_set].sum()), float(e[in_set].sum())
    rows = np.flatnonzero(alive)
    p_leaf, q_leaf = _shares(a[rows], e[rows], smoothing)
    member = in_set[rows]
    share = float(p_leaf[member].sum())
    surprise = max(0.0, float(_js(np.array([share]), np.array([q_leaf[member].sum()]))[0]))
    scale = max(float(np.abs(a).sum()), float(np.abs(e).sum()))
    ep = (a_set - e_set) / total if abs(total) > 1e-12 * scale else float("nan")
    ratio_actual = ratio_expected = float("nan")
    if leaves.base_actual is not None:
        ratio_actual = _ratio(a_set, float(leaves.base_actual[in_set].sum()))
        ratio_expected = _ratio(float(leaves.history[in_set].sum()), float(leaves.base_expected[in_set].sum()))
    return Cause(
        elements={leaves.dimensions[j]: _plain(leaves.labels[j][c]) for j, c in zip(cuboid, cell)},
        explanatory_power=ep,
        surprise=surprise,
        actual=a_set,
        expected=e_set,
        support=int(in_set.sum()),
        expected_share=share,
        z_score=float(np.sqrt(g)),
        ratio_actual=ratio_actual,
        ratio_expected=ratio_expected,
    )


def _ratio(numerator: float, denominator: float) -> float:
    return numerator / denominator if denominator != 0 else float("nan")


def _expected_at_actual_volume(
    history: np.ndarray, base_expected: np.ndarray, base_actual: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A ratio's expected numerator at the observed denominator, ``base_actual * rate``; its sampling variance; volume.

    ``rate`` is each leaf's expected ratio ``history / base_expected``, shrunk
    toward the ratio of all leaves with a prior weight of the median leaf's
    expected denominator: a leaf with little history (a few sessions) takes
    the common rate, one with much history its own, and a leaf without history
    the common rate.

    Sampling variance: a numerator counted out of its denominator (every rate
    in [0, 1]: successes of sessions, failed jobs of jobs) varies at least
    binomially, ``base_actual * rate * (1 - rate)``; any other ratio (waiting
    seconds per job) at least as a count, ``base_actual * rate``. It is added to
    the fitted noise, so a leaf of 3 sessions that lost 1 is not a 10-sigma
    event however quiet the large leaves are.

    Volume: ``base_actual * common``, each leaf's size at the common ratio.
    Moves of a ratio are measured against it (an absolute change of the ratio,
    in units of the common ratio): a change that shifts every leaf's ratio by
    the same amount is spread evenly, whatever each leaf's own ratio was.
    """
    base_pos = np.clip(base_expected, 0, None)
    total_base = base_pos.sum()
    common = history.sum() / total_base if total_base > 0 else 0.0
    prior = float(np.median(base_pos[base_pos > 0])) if (base_pos > 0).any() else 1.0
    rate = (history + prior * common) / (base_pos + prior)
    volume = np.clip(base_actual, 0, None)
    if ((rate >= 0) & (rate <= 1)).all():
        sampling = volume * rate * (1 - rate)
    else:
        sampling = volume * np.abs(rate)
    return base_actual * rate, sampling, np.abs(base_actual) * (abs(common) if common != 0 else 1.0)


def _plain(value: object) -> object:
    """numpy scalars to Python scalars, so causes print and serialise plainly."""
    return value.item() if isinstance(value, np.generic) else value
