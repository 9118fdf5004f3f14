"""Facility and change policy: racks' cooling and power (``rack_cooling``, ``rack_power_cap``, ``rack_psu``,
``rack_power_headroom``) and changes without a ticket or window (``change_policy``), registered from
:mod:`gpu_health.diagnosis.facility`, where they and their table live. The GPU-level thermal detector defers to
them (gpu_health.diagnosis.detectors.hardware)."""

from gpu_health.constants import CauseFamily
from gpu_health.diagnosis import facility as F
from gpu_health.diagnosis.finding import Detector

FACILITY = CauseFamily.FACILITY.value
RUNBOOKS = {
    FACILITY: "Name the rack in the alert to the facility operator; check its cooling (CRAH / rear-door unit, "
              "blanking panels, inlet probes) or its power feed and cap; move or checkpoint the rack's jobs "
              "before its GPUs shut down. Runbook: docs/runbooks.md#facility",
}
DETECTORS = [
    Detector(F.detect_rack_cooling, emits=(("rack_cooling", FACILITY),), needs=("facility", "gpu")),
    Detector(F.detect_rack_power, emits=(("rack_power_cap", FACILITY), ("rack_psu", FACILITY),
                                         ("rack_power_headroom", FACILITY)), needs=("facility", "gpu")),
    Detector(F.detect_change_policy, emits=(("change_policy", CauseFamily.SOFTWARE.value),),
             needs=("changes", "inventory", "maintenance")),
]
