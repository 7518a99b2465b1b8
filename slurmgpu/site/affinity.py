"""A node type's CPU/NUMA/NIC map: for each GPU, the NUMA node whose CPUs are nearest, the CPUs its
rank should run on and the network device(s) next to it.

The map is a site fact like the NIC list: the generator turns it into each launcher's binding, the
preflight checks it against the node's own sysfs, `probe` reads it on a node and `discover --probe`
writes it. A preset's map comes from public topology documents and says where (`source`) and whether
a node of the site itself confirmed it (`verified`); where none is known, `unknown` says why, and
nothing is bound rather than something wrong.

GPU i is the i-th GPU in `nvidia-smi`/`rocm-smi` order (PCI bus order), which is the device local
rank i uses when the job has the whole node. CPU numbers are the kernel's (`/sys/devices/system/cpu`),
the numbers `--cpu-bind=mask_cpu`, `numactl` and `sched_setaffinity` take.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Set, Tuple

from ..schema import Checker, Field, describe, join

_CPULIST = re.compile(r"^\s*\d+(\s*-\s*\d+)?(\s*,\s*\d+(\s*-\s*\d+)?)*\s*$")


def parse_cpulist(text: Any) -> Tuple[int, ...]:
    """'0-3,8,10-11' (the kernel's cpulist form) -> (0, 1, 2, 3, 8, 10, 11); '' -> (). ValueError if malformed."""
    if isinstance(text, int) and not isinstance(text, bool):
        text = str(text)
    if not isinstance(text, str):
        raise ValueError("expected a CPU list such as 0-55,112-167, got %s" % describe(text))
    if not text.strip():
        return ()
    if not _CPULIST.match(text):
        raise ValueError("not a CPU list (e.g. 0-55,112-167): %r" % text)
    out: Set[int] = set()
    for part in text.split(","):
        a, _, b = part.strip().partition("-")
        lo, hi = int(a), int(b) if b else int(a)
        if hi < lo:
            raise ValueError("range %s runs backwards" % part.strip())
        out.update(range(lo, hi + 1))
    return tuple(sorted(out))


def format_cpulist(cpus: Iterable[int]) -> str:
    """(0, 1, 2, 3, 8) -> '0-3,8': the compact form the kernel and numactl print."""
    xs = sorted(set(cpus))
    parts: List[str] = []
    i = 0
    while i < len(xs):
        j = i
        while j + 1 < len(xs) and xs[j + 1] == xs[j] + 1:
            j += 1
        parts.append(str(xs[i]) if i == j else "%d-%d" % (xs[i], xs[j]))
        i = j + 1
    return ",".join(parts)


def cpu_mask(cpus: Iterable[int]) -> str:
    """CPUs -> the hex mask Slurm's --cpu-bind=mask_cpu takes ('0x3' for CPUs 0 and 1)."""
    m = 0
    for c in cpus:
        m |= 1 << c
    return "0x%x" % m


@dataclass(frozen=True)
class GpuAffinity:
    """One GPU: its NUMA node, the CPUs its rank should use and its nearest NIC(s)."""

    gpu: int
    numa: Optional[int]  # the NUMA node with CPUs next to the GPU (None: not known)
    cpus: Tuple[int, ...] = ()  # the rank's CPUs: listed for this GPU, else all of its NUMA node's
    nics: Tuple[str, ...] = ()  # nearest network devices, nearest first ((): not known)
    own_cpus: bool = False  # cpus were listed for this GPU (a slice of its node), not the whole node
    memory_numa: Optional[int] = None  # the GPU's own memory as a CPU-less NUMA node (Grace without CDMM)

    def to_dict(self) -> Dict[str, Any]:
        d: Dict[str, Any] = {"numa": self.numa}
        if self.own_cpus:
            d["cpus"] = format_cpulist(self.cpus)
        if self.nics:
            d["nics"] = list(self.nics)
        if self.memory_numa is not None:
            d["memory_numa"] = self.memory_numa
        return d


@dataclass(frozen=True)
class RankPlan:
    """What local rank `local` should see: its GPU, NUMA node, CPUs and the NIC NCCL uses."""

    local: int
    gpu: int
    numa: Optional[int]
    cpus: Tuple[int, ...]  # () when the map gives only NUMA nodes without CPU lists
    nics: Tuple[str, ...]

    @property
    def cpulist(self) -> str:
        return format_cpulist(self.cpus) if self.cpus else "-"


@dataclass(frozen=True)
class AffinityMap:
    """Every GPU of a node type with its NUMA node, CPUs and NICs; or why that is not known."""

    gpus: Tuple[GpuAffinity, ...] = ()
    numa_cpus: Mapping[int, Tuple[int, ...]] = field(default_factory=dict)  # NUMA node -> its CPUs
    source: str = ""
    verified: bool = False  # a node of this site confirmed it (probe); presets from documents are not
    unknown: str = ""  # why no map is given (then gpus is empty)
    notes: Tuple[str, ...] = ()  # what loading left out (NICs the node type no longer lists): gen warns

    @property
    def known(self) -> bool:
        return bool(self.gpus)

    @property
    def numa_nodes(self) -> Tuple[int, ...]:
        """The NUMA nodes (with CPUs) the GPUs sit on, in order."""
        return tuple(sorted({g.numa for g in self.gpus if g.numa is not None}))

    @property
    def cpu_numa_nodes(self) -> Tuple[int, ...]:
        """NUMA nodes that have CPUs, as listed (CPU-less memory nodes are never listed)."""
        return tuple(sorted(n for n, c in self.numa_cpus.items() if c))

    @property
    def multi_numa(self) -> bool:
        """More than one NUMA node with CPUs: where binding decides which memory a rank gets."""
        return len(set(self.cpu_numa_nodes) | set(self.numa_nodes)) > 1

    @property
    def slices(self) -> bool:
        """Some GPU has CPUs of its own (a share of its node) rather than its whole NUMA node."""
        return any(g.own_cpus for g in self.gpus)

    def gpu(self, index: int) -> Optional[GpuAffinity]:
        return self.gpus[index] if 0 <= index < len(self.gpus) else None

    def ranks(self, gpus_per_node: int) -> Tuple[RankPlan, ...]:
        """Local rank i on GPU i (a whole-node job): what each rank should see; () if the map lacks a GPU."""
        out = []
        for i in range(gpus_per_node):
            g = self.gpu(i)
            if g is None:
                return ()
            out.append(RankPlan(local=i, gpu=i, numa=g.numa, cpus=g.cpus, nics=g.nics))
        return tuple(out)

    def label(self) -> str:
        """How sure the map is, in a few words (for comments and reports)."""
        if not self.known:
            return "unknown"
        return "verified on a node of the site" if self.verified else "unverified"

    def to_dict(self) -> Dict[str, Any]:
        if not self.known:
            return {"unknown": self.unknown, "source": self.source} if self.source else {"unknown": self.unknown}
        return {
            "source": self.source,
            "verified": self.verified,
            "numa": {n: format_cpulist(c) for n, c in sorted(self.numa_cpus.items())},
            "gpus": [g.to_dict() for g in self.gpus],
        }


_FIELDS = {
    "source": Field("str"),
    "verified": Field("bool", default=False),
    "unknown": Field("str"),
    "numa": Field("map"),
    "gpus": Field("list"),
}

_GPU_FIELDS = {
    "numa": Field("int", minimum=0),
    "cpus": Field("str"),
    "nics": Field("strlist", default=tuple),
    "memory_numa": Field("int", minimum=0),
}


def parse_affinity(
    ck: Checker, raw: Any, path: str, parent: Any, gpus: int, nic_names: Sequence[str]
) -> Optional[AffinityMap]:
    """node_types.X.affinity -> AffinityMap, every problem reported to `ck` with its position.

    A map must name every GPU of the node (or say `unknown: why`); a GPU's NUMA node must be one
    the map lists with CPUs, its own CPUs a subset of that node's, its NICs ones the node type has:
    a map that contradicts itself would bind ranks to the wrong CPUs, which is worse than none.
    A NIC the node type does not list (a site that extends a preset and replaces its nics) is
    left out of the map with a note, which `gen` prints: the CPU part still holds.
    """
    if raw is None:
        return None
    n_before = len(ck.issues)
    v = ck.take(raw, _FIELDS, path, parent, "affinity")
    if len(ck.issues) > n_before:
        return None
    if v["unknown"] is not None:
        if v["gpus"] or v["numa"]:
            ck.error(raw, "unknown", path + ".unknown", "give either the map (numa, gpus) or unknown: WHY, not both")
            return None
        if not v["unknown"].strip():
            ck.error(raw, "unknown", path + ".unknown", "say why the map is not known (e.g. which document is missing)")
            return None
        return AffinityMap(source=v["source"] or "", unknown=v["unknown"].strip())
    if not v["gpus"]:
        ck.error(
            raw,
            None,
            path,
            "an affinity map needs gpus: one entry per GPU ({numa: N, nics: [...]}), or unknown: WHY "
            "(`slurmgpu discover --probe` writes it from a node)",
        )
        return None
    if not v["source"]:
        ck.error(raw, None, path + ".source", "say where the map comes from (a document, or `slurmgpu probe` on NODE)")
    numa_cpus = _numa_table(ck, raw, path, v["numa"] or {})
    entries: List[GpuAffinity] = []
    notes: List[str] = []
    raw_gpus = v["gpus"]
    if len(raw_gpus) != gpus:
        ck.error(
            raw,
            "gpus",
            path + ".gpus",
            "the node type has %d GPUs but the map lists %d: one entry per GPU, in nvidia-smi/rocm-smi order"
            % (gpus, len(raw_gpus)),
        )
    for i, item in enumerate(raw_gpus):
        where = join(path + ".gpus", i)
        gv = ck.take(item, _GPU_FIELDS, where, raw_gpus, i)
        numa = gv["numa"]
        own: Tuple[int, ...] = ()
        if gv["cpus"] is not None:
            try:
                own = parse_cpulist(gv["cpus"])
            except ValueError as exc:
                ck.error(item, "cpus", where + ".cpus", str(exc))
        if numa is not None and numa_cpus and numa not in numa_cpus:
            ck.error(
                item,
                "numa",
                where + ".numa",
                "NUMA node %d is not in %s.numa (listed: %s)" % (numa, path, ", ".join(map(str, sorted(numa_cpus)))),
            )
        node_cpus = numa_cpus.get(numa, ()) if numa is not None else ()
        if own and node_cpus and not set(own) <= set(node_cpus):
            ck.error(
                item,
                "cpus",
                where + ".cpus",
                "CPUs %s are not all on NUMA node %d (%s): a rank bound there would not be next to its GPU"
                % (format_cpulist(set(own) - set(node_cpus)), numa, format_cpulist(node_cpus)),
            )
        if numa is None and not own:
            ck.error(item, None, where, "give the GPU's NUMA node (numa: N) or its CPUs (cpus: LIST)")
        kept = []
        for nic in gv["nics"] or ():
            if nic in nic_names:
                kept.append(nic)
            else:  # typically a site that extends a preset and lists its own nics: the CPU map still holds
                notes.append(
                    "%s.nics: %s is not one of the node type's nics (%s), so GPU %d's nearest NIC is left out of "
                    "the map; list it again under %s" % (where, nic, ", ".join(nic_names) or "none", i, path + ".gpus")
                )
        mem = gv["memory_numa"]
        if mem is not None and numa_cpus.get(mem):
            ck.error(
                item,
                "memory_numa",
                where + ".memory_numa",
                "NUMA node %d has CPUs: memory_numa is the GPU's own CPU-less node" % mem,
            )
        entries.append(
            GpuAffinity(
                gpu=i,
                numa=numa,
                cpus=own or node_cpus,
                nics=tuple(kept),
                own_cpus=bool(own),
                memory_numa=mem,
            )
        )
    if len(ck.issues) > n_before:
        return None
    return AffinityMap(
        gpus=tuple(entries),
        numa_cpus=numa_cpus,
        source=v["source"] or "",
        verified=bool(v["verified"]),
        notes=tuple(notes),
    )


def _numa_table(ck: Checker, raw: Any, path: str, table: Mapping[Any, Any]) -> Dict[int, Tuple[int, ...]]:
    out: Dict[int, Tuple[int, ...]] = {}
    seen: Dict[int, int] = {}
    for key, text in table.items():
        where = join(path + ".numa", str(key))
        if isinstance(key, bool) or not isinstance(key, int) or key < 0:
            ck.error(table, key, where, "NUMA node numbers are integers >= 0, got %s" % describe(key))
            continue
        try:
            cpus = parse_cpulist(text)
        except ValueError as exc:
            ck.error(table, key, where, str(exc))
            continue
        if not cpus:
            ck.error(table, key, where, "list only NUMA nodes with CPUs (a GPU's CPU-less memory node is memory_numa)")
            continue
        for c in cpus:
            if c in seen:
                ck.error(table, key, where, "CPU %d is also on NUMA node %d" % (c, seen[c]))
                break
            seen[c] = key
        out[key] = cpus
    return out
