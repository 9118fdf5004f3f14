"""The loss tree's states, the dimensions of its leaves and the spans its window reads."""

import pandas as pd

from gpu_health.constants import LOSS_TREE_STATES, SLOWDOWN_STATES, STATE_FAMILY  # noqa: F401  (the goodput names)

# every paid GPU-minute is in exactly one of these (the package docstring says by which precedence)
STATES = LOSS_TREE_STATES
LEAF_DIMS = ["region", "node_id", "sku", "driver_version", "team", "workload_class", "model_type",
             "framework_version", "queue"]

LOSS_EXITS = frozenset({"failed", "node_fail", "timeout"})

# a job pending this long is held back, not being placed (a scheduler places a job within a cycle or two,
# ~30-60 s in Slurm): the one bar of the fragmentation KPI and of the scheduling detector
BLOCKED_WAIT = pd.Timedelta(minutes=3)

# a region is silent in a minute (its missing GPUs are missing data) when under this share of its expected GPUs
# report: a collector outage takes a region's rows away together, a broken GPU takes its own
NO_DATA_COVERAGE = 0.5

# a failed job's lost work is read from its runtime rows of this span before the failure (the
# caller passes them as ``runtime_history``), so a range and its partitions agree
FAILURE_LOOKBACK = pd.Timedelta(hours=1)

# A job is instrumented ("reports") in a partition when it wrote a job_runtime_metrics row in this span before the
# partition's end: its busy minutes without a row are then start-up, a checkpoint or a collector gap of a training
# loop known to report (productive), not unmeasured work. The span is what the live 5-minute run sees of a job's
# rows (the FAILURE_LOOKBACK it reads before its partition): a day's run must not know that a job will report
# later in its day when the live run could not (a definition of the pipeline, not of any cluster's reporting
# rate: a loop writing less than once an hour counts as uninstrumented between its rows).
REPORTING_MEMORY = FAILURE_LOOKBACK

# the scheduler events a partition's run reads before its start (the backlog it knows of)
SCHED_LOOKBACK = pd.Timedelta(hours=6)

# A job's attributes (its job_metadata row, the queue of its first submitted / started event) are known to a
# partition when they were written in this span before the partition's start, or in the partition: what its live
# run reads (the steps read job metadata and placement events this far back), whatever range it is computed in.
JOB_ATTRIBUTE_LOOKBACK = pd.Timedelta(days=4)

# a queue belongs to a region when this share of its placements is there (a queue spread over regions has none)
QUEUE_REGION_SHARE = 0.95

# A GPU fault explains a node's missing GPUs for this long after it (a GPU off the bus stays off until a
# reset, hours later): the inventory's own look-back.
FAULT_MEMORY = pd.Timedelta(hours=24)

# A node short of GPUs in this many partitions in a row before this one is a GPU gone, not an exporter
# gap: a dcgm-exporter restart or a lost scrape clears within Prometheus' 5-minute staleness window, so
# 15 minutes (also the brief's detection bound) is three times the longest gap a healthy collector leaves.
GAP_PERSIST_PARTITIONS = 3
