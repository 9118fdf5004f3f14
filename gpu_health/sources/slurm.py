"""Slurm adapter: real ``sacct`` / ``squeue --json`` output -> contract frames.

Tables produced: ``scheduler_events`` and ``job_metadata``.

Inputs understood
-----------------
* ``sacct --parsable2`` (``|``-delimited, header line, no trailing delimiter) and
  ``sacct --parsable`` (trailing delimiter), with or without ``--noheader`` and
  with any ``--delimiter`` (the Hábrók dump ``hb-jobinfo/sacct.txt`` uses ``☃``).
  A headerless dump needs its field list: pass ``fields=`` or rely on
  :data:`HB_JOBINFO_FIELDS` (the 37 fields of ``hb-jobinfo``), used when the
  field count matches.
* ``squeue --json`` (Slurm OpenAPI v0.0.37 shape; the newer
  ``{"set":…, "number":…}`` wrappers are understood as well).

Mapping (one ``sacct`` job row -> up to three events)
-----------------------------------------------------
* ``submitted`` at ``Submit`` (``gpus`` = requested, from ``ReqTRES``);
  ``started`` at ``Start`` when it is a time (``gpus`` = allocated, from
  ``AllocTRES``, falling back to the request; ``node_ids`` = the expanded
  ``NodeList``); ``ended`` at ``End`` for terminal states (``gpus`` and
  ``node_ids`` as on ``started``, ``0``/null if the job never started).
  ``PENDING`` jobs have only ``submitted``; ``RUNNING``/``SUSPENDED`` have no
  ``ended``. ``PREEMPTED`` adds a ``preempted`` event, ``REQUEUED`` a
  ``requeued`` event (no ``ended``), both at ``End``.
* ``State``: ``COMPLETED``->completed, ``FAILED``->failed,
  ``OUT_OF_MEMORY``->failed (reason ``OUT_OF_MEMORY``), ``CANCELLED`` and
  ``CANCELLED by <uid>``->cancelled (reason keeps the text), ``TIMEOUT`` and
  ``DEADLINE``->timeout, ``NODE_FAIL``/``BOOT_FAIL``->node_fail,
  ``PREEMPTED``->cancelled (reason ``PREEMPTED``). An ``OUT_OF_MEMORY`` step
  is added to the job's reason.
* Steps (``.batch``, ``.extern``, ``.interactive``, numbered ``.0`` …) are folded
  into their job: steps are not jobs. Array tasks keep their id (``7216821_144``).
* ``gres/gpu=N`` in TRES is the GPU count; without it, typed entries
  (``gres/gpu:a100=N``) are summed. TRES without any ``gres/gpu`` (older
  accounting, or CPU jobs) means 0 GPUs: Hábrók's 2023 rows on ``gpu*``
  partitions predate GPU TRES tracking and therefore read 0.
* ``priority`` from a ``Priority`` field when the dump has one, else 0.
* ``event_id`` = ``slurm:<job_id>:<event>`` (``#<n>`` appended for the n-th
  repeated row of the same job, as ``sacct --duplicates`` prints requeues):
  deterministic, so re-reading an overlapping dump yields the same ids.
* Times: ``sacct`` prints the cluster's local wall clock without a zone. Pass
  ``cluster_tz`` (default ``"UTC"``); an ambiguous fall-back time is read as
  its first (daylight-saving) occurrence, a skipped spring-forward time is
  shifted forward. ``Unknown``/``None``/empty mean "no such time".

``job_metadata`` (one row per job)
----------------------------------
* ``team``: ``team_map[Account]``, else ``team_map[User]``, else the account,
  else the user (configurable mapping; default is the account/user itself).
* ``model_type``, ``dataset``, ``container_image``, ``framework_version``:
  ``"unknown"`` -- Slurm accounting does not record them (a site that puts
  them in ``Comment``/``AdminComment`` would extend this adapter).
* ``workload_class`` (rule, in order): ``distributed`` when the job spans more
  than one node (``NNodes > 1``); ``interactive`` when the partition name
  contains ``interactive``, ``debug``, ``devel`` or ``jupyter``, or the job name
  is a shell / notebook (``bash``, ``sh``, ``zsh``, ``interactive``,
  ``jupyter*``, ``sys/dashboard*``); otherwise ``batch``. A short elapsed time
  is *not* used: a batch job that crashes in a minute is still batch, and
  ``*short`` partitions are time-limit classes, not interactive ones.
* ``requested_gpus`` from ``ReqTRES``; ``requested_mem_gb`` from ``ReqMem``
  (``4000M``, ``32G``; Slurm's binary units, so ``G`` = GiB): a bare value is
  the job's total (Slurm >= 21.08 prints it so, matching ``ReqTRES mem=``),
  ``…n`` is per node (x ``NNodes``), ``…c`` per CPU (x ``NCPUs``); an empty
  ``ReqMem`` falls back to ``ReqTRES`` ``mem=``. ``sla_deadline`` is null.

Bad input is never dropped silently: a line that cannot be parsed becomes a
*reject* (origin, line number, raw text, reason). :class:`SlurmSource` raises
:class:`~gpu_health.sources.base.SourceError` on rejects unless told to
collect them.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pandas as pd

from gpu_health.constants import PARTITION
from gpu_health.contracts import columns, empty_frame
from gpu_health.sources.base import DEFAULT_ABSENT_AFTER, DataNotReady, Fetched, SourceError
from gpu_health.sources.slurm_fields import (  # how Slurm writes a field; the public ones importable from here too
    _JOBID,
    UNKNOWN,
    _int_or_none,
    _slurm_time,
    _to_utc,
    expand_nodelist,
    gpus_from_tres,
    map_state,
    parse_mem_gb,
    parse_tres,
    team_for,
    workload_class,
)

log = logging.getLogger(__name__)

SCHEDULER = "slurm"

# The 37 fields of rug-cit-hpc/hb-jobinfo's ``sacct --format=…`` (headerless dump).
HB_JOBINFO_FIELDS: tuple[str, ...] = (
    "JobID", "JobName", "User", "Partition", "NodeList", "NNodes", "NCPUs", "NTasks", "State",
    "Submit", "Start", "End", "Timelimit", "Elapsed", "TotalCPU", "CPUTime", "UserCPU",
    "SystemCPU", "ReqMem", "MaxRSS", "MaxVMSize", "ReqTRES", "AllocTRES", "TRESUsageInMax",
    "TRESUsageInTot", "TRESUsageOutTot", "MaxDiskRead", "MaxDiskWrite", "MaxRSSNode",
    "MaxRSSTask", "MaxVMSizeNode", "MaxVMSizeTask", "MaxDiskReadNode", "MaxDiskReadTask",
    "MaxDiskWriteNode", "MaxDiskWriteTask", "Comment",
)
REQUIRED_SACCT_FIELDS = ("JobID", "State", "Submit")

REJECT_COLUMNS = ["origin", "line_no", "raw", "reason"]


# --------------------------------------------------------------------------- results


@dataclass
class SlurmParse:
    """What a parse produced: contract frames, rejected lines and a few counts."""

    scheduler_events: pd.DataFrame
    job_metadata: pd.DataFrame
    rejects: pd.DataFrame
    stats: dict[str, int] = field(default_factory=dict)

    @staticmethod
    def concat(parts: Iterable["SlurmParse"]) -> "SlurmParse":
        """Later parts win for the same ``event_id`` / ``job_id`` (newer dump, newer state)."""
        parts = list(parts)
        if not parts:
            return SlurmParse(empty_frame("scheduler_events"), empty_frame("job_metadata"), _rejects_frame([]))
        ev = pd.concat([p.scheduler_events for p in parts], ignore_index=True)
        ev = ev.drop_duplicates("event_id", keep="last").sort_values(["ts", "event_id"], kind="stable")
        md = pd.concat([p.job_metadata for p in parts], ignore_index=True)
        md = md.drop_duplicates("job_id", keep="last").sort_values(["submitted_at", "job_id"], kind="stable")
        rj = pd.concat([p.rejects for p in parts], ignore_index=True)
        stats: dict[str, int] = {}
        for p in parts:
            for k, v in p.stats.items():
                stats[k] = stats.get(k, 0) + v
        return SlurmParse(ev.reset_index(drop=True), md.reset_index(drop=True), rj, stats)


def _rejects_frame(rows: list[dict]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=REJECT_COLUMNS).astype({"line_no": "int64"})


def _typed(df: pd.DataFrame, table: str) -> pd.DataFrame:
    """The contract's columns in order, cast to the contract's dtypes (strings as StringDtype)."""
    return df[columns(table)].astype(empty_frame(table).dtypes.to_dict())


def _events_frame(rows: list[dict], ts: pd.DatetimeIndex) -> pd.DataFrame:
    if not rows:
        return empty_frame("scheduler_events")
    df = pd.DataFrame(rows)
    df["ts"] = ts
    return _typed(df, "scheduler_events")


def _metadata_frame(rows: list[dict], submitted: pd.DatetimeIndex) -> pd.DataFrame:
    if not rows:
        return empty_frame("job_metadata")
    df = pd.DataFrame(rows)
    df["submitted_at"] = submitted
    df["sla_deadline"] = pd.Series(pd.NaT, index=df.index, dtype="datetime64[ns, UTC]")
    return _typed(df, "job_metadata")


def _metadata(job_id: str, team: str, *, nnodes: int | None, queue: str | None, job_name: str | None,
              gpus: int | None, mem_gb: float | None) -> dict:
    """A job_metadata row: what Slurm knows of a job (model, dataset, image and framework are not its business)."""
    return {"job_id": job_id, "team": team, "model_type": UNKNOWN,
            "workload_class": workload_class(nnodes=nnodes, partition=queue, job_name=job_name),
            "dataset": UNKNOWN, "requested_gpus": gpus, "requested_mem_gb": np.nan if mem_gb is None else mem_gb,
            "container_image": UNKNOWN, "framework_version": UNKNOWN}


def _event(job_id: str, attempt: int, event: str, *, queue: str, priority: int, gpus: int,
           node_ids: str | None, exit_state: str | None = None, reason: str | None = None) -> dict:
    suffix = f"#{attempt}" if attempt else ""
    return {"event_id": f"slurm:{job_id}:{event}{suffix}", "job_id": job_id, "event": event,
            "scheduler": SCHEDULER, "queue": queue, "priority": priority, "gpus": gpus,
            "node_ids": node_ids, "exit_state": exit_state, "reason": reason}


# --------------------------------------------------------------------------- sacct


def _detect_layout(lines: list[str], delimiter: str | None, fields: Sequence[str] | None,
                   origin: str) -> tuple[str, list[str], int]:
    """(delimiter, field names, index of the first data line)."""
    first = next((ln for ln in lines if ln.strip()), "")
    if delimiter is None:
        delimiter = "☃" if "☃" in first else "|"
    head = [c.strip() for c in first.split(delimiter)]
    if head and head[-1] == "":
        head = head[:-1]
    if head and head[0].lower() in ("jobid", "jobidraw"):
        start = lines.index(first) + 1
        if start < len(lines) and set(lines[start].strip()) <= set("-" + delimiter + " ") and lines[start].strip():
            start += 1  # a '-----' rule under the header
        return delimiter, head, start
    if fields is not None:
        return delimiter, list(fields), 0
    if len(head) == len(HB_JOBINFO_FIELDS):
        return delimiter, list(HB_JOBINFO_FIELDS), 0
    raise ValueError(
        f"{origin}: headerless sacct dump with {len(head)} fields and no field list; "
        f"pass fields=[...] in --format order (first line starts {first[:80]!r})"
    )


_Row = tuple[int, str, dict]  # (1-based line number, raw line, record by field name)


def _sacct_records(lines: list[str], first_data: int, delimiter: str, names: list[str], reject) -> tuple[list[_Row], dict[str, list[_Row]]]:
    """The job rows of a dump and, per job, its step rows (``1234.batch``); a line with the wrong number of fields
    or a JobID that is no Slurm job id is rejected, and so is a step whose job row is not in the dump."""
    n = len(names)
    jobs: list[_Row] = []
    steps: dict[str, list[_Row]] = {}
    for line_no, raw in enumerate(lines[first_data:], start=first_data + 1):
        if not raw.strip():
            continue
        parts = raw.split(delimiter)
        if len(parts) == n + 1 and parts[-1] == "":
            parts = parts[:-1]  # --parsable's trailing delimiter
        if len(parts) != n:
            reject(line_no, raw, f"{len(parts)} fields, expected {n} (delimiter {delimiter!r} inside a value?)")
            continue
        rec = dict(zip(names, parts))
        m = _JOBID.match(rec["JobID"].strip())
        if not m:
            reject(line_no, raw, f"JobID {rec['JobID']!r} is not a Slurm job id")
            continue
        rec["_job"] = m.group("job")
        if m.group("step"):
            steps.setdefault(m.group("job"), []).append((line_no, raw, rec))
        else:
            jobs.append((line_no, raw, rec))

    job_ids = {rec["_job"] for _, _, rec in jobs}
    for job, rows in steps.items():
        if job not in job_ids:
            for line_no, raw, rec in rows:
                reject(line_no, raw, f"step {rec['JobID']!r} without its job row {job!r}")
    return jobs, steps


@dataclass
class _SacctJob:
    """The typed fields of one job row of a sacct dump."""

    exit_state: str | None
    reason: str | None
    kind: str
    submit: datetime
    start: datetime | None
    end: datetime | None
    nnodes: int | None
    priority: int
    nodes: list[str]
    req_gpus: int
    alloc_gpus: int
    mem_gb: float | None


def _sacct_job(rec: dict) -> _SacctJob:
    """``rec``'s fields parsed; ValueError naming the field and its value when one cannot be."""
    exit_state, reason, kind = map_state(rec["State"])
    submit = _slurm_time(rec["Submit"], "Submit")
    if submit is None:
        raise ValueError(f"Submit {rec['Submit']!r}: a job without a submit time cannot be placed")
    start = _slurm_time(rec.get("Start"), "Start")
    end = _slurm_time(rec.get("End"), "End")
    nnodes = _int_or_none(rec.get("NNodes"), "NNodes")
    ncpus = _int_or_none(rec.get("NCPUs") or rec.get("ReqCPUS"), "NCPUs")
    priority = _int_or_none(rec.get("Priority"), "Priority") or 0
    nodes = expand_nodelist(rec.get("NodeList"))
    req_gpus = gpus_from_tres(rec.get("ReqTRES")) or 0
    alloc_gpus = gpus_from_tres(rec.get("AllocTRES"))
    alloc_gpus = req_gpus if alloc_gpus is None and not rec.get("AllocTRES") else (alloc_gpus or 0)
    mem_gb = parse_mem_gb(rec.get("ReqMem"), ncpus=ncpus, nnodes=nnodes)
    if mem_gb is None:
        tres_mem = parse_tres(rec.get("ReqTRES")).get("mem")
        mem_gb = parse_mem_gb(tres_mem) if tres_mem else None
    return _SacctJob(exit_state, reason, kind, submit, start, end, nnodes, priority, nodes, req_gpus, alloc_gpus, mem_gb)


def _sacct_events(job: str, attempt: int, j: _SacctJob, reason: str | None, queue: str) -> list[tuple[dict, datetime]]:
    """The scheduler_events of one job row, each with its time: submitted; started when it ran; and when it
    stopped, preempted and ended, requeued, or ended."""
    started = j.start is not None and j.kind != "pending"
    node_ids = ",".join(j.nodes) if (started and j.nodes) else None

    def event(name: str, ts: datetime, **kw) -> tuple[dict, datetime]:
        return _event(job, attempt, name, queue=queue, priority=j.priority, **kw), ts

    events = [event("submitted", j.submit, gpus=j.req_gpus, node_ids=None)]
    if started:
        events.append(event("started", j.start, gpus=j.alloc_gpus, node_ids=node_ids))
    if j.kind in ("ended", "preempted", "requeued") and j.end is not None:
        after = {"gpus": j.alloc_gpus if started else 0, "node_ids": node_ids, "reason": reason}
        if j.kind == "preempted":
            events.append(event("preempted", j.end, **after))
        if j.kind == "requeued":
            events.append(event("requeued", j.end, **after))
        else:
            events.append(event("ended", j.end, exit_state=j.exit_state, **after))
    return events


def parse_sacct(
    text: str,
    *,
    origin: str = "<sacct>",
    fields: Sequence[str] | None = None,
    delimiter: str | None = None,
    team_map: Mapping[str, str] | None = None,
    cluster_tz: str = "UTC",
) -> SlurmParse:
    """Parse ``sacct`` parsable output (see the module docstring) into contract frames.

    Lines that cannot be parsed are returned in ``rejects`` (origin, 1-based
    line number, raw text, reason); nothing is dropped silently.
    """
    lines = text.splitlines()
    delimiter, names, first_data = _detect_layout(lines, delimiter, fields, origin)
    missing = [f for f in REQUIRED_SACCT_FIELDS if f not in names]
    if missing:
        raise ValueError(f"{origin}: sacct dump lacks required field(s) {missing}; has {names}")
    rejects: list[dict] = []

    def reject(line_no: int, raw: str, reason: str) -> None:
        rejects.append({"origin": origin, "line_no": line_no, "raw": raw, "reason": reason})

    jobs, steps = _sacct_records(lines, first_data, delimiter, names, reject)
    events: list[tuple[dict, datetime]] = []
    md_rows: list[dict] = []
    md_times: list[datetime] = []
    attempts: dict[str, int] = {}
    for line_no, raw, rec in jobs:
        job = rec["_job"]
        try:
            j = _sacct_job(rec)
        except ValueError as exc:
            reject(line_no, raw, str(exc))
            continue
        reason = j.reason
        for _, _, st in steps.get(job, []):
            if st["State"].strip().upper().startswith("OUT_OF_MEMORY"):
                note = f"OUT_OF_MEMORY in step {st['JobID']}"
                reason = note if reason is None else f"{reason}; {note}"
        attempt = attempts.get(job, 0)
        attempts[job] = attempt + 1
        queue = rec.get("Partition", "").strip()
        events += _sacct_events(job, attempt, j, reason, queue)
        if attempt == 0:
            user, account = rec.get("User", "").strip() or None, rec.get("Account", "").strip() or None
            md_rows.append(_metadata(job, team_for(user, account, team_map), nnodes=j.nnodes, queue=queue,
                                     job_name=rec.get("JobName"), gpus=j.req_gpus, mem_gb=j.mem_gb))
            md_times.append(j.submit)

    job_ids = {rec["_job"] for _, _, rec in jobs}
    stats = {"lines": sum(1 for ln in lines[first_data:] if ln.strip()), "jobs": len(md_rows),
             "job_rows": len(jobs), "steps_folded": sum(len(v) for k, v in steps.items() if k in job_ids),
             "rejects": len(rejects)}
    return SlurmParse(
        _events_frame([e for e, _ in events], _to_utc([t for _, t in events], cluster_tz)),
        _metadata_frame(md_rows, _to_utc(md_times, cluster_tz)),
        _rejects_frame(rejects),
        stats,
    )


def read_sacct(path: str | Path, **kwargs: Any) -> SlurmParse:
    """:func:`parse_sacct` on a file (UTF-8); the path is the rejects' origin."""
    path = Path(path)
    return parse_sacct(path.read_text(encoding="utf-8"), origin=str(path), **kwargs)


# --------------------------------------------------------------------------- squeue --json


def _num(value: Any) -> Any:
    """OpenAPI >= v0.0.39 wraps numbers as ``{"set", "infinite", "number"}``; unwrap (unset -> None)."""
    if isinstance(value, dict) and "number" in value:
        return value["number"] if value.get("set", True) and not value.get("infinite", False) else None
    return value


def _epoch(value: Any) -> pd.Timestamp | None:
    v = _num(value)
    if v in (None, 0, "", "0"):
        return None
    return pd.Timestamp(int(v), unit="s", tz="UTC")


def parse_squeue_json(
    payload: str | bytes | Mapping[str, Any],
    *,
    origin: str = "<squeue --json>",
    team_map: Mapping[str, str] | None = None,
) -> SlurmParse:
    """Parse ``squeue --json`` into ``submitted`` (+ ``started`` for running jobs) events and metadata.

    A job entry that cannot be read becomes a reject whose ``line_no`` is its
    1-based position in the ``jobs`` array and whose ``raw`` is its JSON.
    """
    doc = json.loads(payload) if isinstance(payload, (str, bytes)) else payload
    if not isinstance(doc, Mapping) or not isinstance(doc.get("jobs"), list):
        raise ValueError(f"{origin}: not squeue --json output (no 'jobs' list)")
    rejects: list[dict] = []
    ev_rows, ev_times, md_rows, md_times = [], [], [], []
    for pos, job in enumerate(doc["jobs"], start=1):
        try:
            jid = _num(job.get("job_id"))
            if jid in (None, ""):
                raise ValueError("job_id missing")
            array_id, task = _num(job.get("array_job_id")), _num(job.get("array_task_id"))
            job_id = f"{array_id}_{task}" if array_id and task is not None else str(jid)
            state = job.get("job_state")
            state = state[0] if isinstance(state, list) and state else state
            exit_state, reason, kind = map_state(str(state or ""))
            submit = _epoch(job.get("submit_time"))
            if submit is None:
                raise ValueError(f"submit_time {job.get('submit_time')!r} is not an epoch time")
            start = _epoch(job.get("start_time"))
            nnodes = _num(job.get("node_count"))
            cpus = _num(job.get("cpus"))
            req_tres = job.get("tres_req_str") or ""
            req_gpus = (gpus_from_tres(req_tres) or gpus_from_tres(job.get("tres_per_job"))
                        or (gpus_from_tres(job.get("tres_per_node")) or 0) * (nnodes or 1))
            alloc_gpus = gpus_from_tres(job.get("tres_alloc_str"))
            alloc_gpus = req_gpus if alloc_gpus is None else alloc_gpus
            tres_mem = parse_tres(req_tres).get("mem")
            mem_gb = parse_mem_gb(tres_mem) if tres_mem else None
            if mem_gb is None:
                per_node, per_cpu = _num(job.get("memory_per_node")), _num(job.get("memory_per_cpu"))
                if per_node:
                    mem_gb = per_node / 1024 * (nnodes or 1)
                elif per_cpu:
                    mem_gb = per_cpu / 1024 * (cpus or 1)
            nodes = expand_nodelist(job.get("nodes") or "")
            priority = int(_num(job.get("priority")) or 0)
        except (ValueError, TypeError) as exc:
            rejects.append({"origin": origin, "line_no": pos, "raw": json.dumps(job, default=str)[:2000], "reason": str(exc)})
            continue
        queue = str(job.get("partition") or "")
        state_reason = job.get("state_reason")
        note = None if state_reason in (None, "", "None") else str(state_reason)
        ev_rows.append(_event(job_id, 0, "submitted", queue=queue, priority=priority, gpus=req_gpus,
                              node_ids=None, reason=note if kind == "pending" else None))
        ev_times.append(submit)
        if kind == "running" and start is not None:
            ev_rows.append(_event(job_id, 0, "started", queue=queue, priority=priority, gpus=alloc_gpus,
                                  node_ids=",".join(nodes) or None))
            ev_times.append(start)
        md_rows.append(_metadata(job_id, team_for(job.get("user_name"), job.get("account"), team_map), nnodes=nnodes,
                                 queue=queue, job_name=job.get("name"), gpus=req_gpus, mem_gb=mem_gb))
        md_times.append(submit)
    return SlurmParse(
        _events_frame(ev_rows, pd.DatetimeIndex(ev_times)),
        _metadata_frame(md_rows, pd.DatetimeIndex(md_times)),
        _rejects_frame(rejects),
        {"jobs": len(md_rows), "rejects": len(rejects)},
    )


# --------------------------------------------------------------------------- source


class SlurmSource:
    """A :class:`~gpu_health.sources.base.Source` over a directory of Slurm dumps.

    Reads every ``sacct`` dump matching ``sacct_glob`` and every ``squeue --json``
    file matching ``squeue_glob``, oldest file first (by modification time, then
    name), so a newer dump's view of a job wins. The window ``[start, end)`` is
    applied to ``ts`` (events) or ``submitted_at`` (metadata).

    A dump written at time *t* holds everything up to *t*: a window ending after
    the newest dump's modification time (or ``complete_through`` when given) is
    *late* (:class:`DataNotReady`) until ``absent_after`` has passed since its
    end; then it is *closed*: the dumps are read as they are and
    :attr:`Fetched.silent_family` marks its partitions without a row as missing
    data (no dump at all, or a dump job that stopped, degrades the scheduler
    tables; it never blocks the partition). Rejected lines raise :class:`SourceError`
    (``on_reject="raise"``, the default) or are kept in :attr:`rejects` and
    logged (``on_reject="collect"``).
    """

    name = "slurm"

    def __init__(
        self,
        directory: str | Path,
        *,
        sacct_glob: str = "sacct*",
        squeue_glob: str = "squeue*.json",
        fields: Sequence[str] | None = None,
        delimiter: str | None = None,
        team_map: Mapping[str, str] | None = None,
        cluster_tz: str = "UTC",
        on_reject: Literal["raise", "collect"] = "raise",
        complete_through: pd.Timestamp | str | None = None,
        absent_after: str | pd.Timedelta = DEFAULT_ABSENT_AFTER,
        clock=None,
    ) -> None:
        self.directory = Path(directory)
        self.sacct_glob, self.squeue_glob = sacct_glob, squeue_glob
        self.fields, self.delimiter = fields, delimiter
        self.team_map = dict(team_map or {})
        self.cluster_tz = cluster_tz
        if on_reject not in ("raise", "collect"):
            raise ValueError(f"on_reject must be 'raise' or 'collect', not {on_reject!r}")
        self.on_reject = on_reject
        self.complete_through = None if complete_through is None else _as_utc(complete_through)
        self._cache: tuple[tuple, SlurmParse] | None = None
        self.absent_after = pd.Timedelta(absent_after)
        self._clock = clock or (lambda: pd.Timestamp.now(tz="UTC"))

    def tables(self) -> frozenset[str]:
        return frozenset({"scheduler_events", "job_metadata"})

    def _files(self) -> list[Path]:
        files = {p for g in (self.sacct_glob, self.squeue_glob) for p in self.directory.glob(g) if p.is_file()}
        return sorted(files, key=lambda p: (p.stat().st_mtime_ns, p.name))

    def parse(self) -> SlurmParse:
        """All dumps parsed and merged (cached until a file changes)."""
        files = self._files()
        signature = tuple((str(p), p.stat().st_mtime_ns, p.stat().st_size) for p in files)
        if self._cache is not None and self._cache[0] == signature:
            return self._cache[1]
        parts = []
        for p in files:
            if p.match(self.squeue_glob):
                parts.append(parse_squeue_json(p.read_bytes(), origin=str(p), team_map=self.team_map))
            else:
                parts.append(read_sacct(p, fields=self.fields, delimiter=self.delimiter,
                                        team_map=self.team_map, cluster_tz=self.cluster_tz))
        merged = SlurmParse.concat(parts)
        self._cache = (signature, merged)
        return merged

    @property
    def rejects(self) -> pd.DataFrame:
        return self.parse().rejects

    def read(self, table: str, start: pd.Timestamp, end: pd.Timestamp) -> Fetched:
        if table not in self.tables():
            raise SourceError(f"{self.name}: no table {table!r}; provides {sorted(self.tables())}")
        start, end = _as_utc(start), _as_utc(end)
        files = self._files()
        origin = f"{self.directory} ({', '.join(p.name for p in files)})"
        state = self.judge(start, end, files)
        if state.startswith("late"):
            raise DataNotReady(f"{origin}: {state}")
        family = None if state == "complete" else f"slurm dumps ({self.sacct_glob} / {self.squeue_glob})"
        if not files:
            return Fetched(empty_frame(table), f"{self.directory}: {state}", silent_family=family)
        parsed = self.parse()
        if len(parsed.rejects):
            r = parsed.rejects
            examples = "; ".join(f"{o}:{n}: {why}" for o, n, why in r[["origin", "line_no", "reason"]].head(5).itertuples(index=False))
            if self.on_reject == "raise":
                raise SourceError(f"{self.name}: {len(r)} unparseable line(s), e.g. {examples}")
            log.warning("%s: %d unparseable line(s) kept in .rejects, e.g. %s", self.name, len(r), examples)
        frame = parsed.scheduler_events if table == "scheduler_events" else parsed.job_metadata
        col = "ts" if table == "scheduler_events" else "submitted_at"
        window = frame[(frame[col] >= start) & (frame[col] < end)].reset_index(drop=True)
        return Fetched(window, origin if family is None else f"{origin}; {state}", silent_family=family)

    def judge(self, start: pd.Timestamp, end: pd.Timestamp, files: list[Path] | None = None,
              now: pd.Timestamp | None = None) -> str:
        """``complete`` (a dump covers the window), ``late: ...`` or ``closed: ...`` (class docstring), at ``now``
        (the source's clock when None)."""
        files = self._files() if files is None else files
        through = None
        if self.complete_through is not None:
            through = self.complete_through
        elif files:
            through = pd.Timestamp(max(p.stat().st_mtime_ns for p in files), unit="ns", tz="UTC")
        if through is not None and end <= through:
            return "complete"
        covered = f"newest dump covers up to {through}" if through is not None else \
            f"no dumps matching {self.sacct_glob!r} / {self.squeue_glob!r} in {self.directory}"
        if (self._clock() if now is None else now) >= end + self.absent_after:
            return f"closed: {covered}, window ended {end}, more than {self.absent_after} ago (dumps absent)"
        return f"late: {covered}, window ends {end}; waiting up to {self.absent_after} after its end"

    def version(self, table: str, start: pd.Timestamp, now: pd.Timestamp | None = None) -> str | None:
        """The sensor's readiness token of the 5-minute partition at ``start`` (None while late), judged at ``now``."""
        state = self.judge(_as_utc(start), _as_utc(start) + PARTITION, now=now)
        return None if state.startswith("late") else state.split(":")[0]


def _as_utc(ts: pd.Timestamp | str) -> pd.Timestamp:
    ts = pd.Timestamp(ts)
    return ts.tz_localize("UTC") if ts.tzinfo is None else ts.tz_convert("UTC")
