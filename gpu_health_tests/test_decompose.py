"""decompose / state_deltas / expected_leaves_from_history: hand-built leaves, and one simulated incident."""

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from gpu_health.diagnosis.decompose import (
    BASE_FAMILY,
    FAMILIES,
    LOSS_STATES,
    GoodputDecomposition,
    cause_family,
    decompose,
    expected_leaves_from_history,
    state_deltas,
)
from gpu_health.metrics.goodput import LEAF_DIMS, STATES

T0 = pd.Timestamp("2026-11-04T10:00:00Z")
MIN5 = pd.Timedelta(minutes=5)
DAY = pd.Timedelta(days=1)
NODES = [f"n{i:02d}" for i in range(40)]
DRIVER_560 = {"n03", "n17", "n29", "n33"}


def cluster(seed: int = 0, noise: float = 0.15) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Expected and actual leaves of one 5-minute partition: 40 nodes x 2 teams x 2 queues, 80 GPU-minutes per node.

    Each job leaf is mostly productive with 2-6 % slowdown_compute; on the
    actual side each leaf's slowdown moves by a random +-``noise`` of itself,
    taken from or given to its productive minutes, and the moves sum to zero
    over the cluster: paid GPU-minutes and goodput stay the same, so whatever
    a test injects is the whole drop.
    """
    rng = np.random.default_rng(seed)
    rows = []
    for i, node in enumerate(NODES):
        base = {"partition_start": T0, "region": "us-east" if i < 20 else "eu-west", "node_id": node,
                "sku": "H100" if i % 5 == 0 else "V100", "driver_version": "560" if node in DRIVER_560 else "550",
                "workload_class": "batch", "model_type": "bert", "framework_version": "torch-2.4"}
        for team in ("fraud", "risk"):
            for queue in ("batch", "prod"):
                share = rng.uniform(0.02, 0.06)
                rows.append(base | {"team": team, "queue": queue, "state": "productive", "gpu_minutes": 18 * (1 - share)})
                rows.append(base | {"team": team, "queue": queue, "state": "slowdown_compute", "gpu_minutes": 18 * share})
        rows.append(base | {"team": "none", "queue": "none", "workload_class": "none", "model_type": "none",
                            "framework_version": "none", "state": "idle_no_demand", "gpu_minutes": 8.0})
    expected = pd.DataFrame(rows)[["partition_start", *LEAF_DIMS, "state", "gpu_minutes"]]
    actual = expected.copy()
    slow = actual["state"] == "slowdown_compute"
    moved = actual.loc[slow, "gpu_minutes"].to_numpy() * rng.normal(0, noise, int(slow.sum()))
    moved -= moved.mean()
    actual.loc[actual["state"] == "productive", "gpu_minutes"] -= moved
    actual.loc[slow, "gpu_minutes"] += moved
    return expected, actual


def slow_down(actual: pd.DataFrame, mask: pd.Series, fraction: float) -> pd.DataFrame:
    """Move ``fraction`` of the productive GPU-minutes of the masked job leaves into slowdown_compute."""
    out = actual.copy()
    keys = [c for c in out.columns if c not in ("state", "gpu_minutes")]
    prod = mask & (out["state"] == "productive")
    moved = out.loc[prod, "gpu_minutes"] * fraction
    out.loc[prod, "gpu_minutes"] -= moved
    slow = out.loc[prod, keys].assign(state="slowdown_compute", gpu_minutes=moved.to_numpy())
    return (pd.concat([out, slow], ignore_index=True).groupby(keys + ["state"], as_index=False)["gpu_minutes"].sum())


def named(causes: pd.DataFrame) -> pd.DataFrame:
    return causes[causes["elements"] != "{}"]


# ------------------------------------------------------------------ the exact split over states


def test_state_deltas_add_up_exactly_to_the_goodput_change():
    rng = np.random.default_rng(3)
    expected, _ = cluster()
    actual = expected.copy()
    actual["state"] = rng.choice(STATES, len(actual))  # every state moves
    actual["gpu_minutes"] *= rng.uniform(0.5, 1.5, len(actual))  # and paid differs: expected is scaled

    d = state_deltas(actual, expected)

    assert list(d.index) == STATES
    assert d["actual_share"].sum() == pytest.approx(1.0, abs=1e-12)
    assert d["expected_share"].sum() == pytest.approx(1.0, abs=1e-12)
    assert d["expected_gpu_minutes"].sum() == pytest.approx(actual["gpu_minutes"].sum(), rel=1e-12)
    change = d.loc["productive", "actual_share"] - d.loc["productive", "expected_share"]
    assert -d.loc[LOSS_STATES, "delta_share"].sum() == pytest.approx(change, abs=1e-12)
    assert d.loc[LOSS_STATES, "goodput_change"].sum() == pytest.approx(change, abs=1e-12)


def test_nothing_paid_is_nothing_to_decompose():
    expected, actual = cluster()
    with pytest.raises(ValueError, match="nothing to decompose"):
        state_deltas(actual, expected.iloc[:0])
    assert decompose(actual, expected.iloc[:0]).empty


# ------------------------------------------------------------------ drill-down inside the states that grew


def test_a_slowdown_on_node_n17_is_named_and_carries_the_drop():
    expected, actual = cluster()
    actual = slow_down(actual, actual["node_id"] == "n17", 0.4)

    out = decompose(actual, expected)
    GoodputDecomposition.validate(out, lazy=True)

    top = out.iloc[0]
    elements = json.loads(top["elements"])
    assert top["rank"] == 1 and top["state"] == "slowdown_compute"
    assert elements.get("node_id") == "n17" or elements.get("driver_version") == "560"
    assert top["share_of_drop"] == pytest.approx(1.0, abs=0.15)
    assert top["explanatory_power"] == pytest.approx(1.0, abs=0.15)
    assert top["cause_family"] == "hardware"  # a cause that names a node is the machine's
    assert top["actual_gpu_minutes"] > 5 * top["expected_gpu_minutes"]
    assert "n17" in top["evidence"] and "slowdown_compute" in top["evidence"]
    assert (out["partition_start"] == T0).all() and (out["window_end"] == T0 + MIN5).all()


def test_a_regression_on_a_driver_cohort_is_named_by_the_driver_and_is_software():
    expected, actual = cluster(seed=1)
    actual = slow_down(actual, actual["driver_version"] == "560", 0.4)

    top = decompose(actual, expected).iloc[0]

    assert json.loads(top["elements"]) == {"driver_version": "560"}
    assert top["cause_family"] == "software"
    assert top["share_of_drop"] == pytest.approx(1.0, abs=0.15)


def test_an_evenly_spread_change_gives_no_confident_cause():
    expected, actual = cluster(seed=2)
    actual = slow_down(actual, actual["state"] == "productive", 0.1)

    out = decompose(actual, expected)
    GoodputDecomposition.validate(out, lazy=True)

    assert named(out).empty
    assert len(out) == 1
    row = out.iloc[0]
    assert (row["state"], row["elements"], row["cause_family"]) == ("slowdown_compute", "{}", "hardware")
    assert row["share_of_drop"] == pytest.approx(1.0, abs=1e-9)  # the only state that grew carries all of it
    assert "spread" in row["evidence"]


def test_causes_of_several_states_are_ranked_by_the_gpu_minutes_they_moved():
    expected, actual = cluster(seed=4)
    actual = slow_down(actual, actual["node_id"] == "n17", 0.4)
    # the risk team's prod jobs on n30 throw their work away: a smaller move, in a state that was 0 everywhere
    fail = ((actual["node_id"] == "n30") & (actual["state"] == "productive") & (actual["team"] == "risk")
            & (actual["queue"] == "prod"))
    actual.loc[fail, "state"] = "failure_loss"
    actual = actual.groupby([*actual.columns.drop(["gpu_minutes"])], as_index=False)["gpu_minutes"].sum()

    out = named(decompose(actual, expected))

    assert out["state"].tolist()[:2] == ["slowdown_compute", "failure_loss"]
    change = out["actual_gpu_minutes"] - out["expected_gpu_minutes"]
    assert change.is_monotonic_decreasing
    assert json.loads(out.iloc[1]["elements"]) == {"node_id": "n30", "queue": "prod", "team": "risk"}
    assert out.iloc[1]["cause_family"] == "hardware"  # failures on one node
    drop = (state_deltas(actual, expected).loc["productive", ["expected_gpu_minutes", "actual_gpu_minutes"]]
            .diff().iloc[-1])
    assert out["share_of_drop"].tolist() == pytest.approx((change / -drop).tolist())


def test_no_state_grew_gives_an_empty_valid_frame():
    expected, _ = cluster()

    out = decompose(expected, expected)

    assert out.empty
    GoodputDecomposition.validate(out)


def test_cause_families_are_the_briefs_and_refined_by_what_a_cause_names():
    assert set(BASE_FAMILY) == set(LOSS_STATES)
    assert set(BASE_FAMILY.values()) <= set(FAMILIES)
    assert BASE_FAMILY["slowdown_checkpoint"] == "data_io"
    assert cause_family("failure_loss", {"team": "risk"}) == "software"
    assert cause_family("failure_loss", {"node_id": "n17"}) == "hardware"
    assert cause_family("failure_loss", {"node_id": "n17", "driver_version": "560"}) == "hardware"
    assert cause_family("slowdown_compute", {"framework_version": "torch-2.5"}) == "software"
    assert cause_family("slowdown_compute", {"region": "us-east"}) == "hardware"
    assert cause_family("allocated_unproductive", {"team": "ads"}) == "gaming"
    assert cause_family("idle_blocked", {"node_id": "n17"}) == "scheduling"


# ------------------------------------------------------------------ expected leaves from history


def leaf(ts, node="n01", state="productive", minutes=10.0, **dims) -> dict:
    row = {"partition_start": ts, "region": "us-east", "node_id": node, "sku": "H100", "driver_version": "550",
           "team": "fraud", "workload_class": "batch", "model_type": "bert", "framework_version": "torch-2.4",
           "queue": "batch", "state": state, "gpu_minutes": minutes}
    return row | dims


def test_expected_leaves_are_the_mean_of_the_same_slot_on_previous_days():
    history = pd.DataFrame([
        leaf(T0 - DAY, minutes=10), leaf(T0 - DAY, state="slowdown_compute", minutes=2),
        leaf(T0 - 2 * DAY, minutes=20),  # no slowdown that day: it counts as 0
        leaf(T0 - 3 * DAY + MIN5, minutes=99),  # another slot
        leaf(T0 - 8 * DAY, minutes=1000),  # older than 7 days
        leaf(T0, minutes=500), leaf(T0 + DAY, minutes=500),  # the window itself and later: never
    ])

    exp = expected_leaves_from_history(history, pd.DatetimeIndex([T0]))

    by_state = exp.set_index("state")
    assert by_state.loc["productive", "gpu_minutes"] == 15.0
    assert by_state.loc["slowdown_compute", "gpu_minutes"] == 1.0
    assert (exp["method"] == "hour_of_day").all() and (exp["partition_start"] == T0).all()


def test_expected_leaves_fall_back_to_the_trailing_two_hours():
    history = pd.DataFrame([leaf(T0 - MIN5, minutes=6), leaf(T0 - 2 * MIN5, minutes=2),
                            leaf(T0 - 2 * MIN5, node="n02", minutes=4), leaf(T0 - 25 * MIN5, minutes=1000)])
    window = pd.date_range(T0, periods=2, freq="5min")

    exp = expected_leaves_from_history(history, window)

    assert (exp["method"] == "trailing").all()
    per = exp.groupby(["partition_start", "node_id"])["gpu_minutes"].sum()
    assert per[(T0, "n01")] == 4.0 and per[(T0 + MIN5, "n01")] == 4.0  # (6 + 2) / 2 partitions
    assert per[(T0, "n02")] == 2.0


def test_expected_leaves_skip_excluded_partitions():
    history = pd.DataFrame([leaf(T0 - DAY, minutes=10), leaf(T0 - 2 * DAY, minutes=20), leaf(T0 - 3 * DAY, minutes=90)])

    exp = expected_leaves_from_history(history, pd.DatetimeIndex([T0]), exclude={T0 - 3 * DAY})

    assert exp["gpu_minutes"].tolist() == [15.0]


def test_expected_leaves_are_scaled_to_the_actual_paid_gpu_minutes():
    history = pd.DataFrame([leaf(T0 - DAY, minutes=30), leaf(T0 - DAY, state="idle_no_demand", minutes=10),
                            leaf(T0 - DAY, node="n40", region="eu-west", minutes=8)])
    actual = pd.DataFrame([leaf(T0, minutes=60), leaf(T0, node="n40", region="eu-west", minutes=8)])

    exp = expected_leaves_from_history(history, pd.DatetimeIndex([T0]), actual_leaves=actual)

    got = exp.set_index(["region", "state"])["gpu_minutes"]
    assert got[("us-east", "productive")] == 45.0 and got[("us-east", "idle_no_demand")] == 15.0
    assert got[("eu-west", "productive")] == 8.0



def test_a_partitions_expected_leaves_do_not_depend_on_the_range_it_is_computed_in():
    """A day's run reads the seven days before midnight, a run from 18:00 the seven days before 18:00: the same
    days of the partition's slot, among others. Its expected leaves, and the scaling to its actual paid GPU-minutes
    (a sum over its leaves), must come out bit for bit the same (numbered by first appearance, the leaves came
    in the order of the earliest history read, and the sums' last bits, and near-ties of the drill-down with them,
    changed with the range)."""
    rng = np.random.default_rng(5)
    day0 = T0.normalize()
    slots = pd.date_range(day0 - 8 * DAY, day0 + DAY, freq="5min", inclusive="left")
    nodes = np.array([f"n{i:03d}" for i in range(120)])
    parts = []
    for ts in slots:  # each slot's leaves in an order of their own, GPU-minutes of many magnitudes and bits
        k = rng.permutation(len(nodes))[:100]
        parts.append(pd.DataFrame({"partition_start": ts, "node_id": nodes[k], "state": np.where(k % 2, "productive",
                                   "slowdown_io"), "gpu_minutes": 10.0 ** rng.uniform(-3, 3, len(k))}))
    leaves = pd.concat(parts, ignore_index=True)
    for col, value in leaf(T0).items():
        if col not in leaves:
            leaves[col] = value
    actual = leaves[leaves["partition_start"] >= day0]  # the window's own leaves (the day's, as the loss tree wrote them)
    evening = pd.Timestamp(day0 + pd.Timedelta(hours=18))

    def expected(first):
        window = pd.date_range(first, day0 + DAY, freq="5min", inclusive="left")
        exp = expected_leaves_from_history(leaves[leaves["partition_start"] < first], window,
                                           actual_leaves=actual[actual["partition_start"] >= first])
        mine = exp[exp["partition_start"] >= evening]
        return mine.sort_values(["partition_start", "node_id", "state"]).reset_index(drop=True)

    whole_day, from_evening = expected(day0), expected(evening)
    assert len(whole_day) >= 72 * 100  # (each partition: the leaves of its slot on any of the seven days)
    pd.testing.assert_frame_equal(whole_day, from_evening, check_exact=True)


# ------------------------------------------------------------------ a simulated incident

SCENARIO = """\
seed: 21
start: '2026-11-03T10:00:00Z'
end: '2026-11-03T12:00:00Z'
incidents:
- kind: thermal_throttle
  start: '2026-11-03T11:00:00Z'
  duration: 60m
  severity: high
  scope: {region: us-east, nodes: 2}
  magnitude: 0.38
"""


@pytest.fixture(scope="module")
def thermal_hour(tmp_path_factory) -> tuple[pd.DataFrame, Path]:
    from gpu_health.cli import run
    from gpu_health.storage.warehouse import Warehouse

    root = tmp_path_factory.mktemp("thermal")
    path = root / "thermal.yaml"
    path.write_text(SCENARIO)
    url = f"sqlite:///{root / 'warehouse.db'}"
    # the bulk path: it writes what the Dagster path writes (test_direct_path)
    run("2026-11-03T10:00:00Z", "2026-11-03T12:00:00Z", scenario=str(path), warehouse=url, quiet=True, direct=True)
    return Warehouse(url).read_window("goodput_leaves"), path


def test_a_simulated_thermal_throttle_is_the_top_cause_on_the_throttled_nodes(thermal_hour):
    from gpu_health.sim.labels import labels_frame
    from gpu_health.sim.scenario import load_scenario

    leaves, path = thermal_hour
    label = labels_frame(load_scenario(path)).iloc[0]
    throttled = set(json.loads(label["scope"])["node_ids"])
    onset = pd.Timestamp("2026-11-03T11:00:00Z")
    actual, history = leaves[leaves["partition_start"] >= onset], leaves[leaves["partition_start"] < onset]
    paged = pd.date_range(onset, periods=12, freq="5min")  # the throttle's partitions, paged: never a baseline
    expected = expected_leaves_from_history(history, paged, actual_leaves=actual, exclude=paged)
    assert (expected["method"] == "trailing").all()  # an hour of history: cold start

    out = decompose(actual, expected)
    GoodputDecomposition.validate(out, lazy=True)

    # the hour's demand moves idle GPU-minutes too (the cold-start baseline is the hour before); among the
    # states that grew, the throttling is named on the throttled nodes, with its family
    named = out[out["elements"] != "{}"]
    assert "slowdown_compute" in set(named["state"].head(3))
    top = named[named["state"] == "slowdown_compute"].iloc[0]
    assert json.loads(top["elements"]).get("node_id") in throttled
    assert top["cause_family"] == "hardware"
    assert top["actual_gpu_minutes"] > 10 * top["expected_gpu_minutes"]
    d = state_deltas(actual, expected)
    assert d.loc[LOSS_STATES, "goodput_change"].sum() == pytest.approx(
        d.loc["productive", "actual_share"] - d.loc["productive", "expected_share"], abs=1e-12)


def test_gpu_health_report_shows_the_incident_its_page_and_the_decomposition(thermal_hour, tmp_path, capsys):
    from gpu_health.cli import main
    from gpu_health.report import alert_timeline
    from gpu_health.storage.warehouse import Warehouse

    _, path = thermal_hour
    url = f"sqlite:///{path.parent / 'warehouse.db'}"
    out = tmp_path / "report.md"
    assert main(["report", "--warehouse", url, "--start", "2026-11-03T11:00:00Z", "--end", "2026-11-03T12:00:00Z",
                 "--scenario", str(path), "--out", str(out), "--quiet"]) == 0
    text = out.read_text()
    timeline = alert_timeline(Warehouse(url), pd.Timestamp("2026-11-03T11:00:00Z"), pd.Timestamp("2026-11-03T12:00:00Z"))
    assert f"Alerts ({len(timeline)}):" in text
    pages = timeline[timeline["severity"] == "page"]
    assert len(pages) and (pages["cause_family"] == "hardware").any()  # the throttling paged, as hardware
    assert all(f"`{a}`" in text for a in pages["alert_id"])  # each page with its full description
    assert "| thermal_throttle | hardware |" in text  # the ground truth row
    decomposition = text.split("Decomposition of the window")[1]
    assert "| slowdown_compute | hardware |" in decomposition
