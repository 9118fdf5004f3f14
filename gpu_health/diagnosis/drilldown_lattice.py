"""The drill-down's cuboid lattice (gpu_health.diagnosis.drilldown), scored one cuboid at a time.

Memory is O(leaves + cells of one cuboid): a cuboid's cells are grouped from the leaves' codes when it is scored
and freed before the next, and only a short list of candidates per cuboid outlives the pass; a chosen cell is
mapped back to its leaves by its key. Small frames keep every cuboid's grouping (built once, reused by every
measure and round), where call overhead, not memory, is the cost. Each cell's sums are ``np.bincount`` sums over
its leaves in leaf order: the same floats whether the grouping is kept or rebuilt.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpu_health.diagnosis.drilldown_stats import _DENSE_FACTOR, _SHUFFLE_SEED, _SHUFFLES, _LeafStats, _Leaves

# Groupings kept with a lattice when cuboids x leaves is at most this many (int64 cell numbers: 128 MB); a larger
# lattice regroups a cuboid each time it is scored, so its memory stays that of one cuboid.
_KEPT_ENTRIES = 1 << 24
# _shuffled_max holds at most this many shuffled values at once (float64: 256 MB): a larger frame draws its
# shuffles in batches and groups each cuboid once per batch, trading time for memory.
_SHUFFLED_ENTRIES = 1 << 25


class _Lattice:
    """The cuboids of a set of leaves, each grouped on demand (:meth:`group`): ``inverse`` (the leaf's cell
    within the cuboid, cells numbered by ascending mixed-radix key) and the cells' keys."""

    def __init__(self, leaves: _Leaves, cuboids: list[tuple[int, ...]]):
        self.cuboids = cuboids
        self.codes = leaves.codes
        self.cards = leaves.cards
        self.keep = len(cuboids) * len(leaves.codes) <= _KEPT_ENTRIES
        self._groups: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        # cuboids every possible cell of which holds a leaf (most low-dimension ones): their regrouping is the
        # key alone, which is what a cuboid costs when it is regrouped for every shuffle of a large frame
        self._complete: set[int] = set()

    def key(self, i: int) -> np.ndarray:
        """Each leaf's mixed-radix key in cuboid ``i`` (the cuboid's codes, first dimension most significant)."""
        cuboid = self.cuboids[i]
        key = self.codes[:, cuboid[0]].astype(_key_type(self.space(i)))
        for j in cuboid[1:]:
            key *= self.cards[j]
            key += self.codes[:, j]
        return key

    def space(self, i: int) -> int:
        """The number of possible cells of cuboid ``i``."""
        return int(np.prod([self.cards[j] for j in self.cuboids[i]], dtype=np.int64))

    def group(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        if i in self._groups:
            return self._groups[i]
        key = self.key(i)
        space = self.space(i)
        if i in self._complete:
            # cells numbered by ascending key with none missing: a leaf's key is its cell's number
            inverse, cell_keys = key, np.arange(space)
        elif space <= _DENSE_FACTOR * max(len(key), 128):
            present = np.bincount(key, minlength=space) > 0
            if present.all():
                self._complete.add(i)
                return self.group(i)
            cell_keys = np.flatnonzero(present)
            lookup = np.cumsum(present, dtype=_key_type(len(key)))  # cells are at most the leaves
            del present
            lookup -= 1
            inverse = lookup[key]
        else:
            cell_keys, inverse = np.unique(key, return_inverse=True)
        if self.keep:
            self._groups[i] = (inverse, cell_keys)
        return inverse, cell_keys

    def cell_codes(self, i: int, key: int) -> tuple[int, ...]:
        """The code tuple of the cell of cuboid ``i`` with this key."""
        codes = []
        for j in reversed(self.cuboids[i]):
            key, code = divmod(key, self.cards[j])
            codes.append(int(code))
        return tuple(reversed(codes))

    def members(self, i: int, key: int) -> np.ndarray:
        """The leaves of the cell of cuboid ``i`` with this key."""
        return self.key(i) == key


def _key_type(space: int) -> type:
    """Integers wide enough to number ``space`` cells (int32 where they fit: half the memory per leaf)."""
    return np.int32 if space < np.iinfo(np.int32).max else np.int64


def _lattice(leaves: _Leaves, cuboids: list[tuple[int, ...]]) -> _Lattice:
    return _Lattice(leaves, cuboids)


@dataclass
class _Cells:
    """The candidates of one scoring pass: every cuboid's best eligible cells (all those scoring at least its
    ``keep``-th best), and the number of cells holding a leaf not attributed yet (the test's hypotheses)."""

    hypotheses: int
    cuboid: np.ndarray  # candidate's cuboid index
    key: np.ndarray  # its cell's key in the cuboid
    g: np.ndarray  # score: squared z of the cell's common move
    move: np.ndarray  # the common move (deviation-score units)
    score: np.ndarray  # g discounted for the cuboid's extra dimensions (Occam)


def _score_cells(lattice: _Lattice, stats: _LeafStats, alive: np.ndarray, floors: tuple[float, float, float],
                 discount: list[float], keep: int) -> _Cells | None:
    """Every cell of every cuboid scored on the leaves not attributed yet (None: no such leaf), keeping per cuboid
    its eligible cells that score at least its ``keep``-th best. Eligible: its leaves moved, on average, at least
    ``min_leaf_z`` of their noise sigmas, its common move is at least ``min_excess`` and its change at least
    ``min_change`` in size (``floors``); ``discount``: each cuboid's Occam factor on the score.

    Within a cuboid the discount is one factor, so a floor on ``g`` applied later (the Bonferroni bar, known
    once every cuboid is counted) keeps a prefix of its list: the best ``keep`` cells over all cuboids passing
    any such floor are among the candidates."""
    use = (alive & stats.informative).astype(float)
    if not use.any():
        return None
    min_leaf_z, min_excess, min_change = floors
    hypotheses, parts = 0, []
    for i in range(len(lattice.cuboids)):
        inverse, cell_keys = lattice.group(i)
        # one cell-long sum at a time, each freed once used (a cuboid may have a cell per leaf)
        def sums(column):
            return np.bincount(inverse, weights=column, minlength=len(cell_keys))
        sx, sh = sums(stats.x * use), sums(stats.h * use)
        with np.errstate(divide="ignore", invalid="ignore"):
            g = np.where(sh > 0, sx**2 / sh, 0.0)
            move = np.where(sh > 0, sx / sh, 0.0)
        del sx, sh
        count = sums(use)
        hypotheses += int((count > 0).sum())
        ok = g / np.maximum(count, 1) >= min_leaf_z**2
        del count
        ok &= np.abs(move) >= min_excess
        ok &= np.abs(sums(stats.d * use)) >= min_change
        del inverse
        cells = np.flatnonzero(ok)
        score = g[cells] * discount[i]
        if cells.size > keep:
            chosen = score >= np.partition(score, cells.size - keep)[cells.size - keep]
            cells, score = cells[chosen], score[chosen]
        parts.append((np.full(cells.size, i), cell_keys[cells], g[cells], move[cells], score))
    cuboid, key, g, move, score = (np.concatenate([p[f] for p in parts]) for f in range(5))
    return _Cells(hypotheses, cuboid, key, g, move, score)


def _shuffled_max(lattice: _Lattice, stats: _LeafStats, alive: np.ndarray, round_: int,
                  pool: np.ndarray | None = None) -> float:
    """The best score (in sigmas) any set reaches when the leaves' deviations carry no structure.

    The standardized deviations of the leaves not attributed yet are shuffled
    across those leaves, with random signs, ``_SHUFFLES`` times (a fixed seed:
    the answer is reproducible), and every cell is scored as in the search;
    the largest score of all shuffles is the bar. This is the noise test
    measured on the data's own deviations: heavy tails, clusters of odd leaves
    and the sheer number of small sets are all in it, where the Bonferroni
    bound assumes normal noise. The largest of ``K`` null maxima exceeds the
    null's ``1 - 1/(K+1)`` quantile: with ``K = 9`` a frame of noise alone
    shows a set above the bar about one time in ten (Bonferroni's bound, at
    ``alpha``, applies as well). A single leaf is not judged here (its own
    deviation is one of the shuffled values): :func:`_single_leaf_bar`.
    ``pool``: the leaves whose deviations are drawn (with replacement) instead
    of shuffling every leaf's -- the leaves outside a tested set, so that the
    set's own deviations never make the bar it is held to.

    The shuffles are drawn one at a time from two streams of the same seed (the permutations' uniforms, then
    the signs, which follow them in the stream): the same draws as drawing them all at once, without holding
    ``_SHUFFLES`` permutations of every leaf.
    """
    rows = alive & stats.informative  # a mask, not indices: the same leaves in the same order, an eighth the size
    size = int(rows.sum())
    if size < 2:
        return 0.0
    seed = [_SHUFFLE_SEED, round_]
    uniforms, signs = np.random.default_rng(seed), np.random.default_rng(seed)
    signs.bit_generator.advance(_SHUFFLES * size)  # one 64-bit draw per uniform
    n = len(stats.h)
    weight = np.zeros(n)
    weight[rows] = stats.h[rows]
    root_h = np.sqrt(weight[rows])
    pool_rows = None if pool is None else pool & stats.informative
    pool_u = None if pool_rows is None or not pool_rows.any() else stats.x[pool_rows] / np.sqrt(stats.h[pool_rows])
    del pool_rows
    # the deviations drawn from: the pool's, else the leaves' own (shuffled); one leaf-long array, not both
    u = stats.x[rows] / root_h if pool_u is None else pool_u
    peak: list[np.ndarray | None] = [None] * len(lattice.cuboids)  # each cell's largest |sum| so far
    best = 0.0
    batch = max(1, min(_SHUFFLES, _SHUFFLED_ENTRIES // n))
    for first in range(0, _SHUFFLES, batch):
        # every cell's sums over the leaves not attributed yet (the others count 0: adding 0.0 changes no sum)
        shuffled = np.zeros((min(batch, _SHUFFLES - first), n))
        for s in range(len(shuffled)):
            order = np.argsort(uniforms.random(size)) if pool_u is None else (
                uniforms.random(size) * pool_u.size).astype(np.int64)
            column = u[order]  # u[order] * sign * root_h, in place: one leaf-long temporary at a time
            del order
            sign = signs.integers(0, 2, size=size) * 2.0
            sign -= 1.0
            column *= sign
            del sign
            column *= root_h
            shuffled[s, rows] = column
            del column
        last = first + len(shuffled) == _SHUFFLES
        for i in range(len(lattice.cuboids)):
            inverse, cell_keys = lattice.group(i)
            if peak[i] is None:
                peak[i] = np.zeros(len(cell_keys))
            for column in shuffled:
                sums = np.bincount(inverse, weights=column, minlength=len(cell_keys))
                np.maximum(peak[i], np.abs(sums, out=sums), out=peak[i])
                del sums
            if last:
                # the cuboid's largest score over the shuffles: a cell's largest |sum| squared, over its
                # information (squaring and dividing by a positive number are monotone, in floats too: the same
                # maximum as scoring every shuffle)
                sh = np.bincount(inverse, weights=weight, minlength=len(cell_keys))
                present = sh > 0
                if present.any():
                    best = max(best, float((peak[i][present] ** 2 / sh[present]).max()))
                peak[i] = None
            del inverse
        del shuffled
    return float(np.sqrt(max(0.0, best)))
