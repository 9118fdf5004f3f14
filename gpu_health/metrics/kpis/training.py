"""Training KPIs: step-time inflation against the baseline, by component."""

import numpy as np
import pandas as pd

from gpu_health.metrics.kpis.context import _Context, _job_minutes


def _step_time_inflation(ctx: _Context) -> pd.DataFrame:
    d = _job_minutes(ctx)
    if d.empty:
        return pd.DataFrame()
    prog = (d["steps"] > 0).to_numpy()
    has_b = d["b_step"].notna().to_numpy()
    w = (d["gpus"] * d["steps"]).to_numpy()
    base_s = np.nan_to_num(w * d["b_step"].to_numpy())
    step_x = d["step"].to_numpy() - d["b_step"].to_numpy()
    io_x = d["loader"].to_numpy() - d["b_loader"].to_numpy()
    net_x = d["sync"].to_numpy() - d["b_sync"].to_numpy()
    cmp_x = step_x - io_x - net_x
    ck = (d["gpus"] * d["ckpt"]).to_numpy()
    counted = has_b & (prog | (d["ckpt"].to_numpy() > 0))  # checkpoint-only minutes count their checkpoint

    def ok(x):
        return prog & has_b & ~np.isnan(x)

    cols = {
        "n": prog.astype(float),
        "tot_num": np.where(prog & has_b, np.nan_to_num(w * step_x), 0.0) + np.where(counted, ck, 0.0),
        "tot_den": np.where(prog & has_b, base_s, 0.0), "tot_cov": (prog & has_b).astype(float),
        "ck_num": np.where(counted, ck, 0.0),
    }
    for name, x in (("data_io", io_x), ("network", net_x), ("compute", cmp_x)):
        m = ok(x)
        cols[f"{name}_num"] = np.where(m, np.nan_to_num(w * x), 0.0)
        cols[f"{name}_den"] = np.where(m, base_s, 0.0)
        cols[f"{name}_cov"] = m.astype(float)
    dims = ["region", "sku", "workload_class"]
    frame = pd.concat([d[["p", *dims]], pd.DataFrame(cols, index=d.index)], axis=1)
    agg = frame.groupby(["p", *dims], sort=False).sum().reset_index()
    agg = agg[agg["n"] > 0]
    name = "step_time_inflation"
    out = [agg[["p", *dims, "n"]].assign(kpi=name, numerator=agg["tot_num"], denominator=agg["tot_den"],
                                         covered=agg["tot_cov"])]
    for comp in ("data_io", "network", "compute"):
        out.append(agg[["p", *dims, "n"]].assign(kpi=f"{name}.{comp}", numerator=agg[f"{comp}_num"],
                                                 denominator=agg[f"{comp}_den"], covered=agg[f"{comp}_cov"]))
    out.append(agg[["p", *dims, "n"]].assign(kpi=f"{name}.checkpoint", numerator=agg["ck_num"],
                                             denominator=agg["tot_den"], covered=agg["tot_cov"]))
    return pd.concat(out, ignore_index=True)
