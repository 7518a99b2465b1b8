"""The NCCL environment validator: what NCCL would silently ignore or misread.

NCCL drops bad values without a word at the default debug level (an unknown
`NCCL_NET_GDR_LEVEL` string, a non-integer integer parameter, a `^` in the
middle of a device list) and matches device lists by *prefix*, so `mlx5_1`
also selects `mlx5_10`. The rules live here as data (`VARS`) so the preflight
check and the script generator lint with the same table. Parsing rules follow
NCCL 2.30 (`src/misc/utils.cc` parseStringList/matchIf, `src/graph/paths.cc`
ncclGetLevel, `src/misc/param.cc`); see docs/preflight.md.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Dict, List, Mapping, Optional, Sequence, Tuple

if TYPE_CHECKING:
    from ..site import NodeType

# -- value kinds ------------------------------------------------------------

PATH_LEVELS = ("LOC", "NVL", "NVB", "C2C", "PIX", "PXB", "P2C", "PXN", "PHB", "SYS")
"""Path-type names NCCL accepts for *_LEVEL variables (case-sensitive strcmp)."""

DEBUG_LEVELS = ("VERSION", "WARN", "INFO", "ABORT", "TRACE")
DEBUG_SUBSYS = (
    "INIT",
    "COLL",
    "P2P",
    "SHM",
    "NET",
    "GRAPH",
    "TUNING",
    "ENV",
    "ALLOC",
    "ALLOC_HOST",
    "CALL",
    "PROXY",
    "NVLS",
    "BOOTSTRAP",
    "REG",
    "PROFILE",
    "RAS",
    "DESTROY",
    "DIAG",  # 2.31: the diagnostics' detail (docs troubleshooting/diagnostics.rst, NVIDIA/nccl 8898068)
    "ALL",
)
PROTOS = ("LL", "LL128", "Simple")
ALGOS = ("Ring", "Tree", "CollnetDirect", "CollnetChain", "NVLS", "NVLSTree", "PAT")
NET_NAMES = ("IB", "Socket", "Libfabric", "AWS Libfabric", "OFI", "FasTrak")
"""Names NCCL_NET may select (compared case-insensitively); plugins may register others."""


@dataclass(frozen=True)
class VarSpec:
    """How NCCL parses one variable.

    kind: int | bool | tri (0/1/2) | level | enum | list | devlist | net | str
    """

    kind: str
    choices: Tuple[str, ...] = ()
    minimum: Optional[int] = None
    maximum: Optional[int] = None
    note: str = ""


VARS: Dict[str, VarSpec] = {
    # interfaces and devices
    "NCCL_SOCKET_IFNAME": VarSpec("devlist", note="bootstrap/socket interface prefixes"),
    "NCCL_IB_HCA": VarSpec("devlist", note="RDMA device[:port] prefixes"),
    "NCCL_SOCKET_FAMILY": VarSpec("enum", ("AF_INET", "AF_INET6")),
    "NCCL_SOCKET_NTHREADS": VarSpec("int", minimum=1, maximum=16),
    "NCCL_NSOCKS_PERTHREAD": VarSpec("int", minimum=1),
    "NCCL_IB_GID_INDEX": VarSpec("int", minimum=-1),
    "NCCL_IB_TC": VarSpec("int", minimum=-1, maximum=255),
    "NCCL_IB_FIFO_TC": VarSpec("int", minimum=-1, maximum=255),
    "NCCL_IB_SL": VarSpec("int", minimum=-1, maximum=15),
    "NCCL_IB_TIMEOUT": VarSpec("int", minimum=1, maximum=31),
    "NCCL_IB_RETRY_CNT": VarSpec("int", minimum=0, maximum=7),
    "NCCL_IB_DISABLE": VarSpec("bool"),
    "NCCL_IB_QPS_PER_CONNECTION": VarSpec("int", minimum=1),
    "NCCL_IB_SPLIT_DATA_ON_QPS": VarSpec("bool"),
    "NCCL_IB_ADAPTIVE_ROUTING": VarSpec("bool"),
    "NCCL_IB_PCI_RELAXED_ORDERING": VarSpec("tri"),
    "NCCL_IB_ROCE_VERSION_NUM": VarSpec("int", minimum=1, maximum=2),
    "NCCL_IB_ADDR_FAMILY": VarSpec("enum", ("AF_INET", "AF_INET6")),
    "NCCL_IB_ADDR_RANGE": VarSpec("str"),
    "NCCL_IB_MERGE_NICS": VarSpec("bool"),
    "NCCL_IB_MERGE_VFS": VarSpec("bool"),
    "NCCL_IB_AR_THRESHOLD": VarSpec("int", minimum=0),
    "NCCL_IB_ECE_ENABLE": VarSpec("bool"),
    "NCCL_IB_USE_INLINE": VarSpec("bool"),
    "NCCL_IB_CUDA_SUPPORT": VarSpec("bool", note="deprecated; NCCL_NET_GDR_LEVEL replaces it"),
    # GPUDirect / P2P paths
    "NCCL_NET_GDR_LEVEL": VarSpec("level"),
    "NCCL_IB_GDR_LEVEL": VarSpec("level", note="old name of NCCL_NET_GDR_LEVEL"),
    "NCCL_NET_GDR_READ": VarSpec("bool"),
    "NCCL_NET_GDR_C2C": VarSpec("bool"),
    "NCCL_P2P_LEVEL": VarSpec("level"),
    "NCCL_P2P_DISABLE": VarSpec("bool"),
    "NCCL_P2P_DIRECT_DISABLE": VarSpec("bool"),
    "NCCL_P2P_READ_ENABLE": VarSpec("bool"),
    "NCCL_P2P_NET_CHUNKSIZE": VarSpec("int", minimum=1),
    "NCCL_P2P_PCI_CHUNKSIZE": VarSpec("int", minimum=1),
    "NCCL_P2P_NVL_CHUNKSIZE": VarSpec("int", minimum=1),
    "NCCL_P2P_PXN_LEVEL": VarSpec("tri"),
    "NCCL_PXN_DISABLE": VarSpec("bool"),
    "NCCL_SHM_DISABLE": VarSpec("bool"),
    "NCCL_SHM_USE_CUDA_MEMCPY": VarSpec("bool"),
    "NCCL_CROSS_NIC": VarSpec("tri"),
    "NCCL_NVLS_ENABLE": VarSpec("tri"),
    "NCCL_MNNVL_ENABLE": VarSpec("tri"),
    "NCCL_NVB_DISABLE": VarSpec("bool"),
    "NCCL_NVLS_NCHANNELS": VarSpec("int", minimum=1),
    "NCCL_COLLNET_ENABLE": VarSpec("bool"),
    "NCCL_COLLNET_NODE_THRESHOLD": VarSpec("int", minimum=1),
    # network backend and plugins
    "NCCL_NET": VarSpec("net"),
    "NCCL_NET_PLUGIN": VarSpec("str"),
    "NCCL_TUNER_PLUGIN": VarSpec("str"),
    "NCCL_PROFILER_PLUGIN": VarSpec("str"),
    "NCCL_NET_SHARED_BUFFERS": VarSpec("bool"),
    "NCCL_NET_SHARED_COMMS": VarSpec("bool"),
    "NCCL_NET_FORCE_FLUSH": VarSpec("bool"),
    "NCCL_NET_DISABLE_INTRA": VarSpec("bool"),
    "NCCL_NET_OVERHEAD": VarSpec("int", minimum=0),
    "NCCL_GDRCOPY_ENABLE": VarSpec("bool"),
    "NCCL_DMABUF_ENABLE": VarSpec("bool"),
    # debugging and topology
    "NCCL_DEBUG": VarSpec("enum", DEBUG_LEVELS),
    "NCCL_DEBUG_SUBSYS": VarSpec("list", DEBUG_SUBSYS),
    "NCCL_DEBUG_FILE": VarSpec("str"),
    "NCCL_TOPO_FILE": VarSpec("str"),
    "NCCL_TOPO_DUMP_FILE": VarSpec("str"),
    "NCCL_GRAPH_FILE": VarSpec("str", note="debug only: never set in production (it overrides the topology search)"),
    "NCCL_GRAPH_DUMP_FILE": VarSpec("str"),
    "NCCL_CONF_FILE": VarSpec("str"),
    "NCCL_COMM_ID": VarSpec("str"),
    "NCCL_RAS_ENABLE": VarSpec("bool"),
    "NCCL_RAS_ADDR": VarSpec("str"),
    # 2.31 diagnostics (NVIDIA/nccl 8898068 docs troubleshooting/diagnostics.rst, ras.rst)
    "NCCL_RUN_DIAGNOSTICS": VarSpec("bool", note="NCCL 2.31 and later; older versions ignore it"),
    "NCCL_RUN_RAS_DIAGNOSTICS": VarSpec("bool", note="NCCL 2.31 and later; older versions ignore it"),
    "NCCL_DIAGNOSTICS_ECC_THRESHOLD": VarSpec("int", minimum=0),
    # tuning
    "NCCL_PROTO": VarSpec("list", PROTOS),
    "NCCL_ALGO": VarSpec("list", ALGOS),
    "NCCL_NCHANNELS_PER_NET_PEER": VarSpec("int", minimum=1),
    "NCCL_MIN_NCHANNELS": VarSpec("int", minimum=1),
    "NCCL_MAX_NCHANNELS": VarSpec("int", minimum=1),
    "NCCL_MIN_CTAS": VarSpec("int", minimum=1),
    "NCCL_MAX_CTAS": VarSpec("int", minimum=1),
    "NCCL_MIN_P2P_NCHANNELS": VarSpec("int", minimum=1),
    "NCCL_MAX_P2P_NCHANNELS": VarSpec("int", minimum=1),
    "NCCL_BUFFSIZE": VarSpec("int", minimum=1),
    "NCCL_LL_BUFFSIZE": VarSpec("int", minimum=1),
    "NCCL_LL128_BUFFSIZE": VarSpec("int", minimum=1),
    "NCCL_NTHREADS": VarSpec("int", minimum=64, maximum=512),
    "NCCL_LL128_NTHREADS": VarSpec("int", minimum=64, maximum=640),
    "NCCL_LL128_C2C": VarSpec("bool"),
    "NCCL_CHECKS_DISABLE": VarSpec("bool"),
    "NCCL_CHECK_POINTERS": VarSpec("bool"),
    "NCCL_LAUNCH_MODE": VarSpec("enum", ("PARALLEL", "GROUP")),
    "NCCL_CUMEM_ENABLE": VarSpec("bool"),
    "NCCL_CUMEM_HOST_ENABLE": VarSpec("bool"),
    "NCCL_SET_STACK_SIZE": VarSpec("bool"),
    "NCCL_SET_THREAD_NAME": VarSpec("bool"),
    "NCCL_GRAPH_REGISTER": VarSpec("bool"),
    "NCCL_LOCAL_REGISTER": VarSpec("bool"),
    "NCCL_WORK_FIFO_BYTES": VarSpec("int", minimum=1),
    "NCCL_RUNTIME_CONNECT": VarSpec("bool"),
    "NCCL_IGNORE_CPU_AFFINITY": VarSpec("bool"),
    "NCCL_IGNORE_DISABLED_P2P": VarSpec("bool"),
    "NCCL_CREATE_THREAD_CONTEXT": VarSpec("bool"),
    "NCCL_LL_THRESHOLD": VarSpec("int", note="removed from NCCL; has no effect"),
    "NCCL_TREE_THRESHOLD": VarSpec("int", note="removed from NCCL; has no effect"),
    "NCCL_SINGLE_RING_THRESHOLD": VarSpec("int", note="removed from NCCL; has no effect"),
    # PyTorch's ProcessGroupNCCL (old NCCL_* aliases still read)
    "TORCH_NCCL_ASYNC_ERROR_HANDLING": VarSpec("int", minimum=0, maximum=3),
    "NCCL_ASYNC_ERROR_HANDLING": VarSpec(
        "int", minimum=0, maximum=3, note="old alias of TORCH_NCCL_ASYNC_ERROR_HANDLING"
    ),
    "TORCH_NCCL_BLOCKING_WAIT": VarSpec("bool"),
    "NCCL_BLOCKING_WAIT": VarSpec("bool", note="old alias of TORCH_NCCL_BLOCKING_WAIT"),
    "TORCH_NCCL_TRACE_BUFFER_SIZE": VarSpec("int", minimum=0),
    "TORCH_NCCL_DUMP_ON_TIMEOUT": VarSpec("bool"),
    "TORCH_NCCL_ENABLE_MONITORING": VarSpec("bool"),
    "TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC": VarSpec("int", minimum=1),
    "TORCH_NCCL_AVOID_RECORD_STREAMS": VarSpec("bool"),
    "TORCH_NCCL_HIGH_PRIORITY": VarSpec("bool"),
    "TORCH_NCCL_DESYNC_DEBUG": VarSpec("bool"),
    "TORCH_NCCL_USE_COMM_NONBLOCKING": VarSpec("bool"),
}

# Names close enough to a known name to be a typo (difflib ratio).
_TYPO_RATIO = 0.85


@dataclass(frozen=True)
class Finding:
    """One problem in an environment. level: error (NCCL misbehaves), warning, info."""

    level: str
    var: str
    value: str
    message: str
    fix: str = ""

    def to_dict(self) -> Dict[str, Any]:
        return asdict(self)

    def __str__(self) -> str:
        fix = " Fix: %s" % self.fix if self.fix else ""
        return "%s: %s=%s: %s%s" % (self.level, self.var, self.value, self.message, fix)


# -- device lists -------------------------------------------------------------


@dataclass(frozen=True)
class DevList:
    """A parsed NCCL device/interface list (NCCL_IB_HCA, NCCL_SOCKET_IFNAME)."""

    exclude: bool
    exact: bool
    entries: Tuple[Tuple[str, Optional[int]], ...]  # (name, port or None)
    problems: Tuple[str, ...] = ()

    def matches(self, name: str, port: Optional[int] = None) -> bool:
        """Would NCCL select this device (port) under this list?"""
        hit = any(_entry_matches(e, p, name, port, self.exact) for e, p in self.entries)
        return hit != self.exclude

    def select(self, names: Sequence[str]) -> List[str]:
        """The subset of `names` NCCL would use (ports ignored)."""
        return [n for n in names if self.matches(n)]


def _selects_site_ifname(dl: DevList, site_value: str) -> bool:
    """Does the user's list select at least one interface the site names?

    The site writes socket_ifname as NCCL would take it: one name, a comma list
    (hsn0,hsn1,...) or a bare prefix (hsn), possibly already with '=' or '^'.
    """
    if site_value.startswith("^"):
        return True  # an exclusion list names nothing to select; nothing to compare
    names = [n for n in site_value.lstrip("=").split(",") if n]
    for name in names:
        if name[-1].isdigit():
            if dl.matches(name):
                return True
        elif dl.exclude or any(e.startswith(name) or name.startswith(e) for e, _ in dl.entries):
            return True
    return False


def _entry_matches(entry: str, eport: Optional[int], name: str, port: Optional[int], exact: bool) -> bool:
    if exact:
        ok = name == entry
    else:
        ok = name.startswith(entry)
    if ok and eport is not None and port is not None:
        ok = eport == port
    return ok


def parse_devlist(value: str) -> DevList:
    """Parse like NCCL: `^` then `=` may lead the string and apply to every entry."""
    problems: List[str] = []
    s = value
    exclude = exact = False
    if s.startswith("=^"):
        problems.append(
            "'=^' does not exclude: NCCL strips '^' first, then '='; write '^=' for 'exclude these exact names'"
        )
    if s.startswith("^"):
        exclude, s = True, s[1:]
    if s.startswith("="):
        exact, s = True, s[1:]
    entries: List[Tuple[str, Optional[int]]] = []
    for raw in s.split(","):
        if raw == "":
            problems.append("empty entry (stray comma)")
            continue
        name, sep, rest = raw.partition(":")
        if name != name.strip():
            problems.append("'%s' has spaces; NCCL keeps them, so it matches no device" % raw)
        if name[:1] in ("^", "="):
            problems.append(
                "'%s': '^'/'=' only work at the very start of the whole list; here the "
                "character becomes part of the name, which matches nothing" % raw
            )
        port: Optional[int] = None
        if sep:
            pstr = rest.split(":")[0]
            if not pstr.isdigit() or int(pstr) < 1:
                problems.append(
                    "'%s': port must be a number >= 1 (NCCL reads '%s' as port %d, "
                    "which matches nothing)" % (raw, pstr, int(pstr) if pstr.isdigit() else 0)
                )
            else:
                port = int(pstr)
        entries.append((name, port))
    return DevList(exclude=exclude, exact=exact, entries=tuple(entries), problems=tuple(problems))


def prefix_traps(dl: DevList, devices: Sequence[str]) -> List[Tuple[str, List[str]]]:
    """Entries of a prefix list that also match other devices: [(entry, [extra devices])]."""
    if dl.exact:
        return []
    out = []
    for name, _ in dl.entries:
        extra = sorted(d for d in set(devices) if d != name and d.startswith(name))
        if extra and (name in devices or re.search(r"\d$", name)):
            out.append((name, extra))
    return out


# -- the linter -------------------------------------------------------------


def lint_env(
    env: Mapping[str, str],
    node_type: Optional[NodeType] = None,
    *,
    hcas: Sequence[str] = (),
    ifaces: Sequence[str] = (),
) -> List[Finding]:
    """Check the NCCL_* / TORCH_NCCL_* variables of `env`.

    `node_type` (a site NodeType, optional) adds the fabric contradictions;
    `hcas` / `ifaces` are the RDMA devices and network interfaces present on
    the node (used with the site's NIC names to spot prefix-list traps).
    """
    out: List[Finding] = []
    nics = tuple(getattr(node_type, "nics", ()) or ())
    known_hcas = sorted(set(hcas) | {n.name for n in nics})
    for var in sorted(env):
        if not (var.startswith("NCCL_") or var.startswith("TORCH_NCCL_")):
            continue
        value = env[var]
        spec = VARS.get(var)
        if spec is None:
            out.extend(_unknown_name(var, value))
            continue
        out.extend(_check_value(var, value, spec, known_hcas, ifaces))
    if node_type is not None:
        out.extend(_fabric_contradictions(env, node_type, known_hcas))
    return out


def _unknown_name(var: str, value: str) -> List[Finding]:
    import difflib  # only for a mistake: not loaded on every run

    hint = difflib.get_close_matches(var, list(VARS), n=1, cutoff=_TYPO_RATIO)
    if hint:
        return [
            Finding(
                "warning",
                var,
                value,
                "not a variable NCCL/PyTorch reads; it is ignored silently (did you mean %s?)" % hint[0],
                "rename it to %s" % hint[0],
            )
        ]
    return [
        Finding(
            "info",
            var,
            value,
            "not in slurmgpu's table of NCCL variables; check the spelling (NCCL ignores names it does not know)",
        )
    ]


def _int_value(value: str) -> Optional[int]:
    """strtoll(value, &end, 0) with *end == 0, as NCCL's parameter loader requires."""
    m = re.fullmatch(r"\s*([+-]?)(0[xX][0-9a-fA-F]+|0[0-7]*|[1-9][0-9]*)", value)
    if not m:
        return None
    body = m.group(2)
    if body[:2].lower() == "0x":
        n = int(body, 16)
    elif len(body) > 1 and body.startswith("0"):
        n = int(body, 8)
    else:
        n = int(body)
    return -n if m.group(1) == "-" else n


def _check_value(var: str, value: str, spec: VarSpec, hcas: Sequence[str], ifaces: Sequence[str]) -> List[Finding]:
    out: List[Finding] = []
    kind = spec.kind
    if spec.note and ("old" in spec.note or "removed" in spec.note or "deprecated" in spec.note):
        out.append(Finding("info", var, value, spec.note))
    if kind in ("int", "bool", "tri"):
        n = _int_value(value)
        lo, hi = {"bool": (0, 1), "tri": (0, 2)}.get(kind, (spec.minimum, spec.maximum))
        if n is None:
            out.append(
                Finding(
                    "error",
                    var,
                    value,
                    "not an integer; NCCL ignores it and keeps its default",
                    "use %s" % _range_words(lo, hi),
                )
            )
        elif (lo is not None and n < lo) or (hi is not None and n > hi):
            out.append(Finding("error", var, value, "out of range", "use %s" % _range_words(lo, hi)))
    elif kind == "level":
        out.extend(_check_level(var, value))
    elif kind == "enum":
        if var == "NCCL_DEBUG":
            ok = value.upper() in spec.choices
        else:
            ok = value in spec.choices
        if not ok:
            out.append(
                Finding(
                    "error", var, value, "unknown value; NCCL ignores it", "use one of %s" % ", ".join(spec.choices)
                )
            )
    elif kind == "list":
        out.extend(_check_list(var, value, spec.choices))
    elif kind == "devlist":
        out.extend(_check_devlist(var, value, hcas if var == "NCCL_IB_HCA" else ifaces))
    elif kind == "net":
        if value.lower() not in {n.lower() for n in NET_NAMES}:
            out.append(
                Finding(
                    "warning",
                    var,
                    value,
                    "not a built-in transport or a known plugin name; NCCL "
                    "stops with 'network %s not found' unless a plugin registers that name" % value,
                    "one of %s, or the name the plugin prints with NCCL_DEBUG=INFO" % ", ".join(NET_NAMES),
                )
            )
    elif spec.note and var == "NCCL_GRAPH_FILE":
        out.append(Finding("warning", var, value, spec.note, "unset NCCL_GRAPH_FILE"))
    return out


def _range_words(lo: Optional[int], hi: Optional[int]) -> str:
    if lo is not None and hi is not None:
        return "an integer from %d to %d" % (lo, hi)
    if lo is not None:
        return "an integer >= %d" % lo
    return "an integer"


def _check_level(var: str, value: str) -> List[Finding]:
    if value in PATH_LEVELS:
        return []
    if value[:1].isdigit():
        return []  # old numeric form: strtol of the leading digits, clamped to SYS
    if value.upper() in PATH_LEVELS:
        return [
            Finding(
                "error",
                var,
                value,
                "NCCL compares path names case-sensitively; '%s' is ignored and the default applies" % value,
                "write %s=%s" % (var, value.upper()),
            )
        ]
    swapped = [lv for lv in PATH_LEVELS if sorted(lv) == sorted(value.upper())]
    import difflib

    hint = swapped or difflib.get_close_matches(value.upper(), PATH_LEVELS, n=1, cutoff=0.5)
    return [
        Finding(
            "error",
            var,
            value,
            "not a path type; NCCL ignores it silently and the default "
            "applies%s" % (" (did you mean %s?)" % hint[0] if hint else ""),
            "use one of %s" % ", ".join(PATH_LEVELS),
        )
    ]


def _check_list(var: str, value: str, choices: Sequence[str]) -> List[Finding]:
    body = value[1:] if value.startswith("^") else value
    bad = []
    for item in body.split(","):
        if var == "NCCL_DEBUG_SUBSYS":
            ok = item.upper() in choices
        else:
            ok = item.lower() in {c.lower() for c in choices}
        if not ok:
            bad.append(item)
    if bad:
        return [
            Finding(
                "warning" if var == "NCCL_DEBUG_SUBSYS" else "error",
                var,
                value,
                "unknown item%s %s" % ("s" if len(bad) > 1 else "", ", ".join(repr(b) for b in bad)),
                "items are %s (a leading '^' excludes)" % ", ".join(choices),
            )
        ]
    return []


def _check_devlist(var: str, value: str, devices: Sequence[str]) -> List[Finding]:
    out: List[Finding] = []
    if len(value) <= 1 and var == "NCCL_SOCKET_IFNAME":
        return [
            Finding(
                "warning",
                var,
                value,
                "a value of one character is treated as unset",
                "name the interface, e.g. %s=ib0" % var,
            )
        ]
    dl = parse_devlist(value)
    if var == "NCCL_IB_HCA":
        example = "write e.g. %s=^=mlx5_bond_0 or %s==mlx5_0,mlx5_3" % (var, var)
    else:
        example = "write e.g. %s=^docker,lo or %s==eth0" % (var, var)
    for p in dl.problems:
        out.append(Finding("error", var, value, p, example))
    for entry, extra in prefix_traps(dl, devices):
        verb = "excludes" if dl.exclude else "selects"
        out.append(
            Finding(
                "error" if var == "NCCL_IB_HCA" else "warning",
                var,
                value,
                "'%s' is a prefix: it also %s %s" % (entry, verb, ", ".join(extra)),
                "prefix the list with '=' for exact names: %s=%s=%s"
                % (var, "^" if dl.exclude else "", ",".join(e + (":%d" % p if p else "") for e, p in dl.entries)),
            )
        )
    return out


# -- fabric contradictions --------------------------------------------------


def _fabric_contradictions(env: Mapping[str, str], nt: NodeType, known_hcas: Sequence[str]) -> List[Finding]:
    out: List[Finding] = []
    fabric = nt.fabric
    rdma = fabric in ("infiniband", "roce")
    net = env.get("NCCL_NET")
    if rdma and _int_value(env.get("NCCL_IB_DISABLE", "0") or "0") == 1:
        out.append(
            Finding(
                "error",
                "NCCL_IB_DISABLE",
                env["NCCL_IB_DISABLE"],
                "turns off the %s RDMA transport of node type %s: NCCL falls back to TCP sockets" % (fabric, nt.name),
                "unset NCCL_IB_DISABLE",
            )
        )
    if net is not None:
        low = net.lower()
        if rdma and low == "socket":
            out.append(
                Finding(
                    "error",
                    "NCCL_NET",
                    net,
                    "forces TCP sockets on a %s fabric" % fabric,
                    "unset NCCL_NET (or NCCL_NET=IB)",
                )
            )
        if fabric in ("efa", "slingshot") and low == "ib":
            out.append(
                Finding(
                    "error",
                    "NCCL_NET",
                    net,
                    "the IB verbs transport cannot drive %s; it needs the aws-ofi-nccl plugin" % fabric,
                    'NCCL_NET="AWS Libfabric" (or unset it)',
                )
            )
    hca = env.get("NCCL_IB_HCA")
    if hca:
        out.extend(_hca_vs_site(hca, nt, known_hcas))
    if fabric == "infiniband":
        for var in ("NCCL_IB_GID_INDEX", "NCCL_IB_TC"):
            if var in env:
                out.append(
                    Finding("info", var, env[var], "only matters on RoCE; node type %s is native InfiniBand" % nt.name)
                )
    if fabric == "roce":
        tc = _int_value(env.get("NCCL_IB_TC", "") or "x")
        if nt.roce_traffic_class is not None and "NCCL_IB_TC" in env and tc != nt.roce_traffic_class:
            out.append(
                Finding(
                    "error",
                    "NCCL_IB_TC",
                    env["NCCL_IB_TC"],
                    "the site's lossless RoCE traffic class is %d; other classes can be dropped "
                    "under congestion" % nt.roce_traffic_class,
                    "NCCL_IB_TC=%d" % nt.roce_traffic_class,
                )
            )
        gid = _int_value(env.get("NCCL_IB_GID_INDEX", "") or "x")
        if nt.roce_gid_index is not None and "NCCL_IB_GID_INDEX" in env and gid not in (nt.roce_gid_index, -1):
            out.append(
                Finding(
                    "warning",
                    "NCCL_IB_GID_INDEX",
                    env["NCCL_IB_GID_INDEX"],
                    "the site config says GID index %d (RoCE v2)" % nt.roce_gid_index,
                    "NCCL_IB_GID_INDEX=%d, or unset it on NCCL >= 2.21 (auto)" % nt.roce_gid_index,
                )
            )
    ifname = env.get("NCCL_SOCKET_IFNAME")
    if ifname and nt.socket_ifname and len(ifname) > 1:
        dl = parse_devlist(ifname)
        if not dl.problems and not _selects_site_ifname(dl, nt.socket_ifname):
            out.append(
                Finding(
                    "warning",
                    "NCCL_SOCKET_IFNAME",
                    ifname,
                    "does not select the site's socket interface %s" % nt.socket_ifname,
                    "NCCL_SOCKET_IFNAME=%s" % nt.socket_ifname,
                )
            )
    if nt.link == "nvlink":
        if _int_value(env.get("NCCL_P2P_DISABLE", "0") or "0") == 1 or env.get("NCCL_P2P_LEVEL") in ("LOC", "0"):
            var = "NCCL_P2P_DISABLE" if "NCCL_P2P_DISABLE" in env else "NCCL_P2P_LEVEL"
            out.append(
                Finding(
                    "warning",
                    var,
                    env[var],
                    "disables NVLink peer-to-peer on %s: intra-node traffic goes through host memory" % nt.name,
                    "unset %s" % var,
                )
            )
    elif _int_value(env.get("NCCL_NVLS_ENABLE", "") or "x") == 1:
        out.append(
            Finding(
                "warning",
                "NCCL_NVLS_ENABLE",
                env["NCCL_NVLS_ENABLE"],
                "forces NVLink SHARP on %s, which has no NVSwitch: NCCL init fails" % nt.name,
                "unset NCCL_NVLS_ENABLE",
            )
        )
    if _int_value(env.get("NCCL_MNNVL_ENABLE", "") or "x") == 1 and nt.nvlink_domain <= nt.gpus:
        out.append(
            Finding(
                "warning",
                "NCCL_MNNVL_ENABLE",
                env["NCCL_MNNVL_ENABLE"],
                "forces multi-node NVLink, but %s's NVLink domain is one node" % nt.name,
                "unset NCCL_MNNVL_ENABLE",
            )
        )
    out.extend(_mnnvl_switched_off(env, nt))
    gdr = env.get("NCCL_NET_GDR_LEVEL")
    if rdma and gdr in ("LOC", "0"):
        out.append(
            Finding(
                "warning",
                "NCCL_NET_GDR_LEVEL",
                gdr,
                "disables GPUDirect RDMA: every message is staged through host memory",
                "unset it unless you are debugging peer memory",
            )
        )
    return out


def _mnnvl_switched_off(env: Mapping[str, str], nt: NodeType) -> List[Finding]:
    """NCCL_MNNVL_ENABLE=0 or NCCL_CUMEM_ENABLE=0 on a multi-node NVLink node type (GB200/GB300
    NVL72): NCCL then keeps all traffic between trays on the network without a word (src/mnnvl.cc:
    "MNNVL requires cuMem to be enabled", a plain return when it is not). Only where the site runs
    IMEX (node_types.X.mnnvl on or auto): with mnnvl: off the site itself sets NCCL_MNNVL_ENABLE=0."""
    if not nt.multi_node_nvlink or nt.mnnvl == "off":
        return []
    level = "error" if nt.mnnvl == "on" else "warning"
    out = []
    for var, what in (
        ("NCCL_MNNVL_ENABLE", "turns off multi-node NVLink"),
        ("NCCL_CUMEM_ENABLE", "turns off cuMem, without which NCCL turns off multi-node NVLink"),
    ):
        if var in env and _int_value(env[var] or "x") == 0:
            out.append(
                Finding(
                    level,
                    var,
                    env[var],
                    "%s on %s (an NVLink domain of %d GPUs over %d nodes): all traffic between its nodes "
                    "silently goes over %s instead" % (what, nt.name, nt.nvlink_domain, nt.domain_nodes, nt.fabric),
                    "unset %s (or, if the site runs no IMEX channels, set node_types.%s.mnnvl: off)" % (var, nt.name),
                )
            )
    return out


def _hca_vs_site(value: str, nt: NodeType, known_hcas: Sequence[str]) -> List[Finding]:
    out: List[Finding] = []
    nics = {n.name: n for n in nt.nics}
    if nt.fabric not in ("infiniband", "roce"):
        return [
            Finding(
                "warning",
                "NCCL_IB_HCA",
                value,
                "node type %s uses %s, not IB verbs; the list has no effect" % (nt.name, nt.fabric),
                "unset NCCL_IB_HCA",
            )
        ]
    dl = parse_devlist(value)
    if dl.problems:
        return out
    if not nics:
        return out
    selected = dl.select(sorted(known_hcas))
    storage = [d for d in selected if d in nics and nics[d].role != "compute"]
    if storage:
        out.append(
            Finding(
                "warning",
                "NCCL_IB_HCA",
                value,
                "selects storage/in-band NIC%s %s: NCCL would "
                "stripe training traffic over %s"
                % ("s" if len(storage) > 1 else "", ", ".join(storage), "them" if len(storage) > 1 else "it"),
                "list only the compute NICs: NCCL_IB_HCA==%s" % ",".join(n.name for n in nt.compute_nics),
            )
        )
    if not dl.exclude:
        unknown = [e for e, _ in dl.entries if not any(_entry_matches(e, None, d, None, dl.exact) for d in known_hcas)]
        if unknown:
            out.append(
                Finding(
                    "warning",
                    "NCCL_IB_HCA",
                    value,
                    "%s match%s no NIC of node type %s (%s)"
                    % (", ".join(unknown), "es" if len(unknown) == 1 else "", nt.name, ", ".join(sorted(nics))),
                    "NCCL_IB_HCA==%s" % ",".join(n.name for n in nt.compute_nics),
                )
            )
    missing = [n.name for n in nt.compute_nics if n.name not in selected]
    if selected and missing and not storage:
        out.append(
            Finding(
                "info",
                "NCCL_IB_HCA",
                value,
                "leaves out compute NIC%s %s" % ("s" if len(missing) > 1 else "", ", ".join(missing)),
            )
        )
    if not selected:
        out.append(
            Finding(
                "error",
                "NCCL_IB_HCA",
                value,
                "selects none of the node's RDMA NICs: NCCL falls back to TCP sockets",
                "NCCL_IB_HCA==%s" % ",".join(n.name for n in nt.compute_nics),
            )
        )
    return out


def errors(findings: Sequence[Finding]) -> List[Finding]:
    return [f for f in findings if f.level == "error"]


__all__ = [
    "VARS",
    "VarSpec",
    "Finding",
    "DevList",
    "parse_devlist",
    "prefix_traps",
    "lint_env",
    "errors",
    "PATH_LEVELS",
    "NET_NAMES",
]
