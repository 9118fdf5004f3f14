"""Importers of real public GPU-cluster traces into the landing zone.

``import_trace(name, landing_dir)`` reads a trace from the real-data folder
(``../shared/real-data`` beside the checkout unless ``data_dir`` is given),
turns it into contract tables and writes them with
:func:`gpu_health.landing.write_partition`: one Parquet file per covered
source per 5-minute partition over the trace's span -- zero-row files for
partitions without rows -- plus daily ``cost_capacity`` files where the
trace has an inventory. Each module's docstring says what the trace lacks
and what stands in for it.

=================  =============================================================  ===========================
name               tables                                                         module
=================  =============================================================  ===========================
``philly``         gpu_telemetry, node_telemetry, scheduler_events,              :mod:`.philly`
                   job_metadata, cost_capacity (+ ``_derived/philly_fleet_
                   liveness.parquet``)
``alibaba-genai``  gpu_telemetry                                                  :mod:`.alibaba`
``alibaba-openb``  scheduler_events, job_metadata                                 :mod:`.alibaba`
``alibaba``        both of the above, each over its own span                      :mod:`.alibaba`
``zhejiang``       network_telemetry                                              :mod:`.zhejiang`
=================  =============================================================  ===========================

A full import writes one file per partition of the trace's span (Philly:
~73 days, ~21k partitions per source; openb: ~149 days): pass ``start`` /
``end`` to land a window, or ``limit`` to take fewer jobs/pods/containers/links.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path

import pandas as pd

from gpu_health.traces import alibaba, philly, zhejiang
from gpu_health.traces.common import TraceFrames, default_data_dir, write_trace

BUILDERS: dict[str, Callable[..., TraceFrames]] = {
    "philly": philly.build,
    "alibaba-genai": alibaba.build_genai,
    "alibaba-openb": alibaba.build_openb,
    "zhejiang": zhejiang.build,
}
GROUPS: dict[str, tuple[str, ...]] = {"alibaba": ("alibaba-genai", "alibaba-openb")}
TRACES = tuple(BUILDERS) + tuple(GROUPS)


def import_trace(
    name: str,
    landing_dir: str | Path,
    *,
    limit: int | None = None,
    data_dir: str | Path | None = None,
    start: pd.Timestamp | str | None = None,
    end: pd.Timestamp | str | None = None,
    placeholders: Mapping[str, Mapping[str, object]] | None = None,
) -> dict:
    """Import trace ``name`` into ``landing_dir``; returns a summary.

    ``limit`` keeps the first N jobs (Philly, by submission), pods (openb, by
    creation), containers (GenAI, by id) or server links (Zhejiang, by switch
    and port). ``start``/``end`` restrict the landed rows *and* the partitions
    written to ``[start, end)``. ``placeholders`` (``{table: {column: value}}``)
    fill null cells of columns the trace lacks -- an explicit, recorded
    choice; by default they stay null (see :mod:`gpu_health.traces.common`).

    Summary keys: ``trace``, ``landing_dir``, ``span`` (ISO start, end) of the
    partitions written, ``rows`` and ``partitions`` (files) and
    ``empty_partitions`` per source, ``skipped`` (rows or cells not landed,
    by reason), ``null_required_columns`` (required contract columns left
    null, per source: those rows will be quarantined), ``placeholders`` and
    ``derived`` (side files). For ``alibaba`` the value is
    ``{"trace": "alibaba", "parts": {sub-trace: summary}}``.
    """
    if name in GROUPS:
        return {"trace": name, "parts": {
            part: import_trace(part, landing_dir, limit=limit, data_dir=data_dir, start=start, end=end,
                               placeholders=placeholders)
            for part in GROUPS[name]
        }}
    if name not in BUILDERS:
        raise ValueError(f"unknown trace {name!r}; choose one of {list(TRACES)}")
    data = Path(data_dir) if data_dir is not None else default_data_dir()
    if not data.is_dir():
        raise FileNotFoundError(f"real-data folder not found: {data} (pass data_dir=)")
    frames = BUILDERS[name](data, limit=limit)
    return write_trace(landing_dir, frames,
                       start=None if start is None else pd.Timestamp(start),
                       end=None if end is None else pd.Timestamp(end),
                       placeholders=placeholders)


__all__ = ["BUILDERS", "TRACES", "import_trace"]
