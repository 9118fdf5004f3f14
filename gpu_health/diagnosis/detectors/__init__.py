"""The detector registry: one module per cause family, each a list of :class:`~gpu_health.diagnosis.finding.Detector`
(the function, the findings it raises with their families, the PartitionContext fields it reads) and the runbooks
of the families it owns. :data:`DETECTORS` runs them in one order, which is the order of a partition's findings
(alerts that merge findings read the first: keep it). Adding a detector is a module here and its name in MODULE_NAMES.

The rule every detector keeps: **a page rests on direct evidence from at least two independent witnesses; the
absence of an optional signal is missing data.** A field a collector does not export, a job that reports no
training metrics, rows a contract rejected, a collector gone silent: each degrades a judgement (a ticket at most, or
nothing), never pages. Each module's docstring has its detectors' page conditions; docs/runbooks.md has them all and
the per-family runbook sections generated from these modules (gpu_health.diagnosis.runbooks_doc).

Thresholds come from definitions (DCGM's Xid catalogue and clock-event bits, the device-level definitions of
gpu_health.metrics.device), physics (the 83 C slowdown temperature) or the cluster's own history (step-time
baselines, the same hour of the week, the SKU's working power in the same minutes); each constant says why it holds
on any cluster. Planned maintenance never pages: nodes inside a window are excluded.
"""

import importlib
from dataclasses import fields

from gpu_health.diagnosis.context import PartitionContext

# the detector modules of this package, in the order their findings are listed
MODULE_NAMES = ("hardware", "software", "slowdowns", "scheduling", "scheduling_shape", "gaming", "stalls",
                "missing_data", "serving", "platform", "convergence", "inventory", "facility")
MODULES = tuple(importlib.import_module(f"{__name__}.{name}") for name in MODULE_NAMES)
DETECTORS = [d for m in MODULES for d in m.DETECTORS]
# family -> the first action an alert of the family quotes (and its docs/runbooks.md anchor); each family's is one
# module's
RUNBOOKS = {family: text for m in MODULES for family, text in m.RUNBOOKS.items()}

# the context fields that are not frames a step reads: the partition's bounds, the alert state and the caches
CONTEXT_MACHINERY = frozenset({"start", "end", "prepared", "gpu_rows", "memo"})


def needs() -> tuple[str, ...]:
    """The PartitionContext fields the detectors read (the union of their ``needs``), in the context's field order:
    what a step that runs :func:`gpu_health.diagnosis.detect.detect` must give (a field left None or empty is
    missing data to the detectors that read it)."""
    wanted = {n for d in DETECTORS for n in d.needs}
    return tuple(f.name for f in fields(PartitionContext) if f.name in wanted)
