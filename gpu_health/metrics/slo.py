"""SLO events, error budgets and multi-window burn rates (the catalogue: metrics/slo_catalog.py).

Per 5-minute partition and per SLO x region x model (all versions together: an SLO belongs to the service, and a
bad release shows as the service burning), :func:`slo_events` counts the SLO's events and its bad events:

* availability SLOs: events = requests, bad = errors (``inference_requests``);
* latency / TTFT SLOs: events = the histogram's ``+Inf`` count, good = the count at or under the threshold from the
  partition's summed buckets (:func:`gpu_health.metrics.serving.count_at_or_below`): **measured** when the threshold
  is a bucket bound, **interpolated** (linearly within its bucket, Prometheus' rule) when it is not -- the row's
  ``interpolated`` flag says which, and an alert resting on it says so. A histogram that a model's requests have but
  whose series are absent gives null events: absent, not zero.

:func:`error_budgets` adds the rolling 30-day totals and the error budget remaining, ``1 - bad / (budget x events)``
over the window (1 = untouched, 0 = spent, negative = overspent).

:func:`evaluate_burns` is the multi-window, multi-burn-rate rule of the SRE workbook with Sloth's windows: the burn
rate over a window is ``(bad / events) / budget`` (1 = spending the budget exactly over 30 days); an alert needs the
long window *and* its short window over the factor (the long one proves it is significant, the short one that it is
still happening, so the alert resets within minutes of a fix).

:func:`release_burns` judges a model **release** from the same counts split by version (``slo_version_events``): the
fast-burn bar (14.4x) met by a version that began serving within the last hour, both over its time so far and in
the partition just ended (its second or later, past a new pod's warm-up), while the version it replaced did not
meet it in the same region before it -- the burn is confined to the release, so the release is the cause. The
workbook's long window exists to prove a burn significant; a version change is a known change point, the contrast
with the old version proves it, and rolling back is cheap, so the release is judged without waiting an hour.
"""

import numpy as np
import pandas as pd

from gpu_health.constants import PARTITION
from gpu_health.metrics.serving import count_at_or_below, summed_buckets
from gpu_health.metrics.slo_catalog import CATALOG, WINDOW_DAYS, Slo

KEY = ["slo", "region", "model_name"]
EVENT_COLUMNS = ["partition_start", *KEY, "objective", "total_events", "bad_events", "interpolated"]
VERSION_KEY = [*KEY, "model_version"]
VERSION_EVENT_COLUMNS = ["partition_start", *VERSION_KEY, "objective", "total_events", "bad_events", "interpolated"]
BUDGET_COLUMNS = [*EVENT_COLUMNS, "window_total_events", "window_bad_events", "error_budget_remaining"]

# (long window, short window, burn-rate factor, severity): Sloth's defaults for a 30-day SLO (the SRE workbook's
# table): 14.4x over 1 h spends 2 % of the budget, 6x over 6 h 5 % (page); 3x over 1 d and 1x over 3 d spend 10 %
# (ticket). Windows in 5-minute partitions.
BURN_WINDOWS = (
    (pd.Timedelta(hours=1), pd.Timedelta(hours=1) / 12, 14.4, "page"),  # 1/12 of the long window
    (pd.Timedelta(hours=6), pd.Timedelta(minutes=30), 6.0, "page"),
    (pd.Timedelta(days=1), pd.Timedelta(hours=2), 3.0, "ticket"),
    (pd.Timedelta(days=3), pd.Timedelta(hours=6), 1.0, "ticket"),
)
LOOKBACK = max(w[0] for w in BURN_WINDOWS)
# Minimum-traffic guard: a burn alert needs at least this many bad events in each of its two windows. A burn rate
# resting on fewer is the noise of a handful of requests: at a 99.9 % objective one failed request in 70 is already
# a 14.4x burn, so a quiet hour's single failure would page. With five, the chance that a model actually inside its
# objective shows them in a short window it expects at most one bad event in (Poisson, mean 1) is 0.4 % -- and the
# long window must agree as well.
MIN_BAD_EVENTS = 5
# An SLI whose series reported in the last hour and is absent now is a ticket (the SLO cannot be judged). An hour:
# the shortest long window of BURN_WINDOWS, the span over which the SLO's page would have been judged.
ABSENT_LOOKBACK = pd.Timedelta(hours=1)


def _applies(slo: Slo, generative: bool) -> bool:
    return slo.applies_to == "all" or (slo.applies_to == "generative") == generative


def slo_events(requests: pd.DataFrame, buckets: pd.DataFrame, generative_before=frozenset(),
               catalog=CATALOG, *, by_version: bool = False) -> pd.DataFrame:
    """One row per partition x SLO x region x model with its events and bad events (see the module docstring).

    ``generative_before``: (region, model_name) pairs that exported a TTFT histogram earlier in the SLO window; with
    the pairs that export one in the rows given, they are the generative models (a TTFT series that goes absent does
    not turn a generative model into a request/response one). ``by_version``: one row per model version as well
    (``slo_version_events``: which version spends the budget), the same counts split by ``model_version``."""
    columns = VERSION_EVENT_COLUMNS if by_version else EVENT_COLUMNS
    if requests.empty and buckets.empty:
        return pd.DataFrame({c: pd.Series(dtype="object") for c in columns})
    deploy = ["partition_start", "region", "model_name", *(["model_version"] if by_version else [])]
    req = requests.assign(partition_start=requests["ts"].dt.floor(PARTITION))
    totals = req.groupby(deploy, sort=True)[["requests", "errors"]].sum()
    b = buckets.assign(partition_start=buckets["ts"].dt.floor(PARTITION))
    hist = {h: {k: g for k, g in summed_buckets(b[b["histogram"] == h], deploy).groupby(deploy, sort=False)}
            for h in ("latency", "ttft")}
    generative = set(generative_before) | {k[1:3] for k in hist["ttft"]}
    keys = sorted(set(totals.index) | set(hist["latency"]) | set(hist["ttft"]))
    rows = []
    for key in keys:
        p, region, model = key[:3]
        is_gen = (region, model) in generative
        for slo in catalog:
            if not _applies(slo, is_gen):
                continue
            total = bad = np.nan
            interpolated = False
            if slo.histogram is None:
                if key in totals.index:
                    total, bad = float(totals.loc[key, "requests"]), float(totals.loc[key, "errors"])
            elif key in hist[slo.histogram]:
                g = hist[slo.histogram][key]
                le, counts = g["le"].to_numpy(dtype="float64"), g["count"].to_numpy(dtype="float64")
                total = float(counts[np.isposinf(le)].sum())
                good, interpolated = count_at_or_below(slo.threshold_s, le, counts)
                bad = max(0.0, total - good)
            rows.append({"partition_start": p, "slo": slo.name, "region": region, "model_name": model,
                         **({"model_version": key[3]} if by_version else {}),
                         "objective": slo.objective, "total_events": total, "bad_events": bad,
                         "interpolated": bool(interpolated)})
    return pd.DataFrame(rows, columns=columns)


def generative_models(history: pd.DataFrame, catalog=CATALOG) -> frozenset:
    """(region, model_name) pairs with a row of a generative-only SLO in ``history`` (slo_error_budgets rows)."""
    names = {s.name for s in catalog if s.applies_to == "generative"}
    if history is None or history.empty:
        return frozenset()
    hit = history[history["slo"].isin(names)]
    return frozenset(zip(hit["region"], hit["model_name"]))


def error_budgets(events: pd.DataFrame, history: pd.DataFrame | None = None, catalog=CATALOG) -> pd.DataFrame:
    """``events`` with the rolling-window totals and the error budget remaining (see the module docstring).

    ``history``: earlier rows of the same table (the trailing SLO window before the first partition of ``events``);
    only ``events``' partitions are returned."""
    if events.empty:
        return pd.DataFrame({c: pd.Series(dtype="object") for c in BUDGET_COLUMNS})
    past = history[EVENT_COLUMNS] if history is not None and len(history) else None
    both = pd.concat([past, events[EVENT_COLUMNS]], ignore_index=True) if past is not None else events[EVENT_COLUMNS].copy()
    both = both.sort_values([*KEY, "partition_start"]).reset_index(drop=True)
    both["_t"] = both["total_events"].astype("float64").fillna(0.0)
    both["_b"] = both["bad_events"].astype("float64").fillna(0.0)
    window = f"{WINDOW_DAYS}D"
    rolled = (both.set_index("partition_start").groupby(KEY, sort=False)[["_t", "_b"]]
              .rolling(window).sum().reset_index())
    both = both.merge(rolled.rename(columns={"_t": "window_total_events", "_b": "window_bad_events"}),
                      on=[*KEY, "partition_start"], how="left")
    budget = both["slo"].map({s.name: s.budget for s in catalog}).astype("float64")
    allowed = budget * both["window_total_events"]
    both["error_budget_remaining"] = np.where(allowed > 0, 1.0 - both["window_bad_events"] / allowed.where(allowed > 0), np.nan)
    first = events["partition_start"].min()
    out = both[both["partition_start"] >= first][BUDGET_COLUMNS]
    return out.sort_values(["partition_start", *KEY]).reset_index(drop=True)


def _window_sums(rows: pd.DataFrame, start: pd.Timestamp, span: pd.Timedelta) -> pd.DataFrame:
    """Per key: events and bad events of the partitions within ``span`` ending with the partition at ``start``."""
    w = rows[(rows["partition_start"] > start - span) & (rows["partition_start"] <= start)]
    return w.groupby(KEY, sort=False)[["total_events", "bad_events"]].sum(min_count=1)


def evaluate_burns(rows: pd.DataFrame, start: pd.Timestamp, catalog=CATALOG) -> pd.DataFrame:
    """The burn-rate judgement of the partition starting at ``start``, one row per SLO x region x model that alerts.

    ``rows``: slo_error_budgets rows of the partitions up to and including ``start`` (at least ``LOOKBACK`` of
    them for the slow windows). Columns: the key, ``kind`` (``burn`` | ``absent``), ``severity``, the window pair
    that fired (``long_window``, ``short_window``, ``factor``), both burn rates, the bad events and events of the
    long window, ``interpolated`` (the SLI was interpolated in a partition of the long window) and the budget
    remaining. A page-intent SLO pages on its page windows and tickets on the others; a ticket-intent SLO tickets on
    every window. Severity is the highest any window pair reaches."""
    cols = [*KEY, "kind", "severity", "long_window", "short_window", "factor", "long_burn", "short_burn",
            "bad_events", "total_events", "interpolated", "error_budget_remaining"]
    if rows is None or rows.empty:
        return pd.DataFrame(columns=cols)
    start = pd.Timestamp(start)
    rows = rows[rows["partition_start"] <= start]
    budget = {s.name: s.budget for s in catalog}
    intent = {s.name: s.alert_intent for s in catalog}
    current = rows[rows["partition_start"] == start].set_index(KEY)
    out = {}
    for long_w, short_w, factor, severity in BURN_WINDOWS:
        lw, sw = _window_sums(rows, start, long_w), _window_sums(rows, start, short_w)
        j = lw.join(sw, rsuffix="_short", how="inner")
        for key, r in j.iterrows():
            b = budget.get(key[0])
            if b is None or not (r["total_events"] > 0 and r["total_events_short"] > 0):
                continue
            long_burn = r["bad_events"] / r["total_events"] / b
            short_burn = r["bad_events_short"] / r["total_events_short"] / b
            if not (long_burn > factor and short_burn > factor):
                continue
            if min(r["bad_events"], r["bad_events_short"]) < MIN_BAD_EVENTS:
                continue  # minimum-traffic guard
            sev = severity if intent[key[0]] == "page" else "ticket"
            if key in out and (out[key]["severity"] == "page" or sev == "ticket"):
                continue
            span = rows[(rows["partition_start"] > start - long_w) & (rows["partition_start"] <= start)]
            sel = (span["slo"] == key[0]) & (span["region"] == key[1]) & (span["model_name"] == key[2])
            out[key] = {"kind": "burn", "severity": sev, "long_window": long_w, "short_window": short_w,
                        "factor": factor, "long_burn": long_burn, "short_burn": short_burn,
                        "bad_events": r["bad_events"], "total_events": r["total_events"],
                        "interpolated": bool(span.loc[sel, "interpolated"].astype(bool).any()),
                        "error_budget_remaining": current["error_budget_remaining"].get(key, np.nan)
                        if "error_budget_remaining" in current else np.nan}
    # an SLI that reported within the last hour and has no events now: absent, a ticket
    before = rows[(rows["partition_start"] >= start - ABSENT_LOOKBACK) & (rows["partition_start"] < start)]
    reported = set(before.loc[before["total_events"].astype("float64") > 0, KEY].itertuples(index=False, name=None))
    now = set(current.index[current["total_events"].notna()]) if len(current) else set()
    for key in sorted(reported - now):
        if key in out:
            continue
        out[key] = {"kind": "absent", "severity": "ticket", "long_window": ABSENT_LOOKBACK, "short_window": PARTITION,
                    "factor": np.nan, "long_burn": np.nan, "short_burn": np.nan, "bad_events": np.nan,
                    "total_events": np.nan, "interpolated": False, "error_budget_remaining": np.nan}
    if not out:
        return pd.DataFrame(columns=cols)
    frame = pd.DataFrame([{**dict(zip(KEY, k)), **v} for k, v in out.items()])
    return frame[cols].sort_values(KEY).reset_index(drop=True)


# A release is judged while it is new: a version first seen within the last hour. After an hour the ordinary 1 h /
# 5 min window holds nothing but the new version, and slo_burn judges it as the service.
RELEASE_LOOKBACK = BURN_WINDOWS[0][0]
RELEASE_FACTOR = BURN_WINDOWS[0][2]  # the fast page's burn rate (14.4x: 2 % of a 30-day budget an hour)


def _burn(bad, total, budget) -> float:
    return bad / total / budget if total > 0 else np.nan


def release_burns(rows: pd.DataFrame, start: pd.Timestamp, catalog=CATALOG) -> pd.DataFrame:
    """The releases judged at the partition starting at ``start``: one row per SLO x region x model x new version
    whose burn meets :data:`RELEASE_FACTOR` (see the module docstring).

    ``rows``: slo_version_events rows of the partitions within :data:`RELEASE_LOOKBACK` up to and including
    ``start``. A version is new when it began serving after the look-back's first partition and another version
    of the model served in the region before it (without that earlier version there is nothing to contrast: missing
    history is no evidence). It is judged when, with at least ``MIN_BAD_EVENTS`` bad events in each: its burn since
    it began and in this partition (not its first: a new pod's warm-up requests are slow on any healthy release)
    both exceed the factor; the versions before it did not exceed it over the look-back before it began; and a
    version still serving beside it (a rollout) does not exceed it now (both burning is the load or the platform,
    not the release). Columns: the key, ``previous_version``, ``since``, ``burn_since``, ``burn_now``,
    ``burn_before``, ``bad_events``, ``total_events``, ``interpolated``, ``severity``."""
    cols = [*VERSION_KEY, "previous_version", "since", "burn_since", "burn_now", "burn_before", "bad_events",
            "total_events", "interpolated", "severity"]
    if rows is None or rows.empty:
        return pd.DataFrame(columns=cols)
    start = pd.Timestamp(start)
    budget = {s.name: s.budget for s in catalog}
    intent = {s.name: s.alert_intent for s in catalog}
    w = rows[(rows["partition_start"] > start - RELEASE_LOOKBACK) & (rows["partition_start"] <= start)]
    w = w[w["total_events"].astype("float64") > 0]
    out = []
    for (slo, region, model), g in w.groupby(KEY, sort=True):
        b = budget.get(slo)
        if b is None:
            continue
        first = g.groupby("model_version")["partition_start"].min()
        now = g[g["partition_start"] == start]
        for version in now["model_version"].unique():
            since = first[version]
            if since == g["partition_start"].min() or since == start:
                continue  # served from the look-back's start (not new), or this is its first partition (warm-up)
            before = g[(g["partition_start"] < since) & (g["model_version"] != version)]
            if before.empty:
                continue  # nothing served before it: no contrast, no judgement
            mine = g[(g["model_version"] == version) & (g["partition_start"] >= since)]
            cur = now[now["model_version"] == version]
            others = now[now["model_version"] != version]
            bad, total = float(mine["bad_events"].sum()), float(mine["total_events"].sum())
            bad_now, total_now = float(cur["bad_events"].sum()), float(cur["total_events"].sum())
            burn_since, burn_now = _burn(bad, total, b), _burn(bad_now, total_now, b)
            burn_before = _burn(float(before["bad_events"].sum()), float(before["total_events"].sum()), b)
            burn_others = _burn(float(others["bad_events"].sum()), float(others["total_events"].sum()), b)
            if not (burn_since > RELEASE_FACTOR and burn_now > RELEASE_FACTOR) or min(bad, bad_now) < MIN_BAD_EVENTS:
                continue
            if burn_before > RELEASE_FACTOR or burn_others > RELEASE_FACTOR:
                continue  # the model burned before the release, or beside it: not the release's doing
            previous = before.sort_values("partition_start")["model_version"].iloc[-1]
            out.append({"slo": slo, "region": region, "model_name": model, "model_version": version,
                        "previous_version": previous, "since": since, "burn_since": burn_since, "burn_now": burn_now,
                        "burn_before": burn_before, "bad_events": bad, "total_events": total,
                        "interpolated": bool(mine["interpolated"].astype(bool).any()),
                        "severity": "page" if intent[slo] == "page" else "ticket"})
    return pd.DataFrame(out, columns=cols)
