"""One incident, one page: a cause already paged that is detected again within a day re-opens its alert (the same
alert_id and paged_at: no second page); after a day, or for another cause (another change and version, other nodes
of the region), it pages as a new alert. A node that throttles briefly and repeatedly is one ticket carrying its
history. Descriptions name the finding's own first action where it knows it.

The partitions run as the alerts step's range loop runs them (``alerts.step`` then ``alerts.remember``)."""

import json

import pandas as pd

from gpu_health.delivery.alertmanager import alert_to_payload
from gpu_health.diagnosis import alerts as A
from gpu_health.diagnosis.detectors import RUNBOOKS
from gpu_health.diagnosis.finding import Finding

P0 = pd.Timestamp("2026-11-03T08:00:00Z")
FIVE = pd.Timedelta(minutes=5)


def _run(plan: dict[int, list[Finding]], partitions: int, changes: pd.DataFrame | None = None) -> pd.DataFrame:
    """Alert snapshots of ``partitions`` partitions from P0; ``plan``: partition index -> its findings; ``changes``:
    the change_events rows the step reads (none by default)."""
    prev, memory, out = A.empty(), {}, []
    for i in range(partitions):
        p = P0 + i * FIVE
        snap = A.step(prev, [_copy(f) for f in plan.get(i, [])], p, rates={"us-east": 2.0},
                      changes=pd.DataFrame() if changes is None else changes, recent=memory)
        A.remember(memory, snap, p + FIVE)
        out.append(snap)
        prev = snap
    return pd.concat([s for s in out if len(s)], ignore_index=True)


def _copy(f: Finding) -> Finding:
    return Finding(**{**f.__dict__, "nodes": list(f.nodes)})


def _pages(alerts: pd.DataFrame) -> pd.Series:
    """alert_id -> its paged_at, one per alert that ever paged (what the pager and the scorer see)."""
    paged = alerts[alerts["paged_at"].notna()]
    return paged.groupby("alert_id")["paged_at"].agg(lambda s: tuple(sorted(set(s))))


def _deploy(event="chg-7", cohort="framework torch-2.14.0", team="vision"):
    return Finding("deploy_regression", "software", "page", "us-east", f"deploy_regression|{event}", team=team,
                   cohort=cohort, change_event=event, lost_gpu_minutes=40.0, summary="Step time regression",
                   evidence="step time 1.4x")


def _hw(nodes, severity="page"):
    return Finding("hardware_fault", "hardware", severity, "us-east", "hardware_fault|us-east", nodes=list(nodes),
                   lost_gpu_minutes=8.0, summary="GPU hardware fault", evidence="Xid 79; GPU rows gone")


def _episodes(at: list[int], finding, length=2) -> dict:
    return {i + k: [finding] for i in at for k in range(length)}


def test_a_cause_paged_again_within_a_day_reopens_its_alert_without_a_new_page():
    """Resolved after its first episode, the same change event re-detected 2 hours later: one alert, one page."""
    alerts = _run(_episodes([0, 24], _deploy()), 30)
    pages = _pages(alerts)
    assert len(pages) == 1, pages
    assert len(pages.iloc[0]) == 1  # its paged_at never moved
    rows = alerts[alerts["alert_id"] == pages.index[0]].sort_values("partition_start")
    status = list(rows["status"])
    assert "firing" in status[status.index("resolved"):]  # resolved, then re-opened
    assert rows["opened_at"].nunique() == 1
    assert json.loads(rows["scope"].iloc[-1])["history"]["episodes"] == 2


def test_another_event_of_the_same_version_is_the_same_cause():
    """A second change event for the version already paged (another region's roll-out of it): re-opened, not paged."""
    alerts = _run({**_episodes([0], _deploy()), **_episodes([30], _deploy(event="chg-9"))}, 36)
    assert len(_pages(alerts)) == 1
    assert set(alerts.loc[alerts["partition_start"] == P0 + 30 * FIVE, "key"]) == {"deploy_regression|chg-9"}


def test_the_same_driver_deployed_again_after_its_alert_resolved_pages_again():
    """chg-7 put the driver on n1, n2 and was rolled back (its alert resolved); a day later chg-9 puts the same
    version on n5, n6 and its jobs fail: another deploy to roll back, a new page (the waves of one rollout are one
    change event: deploy_regression groups them)."""
    def driver(event, nodes):
        return Finding("deploy_regression", "software", "page", "us-east", f"deploy_regression|{event}",
                       nodes=list(nodes), cohort="driver_upgrade 550.127.08 -> 560.35.03", change_event=event,
                       lost_gpu_minutes=40.0, summary="Job failures after a driver upgrade", evidence="Fisher p=1e-6")
    again = _run({**_episodes([0], driver("chg-7", ["n1", "n2"])), **_episodes([30], driver("chg-9", ["n5", "n6"]))}, 36)
    assert len(_pages(again)) == 2


def test_the_same_release_made_again_after_its_alert_resolved_pages_again():
    """torch-2.14.0 went to one team (chg-7), paged and was rolled back (its alert resolved); later chg-9 releases
    the same version to every team and its jobs run slow: a new deploy to roll back, a new page. Its lingering jobs
    under an event made before the rollback stay the first alert's (the test above)."""
    changes = pd.DataFrame({"event_id": ["chg-7", "chg-9"], "ts": [P0 - FIVE, P0 + 29 * FIVE],
                            "kind": "framework_release", "scope": "*", "from_version": "2.13.1",
                            "to_version": "2.14.0", "description": "release"})
    again = _run({**_episodes([0], _deploy()), **_episodes([30], _deploy(event="chg-9", team="ads,vision"))}, 36,
                 changes)
    assert len(_pages(again)) == 2
    before = changes.assign(ts=[P0 - FIVE, P0])  # chg-9 made before chg-7's alert resolved
    assert len(_pages(_run({**_episodes([0], _deploy()), **_episodes([30], _deploy(event="chg-9"))}, 36, before))) == 1


def test_another_change_and_version_pages_as_a_new_alert():
    other = _deploy(event="chg-9", cohort="framework jax-0.5.1", team="vision")
    alerts = _run({**_episodes([0], _deploy()), **_episodes([30], other)}, 36)
    assert len(_pages(alerts)) == 2


def test_after_a_day_the_same_cause_pages_again():
    day = int(A.RECENT / FIVE)
    alerts = _run(_episodes([0, day + 12], _deploy()), day + 16)
    assert len(_pages(alerts)) == 2


def test_region_keyed_detectors_reopen_on_overlapping_nodes_only():
    """hardware_fault|us-east names only the region: the same node again is the same fault, another node is not."""
    same = _run(_episodes([0, 20], _hw(["n1"])), 24)
    assert len(_pages(same)) == 1
    other = _run({**_episodes([0], _hw(["n1"])), **_episodes([20], _hw(["n5"]))}, 24)
    assert len(_pages(other)) == 2


def test_a_reopened_alert_reaches_alertmanager_as_the_same_alert():
    """Same labels (Alertmanager's fingerprint) and startsAt as the first page; the scope says it was re-opened."""
    alerts = _run(_episodes([0, 24], _deploy()), 30).sort_values("partition_start")
    first = alerts[alerts["paged_at"].notna()].iloc[0].to_dict()
    last = alerts.iloc[-1].to_dict()
    a, b = alert_to_payload(first), alert_to_payload(last)
    assert a["labels"] == b["labels"] and a["startsAt"] == b["startsAt"]
    assert "reopened" not in a["annotations"] and b["annotations"]["reopened"].endswith("(episode 2)")


def _thermal(i, severity="ticket"):
    return Finding("thermal_throttle", "hardware", severity, "us-east", "thermal_throttle|us-east", nodes=["n3"],
                   summary="Thermal throttling in us-east on n3", evidence="5 GPU-minutes thermally throttled",
                   tally={"throttled_gpu_minutes": 5.0, "max_temp_c": 84.0 + i})


def test_a_node_throttling_briefly_and_repeatedly_is_one_ticket_with_its_history():
    plan = {i: [_thermal(n)] for n, i in enumerate((0, 12, 30, 60))}  # four one-partition episodes in five hours
    alerts = _run(plan, 64)
    assert alerts["alert_id"].nunique() == 1
    assert alerts["paged_at"].isna().all()
    last = alerts.sort_values("partition_start").iloc[-1]
    history = json.loads(last["scope"])["history"]
    assert history["episodes"] == 4
    assert history["throttled_gpu_minutes"] == 20.0 and history["max_temp_c"] == 87.0
    assert "4 episodes" in alerts.loc[alerts["partition_start"] == P0 + 60 * FIVE, "description"].iloc[0]


def test_a_thermal_ticket_that_gains_an_impact_still_pages():
    alerts = _run({0: [_thermal(0)], 12: [_thermal(1, "page")], 13: [_thermal(2, "page")]}, 16)
    assert alerts["alert_id"].nunique() == 1
    assert len(_pages(alerts)) == 1


def test_the_first_action_is_the_findings_own_where_it_knows_it():
    f = _deploy()
    f.action = "Roll back chg-7 (torch-2.13.1 -> torch-2.14.0)"
    own = A.step(A.empty(), [f], P0, rates={}, changes=pd.DataFrame())
    assert "First action: Roll back chg-7 (torch-2.13.1 -> torch-2.14.0)" in own["description"].iloc[0]
    generic = A.step(A.empty(), [_deploy()], P0, rates={}, changes=pd.DataFrame())
    assert RUNBOOKS["software"].split(" Runbook:")[0] in generic["description"].iloc[0]


def test_a_later_run_reads_from_the_store_what_the_range_loop_carried(sqlite_url):
    """The alerts a run starting at partition t may re-open, read from the stored snapshots (the alerts step's
    declared history), are those the range loop carried to t -- also for a re-run that stands its own unstored
    snapshots in for the stored ones."""
    from gpu_health.steps import diagnosis as D
    from gpu_health.steps.registry import inputs_for
    from gpu_health.storage.warehouse import Warehouse

    plan = {**_episodes([0, 40], _deploy()), **{i: [_thermal(n)] for n, i in enumerate((3, 20, 50))},
            **_episodes([10], _hw(["n1"]))}
    n = 60
    prev, memory, out, carried = A.empty(), {}, [], {}
    for i in range(n):
        p = P0 + i * FIVE
        carried[p] = {k: (r["partition_start"], r["key"]) for k, r in memory.items()}
        snap = A.step(prev, [_copy(f) for f in plan.get(i, [])], p, rates={}, changes=pd.DataFrame(), recent=memory)
        A.remember(memory, snap, p + FIVE)
        out.append(snap)
        prev = snap
    frame = pd.concat([s for s in out if len(s)], ignore_index=True)
    wh = Warehouse(sqlite_url)
    wh.replace_window("alerts", frame, P0, P0 + n * FIVE)
    for i in (1, 15, 45, 59):
        t = P0 + i * FIVE
        read = D._recent_alerts(inputs_for("alerts", wh, t, t + FIVE), None)
        assert {k: (r["partition_start"], r["key"]) for k, r in read.items()} == carried[t]
        since = P0 + (i // 2) * FIVE  # a re-run from `since`: its snapshots of [since, t) not stored yet
        unstored = (since, frame[frame["partition_start"] >= since])  # (rows past t too: only those before count)
        rerun = D._recent_alerts(inputs_for("alerts", wh, t, t + FIVE), unstored)
        assert {k: (r["partition_start"], r["key"]) for k, r in rerun.items()} == carried[t]
    assert carried[P0 + 45 * FIVE]  # not vacuous: alerts to re-open were carried


def test_a_page_stores_the_margin_of_the_finding_in_the_partition_it_paged():
    """margin_at_page is the margin of the finding that made the alert a page, kept while the alert lasts and when
    it re-opens (a later, stronger finding does not move it: the bar was cleared by that much when on-call was
    paged); a ticket has none."""
    from gpu_health.contracts.derived import Alerts

    def hw(severity, margin):
        f = _hw(["n1"], severity)
        f.margin = margin
        return f

    plan = {0: [hw("ticket", None)], 1: [hw("page", 2.5)], 2: [hw("page", 9.0)], 20: [hw("page", 1.2)]}
    alerts = _run(plan, 22).sort_values("partition_start")
    Alerts.validate(alerts, lazy=True)
    assert alerts["alert_id"].nunique() == 1 and len(_pages(alerts)) == 1
    by_p = dict(zip((alerts["partition_start"] - P0) // FIVE, alerts["margin_at_page"]))
    assert pd.isna(by_p[0])
    assert by_p[1] == 2.5 and by_p[2] == 2.5 and by_p[20] == 2.5  # re-opened at 20: the same page, its margin


def test_margin_at_page_round_trips_through_the_warehouse(sqlite_url):
    from gpu_health.storage.warehouse import Warehouse

    f = _hw(["n1"])
    f.margin = 3.25
    snap = A.step(A.empty(), [f, _deploy()], P0, rates={}, changes=pd.DataFrame())
    wh = Warehouse(sqlite_url)
    wh.replace_window("alerts", snap, P0, P0 + FIVE)
    back = wh.read_window("alerts", P0, P0 + FIVE).set_index("detector")["margin_at_page"]
    assert back["hardware_fault"] == 3.25 and pd.isna(back["deploy_regression"])  # None: not stated


def test_margin_of_is_the_smallest_factor_over_the_bars_a_page_needs():
    import math

    from gpu_health.diagnosis.finding import margin_of

    assert margin_of((10.0, 5.0), (3, 2)) == 1.5  # observed / bar, the smallest
    assert math.isclose(margin_of(p_values=((1e-6, 1e-3),)), 2.0)  # log p / log alpha
    assert math.isclose(margin_of((4.0, 1.0), p_values=((1e-6, 1e-3),)), 2.0)
    assert math.isfinite(margin_of(p_values=((0.0, 1e-3),)))  # an underflowed p-value: large, finite
    # a bar of 0 or none, or an unbounded observation, says nothing; nothing said is None, not 1
    assert margin_of((3.0, 0), (None, 2.0), (math.inf, 1.0), (2.0, 1.0)) == 2.0
    assert margin_of((3.0, 0)) is None and margin_of() is None
