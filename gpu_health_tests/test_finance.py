"""Daily settlement, blended rates and wasted spend (gpu_health.metrics.finance), and Finance's
SQL views (gpu_health.storage.views) on a real PostgreSQL and on SQLite.

Exact arithmetic on hand-built frames, then one simulated hour shared by the module: a
SQLite warehouse filled the way the pipeline fills it (``test_goodput.fill_warehouse``), a
driver regression and a training stall failing jobs whose lost work reaches back across
partitions, the loss tree from ``pipeline.goodput`` and the day's finance tables from
``pipeline.finance_day``.
"""

import datetime
import uuid

import numpy as np
import pandas as pd
import psycopg2
import pytest
import sqlalchemy as sa

from gpu_health.metrics import finance as F
from gpu_health.metrics.goodput import STATE_FAMILY, STATES
from gpu_health.contracts.derived import WastedSpend
from gpu_health.steps import telemetry as T
from gpu_health.steps.finance import finance_day
from gpu_health.steps.registry import inputs_for
from gpu_health.storage.views import READ_ONLY_ROLE, VIEWS, grant_finance_read_only
from gpu_health.storage.warehouse import Warehouse, engine_for
from gpu_health_tests.services.postgres import admin_sql, fresh_database
from gpu_health_tests.test_goodput import E, S, fill_warehouse, scenario

DAY = pd.Timestamp("2026-11-03T00:00:00Z")
NEXT = DAY + pd.Timedelta(days=1)
H100, V100 = "NVIDIA H100 80GB HBM3", "Tesla V100-SXM3-32GB"
DIMS = F.DIMS


def ts(hhmm: str, day=DAY) -> pd.Timestamp:
    return pd.Timestamp(f"{day:%Y-%m-%d}T{hhmm}:00Z")


def states_frame(rows) -> pd.DataFrame:
    """goodput_states rows: (region, sku, workload_class, team, state, gpu_minutes) at 10:00."""
    f = pd.DataFrame(rows, columns=[*DIMS, "state", "gpu_minutes"])
    return f.assign(partition_start=ts("10:00"))


def failure(team, gpus, lost_from, failed_at, region="us-east", sku=H100, workload_class="batch") -> dict:
    return {"job_id": f"j-{team}-{failed_at:%H%M}", "failed_at": failed_at, "lost_from": lost_from, "gpus": float(gpus),
            "region": region, "sku": sku, "team": team, "workload_class": workload_class}


def wide(settled: pd.DataFrame) -> pd.DataFrame:
    w = settled.groupby([*DIMS, "state"])["gpu_minutes"].sum().unstack("state", fill_value=0.0)
    return w.reindex(columns=STATES, fill_value=0.0)


# --- settlement on hand-built frames --------------------------------------------------------------

def test_settle_moves_each_failures_lost_work_back_within_its_slice():
    states = states_frame([
        ("us-east", H100, "batch", "a", "productive", 1000.0), ("us-east", H100, "batch", "a", "idle_no_demand", 200.0),
        ("us-east", H100, "batch", "b", "productive", 50.0), ("us-east", H100, "batch", "b", "failure_loss", 4.0),
        ("eu-west", V100, "distributed", "c", "productive", 700.0),
    ])
    failures = pd.DataFrame([
        failure("a", 8, ts("10:00"), ts("12:03")),            # 120 min before its own partition (12:00) x 8 GPUs
        failure("b", 4, ts("23:00"), ts("00:32", NEXT)),      # tomorrow's failure reaching back an hour: 240, capped by 50
        failure("z", 2, ts("09:00"), ts("11:00")),            # a slice with no states: nothing to move
        failure("c", 16, ts("12:41", DAY), ts("12:43"), region="eu-west", sku=V100, workload_class="distributed"),  # own partition only
        failure("c", 16, ts("20:00", DAY - pd.Timedelta(days=1)), ts("00:10"), region="eu-west", sku=V100,
                workload_class="distributed"),                 # from yesterday: only today's 10 minutes count here
    ])
    settled, moved = F.settle(states, failures, DAY, NEXT)
    after = wide(settled)
    assert after.loc[("us-east", H100, "batch", "a"), "productive"] == 1000 - 960
    assert after.loc[("us-east", H100, "batch", "a"), "failure_loss"] == 960
    assert after.loc[("us-east", H100, "batch", "b"), "productive"] == 0
    assert after.loc[("us-east", H100, "batch", "b"), "failure_loss"] == 54
    assert after.loc[("eu-west", V100, "distributed", "c"), "failure_loss"] == 16 * 10
    assert moved == 960 + 50 + 160
    # nothing is created or lost
    before = wide(states)
    pd.testing.assert_series_equal(before.sum(axis=1), after.sum(axis=1))


def test_settle_without_failures_changes_nothing():
    states = states_frame([("us-east", H100, "batch", "a", "productive", 10.0), ("us-east", H100, "none", "none", "idle_no_demand", 5.0)])
    settled, moved = F.settle(states, pd.DataFrame(columns=["job_id", "failed_at", "lost_from", "gpus", *DIMS]), DAY, NEXT)
    assert moved == 0
    pd.testing.assert_frame_equal(wide(settled), wide(states))


# --- blended rates and wasted spend on hand-built frames ---------------------------------------------

COST = pd.DataFrame([
    {"date": DAY.date(), "region": "us-east", "sku": H100, "capacity_gpus": 100, "reserved_gpus": 85,
     "reserved_gpu_hour_usd": 2.0, "on_demand_gpu_hour_usd": 4.0, "on_demand_gpu_hours": 240.0},
    {"date": DAY.date(), "region": "eu-west", "sku": V100, "capacity_gpus": 200, "reserved_gpus": 200,
     "reserved_gpu_hour_usd": 0.5, "on_demand_gpu_hour_usd": 1.0, "on_demand_gpu_hours": 0.0},
    {"date": DAY.date(), "region": "eu-west", "sku": H100, "capacity_gpus": 0, "reserved_gpus": 0,
     "reserved_gpu_hour_usd": 2.0, "on_demand_gpu_hour_usd": 4.0, "on_demand_gpu_hours": 0.0},
])


def test_blended_rate_is_the_days_spend_over_paid_gpu_hours():
    r = F.blended_rates(COST).set_index(["region", "sku"])
    # 85 x 24 h x 2.00 + 240 h x 4.00 = 5,040 USD over 100 x 24 paid GPU-hours
    assert r.at[("us-east", H100), "spend_usd"] == pytest.approx(5040.0)
    assert r.at[("us-east", H100), "blended_gpu_hour_usd"] == pytest.approx(2.1)
    assert r.at[("eu-west", V100), "blended_gpu_hour_usd"] == pytest.approx(0.5)
    assert r.at[("eu-west", H100), "blended_gpu_hour_usd"] == 0.0  # nothing installed: no rate, no division by zero


def test_wasted_spend_prices_every_state_and_reconciles_to_the_days_spend():
    cap = 100 * 24 * 60  # us-east H100's whole day in GPU-minutes
    settled = pd.DataFrame([
        ("us-east", H100, "batch", "a", "productive", 0.6 * cap), ("us-east", H100, "batch", "a", "failure_loss", 0.1 * cap),
        ("us-east", H100, "batch", "b", "allocated_unproductive", 0.05 * cap),
        ("us-east", H100, "none", "none", "idle_no_demand", 0.25 * cap),
        ("eu-west", V100, "distributed", "c", "slowdown_network", 600.0),
    ], columns=[*DIMS, "state", "gpu_minutes"])
    out = F.wasted_spend(settled, F.blended_rates(COST), DAY)
    np.testing.assert_allclose(out["usd"], out["gpu_hours"] * out["blended_gpu_hour_usd"])
    assert (out["cause_family"] == out["state"].map(STATE_FAMILY)).all()
    assert set(out["date"]) == {DAY.date()}
    east = out[out["region"] == "us-east"]
    assert east["usd"].sum() == pytest.approx(5040.0)  # productive + waste = what Finance paid for the day
    assert east.loc[east["state"] == "allocated_unproductive", "usd"].sum() == pytest.approx(0.05 * 2400 * 2.1)
    assert out.loc[out["region"] == "eu-west", "usd"].sum() == pytest.approx(10 * 0.5)


def test_a_region_finance_does_not_price_stays_unpriced_not_zero_dollars():
    """GPUs report in a region x SKU with no cost row (a region Finance does not list): its spend is unknown,
    null in wasted_spend, never $0 that would read as free capacity; the priced rows keep their USD."""
    settled = pd.DataFrame([("us-east", H100, "batch", "a", "productive", 600.0),
                            ("ap-south", H100, "batch", "a", "productive", 600.0)], columns=[*DIMS, "state", "gpu_minutes"])
    out = F.wasted_spend(settled, F.blended_rates(COST), DAY).set_index("region")
    assert np.isnan(out.at["ap-south", "blended_gpu_hour_usd"]) and np.isnan(out.at["ap-south", "usd"])
    assert out.at["ap-south", "gpu_hours"] == pytest.approx(10.0)
    assert out.at["us-east", "usd"] == pytest.approx(10 * 2.1)
    WastedSpend.validate(out.reset_index())


# --- a simulated hour through the warehouse ---------------------------------------------------------

def _at(minutes):
    return (S + pd.Timedelta(minutes=minutes)).isoformat()


@pytest.fixture(scope="module")
def day(tmp_path_factory):
    """The loss tree and the finance tables of a simulated hour with failures reaching back in time."""
    scen = scenario(
        {"kind": "driver_regression", "start": _at(3), "end": _at(33), "scope": {"region": "us-east", "nodes": 8}},
        {"kind": "training_stall", "start": _at(12), "end": _at(38), "scope": {"region": "eu-west", "nodes": 6}},
    )
    wh = fill_warehouse(f"sqlite:///{tmp_path_factory.mktemp('finance') / 'wh.db'}", scen, S, E)
    leaves, failures = T.goodput(inputs_for("goodput", wh, S, E))
    tables = T.rollups(leaves)
    for name, frame in (("goodput_states", tables["goodput_states"]), ("cluster_goodput", tables["cluster_goodput"]),
                        ("job_failures", failures)):
        wh.replace_window(name, frame, S, E)
    out = finance_day(inputs_for("cluster_goodput_daily", wh, DAY, NEXT))
    return {"wh": wh, "states": tables["goodput_states"], "provisional": tables["cluster_goodput"], "failures": failures,
            "cost": wh.read_window("cost_capacity", DAY, NEXT), **out}


def test_daily_settlement_conserves_gpu_minutes_per_slice(day):
    states, failures = day["states"], day["failures"]
    settled, moved = F.settle(states, failures, DAY, NEXT)
    before, after = wide(states), wide(settled)
    pd.testing.assert_series_equal(before.sum(axis=1), after.sum(axis=1), check_exact=False, rtol=1e-12)
    grown = after["failure_loss"] - before["failure_loss"]
    shrunk = before["productive"] - after["productive"]
    assert (grown >= -1e-9).all() and (shrunk >= -1e-9).all()
    pd.testing.assert_series_equal(grown, shrunk, check_names=False, atol=1e-9)
    untouched = after.drop(columns=["failure_loss", "productive"])
    pd.testing.assert_frame_equal(untouched, before.drop(columns=["failure_loss", "productive"]))
    # the failures reached back: lost work before their own partitions was found and moved
    reach = failures["lost_from"] < failures["failed_at"].dt.floor("5min")
    assert reach.sum() >= 5 and moved > 100
    assert moved == pytest.approx(grown.sum())
    assert moved == pytest.approx(day["moved_gpu_minutes"])


def test_settled_goodput_is_below_provisional_where_failures_reach_back(day):
    daily = day["cluster_goodput_daily"].set_index("region")
    assert set(daily.index) == {"us-east", "eu-west", "*"}
    paid = day["states"].groupby("region")["gpu_minutes"].sum()
    for region in ("us-east", "eu-west"):
        assert daily.at[region, "paid_gpu_hours"] == pytest.approx(paid[region] / 60)
        assert daily.at[region, "partitions"] == 12
    assert daily.at["*", "settled_goodput"] < daily.at["*", "provisional_goodput"]
    moved_regions = set(day["failures"].loc[day["failures"]["lost_from"] < day["failures"]["failed_at"].dt.floor("5min"), "region"])
    for region in ("us-east", "eu-west"):
        if region in moved_regions:
            assert daily.at[region, "settled_goodput"] < daily.at[region, "provisional_goodput"], region
        else:
            assert daily.at[region, "settled_goodput"] == pytest.approx(daily.at[region, "provisional_goodput"])
    # the settled productive + failure loss = provisional ones with the moved minutes swapped
    prov = day["states"].groupby("state")["gpu_minutes"].sum()
    assert daily.at["*", "productive_gpu_hours"] * 60 == pytest.approx(prov["productive"] - day["moved_gpu_minutes"])
    assert daily.at["*", "failure_loss_gpu_hours"] * 60 == pytest.approx(prov["failure_loss"] + day["moved_gpu_minutes"])


def test_wasted_spend_of_the_simulated_hour_reconciles_to_an_hour_of_spend(day):
    spend = day["wasted_spend"]
    rates = F.blended_rates(day["cost"]).set_index(["region", "sku"])
    assert set(spend["state"]) <= set(STATES) and "productive" in set(spend["state"])
    np.testing.assert_allclose(spend["usd"], spend["gpu_hours"] * spend["blended_gpu_hour_usd"])
    per = spend.groupby(["region", "sku"]).agg(usd=("usd", "sum"), hours=("gpu_hours", "sum"))
    for (region, sku), row in per.iterrows():
        capacity = rates.at[(region, sku), "capacity_gpus"]
        assert row["hours"] == pytest.approx(capacity * 1.0)  # the hour covered, every paid GPU-hour priced once
        assert row["usd"] == pytest.approx(rates.at[(region, sku), "spend_usd"] / 24)
    assert (spend.loc[spend["state"] != "productive", "usd"] > 0).any()


# --- Finance's views ----------------------------------------------------------------------------------

def _finance_rows(day) -> dict:
    """The simulated day's finance tables plus 8 earlier hand-made days (so 'last 7 days' has to cut)."""
    spend, daily, cost = day["wasted_spend"], day["cluster_goodput_daily"], day["cost"]
    spends, dailies, costs = [spend], [daily], [cost]
    for k in range(1, 9):
        d = DAY.date() - datetime.timedelta(days=k)
        spends.append(spend.assign(date=d, gpu_hours=spend["gpu_hours"] * (1 + k / 10), usd=spend["usd"] * (1 + k / 10)))
        dailies.append(daily.assign(date=d))
        costs.append(cost.assign(date=d))
    return {"wasted_spend": pd.concat(spends, ignore_index=True), "cluster_goodput_daily": pd.concat(dailies, ignore_index=True),
            "cost_capacity": pd.concat(costs, ignore_index=True)}


def _write(wh: Warehouse, rows: dict) -> dict:
    first, last = DAY - pd.Timedelta(days=8), NEXT
    for name, frame in rows.items():
        wh.replace_window(name, frame, first, last)
    # what the asset tables hold, read back from the database
    return {name: wh.read_window(name, first, last) for name in rows}


def _query(url: str, sql: str) -> pd.DataFrame:
    with engine_for(url).connect() as conn:
        return pd.read_sql_query(sa.text(sql), conn)


def _expected_waste_last_7_days(spend: pd.DataFrame) -> pd.DataFrame:
    last7 = sorted(set(spend["date"]))[-7:]
    w = spend[(spend["state"] != "productive") & spend["date"].isin(last7)]
    return w.groupby(["cause_family", "team"], as_index=False)[["gpu_hours", "usd"]].sum()


def _check_views(url: str, held: dict) -> None:
    spend = held["wasted_spend"]
    assert len(set(spend["date"])) == 9
    key = ["cause_family", "team"]
    got = _query(url, "SELECT * FROM finance_waste_last_7_days").sort_values(key).reset_index(drop=True)
    want = _expected_waste_last_7_days(spend).sort_values(key).reset_index(drop=True)
    pd.testing.assert_frame_equal(got, want, check_dtype=False, rtol=1e-9)
    # cost per productive GPU-hour: the day's whole spend over its productive hours, per region
    cpp = _query(url, "SELECT * FROM finance_cost_per_productive_gpu_hour").astype({"date": str})
    today = cpp[cpp["date"] == str(DAY.date())].set_index("region")
    s = spend[spend["date"] == DAY.date()]
    for region, grp in s.groupby("region"):
        prod = grp.loc[grp["state"] == "productive", "gpu_hours"].sum()
        assert today.at[region, "spend_usd"] == pytest.approx(grp["usd"].sum(), rel=1e-9)
        assert today.at[region, "usd_per_productive_gpu_hour"] == pytest.approx(grp["usd"].sum() / prod, rel=1e-9)
    daily = _query(url, "SELECT * FROM finance_goodput_daily")
    assert len(daily) == len(held["cluster_goodput_daily"])
    assert daily["settled_goodput"].sort_values().to_numpy() == pytest.approx(
        held["cluster_goodput_daily"]["settled_goodput"].sort_values().to_numpy(), rel=1e-9)
    rvod = _query(url, "SELECT * FROM finance_reserved_vs_on_demand").astype({"date": str})
    row = rvod[(rvod["date"] == str(DAY.date()))].set_index(["region", "sku"])
    for (region, sku), grp in s[s["state"] == "productive"].groupby(["region", "sku"]):
        assert row.at[(region, sku), "productive_gpu_hours"] == pytest.approx(grp["gpu_hours"].sum(), rel=1e-9)


@pytest.fixture
def pg_database(postgres_url):
    """A fresh database on the session's PostgreSQL (dropped afterwards, with the roles a test made)."""
    roles = []
    with fresh_database(postgres_url, prefix="fin") as url:
        yield url, roles
    for role in roles:  # once the database that held their grants is gone
        admin_sql(postgres_url, f'DROP ROLE IF EXISTS "{role}"')


def test_finance_views_on_postgres_return_the_sums_the_tables_hold(day, pg_database):
    url, _ = pg_database
    held = _write(Warehouse(url), _finance_rows(day))
    _check_views(url, held)


def test_the_same_views_work_on_sqlite(day, sqlite_url):
    held = _write(Warehouse(sqlite_url), _finance_rows(day))
    _check_views(sqlite_url, held)


def test_finance_read_only_role_selects_views_and_cannot_write(day, pg_database):
    url, roles = pg_database
    wh = Warehouse(url)
    _write(wh, _finance_rows(day))
    role = f"{READ_ONLY_ROLE}_{uuid.uuid4().hex[:6]}"
    roles.append(role)
    grant_finance_read_only(wh.engine, role, login_password="finance-pw")
    grant_finance_read_only(wh.engine, role, login_password="finance-pw")  # idempotent
    u = sa.make_url(url)
    conn = psycopg2.connect(host=u.host, port=u.port, dbname=u.database, user=role, password="finance-pw")
    conn.autocommit = True
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT current_user")
            assert cur.fetchone()[0] == role
            # the role sees every row the owner sees; alerts_current and the capacity views (no alerts or capacity
            # tables written here) have none
            empty = {"alerts_current", "finance_capacity_headroom", "finance_capacity_forecast",
                     "finance_capacity_demand_daily"}
            for view in VIEWS:
                cur.execute(f"SELECT count(*) FROM {view}")
                seen = cur.fetchone()[0]
                with wh.engine.connect() as owner:
                    assert seen == owner.exec_driver_sql(f"SELECT count(*) FROM {view}").scalar(), view
                assert (seen > 0) == (view not in empty), (view, seen)
            cur.execute("SELECT sum(usd) FROM finance_waste_last_7_days")
            assert cur.fetchone()[0] > 0
            for sql in ("INSERT INTO wasted_spend (date, region, sku, state, cause_family, team, gpu_hours, "
                        "blended_gpu_hour_usd, usd) VALUES ('2026-11-04', 'us-east', 'x', 'productive', 'productive', "
                        "'t', 1, 1, 1)",
                        "SELECT * FROM wasted_spend",
                        "DELETE FROM cost_capacity"):
                with pytest.raises(psycopg2.errors.InsufficientPrivilege):
                    cur.execute(sql)
    finally:
        conn.close()
    assert wh.count("wasted_spend") == len(_finance_rows(day)["wasted_spend"])


def test_read_only_role_is_refused_on_sqlite(sqlite_url):
    with pytest.raises(ValueError, match="PostgreSQL"):
        grant_finance_read_only(Warehouse(sqlite_url).engine)
