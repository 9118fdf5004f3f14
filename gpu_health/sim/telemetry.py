"""Per-minute rows of the seven sources for a window, from the job plan.

Everything is vectorized over (GPU x minute), (node x minute), (link x minute)
and (job x minute) grids. Every random value is keyed by its row's
coordinates, so a window's rows do not depend on which other windows were
generated (partition independence).

Each incident leaves the signature a real one leaves in these sources (never a
flag column): Xid / ECC codes and missing series for hardware faults, clocks,
temperatures and throttle bits for thermal events, failures with Xid or NCCL
reasons after a driver upgrade, slower steps on a framework version, loader
wait and saturated storage for I/O, packet loss and gradient-sync time for the
network, ~100 % utilization without progress for dummy load, steps stopping
for hangs, drained nodes in maintenance windows, and absent rows when a
collector goes silent.

The cluster's quirks (ClusterSpec knobs, off on the default profile) are benign and
leave what real clusters leave: tree models' busy SMs with an idle tensor pipe,
set-up minutes of low utilization before the first step, null fields on the nodes
whose collector does not export them (never zeros), old drivers, weak GPUs' SBE
bursts, leftover framebuffer on idle GPUs, lost GPU-minutes, a node's GPU rows
missing for minutes while the node reports ok, and a rolling change's drains.
"""

import numpy as np
import pandas as pd

from gpu_health.constants import CLOCKS_IDLE, THERMAL_BITS
from gpu_health.contracts import FIVE_MINUTE_SOURCES, columns, conform
from gpu_health.sim import hashing as H
from gpu_health.sim.cluster import SPILL_POOL
from gpu_health.sim.collector import collector_view, renames
from gpu_health.sim.jobs import MODEL_STEP, POOLS, PRIORITY, SCHEDULER, build_plan, from_s, to_s
from gpu_health.sim.scenario import Scenario

# field salts (distinct from the plan's)
(S_ACT, S_UTIL, S_SM, S_TEN, S_PWR, S_TMP, S_FB, S_SBE, S_CPU, S_MEM, S_DISK, S_NET, S_LOSS,
 S_RTX, S_LAT, S_LOSSV, S_PCAP) = range(101, 118)
# the messy profile's draws
S_WEAK, S_WEAKM, S_WEAKN, S_IDLEFB, S_IDLEFBV, S_ROWLOSS, S_GAP, S_GAPAT, S_GAPLEN, S_SETUP = range(140, 150)
# the gradient norm's own draws: a stream of their own, so every other column keeps its values
S_GNREP, S_GNLEVEL, S_GNNOISE, S_GNSPIKE, S_GNSPIKEV = range(180, 185)

LINKS = [f"mlx5_{i}" for i in range(8)]
POWER_CAP_BIT = 0x4


def _minutes(start: pd.Timestamp, end: pd.Timestamp) -> np.ndarray:
    return np.arange(to_s(start), to_s(end), 60, dtype=np.int64)


class Window:
    """Everything generated for ``[start, end)``; tables are built on first use."""

    def __init__(self, scen: Scenario, start: pd.Timestamp, end: pd.Timestamp):
        self.scen, self.start, self.end = scen, pd.Timestamp(start), pd.Timestamp(end)
        self.m_s = _minutes(self.start, self.end)
        lo, hi = int(self.m_s[0]) if len(self.m_s) else to_s(start), to_s(end)
        self.plan = build_plan(scen, lo, hi)
        self._tables: dict[str, pd.DataFrame] = {}
        self._delivered: dict[str, pd.DataFrame] = {}
        self._renames: pd.DataFrame | None = None
        self._grid = None

    # --- helpers -----------------------------------------------------------------
    def _incidents(self, *kinds):
        lo, hi = to_s(self.start), to_s(self.end)
        for n, inc in enumerate(self.scen.incidents):
            if inc.kind in kinds and to_s(inc.start) < hi and to_s(inc.end) > lo:
                yield n, inc

    def _node_mask(self, node_rows: np.ndarray, node_ids) -> np.ndarray:
        idx = [self.scen.cluster.node_index[n] for n in node_ids]
        return np.isin(node_rows, idx)

    def _job_at(self, lane: np.ndarray, t: np.ndarray) -> np.ndarray:
        """Index into the plan of the job holding ``lane`` at second ``t`` (-1 = none)."""
        plan = self.plan
        if plan.empty:
            return np.full(len(lane), -1)
        keys = plan["lane"].to_numpy(np.int64) * (1 << 34) + plan["start_s"].to_numpy(np.int64)
        order = np.argsort(keys, kind="stable")
        q = lane.astype(np.int64) * (1 << 34) + t
        pos = np.searchsorted(keys[order], q, side="right") - 1
        j = np.where(pos >= 0, order[np.clip(pos, 0, None)], -1)
        ok = (j >= 0) & (plan["lane"].to_numpy()[np.clip(j, 0, None)] == lane) & (plan["end_s"].to_numpy()[np.clip(j, 0, None)] > t)
        return np.where(ok, j, -1)

    def _slow_terms(self, lane_nodes_rows, multi_node: np.ndarray, region: np.ndarray, t: np.ndarray, incidents=None):
        """Per-row extra step time (relative) by component, from active incidents.

        ``incidents`` defaults to the speed incidents overlapping this window.
        """
        n = len(t)
        compute = np.zeros(n)
        io = np.zeros(n)
        net = np.zeros(n)
        if incidents is None:
            incidents = self._incidents("thermal_throttle", "io_bottleneck", "network_degradation")
        for _, inc in incidents:
            active = (t >= to_s(inc.start)) & (t < to_s(inc.end))
            if not active.any():
                continue
            on = np.zeros(n, bool)
            target = {self.scen.cluster.node_index[x] for x in inc.node_ids}
            for k, rows in enumerate(lane_nodes_rows):
                on |= np.isin(rows, list(target))
            hit = active & on
            if inc.kind == "thermal_throttle":
                compute += np.where(hit, inc.magnitude, 0)
            elif inc.kind == "io_bottleneck":
                io += np.where(hit, inc.magnitude, 0)
            else:
                net += np.where(hit & multi_node, inc.magnitude, 0)
        return compute, io, net

    # --- the GPU x minute grid ---------------------------------------------------------
    def grid(self):
        if self._grid is not None:
            return self._grid
        gpus = self.scen.cluster.gpus
        G, M = len(gpus), len(self.m_s)
        gi = np.repeat(np.arange(G), M)
        t = np.tile(self.m_s, G)
        lane = gpus["lane"].to_numpy()[gi]
        job = self._job_at(lane, t + 30)
        cluster = self.scen.cluster
        if len(self.plan) and (cluster.lanes["pool"].to_numpy()[self.plan["lane"].to_numpy()] == SPILL_POOL).any():
            # a GPU its lane leaves free may hold a single-GPU job spread onto it (its spill lane: spread.py)
            spill = cluster.spill_lane[gi]
            free = np.flatnonzero((job < 0) & (spill >= 0))
            small = self._job_at(spill[free], t[free] + 30)
            on = free[small >= 0]
            lane, job = lane.copy(), job.copy()
            lane[on], job[on] = spill[on], small[small >= 0]
        self._grid = {"gi": gi, "t": t, "lane": lane, "job": job}
        return self._grid

    def tables(self) -> dict[str, pd.DataFrame]:
        for name in FIVE_MINUTE_SOURCES:
            self.table(name)
        if self.scen.cluster.spec.serving:  # the serving layer only where the scenario turns it on
            self.table("inference_requests")
            self.table("inference_latency_buckets")
        if self.scen.cluster.spec.facility:  # the facility layer likewise
            self.table("facility_telemetry")
        if self.scen.cluster.spec.platform:  # the Kubernetes layer only where the scenario turns it on
            self.table("kube_pods")
            self.table("kube_nodes")
        return self._delivered

    def table(self, name: str) -> pd.DataFrame:
        """Table ``name`` as the cluster's collectors deliver it (scrape instants, renamed hosts: sim.collector)."""
        if name not in self._delivered:
            if self._renames is None:
                self._renames = renames(self.scen)
            self._delivered[name] = collector_view(self.scen, name, self.aligned(name), self._renames)
        return self._delivered[name]

    def aligned(self, name: str) -> pd.DataFrame:
        """Table ``name`` on the contract's grain (minute starts, each node under one name): what the
        simulator's own modules join with each other."""
        if name not in self._tables:
            frame = getattr(self, f"_{name}")()[columns(name)]
            if self.scen.incidents and name in ("gpu_telemetry", "job_runtime_metrics"):
                from gpu_health.sim.platform import apply_to_table  # the platform incidents' marks (cpu_fallback)
                frame = apply_to_table(self, name, frame)
            self._tables[name] = conform(frame, name)
        return self._tables[name]

    # --- the serving layer (off unless ClusterSpec.serving) ---------------------------------
    def _inference_requests(self) -> pd.DataFrame:
        from gpu_health.sim.serving import inference_requests
        return inference_requests(self.scen, self.m_s)

    def _inference_latency_buckets(self) -> pd.DataFrame:
        from gpu_health.sim.serving import inference_latency_buckets
        return inference_latency_buckets(self.scen, self.m_s)

    # --- the facility layer (off unless ClusterSpec.facility) -------------------------------
    def _facility_telemetry(self) -> pd.DataFrame:
        from gpu_health.sim.facility import facility_telemetry
        return facility_telemetry(self)
    # --- the platform layer (off unless ClusterSpec.platform) ---------------------------------
    def _kube_pods(self) -> pd.DataFrame:
        from gpu_health.sim.platform import kube_pods
        return kube_pods(self)

    def _kube_nodes(self) -> pd.DataFrame:
        from gpu_health.sim.platform import kube_nodes
        return kube_nodes(self)

    # --- gpu_telemetry -------------------------------------------------------------------
    # kept whole: one vectorized pass whose stages each rewrite the per-row arrays (util, load, temp, keep) the next reads
    def _gpu_telemetry(self) -> pd.DataFrame:
        scen, seed = self.scen, self.scen.seed
        gpus, nodes, plan = scen.cluster.gpus, scen.cluster.nodes, self.plan
        types = scen.cluster.spec.node_types
        g = self.grid()
        gi, t, job = g["gi"], g["t"], g["job"]
        n = len(t)
        ti = gpus["type_idx"].to_numpy()[gi]
        node_row = gpus["node_row"].to_numpy()[gi]
        tdp = np.array([x.tdp_w for x in types])[ti]
        idle_w = np.array([x.idle_w for x in types])[ti]
        maxclk = np.array([x.max_sm_clock_mhz for x in types])[ti]
        idleclk = np.array([x.idle_sm_clock_mhz for x in types])[ti]
        thrclk = np.array([x.throttled_sm_clock_mhz for x in types])[ti]
        fbtot = np.array([x.fb_total_mib for x in types])[ti]
        jj = np.clip(job, 0, None)
        has = job >= 0
        pool = np.where(has, plan["pool"].to_numpy()[jj], "none")
        dummy = has & plan["dummy"].to_numpy()[jj]
        stall_from = np.where(has, plan["stall_from_s"].to_numpy()[jj], -1)
        stalled = has & (stall_from >= 0) & (t >= stall_from)
        training = has & (pool != "interactive") & ~dummy & ~stalled
        interactive = has & (pool == "interactive")
        minute, draws = t // 60, {}

        def u(salt):  # a GPU-minute's draw for ``salt``: a pure function of it, so computed once per salt
            if salt not in draws:
                draws[salt] = H.uniform(seed, salt, gi, minute)
                draws[salt].flags.writeable = False  # shared by every use of the salt
            return draws[salt]
        # notebooks are active ~40 % of their minutes
        nb_active = interactive & (u(S_ACT) < 0.4)
        util = np.zeros(n)
        util = np.where(training, 88 + 11 * u(S_UTIL), util)
        util = np.where(nb_active, 25 + 60 * u(S_UTIL), util)
        util = np.where(interactive & ~nb_active, 2.0 * u(S_UTIL), util)
        util = np.where(dummy | stalled, 99 + u(S_UTIL), util)
        sm = np.where(training, 0.55 + 0.3 * u(S_SM), np.where(nb_active, util / 100 * 0.6, 0.0))
        sm = np.where(dummy, 0.08 + 0.04 * u(S_SM), np.where(stalled, 0.02 + 0.02 * u(S_SM), sm))
        ten = np.where(training, 0.2 + 0.35 * u(S_TEN), np.where(nb_active, util / 100 * 0.2, 0.0))
        ten = np.where(dummy | stalled, 0.0, ten)
        load = np.where(training, 0.72 + 0.18 * u(S_PWR), np.where(nb_active, 0.25 + 0.4 * util / 100, 0.0))
        load = np.where(dummy, 0.22 + 0.06 * u(S_PWR), np.where(stalled, 0.28 + 0.05 * u(S_PWR), load))
        spec = scen.cluster.spec
        # gradient-boosted trees: FP32 histogram kernels keep util high and SMs busy, the tensor pipe idle
        tree = training & plan["tree"].to_numpy(bool)[jj]
        if tree.any():
            util = np.where(tree, 70 + 28 * u(S_UTIL), util)
            sm = np.where(tree, 0.35 + 0.3 * u(S_SM), sm)
            ten = np.where(tree, 0.01 * u(S_TEN), ten)
            load = np.where(tree, 0.45 + 0.25 * u(S_PWR), load)
        # set-up before the first step (image pull, data staging, compilation): the GPU mostly waits, with
        # short bursts; memory fills as the model and first batches load
        setup = np.zeros(n, bool)
        if spec.setup_median_s > 0:
            setup = training & (t + 30 < plan["start_s"].to_numpy()[jj] + plan["setup_s"].to_numpy()[jj])
            burst = u(S_SETUP) < 0.25
            util = np.where(setup, np.where(burst, 20 + 40 * u(S_UTIL), 3 * u(S_UTIL)), util)
            sm = np.where(setup, util / 100 * 0.5, sm)
            ten = np.where(setup, 0.0, ten)
            load = np.where(setup, 0.05 + 0.25 * util / 100, load)
        # slowdowns: data-loader wait idles the GPU, thermal throttling lowers clocks and power
        lanes_df = scen.cluster.lanes
        lane_nodes = lanes_df["node_ids"].to_numpy()
        multi = lanes_df["multi_node"].to_numpy()[g["lane"]]
        node_rows_of_lane = [np.array([scen.cluster.node_index[x] for x in ns]) for ns in lane_nodes]
        max_nodes = max(len(x) for x in node_rows_of_lane)
        lane_node_mat = np.full((len(lane_nodes), max_nodes), -1)
        for i, rows in enumerate(node_rows_of_lane):
            lane_node_mat[i, :len(rows)] = rows
        lane_rows = [lane_node_mat[g["lane"], k] for k in range(max_nodes)]
        compute_x, io_x, net_x = self._slow_terms(lane_rows, multi, None, t)
        busy_share = 1.0 / (1.0 + io_x + net_x)
        util = np.where(training & ~setup, util * busy_share, util)
        load = np.where(training & ~setup, load * (0.35 + 0.65 * busy_share), load)
        clock = np.where(has & (util > 1), maxclk, idleclk)
        temp = 33 + 5 * u(S_TMP) + load * 42
        throttle = np.where(util < 1, CLOCKS_IDLE, 0)
        throttle = np.where(training & (u(S_PCAP) < 0.03), throttle | POWER_CAP_BIT, throttle)
        health_degraded = np.zeros(n, bool)
        for _, inc in self._incidents("thermal_throttle"):
            hit = self._node_mask(node_row, inc.node_ids) & (t >= to_s(inc.start)) & (t < to_s(inc.end))
            temp = np.where(hit, 85 + 5 * u(S_TMP), temp)
            clock = np.where(hit & has, thrclk + 40 * u(S_SM), clock)
            throttle = np.where(hit, (throttle & ~CLOCKS_IDLE) | THERMAL_BITS, throttle)
            load = np.where(hit & has, load * 0.8, load)
            health_degraded |= hit
        if spec.facility:  # the facility layer's incidents (rack cooling, power caps) and the racks' draw
            from gpu_health.sim.facility import gpu_effects
            temp, clock, throttle, load = gpu_effects(self, node_row, t, has, temp, clock, throttle, load, tdp, idle_w,
                                                      thrclk, u(S_TMP))
        power = idle_w + load * (tdp - idle_w)
        power = power * (0.98 + 0.04 * u(S_PWR + 50))
        fb = np.where(has & ~interactive, fbtot * (0.55 + 0.35 * u(S_FB)), np.where(interactive, fbtot * 0.3 * u(S_FB), 3 + 250 * u(S_FB)))
        fb = np.where(setup, fbtot * (0.1 + 0.4 * u(S_FB)), fb)
        if spec.idle_fb_leftover_share > 0:
            # an idle GPU still holding memory (a leaked context, a monitoring daemon): per GPU and day
            day = t // 86_400
            lo_fb, hi_fb = spec.idle_fb_leftover_mib
            left = ~has & (H.uniform(seed, S_IDLEFB, gi, day) < spec.idle_fb_leftover_share)
            fb = np.where(left, lo_fb + (hi_fb - lo_fb) * H.uniform(seed, S_IDLEFBV, gi, day), fb)
        sbe = (u(S_SBE) < 0.0005).astype(np.int64)
        weak = gpus["weak"].to_numpy()[gi] if "weak" in gpus else np.zeros(n, bool)
        if weak.any():
            # a weak GPU's benign correctable-error bursts: a few an hour-block a day, 5-60 SBEs in one minute
            hour = t // 3600
            at = (H.uniform(seed, S_WEAKM, gi, hour) * 60).astype(np.int64)
            burst = weak & (H.uniform(seed, S_WEAK, gi, hour) < spec.weak_gpu_bursts_per_day / 24) & ((t // 60) % 60 == at)
            sbe = np.where(burst, sbe + 5 + (55 * H.uniform(seed, S_WEAKN, gi, hour)).astype(np.int64), sbe)
        dbe = np.zeros(n, dtype=np.int64)
        xid = np.zeros(n, dtype=np.int64)
        # a failing job leaves its Xid on the lane's first GPU in its last minute
        end_s = plan["end_s"].to_numpy()[jj]
        xid_end = plan["xid_on_end"].to_numpy()[jj]
        first_gpu = gpus.groupby("lane")["gpu_row"].min().reindex(np.arange(len(lanes_df))).to_numpy().copy()
        spill = scen.cluster.spill_lane
        first_gpu[spill[spill >= 0]] = np.flatnonzero(spill >= 0)  # a spill lane's one GPU
        last_min = has & (end_s >= t) & (end_s < t + 90) & (xid_end > 0) & (gi == first_gpu[g["lane"]])
        xid = np.where(last_min, xid_end, xid)
        xid = self._driver_fault_xids(xid)
        keep = np.ones(n, bool)
        uuid_row = {u_: i for i, u_ in enumerate(gpus["gpu_uuid"])}
        for _, inc in self._incidents("gpu_ecc_fault", "gpu_fell_off_bus"):
            rows = np.array([uuid_row[x] for x in inc.gpu_uuids])
            s, e = to_s(inc.start) // 60 * 60, to_s(inc.end)
            on_gpu = np.isin(gi, rows)
            onset = on_gpu & (t == s)
            after = on_gpu & (t > s) & (t < e)
            if inc.kind == "gpu_ecc_fault":
                xid = np.where(onset, 48, xid)
                dbe = np.where(onset, max(1, int(inc.magnitude)), dbe)
                sbe = np.where(onset, sbe + 3, sbe)
                util = np.where(after, 0.0, util)
                # the faulted GPU idles until repaired
            else:
                xid = np.where(onset, 79, xid)
                keep &= ~after
            health_degraded |= self._node_mask(node_row, inc.node_ids) & (t >= s) & (t < e)
        for _, inc in self._incidents("collector_outage"):
            region = gpus["region"].to_numpy()[gi]
            hit = (t >= to_s(inc.start)) & (t < to_s(inc.end))
            if inc.region:
                hit &= region == inc.region
            keep &= ~hit
        # exporters lose rows: single GPU-minutes at random, and now and then a node's GPU rows for a few
        # minutes (an exporter restart) while the node itself reports ok and raises no Xid
        if spec.row_loss_rate > 0:
            keep &= H.uniform(seed, S_ROWLOSS, gi, t // 60) >= spec.row_loss_rate
        if spec.node_gaps_per_day > 0:
            hour = t // 3600
            g_lo, g_hi = spec.node_gap_minutes
            length = g_lo + (H.uniform(seed, S_GAPLEN, node_row, hour) * (g_hi - g_lo + 1)).astype(np.int64)
            at = (H.uniform(seed, S_GAPAT, node_row, hour) * (60 - g_hi)).astype(np.int64)
            minute = (t // 60) % 60
            gap = (H.uniform(seed, S_GAP, node_row, hour) < spec.node_gaps_per_day / 24) & (minute >= at) & (minute < at + length)
            keep &= ~gap
        # a rolling driver upgrade: while a batch's driver installs its GPUs are unavailable (no rows, no Xid)
        for ch in self._draining():
            s_, e_ = to_s(ch.ts), to_s(ch.ts) + ch.drain_s
            keep &= ~(self._node_mask(node_row, ch.node_ids) & (t >= s_ + 60) & (t < e_ - 60))
        self._gpu_health_degraded = (node_row, t, health_degraded)
        job_ids = np.where(has, plan["job_id"].to_numpy()[jj], None)
        prof = scen.cluster.spec.profiling_fields
        ecc = scen.cluster.spec.ecc_fields
        nq = scen.cluster.nodes
        has_q = "prof_sm" in nq
        node_has = (lambda col: nq[col].to_numpy()[node_row]) if has_q else (lambda col: np.ones(n, bool))  # noqa: E731
        sm_ok, ten_ok, ecc_ok = node_has("prof_sm"), node_has("prof_tensor"), node_has("ecc")
        thr_ok, pt_ok = node_has("throttle"), node_has("power_temp")
        df = pd.DataFrame({
            "ts": from_s(t),
            "region": gpus["region"].to_numpy()[gi],
            "node_id": gpus["node_id"].to_numpy()[gi],
            "gpu_index": gpus["gpu_index"].to_numpy()[gi],
            "gpu_uuid": gpus["gpu_uuid"].to_numpy()[gi],
            "sku": gpus["sku"].to_numpy()[gi],
            "job_id": job_ids,
            "gpu_util_pct": np.round(np.clip(util, 0, 100), 1),
            "sm_active": np.where(sm_ok, np.round(sm, 3), np.nan) if prof else np.nan,
            "tensor_active": np.where(ten_ok, np.round(ten, 3), np.nan) if prof else np.nan,
            "fb_used_mib": np.round(fb, 0),
            "power_w": np.where(pt_ok, np.round(power, 1), np.nan),
            "temp_c": np.where(pt_ok, np.round(temp, 0), np.nan),
            "sm_clock_mhz": np.round(clock, 0),
            "throttle_reasons": _nullable_int(throttle, thr_ok),
            "ecc_sbe_delta": _nullable_int(sbe, ecc_ok) if ecc else pd.array([pd.NA] * n, dtype="Int64"),
            "ecc_dbe_delta": _nullable_int(dbe, ecc_ok) if ecc else pd.array([pd.NA] * n, dtype="Int64"),
            "xid": xid,
        })
        return df[keep].reset_index(drop=True)

    def _driver_fault_xids(self, xid: np.ndarray) -> np.ndarray:
        """A run the driver killed (a rollout's failures) leaves its Xid on every GPU of the job in the minute it
        fails and the next: the exporter reports the driver's last Xid until it is read again."""
        plan = self.plan
        if not plan["xid_all"].any() or not len(self.m_s):
            return xid
        hit = plan[plan["xid_all"].to_numpy(bool) & (plan["end_s"] >= self.m_s[0] - 120) & (plan["end_s"] < self.m_s[-1] + 60)]
        gpus = self.scen.cluster.gpus[["lane", "gpu_row"]]
        rows = hit[["lane", "end_s", "xid_on_end"]].merge(gpus, on="lane")
        M = len(self.m_s)
        xid = xid.copy()
        for later in (0, 60):
            minute = (rows["end_s"].to_numpy() // 60 * 60 + later - self.m_s[0]) // 60
            ok = (minute >= 0) & (minute < M)
            xid[rows["gpu_row"].to_numpy()[ok] * M + minute[ok]] = rows["xid_on_end"].to_numpy()[ok]
        return xid

    def _draining(self):
        """Changes whose drain (the nodes' GPUs unavailable while they install) overlaps this window."""
        lo, hi = to_s(self.start), to_s(self.end)
        return [c for c in self.scen.changes if c.drain_s and to_s(c.ts) < hi and to_s(c.ts) + c.drain_s > lo]

    # --- node_telemetry --------------------------------------------------------------------
    def _node_telemetry(self) -> pd.DataFrame:
        scen, seed = self.scen, self.scen.seed
        nodes = scen.cluster.nodes
        gpu = self.aligned("gpu_telemetry")
        N, M = len(nodes), len(self.m_s)
        ni = np.repeat(np.arange(N), M)
        t = np.tile(self.m_s, N)
        key = ni * M + (t - self.m_s[0]) // 60 if M else ni
        g = self.grid()
        gpus = scen.cluster.gpus
        nrow = gpus["node_row"].to_numpy()[g["gi"]]
        gkey = nrow * M + (g["t"] - self.m_s[0]) // 60
        alloc = np.bincount(gkey, weights=(g["job"] >= 0).astype(float), minlength=N * M) / np.bincount(gkey, minlength=N * M).clip(1)
        util_sum = np.bincount(gkey[: len(gkey)], minlength=N * M)  # GPUs per node-minute
        u = lambda salt: H.uniform(seed, salt, ni, t // 60)  # noqa: E731
        cpu = 6 + 55 * alloc + 6 * u(S_CPU)
        mem = 18 + 45 * alloc + 5 * u(S_MEM)
        read = 40 * alloc * nodes["gpus"].to_numpy()[ni] * (0.7 + 0.6 * u(S_DISK))
        write = 0.15 * read + 5 * u(S_DISK + 50)
        nvme = np.clip(read / 30.0, 0, 85)
        health = np.full(N * M, "ok", dtype=object)
        driver = np.full(N * M, scen.cluster.spec.driver_version, dtype=object)
        if "old_driver" in nodes:
            driver = np.where(nodes["old_driver"].to_numpy()[ni], scen.cluster.spec.old_driver_version, driver)
        kernel = np.full(N * M, scen.cluster.spec.kernel_version, dtype=object)
        keep = np.ones(N * M, bool)
        for _, inc in self._incidents("io_bottleneck"):
            if inc.scope.get("storage") == "remote":
                continue  # a shared filesystem or object store: the nodes' own disks stay quiet
            hit = self._node_mask(ni, inc.node_ids) & (t >= to_s(inc.start)) & (t < to_s(inc.end))
            read = np.where(hit & (alloc > 0), 1750 + 80 * u(S_DISK), read)
            nvme = np.where(hit & (alloc > 0), 97 + 3 * u(S_DISK + 60), nvme)
            cpu = np.where(hit, np.minimum(cpu + 20, 100), cpu)
        node_row, gt, degraded = getattr(self, "_gpu_health_degraded", (None, None, None))
        if degraded is not None and degraded.any():
            dk = node_row[degraded] * M + (gt[degraded] - self.m_s[0]) // 60
            health[np.unique(dk)] = "degraded"
        for _, inc in self._incidents("gpu_ecc_fault"):
            hit = self._node_mask(ni, inc.node_ids) & (t > to_s(inc.start)) & (t < to_s(inc.end))
            health = np.where(hit, "drained", health)
        for _, inc in self._incidents("maintenance"):
            hit = self._node_mask(ni, inc.node_ids) & (t >= to_s(inc.start)) & (t < to_s(inc.end))
            health = np.where(hit, "drained", health)
        for _, inc in self._incidents("collector_outage"):
            hit = (t >= to_s(inc.start)) & (t < to_s(inc.end))
            if inc.region:
                hit &= nodes["region"].to_numpy()[ni] == inc.region
            keep &= ~hit
        for ch in self._draining():
            hit = self._node_mask(ni, ch.node_ids) & (t >= to_s(ch.ts)) & (t < to_s(ch.ts) + ch.drain_s)
            health = np.where(hit, "drained", health)
        for ch in self.scen.changes:
            if ch.kind in ("driver_upgrade", "kernel_upgrade") and ch.to_version and to_s(ch.ts) < to_s(self.end):
                # a drained install reports the new version once its GPUs are back
                hit = self._node_mask(ni, ch.node_ids) & (t >= to_s(ch.ts) + max(ch.drain_s - 60, 0))
                if ch.kind == "driver_upgrade":
                    driver = np.where(hit, ch.to_version, driver)
                else:
                    kernel = np.where(hit, ch.to_version, kernel)
        df = pd.DataFrame({
            "ts": from_s(t), "region": nodes["region"].to_numpy()[ni], "node_id": nodes["node_id"].to_numpy()[ni],
            "sku": nodes["sku"].to_numpy()[ni],
            "cpu_util_pct": np.round(np.clip(cpu, 0, 100), 1), "mem_used_pct": np.round(np.clip(mem, 0, 100), 1),
            "disk_read_mbps": np.round(read, 1), "disk_write_mbps": np.round(write, 1),
            "nvme_util_pct": np.round(np.clip(nvme, 0, 100), 1),
            "driver_version": driver, "kernel_version": kernel, "health": health,
        })
        del util_sum, key, gpu
        return df[keep].reset_index(drop=True)

    # --- network_telemetry -------------------------------------------------------------------
    def _network_telemetry(self) -> pd.DataFrame:
        scen, seed = self.scen, self.scen.seed
        nodes = scen.cluster.nodes
        N, M, Lk = len(nodes), len(self.m_s), len(LINKS)
        ni = np.repeat(np.arange(N), M * Lk)
        t = np.tile(np.repeat(self.m_s, Lk), N)
        li = np.tile(np.arange(Lk), N * M)
        # multi-node jobs drive the fabric
        g = self.grid()
        gpus = scen.cluster.gpus
        multi = scen.cluster.lanes["multi_node"].to_numpy()[g["lane"]] & (g["job"] >= 0)
        nrow = gpus["node_row"].to_numpy()[g["gi"]]
        gkey = nrow * M + (g["t"] - self.m_s[0]) // 60
        busy = np.bincount(gkey, weights=multi.astype(float), minlength=N * M) > 0
        busy = np.repeat(busy, Lk)
        u = lambda salt: H.uniform(seed, salt, ni, li, t // 60)  # noqa: E731
        rx = np.where(busy, 45 + 70 * u(S_NET), 0.3 + 2 * u(S_NET))
        tx = rx * (0.95 + 0.1 * u(S_NET + 50))
        loss = 0.00002 * u(S_LOSS)
        rtx = np.floor(-np.log(u(S_RTX)) * 0.3).astype(np.int64)
        lat = 2.0 + 1.5 * u(S_LAT)
        up = np.ones(len(t), bool)
        keep = np.ones(len(t), bool)
        for _, inc in self._incidents("network_degradation"):
            hit = self._node_mask(ni, inc.node_ids) & (t >= to_s(inc.start)) & (t < to_s(inc.end))
            sev = inc.magnitude / 0.4
            loss = np.where(hit, (0.4 + 1.6 * u(S_LOSSV)) * sev, loss)
            rtx = np.where(hit, (300 + 1500 * u(S_RTX + 50) * sev).astype(np.int64), rtx)
            lat = np.where(hit, 15 + 40 * u(S_LAT + 50) * sev, lat)
            rx = np.where(hit, rx * 0.7, rx)
        for _, inc in self._incidents("collector_outage"):
            hit = (t >= to_s(inc.start)) & (t < to_s(inc.end))
            if inc.region:
                hit &= nodes["region"].to_numpy()[ni] == inc.region
            keep &= ~hit
        df = pd.DataFrame({
            "ts": from_s(t), "region": nodes["region"].to_numpy()[ni], "node_id": nodes["node_id"].to_numpy()[ni],
            "link_id": np.array(LINKS, dtype=object)[li],
            "rx_gbps": np.round(rx, 2), "tx_gbps": np.round(tx, 2), "packet_loss_pct": np.round(np.clip(loss, 0, 100), 5),
            "retransmits": rtx, "latency_us": np.round(lat, 2), "link_up": up,
        })
        return df[keep].reset_index(drop=True)

    # --- job_runtime_metrics ----------------------------------------------------------------
    def _job_runtime_metrics(self) -> pd.DataFrame:
        scen, seed, plan = self.scen, self.scen.seed, self.plan
        if plan.empty or not len(self.m_s):
            return _empty("job_runtime_metrics")
        lo, hi = int(self.m_s[0]), int(self.m_s[-1]) + 60
        rep = plan[plan["reports_metrics"] & ~plan["dummy"] & (plan["start_s"] < hi) & (plan["end_s"] > lo)]
        if rep.empty:
            return _empty("job_runtime_metrics")
        # one row per (job, minute) in which the job reports at the minute's middle: from its first step, after
        # its set-up, to its end (st <= t + 30 < en), found per job in the window's sorted minutes
        jobs = rep.index.to_numpy()
        st_j = plan["start_s"].to_numpy()[jobs] + plan["setup_s"].to_numpy()[jobs]
        en_j = plan["end_s"].to_numpy()[jobs]
        first = np.searchsorted(self.m_s, st_j - 30, side="left")
        count = np.clip(np.searchsorted(self.m_s, en_j - 30, side="left") - first, 0, None)
        ji, st, en = np.repeat(jobs, count), np.repeat(st_j, count), np.repeat(en_j, count)
        nth = np.arange(int(count.sum())) - np.repeat(np.cumsum(count) - count, count)  # each row's place in its job
        t = self.m_s[np.repeat(first, count) + nth]
        if not len(ji):
            return _empty("job_runtime_metrics")
        types = scen.cluster.spec.node_types
        model = plan["model_type"].to_numpy()[ji]
        base, loader_share, spg = (np.array([MODEL_STEP[m][k] for m in model]) for k in range(3))
        speed = np.array([x.speed for x in types])[plan["type_idx"].to_numpy()[ji]]
        multi = plan["multi_node"].to_numpy()[ji]
        gpus_n = plan["gpus"].to_numpy()[ji]
        sync_share = np.where(multi, 0.15, np.where(gpus_n > 1, 0.05, 0.0))
        step = base / speed * plan["speed_jitter"].to_numpy()[ji] * (1 + sync_share)
        fw = plan["slow_framework"].to_numpy()[ji]
        lane = plan["lane"].to_numpy()[ji]
        lanes_df = scen.cluster.lanes
        lane_nodes = lanes_df["node_ids"].to_numpy()
        node_index = scen.cluster.node_index
        width = max(len(x) for x in lane_nodes)
        mat = np.full((len(lane_nodes), width), -1)
        for i, ns in enumerate(lane_nodes):
            mat[i, :len(ns)] = [node_index[x] for x in ns]
        lane_rows = [mat[lane, k] for k in range(width)]

        def extra_at(tt):
            c, i_, n_ = self._slow_terms(lane_rows, multi, None, tt)
            return c + fw, i_, n_

        pool = plan["pool"].to_numpy()[ji]
        ck_every = np.array([POOLS[p].checkpoint_every_s for p in pool])
        ck_s = np.array([POOLS[p].checkpoint_s for p in pool])
        stall_from = plan["stall_from_s"].to_numpy()[ji]
        # a hung job writes no checkpoint: none after its hang starts
        ck_until = np.where(stall_from >= 0, np.maximum(stall_from, st), en)

        def cum_steps(tau):
            """Steps completed by second ``tau`` (closed form over the incident intervals)."""
            tau = np.minimum(np.maximum(tau, st), en)
            eff = (tau - st).astype(float)
            for n_inc, inc in self._incidents_all("thermal_throttle", "io_bottleneck", "network_degradation"):
                s_, e_ = to_s(inc.start), to_s(inc.end)
                ov = np.clip(np.minimum(tau, e_) - np.maximum(st, s_), 0, None)
                mid = np.full(len(tau), (s_ + e_) // 2)
                # this incident's own slowdown, whether or not it overlaps the window being generated
                c, i_, n_ = self._slow_terms(lane_rows, multi, None, mid, incidents=[(n_inc, inc)])
                f = 1 + c + i_ + n_
                eff -= ov * (1 - 1 / f)
            eff = eff / (1 + fw)
            stalled = stall_from >= 0
            eff -= np.where(stalled, np.clip(tau - np.maximum(stall_from, st), 0, None), 0)
            n_ck = np.where(ck_every > 0, (np.minimum(tau, ck_until) - st) // np.maximum(ck_every, 1), 0)
            eff -= n_ck * ck_s
            return np.floor(np.clip(eff, 0, None) / step).astype(np.int64)

        c_now, c_next = cum_steps(t), cum_steps(t + 60)
        steps = np.clip(c_next - c_now, 0, None)
        comp_x, io_x, net_x = extra_at(t + 30)
        stalled_now = (stall_from >= 0) & (t + 30 >= stall_from)
        steps = np.where(stalled_now, 0, steps)
        st_time = step * (1 + comp_x + io_x + net_x)
        loader = step * loader_share + step * io_x
        sync = step * sync_share / (1 + sync_share) + step * net_x
        has_steps = steps > 0
        ck_in_minute = (ck_every > 0) & (((t + 60 - st) // np.maximum(ck_every, 1)) > ((t - st) // np.maximum(ck_every, 1))) & (t + 60 > st)
        ck_in_minute &= ~stalled_now
        n_ck_end = np.where(ck_every > 0, (np.minimum(np.minimum(t + 60, en), ck_until) - st) // np.maximum(ck_every, 1), 0)
        last_ck = np.where(n_ck_end > 0, cum_steps(st + n_ck_end * ck_every), -1)
        u = H.uniform(seed, 301, lane, t // 60)
        loss = 2.2 * (1 + c_next / 400.0) ** -0.35 + 0.02 * u
        # frameworks that report steps but not their components (HF Trainer's log: loss and s/it only)
        parts = np.asarray(plan["components"].to_numpy()[ji], dtype=bool) if "components" in plan else np.ones(len(ji), bool)
        df = pd.DataFrame({
            "ts": from_s(t), "job_id": plan["job_id"].to_numpy()[ji],
            "steps": steps, "samples": steps * spg * gpus_n, "last_step": c_next,
            "step_time_s": np.where(has_steps, np.round(st_time, 5), np.nan),
            "data_loader_time_s": np.where(has_steps & parts, np.round(loader, 5), np.nan),
            "grad_sync_time_s": np.where(has_steps & parts, np.round(sync, 5), np.nan),
            "checkpoint_time_s": np.where(ck_in_minute, ck_s, 0.0),
            "loss": np.round(loss, 4),
            "last_checkpoint_step": pd.array(np.where(last_ck >= 0, last_ck, 0), dtype="Int64"),
        })
        df.loc[last_ck < 0, "last_checkpoint_step"] = pd.NA
        df["grad_norm"] = self._grad_norm(ji, t, c_next, has_steps)
        return df

    def _grad_norm(self, ji: np.ndarray, t: np.ndarray, c_next: np.ndarray, has_steps: np.ndarray) -> np.ndarray:
        """The gradient norm of each (job, minute) row (NaN = not reported), from its own draws.

        Reported by a ``grad_norm_share`` of the instrumented jobs (keyed by the job alone: a job logs it in every
        minute with a step, or never), the others null. A job's norm starts at its own level (lognormal around 1:
        norms span orders of magnitude between models) and decays slowly as training proceeds (the loss's schedule,
        a gentler power: -0.25), with multiplicative minute-to-minute scatter (15 %: a minibatch gradient's norm
        moves with the batch) and now and then a spike (a hard batch: 0.5 % of minutes, 1.5-4x), as real logs show.
        A minute without a step reports no norm."""
        spec, seed, plan = self.scen.cluster.spec, self.scen.seed, self.plan
        lane, epoch, k = (plan[c].to_numpy()[ji] for c in ("lane", "epoch", "k"))
        reports = H.uniform(seed, S_GNREP, lane, epoch, k) < spec.grad_norm_share
        minute = t // 60
        level = H.lognormal(seed, 1.0, 0.8, S_GNLEVEL, lane, epoch, k)
        noise = np.exp(0.15 * H.normal(seed, S_GNNOISE, lane, epoch, k, minute))
        spike = np.where(H.uniform(seed, S_GNSPIKE, lane, epoch, k, minute) < 0.005,
                         1.5 + 2.5 * H.uniform(seed, S_GNSPIKEV, lane, epoch, k, minute), 1.0)
        g = level * (1 + c_next / 400.0) ** -0.25 * noise * spike
        return np.where(reports & has_steps, np.round(g, 5), np.nan)

    def _incidents_all(self, *kinds):
        for n, inc in enumerate(self.scen.incidents):
            if inc.kind in kinds:
                yield n, inc

    # --- scheduler_events / job_metadata / change_events ------------------------------------
    def _scheduler_events(self) -> pd.DataFrame:
        plan = self.plan
        lo, hi = to_s(self.start), to_s(self.end)
        lanes_df = self.scen.cluster.lanes
        node_text = np.array([",".join(ns) for ns in lanes_df["node_ids"]], dtype=object)
        parts = []
        for event, col in (("submitted", "submit_s"), ("started", "start_s"), ("ended", "end_s"), ("requeued", "end_s")):
            sel = plan[(plan[col] >= lo) & (plan[col] < hi)]
            # a job is submitted once (its later runs start from the requeue); a requeued run ends in
            # ``requeued``, with no exit state, and each later run's events carry the run's number
            if event == "submitted":
                sel = sel[sel["attempt"] == 0]
            elif event in ("ended", "requeued"):
                sel = sel[sel["requeued"] == (event == "requeued")]
            if sel.empty:
                continue
            run = ("#" + sel["attempt"].astype(str)).where(sel["attempt"] > 0, "")
            pool = sel["pool"].to_numpy()
            sla = sel["sla_deadline_s"].to_numpy() >= 0
            parts.append(pd.DataFrame({
                "event_id": sel["job_id"] + f":{event}" + run,
                "ts": from_s(sel[col].to_numpy()),
                "job_id": sel["job_id"].to_numpy(),
                "event": event,
                "scheduler": [SCHEDULER[p] for p in pool],
                # each region runs its own scheduler: its queues carry the region's name
                "queue": sel["queue"].to_numpy(),
                "priority": np.array([PRIORITY[p] for p in pool]) + np.where(sla, 40, 0) + sel["priority_adj"].to_numpy(),
                "gpus": sel["gpus"].to_numpy(),
                "node_ids": node_text[sel["lane"].to_numpy()] if event != "submitted" else None,
                "exit_state": sel["exit_state"].to_numpy() if event == "ended" else None,
                "reason": sel["reason"].to_numpy() if event in ("ended", "requeued") else None,
            }))
        if not parts:
            return _empty("scheduler_events")
        return pd.concat(parts, ignore_index=True).sort_values(["ts", "event_id"]).reset_index(drop=True)

    def _job_metadata(self) -> pd.DataFrame:
        plan = self.plan
        lo, hi = to_s(self.start), to_s(self.end)
        sel = plan[(plan["submit_s"] >= lo) & (plan["submit_s"] < hi)]
        sel = sel[sel["attempt"] == 0]  # one row per job, however often it ran
        if sel.empty:
            return _empty("job_metadata")
        sla = sel["sla_deadline_s"].to_numpy()
        return pd.DataFrame({
            "job_id": sel["job_id"].to_numpy(),
            "submitted_at": from_s(sel["submit_s"].to_numpy()),
            "team": sel["team"].to_numpy(),
            "model_type": sel["model_type"].to_numpy(),
            "workload_class": sel["pool"].to_numpy(),
            "dataset": (sel["model_type"] + "-features-v3").to_numpy(),
            "requested_gpus": sel["gpus"].to_numpy(),
            "requested_mem_gb": sel["gpus"].to_numpy() * 64.0,
            "container_image": ("registry.internal/" + sel["team"] + "/" + sel["model_type"] + ":" + sel["framework_version"]).to_numpy(),
            "framework_version": sel["framework_version"].to_numpy(),
            "sla_deadline": _ts_or_nat(sla),
        }).sort_values(["submitted_at", "job_id"]).reset_index(drop=True)

    def _change_events(self) -> pd.DataFrame:
        rows = [c for c in self.scen.changes if self.start <= c.ts < self.end]
        if not rows:
            return _empty("change_events")
        return pd.DataFrame([{
            "event_id": c.event_id, "ts": c.ts, "kind": c.kind, "scope": c.scope,
            "from_version": c.from_version, "to_version": c.to_version, "description": c.description,
            "actor": c.actor, "ticket": c.ticket,
        } for c in rows])


def _nullable_int(values: np.ndarray, present: np.ndarray) -> pd.arrays.IntegerArray:
    """An Int64 column, null where the collector does not export the field."""
    return pd.arrays.IntegerArray(np.asarray(values, dtype=np.int64), ~np.asarray(present, dtype=bool))


def _ts_or_nat(sec: np.ndarray) -> pd.Series:
    out = pd.Series(from_s(np.maximum(sec, 0)))
    out[sec < 0] = pd.NaT
    return out.array


def _empty(table: str) -> pd.DataFrame:
    from gpu_health.contracts import empty_frame
    return empty_frame(table)


def cost_capacity(scen: Scenario, day: pd.Timestamp) -> pd.DataFrame:
    """Finance's daily table: installed and reserved GPUs, blended prices, burst bought."""
    inv = scen.cluster.inventory()
    day = pd.Timestamp(day).tz_convert("UTC").normalize()
    price = {"NVIDIA H100 80GB HBM3": (2.45, 4.10), "Tesla V100-SXM3-32GB": (0.85, 1.70),
             # the public traces carry no prices: the A100 80GB is placed between the V100 and H100 rates
             "NVIDIA A100-SXM4-80GB": (1.35, 2.60)}
    dow = day.dayofweek
    rows = []
    for region, sku, cap in inv.itertuples(index=False):
        res, od = price.get(sku, (1.5, 3.0))
        burst = cap * (4.0 if dow in (0, 3) else 0.5) * (1 + 0.1 * H.uniform(scen.seed, 401, dow, cap)[()])
        rows.append({"date": day.date(), "region": region, "sku": sku, "capacity_gpus": int(cap),
                     "reserved_gpus": int(round(cap * 0.85)), "reserved_gpu_hour_usd": res,
                     "on_demand_gpu_hour_usd": od, "on_demand_gpu_hours": round(float(burst), 1)})
    return conform(pd.DataFrame(rows), "cost_capacity")


def maintenance_windows(scen: Scenario) -> pd.DataFrame:
    rows = []
    n_all = len(scen.cluster.nodes)
    for inc in scen.incidents:
        if inc.kind != "maintenance":
            continue
        rows.append({"window_id": inc.incident_id, "start": inc.start, "end": inc.end, "region": inc.region or "*",
                     "node_ids": ",".join(inc.node_ids) if len(inc.node_ids) < n_all else "*",
                     "reason": inc.scope.get("reason", "planned maintenance: firmware and driver update")})
    if not rows:
        return _empty("maintenance_windows")
    return conform(pd.DataFrame(rows), "maintenance_windows")
