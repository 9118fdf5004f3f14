"""Detection and attribution: detectors, alert lifecycle, cohort judge, drill-down, decomposition.

The metrics package registers this package's ``goodput_decomposition`` table; importing it first keeps
``from gpu_health.diagnosis.decompose import ...`` working as the first import of a process.
"""

import gpu_health.metrics  # noqa: F401  (see above: breaks the metrics <-> decompose import cycle)
