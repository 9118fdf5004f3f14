"""Fragmentation as capacity in the wrong shape (scheduling_shape._shape_blocked, _fragmented): judged on node
sizes other than one cluster's, with its impact the demand it holds back."""

from types import SimpleNamespace

import numpy as np

from gpu_health.diagnosis.detectors.scheduling_shape import _fragmented, _shape_blocked

MINUTES = 5


def _cells(free_by_node: dict, size_by_node: dict):
    """The (node, minute) cells of nodes with free GPUs, the same every minute: (fm, size, fr)."""
    fm, size, fr = [], [], []
    for minute in range(MINUTES):
        for node, free in free_by_node.items():
            if free > 0:
                fm.append(minute), size.append(size_by_node[node]), fr.append(free)
    return np.array(fm, dtype=int), np.array(size, dtype=float), np.array(fr, dtype=float)


def _waiting(requests: list) -> tuple:
    """``requests`` (GPUs each) all waited over AGED_WAIT in every minute of the partition: (aged, gpus)."""
    return np.ones((len(requests), MINUTES), dtype=bool), np.array(requests, dtype=float)


# a mixed pool: two 4-GPU nodes and two 8-GPU nodes
SIZES = {"s1": 4, "s2": 4, "l1": 8, "l2": 8}


def test_pieces_worth_the_smallest_node_the_request_runs_on_are_fragmentation():
    """One GPU free on each of four nodes of a mixed pool while 2-GPU requests wait: no node holds one, the four
    pieces summed are a whole 4-GPU node's worth -- a block a packing scheduler could have kept whole on the
    smallest node the requests run on, whatever the larger nodes' size."""
    aged, gpus = _waiting([2] * 6)
    shape = _shape_blocked(aged, gpus, *_cells({"s1": 1, "s2": 1, "l1": 1, "l2": 1}, SIZES), MINUTES)
    assert shape.jobs == 6 and shape.sizes == {2}
    assert shape.fragmented.sum() == 4 * MINUTES  # the stranded pieces, every minute
    # the demand held back: every shape-blocked request's GPUs, from its third minute in a row (not churn)
    assert shape.held.sum() == 6 * 2 * (MINUTES - 2)


def test_fewer_pieces_than_any_node_holds_are_the_residue_of_packing():
    """Three single free GPUs in a pool whose smallest node has four: each node's last GPU, what any packing
    leaves -- not fragmentation, however many requests wait."""
    aged, gpus = _waiting([2] * 6)
    shape = _shape_blocked(aged, gpus, *_cells({"s1": 1, "l1": 1, "l2": 1}, SIZES), MINUTES)
    assert shape.jobs == 0 and shape.fragmented.sum() == 0 and shape.held.sum() == 0


def test_on_sixteen_gpu_nodes_a_whole_node_is_sixteen_pieces():
    """The block scales with the node: 8 pieces on 16-GPU nodes are residue, 16 are a node's worth."""
    sixteen = {f"n{i}": 16 for i in range(16)}
    aged, gpus = _waiting([4] * 5)
    assert _shape_blocked(aged, gpus, *_cells({f"n{i}": 1 for i in range(8)}, sixteen), MINUTES).jobs == 0
    assert _shape_blocked(aged, gpus, *_cells({f"n{i}": 1 for i in range(16)}, sixteen), MINUTES).jobs == 5


def _row(held: float, stranded: float, paid: float, jobs: int = 6):
    return SimpleNamespace(shape_blocked_jobs=jobs, paid_gpu_minutes=paid, fragmented_gpu_minutes=stranded,
                           held_gpu_minutes=held)


def test_the_impact_of_fragmentation_is_the_demand_it_holds_back():
    """A spreading scheduler refills the pieces as they free, so the GPUs idle at any instant understate what it
    costs: the requests held back are the loss. 20 GPU-minutes stranded (1 % of 2,000 paid) beside 60 GPU-minutes
    of requests held (3 %) clear a 2 % bar; the same held demand under it does not."""
    assert _fragmented(_row(held=60.0, stranded=20.0, paid=2000.0), 4, 0.02)
    assert not _fragmented(_row(held=30.0, stranded=20.0, paid=2000.0), 4, 0.02)
    assert not _fragmented(_row(held=60.0, stranded=20.0, paid=2000.0, jobs=3), 4, 0.02)  # too few requests
    assert not _fragmented(_row(held=60.0, stranded=20.0, paid=0.0), 4, 0.02)  # nothing paid: no share


def test_pieces_that_cross_a_nodes_worth_for_a_minute_are_churn_and_hold_nothing_back():
    """Four pieces for one minute beside waiting 2-GPU requests (a job ended, its GPUs are being placed again):
    the requests are shape-blocked that minute, but no demand is held back by a shape that did not last."""
    aged, gpus = _waiting([2] * 20)
    fm, size, fr = _cells({"s1": 1, "s2": 1, "l1": 1, "l2": 1}, SIZES)
    first = fm == 0
    shape = _shape_blocked(aged, gpus, fm[first], size[first], fr[first], MINUTES)
    assert shape.jobs == 20 and shape.held.sum() == 0


def test_fragmentation_pages_only_when_the_shape_outlasts_a_partition():
    """A scheduler works a surge through within a few cycles; capacity in the wrong shape that is still there a
    partition later (minutes of scheduling cycles) is its placement policy. The first shape-blocked partition is a
    ticket; its alert carries the shape to the next partition, where the same shape pages."""
    import pandas as pd

    from gpu_health.diagnosis import alerts as A
    from gpu_health.diagnosis.detectors.scheduling import SCHED_MIN_JOBS, detect_scheduling
    from gpu_health_tests.test_detect_scheduling import FIVE, SINGLE, START, _spread_context

    spread = {"b1": 6, "b2": 6, "i1": 8, "i2": 8} | {f"f{i}": 6 for i in range(6)}  # two free GPUs per node
    large = [("r1/batch", f"w8-{i}", 8) for i in range(SCHED_MIN_JOBS)]
    first = detect_scheduling(_spread_context(spread, large + SINGLE))
    assert [f.severity for f in first] == ["ticket"] and "wrong shape" in first[0].evidence
    snap = A.step(A.empty(), first, START, rates={}, changes=pd.DataFrame())
    # the next partition, the same shape: the previous partition's alert carries it
    second = _spread_context(spread, large + SINGLE)
    second.carried = A.carried(snap)
    assert [f.severity for f in detect_scheduling(second)] == ["page"]
    # a partition whose alert row was not raised by a shape-blocked finding carries nothing: still a ticket
    cleared = A.step(snap, [], START + FIVE, rates={}, changes=pd.DataFrame())
    third = _spread_context(spread, large + SINGLE)
    third.carried = A.carried(cleared)
    assert [f.severity for f in detect_scheduling(third)] == ["ticket"]
