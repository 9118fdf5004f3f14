"""What a detector reports: one finding per incident scope and partition (the alert lifecycle in
``diagnosis.alerts`` turns findings into alerts), and what the detector registry holds of each detector. Below every
detector module, which all import it."""

from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass
class Finding:
    detector: str
    family: str
    severity: str  # page | ticket
    region: str
    key: str  # stable scope key: one incident = one alert
    nodes: list[str] = field(default_factory=list)
    team: str | None = None
    cohort: str | None = None
    change_event: str | None = None
    lost_gpu_minutes: float = 0.0
    summary: str = ""
    evidence: str = ""
    baseline: float | None = None
    value: float | None = None
    # the first action where the finding knows it ("Roll back chg-1 (a -> b)", "Drain node-3"); else the runbook's
    action: str | None = None
    # numbers the alert sums over its partitions and episodes (``max_*``: the maximum), kept in its scope as its
    # history: a ticket that recurs carries how often and how much
    tally: dict[str, float] | None = None


@dataclass(frozen=True)
class Detector:
    """One entry of the detector registry (``gpu_health.diagnosis.detectors.DETECTORS``): the function that judges a
    partition, the findings it raises as (detector name, cause family) pairs, and the PartitionContext fields it
    reads (``needs``: the frames a step must give for the detector to judge anything)."""

    run: Callable[..., list[Finding]]  # run(ctx: PartitionContext) -> list[Finding]
    emits: tuple[tuple[str, str], ...]
    needs: tuple[str, ...]

    @property
    def name(self) -> str:
        return self.run.__name__

    def __call__(self, ctx) -> list[Finding]:
        return self.run(ctx)
