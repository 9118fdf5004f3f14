"""The supporting KPIs of the metric framework, as code.

The north star is cluster goodput (productive / paid GPU-minutes, the loss
tree in :mod:`gpu_health.metrics.goodput`). The KPIs below explain it, route
its drops to an owner and keep it honest. Each entry says what it measures,
how it is computed from the source contracts, who owns it, whether it leads or
lags the north star, what an alert on it does, what it guards against, which
optional source fields it depends on and how it degrades without them.

Everything a reader sees about a KPI comes from here: :mod:`gpu_health.metrics.kpis`
computes the series named here, and ``docs/kpis.md`` is generated from this
module (``python -m gpu_health.metrics.kpi_docs``).

Series. A KPI with ``components`` emits one series per component, named
``<kpi>.<component>`` (failure rate by reason, step-time inflation by
component, ...). ``has_total`` says whether the KPI also emits its own total
series under its bare name (it does when the components add up to it).
"""

from dataclasses import dataclass, replace

from gpu_health.constants import OWNERS, SEVERITIES

KINDS = ("leading", "lagging")
# Where a KPI stands in the answer to the brief (../shared/design/framework.md): the north star, one of its 6-10
# supporting KPIs, or an indicator of a layer beside them (the facility's power and cooling, the inventory's
# reconciliation) that explains its own layer, not goodput's moves. Every tier's series are in kpi_values alike.
TIERS = ("north_star", "supporting", "layer")
ALERT_INTENTS = SEVERITIES
DIMENSIONS = ("region", "sku", "workload_class", "team")


@dataclass(frozen=True)
class Component:
    """One series of a KPI that is split by cause."""

    name: str
    unit: str
    definition: str
    needs: tuple[str, ...] = ()


@dataclass(frozen=True)
class Kpi:
    """A supporting KPI: definition, formula, ownership and alerting intent."""

    name: str
    title: str
    definition: str
    formula: str  # over the source contracts, human-readable
    unit: str  # unit of the total series (of every component when there is no total)
    owner: str  # infra | ml_platform | finance
    kind: str  # leading | lagging
    alert_intent: str  # page | ticket | dashboard
    guards_against: str  # the gaming or failure mode it exposes
    owner_rationale: str
    intent_rationale: str
    needs: tuple[str, ...]  # optional source fields (or inputs) it depends on
    degraded_when: str
    dimensions: tuple[str, ...]  # slicing of the kpi_values rows; the others are '*'
    components: tuple[Component, ...] = ()
    has_total: bool = True
    tier: str = "supporting"  # north_star | supporting | layer (TIERS)
    layer: str | None = None  # a layer indicator's layer (facility, inventory)

    def series(self) -> tuple[str, ...]:
        """Names of the series this KPI emits in ``kpi_values.kpi``."""
        total = (self.name,) if self.has_total or not self.components else ()
        return total + tuple(f"{self.name}.{c.name}" for c in self.components)

    def unit_of(self, series: str) -> str:
        for c in self.components:
            if series == f"{self.name}.{c.name}":
                return c.unit
        return self.unit


# The north star itself: stored in cluster_goodput (5-minute, provisional) and cluster_goodput_daily (settled), not in
# kpi_values, so it is described here beside its supporting KPIs and kept out of CATALOG (the kpi_values series).
NORTH_STAR = Kpi(
    name="goodput",
    title="Cluster goodput",
    definition="Productive GPU-hours over paid GPU-hours: every paid GPU-minute lands in exactly one state of the "
               "loss tree, so the shares add up to 100 % and any drop decomposes exactly into the states that grew. "
               "A job earns a GPU-minute only while it makes training progress, at its baseline step time.",
    formula="cluster_goodput.productive_gpu_minutes / cluster_goodput.paid_gpu_minutes (5-minute, provisional); "
            "cluster_goodput_daily.settled_goodput (daily: work thrown away by failures moved back to when it was "
            "spent)",
    unit="ratio",
    owner="finance",
    kind="lagging",
    alert_intent="dashboard",
    guards_against="Utilization theatre: a dummy kernel at 100 % utilization earns nothing (no progress), a busy "
                   "but slow job earns in proportion to its speed, and a paid GPU nobody uses counts against it.",
    owner_rationale="It prices what the cluster's spend buys: Finance reads the settled daily series. Each loss state "
                    "routes its share to the team that moves it, through the supporting KPIs' owners.",
    intent_rationale="A number without a cause is no page: its drops page through the detector that names the loss "
                     "state that grew and its cause; the 5-minute series leads, the settled one lags.",
    needs=(),
    degraded_when="Minutes without telemetry are their own state (no_data), never counted productive.",
    dimensions=("region",),
    tier="north_star",
)

# The north star's supporting KPIs (the metric framework's 6-10: ../shared/design/framework.md).
SUPPORTING: tuple[Kpi, ...] = (
    Kpi(
        name="allocation_rate",
        title="Allocation rate",
        definition="Share of schedulable GPU-minutes held by a job. Schedulable: the GPU reports and its node is "
                   "neither drained nor down.",
        formula="count(gpu_telemetry rows with job_id not null on schedulable nodes) / count(gpu_telemetry rows "
                "on schedulable nodes); node health from node_telemetry.health at the same (ts, node_id) "
                "(no node row: schedulable)",
        unit="ratio",
        owner="ml_platform",
        kind="lagging",
        alert_intent="dashboard",
        guards_against="Capacity idling unseen: paid GPUs nobody is scheduled on (idle_blocked or idle_no_demand "
                       "in the loss tree). It is deliberately not a target: a held GPU counts as allocated whether "
                       "or not it works, which is why it is read beside goodput and the gaming guardrails.",
        owner_rationale="The scheduler (queues, quotas, priorities, placement) decides who holds a free GPU; ML "
                        "Platform runs it. Finance reads it for capacity planning but cannot move it.",
        intent_rationale="Allocation moves with demand (weekday retrain waves, night-time lulls), so on its own a "
                         "drop is not actionable. Its explanatory partners (queue wait, fragmentation) carry the "
                         "tickets.",
        needs=(),
        degraded_when="Never degraded: it needs only required fields. A partial collector outage shrinks numerator "
                      "and denominator together; a silent slice is no_data.",
        dimensions=("region", "sku"),
    ),
    Kpi(
        name="job_failure_rate",
        title="Job failure rate, by exit reason",
        definition="Share of jobs that ended in the partition (after starting) that failed, split by the class of "
                   "the failure reason.",
        formula="count(scheduler_events 'ended' with exit_state in {failed, node_fail, timeout} and gpus > 0) / "
                "count(scheduler_events 'ended' with gpus > 0); region from the first node of node_ids, workload "
                "class from job_metadata (or the lookup); reason class from exit_state and reason text",
        unit="ratio",
        owner="ml_platform",
        kind="lagging",
        alert_intent="page",
        guards_against="Deploys that break jobs (driver or framework regressions, the last quarter's spike after "
                        "a driver upgrade) and failure storms hidden inside a healthy-looking utilization number: a "
                        "crashing and restarting job keeps GPUs allocated.",
        owner_rationale="ML Platform owns job success end to end (frameworks, images, scheduler retries) and is the "
                        "first responder; the reason split routes gpu_xid and node_fail to Infra without a hand-off "
                        "meeting.",
        intent_rationale="A regression after a deploy burns every job it touches within minutes and is actionable "
                         "(roll back); with the cohort comparison it is the 15-minute detector, so it pages.",
        needs=(),
        degraded_when="Never degraded. A job whose metadata never arrived is counted under workload_class "
                      "'unknown'; a job whose placement is unknown (no node_ids) under region 'unknown'.",
        dimensions=("region", "workload_class"),
        components=(
            Component("gpu_xid", "ratio", "Failed with an Xid, ECC or GPU error in the reason (hardware or driver)."),
            Component("nccl", "ratio", "Failed in a collective (NCCL error, watchdog timeout)."),
            Component("oom", "ratio", "Failed out of memory (CUDA OOM, data-loader worker killed by OOM)."),
            Component("app_error", "ratio", "Any other failure (application exceptions, unknown reason)."),
            Component("node_fail", "ratio", "exit_state node_fail."),
            Component("timeout", "ratio", "exit_state timeout (time limit reached)."),
        ),
    ),
    Kpi(
        name="queue_wait_p95",
        title="Queue wait p95, by workload class",
        definition="95th percentile of the time from submission (or requeue) to start, over the jobs that started "
                   "in the partition.",
        formula="p95(started.ts - submitted.ts) per workload class over scheduler_events 'started' in the partition; "
                "the submission time comes from the job's last 'submitted'/'requeued' event before it started, "
                "else the backlog passed as `pending`, else job_metadata.submitted_at (linear interpolation)",
        unit="s",
        owner="ml_platform",
        kind="leading",
        alert_intent="ticket",
        guards_against="Scheduling regressions (priority or quota changes, fragmentation) that starve pipelines "
                       "while node health looks normal: finding (B). It leads SLA misses by the length of the wait.",
        owner_rationale="Queue policy, priorities, quotas and placement are ML Platform's scheduler configuration.",
        intent_rationale="Waits build up over tens of minutes and seasonality (retrain waves) moves them a lot; a "
                         "sustained excess over the same hour of the week is a ticket, and a scheduler deploy is "
                         "judged by the cohort comparison.",
        needs=(),
        degraded_when="Jobs whose submission time is unknown (no event, backlog or metadata row) are left out of "
                      "the quantile (the denominator counts the waits used); degraded (NaN) when that is over half "
                      "of the jobs that started.",
        dimensions=("workload_class",),
    ),
    Kpi(
        name="sla_attainment",
        title="Training SLA attainment",
        definition="Share of SLA-bound jobs whose outcome became known in the partition that completed by their "
                   "deadline.",
        formula="met / (met + missed) over jobs with job_metadata.sla_deadline: an 'ended' event at or before the "
                "deadline counts once (met iff exit_state = completed); a deadline passing while the job is still "
                "running (gpu_telemetry) or pending counts once as missed at the deadline",
        unit="ratio",
        owner="ml_platform",
        kind="lagging",
        alert_intent="ticket",
        guards_against="Busy-but-late pipelines (finding (A)): utilization flat while fraud-model retrains miss "
                       "their deadline because of failures, slowdowns or queueing.",
        owner_rationale="ML Platform runs the training pipelines and their SLAs with the model teams; the causes "
                        "route through failure rate, step-time inflation and queue wait.",
        intent_rationale="It is the business outcome, but it lags: by the time a deadline is missed the leading "
                         "KPIs have already paged. A miss opens a ticket for the post-mortem.",
        needs=("job_metadata.sla_deadline",),
        degraded_when="Jobs without sla_deadline are not SLA-bound and do not count; a partition with no SLA "
                      "outcome is no_data. Jobs whose metadata never arrived cannot be judged (they show in the "
                      "'unknown' class of job_failure_rate).",
        dimensions=("workload_class",),
    ),
    Kpi(
        name="step_time_inflation",
        title="Step-time inflation, by component",
        definition="Extra wall time training jobs spent per unit of work, relative to the baseline of their "
                   "workload signature (model_type, sku, gpus), split into data I/O, network, checkpoint and "
                   "compute. 0.25 = the work took 25% longer than the baseline.",
        formula="sum over job-minutes of gpus x [steps x (step_time_s - base_step_s) + checkpoint_time_s] / "
                "sum of gpus x steps x base_step_s (job_runtime_metrics joined to the job's GPUs in gpu_telemetry "
                "and its model_type); components: data_io = loader excess (data_loader_time_s - base), network = "
                "grad_sync_time_s excess, compute = the rest of the step excess, checkpoint = checkpoint_time_s",
        unit="ratio",
        owner="ml_platform",
        kind="leading",
        alert_intent="ticket",
        guards_against="Slow-but-busy training that utilization cannot see: input pipelines starving GPUs, "
                       "framework regressions, throttled GPUs. It leads SLA misses.",
        owner_rationale="Frameworks and the data pipeline are ML Platform's; the component split hands compute "
                        "(throttling) and network to Infra with the evidence attached.",
        intent_rationale="A slowdown burns money steadily rather than breaking jobs; the pages come from the "
                         "component's fast signals (hw_fault_rate, comm_health) and from deploy cohorts. The "
                         "inflation itself opens a ticket.",
        needs=("step_baseline", "job_runtime_metrics.data_loader_time_s", "job_runtime_metrics.grad_sync_time_s",
               "job_metadata.model_type"),
        degraded_when="Degraded (value NaN) when no step baseline is given or under half of the slice's "
                      "progressing job-minutes have a baseline for their signature; a component is degraded when "
                      "under half of those minutes report the field it needs (loader / sync time).",
        dimensions=("region", "sku", "workload_class"),
        components=(
            Component("data_io", "ratio", "Loader wait over its baseline.", ("job_runtime_metrics.data_loader_time_s",)),
            Component("network", "ratio", "Gradient-sync time over its baseline.", ("job_runtime_metrics.grad_sync_time_s",)),
            Component("checkpoint", "ratio", "Checkpoint wall time (not part of a step)."),
            Component("compute", "ratio", "Step excess not explained by loader or sync: throttling, faulty GPUs, "
                      "framework or driver regressions.",
                      ("job_runtime_metrics.data_loader_time_s", "job_runtime_metrics.grad_sync_time_s")),
        ),
    ),
    Kpi(
        name="hw_fault_rate",
        title="Hardware fault rate",
        definition="Share of reporting GPU-minutes with a hardware fault signal: an Xid, a double-bit ECC error, "
                   "or a slowdown throttle (hardware slowdown, thermal, power brake).",
        formula="per component: count(gpu_telemetry rows with the signal) / count(rows that report the field); "
                "xid: xid != 0; dbe: ecc_dbe_delta > 0; throttled: throttle_reasons & (0x8|0x20|0x40|0x80) != 0",
        unit="ratio",
        owner="infra",
        kind="leading",
        alert_intent="page",
        guards_against="Failing or overheating hardware that kills or slows jobs before anyone looks at a node: "
                       "ECC faults, GPUs falling off the bus, cooling failures.",
        owner_rationale="GPUs, firmware, drivers and cooling are Infra Eng's; the action (drain, RMA, cooling) is "
                        "theirs.",
        intent_rationale="An Xid or DBE is an unambiguous, actionable signal: drain the node before the scheduler "
                         "places more jobs on it. A thermal event across a rack burns every job on it.",
        needs=("gpu_telemetry.ecc_dbe_delta", "gpu_telemetry.throttle_reasons"),
        degraded_when="dcgm-exporter ships ECC and throttle fields switched off: the dbe / throttled series are "
                      "degraded (value NaN, never 0) when under half of the slice's rows report the field. The "
                      "xid series needs only required fields.",
        dimensions=("region", "sku"),
        components=(
            Component("xid", "ratio", "GPU-minutes with an Xid (application Xids 13/31/43 included: a driver "
                      "regression surfaces through them)."),
            Component("dbe", "ratio", "GPU-minutes with a double-bit ECC error.", ("gpu_telemetry.ecc_dbe_delta",)),
            Component("throttled", "ratio", "Throttled GPU-minutes: hardware slowdown, thermal or power-brake bits "
                      "(the software power cap is normal under load and not counted).", ("gpu_telemetry.throttle_reasons",)),
        ),
        has_total=False,
    ),
    Kpi(
        name="comm_health",
        title="Collective-communication health",
        definition="How much of multi-GPU training time goes to gradient synchronisation, and how the InfiniBand / "
                   "RoCE fabric behaves (retransmits, packet loss, links down).",
        formula="grad_sync_share = sum(gpus x steps x grad_sync_time_s) / sum(gpus x steps x step_time_s) over "
                "job-minutes of multi-GPU jobs; retransmits = sum(network_telemetry.retransmits) / link-minutes; "
                "packet_loss = mean(packet_loss_pct) over link-minutes; link_down = share of link-minutes with "
                "link_up false",
        unit="per component",
        owner="infra",
        kind="leading",
        alert_intent="page",
        guards_against="Collective-communication degradation (a flapping link, congestion, a bad switch port) that "
                       "slows every multi-node job at once while the GPUs look busy.",
        owner_rationale="The fabric (HCAs, cables, switches, NCCL topology settings) is Infra Eng's.",
        intent_rationale="A degraded fabric slows or hangs all distributed training at once and the fix (drain "
                         "the link, reroute) is immediate: it pages.",
        needs=("job_runtime_metrics.grad_sync_time_s", "network_telemetry.retransmits"),
        degraded_when="grad_sync_share is degraded (NaN) when under half of the slice's multi-GPU job-minutes "
                      "report grad_sync_time_s; retransmits is degraded (NaN, never 0) when under half of the "
                      "slice's link-minutes report it (switch-port counters and node-exporter IB counters do "
                      "not), and is then averaged over the link-minutes that do; packet_loss and link_down "
                      "need only required fields.",
        dimensions=("region", "sku"),
        components=(
            Component("grad_sync_share", "ratio", "Share of step time in collectives (multi-GPU jobs).",
                      ("job_runtime_metrics.grad_sync_time_s",)),
            Component("retransmits", "retransmits per link-minute", "Mean retransmits per link-minute that "
                      "reports them.", ("network_telemetry.retransmits",)),
            Component("packet_loss", "pct", "Mean packet loss per link-minute."),
            Component("link_down", "ratio", "Share of link-minutes with the port down."),
        ),
        has_total=False,
    ),
    Kpi(
        name="fragmentation",
        title="Fragmentation (stranded free GPUs)",
        definition="Free GPUs that cannot host the smallest blocked job of a workload class: free GPUs on nodes "
                   "with fewer free GPUs than the smallest request among the class's jobs pending for at least "
                   "the scheduling grace (5 minutes). A request larger than a node needs whole free nodes. Mean "
                   "over the partition's minutes; 0 when no job of the class is blocked.",
        formula="per minute and class: r = min(gpus) of the class's jobs submitted (or requeued) >= 5 min ago and "
                "not started (scheduler_events plus the `pending` backlog); per node: free = gpu_telemetry rows "
                "with job_id null on a schedulable node, size = its reporting GPUs; stranded = sum(free) over "
                "nodes with free < r (when r <= size) or 0 < free < size (when r > size); value = sum(stranded "
                "GPU-minutes) / minutes with telemetry",
        unit="gpus",
        owner="ml_platform",
        kind="leading",
        alert_intent="ticket",
        guards_against="Capacity that is paid, free and still useless: scattered free GPUs while multi-GPU jobs "
                       "wait. It separates fragmentation from a plain shortage and from priority policy: when "
                       "single-GPU jobs are blocked too, nothing is stranded and the cause is elsewhere (queue "
                       "wait rises alone).",
        owner_rationale="Placement policy (bin-packing, gang scheduling, defragmentation, node pools) is the "
                        "scheduler's, ML Platform's.",
        intent_rationale="Fragmentation builds slowly and is fixed by policy (packing, draining for big jobs), not "
                         "by an on-call action: a ticket when it stays above the same hour of the week.",
        needs=("pending",),
        degraded_when="Degraded (NaN) when the backlog at the window start (`pending`) is not given: without it, "
                      "jobs submitted before the window are invisible and a 5-minute window could never show a "
                      "blocked job, a false zero. (An empty backlog is fine when the scheduler events passed "
                      "reach back far enough to show every waiting job.)",
        dimensions=("region", "sku", "workload_class"),
    ),
    Kpi(
        name="cost_per_productive_gpu_hour",
        title="Cost per productive GPU-hour",
        definition="What one GPU-hour of useful training cost: the spend on all paid GPU-minutes divided by the "
                   "productive GPU-hours of the loss tree.",
        formula="sum(goodput_states.gpu_minutes) / 60 x blended USD per GPU-hour of that day, region and sku "
                "(cost_capacity: reserved GPUs x 24 h x reserved rate + burst GPU-hours x on-demand rate, over "
                "capacity_gpus x 24 h) / (sum(gpu_minutes where state = productive) / 60)",
        unit="usd per productive gpu-hour",
        owner="finance",
        kind="lagging",
        alert_intent="dashboard",
        guards_against="Spend that looks efficient on utilization but buys little progress: every loss state "
                       "(idle, gaming, failures, slowdowns) raises it, and dummy load cannot lower it.",
        owner_rationale="Finance owns the price side (reservations vs burst) and reads the efficiency side from "
                        "the loss tree; it is the number that ties the framework to money.",
        intent_rationale="It moves with prices and with every loss state at once: context for the monthly review, "
                         "not an alert. The wasted-spend table says where the money went.",
        needs=("cost_capacity", "goodput_states"),
        degraded_when="Degraded (NaN) when cost_capacity has no row for the day, region and sku. A slice with spend "
                      "but no productive minute has denominator 0 and is no_data (the numerator still shows the "
                      "spend).",
        dimensions=("region", "sku"),
    ),
    Kpi(
        name="gaming_guardrails",
        title="Anti-gaming guardrails, by team",
        definition="Two independent readings of 'busy but not working', measured from raw telemetry rather than "
                   "read off the loss tree, so a blind spot in the classifier cannot hide gaming.",
        formula="busy_without_progress = GPU-minutes (util >= 50 %) of batch/distributed/unknown-class jobs with "
                "no job_runtime_metrics row with steps > 0 for (ts, job_id) / all their busy GPU-minutes; "
                "util_power_divergence = busy GPU-minutes (util >= 50 %) with sm_active < 0.25 and, where "
                "reported, tensor_active < 0.05 (tensor alone without sm_active) and power_w < 0.5 x the SKU's "
                "reference power (p95 power of its working GPUs in the partition) / busy GPU-minutes that report "
                "the activity field and power",
        unit="ratio",
        owner="ml_platform",
        kind="leading",
        alert_intent="ticket",
        guards_against="Teams gaming utilization with dummy workloads (a kernel that pins gpu_util_pct at 100 "
                       "without training), and hung jobs that hold GPUs while reporting no progress.",
        owner_rationale="Quotas and fair-use policy per team are ML Platform's; they talk to the team. Infra is "
                        "consulted when the divergence points at the device rather than the job.",
        intent_rationale="Gaming is a policy problem, not an outage: a ticket to the team with the evidence. A "
                         "hang shows here too, but the outage pages come from failure rate and comm health.",
        needs=("gpu_telemetry.tensor_active", "gpu_telemetry.sm_active", "gpu_telemetry.power_w"),
        degraded_when="util_power_divergence is degraded (value NaN, never 0) when under half of the team's busy "
                      "GPU-minutes report tensor_active or sm_active (profiling fields are off by default in "
                      "dcgm-exporter) together with power_w (a utilisation-only collector has no power); "
                      "busy_without_progress needs only required fields.",
        dimensions=("team",),
        components=(
            Component("busy_without_progress", "ratio", "Busy GPU-minutes of training-class jobs with no "
                      "completed step (interactive notebooks report no steps by design and are left out)."),
            Component("util_power_divergence", "ratio", "Busy GPU-minutes whose tensor/SM activity and power say "
                      "the GPU is not really working.",
                      ("gpu_telemetry.tensor_active", "gpu_telemetry.sm_active", "gpu_telemetry.power_w")),
        ),
        has_total=False,
    ),
)

# The facility's KPIs (gpu_health/metrics/facility.py): the operations half of the seeds (power, cooling),
# beside the north star's supporting KPIs rather than among them -- they explain the hall, not goodput.
FACILITY_KPIS: tuple[Kpi, ...] = tuple(replace(k, tier="layer", layer="facility") for k in (
    Kpi(
        name="pue",
        title="Power usage effectiveness (PUE), from energy",
        definition="The hall's energy over the IT energy of its racks in the partition: how many kWh the building "
                   "draws for each kWh the GPUs' racks draw. From energy (sums over the minutes), never one "
                   "instant's power ratio: The Green Grid defines PUE over energy, and a cooling plant cycles over "
                   "minutes, so an instant can read anywhere.",
        formula="sum over region-minutes of facility_telemetry.facility_power_kw (once per region-minute) / 60 / "
                "sum of facility_telemetry.power_kw over the region's racks / 60, over the minutes that report "
                "facility_power_kw",
        unit="ratio",
        owner="infra",
        kind="lagging",
        alert_intent="dashboard",
        guards_against="Cooling and power-distribution losses growing unseen behind a steady IT load (a failing "
                       "chiller, bypass air), and an efficiency figure quoted from one favourable instant.",
        owner_rationale="The hall, its cooling plant and its power distribution are Infra's (with the facility "
                        "operator).",
        intent_rationale="PUE moves with weather and load over days: a trend for the monthly review and capacity "
                         "planning, not an on-call action. Cooling failures page from the rack detectors.",
        needs=("facility_telemetry.power_kw", "facility_telemetry.facility_power_kw"),
        degraded_when="no_data without facility_telemetry (an optional source); degraded (NaN) when under half of "
                      "the region's minutes report facility_power_kw (the hall meter not exported).",
        dimensions=("region",),
    ),
    Kpi(
        name="rack_power_headroom",
        title="Rack power headroom below the continuous-load limit",
        definition="How much of the racks' usable power is left at their peak: the usable power is 80 % of each "
                   "rack's rating (power_budget_kw), the National Electrical Code's limit for a continuous load "
                   "(NEC 210.20(A): a load of 3 hours or more, as training is, at most 80 % of the breaker); "
                   "headroom = usable - the partition's peak minute draw, summed over the region's racks. "
                   "Negative = racks over the limit. Per rack: the rack_facility table.",
        formula="sum over racks of (0.8 x min(power_budget_kw) - max(power_kw)) / sum over racks of "
                "(0.8 x min(power_budget_kw)), from facility_telemetry, per partition",
        unit="ratio",
        owner="infra",
        kind="leading",
        alert_intent="ticket",
        guards_against="Adding nodes to racks that cannot carry them, and racks creeping to their breaker "
                       "(a trip takes every job of the rack down).",
        owner_rationale="Rack power provisioning (PDUs, breakers, power caps) and node placement across racks "
                        "are Infra's capacity plan.",
        intent_rationale="Headroom shrinks with growth and placement over weeks: a ticket for the capacity plan. "
                         "A rack held at its budget with power-capped GPUs pages from the rack_power_cap detector.",
        needs=("facility_telemetry.power_kw", "facility_telemetry.power_budget_kw"),
        degraded_when="no_data without facility_telemetry (an optional source).",
        dimensions=("region",),
    ),
    Kpi(
        name="gpus_throttled",
        title="GPUs throttled for power or heat",
        definition="Share of GPU-minutes whose clocks the GPU lowered for power (SW power cap 0x4, HW power brake "
                   "0x80) or for heat (SW / HW thermal slowdown 0x20 / 0x40): the DCGM clock-event reasons. By rack: "
                   "rack_facility.gpus_throttled_power / _thermal.",
        formula="count(gpu_telemetry rows with throttle_reasons & bits) / count(rows with throttle_reasons not "
                "null), per component",
        unit="ratio",
        owner="infra",
        kind="leading",
        alert_intent="dashboard",
        guards_against="Compute silently lost to power caps and hot aisles: a throttled GPU reports busy and "
                       "slow, not failed.",
        owner_rationale="Power caps and cooling are the facility's, which Infra runs.",
        intent_rationale="Context for the rack detectors (which page on a rack's cooling or power cap) and for "
                         "the loss tree's compute slowdowns; a share by itself is not an action.",
        needs=("gpu_telemetry.throttle_reasons",),
        degraded_when="Degraded (NaN) when under half of the slice's GPU-minutes report the clock-event bitmask "
                      "(dcgm-exporter's default counters leave it out): missing data, never a zero.",
        dimensions=("region", "sku"),
        components=(
            Component("power", "ratio", "GPU-minutes with a power clock-event bit (0x4 | 0x80).",
                      ("gpu_telemetry.throttle_reasons",)),
            Component("thermal", "ratio", "GPU-minutes with a thermal clock-event bit (0x20 | 0x40).",
                      ("gpu_telemetry.throttle_reasons",)),
        ),
        has_total=False,
    ),
))


# The inventory's KPI: the telemetry reconciled against Finance's installed capacity, beside the supporting KPIs
# rather than among them -- it keeps paid GPU-minutes honest, it does not explain goodput's moves.
INVENTORY_KPIS: tuple[Kpi, ...] = tuple(replace(k, tier="layer", layer="inventory") for k in (
    Kpi(
        name="inventory_excess",
        title="GPUs seen beyond Finance's capacity",
        definition="Share of the GPUs reporting in a partition that Finance did not install: distinct GPUs seen "
                   "beyond the day's capacity_gpus of the region x SKU. They are an inventory discrepancy, not paid "
                   "(the loss tree pays the capacity); the numerator is their count.",
        formula="max(0, count(distinct gpu_telemetry.gpu_uuid in the partition) - cost_capacity.capacity_gpus of "
                "the day, region and sku) / count(distinct gpu_uuid)",
        unit="ratio",
        owner="finance",
        kind="lagging",
        alert_intent="ticket",
        guards_against="Paid GPU-minutes inflated by rows that are not GPUs Finance pays for: a buffer replayed "
                       "under new UUIDs or node names, a renamed node counted twice. Without it they would either "
                       "be paid (goodput diluted) or vanish unexplained.",
        owner_rationale="Finance's installed-capacity list is the reference the telemetry is reconciled against.",
        intent_rationale="Data to reconcile, not an outage: the inventory detector tickets it naming the nodes "
                         "(gpu_health.diagnosis.inventory).",
        needs=("cost_capacity",),
        degraded_when="Degraded (NaN) when cost_capacity has no row for the day, region and sku: the region has "
                      "telemetry but no price (its own ticket), and nothing to compare with.",
        dimensions=("region", "sku"),
    ),
))


CATALOG: tuple[Kpi, ...] = SUPPORTING + FACILITY_KPIS + INVENTORY_KPIS
# the layers beside the supporting KPIs, in the order the docs present them (serving's indicators are its SLOs:
# gpu_health/metrics/slo_catalog.py)
LAYERS = {"facility": "Facility: power and cooling", "inventory": "Inventory: telemetry against Finance's capacity"}


def by_name() -> dict[str, Kpi]:
    return {k.name: k for k in CATALOG}


def series_units() -> dict[str, str]:
    """Every series name in ``kpi_values.kpi`` -> its unit."""
    return {s: k.unit_of(s) for k in CATALOG for s in k.series()}
