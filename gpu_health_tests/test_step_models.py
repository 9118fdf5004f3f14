"""A step's output is validated against its table's contract before it is stored (gpu_health.steps.models): the fast
path (text wrapped as the contract's strings, the rules run by passes_contract) returns what pandera returns for a
frame that holds, and every frame that breaks a rule still fails as pandera fails it."""

import numpy as np
import pandas as pd
import pytest
from pandera.errors import SchemaErrors

from gpu_health.steps.models import model_of, validate

T0 = pd.Timestamp("2026-11-03T10:00:00Z")


def states(**changes) -> pd.DataFrame:
    """goodput_states rows as the loss tree builds them: text in object arrays (one object per value)."""
    region, sku, team = "us-east", "NVIDIA H100 80GB HBM3", "t1"
    frame = pd.DataFrame({
        "partition_start": pd.DatetimeIndex([T0, T0, T0 + pd.Timedelta(minutes=5)]),
        "region": np.array([region] * 3, dtype=object), "sku": np.array([sku] * 3, dtype=object),
        "workload_class": np.array(["batch", "batch", "batch"], dtype=object),
        "team": np.array([team] * 3, dtype=object),
        "state": np.array(["productive", "allocated_idle", "productive"], dtype=object),
        "gpu_minutes": [30.0, 10.0, 40.0],
    })
    for col, (row, value) in changes.items():
        frame[col] = frame[col].astype(object)
        frame.loc[row, col] = value
    return frame


def test_a_clean_output_comes_back_as_pandera_coerces_it():
    frame = states()
    got = validate("goodput_states", frame)
    pd.testing.assert_frame_equal(got, model_of("goodput_states").validate(frame, lazy=True))
    assert all(isinstance(got[c].dtype, pd.StringDtype) for c in ("region", "sku", "team", "state"))
    assert frame["region"].dtype == object  # the step's own frame is left as it was


@pytest.mark.parametrize("changes, check", [
    ({"state": (1, "lunch")}, "isin"),                       # a state the loss tree does not have
    ({"gpu_minutes": (0, -1.0)}, "greater_than_or_equal"),   # negative minutes
    ({"team": (0, None)}, "not_nullable"),                   # a missing required text
    ({"team": (1, 7)}, None),                                # not text at all: coerced by pandera, as before
    ({"state": (1, "productive")}, "unique"),                # a duplicate key (partition, ..., state)
])
def test_an_output_breaking_its_contract_fails_as_pandera_fails_it(changes, check):
    frame = states(**changes)
    try:
        want = model_of("goodput_states").validate(frame, lazy=True)
    except SchemaErrors as err:
        with pytest.raises(SchemaErrors) as got:
            validate("goodput_states", frame)
        assert check is not None and check in str(got.value)
        assert str(got.value) == str(err)
    else:
        assert check is None
        pd.testing.assert_frame_equal(validate("goodput_states", frame), want)


@pytest.mark.parametrize("table", ["goodput_states", "job_failures", "alerts", "kpi_values", "serving_slis"])
def test_an_empty_output_comes_back_as_pandera_coerces_it_each_time(table):
    """A frame without rows is validated by pandera once per shape and the result reused: what comes back is
    pandera's, every time, and changing one result changes no later one."""
    frame = states().iloc[0:0] if table == "goodput_states" else pd.DataFrame(
        {c: pd.Series(dtype=object) for c in model_of(table).to_schema().columns})
    want = model_of(table).validate(frame, lazy=True)
    first = validate(table, frame)
    pd.testing.assert_frame_equal(first, want)
    first["extra"] = 1  # a caller adding to its frame ...
    again = validate(table, frame.copy())
    pd.testing.assert_frame_equal(again, want)  # ... leaves the next caller's alone
    assert again is not first


def test_an_empty_output_missing_a_column_fails_every_time():
    frame = states().iloc[0:0].drop(columns=["team"])
    for _ in range(2):
        with pytest.raises(SchemaErrors):
            validate("goodput_states", frame)
