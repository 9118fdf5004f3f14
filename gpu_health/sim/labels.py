"""Ground truth of a scenario: one row per incident, what ``labels.parquet`` holds.

It sits above both :mod:`gpu_health.sim.scenario` (the incidents) and
:mod:`gpu_health.sim.jobs` (the job plan that resolves which jobs a
job-targeted incident hit), so neither of those imports the other back.
"""

from __future__ import annotations

import json

import pandas as pd

from gpu_health.sim.jobs import incident_job_ids
from gpu_health.sim.scenario import JOB_TARGETED_KINDS, Scenario


def labels_frame(scen: Scenario, job_ids: dict[str, tuple[str, ...]] | None = None) -> pd.DataFrame:
    """Ground truth: one row per incident (written as labels.parquet).

    ``job_ids`` (incident_id -> job ids) overrides the targeted jobs; where it
    gives none, the hung jobs of a training_stall and the dummy jobs of a
    dummy_workload are resolved from the job plan (a pure function of the
    scenario, whatever windows were generated before).
    """
    job_ids = dict(job_ids or {})
    for n, inc in enumerate(scen.incidents):
        if not job_ids.get(inc.incident_id) and inc.kind in JOB_TARGETED_KINDS:
            job_ids[inc.incident_id] = incident_job_ids(scen, n)
    rows = []
    for inc in scen.incidents:
        resolved = {"node_ids": list(inc.node_ids), "region": inc.region}
        if inc.gpu_uuids:
            resolved["gpu_uuids"] = list(inc.gpu_uuids)
        if inc.team:
            resolved["team"] = inc.team
        if inc.to_version and inc.kind == "framework_regression":
            resolved["framework_version"] = inc.to_version
        if inc.kind == "driver_regression":
            resolved["driver_version"] = inc.to_version
        if job_ids.get(inc.incident_id):
            resolved["job_ids"] = list(job_ids[inc.incident_id])
        rows.append({
            "incident_id": inc.incident_id, "kind": inc.kind, "family": inc.family, "severity": inc.severity,
            "start": inc.start, "end": inc.end,
            "scope": json.dumps({"spec": inc.scope, "magnitude": inc.magnitude, **resolved}, default=str),
        })
    frame = pd.DataFrame(rows, columns=["incident_id", "kind", "family", "severity", "start", "end", "scope"])
    for col in ("start", "end"):
        frame[col] = pd.to_datetime(frame[col], utc=True)
    return frame
