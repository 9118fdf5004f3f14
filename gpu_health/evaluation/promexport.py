"""Write contract frames as OpenMetrics text that ``promtool`` can backfill.

The metrics are the ones real exporters publish (names and labels from
:mod:`gpu_health.sources.dcgm_fields`), so that
:class:`gpu_health.sources.prometheus.PrometheusSource` reads the frames
back. What the writer must invent, because a contract row holds a rate or a
delta and an exporter a counter, follows one rule each:

- counters are cumulative sums of the per-minute increases, starting at 0 on
  the first row of each contiguous run of minutes of a series, with a
  baseline sample of 0 one minute before the run (the reader needs the
  previous minute to difference); ``counter_resets`` restarts them at 0
  (driver reload, reboot) without a gap;
- ``DCGM_FI_DEV_XID_ERRORS`` holds the last Xid for the rest of the run, as
  dcgm-exporter does; ``DCGM_EXP_XID_ERRORS_TOTAL{xid}`` counts each code so
  that a repeat of the same code is visible too;
- node-exporter has no percentages: CPU is one CPU's ``idle``/``user``
  seconds, memory a fixed 1 TiB total, disks one ``nvme0n1``, packet loss an
  error count over a packet count of one per 4 KiB (at least one);
- a null optional field is omitted (``nulls="omit"``) or written as DCGM's
  "blank" sentinel (``nulls="sentinel"``), as dcgm-exporter does for fields
  a GPU does not support; node health is not written (no exporter has it).

Known losses on reading back: the minute after a null counter increase reads
null; a counter reset whose new value is not below the old one reads as an
ordinary increase (inherent to counters).

Format: ``# TYPE`` per family, each family contiguous, samples in time order
(a series' samples strictly increase in time), timestamps in seconds, final
``# EOF``.

Scale. Work is done per time chunk (``chunk``, 2 h by default, the TSDB's
block size): label text is built once per chunk and label set, then each
sample costs two string concatenations (values formatted by Arrow), so memory
stays bounded by the input frame plus one chunk. :func:`write_openmetrics`
spills families to temporary files and concatenates them;
:func:`write_openmetrics_chunks` writes one complete file per chunk, which
is what a large export should use: promtool (about 10^5 samples/s per process,
the slow step) then parses each file once and :func:`backfill` runs several
in parallel. A week at 1,200 GPUs is ~130M GPU samples, ~17 GB of text.

It belongs to the evaluation: it fills a real Prometheus for the seeds' static
rules (:mod:`.static_rules`) and for the tests of the Prometheus source; no step
of the pipeline writes exporter metrics.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import tempfile
from concurrent.futures import ThreadPoolExecutor
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from gpu_health.serving_families import SERVING_HISTOGRAMS
from gpu_health.sources import dcgm_fields as F

log = logging.getLogger(__name__)

MEM_TOTAL_BYTES = float(2**40)
IB_PACKET_BYTES = 4096.0
NODE_EXPORTER_PORT = "9100"


@dataclass
class WriteSummary:
    """What was written: files and sample counts per metric name."""

    paths: list[Path]
    samples: dict[str, int] = field(default_factory=dict)

    @property
    def total_samples(self) -> int:
        return sum(self.samples.values())


# --- text helpers ---------------------------------------------------------------------
def escape_label_value(value: str) -> str:
    """OpenMetrics label value escaping: backslash, double quote, newline."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _label_part(name: str, values, prefix: str = ",") -> np.ndarray:
    """``,name="value"`` per row (empty where the value is null), built from the unique values."""
    codes, uniques = pd.factorize(pd.Series(values, copy=False), use_na_sentinel=True)
    table = np.array([f'{prefix}{name}="{escape_label_value(str(u))}"' for u in uniques] + [""], dtype=object)
    return table[codes]  # code -1 (null) picks the trailing ""


def _join(*parts) -> np.ndarray:
    """Row-wise concatenation of object arrays of str and str constants."""
    out = parts[0]
    for part in parts[1:]:
        out = out + part
    return out


def _value_text(values: np.ndarray) -> np.ndarray:
    """Shortest round-trip text of float values (Arrow's formatter), as an object array."""
    return pc.cast(pa.array(values, type=pa.float64()), pa.string()).to_numpy(zero_copy_only=False)


def _lines(name: str, label_codes: np.ndarray, label_uniques: np.ndarray, values: np.ndarray, ts_s: np.ndarray) -> np.ndarray:
    """``name{labels} value ts\\n`` per sample: two concatenations per line, the rest on unique values."""
    prefix = np.array([f"{name}{u} " for u in label_uniques], dtype=object)[label_codes]
    tcodes, tuniques = pd.factorize(ts_s)
    suffix = np.array([f" {int(t)}\n" for t in tuniques], dtype=object)[tcodes]
    return prefix + values + suffix


def _family_header(name: str, kind: str) -> bytes:
    if kind == "counter" and name.endswith("_total"):
        return f"# TYPE {name[: -len('_total')]} counter\n".encode()
    # DCGM counters lack the _total suffix OpenMetrics demands of counters.
    return f"# TYPE {name} {'gauge' if kind == 'gauge' else 'unknown'}\n".encode()


# --- preparation (whole frame, numeric, vectorised) ---------------------------------------
def _ts_seconds(ts: pd.Series) -> np.ndarray:
    return (pd.to_datetime(ts, utc=True).astype("datetime64[ns, UTC]").astype("int64") // 1_000_000_000).to_numpy()


def _runs(entity_codes: np.ndarray, ts_s: np.ndarray, order: np.ndarray) -> np.ndarray:
    """Run-start flag per row (in ``order``): first row of an entity or after a gap."""
    e, t = entity_codes[order], ts_s[order]
    start = np.ones(len(order), dtype=bool)
    start[1:] = (e[1:] != e[:-1]) | (t[1:] - t[:-1] != 60)
    return start


def _segmented_cumsum(values: np.ndarray, segment_start: np.ndarray) -> np.ndarray:
    """Cumulative sum restarting at each ``segment_start`` (arrays already in entity/time order)."""
    total = np.cumsum(values)
    seg_id = np.cumsum(segment_start) - 1
    first_idx = np.flatnonzero(segment_start)
    offset = total[first_idx] - values[first_idx]
    return total - offset[seg_id]


class _Prepared:
    """A table sorted by time, with per-entity run starts and a chunk index."""

    def __init__(self, df: pd.DataFrame, entity_cols: list[str], resets: set[tuple[str, int]], reset_col: str):
        df = df.reset_index(drop=True)
        ts_s = _ts_seconds(df["ts"])
        ent = pd.MultiIndex.from_frame(df[entity_cols].astype(str)) if len(entity_cols) > 1 else df[entity_cols[0]].astype(str)
        ent_codes = pd.factorize(ent)[0]
        order = np.lexsort((ts_s, ent_codes))
        run_start_sorted = _runs(ent_codes, ts_s, order)
        reset_sorted = np.zeros(len(df), dtype=bool)
        if resets:
            keys = df[reset_col].astype(str).to_numpy()[order]
            reset_sorted = np.fromiter(((k, t) in resets for k, t in zip(keys, ts_s[order])), dtype=bool, count=len(df))
        self.df = df
        self.ts_s = ts_s
        self.order = order
        self.run_start_sorted = run_start_sorted
        self.segment_start_sorted = run_start_sorted | reset_sorted
        self.run_id_sorted = np.cumsum(run_start_sorted) - 1
        self.run_start = np.empty(len(df), dtype=bool)
        self.run_start[order] = run_start_sorted

    def counter(self, increments: np.ndarray) -> np.ndarray:
        """Cumulative counter per row (frame order); null increments count as 0."""
        inc = np.nan_to_num(np.asarray(increments, dtype=float)[self.order], nan=0.0)
        out = np.empty(len(inc))
        out[self.order] = _segmented_cumsum(inc, self.segment_start_sorted)
        return out

    def held(self, values: np.ndarray) -> np.ndarray:
        """Last non-zero value so far within the run (0 before the first)."""
        v = np.asarray(values, dtype=float)[self.order]
        s = pd.Series(np.where(v > 0, v, np.nan))
        held = s.groupby(self.run_id_sorted).ffill().fillna(0).to_numpy()
        out = np.empty(len(v))
        out[self.order] = held
        return out


@dataclass
class _Family:
    name: str
    kind: str  # gauge | counter
    labels: str  # which label set: "gpu", "node", "link", "job" or "xid"
    values: np.ndarray  # per frame row (NaN = no sample)
    text: np.ndarray | None = None  # per-row value text overriding values (sentinels)
    baseline: bool = False  # counter: a 0 sample one minute before each run


# --- the writer -------------------------------------------------------------------------
class _Writer:
    """The rendering both writers share; its keyword options are theirs (:func:`write_openmetrics`)."""

    def __init__(
        self,
        *,
        gpu: pd.DataFrame | None = None,
        node: pd.DataFrame | None = None,
        network: pd.DataFrame | None = None,
        jobs: pd.DataFrame | None = None,
        region_label: str = F.DEFAULT_REGION_LABEL,
        gpu_labels: Mapping[str, str] | None = None,
        nulls: str = "omit",
        counter_resets: Iterable[tuple[str, pd.Timestamp]] = (),
        chunk: str = "2h",
    ):
        if nulls not in ("omit", "sentinel"):
            raise ValueError("nulls must be 'omit' or 'sentinel'")
        self.region_label = region_label
        self.nulls = nulls
        self.chunk_s = int(pd.Timedelta(chunk).total_seconds())
        self.gpu_labels = {c: aliases[0] for c, aliases in F.GPU_LABELS.items()}
        for col, label in (gpu_labels or {}).items():
            if label not in F.GPU_LABELS.get(col, ()):
                raise ValueError(f"{label!r} is not a label PrometheusSource reads for {col!r}: {F.GPU_LABELS.get(col)}")
            self.gpu_labels[col] = label
        resets = {(str(k), int(pd.Timestamp(t).timestamp())) for k, t in counter_resets}
        self.tables: list[tuple[_Prepared, list[_Family], str]] = []
        if gpu is not None and len(gpu):
            self._gpu(gpu, node, resets)
        if node is not None and len(node):
            self._node(node, resets)
        if network is not None and len(network):
            self._network(network, resets)
        if jobs is not None and len(jobs):
            self._jobs(jobs)

    # families per table
    def _gpu(self, gpu: pd.DataFrame, node: pd.DataFrame | None, resets) -> None:
        gpu = gpu.copy()
        if node is not None and len(node):
            drv = node[["ts", "node_id", "driver_version"]].drop_duplicates(["ts", "node_id"])
            gpu = gpu.merge(drv, on=["ts", "node_id"], how="left")
            per_node = node.sort_values("ts").groupby("node_id")["driver_version"].last()
            gpu["driver_version"] = gpu["driver_version"].fillna(gpu["node_id"].map(per_node))
        else:
            gpu["driver_version"] = None
        p = _Prepared(gpu, ["gpu_uuid"], resets, "gpu_uuid")
        df = p.df
        fams = []
        for f in F.GPU_FIELDS:
            raw = pd.to_numeric(df[f.column], errors="coerce").to_numpy(dtype=float)
            if f.kind == "counter":
                if np.isnan(raw).all() and self.nulls == "omit":
                    continue
                values = np.where(np.isnan(raw), np.nan, p.counter(raw))
                text = None
                if self.nulls == "sentinel":
                    text = np.where(np.isnan(raw), F.dcgm_blank_value(f.dcgm_type), None)
                    values = np.where(np.isnan(raw), 0.0, values)
                fams.append(_Family(f.metrics[0], "counter", "gpu", values, text, baseline=True))
            else:
                if np.isnan(raw).all() and (self.nulls == "omit" or f.required):
                    continue
                text = None
                if self.nulls == "sentinel" and not f.required:
                    text = np.where(np.isnan(raw), F.dcgm_blank_value(f.dcgm_type), None)
                    raw = np.where(np.isnan(raw), 0.0, raw)
                fams.append(_Family(f.metrics[0], "gauge", "gpu", raw, text))
        xid = pd.to_numeric(df["xid"], errors="coerce").fillna(0).to_numpy(dtype=float)
        fams.append(_Family(F.XID_GAUGE, "gauge", "gpu", p.held(xid)))
        self.tables.append((p, fams, "gpu"))
        self._xid_totals(p, xid)

    def _xid_totals(self, p: _Prepared, xid: np.ndarray) -> None:
        """DCGM_EXP_XID_ERRORS_TOTAL{xid=code}: per GPU run, from the code's first occurrence on."""
        if not (xid > 0).any():
            return
        run_id = np.empty(len(xid), dtype=np.int64)
        run_id[p.order] = p.run_id_sorted
        has = pd.Series(xid > 0).groupby(run_id).transform("any").to_numpy()
        rows = np.flatnonzero(has)
        sub = p.df.iloc[rows].assign(__xid=xid[rows], __run=run_id[rows], __t=p.ts_s[rows])
        sub = sub.sort_values(["__run", "__t"], kind="stable")
        parts = []
        for code in np.unique(sub["__xid"][sub["__xid"] > 0]):
            count = (sub["__xid"] == code).groupby(sub["__run"]).cumsum()
            keep = count > 0
            part = sub.loc[keep].copy()
            part[F.XID_CODE_LABEL] = str(int(code))
            part["__count"] = count[keep].astype(float)
            parts.append(part)
        tot = pd.concat(parts).drop(columns=["__run", "__t"])
        pt = _Prepared(tot, ["gpu_uuid", F.XID_CODE_LABEL], set(), "gpu_uuid")
        self.tables.append((pt, [_Family(F.XID_TOTAL, "counter", "xid", pt.df["__count"].to_numpy(float), baseline=True)], "xid"))

    def _node(self, node: pd.DataFrame, resets) -> None:
        p = _Prepared(node, ["node_id"], resets, "node_id")
        df = p.df
        util = df["cpu_util_pct"].to_numpy(float) / 100
        fams = [
            _Family(F.NODE_CPU_SECONDS, "counter", "cpu_idle", p.counter(F.MINUTE_S * (1 - util)), baseline=True),
            _Family(F.NODE_CPU_SECONDS, "counter", "cpu_user", p.counter(F.MINUTE_S * util), baseline=True),
            _Family(F.NODE_MEM_TOTAL, "gauge", "node", np.full(len(df), MEM_TOTAL_BYTES)),
            _Family(F.NODE_MEM_AVAILABLE, "gauge", "node", MEM_TOTAL_BYTES * (1 - df["mem_used_pct"].to_numpy(float) / 100)),
        ]
        for metric, values in (
            (F.NODE_DISK_READ_BYTES, df["disk_read_mbps"].to_numpy(float) * F.MINUTE_S * F.BYTES_PER_MB),
            (F.NODE_DISK_WRITTEN_BYTES, df["disk_write_mbps"].to_numpy(float) * F.MINUTE_S * F.BYTES_PER_MB),
            (F.NODE_DISK_IO_TIME, df["nvme_util_pct"].to_numpy(float) / 100 * F.MINUTE_S),
        ):
            fams.append(_Family(metric, "counter", "disk", p.counter(values), baseline=True))
        fams.append(_Family(F.NODE_UNAME_INFO, "gauge", "uname", np.ones(len(df))))
        self.tables.append((p, fams, "node"))

    def _network(self, net: pd.DataFrame, resets) -> None:
        p = _Prepared(net, ["node_id", "link_id"], resets, "node_id")
        df = p.df
        bytes_per_gbps = F.BITS_PER_GBIT * F.MINUTE_S / 8
        rx = df["rx_gbps"].to_numpy(float) * bytes_per_gbps
        tx = df["tx_gbps"].to_numpy(float) * bytes_per_gbps
        rx_pk = np.maximum(np.rint(rx / IB_PACKET_BYTES), 1)
        tx_pk = np.maximum(np.rint(tx / IB_PACKET_BYTES), 1)
        lost = df["packet_loss_pct"].to_numpy(float) / 100 * (rx_pk + tx_pk)
        retrans = pd.to_numeric(df["retransmits"], errors="coerce").to_numpy(float)
        up = df["link_up"].astype("boolean").to_numpy(dtype=float, na_value=np.nan)
        fams = [
            _Family(F.IB_RX_BYTES, "counter", "link", p.counter(rx), baseline=True),
            _Family(F.IB_TX_BYTES, "counter", "link", p.counter(tx), baseline=True),
            _Family(F.IB_RX_PACKETS, "counter", "link", p.counter(rx_pk), baseline=True),
            _Family(F.IB_TX_PACKETS, "counter", "link", p.counter(tx_pk), baseline=True),
            _Family(F.IB_LOSS_COUNTERS[0], "counter", "link", p.counter(lost), baseline=True),
            _Family(F.IB_STATE, "gauge", "link", np.where(np.isnan(up), np.nan, np.where(up == 1, F.IB_STATE_ACTIVE, F.IB_STATE_DOWN))),
            _Family(F.IB_PHYS_STATE, "gauge", "link", np.where(np.isnan(up), np.nan, np.where(up == 1, F.IB_PHYS_LINK_UP, F.IB_PHYS_POLLING))),
        ]
        if not np.isnan(retrans).all():
            fams.append(_Family(F.IB_RETRANSMIT_COUNTERS[0], "counter", "link", np.where(np.isnan(retrans), np.nan, p.counter(retrans)), baseline=True))
        latency = pd.to_numeric(df["latency_us"], errors="coerce").to_numpy(float)
        if not np.isnan(latency).all():
            fams.append(_Family(F.LINK_LATENCY, "gauge", "link", latency))
        self.tables.append((p, fams, "link"))

    def _jobs(self, jobs: pd.DataFrame) -> None:
        p = _Prepared(jobs, ["job_id"], set(), "job_id")
        df = p.df
        progressed = np.where(df["steps"].to_numpy() > 0, p.ts_s.astype(float), np.nan)
        order = np.lexsort((p.ts_s, pd.factorize(df["job_id"])[0]))
        last = np.empty(len(df))
        last[order] = pd.Series(progressed[order]).groupby(df["job_id"].to_numpy()[order]).ffill().to_numpy()
        self.tables.append((p, [_Family(F.TRAINING_LAST_STEP, "gauge", "job", last)], "job"))

    # label text
    def _labels(self, df: pd.DataFrame, which: str) -> dict[str, np.ndarray]:
        """Label text per row (``{...}``) for each label set used by this table's families."""
        region = _label_part(self.region_label, df["region"]) if "region" in df.columns else ""
        if which in ("gpu", "xid"):
            L = self.gpu_labels
            parts = [
                _label_part(L["gpu_index"], df["gpu_index"].astype(int).astype(str), prefix="{"),
                _label_part(L["gpu_uuid"], df["gpu_uuid"]),
                _label_part(L["sku"], df["sku"]),
                _label_part(L["node_id"], df["node_id"]),
                _label_part(L["driver_version"], df["driver_version"]),
                region,
                _label_part(L["job_id"], df["job_id"]),
            ]
            if which == "xid":
                return {"xid": _join(*parts, _label_part(F.XID_CODE_LABEL, df[F.XID_CODE_LABEL]), "}")}
            return {"gpu": _join(*parts, "}")}
        if which == "job":
            return {"job": _join(_label_part(F.JOB_ID_LABEL, df["job_id"], prefix="{"), "}")}
        instance = _label_part(F.INSTANCE_LABEL, df["node_id"].astype(str) + ":" + NODE_EXPORTER_PORT, prefix="{")
        common = _join(instance, ',job="node"', region)
        if which == "link":
            codes, uniques = pd.factorize(df["link_id"].astype(str))
            split = [F.split_link_id(x) for x in uniques]
            devices = np.array([d for d, _ in split], dtype=object)[codes]
            ports = np.array([q for _, q in split], dtype=object)[codes]
            return {"link": _join(common, _label_part(F.IB_DEVICE_LABEL, devices), _label_part(F.IB_PORT_LABEL, ports), "}")}
        return {
            "node": _join(common, "}"),
            "cpu_idle": _join(common, f',cpu="0",mode="{F.NODE_CPU_IDLE_MODE}"}}'),
            "cpu_user": _join(common, ',cpu="0",mode="user"}'),
            "disk": _join(common, ',device="nvme0n1"}'),
            "uname": _join(
                common,
                _label_part(F.UNAME_NODENAME_LABEL, df["node_id"]),
                _label_part(F.UNAME_RELEASE_LABEL, df["kernel_version"]),
                ',sysname="Linux",machine="x86_64"}',
            ),
        }

    # rendering
    def families(self) -> list[str]:
        seen: dict[str, None] = {}
        for _, fams, _ in self.tables:
            for fam in fams:
                seen.setdefault(fam.name)
        return list(seen)

    def chunks(self) -> list[int]:
        starts: set[int] = set()
        for p, fams, _ in self.tables:
            t = p.ts_s
            if any(f.baseline for f in fams):
                t = np.concatenate([t, p.ts_s[p.run_start] - 60])
            starts.update(np.unique(t // self.chunk_s * self.chunk_s).tolist())
        return sorted(starts)

    def render_chunk(self, c0: int) -> dict[str, list[tuple[np.ndarray, np.ndarray]]]:
        """Per metric name, (sample time, line text) of the samples with time in ``[c0, c0+chunk)``."""
        c1 = c0 + self.chunk_s
        out: dict[str, list[tuple[np.ndarray, np.ndarray]]] = {}
        for p, fams, which in self.tables:
            in_chunk = (p.ts_s >= c0) & (p.ts_s < c1)
            base_rows = p.run_start & (p.ts_s - 60 >= c0) & (p.ts_s - 60 < c1)
            need = in_chunk | (base_rows if any(f.baseline for f in fams) else False)
            rows = np.flatnonzero(need)
            if not len(rows):
                continue
            labels = {k: pd.factorize(v) for k, v in self._labels(p.df.iloc[rows], which).items()}
            pos_in, pos_base = in_chunk[rows], base_rows[rows]
            ts_rows = p.ts_s[rows]
            for fam in fams:
                codes, uniques = labels[fam.labels if fam.labels in labels else which]
                values = fam.values[rows]
                override = None if fam.text is None else fam.text[rows]
                has_text = np.zeros(len(rows), dtype=bool) if override is None else np.array([x is not None for x in override])
                parts_t, parts_line = [], []
                ok = pos_in & (~np.isnan(values) | has_text)
                if ok.any():
                    vtext = _value_text(np.nan_to_num(values[ok]))
                    if has_text[ok].any():
                        vtext = np.where(has_text[ok], override[ok], vtext)
                    t = ts_rows[ok]
                    parts_t.append(t)
                    parts_line.append(_lines(fam.name, codes[ok], uniques, vtext, t))
                if fam.baseline:
                    b = pos_base & (~np.isnan(values) | has_text)
                    if b.any():
                        t = ts_rows[b] - 60
                        parts_t.append(t)
                        parts_line.append(_lines(fam.name, codes[b], uniques, np.full(len(t), "0", dtype=object), t))
                if parts_t:
                    out.setdefault(fam.name, []).append((np.concatenate(parts_t), np.concatenate(parts_line)))
        return out


def _kinds(writer: _Writer) -> dict[str, str]:
    return {fam.name: fam.kind for _, fams, _ in writer.tables for fam in fams}


def _write_family(fh, parts: list[tuple[np.ndarray, np.ndarray]]) -> int:
    """Write a family's lines of one chunk in time order; return the sample count."""
    t = np.concatenate([p[0] for p in parts])
    lines = np.concatenate([p[1] for p in parts])[np.argsort(t, kind="stable")]
    fh.write("".join(lines.tolist()).encode())
    return len(lines)


def write_openmetrics(path: str | os.PathLike, **options) -> WriteSummary:
    """Write contract frames (gpu_telemetry, node_telemetry, network_telemetry, job_runtime_metrics) to one file.

    ``options`` are :class:`_Writer`'s keywords, in one place for both writers: the frames ``gpu``, ``node``,
    ``network``, ``jobs``, and ``region_label``, ``gpu_labels``, ``nulls``, ``counter_resets``, ``chunk``.
    ``gpu_labels`` picks label variants (e.g. ``{"node_id": "hostname",
    "job_id": "hpc_job"}``); ``counter_resets`` lists ``(gpu_uuid or node_id,
    ts)`` at which that device's counters restart from 0.
    """
    w = _Writer(**options)
    path = Path(path)
    kinds = _kinds(w)
    summary = WriteSummary([path])
    with tempfile.TemporaryDirectory(dir=path.parent, prefix=".om-") as spill:
        handles = {name: open(Path(spill) / f"{i}.part", "wb") for i, name in enumerate(w.families())}
        try:
            for c0 in w.chunks():
                for name, parts in w.render_chunk(c0).items():
                    summary.samples[name] = summary.samples.get(name, 0) + _write_family(handles[name], parts)
        finally:
            for fh in handles.values():
                fh.close()
        with open(path, "wb") as out:
            for i, name in enumerate(w.families()):
                if summary.samples.get(name):
                    out.write(_family_header(name, kinds[name]))
                    with open(Path(spill) / f"{i}.part", "rb") as part:
                        shutil.copyfileobj(part, out, 1 << 20)
            out.write(b"# EOF\n")
    return summary


def write_openmetrics_chunks(directory: str | os.PathLike, **options) -> WriteSummary:
    """As :func:`write_openmetrics`, one complete file per time chunk (``<unix start>.om``) in ``directory``."""
    w = _Writer(**options)
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    kinds = _kinds(w)
    summary = WriteSummary([])
    for c0 in w.chunks():
        rendered = w.render_chunk(c0)
        if not rendered:
            continue
        path = directory / f"{c0}.om"
        with open(path, "wb") as out:
            for name in w.families():
                if name in rendered:
                    out.write(_family_header(name, kinds[name]))
                    summary.samples[name] = summary.samples.get(name, 0) + _write_family(out, rendered[name])
            out.write(b"# EOF\n")
        summary.paths.append(path)
    return summary


def scrape_to_openmetrics(scrapes: Sequence[str], timestamps: Sequence[pd.Timestamp], path: str | os.PathLike) -> Path:
    """Replay Prometheus text scrapes (e.g. a dcgm-exporter ``/metrics`` capture) at the given times as OpenMetrics.

    Scrape ``i`` gets timestamp ``timestamps[i]``; ``# HELP`` lines are dropped
    and counters whose names lack ``_total`` are typed ``unknown``.
    """
    if len(scrapes) != len(timestamps):
        raise ValueError("one timestamp per scrape")
    families: dict[str, list[list[str]]] = {}
    kinds: dict[str, str] = {}
    for i, text in enumerate(scrapes):
        current = None
        for line in text.splitlines():
            if not line.strip() or line.startswith("# HELP"):
                continue
            if line.startswith("# TYPE"):
                _, _, name, kind = line.split(None, 3)
                current = name
                kinds.setdefault(name, kind.strip())
                continue
            if line.startswith("#"):
                continue
            name = line.split("{", 1)[0].split(" ", 1)[0]
            fam = current if current and name.startswith(current) else name
            families.setdefault(fam, [[] for _ in scrapes])[i].append(line.rstrip())
    secs = [int(pd.Timestamp(t).timestamp()) for t in timestamps]
    path = Path(path)
    with open(path, "w", encoding="utf-8") as out:
        for fam, per_scrape in families.items():
            out.write(_family_header(fam, kinds.get(fam, "unknown")).decode())
            for lines, t in zip(per_scrape, secs):
                for line in lines:
                    out.write(f"{line} {t}\n")
        out.write("# EOF\n")
    return path


def backfill(
    openmetrics_path: str | os.PathLike | Sequence[str | os.PathLike],
    data_dir: str | os.PathLike,
    *,
    promtool: str = "promtool",
    max_block_duration: str | None = None,
    parallel: int = 1,
) -> None:
    """Turn OpenMetrics file(s) (a file, a list, or a directory of ``*.om``) into TSDB blocks in ``data_dir``.

    promtool converts about 10^5 samples/s per process: for large exports
    write chunk files (:func:`write_openmetrics_chunks`) and run ``parallel``
    promtool processes (each writes its own blocks; Prometheus merges them).
    """
    exe = shutil.which(promtool)
    if exe is None:
        raise FileNotFoundError(f"{promtool!r} not found on PATH: install Prometheus (Debian: apt-get install prometheus)")
    if isinstance(openmetrics_path, (str, os.PathLike)):
        p = Path(openmetrics_path)
        files = sorted(p.glob("*.om")) if p.is_dir() else [p]
    else:
        files = [Path(x) for x in openmetrics_path]
    Path(data_dir).mkdir(parents=True, exist_ok=True)
    cmd = [exe, "tsdb", "create-blocks-from", "openmetrics", "--quiet"]
    if max_block_duration:
        cmd.append(f"--max-block-duration={max_block_duration}")

    def one(f: Path) -> None:
        proc = subprocess.run([*cmd, str(f), str(data_dir)], capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"promtool backfill of {f} failed ({proc.returncode}): {proc.stderr.strip() or proc.stdout.strip()}")
        log.info("backfilled %s into %s", f, data_dir)

    with ThreadPoolExecutor(max_workers=max(1, parallel)) as pool:
        for future in [pool.submit(one, f) for f in files]:
            future.result()


# --- the serving layer ---------------------------------------------------------
SERVING_LABELS = ("region", "model_name", "model_version")


def _le_text(le: float) -> str:
    """The ``le`` label as client libraries write it: ``+Inf`` for the last bucket, the float's shortest text."""
    return "+Inf" if np.isposinf(le) else repr(float(le))


def write_serving_openmetrics(buckets: pd.DataFrame, path: str | os.PathLike, requests: pd.DataFrame | None = None) -> Path:
    """``inference_latency_buckets`` (and ``inference_requests``) as the classic histograms a ``prometheus_client``
    service exports: ``<family>_bucket{le}``, ``_count`` and ``_sum`` counters, labels region, model_name,
    model_version.

    Counters are the cumulative sums of the per-minute increases; the sample of minute ``ts`` is stamped at the
    minute's end (``ts + 60 s``: the counter has counted that minute's requests by then), and each series starts with
    a 0 sample at its first minute's start, so ``increase(x[5m])`` evaluated at a partition's end sees exactly the
    partition's five minutes. ``_count`` equals the ``+Inf`` bucket (the exposition format's rule); ``_sum`` is
    written from ``latency_sum_s`` when ``requests`` is given (latency histogram only)."""
    out = Path(path)
    lines: list[str] = []
    sums = None
    if requests is not None and len(requests):
        sums = requests.set_index(["ts", *SERVING_LABELS])["latency_sum_s"]
    for histogram, family in SERVING_HISTOGRAMS.items():
        h = buckets[buckets["histogram"] == histogram]
        if h.empty:
            continue
        lines.append(f"# TYPE {family} histogram\n")
        series_keys = [*SERVING_LABELS]
        body: dict[str, list[str]] = {"_bucket": [], "_count": [], "_sum": []}
        for key, g in h.sort_values(["ts"]).groupby(series_keys, sort=True):
            labels = ",".join(f'{n}="{escape_label_value(str(v))}"' for n, v in zip(SERVING_LABELS, key))
            wide = g.pivot_table(index="ts", columns="le", values="count", aggfunc="sum").sort_index()
            t0 = int(wide.index[0].timestamp())
            ts_end = [int(t.timestamp()) + 60 for t in wide.index]
            for le in wide.columns:
                cum = np.cumsum(wide[le].fillna(0).to_numpy(dtype="int64"))
                lab = f'{{{labels},le="{_le_text(le)}"}}'
                body["_bucket"].append(f"{family}_bucket{lab} 0 {t0}\n")
                body["_bucket"].extend(f"{family}_bucket{lab} {int(c)} {t}\n" for c, t in zip(cum, ts_end))
                if np.isposinf(le):
                    body["_count"].append(f"{family}_count{{{labels}}} 0 {t0}\n")
                    body["_count"].extend(f"{family}_count{{{labels}}} {int(c)} {t}\n" for c, t in zip(cum, ts_end))
            if sums is not None and histogram == "latency":
                s = np.cumsum([float(sums.get((t, *key), 0.0)) for t in wide.index])
                body["_sum"].append(f"{family}_sum{{{labels}}} 0 {t0}\n")
                body["_sum"].extend(f"{family}_sum{{{labels}}} {float(v)!r} {t}\n" for v, t in zip(s, ts_end))
        for suffix in ("_bucket", "_count", "_sum"):
            lines.extend(body[suffix])
    lines.append("# EOF\n")
    out.write_text("".join(lines))
    return out
