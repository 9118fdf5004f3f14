"""The embedded default source: the cluster simulator, read like any other source."""

import threading
from collections import OrderedDict

import pandas as pd

from gpu_health.contracts import CONTRACTS
from gpu_health.sim.scenario import Scenario
from gpu_health.sim.telemetry import Window, cost_capacity, maintenance_windows
from gpu_health.sources.base import DataNotReady, Fetched

ALL_TABLES = frozenset(CONTRACTS)  # the simulator writes every source table (its optional layers when turned on)


class SimulatorSource:
    """Generates contract tables for any window; live mode refuses windows not yet closed."""

    name = "simulator"

    def __init__(self, scenario: Scenario, *, live: bool = False, cache_windows: int = 4):
        self.scenario = scenario
        self.live = live
        self._cache: OrderedDict[tuple, Window] = OrderedDict()
        self._cache_size = cache_windows
        self._lock = threading.Lock()

    def tables(self) -> frozenset[str]:
        return ALL_TABLES

    @property
    def origin(self) -> str:
        return f"simulator:{self.scenario.name}(seed={self.scenario.seed})"

    def window(self, start, end) -> Window:
        """The generated window (all seven 5-minute tables share one job plan)."""
        key = (pd.Timestamp(start), pd.Timestamp(end))
        with self._lock:
            if key in self._cache:
                self._cache.move_to_end(key)
                return self._cache[key]
        win = Window(self.scenario, *key)
        with self._lock:
            self._cache[key] = win
            while len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)
        return win

    def read(self, table: str, start, end) -> Fetched:
        if self.live and start is not None and pd.Timestamp(end) > pd.Timestamp.now(tz="UTC"):
            raise DataNotReady(f"{table}: window ending {end} has not closed yet")
        if table == "maintenance_windows":
            return Fetched(maintenance_windows(self.scenario), self.origin)
        if table == "cost_capacity":
            days = pd.date_range(pd.Timestamp(start).normalize(), pd.Timestamp(end), freq="D", inclusive="left")
            frame = pd.concat([cost_capacity(self.scenario, d) for d in days], ignore_index=True)
            return Fetched(frame, self.origin)
        return Fetched(self.window(start, end).table(table), self.origin)
