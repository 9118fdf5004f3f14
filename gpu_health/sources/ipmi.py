"""``facility_telemetry`` from a Prometheus holding the BMCs' series (prometheus-community ``ipmi_exporter``).

A rack is its nodes: the facility table is the rack x minute roll-up of each node's BMC, by a rack inventory
(``racks``: ``rack_id, region, node_ids, power_budget_kw``, a CSV/YAML file or a frame) -- the PDU layout and the
breaker ratings are the data-centre's records, not anything an exporter reports. Per minute (``last_over_time``
over the minute, as the DCGM adapter reads its gauges):

==================  ===============================================================================================
column              series (ipmi_exporter's docs/metrics.md)
==================  ===============================================================================================
power_kw            sum over the rack's nodes of ``ipmi_dcmi_power_consumption_current_watts`` / 1000 (DCMI: the
                    exporter's recommended live power reading); a rack-minute with no node reporting is no row
inlet_temp_c        max over the rack's nodes of ``ipmi_temperature_celsius{name=~"(?i).*inlet.*"}`` (the hottest
                    intake is the one that matters); null when no node exports an inlet sensor
outlet_temp_c       max of ``ipmi_temperature_celsius{name=~"(?i).*(exhaust|outlet).*"}``; null likewise
psus_failed         count of ``ipmi_sensor_state{type="Power Supply"} == 2`` (critical) over the rack's PSU
                    sensors; null when none is exported
facility_power_kw   ``hall_metric`` (a facility meter series with the region label, watts), / 1000; null without it
power_budget_kw     the inventory's rating of the rack
==================  ===============================================================================================

The node of a series is its ``node_label`` label, else its ``instance`` without the port (ipmi_exporter's remote
mode: the scrape config relabels the BMC target; name the node there). Series of nodes in no rack are ignored.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from gpu_health.contracts import columns, conform, empty_frame
from gpu_health.sources.base import Fetched
from gpu_health.sources.prom_frames import _K, _V, _coalesce_labels
from gpu_health.sources.prometheus import PrometheusSource, _Window

TABLE = "facility_telemetry"
POWER = "ipmi_dcmi_power_consumption_current_watts"
TEMPERATURE = "ipmi_temperature_celsius"
SENSOR_STATE = "ipmi_sensor_state"
INLET_RE = "(?i).*inlet.*"
OUTLET_RE = "(?i).*(exhaust|outlet).*"
CRITICAL = 2.0  # ipmi_exporter sensor state: 0 nominal, 1 warning, 2 critical


def load_racks(racks) -> pd.DataFrame:
    """The rack inventory: rack_id, region, node_ids (comma-separated or a list), power_budget_kw > 0."""
    if isinstance(racks, str | Path):
        path = Path(racks)
        if path.suffix in (".yaml", ".yml"):
            import yaml

            frame = pd.DataFrame(yaml.safe_load(path.read_text()))
        else:
            frame = pd.read_csv(path)
    else:
        frame = pd.DataFrame(racks)
    need = {"rack_id", "region", "node_ids", "power_budget_kw"}
    if not need <= set(frame.columns):
        raise ValueError(f"rack inventory needs columns {sorted(need)}, got {sorted(frame.columns)}")
    frame = frame.copy()
    frame["node_ids"] = [",".join(v) if isinstance(v, list | tuple) else str(v) for v in frame["node_ids"]]
    frame["power_budget_kw"] = pd.to_numeric(frame["power_budget_kw"], errors="raise").astype(float)
    if (frame["power_budget_kw"] <= 0).any() or frame["rack_id"].duplicated().any():
        raise ValueError("rack inventory: every power_budget_kw must be > 0 and every rack_id unique")
    return frame.reset_index(drop=True)


class IpmiFacilitySource(PrometheusSource):
    """``facility_telemetry`` from ipmi_exporter series in Prometheus, rolled up to racks (module docstring).
    Accepts the keyword arguments of :class:`PrometheusSource` (selector, timeouts, retries)."""

    name = "ipmi"

    def __init__(self, url: str, racks, *, node_label: str = "node", hall_metric: str | None = None,
                 hall_scale: float = 0.001, **kwargs):
        super().__init__(url, **kwargs)
        self.racks = load_racks(racks)
        self.node_label = node_label
        self.hall_metric = hall_metric
        self.hall_scale = hall_scale
        members = [(n.strip(), r) for r, ns in zip(self.racks["rack_id"], self.racks["node_ids"])
                   for n in ns.split(",") if n.strip()]
        self.rack_of = dict(members)

    def tables(self) -> frozenset[str]:
        return frozenset({TABLE})

    def version(self, table: str, start: pd.Timestamp, now: pd.Timestamp | None = None) -> str | None:
        return "clock"

    def read(self, table: str, start: pd.Timestamp, end: pd.Timestamp) -> Fetched:
        if table != TABLE:
            raise ValueError(f"{self.name} provides only {TABLE}, not {table!r}")
        start, end = pd.Timestamp(start).tz_convert("UTC"), pd.Timestamp(end).tz_convert("UTC")
        if start.floor("min") != start or end.floor("min") != end or end <= start:
            raise ValueError(f"window [{start}, {end}) must be minute-aligned and non-empty")
        w = _Window(start, end)
        frame = self._facility(w)
        return Fetched(frame=frame, origin=f"{self.url} ({TABLE} {start.isoformat()}..{end.isoformat()})")

    def _per_node(self, metric: str, w: _Window, regex: dict | None = None) -> pd.DataFrame:
        """rack_id, _K (minute >= 1), _V of ``metric`` for the nodes of a rack."""
        df = self._range(self._last(metric, regex), w)
        if df.empty:
            return pd.DataFrame(columns=["rack_id", _K, _V])
        node = _coalesce_labels(df, (self.node_label, "instance")).astype(object).str.replace(r":\d+$", "", regex=True)
        df = df.assign(rack_id=node.map(self.rack_of))
        return df[df["rack_id"].notna() & (df[_K] >= 1) & df[_V].notna()][["rack_id", _K, _V]]

    def _facility(self, w: _Window) -> pd.DataFrame:
        power = self._per_node(POWER, w)
        if power.empty:
            return empty_frame(TABLE)
        out = power.groupby(["rack_id", _K])[_V].sum().div(1000.0).rename("power_kw").to_frame()
        for col, regex in (("inlet_temp_c", INLET_RE), ("outlet_temp_c", OUTLET_RE)):
            t = self._per_node(TEMPERATURE, w, {"name": regex})
            out[col] = t.groupby(["rack_id", _K])[_V].max() if len(t) else np.nan
        psu = self._per_node(SENSOR_STATE, w, {"type": "Power Supply"})
        out["psus_failed"] = (psu.assign(bad=psu[_V] >= CRITICAL).groupby(["rack_id", _K])["bad"].sum()
                              if len(psu) else np.nan)
        out = out.reset_index()
        racks = self.racks.set_index("rack_id")
        out["region"] = out["rack_id"].map(racks["region"])
        out["node_ids"] = out["rack_id"].map(racks["node_ids"])
        out["power_budget_kw"] = out["rack_id"].map(racks["power_budget_kw"])
        out["facility_power_kw"] = np.nan
        if self.hall_metric:
            hall = self._range(self._last(self.hall_metric), w)
            if len(hall):
                hall = hall.assign(region=self._region(hall))
                hall = hall[hall[_K] >= 1].groupby(["region", _K])[_V].sum() * self.hall_scale
                key = pd.MultiIndex.from_arrays([out["region"], out[_K]])
                out["facility_power_kw"] = hall.reindex(key).to_numpy()
        out["ts"] = w.ts(out[_K]).to_numpy()
        out["psus_failed"] = pd.array([pd.NA if pd.isna(v) else int(v) for v in out["psus_failed"]], dtype="Int64")
        out = out.sort_values(["ts", "region", "rack_id"]).reset_index(drop=True)
        return conform(out[columns(TABLE)].copy(), TABLE)
