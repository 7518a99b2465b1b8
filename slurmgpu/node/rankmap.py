"""doctor's rank advice: which node, GPU and TP/CP/PP/DP group an NCCL or Xid finding points at.

Reads the lines a signature matched (NCCL DIAG reports, RAS status reports, Xid lines) plus the
lines around them that carry the numbers (the report's communicator size, NCCL's `Init COMPLETE`
line that ties a host and PCI bus id to a rank, its bootstrap line that ties a host to its address)
and places the ranks with ranks.Placer. Formats: docs/doctor.md (NCCL DIAG, RAS) with their sources.

A rank in an NCCL report is a rank of one communicator. It is placed as a global rank only when
that communicator spans the whole job (its size equals the stamp's world); otherwise the advice
says so instead of guessing.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Dict, List, Mapping, Optional, Sequence, Set, Tuple

from ..errors import SlurmgpuError
from .ranks import Placer, RankPlace, gpu_index_of, rank_set

if TYPE_CHECKING:
    from ..site import Site

MAX_PLACED = 8  # ranks spelled out per finding; the rest are counted

# NCCL's own lines (formats: docs/doctor.md)
_HOSTPFX = r"^(?:\S+:\s+)?(?:\[[^\]]*\]\s*)?(?P<host>[A-Za-z][\w.-]*):\d+:\d+ \[\d+\] NCCL INFO "
INIT_COMPLETE = re.compile(
    _HOSTPFX + r"\S+ comm 0x[0-9a-fA-F]+ rank (?P<rank>\d+) nranks (?P<nranks>\d+) cudaDev (?P<cuda>\d+) "
    r"nvmlDev (?P<nvml>\d+) busId (?P<bus>[0-9a-fA-F]+)"
)
BOOTSTRAP = re.compile(_HOSTPFX + r"Bootstrap ?: Using (?:\[\d+\])?[\w.-]+:(?P<addr>[0-9a-fA-F.:]+?)<\d+>")
DIAG_DONE = re.compile(r"NCCL DIAG NCCL diagnostics completed in [\d.]+ ms across (?P<n>\d+) ranks")
P2P_EDGE = re.compile(
    r"NCCL DIAG \[INFO\] p2p: (?P<what>[a-zA-Z/ -]+?) srcRank=(?P<src>\d+) srcCudaDev=\d+ srcNvmlDev=(?P<snvml>\d+) "
    r"dstRank=(?P<dst>\d+) dstCudaDev=\d+ dstNvmlDev=(?P<dnvml>\d+) path=(?P<path>\w+)"
)
P2P_RANK = re.compile(r"NCCL DIAG \[INFO\] p2p: setup failed on rank (?P<src>\d+)")
RAS_DIAG = re.compile(
    r"NCCL DIAG \[INFO\] (?P<check>ECC|NVLink|GPU inventory|CUDA driver version): .*?rank\(s\) (?P<ranks>\{[^}]*\})"
)
RAS_DIAG_SIZE = re.compile(r"across (?P<n>\d+) ranks in comm (?P<comm>0x[0-9a-fA-F]+)")
RAS_TABLE_ROW = re.compile(
    r"^\s*(?P<group>\d+)\s+(?P<comms>\d+)\s+(?P<nodes>\d+)\s+(?P<rpn>[\d-]+)\s+(?P<rpc>\d+)\s+(?P<rig>\d+)\s+"
    r"(?P<status>[A-Z]+)\s+(?P<errors>[A-Z]+)\s*$"
)
RAS_COMM = re.compile(r"^\s*#(?P<group>\d+)-\d+ \((?P<hash>[0-9a-fA-F]+)\) INCOMPLETE")
RAS_MISSING_RANKS = re.compile(r"^\s*The missing ranks?: (?P<ranks>[\d, ]+)")
RAS_RANK_LINE = re.compile(
    r"^\s*Rank (?P<rank>\d+) -- GPU (?P<gpu>\d+)(?: \(NVML (?P<nvml>\d+)\))? managed by process \d+ "
    r"on node (?P<host>\S+)"
)
RAS_PROCESS = re.compile(r"Process \d+ on node (?P<host>\S+) managing GPUs? (?P<gpus>\d+)(?: \(NVML (?P<nvml>\d+)\))?")
XID = re.compile(r"NVRM: Xid \(PCI:(?P<pci>[0-9A-Fa-f]{4}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2})\): (?P<xid>\d+),")
SYSLOG_HOST = re.compile(r"^(?:[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d|\d{4}-\d\d-\d\dT\S+) (?P<h>[\w.-]+) kernel: ")


def _domain_nodes(site: Optional[Site], stamp: Mapping[str, str]) -> int:
    if site is None:
        return 1
    try:
        return site.node_type_of(stamp.get("partition")).domain_nodes
    except SlurmgpuError:
        return site.node_type_of().domain_nodes


def rank_advice(
    sig_id: str,
    matched: Sequence[str],
    lines: Sequence[str],
    numbers: Sequence[int],
    site: Optional[Site],
    stamp: Mapping[str, str],
    nodes: Sequence[str],
    places: Optional[List[RankPlace]] = None,
) -> List[str]:
    """Advice lines placing the ranks/GPUs a finding names; says what is missing when it cannot.
    The places themselves are appended to `places` (for --json)."""
    placer = Placer.from_stamp(stamp, nodes, _domain_nodes(site, stamp))
    if placer is not None and places is not None:
        placer.placed = places
    if placer is None:
        return [
            "No stamp line with the layout (tp= pp= dp= nodes= gpus_per_node=) in the log or script, so the "
            "ranks cannot be placed on nodes and TP/PP/DP groups; scripts from `slurmgpu gen` echo it."
        ]
    out: List[str] = []
    if sig_id == "gpu-xid":
        out = _xid(matched, lines, placer)
    elif sig_id == "nccl-diag-p2p":
        out = _diag_p2p(matched, lines, numbers, placer)
    elif sig_id == "nccl-diag-ras":
        out = _diag_ras(matched, placer)
    elif sig_id == "nccl-ras-missing":
        out = _ras_missing(lines, numbers, placer)
    if not nodes:
        out.append(
            "The job's node list is not known (a log file, not a job id), so nodes are given by their index "
            "in the job; pass it with `slurmgpu doctor LOG --nodes HOSTLIST` to get names."
        )
    return out


def _place_lines(placer: Placer, ranks: Sequence[int], why: str) -> Tuple[List[str], Set[str]]:
    out: List[str] = []
    bad: Set[str] = set()
    for r in list(dict.fromkeys(ranks))[:MAX_PLACED]:
        p = placer.place(r)
        if p is None:
            out.append("%s rank %d is outside the stamped layout of %d ranks." % (why, r, placer.world))
            continue
        out.append("%s %s." % (why, p.words()))
        if all(q.rank != p.rank for q in placer.placed):
            placer.placed.append(p)
        if p.node:
            bad.add(p.node)
    if len(set(ranks)) > MAX_PLACED:
        out.append("... and %d more ranks." % (len(set(ranks)) - MAX_PLACED))
    return out, bad


def _exclude(nodes: Set[str]) -> List[str]:
    if not nodes:
        return []
    return [
        "Resubmit without %s: `sbatch --exclude=%s`." % ("it" if len(nodes) == 1 else "them", ",".join(sorted(nodes)))
    ]


def _size_after(lines: Sequence[str], start: int, pat: re.Pattern[str]) -> Optional[int]:
    """The first `pat` number at or after line `start` (1-based) of the same report."""
    for text in lines[start - 1 : start + 200]:
        m = pat.search(text)
        if m:
            return int(m.group("n"))
    return None


def _global(placer: Placer, size: Optional[int]) -> Optional[str]:
    """Why communicator ranks cannot be read as global ranks, or None when they can."""
    if size is None:
        return "the report does not say how many ranks its communicator has"
    if size != placer.world:
        return "its communicator has %d of the job's %d ranks, so its ranks are not the job's" % (size, placer.world)
    return None


def _diag_p2p(matched: Sequence[str], lines: Sequence[str], numbers: Sequence[int], placer: Placer) -> List[str]:
    size = _size_after(lines, numbers[0], DIAG_DONE) if numbers else None
    why = _global(placer, size)
    out: List[str] = []
    ranks: List[int] = []
    for text in matched:
        m = P2P_EDGE.search(text)
        if m:
            src, dst = int(m.group("src")), int(m.group("dst"))
            ranks += [src, dst]
            out.append(
                "P2P %s from rank %d (GPU %s) to rank %d (GPU %s) over %s."
                % (m.group("what"), src, m.group("snvml"), dst, m.group("dnvml"), m.group("path"))
            )
            continue
        m = P2P_RANK.search(text)
        if m:
            ranks.append(int(m.group("src")))
    if why:
        out.append("Not placed on nodes: %s." % why)
        return out
    placed, bad = _place_lines(placer, ranks, "Failing GPU:")
    return out + placed + _exclude(bad)


def _diag_ras(matched: Sequence[str], placer: Placer) -> List[str]:
    out: List[str] = []
    bad: Set[str] = set()
    for text in matched:
        m = RAS_DIAG.search(text)
        if not m:
            continue
        ranks, cut = rank_set(m.group("ranks"))
        sz = RAS_DIAG_SIZE.search(text)
        why = _global(placer, int(sz.group("n")) if sz else None)
        if why:
            out.append("%s: ranks %s not placed on nodes: %s." % (m.group("check"), m.group("ranks"), why))
            continue
        placed, b = _place_lines(placer, ranks, "%s:" % m.group("check"))
        out += placed
        if cut:
            out.append("(NCCL cut the rank list short; `ncclras -D` on a node of the job prints it again.)")
        if m.group("check") in ("ECC", "NVLink"):
            bad |= b
    return out + _exclude(bad)


def _addresses(lines: Sequence[str]) -> Dict[str, str]:
    """Address -> host name, from NCCL's bootstrap INFO lines (RAS names nodes by address)."""
    out: Dict[str, str] = {}
    for text in lines:
        if " NCCL INFO " in text and "Bootstrap" in text:
            m = BOOTSTRAP.search(text)
            if m:
                out.setdefault(m.group("addr"), m.group("host"))
    return out


def _ras_missing(lines: Sequence[str], numbers: Sequence[int], placer: Placer) -> List[str]:
    """Ranks and processes a RAS status report lists as missing or dead."""
    rpc: Dict[str, int] = {}
    out: List[str] = []
    ranks: List[int] = []
    procs: List[Tuple[str, int]] = []
    sizes: Set[Optional[int]] = set()
    start = max(0, min(numbers) - 60) if numbers else 0
    block: Optional[str] = None  # the communicator group of the INCOMPLETE block being read
    for text in lines[start:]:
        m = RAS_TABLE_ROW.match(text)
        if m:
            rpc[m.group("group")] = int(m.group("rpc"))
            continue
        m = RAS_COMM.match(text)
        if m:
            block = m.group("group")
            continue
        if not text.strip():
            block = None
            continue
        if block is not None:
            m = RAS_MISSING_RANKS.match(text)
            if m:
                ranks += [int(x) for x in re.findall(r"\d+", m.group("ranks"))]
                sizes.add(rpc.get(block))
                continue
            m = RAS_RANK_LINE.match(text)
            if m:
                ranks.append(int(m.group("rank")))
                sizes.add(rpc.get(block))
                continue
        m = RAS_PROCESS.search(text)
        if m:
            gpu = int(m.group("nvml") or m.group("gpus"))
            if (m.group("host"), gpu) not in procs:
                procs.append((m.group("host"), gpu))
    bad: Set[str] = set()
    if ranks:
        why = _global(placer, sizes.pop() if len(sizes) == 1 else None)
        if why:
            out.append("Missing ranks %s not placed on nodes: %s." % (",".join(map(str, sorted(set(ranks)))), why))
        else:
            placed, bad = _place_lines(placer, ranks, "Missing:")
            out += placed
    names = _addresses(lines)
    for host, gpu in procs[:MAX_PLACED]:
        name = names.get(host, host)
        on = placer.ranks_on(name, gpu)
        if on:
            placed, b = _place_lines(placer, on, "Unresponsive process on %s, GPU %d:" % (host, gpu))
            out += placed
            bad |= b
        else:
            out.append(
                "Unresponsive process on %s managing GPU %d%s." % (host, gpu, "" if name == host else " (%s)" % name)
            )
            if name != host:  # a name from NCCL's own bootstrap line: the node to leave out
                bad.add(name)
    return out + _exclude(bad)


def _xid(matched: Sequence[str], lines: Sequence[str], placer: Placer) -> List[str]:
    """Xid (node, PCI) -> rank, through NCCL's `Init COMPLETE` line of the job-wide communicator."""
    bus: Dict[str, Dict[str, int]] = {}  # host -> {busId: rank}
    for text in lines:
        if "Init COMPLETE" in text:
            m = INIT_COMPLETE.search(text)
            if m and int(m.group("nranks")) == placer.world:
                bus.setdefault(m.group("host").split(".")[0], {})[m.group("bus")] = int(m.group("rank"))
    out: List[str] = []
    bad: Set[str] = set()
    seen: Set[Tuple[str, str]] = set()
    for text in matched:
        m = XID.search(text)
        h = SYSLOG_HOST.search(text)
        if not m:
            continue
        host = h.group("h") if h else ""
        if (host, m.group("pci")) in seen:
            continue
        seen.add((host, m.group("pci")))
        short = host.split(".")[0]
        rank = gpu_index_of(m.group("pci"), bus.get(short, {})) if short else None
        if rank is not None:
            placed, b = _place_lines(placer, [rank], "Xid %s at PCI %s on %s:" % (m.group("xid"), m.group("pci"), host))
            out += placed
            bad |= b | {host}
            continue
        on = placer.ranks_on(host) if host else []
        if on:
            p0 = placer.place(on[0])
            out.append(
                "Xid %s at PCI %s on %s: the node's ranks are %d-%d (node %d of the job); NCCL's `Init COMPLETE` "
                "lines (NCCL_DEBUG=INFO) would name the one on that GPU."
                % (m.group("xid"), m.group("pci"), host, on[0], on[-1], p0.node_index if p0 else -1)
            )
        elif host:
            out.append(
                "Xid %s at PCI %s on %s: %s"
                % (
                    m.group("xid"),
                    m.group("pci"),
                    host,
                    "not a node of this job's node list."
                    if placer.nodes
                    else "the job's node list is needed to name its ranks.",
                )
            )
        if host:
            bad.add(host)
    return out + _exclude(bad)
