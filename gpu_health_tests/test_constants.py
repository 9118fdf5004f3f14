"""Shared constants are defined once (gpu_health/constants.py) and every module uses that definition."""

import re
from pathlib import Path

import pandas as pd

import gpu_health
from gpu_health import constants as C
from gpu_health.metrics import device, goodput
from gpu_health.sources import dcgm_fields as F

ROOT = Path(gpu_health.__file__).resolve().parent

# A partition-width literal: the 5-minute Timedelta, its frequency string or its cron schedule.
PARTITION_LITERAL = re.compile(r'Timedelta\(\s*minutes\s*=\s*5\s*\)|Timedelta\(\s*"5\s*min"\s*\)|"5min"|"5T"|"\*/5 \* \* \* \*"')
# A line that holds a 5-minute span which is not the partition says so.
NOT_THE_PARTITION = "# not the partition"

# Files that still write the width themselves: they were owned by parallel changes when constants.py was added and
# are switched to it after those merge. The list only shrinks: a test fails when a listed file no longer has one.
PENDING = frozenset({
    "cli.py", "contracts/validate.py", "defs/alerting/sensors.py", "defs/kpis/assets.py", "diagnosis/alerts.py",
    "diagnosis/decompose.py", "diagnosis/detect.py", "metrics/baselines.py", "metrics/finance.py",
    "metrics/goodput.py", "metrics/kpi_baselines.py", "metrics/kpis.py",
    "sources/landing.py", "sources/read.py",
})


def _literal_lines() -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel == "constants.py":
            continue
        hits = [f"{rel}:{n}: {line.strip()}" for n, line in enumerate(path.read_text().splitlines(), 1)
                if PARTITION_LITERAL.search(line) and NOT_THE_PARTITION not in line]
        if hits:
            out[rel] = hits
    return out


def test_partition_constants_agree():
    assert C.PARTITION == pd.Timedelta(C.PARTITION_FREQ) == pd.Timedelta(minutes=5)
    assert pd.Timestamp("2026-11-03T14:07:31Z").floor(C.PARTITION_FREQ) == pd.Timestamp("2026-11-03T14:05Z")
    assert C.PARTITION_CRON.startswith(f"*/{int(C.PARTITION / C.MINUTE)} ")


def test_partition_width_is_written_once():
    found = _literal_lines()
    new = {f: hits for f, hits in found.items() if f not in PENDING}
    assert not new, ("use gpu_health.constants (PARTITION, PARTITION_FREQ, PARTITION_CRON) instead of a 5-minute "
                     "literal, or mark a span that is not the partition with '# not the partition: why':\n"
                     + "\n".join(h for hits in new.values() for h in hits))


def test_pending_list_only_shrinks():
    found = _literal_lines()
    done = sorted(f for f in PENDING if f not in found)
    assert not done, f"these files no longer write the partition width: remove them from PENDING: {done}"


def test_fatal_xids_are_the_dcgm_field_maps():
    assert C.FATAL_XIDS is F.XID_GPU_FAULT
    assert goodput.XID_GPU_FAULT is C.FATAL_XIDS
    # the three codes the two old sets disagreed on: a contained ECC error (94) leaves the GPU usable; GSP timeouts
    # and errors (119, 120) follow driver and firmware bugs -- neither is a GPU fault
    assert not {94, 119, 120} & C.FATAL_XIDS
    assert 94 in F.XID_MEMORY_WARNING and {119, 120} <= F.XID_SOFTWARE_RESET
    assert C.RESET_XIDS == C.FATAL_XIDS | F.XID_SOFTWARE_RESET


def test_busy_thresholds_mean_what_they_are_named():
    # the loss tree's 'a kernel ran' bar and the device module's 'reported busy' bar are different facts
    assert goodput.BUSY_UTIL_PCT == C.KERNEL_ACTIVE_UTIL_PCT
    assert goodput.BUSY_SM == C.KERNEL_ACTIVE_SM
    assert device.BUSY_UTIL_PCT == C.REPORTED_BUSY_UTIL_PCT
    assert C.KERNEL_ACTIVE_UTIL_PCT < C.REPORTED_BUSY_UTIL_PCT


def test_day_chunks_cut_at_midnights_and_every_length_after_them():
    """A range's pieces: UTC days, each cut again every ``length`` after its midnight (not after the range's start,
    so two runs of a day cut it alike)."""
    from gpu_health.constants import day_chunks

    t = pd.Timestamp("2026-11-03T09:10:00Z")
    end = pd.Timestamp("2026-11-04T13:00:00Z")
    days = list(day_chunks(t, end))
    assert days == [(t, pd.Timestamp("2026-11-04T00:00:00Z")), (pd.Timestamp("2026-11-04T00:00:00Z"), end)]
    halves = list(day_chunks(t, end, pd.Timedelta(hours=12)))
    cuts = ["2026-11-03T09:10", "2026-11-03T12:00", "2026-11-04T00:00", "2026-11-04T12:00", "2026-11-04T13:00"]
    assert halves == [(pd.Timestamp(a, tz="UTC"), pd.Timestamp(b, tz="UTC")) for a, b in zip(cuts, cuts[1:])]
    assert [b - a for a, b in day_chunks(t, t + pd.Timedelta(hours=1), pd.Timedelta(minutes=25))] == \
        [pd.Timedelta(minutes=m) for m in (25, 25, 10)]  # 09:10 is 22 x 25 min after midnight: 09:35, 10:00, 10:10
