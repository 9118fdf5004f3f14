"""What a GPU's own counters say about the work on it: the one set of device-level definitions.

The gaming guardrail KPIs, the gaming (dummy load) detector and the stall detector read the device
the same way, so a GPU is "busy", "computing" or "near idle power" by one definition:

* **busy** -- ``gpu_util_pct >= REPORTED_BUSY_UTIL_PCT``. DCGM_FI_DEV_GPU_UTIL is the share of the sample period
  in which *any* kernel was resident, however small: it is what a utilization dashboard shows, and what
  a dummy kernel games.
* **device idle** -- the SMs and tensor pipes do (almost) nothing: ``sm_active < IDLE_SM`` and, where
  reported, ``tensor_active < IDLE_TENSOR``. DCGM's profiling guide: SM activity of 0.8 or more is
  necessary for effective use and under 0.5 "likely indicates ineffective GPU usage"; a spin or sleep
  kernel of a few blocks occupies blocks / SMs of the device (1/132 = 0.008 on an H100, 1/80 on a V100),
  so a quarter is far below any real compute grid and far above a dummy kernel. Tensor pipes idle
  (< 0.05) means no matrix math; on its own it is not idleness (GBDT, data prep and fp32 code use no
  tensor cores), so it only narrows the SM rule.
* **near-idle power** -- ``power_w < LOW_POWER_SHARE x`` the SKU's reference power in the same minutes:
  the p95 power of the SKU's GPUs that are busy with the device active (else its highest reading).
  Power is a physical sensor independent of the profiling counters: a kernel that keeps SMs busy draws
  power; a dummy kernel does not. The reference is the cluster's own, per SKU and partition, so it
  holds on any SKU mix without a table of TDPs.

Absent fields are unknown, never zero: a collector without profiling fields (dcgm-exporter's default)
or without power cannot tell device idleness or low power, and every reader degrades (a KPI says
``degraded``; a detector tickets at most).
"""

import numpy as np
import pandas as pd

from gpu_health.constants import REPORTED_BUSY_UTIL_PCT

IDLE_SM = 0.25
IDLE_TENSOR = 0.05
LOW_POWER_SHARE = 0.5
REF_POWER_QUANTILE = 0.95


def _values(frame: pd.DataFrame, col: str) -> np.ndarray:
    return frame[col].to_numpy(dtype=float, na_value=np.nan)


def device_idle(sm: np.ndarray, tensor: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(idle, known) per row: SM activity under IDLE_SM and, where reported, tensor activity under
    IDLE_TENSOR; ``known`` where SM activity (or, lacking it, tensor activity) is reported."""
    s_known, t_known = ~np.isnan(sm), ~np.isnan(tensor)
    sm_idle = np.nan_to_num(sm, nan=1.0) < IDLE_SM
    tensor_idle = np.nan_to_num(tensor, nan=0.0) < IDLE_TENSOR
    idle = np.where(s_known, sm_idle & tensor_idle, t_known & tensor_idle)
    return idle, s_known | t_known


def reference_power(gpu: pd.DataFrame, by: list[str]) -> pd.Series:
    """Per ``by`` group (e.g. partition x SKU): p95 power of its busy GPUs with the device active,
    else its highest power reading (columns gpu_util_pct, sm_active, tensor_active, power_w, job_id)."""
    if gpu.empty:
        return pd.Series(dtype=float)
    idle, known = device_idle(_values(gpu, "sm_active"), _values(gpu, "tensor_active"))
    working = (gpu["job_id"].notna().to_numpy() & (_values(gpu, "gpu_util_pct") >= REPORTED_BUSY_UTIL_PCT) & known & ~idle)
    ref = gpu.loc[working].groupby(by, observed=True)["power_w"].quantile(REF_POWER_QUANTILE)
    return ref.combine_first(gpu.groupby(by, observed=True)["power_w"].max())


def low_power(gpu: pd.DataFrame, ref: pd.Series, by: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """(low, known) per row: power under LOW_POWER_SHARE x its group's reference power."""
    power = _values(gpu, "power_w")
    key = pd.MultiIndex.from_frame(gpu[by]) if len(by) > 1 else pd.Index(gpu[by[0]])
    r = ref.reindex(key).to_numpy(dtype=float) if len(ref) else np.full(len(gpu), np.nan)
    known = ~np.isnan(power) & ~np.isnan(r)
    with np.errstate(invalid="ignore"):
        return known & (power < LOW_POWER_SHARE * r), known
