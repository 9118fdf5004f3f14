"""Detection and attribution: detectors, alert lifecycle, cohort judge, drill-down, decomposition."""
