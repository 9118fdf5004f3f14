"""Facts the whole package shares, each defined once: the partition width and its forms, DCGM and device facts
(Xid classes, clock-event reason bits, the slowdown temperature, the two busy thresholds), cause families, owners
and severities.

Rule: a number or set that two modules must agree on lives here and every module imports it; a copied constant
drifts (two fatal-Xid sets that disagree, one name for two thresholds). This module imports nothing of the package
(the floor every other floor stands on), so every layer -- adapters, metrics, detectors, the simulator -- may
import it.
"""

from __future__ import annotations

import re
from enum import StrEnum

import pandas as pd

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
# The key of a daily partition (Dagster's DailyPartitionsDefinition format).
DAILY_KEY_FMT = "%Y-%m-%d"
# One sample of minute-grain telemetry: the grid the simulator, the contracts and the loss tree share (DCGM
# exporter's and node exporter's default scrape interval is <= 60 s; a GPU-minute is the loss tree's unit).
MINUTE = pd.Timedelta(minutes=1)

# How many partitions a complete UTC day has: a daily table computed from fewer is a partial day.
PARTITIONS_PER_DAY = pd.Timedelta(days=1) // PARTITION

# The same width in nanoseconds (integer arithmetic on int64 timestamps: ``ns - ns % PARTITION_NS`` floors to the
# partition) and in whole minutes (a partition's count of minute-grain samples per series).
PARTITION_NS = PARTITION.value
PARTITION_MINUTES = PARTITION // MINUTE

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
# Xid classes (NVIDIA's Xid catalogue, "Xid Errors", r550+): the one place the project says what an Xid means; the
# loss tree, the detectors, the baselines and the Prometheus adapter import these.
#
# XID_GPU_FAULT: the GPU is unusable until a reset or an RMA, and the cause is the hardware: double-bit ECC (48),
# micro-controller halt (62), row-remap failure (64), NVLink (74), fallen off the bus (79), uncontained ECC (95),
# unrecovered ECC (140). The seeds cordon on these.
XID_GPU_FAULT = frozenset({48, 62, 64, 74, 79, 95, 140})
# XID_MEMORY_WARNING: memory trouble the GPU survives -- a row remapped or page retired (63), a high single-bit rate
# (92), an ECC error contained to one process (94), a micro-controller warning (61): a ticket to watch the GPU,
# never a page on its own.
XID_MEMORY_WARNING = frozenset({61, 63, 92, 94})
# XID_SOFTWARE_RESET: GSP RPC timeouts and GSP errors (119, 120) leave the GPU needing a reset, but they follow
# driver and firmware bugs (they cluster on a new driver's cohort): evidence for software.
XID_SOFTWARE_RESET = frozenset({119, 120})
# Application Xids (13 graphics engine exception, 31 memory page fault, 43 reset channel, 45 preemptive cleanup)
# are the job's own faults: evidence for the job, never for the GPU.
XID_APPLICATION = frozenset({13, 31, 43, 45})
# Every Xid after which the GPU needs a reset, whatever the cause (the Prometheus adapter's node health).
XID_NEEDS_RESET = XID_GPU_FAULT | XID_SOFTWARE_RESET
# A GPU-minute with a fatal Xid is hardware-unavailable in the loss tree and hardware evidence for the detectors.
FATAL_XIDS: frozenset[int] = XID_GPU_FAULT
RESET_XIDS: frozenset[int] = XID_NEEDS_RESET

# --- clock-event reasons (DCGM_FI_DEV_CLOCK_THROTTLE_REASONS / nvmlClocksEventReasons bits) ----------------------------
CLOCKS_IDLE = 0x1              # nothing to run: the clocks are down because the GPU is idle, not slowed
SW_POWER_CAP = 0x4             # the driver holds power at the board's limit
HW_SLOWDOWN = 0x8              # hardware slowdown (thermal or power brake asserted by the board)
SW_THERMAL = 0x20              # the driver slows the clocks for temperature
HW_THERMAL = 0x40              # the hardware slows the clocks for temperature
HW_POWER_BRAKE = 0x80          # the external power brake (the rack's or the PSU's)
POWER_BITS = SW_POWER_CAP | HW_POWER_BRAKE
THERMAL_BITS = SW_THERMAL | HW_THERMAL
# The reasons that slow a busy GPU below its clocks (the power cap is its normal operating point under load, so it
# is not among them): a slow-down in the loss tree, a bad minute for the step-time baselines.
SLOW_THROTTLE_BITS = HW_SLOWDOWN | SW_THERMAL | HW_THERMAL | HW_POWER_BRAKE
# NVIDIA's slowdown temperature for data-center GPUs (nvidia-smi -q "GPU Slowdown Temp" is 83-90 C on A100 / H100 /
# V100; the lowest is used): at or above it the thermal clock-event bit is the GPU protecting itself, not a transient.
THERMAL_TEMP_C = 83.0

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


# --- cause families, owners, severities -------------------------------------------------------------------------------
class CauseFamily(StrEnum):
    """Where a loss or an alert comes from: the goodput loss tree's families (framework.md) and the alerts'."""

    HARDWARE = "hardware"
    SOFTWARE = "software"
    SCHEDULING = "scheduling"
    DATA_IO = "data_io"
    NETWORK = "network"
    GAMING = "gaming"
    PLANNED = "planned"
    MISSING_DATA = "missing_data"
    FACILITY = "facility"
    CAPACITY = "capacity"  # idle with no demand: a sizing question, never an alert
    WASTE = "waste"  # allocated and idle: the owner's waste, a KPI, never an alert
    # the share of a progressing job's time spent saving its state: an overhead the job chose (its checkpoint
    # cadence), priced in finance, never an alert
    CHECKPOINT = "checkpoint"


# The families the decomposition attributes loss to (every family but facility: a facility fault shows in the loss
# tree as the hardware slow-down it causes; and but checkpoint: the decomposition attributes a grown checkpoint
# share to the storage it writes to, data_io).
LOSS_FAMILIES = tuple(f.value for f in CauseFamily if f not in (CauseFamily.FACILITY, CauseFamily.CHECKPOINT))
# The families an alert may name (each has a runbook section): capacity, waste and checkpoint are KPIs or finance's
# figures, never pages.
ALERT_FAMILIES = tuple(f.value for f in CauseFamily if f not in (CauseFamily.CAPACITY, CauseFamily.WASTE,
                                                                  CauseFamily.PLANNED, CauseFamily.CHECKPOINT))


class Owner(StrEnum):
    """Who owns a table and acts on its alerts."""

    INFRA = "infra"
    ML_PLATFORM = "ml_platform"
    FINANCE = "finance"


OWNERS = tuple(o.value for o in Owner)


class Severity(StrEnum):
    """What an alert asks of people: a page wakes someone, a ticket waits for working hours, a dashboard row is
    there to be looked at."""

    DASHBOARD = "dashboard"
    TICKET = "ticket"
    PAGE = "page"


SEVERITIES = ("page", "ticket", "dashboard")
# An alert's runbook text ends with its page's path in the repository: "... Runbook: docs/runbooks.md#hardware"
# (delivery links it under a base URL, the status page shows it alone: the text before it is the first action).
RUNBOOK_PATH = re.compile(r"Runbook:\s*(\S+?)\.?$")
SEVERITY_RANK = {Severity.DASHBOARD.value: 0, Severity.TICKET.value: 1, Severity.PAGE.value: 2}


# --- the loss tree's states ----------------------------------------------------------------------------------------------
# Every paid GPU-minute is in exactly one of these states (gpu_health.metrics.goodput says how it gets there), in
# the order of the loss tree's precedence; the derived tables' contracts check their state columns against this list
# and the loss tree, the KPIs and finance name the states from it.
LOSS_TREE_STATES = [
    "no_data", "maintenance", "hw_unavailable", "idle_blocked", "idle_no_demand", "allocated_idle",
    "allocated_unproductive", "failure_loss", "slowdown_data_io", "slowdown_network", "slowdown_checkpoint",
    "slowdown_compute", "productive",
]
# The states of a progressing minute that are not productive: the step-time excess and the checkpoint share.
SLOWDOWN_STATES = ["slowdown_data_io", "slowdown_network", "slowdown_checkpoint", "slowdown_compute"]
# The family of productive time: no cause, and on purpose no CauseFamily value (never a loss, never an alert);
# wasted_spend keeps its rows under it so that a day's USD over every family reconciles with Finance's bill.
PRODUCTIVE = "productive"
# Each state's family: a CauseFamily value for every loss state, PRODUCTIVE for productive time; as plain strings:
# they are written to tables as text (wasted_spend.cause_family, which holds SPEND_FAMILIES).
STATE_FAMILY = {
    "no_data": "missing_data", "maintenance": "planned", "hw_unavailable": "hardware", "idle_blocked": "scheduling",
    "idle_no_demand": "capacity", "allocated_idle": "waste", "allocated_unproductive": "gaming",
    "failure_loss": "software", "slowdown_data_io": "data_io", "slowdown_network": "network",
    "slowdown_checkpoint": CauseFamily.CHECKPOINT.value, "slowdown_compute": "hardware", "productive": PRODUCTIVE,
}
SPEND_FAMILIES = (*(f.value for f in CauseFamily), PRODUCTIVE)
