"""Data contracts of the source tables: pandera models, their catalogue entries and partition-aware validation."""

from gpu_health.contracts.models import (
    CONTRACTS,
    FACILITY_SOURCES,
    FIVE_MINUTE_SOURCES,
    OPTIONAL_DCGM_COLUMNS,
    OPTIONAL_COLUMNS,
    OPTIONAL_SOURCES,
    PARTITION_COLUMN,
    PLATFORM_SOURCES,
    SERVING_SOURCES,
    SOURCE_TABLES,
    columns,
    conform,
    empty_frame,
)

__all__ = ["CONTRACTS", "FACILITY_SOURCES", "FIVE_MINUTE_SOURCES", "OPTIONAL_COLUMNS", "OPTIONAL_DCGM_COLUMNS",
           "OPTIONAL_SOURCES", "PARTITION_COLUMN", "PLATFORM_SOURCES", "SERVING_SOURCES", "SOURCE_TABLES", "columns",
           "conform", "empty_frame"]
