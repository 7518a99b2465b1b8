"""Pure parsers for what Slurm commands print, Slurm 22.05 through current.

Inputs are the texts of `sinfo --version`, `sinfo --json` (22.05's
``nodes`` list and 23.11+'s ``sinfo`` list), `scontrol show node|partition`
(one-line ``-o`` or the indented multi-line form) and `scontrol show config`.
Outputs are plain frozen dataclasses.  Nothing here runs a command.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Set, Tuple

from ..errors import SlurmError

Version = Tuple[int, int, int]


@dataclass(frozen=True)
class Gres:
    name: str  # "gpu"
    type: Optional[str]  # "h100", None when untyped (gpu:8)
    count: int

    def __str__(self) -> str:
        return ":".join(x for x in (self.name, self.type, str(self.count)) if x)


@dataclass(frozen=True)
class SlurmNode:
    name: str
    cpus: int
    memory_mb: int
    features: Tuple[str, ...] = ()
    gres: Tuple[Gres, ...] = ()
    partitions: Tuple[str, ...] = ()
    state: str = ""
    sockets: Optional[int] = None
    cores_per_socket: Optional[int] = None
    threads_per_core: Optional[int] = None

    @property
    def gpus(self) -> int:
        return sum(g.count for g in self.gres if g.name == "gpu")

    @property
    def gpu_types(self) -> Tuple[str, ...]:
        return tuple(g.type or "" for g in self.gres if g.name == "gpu" and g.count > 0)


@dataclass(frozen=True)
class SlurmPartition:
    name: str
    nodes: Tuple[str, ...]
    default: bool = False
    max_nodes: Optional[int] = None  # None = UNLIMITED
    oversubscribe: str = "NO"  # NO | EXCLUSIVE | YES[:n] | FORCE[:n]
    state: str = "UP"
    hidden: bool = False
    tres_gpus: Optional[int] = None  # gres/gpu in TRES= (None: TRES does not list GPUs)
    # partition exclusivity, one word whatever the release spells it: NO | NODE | USER | TOPO.
    # 26.05 has Exclusive=NO|NODE|USER|TOPO (and shows OverSubscribe=EXCLUSIVE as Exclusive=NODE
    # OverSubscribe=NO); up to 25.11 it is OverSubscribe=EXCLUSIVE, ExclusiveUser=YES, ExclusiveTopo=YES
    exclusive_mode: str = "NO"

    @property
    def exclusive(self) -> bool:
        """Jobs get whole nodes (NODE, or TOPO: one job per topology segment)."""
        return self.oversubscribe.upper().startswith("EXCLUSIVE") or self.exclusive_mode in ("NODE", "TOPO")


def exclusive_mode(rec: Mapping[str, str]) -> str:
    """NO | NODE | USER | TOPO from a partition record of any release (see SlurmPartition)."""
    mode = (rec.get("Exclusive") or "").strip().upper()
    if mode in ("NO", "NODE", "USER", "TOPO"):
        return mode
    if (rec.get("ExclusiveTopo") or "").upper() == "YES":  # both set: Slurm ignores ExclusiveUser
        return "TOPO"
    if (rec.get("ExclusiveUser") or "").upper() == "YES":
        return "USER"
    if (rec.get("OverSubscribe") or rec.get("Shared") or "").upper().startswith("EXCLUSIVE"):
        return "NODE"
    return "NO"


@dataclass(frozen=True)
class SinfoJson:
    version: Optional[Version]
    release: Optional[str]
    nodes: Tuple[SlurmNode, ...]
    partition_names: Tuple[str, ...] = ()
    ambiguous: Tuple[str, ...] = field(default_factory=tuple)  # nodes whose figures are min..max ranges


# ---------------------------------------------------------------------------
# small pieces

_VERSION = re.compile(r"(\d+)\.(\d+)(?:\.(\d+))?")


def parse_version(text: str) -> Tuple[Version, str]:
    """'slurm 23.11.4' / 'slurm-wlm 22.05.8' -> ((23, 11, 4), '23.11.4')."""
    m = _VERSION.search(text or "")
    if not m:
        raise SlurmError(
            "cannot read a Slurm version from %r (expected e.g. 'slurm 23.11.4')" % (text or "").strip()[:80]
        )
    v = (int(m.group(1)), int(m.group(2)), int(m.group(3) or 0))
    return v, m.group(0)


def version_label(v: Version) -> str:
    return "%d.%02d" % (v[0], v[1])


def parse_hostlist(expr: str) -> List[str]:
    """Expand a Slurm host list: 'gpu[01-04,07],login1', 'r[1-2]n[01-02]'."""
    out: List[str] = []
    for part in _split_top(expr or "", ","):
        part = part.strip()
        if part and part != "(null)":
            out.extend(_expand_one(part))
    return out


def compress_hostlist(names: Sequence[str]) -> str:
    """['gpu01','gpu02','gpu04'] -> 'gpu[01-02,04]': the inverse of parse_hostlist (the one codec for
    Slurm host lists; names without a trailing number come first, as given)."""
    groups: Dict[Tuple[str, int], List[int]] = {}
    plain: List[str] = []
    for n in names:
        m = re.match(r"^(.*?)(\d+)$", n)
        if not m:
            plain.append(n)
            continue
        groups.setdefault((m.group(1), len(m.group(2))), []).append(int(m.group(2)))
    out = list(plain)
    for (prefix, width), nums in groups.items():
        nums = sorted(set(nums))
        if len(nums) == 1:
            out.append("%s%0*d" % (prefix, width, nums[0]))
            continue
        ranges, start, prev = [], nums[0], nums[0]
        for x in nums[1:] + [None]:
            if x is not None and x == prev + 1:
                prev = x
                continue
            ranges.append("%0*d" % (width, start) if start == prev else "%0*d-%0*d" % (width, start, width, prev))
            if x is not None:
                start = prev = x
        out.append("%s[%s]" % (prefix, ",".join(ranges)))
    return ",".join(out)


def _split_top(text: str, sep: str) -> List[str]:
    """Split on `sep` outside [] and ()."""
    parts: List[str] = []
    depth = 0
    cur: List[str] = []
    for ch in text:
        if ch in "[(":
            depth += 1
        elif ch in "])":
            depth = max(0, depth - 1)
        if ch == sep and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur))
    return parts


def _expand_one(pattern: str) -> List[str]:
    m = re.search(r"\[([^\]]*)\]", pattern)
    if not m:
        return [pattern]
    head, tail = pattern[: m.start()], pattern[m.end() :]
    names: List[str] = []
    for rng in m.group(1).split(","):
        rng = rng.strip()
        if "-" in rng:
            lo, hi = rng.split("-", 1)
            width = len(lo)
            try:
                a, b = int(lo), int(hi)
            except ValueError:
                raise SlurmError("bad host range '%s' in '%s'" % (rng, pattern)) from None
            names.extend("%s%0*d" % (head, width, i) for i in range(a, b + 1))
        elif rng:
            names.append(head + rng)
    return [n + rest for n in names for rest in _expand_one(tail)]


_GRES_ITEM = re.compile(
    r"^(?P<name>[A-Za-z0-9_./-]+)(?::(?P<type>[^:()]+))?(?::(?P<count>\d+)(?P<suffix>[kKmMgG])?)?"
    r"(?:\((?P<extra>[^)]*)\))?$"
)


def parse_gres(text: Optional[str]) -> Tuple[Gres, ...]:
    """'gpu:h100:8(S:0-1),nic:1' -> (Gres('gpu','h100',8), Gres('nic',None,1)).

    Also: 'gpu:8', '(null)', 'N/A', AutoDetect names like 'gpu:nvidia_h100_80gb_hbm3:8',
    a bare 'gpu' (count 1) and count suffixes ('gpu:1k').
    """
    if text is None:
        return ()
    text = text.strip()
    if text in ("", "(null)", "N/A", "none", "None"):
        return ()
    out = []
    for item in _split_top(text, ","):
        item = item.strip()
        if not item:
            continue
        m = _GRES_ITEM.match(item)
        if not m:
            raise SlurmError("cannot read GRES '%s' (expected name[:type][:count], e.g. gpu:h100:8)" % item)
        gtype, count = m.group("type"), m.group("count")
        if count is None and gtype is not None and gtype.isdigit():
            gtype, count = None, gtype  # "gpu:8"
        n = int(count) if count is not None else 1
        n *= {"k": 1024, "m": 1024**2, "g": 1024**3}.get((m.group("suffix") or "").lower(), 1)
        out.append(Gres(m.group("name"), gtype, n))
    return tuple(out)


def _csv(text: Any) -> Tuple[str, ...]:
    if text is None:
        return ()
    if isinstance(text, list):
        return tuple(str(x) for x in text if str(x))
    text = str(text).strip()
    if text in ("", "(null)", "N/A"):
        return ()
    return tuple(x.strip() for x in text.split(",") if x.strip())


def _int(v: Any) -> Optional[int]:
    """Ints as Slurm prints them: 64000, '64000', {'set': true, 'number': 64000}, 'UNLIMITED'."""
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return v
    if isinstance(v, float):
        return int(v)
    if isinstance(v, dict):
        if v.get("infinite") or v.get("set") is False:
            return None
        return _int(v.get("number"))
    if isinstance(v, str):
        s = v.strip()
        if re.fullmatch(r"-?\d+", s):
            return int(s)
    return None


# ---------------------------------------------------------------------------
# scontrol show ...

_KEY = re.compile(r"^[A-Z][A-Za-z0-9_:/]*$")


def parse_scontrol_records(text: str, first_key: str) -> List[Dict[str, str]]:
    """`scontrol show node|partition [-o]` -> one dict per record.

    Values may contain spaces (``OS=Linux 5.15.0 #1 SMP ...``): a token is a new
    key only if it looks like ``CamelCase=``; anything else continues the value.
    """
    records: List[List[str]] = []
    for line in (text or "").splitlines():
        if not line.strip():
            continue
        if line.startswith(first_key + "="):
            records.append([line])
        elif records and line[:1].isspace():
            records[-1].append(line)
        elif records and not line.startswith(" "):
            # an unindented line that is not a new record: continuation of a long value
            records[-1].append(line)
    out = []
    for rec in records:
        out.append(_tokens_to_dict(" ".join(ln.strip() for ln in rec)))
    return out


def _tokens_to_dict(line: str) -> Dict[str, str]:
    info: Dict[str, str] = {}
    key = None
    for token in line.split(" "):
        if not token:
            if key is not None and info[key]:
                info[key] += " "
            continue
        name, sep, value = token.partition("=")
        if sep and _KEY.match(name):
            if key is not None:
                info[key] = info[key].strip()
            key = name
            info[key] = value
        elif key is not None:
            info[key] += (" " if info[key] and not info[key].endswith(" ") else "") + token
    if key is not None:
        info[key] = info[key].strip()
    return info


def parse_scontrol_nodes(text: str) -> List[SlurmNode]:
    nodes = []
    for rec in parse_scontrol_records(text, "NodeName"):
        name = rec.get("NodeName", "")
        cpus = _int(rec.get("CPUTot")) or _int(rec.get("CPUs")) or _int(rec.get("CPUEfctv")) or 0
        nodes.append(
            SlurmNode(
                name=name,
                cpus=cpus,
                memory_mb=_int(rec.get("RealMemory")) or 0,
                features=_csv(rec.get("AvailableFeatures", rec.get("Features"))),
                gres=parse_gres(rec.get("Gres")),
                partitions=_csv(rec.get("Partitions")),
                state=rec.get("State", ""),
                sockets=_int(rec.get("Sockets")),
                cores_per_socket=_int(rec.get("CoresPerSocket")),
                threads_per_core=_int(rec.get("ThreadsPerCore")),
            )
        )
    return nodes


def parse_scontrol_partitions(text: str) -> List[SlurmPartition]:
    parts = []
    for rec in parse_scontrol_records(text, "PartitionName"):
        over = rec.get("OverSubscribe") or rec.get("Shared") or "NO"
        parts.append(
            SlurmPartition(
                name=rec.get("PartitionName", ""),
                nodes=tuple(parse_hostlist(rec.get("Nodes", ""))),
                default=rec.get("Default", "NO").upper() == "YES",
                max_nodes=_int(rec.get("MaxNodes")),
                oversubscribe=over.upper(),
                state=rec.get("State", "UP").upper(),
                hidden=rec.get("Hidden", "NO").upper() == "YES",
                tres_gpus=tres_gpus(rec.get("TRES")),
                exclusive_mode=exclusive_mode(rec),
            )
        )
    return parts


def tres_gpus(text: Optional[str]) -> Optional[int]:
    """GPUs in a TRES string (``cpu=64,...,gres/gpu=32``; typed ``gres/gpu:h100=32`` entries
    add up when there is no untyped total); None when it names no GPUs. TRES lists GPUs only
    where AccountingStorageTRES includes gres/gpu, so None does not mean "no GPUs"."""
    total: Optional[int] = None
    typed = 0
    seen_typed = False
    for item in (text or "").split(","):
        key, _, value = item.strip().partition("=")
        n = _int(value)
        if n is None:
            continue
        if key.lower() == "gres/gpu":
            total = n
        elif key.lower().startswith("gres/gpu:"):
            typed += n
            seen_typed = True
    if total is not None:
        return total
    return typed if seen_typed else None


def parse_scontrol_config(text: str) -> Dict[str, str]:
    """`scontrol show config` ('Key = value' lines) -> dict."""
    out = {}
    for line in (text or "").splitlines():
        k, sep, v = line.partition("=")
        if sep and k.strip() and " " not in k.strip():
            out[k.strip()] = v.strip()
    return out


# ---------------------------------------------------------------------------
# sinfo --json


def parse_sinfo_json(text: str) -> SinfoJson:
    """Both shapes: 21.08-23.02 print ``nodes`` (one object per node); 23.11+
    print ``sinfo`` (one object per group of nodes and partition)."""
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise SlurmError("sinfo --json printed something that is not JSON: %s" % exc) from None
    if not isinstance(doc, dict):
        raise SlurmError("sinfo --json: expected a JSON object at the top")
    version, release = _meta_version(doc.get("meta"))
    if isinstance(doc.get("sinfo"), list):
        nodes, parts, amb = _sinfo_entries(doc["sinfo"])
        return SinfoJson(version, release, nodes, parts, amb)
    if isinstance(doc.get("nodes"), list):
        nodes = tuple(node_from_mapping(n) for n in doc["nodes"] if isinstance(n, dict))
        return SinfoJson(version, release, nodes, tuple(sorted({p for n in nodes for p in n.partitions})))
    errors = doc.get("errors") or []
    raise SlurmError(
        "sinfo --json: neither 'sinfo' nor 'nodes' in the output%s"
        % ("; errors: %s" % json.dumps(errors)[:200] if errors else "")
    )


def _meta_version(meta: Any) -> Tuple[Optional[Version], Optional[str]]:
    if not isinstance(meta, dict):
        return None, None
    slurm = meta.get("slurm") or meta.get("Slurm") or {}
    if not isinstance(slurm, dict):
        return None, None
    release = slurm.get("release")
    ver = slurm.get("version") or {}
    try:
        v = (int(ver["major"]), int(ver["minor"]), int(ver.get("micro", 0)))
        return v, release if isinstance(release, str) else "%d.%02d.%d" % v
    except (KeyError, TypeError, ValueError):
        pass
    if isinstance(release, str):
        try:
            return parse_version(release)[0], release
        except SlurmError:
            pass
    return None, None


def _get(d: Any, path: str) -> Any:
    for k in path.split("/"):
        if not isinstance(d, dict):
            return None
        d = d.get(k)
    return d


def node_from_mapping(n: Dict[str, Any]) -> SlurmNode:
    """One node object of sinfo --json (v0.0.38/39), the REST API or pyslurm's to_dict()."""
    state = n.get("state")
    if isinstance(state, list):
        state = "+".join(str(s) for s in state)
    gres = n.get("gres", n.get("configured_gres"))
    if isinstance(gres, dict):  # pyslurm: {"gpu:h100": 8}
        gres = ",".join("%s:%s" % (k, v) for k, v in gres.items())
    return SlurmNode(
        name=str(n.get("name") or n.get("hostname") or ""),
        cpus=_int(n.get("cpus")) or _int(n.get("total_cpus")) or 0,
        memory_mb=_int(n.get("real_memory")) or _int(n.get("memory")) or 0,
        features=_csv(n.get("features", n.get("available_features"))),
        gres=parse_gres(gres if isinstance(gres, str) else None),
        partitions=_csv(n.get("partitions")),
        state=str(state or ""),
        sockets=_int(n.get("sockets")),
        cores_per_socket=_int(n.get("cores", n.get("cores_per_socket"))),
        threads_per_core=_int(n.get("threads", n.get("threads_per_core"))),
    )


def _sinfo_entries(entries: List[Any]) -> Tuple[Tuple[SlurmNode, ...], Tuple[str, ...], Tuple[str, ...]]:
    by_name: Dict[str, SlurmNode] = {}
    order: List[str] = []
    parts: List[str] = []
    ambiguous: Set[str] = set()
    for e in entries:
        if not isinstance(e, dict):
            continue
        pname = _get(e, "partition/name")
        if pname and pname not in parts:
            parts.append(pname)
        names = _get(e, "nodes/nodes") or []
        if isinstance(names, str):
            names = parse_hostlist(names)
        cpus_lo, cpus_hi = _int(_get(e, "cpus/minimum")), _int(_get(e, "cpus/maximum"))
        mem_lo, mem_hi = _int(_get(e, "memory/minimum")), _int(_get(e, "memory/maximum"))
        if len(names) > 1 and (cpus_lo != cpus_hi or mem_lo != mem_hi):
            ambiguous.update(names)
        state = _get(e, "node/state")
        if isinstance(state, list):
            state = "+".join(str(s) for s in state)
        for name in names:
            node = SlurmNode(
                name=name,
                cpus=cpus_hi or cpus_lo or 0,
                memory_mb=mem_hi or mem_lo or 0,
                features=_csv(_get(e, "features/total")),
                gres=parse_gres(_get(e, "gres/total")),
                partitions=(pname,) if pname else (),
                state=str(state or ""),
                sockets=_int(_get(e, "sockets/maximum")),
                cores_per_socket=_int(_get(e, "cores/maximum")),
                threads_per_core=_int(_get(e, "threads/maximum")),
            )
            old = by_name.get(name)
            if old is None:
                by_name[name] = node
                order.append(name)
            elif pname and pname not in old.partitions:
                by_name[name] = SlurmNode(**{**old.__dict__, "partitions": old.partitions + (pname,)})
    return tuple(by_name[n] for n in order), tuple(parts), tuple(sorted(ambiguous))


def partitions_from_nodes(nodes: Iterable[SlurmNode], names: Iterable[str] = ()) -> List[SlurmPartition]:
    """Partitions known only from node membership (no default flag, no limits)."""
    members: Dict[str, List[str]] = {n: [] for n in names}
    for node in nodes:
        for p in node.partitions:
            members.setdefault(p, []).append(node.name)
    return [SlurmPartition(name=p, nodes=tuple(ns)) for p, ns in members.items()]
