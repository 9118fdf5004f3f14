"""Serving: SLOs burning their error budget (``slo_burn``; an absent SLI is missing data) and a new model version
burning what the one it replaced did not (``release_regression``). The burn-rate windows, factors, minimum-traffic
guard and absence rule are gpu_health.metrics.slo's (docs/slos.md).
"""


import pandas as pd

from gpu_health.constants import PARTITION
from gpu_health.diagnosis.context import PartitionContext
from gpu_health.diagnosis.finding import Detector, Finding, margin_of


# The burn-rate windows, factors, minimum-traffic guard and absence rule are gpu_health.metrics.slo's (BURN_WINDOWS,
# MIN_BAD_EVENTS, ABSENT_LOOKBACK): the SRE workbook's multi-window, multi-burn-rate alerts with Sloth's windows.
SLO_FAMILY = "software"          # a model release, an error spike, a capacity shortfall: the serving stack's software
SLO_ABSENT_FAMILY = "missing_data"  # an SLI's series gone: its exporter or scrape, never a serving incident


def _window_text(td: pd.Timedelta) -> str:
    minutes = int(td / pd.Timedelta(minutes=1))
    return f"{minutes // 1440} d" if minutes % 1440 == 0 else f"{minutes // 60} h" if minutes % 60 == 0 else f"{minutes} min"


def _not_new(rows: pd.DataFrame, r, start: pd.Timestamp, budget: float) -> str | None:
    """Why the page-level burn ``r`` (an evaluate_burns row) is not a page, None when it is one.

    A page says the service started burning: its long window must be filled -- the service's SLI reported from
    the window's first partition on (a window holding less is the first look at a service, whose burn may be a
    week old) -- and the same span just before that window, the service's own history, must have burned below the
    factor. A history burning as fast is a chronic breach of the objective (a ticket); none is no contrast."""
    key = (rows["slo"] == r["slo"]) & (rows["region"] == r["region"]) & (rows["model_name"] == r["model_name"])
    mine = rows[key & rows["total_events"].astype("float64").notna() & (rows["partition_start"] <= start)]
    long_w = r["long_window"]
    if mine.empty or mine["partition_start"].min() > start - long_w + PARTITION:
        return f"its {_window_text(long_w)} window not yet filled: the first look at the service"
    before = mine[(mine["partition_start"] > start - 2 * long_w) & (mine["partition_start"] <= start - long_w)]
    total, bad = float(before["total_events"].sum()), float(before["bad_events"].sum())
    if not total > 0:
        return f"no history in the {_window_text(long_w)} before the window to tell a new burn from an old one"
    if bad / total / budget > r["factor"]:
        return (f"chronic: it burned {bad / total / budget:.1f}x in the {_window_text(long_w)} before the window "
                f"as well, no new burn")
    return None


def _release_findings(ctx: PartitionContext) -> list[Finding]:
    """A new model version burning the budget that the version it replaced did not (``release_regression``).

    Judged by :func:`gpu_health.metrics.slo.release_burns` on the slo_version_events rows. Its two witnesses: the
    new version's own fast burn, over its time so far and again in this partition past its warm-up, and the
    contrast with the version before it in the same region (which did not burn, nor does one still serving beside
    it). A model without per-version rows (or without an earlier version to compare) is judged by slo_burn alone."""
    if ctx.slo_versions is None or ctx.slo_versions.empty:
        return []
    from gpu_health.metrics.slo import MIN_BAD_EVENTS, RELEASE_FACTOR, release_burns
    from gpu_health.metrics.slo_catalog import BY_NAME

    out = []
    for _, r in release_burns(ctx.slo_versions, ctx.start).iterrows():
        slo = BY_NAME[r["slo"]]
        interp = (f" The threshold {slo.threshold_s:g} s is no bucket bound: the bad events are interpolated within "
                  f"the bucket, an estimate." if r["interpolated"] else "")
        before = f"{r['burn_before']:.1f}x" if pd.notna(r["burn_before"]) else "no bad events"
        out.append(Finding(
            detector="release_regression", family=SLO_FAMILY, severity=r["severity"], region=r["region"],
            key=f"slo_burn|{r['region']}|{r['model_name']}",  # one incident with the burn alert of the same model
            summary=f"{r['model_name']} {r['model_version']} in {r['region']} burns the error budget of {slo.name} "
                    f"({slo.title}) at {r['burn_since']:.1f}x since its release; {r['previous_version']} did not",
            evidence=f"Version {r['model_version']} serves since {r['since']:%Y-%m-%d %H:%M} UTC: burn rate "
                     f"{r['burn_since']:.1f}x since then and {r['burn_now']:.1f}x in this partition (alert above "
                     f"{RELEASE_FACTOR:g}x in both, each with at least {MIN_BAD_EVENTS} bad events): "
                     f"{r['bad_events']:.0f} bad of {r['total_events']:.0f} events against an objective of "
                     f"{slo.objective:.3%}. The version before it, {r['previous_version']}, burned {before} in the "
                     f"hour before the release, and no version serving beside it burns now: the release is the "
                     f"cause.{interp} Roll back to {r['previous_version']}",
            baseline=float(RELEASE_FACTOR), value=float(r["burn_since"]),
            margin=margin_of((r["burn_since"], RELEASE_FACTOR), (r["burn_now"], RELEASE_FACTOR),
                             (r["bad_events"], MIN_BAD_EVENTS)) if r["severity"] == "page" else None))
    return out


def detect_slo_burn(ctx: PartitionContext) -> list[Finding]:
    """Serving SLOs burning their error budget (page / ticket by window pair) or whose SLI is absent (ticket);
    a new model version burning it is named first (:func:`_release_findings`).

    Burns are judged by :func:`gpu_health.metrics.slo.evaluate_burns` on the slo_error_budgets rows; the two
    witnesses of a page are the long and the short window over the factor, each with at least
    ``MIN_BAD_EVENTS`` bad events -- and a page needs its long window filled and the service's history before it
    burning slower (:func:`_not_new`): the first look at a service, or a chronic breach, is a ticket naming the
    objective. A threshold inside a histogram bucket is said to be interpolated."""
    release = _release_findings(ctx)
    if ctx.slo_events is None or ctx.slo_events.empty:
        return release
    from gpu_health.metrics.slo import MIN_BAD_EVENTS, evaluate_burns
    from gpu_health.metrics.slo_catalog import BY_NAME

    out = []
    for _, r in evaluate_burns(ctx.slo_events, ctx.start).iterrows():
        slo = BY_NAME[r["slo"]]
        # one alert per model and region: an error spike burns availability and error-rate at once, one incident
        key = f"slo_burn|{r['region']}|{r['model_name']}"
        if r["kind"] == "absent":
            out.append(Finding(
                detector="slo_burn", family=SLO_ABSENT_FAMILY, severity="ticket", region=r["region"], key=key,
                summary=f"{r['model_name']} in {r['region']}: the SLI of SLO {slo.name} ({slo.title}) is absent",
                evidence=f"The series behind {slo.name} reported within the last {_window_text(r['long_window'])} and "
                         f"report nothing in this partition: the SLO cannot be judged. Check the model's exporter and "
                         f"its scrape (and whether the model was retired on purpose)."))
            continue
        severity, summary = r["severity"], (f"{r['model_name']} in {r['region']} burns the error budget of {slo.name} "
                                             f"({slo.title}) at {r['long_burn']:.1f}x over {_window_text(r['long_window'])}")
        why = _not_new(ctx.slo_events, r, ctx.start, slo.budget) if severity == "page" else None
        if why:
            severity = "ticket"
            summary = (f"{r['model_name']} in {r['region']} breaches the objective {slo.objective:.3%} of {slo.name} "
                       f"({slo.title}), {r['long_burn']:.1f}x over {_window_text(r['long_window'])}; {why}")
        budget_left = r["error_budget_remaining"]
        left = f"; error budget remaining over {slo.window}: {budget_left:.0%}" if pd.notna(budget_left) else ""
        interp = (f" The threshold {slo.threshold_s:g} s is no bucket bound of the histogram: the bad events are "
                  f"interpolated linearly within the bucket (Prometheus' rule), an estimate, not a count."
                  if r["interpolated"] else "")
        out.append(Finding(
            detector="slo_burn", family=SLO_FAMILY, severity=severity, region=r["region"], key=key, summary=summary,
            evidence=f"Burn rate {r['long_burn']:.1f}x over {_window_text(r['long_window'])} and {r['short_burn']:.1f}x "
                     f"over {_window_text(r['short_window'])} (alert above {r['factor']:g}x in both, each window with "
                     f"at least {MIN_BAD_EVENTS} bad events): {r['bad_events']:.0f} bad of {r['total_events']:.0f} "
                     f"events against an objective of {slo.objective:.3%}{left}.{interp} Look first at the "
                     f"model's versions in serving_slis (a new version serving since the burn started is the suspect: "
                     f"roll it back), then its replicas and queue depth",
            baseline=float(r["factor"]), value=float(r["long_burn"]),
            margin=margin_of((r["long_burn"], r["factor"]), (r["short_burn"], r["factor"]),
                             (r["bad_events"], MIN_BAD_EVENTS)) if severity == "page" else None))
    # the alert of a model merges its findings and reads the first: the release, pages, the fastest burn, absences last
    return release + sorted(out, key=lambda f: (f.severity != "page", f.value is None, -(f.value or 0.0)))


RUNBOOKS: dict[str, str] = {}  # software's and missing_data's
DETECTORS = [
    Detector(detect_slo_burn, emits=(("release_regression", SLO_FAMILY), ("slo_burn", SLO_FAMILY),
                                     ("slo_burn", SLO_ABSENT_FAMILY)),
             needs=("slo_events", "slo_versions")),
]
