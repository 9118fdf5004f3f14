"""How Slurm writes the fields of a job (sacct and squeue alike): states, job ids, hostlists, TRES, memory
requests, times; and the rules that read a job's workload class and team from them (the module docstring of
:mod:`gpu_health.sources.slurm` states the mapping)."""

from __future__ import annotations

import itertools
import re
from collections.abc import Mapping, Sequence
from datetime import datetime

import numpy as np
import pandas as pd

UNKNOWN = "unknown"

# State (first word) -> (exit_state on `ended` or None, reason or None, kind)
# kind: "pending" (submitted only), "running" (no ended), "ended", "requeued".
_STATES: dict[str, tuple[str | None, str | None, str]] = {
    "PENDING": (None, None, "pending"),
    "REQUEUE_HOLD": (None, None, "pending"),
    "REQUEUE_FED": (None, None, "pending"),
    "RUNNING": (None, None, "running"),
    "SUSPENDED": (None, None, "running"),
    "COMPLETING": (None, None, "running"),
    "CONFIGURING": (None, None, "running"),
    "RESIZING": (None, None, "running"),
    "SIGNALING": (None, None, "running"),
    "STAGE_OUT": (None, None, "running"),
    "STOPPED": (None, None, "running"),
    "COMPLETED": ("completed", None, "ended"),
    "FAILED": ("failed", None, "ended"),
    "OUT_OF_MEMORY": ("failed", "OUT_OF_MEMORY", "ended"),
    "CANCELLED": ("cancelled", None, "ended"),
    "TIMEOUT": ("timeout", None, "ended"),
    "DEADLINE": ("timeout", "DEADLINE", "ended"),
    "NODE_FAIL": ("node_fail", None, "ended"),
    "BOOT_FAIL": ("node_fail", "BOOT_FAIL", "ended"),
    "PREEMPTED": ("cancelled", "PREEMPTED", "preempted"),
    "REVOKED": ("cancelled", "REVOKED", "ended"),
    "SPECIAL_EXIT": ("failed", "SPECIAL_EXIT", "ended"),
    "REQUEUED": (None, "REQUEUED", "requeued"),
}
_STATE_ALIASES = {"CA": "CANCELLED", "CD": "COMPLETED", "F": "FAILED", "TO": "TIMEOUT", "NF": "NODE_FAIL",
                  "OOM": "OUT_OF_MEMORY", "PD": "PENDING", "R": "RUNNING", "S": "SUSPENDED", "CG": "COMPLETING",
                  "PR": "PREEMPTED", "BF": "BOOT_FAIL", "DL": "DEADLINE", "RQ": "REQUEUED"}

# JobID: 123, 123_4, 123_[1-5%2], 123+0 (het) with an optional .step suffix.
_JOBID = re.compile(r"^(?P<job>\d+(?:_(?:\d+|\[[^\]]*\]))?(?:\+\d+)?)(?:\.(?P<step>[^.\s]+))?$")
_NO_TIME = {"", "unknown", "none", "n/a", "(null)"}
_NO_NODES = {"", "none assigned", "(null)", "n/a"}
_MEM = re.compile(r"^(?P<num>\d+(?:\.\d+)?)(?P<unit>[KMGTP]?)(?P<per>[nc]?)$", re.I)
_MEM_TO_GB = {"K": 1 / 1024**2, "M": 1 / 1024, "G": 1.0, "T": 1024.0, "P": 1024.0**2}
_INTERACTIVE_PARTITION = re.compile(r"interactive|debug|devel|jupyter", re.I)
_INTERACTIVE_NAMES = re.compile(r"^(bash|sh|zsh|tcsh|interactive|jupyter.*|sys/dashboard.*)$", re.I)


# --------------------------------------------------------------------------- helpers


def expand_nodelist(nodelist: str | None) -> list[str]:
    """Expand a Slurm hostlist: ``gpu[01-03,07],cpu5`` -> ``[gpu01, gpu02, gpu03, gpu07, cpu5]``.

    Zero padding is kept (``[08-10]`` -> ``08, 09, 10``); several bracket groups
    in one name expand to their product. ``None assigned`` / empty -> ``[]``.
    Raises ``ValueError`` on unbalanced brackets or a malformed range.
    """
    if nodelist is None or nodelist.strip().lower() in _NO_NODES:
        return []
    items, depth, cur = [], 0, []
    for ch in nodelist.strip():
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise ValueError(f"unbalanced ']' in node list {nodelist!r}")
        if ch == "," and depth == 0:
            items.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    if depth != 0:
        raise ValueError(f"unbalanced '[' in node list {nodelist!r}")
    items.append("".join(cur))
    out: list[str] = []
    for item in items:
        if not item:
            raise ValueError(f"empty host name in node list {nodelist!r}")
        parts = re.split(r"(\[[^\]]*\])", item)
        choices: list[list[str]] = []
        for part in parts:
            if part.startswith("["):
                choices.append(_expand_ranges(part[1:-1], nodelist))
            elif part:
                choices.append([part])
        out.extend("".join(p) for p in itertools.product(*choices))
    return out


def _expand_ranges(body: str, whole: str) -> list[str]:
    vals: list[str] = []
    for rng in body.split(","):
        m = re.fullmatch(r"(\d+)(?:-(\d+))?", rng.strip())
        if not m:
            raise ValueError(f"malformed range {rng!r} in node list {whole!r}")
        lo, hi = m.group(1), m.group(2) or m.group(1)
        if int(hi) < int(lo):
            raise ValueError(f"descending range {rng!r} in node list {whole!r}")
        width = len(lo)
        vals.extend(str(i).zfill(width) for i in range(int(lo), int(hi) + 1))
    return vals


def parse_tres(tres: str | None) -> dict[str, str]:
    """``billing=8,cpu=8,gres/gpu:v100=1,mem=10G`` -> ``{"billing": "8", …}``."""
    out: dict[str, str] = {}
    for item in (tres or "").split(","):
        if "=" in item:
            k, v = item.split("=", 1)
            out[k.strip()] = v.strip()
    return out


def gpus_from_tres(tres: str | None) -> int | None:
    """GPU count of a TRES string: ``gres/gpu=N``, else the sum of ``gres/gpu:<type>=N``.

    ``None`` when the string names no GPU at all (callers read that as 0).
    Also understands the per-job/per-node request form ``gres:gpu:a100:2`` /
    ``gres/gpu:2`` used by ``squeue``'s ``tres_per_*`` fields.
    """
    if not tres:
        return None
    d = parse_tres(tres)
    if "gres/gpu" in d:
        return int(float(d["gres/gpu"]))
    typed = [int(float(v)) for k, v in d.items() if k.startswith("gres/gpu:")]
    if typed:
        return sum(typed)
    total = None
    for item in tres.split(","):  # request forms without '='
        m = re.fullmatch(r"(?:gres[:/])?gpu(?::[\w.-]+)?:(\d+)", item.strip())
        if m:
            total = (total or 0) + int(m.group(1))
    return total


def parse_mem_gb(req_mem: str | None, *, ncpus: int | None = None, nnodes: int | None = None) -> float | None:
    """``ReqMem`` -> GB (Slurm binary units). ``4Gn`` is per node, ``4Gc`` per CPU, bare is the job total.

    ``None`` for an empty or zero ("all of the node's memory") request. Raises
    ``ValueError`` on text that is not a memory size.
    """
    text = (req_mem or "").strip()
    if not text:
        return None
    m = _MEM.match(text)
    if not m:
        raise ValueError(f"not a memory size: {req_mem!r}")
    gb = float(m.group("num")) * _MEM_TO_GB[(m.group("unit") or "M").upper()]
    per = m.group("per").lower()
    if per == "n":
        gb *= nnodes or 1
    elif per == "c":
        gb *= ncpus or 1
    return gb if gb > 0 else None


def map_state(state: str) -> tuple[str | None, str | None, str]:
    """``State`` text -> (exit_state, reason, kind). Raises ``ValueError`` for an unknown state.

    ``CANCELLED by 10304007`` -> ``("cancelled", "CANCELLED by 10304007", "ended")``.
    """
    text = (state or "").strip()
    head = text.split()[0].upper() if text else ""
    head = _STATE_ALIASES.get(head, head)
    if head not in _STATES:
        raise ValueError(f"unknown State {state!r}")
    exit_state, reason, kind = _STATES[head]
    if text.upper() != head:  # extra text, e.g. "CANCELLED by <uid>": keep it
        reason = text
    return exit_state, reason, kind


def workload_class(*, nnodes: int | None, partition: str | None, job_name: str | None) -> str:
    """The documented rule: distributed (>1 node) > interactive (partition/job name) > batch."""
    if nnodes is not None and nnodes > 1:
        return "distributed"
    if partition and _INTERACTIVE_PARTITION.search(partition):
        return "interactive"
    if job_name and _INTERACTIVE_NAMES.match(job_name.strip()):
        return "interactive"
    return "batch"


def team_for(user: str | None, account: str | None, team_map: Mapping[str, str] | None) -> str:
    """``team_map[account]`` > ``team_map[user]`` > account > user > ``unknown``."""
    team_map = team_map or {}
    for key in (account, user):
        if key and key in team_map:
            return team_map[key]
    return account or user or UNKNOWN


def _slurm_time(text: str | None, column: str) -> datetime | None:
    value = (text or "").strip()
    if value.lower() in _NO_TIME:
        return None
    try:
        return datetime.fromisoformat(value)
    except ValueError:
        raise ValueError(f"{column} {text!r} is not a Slurm time (YYYY-MM-DDTHH:MM:SS, Unknown or None)") from None


def _int_or_none(text: str | None, column: str) -> int | None:
    value = (text or "").strip()
    if not value:
        return None
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"{column} {text!r} is not an integer") from None


def _to_utc(values: Sequence[datetime | None], tz: str) -> pd.DatetimeIndex:
    idx = pd.DatetimeIndex(pd.to_datetime(list(values)))
    if idx.tz is not None:
        return idx.tz_convert("UTC")
    if tz == "UTC":
        return idx.tz_localize("UTC")
    return idx.tz_localize(tz, ambiguous=np.ones(len(idx), dtype=bool), nonexistent="shift_forward").tz_convert("UTC")
