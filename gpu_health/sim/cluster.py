"""The simulated cluster: regions, node types, GPU inventory and scheduling lanes.

The default models the brief's cluster: two regions, 80 DGX nodes, 1,200 GPUs on
two SKUs (8-GPU DGX H100 and 16-GPU DGX-2 V100 systems). A scenario's
``cluster:`` mapping overrides any field; ``gpus: 100000`` scales the node
counts to the requested size (benchmarks).

Scheduling is modelled with *lanes*: a lane is a fixed group of GPUs that runs
one job at a time (a single GPU for notebooks, a slice of a node for batch, a
group of whole nodes for distributed training). Every node belongs to one pool
(interactive, batch, distributed) and is cut into that pool's lanes.
"""

from dataclasses import dataclass, field, fields, replace

import numpy as np
import pandas as pd

from gpu_health.sim.hashing import stable_id


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

    @property
    def total_gpus(self) -> int:
        return sum(t.gpus * t.nodes_per_region for t in self.node_types) * len(self.regions)

    @classmethod
    def from_config(cls, config) -> "ClusterSpec":
        """``default``, or a mapping overriding fields (``gpus: N`` rescales node counts)."""
        spec = cls()
        if config in (None, "default"):
            return spec
        if not isinstance(config, dict):
            raise ValueError(f"cluster: expected 'default' or a mapping, got {config!r}")
        config = dict(config)
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
        spec = replace(spec, **config)
        if gpus is not None:
            factor = float(gpus) / spec.total_gpus
            types = tuple(replace(t, nodes_per_region=max(1, round(t.nodes_per_region * factor))) for t in spec.node_types)
            spec = replace(spec, node_types=types, jobs_per_day_target=round(spec.jobs_per_day_target * factor))
        return spec


REGION_SHORT = {"us-east": "use", "eu-west": "euw"}


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
                        node_rows.append((f"{rs}-{nt.short}-{i + 1:03d}", region, nt.sku, ti, pool, nt.gpus))
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
        self.lanes = pd.DataFrame(lanes, columns=["lane", "pool", "region", "sku", "type_idx", "gpus", "node_ids", "multi_node"])

        gpu_rows = []
        for nid, region, sku, ti, _pool, n in self.nodes.itertuples(index=False):
            for g in range(n):
                uid = stable_id(f"{nid}/{g}")
                uuid = f"GPU-{uid & 0xFFFFFFFF:08x}-{(uid >> 32) & 0xFFFF:04x}-{(uid >> 48) & 0xFFF:04x}-{g:04x}-{uid & 0xFFFFFFFFFFFF:012x}"
                gpu_rows.append((region, nid, g, uuid, sku, ti, gpu_lane[(nid, g)]))
        self.gpus = pd.DataFrame(gpu_rows, columns=["region", "node_id", "gpu_index", "gpu_uuid", "sku", "type_idx", "lane"])
        self.gpus["gpu_row"] = np.arange(len(self.gpus))
        self.node_index = {nid: i for i, nid in enumerate(self.nodes["node_id"])}
        self.gpus["node_row"] = self.gpus["node_id"].map(self.node_index).to_numpy()

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
