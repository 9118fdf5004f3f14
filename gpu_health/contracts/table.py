"""A table's catalogue entry: every fact about one table, in one place.

The entry is declared beside the table's pandera model: a source's in :mod:`gpu_health.contracts.models`, next to
its contract, so adding a source table is its entry there, its adapter(s), its simulator part and its test; the
derived tables' in :mod:`gpu_health.catalog`, which collects every entry. The lists other code reads (the 5-minute
sources, the optional ones, the daily and calendar files of the landing zone, ...) are computed from the entries,
never written out again.

The vocabularies are here, below the steps and the Dagster wiring, so that the cadence a step runs at and the
cadence a table's rows have are spelled one way (:mod:`gpu_health.steps.graph` names the same values).
"""

from __future__ import annotations

from dataclasses import dataclass

import pandera.pandas as pa

from gpu_health.constants import OWNERS

# cadences: the time grain of a table's rows, and (FIVE_MINUTE, DAILY, CALENDAR) the partitions a step runs on and a
# source lands in
EVERY_MINUTE = "minute"  # a sample a minute, written a 5-minute partition at a time
FIVE_MINUTE = "five_minute"  # one value per 5-minute partition
DAILY = "daily"  # one per UTC day
EVENT = "event"  # one per event, landed in the partition of its time
CALENDAR = "calendar"  # not partitioned: the table is read whole
CADENCES = (EVERY_MINUTE, FIVE_MINUTE, DAILY, EVENT, CALENDAR)
# a source's landing layout (contracts.md): a file per 5-minute partition, a file per day, or one whole file
LANDINGS = (FIVE_MINUTE, DAILY, CALENDAR)

SQL = "sql"
COLUMNAR = "columnar"
STORAGES = (SQL, COLUMNAR)
# ``status``: the cluster at a glance, the page an on-call engineer reads first
GROUPS = ("status", "telemetry", "kpis", "baselines", "diagnosis", "alerting", "finance")
KINDS = ("source", "derived", "quality")

# The optional source families: a cluster without the layer has none of its files, series or simulator rows, and
# runs exactly as before. Their absence is missing data (zero rows, a degraded KPI, a silent detector), never a
# partition's wait and never a page.
SERVING = "serving"  # the model-serving layer
FACILITY = "facility"  # rack power and cooling (PDUs, BMCs)
PLATFORM = "platform"  # kube-state-metrics: a Slurm or bare-metal cluster has no Kubernetes API
OPTIONAL_FAMILIES = (SERVING, FACILITY, PLATFORM)


@dataclass(frozen=True)
class Table:
    """One table (see :mod:`gpu_health.catalog` for what each field means)."""

    name: str
    kind: str  # source (landed and validated), derived (computed), quality (rejects and gaps of the sources)
    model: type[pa.DataFrameModel] | None
    partition_column: str | None
    cadence: str
    storage: str
    group: str
    owner: str
    grain: str
    description: str
    # sources only: the landing layout (LANDINGS), the optional family (None: required), and the columns added to
    # the contract after files were written (an older file without them reads as null)
    landing: str | None = None
    optional: str | None = None
    optional_columns: tuple[str, ...] = ()

    def __post_init__(self):
        for value, allowed, what in ((self.kind, KINDS, "kind"), (self.cadence, CADENCES, "cadence"),
                                     (self.storage, STORAGES, "storage"), (self.group, GROUPS, "group"),
                                     (self.owner, OWNERS, "owner")):
            if value not in allowed:
                raise ValueError(f"catalog: table {self.name!r} has {what} {value!r}, not one of {allowed}")
        if self.model is None and self.kind != "quality":
            raise ValueError(f"catalog: table {self.name!r} has no pandera model")
        if (self.kind == "source") != (self.landing is not None):
            raise ValueError(f"catalog: table {self.name!r}: a landing layout is declared for sources, and only them")
        if self.landing is not None and self.landing not in LANDINGS:
            raise ValueError(f"catalog: table {self.name!r} has landing {self.landing!r}, not one of {LANDINGS}")
        if self.optional is not None and (self.optional not in OPTIONAL_FAMILIES or self.landing != FIVE_MINUTE):
            raise ValueError(f"catalog: table {self.name!r}: optional {self.optional!r} is not one of "
                             f"{OPTIONAL_FAMILIES} of a 5-minute source")


def source(name: str, model: type[pa.DataFrameModel], partition_column: str | None, cadence: str, storage: str,
           owner: str, grain: str, description: str, *, landing: str = FIVE_MINUTE, optional: str | None = None,
           optional_columns: tuple[str, ...] = ()) -> Table:
    """A source table's entry: landed, validated against ``model``, in the ``telemetry`` group."""
    return Table(name, "source", model, partition_column, cadence, storage, "telemetry", owner, grain, description,
                 landing=landing, optional=optional, optional_columns=optional_columns)
