"""Training convergence from the trainer's own metrics (the application layer): diverging loss, an exploding
gradient norm and failed checkpoints, judged per job against the job's own earlier minutes. Pure pandas.

======================  ========  ==================================================================================
detector                family    tickets on (never a page: one witness, the trainer's own log)
======================  ========  ==================================================================================
training_divergence     software  the median loss of a job's last DIVERGE_MINUTES stands DIVERGE_Z robust standard
                                  errors above the median of the DIVERGE_MINUTES before them, the noise measured on
                                  the job's own earlier minutes (REFERENCE_MINUTES of history at least)
training_divergence     software  (flat) the loss of a job that completed steps in each of its last DIVERGE_MINUTES is
                                  the same value in all of them, while its earlier minutes scattered: a minibatch
                                  loss moves with every new batch, so a frozen one means no new data reaches the loss
                                  (a learning rate of 0, frozen weights and a cached batch, a logger stuck on a value)
training_divergence     software  (gradient_norm, where the job reports ``grad_norm``) the median log norm of its last
                                  DIVERGE_MINUTES reported minutes stands DIVERGE_Z robust standard errors above the
                                  median of all its reported minutes before them (REFERENCE_MINUTES + DIVERGE_MINUTES
                                  at least), the scatter the MAD of those minutes, and at least GRAD_MIN_RATIO times
                                  it; or its last GRAD_NONFINITE_MINUTES reported norms all overflowed (+inf)
checkpoint_failure      software  a job spent time checkpointing in CHECKPOINT_ATTEMPTS separate minutes while its
                                  newest durable checkpoint step (``last_checkpoint_step``) never advanced
======================  ========  ==================================================================================

All of them rest on one witness, the trainer's log, so they ticket. A job whose loss rises while its gradient norm
explodes is one ticket naming both (the norm makes the diagnosis surer and often comes first), still not a page,
by decision: the runbooks' rule is that a page rests on two witnesses that fail independently (two collectors or
subsystems), and the loss and the norm are one collector (the trainer's logger) measuring one model state -- what
moves that state back or sideways moves both together without anything broken (a requeued job resuming from an
older checkpoint under the same ``job_id``, a restarted warm-up, a harder data shard: a larger loss has larger
gradients), and the action is the job owner's (lower the learning rate, resume), not an on-call's. A page would
need a witness outside the trainer (none exists for divergence in the sources). A job that reports no loss, no
gradient norm or no durable checkpoint step is not judged on it (absence is missing data, never a zero reading):
a job without ``grad_norm`` is judged exactly as before the column existed.

Why these bars hold on any job: a training loss decreases in expectation (that is what the optimiser does), so the
later of two adjacent windows sits at or below the earlier one, and only noise can lift it. The noise is the job's
own: the minute-to-minute scatter of its loss (the median absolute first difference over the reference, scaled to a
standard deviation: MAD x 1.4826 / sqrt(2)), so a noisy small-batch job and a smooth large-batch job are held to
their own scatter, never a constant tuned to a simulator. The median of n points has a standard error of ~1.2533
sigma / sqrt(n); the difference of two such medians sqrt(2) times that. DIVERGE_Z = 6 standard errors is a one-sided
p ~ 1e-9 per look under Gaussian noise: with 288 looks a day over 1,000 jobs, ~3e-4 false tickets a day.

The gradient norm is judged the same way on log scale: norms span orders of magnitude between models (a job's own
level, ~0.01 to ~100) and scatter multiplicatively (a minibatch gradient's norm moves with the batch by a share of
itself), so log norms put every job's scatter in its own relative units, and an explosion, exponential by nature,
is a shift. Past warm-up a healthy norm is level or drifts slowly (down with the loss, or up by percents an hour
late in a schedule), so the job's reported minutes before the last DIVERGE_MINUTES are its usual level: their
median, and their MAD x 1.4826 as the scatter (a level MAD, since the norm, unlike the loss, has no trend to take
out by differencing; a slow drift only widens it, which errs towards silence). The recent median against that
median has a standard error of 1.2533 sigma sqrt(1/DIVERGE_MINUTES + 1/n_reference), and the same DIVERGE_Z = 6
bar. Medians and a MAD make a spike (a hard batch, a mixed-precision overflow) inside the ten minutes no verdict.
"""

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from gpu_health.codes import factorize
from gpu_health.constants import MAD_TO_SIGMA, MINUTE
from gpu_health.diagnosis.finding import Finding

# two adjacent 10-minute windows: ten points make the median robust to a single spike (an evaluation batch logged
# as the training loss), and the divergence shows inside the 15-minute detection budget
DIVERGE_MINUTES = 10
# the job's own scatter needs history: 20 minutes of reported loss before the two windows (19 first differences)
REFERENCE_MINUTES = 20
DIVERGE_Z = 6.0
MEDIAN_SE = 1.2533  # the standard error of a median of n Gaussian points is 1.2533 sigma / sqrt(n)
# and the rise must matter: 5 % of the loss level, so a job whose loss is flat to four digits (a scatter near 0)
# is not ticketed on a rounding step
DIVERGE_MIN_RISE = 0.05
# the look-back the alerts step reads: the two windows and the reference, and two checkpoint intervals of the
# slowest checkpointing pool (30 minutes for distributed jobs; 60 minutes is common on real long runs)
CONVERGENCE_LOOKBACK = pd.Timedelta(hours=2)
# the gradient_norm condition: the rise must matter as well as stand out (the loss rule's DIVERGE_MIN_RISE): the
# norm at least doubled, so a job whose norm is logged near-flat (a scatter near 0, rounded) is not ticketed on a
# small step; an exploding norm grows by orders of magnitude within minutes, a healthy one drifts by percents an hour
GRAD_MIN_RATIO = 2.0
# and an overflowed norm (+inf) counts only when the job's last 3 reported minutes all overflowed: mixed-precision
# training overflows now and then by design (the loss scaler skips that step and halves its scale), and only a
# norm that overflows every time it is sampled is a diverged model (or a loss scale that collapsed)
GRAD_NONFINITE_MINUTES = 3
# two attempts without the durable step advancing: one may still be uploading (asynchronous checkpointing
# publishes the step minutes later); the second attempt finds the first never landed
CHECKPOINT_ATTEMPTS = 2
_NAT = np.iinfo(np.int64).min  # NaT as int64 nanoseconds


@dataclass
class LossArrays:
    """job_runtime_metrics as numpy arrays in time order (``loss_arrays``): a range of partitions converts and
    factorizes its look-back once, and each partition's window is one slice of it (``window``), where the
    frame would be filtered, cast and sorted again for every partition."""

    ts: np.ndarray        # int64 nanoseconds, ascending
    job: np.ndarray       # int64 code of the job: its position in ``job_ids``
    job_ids: np.ndarray   # the distinct job ids (objects), sorted: code order is job-id order
    loss: np.ndarray      # float64, NaN where the trainer reported no loss
    steps: np.ndarray | None  # the ``steps`` column as numpy (None: the frame has none)
    durable: np.ndarray   # last_checkpoint_step as float64, NaN where not reported (exact below 2**53 steps)
    checkpointing: np.ndarray  # bool: checkpoint_time_s > 0 (a missing time is 0)
    tz: object            # the timezone of ``ts`` (the ``since`` column of checkpoint_failures carries it)
    grad: np.ndarray | None = None  # grad_norm as float64, NaN where not reported (None: the frame has no column)
    # a window's arrays it is cut from and its bounds (int64 ns): the rows of a job in the window are then one run
    # of the whole arrays grouped by job (_JobMajor, built once), found by two binary searches, where grouping the
    # window's own rows sorts 2 hours of rows again for every partition (None: not a window)
    base: "LossArrays | None" = field(default=None, repr=False)
    bounds: tuple[int, int] = (0, 0)
    grouped: dict = field(default_factory=dict, repr=False)  # signal -> _JobMajor of these arrays (_job_major)

    def window(self, lo: pd.Timestamp | None, hi: pd.Timestamp) -> "LossArrays":
        """The rows with lo <= ts < hi (no lower bound for lo=None): views, no copy."""
        lo_ns = _NAT + 1 if lo is None else pd.Timestamp(lo).value  # (NaT sorts first and is never inside)
        hi_ns = pd.Timestamp(hi).value
        if self.base is not None:  # a window of a window: the same rows of the arrays it was cut from
            lo_ns, hi_ns = max(lo_ns, self.bounds[0]), min(hi_ns, self.bounds[1])
        base = self if self.base is None else self.base
        i = int(np.searchsorted(base.ts, lo_ns, "left"))
        k = max(int(np.searchsorted(base.ts, hi_ns, "left")), i)
        return LossArrays(base.ts[i:k], base.job[i:k], base.job_ids, base.loss[i:k],
                          None if base.steps is None else base.steps[i:k], base.durable[i:k], base.checkpointing[i:k],
                          base.tz, None if base.grad is None else base.grad[i:k], base=base, bounds=(lo_ns, hi_ns))


@dataclass
class _JobMajor:
    """The rows of LossArrays with one signal reported (or all rows), grouped by job: job-code order, time order
    inside a job (a stable sort of the time-sorted rows), with each row's key ``job * (T + 1) + time rank`` (T: the
    distinct timestamps) ascending, so the rows of job j with lo <= ts < hi are the run between two binary searches."""

    rows: np.ndarray      # positions in the arrays, job-major
    ts: np.ndarray
    job: np.ndarray
    key: np.ndarray
    times: np.ndarray     # the distinct timestamps, ascending (a row's time rank is its position here)
    first: np.ndarray     # per job code: its earliest and latest timestamp (a job without rows: never in a window)
    last: np.ndarray
    derived: dict = field(default_factory=dict)  # name -> an array over ``rows`` (the signal's log, differences)

    def runs(self, lo_ns: int, hi_ns: int, jobs: np.ndarray | None = None,
             since: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Each job's first and one-past-last position (in ``rows``' order) of its rows with lo <= ts < hi, for the
        jobs with such rows, in job-code order: only those of ``jobs`` (ascending codes) when given, else only
        jobs with a row at ``since`` or later, when given (a window's jobs judged on their newest row)."""
        if jobs is None:
            newest = lo_ns if since is None else max(lo_ns, since)
            jobs = np.flatnonzero((self.last >= newest) & (self.first < hi_ns))
        width = len(self.times) + 1
        r_lo, r_hi = np.searchsorted(self.times, [lo_ns, hi_ns], "left")
        starts = np.searchsorted(self.key, jobs * width + r_lo, "left")
        stops = np.searchsorted(self.key, jobs * width + r_hi, "left")
        some = stops > starts
        return starts[some], stops[some]


def _job_major(a: LossArrays, signal: str | None) -> _JobMajor:
    """``a``'s rows where ``signal`` (an array attribute: loss, grad) is reported, or all rows (None), grouped by
    job (_JobMajor); built once per arrays."""
    if signal not in a.grouped:
        rows = np.flatnonzero(~np.isnan(getattr(a, signal))) if signal else np.arange(len(a.ts))
        order, _, _ = _by_job(a.job[rows])
        rows = rows[order]
        ts, job = a.ts[rows], a.job[rows]
        times = a.ts[np.r_[True, a.ts[1:] != a.ts[:-1]]] if len(a.ts) else a.ts  # (np.unique: ts is sorted already)
        key = job * (len(times) + 1) + np.searchsorted(times, ts, "left")
        first = np.full(len(a.job_ids), np.iinfo(np.int64).max)
        last = np.full(len(a.job_ids), np.iinfo(np.int64).min)
        np.minimum.at(first, job, ts)
        np.maximum.at(last, job, ts)
        a.grouped[signal] = _JobMajor(rows, ts, job, key, times, first, last)
    return a.grouped[signal]


@dataclass
class _Runs:
    """The rows of a window with one signal reported, grouped by job: arrays in job-major order (a job's rows in
    time order) and each job's first and one-past-last position in them -- the window's own arrays sorted, or the
    whole range's grouped arrays with the window's runs in them (only positions inside runs are read)."""

    ts: np.ndarray
    job: np.ndarray
    values: np.ndarray
    steps: np.ndarray | None
    starts: np.ndarray
    stops: np.ndarray
    major: "_JobMajor | None" = None

    def derived(self, name: str, make) -> np.ndarray:
        """``make(values)`` over these arrays, computed once for the whole range when they are its grouped arrays."""
        if self.major is None:
            return make(self.values)
        if name not in self.major.derived:
            self.major.derived[name] = make(self.values)
        return self.major.derived[name]


def _runs(a: LossArrays, signal: str, since: pd.Timestamp) -> _Runs:
    """The rows of ``a`` with ``signal`` (loss, grad) reported, grouped by job (_Runs): every job's, or only those of
    jobs whose newest row in the range behind ``a`` is at ``since`` or later (the others are never judged: a job
    is judged on a row in the partition; this only spares looking up the window's runs of jobs that ended)."""
    values = getattr(a, signal)
    if a.base is None:
        reported = ~np.isnan(values)
        ts, job = a.ts[reported], a.job[reported]
        order, starts, stops = _by_job(job)
        return _Runs(ts[order], job[order], values[reported][order],
                     None if a.steps is None else a.steps[reported][order], starts, stops)
    major = _job_major(a.base, signal)
    starts, stops = major.runs(*a.bounds, since=pd.Timestamp(since).value)
    base = a.base
    if signal not in major.derived:
        major.derived[signal] = getattr(base, signal)[major.rows]
        major.derived["steps:" + signal] = None if base.steps is None else base.steps[major.rows]
    return _Runs(major.ts, major.job, major.derived[signal], major.derived["steps:" + signal], starts, stops, major)


def loss_arrays(history: pd.DataFrame) -> LossArrays:
    """``history`` (job_runtime_metrics: ts, job_id, loss, steps, checkpoint_time_s, last_checkpoint_step and,
    when the frame has it, grad_norm) as LossArrays, its rows stably sorted by time (rows of one job and minute
    keep their order)."""
    ts = pd.DatetimeIndex(history["ts"]).as_unit("ns")
    ns = ts.asi8  # (UTC nanoseconds; NaT is the int64 minimum)
    order = np.argsort(ns, kind="stable")
    code, uniques = factorize(history["job_id"].astype(object).to_numpy()[order], sort=True, use_na_sentinel=False)
    durable = history["last_checkpoint_step"].astype("Float64").to_numpy(dtype=float, na_value=np.nan)
    ck = history["checkpoint_time_s"].fillna(0).to_numpy(dtype=float) > 0
    return LossArrays(ns[order], code.astype(np.int64), np.asarray(uniques, dtype=object),
                      history["loss"].to_numpy(dtype=float, na_value=np.nan)[order],
                      history["steps"].to_numpy()[order] if "steps" in history else None,
                      durable[order], ck[order], ts.tz,
                      history["grad_norm"].to_numpy(dtype=float, na_value=np.nan)[order] if "grad_norm" in history
                      else None)


def _by_job(job: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The stable order that groups rows by job code (time order kept inside a job), and each job's first and
    one-past-last position in it."""
    order = np.argsort(job, kind="stable")
    j = job[order]
    starts = np.flatnonzero(np.r_[True, j[1:] != j[:-1]]) if len(j) else np.zeros(0, dtype=np.int64)
    return order, starts, np.r_[starts[1:], len(j)].astype(np.int64)


def _medians(values: np.ndarray, first: np.ndarray, count: np.ndarray) -> np.ndarray:
    """np.median of values[first[k]:first[k] + count[k]] for every k (count >= 1), bit for bit: the segments
    sorted as rows of one matrix padded with +inf, then numpy's rule -- the middle value, or the mean of the two
    middle ones ((a + b) / 2), NaN when the segment holds a NaN. (One sort of a small matrix: a window's jobs
    have different row counts, and one np.median per count cost a millisecond a partition.)"""
    if not len(first):
        return np.zeros(0)
    width = int(count.max())
    col = np.arange(width)
    inside = col[None, :] < count[:, None]
    rows = np.where(inside, values[np.minimum(first[:, None] + col, len(values) - 1)], np.inf)
    has_nan = np.isnan(rows).any(axis=1)
    rows.sort(axis=1)
    k = np.arange(len(first))
    hi, lo = rows[k, count // 2], rows[k, (count - 1) // 2]
    out = np.where(count % 2 == 1, hi, (lo + hi) / 2.0)
    return np.where(has_nan, np.nan, out)


_DIVERGENCE_COLUMNS = ["job_id", "before", "recent", "sigma", "z", "rise", "steps", "diverging", "frozen"]
_GRADIENT_COLUMNS = ["job_id", "g_usual", "g_recent", "g_sigma", "g_z", "g_ratio", "g_nonfinite", "exploding",
                     "g_steps"]
_CHECKPOINT_COLUMNS = ["job_id", "attempts", "durable_step", "since"]


def _divergence_values(a: LossArrays, start: pd.Timestamp) -> dict | None:
    """divergence()'s columns (arrays) for the rows of ``a`` (the window up to the partition's end, all of
    them); None when no job is judged."""
    r = _runs(a, "loss", start)
    if not len(r.starts):
        return None
    starts, stops = r.starts, r.stops
    # too short, or no loss in the partition (rows are in time order: a job's last row is its newest)
    keep = ((stops - starts) >= 2 * DIVERGE_MINUTES + REFERENCE_MINUTES) & (r.ts[stops - 1] >= pd.Timestamp(start).value)
    if not keep.any():
        return None
    i0, i1 = starts[keep], stops[keep]
    loss = r.values
    recent = loss[(i1 - DIVERGE_MINUTES)[:, None] + np.arange(DIVERGE_MINUTES)]
    before = loss[(i1 - 2 * DIVERGE_MINUTES)[:, None] + np.arange(DIVERGE_MINUTES)]
    # the reference's first differences: |loss[k+1] - loss[k]| for k in [i0, i1 - 2 * DIVERGE_MINUTES - 1)
    diffs = r.derived("loss_diffs", lambda v: np.abs(np.diff(v)))
    sigma = MAD_TO_SIGMA * _medians(diffs, i0, i1 - i0 - 2 * DIVERGE_MINUTES - 1) / np.sqrt(2)
    se = np.sqrt(2) * MEDIAN_SE * sigma / np.sqrt(DIVERGE_MINUTES)
    m_recent, m_before = np.median(recent, axis=1), np.median(before, axis=1)
    rise = m_recent - m_before
    with np.errstate(divide="ignore", invalid="ignore"):
        z = np.where(se > 0, rise / se, np.where(rise > 0, np.inf, 0.0))
    level = np.abs(m_before)
    level = np.where(level == 0, 1.0, level)  # (abs(x) or 1.0: a NaN level stays NaN)
    if r.steps is not None:
        last_steps = r.steps[(i1 - DIVERGE_MINUTES)[:, None] + np.arange(DIVERGE_MINUTES)]
        stepping = (last_steps > 0).all(axis=1)
        steps = last_steps.sum(axis=1).astype(np.int64)
    else:
        stepping, steps = np.zeros(len(i0), dtype=bool), np.zeros(len(i0), dtype=np.int64)
    return {"job_id": a.job_ids[r.job[i0]], "before": m_before, "recent": m_recent, "sigma": sigma, "z": z,
            "rise": rise, "steps": steps, "diverging": (z >= DIVERGE_Z) & (rise >= DIVERGE_MIN_RISE * level),
            "frozen": stepping & (sigma > 0) & (np.ptp(recent, axis=1) == 0)}


def _frame(values: dict | None, columns: list[str], rows: np.ndarray | None = None) -> pd.DataFrame:
    """The frame of ``values`` (column -> array), only ``rows`` when given; the empty frame of ``columns``
    (object columns, as before any row) when there is none."""
    if values is None or (rows is not None and not rows.any()):
        return pd.DataFrame(columns=columns)
    return pd.DataFrame({c: values[c] if rows is None else values[c][rows] for c in columns}, columns=columns)


def _divergence(a: LossArrays, start: pd.Timestamp) -> pd.DataFrame:
    """divergence() of the rows of ``a`` (the window up to the partition's end, all of them)."""
    return _frame(_divergence_values(a, start), _DIVERGENCE_COLUMNS)


def divergence(history: pd.DataFrame, start: pd.Timestamp, end: pd.Timestamp) -> pd.DataFrame:
    """Per job with a loss reported in ``[start, end)``: the two windows' medians, the job's noise (sigma), the z of
    the rise and whether it diverges or is frozen flat (columns job_id, before, recent, sigma, z, rise, steps,
    diverging, frozen), one row per job in job-id order. A job is judged on its rows before ``end`` with a loss:
    the last DIVERGE_MINUTES of them (recent), the DIVERGE_MINUTES before (before) and all earlier ones (the
    reference, at least REFERENCE_MINUTES)."""
    if not len(history):
        return pd.DataFrame(columns=_DIVERGENCE_COLUMNS)
    return _divergence(loss_arrays(history).window(None, end), start)


def _gradient_values(a: LossArrays, start: pd.Timestamp) -> dict | None:
    """gradient_norm()'s columns (arrays) for the rows of ``a`` (the window up to the partition's end, all of
    them); None when no job reports a gradient norm (a job that reports none is not judged: missing data)."""
    if a.grad is None:
        return None
    r = _runs(a, "grad", start)
    if not len(r.starts):
        return None
    # judged only with a norm in the partition (rows are in time order: a job's last row is its newest)
    live = r.ts[r.stops - 1] >= pd.Timestamp(start).value
    if not live.any():
        return None
    starts, stops = r.starts[live], r.stops[live]
    count = stops - starts
    # log scale: a zero norm (frozen weights) is the smallest positive double, not -inf
    logs = r.derived("grad_logs", lambda v: np.log(np.maximum(v, np.finfo(float).tiny)))
    # overflowed: every one of the job's last GRAD_NONFINITE_MINUTES reported norms is +inf
    k = GRAD_NONFINITE_MINUTES
    tail = logs[np.minimum(np.maximum(stops - k, 0)[:, None] + np.arange(k), len(logs) - 1)]
    nonfinite = (count >= k) & np.isinf(tail).all(axis=1)
    # the level rule: the median of the last DIVERGE_MINUTES against the median and MAD of all reported minutes
    # before them (REFERENCE_MINUTES + DIVERGE_MINUTES at least, the loss rule's history)
    judged = count >= 2 * DIVERGE_MINUTES + REFERENCE_MINUTES
    n_ref = np.maximum(count - DIVERGE_MINUTES, 1)
    usual = np.full(len(starts), np.nan)
    recent = np.full(len(starts), np.nan)
    sigma = np.full(len(starts), np.nan)
    if judged.any():
        i0, i1, nr = starts[judged], stops[judged], n_ref[judged]
        usual[judged] = _medians(logs, i0, nr)
        recent[judged] = _medians(logs, i1 - DIVERGE_MINUTES, np.full(len(i0), DIVERGE_MINUTES))
        # each reference row's absolute deviation from its job's reference median, the references packed end to end
        first = np.r_[0, np.cumsum(nr)[:-1]].astype(np.int64)
        rows = np.repeat(i0 - first, nr) + np.arange(int(nr.sum()))
        with np.errstate(invalid="ignore"):  # (inf - inf: a reference mostly overflowed has no scatter: NaN)
            dev = np.abs(logs[rows] - np.repeat(usual[judged], nr))
        sigma[judged] = MAD_TO_SIGMA * _medians(dev, first, nr)
    with np.errstate(invalid="ignore", divide="ignore"):
        rise = recent - usual
        se = MEDIAN_SE * sigma * np.sqrt(1.0 / DIVERGE_MINUTES + 1.0 / n_ref)
        z = np.where(se > 0, rise / se, np.where(rise > 0, np.inf, 0.0))
        rising = judged & (z >= DIVERGE_Z) & (rise >= np.log(GRAD_MIN_RATIO))
    if r.steps is not None:  # steps completed in the last DIVERGE_MINUTES reported minutes (for the evidence)
        at = (stops - DIVERGE_MINUTES)[:, None] + np.arange(DIVERGE_MINUTES)
        steps = np.where(at >= starts[:, None], r.steps[np.maximum(at, 0)], 0).sum(axis=1).astype(np.int64)
    else:
        steps = np.zeros(len(starts), dtype=np.int64)
    return {"job_id": a.job_ids[r.job[starts]], "g_usual": np.exp(usual), "g_recent": np.exp(recent),
            "g_sigma": sigma, "g_z": np.where(np.isnan(z), 0.0, z), "g_ratio": np.exp(rise),
            "g_nonfinite": nonfinite, "exploding": rising | nonfinite, "g_steps": steps}


def _gradient_norm(a: LossArrays, start: pd.Timestamp) -> pd.DataFrame:
    """gradient_norm() of the rows of ``a`` (the window up to the partition's end, all of them)."""
    return _frame(_gradient_values(a, start), _GRADIENT_COLUMNS)


def gradient_norm(history: pd.DataFrame, start: pd.Timestamp, end: pd.Timestamp) -> pd.DataFrame:
    """Per job with a gradient norm reported in ``[start, end)`` (columns job_id, g_usual, g_recent, g_sigma, g_z,
    g_ratio, g_nonfinite, exploding, g_steps), one row per job in job-id order: the median norm of the job's
    reported minutes before its last DIVERGE_MINUTES (g_usual) and of those minutes (g_recent), the job's own
    scatter of log norms (g_sigma), the z and ratio of the rise, whether its last GRAD_NONFINITE_MINUTES reported
    norms all overflowed, and whether it explodes (either). Jobs without a grad_norm (or a frame without the
    column) have no row."""
    if not len(history):
        return pd.DataFrame(columns=_GRADIENT_COLUMNS)
    return _gradient_norm(loss_arrays(history).window(None, end), start)


def _checkpoint_values(a: LossArrays, start: pd.Timestamp) -> dict | None:
    """checkpoint_failures()'s columns (arrays) for the rows of ``a`` (the window up to the partition's end, all
    of them); None when no job is judged."""
    # judged: the jobs with a durable step reported in the partition (the window's last rows: they are in time order)
    i = int(np.searchsorted(a.ts, pd.Timestamp(start).value, "left"))
    live = np.zeros(len(a.job_ids), dtype=bool)
    live[a.job[i:][~np.isnan(a.durable[i:])]] = True
    if not live.any():
        return None
    # their rows in the window, grouped by job (time order inside a job)
    if a.base is None:
        rows = np.flatnonzero(live[a.job])
        order, starts, stops = _by_job(a.job[rows])
        rows, src = rows[order], a
    else:
        major = _job_major(a.base, None)
        lo, hi = major.runs(*a.bounds, jobs=np.flatnonzero(live))
        n = hi - lo
        starts = np.r_[0, np.cumsum(n)[:-1]].astype(np.int64)
        stops = starts + n
        rows, src = major.rows[np.repeat(lo - starts, n) + np.arange(int(n.sum()))], a.base
    ts, durable, job = src.ts[rows], src.durable[rows], src.job[rows]
    key = np.repeat(np.arange(len(starts)), stops - starts)
    first = starts[key]  # each row's job's first position
    # forward-fill the durable step inside each job: the latest reported position at or before the row
    at = np.maximum.accumulate(np.where(~np.isnan(durable), np.arange(len(rows)), -1))
    filled = np.where(at >= first, durable[np.maximum(at, 0)], np.nan)
    prev = np.r_[np.nan, filled[:-1]]
    prev[starts] = np.nan
    with np.errstate(invalid="ignore"):
        advanced = ~np.isnan(filled) & (np.isnan(prev) | (filled > prev))
    advanced[starts] = False
    # the last advance (rows are in time order inside a job), else one minute before the job's first row
    last_adv = np.full(len(starts), np.iinfo(np.int64).min)
    np.maximum.at(last_adv, key[advanced], ts[advanced])
    after = np.where(last_adv == np.iinfo(np.int64).min, ts[starts] - MINUTE.value, last_adv)
    attempt = (ts > after[key]) & src.checkpointing[rows]
    at_key, at_ts = key[attempt], ts[attempt]
    # separate attempts: not the minute after the job's previous attempt (a job's first attempt counts)
    separate = np.r_[True, (at_key[1:] != at_key[:-1]) | (np.diff(at_ts) != MINUTE.value)] if len(at_key) else at_key > 0
    attempts = np.bincount(at_key[separate], minlength=len(starts)).astype(int)
    since = pd.DatetimeIndex(after.view("datetime64[ns]"))
    since = since.tz_localize("UTC").tz_convert(a.tz) if a.tz is not None else since
    return {"job_id": a.job_ids[job[starts]], "attempts": attempts, "durable_step": filled[stops - 1], "since": since}


def _checkpoint_failures(a: LossArrays, start: pd.Timestamp) -> pd.DataFrame:
    """checkpoint_failures() of the rows of ``a`` (the window up to the partition's end, all of them)."""
    return _frame(_checkpoint_values(a, start), _CHECKPOINT_COLUMNS)


def checkpoint_failures(history: pd.DataFrame, start: pd.Timestamp, end: pd.Timestamp) -> pd.DataFrame:
    """Per job: its checkpointing minutes since its durable step last advanced, and the durable step (columns
    job_id, attempts, durable_step, since). A job whose durable step is never reported is not judged.

    A job's durable step advances where it rises or first appears (its first checkpoint landed), never on the
    job's first row of the look-back (that value was durable before it); its attempts are its checkpointing
    minutes after the last advance (after its first row when none), counted as runs of adjacent minutes."""
    if not len(history):
        return pd.DataFrame(columns=_CHECKPOINT_COLUMNS)
    return _checkpoint_failures(loss_arrays(history).window(None, end), start)


def _region_of(ctx, jobs) -> dict:
    """job -> (region, nodes) from the GPUs the exporter maps to it in the partition."""
    g = ctx.gpu
    if g is None or not len(g) or not jobs:
        return {}
    g = g[g["job_id"].isin(jobs)]
    return {job: (str(grp["region"].iloc[0]), sorted(set(grp["node_id"].astype(str))))
            for job, grp in g.groupby(g["job_id"].astype(object))}


def _divergence_text(region: str, rows: list[dict]) -> tuple[str, str, float | None]:
    """The summary, evidence and value (the largest z) of a region's training_divergence ticket: the jobs whose
    loss rises, whose loss is frozen, and whose gradient norm explodes (a job in two of them is named in both:
    a rising loss with an exploding norm is the same divergence seen from both sides of the step)."""
    rising = [r for r in rows if r["diverging"]]
    frozen = sorted(r["job_id"] for r in rows if r["frozen"] and not r["diverging"])
    exploding = [r for r in rows if r["exploding"]]
    parts = []
    if rising:
        worst = max(rising, key=lambda r: r["z"])
        parts.append(f"median loss of the last {DIVERGE_MINUTES} minutes ({worst['steps']} steps) "
                     f"{worst['recent']:.4g} against {worst['before']:.4g} in the {DIVERGE_MINUTES} before: "
                     f"{worst['z']:.0f} standard errors of the job's own scatter (bar {DIVERGE_Z:g}) on "
                     f"{', '.join(sorted(r['job_id'] for r in rising)[:5])}; check the learning-rate "
                     f"schedule and the latest data shard, resume from the last checkpoint before the rise")
    if frozen:
        parts.append(f"loss frozen at one value through {DIVERGE_MINUTES} minutes of steps on "
                     f"{', '.join(frozen[:5])}: no new data reaches the loss (learning rate 0, frozen "
                     f"weights, a cached batch or a stuck logger)")
    if exploding:
        both = sorted(r["job_id"] for r in exploding if r["diverging"])
        over = sorted(r["job_id"] for r in exploding if r["g_nonfinite"])
        grown = [r for r in exploding if not r["g_nonfinite"]]
        said = []
        if over:
            said.append(f"non-finite (overflowed) in each of the last {GRAD_NONFINITE_MINUTES} reported minutes on "
                        f"{', '.join(over[:5])}")
        if grown:
            worst = max(grown, key=lambda r: r["g_z"])
            said.append(f"median of the last {DIVERGE_MINUTES} minutes ({worst['g_steps']} steps) "
                        f"{worst['g_recent']:.4g}, {worst['g_ratio']:.1f}x its usual {worst['g_usual']:.4g}: "
                        f"{worst['g_z']:.0f} standard errors of the job's own scatter (bar {DIVERGE_Z:g}, and "
                        f"{GRAD_MIN_RATIO:g}x) on {', '.join(sorted(r['job_id'] for r in grown)[:5])}")
        parts.append("gradient norm (gradient_norm) " + "; ".join(said) +
                     (f"; with the loss rising on {', '.join(both[:5])}" if both else "; the loss not (yet) rising") +
                     ": check the learning rate, gradient clipping and mixed-precision loss scaling, resume from the "
                     "last checkpoint before the rise")
    what = ["rising"] if rising else (["frozen at one value"] if frozen else [])
    summary = (f"{len(rows)} training job(s) in {region} not converging: " +
               " and ".join((["loss " + what[0]] if what else []) + (["gradient norm exploding"] if exploding else [])))
    zs = [float(r["z"]) for r in rows if r["diverging"] or r["frozen"]]
    zs += [float(r["g_z"]) for r in exploding if not r["g_nonfinite"]]
    return summary, "; ".join(parts), (max(zs) if zs else None)


def detect_convergence(ctx) -> list[Finding]:
    """Tickets for diverging jobs and failed checkpoints (see the module docstring); nothing without history."""
    history = getattr(ctx, "loss_history", None)
    if history is None or history.empty:
        return []
    out = []
    prepared = getattr(ctx, "prepared", None)
    if prepared is not None and getattr(prepared, "loss", None) is not None:
        # a range's look-back converted once (prepare_range): this partition's window is a slice of it
        arrays = prepared.loss.window(ctx.end - CONVERGENCE_LOOKBACK, ctx.end)
    else:
        arrays = loss_arrays(history).window(None, ctx.end)
    # frames of the flagged jobs only (a partition judges a hundred jobs and flags none on a healthy cluster)
    div = _divergence_values(arrays, ctx.start)
    flag_div = None if div is None else div["diverging"] | div["frozen"]
    grad = _gradient_values(arrays, ctx.start)
    flag_grad = None if grad is None else grad["exploding"]
    ck = _checkpoint_values(arrays, ctx.start)
    flag_ck = None if ck is None else ck["attempts"] >= CHECKPOINT_ATTEMPTS
    if not any(f is not None and f.any() for f in (flag_div, flag_grad, flag_ck)):
        return out  # (no frame at all: even an empty one costs a millisecond, and most partitions flag nothing)
    bad = _frame(div, _DIVERGENCE_COLUMNS, flag_div)
    exploding = _frame(grad, _GRADIENT_COLUMNS, flag_grad)
    if len(exploding):  # one row per job: its loss verdict (if flagged) beside its gradient norm's
        bad = bad.merge(exploding, on="job_id", how="outer", sort=True)
        for c in ("diverging", "frozen", "exploding"):
            bad[c] = bad[c].map(lambda v: v is True or v is np.True_)  # (NaN: the job is not in that frame)
    else:
        bad = bad.assign(exploding=False)
    failed = _frame(ck, _CHECKPOINT_COLUMNS, flag_ck)
    where = _region_of(ctx, set(bad["job_id"]) | set(failed["job_id"]))
    for det, frame in (("training_divergence", bad), ("checkpoint_failure", failed)):
        by_region: dict = {}
        for r in frame.to_dict("records"):
            region, nodes = where.get(r["job_id"], ("*", []))
            by_region.setdefault(region, []).append((r, nodes))
        for region, items in by_region.items():
            jobs = sorted(r["job_id"] for r, _ in items)
            nodes = sorted({n for _, ns in items for n in ns})
            if det == "training_divergence":
                summary, evidence, value = _divergence_text(region, [r for r, _ in items])
            else:
                summary = f"{len(jobs)} training job(s) in {region} fail to write checkpoints"
                evidence = (f"{max(r['attempts'] for r, _ in items)} checkpoint attempts without the durable "
                            f"checkpoint step advancing (jobs {', '.join(jobs[:5])}): a crash now loses the work "
                            f"since; check the checkpoint store's quota, credentials and write errors")
                value = float(max(r["attempts"] for r, _ in items))
            out.append(Finding(det, "software", "ticket", region, f"{det}|{region}", nodes=nodes,
                               summary=summary, evidence=evidence + ". Runbook: docs/runbooks.md#software",
                               value=value))
    return out
