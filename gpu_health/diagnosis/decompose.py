"""Decomposition of a goodput drop: which loss states grew, and where inside them.

Pure pandas (no Dagster). Input: the loss-tree leaves (``goodput_leaves``) of a
window and the leaves it is judged against (:func:`expected_leaves_from_history`).

1. **Exact split over the states.** Every paid GPU-minute is in exactly one
   state, so the state shares of paid GPU-minutes sum to 1 on both sides and

       delta goodput = delta share(productive) = - sum over the loss states of delta share(state).

   The expected leaves are first scaled so that their paid GPU-minutes equal
   the window's (a capacity change is not a state change); the identity is then
   checked numerically (:func:`state_deltas`, an ``AssertionError`` if broken).
2. **Drill-down inside each state that grew** by more than ``min_state_growth``
   of paid GPU-minutes (default 0.1 percentage point): the state's share of
   each leaf's paid GPU-minutes (a ratio: the state's GPU-minutes over the
   leaf's, actual vs expected), per combination of ``dimensions``, goes through
   :func:`gpu_health.diagnosis.drilldown.drill_down` (sets of leaves whose
   share moved together beyond the leaves' noise, over the cuboid lattice),
   which returns those sets (up to ``max_causes`` per state), or nothing when
   the growth is spread evenly or within noise. Drilling the share rather than
   the GPU-minutes keeps a leaf that merely got more work from looking like a
   cause. The leaves searched are every combination
   seen where the state could occur (on unallocated GPUs, allocated ones, or
   either), zeros included: they are the contrast. What the causes leave of
   the state's growth (when at least the floor) is one more row with no
   dimension values: "the rest, spread".
3. **Ranked causes**, one row each: ``share_of_drop`` = the cause's change in
   GPU-minutes / the drop in productive GPU-minutes (signed; > 1 when other
   states shrank meanwhile; NaN when goodput did not move). The causes that
   name dimension values come first, by change in GPU-minutes, largest first;
   the spread rests of the states follow (also by change): they complete the
   accounting but point nowhere.

Cause family (the brief's families; explicit, by state and by what the cause names):

======================== ================ =============================================
state                    default family   refined by the cause's dimension values
======================== ================ =============================================
no_data                  missing_data
maintenance              planned
hw_unavailable           hardware
idle_blocked             scheduling
idle_no_demand           capacity
allocated_idle           waste
allocated_unproductive   gaming           node_id -> hardware; a version -> software
failure_loss             software         node_id -> hardware; a version -> software
slowdown_data_io         data_io
slowdown_network         network
slowdown_checkpoint      data_io          (checkpoint writes are storage I/O)
slowdown_compute         hardware         node_id -> hardware; a version -> software
======================== ================ =============================================

"a version" = ``driver_version`` or ``framework_version``. A cause that names a
node is a machine's problem (throttling, a faulty GPU, a node that kills its
jobs, a hung NCCL peer); one that names a version but no node is a cohort's
regression (the simulator's driver and framework regressions are software).
"""

import json

import numpy as np
import pandas as pd

from gpu_health.constants import LOSS_FAMILIES, PARTITION
from gpu_health.codes import factorize, unique_ints
from gpu_health.contracts.derived import GoodputDecomposition  # noqa: F401  (the table's contract, re-exported)
from gpu_health.diagnosis.drilldown import LeafSet, drill_down, drill_down_codes
from gpu_health.metrics.goodput import LEAF_DIMS, STATE_FAMILY, STATES
from gpu_health.timestamps import as_utc

DIMENSIONS = ("region", "node_id", "sku", "driver_version", "framework_version", "queue", "team", "model_type")
LOSS_STATES = [s for s in STATES if s != "productive"]
FAMILIES = list(LOSS_FAMILIES)
BASE_FAMILY = {s: STATE_FAMILY[s] for s in LOSS_STATES} | {"slowdown_checkpoint": "data_io"}
REFINED_STATES = frozenset({"allocated_unproductive", "failure_loss", "slowdown_compute"})
VERSION_DIMS = ("driver_version", "framework_version")
# where a state can occur: on unallocated GPUs (leaves without a job), allocated ones, or either (a fatal Xid
# makes an allocated GPU hw_unavailable)
STATE_KIND = {"no_data": "unallocated", "maintenance": "unallocated", "hw_unavailable": "any",
              "idle_blocked": "unallocated", "idle_no_demand": "unallocated", "productive": "allocated"}
STATE_KIND |= {s: "allocated" for s in STATES if s not in STATE_KIND}
MIN_STATE_GROWTH = 0.001  # share of paid GPU-minutes (0.1 percentage point)
EXACT_TOL = 1e-9
DAY_SLOTS = 288
LOOKBACK_DAYS = 7
TRAILING = pd.Timedelta(hours=2)
OUT_COLUMNS = ["partition_start", "window_end", "rank", "state", "cause_family", "share_of_drop", "elements",
               "explanatory_power", "surprise", "actual_gpu_minutes", "expected_gpu_minutes", "evidence"]
_EPOCH = pd.Timestamp("1970-01-01", tz="UTC")


# --- public ------------------------------------------------------------------------------


def cause_family(state: str, elements: dict) -> str:
    """The family of a cause: the state's default, refined by the dimensions it names (module table)."""
    if state in REFINED_STATES:
        if "node_id" in elements:
            return "hardware"
        if any(d in elements for d in VERSION_DIMS):
            return "software"
    return BASE_FAMILY[state]


def state_deltas(actual_leaves: pd.DataFrame, expected_leaves: pd.DataFrame) -> pd.DataFrame:
    """Per state (index, in :data:`STATES` order): GPU-minutes and shares of paid, actual vs expected.

    Columns: actual_gpu_minutes, expected_gpu_minutes (scaled to the actual
    paid GPU-minutes), actual_share, expected_share, delta_share and
    goodput_change (+delta for productive, -delta for a loss state: the
    state's contribution to the change of goodput; they sum to it exactly).
    Raises ``ValueError`` when either side has no paid GPU-minutes.
    """
    return _state_deltas(_by_state(actual_leaves), _by_state(expected_leaves))


_PRODUCTIVE = STATES.index("productive")
_LOSS_INDEX = [STATES.index(s) for s in LOSS_STATES]


def _state_deltas(a: pd.Series, e: pd.Series) -> pd.DataFrame:
    """:func:`state_deltas` from the GPU-minutes per state of each side (:func:`_by_state`)."""
    paid_a, paid_e = a.sum(), e.sum()
    if paid_a <= 0 or paid_e <= 0:
        raise ValueError(f"nothing to decompose: paid GPU-minutes actual {paid_a:g}, expected {paid_e:g}")
    e = e * (paid_a / paid_e)
    out = pd.DataFrame({"actual_gpu_minutes": a, "expected_gpu_minutes": e})
    out["actual_share"] = a / paid_a
    out["expected_share"] = e / paid_a
    out["delta_share"] = out["actual_share"] - out["expected_share"]
    out["goodput_change"] = np.where(out.index == "productive", out["delta_share"], -out["delta_share"])
    change = out.loc["productive", "delta_share"]
    explained = out.loc[LOSS_STATES, "goodput_change"].sum()
    if abs(change - explained) > EXACT_TOL:
        raise AssertionError(f"state deltas do not add up to the goodput change: {explained!r} != {change!r}")
    return out


def decompose(actual_leaves: pd.DataFrame, expected_leaves: pd.DataFrame, *, dimensions=DIMENSIONS,
              max_causes: int = 3, min_state_growth: float = MIN_STATE_GROWTH, start=None, end=None) -> pd.DataFrame:
    """Ranked causes of the window's goodput change (contract :class:`GoodputDecomposition`).

    ``actual_leaves``: goodput_leaves rows of the window (any number of
    partitions; they are summed). ``expected_leaves``: the same columns for the
    baseline (e.g. :func:`expected_leaves_from_history`). ``max_causes``: causes
    per state that grew. ``start`` / ``end``: the window (default: the first
    partition of ``actual_leaves`` and 5 minutes after the last). An empty
    frame when there is nothing to decompose (no paid GPU-minutes on a side).
    """
    start, end = _window(actual_leaves, start, end)
    dims = list(dimensions)
    try:
        by_a, by_e = _by_state(actual_leaves), _by_state(expected_leaves)
    except ValueError:
        return _empty()
    def drill_of(scale: float):
        table = _LeafTable(actual_leaves, expected_leaves, dims, scale)
        return lambda state: drill_down(table.frame(state), dims, "actual", "expected", max_causes=max_causes,
                                        actual_base="paid_actual", expected_base="paid_expected")

    return _ranked_causes(by_a, by_e, drill_of, dims, max_causes, min_state_growth, start, end)


def _ranked_causes(by_a: pd.Series, by_e: pd.Series, drill_of, dims: list[str], max_causes: int,
                   min_state_growth: float, start: pd.Timestamp, end: pd.Timestamp) -> pd.DataFrame:
    """The body of :func:`decompose` for one window, given its GPU-minutes per state (actual, expected) and
    ``drill_of(scale)`` -> a function state -> the drill-down of the state's leaves (:meth:`_LeafTable.frame`)
    with the expected side scaled by ``scale``."""
    causes = _window_causes(by_a, by_e, drill_of, dims, max_causes, min_state_growth, start, end)
    return _assemble([causes]) if causes is not None else _empty()


def _window_causes(by_a, by_e, drill_of, dims, max_causes, min_state_growth, start, end):
    """The cause rows of one window before ranking: ``(rows, drop, has_drop, start, end)``, or None when there is
    nothing to decompose or no state grew."""
    # state_deltas in arrays (STATES order; the same arithmetic as the frame it returns)
    a = by_a.reindex(STATES).to_numpy(dtype=float)
    e = by_e.reindex(STATES).to_numpy(dtype=float)
    paid_a, paid_e = a.sum(), e.sum()
    if paid_a <= 0 or paid_e <= 0:
        return None
    e = e * (paid_a / paid_e)
    a_share, e_share = a / paid_a, e / paid_a
    delta = a_share - e_share
    gp = _PRODUCTIVE
    if abs(delta[gp] - np.delete(-delta, gp).sum()) > EXACT_TOL:
        raise AssertionError("state deltas do not add up to the goodput change")
    paid = float(paid_a)
    scale = paid / float(by_e.sum())
    drop = float(e[gp] - a[gp])
    has_drop = abs(drop) > EXACT_TOL * paid
    goodput_a, goodput_e = a_share[gp], e_share[gp]
    header = (f"goodput {goodput_a:.2%} vs {goodput_e:.2%} expected ({(goodput_a - goodput_e) * 100:+.2f} pp, "
              f"{-drop:+,.0f} productive GPU-min of {paid:,.0f} paid)")
    floor = min_state_growth * paid

    rows = []
    drill = None
    for k in _LOSS_INDEX:
        if not (a[k] - e[k] > floor):
            continue
        state = STATES[k]
        d = {"actual_gpu_minutes": a[k], "expected_gpu_minutes": e[k], "delta_share": delta[k]}
        growth = float(d["actual_gpu_minutes"] - d["expected_gpu_minutes"])
        state_text = (f"{state} {d['delta_share'] * 100:+.2f} pp of paid GPU-minutes ({growth:+,.0f} GPU-min: "
                      f"{d['actual_gpu_minutes']:,.0f} vs {d['expected_gpu_minutes']:,.0f} expected)")
        drill = drill or drill_of(scale)
        causes = drill(state)
        for c in causes:
            rows.append({
                "state": state, "cause_family": cause_family(state, c.elements), "elements": json.dumps(c.elements),
                "explanatory_power": c.explanatory_power, "surprise": c.surprise,
                "actual_gpu_minutes": c.actual, "expected_gpu_minutes": c.expected, "change": c.change,
                "evidence": f"{header}; {state_text}; {c.describe()}",
            })
        rest = growth - sum(c.change for c in causes)
        if rest >= floor:
            a_rest = float(d["actual_gpu_minutes"]) - sum(c.actual for c in causes)
            e_rest = float(d["expected_gpu_minutes"]) - sum(c.expected for c in causes)
            what = "the rest" if causes else "all of it"
            rows.append({
                "state": state, "cause_family": BASE_FAMILY[state], "elements": json.dumps({}),
                "explanatory_power": rest / growth, "surprise": 0.0,
                "actual_gpu_minutes": max(a_rest, 0.0), "expected_gpu_minutes": max(e_rest, 0.0), "change": rest,
                "evidence": (f"{header}; {state_text}; {what} ({rest:+,.0f} GPU-min) is spread over "
                             f"{', '.join(dims)}: no narrower set of values carries it"),
            })
    if not rows:
        return None
    return rows, drop, has_drop, start, end


def _assemble(windows: list) -> pd.DataFrame:
    """Rank the cause rows of each window (:func:`_window_causes`): named causes before the spread rests, by the
    GPU-minutes they moved (then by state order); ``share_of_drop`` = change / the window's productive drop."""
    out = pd.DataFrame([r for rows, *_ in windows for r in rows])
    n = np.array([len(rows) for rows, *_ in windows])
    w = np.repeat(np.arange(len(windows)), n)
    drop = np.repeat(np.array([d for _, d, *_ in windows], dtype=float), n)
    has_drop = np.repeat(np.array([h for _, _, h, *_ in windows], dtype=bool), n)
    with np.errstate(divide="ignore", invalid="ignore"):
        out["share_of_drop"] = np.where(has_drop, out["change"].to_numpy(dtype=float) / drop, np.nan)
    order = {s: i for i, s in enumerate(STATES)}
    out = out.assign(_w=w, _spread=out["elements"] == "{}", _state=out["state"].map(order))
    out = out.sort_values(["_w", "_spread", "change", "_state"], ascending=[True, True, False, True], kind="stable",
                          ignore_index=True)
    out["rank"] = out.groupby("_w").cumcount().to_numpy(dtype=np.int64) + 1
    ws = out["_w"].to_numpy()
    out["partition_start"] = pd.DatetimeIndex([x[3] for x in windows])[ws]
    out["window_end"] = pd.DatetimeIndex([x[4] for x in windows])[ws]
    return out[OUT_COLUMNS]


def decompose_range(actual_leaves: pd.DataFrame, expected_leaves: pd.DataFrame, *, dimensions=DIMENSIONS,
                    max_causes: int = 3, min_state_growth: float = MIN_STATE_GROWTH) -> pd.DataFrame:
    """:func:`decompose` of every 5-minute partition that has both actual and expected leaves, concatenated in
    partition order (an empty frame when none has causes): each partition against its own expected leaves.

    The same rows as calling :func:`decompose` partition by partition, with the work shared: the GPU-minutes
    per partition x state come from one group-by, and every partition's leaves (its combinations of
    ``dimensions``, numbered as :class:`_LeafTable` numbers them) and their GPU-minutes per state from one pass
    over all rows; only the drill-down of each state that grew runs per partition.
    """
    dims = list(dimensions)
    if actual_leaves is None or expected_leaves is None or actual_leaves.empty or expected_leaves.empty:
        return pd.DataFrame()
    pa_ = pd.DatetimeIndex(as_utc(actual_leaves["partition_start"]))
    pe_ = pd.DatetimeIndex(as_utc(expected_leaves["partition_start"]))
    parts = pa_.unique().intersection(pe_.unique()).sort_values()
    if not len(parts):
        return pd.DataFrame()
    ia, ie = parts.get_indexer(pa_), parts.get_indexer(pe_)
    # each partition's rows in the order the per-partition call sees them: its actual rows, then its expected ones
    p_all = np.concatenate([ia[ia >= 0], ie[ie >= 0]])
    side_all = np.concatenate([np.zeros(int((ia >= 0).sum()), np.int64), np.ones(int((ie >= 0).sum()), np.int64)])
    order = np.lexsort((side_all, p_all))
    in_a, in_e = ia >= 0, ie >= 0

    def column(c):  # one column of those rows (a column at a time: no frame of every column is copied twice)
        # (np.asarray: a text column's objects as they are; to_numpy would look for missing values first)
        return np.asarray(pd.concat([actual_leaves[c][in_a], expected_leaves[c][in_e]], ignore_index=True))[order]

    p_row = p_all[order]
    side = side_all[order]
    state = column("state").astype(object)
    minutes_col = column("gpu_minutes")
    P = len(parts)

    # GPU-minutes per partition x state and side (groupby sums the rows in the same order as per partition)
    bad_parts = set(p_row[~pd.Index(state).isin(STATES)].tolist())  # _by_state refuses unknown states
    sums = (pd.DataFrame({"_p": p_row, "_side": side, "state": state, "gpu_minutes": minutes_col})
            .groupby(["_p", "_side", "state"], sort=False)["gpu_minutes"].sum())
    by_side = {}
    for sd in (0, 1):
        m = sums.xs(sd, level="_side").unstack("state").reindex(index=range(P), columns=STATES)
        by_side[sd] = m.fillna(0.0).to_numpy(dtype=float)

    values = {c: _factorize_known(column(c)) for c in dims}
    leaf, first_row, starts, big = _leaf_codes_by_partition(values, dims, p_row, P)
    # each leaf's value of each dimension, as a code into the dimension's distinct values over the range
    universe = {c: (values[c][0][first_row], values[c][1]) for c in dims}
    minutes_raw = np.asarray(minutes_col, dtype=float)
    state_code = pd.Index(STATES).get_indexer(state)
    row_starts = np.searchsorted(p_row, np.arange(P + 1), side="left")

    out = []
    for i, p in enumerate(parts):
        if i in bad_parts:
            continue
        start, end = p, p + PARTITION
        if i in big:  # a partition too varied for the packed leaf numbering: the per-partition path
            a = actual_leaves[ia == i]
            e = expected_leaves[ie == i]
            res = decompose(a, e, dimensions=dimensions, max_causes=max_causes, min_state_growth=min_state_growth,
                            start=start, end=end)
        else:
            by_a = pd.Series(by_side[0][i], index=pd.Index(STATES, name="state"), name="gpu_minutes")
            by_e = pd.Series(by_side[1][i], index=pd.Index(STATES, name="state"), name="gpu_minutes")
            causes = _window_causes(by_a, by_e, _range_drill(i, starts, leaf, row_starts, side, state_code,
                                                             minutes_raw, universe, dims, max_causes),
                                    dims, max_causes, min_state_growth, start, end)
            res = causes
        if res is not None and len(res):
            out.append(res)
    # windows in partition order; a partition decomposed alone (a frame) stays as it is
    frames, run = [], []
    for res in out:
        if isinstance(res, pd.DataFrame):
            if run:
                frames.append(_assemble(run))
                run = []
            frames.append(res)
        else:
            run.append(res)
    if run:
        frames.append(_assemble(run))
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def _range_drill(i, starts, leaf, row_starts, side, state_code, minutes_raw, universe, dims, max_causes):
    """``scale`` -> the state -> drill-down function of partition ``i`` over the shared leaf numbering (rows
    sorted by partition: partition ``i``'s rows are ``row_starts[i]..row_starts[i+1]-1``): the causes
    ``drill_down`` finds in :meth:`_LeafTable.frame` of the partition, from integer codes (no frame of strings
    is built and hashed again per state)."""
    lo, hi = int(starts[i]), int(starts[i + 1])
    r0, r1 = int(row_starts[i]), int(row_starts[i + 1])

    def make(scale: float):
        lf, st, sd = leaf[r0:r1] - lo, state_code[r0:r1], side[r0:r1]
        mins = minutes_raw[r0:r1] * np.where(sd == 1, scale, 1.0)
        n = hi - lo
        paid = {sv: np.bincount(lf[sd == sv], weights=mins[sd == sv], minlength=n) for sv in (0, 1)}
        by_kind = {}  # the states of one kind drill the same leaves: codes and lattice derived once per window

        def leaves_of(kind: str):
            if kind not in by_kind:
                same_kind = [STATES.index(s) for s in STATES if kind == "any" or STATE_KIND[s] in (kind, "any")]
                seen = np.bincount(lf[np.isin(st, same_kind)], minlength=n) > 0
                codes, labels = [], []
                for c in dims:
                    code, values = _first_appearance(universe[c][0][lo:hi][seen])
                    codes.append(code)
                    labels.append(universe[c][1][values])
                by_kind[kind] = seen, LeafSet(dims, np.column_stack(codes), labels)
            return by_kind[kind]

        def drill(name: str):
            seen, leaf_set = leaves_of(STATE_KIND[name])
            sel_state = st == STATES.index(name)
            measure = {}
            for col, sv in (("actual", 0), ("expected", 1)):
                sel = sel_state & (sd == sv)
                measure[col] = np.bincount(lf[sel], weights=mins[sel], minlength=n)[seen]
            return drill_down_codes(leaf_set, measure["actual"], measure["expected"],
                                    actual_base=paid[0][seen], expected_base=paid[1][seen], max_causes=max_causes)

        return drill

    return make


def _first_appearance(codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``codes`` renumbered 0.. in order of first appearance (as ``pd.factorize`` numbers values), and the
    original code of each new one."""
    uniq, first, inverse = unique_ints(codes, return_index=True, return_inverse=True)
    by_first = np.argsort(first, kind="stable")
    rank = np.empty(len(uniq), dtype=np.int64)
    rank[by_first] = np.arange(len(uniq))
    return rank[inverse.ravel()], uniq[by_first]


def _factorize_known(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``pd.factorize`` of ``values`` with every null read as ``"unknown"`` (as :class:`_LeafTable` and
    ``drill_down`` read it): codes in order of first appearance and the distinct values (an object array).

    Nulls are looked for among the distinct values only, and the values refilled and factorized again only when
    there is one: a scan of every row for nulls costs as much as the factorization itself."""
    codes, uniques = factorize(values, use_na_sentinel=False)
    uniques = np.asarray(uniques, dtype=object)
    if len(uniques) and pd.isna(uniques).any():
        values = np.asarray(values, dtype=object)
        codes, uniques = pd.factorize(np.where(pd.isna(values), "unknown", values), use_na_sentinel=False)
        uniques = np.asarray(uniques, dtype=object)
    return codes, uniques


def _leaf_codes_by_partition(values: dict, cols: list[str], p_row: np.ndarray, P: int):
    """:func:`_leaf_codes` of each partition's rows at once (rows sorted by partition), from ``values``: per
    column ``(code of each row, distinct values)`` as :func:`_factorize_known` gives them over all rows.

    Returns ``(leaf, first_row, starts, big)``: a global leaf number per row (partition ``i``'s leaves
    are ``starts[i]..starts[i+1]-1``, numbered within it exactly as :func:`_leaf_codes` numbers them on the
    partition alone), the first row of each leaf, and the partitions whose packed key would outgrow the
    exact numbering (left to the per-partition path).
    """
    n = len(p_row)
    key = np.zeros(n, dtype=np.int64)
    card = np.ones(P, dtype=np.float64)
    pos = np.arange(n)
    for c in cols:
        g = values[c][0]
        # per partition: values numbered in order of first appearance (pd.factorize on the partition's rows)
        pk = p_row.astype(np.int64) * (int(g.max()) + 1) + g
        uk, first, inv = unique_ints(pk, return_index=True, return_inverse=True)
        inv = inv.ravel()
        up = uk // (int(g.max()) + 1)
        order = np.lexsort((first, up))
        rank = np.empty(len(uk), dtype=np.int64)
        block_start = np.searchsorted(up[order], up[order], side="left")
        rank[order] = np.arange(len(uk)) - block_start
        n_vals = np.bincount(up, minlength=P)
        key = key * n_vals[p_row] + rank[inv]
        card = card * np.maximum(n_vals, 1)
    big = set(np.flatnonzero(card > 2**40).tolist())
    order = np.lexsort((pos, key, p_row))
    ks, ps = key[order], p_row[order]
    new = np.ones(n, dtype=bool)
    new[1:] = (ks[1:] != ks[:-1]) | (ps[1:] != ps[:-1])
    leaf_sorted = np.cumsum(new) - 1
    leaf = np.empty(n, dtype=np.int64)
    leaf[order] = leaf_sorted
    first_row = order[new]
    starts = np.searchsorted(ps[new], np.arange(P + 1), side="left")
    return leaf, first_row, starts, big


def expected_leaves_from_history(history_leaves: pd.DataFrame, partitions, *,
                                 actual_leaves: pd.DataFrame | None = None, exclude=(),
                                 lookback_days: int = LOOKBACK_DAYS, trailing: pd.Timedelta = TRAILING) -> pd.DataFrame:
    """Expected goodput leaves of each partition of a window, from the leaves before it.

    - ``hour_of_day``: the mean of the same 5-minute slot of the day over the
      days of the last ``lookback_days`` before the window's first partition
      that have it (a missing leaf counts 0 on a day that has the slot);
    - ``trailing`` (cold start, no such day): the mean partition of the
      ``trailing`` period before the partition (the history's and, with
      ``actual_leaves``, the window's own partitions before it: what the
      partition's own run reads);
    - neither: the partition gets no rows.

    Partitions in ``exclude`` (incident minutes) are never used; history at or
    after the window's start is ignored (the window never judges itself). With
    ``actual_leaves``, each partition x region x sku is scaled so that its
    expected paid GPU-minutes equal the actual ones (where both exist).

    Returns the goodput_leaves columns plus ``method`` (hour_of_day | trailing).
    """
    cols = ["partition_start", *LEAF_DIMS, "state", "gpu_minutes", "method"]
    keys = [*LEAF_DIMS, "state"]
    parts_idx = pd.DatetimeIndex(pd.to_datetime(pd.Index(partitions), utc=True)).unique().sort_values()
    if not len(parts_idx):
        return pd.DataFrame(columns=cols)
    if history_leaves is None or history_leaves.empty:
        history_leaves = pd.DataFrame({c: pd.Series(dtype=object) for c in keys}).assign(
            partition_start=pd.Series(dtype="datetime64[ns, UTC]"), gpu_minutes=pd.Series(dtype=float))
    start = parts_idx[0]
    ps = as_utc(history_leaves["partition_start"])
    use = (ps < start) & (ps >= start - pd.Timedelta(days=lookback_days))
    if len(exclude):
        use &= ~ps.isin(pd.to_datetime(list(exclude), utc=True))
    h = history_leaves.loc[use.to_numpy(), keys]
    slot = _slot(ps[use.to_numpy()])
    minutes = history_leaves.loc[use.to_numpy(), "gpu_minutes"].to_numpy(dtype=float)
    leaf, first_row = _leaf_codes(h, keys, by_value=True)
    n_leaves = max(len(first_row), 1)
    tod = slot % DAY_SLOTS
    target_tod = _slot(parts_idx) % DAY_SLOTS

    # hour_of_day: per slot of the day, the sum over the days that have it / their number
    days = np.bincount(np.unique(slot) % DAY_SLOTS, minlength=DAY_SLOTS)
    cells, inverse = unique_ints(tod * n_leaves + leaf, return_inverse=True)
    cell_sum = np.bincount(inverse.ravel(), weights=minutes, minlength=len(cells))
    cell_tod, cell_leaf = np.divmod(cells, n_leaves)
    cell_mean = cell_sum / np.maximum(days[cell_tod], 1)
    # cells are sorted by slot of the day: each target partition takes its slot's run of cells
    run_start = np.searchsorted(cell_tod, np.arange(DAY_SLOTS))
    run_len = np.bincount(cell_tod, minlength=DAY_SLOTS)
    warm = days[target_tod] > 0
    t_of_row = np.repeat(np.flatnonzero(warm), run_len[target_tod[warm]])
    cell_of_row = _ranges(run_start[target_tod[warm]], run_len[target_tod[warm]])
    out = h.iloc[first_row[cell_leaf[cell_of_row]]].reset_index(drop=True)
    out.insert(0, "partition_start", parts_idx[t_of_row])
    out["gpu_minutes"] = cell_mean[cell_of_row]
    out["method"] = "hour_of_day"
    # trailing (cold start), for partitions with no such day: what their own runs read of the trailing period
    cold = np.flatnonzero(~warm)
    if len(cold):
        recent = history_leaves.loc[use.to_numpy() & (ps >= start - trailing).to_numpy(),
                                    [*keys, "partition_start", "gpu_minutes"]]
        trail = _trailing_leaves(recent, actual_leaves, parts_idx[cold], exclude, trailing, keys)
        out = pd.concat([x for x in (out, trail) if len(x)] or [out], ignore_index=True)
    if not len(out):
        return pd.DataFrame(columns=cols)

    if actual_leaves is not None and len(actual_leaves):
        act = actual_leaves.assign(partition_start=as_utc(actual_leaves["partition_start"]))
        paid_a = act.groupby(["partition_start", "region", "sku"])["gpu_minutes"].sum()
        paid_e = out.groupby(["partition_start", "region", "sku"])["gpu_minutes"].sum()
        factor = (paid_a / paid_e).dropna()
        factor = factor[np.isfinite(factor) & (factor > 0)].rename("factor").reset_index()
        out = out.merge(factor, on=["partition_start", "region", "sku"], how="left")
        out["gpu_minutes"] *= out.pop("factor").fillna(1.0)
    return out[cols].reset_index(drop=True)


# --- internals ---------------------------------------------------------------------------


def _trailing_leaves(recent: pd.DataFrame, actual_leaves: pd.DataFrame | None, partitions: pd.DatetimeIndex, exclude,
                     trailing: pd.Timedelta, keys: list[str]) -> pd.DataFrame:
    """The ``trailing`` expectation of each of ``partitions``: the mean partition of ``[p - trailing, p)`` (each
    leaf's GPU-minutes summed over the partitions present there / their number), from ``recent`` (the history's
    leaves of the trailing period before the window) and the window's own ``actual_leaves`` before ``p`` --
    what the partition's own run reads -- paged partitions (``exclude``) never among them."""
    parts = [recent]
    if actual_leaves is not None and len(actual_leaves):
        act = actual_leaves.assign(partition_start=as_utc(actual_leaves["partition_start"]))
        act = act[(act["partition_start"] < partitions.max()).to_numpy()]
        if len(exclude):
            act = act[~act["partition_start"].isin(pd.to_datetime(list(exclude), utc=True)).to_numpy()]
        parts.append(act[[*keys, "partition_start", "gpu_minutes"]])
    rows = pd.concat([p for p in parts if len(p)] or parts[:1], ignore_index=True)
    if rows.empty:
        return pd.DataFrame(columns=["partition_start", *keys, "gpu_minutes", "method"])
    slot = _slot(rows["partition_start"])
    order = np.argsort(slot, kind="stable")
    slot = slot[order]
    leaf, first_row = _leaf_codes(rows[keys], keys, by_value=True)
    leaf, minutes = leaf[order], rows["gpu_minutes"].to_numpy(dtype=float)[order]
    width = int(trailing // PARTITION)
    pieces = []
    for i, target in enumerate(_slot(partitions)):
        lo, hi = np.searchsorted(slot, target - width, "left"), np.searchsorted(slot, target, "left")
        if lo == hi:
            continue
        sums = np.bincount(leaf[lo:hi], weights=minutes[lo:hi], minlength=len(first_row))
        present = np.flatnonzero(np.bincount(leaf[lo:hi], minlength=len(first_row)) > 0)
        pieces.append((np.full(len(present), i), present, sums[present] / len(np.unique(slot[lo:hi]))))
    if not pieces:
        return pd.DataFrame(columns=["partition_start", *keys, "gpu_minutes", "method"])
    which = np.concatenate([p[1] for p in pieces])
    out = rows.iloc[first_row[which]][keys].reset_index(drop=True)
    out.insert(0, "partition_start", partitions[np.concatenate([p[0] for p in pieces])])
    out["gpu_minutes"] = np.concatenate([p[2] for p in pieces])
    out["method"] = "trailing"
    return out


def _empty() -> pd.DataFrame:
    frame = pd.DataFrame({c: pd.Series(dtype=object) for c in OUT_COLUMNS})
    for c in ("partition_start", "window_end"):
        frame[c] = pd.to_datetime(frame[c], utc=True)
    for c in ("share_of_drop", "explanatory_power", "surprise", "actual_gpu_minutes", "expected_gpu_minutes"):
        frame[c] = frame[c].astype(float)
    frame["rank"] = frame["rank"].astype("int64")
    return frame


def _window(actual_leaves: pd.DataFrame, start, end) -> tuple[pd.Timestamp, pd.Timestamp]:
    ps = as_utc(actual_leaves["partition_start"]) if len(actual_leaves) else None
    start = pd.Timestamp(start) if start is not None else (ps.min() if ps is not None else pd.NaT)
    end = pd.Timestamp(end) if end is not None else (ps.max() + PARTITION if ps is not None else pd.NaT)
    for name, ts in (("start", start), ("end", end)):
        if pd.isna(ts):
            raise ValueError(f"decompose: no window {name} (empty actual leaves and none given)")
    return (start.tz_localize("UTC") if start.tz is None else start.tz_convert("UTC"),
            end.tz_localize("UTC") if end.tz is None else end.tz_convert("UTC"))


def _by_state(leaves: pd.DataFrame) -> pd.Series:
    if leaves is None or leaves.empty:
        return pd.Series(0.0, index=pd.Index(STATES, name="state"))
    unknown = set(leaves["state"].astype(object)) - set(STATES)
    if unknown:
        raise ValueError(f"unknown loss-tree states: {sorted(unknown)}")
    return leaves.groupby(leaves["state"].astype(object))["gpu_minutes"].sum().reindex(STATES, fill_value=0.0)


class _LeafTable:
    """The leaves a state's drill-down runs over, with its GPU-minutes actual and expected.

    Leaves are the combinations of ``dims`` seen in the window or its baseline
    in any state *of the same kind* (:data:`STATE_KIND`: unallocated GPUs,
    allocated ones, or either), zeros included: the places a state did not
    occur are the contrast that pins a state newly appearing on one node
    (nothing expected anywhere) to that node, while job leaves never dilute an
    idle state (and idle leaves, with no team or queue, never a job's state).
    """

    def __init__(self, actual: pd.DataFrame, expected: pd.DataFrame, dims: list[str], scale: float):
        both = pd.concat([actual[[*dims, "state", "gpu_minutes"]].assign(_side=0),
                          expected[[*dims, "state", "gpu_minutes"]].assign(_side=1)], ignore_index=True)
        keyed = both[dims]
        if keyed.isna().any().any():
            keyed = keyed.astype(object).fillna("unknown")
        self.leaf, first_row = _leaf_codes(keyed, dims)
        self.universe = keyed.iloc[first_row].astype(object).reset_index(drop=True)
        self.state = both["state"].astype(object).to_numpy()
        self.side = both["_side"].to_numpy()
        self.minutes = both["gpu_minutes"].to_numpy(dtype=float) * np.where(self.side == 1, scale, 1.0)

    def frame(self, state: str) -> pd.DataFrame:
        """This state's leaves: the dimension columns, ``actual`` / ``expected`` GPU-minutes in the state and
        ``paid_actual`` / ``paid_expected`` GPU-minutes of the leaf in every state (the state's share of a leaf's
        paid GPU-minutes is the ratio the drill-down follows)."""
        n = len(self.universe)
        kind = STATE_KIND[state]
        same_kind = [s for s in STATES if kind == "any" or STATE_KIND[s] in (kind, "any")]
        seen = np.bincount(self.leaf[np.isin(self.state, same_kind)], minlength=n) > 0
        rows = self.state == state
        out = self.universe.copy()
        for name, side in (("actual", 0), ("expected", 1)):
            sel = rows & (self.side == side)
            out[name] = np.bincount(self.leaf[sel], weights=self.minutes[sel], minlength=n)
            on_side = self.side == side
            out[f"paid_{name}"] = np.bincount(self.leaf[on_side], weights=self.minutes[on_side], minlength=n)
        return out[seen].reset_index(drop=True)


def _leaf_codes(frame: pd.DataFrame, cols: list[str], *, by_value: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Code of each row's combination of ``cols`` (0..n-1) and the first row of each code.

    ``by_value``: codes in the order of the combinations' values (each column's sorted, nulls last), so that
    two frames holding the same combinations among others number them in the same order. A partition's
    expectation sums its leaves in code order: numbered by first appearance in a range's history, the last bits of
    its sums -- and a drill-down's choice between two near-equal cells -- depended on how far back the range's
    history reached, i.e. on the range the partition was computed in."""
    key = np.zeros(len(frame), dtype=np.int64)
    card = 1
    for c in cols:
        code, uniq = factorize(frame[c], use_na_sentinel=False, sort=by_value)
        key = key * len(uniq) + code
        card *= len(uniq)
        if card > 2**40:  # keep the packed key inside int64
            key = pd.factorize(key, sort=by_value)[0].astype(np.int64)
            card = int(key.max()) + 1
    _, first_row, codes = unique_ints(key, return_index=True, return_inverse=True)
    return codes.ravel(), first_row


def _ranges(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Concatenation of ``arange(s, s + n)`` for each start and length."""
    total = int(lengths.sum())
    if not total:
        return np.zeros(0, dtype=np.int64)
    ends = np.cumsum(lengths)
    offsets = np.arange(total) - np.repeat(ends - lengths, lengths)
    return np.repeat(starts, lengths) + offsets


def _slot(ts) -> np.ndarray:
    return np.asarray((pd.DatetimeIndex(as_utc(ts)) - _EPOCH) // PARTITION, dtype=np.int64)
