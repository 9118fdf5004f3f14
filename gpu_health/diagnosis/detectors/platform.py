"""Platform: the Kubernetes layer's detectors (``cpu_fallback``, ``pods_pending_gpu``, ``crash_loop``,
``device_plugin_missing``), registered from :mod:`gpu_health.diagnosis.platform`, where they and their table live
(the steps read its restart look-back). Their runbooks are their families' (software, scheduling)."""

from gpu_health.diagnosis import platform as P
from gpu_health.diagnosis.finding import Detector

RUNBOOKS: dict[str, str] = {}
DETECTORS = [
    Detector(P.detect_platform, emits=tuple(P.FAMILY.items()),
             needs=("kube_pods", "kube_nodes", "gpu", "runtime", "baselines", "meta", "inventory", "open_keys")),
]
