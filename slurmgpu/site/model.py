"""The site model: frozen dataclasses for a cluster's partitions, node types, NICs, containers and
policy, read-only once loaded. Everything above `site` reads a cluster through these types."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, Mapping, Optional, Tuple

from ..errors import ConfigError, Issue
from .affinity import AffinityMap
from .calibration import Calibration

LINKS = ("nvlink", "xgmi", "pcie")


VENDORS = ("nvidia", "amd")


GPU_REQUESTS = ("gpus-per-node", "gres")


TOPOLOGIES = ("flat", "tree", "block")


# shadow: judge and log (AdminComment too) what enforce would do, tell the user nothing
POLICY_MODES = ("enforce", "warn", "shadow", "off")
# SitePolicy.script_check: where the batch script's shell analysis runs (docs/admin-filter.md)
SCRIPT_CHECKS = ("submit", "batch-step")
MNNVL_MODES = ("auto", "on", "off")  # NodeType.mnnvl (the NCCL settings per mode: slurmgpu.nccl.fabric MNNVL_TABLE)


DEFAULT_SITE = "dgx-h100"


@dataclass(frozen=True)
class Nic:
    """One network port of a node type (name, port, link layer, speed, role)."""

    name: str
    port: int = 1
    link_layer: str = "infiniband"  # infiniband | ethernet
    gbps: float = 0.0
    role: str = "compute"  # compute | storage

    def to_dict(self) -> Dict[str, Any]:
        return {
            "name": self.name,
            "port": self.port,
            "link_layer": self.link_layer,
            "gbps": self.gbps,
            "role": self.role,
        }


@dataclass(frozen=True)
class NodeType:
    """A kind of node: its GPUs, the NVLink domain, CPUs, memory and fabric."""

    name: str
    gpus: int
    gpu_model: str
    vendor: str
    gpu_memory_gb: float
    bf16_tflops: float
    link: str  # nvlink | xgmi | pcie
    link_gbs: float  # per-GPU intra-domain bandwidth, GB/s, both directions
    nvlink_domain: int  # GPUs that share the fast link (may span nodes)
    cpus: int
    memory_gb: float
    fabric: str
    nics: Tuple[Nic, ...] = ()
    socket_ifname: Optional[str] = None
    gres_type: Optional[str] = None
    env: Mapping[str, str] = field(default_factory=dict)
    roce_gid_index: Optional[int] = None
    roce_traffic_class: Optional[int] = None
    # multi-node NVLink (nvlink_domain > gpus): "on" = IMEX channels are set up, NCCL must use the
    # rack's NVLink across trays; "off" = no IMEX, NCCL stays on the network; "auto" = NCCL decides
    mnnvl: str = "auto"
    # GPU -> NUMA node -> CPUs -> nearest NIC(s) (site/affinity.py); None: the site says nothing
    affinity: Optional[AffinityMap] = None
    # Slurm 25.11+ with switch/nvidia_imex and topology/block: a job of several segments asks for
    # one IMEX channel per segment (--network=unique-channel-per-segment) instead of one per job
    imex_per_segment: bool = False

    @property
    def multi_node_nvlink(self) -> bool:
        return self.nvlink_domain > self.gpus

    @property
    def compute_nics(self) -> Tuple[Nic, ...]:
        return tuple(n for n in self.nics if n.role == "compute")

    @property
    def fabric_gbps(self) -> float:
        """Inter-node injection bandwidth of one node, Gb/s (compute NICs only)."""
        return sum(n.gbps for n in self.compute_nics)

    @property
    def domain_nodes(self) -> int:
        """Nodes per NVLink domain: 1 unless the domain spans trays (NVL72: 18)."""
        return max(1, self.nvlink_domain // self.gpus)

    def to_dict(self) -> Dict[str, Any]:
        return {
            "gpus": self.gpus,
            "gpu_model": self.gpu_model,
            "vendor": self.vendor,
            "gpu_memory_gb": self.gpu_memory_gb,
            "bf16_tflops": self.bf16_tflops,
            "link": self.link,
            "link_gbs": self.link_gbs,
            "nvlink_domain": self.nvlink_domain,
            "cpus": self.cpus,
            "memory_gb": self.memory_gb,
            "fabric": self.fabric,
            "nics": [n.to_dict() for n in self.nics],
            "socket_ifname": self.socket_ifname,
            "gres_type": self.gres_type,
            "env": dict(self.env),
            "roce_gid_index": self.roce_gid_index,
            "roce_traffic_class": self.roce_traffic_class,
            "mnnvl": self.mnnvl,
            "affinity": self.affinity.to_dict() if self.affinity is not None else None,
            "imex_per_segment": self.imex_per_segment,
        }


@dataclass(frozen=True)
class Partition:
    """A Slurm partition of one node type, with its size and job limits."""

    name: str
    node_type: str
    nodes: int
    max_nodes_per_job: int
    constraint: Optional[str] = None
    exclusive: bool = True
    policy: Optional[str] = None  # overrides SitePolicy.mode for this partition
    # IB leaf switch -> its nodes (expanded), for topology/tree and gen's --switches=1 hint
    leaf_switches: Mapping[str, Tuple[str, ...]] = field(default_factory=dict)

    @property
    def largest_leaf(self) -> int:
        """Nodes under the largest listed leaf switch (0: none listed)."""
        return max((len(m) for m in self.leaf_switches.values()), default=0)

    def to_dict(self) -> Dict[str, Any]:
        return {
            "node_type": self.node_type,
            "nodes": self.nodes,
            "max_nodes_per_job": self.max_nodes_per_job,
            "constraint": self.constraint,
            "exclusive": self.exclusive,
            "policy": self.policy,
            "leaf_switches": {k: list(v) for k, v in self.leaf_switches.items()},
        }


@dataclass(frozen=True)
class Container:
    """The site's default container runtime, image and mounts."""

    runtime: str = "none"
    image: Optional[str] = None
    mounts: Tuple[str, ...] = ()

    def to_dict(self) -> Dict[str, Any]:
        return {"runtime": self.runtime, "image": self.image, "mounts": list(self.mounts)}


@dataclass(frozen=True)
class SitePolicy:
    """The submit filter's switches: mode, allowed launchers, exemptions."""

    mode: str = "enforce"
    launchers: Mapping[str, str] = field(default_factory=dict)
    exempt_users: Tuple[str, ...] = ()
    exempt_accounts: Tuple[str, ...] = ()
    exempt_qos: Tuple[str, ...] = ()
    # AccountingStorageEnforce words of the cluster (associations, qos, ...): account / QOS
    # exemptions are honoured only where Slurm itself refuses an account or QOS the user lacks
    accounting_enforce: Tuple[str, ...] = ()
    on_internal_error: str = "accept"
    # per kind of communication group (tp, cp, ep): enforce | warn | off, at most as strict as mode
    groups: Mapping[str, str] = field(default_factory=dict)
    # Slurm 25.11+: job_submit sets a missing --segment instead of rejecting (AdminComment says so)
    repair_segment: bool = False
    # multi-node GPU jobs whose steps bind no rank, on nodes of several NUMA nodes: warn | off |
    # auto (warn where the node type's affinity map is verified, i.e. read from the site's own nodes)
    unbound_ranks: str = "auto"
    # job_submit: seconds between the summary lines of the jobs it accepts from their fields alone
    # (one node wherever they may run); 0: one line per job. A line per submission is the largest
    # part of what such a job costs the controller (docs/admin-filter.md, "Cost").
    single_node_log_s: int = 60
    # where the batch script's shell analysis runs: "submit" (job_submit, in slurmctld: a refusal
    # at submission) or "batch-step" (the SPANK plugin at the batch step, on the job's first node:
    # slurmctld reads no script, arguments or environment of a job it does not run on one node,
    # and a refusal fails the job when it starts). batch-step needs the plugin on every node.
    script_check: str = "submit"

    def to_dict(self) -> Dict[str, Any]:
        return {
            "mode": self.mode,
            "single_node_log_s": self.single_node_log_s,
            "script_check": self.script_check,
            "groups": dict(self.groups),
            "repair_segment": self.repair_segment,
            "unbound_ranks": self.unbound_ranks,
            "launchers": dict(self.launchers),
            "exempt_users": list(self.exempt_users),
            "exempt_accounts": list(self.exempt_accounts),
            "exempt_qos": list(self.exempt_qos),
            "accounting_enforce": list(self.accounting_enforce),
            "on_internal_error": self.on_internal_error,
        }


@dataclass(frozen=True)
class SitePreflight:
    """Thresholds `slurmgpu preflight` applies on this site's nodes."""

    min_bandwidth_fraction: float = 0.7  # --bandwidth fails below this share of the links' bus bandwidth
    min_free_gb: float = 10.0  # free space the checkpoint directory needs

    def to_dict(self) -> Dict[str, Any]:
        return {"min_bandwidth_fraction": self.min_bandwidth_fraction, "min_free_gb": self.min_free_gb}


@dataclass(frozen=True)
class SiteRequeue:
    """What `--requeue` needs from the site to choose the checkpoint signal's lead time.

    kill_wait: slurm.conf KillWait, the seconds between SIGTERM and SIGKILL when Slurm ends or
    preempts a job (Slurm's default is 30); checkpoint_gbps: GB/s a job can write to the checkpoint
    file system (None: unknown, the job layer assumes a default and says so).
    """

    kill_wait: int = 30
    checkpoint_gbps: Optional[float] = None
    # Slurm 25.11+ with SlurmctldParameters=enable_expedited_requeue: generated jobs ask for
    # --requeue=expedite (requeued at once, at the highest priority); elsewhere Slurm refuses it
    expedite: bool = False

    def to_dict(self) -> Dict[str, Any]:
        return {"kill_wait": self.kill_wait, "checkpoint_gbps": self.checkpoint_gbps, "expedite": self.expedite}


# Which node of a job holds which rank (plan/placement.py, "Node-rank order"): host-name order,
# srun tasks in topology order (26.05's default), or all ranks in topology order
# (TopologyParam=BlockAsNodeRank); and the orders under which ranks numbered by each source
# (srun task, SLURM_NODEID, torchrun's host-name rendezvous) walk the nodes block by block.
NODE_RANK_ORDERS = ("name", "tasks-block", "block")
_FOLLOW_BLOCKS = {"procid": ("tasks-block", "block"), "nodeid": ("block",), "hostname": ()}


@dataclass(frozen=True)
class Site:
    """A whole cluster: partitions, node types, defaults, policy and preflight settings."""

    name: str
    description: str
    source: str  # file it was loaded from
    default_partition: str
    partitions: Mapping[str, Partition]
    node_types: Mapping[str, NodeType]
    slurm_version: Optional[str] = None
    account: Optional[str] = None
    qos: Optional[str] = None
    gpu_request: str = "gpus-per-node"
    topology: str = "flat"
    # which node holds which rank (plan/placement.py NODE_RANK_ORDERS), and whether each topology
    # block is a run of consecutive host names; both matter only with topology: block
    node_rank_order: str = "name"
    blocks_follow_names: bool = True
    container: Container = Container()
    scratch: Optional[str] = None
    checkpoint_dir: Optional[str] = None
    template_dir: Optional[str] = None
    policy: SitePolicy = SitePolicy()
    preflight: SitePreflight = SitePreflight()
    requeue: SiteRequeue = SiteRequeue()
    runs_file: Optional[str] = None  # paths.runs: where `slurmgpu report --record` appends (site.calibration)
    calibration_file: Optional[str] = None  # paths.calibration: the fitted efficiency `calibrate` writes
    calibration: Optional[Calibration] = None  # attached by resolve_site when the file exists

    def partition(self, name: Optional[str] = None) -> Partition:
        name = name or self.default_partition
        try:
            return self.partitions[name]
        except KeyError:
            raise ConfigError(
                [
                    Issue(
                        self.source,
                        None,
                        None,
                        "partitions",
                        "site '%s' has no partition '%s' (it has: %s)" % (self.name, name, ", ".join(self.partitions)),
                    )
                ]
            ) from None

    def ranks_follow_blocks(self, source: str) -> bool:
        """Whether ranks numbered by `source` (procid | nodeid | hostname) fill a job's nodes block by
        block, so a --segment keeps the groups the placement proof puts in one segment inside one
        NVLink block: everywhere each block is a run of consecutive host names; where the names
        interleave, only under the node-rank orders that follow the topology."""
        return self.blocks_follow_names or self.node_rank_order in _FOLLOW_BLOCKS.get(source, ())

    def node_type_of(self, partition: Optional[str] = None) -> NodeType:
        return self.node_types[self.partition(partition).node_type]

    def to_dict(self) -> Dict[str, Any]:
        return {
            "name": self.name,
            "description": self.description,
            "source": self.source,
            "slurm_version": self.slurm_version,
            "default_partition": self.default_partition,
            "account": self.account,
            "qos": self.qos,
            "gpu_request": self.gpu_request,
            "topology": self.topology,
            "node_rank_order": self.node_rank_order,
            "blocks_follow_names": self.blocks_follow_names,
            "partitions": {k: v.to_dict() for k, v in self.partitions.items()},
            "node_types": {k: v.to_dict() for k, v in self.node_types.items()},
            "container": self.container.to_dict(),
            "scratch": self.scratch,
            "checkpoint_dir": self.checkpoint_dir,
            "template_dir": self.template_dir,
            "policy": self.policy.to_dict(),
            "preflight": self.preflight.to_dict(),
            "requeue": self.requeue.to_dict(),
            "runs_file": self.runs_file,
            "calibration_file": self.calibration_file,
            "calibration": self.calibration.to_dict() if self.calibration is not None else None,
        }
