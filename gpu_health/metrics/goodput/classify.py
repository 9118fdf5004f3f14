"""The state-precedence rule (the package docstring), in one place.

A reporting GPU-minute (a gpu_telemetry row) is split over the states by :func:`reported_state_weights`; an
expected GPU-minute that did not report gets one state from :func:`missing_state`. Everything else in the package
computes the flags these two functions read; :func:`_progress_split` and :func:`_baseline_arrays` the efficiency of
a progressing minute against its baseline.
"""

import numpy as np
import pandas as pd

from gpu_health.constants import PARTITION, PARTITION_MINUTES
from gpu_health.metrics.goodput.states import STATES


DOWN_HEALTH = 2  # node health codes (compute_states): 0 ok, 1 degraded, 2 down, 3 drained; >= 2: unschedulable


def reported_state_weights(*, has_job, in_maint, fatal, health, lost, busy, reports, interactive, has_row, steps,
                           progress: dict, blocked_fraction) -> dict[str, np.ndarray]:
    """The share of each reporting GPU-minute (one row per GPU-minute, boolean / float arrays) in each state of
    :data:`STATES`; the shares of a row sum to 1.

    Precedence (first that applies): ``maintenance`` (unallocated inside a planned window) > ``hw_unavailable``
    (a fatal Xid / DBE this minute, or unallocated on a down / drained node outside a window) > unallocated:
    ``idle_blocked`` for the ``blocked_fraction(idle)`` share of the idle GPUs pending jobs wait for, the rest
    ``idle_no_demand`` > allocated: ``failure_loss`` (``lost``: after the last checkpoint of a job failing in
    its partition) > ``allocated_idle`` (not ``busy``) > ``allocated_unproductive`` (busy, no training
    metrics, not a notebook; or a minute with 0 steps that is not mostly checkpointing -- that one is
    ``slowdown_checkpoint``) > ``productive`` for a busy notebook or a reporting job between its rows, and for
    a progressing minute ``productive`` x efficiency, the rest split over the slowdowns (:func:`_progress_split`).
    """
    n = len(has_job)
    eff, ck, slow = progress["eff"], progress["ck"], progress["slow"]
    ex_io, ex_net, ex_cmp, excess, tot = (progress[k] for k in ("ex_io", "ex_net", "ex_cmp", "excess", "tot"))
    W = {s_: np.zeros(n) for s_ in STATES}
    unalloc = ~has_job
    maint = unalloc & in_maint
    W["maintenance"] = maint.astype(float)
    hw = (fatal | (unalloc & (health >= DOWN_HEALTH) & ~in_maint)) & ~maint
    W["hw_unavailable"] = hw.astype(float)
    idle = unalloc & ~hw & ~maint
    alloc = has_job & ~hw
    W["failure_loss"] = (alloc & lost).astype(float)
    live = alloc & ~lost
    W["allocated_idle"] = (live & ~busy).astype(float)
    working = live & busy
    W["allocated_unproductive"] = (working & ~reports & ~interactive).astype(float)
    zero_steps = working & has_row & (np.nan_to_num(steps) == 0)
    ck_minute = zero_steps & (ck >= 20 / 60)
    W["slowdown_checkpoint"] = ck_minute.astype(float)
    W["allocated_unproductive"] += (zero_steps & ~ck_minute).astype(float)
    nb = working & ~reports & interactive
    between = working & reports & ~has_row  # a reporting job with no row this minute (start-up / tear-down)
    prog = working & has_row & (np.nan_to_num(steps) > 0)
    W["productive"] = (nb | between).astype(float) + np.where(prog, eff * (1 - ck), 0.0)
    W["slowdown_checkpoint"] += np.where(prog, ck, 0.0)
    W["slowdown_data_io"] = np.where(prog, slow * ex_io / tot, 0.0)
    W["slowdown_network"] = np.where(prog, slow * ex_net / tot, 0.0)
    W["slowdown_compute"] = np.where(prog, slow * np.where(excess > 0, ex_cmp / tot, 1.0), 0.0)
    fb = blocked_fraction(idle)
    W["idle_blocked"] = np.where(idle, fb, 0.0)
    W["idle_no_demand"] = np.where(idle, 1 - fb, 0.0)
    return W


def missing_state(silent: np.ndarray, in_maint: np.ndarray, hw_corroborated: np.ndarray) -> np.ndarray:
    """The state of expected GPU-minutes that did not report: ``no_data`` while their region is silent, else
    ``maintenance`` inside a planned window, else ``hw_unavailable`` where something besides the absence points
    at the hardware (:func:`hardware_corroboration`), else ``no_data`` (missing is not broken)."""
    return np.where(silent, "no_data", np.where(in_maint, "maintenance",
                                                np.where(hw_corroborated, "hw_unavailable", "no_data")))


def _progress_split(st, loader, sync, ckt, base, base_ld, base_sy) -> dict[str, np.ndarray]:
    """Per row: efficiency against the baseline step time (``eff``), checkpoint share of the minute (``ck``),
    the slowdown share (``slow``) and the step-time excess over the baseline split into data loading, gradient
    sync and the compute remainder (``ex_io``, ``ex_net``, ``ex_cmp``; ``excess``; ``tot`` its guarded total)."""
    with np.errstate(invalid="ignore"):  # NaN step times (no row this minute) propagate by design
        base = np.where(np.isnan(base), st, base)  # no baseline yet: the job is its own baseline
        eff = np.clip(np.where(st > 0, base / st, 1.0), 0.0, 1.0)
        ck = np.clip(np.nan_to_num(ckt) / 60.0, 0.0, 1.0)
        excess = np.clip(np.nan_to_num(st - base), 0, None)
        ex_io = np.nan_to_num(np.clip(loader - np.where(np.isnan(base_ld), loader, base_ld), 0, None))
        ex_net = np.nan_to_num(np.clip(sync - np.where(np.isnan(base_sy), sync, base_sy), 0, None))
        scale = np.where(ex_io + ex_net > excess, excess / np.maximum(ex_io + ex_net, 1e-12), 1.0)
        ex_io, ex_net = ex_io * scale, ex_net * scale
        ex_cmp = np.clip(excess - ex_io - ex_net, 0, None)
        slow = (1 - eff) * (1 - ck)
        tot = np.maximum(excess, 1e-12)
    return {"eff": eff, "ck": ck, "slow": slow, "ex_io": ex_io, "ex_net": ex_net, "ex_cmp": ex_cmp,
            "excess": excess, "tot": tot}


def _baseline_arrays(baseline, start, t_idx, g_job, lookup, job_uni, sku, row_gpus):
    """Baseline step / loader / sync time per row, looked up by (partition, signature)."""
    n = len(t_idx)
    if baseline is None or baseline.empty or not n or not len(job_uni):
        return np.full(n, np.nan), np.full(n, np.nan), np.full(n, np.nan)
    b = baseline
    per_partition = "partition_start" in b.columns
    sig_b = pd.MultiIndex.from_arrays([np.asarray(b["model_type"], dtype=object), np.asarray(b["sku"], dtype=object),
                                       b["gpus"].to_numpy(np.int64)])
    job_model = np.asarray(lookup["model_type"], dtype=object)
    jj = np.clip(g_job, 0, None)
    sig_uni = sig_b.unique()
    sb = sig_uni.get_indexer(sig_b)
    if b[["model_type", "sku", "gpus"]].isna().any().any():  # null signature parts: match tuples as pandas does
        sig_r = pd.MultiIndex.from_arrays([np.where(g_job >= 0, job_model[jj], None), np.asarray(sku, dtype=object),
                                           np.asarray(row_gpus, dtype=np.int64)])
        sr = sig_uni.get_indexer(sig_r)
    else:  # each row's signature by level codes (model per job, SKU and GPUs per row): no MultiIndex of rows
        levels = [pd.Index(pd.unique(np.asarray(sig_uni.get_level_values(i), dtype=object if i < 2 else np.int64)))
                  for i in range(3)]
        width = [len(x) for x in levels]
        uk = [levels[i].get_indexer(np.asarray(sig_uni.get_level_values(i), dtype=object if i < 2 else np.int64))
              for i in range(3)]
        key_uni = pd.Index((uk[0].astype(np.int64) * width[1] + uk[1]) * width[2] + uk[2])
        m_row = levels[0].get_indexer(job_model)[jj]
        s_row = levels[1].get_indexer(np.asarray(sku, dtype=object))
        g_row = levels[2].get_indexer(np.asarray(row_gpus, dtype=np.int64))
        valid = (g_job >= 0) & (m_row >= 0) & (s_row >= 0) & (g_row >= 0)
        key_row = (m_row.astype(np.int64) * width[1] + s_row) * width[2] + g_row
        sr = np.where(valid, key_uni.get_indexer(np.where(valid, key_row, -1)), -1)
    P = int(t_idx.max() // PARTITION_MINUTES) + 1 if per_partition else 1
    pb = ((b["partition_start"] - start) // PARTITION).to_numpy(np.int64) if per_partition else np.zeros(len(b), np.int64)
    ok = (pb >= 0) & (pb < P) & (sb >= 0)
    S = len(sig_uni)
    pr = (t_idx // PARTITION_MINUTES) if per_partition else np.zeros(n, np.int64)
    idx = np.where(sr >= 0, pr * S + sr, 0)
    found = (sr >= 0) & (g_job >= 0)
    out = []
    for col in ("step_time_s", "data_loader_time_s", "grad_sync_time_s"):
        table = np.full(P * S, np.nan)
        table[pb[ok] * S + sb[ok]] = b[col].to_numpy(dtype=float, na_value=np.nan)[ok]
        out.append(np.where(found, table[idx], np.nan))
    return tuple(out)
