"""Each step reads what its declaration says (gpu_health.steps.registry), no more, no less, no further back.

Every step runs on a simulated window through a warehouse that records each read (table, window); the test fails
naming the step and the table when a step reads a table it does not declare, declares a table it never reads (an
``optional`` read excepted), or reads further back or further ahead than declared. The Dagster deps derive from the
declarations, so this is what keeps the asset graph true.
"""

import pandas as pd
import pytest

from gpu_health.steps.direct import run_range
from gpu_health.steps.graph import order, upstream_steps
from gpu_health.steps.registry import STEPS, asset_deps, own_earlier_reads, step
from gpu_health.storage.warehouse import Warehouse
from gpu_health_tests.conftest import simulate

START, END = pd.Timestamp("2026-11-03T22:00:00Z"), pd.Timestamp("2026-11-04T00:00:00Z")
WINDOW = (pd.Timestamp("2026-11-03T23:00:00Z"), pd.Timestamp("2026-11-03T23:30:00Z"))


class RecordingWarehouse:
    """A warehouse that records every read: (table, start, end), None for an unbounded side."""

    def __init__(self, wh: Warehouse):
        self._wh = wh
        self.reads: list[tuple[str, pd.Timestamp | None, pd.Timestamp | None]] = []

    def read_window(self, name, start=None, end=None, **kw):
        self.reads.append((name, None if start is None else pd.Timestamp(start), None if end is None else pd.Timestamp(end)))
        return self._wh.read_window(name, start, end, **kw)

    def last_partition_by(self, name, by, start, end, **kw):
        self.reads.append((name, pd.Timestamp(start), pd.Timestamp(end)))
        return self._wh.last_partition_by(name, by, start, end, **kw)

    def __getattr__(self, attr):  # writes and everything else go to the warehouse
        return getattr(self._wh, attr)


@pytest.fixture(scope="module")
def warehouse(tmp_path_factory):
    """Two hours of a small cluster (Kubernetes tables exported) with a fault and a maintenance window, run through
    every step."""
    folder = tmp_path_factory.mktemp("graph")
    zone = simulate(folder, {
        "seed": 5, "start": START.isoformat(), "end": END.isoformat(), "cluster": {"gpus": 96, "platform": True},
        "incidents": [{"kind": "gpu_ecc_fault", "start": "2026-11-03T22:40:00Z", "duration": "60m",
                       "severity": "high", "scope": {"region": "us-east", "nodes": 1}},
                      {"kind": "maintenance", "start": "2026-11-03T22:50:00Z", "duration": "30m",
                       "severity": "low", "scope": {"region": "eu-west", "nodes": 2}}]})
    from gpu_health.sources.registry import make_source

    wh = Warehouse(f"sqlite:///{folder / 'w.db'}")
    run_range(wh, make_source("landing", str(zone)), START, END)
    return wh, make_source("landing", str(zone))


def _window_of(s):
    if s.cadence == "calendar":
        return None, None
    if s.cadence == "daily":
        return START.normalize(), START.normalize() + pd.Timedelta(days=1)
    return WINDOW


@pytest.mark.parametrize("name", [s.name for s in STEPS])
def test_a_step_reads_what_it_declares(warehouse, name):
    wh, source = warehouse
    s = step(name)
    rec = RecordingWarehouse(wh)
    start, end = _window_of(s)
    s.run(rec, start, end, **({"source": source} if "source_rejects" in s.side_writes else {}))
    read = {t for t, _, _ in rec.reads}
    declared = s.read_tables()
    required = {r.table for r in s.reads if not r.optional}
    assert not read - declared, f"{name} reads {sorted(read - declared)} without declaring them"
    assert not required - read, f"{name} declares {sorted(required - read)} but never reads them"
    for table, r0, r1 in rec.reads:
        decl = [r for r in s.reads if r.table == table]
        if any(r.whole for r in decl):
            continue
        assert r0 is not None and r1 is not None, f"{name} reads all of {table}; its declaration bounds it"
        before = max(r.before for r in decl)
        after = max(r.after for r in decl)
        assert r0 >= start - before, f"{name} reads {table} from {r0}, {start - r0} before its window; declared {before}"
        assert r1 <= end + after, f"{name} reads {table} up to {r1}, {r1 - end} past its window; declared {after}"


def test_the_graph_orders_every_step_after_what_it_reads():
    ordered = [s.name for s in order(STEPS)]
    for s in STEPS:
        for up in upstream_steps(s, STEPS):
            assert ordered.index(up.name) < ordered.index(s.name), f"{s.name} runs before {up.name}, which it reads"


def test_the_assets_deps_are_the_declared_reads():
    from gpu_health.definitions import defs

    graph = defs.resolve_asset_graph()
    for s in STEPS:
        for table in s.writes:
            key = graph.get(__import__("dagster").AssetKey(table))
            got = sorted(k.to_user_string() for k in key.parent_keys)
            declared = sorted({*asset_deps(s.name), *own_earlier_reads(s.name)})
            assert got == declared, f"{table}: Dagster deps {got} != declared {declared}"


def test_a_look_back_to_earlier_partitions_is_drawn_on_earlier_partitions():
    """The baselines read the pages of the partitions before each of theirs: the lineage draws that as a dependency
    on earlier partitions, never as a same-partition edge from alerts; the graph has no cycle; the steps still run
    after the alerts (a range's partition reads its predecessors' pages)."""
    import dagster as dg

    from gpu_health.definitions import defs

    graph = defs.resolve_asset_graph()
    graph.toposorted_asset_keys  # raises on a cycle
    alerts = dg.AssetKey("alerts")
    for name in ("kpi_baselines", "goodput_decomposition"):
        mapping = graph.get_partition_mapping(dg.AssetKey(name), alerts)
        assert isinstance(mapping, dg.TimeWindowPartitionMapping), f"{name}: alerts drawn as {mapping}"
        assert mapping.end_offset == -1 and mapping.start_offset < -1, f"{name}: {mapping}"
        p = "2026-11-03-23:00"
        parents = graph.get(dg.AssetKey(name)).partitions_def
        upstream = mapping.get_upstream_mapped_partitions_result_for_partitions(
            parents.subset_with_partition_keys([p]), parents, parents).partitions_subset.get_partition_keys()
        assert p not in upstream and "2026-11-03-22:55" in upstream, f"{name}: {p} reads alerts of {upstream[-3:]}"
        ordered = [s.name for s in order(STEPS)]
        assert ordered.index("alerts") < ordered.index(name)
    # the other reads stay same-partition edges
    mapping = graph.get_partition_mapping(dg.AssetKey("kpi_baselines"), dg.AssetKey("kpi_values"))
    assert getattr(mapping, "end_offset", 0) == 0, mapping


def test_a_table_read_back_by_its_own_step_depends_on_its_own_earlier_partitions():
    """A step reading its own table before its window (a source's re-delivery window, the alerts' last weeks, the
    SLO budgets' last days) makes its asset depend on its own earlier partitions, as far back as the read: Dagster's
    backfill then computes a partition only after them, whichever run or worker takes it; never on the partition
    itself (no cycle), and a read of later partitions (the alerts re-deriving their successors) is no dependency."""
    import dagster as dg

    from gpu_health.definitions import defs
    from gpu_health.steps.graph import FIVE_MINUTE

    graph = defs.resolve_asset_graph()
    graph.toposorted_asset_keys  # raises on a cycle
    from gpu_health.steps.registry import TREND

    self_reading = {t: max(r.before for r in s.reads if r.table == t and r is not TREND)
                    for s in STEPS if s.cadence == FIVE_MINUTE for t in s.writes
                    if any(r.table == t and r.before > pd.Timedelta(0) and r is not TREND for r in s.reads)}
    assert {"alerts", "slo_error_budgets", "gpu_telemetry", "job_metadata"} <= set(self_reading)
    # the loss tree's trend draws a picture, not a row: its tables stay free of their earlier partitions
    assert not graph.get(dg.AssetKey("goodput_states")).has_self_dependency
    p = "2026-11-03-23:00"
    for table, before in self_reading.items():
        key = dg.AssetKey(table)
        assert graph.get(key).has_self_dependency, f"{table} reads its own last {before} but does not depend on it"
        mapping = graph.get_partition_mapping(key, key)
        parts = graph.get(key).partitions_def
        upstream = mapping.get_upstream_mapped_partitions_result_for_partitions(
            parts.subset_with_partition_keys([p]), parts, parts).partitions_subset.get_partition_keys()
        first = (pd.Timestamp("2026-11-03T23:00:00Z") - before).floor("5min")
        assert p not in upstream and "2026-11-03-22:55" in upstream, f"{table}: {p} depends on {upstream[-3:]}"
        assert first.strftime("%Y-%m-%d-%H:%M") in upstream or first < pd.Timestamp(parts.start), \
            f"{table}: its look-back {before} reaches {first}, its dependency starts at {upstream[:1]}"


# --- the resolver: a body reads only through its step's declaration ------------------------------------------------
BODIES = ("telemetry", "kpis", "diagnosis", "finance", "capacity")


def test_a_body_asking_for_an_undeclared_table_or_past_its_look_back_is_refused(warehouse):
    from gpu_health.steps.registry import inputs_for
    from gpu_health.steps.resolve import UndeclaredRead

    wh, _ = warehouse
    start, end = WINDOW
    inputs = inputs_for("kpi_values", wh, start, end)
    with pytest.raises(UndeclaredRead, match="kpi_values reads 'alerts', which it does not declare"):
        inputs.window("alerts")
    since = inputs.since("job_metadata")
    assert since == start - max(r.before for r in step("kpi_values").reads if r.table == "job_metadata")
    assert len(inputs.span("job_metadata", since, start)) == len(wh.read_window("job_metadata", since, start))
    with pytest.raises(UndeclaredRead, match="outside its declared"):
        inputs.span("job_metadata", since - pd.Timedelta(minutes=5), start)
    with pytest.raises(UndeclaredRead, match="outside its declared"):
        inputs.span("gpu_telemetry", start, end + pd.Timedelta(minutes=5))
    with pytest.raises(UndeclaredRead, match="reads all of 'gpu_telemetry'"):
        inputs.span("gpu_telemetry", None, None)
    # a later window of the same run keeps the bounds declared around the step's own window
    with pytest.raises(UndeclaredRead, match="outside its declared"):
        inputs.at(end, end + pd.Timedelta(minutes=5)).in_window("gpu_telemetry")


def test_a_re_deriving_step_reads_past_its_window_only_for_the_later_partitions(warehouse):
    from gpu_health.steps.registry import inputs_for

    wh, _ = warehouse
    start, end = WINDOW
    alerts = step("alerts")
    assert alerts.rederives_later
    rec = RecordingWarehouse(wh)
    inputs = inputs_for("alerts", rec, start, end)
    inputs.window("network_telemetry")
    assert rec.reads == [("network_telemetry", start, end)]  # the declared ``after`` is the reach, not a window's read
    later = inputs.at(end, end + pd.Timedelta(minutes=5))
    later.window("network_telemetry")
    assert rec.reads[-1] == ("network_telemetry", end, end + pd.Timedelta(minutes=5))


@pytest.mark.parametrize("module", BODIES)
def test_a_step_body_never_holds_the_warehouse(module):
    """Only the resolver (steps/resolve.py) and the step's store (registry._store) touch the warehouse for a step:
    a body module that reads a table by name from the warehouse would read past its declaration unchecked."""
    import importlib
    import inspect

    source = inspect.getsource(importlib.import_module(f"gpu_health.steps.{module}"))
    for word in ("read_window", "Warehouse", "wh.", "wh,"):
        assert word not in source, f"gpu_health/steps/{module}.py uses {word!r}: read through the step's Inputs"


def test_the_loss_tree_asset_reads_its_trend_through_the_steps_declaration():
    """The goodput asset draws the last day's goodput: a read of cluster_goodput the step declares (optional: its
    body never makes it), taken through the step's Inputs, not the warehouse."""
    import inspect

    import gpu_health.defs.kpis.assets as assets

    assert any(r.table == "cluster_goodput" and r.optional for r in step("goodput").reads)
    assert "read_window" not in inspect.getsource(assets)
