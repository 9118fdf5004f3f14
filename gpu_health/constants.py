"""Facts the whole package shares, each defined once.

Rule: a number or set that two modules must agree on lives here (or, for the
meaning of a DCGM field or an Xid, in :mod:`gpu_health.sources.dcgm_fields`,
re-exported here), and every module imports it. A copied constant drifts: the
issue that introduced this module found two fatal-Xid sets disagreeing on Xid
94, 119 and 120, a 'busy' utilization of 5 % in one module and 50 % in another
(two different meanings under one name), and the 5-minute partition width
written about 50 times.

This module imports no Dagster and no storage, so every layer may import it.
"""

from __future__ import annotations

import pandas as pd

from gpu_health.sources import dcgm_fields as _dcgm

# --- the partition ---------------------------------------------------------------------------------------------------
# Width of one partition: the unit every derived table is computed, stored and alerted on. Five minutes is the
# seeds' detection budget (a high-severity fault paged within 15 minutes leaves room for three partitions: one to
# see it, one to corroborate it, one of grace for late data) and a multiple of every telemetry clock (DCGM and node
# exporters sample at <= 1 minute, so a partition holds >= 5 samples of each series).
PARTITION = pd.Timedelta(minutes=5)
# The same width as a pandas frequency string (``ts.floor(PARTITION_FREQ)``, ``pd.date_range(..., freq=...)``).
PARTITION_FREQ = "5min"
# The same width as a cron schedule (Dagster's TimeWindowPartitionsDefinition) and the partition key format.
PARTITION_CRON = "*/5 * * * *"
PARTITION_KEY_FMT = "%Y-%m-%d-%H:%M"
# One sample of minute-grain telemetry: the grid the simulator, the contracts and the loss tree share (DCGM
# exporter's and node exporter's default scrape interval is <= 60 s; a GPU-minute is the loss tree's unit).
MINUTE = pd.Timedelta(minutes=1)

if PARTITION != pd.Timedelta(PARTITION_FREQ) or PARTITION % MINUTE:  # pragma: no cover - a declaration error
    raise ValueError("constants: PARTITION, PARTITION_FREQ and MINUTE disagree")

# The piece of a day a range's 5-minute steps compute at once on the bulk path (``direct.RUN_CHUNK``, cut by
# :func:`day_chunks` every PIECE after midnight) and the loss tree's chunk within any run (``compute.CHUNK``): one
# length, so that the loss tree never cuts a piece again -- each of its chunks costs ~0.1 s of set-up over the
# history it looks back to, and 6-hour chunks starting where a range started cut each 8-hour piece in two (the bulk
# week's loss tree ran 6 chunks a day instead of 3). Why 8 hours: see ``direct.RUN_CHUNK``.
PIECE = pd.Timedelta(hours=8)


def day_chunks(start: pd.Timestamp, end: pd.Timestamp, length: pd.Timedelta | None = None):
    """``[start, end)`` cut at UTC midnights: the pieces a range is simulated, run and replayed in (a run covers at
    most a day: the landing zone's date folders, a Dagster single-run backfill of a day's partitions). ``length``
    (a day at most): each day cut again every ``length`` after its midnight (the bulk path's pieces)."""
    t = start
    while t < end:
        nxt = min((t + pd.Timedelta(days=1)).normalize(), end)
        if length is not None:
            midnight = t.normalize()
            nxt = min(nxt, midnight + ((t - midnight) // length + 1) * length)
        yield t, nxt
        t = nxt


# --- Xids --------------------------------------------------------------------------------------------------------------
# The GPU is unusable until a reset or an RMA and the cause is the hardware (NVIDIA's Xid catalogue): a GPU-minute
# with one of these is hardware-unavailable in the loss tree and hardware evidence for the detectors. The one
# definition is the DCGM field map's (sources/dcgm_fields.py); not in it, by the same catalogue: 94 (contained ECC
# error: the process dies, the GPU survives -- a ticket), 119 and 120 (GSP RPC timeout / GSP error: a reset is
# needed, but they follow driver and firmware bugs, so they are evidence for software, not for the GPU).
FATAL_XIDS: frozenset[int] = _dcgm.XID_GPU_FAULT
# Every Xid after which the GPU needs a reset, whatever the cause (node health in the Prometheus adapter).
RESET_XIDS: frozenset[int] = _dcgm.XID_NEEDS_RESET

# --- device activity: two thresholds, two meanings ---------------------------------------------------------------------
# A kernel ran on the GPU in the minute: DCGM_FI_DEV_GPU_UTIL (share of the sample period with any kernel resident)
# at least 5 % and, where reported, SM activity at least 0.05. Below both the allocated GPU did nothing (the loss
# tree's ``allocated_idle``; the stall detector's "no kernel"). 5 % is three seconds of a minute: above the
# exporter's noise floor on an idle GPU (0-1 %) and below any real training step's duty cycle, on any SKU.
KERNEL_ACTIVE_UTIL_PCT = 5.0
KERNEL_ACTIVE_SM = 0.05
# The utilization counter reports the GPU busy at least half the minute: what a utilization dashboard shows as a
# well-used GPU, and exactly what a dummy kernel games (gaming KPIs and detector: "reported busy" vs the device's
# own SM / tensor / power activity). Half the period separates a GPU that mostly runs kernels from one that mostly
# waits (DCGM's profiling guide: ineffective use below SM activity 0.5), on any SKU.
REPORTED_BUSY_UTIL_PCT = 50.0

# --- robust scatter --------------------------------------------------------------------------------------------------
# A Gaussian's standard deviation is 1.4826 x its median absolute deviation: the scale that turns a MAD into a sigma
# wherever a threshold is a number of robust standard deviations of the cluster's own data.
MAD_TO_SIGMA = 1.4826
