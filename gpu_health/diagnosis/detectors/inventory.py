"""Inventory: telemetry beyond or outside Finance's installed capacity (``inventory_excess``, ``unpriced_telemetry``,
``gpu_identity``, ``node_renamed``; tickets), registered from :mod:`gpu_health.diagnosis.inventory`, where they and
their table live. Their runbook is missing_data's."""

from gpu_health.diagnosis import inventory as I
from gpu_health.diagnosis.finding import Detector

RUNBOOKS: dict[str, str] = {}
DETECTORS = [
    Detector(I.detect_inventory, emits=tuple((name, I.FAMILY) for name in (
        "inventory_excess", "unpriced_telemetry", "gpu_identity", "node_renamed")),
             needs=("capacity", "moved", "gpu")),
]
