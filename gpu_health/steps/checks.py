"""The checks a step's findings decide, named and judged once.

The Dagster assets report them as asset checks (``gpu_health/defs``); the bulk path, which has no asset checks,
lists the failed ones as ``asset:check`` in its summary (``direct._findings``). Both take the names and the
verdicts from here, so a check renamed or judged differently changes both paths at once (``test_direct_path.py``
compares their failed checks).
"""

from __future__ import annotations

import pandas as pd

# (asset, check name)
PAID_INVARIANT = ("goodput_states", "paid_minutes_invariant")
LATENCY_MATCHES_REQUESTS = ("serving_slis", "latency_count_matches_requests")
# the alerts' checks: (check name, the severity whose firing alerts fail it)
ALERT_CHECKS = (("pages", "page"), ("tickets", "ticket"))


def contract_check(table: str) -> str:
    """The name of a source table's contract check."""
    return f"{table}_contract"


def firing_in_last_partition(frame: pd.DataFrame) -> pd.DataFrame:
    """The alert rows firing in the last partition of ``frame`` (a window's alerts): what the alerts' checks judge."""
    last = frame[frame["partition_start"] == frame["partition_start"].max()] if len(frame) else frame
    return last[last["status"] == "firing"] if len(last) else last


def failed_checks(step_name: str, result) -> list[str]:
    """The checks (``asset:check``) a step's result fails, from its findings and tables."""
    found, out = result.findings, []
    if "rejects" in found and (len(found["rejects"]) or len(found["quarantined"])):  # a source step
        out.append(f"{step_name}:{contract_check(step_name)}")
    if "paid_invariant" in found and not found["paid_invariant"]["passed"]:
        out.append(":".join(PAID_INVARIANT))
    if "mismatched" in found and len(found["mismatched"]):
        out.append(":".join(LATENCY_MATCHES_REQUESTS))
    if step_name == "alerts":
        firing = firing_in_last_partition(result.tables["alerts"])
        out += [f"alerts:{check}" for check, severity in ALERT_CHECKS
                if len(firing) and (firing["severity"] == severity).any()]
    return out
