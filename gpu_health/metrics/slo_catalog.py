"""The serving SLOs, as code: objective, window, owner, page / ticket, and how each is measured.

Everything a reader sees about an SLO comes from here: :mod:`gpu_health.metrics.slo` computes each SLO's good and
bad events per partition and its error budget, the ``slo_burn`` detector pages or tickets on its burn rate,
``docs/slos.md`` is generated from this module (``python -m gpu_health.metrics.slo_docs``) and
``gpu-health slo export`` writes it as OpenSLO v1 YAML.

Every SLO is a ratio of good events to all events over a rolling window (the SRE workbook's form, the one burn-rate
alerting needs): a latency objective "p99 < 2 s" is "at least 99 % of requests complete within 2 s", since the
99th percentile is under 2 s exactly when at most 1 % of requests take longer. Its error budget is the share of
events allowed to be bad, ``1 - objective``.

The seeds' SLO table (``../shared/seeds/001``, "Inference Serving Alerting") is expressed as written:

====================  ============  ================================================
seed row              SLO name      as a ratio
====================  ============  ================================================
p99 latency < 2 s     latency-p99   requests with latency <= 2 s >= 99 %
p95 latency < 500 ms  latency-p95   requests with latency <= 0.5 s >= 95 %
availability > 99.9 % availability  requests that did not fail >= 99.9 %
TTFT < 300 ms         ttft-p99      first tokens within 0.3 s >= 99 % (p99 TTFT)
error rate < 0.1 %    error-rate    requests that did not fail >= 99.9 %
====================  ============  ================================================

Availability and error rate count the same events (a failed request); the seeds list both, so both are kept, and
error-rate is the ticket one: one incident pages once (through availability).
"""

from dataclasses import dataclass

SLIS = ("latency", "ttft", "availability")
ALERT_INTENTS = ("page", "ticket")
# Which models an SLO judges. A generative model's end-to-end latency grows with the length of its answer (seconds
# for a long one), so its user-facing latency is the time to the first token; a request/response model has no first
# token. A model is generative when it exported a TTFT histogram within the SLO window (metrics/slo.py).
APPLIES = ("request_response", "generative", "all")
# The rolling window of every SLO: 30 days, the period Sloth's and the SRE workbook's burn-rate factors assume
# (14.4x for 1 h spends 2 % of a 30-day budget; 6x for 6 h, 5 %; 3x for 1 d, 10 %; 1x for 3 d, 10 %).
WINDOW_DAYS = 30


@dataclass(frozen=True)
class Slo:
    """One SLO: a ratio of good events, its objective over a rolling window, who owns it and how it alerts."""

    name: str
    title: str
    seed_row: str            # the seeds' table row it expresses, as written there
    sli: str                 # latency | ttft (histogram share at or under threshold_s) | availability (non-failed)
    objective: float         # share of good events, e.g. 0.99
    threshold_s: float | None
    applies_to: str          # request_response | generative | all
    owner: str
    alert_intent: str        # page: fast burns page, slow burns ticket; ticket: every burn tickets
    description: str
    intent_rationale: str

    @property
    def budget(self) -> float:
        """The share of events allowed to be bad over the window."""
        return 1.0 - self.objective

    @property
    def window(self) -> str:
        return f"{WINDOW_DAYS}d"

    @property
    def histogram(self) -> str | None:
        """The ``inference_latency_buckets.histogram`` this SLO reads, or None (availability)."""
        return self.sli if self.sli in ("latency", "ttft") else None


CATALOG: tuple[Slo, ...] = (
    Slo(
        name="latency-p99",
        title="p99 latency under 2 s",
        seed_row="p99 latency | < 2 seconds | > 2s for 5m",
        sli="latency", objective=0.99, threshold_s=2.0, applies_to="request_response", owner="ml_platform",
        alert_intent="page",
        description="At least 99 % of a model's requests complete within 2 s (end to end): its p99 latency is under "
                    "2 s. Counted from the latency histogram's le=2 bucket where it has one; prometheus_client's "
                    "default buckets have 1 and 2.5 s, not 2 s: then the count at 2 s is interpolated and flagged.",
        intent_rationale="A real-time model (fraud scoring) answering slower than its callers' timeouts fails "
                         "transactions now: a fast burn pages the model's on-call.",
    ),
    Slo(
        name="latency-p95",
        title="p95 latency under 500 ms",
        seed_row="p95 latency | < 500ms | > 500ms for 5m",
        sli="latency", objective=0.95, threshold_s=0.5, applies_to="request_response", owner="ml_platform",
        alert_intent="page",
        description="At least 95 % of a model's requests complete within 0.5 s: its p95 latency is under 500 ms "
                    "(the typical worst case a user sees).",
        intent_rationale="The typical experience degrading at 14x its budget is a release or capacity problem "
                         "someone must act on within the hour.",
    ),
    Slo(
        name="availability",
        title="Availability over 99.9 %",
        seed_row="Availability | > 99.9% | < 99.9% over 1h",
        sli="availability", objective=0.999, threshold_s=None, applies_to="all", owner="ml_platform",
        alert_intent="page",
        description="At least 99.9 % of a model's requests succeed (not status=error / HTTP 5xx).",
        intent_rationale="Failed requests are lost business for a real-time model: a fast burn pages.",
    ),
    Slo(
        name="ttft-p99",
        title="p99 time to first token under 300 ms",
        seed_row="TTFT | < 300ms | > 300ms for 5m",
        sli="ttft", objective=0.99, threshold_s=0.3, applies_to="generative", owner="ml_platform",
        alert_intent="page",
        description="At least 99 % of a generative model's first tokens arrive within 0.3 s. 0.3 s is no bound of "
                    "the usual TTFT buckets (vLLM's: 0.25, 0.5): the count at 0.3 s is interpolated linearly within "
                    "the bucket, an estimate, and every row and alert says so.",
        intent_rationale="Time to first token is what a streaming user perceives as responsiveness: a fast burn pages.",
    ),
    Slo(
        name="error-rate",
        title="Error rate under 0.1 %",
        seed_row="Error rate | < 0.1% | > 0.1% for 5m",
        sli="availability", objective=0.999, threshold_s=None, applies_to="all", owner="ml_platform",
        alert_intent="ticket",
        description="Fewer than 0.1 % of a model's requests fail. The same events as availability, kept because the "
                    "seeds list it.",
        intent_rationale="Availability already pages on these events; a second page for the same incident is noise, "
                         "so this one only tickets (a record for the weekly review).",
    ),
)

BY_NAME = {s.name: s for s in CATALOG}


def validate_catalog() -> None:
    """Every entry is well formed (a test runs this)."""
    names = [s.name for s in CATALOG]
    assert len(names) == len(set(names)), "duplicate SLO names"
    for s in CATALOG:
        assert s.sli in SLIS and s.applies_to in APPLIES and s.alert_intent in ALERT_INTENTS, s.name
        assert 0 < s.objective < 1, s.name
        assert (s.threshold_s is not None) == (s.histogram is not None), s.name
