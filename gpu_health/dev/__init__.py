"""What ``make dev`` (``scripts/dev.sh``) starts besides ``dagster dev``: a recent partition start, the one
backfill of the days before the live sensor (:mod:`.backfill`), a scenario moved to happen now
(:mod:`.scenario`), and a local Alertmanager's configuration and webhook (:mod:`.alerts`).
``python -m gpu_health.dev --help`` lists the commands the script runs."""
