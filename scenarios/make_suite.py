"""Writes scenarios/suite/*.yaml: the evaluation suite (run once; the YAML files are what is reviewed).

One simulated week (Mon 2026-11-02 .. Mon 2026-11-09, weekday retrain waves Mon/Thu 01:00-09:00 UTC) per
incident kind with four incidents: two magnitudes x two scopes (one node vs a cohort / region), at awkward
times: mid-partition on a Tuesday afternoon, inside Thursday's retrain wave, right after a maintenance window
on Friday, and across midnight on Saturday. Plus a quiet week (two maintenance windows, benign deploys) that
must page nothing, a week of overlapping incidents of different families, and the brief's findings A and B.

The same weeks again on the second cluster profile, ``cluster: messy`` (other regions, SKUs, node
names, teams, uninstrumented work, collector gaps; gpu_health/sim/cluster.py), as ``*_messy.yaml``: a quiet week
with a benign rolling driver upgrade, and one week per incident kind, each also holding that rollout.

And on the third profile, ``cluster: field`` (written from the public traces: evening queues, jobs failing in their
first minutes, scrape-instant timestamps, renamed nodes), as ``*_field.yaml``: a quiet week, the failing rollout week
with a maintenance window opening in the middle of a wave, and the gpu_fell_off_bus, fragmentation and
priority_change weeks; ``smoke_field/`` holds one day of each incident kind of ``smoke/`` (numbered as there), the
failing rollout and the remote-storage slowdown; ``serving/quiet_week_serving_field.yaml`` the quiet week with the
serving and platform layers on.

A driver upgrade that breaks jobs as a real rollout does (``driver_rollout_week``, both profiles, and
``smoke_messy/15_driver_rollout.yaml``): a quarter of the nodes upgraded in waves with drains, half of the jobs
starting on an upgraded node failing in their first minutes with GPU Xids, some requeued, while a maintenance
window holds other nodes; the rollback two hours after the first wave.
"""

from pathlib import Path

import pandas as pd
import yaml

OUT = Path(__file__).parent / "suite"
WEEK = {"start": "2026-11-02T00:00:00Z", "end": "2026-11-09T00:00:00Z"}
TIMES = ["2026-11-03T14:07:00Z", "2026-11-05T04:13:00Z", "2026-11-06T04:03:00Z", "2026-11-07T23:52:00Z"]
MAINT = [{"kind": "maintenance", "start": "2026-11-06T02:00:00Z", "duration": "2h", "severity": "low",
          "scope": {"region": "us-east", "nodes": 4, "reason": "firmware update"}}]
# kind -> (high magnitude, low magnitude, narrow scope, wide scope, duration)
KINDS = {
    "gpu_ecc_fault": (1, 1, {"region": "us-east", "nodes": 1}, {"region": "eu-west", "nodes": 3}, "90m"),
    "gpu_fell_off_bus": (1, 2, {"region": "eu-west", "nodes": 1}, {"region": "us-east", "nodes": 2}, "60m"),
    "thermal_throttle": (0.38, 0.15, {"region": "us-east", "nodes": 1}, {"region": "eu-west", "nodes": 4}, "90m"),
    "driver_regression": (0.6, 0.25, {"region": "eu-west", "nodes": 2}, {"region": "us-east"}, "60m"),
    "framework_regression": (0.3, 0.12, {"team": "fraud-offline"}, {"fraction": 0.5}, "2h"),
    "priority_change": (3.0, 2.0, {"region": "us-east"}, {"region": "eu-west"}, "60m"),
    "fragmentation": (4.0, 2.5, {"region": "eu-west"}, {"region": "us-east"}, "60m"),
    "io_bottleneck": (0.5, 0.2, {"region": "us-east", "nodes": 2}, {"region": "eu-west"}, "60m"),
    "network_degradation": (0.4, 0.15, {"region": "eu-west", "nodes": 2}, {"region": "us-east", "nodes": 6}, "60m"),
    "dummy_workload": (0.5, 0.2, {"region": "us-east", "team": "ml-research"}, {"team": "personalization"}, "3h"),
    "training_stall": (1.0, 0.5, {"region": "us-east", "nodes": 2}, {"region": "eu-west", "nodes": 8}, "45m"),
    "collector_outage": (1, 1, {"region": "us-east"}, {"region": "eu-west"}, "30m"),
}


# the messy profile's names for the default's regions and teams
MESSY_NAMES = {"us-east": "us-central", "eu-west": "ap-southeast", "fraud-offline": "ads-ctr",
               "ml-research": "research-lab", "personalization": "recsys", "credit-risk": "risk-tabular"}
# a benign rolling driver upgrade over a quarter of the nodes: 4 batches 30 minutes apart, each drained 6 minutes
ROLLOUT = {"kind": "driver_upgrade", "ts": "2026-11-04T09:00:00Z",
           "scope": {"fraction": 0.25, "batches": 4, "every": "30m", "drain": "6m"},
           "from_version": "550.90.07", "to_version": "550.127.08", "description": "rolling driver upgrade"}


def week(kind: str, seed: int) -> dict:
    hi, lo, narrow, wide, duration = KINDS[kind]
    severity = "low" if kind == "collector_outage" else None
    incidents = []
    for i, (t, mag, scope) in enumerate(zip(TIMES, [hi, lo, hi, lo], [narrow, narrow, wide, wide])):
        incidents.append({"kind": kind, "start": t, "duration": duration,
                          "severity": severity or ("high" if mag == hi else "low"), "scope": scope, "magnitude": mag})
    return {"seed": seed, **WEEK, "incidents": incidents + MAINT}


def messy(doc: dict) -> dict:
    """A default-profile scenario moved to the messy profile: its regions and teams renamed, the rollout added."""
    def rename(v):
        if isinstance(v, dict):
            return {k: rename(x) for k, x in v.items()}
        if isinstance(v, list):
            return [rename(x) for x in v]
        return MESSY_NAMES.get(v, v) if isinstance(v, str) else v
    out = {"seed": doc["seed"], "start": doc["start"], "end": doc["end"], "cluster": "messy", **rename(
        {k: v for k, v in doc.items() if k not in ("seed", "start", "end")})}
    out["changes"] = list(out.get("changes", [])) + [ROLLOUT]
    return out


# a failing rolling upgrade: a quarter of the nodes in 5 waves 20 minutes apart, each drained 8 minutes; half the jobs
# starting on an upgraded node fail within 5 minutes; rolled back 2 hours after the first wave
def rollout_failing(start: str) -> dict:
    return {"kind": "driver_regression", "start": start, "duration": "2h", "severity": "high", "magnitude": 0.5,
            "scope": {"fraction": 0.25}, "to_version": "560.35.03",
            "rollout": {"waves": 5, "every": "20m", "drain": "8m", "fail_within": "5m", "failure_xids": [13, 31, 119],
                        "requeue": 0.4}}


ROLLOUT_WEEK = {"seed": 300, **WEEK, "incidents": [
    rollout_failing("2026-11-08T10:07:00Z"),
    {"kind": "maintenance", "start": "2026-11-08T09:30:00Z", "duration": "3h", "severity": "low",
     "scope": {"region": "eu-west", "nodes": 4, "reason": "rack power work"}}] + MAINT}
ROLLOUT_SMOKE = {"seed": 15, "start": "2026-11-03T06:00:00Z", "end": "2026-11-03T11:40:00Z", "cluster": "messy",
                 "incidents": [rollout_failing("2026-11-03T09:07:00Z"),
                               {"kind": "maintenance", "start": "2026-11-03T08:30:00Z", "duration": "3h", "severity": "low",
                                "scope": {"region": "ap-southeast", "nodes": 3, "reason": "rack power work"}}]}


QUIET_MESSY = {"seed": 8, **WEEK, "cluster": "messy", "incidents": [
    {"kind": "maintenance", "start": "2026-11-05T03:00:00Z", "duration": "3h", "severity": "low",
     "scope": {"region": "ap-southeast", "nodes": 6, "reason": "BIOS and BMC firmware"}},
    {"kind": "maintenance", "start": "2026-11-07T18:00:00Z", "duration": "4h", "severity": "low",
     "scope": {"region": "us-central", "nodes": 8, "reason": "cooling work"}}],
    "changes": [ROLLOUT,
                {"kind": "kernel_upgrade", "ts": "2026-11-05T06:10:00Z", "scope": {"region": "ap-southeast", "nodes": 6},
                 "from_version": "5.15.0-119-generic", "to_version": "5.15.0-122-generic",
                 "description": "benign kernel upgrade"}]}


# the field profile's names for the default's regions and teams (gpu_health/sim/cluster.py FIELD)
FIELD_NAMES = {"us-east": "us-west", "eu-west": "cn-east", "fraud-offline": "vc8Sj", "ml-research": "vcMod",
               "personalization": "vcpDC", "credit-risk": "vcJLV"}
# a benign rolling driver upgrade on the field profile's driver, as on the messy one
FIELD_ROLLOUT = {**ROLLOUT, "ts": "2026-11-04T18:00:00Z", "from_version": "535.54.03", "to_version": "535.183.01"}


def on_field(doc: dict, rollout: bool = True) -> dict:
    """A default-profile scenario moved to the field profile: its regions and teams renamed (and the benign
    rolling upgrade added)."""
    def rename(v):
        if isinstance(v, dict):
            return {k: rename(x) for k, x in v.items()}
        if isinstance(v, list):
            return [rename(x) for x in v]
        return FIELD_NAMES.get(v, v) if isinstance(v, str) else v
    out = {"seed": doc["seed"], "start": doc["start"], "end": doc["end"], "cluster": "field", **rename(
        {k: v for k, v in doc.items() if k not in ("seed", "start", "end", "cluster")})}
    changes = list(out.get("changes") or []) + ([FIELD_ROLLOUT] if rollout else [])
    out.pop("changes", None)
    return {**out, **({"changes": changes} if changes else {})}


def rollout_with_maintenance(start: str, region: str, reason: str) -> list[dict]:
    """The failing rollout, and a maintenance window that opens in the middle of its second wave's drain (the
    waves are 20 minutes apart and drain 8 minutes: 24 minutes after the first) and holds other nodes 2 hours."""
    t0 = pd.Timestamp(start)
    return [rollout_failing(start),
            {"kind": "maintenance", "start": (t0 + pd.Timedelta(minutes=24)).strftime("%Y-%m-%dT%H:%M:%SZ"),
             "duration": "2h", "severity": "low", "scope": {"region": region, "nodes": 4, "reason": reason}}]


QUIET_FIELD = {"seed": 9, **WEEK, "incidents": [
    {"kind": "maintenance", "start": "2026-11-04T02:00:00Z", "duration": "3h", "severity": "low",
     "scope": {"region": "us-west", "nodes": 6, "reason": "BIOS and BMC firmware"}},
    {"kind": "maintenance", "start": "2026-11-06T10:00:00Z", "duration": "4h", "severity": "low",
     "scope": {"region": "cn-east", "nodes": 10, "reason": "rack power work"}}],
    "changes": [{"kind": "kernel_upgrade", "ts": "2026-11-05T06:10:00Z", "scope": {"region": "cn-east", "nodes": 6},
                 "from_version": "4.18.0-513.el8.x86_64", "to_version": "4.18.0-553.el8.x86_64",
                 "description": "benign kernel upgrade"}]}
# one day, a Tuesday: the incident at 12:07 UTC, inside cn-east's evening pile-up (09-16 UTC), after 12 hours of
# history that hold us-west's (01-08 UTC)
FIELD_DAY = {"start": "2026-11-03T00:00:00Z", "end": "2026-11-04T00:00:00Z"}
FIELD_SMOKE = {
    "00_quiet": {"seed": 50, "incidents": [
        {"kind": "maintenance", "start": "2026-11-03T10:00:00Z", "duration": "3h", "severity": "low",
         "scope": {"region": "cn-east", "nodes": 6, "reason": "kernel and BIOS update"}}],
        "changes": [{"kind": "kernel_upgrade", "ts": "2026-11-03T13:10:00Z", "scope": {"region": "cn-east", "nodes": 6},
                     "from_version": "4.18.0-513.el8.x86_64", "to_version": "4.18.0-553.el8.x86_64",
                     "description": "benign kernel upgrade"}]},
    "02_gpu_fell_off_bus": {"seed": 52, "incidents": [
        {"kind": "gpu_fell_off_bus", "start": "2026-11-03T12:07:00Z", "duration": "60m", "severity": "high",
         "scope": {"region": "cn-east", "nodes": 1}}]},
    "03_thermal_throttle": {"seed": 53, "incidents": [
        {"kind": "thermal_throttle", "start": "2026-11-03T12:07:00Z", "duration": "60m", "severity": "high",
         "scope": {"region": "us-west", "nodes": 2}, "magnitude": 0.38}]},
    "06_priority_change": {"seed": 56, "incidents": [
        {"kind": "priority_change", "start": "2026-11-03T12:07:00Z", "duration": "60m", "severity": "high",
         "scope": {"region": "cn-east"}, "magnitude": 3.0}]},
    "15_driver_rollout": {"seed": 65, "incidents": rollout_with_maintenance("2026-11-03T12:07:00Z", "us-west",
                                                                           "rack power work")},
}
# the other incident kinds of scenarios/smoke, numbered and scoped as there (regions and teams renamed by
# FIELD_NAMES), seeded 50 + their number as the five above; the remote-storage case as smoke_messy's
FIELD_SMOKE_KINDS = {
    "01_gpu_ecc_fault": ("gpu_ecc_fault", {"region": "us-west", "nodes": 1}, None, "60m"),
    "04_driver_regression": ("driver_regression", {"region": "cn-east", "nodes": 3}, None, "60m"),
    "05_framework_regression": ("framework_regression", {"team": "vc8Sj"}, 0.3, "60m"),
    "07_fragmentation": ("fragmentation", {"region": "cn-east"}, None, "60m"),
    "08_io_bottleneck": ("io_bottleneck", {"region": "us-west", "nodes": 6}, None, "60m"),
    "09_network_degradation": ("network_degradation", {"region": "cn-east", "nodes": 4}, None, "60m"),
    "10_dummy_workload": ("dummy_workload", {"region": "us-west", "team": "vcMod"}, None, "60m"),
    "11_training_stall": ("training_stall", {"region": "us-west", "nodes": 4}, None, "60m"),
    "12_maintenance": ("maintenance", {"region": "cn-east", "nodes": 4}, None, "60m"),
    "13_collector_outage": ("collector_outage", {"region": "us-west"}, None, "20m"),
    "16_remote_storage": ("io_bottleneck", {"region": "us-west", "nodes": 16, "storage": "remote"}, None, "60m"),
}


def field_smoke_day(name: str, kind: str, scope: dict, magnitude: float | None, duration: str) -> dict:
    """One FIELD_SMOKE_KINDS entry as a scenario: the incident at 12:07 UTC, low for the kinds that must not page."""
    return {"seed": 50 + int(name[:2]), "incidents": [
        {"kind": kind, "start": "2026-11-03T12:07:00Z", "duration": duration,
         "severity": "low" if kind in ("maintenance", "collector_outage") else "high", "scope": scope,
         **({"magnitude": magnitude} if magnitude is not None else {})}]}


FIELD_SMOKE = dict(sorted({**FIELD_SMOKE, **{name: field_smoke_day(name, *spec)
                                             for name, spec in FIELD_SMOKE_KINDS.items()}}.items()))


def smoke_field() -> None:
    """scenarios/smoke_field/: one day of each incident kind of scenarios/smoke (and the failing rollout) on the
    field profile, at its full size."""
    out = OUT.parent / "smoke_field"
    out.mkdir(exist_ok=True)
    for name, doc in FIELD_SMOKE.items():
        with open(out / f"{name}.yaml", "w") as f:
            f.write(f"# One day on the field profile: {name[3:].replace('_', ' ')} at 12:07 UTC (cn-east's evening pile-up).\n"
                    "# Generated by scenarios/make_suite.py.\n")
            yaml.safe_dump({"seed": doc["seed"], **FIELD_DAY, "cluster": "field",
                            **{k: v for k, v in doc.items() if k != "seed"}}, f, sort_keys=False)


def field_weeks() -> None:
    """The field profile's weeks: a quiet one, the failing rollout, and three incident kinds."""
    write("quiet_week_field", {**QUIET_FIELD, "cluster": "field", "changes": QUIET_FIELD["changes"] + [FIELD_ROLLOUT]},
          "A quiet week on the field profile: evening queues, early job failures, scrape-instant timestamps, renamed "
          "nodes, two maintenance windows, a benign rolling driver upgrade and a kernel upgrade. Must page nothing.")
    rollout = on_field({**ROLLOUT_WEEK, "seed": 302, "incidents": rollout_with_maintenance(
        "2026-11-08T10:07:00Z", "eu-west", "rack power work") + MAINT})
    write("driver_rollout_week_field", rollout,
          "The failing driver rollout week on the field profile; a maintenance window opens in the middle of the "
          "second wave, and the week also holds the benign rolling driver upgrade.")
    for i, kind in enumerate(("gpu_fell_off_bus", "fragmentation", "priority_change")):
        write(f"{kind}_week_field", on_field(week(kind, 400 + list(KINDS).index(kind))),
              f"One week on the field profile, four {kind} incidents (2 magnitudes x 2 scopes), a rolling driver upgrade.")
    with open(OUT.parent / "serving" / "quiet_week_serving_field.yaml", "w") as f:
        f.write("# The suite's field quiet week with the serving and platform layers on. Must page nothing.\n"
                "# Generated by scenarios/make_suite.py.\n")
        yaml.safe_dump({**QUIET_FIELD, "cluster": {"profile": "field", "serving": True, "platform": True},
                        "changes": QUIET_FIELD["changes"] + [FIELD_ROLLOUT]}, f, sort_keys=False)


def smoke_messy() -> None:
    """scenarios/smoke_messy/: the smoke suite (one incident of each kind, 3 h of history) on the messy profile,
    so that every incident kind is scored on both profiles in minutes (the weeks take hours)."""
    out = OUT.parent / "smoke_messy"
    out.mkdir(exist_ok=True)
    for path in sorted((OUT.parent / "smoke").glob("*.yaml")):
        doc = messy(yaml.safe_load(path.read_text()))
        doc["changes"] = [c for c in doc["changes"] if c is not ROLLOUT] or None
        doc = {k: v for k, v in doc.items() if v is not None}
        with open(out / path.name, "w") as f:
            f.write(f"# scenarios/smoke/{path.name} on the messy profile.\n# Generated by scenarios/make_suite.py.\n")
            yaml.safe_dump(doc, f, sort_keys=False)
    with open(out / "15_driver_rollout.yaml", "w") as f:
        f.write("# Smoke scenario on the messy profile: a driver upgrade rolled out in drained waves over a quarter of the\n"
                "# nodes breaks half of the jobs starting on them (GPU Xids, some requeued), after 3 hours of history,\n"
                "# while a maintenance window holds other nodes; rolled back 2 hours after the first wave.\n"
                "# Generated by scenarios/make_suite.py.\n")
        yaml.safe_dump(ROLLOUT_SMOKE, f, sort_keys=False)


def main() -> None:
    smoke_messy()
    smoke_field()
    OUT.mkdir(exist_ok=True)
    field_weeks()
    for i, kind in enumerate(KINDS):
        write(f"{kind}_week", week(kind, 100 + i), f"One week, four {kind} incidents (2 magnitudes x 2 scopes).")
        write(f"{kind}_week_messy", messy(week(kind, 200 + i)),
              f"One week on the messy profile, four {kind} incidents (2 magnitudes x 2 scopes), a rolling driver upgrade.")
    write("driver_rollout_week", ROLLOUT_WEEK,
          "One week ending in a driver upgrade rolled out in drained waves that breaks half of the jobs starting on the "
          "upgraded quarter of the nodes, until its rollback; a maintenance window holds other nodes meanwhile.")
    write("driver_rollout_week_messy", messy({**ROLLOUT_WEEK, "seed": 301}),
          "The failing driver rollout week on the messy profile, which also holds the benign rolling driver upgrade.")
    write("quiet_week_messy", QUIET_MESSY,
          "A quiet week on the messy profile: uninstrumented work, collector gaps, cron retrains, two maintenance "
          "windows, a benign rolling driver upgrade and a kernel upgrade. Must page nothing.")
    write("quiet_week", {"seed": 7, **WEEK, "incidents": [
        {"kind": "maintenance", "start": "2026-11-04T02:00:00Z", "duration": "3h", "severity": "low",
         "scope": {"region": "eu-west", "nodes": 6, "reason": "kernel and BIOS update"}},
        {"kind": "maintenance", "start": "2026-11-07T20:00:00Z", "duration": "4h", "severity": "low",
         "scope": {"region": "us-east", "nodes": 10, "reason": "rack power work"}}],
        "changes": [
            {"kind": "kernel_upgrade", "ts": "2026-11-04T05:10:00Z", "scope": {"region": "eu-west", "nodes": 6},
             "from_version": "6.8.0-49-generic", "to_version": "6.8.0-51-generic", "description": "benign kernel upgrade"},
            {"kind": "driver_upgrade", "ts": "2026-11-05T15:00:00Z", "scope": {"region": "us-east", "nodes": 8},
             "from_version": "550.127.08", "to_version": "550.144.03", "description": "benign driver upgrade"}]},
        "A quiet week: retrain waves, two maintenance windows, two benign deploys. Must page nothing.")
    write("overlaps_week", {"seed": 31, **WEEK, "incidents": [
        {"kind": "thermal_throttle", "start": "2026-11-03T10:02:00Z", "duration": "90m", "severity": "high",
         "scope": {"region": "us-east", "nodes": 2}, "magnitude": 0.38},
        {"kind": "io_bottleneck", "start": "2026-11-03T10:31:00Z", "duration": "60m", "severity": "high",
         "scope": {"region": "eu-west", "nodes": 4}, "magnitude": 0.5},
        {"kind": "driver_regression", "start": "2026-11-05T03:11:00Z", "duration": "60m", "severity": "high",
         "scope": {"region": "us-east", "nodes": 3}, "magnitude": 0.6},
        {"kind": "dummy_workload", "start": "2026-11-05T03:40:00Z", "duration": "2h", "severity": "high",
         "scope": {"region": "eu-west", "team": "credit-risk"}, "magnitude": 0.5}]},
        "Overlapping incidents of different families (one during Thursday's retrain wave).")
    write("finding_a", {"seed": 41, "start": "2026-11-04T00:00:00Z", "end": "2026-11-06T00:00:00Z", "incidents": [
        {"kind": "framework_regression", "start": "2026-11-05T01:30:00Z", "duration": "4h", "severity": "high",
         "scope": {"team": "fraud-offline"}, "magnitude": 0.3},
        {"kind": "io_bottleneck", "start": "2026-11-05T02:10:00Z", "duration": "3h", "severity": "high",
         "scope": {"region": "us-east", "nodes": 6}, "magnitude": 0.5}]},
        "Finding A: utilization flat, SLA misses spike (slower and failing training in a retrain wave).")
    write("finding_b", {"seed": 42, "start": "2026-11-04T00:00:00Z", "end": "2026-11-06T00:00:00Z", "incidents": [
        {"kind": "priority_change", "start": "2026-11-05T10:04:00Z", "duration": "2h", "severity": "high",
         "scope": {"region": "us-east"}, "magnitude": 3.0},
        {"kind": "fragmentation", "start": "2026-11-05T13:00:00Z", "duration": "2h", "severity": "high",
         "scope": {"region": "us-east"}, "magnitude": 4.0}]},
        "Finding B: utilization drops and queue time rises while node health looks normal.")


def write(name: str, doc: dict, comment: str) -> None:
    with open(OUT / f"{name}.yaml", "w") as f:
        f.write(f"# {comment}\n# Generated by scenarios/make_suite.py.\n")
        yaml.safe_dump(doc, f, sort_keys=False)


if __name__ == "__main__":
    main()
