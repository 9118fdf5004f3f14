"""The simulated cluster: regions, node types, GPU inventory and scheduling lanes.

The default models the brief's cluster: two regions, 80 DGX nodes, 1,200 GPUs on
two SKUs (8-GPU DGX H100 and 16-GPU DGX-2 V100 systems). A second profile,
``messy``, is another cluster with the quirks of real ones: other
regions, three SKUs, rack-and-slot node names, eight teams with quotas and
per-team queues, cron retrains, uninstrumented work, collectors that miss
fields, old drivers, weak GPUs, leftover framebuffer and lost rows -- each a
field below whose default leaves the default profile's rows unchanged. A third,
``field``, is written from the public traces' scheduler and collector behaviour
(Philly, Helios, Acme, Habrok's Slurm dumps; each number cites its file): other
regions, 4- and 8-GPU nodes, Slurm partitions by time limit, queues that stay
long every evening, jobs that fail in their first minutes, collectors that stamp
the scrape instant and nodes re-imaged under new names (gpu_health.sim.collector). A
scenario's ``cluster:`` names a profile or maps fields over one (``profile:``);
``gpus: 100000`` scales the node counts to the requested size (benchmarks).

Scheduling is modelled with *lanes*: a lane is a fixed group of GPUs that runs
one job at a time (a single GPU for notebooks, a slice of a node for batch, a
group of whole nodes for distributed training). Every node belongs to one pool
(interactive, batch, distributed) and is cut into that pool's lanes.
"""

from dataclasses import dataclass, field, fields, replace

import numpy as np
import pandas as pd

from gpu_health.sim.hashing import stable_id, uniform

# The default cluster's teams (a cluster spec without ``teams`` has these): jobs draws its demand per team from them
# and a cron entry must name one of them.
TEAMS = ["fraud-realtime", "fraud-offline", "credit-risk", "aml-graph", "personalization", "ml-research"]

_QUIRK_SEED = stable_id("collector-quirks")
SPILL_POOL = "spill"  # the lanes' pool of the spill lanes (below): no pool's own jobs are planned on them


@dataclass(frozen=True)
class NodeType:
    sku: str
    gpus: int
    nodes_per_region: int
    short: str                      # used in node ids
    tdp_w: float
    idle_w: float
    max_sm_clock_mhz: float
    idle_sm_clock_mhz: float
    throttled_sm_clock_mhz: float
    fb_total_mib: float
    speed: float                    # relative step speed (H100 = 1.0)
    links: int = 8                  # InfiniBand ports


H100 = NodeType("NVIDIA H100 80GB HBM3", 8, 5, "h100", 700.0, 70.0, 1980.0, 345.0, 1200.0, 81559.0, 1.0)
V100 = NodeType("Tesla V100-SXM3-32GB", 16, 35, "v100", 350.0, 45.0, 1597.0, 135.0, 960.0, 32768.0, 0.42)
# HGX A100 80GB (Zhejiang Lab's cluster_2000_A100: 253 servers x 8 A100-SXM4-80GB): 400 W TDP, 1410 MHz max SM
# clock, ~60 W idle (the A100-SXM4-80GB nvidia-smi capture in real-data/fixtures/nvidia-smi-xml reads 67 W idle)
A100 = NodeType("NVIDIA A100-SXM4-80GB", 8, 30, "a100", 400.0, 60.0, 1410.0, 210.0, 1005.0, 81920.0, 0.55)
# an older 16-GPU generation beside them (DGX-2 class), so a cluster has 8- and 16-GPU nodes
V100_16 = NodeType("Tesla V100-SXM3-32GB", 16, 6, "v100", 350.0, 45.0, 1597.0, 135.0, 960.0, 32768.0, 0.42)


@dataclass(frozen=True)
class Team:
    """A team's workload: its share of each pool's jobs, its models, framework and fair-share quota."""

    name: str
    weights: tuple[float, float, float]     # relative share of interactive, batch, distributed jobs
    models: tuple[str, ...]
    framework: str = "torch-2.13.0"
    sla: bool = False
    quota: float | None = None              # fair-share quota (share of batch+distributed GPUs); None = its weight


@dataclass(frozen=True)
class Cron:
    """A scheduled retrain: every ``every_h`` hours at minute ``at_min`` of the period, ``for_min`` minutes of
    batch demand ``boost`` times the base, the surplus submitted by ``team``."""

    team: str
    every_h: int
    at_min: int
    for_min: int
    boost: float


@dataclass(frozen=True)
class ClusterSpec:
    regions: tuple[str, ...] = ("us-east", "eu-west")
    node_types: tuple[NodeType, ...] = (H100, V100)
    # share of each region's nodes per pool
    pool_shares: tuple[tuple[str, float], ...] = (("interactive", 0.25), ("batch", 0.45), ("distributed", 0.30))
    driver_version: str = "550.127.08"
    kernel_version: str = "6.8.0-49-generic"
    profiling_fields: bool = True   # DCGM_FI_PROF_* exported (off by default in dcgm-exporter)
    ecc_fields: bool = True
    jobs_per_day_target: int = 35_000
    distributed_nodes_per_job: int = 2
    # --- the messiness of real clusters. Every default leaves the default profile's rows unchanged;
    # the ``messy`` profile (PROFILES below) sets them from the public traces.
    node_name: str = "{region_short}-{short}-{n:03d}"   # fields: region, region_short, short, n, rack, slot
    business_hours_utc: tuple[tuple[str, int], ...] = ()  # region -> first business hour (UTC); default below
    teams: tuple[Team, ...] = ()            # () = the default six teams of gpu_health.sim.jobs
    queue_per_team: bool = False            # batch / distributed queues per team (virtual clusters) or per pool
    fair_share: bool = False                # teams over their quota wait longer, under it shorter
    cron: tuple[Cron, ...] = ()             # scheduled retrains beside the weekday waves
    uninstrumented: tuple[tuple[str, float], ...] = ()  # pool -> share of its jobs that report no step metrics
    setup_median_s: float = 0.0             # median set-up before a training job's first step (0 = none)
    component_metrics_share: float = 1.0    # share of instrumented jobs reporting data-loader / grad-sync time
    # share of instrumented jobs reporting their gradient norm (grad_norm; the others null): Megatron-LM and the
    # HF Trainer (since transformers 4.38) log it by default, Lightning and hand-written loops only when asked
    grad_norm_share: float = 0.4
    no_profiling_share: float = 0.0         # nodes exporting no DCGM_FI_PROF_* field (sm_active, tensor_active null)
    no_sm_active_share: float = 0.0         # nodes on dcgm-exporter's default counters: tensor_active, no sm_active
    no_ecc_share: float = 0.0               # nodes whose exporter has no ECC counters (null)
    no_throttle_share: float = 0.0          # nodes whose exporter has no clock-event (throttle) bitmask (null)
    no_power_temp_share: float = 0.0        # nodes whose collector reads no power / temperature (null)
    old_driver_share: float = 0.0           # nodes still on an older driver
    old_driver_version: str = "535.54.03"
    weak_gpu_share: float = 0.0             # GPUs that throw benign single-bit ECC bursts
    weak_gpu_bursts_per_day: float = 4.0
    idle_fb_leftover_share: float = 0.0     # idle GPUs holding leftover framebuffer (a dead context, a daemon)
    idle_fb_leftover_mib: tuple[float, float] = (400.0, 1500.0)
    row_loss_rate: float = 0.0              # GPU-minute rows an exporter drops at random
    node_gaps_per_day: float = 0.0          # per node: a few minutes of its GPU rows missing (exporter restart)
    node_gap_minutes: tuple[int, int] = (2, 6)
    # --- the scheduler and collector behaviour of the ``field`` profile (written from the public traces). Every
    # default leaves the default and messy profiles' rows unchanged.
    queue_names: tuple[tuple[str, str], ...] = ()   # pool -> queue (partition) name; () = jobs.QUEUES
    exit_weights: tuple[tuple[str, tuple[float, ...]], ...] = ()  # pool -> (completed, failed, cancelled, timeout, node_fail)
    early_fail_share: float = 0.0           # share of failed batch / distributed jobs that die in their first minutes
    early_fail_within_s: int = 300          # ... within this long of their start (set-up, first kernels, bad config)
    evening_queue_utc: tuple[tuple[str, int], ...] = ()  # region -> UTC hour its evening pile-up starts; () = none
    evening_hours: int = 6                  # how long the evening pile-up lasts
    evening_demand: float = 1.0             # factor on batch and distributed demand through the evening pile-up
    evening_wait_factor: float = 1.0        # factor on the queue wait of a job that starts in the evening pile-up
    scrape_offset_s: float = 0.0            # a node's scrape lands up to this many seconds into the minute (0 = on it)
    renamed_nodes: int = 0                  # nodes re-imaged under a new host name part-way through a scenario
    # --- the serving layer: model deployments answering requests (gpu_health.sim.serving). Off on both
    # profiles, so their rows are unchanged; a scenario turns it on with ``cluster: {serving: true}``.
    serving: bool = False
    # --- the facility layer: racks' power and cooling, the hall's draw (gpu_health.sim.facility). Off on
    # both profiles; ``cluster: {facility: true}`` turns it on.
    facility: bool = False
    rack_nodes: int = 4     # nodes a rack holds: 4 DGX-class systems (~10 kW each) is a 40 kW high-density rack
    pue: float = 1.4        # the hall's draw over its IT draw (Uptime Institute's surveys: 1.4-1.6 for air-cooled halls)
    # --- the platform layer: kube-state-metrics' pods and nodes (gpu_health.sim.platform). Off on both
    # profiles, so their rows are unchanged; a scenario turns it on with ``cluster: {platform: true}``.
    platform: bool = False
    routine_refusals: bool = False  # ordinary Insufficient-GPU refusals on the platform layer (sim.platform)

    @property
    def total_gpus(self) -> int:
        return sum(t.gpus * t.nodes_per_region for t in self.node_types) * len(self.regions)

    @classmethod
    def from_config(cls, config) -> "ClusterSpec":
        """A profile name (``default``, ``messy``, ``field``), or a mapping overriding fields of a profile (``profile:``,
        default ``default``); ``gpus: N`` rescales node counts."""
        if config is None:
            config = "default"
        if isinstance(config, str):
            config = {"profile": config}
        if not isinstance(config, dict):
            raise ValueError(f"cluster: expected a profile name {sorted(PROFILES)} or a mapping, got {config!r}")
        config = dict(config)
        profile = config.pop("profile", "default")
        if profile not in PROFILES:
            raise ValueError(f"cluster: unknown profile {profile!r}; known: {sorted(PROFILES)}")
        spec = PROFILES[profile]
        gpus = config.pop("gpus", None)
        known = {f.name for f in fields(cls)}
        unknown = set(config) - known
        if unknown:
            raise ValueError(f"cluster: unknown field(s) {sorted(unknown)}; known: {sorted(known | {'gpus'})}")
        if "regions" in config:
            config["regions"] = tuple(config["regions"])
        if "pool_shares" in config and isinstance(config["pool_shares"], dict):
            config["pool_shares"] = tuple(config["pool_shares"].items())
        if "node_types" in config:
            config["node_types"] = tuple(NodeType(**nt) if isinstance(nt, dict) else nt for nt in config["node_types"])
        for key in ("business_hours_utc", "uninstrumented"):
            if isinstance(config.get(key), dict):
                config[key] = tuple(config[key].items())
        if "teams" in config:
            teams = config["teams"]
            if isinstance(teams, dict):
                teams = [{"name": k, **v} for k, v in teams.items()]
            config["teams"] = tuple(t if isinstance(t, Team) else Team(**{**t, "weights": tuple(t["weights"]),
                                                                          "models": tuple(t["models"])}) for t in teams)
        if "cron" in config:
            config["cron"] = tuple(c if isinstance(c, Cron) else Cron(**c) for c in config["cron"])
        for key in ("queue_names", "evening_queue_utc"):
            if isinstance(config.get(key), dict):
                config[key] = tuple(config[key].items())
        if isinstance(config.get("exit_weights"), dict):
            config["exit_weights"] = tuple((k, tuple(v)) for k, v in config["exit_weights"].items())
        for key in ("idle_fb_leftover_mib", "node_gap_minutes"):
            if key in config:
                config[key] = tuple(config[key])
        spec = replace(spec, **config)
        names = [t.name for t in spec.teams] if spec.teams else None
        for t in spec.teams:
            if len(t.weights) != 3 or not t.models:
                raise ValueError(f"cluster: team {t.name!r} needs 3 weights (interactive, batch, distributed) and models")
        for c in spec.cron:
            if c.team not in (names or TEAMS):
                raise ValueError(f"cluster: cron team {c.team!r} is not one of the cluster's teams {names or TEAMS}")
        if gpus is not None:
            factor = float(gpus) / spec.total_gpus
            types = tuple(replace(t, nodes_per_region=max(1, round(t.nodes_per_region * factor))) for t in spec.node_types)
            spec = replace(spec, node_types=types, jobs_per_day_target=round(spec.jobs_per_day_target * factor))
        return spec


# --- the second profile: a cluster unlike the default, with the quirks of real ones -------------------------
MESSY_TEAMS = (
    # eight teams, each with a mix of instrumented deep-learning and uninstrumented tree-model work
    Team("search-ranking", (0.10, 0.16, 0.10), ("xgb-ranker", "bert-rerank"), "torch-2.12.1", sla=True, quota=0.15),
    Team("ads-ctr", (0.08, 0.20, 0.12), ("lgbm-ctr", "dlrm-ctr"), "torch-2.13.0", sla=True, quota=0.18),
    Team("recsys", (0.10, 0.12, 0.18), ("dlrm-ctr", "two-tower"), "torch-2.13.0", quota=0.15),
    Team("nlp-platform", (0.12, 0.08, 0.22), ("llm-sft", "bert-rerank"), "torch-2.13.0", quota=0.17),
    Team("vision", (0.12, 0.10, 0.14), ("vit-train", "resnet-batch"), "jax-0.10.2", quota=0.12),
    Team("forecasting", (0.08, 0.16, 0.04), ("lgbm-forecast", "tft-forecast"), "tensorflow-2.16.1", quota=0.08),
    Team("risk-tabular", (0.10, 0.14, 0.04), ("xgb-risk", "tabular-mlp"), "torch-2.12.1", sla=True, quota=0.07),
    Team("research-lab", (0.30, 0.04, 0.16), ("llm-sft", "vit-train"), "torch-2.13.0", quota=0.08),
)

MESSY = ClusterSpec(
    # other regions, other business hours (US Central 08:00 CST = 14 UTC; Singapore 09:00 SGT = 01 UTC)
    regions=("us-central", "ap-southeast"),
    business_hours_utc=(("us-central", 14), ("ap-southeast", 1)),
    # three SKUs, 8- and 16-GPU nodes: mostly 8-GPU A100 80GB (as Zhejiang Lab's 253 x 8 A100 cluster),
    # fewer H100 and a remnant of 16-GPU V100 systems -- 2 x (20 x 8 + 30 x 8 + 6 x 16) = 992 GPUs
    node_types=(replace(H100, nodes_per_region=20), A100, V100_16),
    pool_shares=(("interactive", 0.15), ("batch", 0.55), ("distributed", 0.30)),
    distributed_nodes_per_job=4,            # 32-GPU jobs (the Zhejiang Lab LLaMA-2 job: 4 servers x 8 GPUs)
    driver_version="550.90.07",
    kernel_version="5.15.0-119-generic",
    jobs_per_day_target=29_000,
    node_name="gpu-{short}-{region_short}{rack:02d}-{slot:02d}",   # rack-and-slot host names, 8 nodes a rack
    teams=MESSY_TEAMS,
    queue_per_team=True,                    # a queue (virtual cluster) per team, as Helios' 16+ VCs and Philly's 11
    fair_share=True,
    # nightly retrains at 02:00 and hourly refreshes at :05 (no public trace times them; a common cron shape)
    cron=(Cron("ads-ctr", 24, 2 * 60, 60, 3.0), Cron("search-ranking", 1, 5, 10, 1.5),
          Cron("forecasting", 24, 4 * 60, 45, 2.0)),
    # No public trace measures step-metric coverage: a third of batch jobs and a tenth of distributed jobs
    # report none (besides notebooks and tree models, which never do), so uninstrumented work runs at all hours.
    uninstrumented=(("batch", 0.35), ("distributed", 0.10)),
    # real-data/zhejianglab-a100/taskinfo: the LLaMA-2 pods started 06:13:55-06:14:11 UTC and the training loop
    # began 06:17:12 (DeepSpeed config print): ~3.3 minutes of set-up before the first step
    setup_median_s=200.0,
    component_metrics_share=0.5,            # HF Trainer's on_log (the same job) logs loss and s/it, no components
    # dcgm-exporter's default-counters.csv (real-data/fixtures/dcgm-exporter): SM_ACTIVE, ECC and the
    # clock-event bitmask are commented out, PIPE_TENSOR_ACTIVE is on -- nodes on the defaults export those nulls
    no_sm_active_share=0.4,
    no_profiling_share=0.1,                 # DCP fields off altogether (profiling module held by another tool)
    no_ecc_share=0.5,
    no_throttle_share=0.4,
    # the A100-SXM4-80GB nvidia-smi capture (MIG mode) reads power_draw N/A on its GPU instance
    no_power_temp_share=0.05,
    old_driver_share=0.2,
    old_driver_version="535.54.03",         # the driver of the A100 nvidia-smi capture
    weak_gpu_share=0.01,
    weak_gpu_bursts_per_day=6.0,
    # the Tesla T4 nvidia-smi capture: 1,032 MiB used at 0 % utilization
    idle_fb_leftover_share=0.3,
    idle_fb_leftover_mib=(300.0, 1500.0),
    # Philly's node sequence (real-data/philly): reporting machines drop and return minute to minute; Zhejiang
    # Lab's switch counters: every port silent for ~4 minutes (00:00:01-00:04:14 local) and 190 gaps > 5 s in an hour
    row_loss_rate=0.001,
    node_gaps_per_day=0.5,
    node_gap_minutes=(2, 6),
    routine_refusals=True,  # batch submissions and oversized pods the scheduler refuses (sim.platform)
)

# --- the third profile: the scheduler and collectors as the public traces show them ----------------------------
# Every number cites the file of /work/shared/real-data it comes from (README.md there describes each).
FIELD_TEAMS = (
    # virtual clusters named as Helios names its VCs (helios/earth_vc_sequence/vc*.csv), one team each
    Team("vc3sl", (0.20, 0.16, 0.10), ("vit-train", "resnet-batch"), "torch-2.12.1", quota=0.14),
    Team("vc6YE", (0.10, 0.18, 0.22), ("llm-sft", "bert-rerank"), "torch-2.13.0", quota=0.22),
    Team("vc8Sj", (0.15, 0.14, 0.16), ("dlrm-ctr", "two-tower"), "torch-2.13.0", sla=True, quota=0.16),
    Team("vcJLV", (0.15, 0.20, 0.06), ("xgb-risk", "tabular-mlp"), "torch-2.12.1", sla=True, quota=0.12),
    Team("vcMod", (0.20, 0.12, 0.30), ("llm-sft", "vit-train"), "jax-0.10.2", quota=0.24),
    Team("vcpDC", (0.20, 0.20, 0.16), ("tft-forecast", "lgbm-forecast"), "tensorflow-2.16.1", quota=0.12),
)

FIELD = ClusterSpec(
    # other regions: US Pacific (Philly's local time, philly/README) and China east, UTC+8 (Helios, Zhejiang Lab)
    regions=("us-west", "cn-east"),
    business_hours_utc=(("us-west", 16), ("cn-east", 1)),   # 08:00 PST, 09:00 CST
    # 4- and 8-GPU nodes, as Philly's fleet reports them (philly/revised_machine_list.csv: 271 4-GPU and 264 8-GPU
    # machines): 4 x A100 per node as Habrok's a100gpu nodes (fixtures/slurm/hb-jobinfo/scontrol.txt:
    # gres/gpu:a100=4), beside 8-GPU H100 systems -- 2 x (44 x 4 + 26 x 8) = 768 GPUs
    node_types=(replace(A100, gpus=4, nodes_per_region=44, short="a100gpu"),
                replace(H100, nodes_per_region=26, short="h100gpu")),
    pool_shares=(("interactive", 0.20), ("batch", 0.50), ("distributed", 0.30)),
    distributed_nodes_per_job=2,            # Philly's median multi-machine job spans 2 machines (philly_sampled_jobs.json)
    driver_version="535.54.03",             # the driver of the A100 nvidia-smi capture (fixtures/nvidia-smi-xml)
    kernel_version="4.18.0-513.el8.x86_64",
    jobs_per_day_target=22_000,
    node_name="{region_short}-{short}{n}",  # Slurm host names as Habrok's (scontrol.txt: a100gpu1 ... a100gpu6)
    teams=FIELD_TEAMS,
    # Slurm partitions by time limit, as Habrok's (sacct.txt: gpushort / gpumedium / gpulong)
    queue_names=(("interactive", "gpushort"), ("batch", "gpumedium"), ("distributed", "gpulong")),
    fair_share=True,
    # Job outcomes of GPU jobs: Helios completes 0.624, cancels 0.221, fails 0.155 (acmetrace/cluster_summary.csv,
    # helios/helios_cluster_summary.csv total); Philly, whose jobs are multi-GPU, completes 0.604, cancels 0.090 and
    # fails 0.305 (acmetrace/cluster_summary.csv). Timeouts and node failures: sacct.txt (7 TIMEOUT, 1 NODE_FAIL of
    # 100 jobs).
    exit_weights=(("batch", (0.62, 0.155, 0.16, 0.05, 0.015)),
                  ("distributed", (0.60, 0.29, 0.07, 0.02, 0.02))),
    # Failed jobs die early: 3 of the 8 FAILED jobs in sacct.txt ended after 4, 10 and 11 s; Helios' failed jobs are
    # 15.5 % of GPU jobs but hold 9.3 % of GPU time, Seren's 42.9 % and 12.4 % (acmetrace/cluster_summary.csv)
    early_fail_share=0.4,
    early_fail_within_s=300,
    # Queues that stay long every evening: Helios Earth's pending GPU jobs climb from 4.7 (08:00-09:00 local) to 8.7
    # at 17:00 and stay above 7 until 01:00 (helios/earth_vc_sequence, all 16 VCs, May 2020); Philly's median queue
    # delay is 112 min for jobs submitted at 17:00 and 62 min at 18:00, against 5-12 min at midday
    # (philly_sampled_jobs.json, submitted -> start). Demand then exceeds capacity for hours: the demand factor takes
    # the batch pool past its saturation level (jobs.POOLS) and the wait factor is Philly's evening-over-midday
    # delay. 17:00 local = 01 UTC (PST) and 09 UTC (CST).
    evening_queue_utc=(("us-west", 1), ("cn-east", 9)),
    evening_hours=7,
    evening_demand=2.5,
    evening_wait_factor=10.0,               # Philly: 112 min at 17:00 against ~10 min at midday (medians, above)
    uninstrumented=(("batch", 0.25),),
    setup_median_s=120.0,
    no_sm_active_share=0.5,                 # dcgm-exporter's default counters (fixtures/dcgm-exporter): no SM_ACTIVE,
    no_ecc_share=0.6,                       # no ECC, no clock-event bitmask
    no_throttle_share=0.5,
    old_driver_share=0.1,
    old_driver_version="525.105.17",
    idle_fb_leftover_share=0.2,             # the Tesla T4 capture: 1,032 MiB used at 0 % utilization
    # Collectors stamp the scrape instant: the GenAI per-container series are sampled every 57-60 s
    # (alibaba-clusterdata/v2026-GenAI), Zhejiang Lab's switch counters carry millisecond stamps (SaveTimeUTC);
    # Prometheus spreads its targets over the scrape interval, so each node's rows land at its own second
    scrape_offset_s=58.0,
    # Philly's reporting machines drop out minute to minute (philly/philly_node_sequence.csv: 599 minutes missing)
    row_loss_rate=0.0005,
    node_gaps_per_day=0.3,
    # Nodes change names: Philly's machine list and the GPUs its machines report disagree (cluster_machine_list.csv
    # vs revised_machine_list.csv: m0 listed with 2 GPUs reports 8); a re-imaged node returns under another name
    renamed_nodes=2,
)

PROFILES = {"default": ClusterSpec(), "messy": MESSY, "field": FIELD}

REGION_SHORT = {"us-east": "use", "eu-west": "euw", "us-central": "usc", "ap-southeast": "apse", "us-west": "usw",
                "cn-east": "cne"}


def _region_short(region: str) -> str:
    return REGION_SHORT.get(region, "".join(p[:2] for p in region.split("-")))


@dataclass
class Cluster:
    """Inventory and lanes, as flat numpy-friendly frames."""

    spec: ClusterSpec
    nodes: pd.DataFrame = field(init=False)   # node_id, region, sku, type_idx, pool, gpus
    gpus: pd.DataFrame = field(init=False)    # gpu_row, region, node_id, gpu_index, gpu_uuid, sku, type_idx, lane
    lanes: pd.DataFrame = field(init=False)   # lane, pool, region, sku, type_idx, gpus, node_ids (tuple), multi_node

    def __post_init__(self):
        self._build()

    def _build(self):
        spec = self.spec
        node_rows = []
        for region in spec.regions:
            rs = _region_short(region)
            for ti, nt in enumerate(spec.node_types):
                n = nt.nodes_per_region
                # pool assignment: contiguous blocks so distributed groups are neighbours
                bounds = np.cumsum([0] + [round(share * n) for _, share in spec.pool_shares])
                bounds[-1] = n
                for pi, (pool, _) in enumerate(spec.pool_shares):
                    for i in range(bounds[pi], bounds[pi + 1]):
                        name = spec.node_name.format(region=region, region_short=rs, short=nt.short, n=i + 1,
                                                     rack=i // 8 + 1, slot=i % 8 + 1)
                        node_rows.append((name, region, nt.sku, ti, pool, nt.gpus))
        self.nodes = pd.DataFrame(node_rows, columns=["node_id", "region", "sku", "type_idx", "pool", "gpus"])

        lanes, gpu_lane = [], {}
        for (region, ti, pool), grp in self.nodes.groupby(["region", "type_idx", "pool"], sort=False):
            nt = spec.node_types[ti]
            ids = grp["node_id"].tolist()
            if pool == "distributed":
                k = max(1, spec.distributed_nodes_per_job)
                for j in range(0, len(ids), k):
                    members = tuple(ids[j:j + k])
                    lane = len(lanes)
                    lanes.append((lane, pool, region, nt.sku, ti, nt.gpus * len(members), members, len(members) > 1))
                    for nid in members:
                        for g in range(nt.gpus):
                            gpu_lane[(nid, g)] = lane
                continue
            sizes = [1] * nt.gpus if pool == "interactive" else _batch_slices(nt.gpus)
            for nid in ids:
                g0 = 0
                for size in sizes:
                    lane = len(lanes)
                    lanes.append((lane, pool, region, nt.sku, ti, size, (nid,), False))
                    for g in range(g0, g0 + size):
                        gpu_lane[(nid, g)] = lane
                    g0 += size
        # spill lanes: one single-GPU slot per GPU of a multi-GPU lane, appended after every pool's lanes (the pools'
        # lane numbers, and so every draw keyed by them, stay as they are). They hold work only while a scheduler
        # spreads single-GPU jobs onto the free GPUs of multi-GPU slots (the ``fragmentation`` incident, jobs.py)
        spill_of, gpus_of = {}, {}
        for key, host in gpu_lane.items():
            gpus_of.setdefault(host, []).append(key)
        for lane, pool, region, sku, ti, size, _members, _multi in list(lanes):
            if pool in ("batch", "distributed") and size >= 2:
                for nid, g in gpus_of[lane]:
                    spill_of[(nid, g)] = len(lanes)
                    lanes.append((len(lanes), SPILL_POOL, region, sku, ti, 1, (nid,), False))
        self.lanes = pd.DataFrame(lanes, columns=["lane", "pool", "region", "sku", "type_idx", "gpus", "node_ids", "multi_node"])

        gpu_rows = []
        for nid, region, sku, ti, _pool, n in self.nodes.itertuples(index=False):
            for g in range(n):
                uid = stable_id(f"{nid}/{g}")
                uuid = f"GPU-{uid & 0xFFFFFFFF:08x}-{(uid >> 32) & 0xFFFF:04x}-{(uid >> 48) & 0xFFF:04x}-{g:04x}-{uid & 0xFFFFFFFFFFFF:012x}"
                gpu_rows.append((region, nid, g, uuid, sku, ti, gpu_lane[(nid, g)]))
        self.gpus = pd.DataFrame(gpu_rows, columns=["region", "node_id", "gpu_index", "gpu_uuid", "sku", "type_idx", "lane"])
        self.gpus["gpu_row"] = np.arange(len(self.gpus))
        # per GPU row, its spill lane (-1: its lane is a single GPU already)
        self.spill_lane = np.array([spill_of.get((nid, g), -1) for nid, g in zip(self.gpus["node_id"], self.gpus["gpu_index"])],
                                   dtype=np.int64)
        self.node_index = {nid: i for i, nid in enumerate(self.nodes["node_id"])}
        self.gpus["node_row"] = self.gpus["node_id"].map(self.node_index).to_numpy()
        self._quirks()

    def _quirks(self):
        """Which nodes' collectors miss which fields, which nodes run the old driver, which GPUs are weak.

        Keyed by the node name (GPU UUID) only, so a node keeps its quirks whatever the scenario, window or seed.
        """
        spec = self.spec
        key = np.array([stable_id(n) for n in self.nodes["node_id"]], dtype=np.int64)
        u = lambda salt: uniform(_QUIRK_SEED, salt, key)  # noqa: E731
        prof = u(1)
        self.nodes["prof_tensor"] = prof >= spec.no_profiling_share
        self.nodes["prof_sm"] = prof >= spec.no_profiling_share + spec.no_sm_active_share
        self.nodes["ecc"] = u(2) >= spec.no_ecc_share
        self.nodes["throttle"] = u(3) >= spec.no_throttle_share
        self.nodes["power_temp"] = u(4) >= spec.no_power_temp_share
        self.nodes["old_driver"] = u(5) < spec.old_driver_share
        gkey = np.array([stable_id(x) for x in self.gpus["gpu_uuid"]], dtype=np.int64)
        self.gpus["weak"] = uniform(_QUIRK_SEED, 6, gkey) < spec.weak_gpu_share

    def inventory(self) -> pd.DataFrame:
        """Installed GPUs per region x SKU."""
        return self.gpus.groupby(["region", "sku"]).size().rename("capacity_gpus").reset_index()


def _batch_slices(gpus: int) -> list[int]:
    """How a batch node is cut: mostly small slices, one larger one."""
    if gpus >= 16:
        return [4, 4, 2, 2, 1, 1, 1, 1]
    if gpus >= 8:
        return [2, 2, 1, 1, 1, 1]
    return [1] * gpus
