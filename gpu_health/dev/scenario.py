"""A scenario moved in time, so that its incident happens a few minutes after ``make dev`` starts.

Scenario files name absolute times (the scenario's ``start`` / ``end``, each incident's ``start`` / ``end``, each
change's ``ts``); the live simulator follows the clock, so a scenario written for a past week would never show its
incident. :func:`rebase` shifts every one of those times by the same offset, a whole number of partitions, so the
story keeps its shape (the history before the incident, where in its partition the incident starts, the changes
around it) and the first incident starts at or just after the time asked for. The scenario keeps its name, which
seeds which nodes and GPUs it picks: the re-based incident hits the same hardware.

``scripts/dev.sh`` writes the re-based scenario once at start (``var/dev/scenario.yaml``) and every Dagster process
reads that file, so they all see the same incident at the same time.
"""

from pathlib import Path

import pandas as pd
import yaml

from gpu_health.constants import PARTITION
from gpu_health.sim.scenario import parse_ts

# the keys that hold an absolute time, at the top level and in each incident / change (docs/scenarios.md)
_TOP_TIMES = ("start", "end")
_ITEM_TIMES = {"incidents": ("start", "end"), "changes": ("ts",)}


def anchor(raw: dict) -> pd.Timestamp:
    """The time a re-base moves to the time asked for: the first incident's start, else the scenario's start."""
    starts = [parse_ts(inc["start"], f"incident {i} start") for i, inc in enumerate(raw.get("incidents") or [])]
    return min(starts) if starts else parse_ts(raw.get("start", "2026-11-02T00:00:00Z"), "start")


def rebase(raw: dict, incident_at, *, name: str | None = None) -> dict:
    """``raw`` (a scenario mapping) with every absolute time shifted so that its first incident starts at
    ``incident_at`` or up to one partition after it (the offset is a whole number of partitions).

    ``name``: the scenario's name to keep (a file's stem), written into the mapping unless it names one already.
    A scenario without incidents is shifted so that it starts there."""
    target = parse_ts(incident_at, "incident_at")
    offset = -((anchor(raw) - target) // PARTITION) * PARTITION  # ceil to whole partitions: never before the target
    out = dict(raw)
    if "start" not in out:  # the loader's default start, made explicit so that it moves too
        out["start"] = "2026-11-02T00:00:00Z"
    for key in _TOP_TIMES:
        if key in out:
            out[key] = _shifted(out[key], offset, key)
    for section, keys in _ITEM_TIMES.items():
        items = []
        for i, item in enumerate(out.get(section) or []):
            item = dict(item)
            for key in keys:
                if key in item:
                    item[key] = _shifted(item[key], offset, f"{section} {i} {key}")
            items.append(item)
        if section in out:
            out[section] = items
    if name and not out.get("name"):
        out["name"] = name
    return out


def _shifted(value, offset: pd.Timedelta, what: str) -> str:
    return (parse_ts(value, what) + offset).strftime("%Y-%m-%dT%H:%M:%SZ")


def write_rebased(path: str | Path, incident_at, out: str | Path) -> dict:
    """Re-base the scenario file ``path`` (:func:`rebase`) and write it to ``out``; returns the mapping written."""
    path = Path(path)
    raw = yaml.safe_load(path.read_text())
    if not isinstance(raw, dict):
        raise ValueError(f"scenario {path}: expected a mapping at the top level")
    moved = rebase(raw, incident_at, name=path.stem)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    header = (f"# {path} re-based: its first incident starts at {anchor(moved).isoformat()}\n"
              f"# (written by scripts/dev.sh at each start; edit the original, not this copy)\n")
    out.write_text(header + yaml.safe_dump(moved, sort_keys=False))
    return moved
