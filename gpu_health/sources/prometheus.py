"""Read gpu_telemetry, node_telemetry and network_telemetry from Prometheus.

dcgm-exporter and node-exporter series are mapped to contract columns by
:mod:`gpu_health.sources.dcgm_fields` (names, label variants, derivations).

Minute semantics. A row for minute ``ts`` holds the last sample in
``[ts, ts+60s)``: every query is ``last_over_time(m[59999ms])`` evaluated at
``ts + 59.999s`` with a 60 s step, so a series that stopped reporting yields
no row (the 5-minute staleness look-back of a plain selector would invent
up to five). One extra minute before the window is fetched so that counters
and the Xid gauge can be differenced at the window's first minute.

Completeness (:meth:`PrometheusSource.judge`). A window is never read before
its end is ``ready_lag`` in the past. Then it is *complete* when its last
minute holds a sample of the table's liveness metric (``DCGM_FI_DEV_GPU_UTIL``
for GPUs, ``node_cpu_seconds_total`` for nodes,
``node_infiniband_port_data_received_bytes_total`` for links). A window whose
last minute has none is

* *late* (:class:`DataNotReady`: wait) while the exporter has reported nothing
  after the window's end and less than ``absent_after`` has passed since it:
  the samples may still be in flight (scrape interval, remote-write or
  federation delay);
* *closed* once the exporter has reported after the window's end (the source
  has moved past it: the missing minutes will never arrive), or has stayed
  silent for ``absent_after`` after it (*absent*: not deployed, or down).
  A closed window is read as it is: minutes without samples have no rows, and
  :attr:`Fetched.silent_family` names the liveness metric so that the caller
  records each 5-minute partition without a row as missing data. It is never
  a reason to hold the other tables back: an absent exporter degrades the
  partition, it does not block it.

So a collector being silent reads as missing data, never as every GPU gone.

Rows lacking a required contract column (an exporter configured without a
default field, a node's first minute where no counter increase is known yet)
are dropped with a warning by default (``incomplete_rows="drop"``), or kept
with nulls for the contract check to report (``"keep"``). Columns the contract
makes nullable never cause a drop: ``latency_us`` and ``retransmits`` have no
standard exporter behind them (see dcgm_fields), and ``power_w`` / ``temp_c``
are null where a GPU does not report them.

Node health (a heuristic: no exporter reports it). A node that reports is
``ok``, unless in that minute one of its GPUs raised a fatal Xid
(:data:`~gpu_health.constants.XID_NEEDS_RESET`) or a double-bit ECC
error, then ``degraded``. ``down`` is never produced (a down node has no
row) and ``drained`` needs the scheduler, which Prometheus does not have.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Mapping

import numpy as np
import pandas as pd
import requests

from gpu_health.constants import MINUTE, XID_NEEDS_RESET
from gpu_health.contracts import PLATFORM_SOURCES, SERVING_SOURCES, columns, empty_frame
from gpu_health.sources import dcgm_fields as F
from gpu_health.sources.base import DEFAULT_ABSENT_AFTER, DataNotReady, Fetched, SourceError
from gpu_health.sources.prom_frames import _K, _V, _coalesce_labels, _increase

log = logging.getLogger(__name__)

TABLES = frozenset({"gpu_telemetry", "node_telemetry", "network_telemetry"})
LIVENESS = {
    "gpu_telemetry": F.GPU_FIELD_BY_COLUMN["gpu_util_pct"].metrics[0],
    "node_telemetry": F.NODE_CPU_SECONDS,
    # the InfiniBand collector, not node-exporter's CPU: a node-exporter without it (no fabric, or the
    # collector disabled) has no link to report, and that is missing network data, not "no links"
    "network_telemetry": F.IB_RX_BYTES,
}
# Contract columns whose exporter label can be overridden (``labels=``), and where the override applies.
LABEL_OVERRIDES = frozenset(F.GPU_LABELS)
# readiness decisions remembered per process: 3 tables x 288 partitions a day x ~3 weeks, far more
# than the sensor's 24 h look-back asks about
DECIDED_MAX = 20_000
RETRY_STATUS = frozenset({429, 500, 502, 503, 504})
_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*\Z")
_MATCHER = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"\s*(,|\Z)')
_UNESCAPE = {"n": "\n", "r": "\r", "t": "\t", "\\": "\\", '"': '"'}


# --- PromQL text ---------------------------------------------------------------
def promql_escape(value: str) -> str:
    """Escape ``value`` for a double-quoted PromQL string (backslash, quote, newline, CR, tab)."""
    return (
        value.replace("\\", "\\\\")
        .replace('"', '\\"')
        .replace("\n", "\\n")
        .replace("\r", "\\r")
        .replace("\t", "\\t")
    )


def promql_string(value: str) -> str:
    """``value`` as a double-quoted PromQL string literal."""
    return f'"{promql_escape(value)}"'


def label_matchers(equal: Mapping[str, str] | None = None, regex: Mapping[str, str] | None = None) -> str:
    """``{a="x",b=~"y"}`` from equality and regex matchers (empty string when none)."""
    parts = []
    for op, matchers in (("=", equal or {}), ("=~", regex or {})):
        for name, value in matchers.items():
            if not _LABEL_NAME.match(name):
                raise ValueError(f"invalid Prometheus label name {name!r}")
            parts.append(f"{name}{op}{promql_string(value)}")
    return "{" + ",".join(parts) + "}" if parts else ""


def parse_matchers(text: str) -> list[tuple[str, str, str]]:
    """``(name, op, value)`` of PromQL label matchers: ``cluster="a", job=~"dcgm.*"`` (braces optional).

    The operators are PromQL's (``=``, ``!=``, ``=~``, ``!~``); values are double-quoted with
    PromQL's escapes. Anything else is a ValueError naming the text, so a typo in a deployment's
    configuration fails at start-up instead of silently selecting nothing.
    """
    body = text.strip()
    if body.startswith("{") and body.endswith("}"):
        body = body[1:-1]
    out: list[tuple[str, str, str]] = []
    pos = 0
    while pos < len(body) and body[pos:].strip():
        m = _MATCHER.match(body, pos)
        if m is None:
            raise ValueError(f"cannot parse label matchers {text!r} at {body[pos:]!r}: expected name=\"value\" "
                             f"(operators = != =~ !~), comma-separated")
        value = re.sub(r"\\(.)", lambda e: _UNESCAPE.get(e.group(1), e.group(0)), m.group(3))
        out.append((m.group(1), m.group(2), value))
        pos = m.end()
    return out


def render_matchers(matchers: list[tuple[str, str, str]]) -> str:
    """``{a="x",b=~"y"}`` from ``(name, op, value)`` triples (empty string when none)."""
    parts = []
    for name, op, value in matchers:
        if not _LABEL_NAME.match(name):
            raise ValueError(f"invalid Prometheus label name {name!r}")
        if op not in ("=", "!=", "=~", "!~"):
            raise ValueError(f"invalid label matcher operator {op!r}")
        parts.append(f"{name}{op}{promql_string(value)}")
    return "{" + ",".join(parts) + "}" if parts else ""


def parse_label_overrides(text: str | Mapping[str, str] | None) -> dict[str, str]:
    """``{"node_id": "instance", ...}`` from ``node_id=instance,gpu_uuid=gpu_uuid`` (or a mapping).

    Keys are contract columns (``node_id``, ``gpu_uuid``, ``gpu_index``, ``sku``, ``job_id``,
    ``driver_version``); values are the exporter's label names.
    """
    if not text:
        return {}
    pairs = dict(text) if isinstance(text, Mapping) else {}
    if not isinstance(text, Mapping):
        for item in text.split(","):
            if not item.strip():
                continue
            col, sep, label = item.partition("=")
            if not sep:
                raise ValueError(f"label override {item!r} is not COLUMN=LABEL (e.g. node_id=instance)")
            pairs[col.strip()] = label.strip()
    for col, label in pairs.items():
        if col not in LABEL_OVERRIDES:
            raise ValueError(f"label override for unknown column {col!r}; known: {sorted(LABEL_OVERRIDES)}")
        if not _LABEL_NAME.match(label):
            raise ValueError(f"invalid Prometheus label name {label!r} for {col}")
    return pairs


# --- small frame helpers ---------------------------------------------------------
def _sum_strict(df: pd.DataFrame, keys: list[str], col: str) -> pd.Series:
    """Sum of ``col`` per group; NaN if any member is NaN (a partial sum would under-report)."""
    groups = [df[k] for k in keys]
    total = df[col].groupby(groups, sort=False).sum(min_count=1)
    any_nan = df[col].isna().groupby(groups, sort=False).any()
    return total.where(~any_nan)


def _to_contract(table: str, df: pd.DataFrame) -> pd.DataFrame:
    """Contract columns in order, cast to the contract dtypes where the values allow."""
    template = empty_frame(table)
    out = pd.DataFrame(index=df.index)
    for name in columns(table):
        col = df[name] if name in df.columns else pd.Series(np.nan, index=df.index)
        dtype = template[name].dtype
        if pd.api.types.is_integer_dtype(dtype) or pd.api.types.is_bool_dtype(dtype):
            if col.isna().any():
                dtype = "Int64" if pd.api.types.is_integer_dtype(dtype) else "boolean"
        try:
            out[name] = col.astype(dtype)
        except (TypeError, ValueError):
            out[name] = col
    return out.reset_index(drop=True)


class PrometheusSource:
    """Contract tables from a Prometheus holding dcgm-exporter and node-exporter series.

    ``region_label``: label holding the region; ``region``: value used when a
    series has no such label (a per-region Prometheus, or stock exporters that
    set none). ``selector``: extra label matchers put on every query, as a
    mapping of equality matchers (``{"cluster": "a"}``) or PromQL text
    (``cluster="a",job=~"dcgm.*"``). ``labels``: exporter label names per
    contract column, tried before the built-in variants of
    :data:`~gpu_health.sources.dcgm_fields.GPU_LABELS` (e.g.
    ``{"node_id": "instance"}`` when dcgm-exporter runs without ``Hostname``;
    an ``instance`` value loses its ``:port``); the ``node_id`` override also
    names node-exporter's host label. ``ready_lag``: how long after a window's
    end its data may be complete; ``absent_after``: how long an exporter that
    has not reported past a window is waited for (see the module docstring).
    Transient failures (connection errors, timeouts, 429, 5xx) are retried
    ``retries`` times with exponential backoff from ``backoff_s``.
    """

    name = "prometheus"

    def __init__(
        self,
        url: str,
        *,
        region_label: str = F.DEFAULT_REGION_LABEL,
        region: str | None = None,
        step: str = "60s",
        timeout: float = 30.0,
        retries: int = 4,
        backoff_s: float = 0.5,
        max_backoff_s: float = 30.0,
        ready_lag: str | pd.Timedelta = "2min",
        absent_after: str | pd.Timedelta = DEFAULT_ABSENT_AFTER,
        selector: Mapping[str, str] | str | None = None,
        labels: Mapping[str, str] | str | None = None,
        disk_devices: str = F.DEFAULT_DISK_DEVICES,
        incomplete_rows: str = "drop",
        max_steps_per_query: int = 10_000,
        session: requests.Session | None = None,
        clock: Callable[[], pd.Timestamp] | None = None,
        sleep: Callable[[float], None] = time.sleep,
        kube_state_metrics: bool = False,
        serving: bool = False,
        serving_metrics: Mapping[str, str] | str | None = None,
    ):
        if pd.Timedelta(step) != MINUTE:
            raise ValueError(f"step must be 60s: the contract's grain is the minute (got {step!r})")
        if incomplete_rows not in ("drop", "keep"):
            raise ValueError("incomplete_rows must be 'drop' or 'keep'")
        if isinstance(selector, str):
            self.matchers = parse_matchers(selector)
        else:
            self.matchers = [(k, "=", v) for k, v in (selector or {}).items()]
        render_matchers(self.matchers)  # validates label names early
        self.label_overrides = parse_label_overrides(labels)
        self.gpu_labels = {col: _prepend(self.label_overrides.get(col), aliases) for col, aliases in F.GPU_LABELS.items()}
        self.node_labels = _prepend(self.label_overrides.get("node_id"), F.NODE_EXPORTER_NODE_LABELS)
        if not url:
            raise ValueError("the Prometheus source needs a URL (GPU_HEALTH_PROMETHEUS_URL / --prometheus-url)")
        self.url = url.rstrip("/")
        self.region_label = region_label
        self.region = region
        self.timeout = timeout
        self.retries = retries
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s
        self.ready_lag = pd.Timedelta(ready_lag)
        self.absent_after = pd.Timedelta(absent_after)
        if self.ready_lag < pd.Timedelta(0) or self.absent_after < MINUTE:
            raise ValueError(f"ready_lag must be >= 0 and absent_after >= 1min (got {ready_lag!r}, {absent_after!r})")
        self.disk_devices = disk_devices
        self.incomplete_rows = incomplete_rows
        self.max_steps_per_query = max_steps_per_query
        self._session = session or requests.Session()
        self._clock = clock or (lambda: pd.Timestamp.now(tz="UTC"))
        self._sleep = sleep
        self._decided: dict[tuple[str, pd.Timestamp, pd.Timestamp], str] = {}
        # kube_pods / kube_nodes from kube-state-metrics (gpu_health.sources.kube_state_metrics): optional sources,
        # provided only when asked for, and read as they are (never judged late: an optional source never waits)
        self.kube_state_metrics = kube_state_metrics
        # inference_requests / inference_latency_buckets from a model server's histograms
        # (gpu_health.sources.serving_metrics): optional sources too, with the metric families it exports
        from gpu_health.sources.serving_metrics import parse_families
        self.serving = serving
        self.serving_families = parse_families(serving_metrics)

    # --- Source protocol -------------------------------------------------------------
    def tables(self) -> frozenset[str]:
        from gpu_health.sources.kube_state_metrics import KUBE_TABLES
        from gpu_health.sources.serving_metrics import SERVING_TABLES
        return (TABLES | (KUBE_TABLES if self.kube_state_metrics else frozenset())
                | (SERVING_TABLES if self.serving else frozenset()))

    def read(self, table: str, start: pd.Timestamp, end: pd.Timestamp) -> Fetched:
        if self.kube_state_metrics and table in PLATFORM_SOURCES:
            from gpu_health.sources.kube_state_metrics import read_kube
            start, end = pd.Timestamp(start).tz_convert("UTC"), pd.Timestamp(end).tz_convert("UTC")
            return Fetched(frame=read_kube(self, table, _Window(start, end)),
                           origin=f"{self.url} ({table} {start.isoformat()}..{end.isoformat()})")
        if self.serving and table in SERVING_SOURCES:
            from gpu_health.sources.serving_metrics import read_serving
            start, end = pd.Timestamp(start).tz_convert("UTC"), pd.Timestamp(end).tz_convert("UTC")
            return Fetched(frame=read_serving(self, table, _Window(start, end), self.serving_families),
                           origin=f"{self.url} ({table} {start.isoformat()}..{end.isoformat()})")
        if table not in TABLES:
            raise ValueError(f"{self.name} does not provide {table!r}; it provides {sorted(TABLES)}")
        start, end = pd.Timestamp(start), pd.Timestamp(end)
        if start.tzinfo is None or end.tzinfo is None:
            raise ValueError("start and end must be timezone-aware (UTC)")
        start, end = start.tz_convert("UTC"), end.tz_convert("UTC")
        if start.floor("min") != start or end.floor("min") != end or end <= start:
            raise ValueError(f"window [{start}, {end}) must be minute-aligned and non-empty")
        origin = f"{self.url} ({table} {start.isoformat()}..{end.isoformat()})"
        state = self.judge(table, start, end)
        if state.startswith("late"):
            raise DataNotReady(f"{self.url}: {table} window [{start}, {end}) {state}")
        window = _Window(start, end)
        if table == "gpu_telemetry":
            frame = self._gpu(window)[0]
        elif table == "node_telemetry":
            frame = self._node(window)
        else:
            frame = self._network(window)
        if state != "complete":
            log.warning("%s: %s window [%s, %s) %s: read as it is (%d rows)", self.url, table, start, end, state, len(frame))
            origin = f"{origin}; {state}"
        return Fetched(frame=frame, origin=origin, silent_family=LIVENESS[table])

    def version(self, table: str, start: pd.Timestamp, now: pd.Timestamp | None = None) -> str | None:
        """The sensor's readiness token of the 5-minute partition at ``start``: None while it is late.

        A constant per decision ("complete" / "closed"), so a partition never re-runs because
        Prometheus was asked again.
        """
        state = self.judge(table, pd.Timestamp(start), pd.Timestamp(start) + 5 * MINUTE, now=now)
        return None if state.startswith("late") else state.split(":")[0]

    def judge(self, table: str, start: pd.Timestamp, end: pd.Timestamp, now: pd.Timestamp | None = None) -> str:
        """``complete``, ``closed: ...`` or ``late: ...`` for the window (module docstring: Completeness), at ``now``
        (the source's clock when None).

        Decided windows are remembered: the sensor asks for every partition of its look-back on each
        tick, and a query per partition and table each time would load Prometheus for nothing. So a
        window once closed stays closed in this process, even if samples are backfilled into it
        later (re-run that partition by hand); at most :data:`DECIDED_MAX` decisions are kept (the
        oldest windows are forgotten first: they are beyond any sensor look-back).
        """
        key = (table, start, end)
        if key in self._decided:
            return self._decided[key]
        now = self._clock() if now is None else now
        if end > now - self.ready_lag:
            return f"late: ends less than {self.ready_lag} before now ({now})"
        metric = LIVENESS[table]
        if self._any_sample(metric, end - MINUTE, end):
            state = "complete"
        else:
            upto = min(now, end + self.absent_after)
            if self._any_sample(metric, end, upto + pd.Timedelta(milliseconds=1)):
                state = f"closed: no {metric} sample in its last minute, but samples after it (a gap)"
            elif now >= end + self.absent_after:
                state = f"closed: no {metric} sample in its last minute nor in the {self.absent_after} after it (exporter absent)"
            else:
                return (f"late: no {metric} sample in its last minute [{end - MINUTE}, {end}) and none after it yet; "
                        f"waiting up to {self.absent_after} after its end: data not arrived yet")
        if len(self._decided) >= DECIDED_MAX:
            for old in sorted(self._decided, key=lambda k: k[2])[: DECIDED_MAX // 2]:
                del self._decided[old]
        self._decided[key] = state
        return state

    def _any_sample(self, metric: str, lo: pd.Timestamp, hi: pd.Timestamp) -> bool:
        """Whether any series of ``metric`` (under the selector) has a sample in ``[lo, hi)``."""
        width_ms = int((hi - lo) / pd.Timedelta(milliseconds=1)) - 1
        expr = f"count(last_over_time({metric}{render_matchers(self.matchers)}[{max(width_ms, 1)}ms]))"
        data = self._api("/api/v1/query", {"query": expr, "time": _fmt(hi.timestamp() - 0.001)})
        return bool(data.get("result"))

    # --- HTTP --------------------------------------------------------------------------
    def _api(self, path: str, params: Mapping[str, str]) -> dict:
        """POST to the HTTP API; retry transient failures; return ``data`` or raise SourceError."""
        url = self.url + path
        for attempt in range(self.retries + 1):
            retry_after = None
            try:
                resp = self._session.post(url, data=params, timeout=self.timeout)
            except (requests.ConnectionError, requests.Timeout) as exc:
                problem = f"{type(exc).__name__}: {exc}"
            else:
                if resp.status_code in RETRY_STATUS:
                    problem = f"HTTP {resp.status_code}"
                    retry_after = resp.headers.get("Retry-After")
                else:
                    return self._payload(url, params, resp)
            if attempt == self.retries:
                raise SourceError(f"{url} failed after {self.retries + 1} attempts: {problem} (query {params.get('query')!r})")
            delay = min(self.backoff_s * 2**attempt, self.max_backoff_s)
            if retry_after and retry_after.isdigit():
                delay = min(float(retry_after), self.max_backoff_s)
            log.warning("Prometheus %s: %s; retry %d/%d in %.1fs", url, problem, attempt + 1, self.retries, delay)
            self._sleep(delay)
        raise AssertionError("unreachable")

    @staticmethod
    def _payload(url: str, params: Mapping[str, str], resp: requests.Response) -> dict:
        try:
            body = resp.json()
        except ValueError as exc:
            raise SourceError(f"{url}: HTTP {resp.status_code}, body is not JSON: {resp.text[:200]!r}") from exc
        if resp.status_code != 200 or body.get("status") != "success":
            raise SourceError(
                f"{url}: HTTP {resp.status_code} {body.get('errorType', '')}: {body.get('error', '')} "
                f"(query {params.get('query')!r})"
            )
        return body["data"]

    # --- queries -----------------------------------------------------------------------
    def _last(self, metric: str, regex: Mapping[str, str] | None = None) -> str:
        matchers = self.matchers + [(k, "=~", v) for k, v in (regex or {}).items()]
        return f"last_over_time({metric}{render_matchers(matchers)}[59999ms])"

    def _range(self, expr: str, w: _Window) -> pd.DataFrame:
        """Long frame of a range query: one column per label, ``_K`` (minute index, 0 = look-back) and ``_V``."""
        labels: list[dict] = []
        ks: list[np.ndarray] = []
        vals: list[np.ndarray] = []
        for c0 in range(0, w.n, self.max_steps_per_query):
            count = min(self.max_steps_per_query, w.n - c0)
            first = w.first_eval + 60 * c0
            data = self._api(
                "/api/v1/query_range",
                {"query": expr, "start": _fmt(first), "end": _fmt(first + 60 * (count - 1)), "step": "60"},
            )
            if data.get("resultType") != "matrix":
                raise SourceError(f"{self.url}: expected a matrix for {expr!r}, got {data.get('resultType')}")
            for series in data["result"]:
                points = series["values"]
                t = np.fromiter((p[0] for p in points), dtype=float, count=len(points))
                labels.append(series["metric"])
                ks.append(np.rint((t - w.first_eval) / 60).astype(np.int64))
                vals.append(np.array([p[1] for p in points], dtype=float))
        if not labels:
            return pd.DataFrame({_K: pd.Series(dtype="int64"), _V: pd.Series(dtype="float64")})
        lengths = np.array([len(k) for k in ks])
        out = pd.DataFrame(labels).iloc[np.repeat(np.arange(len(labels)), lengths)].reset_index(drop=True)
        out[_K] = np.concatenate(ks)
        out[_V] = np.concatenate(vals)
        return out

    def _region(self, df: pd.DataFrame) -> pd.Series:
        region = _coalesce_labels(df, (self.region_label,))
        if self.region is not None:
            region = region.fillna(self.region)
        if region.isna().any():
            example = df.loc[region.isna()].drop(columns=[_K, _V], errors="ignore").iloc[0].dropna().to_dict()
            raise SourceError(
                f"{self.url}: series without a {self.region_label!r} label and no static region configured, e.g. {example}"
            )
        return region

    # --- gpu_telemetry ---------------------------------------------------------------
    def _gpu_series(self, metric: str, w: _Window, regex: Mapping[str, str] | None = None) -> pd.DataFrame:
        df = self._range(self._last(metric, regex), w)
        if df.empty:
            return df
        df["gpu_uuid"] = _coalesce_labels(df, self.gpu_labels["gpu_uuid"])
        missing = df["gpu_uuid"].isna()
        if missing.any():
            log.warning("%s: %d samples of %s without a UUID label ignored", self.url, int(missing.sum()), metric)
            df = df.loc[~missing]
        return df

    def _gpu(self, w: _Window) -> tuple[pd.DataFrame, pd.DataFrame]:
        """gpu_telemetry frame, plus (node_id, ts, sku, driver_version) per reporting GPU-minute."""
        gauges = []
        for field in F.GPU_GAUGES:
            for prio, metric in enumerate(field.metrics):
                df = self._gpu_series(metric, w)
                if df.empty:
                    continue
                df.loc[F.is_dcgm_blank(df[_V], field.dcgm_type), _V] = np.nan
                gauges.append(df.assign(__col=field.column, __prio=prio))
        if not gauges:
            return _to_contract("gpu_telemetry", pd.DataFrame()), pd.DataFrame(columns=["node_id", "ts", "sku", "driver_version"])
        long = pd.concat(gauges, ignore_index=True)
        for col, aliases in self.gpu_labels.items():
            if col != "gpu_uuid":
                long[col] = _coalesce_labels(long, aliases)
                if aliases[0] == F.INSTANCE_LABEL:  # host:port -> host, as node-exporter's instance is read
                    long[col] = long[col].str.replace(r":\d+$", "", regex=True)
        long["region"] = self._region(long)
        # Two series for one GPU in a minute (its pod changed): prefer the newest
        # metric name, then the series that names a job.
        long = long.sort_values(["__prio", "job_id"], na_position="last", kind="stable")
        values = long.drop_duplicates(["gpu_uuid", _K, "__col"]).pivot(index=["gpu_uuid", _K], columns="__col", values=_V)
        ident_cols = ["gpu_uuid", _K, "region", "node_id", "gpu_index", "sku", "job_id", "driver_version"]
        rows = long.drop_duplicates(["gpu_uuid", _K])[ident_cols]
        rows = rows.loc[rows[_K] >= 1].merge(values.reset_index(), on=["gpu_uuid", _K], how="left")

        for field in F.GPU_COUNTERS:
            parts = [self._gpu_series(m, w) for m in field.metrics]
            parts = [p for p in parts if not p.empty]
            if not parts:
                rows[field.column] = np.nan
                continue
            df = pd.concat(parts, ignore_index=True)
            df.loc[F.is_dcgm_blank(df[_V], field.dcgm_type), _V] = np.nan
            df = df.sort_values(_V, na_position="first").drop_duplicates(["gpu_uuid", _K], keep="last")
            inc = _increase(df[["gpu_uuid", _K, _V]], ["gpu_uuid"])
            rows = rows.merge(inc[["gpu_uuid", _K, "__inc"]].rename(columns={"__inc": field.column}), on=["gpu_uuid", _K], how="left")

        rows = rows.merge(self._xid(w), on=["gpu_uuid", _K], how="left")
        rows["xid"] = rows["xid"].fillna(0)
        rows["ts"] = w.ts(rows[_K])
        rows["gpu_index"] = pd.to_numeric(rows["gpu_index"], errors="coerce")
        for field in F.GPU_GAUGES:
            if field.column not in rows.columns:
                rows[field.column] = np.nan
        required = [f.column for f in F.GPU_FIELDS if f.required] + ["node_id", "gpu_index", "sku"]
        rows = self._complete(rows, required, "gpu_telemetry", ["node_id", "gpu_uuid"])
        rows = rows.sort_values(["ts", "node_id", "gpu_index", "gpu_uuid"])
        nodes = rows[["node_id", "ts", "sku", "driver_version", "xid", "ecc_dbe_delta"]].copy()
        return _to_contract("gpu_telemetry", rows), nodes

    def _xid(self, w: _Window) -> pd.DataFrame:
        """Xid raised per GPU-minute (see dcgm_fields for the precedence of the three metrics)."""
        found = []
        gauge = self._gpu_series(F.XID_GAUGE, w)
        if not gauge.empty:
            g = gauge.sort_values(_V).drop_duplicates(["gpu_uuid", _K], keep="last")[["gpu_uuid", _K, _V]]
            g.loc[F.is_dcgm_blank(g[_V], "int"), _V] = 0.0
            prev = g.assign(**{_K: g[_K] + 1}).rename(columns={_V: "__prev"})
            g = g.merge(prev, on=["gpu_uuid", _K], how="left")
            g["__code"] = np.where((g[_V] != g["__prev"].fillna(0)) & (g[_V] > 0), g[_V], 0)
            found.append(g.assign(__rank=2)[["gpu_uuid", _K, "__code", "__rank"]])
        for rank, metric in ((0, F.XID_TOTAL), (1, F.XID_COUNT)):
            df = self._gpu_series(metric, w)
            if df.empty or F.XID_CODE_LABEL not in df.columns:
                continue
            df["__xid"] = pd.to_numeric(df[F.XID_CODE_LABEL], errors="coerce")
            df = df.dropna(subset=["__xid"]).drop_duplicates(["gpu_uuid", "__xid", _K])
            if rank == 0:
                inc = _increase(df[["gpu_uuid", "__xid", _K, _V]], ["gpu_uuid", "__xid"])
                raised = inc["__inc"] > 0
            else:
                inc = df[["gpu_uuid", "__xid", _K, _V]]
                prev = inc.assign(**{_K: inc[_K] + 1}).rename(columns={_V: "__prev"})
                inc = inc.merge(prev, on=["gpu_uuid", "__xid", _K], how="left")
                raised = inc[_V] > inc["__prev"].fillna(0)
            inc["__code"] = np.where(raised, inc["__xid"], 0)
            found.append(inc.assign(__rank=rank)[["gpu_uuid", _K, "__code", "__rank"]])
        if not found:
            return pd.DataFrame({"gpu_uuid": pd.Series(dtype=object), _K: pd.Series(dtype="int64"), "xid": pd.Series(dtype=float)})
        allx = pd.concat(found, ignore_index=True)
        allx = allx.loc[allx["__code"] > 0]
        best = allx.groupby(["gpu_uuid", _K])["__rank"].transform("min")
        allx = allx.loc[allx["__rank"] == best].groupby(["gpu_uuid", _K], as_index=False)["__code"].max()
        return allx.rename(columns={"__code": "xid"})

    def _complete(self, rows: pd.DataFrame, required: list[str], table: str, key: list[str]) -> pd.DataFrame:
        """Drop (or keep, per ``incomplete_rows``) rows lacking a required column; log what was missing."""
        missing = rows[required].isna()
        bad = missing.any(axis=1)
        if bad.any():
            counts = {c: int(n) for c, n in missing.sum().items() if n}
            examples = rows.loc[bad, key].drop_duplicates().head(5).to_dict("records")
            verb = "dropped" if self.incomplete_rows == "drop" else "kept with nulls"
            log.warning("%s: %s: %d rows lacking required fields %s %s, e.g. %s", self.url, table, int(bad.sum()), counts, verb, examples)
            if self.incomplete_rows == "drop":
                rows = rows.loc[~bad]
        return rows

    # --- node-exporter helpers ---------------------------------------------------------
    def _node_series(self, expr: str, w: _Window, instance_to_node: Mapping[str, str]) -> pd.DataFrame:
        df = self._range(expr, w)
        if df.empty:
            return df
        node = _coalesce_labels(df, self.node_labels)
        if self.node_labels[0] == F.INSTANCE_LABEL:
            node = node.str.replace(r":\d+$", "", regex=True)
        if F.INSTANCE_LABEL in df.columns:
            inst = df[F.INSTANCE_LABEL]
            node = node.fillna(inst.map(instance_to_node)).fillna(inst.str.replace(r":\d+$", "", regex=True))
        missing = node.isna()
        if missing.any():
            log.warning("%s: %d samples of %r without a host label ignored", self.url, int(missing.sum()), expr)
        df = df.assign(node_id=node).loc[~missing]
        df["region"] = self._region(df)
        return df

    def _uname(self, w: _Window) -> tuple[pd.DataFrame, dict[str, str]]:
        uname = self._node_series(self._last(F.NODE_UNAME_INFO), w, {})
        mapping: dict[str, str] = {}
        if not uname.empty and F.INSTANCE_LABEL in uname.columns:
            latest = uname.sort_values(_K).drop_duplicates(F.INSTANCE_LABEL, keep="last")
            mapping = dict(zip(latest[F.INSTANCE_LABEL], latest["node_id"]))
        return uname, mapping

    def _per_series_increase(self, metric: str, w: _Window, inst: Mapping[str, str], by: list[str], regex=None) -> pd.DataFrame:
        """Counter increase per minute for each series, keyed by ``node_id`` + ``by`` labels."""
        df = self._node_series(self._last(metric, regex), w, inst)
        if df.empty:
            return pd.DataFrame(columns=["node_id", "region", *by, _K, "__inc"])
        for label in by:
            if label not in df.columns:
                df[label] = ""
            df[label] = df[label].fillna("")
        df = df.drop_duplicates(["node_id", *by, _K])
        return _increase(df[["node_id", "region", *by, _K, _V]], ["node_id", "region", *by])

    # --- node_telemetry --------------------------------------------------------------
    def _node(self, w: _Window) -> pd.DataFrame:
        uname, inst = self._uname(w)
        key = ["node_id", _K]

        cpu = self._node_series(f"sum without (cpu) ({self._last(F.NODE_CPU_SECONDS)})", w, inst)
        if cpu.empty:
            return _to_contract("node_telemetry", pd.DataFrame())
        cpu["mode"] = cpu.get("mode", pd.Series("", index=cpu.index)).fillna("")
        cpu = _increase(cpu.drop_duplicates(["node_id", "mode", _K])[["node_id", "region", "mode", _K, _V]], ["node_id", "region", "mode"])
        busy = _sum_strict(cpu, key, "__inc").rename("__total").to_frame()
        busy["__idle"] = cpu.loc[cpu["mode"] == F.NODE_CPU_IDLE_MODE].set_index(key)["__inc"]
        busy["cpu_util_pct"] = (100 * (1 - busy["__idle"] / busy["__total"].where(busy["__total"] > 0))).clip(0, 100)

        mem = {}
        for name, metric in (("avail", F.NODE_MEM_AVAILABLE), ("total", F.NODE_MEM_TOTAL)):
            df = self._node_series(self._last(metric), w, inst)
            mem[name] = df.drop_duplicates(key).set_index(key)[_V] if not df.empty else pd.Series(dtype=float)

        disk_regex = {"device": self.disk_devices}
        disk = {}
        for name, metric in (("read", F.NODE_DISK_READ_BYTES), ("write", F.NODE_DISK_WRITTEN_BYTES), ("io", F.NODE_DISK_IO_TIME)):
            inc = self._per_series_increase(metric, w, inst, ["device"], disk_regex)
            if name == "io":
                disk[name] = (inc.groupby(key)["__inc"].max() / F.MINUTE_S * 100).clip(0, 100)
            else:
                disk[name] = _sum_strict(inc, key, "__inc") / F.MINUTE_S / F.BYTES_PER_MB if not inc.empty else pd.Series(dtype=float)

        # Rows: minutes in which node-exporter's gauges reported.
        presence = [uname[key]] if not uname.empty else []
        for name in ("avail", "total"):
            if len(mem[name]):
                presence.append(mem[name].index.to_frame(index=False))
        rows = pd.concat(presence, ignore_index=True).drop_duplicates() if presence else pd.DataFrame(columns=key)
        rows = rows.loc[rows[_K] >= 1]
        regions = pd.concat([cpu[["node_id", "region"]], uname[["node_id", "region"]] if not uname.empty else None]).drop_duplicates("node_id", keep="last")
        rows = rows.merge(regions, on="node_id", how="left")
        idx = pd.MultiIndex.from_frame(rows[key])
        rows["cpu_util_pct"] = busy["cpu_util_pct"].reindex(idx).to_numpy()
        rows["mem_used_pct"] = (100 * (1 - mem["avail"] / mem["total"].where(mem["total"] > 0))).clip(0, 100).reindex(idx).to_numpy()
        rows["disk_read_mbps"] = disk["read"].reindex(idx).to_numpy()
        rows["disk_write_mbps"] = disk["write"].reindex(idx).to_numpy()
        rows["nvme_util_pct"] = disk["io"].reindex(idx).to_numpy()
        if not uname.empty and F.UNAME_RELEASE_LABEL in uname.columns:
            rows["kernel_version"] = uname.drop_duplicates(key, keep="last").set_index(key)[F.UNAME_RELEASE_LABEL].reindex(idx).to_numpy()
        else:
            rows["kernel_version"] = None
        rows["ts"] = w.ts(rows[_K])

        gpu_rows = self._gpu(w)[1]
        rows = self._attach_gpu_facts(rows, gpu_rows)
        required = ["region", "cpu_util_pct", "mem_used_pct", "disk_read_mbps", "disk_write_mbps", "nvme_util_pct", "kernel_version"]
        rows = self._complete(rows, required, "node_telemetry", ["node_id"])
        return _to_contract("node_telemetry", rows.sort_values(["ts", "node_id"]))

    @staticmethod
    def _attach_gpu_facts(rows: pd.DataFrame, gpus: pd.DataFrame) -> pd.DataFrame:
        """sku, driver_version and health of each node-minute from its GPUs' rows."""
        if gpus.empty:
            return rows.assign(sku=F.UNKNOWN, driver_version=F.UNKNOWN, health="ok")
        gpus = gpus.copy()
        dbe = pd.to_numeric(gpus["ecc_dbe_delta"], errors="coerce").fillna(0)
        gpus["__fault"] = gpus["xid"].astype(int).isin(XID_NEEDS_RESET) | (dbe > 0)
        per_minute = gpus.groupby(["node_id", "ts"]).agg(
            sku=("sku", "first"), driver_version=("driver_version", "first"), __fault=("__fault", "any")
        )
        per_node = gpus.sort_values("ts").groupby("node_id")[["sku", "driver_version"]].last()
        out = rows.merge(per_minute.reset_index(), on=["node_id", "ts"], how="left")
        for col in ("sku", "driver_version"):
            out[col] = out[col].fillna(out["node_id"].map(per_node[col])).fillna(F.UNKNOWN)
        out["health"] = np.where(out["__fault"].fillna(False).astype(bool), "degraded", "ok")
        return out

    # --- network_telemetry ---------------------------------------------------------------
    def _network(self, w: _Window) -> pd.DataFrame:
        _, inst = self._uname(w)
        by = [F.IB_DEVICE_LABEL, F.IB_PORT_LABEL]
        key = ["node_id", *by, _K]

        gauges = {}
        for name, metric in (("state", F.IB_STATE), ("phys", F.IB_PHYS_STATE), ("latency", F.LINK_LATENCY)):
            df = self._node_series(self._last(metric), w, inst)
            if df.empty:
                gauges[name] = pd.DataFrame(columns=["node_id", "region", *by, _K, _V])
                continue
            for label in by:
                df[label] = df[label].fillna("") if label in df.columns else ""
            gauges[name] = df.drop_duplicates(key)[["node_id", "region", *by, _K, _V]]
        rows = pd.concat([g[["node_id", "region", *by, _K]] for g in gauges.values()], ignore_index=True)
        rows = rows.drop_duplicates(key)
        rows = rows.loc[rows[_K] >= 1]
        if rows.empty:
            return _to_contract("network_telemetry", pd.DataFrame())
        idx = pd.MultiIndex.from_frame(rows[key])

        def gauge(name):
            return gauges[name].set_index(key)[_V].reindex(idx).to_numpy()

        def increase(metrics):
            parts = [self._per_series_increase(m, w, inst, by) for m in metrics]
            parts = [p for p in parts if not p.empty]
            if not parts:
                return np.full(len(rows), np.nan)
            return _sum_strict(pd.concat(parts, ignore_index=True), key, "__inc").reindex(idx).to_numpy()

        bits = 8 / F.MINUTE_S / F.BITS_PER_GBIT
        rows["rx_gbps"] = increase([F.IB_RX_BYTES]) * bits
        rows["tx_gbps"] = increase([F.IB_TX_BYTES]) * bits
        packets, lost = increase(F.IB_PACKET_COUNTERS), increase(F.IB_LOSS_COUNTERS)
        with np.errstate(divide="ignore", invalid="ignore"):
            rows["packet_loss_pct"] = np.clip(np.where(packets > 0, 100 * lost / packets, np.where(np.isnan(lost), np.nan, 0.0)), 0, 100)
        rows["retransmits"] = increase(F.IB_RETRANSMIT_COUNTERS)
        rows["latency_us"] = gauge("latency")
        state, phys = gauge("state"), gauge("phys")
        link_up = np.where(~np.isnan(state), state == F.IB_STATE_ACTIVE, phys == F.IB_PHYS_LINK_UP)
        rows["link_up"] = pd.Series(link_up, index=rows.index, dtype="object").where(~(np.isnan(state) & np.isnan(phys)), None)
        rows["link_id"] = [F.link_id(d, p) for d, p in zip(rows[F.IB_DEVICE_LABEL], rows[F.IB_PORT_LABEL])]
        rows["ts"] = w.ts(rows[_K])
        required = ["rx_gbps", "tx_gbps", "packet_loss_pct", "link_up"]
        rows = self._complete(rows, required, "network_telemetry", ["node_id", "link_id"])
        return _to_contract("network_telemetry", rows.sort_values(["ts", "node_id", "link_id"]))


def _prepend(first: str | None, rest: tuple[str, ...]) -> tuple[str, ...]:
    return rest if not first else (first, *(r for r in rest if r != first))


class _Window:
    """Evaluation times of a window: minute ``k`` (0 = the look-back minute) is evaluated at its last millisecond."""

    def __init__(self, start: pd.Timestamp, end: pd.Timestamp):
        self.start = start
        self.n = int((end - start) / MINUTE) + 1
        self.first_eval = start.timestamp() - 0.001

    def ts(self, k: pd.Series) -> pd.Series:
        return self.start + (pd.to_numeric(k) - 1) * MINUTE


def _fmt(seconds: float) -> str:
    return f"{seconds:.3f}"
