"""Drill-down reporting: anomalies covering most of the cube are named (not their complement), and causes found
as children of one parent whose other leaves moved too are reported as the parent."""

import itertools

import numpy as np
import pandas as pd

from gpu_health.diagnosis.drilldown import drill_down
from gpu_health.diagnosis.drilldown_stats import _forecast_holds, _typical_move

DIMS = ["region", "node", "team", "queue"]
TEAMS = ["fraud", "risk", "search", "ads", "infra"]


def leaves(seed: int = 0, noise: float = 0.03) -> pd.DataFrame:
    """40 nodes in two regions x 5 teams x 2 queues, each leaf's actual within ``noise`` of its forecast."""
    rng = np.random.default_rng(seed)
    rows = [{"region": "us-east" if i < 20 else "us-west", "node": f"n{i:02d}", "team": team, "queue": queue}
            for i in range(40) for team in TEAMS for queue in ["batch", "interactive"]]
    frame = pd.DataFrame(rows)
    frame["expected"] = rng.gamma(3.0, 20.0, len(frame))
    frame["actual"] = frame["expected"] * (1 + rng.normal(0, noise, len(frame)))
    return frame


def labels(causes) -> set[str]:
    return {c.label() for c in causes}


def test_anomaly_covering_most_of_the_cube_is_named_not_its_complement():
    # three teams of five fell: 60 % of the leaves moved alike, and they are the anomaly
    for seed in range(3):
        frame = leaves(seed)
        hit = frame["team"].isin(["fraud", "risk", "search"])
        frame.loc[hit, "actual"] *= 0.6

        assert labels(drill_down(frame, DIMS)) == {"team=fraud", "team=risk", "team=search"}


def test_anomaly_covering_most_of_the_cube_with_another_cause_beside_it():
    frame = leaves(1)
    frame.loc[frame["team"].isin(["fraud", "risk", "search"]), "actual"] *= 0.5
    frame.loc[frame["node"] == "n33", "actual"] *= 1.8

    found = labels(drill_down(frame, DIMS))

    assert {"team=fraud", "team=risk", "team=search"} <= found
    assert not found & {"team=ads", "team=infra"}


def test_forecast_error_spread_over_every_leaf_is_still_the_normal_move():
    # every leaf 20 % above its forecast, one node 60 % below it: the crowd is normal, the node is the cause
    frame = leaves(2)
    frame["actual"] *= 1.2
    frame.loc[frame["node"] == "n07", "actual"] *= 0.4

    assert labels(drill_down(frame, DIMS)) == {"node=n07"}


def test_the_tail_of_a_crowd_is_not_a_cluster_at_the_forecast():
    # a forecast 3 sigmas off everywhere: the leaves nearer 0 than the crowd are its tail, not a normal cluster
    moves = np.random.default_rng(4).normal(0.09, 0.03, 5000)
    mode = 0.09
    nearer_zero = np.abs(moves) <= np.abs(moves - mode)

    assert not _forecast_holds(moves[nearer_zero], moves[~nearer_zero], mode)
    # and the typical move stays the crowd's
    level = np.full(moves.size, 100.0)
    assert abs(_typical_move(moves * level, level, level, 1.0)[0] - mode) < 0.01


def test_children_of_a_parent_whose_rest_moved_too_are_the_parent():
    # every team of us-east fell, two of them far more than the others: the region is the cause
    for seed in range(3):
        frame = leaves(seed)
        east = frame["region"] == "us-east"
        frame.loc[east, "actual"] *= np.where(frame.loc[east, "team"].isin(["fraud", "risk"]), 0.4, 0.85)

        assert labels(drill_down(frame, DIMS)) == {"region=us-east"}


def test_a_parent_found_piecewise_is_reported_as_the_parent():
    # the search finds us-east's two worst teams and a few of its nodes, never the region as one (too uneven);
    # the rest of the region moved the same way, so the pieces are the region
    for seed in range(4):
        assert labels(drill_down(unevenly_fallen_region(seed), DIMS)) == {"region=us-east"}


def test_siblings_whose_parent_stayed_put_stay_siblings():
    frame = leaves(5)
    east = frame["region"] == "us-east"
    frame.loc[east & frame["team"].isin(["fraud", "risk"]), "actual"] *= 0.4

    assert labels(drill_down(frame, DIMS)) == {"region=us-east & team=fraud", "region=us-east & team=risk"}


def unevenly_fallen_region(seed: int) -> pd.DataFrame:
    """us-east fell unevenly: two teams by 60 %, the other teams 30 % on every third node only."""
    frame = leaves(seed)
    east = frame["region"] == "us-east"
    strong = east & frame["team"].isin(["fraud", "risk"])
    third = east & ~strong & (frame["node"].str[1:].astype(int) % 3 == 0)
    frame.loc[strong, "actual"] *= 0.4
    frame.loc[third, "actual"] *= 0.7
    return frame


def test_leaves_risen_from_a_forecast_of_zero_moved_whatever_their_size():
    # three of four values of d lost their forecast (0) while their load carried on: every leaf of theirs moved
    # by its whole value, the small ones (sizes spread as a gamma of shape 0.5, an eighth of them empty) as
    # much as the large ones, so none of them stayed put beside the typical leaf
    for seed in range(4):
        rng = np.random.default_rng(seed)
        values = [[f"{name}{i}" for i in range(1, k + 1)] for name, k in zip("abcd", (8, 6, 5, 4))]
        frame = pd.DataFrame(list(itertools.product(*values)), columns=list("abcd"))
        frame["actual"] = rng.gamma(0.5, 180.0, len(frame)) * (rng.random(len(frame)) > 0.12)
        frame["expected"] = frame["actual"] * (1 + rng.normal(0, 0.1, len(frame)))
        frame.loc[frame["d"] != "d3", "expected"] = 0.0

        assert labels(drill_down(frame, list("abcd"))) == {"d=d1", "d=d2", "d=d4"}
