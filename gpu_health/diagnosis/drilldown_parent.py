"""Reporting of the drill-down (gpu_health.diagnosis.drilldown): causes found as several children of one parent
are reported as the parent when the rest of the parent moved with them.

The search names the set that scores best and moves as one; a cause whose parts move unevenly (a bitrate failing
on every device, some devices more than others, a few small ones barely) can fail that test as a whole and come
back as its strongest children, one per round. The children then say less than the parent and each of them is a
false cause. Pure numpy on the search's own leaf statistics; no search here.
"""

from __future__ import annotations

from collections import Counter
from itertools import combinations

import numpy as np

from gpu_health.diagnosis.drilldown_stats import _Leaves, _LeafStats

# A found cause as the search returns it, with the leaves not attributed before its round:
# (cuboid, cell, g, in_set, alive).
Found = tuple[tuple[int, ...], tuple[int, ...], float, np.ndarray, np.ndarray]


def _prefer_parents(leaves: _Leaves, stats: _LeafStats, found: list[Found], min_leaf_z: float) -> list[Found]:
    """``found`` with the causes inside one parent (a cell they all lie in, named by some of their dimensions),
    two or more of which split it along one dimension, replaced by that parent when its other leaves moved too.

    The rest of the parent (its leaves outside the children and outside every other cause) either stayed put --
    the children are the causes, as two failing nodes of one region are -- or moved the children's way, by less:
    the parent is the cause, and the children are where it showed most (the search's _moves_as_one rejects a
    set whose parts moved unevenly, so such a parent is found piecewise). The rest stayed put when its leaves
    moved, on average, less than ``min_leaf_z`` of their noise sigmas in the children's direction (the bar a
    cause's leaves must clear, and the one _moves_as_one uses to tell a part that stayed put) and at least that
    much less than the children; a rest too small or too noisy to tell either, or none at all, leaves the
    parent (one cause is the shorter account of the change). Repeated until nothing merges, so children of children
    climb more than one level.
    """
    found = list(found)
    merged = True
    while merged and len(found) > 1:
        merged = False
        groups: dict[tuple, list[int]] = {}
        for i, (cuboid, cell, *_) in enumerate(found):
            for size in range(1, len(cuboid)):
                for kept in combinations(range(len(cuboid)), size):
                    key = (tuple(cuboid[j] for j in kept), tuple(cell[j] for j in kept))
                    groups.setdefault(key, []).append(i)
        # the nearest parent first (most dimensions): a cause climbs one step at a time
        for (cuboid, cell), members in sorted(groups.items(), key=lambda kv: (-len(kv[0][0]), kv[0])):
            # two or more children split the parent along one dimension (a finer split of some is still theirs);
            # causes inside the parent that split it otherwise (a node of the region) are pieces of it as well
            splits = Counter(d for i in members for d in set(found[i][0]) - set(cuboid))
            if not splits or max(splits.values()) < 2:
                continue
            in_parent = np.all(leaves.codes[:, list(cuboid)] == np.asarray(cell, dtype=np.int64), axis=1)
            # with every other cause whose leaves all lie in the parent (a node of a region names no region)
            members = [i for i, f in enumerate(found) if i in members or not (f[3] & ~in_parent).any()]
            parent = _merged(stats, found, members, in_parent, cuboid, cell, min_leaf_z)
            if parent is not None:
                found = [f for i, f in enumerate(found) if i not in members[1:]]
                found[members[0]] = parent
                merged = True
                break
    return found


def _merged(stats: _LeafStats, found: list[Found], members: list[int], in_parent: np.ndarray,
            cuboid: tuple[int, ...], cell: tuple[int, ...], min_leaf_z: float) -> Found | None:
    """The parent ``cuboid`` = ``cell`` (its leaves: ``in_parent``) of the causes ``members`` of ``found``, or None
    when its rest stayed put or one of them moved against the others."""
    children = np.zeros(len(in_parent), dtype=bool)
    others = np.zeros(len(in_parent), dtype=bool)
    for i, f in enumerate(found):
        if i in members:
            children |= f[3]
        else:
            others |= f[3]
    informative = stats.informative
    h_c = float(stats.h[children & informative].sum())
    if h_c <= 0:
        return None
    sign = 1.0 if stats.x[children & informative].sum() >= 0 else -1.0
    if any(sign * float(stats.x[found[i][3] & informative].sum()) < 0 for i in members):
        return None  # a piece moving against the others is a cause of its own
    rest = in_parent & ~children & ~others & informative
    x_r, h_r = float(stats.x[rest].sum()), float(stats.h[rest].sum())
    # the rest stayed put: its leaves moved, on average, less than min_leaf_z sigmas the children's way
    # (_moves_as_one's per-part rule) and min_leaf_z sigmas less than the children did (too few or too noisy
    # leaves tell neither, and one parent is the shorter account of the change than several children)
    bar = min_leaf_z * np.sqrt(h_r * int(rest.sum()))
    move = float(stats.x[children & informative].sum()) / h_c
    if h_r > 0 and sign * x_r < bar and sign * (move * h_r - x_r) >= bar:
        return None
    in_set = in_parent & ~others
    members_ = in_set & informative
    sh = float(stats.h[members_].sum())
    g = float(stats.x[members_].sum()) ** 2 / sh if sh > 0 else 0.0
    # its round: the first of its children's (the leaves of causes found before it are not its own)
    first = min(members)
    return cuboid, cell, g, in_set, found[first][4]
