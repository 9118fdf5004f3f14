"""Software: a change (driver, kernel, firmware, framework release) whose cohort does worse than the rest in the
same minutes (``deploy_regression``).

==================  ===========  =====================================================================
detector            family       pages on (the two witnesses) / tickets on
==================  ===========  =====================================================================
deploy_regression   software     a change event's cohort worse than the rest in the same minutes:
                                 job failure rate (Fisher exact test against the other nodes' jobs
                                 since the hour before + rate-ratio floor over the same minutes, all
                                 failures and those naming the GPU stack) of the jobs started on a
                                 node since the change reached it, or of the jobs that ended on it,
                                 counted since the change (a job failed at its GPU's software-stack
                                 Xid), failures on 2+ of its nodes, and worse than its nodes' own hour
                                 before; or that excess of failures (2+) with the GPUs' witness: jobs on
                                 2+ changed nodes reporting GPU-stack Xids more than the changed nodes'
                                 share of the busy GPU-/job-minutes (exact binomial rate-ratio test);
                                 or step time over baseline of 2+ of a release's jobs (Mann-Whitney
                                 cohort judge + effect floor, the rate spent since its first job)
==================  ===========  =====================================================================

Hung trainers (``training_stall``) are software too: gpu_health.diagnosis.detectors.stalls.
"""


import numpy as np
import pandas as pd

from gpu_health.constants import MINUTE, PARTITION, XID_SOFTWARE_RESET, CauseFamily
from gpu_health.diagnosis.cohort import REGRESSION, judge_cohorts
from gpu_health.diagnosis.context import (_RUN_ENDS, DEPLOY_LOOKBACK, GPU_SOFTWARE_REASON, PartitionContext,
                                          _gpu_codes, _leaf_rows, _scope_nodes, _ts_slice, job_runs)
from gpu_health.diagnosis.finding import Detector, Finding, margin_of


# a change's cohort fails: at least 3 failures (fewer cannot reach p < 1e-3 against any realistic base rate),
# three times the rate of the rest in the same minutes, Fisher exact p < 1e-3 spent over the looks (Bonferroni)
FAILURE_RATE_RATIO = 3.0
FAILURE_P = 1e-3
MIN_COHORT_FAILURES = 3
# the Xids of the GPU software stack, as GPU_SOFTWARE_REASON names them in a failure's reason (NVIDIA's Xid catalogue:
# 13 graphics engine exception, 31 memory page fault, 43 stopped processing, 119/120 GSP RPC timeout / error): the
# driver has killed the CUDA context of the job on that GPU, so the job has failed whenever its scheduler writes it
STACK_XIDS = sorted(XID_SOFTWARE_RESET | {13, 31, 43})
# a change's failures on at least two of its nodes (when it has two): one node failing its jobs is that node's fault
MIN_FAILED_NODES = 2
# the GPUs' witness counts jobs whose GPUs report a GPU-stack Xid: at least two (one job's Xids, on however many of
# its GPUs, are one event of that job), on MIN_FAILED_NODES changed nodes
MIN_XID_JOBS = 2
# a release's step times (judged for DEPLOY_LOOKBACK) are judged on its last 30 minutes; a node change's jobs on
# everything since the change
DEPLOY_WINDOW = pd.Timedelta(minutes=30)
# a node change's cohort is compared with its own nodes' jobs of the hour before it as well: long enough for the
# jobs of a few nodes to end, short enough to be the same load of the same day. The exact test's reference is the
# jobs of the nodes the change has not reached over the same hour and the minutes since: a first wave is a few
# nodes' jobs of a few minutes, and against the same minutes' jobs alone no count of its failures could reach the
# false-alarm rate before the wave's second partition (the same minutes still bound the rate ratio)
OWN_HOUR = pd.Timedelta(hours=1)
STEP_EFFECT_FLOOR = 0.10  # a step-time regression worth a page is 10 % slower than the old version's cohort
# a release's step times are judged once two of its jobs report (and two others in the same minutes): a job's minutes
# share its data, node and code, so one job slower than the rest is that job's (as one node failing its jobs is that
# node's), and a release's regression shows on every job that runs it. How many minutes is the rank test's to say:
# with too few it cannot reach the look's false-alarm rate, with a few of two jobs well apart it can
MIN_RELEASE_JOBS = 2


def detect_deploys(ctx: PartitionContext) -> list[Finding]:
    ch = ctx.changes
    out = []
    if ch is None or ch.empty:
        return out
    window = _ts_slice(ch, ctx.end - DEPLOY_LOOKBACK, ctx.end)  # (a slice of the time-sorted events, not a mask)
    if ctx.prepared is None:
        recent = _rollout_groups(window, ctx.inventory)
    else:  # the same change events and inventory give the same groups: a range computes them once per change
        # (the rows' values as the key; one object array, not a namedtuple per row)
        key = (tuple(window.columns), tuple(map(tuple, window.to_numpy(dtype=object))))
        hit = ctx.prepared.rollouts.get(key)
        if hit is None or hit[0] is not ctx.inventory:
            groups = _rollout_groups(window, ctx.inventory)
            # (the groups' rows kept as the tuples the loop below reads: itertuples costs a millisecond a call)
            hit = ctx.prepared.rollouts[key] = (ctx.inventory, list(groups.itertuples(index=False)))
        recent = hit[1]
    for ev in (recent.itertuples(index=False) if ctx.prepared is None else recent):
        if ev.kind in NODE_CHANGE_KINDS:
            f = _node_cohort_failures(ctx, ev)
        elif ev.kind == "framework_release" and pd.notna(ev.to_version):
            f = _framework_cohort(ctx, ev, max(ev.ts, ctx.end - DEPLOY_WINDOW))
        else:
            continue
        if f is not None:
            out.append(f)
    return out


def _alpha(ctx: PartitionContext, first_look: pd.Timestamp) -> float:
    """The false-alarm rate of this look at a change. A change is judged again every partition for DEPLOY_LOOKBACK:
    the rate is spent over the looks since ``first_look`` (Bonferroni), so a benign deploy does not page by chance
    hours later; a real regression shows in the first looks, where the bar is highest."""
    return FAILURE_P / max(1, int(np.ceil((ctx.end - first_look) / PARTITION)))


def _first_adoption(ctx: PartitionContext, ev) -> pd.Timestamp:
    """When the first job on a framework release started: the first look that could judge it, from which the looks
    spend the false-alarm rate. A release is announced once and adopted job by job (a team's next submissions, a
    cron's next run): until a job on it has started, its cohort has no step to judge and no look could page, so an
    hour between announcement and adoption must not cost the first jobs on it a twelfth of the rate. The
    announcement itself wherever that cannot be told: no job on it started in the scheduler's look-back (which
    holds every start since the announcement), or one did before the announcement, or a run on it ends or reports
    steps with no start in the look-back (its minutes may have been judged at every look since)."""
    s, m = ctx.sched, ctx.meta
    if s is None or not len(s) or m is None or m.empty or not {"job_id", "framework_version"} <= set(m.columns):
        return ev.ts
    key = ("jobs", ev.to_version)
    if ctx.prepared is not None and ctx.prepared.meta is m and key in ctx.prepared.lookups:
        jobs = ctx.prepared.lookups[key]
    else:
        jobs = frozenset(m.loc[(m["framework_version"] == ev.to_version).to_numpy(dtype=bool, na_value=False),
                               "job_id"].astype(object))
        if ctx.prepared is not None and ctx.prepared.meta is m:
            ctx.prepared.lookups[key] = jobs
    job = s["job_id"].astype(object)
    mine = job.isin(jobs).to_numpy(dtype=bool)
    started = s.loc[mine & s["event"].eq("started").to_numpy(dtype=bool, na_value=False)]
    if started.empty or started["ts"].min() <= ev.ts:
        return ev.ts
    rt = ctx.runtime
    # a run on it older than the look-back: one that ends in it, or reports steps, without a start in it (a job
    # waiting in the queue has run nothing)
    ends = mine & s["event"].isin(_RUN_ENDS).to_numpy(dtype=bool, na_value=False)
    seen = set(job[ends]) | (set(rt["job_id"].astype(object)) & jobs if rt is not None and "job_id" in rt.columns else set())
    if seen - set(started["job_id"].astype(object)):
        return ev.ts
    return started["ts"].min()


NODE_CHANGE_KINDS = ("driver_upgrade", "kernel_upgrade", "firmware_update")
_VERSION_COLUMN = {"driver_upgrade": "driver_version", "kernel_upgrade": "kernel_version"}


def _rollout_groups(recent: pd.DataFrame, inventory: pd.DataFrame) -> pd.DataFrame:
    """Change events, with the node changes of one rollout merged: events of one kind moving to one version
    (a rolling upgrade announced node by node or batch by batch) are one change, first event's id and time,
    scope the union of their nodes. A rollout judged batch by batch would leave each batch too few jobs to
    test, and the regression would never page."""
    if recent.empty:
        return recent
    node_kind = recent["kind"].isin(NODE_CHANGE_KINDS) & recent["to_version"].notna()
    out = [recent[~node_kind]]
    for _, grp in recent[node_kind].sort_values("ts").groupby(["kind", "to_version"], sort=False):
        first = grp.iloc[[0]].copy()
        nodes = set().union(*(_scope_nodes(s, inventory) for s in grp["scope"]))
        first["scope"] = ",".join(sorted(nodes)) if len(grp) > 1 else first["scope"]
        out.append(first)
    return pd.concat([o for o in out if len(o)], ignore_index=True) if any(len(o) for o in out) else recent.iloc[0:0]


def _node_cohort(ctx: PartitionContext, ev) -> set[str]:
    """The nodes on the change's new version: its scope, and every node whose own telemetry reports the new
    version (the node is the witness of what it runs, whatever the change calendar's scope spelling); not a node of
    the scope whose telemetry still reports the old version at the partition's end (a scope the rollout has not
    reached yet)."""
    cohort = _scope_nodes(ev.scope, ctx.inventory)
    col = _VERSION_COLUMN.get(ev.kind)
    if col and len(ctx.node) and pd.notna(ev.to_version):
        version = ctx.node[col].astype(object)
        cohort |= set(ctx.node.loc[version == ev.to_version, "node_id"].astype(object))
        if pd.notna(ev.from_version):  # (what a node runs now: its last row of the partition)
            last = ctx.node.assign(_v=version).sort_values("ts", kind="stable").drop_duplicates("node_id", keep="last") \
                if "ts" in ctx.node.columns else ctx.node.assign(_v=version).drop_duplicates("node_id", keep="last")
            cohort -= set(last.loc[last["_v"] == ev.from_version, "node_id"].astype(object))
    return cohort


def _changed_at(ctx: PartitionContext, ev, cohort: set[str]) -> tuple[dict, list[str]]:
    """node -> when the change reached it (the first event of the rollout naming it; the rollout's first event for
    a node only its telemetry places on the new version), and the ids of the rollout's events."""
    ch = ctx.changes
    waves = ch[(ch["kind"] == ev.kind) & (ch["to_version"] == ev.to_version) & (ch["ts"] >= ev.ts)
               & (ch["ts"] < ctx.end)].sort_values("ts", kind="stable")
    at = {}
    for w in waves.itertuples(index=False):
        for n in _scope_nodes(w.scope, ctx.inventory) & cohort:
            at.setdefault(n, w.ts)
    for n in cohort - set(at):
        at[n] = ev.ts
    return at, list(waves["event_id"].astype(object)) or [ev.event_id]


def _first_start_on(ctx: PartitionContext, ev, changed: dict) -> pd.Timestamp | None:
    """When the first job started on a node the change had reached (None: none yet, or a stream without starts)."""
    s = _ts_slice(ctx.sched, ev.ts, ctx.end, ctx.memo) if ctx.sched is not None and len(ctx.sched) else None
    if s is None or not len(s):
        return None
    st = s[s["event"].eq("started").to_numpy(dtype=bool, na_value=False) & s["node_ids"].notna().to_numpy(dtype=bool)]
    st = st if st["ts"].is_monotonic_increasing else st.sort_values("ts", kind="stable")
    for ts, placed in zip(st["ts"], st["node_ids"].astype(object)):  # (time order: the first hit ends the scan)
        if any(n in changed and changed[n] <= ts for n in placed.split(",")):
            return ts
    return None


def _node_cohort_failures(ctx: PartitionContext, ev) -> Finding | None:
    """A node change judged on two witnesses of its jobs, each an exact test against the jobs of the nodes it has not
    reached in the same minutes (jobs on its nodes from before it reached them are in neither group):

    - ``started``: the jobs started on a node after the change reached it, failed so far -- a regression of the GPU
      stack kills jobs in their first minutes, while a job that started before ran the old version;
    - ``ended``: the jobs that ended on a node after the change reached it -- a change taking effect under running
      jobs kills them; a stream without starts is judged on this one alone.

    A job fails when its GPU does: a run still running whose GPUs report an Xid of the GPU software stack
    (STACK_XIDS) has failed (``_failing_now``), a minute or more before its scheduler writes it, in every group alike.

    Each witness counts everything since the change (a rollout's cohort grows wave by wave, and each look judges all
    of it; the looks are paid for in ``_alpha``), twice: all failures, and the failures whose reason names the GPU
    software stack (GPU_SOFTWARE_REASON) -- on a cluster where many jobs fail in the normal course for their own
    reasons those widen the null of the first count, but rarely name the GPU. The false-alarm rate is split between
    the witnesses that have a cohort (its two nested counts share it) and the GPUs' own witness (``_xid_test``: jobs on
    the changed nodes reporting GPU-stack Xids in the partition, against the other nodes' in the same minutes) when the
    changed nodes ran jobs in it; with that witness significant, an excess of failures too few to be significant by
    count pages (two collectors: the scheduler's or the job's failure, DCGM's Xids). A cohort no worse than its own nodes' jobs of the hour before the change is not the
    change's doing, whatever the other nodes do."""
    # a later change of the same kind to another version on these nodes supersedes this one (e.g. the rollback)
    cohort = _node_cohort(ctx, ev)
    ch = ctx.changes
    later = ch[(ch["ts"] > ev.ts) & (ch["ts"] < ctx.end) & (ch["kind"] == ev.kind) & (ch["to_version"] != ev.to_version)]
    if not cohort or any(_scope_nodes(s, ctx.inventory) & cohort for s in later["scope"]):
        return None
    runs = job_runs(ctx, ev.ts - OWN_HOUR)
    if runs.empty:
        return None
    changed, waves = _changed_at(ctx, ev, cohort)
    # per run: when the change reached the first of its nodes it reached (NaT: none of them)
    reached = pd.Series([min((changed[n] for n in str(p).split(",") if n in changed), default=pd.NaT) if pd.notna(p)
                         else pd.NaT for p in runs["node_ids"]], index=runs.index, dtype=runs["start"].dtype)
    touched, placed = reached.notna(), runs["node_ids"].notna()
    started, ended = runs["start"] >= ev.ts, runs["end"] >= ev.ts
    # the exact test's reference: the other nodes' runs of the hour before the change as well (OWN_HOUR)
    since = ev.ts - OWN_HOUR
    ref_started, ref_ended = runs["start"] >= since, runs["end"] >= since
    # the cohort's own reference: its nodes' runs that ended in the hour before the change reached them (what the old
    # version did on the same nodes, for their jobs and their users)
    own = (touched & (runs["start"] < ev.ts) & (runs["end"] < reached)).to_numpy(dtype=bool)
    # the looks that spend the false-alarm rate on the started witness are those since a job first started on the new
    # version: before that its cohort is empty (a rollout drains its nodes first) and no look could page
    first = _first_start_on(ctx, ev, changed)
    witnesses = [("started", started & touched & (reached <= runs["start"]), started & ~touched & placed,
                  ref_started & ~touched & placed, _alpha(ctx, ev.ts if first is None else first)),
                 ("ended", ended & touched & (reached <= runs["end"]), ended & ~touched & placed,
                  ref_ended & ~touched & placed, _alpha(ctx, ev.ts))]
    witnesses = [w for w in witnesses if w[1].any()]
    xid, why = _failing_now(ctx, runs)
    if xid.any():
        runs = runs.assign(reason=runs["reason"].astype(object).mask(xid, why))
    failed = runs["failed"].to_numpy(dtype=bool) | xid
    gpu = failed & runs["reason"].astype(object).str.contains(GPU_SOFTWARE_REASON, na=False).to_numpy(dtype=bool)
    # the GPUs' witness (DCGM's, not the scheduler's): it shares the false-alarm rate of the looks since the first job
    # on the new version whenever the changed nodes ran jobs in the partition (its exposure, not its outcome)
    exposure = _xid_exposure(ctx, changed)
    n_tests = len(witnesses) + (exposure is not None)
    stack = _xid_test(exposure, _alpha(ctx, ev.ts if first is None else first) / max(n_tests, 1)) \
        if exposure is not None else None
    for name, new, old, ref, alpha in witnesses:
        new, old, ref = new.to_numpy(dtype=bool), old.to_numpy(dtype=bool), ref.to_numpy(dtype=bool)
        # (where every failure of both groups names the GPU stack the two counts are one test). The two counts are
        # nested -- the GPU-stack failures are among all the failures of the same runs -- so a chance excess in one
        # is mostly one in the other: each is judged at the witness's rate, the pair's false-alarm rate at most
        # twice it (a split would charge nested tests as independent and cost a wave's page a partition)
        judged = new | ref
        kinds = [("", failed)] + ([(" with a reason naming the GPU stack", gpu)]
                                  if (failed[judged] != gpu[judged]).any() else [])
        for how, fail in kinds:
            f = _failure_test(ctx, ev, runs, fail, (new, old, own, ref), cohort, alpha / n_tests,
                              (name, how), waves, gpu, stack)
            if f is not None:
                return f
    return None


def _failing_now(ctx: PartitionContext, runs: pd.DataFrame) -> tuple[np.ndarray, pd.Series]:
    """The runs whose GPUs reported an Xid of the GPU software stack (STACK_XIDS) in the partition while they held
    them, still running at its end or ended failed, and the reason each failed for ("Xid 13 on its GPU"): the driver
    killed the job's CUDA context -- its scheduler writes the end a minute or more later, often with the process's
    own exit code for a reason. A run that started after the Xid's minute is a later run of the job (a requeue), one
    that ended before it an earlier one, and one that completed after it survived it. Without GPU rows naming their
    Xids and jobs (an optional signal): none."""
    none = np.zeros(len(runs), dtype=bool), pd.Series(dtype=object)
    g = ctx.gpu
    if g is None or not len(g) or "xid" not in g.columns or "job_id" not in g.columns or "job_id" not in runs.columns:
        return none
    hit = g[g["xid"].isin(STACK_XIDS).to_numpy(dtype=bool, na_value=False) & g["job_id"].notna().to_numpy(dtype=bool)]
    if hit.empty:
        return none
    first = hit.assign(job_id=hit["job_id"].astype(object)).sort_values("ts", kind="stable") \
        .drop_duplicates("job_id").set_index("job_id")
    job = runs["job_id"].astype(object)
    at = job.map(first["ts"])
    running = runs["end"].isna().to_numpy(dtype=bool) & runs["start"].notna().to_numpy(dtype=bool)
    failed_after = runs["failed"].to_numpy(dtype=bool) & (runs["end"] >= at).to_numpy(dtype=bool, na_value=False)
    mask = (running | failed_after) & (runs["start"] < at + MINUTE).to_numpy(dtype=bool, na_value=False)
    xid = job[mask].map(first["xid"]).map(lambda x: f"Xid {int(x)} on its GPU")
    told = runs.loc[mask, "reason"].astype(object)
    why = xid.where(told.isna(), told.astype(str) + " (" + xid + ")")
    return mask, why


def _xid_exposure(ctx: PartitionContext, changed: dict) -> dict | None:
    """The partition's GPU rows held by a job, on the changed nodes since the change reached each (the cohort's) and
    on the nodes it has not reached (a changed node's rows from before are in neither): the jobs whose GPUs report
    an Xid of the GPU software stack (STACK_XIDS) on each side, the changed nodes reporting them, and the cohort's
    share of the exposure. None without GPU rows naming Xids and jobs (an optional signal) or without a cohort row."""
    g = ctx.gpu
    if g is None or not len(g) or not {"ts", "node_id", "job_id", "xid"} <= set(g.columns):
        return None
    busy = g[g["job_id"].notna().to_numpy(dtype=bool)]
    node, job = busy["node_id"].astype(object), busy["job_id"].astype(object)
    at = pd.to_datetime(node.map(changed), utc=True)
    ts = pd.to_datetime(busy["ts"], utc=True)
    mine = at.notna().to_numpy(dtype=bool) & (ts >= at).to_numpy(dtype=bool, na_value=False)
    rest = ~node.isin(list(changed)).to_numpy(dtype=bool)
    if not mine.any():
        return None
    stack = busy["xid"].isin(STACK_XIDS).to_numpy(dtype=bool, na_value=False)
    if not (stack & mine).any():  # (nothing to test: the shares are not needed)
        return {"jobs": 0, "others": 0, "share": 1.0, "nodes": [], "xids": ""}
    # the exposure, two ways: GPU-minutes (an Xid strikes a GPU) and job-minutes (an Xid strikes a job's every GPU
    # at once); the cohort's larger share is the null's, the conservative one whichever way the Xids strike
    minute = ts.dt.floor("min")
    jm = [len(set(zip(job[m], minute[m]))) for m in (mine, rest)]
    share = max(mine.sum() / max(mine.sum() + rest.sum(), 1), jm[0] / max(sum(jm), 1))
    hit = busy[stack & mine]
    jobs = set(hit["job_id"].astype(object))
    xids = hit.drop_duplicates("job_id")["xid"].astype(int).value_counts()
    return {"jobs": len(jobs), "others": len(set(job[stack & rest]) - jobs), "share": float(share),
            "nodes": sorted(set(hit["node_id"].astype(object))),
            "xids": ", ".join(f"Xid {k} ({v})" for k, v in xids.items())}


def _xid_test(exposure: dict, alpha: float) -> dict:
    """The exact conditional test of a rate ratio: given the stack-Xid jobs of both sides, is the cohort's count
    binomially more than its share of the exposure (p < ``alpha``)? Counted only with MIN_XID_JOBS jobs on
    MIN_FAILED_NODES changed nodes: one job's Xids are that job's, one node's are that node's (hardware's to judge)."""
    k, n = exposure["jobs"], exposure["jobs"] + exposure["others"]
    out = {**exposure, "alpha": alpha, "p": 1.0, "ok": False}
    if k < MIN_XID_JOBS or len(exposure["nodes"]) < MIN_FAILED_NODES:
        return out
    from scipy.stats import binomtest  # here: scipy.stats costs every process importing this module ~0.6 s

    out["p"] = float(binomtest(k, n, min(exposure["share"], 1.0), alternative="greater").pvalue)
    out["ok"] = out["p"] < alpha
    return out


def _failure_test(ctx: PartitionContext, ev, runs: pd.DataFrame, failed: np.ndarray, groups: tuple, cohort: set,
                  alpha: float, witness: tuple[str, str], waves: list[str], named: np.ndarray,
                  stack: dict | None = None) -> Finding | None:
    """Fisher's exact test of the ``failed`` runs of the ``new`` group against the ``ref`` (``groups``: the masks of
    the runs ``new``, ``old`` of the other nodes in the same minutes, the cohort's ``own`` of the hour before, and
    ``ref``: the other nodes' since the hour before); the finding when they fail FAILURE_RATE_RATIO times as often as
    the ``old`` runs and as the ``own`` runs (when there were some), on MIN_FAILED_NODES of the change's nodes, and
    either significantly by themselves (``alpha``) or with the GPUs' own witness significant (``stack``, _xid_test:
    the scheduler's failures and DCGM's Xids, two collectors). ``witness``: which runs (started / ended), which
    failures; ``named``: the runs whose failure names the GPU software stack."""
    new, old, own, ref = groups
    a, b = int((new & failed).sum()), int((new & ~failed).sum())
    c, d = int((old & failed).sum()), int((old & ~failed).sum())
    g, h = int((ref & failed).sum()), int((ref & ~failed).sum())
    gpus_say = stack is not None and stack["ok"]
    if a < (MIN_FAILED_NODES if gpus_say else MIN_COHORT_FAILURES):
        return None
    # one node of a change failing its jobs is that node's fault (hardware's to judge) when another of its nodes ran
    # jobs since and they did not fail; the change's shows on many. Where its other nodes ran none (idle, or not
    # yet given work) one node is all the change has shown: its failures are the change's only when every one
    # names the GPU software stack (a lone node's Xid 48 / 79 is its GPU's)
    nodes_hit = sorted(cohort & set(",".join(runs.loc[new & failed, "node_ids"].astype(str)).split(",")))
    if len(nodes_hit) < min(MIN_FAILED_NODES, len(cohort)):
        ran = cohort & set(",".join(runs.loc[new, "node_ids"].astype(str)).split(","))
        if len(ran) >= MIN_FAILED_NODES or (new & failed & ~named).any():
            return None
    rate_new = a / max(a + b, 1)
    rate_old = (c + 0.5) / max(c + d + 1, 1)
    e, n_own = int((own & failed).sum()), int(own.sum())
    # (no run of the hour before -- nodes drained for the change, or new to the cluster -- is missing evidence: the
    # same-minutes test stands alone)
    rate_own = (e + 0.5) / (n_own + 1) if n_own else 0.0
    if rate_new < FAILURE_RATE_RATIO * max(rate_old, rate_own):
        return None
    from scipy.stats import fisher_exact  # here: scipy.stats costs every process importing this module ~0.6 s

    p = fisher_exact([[a, b], [g, h]], alternative="greater")[1]
    if p >= alpha and not gpus_say:
        return None
    # the margin of the route(s) that paged (the count alone; the count's excess with the Xids' test). The floors of
    # counts and nodes are definitions (one node's failures are hardware's), not bars: no margin of their own
    ratio = (rate_new, FAILURE_RATE_RATIO * max(rate_old, rate_own))
    routes = ([margin_of(ratio, p_values=((p, alpha),))] if p < alpha else []) \
        + ([margin_of(ratio, p_values=((stack["p"], stack["alpha"]),))] if gpus_say else [])
    margin = max((m for m in routes if m is not None), default=None)
    xids = (f"; GPU-stack Xids on the jobs of {len(stack['nodes'])} changed node(s) ({', '.join(stack['nodes'][:12])}): "
            f"{stack['jobs']} job(s) ({stack['xids']}) vs {stack['others']} on the other nodes, the change's nodes "
            f"holding {stack['share']:.1%} of the busy GPU- (or job-)minutes, binomial p={stack['p']:.1g}") if gpus_say else ""
    reasons = runs.loc[new & failed, "reason"].fillna("(none given)").value_counts().head(5)
    region = _region_of(nodes_hit or sorted(cohort), ctx.inventory)
    lost = float(ctx.leaves[(ctx.leaves["state"] == "failure_loss") & ctx.leaves["node_id"].isin(cohort)]["gpu_minutes"].sum()) if len(ctx.leaves) else 0.0
    onset = (runs.loc[new & failed, "end"].min() - ev.ts) / pd.Timedelta(minutes=1)
    change = f"{ev.kind} {_versions(ev)}"
    later = f" and {len(waves) - 1} later wave(s) ({', '.join(waves[1:])})" if len(waves) > 1 else ""
    before = f"{e} of {n_own} on the same nodes in the hour before" if n_own else "no run on them in the hour before"
    return Finding("deploy_regression", "software", "page", region, f"deploy_regression|{ev.event_id}",
                   nodes=sorted(cohort), cohort=change, change_event=ev.event_id,
                   lost_gpu_minutes=lost, action=_roll_back(ev), margin=margin,
                   summary=f"Job failures after {change} on {len(cohort)} node(s) in {region}: roll back {ev.event_id}",
                   evidence=f"{a} of {a + b} jobs {witness[0]} on the new version since {ev.ts:%H:%M} failed"
                            f"{witness[1]} ({rate_new:.0%}) vs {c} of {c + d} ({c / max(c + d, 1):.1%}) on other nodes in the same "
                            f"minutes ({g} of {g + h} since the hour before) and {before}, Fisher p={p:.1g}; failures on {len(nodes_hit)} of the change's "
                            f"{len(cohort)} nodes ({', '.join(nodes_hit[:12])}"
                            f"{', ...' if len(nodes_hit) > 12 else ''}); first failure {onset:.0f} min after the change "
                            f"{ev.event_id}{later}; top reasons: " + "; ".join(f"{k} ({v})" for k, v in reasons.items()) + xids)


def _framework_cohort(ctx: PartitionContext, ev, since, alpha: float | None = None) -> Finding | None:
    """A framework release's jobs' step times against the other jobs' in the same minutes since ``since``, at
    ``alpha`` (None: the rate of this look among those since its first job started, ``_first_adoption``)."""
    rt = ctx.runtime[(ctx.runtime["ts"] >= since) & (ctx.runtime["ts"] < ctx.end) & (ctx.runtime["steps"] > 0)]
    if rt.empty or ctx.meta is None or ctx.meta.empty or ctx.baselines is None or ctx.baselines.empty:
        return None
    rt = rt[["ts", "job_id", "step_time_s"]]  # what the cohorts are judged on (no column below shares a name)
    m = ctx.meta
    # the metadata rows of these jobs only, in their order (the inner merge gives the same rows)
    fast = ctx.prepared is not None and ctx.prepared.meta is m and rt["job_id"].notna().all()
    mine = m.iloc[ctx.prepared.meta_rows(rt["job_id"].unique())] if fast else m
    rows = rt.merge(mine[["job_id", "framework_version", "model_type"]], on="job_id", how="inner")
    # (the GPU rows of these jobs only: the inner merge drops every other job's anyway)
    on_job = ctx.gpu["job_id"].notna().to_numpy(dtype=bool)
    if ctx.prepared is not None:
        job_code, job_uni = _gpu_codes(ctx, "job_id")
        wanted = set(rows["job_id"].astype(object))
        on_job = on_job & np.append(np.array([j in wanted for j in job_uni], dtype=bool), False)[job_code]
    grp = ctx.gpu.loc[on_job, ["ts", "job_id", "sku", "region"]].groupby(["ts", "job_id"])
    place = grp[["sku", "region"]].first()  # per job and minute: its SKU, GPU count and region
    place.insert(1, "gpus", grp.size())
    place = place.reset_index()
    rows = rows.merge(place, on=["ts", "job_id"], how="inner")
    b = ctx.baselines
    if b is None or b.empty:
        return None
    b = b.astype({"model_type": object, "sku": object})[["model_type", "sku", "gpus", "step_time_s"]].rename(columns={"step_time_s": "base"})
    rows = rows.astype({"model_type": object, "sku": object}).merge(b, on=["model_type", "sku", "gpus"], how="inner")
    if rows.empty:
        return None
    rows["ratio"] = rows["step_time_s"] / rows["base"]
    new = rows[rows["framework_version"] == ev.to_version]
    old = rows[rows["framework_version"] != ev.to_version]
    if new["job_id"].nunique() < MIN_RELEASE_JOBS or old["job_id"].nunique() < MIN_RELEASE_JOBS:
        return None
    if alpha is None:  # (here, once there is a cohort to judge: the scheduler scan costs every look otherwise)
        alpha = _alpha(ctx, _first_adoption(ctx, ev))
    v = judge_cohorts(new, old, metric="ratio", time_col="ts", higher_is_worse=True, effect_floor=STEP_EFFECT_FLOOR,
                      alpha=alpha, start=since, min_samples=MIN_RELEASE_JOBS)
    if v.verdict != REGRESSION:
        return None
    region = new["region"].mode().iloc[0] if new["region"].nunique() == 1 else "*"
    slow = ctx.leaves.iloc[_leaf_rows(ctx, "slowdown_compute")] if len(ctx.leaves) else ctx.leaves
    lost = float(slow[(slow["framework_version"] == ev.to_version).to_numpy(dtype=bool, na_value=False)]["gpu_minutes"].sum())
    if fast:  # the release's teams, from the range's metadata once per version
        key = ("teams", ev.to_version)
        if key not in ctx.prepared.lookups:
            ctx.prepared.lookups[key] = sorted(m.loc[m["framework_version"] == ev.to_version, "team"].dropna().unique())
        teams = ctx.prepared.lookups[key]
    else:
        teams = sorted(m.loc[m["framework_version"] == ev.to_version, "team"].dropna().unique())
    return Finding("deploy_regression", "software", "page", region, f"deploy_regression|{ev.event_id}",
                   team=",".join(teams) if teams else None, cohort=f"framework {ev.to_version}", change_event=ev.event_id,
                   lost_gpu_minutes=lost, action=_roll_back(ev),
                   margin=margin_of((v.effect, STEP_EFFECT_FLOOR), p_values=((v.p_value, alpha),)),
                   summary=f"Step time regression on {ev.to_version} ({new['job_id'].nunique()} jobs)",
                   evidence=v.describe())


def _versions(ev) -> str:
    """"from -> to" of a change event; "to <version>" where the event does not say what it replaced."""
    return f"{ev.from_version} -> {ev.to_version}" if pd.notna(ev.from_version) else f"to {ev.to_version}"


def _roll_back(ev) -> str:
    """The first action of a regression a change caused: undo that change, named with its version pair."""
    return f"Roll back {ev.event_id} ({_versions(ev)}) on its cohort"


def _region_of(nodes, inventory: pd.DataFrame) -> str:
    regions = set(inventory.loc[inventory["node_id"].isin(nodes), "region"])
    return regions.pop() if len(regions) == 1 else "*"


RUNBOOKS = {
    CauseFamily.SOFTWARE.value:
        "Roll back the deploy named in the alert (driver / framework / kernel) for the affected cohort; "
        "collect NCCL_DEBUG=INFO logs and py-spy dumps of hung ranks. Runbook: docs/runbooks.md#software",
}
DETECTORS = [
    Detector(detect_deploys, emits=(("deploy_regression", CauseFamily.SOFTWARE.value),),
             needs=("changes", "inventory", "node", "sched", "leaves", "runtime", "meta", "baselines", "gpu")),
]
