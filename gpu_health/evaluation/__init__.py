"""The evaluation: how well the pipeline (and, for comparison, the seeds' static rules) pages on scenarios.

* :mod:`.harness` — runs the pipeline over each scenario of a suite into a fresh warehouse
  (``gpu-health evaluate``);
* :mod:`.scorer` — scores an alerts table against a scenario's ground truth (the definitions of
  detection, time to detect, top-1 accuracy, false and maintenance pages);
* :mod:`.static_rules` — the peer: the seeds' Prometheus rules replayed on the same telemetry and
  scored by the same scorer (``gpu-health evaluate --static-rules``);
* :mod:`.prometheus` — the ``prometheus`` process the peer queries.
* :mod:`.promexport` — contract frames as the exporters' OpenMetrics text, backfilled into it with ``promtool``.

Nothing in the pipeline imports this package; it imports the pipeline's pieces, never the CLI.
"""
