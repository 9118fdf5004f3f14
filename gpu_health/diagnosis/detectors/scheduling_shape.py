"""Scheduling evidence of its cause, for the scheduling detector (scheduling.py): capacity in the wrong shape for the
requests that wait (:func:`_shape_blocked`, :func:`_fragmented`), and the tests of whose waits rose -- the jobs of
one queue (a scheduler change's demotion) or of one request size (:func:`_shape_shift`) against the rest
(:func:`_waits_above`, Fisher's exact test). No detector of its own: pure functions of the scheduler's arrays.
"""

from collections import namedtuple

import numpy as np
import pandas as pd

from gpu_health.constants import PARTITION
from gpu_health.diagnosis.context import _NAT
from gpu_health.metrics.goodput import BLOCKED_WAIT

DETECTORS: list = []  # (helpers of scheduling.py's detector: registered so the registry sees every module)
RUNBOOKS: dict = {}


# The demand a shape holds back counts from a request's SHAPE_HELD_MINUTES-th minute in a row shape-blocked (within
# the partition): pieces that cross a node's worth for a minute or two are the churn of jobs ending and starting
# (a piece freed a moment ago is being placed again), as a GPU idle that briefly is (AGED_IDLE_MINUTES, the same
# bar: many scheduling cycles); pieces that stay a node's worth that long beside the request are its shape.
SHAPE_HELD_MINUTES = int(BLOCKED_WAIT / pd.Timedelta(minutes=1))
_Shape = namedtuple("_Shape", ["stranded", "fragmented", "jobs", "sizes", "largest_block", "held"])


def _shape_blocked(aged: np.ndarray, gpus: np.ndarray, fm: np.ndarray, size: np.ndarray, fr: np.ndarray,
                   n_minutes: int) -> _Shape:
    """One queue's requests in the wrong shape, judged per request size (a queue's 1-GPU requests held by a quota
    must not hide its 8-GPU requests that no node can take).

    ``aged``: its jobs x minutes, waited over AGED_WAIT; ``gpus``: their requests; ``fm``, ``size``, ``fr``: per
    (node, minute) cell of the queue's nodes with free GPUs, its minute, the node's size and its free GPUs. A request
    is shape-blocked at a minute when no node has it free (a request larger than a node: not enough whole free nodes
    smaller than it) while those nodes hold a node's worth of free GPUs in pieces -- of the smallest of them that
    could host it (its own size when larger than any): a packing scheduler could have kept that node whole with the
    same GPUs busy, so the wait and the idle GPUs witness a node-sized block lost to placement; fewer pieces than any
    node holds are the residue any packing leaves (each node's last GPUs, fewer than the request, that smaller
    requests fill). The definition of fragmentation (a job's GPUs of one node sit on that node in Slurm and
    Kubernetes) and the node sizes of the cluster itself, not a level. Returns the cells stranded for the smallest
    shape-blocked request of their minute, their GPU-minutes capped by those requests, how many jobs were
    shape-blocked, their request sizes, the largest free block one node held while they waited, and the demand held
    back per minute (the GPUs of the shape-blocked requests: :func:`_fragmented`'s impact)."""
    known = size > 0  # a node outside the inventory (or of unknown size) hosts nothing
    free_all = np.bincount(fm, weights=fr * known, minlength=n_minutes)
    whole = (fr >= size) & known
    held = np.zeros(len(gpus), dtype=bool)
    smallest, demand, held_back, sizes = np.full(n_minutes, np.inf), np.zeros(n_minutes), np.zeros(n_minutes), set()
    for r in np.unique(gpus[aged.any(axis=1)]):
        if not r > 0:  # (a 0-GPU or unknown request holds no GPU)
            continue
        of_r = aged[gpus == r]
        one_node = np.bincount(fm, weights=(size >= r) & (fr >= r), minlength=n_minutes) > 0
        gang = np.bincount(fm, weights=fr * (whole & (size < r)), minlength=n_minutes) >= r
        block = max(r, float(size[known & (size >= r)].min()) if (known & (size >= r)).any() else 0.0)  # a node's worth
        hit = of_r & (~one_node & ~gang & (free_all >= block))[None, :]
        if not hit.any():
            continue
        held[gpus == r] |= hit.any(axis=1)
        demand += r * hit.sum(axis=0)
        held_back += r * _sustained(hit).sum(axis=0)
        smallest = np.where(hit.any(axis=0), np.minimum(smallest, r), smallest)
        sizes.add(int(r))
    when = np.isfinite(smallest[fm])
    stranded = when & known & (fr < np.minimum(smallest[fm], size))
    fragmented = np.minimum(np.bincount(fm, weights=fr * stranded, minlength=n_minutes), demand)
    largest = float(fr[when & known].max()) if (when & known).any() else 0.0
    return _Shape(stranded, fragmented, int(held.sum()), sizes, largest, held_back)


def _sustained(hit: np.ndarray) -> np.ndarray:
    """``hit`` (jobs x minutes) where it holds in this minute and the SHAPE_HELD_MINUTES - 1 before it."""
    out = hit.copy()
    for k in range(1, SHAPE_HELD_MINUTES):
        out[:, k:] &= hit[:, :-k]
        out[:, :k] = False
    return out


def _fragmented(r, jobs: int, bar: float) -> bool:
    """Capacity in the wrong shape is the pile-up's cause: ``jobs`` requests (the pile-up's bar) fit no node while
    their nodes' free GPUs summed would hold them (:func:`_shape_blocked`), and the demand they hold back is ``bar``
    of the region's paid GPU-minutes (the impact stands on the fragmentation itself, not beside it).

    The impact is the demand held back -- the GPU-minutes of the shape-blocked requests -- not the GPUs stranded:
    a scheduler that spreads small requests refills each piece as it frees, so the GPUs idle at any instant are
    only what is left between refills, while the capacity the multi-GPU requests needed goes on being diverted for
    as long as the fault lasts; the requests held back are what the cluster does not run (goodput lost to their
    owners, the same GPU-minutes a page's bar is a share of), and they are counted only while the region's pieces
    summed would hold them. The stranded GPUs remain the second witness (the telemetry), the waits the first."""
    return (r.shape_blocked_jobs >= jobs and r.paid_gpu_minutes > 0
            and max(r.held_gpu_minutes, r.fragmented_gpu_minutes) / r.paid_gpu_minutes >= bar)


# Fragmentation pages only when the shape outlasts a partition. A scheduler works a surge through within a few
# scheduling cycles (seconds to a minute each, in Slurm's backfill and Kubernetes' scheduling queue alike): requests
# held beside pieces for one partition are the surge being placed. Capacity still in the wrong shape a partition
# later -- many cycles that did not re-pack it -- is the placement policy's. The first shape-blocked partition is a
# ticket whose alert carries the shape (Finding.carry, alerts.carried); the next consecutive one may page.
_SHAPE_CARRY = "shape_blocked_jobs"
_NOT_YET_PERSISTED = ("; capacity in the wrong shape first seen this partition (a surge is placed within a few "
                      "scheduling cycles; a shape that outlasts a partition is the placement policy's): not paged yet")


def _shape_carry(r) -> dict:
    """What a shape-blocked partition carries to the next (:func:`_shape_persisted`)."""
    return {_SHAPE_CARRY: int(r.shape_blocked_jobs)}


def _shape_persisted(carried: dict | None) -> bool:
    """Whether the partition before raised the alert on capacity in the wrong shape (:func:`_fragmented`);
    ``carried``: its finding's carry (PartitionContext.carried of the alert's key; None: no finding then)."""
    return _SHAPE_CARRY in (carried or {})


def _shape_text(r) -> str:
    """The evidence of capacity in the wrong shape: the request sizes held and the largest free block one node had."""
    sizes = ", ".join(f"{s}-GPU" for s in r.shape_sizes)
    return (f"; capacity in the wrong shape: {r.shape_blocked_jobs} request(s) of {sizes} fit no node's free GPUs "
            f"(largest free block {r.largest_free_block:.0f} GPUs per node) while the free GPUs of their nodes summed "
            f"would hold them; {r.fragmented_gpu_minutes:.0f} GPU-minutes stranded on nodes holding fewer than they need, "
            f"{r.held_gpu_minutes:.0f} GPU-minutes of requests held back"
            + (f" ({r.held_gpu_minutes / r.paid_gpu_minutes:.1%} of paid)" if r.paid_gpu_minutes else ""))

# A scheduler change that demotes a class of jobs (a queue) shows in those jobs whatever the region's level was:
# the jobs of that queue that left the queue since the change waited longer than the same queue's jobs of the hour
# before (above their median), more often than the region's other queues' jobs against their own medians. Each
# queue is its own reference, so a pile-up that was already there (an evening's) does not hide it, and one that
# rises for every queue alike does not fake it. Under no effect, a job's chance of waiting above its queue's
# median is the same in every queue: Fisher's exact test bounds the chance of a split this lopsided at
# CHANGE_ALPHA (Bonferroni over the queues tested), the false-alarm rate per partition -- a definition of
# significance, not a level. A queue whose submissions rose significantly since the change (a demand surge, as
# an evening's start brings) waits longer for its own demand: not the change's doing.
CHANGE_ALPHA = 1e-3
# Jobs submitted together wait together: a job array, a sweep or a workflow's fan-out (one user's, into one queue,
# within the same minute) is placed by the scheduler as one, so its jobs are one observation, not many -- counted per
# job, one array held back reads as a whole queue held back, and Fisher's p claims far more than the evidence holds.
# The test of a demoted queue counts such a batch once (its queue and its submit minute -- the job table names no
# user: a script submits its jobs within seconds, a person no faster than about once a minute), so CHANGE_ALPHA is a
# rate over independent decisions, as the test assumes.
BATCH = pd.Timedelta(minutes=1).value
CHANGE_REFERENCE = pd.Timedelta(hours=1)  # the hour before the change: each queue's own reference
Demoted = namedtuple("Demoted", ["queue", "above", "jobs", "others_above", "others", "p"])


def _waits_above(j: dict, now: int, region: str, key: np.ndarray, since: int, ref_lo: int, after_only=False,
                 same_windows=False, per_batch=False) -> dict:
    """Per class of the region's jobs (``j``: the job arrays of scheduling._jobs_now at ``now``, the partition's end;
    ``key``: a label per job, None: not judged): how many
    of its jobs that left the queue since ``since`` (or still wait) waited longer after it than the median of its own
    jobs that left in [``ref_lo``, ``since``), of how many decided (a job still waiting below that median is not yet),
    and whether its arrivals rose significantly since ``since`` (binomial, CHANGE_ALPHA: a demand surge).
    ``same_windows`` (with ``after_only``): the reference jobs' waits are counted the same way, each from the start of
    the window as long as [``since``, ``now``) it left in, so both sides measure the same thing. ``per_batch``: the
    counts are of submission batches, not jobs (see BATCH)."""
    from scipy.stats import binomtest  # here: scipy.stats costs every process importing this module ~0.6 s

    mine = (j["region"] == region) & j["has_queue"] & (j["sub"] != _NAT) & (j["sub"] < now)
    started = mine & (j["left"] < now)
    wait = np.where(started, j["left"], now) - j["sub"]  # a job still waiting: its wait so far
    before = started & (j["left"] >= ref_lo) & (j["left"] < since)
    after = mine & ((j["left"] >= since) | ~started)
    # ``after_only`` (an event at ``since``): a backlog already there (an evening's) is not what followed it, a job
    # waiting then is judged on its wait after it (a demotion holds it too); the test waits for the effect's minutes
    wait_after = np.where(started, j["left"], now) - (np.maximum(j["sub"], since) if after_only else j["sub"])
    if same_windows:
        # a wait counted from ``since`` cannot exceed now - since: against the whole waits of the hour before, a
        # class that usually waits longer than that could never be above its median while a class that waits less
        # could, whatever happened -- so the reference is cut into windows of that length, each wait counted from
        # its window's start, the same measure on both sides
        # -- and a class that usually waits longer than that cannot show a rise within it at all (its waits are cut
        # at the window's length on both sides): it is not judged
        span = now - since
        whole = wait
        cut = since - span * -((np.where(before, j["left"], since) - since) // span)  # its window's start
        wait = np.where(before, j["left"] - np.maximum(j["sub"], cut), wait)
    out = {}
    for c in sorted({k for k in key[before] if k is not None}, key=str):
        of_c = np.array([k == c for k in key], dtype=bool)
        if same_windows and np.median(whole[before & of_c]) >= span:
            continue
        above = wait_after > np.median(wait[before & of_c])
        # (with ``same_windows`` only the jobs that left count, as in the reference windows: a standing backlog
        # still waiting would be above on one side only; ``not``, never ``~`` on the flag: ~True is the integer -2,
        # which made this mask an integer array, counted right but indexing positions when used as a mask)
        decided = after & of_c & (started | (above & (not same_windows)))
        # arrivals, not jobs: the jobs a queue takes in at one instant (a job array, a batch a workflow or a requeue
        # submits at once) are one decision, so a burst of them is not a rise of the queue's rate (the binomial
        # test assumes independent arrivals; counted per job, one array of 30 reads as a surge), to the second
        subs = np.unique(j["sub"][mine & of_c] // 10**9) * 10**9  # (ns to s: Slurm's SubmitTime grain)
        n_subs = int((subs >= ref_lo).sum())
        surge = n_subs > 0 and binomtest(int((subs >= since).sum()), n_subs, (now - since) / (now - ref_lo),
                                         alternative="greater").pvalue < CHANGE_ALPHA
        if per_batch:
            # one batch, one decision: it counts once, above when most of its decided jobs are (a batch split evenly
            # is not: under no effect that is the rarer verdict, so the test stays conservative)
            _, unit = np.unique(j["sub"][decided & of_c] // BATCH, return_inverse=True)
            votes = np.bincount(unit.reshape(-1), weights=above[decided & of_c] * 2.0 - 1.0)
            out[c] = (int((votes > 0).sum()), len(votes), surge)
            continue
        out[c] = (int((decided & above).sum()), int(decided.sum()), surge)
    return out


def _fisher_greater(a: int, n: int, ao: int, no: int) -> float:
    """One-sided Fisher p that a of n exceeds ao of no (1.0 when either side is empty)."""
    from scipy.stats import fisher_exact  # here: scipy.stats costs every process importing this module ~0.6 s

    return float(fisher_exact([[a, n - a], [ao, no - ao]], alternative="greater")[1]) if n and no else 1.0


# Capacity in the wrong shape holds back a queue's multi-GPU requests, not its single-GPU ones (a free GPU fits
# those). The test is a difference in differences anchored at the onset of the rise, as the change test is at its
# change: the multi-GPU jobs of a queue that left it since an onset (their waits counted from the onset) waited
# above the median of the same class's jobs of the SHAPE_REFERENCE before the onset (counted alike, from the start of
# windows as long: _waits_above's ``same_windows``) more often than the same queue's single-GPU jobs against theirs.
# Jobs from before the onset do not dilute it, so it stands minutes into the effect; a class that usually waits
# longer than the time since the onset cannot show a rise in it and is not judged there. Demand, quotas and priorities of a queue hold both sizes alike (an evening pile-up does), so it
# stands while the single-GPU requests are held too, and an evening does not fake it.
# No event names the onset: each partition boundary of the last SHAPE_ONSETS partitions is tried (the first
# partition where the multi-GPU waits rose is one of them; an older onset is judged from the oldest one tried).
# Its false-alarm budget is SHAPE_ALPHA per region per partition, spent over the onsets tried and the region's
# queues (Bonferroni), each region its own: with about 2,000 partitions a week, at most one false shape evidence per
# region in five weeks, before the pile-up and impact floors a page needs besides -- a rate, not a level.
SHAPE_ONSETS = 6
SHAPE_TEST = SHAPE_ONSETS * PARTITION  # the span of the onsets tried
SHAPE_REFERENCE = pd.Timedelta(hours=1)
SHAPE_ALPHA = 1e-4
ShapeShift = namedtuple("ShapeShift", Demoted._fields + ("onset",))


def _shape_shift(j: dict, end: pd.Timestamp, region: str) -> ShapeShift | None:
    """The queue whose multi-GPU requests wait longer since an onset while its single-GPU ones do not (see
    SHAPE_ALPHA), with the earliest onset that stands; ``j``: the job arrays of scheduling._jobs_now at ``end``."""
    key = np.empty(len(j["queue"]), dtype=object)  # (filled one by one: an array of tuples would be 2-D)
    key[:] = [(q, bool(g > 1)) if h and g == g and g > 0 else None for q, g, h in zip(j["queue"], j["gpus"], j["has_queue"])]
    onsets = [(end - k * PARTITION).value for k in range(SHAPE_ONSETS, 0, -1)]  # oldest first
    tests = []
    for since in onsets:
        counts = _waits_above(j, end.value, region, key, since, since - SHAPE_REFERENCE.value, after_only=True,
                              same_windows=True)
        tests.append((since, counts, {q for q, multi in counts if multi and (q, False) in counts}))
    alpha = SHAPE_ALPHA / max(sum(len(queues) for _, _, queues in tests), 1)
    # the queue's demand rose since any onset tried (an evening's start): a larger request waits longer to fit in a
    # fuller pool (a rise that began before a later onset is diluted in that onset's hour before: any onset tells)
    surged = {q for _, counts, _ in tests for (q, _multi), (_a, _n, surge) in counts.items() if surge}
    for since, counts, queues in tests:
        best = None
        for q in sorted(queues - surged):
            (a, n, _), (ao, no, _) = counts[(q, True)], counts[(q, False)]
            p = _fisher_greater(a, n, ao, no)
            if p < alpha and (best is None or p < best.p):
                best = ShapeShift(f"{q} (multi-GPU)", a, n, ao, no, p, pd.Timestamp(since, tz="UTC"))
        if best is not None:
            return best
    return None
