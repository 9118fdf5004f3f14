"""Expected values of every KPI series and loss-state share: what a partition is judged against.

Pure pandas / numpy (no Dagster). :func:`expected_values` gives, for each
5-minute partition of a range and each series x slice with a row (a sample or
not) in one of the partition's candidate slots below, robust statistics of
comparable past partitions: the median (``expected``),
the median absolute deviation (``mad``, unscaled: x 1.4826 for a normal
sigma) and the 10 % / 90 % quantiles (numpy's ``linear`` interpolation, as
pandas), with the number of samples and the rule that chose them.

Series:

* every KPI series of ``kpi_values`` (``kpi``: ``<kpi>`` or ``<kpi>.<component>``)
  on its own slice (region, sku, workload_class, team; ``'*'`` where the KPI is
  not sliced); a sample is a row with ``status == 'ok'`` and a finite value;
* ``share_<state>`` for every state of the loss tree (``share_productive`` is
  the slice's goodput): the state's GPU-minutes / the slice's paid GPU-minutes
  in the partition, from ``goodput_states``, per region x sku x workload_class
  and the totals region x sku x ``'*'``, region x ``'*'`` x ``'*'`` and
  ``'*'`` x ``'*'`` x ``'*'`` (team is always ``'*'``); a partition where the
  slice has paid GPU-minutes gives a sample of every state (0 when absent).
  :func:`state_share_values` computes these values (the actual side of a
  comparison).

Comparable partitions (``p`` = the partition; times are UTC; "±30 min" =
partition starts within 30 minutes either side, inclusive: 13 partitions;
every sample is strictly before ``p``), first rule that applies wins, per
partition x series x slice:

1. ``hour_of_week`` -- at least two weeks of history: the series has a sample
   within ±30 min of ``p - 7 days`` *and* within ±30 min of ``p - 14 days``.
   The samples are those two windows (up to 26): weekly retrain waves compare
   with themselves.
2. ``hour_of_day`` -- the same time of day on the last 7 days (``p - k days``,
   k = 1..7, ±30 min), keeping only days of the same type as ``p``'s day
   (weekday Mon-Fri vs weekend Sat-Sun, by the day ``p - k days`` falls on),
   when at least :data:`MIN_DAYS` = 3 such days have a sample. With 7 days of
   lookback a weekend day never has 3 weekend days before it, so weekends fall
   through to rule 3 until two weeks of history exist.
3. ``trailing`` -- cold start: the partitions of the trailing 2 hours
   ``[p - 2 h, p)``, when at least :data:`MIN_TRAILING_SAMPLES` = 3 of them
   are samples.
4. ``none`` -- not enough history: ``expected``, ``mad``, ``q10``, ``q90`` are
   NaN and ``n_samples`` is 0.

Incident and maintenance periods never teach the baseline: partitions in
``exclude`` (the caller passes those with a firing page) are no sample of any
series; a partition overlapping a maintenance window is no sample of the
series of the window's region (every series when the window's region is
``'*'``; every window for cluster-wide series, region ``'*'``). Node-scoped
windows exclude their region: a few drained nodes move the region's numbers.

The history passed should reach 14 days and 30 minutes before the first
partition and up to the last one (rows at or after a partition are never its
samples, so passing the range itself too is right: the trailing rule reads it).

Implementation: the samples become one dense matrix series x 5-minute slot
(NaN = no sample); for each partition the 141 candidate slots (26 weekly, 91
daily, 24 trailing) are gathered at once, columns the chosen rule does not use
are masked, and the statistics come from one sort along the candidate axis,
in chunks of series -- no Python loop over partitions or series.
"""

from typing import NamedTuple

import numpy as np
import pandas as pd

from gpu_health.constants import PARTITION
from gpu_health.codes import factorize
from gpu_health.contracts.derived import METHODS, SLICE, KpiBaselines  # noqa: F401  (KpiBaselines: its contract)
from gpu_health.metrics.goodput import STATES
from gpu_health.timestamps import as_utc

STAR = "*"
OUT_COLUMNS = ["partition_start", "series", *SLICE, "expected", "mad", "q10", "q90", "n_samples", "method"]
SHARE_SERIES = [f"share_{s}" for s in STATES]
# share slices: the finest (region x sku x workload_class) and its '*' totals
SHARE_LEVELS = [("region", "sku", "workload_class"), ("region", "sku"), ("region",), ()]

MIN_DAYS = 3
MIN_TRAILING_SAMPLES = 3
HALF_WINDOW = 6  # partitions either side: +-30 min
DAY = 288  # slots
WEEK = 7 * DAY
TRAILING = 24  # slots: 2 hours
_EPOCH = pd.Timestamp("1970-01-01", tz="UTC")  # a Thursday
_CHUNK_CELLS = 4_000_000  # gathered values per chunk of series

# candidate offsets (in slots, relative to the partition) and the rule each belongs to
_J = np.arange(-HALF_WINDOW, HALF_WINDOW + 1)
_WEEK_OFF = np.concatenate([-WEEK * w + _J for w in (1, 2)])  # 26: week 1 then week 2
_DAY_OFF = np.concatenate([-DAY * k + _J for k in range(1, 8)])  # 91: day k = 1..7
_TRAIL_OFF = np.arange(-TRAILING, 0)
_OFFSETS = np.concatenate([_WEEK_OFF, _DAY_OFF, _TRAIL_OFF])
_NW, _ND, _NT = len(_WEEK_OFF), len(_DAY_OFF), len(_TRAIL_OFF)
_W = 2 * len(_J)
_COLMASK = np.zeros((len(METHODS), len(_OFFSETS)), dtype=bool)  # method -> usable candidate columns
_COLMASK[0, :_NW] = True
_COLMASK[1, _NW:_NW + _ND] = True
_COLMASK[2, _NW + _ND:] = True


# --- public helpers ---------------------------------------------------------------------


def state_share_values(goodput_states: pd.DataFrame) -> pd.DataFrame:
    """``share_<state>`` per partition x share slice (partition_start, series, region, sku, workload_class, team, value).

    A slice with paid GPU-minutes in a partition gets a row for every state
    (0 where the state has no minutes), so its shares sum to 1.
    """
    smp = _share_samples(goodput_states)
    out = smp.keys.iloc[smp.code].reset_index(drop=True)
    out.insert(0, "partition_start", pd.DatetimeIndex(_EPOCH + smp.slot * PARTITION))
    out["value"] = smp.value
    return out[["partition_start", "series", *SLICE, "value"]]


def expected_values(history_kpis: pd.DataFrame, history_states: pd.DataFrame, partitions: pd.DatetimeIndex, *,
                    exclude=(), maintenance: pd.DataFrame | None = None) -> pd.DataFrame:
    """Baselines (contract :class:`KpiBaselines`) of ``partitions`` for every series x slice in the history.

    ``history_kpis``: kpi_values rows; ``history_states``: goodput_states rows;
    both should cover ``[first partition - 14 days - 30 min, last partition)``.
    ``exclude``: partition starts that are never samples (incident minutes).
    ``maintenance``: the maintenance calendar (window_id, start, end, region,
    node_ids); overlapping partitions are never samples of their region.
    See the module docstring for the rules.
    """
    partitions = pd.DatetimeIndex(partitions)
    if partitions.tz is None:
        partitions = partitions.tz_localize("UTC")
    partitions = partitions.tz_convert("UTC").unique().sort_values()
    if not len(partitions):
        return _empty()
    first, last = partitions.min() - (2 * WEEK + HALF_WINDOW) * PARTITION, partitions.max()
    smp = _concat(_kpi_samples(_within(history_kpis, first, last)),
                  _share_samples(_within(history_states, first, last)))
    keys = smp.keys
    if keys.empty:
        return _empty()
    p_slot = _slots(partitions)
    lo = int(p_slot.min()) - 2 * WEEK - HALF_WINDOW
    n_slots = int(p_slot.max()) - lo
    ok = (smp.slot >= lo) & (smp.slot < lo + n_slots) & np.isfinite(smp.value)
    V = np.full((len(keys), n_slots + 1), np.nan)  # last column: the "no sample" sentinel
    V[smp.code[ok], smp.slot[ok] - lo] = smp.value[ok]
    # where each series x slice has a row at all (a sample or not): a partition reports the series x slices seen
    # in its own candidate slots, whatever else the history read for a longer range holds
    seen = np.zeros((len(keys), n_slots + 1), dtype=bool)
    read = (smp.slot >= lo) & (smp.slot < lo + n_slots)
    seen[smp.code[read], smp.slot[read] - lo] = True

    # excluded partitions and maintenance are no samples
    if len(exclude):
        ex = _slots(list(exclude)) - lo
        V[:, ex[(ex >= 0) & (ex < n_slots)]] = np.nan
    if maintenance is not None and len(maintenance):
        key_region = keys["region"].to_numpy(dtype=object)
        for w in maintenance.itertuples(index=False):
            w_start, w_end = pd.to_datetime([w.start, w.end], utc=True)
            first_slot = (w_start - _EPOCH - PARTITION) // PARTITION + 1  # partitions overlapping [start, end)
            last_slot = -((_EPOCH - w_end) // PARTITION) - 1
            a, b = max(int(first_slot) - lo, 0), min(int(last_slot) - lo + 1, n_slots)
            if a >= b:
                continue
            rows = np.ones(len(keys), bool)
            if pd.notna(w.region) and w.region != STAR:
                rows = (key_region == w.region) | (key_region == STAR)
            V[np.ix_(rows, np.arange(a, b))] = np.nan

    # candidate slots per partition; daily candidates of a day of the other type point at the sentinel
    idx = p_slot[:, None] - lo + _OFFSETS[None, :]
    ref_day = (p_slot[:, None] // DAY) - np.arange(1, 8)[None, :]
    same_type = _weekend(ref_day) == _weekend(p_slot // DAY)[:, None]  # (T, 7)
    day_usable = np.repeat(same_type, len(_J), axis=1)
    idx[:, _NW:_NW + _ND] = np.where(day_usable, idx[:, _NW:_NW + _ND], n_slots)
    idx = np.where((idx >= 0) & (idx < n_slots), idx, n_slots)

    T, S = len(p_slot), len(keys)
    out = {k: np.empty((S, T)) for k in ("expected", "mad", "q10", "q90")}
    n_samples = np.empty((S, T), dtype=np.int64)
    method = np.empty((S, T), dtype=np.int8)
    emitted = np.empty((S, T), dtype=bool)
    chunk = max(1, _CHUNK_CELLS // (T * len(_OFFSETS)))
    for c0 in range(0, S, chunk):
        G = V[c0:c0 + chunk][:, idx]  # (c, T, 141)
        present = ~np.isnan(G)
        week_ok = present[..., :_W // 2].any(-1) & present[..., _W // 2:_NW].any(-1)
        days = present[..., _NW:_NW + _ND].reshape(*present.shape[:2], 7, len(_J)).any(-1).sum(-1)
        trail = present[..., _NW + _ND:].sum(-1)
        m = np.where(week_ok, 0, np.where(days >= MIN_DAYS, 1, np.where(trail >= MIN_TRAILING_SAMPLES, 2, 3)))
        use = present & _COLMASK[m]
        G = np.where(use, G, np.nan)
        n = use.sum(-1)
        srt = np.sort(G, axis=-1)  # NaN last
        med = _quantile_sorted(srt, n, 0.5)
        out["expected"][c0:c0 + chunk] = med
        out["q10"][c0:c0 + chunk] = _quantile_sorted(srt, n, 0.1)
        out["q90"][c0:c0 + chunk] = _quantile_sorted(srt, n, 0.9)
        dev = np.sort(np.abs(G - med[..., None]), axis=-1)
        out["mad"][c0:c0 + chunk] = _quantile_sorted(dev, n, 0.5)
        n_samples[c0:c0 + chunk] = n
        method[c0:c0 + chunk] = m
        emitted[c0:c0 + chunk] = seen[c0:c0 + chunk][:, idx].any(-1)

    frame = pd.DataFrame({
        "partition_start": pd.DatetimeIndex(np.tile(partitions.tz_convert(None).to_numpy(), S)).tz_localize("UTC"),
        **{c: np.repeat(keys[c].to_numpy(dtype=object), T) for c in ["series", *SLICE]},
        **{k: v.ravel() for k, v in out.items()},
        "n_samples": n_samples.ravel(),
        "method": np.asarray(METHODS, dtype=object)[method.ravel()],
    })
    frame = frame.loc[emitted.ravel(), OUT_COLUMNS]
    return frame.sort_values(["partition_start", "series", *SLICE], ignore_index=True)


# --- internals ---------------------------------------------------------------------------


def _empty() -> pd.DataFrame:
    frame = pd.DataFrame({c: pd.Series(dtype=object) for c in OUT_COLUMNS})
    frame["partition_start"] = pd.to_datetime(frame["partition_start"], utc=True)
    for c in ("expected", "mad", "q10", "q90"):
        frame[c] = frame[c].astype(float)
    frame["n_samples"] = frame["n_samples"].astype("int64")
    return frame


class _Samples(NamedTuple):
    keys: pd.DataFrame  # one row per series x slice: series, region, sku, workload_class, team
    code: np.ndarray  # per sample: row of keys
    slot: np.ndarray  # per sample: 5-minute slot since the epoch
    value: np.ndarray  # per sample: value (NaN: seen, but not a sample)


def _kpi_samples(kpis: pd.DataFrame | None) -> _Samples:
    """kpi_values rows: every series x slice seen gets a key; only ok, finite values are samples."""
    if kpis is None or kpis.empty:
        return _no_samples()
    code, keys = _factorize_rows(kpis, ["kpi", *SLICE])
    value = kpis["value"].to_numpy(dtype=float, na_value=np.nan)
    value = np.where(kpis["status"].to_numpy(dtype=object) == "ok", value, np.nan)
    return _Samples(keys.rename(columns={"kpi": "series"}), code, _slots(kpis["partition_start"]), value)


def _share_samples(states: pd.DataFrame | None) -> _Samples:
    """share_<state> per partition x share slice (every state of a slice with paid GPU-minutes)."""
    if states is None or states.empty:
        return _no_samples()
    codes, labels = {}, {}
    for c in ("region", "sku", "workload_class"):
        codes[c], labels[c] = pd.factorize(states[c])
    slot = _slots(states["partition_start"])
    s0 = int(slot.min())
    rel = slot - s0
    state = pd.Index(STATES).get_indexer(states["state"].astype(object))
    if (state < 0).any():
        raise ValueError(f"unknown loss-tree states: {sorted(set(states['state'][state < 0]))}")
    minutes = states["gpu_minutes"].to_numpy(dtype=float)
    n_states = len(STATES)
    parts = []
    for level in SHARE_LEVELS:
        slice_key = np.zeros(len(states), dtype=np.int64)
        for c in level:
            slice_key = slice_key * len(labels[c]) + codes[c]
        n_slices = int(np.prod([len(labels[c]) for c in level])) if level else 1
        cells, inverse = np.unique(rel * n_slices + slice_key, return_inverse=True)
        wide = np.bincount(inverse * n_states + state, weights=minutes, minlength=len(cells) * n_states)
        wide = wide.reshape(len(cells), n_states)
        paid = wide.sum(axis=1)
        keep = paid > 0
        cell_slot, cell_slice = np.divmod(cells[keep], n_slices)
        slices, slice_code = np.unique(cell_slice, return_inverse=True)
        out, rest = {}, slices
        for c in reversed(level):
            rest, code = np.divmod(rest, len(labels[c]))
            out[c] = np.asarray(labels[c], dtype=object)[code]
        keys = pd.DataFrame({
            "series": np.tile(np.asarray(SHARE_SERIES, dtype=object), len(slices)),
            **{c: np.repeat(out[c], n_states) if c in out else STAR for c in ("region", "sku", "workload_class")},
            "team": STAR,
        })
        parts.append(_Samples(keys, (slice_code[:, None] * n_states + np.arange(n_states)).ravel(),
                              np.repeat(cell_slot + s0, n_states), (wide[keep] / paid[keep, None]).ravel()))
    return _concat(*parts)


def _no_samples() -> _Samples:
    keys = pd.DataFrame({c: pd.Series(dtype=object) for c in ["series", *SLICE]})
    return _Samples(keys, np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0))


def _concat(*parts: _Samples) -> _Samples:
    offsets = np.cumsum([0] + [len(p.keys) for p in parts[:-1]])
    return _Samples(
        pd.concat([p.keys for p in parts], ignore_index=True),
        np.concatenate([p.code + o for p, o in zip(parts, offsets)]).astype(np.int64),
        np.concatenate([p.slot for p in parts]).astype(np.int64),
        np.concatenate([p.value for p in parts]).astype(float),
    )


def _factorize_rows(frame: pd.DataFrame, cols: list[str]) -> tuple[np.ndarray, pd.DataFrame]:
    """Code of each row's value combination over ``cols``, and the combinations (one row per code)."""
    key = np.zeros(len(frame), dtype=np.int64)
    labels = []
    for c in cols:
        code, uniq = factorize(frame[c])
        key = key * len(uniq) + code
        labels.append(np.asarray(uniq, dtype=object))
    cells, inverse = np.unique(key, return_inverse=True)
    out = {}
    for c, lab in zip(reversed(cols), reversed(labels)):
        cells, code = np.divmod(cells, len(lab))
        out[c] = lab[code]
    return inverse, pd.DataFrame({c: out[c] for c in cols})


def _within(frame: pd.DataFrame | None, start, end) -> pd.DataFrame | None:
    """Rows with ``start <= partition_start < end`` (the only ones that can be samples)."""
    if frame is None or frame.empty:
        return frame
    ps = frame["partition_start"]
    return frame[(ps >= start) & (ps < end)]


def _slots(ts) -> np.ndarray:
    """5-minute slots since the epoch (partition starts are 5-minute aligned)."""
    delta = pd.DatetimeIndex(as_utc(ts)) - _EPOCH
    return np.asarray(delta // PARTITION, dtype=np.int64)


def _weekend(day: np.ndarray) -> np.ndarray:
    """Day index since 1970-01-01 (a Thursday) -> Saturday or Sunday."""
    return (day + 3) % 7 >= 5


def _quantile_sorted(srt: np.ndarray, n: np.ndarray, q: float) -> np.ndarray:
    """numpy's linear quantile of the first ``n`` values of each sorted row; NaN where ``n == 0``."""
    pos = q * np.clip(n - 1, 0, None)
    lo = np.floor(pos).astype(np.int64)
    hi = np.minimum(lo + 1, np.clip(n - 1, 0, None))
    frac = pos - lo
    a = np.take_along_axis(srt, lo[..., None], axis=-1)[..., 0]
    b = np.take_along_axis(srt, hi[..., None], axis=-1)[..., 0]
    with np.errstate(invalid="ignore"):
        val = a + (b - a) * frac
    return np.where(n > 0, val, np.nan)
