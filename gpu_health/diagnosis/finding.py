"""What a detector reports: one finding per incident scope and partition (the alert lifecycle in
``diagnosis.alerts`` turns findings into alerts), and what the detector registry holds of each detector. Below every
detector module, which all import it.

A page's **margin** (``Finding.margin``, stored as the alert's ``margin_at_page``) is how far its evidence cleared
the bar it had to clear, as a factor >= 1: for a rate, a share or an amount judged against a bar, observed / bar
(lost GPU-minutes / the impact floor); for an exact test at false-alarm rate alpha, log(p) / log(alpha), how many
times smaller the p-value is than alpha in log terms. A page needs every one of its conditions, so its margin is the
smallest over them (:func:`margin_of`): the factor by which every bar could be raised at once and the finding would
still have paged. A condition the evidence must stay under (GPUs utilized at most what waiting allows) counts as
bar / observed; the other side of the page's own bar (a history that did not burn at the factor the page must
exceed) is no margin: raising that bar keeps it met. A category (a cause in evidence) has none. None: not stated,
never read as 1.
"""

import math
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
    # how far the evidence of a page cleared its bar (the module docstring); None: not stated
    margin: float | None = None
    # what the detector reads back in the next partition (kept in the alert's scope as ``carry`` for the partition
    # that raised it only: alerts.carried), e.g. a state that must persist across partitions before it pages
    carry: dict | None = None


def margin_of(*over: tuple[float, float], p_values: tuple[tuple[float, float], ...] = ()) -> float | None:
    """The margin of a page (the module docstring): the smallest of observed / bar over the ``over`` pairs
    (observed, bar) and of log(p) / log(alpha) over the ``p_values`` pairs (p, alpha). Pairs whose bar is not a
    positive finite number, or whose observed value is not finite, say nothing; None when no pair says anything."""
    ratios = [float(o) / float(b) for o, b in over
              if b is not None and o is not None and math.isfinite(float(b)) and float(b) > 0
              and math.isfinite(float(o))]
    # a p-value that underflowed to 0 is as small as a float gets: a finite margin, not an infinite one
    ratios += [math.log(max(float(p), 5e-324)) / math.log(float(a)) for p, a in p_values
               if p is not None and a is not None and 0 < float(a) < 1 and float(p) == float(p)]
    return min(ratios) if ratios else None


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
