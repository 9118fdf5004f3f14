"""Range-query frames of the Prometheus adapters (the DCGM / node-exporter source, kube-state-metrics, model
servers, ipmi_exporter): the minute-index and value columns, label coalescing and the per-minute counter increase.
Below every adapter, so none imports another for them."""

import numpy as np
import pandas as pd

_K, _V = "__k", "__v"  # label names may not start with "__": no clash with labels


def _coalesce_labels(df: pd.DataFrame, names: tuple[str, ...]) -> pd.Series:
    """First non-empty value among the label columns ``names`` (None when none)."""
    out = pd.Series(None, index=df.index, dtype="object")
    for name in reversed(names):
        if name in df.columns:
            col = df[name]
            out = col.where(col.notna() & (col != ""), out)
    return out


def _increase(df: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """Per-minute counter increase from last-in-minute values (``keys + [_K, _V]``, one row each).

    A drop is a restart: the increase is the new value. No sample in the
    previous minute: unknown (NaN).
    """
    prev = df[keys + [_K, _V]].copy()
    prev[_K] += 1
    merged = df.merge(prev.rename(columns={_V: "__prev"}), on=keys + [_K], how="left")
    cur, before = merged[_V], merged["__prev"]
    merged["__inc"] = np.where(cur >= before, cur - before, cur)
    merged.loc[cur.isna() | before.isna(), "__inc"] = np.nan
    return merged.drop(columns="__prev")
