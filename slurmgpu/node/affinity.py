"""Where a node's GPUs and NICs sit (NUMA nodes, CPUs) and what one rank really runs on.

Two users: `probe` (the node's GPU -> NUMA -> CPUs -> NIC map, for `discover --probe` and the site
map) and `preflight --ranks` (each rank's real CPU affinity, memory policy, its GPU's NUMA node and
the NIC NCCL will use, against the plan the generator wrote from the site map).

Everything is read from sysfs (`<sysfs>/devices/system/node/node*/cpulist`, the PCI devices'
`numa_node` and `local_cpulist`, `class/infiniband/*/device`), so a recorded tree drives the same
code in tests; the process's own affinity and memory policy come from the kernel
(`sched_getaffinity`, `get_mempolicy`) and are parameters of the pure checks.
"""

from __future__ import annotations

import os
import platform
import re
import shutil
from dataclasses import dataclass
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from ..site import NodeType, RankPlan, format_cpulist, parse_cpulist

# PCI vendor ids of GPUs (class 0x03xxxx): NVIDIA, AMD/ATI. AMD's CPU functions are 0x1022.
GPU_VENDORS = {"0x10de": "nvidia", "0x1002": "amd"}


def _read(path: str) -> Optional[str]:
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return fh.read().strip()
    except OSError:
        return None


def _natural(s: str) -> Tuple:
    return tuple(int(t) if t.isdigit() else t for t in re.split(r"(\d+)", s))


def _cpus(text: Optional[str]) -> Tuple[int, ...]:
    try:
        return parse_cpulist(text or "")
    except ValueError:
        return ()


def _numa(text: Optional[str]) -> Optional[int]:
    """A sysfs numa_node value; -1 (no NUMA information, e.g. single-node machines and VMs) is None."""
    if text is None or not text.lstrip("-").isdigit() or int(text) < 0:
        return None
    return int(text)


def read_numa_nodes(sysfs: str) -> Dict[int, Tuple[int, ...]]:
    """NUMA node -> its CPUs, CPU-less nodes included (GPU memory on Grace without CDMM)."""
    base = os.path.join(sysfs, "devices", "system", "node")
    out: Dict[int, Tuple[int, ...]] = {}
    try:
        names = os.listdir(base)
    except OSError:
        return out
    for name in sorted(names, key=_natural):
        m = re.fullmatch(r"node(\d+)", name)
        if m:
            out[int(m.group(1))] = _cpus(_read(os.path.join(base, name, "cpulist")))
    return out


@dataclass(frozen=True)
class PciPlace:
    """A PCI device's place: its bus address, sysfs NUMA node and nearest CPUs."""

    address: str  # 0000:18:00.0 (lower case, 4-digit domain)
    numa: Optional[int]
    local_cpus: Tuple[int, ...]

    def cpu_node(self, numa_nodes: Mapping[int, Tuple[int, ...]]) -> Optional[int]:
        """The NUMA node with CPUs next to the device: its own, or (when that one has no CPUs, or none
        is given) the node whose CPUs its local_cpulist names."""
        if self.numa is not None and numa_nodes.get(self.numa):
            return self.numa
        local = set(self.local_cpus)
        if local:
            hits = [n for n, c in sorted(numa_nodes.items()) if c and set(c) <= local]
            if len(hits) == 1:
                return hits[0]
            hits = [n for n, c in sorted(numa_nodes.items()) if c and local <= set(c)]
            if len(hits) == 1:
                return hits[0]
        if self.numa is None and len([c for c in numa_nodes.values() if c]) == 1:
            return next(n for n, c in sorted(numa_nodes.items()) if c)
        return None


def _place(devdir: str, address: str) -> PciPlace:
    return PciPlace(
        address=address.lower(),
        numa=_numa(_read(os.path.join(devdir, "numa_node"))),
        local_cpus=_cpus(_read(os.path.join(devdir, "local_cpulist"))),
    )


def read_gpu_places(sysfs: str) -> List[Tuple[str, PciPlace]]:
    """(vendor, place) of every GPU PCI function, in bus order: the order nvidia-smi, rocm-smi and
    (with whole-node jobs) CUDA number them."""
    base = os.path.join(sysfs, "bus", "pci", "devices")
    out = []
    try:
        names = os.listdir(base)
    except OSError:
        return []
    for addr in sorted(names):
        d = os.path.join(base, addr)
        vendor = (_read(os.path.join(d, "vendor")) or "").lower()
        klass = (_read(os.path.join(d, "class")) or "").lower()
        if vendor in GPU_VENDORS and klass.startswith("0x03"):
            out.append((GPU_VENDORS[vendor], _place(d, addr)))
    return out


def read_nic_place(sysfs: str, nic: str) -> Optional[PciPlace]:
    """Where an RDMA device (class/infiniband/NAME) or a Slingshot NIC (class/cxi/NAME) sits."""
    for cls in ("infiniband", "cxi"):
        d = os.path.join(sysfs, "class", cls, nic, "device")
        if os.path.isdir(d):
            real = os.path.realpath(d)
            addr = os.path.basename(real) if re.fullmatch(r"[0-9a-fA-F]{4}:.*", os.path.basename(real)) else ""
            return _place(d, addr)
    return None


def read_nic_state(sysfs: str, nic: str) -> Optional[str]:
    """The first port's state (ACTIVE, DOWN, ...) of an RDMA device; None if it has no ports here."""
    ports = os.path.join(sysfs, "class", "infiniband", nic, "ports")
    try:
        first = sorted(os.listdir(ports), key=_natural)[0]
    except (OSError, IndexError):
        return None
    return (_read(os.path.join(ports, first, "state")) or "").split(":")[-1].strip() or None


# ---------------------------------------------------------------------------
# The process itself

MPOL_NAMES = {0: "default", 1: "preferred", 2: "bind", 3: "interleave", 4: "local", 5: "preferred-many"}
_SYS_GET_MEMPOLICY = {"x86_64": 239, "aarch64": 236, "ppc64le": 260}


def memory_policy() -> Tuple[str, Tuple[int, ...]]:
    """(mode, nodes) of this thread's NUMA memory policy (get_mempolicy(2)); ("unknown", ()) where the
    call is not available."""
    import ctypes

    nr = _SYS_GET_MEMPOLICY.get(platform.machine())
    if nr is None:
        return "unknown", ()
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        mode = ctypes.c_int(0)
        words = 16  # 1024 nodes
        mask = (ctypes.c_ulong * words)()
        rc = libc.syscall(nr, ctypes.byref(mode), mask, ctypes.c_ulong(words * 64), None, ctypes.c_ulong(0))
    except (OSError, AttributeError):
        return "unknown", ()
    if rc != 0:
        return "unknown", ()
    nodes = tuple(i * 64 + b for i in range(words) for b in range(64) if mask[i] >> b & 1)
    name = MPOL_NAMES.get(mode.value & 0xFFFF, "mode %d" % mode.value)
    return name, nodes


def mems_allowed() -> Tuple[int, ...]:
    """NUMA nodes this process may allocate on (its cpuset's mems, /proc/self/status)."""
    text = _read("/proc/self/status") or ""
    m = re.search(r"^Mems_allowed_list:\s*(\S+)", text, re.M)
    return _cpus(m.group(1)) if m else ()


@dataclass(frozen=True)
class RankFacts:
    """What one task of the rank preflight step found about itself and its GPU."""

    node: str
    local: int  # SLURM_LOCALID
    rank: int  # SLURM_PROCID
    cpus: Tuple[int, ...]  # sched_getaffinity(0)
    mempolicy: Tuple[str, Tuple[int, ...]]  # (mode, nodes)
    mems: Tuple[int, ...]  # Mems_allowed
    numa_nodes: Mapping[int, Tuple[int, ...]]  # the node's NUMA nodes -> CPUs
    gpu: Optional[PciPlace]  # the rank's GPU (bus order index = local rank), None: no GPU found
    gpus_found: int
    nic_places: Mapping[str, Optional[PciPlace]]  # planned NICs -> where they are (None: absent)
    nic_states: Mapping[str, Optional[str]]
    tools: Mapping[str, bool]  # binding prerequisites present (numactl, libnuma)
    visible: str = ""  # CUDA_VISIBLE_DEVICES / ROCR_VISIBLE_DEVICES as the task got them
    ib_hca: str = ""  # NCCL_IB_HCA as the task got it


# the tool each launcher's own binding needs on the node (checked where the preflight runs)
TOOLS = {"torchrun": "numactl", "deepspeed": "numactl", "vllm": "numactl", "sglang": "libnuma"}


def _have_libnuma() -> bool:
    import ctypes.util

    return ctypes.util.find_library("numa") is not None


def gather_rank_facts(
    environ: Mapping[str, str],
    sysfs: str,
    plan: Optional[RankPlan],
    node: str,
    how: str,
    affinity: Optional[Callable[[], Tuple[int, ...]]] = None,
) -> RankFacts:
    """This task's facts (the kernel's answers, the node's sysfs or a recorded tree)."""
    local = int(environ.get("SLURM_LOCALID", "0") or 0)
    rank = int(environ.get("SLURM_PROCID", "0") or 0)
    cpus = tuple(sorted(affinity() if affinity else os.sched_getaffinity(0)))
    gpus = read_gpu_places(sysfs)
    nics = plan.nics if plan is not None else ()
    tool = TOOLS.get(how)
    tools: Dict[str, bool] = {}
    if tool == "numactl":
        tools[tool] = shutil.which("numactl", path=environ.get("PATH")) is not None
    elif tool == "libnuma":
        tools[tool] = _have_libnuma()
    return RankFacts(
        node=node,
        local=local,
        rank=rank,
        cpus=cpus,
        mempolicy=memory_policy(),
        mems=mems_allowed(),
        numa_nodes=read_numa_nodes(sysfs),
        gpu=gpus[local][1] if local < len(gpus) else None,
        gpus_found=len(gpus),
        nic_places={n: read_nic_place(sysfs, n) for n in nics},
        nic_states={n: read_nic_state(sysfs, n) for n in nics},
        tools=tools,
        visible=environ.get("CUDA_VISIBLE_DEVICES") or environ.get("ROCR_VISIBLE_DEVICES") or "",
        ib_hca=environ.get("NCCL_IB_HCA", ""),
    )


# ---------------------------------------------------------------------------
# The checks (pure: facts + plan -> findings)


@dataclass(frozen=True)
class Finding:
    status: str  # fail | warn | ok
    found: str
    expected: str
    fix: str = ""


def check_rank(
    facts: RankFacts, plan: Optional[RankPlan], how: str, exact: bool, nt: NodeType, site: str
) -> List[Finding]:
    """The rank's CPUs, memory policy, GPU NUMA node and NIC against the plan; each mismatch with its fix."""
    who = "rank %d (local %d)" % (facts.rank, facts.local)
    if plan is None:
        return [
            Finding(
                "fail",
                "%s: no GPU %d in the site's map" % (who, facts.local),
                "one task per GPU (%d per node)" % nt.gpus,
                "run the rank step with --ntasks-per-node=%d, or fix node_types.%s.affinity in the site config"
                % (nt.gpus, nt.name),
            )
        ]
    out: List[Finding] = []
    real_node_cpus = facts.numa_nodes.get(plan.numa, ()) if plan.numa is not None else ()
    where = "node_types.%s.affinity in site %s" % (nt.name, site)
    cpus = format_cpulist(facts.cpus)
    # 1. the CPUs the rank really has
    if exact and plan.cpus:
        if set(facts.cpus) != set(plan.cpus):
            bind_fix = (
                "Slurm did not apply the job's --cpu-bind=mask_cpu: the cluster's TaskPlugin needs task/affinity "
                'or task/cgroup (`scontrol show config | grep TaskPlugin`; srun then warns "lacks support for cpu '
                'binding"), and the step every CPU of the node (--cpus-per-task %d with one task per GPU)'
                % (nt.cpus // max(1, nt.gpus))
            )
            out.append(
                Finding(
                    "fail",
                    "%s: CPUs %s" % (who, cpus),
                    "CPUs %s (GPU %d, NUMA node %s)" % (plan.cpulist, plan.gpu, plan.numa),
                    bind_fix,
                )
            )
    elif how == "srun" and plan.numa is not None and real_node_cpus:
        if not set(facts.cpus) <= set(real_node_cpus):
            out.append(
                Finding(
                    "fail",
                    "%s: CPUs %s" % (who, cpus),
                    "CPUs of NUMA node %d (%s)" % (plan.numa, format_cpulist(real_node_cpus)),
                    "Slurm did not apply --cpu-bind=map_ldom: check TaskPlugin (task/affinity) and that the job has "
                    "whole nodes",
                )
            )
    elif plan.cpus and not set(plan.cpus) <= set(facts.cpus):
        out.append(
            Finding(
                "fail",
                "%s: the step may use CPUs %s" % (who, cpus),
                "room for CPUs %s (GPU %d's NUMA node %s), where %s binds the worker"
                % (plan.cpulist, plan.gpu, plan.numa, how),
                "the launcher can only bind inside the CPUs Slurm gives the task: ask for whole nodes "
                "(--exclusive, --cpus-per-task covering the node)",
            )
        )
    # 2. the map against the node: its NUMA node's CPUs must be the map's
    if plan.numa is not None and facts.numa_nodes:
        if not real_node_cpus:
            out.append(
                Finding(
                    "fail",
                    "%s: NUMA node %d has no CPUs here (nodes with CPUs: %s)"
                    % (who, plan.numa, ", ".join(str(n) for n, c in sorted(facts.numa_nodes.items()) if c) or "none"),
                    "NUMA node %d with CPUs %s" % (plan.numa, plan.cpulist),
                    "the site map names a node without CPUs (on Grace without CDMM the GPU's own memory node): "
                    "correct %s (`slurmgpu probe` on this node prints the map)" % where,
                )
            )
        elif plan.cpus and not set(plan.cpus) <= set(real_node_cpus):
            out.append(
                Finding(
                    "fail",
                    "%s: NUMA node %d has CPUs %s" % (who, plan.numa, format_cpulist(real_node_cpus)),
                    "CPUs %s on NUMA node %d (site map)" % (plan.cpulist, plan.numa),
                    "the site map's CPU list is wrong for this node: correct %s (`slurmgpu probe` on this node "
                    "prints the map)" % where,
                )
            )
    # 3. the GPU's NUMA node
    if facts.gpu is None:
        out.append(
            Finding(
                "warn",
                "%s: no GPU %d among the node's PCI devices (%d found)" % (who, facts.local, facts.gpus_found),
                "GPU %d on NUMA node %s" % (plan.gpu, plan.numa),
                "the GPU's NUMA node was not checked (no GPU visible in sysfs here)",
            )
        )
    else:
        gnode = facts.gpu.cpu_node(facts.numa_nodes)
        if plan.numa is not None and gnode is not None and gnode != plan.numa:
            out.append(
                Finding(
                    "fail",
                    "%s: GPU %d (%s) sits on NUMA node %d" % (who, plan.gpu, facts.gpu.address, gnode),
                    "NUMA node %d (site map)" % plan.numa,
                    "the rank would run on the far socket: correct %s (GPU %d: numa: %d)" % (where, plan.gpu, gnode),
                )
            )
        elif how == "torchrun" and facts.gpu.numa is not None and not facts.numa_nodes.get(facts.gpu.numa):
            out.append(
                Finding(
                    "fail",
                    "%s: GPU %d's PCI numa_node is %d, which has no CPUs" % (who, plan.gpu, facts.gpu.numa),
                    "a NUMA node with CPUs (torchrun --numa-binding reads this file)",
                    "torch would bind the worker to no CPU: use launcher srun (it binds by the site map) here",
                )
            )
    # 4. memory policy
    mode, nodes = facts.mempolicy
    if (
        plan.numa is not None
        and mode in ("bind", "preferred", "preferred-many", "interleave")
        and plan.numa not in nodes
    ):
        out.append(
            Finding(
                "fail",
                "%s: memory policy %s to NUMA node %s" % (who, mode, format_cpulist(nodes) or "-"),
                "memory on NUMA node %d (or the default local policy)" % plan.numa,
                "drop the numactl --membind/--preferred (or srun --mem-bind) that sends memory away from the GPU",
            )
        )
    if plan.numa is not None and facts.mems and plan.numa not in facts.mems:
        out.append(
            Finding(
                "fail",
                "%s: cpuset allows memory on NUMA node %s only" % (who, format_cpulist(facts.mems)),
                "NUMA node %d among the allowed memory nodes" % plan.numa,
                "the job's cpuset keeps memory off the GPU's node: ask for whole nodes (--exclusive)",
            )
        )
    # 5. the NIC NCCL will use
    for nic in plan.nics[:1]:
        place = facts.nic_places.get(nic)
        state = facts.nic_states.get(nic)
        if place is None:
            out.append(
                Finding(
                    "fail" if nt.fabric in ("infiniband", "roce") else "warn",
                    "%s: NIC %s not found" % (who, nic),
                    "NIC %s next to GPU %d" % (nic, plan.gpu),
                    "the site map names a NIC this node lacks: check `ibv_devinfo -l` and %s" % where,
                )
            )
            continue
        if state is not None and state.upper() != "ACTIVE":
            out.append(
                Finding(
                    "fail", "%s: NIC %s is %s" % (who, nic, state), "NIC %s ACTIVE" % nic,
                    "the GPU's NIC is down: NCCL would cross the socket to another one; --exclude this node",
                )
            )  # fmt: skip
        nnode = place.cpu_node(facts.numa_nodes)
        if plan.numa is not None and nnode is not None and nnode != plan.numa:
            out.append(
                Finding(
                    "warn",
                    "%s: NIC %s sits on NUMA node %d" % (who, nic, nnode),
                    "NIC on the GPU's NUMA node %d" % plan.numa,
                    "the map's nearest NIC for GPU %d is on another socket: correct its nics in %s" % (plan.gpu, where),
                )
            )
        if facts.ib_hca and nt.fabric in ("infiniband", "roce"):
            from ..nccl import parse_devlist

            dl = parse_devlist(facts.ib_hca)
            if not dl.problems and not dl.matches(nic):
                out.append(
                    Finding(
                        "fail",
                        "%s: NCCL_IB_HCA=%s leaves out %s" % (who, facts.ib_hca, nic),
                        "GPU %d's NIC %s among NCCL's devices" % (plan.gpu, nic),
                        "NCCL would send this GPU's traffic through a NIC on another switch or socket: list %s in "
                        "NCCL_IB_HCA (the generated script's value comes from the site)" % nic,
                    )
                )
    # 6. the launcher's own binding needs its tool where it runs
    for tool, present in facts.tools.items():
        if not present:
            out.append(
                Finding(
                    "warn",
                    "%s: %s not found here" % (who, tool),
                    "%s for %s's binding" % (tool, how),
                    "the launch environment (the container image, if any) needs %s, or %s fails to bind" % (tool, how),
                )
            )
    if not any(f.status in ("fail", "warn") for f in out):
        nic = (", NIC %s" % plan.nics[0]) if plan.nics else ""
        gpu = " on NUMA node %s" % plan.numa if plan.numa is not None else ""
        out.append(
            Finding("ok", "%s: CPUs %s, GPU %d%s%s, memory %s" % (who, cpus, plan.gpu, gpu, nic, mode), "the plan")
        )
    return out


# ---------------------------------------------------------------------------
# The node's map (probe): GPU -> NUMA node -> CPUs -> nearest NICs


@dataclass(frozen=True)
class GpuPlace:
    """Where one GPU sits, as `slurmgpu probe` found it."""

    index: int
    address: str  # PCI bus id ("" if not known)
    numa: Optional[int]  # NUMA node with CPUs next to it
    cpus: str  # that node's CPUs (cpulist), "" if not known
    nics: Tuple[str, ...] = ()  # nearest NICs, nearest first
    memory_numa: Optional[int] = None  # its memory as a CPU-less NUMA node (Grace without CDMM)
    source: str = ""  # where the NUMA node came from


def _bus(addr: Optional[str]) -> str:
    """nvidia-smi's 00000000:18:00.0 -> sysfs's 0000:18:00.0."""
    if not addr:
        return ""
    dom, _, rest = addr.lower().partition(":")
    return "%04x:%s" % (int(dom, 16), rest) if dom and rest and re.fullmatch(r"[0-9a-f]+", dom) else addr.lower()


def gpu_places(
    sysfs: str,
    gpu_bus_ids: Sequence[Optional[str]],
    numa_nodes: Mapping[int, Tuple[int, ...]],
    topo_numa: Mapping[int, Optional[int]],
    topo_memory_numa: Mapping[int, Optional[int]],
    nic_order: Mapping[int, Sequence[str]],
    rdma_names: Sequence[str],
    count: int = 0,
) -> List[GpuPlace]:
    """Each GPU's place from sysfs (its PCI numa_node / local_cpulist) or, where sysfs cannot say,
    the GPU tool's topology (nvidia-smi topo -m "NUMA Affinity", rocm-smi --showtoponuma).

    `gpu_bus_ids` are the GPU tool's bus ids in its order (None entries: not known); without them
    the GPUs are taken from sysfs in bus order (`count`: how many the tool lists). `nic_order` gives
    each GPU's NICs nearest first from the topology matrix (PIX, then PXB); without it, the RDMA
    devices on the GPU's NUMA node.
    """
    pci = {p.address: p for _, p in read_gpu_places(sysfs)}
    ordered = [_bus(b) for b in gpu_bus_ids] if gpu_bus_ids else sorted(pci)
    ordered += [""] * max(0, count - len(ordered))  # GPUs the tool lists but sysfs does not show (no bus id)
    nic_nodes = {n: (read_nic_place(sysfs, n) or PciPlace("", None, ())).cpu_node(numa_nodes) for n in rdma_names}
    out = []
    for i, addr in enumerate(ordered):
        place = pci.get(addr)
        numa, source = None, ""
        if place is not None and numa_nodes:
            numa = place.cpu_node(numa_nodes)
            source = "sysfs %s numa_node/local_cpulist" % addr
        if numa is None and topo_numa.get(i) is not None:
            numa, source = topo_numa[i], "GPU tool topology (NUMA affinity)"
        nics = tuple(nic_order.get(i, ()))
        if not nics and numa is not None:
            nics = tuple(n for n in rdma_names if nic_nodes.get(n) == numa)
        cpus = numa_nodes.get(numa, ()) if numa is not None else ()
        mem = topo_memory_numa.get(i)
        if mem is None and place is not None and place.numa is not None and not numa_nodes.get(place.numa):
            mem = place.numa  # the GPU's PCI node has no CPUs: its own memory node
        out.append(GpuPlace(i, addr, numa, format_cpulist(cpus), nics, mem if mem != numa else None, source))
    return out
