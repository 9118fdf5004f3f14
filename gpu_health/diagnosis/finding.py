"""What a detector reports: one finding per incident scope and partition (the alert lifecycle in
``diagnosis.alerts`` turns findings into alerts). Below every detector module, which all import it."""

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
