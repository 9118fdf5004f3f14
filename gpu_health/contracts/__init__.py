"""Data contracts of the source tables: pandera models and partition-aware validation."""

from gpu_health.contracts.models import (
    CONTRACTS,
    FIVE_MINUTE_SOURCES,
    OPTIONAL_DCGM_COLUMNS,
    OPTIONAL_COLUMNS,
    OPTIONAL_SOURCES,
    PARTITION_COLUMN,
    PLATFORM_SOURCES,
    columns,
    conform,
    empty_frame,
)

__all__ = ["CONTRACTS", "FIVE_MINUTE_SOURCES", "OPTIONAL_COLUMNS", "OPTIONAL_DCGM_COLUMNS", "OPTIONAL_SOURCES", "PARTITION_COLUMN",
           "PLATFORM_SOURCES", "columns", "conform", "empty_frame"]
