"""The goodput loss tree: every paid GPU-minute in exactly one state.

Pure pandas (no Dagster). Input: the source frames of a window (one 5-minute
partition or a range; everything is computed per minute and summed per
partition), plus the history it needs (scheduler events before the window, job
metadata of long-running jobs, the step-time baseline, the node inventory, the
capacity Finance pays for and the maintenance calendar).

State of a GPU-minute, by precedence:

1. ``no_data`` -- its region's collector is silent (under half of the region's
   expected GPUs report in that minute): missing data, never a GPU incident. This
   includes the region's paid capacity above its inventory (node ``unseen``).
2. ``maintenance`` -- unallocated (or not reporting) inside a planned window.
3. ``hw_unavailable`` -- a GPU-fault Xid / double-bit ECC error this minute; or
   unallocated on a node that is down / drained outside a window; or expected
   but not reporting while its region reports *and* something besides the
   absence points at the hardware (the node says it is degraded / drained / down,
   it reported a GPU fault in the last day, or it has been short of GPUs for
   15 minutes: :func:`hardware_corroboration`) -- otherwise the missing GPU is
   ``no_data`` (an exporter gap or a rejected file is missing data, not a broken GPU);
   or paid capacity above the inventory (node ``unseen``) while its region reports.
4. unallocated and healthy -> ``idle_blocked`` for the share of idle GPUs that
   pending jobs are waiting for (min(idle, pending GPUs) cluster-wide), the rest
   ``idle_no_demand``.
5. allocated:
   * ``failure_loss`` -- minutes of a job that failed (failed / node_fail /
     timeout) in the window, spent after its last durable checkpoint;
   * ``allocated_idle`` -- the GPU does no work (util < 5 % or SM activity < 0.05: a hung
     collective spins at ~100 % util with SM activity ~0);
   * ``allocated_unproductive`` -- busy but no training progress: a
     batch/distributed job reporting no training metrics at all (dummy load
     games utilization this way) or reporting minutes with 0 steps (a hang);
   * busy notebooks (interactive jobs report no steps) count as ``productive``;
   * progressing minutes earn ``productive`` = min(1, baseline / actual step
     time) x (1 - checkpoint share); the rest is ``slowdown_checkpoint`` and the
     step-time excess split over ``slowdown_data_io`` (loader wait over its
     baseline), ``slowdown_network`` (gradient sync over its baseline) and
     ``slowdown_compute`` (the remainder: throttling, faulty GPU, regressions).

Paid GPU-minutes per region x SKU are Finance's ``capacity_gpus`` x minutes (the
inventory seen where Finance has no cost row for the region x SKU); the states sum
to them exactly. GPUs seen beyond the capacity are an inventory discrepancy, not
paid (:func:`bound_to_capacity`).
"""

# The package's public names (and the private ones tests and steps reach for), re-exported so that
# ``from gpu_health.metrics.goodput import X`` and ``goodput.X`` keep working. Modules of the package import each
# other, never this file.
from gpu_health.constants import FATAL_XIDS as XID_GPU_FAULT  # noqa: F401
from gpu_health.metrics.goodput.capacity import bound_to_capacity, capacity_as_of  # noqa: F401
from gpu_health.metrics.goodput.classify import (DOWN_HEALTH, _baseline_arrays, _progress_split,  # noqa: F401
                                                 missing_state, reported_state_weights)
from gpu_health.metrics.goodput.compute import _rows_between, compute_states, compute_states_range  # noqa: F401
from gpu_health.metrics.goodput.failures import _failures, enrich_failures  # noqa: F401
from gpu_health.metrics.goodput.gaps import _missing_minutes, hardware_corroboration  # noqa: F401
from gpu_health.metrics.goodput.grid import _codes, _minutes  # noqa: F401
from gpu_health.metrics.goodput.history import _blocked_fraction, _SchedHistory  # noqa: F401
from gpu_health.metrics.goodput.jobs import (QueueEvents, _job_ns, _reports_at_partition_end,  # noqa: F401
                                             _row_attributes, job_lookup, submitted_ns)
from gpu_health.metrics.goodput.maintenance import _maintenance_mask_by_rows, maintenance_mask  # noqa: F401
from gpu_health.metrics.goodput.queues import (_pending_sweep, _placing, _queue_regions_of, first_node,  # noqa: F401
                                               pending_gpus, placement_events, placements, queue_nodes,
                                               queue_regions, queue_table)
from gpu_health.metrics.goodput.rollups import _aggregate, goodput_ratio, rollup  # noqa: F401
from gpu_health.metrics.goodput.states import (BLOCKED_WAIT, FAILURE_LOOKBACK, FAULT_MEMORY,  # noqa: F401
                                               GAP_PERSIST_PARTITIONS, JOB_ATTRIBUTE_LOOKBACK, LEAF_DIMS,
                                               LOSS_EXITS, NO_DATA_COVERAGE, QUEUE_REGION_SHARE, REPORTING_MEMORY,
                                               SCHED_LOOKBACK, SLOWDOWN_STATES, STATE_FAMILY, STATES)
