"""Pictures for the Dagster UI: the loss-tree waterfall and the goodput trend (PNG in markdown metadata)."""

import base64
import io

import pandas as pd

from gpu_health.metrics.goodput import STATES

COLORS = {"productive": "#2e7d32", "no_data": "#9e9e9e", "maintenance": "#90a4ae", "hw_unavailable": "#c62828",
          "idle_blocked": "#ef6c00", "idle_no_demand": "#ffcc80", "allocated_idle": "#fdd835",
          "allocated_unproductive": "#6a1b9a", "failure_loss": "#ad1457", "slowdown_data_io": "#1565c0",
          "slowdown_network": "#0277bd", "slowdown_checkpoint": "#4fc3f7", "slowdown_compute": "#283593"}


def _png_markdown(fig, alt: str) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")
    return f"![{alt}](data:image/png;base64,{base64.b64encode(buf.getvalue()).decode()})"


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def waterfall(shares: dict[str, float], title: str) -> str:
    """Paid GPU-minutes (100 %) stepping down through each loss state to productive."""
    plt = _plt()
    losses = [s for s in STATES if s != "productive"]
    fig, ax = plt.subplots(figsize=(7.5, 3.2))
    level = 1.0
    ax.bar(0, 1.0, color="#455a64")
    labels = ["paid"]
    for i, s in enumerate(losses, start=1):
        v = float(shares.get(s, 0.0))
        ax.bar(i, -v, bottom=level, color=COLORS[s])
        level -= v
        labels.append(s.replace("slowdown_", "slow_").replace("allocated_", "alloc_"))
    ax.bar(len(losses) + 1, level, color=COLORS["productive"])
    labels.append(f"goodput {level:.1%}")
    ax.set_xticks(range(len(labels)), labels, rotation=60, ha="right", fontsize=7)
    ax.set_ylim(0, 1.02)
    ax.set_ylabel("share of paid GPU-minutes")
    ax.set_title(title, fontsize=9)
    md = _png_markdown(fig, "loss-tree waterfall")
    plt.close(fig)
    return md


def trend(series: pd.DataFrame, title: str) -> str:
    """Goodput over time per region (columns partition_start, region, goodput)."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7.5, 2.6))
    for region, grp in series.sort_values("partition_start").groupby("region"):
        ax.plot(grp["partition_start"], grp["goodput"], label=region, lw=1.4 if region == "*" else 0.9)
    ax.set_ylim(0, 1)
    ax.set_ylabel("goodput")
    ax.legend(fontsize=7, ncol=3, loc="lower left")
    ax.set_title(title, fontsize=9)
    fig.autofmt_xdate()
    md = _png_markdown(fig, "goodput trend")
    plt.close(fig)
    return md


def shares_of(cluster: pd.DataFrame) -> dict[str, float]:
    overall = cluster[cluster["region"] == "*"]
    paid = overall["paid_gpu_minutes"].sum()
    if not paid:
        return {}
    return {s: float((overall[f"share_{s}"] * overall["paid_gpu_minutes"]).sum() / paid) for s in STATES}


__all__ = ["waterfall", "trend", "shares_of"]
