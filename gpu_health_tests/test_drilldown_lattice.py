"""The drill-down's lattice scored one cuboid at a time: memory of the order of the leaves, not of cuboids x
leaves, and the same causes whether a lattice keeps its groupings (small frames) or regroups each cuboid."""

from __future__ import annotations

import tracemalloc
from types import SimpleNamespace

import numpy as np
import pandas as pd

from gpu_health.diagnosis import drilldown_lattice
from gpu_health.diagnosis.drilldown import drill_down


def _cube(cards: tuple[int, ...], seed: int = 0) -> pd.DataFrame:
    """Every combination of the dimensions' values, 5 % noise, one cause of two dimensions up by half."""
    rng = np.random.default_rng(seed)
    grids = np.meshgrid(*[np.arange(c, dtype=np.int16) for c in cards], indexing="ij")
    frame = pd.DataFrame({f"d{j}": g.ravel() for j, g in enumerate(grids)})
    expected = rng.lognormal(3.0, 1.0, len(frame))
    actual = expected * (1.0 + 0.05 * rng.standard_normal(len(frame)))
    actual[(frame["d0"].to_numpy() == 0) & (frame["d3"].to_numpy() == 1)] *= 1.5
    frame["expected"], frame["actual"] = expected, actual
    return frame


def test_peak_memory_is_of_the_order_of_the_leaves_not_cuboids_times_leaves(monkeypatch):
    # the streamed path, which every lattice above the kept-groupings budget takes, one shuffle at a time
    monkeypatch.setattr(drilldown_lattice, "_KEPT_ENTRIES", 0)
    monkeypatch.setattr(drilldown_lattice, "_SHUFFLED_ENTRIES", 1)
    frame = _cube((10, 10, 10, 8, 10))  # 80,000 leaves, 31 cuboids
    dims = [f"d{j}" for j in range(5)]
    tracemalloc.start()
    try:
        causes = drill_down(frame, dims)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert [c.elements for c in causes] == [{"d0": 0, "d3": 1}]
    # a cuboids x leaves lattice holds 31 cell numbers per leaf and a 31-entry sparse column per leaf (over 200
    # floats per leaf in all); the streamed one a few dozen per-leaf arrays, whatever the number of cuboids
    assert peak < 40 * 8 * len(frame)


def test_streamed_and_kept_groupings_find_the_same_causes(monkeypatch):
    rng = np.random.default_rng(7)
    for seed in range(4):
        frame = _cube((6, 5, 4, 7), seed=seed)
        # a second cause: one value of d2 down by a third, on a random seed's value
        value = int(rng.integers(0, 4))
        frame.loc[frame["d2"] == value, "actual"] *= 0.66
        dims = [f"d{j}" for j in range(4)]
        kept = drill_down(frame, dims)
        monkeypatch.setattr(drilldown_lattice, "_KEPT_ENTRIES", 0)
        monkeypatch.setattr(drilldown_lattice, "_SHUFFLED_ENTRIES", 1)  # one shuffle at a time
        streamed = drill_down(frame, dims)
        monkeypatch.undo()
        assert kept, "the planted causes are found"
        assert repr(streamed) == repr(kept)  # every field, NaN ones included


def test_a_complete_cuboid_is_regrouped_from_its_key_alone(monkeypatch):
    # a large frame regroups every cuboid for every shuffle: where every possible cell holds a leaf, a leaf's key
    # is already its cell's number, and regrouping need not count the cells again
    grids = np.meshgrid(*[np.arange(c, dtype=np.int8) for c in (4, 3, 5)], indexing="ij")
    codes = np.column_stack([g.ravel() for g in grids])
    codes = codes[~((codes[:, 0] == 1) & (codes[:, 1] == 2))][::-1]  # d0 x d1 misses a cell; leaves unordered
    cuboids = [(0,), (2,), (0, 1), (0, 1, 2)]  # complete, complete, sparse, sparse
    lattice = drilldown_lattice._Lattice(SimpleNamespace(codes=codes, cards=[4, 3, 5]), cuboids)
    lattice.keep = False  # regrouped on every call, as a large frame's lattice is

    def expected(i):
        cell_keys, inverse = np.unique(lattice.key(i), return_inverse=True)
        return inverse, cell_keys

    for _ in range(2):
        for i in range(len(cuboids)):
            inverse, cell_keys = lattice.group(i)
            assert np.array_equal(inverse, expected(i)[0]) and np.array_equal(cell_keys, expected(i)[1])
    counted = []
    bincount = np.bincount
    monkeypatch.setattr(np, "bincount", lambda *a, **k: counted.append(1) or bincount(*a, **k))
    lattice.group(0), lattice.group(1)
    assert not counted, "a complete cuboid's cells are not counted again"
    lattice.group(2)
    assert counted, "a sparse one's are: its keys are not its cells' numbers"
