"""Convergence: a diverging loss, an exploding gradient norm, failed checkpoints (``training_divergence``,
``checkpoint_failure``; tickets), registered from :mod:`gpu_health.diagnosis.convergence`, where they and their
table live (the steps read its look-back). Their runbook is software's."""

from gpu_health.constants import CauseFamily
from gpu_health.diagnosis import convergence as C
from gpu_health.diagnosis.finding import Detector

RUNBOOKS: dict[str, str] = {}
DETECTORS = [
    Detector(C.detect_convergence, emits=(("training_divergence", CauseFamily.SOFTWARE.value),
                                          ("checkpoint_failure", CauseFamily.SOFTWARE.value)),
             needs=("loss_history", "gpu")),
]
