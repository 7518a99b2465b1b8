"""`slurmgpu preflight`: check a node against the site before the launcher starts.

A multi-node job that lands on a node with a down HCA, a missing GPU or a
typo in an NCCL variable hangs until the NCCL timeout. Preflight runs once per
node (`srun --ntasks-per-node=1`) in seconds: facts come from probe.py (the
same nvidia-smi / sysfs / interface readers `slurmgpu probe` uses), the rules
from the site config and ncclenv.py. Each node prints its record (short lines,
srun-safe); one aggregation step prints a single table, failing nodes first, and exits
non-zero so the script stops (docs/preflight.md shows the script lines).

Testing hook: SLURMGPU_PROBE_FIXTURE=DIR makes the facts come from a recorded
node (DIR/sys = sysfs root, DIR/dev = /dev (IMEX channels), DIR/nvidia-smi-q.txt etc. or DIR/commands.json =
recorded command output, optional DIR/nodes.json = per-node fixture dirs)
instead of this machine.
"""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import socket
import zlib
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from ..errors import ConfigError, Issue, SlurmgpuError
from ..nccl import lint_env, parse_devlist
from ..plan import Layout
from ..plan.placement import DOMAIN_KINDS, group_nodes
from ..site import Nic, NodeType, Site, SitePreflight
from ..slurm import NOT_FOUND, CommandResult, compress_hostlist, parse_hostlist
from .probe import NetIf, ProbeResult, probe, read_net_sysfs

RECORD_PREFIX = "SLURMGPU-PREFLIGHT "
RECORD_CHUNK = 800  # base64 characters per record line (lines must stay below srun's 1 KiB messages)
FIXTURE_ENV = "SLURMGPU_PROBE_FIXTURE"
DEFAULT_PORT = 29500
DEFAULT_MIN_FREE_GB = SitePreflight.min_free_gb  # the site config's defaults, one place
DEFAULT_BANDWIDTH_FRACTION = SitePreflight.min_bandwidth_fraction
SHOWN_WHEN_OK = ("bandwidth",)  # checks whose passing result is a measurement worth a row


@dataclass(frozen=True)
class CheckResult:
    """One row of the report."""

    node: str
    check: str
    status: str  # fail | warn | ok | skip
    found: str
    expected: str = ""
    fix: str = ""

    def to_dict(self) -> Dict[str, str]:
        return asdict(self)


def _int_field(v: Any) -> Optional[int]:
    """A whole number >= 0 from a record (None: absent or anything else)."""
    if isinstance(v, bool):
        return None
    if isinstance(v, int) and v >= 0:
        return v
    if isinstance(v, str) and v.isdigit():
        return int(v)
    return None


@dataclass(frozen=True)
class NodeReport:
    node: str
    site: str
    results: Tuple[CheckResult, ...]
    nvlink_clique: str = ""  # "ClusterUUID/CliqueId" from nvidia-smi -q (multi-node NVLink), for the job check
    # where Slurm put this node in the preflight step (one task per node): its task rank
    # (SLURM_PROCID) and node rank (SLURM_NODEID); the job check orders the nodes by the one the
    # launcher numbers its ranks by (26.05: task ranks in topology order, node ranks in name order)
    task_rank: Optional[int] = None
    node_id: Optional[int] = None

    @property
    def ok(self) -> bool:
        return not any(r.status == "fail" for r in self.results)

    def to_dict(self) -> Dict[str, Any]:
        return {
            "node": self.node,
            "site": self.site,
            "ok": self.ok,
            "nvlink_clique": self.nvlink_clique,
            "task_rank": self.task_rank,
            "node_id": self.node_id,
            "results": [r.to_dict() for r in self.results],
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> NodeReport:
        return cls(
            node=str(d["node"]),
            site=str(d.get("site", "")),
            results=tuple(CheckResult(**{k: str(v) for k, v in r.items()}) for r in d.get("results", ())),
            nvlink_clique=str(d.get("nvlink_clique") or ""),
            task_rank=_int_field(d.get("task_rank")),
            node_id=_int_field(d.get("node_id")),
        )

    def record(self, key: Optional[str] = None) -> str:
        """What a node prints for the aggregation step: lines `SLURMGPU-PREFLIGHT KEY i/n DATA`.

        DATA is the report as zlib-compressed JSON in URL-safe base64, cut into pieces so every
        line stays under 1 KiB: srun forwards task output in 1 KiB messages and splits longer
        lines, interleaving other nodes' output into them. KEY is the node, or NODE/LOCALID for
        one rank's record (the rank step: several tasks per node, merged by node when read).
        """
        raw = json.dumps(self.to_dict(), separators=(",", ":")).encode()
        data = base64.urlsafe_b64encode(zlib.compress(raw, 9)).decode()
        parts = [data[i : i + RECORD_CHUNK] for i in range(0, len(data), RECORD_CHUNK)] or [""]
        return "\n".join(
            "%s%s %d/%d %s" % (RECORD_PREFIX, key or self.node, i + 1, len(parts), part) for i, part in enumerate(parts)
        )


@dataclass(frozen=True)
class Options:
    """What the generated script (or the user) tells preflight beyond the site."""

    partition: Optional[str] = None
    rdzv_port: Optional[int] = None
    first_node: Optional[bool] = None  # None: SLURM_NODEID == 0, or not in a job
    container_runtime: Optional[str] = None  # overrides site.container.runtime
    checkpoint_dir: Optional[str] = None
    min_free_gb: float = DEFAULT_MIN_FREE_GB
    expect_gpus: Optional[int] = None


# ---------------------------------------------------------------------------
# Facts: probe.py on this node, or a recorded node (testing hook)


class FixtureRunner:
    """Replays command output recorded in a fixture directory.

    A command's stdout is DIR/<words joined by '-', leading dashes dropped>.txt
    (`nvidia-smi topo -m` -> nvidia-smi-topo-m.txt, the layout of
    tests/data/probe/*), or what DIR/commands.json maps the command line to: a
    file path relative to DIR, or {"rc": N, "stdout": "...", "stderr": "..."}.
    Anything else is "command not found", as on a node without that tool.
    """

    def __init__(self, root: str):
        self.root = root
        path = os.path.join(root, "commands.json")
        try:
            with open(path) as f:
                self.table = json.load(f)
        except FileNotFoundError:
            self.table = {}
        except ValueError as exc:
            raise ConfigError([Issue(path, None, None, "", "not valid JSON: %s" % exc)]) from None

    def run(self, argv: Sequence[str], timeout: float = 60.0) -> CommandResult:
        argv = tuple(argv)
        entry = self.table.get(" ".join(argv))
        if entry is None:
            conventional = "-".join(a.lstrip("-") for a in argv) + ".txt"
            entry = conventional if os.path.exists(os.path.join(self.root, conventional)) else None
        if entry is None:
            return CommandResult(argv, NOT_FOUND, "", "%s: command not found" % argv[0])
        if isinstance(entry, str):
            with open(os.path.join(self.root, entry), errors="replace") as f:
                return CommandResult(argv, 0, f.read(), "")
        return CommandResult(argv, int(entry.get("rc", 0)), entry.get("stdout", ""), entry.get("stderr", ""))


def fixture_dir(root: str, node: str) -> str:
    """DIR/nodes.json may send each node (or "*") to its own recorded node."""
    path = os.path.join(root, "nodes.json")
    if os.path.exists(path):
        with open(path) as f:
            table = json.load(f)
        rel = table.get(node, table.get("*"))
        if rel is None:
            raise ConfigError([Issue(path, None, None, node, 'no fixture for node %s and no "*" entry' % node)])
        return os.path.normpath(os.path.join(root, rel))
    return root


def gather_facts(node: str, environ: Mapping[str, str]) -> Tuple[ProbeResult, bool]:
    """(facts, from_fixture): probe this node, or the recorded node named by SLURMGPU_PROBE_FIXTURE."""
    root = environ.get(FIXTURE_ENV)
    if root:
        d = fixture_dir(root, node)
        if not os.path.isdir(d):
            raise SlurmgpuError("%s=%s: no such directory" % (FIXTURE_ENV, d))
        return probe(
            sysfs=os.path.join(d, "sys"),
            runner=FixtureRunner(d),
            hostname=node,
            net_reader=read_net_sysfs,
            devroot=os.path.join(d, "dev"),
        ), True
    return probe(hostname=node), False


def node_name(environ: Mapping[str, str]) -> str:
    """Slurm's name for this node (several slurmd may share one host), else the short hostname."""
    return environ.get("SLURMD_NODENAME") or socket.gethostname().split(".")[0]


# ---------------------------------------------------------------------------
# The checks


def run_checks(
    site: Site,
    facts: ProbeResult,
    environ: Mapping[str, str],
    opts: Options = Options(),
    node: Optional[str] = None,
    addresses: Optional[Mapping[str, Sequence[str]]] = None,
) -> NodeReport:
    """All checks for one node. `addresses` (interface -> IPs) enables the address check."""
    node = node or facts.hostname
    nt = _node_type(site, opts, environ)
    results: List[CheckResult] = []
    results += check_gpus(node, nt, facts, environ, opts)
    results += check_nvlink(node, nt, facts)
    results += check_mnnvl(node, nt, facts, environ)
    results += check_hcas(node, nt, facts, environ)
    results += check_socket(node, nt, facts, environ, addresses)
    results += check_nccl_env(node, nt, facts, environ)
    results += check_rendezvous(node, environ, opts)
    results += check_container(node, site, opts)
    results += check_checkpoint(node, site, environ, opts)
    return NodeReport(node=node, site=site.name, results=tuple(results), nvlink_clique=facts.nvlink_clique or "")


def _node_type(site: Site, opts: Options, environ: Mapping[str, str]) -> NodeType:
    part = opts.partition or environ.get("SLURM_JOB_PARTITION")
    if part and "," in part:
        part = part.split(",")[0]
    if part and part in site.partitions:
        return site.node_type_of(part)
    if opts.partition:
        site.partition(opts.partition)  # raises the "no partition" error
    return site.node_type_of()


def _ok(node: str, check: str, found: str, expected: str = "") -> CheckResult:
    return CheckResult(node, check, "ok", found, expected)


_FORM_FACTOR = re.compile(r"^(SXM\d*|PCIE|PCI|HBM\d*E?|NVL|OAM|\d+GB|\d+G|NVIDIA|AMD|INSTINCT|TESLA|GEFORCE)$")


def gpu_family(model: str) -> Tuple[str, ...]:
    """The tokens that name the GPU: 'H100-SXM5-80GB' -> ('H100',), 'NVIDIA GeForce RTX 4090' -> ('RTX', '4090')."""
    toks = [t for t in re.split(r"[^A-Z0-9]+", model.upper()) if t]
    fam = [t for t in toks if not _FORM_FACTOR.match(t) and (re.search(r"\d", t) or t in ("RTX",))]
    return tuple(fam)


def gpu_model_matches(site_model: str, reported: str) -> bool:
    want = gpu_family(site_model)
    have = set(re.split(r"[^A-Z0-9]+", reported.upper()))
    return bool(want) and all(t in have for t in want)


def check_gpus(
    node: str, nt: NodeType, facts: ProbeResult, environ: Mapping[str, str], opts: Options
) -> List[CheckResult]:
    tool = "rocm-smi" if nt.vendor == "amd" else "nvidia-smi"
    expected_n = opts.expect_gpus
    if expected_n is None:
        on_node = environ.get("SLURM_GPUS_ON_NODE", "")
        expected_n = int(on_node) if on_node.isdigit() and int(on_node) > 0 else nt.gpus
    want = "%d x %s" % (expected_n, nt.gpu_model)
    if facts.gpu_tool is None:
        why = next((m for m in facts.missing if tool in m), "%s not found" % tool)
        return [
            CheckResult(
                node,
                "gpus",
                "fail",
                why,
                want,
                "run on a GPU node of this site (check --partition/--constraint) and that the "
                "driver works (%s); the job must ask for GPUs (--gpus-per-node)" % tool,
            )
        ]
    gpus = facts.gpus
    names = sorted({g.name for g in gpus})
    found = "%d x %s" % (len(gpus), " / ".join(names) or "?")
    out: List[CheckResult] = []
    if len(gpus) < expected_n:
        out.append(
            CheckResult(
                node,
                "gpus",
                "fail",
                found + " (%s)" % facts.gpu_tool,
                want,
                "a GPU is missing (fallen off the bus or driver error): resubmit with "
                "--exclude=%s and report the node to the admins" % node,
            )
        )
    wrong = [n for n in names if not gpu_model_matches(nt.gpu_model, n)]
    if wrong:
        out.append(
            CheckResult(
                node,
                "gpus",
                "fail",
                found,
                want,
                "this is not a %s node: check --partition/--constraint, or fix the site "
                "config's gpu_model" % nt.gpu_model,
            )
        )
    mems = sorted({g.memory_mib for g in gpus if g.memory_mib})
    if mems and not wrong:
        gb = mems[0] * 2**20 / 1e9
        if abs(gb - nt.gpu_memory_gb) > 0.15 * nt.gpu_memory_gb:
            out.append(
                CheckResult(
                    node,
                    "gpus",
                    "warn",
                    "%d MiB per GPU (%.0f GB)" % (mems[0], gb),
                    "%g GB per GPU" % nt.gpu_memory_gb,
                    "the planner assumes %g GB: fix gpu_memory_gb in the site config" % nt.gpu_memory_gb,
                )
            )
    return out or [_ok(node, "gpus", found, want)]


def check_nvlink(node: str, nt: NodeType, facts: ProbeResult) -> List[CheckResult]:
    if nt.link != "nvlink" or not facts.gpus or facts.gpu_tool != "nvidia-smi":
        return []
    topo = facts.topology
    if topo is None:
        return [
            CheckResult(
                node,
                "nvlink",
                "warn",
                "no GPU topology (nvidia-smi topo -m failed)",
                "NVLink between the GPUs",
                "run `nvidia-smi topo -m` on %s" % node,
            )
        ]
    gpus = list(topo.gpus)
    peers = max(0, min(nt.nvlink_domain, nt.gpus, len(gpus)) - 1)
    counts: Dict[Tuple[str, str], int] = {}
    lonely = []
    for g in gpus:
        nv = [o for o in gpus if o != g and topo.link(g, o).startswith("NV")]
        if len(nv) < peers:
            lonely.append("%s (%d NVLink peer%s)" % (g, len(nv), "" if len(nv) == 1 else "s"))
        for o in nv:
            n = topo.link(g, o)[2:]
            if n.isdigit():
                counts[(g, o)] = int(n)
    out = []
    if lonely:
        out.append(
            CheckResult(
                node,
                "nvlink",
                "fail",
                "; ".join(lonely),
                "%d NVLink peers per GPU" % peers,
                "NVLink/NVSwitch fault on %s (`nvidia-smi nvlink --status` shows inactive links): "
                "resubmit with --exclude=%s and report it" % (node, node),
            )
        )
    if counts:
        best = max(counts.values())
        weak = sorted({tuple(sorted(k)) for k, v in counts.items() if v < best})
        if weak:
            pairs = ", ".join("%s-%s NV%d" % (a, b, counts[(a, b)]) for a, b in weak[:4])
            out.append(
                CheckResult(
                    node,
                    "nvlink",
                    "fail",
                    pairs + (" (+%d)" % (len(weak) - 4) if len(weak) > 4 else ""),
                    "NV%d between every pair" % best,
                    "an NVLink is down on %s: resubmit with --exclude=%s and report it" % (node, node),
                )
            )
    return out or [
        _ok(node, "nvlink", "%d GPUs, NV%d between every pair" % (len(gpus), max(counts.values()) if counts else 0))
    ]


def _job_nodes(environ: Mapping[str, str]) -> int:
    v = environ.get("SLURM_JOB_NUM_NODES") or environ.get("SLURM_NNODES") or ""
    return int(v) if v.isdigit() else 1


def check_mnnvl(node: str, nt: NodeType, facts: ProbeResult, environ: Mapping[str, str]) -> List[CheckResult]:
    """Multi-node NVLink (NVL72): the node reports its NVLink domain, and has an IMEX channel where
    a multi-node job needs one (switch/nvidia_imex gives each job /dev/nvidia-caps-imex-channels/channelN)."""
    if not getattr(nt, "multi_node_nvlink", False) or not facts.gpus or facts.gpu_tool != "nvidia-smi":
        return []
    out: List[CheckResult] = []
    if facts.nvlink_clique:
        out.append(_ok(node, "nvl-domain", "ClusterUUID/CliqueId %s" % facts.nvlink_clique))
    else:
        why = next((m for m in facts.missing if "NVLink fabric" in m or "NVLink domains" in m), "")
        out.append(
            CheckResult(
                node,
                "nvl-domain",
                "warn",
                why or "no ClusterUUID/CliqueId in nvidia-smi -q (Fabric section N/A)",
                "the %d-GPU NVLink domain's ClusterUUID/CliqueId" % nt.nvlink_domain,
                "check the fabric manager / IMEX service on %s (`nvidia-smi -q | grep -A4 Fabric`); without it the "
                "trays of a rack cannot use NVLink between them" % node,
            )
        )
    if _job_nodes(environ) <= 1 or nt.mnnvl == "off":
        return out
    if facts.imex_channels:
        out.append(_ok(node, "imex", "IMEX channel %s" % ", ".join(facts.imex_channels)))
    else:
        out.append(
            CheckResult(
                node,
                "imex",
                "fail" if nt.mnnvl == "on" else "warn",
                "no /dev/nvidia-caps-imex-channels/channel*",
                "an IMEX channel for multi-node NVLink (mnnvl: %s)" % nt.mnnvl,
                "the job needs SwitchType=switch/nvidia_imex in slurm.conf (or the nvidia-imex service and "
                "`mknod` of channel0); until then NCCL cannot use NVLink between trays"
                + ("" if nt.mnnvl == "on" else " and falls back to the network"),
            )
        )
    return out


Wanted = List[Tuple[str, Optional[int], Optional[Nic]]]  # (device, port or None, the site's Nic or None)


def _rdma_wanted(nt: NodeType, facts: ProbeResult, environ: Mapping[str, str]) -> Tuple[str, Wanted]:
    """(where the list comes from, the devices NCCL should use)."""
    nics = {n.name: n for n in nt.nics}
    present = sorted({p.device for p in facts.rdma})
    value = environ.get("NCCL_IB_HCA")
    if value and nt.fabric in ("infiniband", "roce"):
        dl = parse_devlist(value)
        if dl.problems:
            return "NCCL_IB_HCA=%s" % value, []  # the nccl-env check reports the syntax
        if dl.exclude:
            pool = [n.name for n in nt.compute_nics] or present
            return "NCCL_IB_HCA=%s" % value, [(d, None, nics.get(d)) for d in pool if dl.matches(d)]
        wanted: Wanted = []
        for name, port in dl.entries:
            hits = [name] if dl.exact else [d for d in present if d.startswith(name)] or [name]
            wanted.extend((d, port, nics.get(d)) for d in hits)
        return "NCCL_IB_HCA=%s" % value, wanted
    return "site %s compute NICs" % nt.name, [(n.name, n.port, n) for n in nt.compute_nics]


def check_hcas(node: str, nt: NodeType, facts: ProbeResult, environ: Mapping[str, str]) -> List[CheckResult]:
    if nt.fabric == "slingshot":
        want = [n.name for n in nt.compute_nics]
        missing = [n for n in want if n not in facts.cxi_devices]
        if missing:
            return [
                CheckResult(
                    node,
                    "hca",
                    "fail",
                    "missing %s (present: %s)" % (", ".join(missing), ", ".join(facts.cxi_devices) or "none"),
                    "Slingshot NICs %s" % ", ".join(want),
                    "the node lost a Slingshot NIC: resubmit with --exclude=%s and report it" % node,
                )
            ]
        return [_ok(node, "hca", "%d Slingshot NICs" % len(want))] if want else []
    if nt.fabric not in ("infiniband", "roce", "efa"):
        return []
    source, wanted = _rdma_wanted(nt, facts, environ)
    out: List[CheckResult] = []
    ports: Dict[str, list] = {}
    for p in facts.rdma:
        ports.setdefault(p.device, []).append(p)
    present = ", ".join(sorted(ports)) or "none"
    good = 0
    missing = []
    for dev, port, nic in wanted:
        have = [p for p in ports.get(dev, []) if port is None or p.port == port]
        layer = {"infiniband": "InfiniBand", "ethernet": "Ethernet"}.get(getattr(nic, "link_layer", ""), "")
        expect = (
            "ACTIVE"
            + (", %s" % layer if layer and nt.fabric != "efa" else "")
            + (", %g Gb/s" % nic.gbps if nic is not None and nic.gbps else "")
        )
        if not have:
            missing.append(dev + (":%d" % port if port else ""))
            continue
        for p in have:
            name = "%s port %d" % (p.device, p.port)
            if not p.active:
                out.append(
                    CheckResult(
                        node,
                        "hca",
                        "fail",
                        "%s: %s" % (name, p.state),
                        expect,
                        "%s is down on %s: resubmit with --exclude=%s and report it (admins: "
                        "`ibstat %s`, cable/switch port; drain the node)" % (p.device, node, node, p.device),
                    )
                )
            elif layer and nt.fabric != "efa" and p.link_layer.lower() != layer.lower():
                out.append(
                    CheckResult(
                        node,
                        "hca",
                        "fail",
                        "%s: link layer %s" % (name, p.link_layer),
                        expect,
                        "the port runs as %s but the site's %s fabric needs %s: fix the port "
                        "mode (mlxconfig LINK_TYPE) or the site config" % (p.link_layer, nt.fabric, layer),
                    )
                )
            elif nic is not None and nic.gbps and p.gbps and p.gbps < nic.gbps:
                out.append(
                    CheckResult(
                        node,
                        "hca",
                        "warn",
                        "%s: %g Gb/s" % (name, p.gbps),
                        expect,
                        "link trained below its speed: check the cable/transceiver of %s" % p.device,
                    )
                )
            else:
                good += 1
    if missing:
        out.insert(
            0,
            CheckResult(
                node,
                "hca",
                "fail",
                "%s: no such device in /sys/class/infiniband (present: %s)" % (", ".join(missing), present),
                "ACTIVE (from %s)" % source,
                "the HCA%s missing on %s (driver or hardware): resubmit with --exclude=%s and report "
                "it; if a name is wrong, fix NCCL_IB_HCA or the site's nics"
                % (" is" if len(missing) == 1 else "s are", node, node),
            ),
        )
    if not wanted:
        return out
    if not any(r.status == "fail" for r in out):
        out.insert(0, _ok(node, "hca", "%d RDMA port%s ACTIVE (%s)" % (good, "" if good == 1 else "s", source)))
    return out


def check_socket(
    node: str,
    nt: NodeType,
    facts: ProbeResult,
    environ: Mapping[str, str],
    addresses: Optional[Mapping[str, Sequence[str]]],
) -> List[CheckResult]:
    value = environ.get("NCCL_SOCKET_IFNAME") or nt.socket_ifname
    if not value or len(value) <= 1:
        return [CheckResult(node, "socket", "skip", "NCCL_SOCKET_IFNAME not set: NCCL picks an interface")]
    src = "NCCL_SOCKET_IFNAME" if environ.get("NCCL_SOCKET_IFNAME") else "site socket_ifname"
    dl = parse_devlist(value)
    if dl.problems:
        return []  # reported by the nccl_env check
    ifaces: List[NetIf] = [i for i in facts.interfaces if i.kind != "loopback" or not dl.exclude]
    names = ", ".join(i.name for i in facts.interfaces) or "none"
    chosen = [i for i in ifaces if dl.matches(i.name)]
    expect = "%s=%s: an interface that is up%s" % (src, value, " with an IP address" if addresses is not None else "")
    fix = "set NCCL_SOCKET_IFNAME to an interface every node has (the site says %s; '=' makes names exact)" % (
        nt.socket_ifname or "nothing"
    )
    if not chosen:
        return [CheckResult(node, "socket", "fail", "no interface matches (present: %s)" % names, expect, fix)]
    up = [i for i in chosen if i.up]
    if not up:
        return [
            CheckResult(
                node,
                "socket",
                "fail",
                "%s down" % ", ".join(i.name for i in chosen),
                expect,
                "bring the interface up or exclude %s (--exclude=%s)" % (node, node),
            )
        ]
    if addresses is not None:
        with_ip = [i for i in up if addresses.get(i.name)]
        if not with_ip:
            return [
                CheckResult(
                    node,
                    "socket",
                    "fail",
                    "%s up but without an IP address" % ", ".join(i.name for i in up),
                    expect,
                    "NCCL only uses interfaces with an address; " + fix,
                )
            ]
        up = with_ip
    return [_ok(node, "socket", "%s up" % ", ".join(i.name for i in up), expect)]


def check_nccl_env(node: str, nt: NodeType, facts: ProbeResult, environ: Mapping[str, str]) -> List[CheckResult]:
    findings = lint_env(environ, nt, hcas=[p.device for p in facts.rdma], ifaces=[i.name for i in facts.interfaces])
    out = []
    for f in findings:
        if f.level == "info":
            continue
        out.append(
            CheckResult(
                node,
                "nccl-env",
                "fail" if f.level == "error" else "warn",
                "%s=%s: %s" % (f.var, f.value, f.message),
                "",
                f.fix,
            )
        )
    n = len([k for k in environ if k.startswith(("NCCL_", "TORCH_NCCL_"))])
    return out or [_ok(node, "nccl-env", "%d NCCL variable%s valid" % (n, "" if n == 1 else "s"))]


def is_first_node(environ: Mapping[str, str], opts: Options) -> bool:
    if opts.first_node is not None:
        return opts.first_node
    nid = environ.get("SLURM_NODEID")
    return nid is None or nid == "0"


def port_free(port: int, host: str = "") -> Optional[str]:
    """None when a listener could bind `port` now, else the OS error text."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as torch's TCPStore does
        s.bind((host or "0.0.0.0", port))
        s.listen(1)
    except OSError as exc:
        return exc.strerror or str(exc)
    finally:
        s.close()
    return None


def check_rendezvous(node: str, environ: Mapping[str, str], opts: Options) -> List[CheckResult]:
    out = []
    addr = environ.get("MASTER_ADDR")
    fix_addr = (
        "hosts=$(scontrol show hostnames \"$SLURM_JOB_NODELIST\"); MASTER_ADDR=${hosts%%$'\\n'*} in the "
        "batch script (not `| head -n1`: under pipefail it dies of SIGPIPE on long host lists)"
    )
    if addr:
        try:
            socket.getaddrinfo(addr, None)
            out.append(_ok(node, "rendezvous", "MASTER_ADDR=%s resolves" % addr))
        except socket.gaierror as exc:
            out.append(
                CheckResult(
                    node,
                    "rendezvous",
                    "fail",
                    "MASTER_ADDR=%s does not resolve (%s)" % (addr, exc.strerror),
                    "a name or address every node resolves",
                    fix_addr,
                )
            )
    port_s = str(opts.rdzv_port) if opts.rdzv_port else environ.get("MASTER_PORT", str(DEFAULT_PORT))
    if not port_s.isdigit() or not 0 < int(port_s) < 65536:
        return out + [
            CheckResult(
                node,
                "rendezvous",
                "fail",
                "MASTER_PORT=%s" % port_s,
                "a TCP port 1-65535",
                "MASTER_PORT=$((20000 + SLURM_JOB_ID % 10000))",
            )
        ]
    if is_first_node(environ, opts):
        err = port_free(int(port_s))
        if err:
            out.append(
                CheckResult(
                    node,
                    "rendezvous",
                    "fail",
                    "port %s busy (%s)" % (port_s, err),
                    "port %s free on the first node" % port_s,
                    "another job or process on %s uses it: MASTER_PORT=$((20000 + SLURM_JOB_ID %% 10000))" % node,
                )
            )
        else:
            out.append(_ok(node, "rendezvous", "port %s free" % port_s))
    return out


def check_container(node: str, site: Site, opts: Options) -> List[CheckResult]:
    runtime = opts.container_runtime or site.container.runtime
    if runtime in (None, "", "none"):
        return []
    tools = {"pyxis": ("enroot",), "apptainer": ("apptainer", "singularity")}.get(runtime, (runtime,))
    for t in tools:
        path = shutil.which(t)
        if path:
            return [_ok(node, "container", "%s at %s" % (t, path), "%s runtime" % runtime)]
    return [
        CheckResult(
            node,
            "container",
            "fail",
            "%s not found on PATH" % " / ".join(tools),
            "%s runtime" % runtime,
            "this node cannot start the job's container: use nodes with %s, or turn containers off in the "
            "job spec" % runtime,
        )
    ]


def check_checkpoint(node: str, site: Site, environ: Mapping[str, str], opts: Options) -> List[CheckResult]:
    raw = opts.checkpoint_dir or environ.get("SLURMGPU_CHECKPOINT_DIR") or site.checkpoint_dir
    if not raw:
        return []
    from ..render import expand_path

    path = expand_path(raw, environ)  # as the job script expands it: only the path variables
    probe_at = path
    while not os.path.exists(probe_at):
        parent = os.path.dirname(probe_at)
        if parent == probe_at:
            break
        probe_at = parent
    want = "%g GB free, writable" % opts.min_free_gb
    if not os.access(probe_at, os.W_OK):
        return [
            CheckResult(
                node,
                "checkpoint",
                "fail",
                "%s not writable (nearest existing: %s)" % (path, probe_at),
                want,
                "point the checkpoint directory somewhere you can write",
            )
        ]
    free = shutil.disk_usage(probe_at).free / 1e9
    found = "%.1f GB free at %s" % (free, path if probe_at == path else "%s (for %s)" % (probe_at, path))
    if free < opts.min_free_gb:
        return [
            CheckResult(
                node,
                "checkpoint",
                "fail",
                found,
                want,
                "free space on that file system or choose another checkpoint directory",
            )
        ]
    return [_ok(node, "checkpoint", found, want)]


def local_addresses() -> Dict[str, List[str]]:
    """Interface -> IPv4/IPv6 addresses on this machine (psutil)."""
    import psutil

    fams = (socket.AF_INET, socket.AF_INET6)
    return {name: [a.address for a in addrs if a.family in fams] for name, addrs in psutil.net_if_addrs().items()}


RANK_HOWS = ("srun", "torchrun", "deepspeed", "accelerate", "vllm", "sglang")  # job/binding.py HOWS but none


def rank_report(
    site: Site,
    environ: Mapping[str, str],
    how: str,
    opts: Options = Options(),
    affinity: Optional[Any] = None,
) -> Tuple[NodeReport, str]:
    """One task of the rank step (`srun --ntasks-per-node=GPUS <the launch's binding> slurmgpu preflight
    --ranks HOW --record`): this rank's real CPUs, memory policy, GPU NUMA node and NIC against the site
    map. Returns the report and its record key (NODE/LOCALID)."""
    from . import affinity as aff

    node = node_name(environ)
    nt = _node_type(site, opts, environ)
    root = environ.get(FIXTURE_ENV)
    sysfs = os.path.join(fixture_dir(root, node), "sys") if root else "/sys"
    amap = nt.affinity
    ranks = amap.ranks(nt.gpus) if amap is not None and amap.known else ()
    local = int(environ.get("SLURM_LOCALID", "0") or 0)
    plan = ranks[local] if local < len(ranks) else None
    exact = how == "srun" and bool(ranks) and all(r.cpus for r in ranks)
    facts = aff.gather_rank_facts(environ, sysfs, plan, node, how, affinity)
    if root:  # a recorded node: this machine's cpuset memory nodes say nothing about it
        facts = replace(facts, mems=())
    if not ranks:
        why = amap.unknown if amap is not None else "no affinity map"
        findings = [
            aff.Finding(
                "fail",
                "site %s, node type %s: %s" % (site.name, nt.name, why),
                "an affinity map to check the ranks against",
                "the script binds nothing without a map: drop --ranks, or give node_types.%s.affinity" % nt.name,
            )
        ]
    else:
        findings = aff.check_rank(facts, plan, how, exact, nt, site.name)
    results = tuple(CheckResult(node, "affinity", f.status, f.found, f.expected, f.fix) for f in findings)
    return NodeReport(node=node, site=site.name, results=results), "%s/%d" % (node, local)


def check_rank_counts(agg: Aggregate, expect_nodes: Sequence[str], per_node: int) -> List[CheckResult]:
    """A failing row for every node from which fewer than `per_node` rank records arrived."""
    out = []
    for node in list(expect_nodes) or sorted(agg.rank_keys):
        got = len(agg.rank_keys.get(node, ()))
        if got < per_node:
            out.append(
                CheckResult(
                    node,
                    "affinity",
                    "fail",
                    "%d of %d ranks reported" % (got, per_node),
                    "a record from every rank",
                    "the rank step did not start every task (see the srun errors above: a --cpu-bind Slurm "
                    "refused?); try `srun -w %s --ntasks-per-node=%d slurmgpu preflight --ranks ...` by hand"
                    % (node, per_node),
                )
            )
    return out


def preflight_node(site: Site, environ: Mapping[str, str], opts: Options = Options()) -> NodeReport:
    """Gather facts on this node (or the fixture) and run every check."""
    node = node_name(environ)
    facts, from_fixture = gather_facts(node, environ)
    rep = run_checks(site, facts, environ, opts, node=node, addresses=None if from_fixture else local_addresses())
    return replace(
        rep, task_rank=_int_field(environ.get("SLURM_PROCID")), node_id=_int_field(environ.get("SLURM_NODEID"))
    )


def in_job(environ: Mapping[str, str]) -> bool:
    """Whether this runs inside a Slurm job (a recorded node, SLURMGPU_PROBE_FIXTURE, counts as one)."""
    return bool(environ.get("SLURM_JOB_ID") or environ.get(FIXTURE_ENV))


def outside_job_note(node: str) -> str:
    return (
        "not inside a Slurm job (SLURM_JOB_ID is not set): these are the checks of %s, most likely a login "
        "node, not of a job's compute node; run them where the job runs: srun -N1 -p PARTITION slurmgpu "
        "preflight (generated scripts run them on every node)" % node
    )


def outside_job(report: NodeReport) -> NodeReport:
    """A report of a machine that is no job's node: advice to exclude it from a job (resubmit with
    --exclude=...) makes no sense there, so such fixes say to run the check on a compute node."""
    fixed = []
    for r in report.results:
        fix = r.fix
        if "--exclude" in fix:
            fix = (
                "this machine is not a node of a job: run the check on a compute node (srun -N1 -p PARTITION "
                "slurmgpu preflight)"
            )
        fixed.append(replace(r, fix=fix))
    return replace(report, results=tuple(fixed))


# ---------------------------------------------------------------------------
# Aggregation: records from every node -> one table


@dataclass
class Aggregate:
    reports: List[NodeReport] = field(default_factory=list)
    missing: List[str] = field(default_factory=list)
    other_lines: List[str] = field(default_factory=list)
    job: List[CheckResult] = field(default_factory=list)  # checks across nodes (check_domain_groups)
    rank_keys: Dict[str, List[str]] = field(default_factory=dict)  # node -> the rank records read (NODE/LOCALID)

    @property
    def ok(self) -> bool:
        return (
            not self.missing
            and all(r.ok for r in self.reports)
            and bool(self.reports)
            and not any(x.status == "fail" for x in self.job)
        )

    def to_dict(self) -> Dict[str, Any]:
        return {
            "ok": self.ok,
            "nodes": len(self.reports) + len(self.missing),
            "failed": sorted({r.node for r in self.reports if not r.ok} | set(self.missing)),
            "missing": list(self.missing),
            "reports": [r.to_dict() for r in self.reports],
            "job": [x.to_dict() for x in self.job],
        }


_RECORD_LINE = re.compile(r"(\S+) (\d+)/(\d+) ([A-Za-z0-9_=-]*)$")


def decode_record(parts: Mapping[int, str]) -> NodeReport:
    """Reassemble the pieces of one node's record (ValueError when broken)."""
    data = "".join(parts[i] for i in sorted(parts))
    return NodeReport.from_dict(json.loads(zlib.decompress(base64.urlsafe_b64decode(data.encode()))))


def parse_records(lines: Iterable[str], expect_nodes: Sequence[str] = ()) -> Aggregate:
    """Pick the record lines out of the srun output (labels and other output allowed)."""
    agg = Aggregate()
    pieces: Dict[str, Tuple[int, Dict[int, str]]] = {}
    for raw in lines:
        line = raw.rstrip("\n")
        i = line.find(RECORD_PREFIX)
        m = _RECORD_LINE.match(line[i + len(RECORD_PREFIX) :]) if i >= 0 else None
        if m is None:
            if line.strip():
                agg.other_lines.append(line)
            continue
        node, k, n, data = m.group(1), int(m.group(2)), int(m.group(3)), m.group(4)
        total, got = pieces.setdefault(node, (n, {}))
        got[k] = data
    seen: Dict[str, NodeReport] = {}
    broken: List[str] = []
    for key, (total, got) in pieces.items():
        node = key.split("/", 1)[0]  # NODE/LOCALID: one rank's record, merged into its node's
        try:
            if sorted(got) != list(range(1, total + 1)):
                raise ValueError("%d of %d parts" % (len(got), total))
            rep = decode_record(got)
        except (ValueError, KeyError, TypeError, zlib.error) as exc:
            broken.append(node)
            agg.other_lines.append("unreadable preflight record from %s (%s)" % (key, exc))
            continue
        if "/" in key:
            agg.rank_keys.setdefault(node, []).append(key)
        prev = seen.get(rep.node)
        seen[rep.node] = rep if prev is None else _merged(prev, rep)
    agg.reports = [seen[n] for n in sorted(seen)]
    agg.missing = [n for n in expect_nodes if n not in seen] + sorted(n for n in broken if n not in expect_nodes)
    return agg


def _merged(a: NodeReport, b: NodeReport) -> NodeReport:
    """One node's report from its node record and its ranks' records (in the order read)."""
    return NodeReport(
        node=a.node,
        site=a.site or b.site,
        results=a.results + b.results,
        nvlink_clique=a.nvlink_clique or b.nvlink_clique,
        task_rank=a.task_rank if a.task_rank is not None else b.task_rank,
        node_id=a.node_id if a.node_id is not None else b.node_id,
    )


def render_table(agg: Aggregate, site: str = "") -> str:
    """One screen: failing rows first (identical rows of several nodes merged), then the passing nodes."""
    nodes = len(agg.reports) + len(agg.missing)
    failed = sorted(
        {r.node for r in agg.reports if not r.ok}
        | set(agg.missing)
        | {n for x in agg.job if x.status == "fail" for n in parse_hostlist(x.node)}
    )
    warns = sum(1 for r in agg.reports for x in r.results if x.status == "warn")
    warns += sum(1 for x in agg.job if x.status == "warn")
    head = "slurmgpu preflight: %d node%s, %s%s%s" % (
        nodes,
        "" if nodes == 1 else "s",
        "%d FAILED (%s)" % (len(failed), compress_hostlist(failed)) if failed else "all checks passed",
        ", %d warning%s" % (warns, "" if warns == 1 else "s") if warns else "",
        " (site %s)" % site if site else "",
    )
    rows: List[Tuple[str, str, str, str, str, str]] = []
    merged: Dict[Tuple[str, str, str, str, str], List[str]] = {}
    order: List[Tuple[str, str, str, str, str]] = []
    for n in agg.missing:
        key = (
            "report",
            "FAIL",
            "no report from this node",
            "a record from every node",
            "its preflight step did not run or crashed: see the srun errors above; try "
            "`srun -w NODE slurmgpu preflight` by hand",
        )
        merged.setdefault(key, []).append(n)
        if key not in order:
            order.append(key)
    for status in ("fail", "warn", "ok"):
        for x in agg.job:
            if x.status == status and status != "ok":
                key = (x.check, x.status.upper(), x.found, x.expected, x.fix)
                merged.setdefault(key, []).append(x.node)
                if key not in order:
                    order.append(key)
        for r in agg.reports:
            for x in r.results:
                if x.status != status or (status == "ok" and x.check not in SHOWN_WHEN_OK):
                    continue
                key = (x.check, x.status.upper(), x.found, x.expected, x.fix)
                merged.setdefault(key, []).append(r.node)
                if key not in order:
                    order.append(key)
    for key in order:
        check, status, found, expected, fix = key
        rows.append((compress_hostlist(merged[key]), check, status, found, expected, fix))
    passing = [r.node for r in agg.reports if r.ok]
    if passing:
        n_ok = max(len([x for x in r.results if x.status == "ok"]) for r in agg.reports if r.ok)
        rows.append(
            (compress_hostlist(passing), "all", "ok", "%d check%s passed" % (n_ok, "" if n_ok == 1 else "s"), "", "")
        )
    out = [head]
    if rows:
        cols = ("NODE", "CHECK", "STATUS", "FOUND", "EXPECTED")
        w = [max(len(cols[i]), *(min(len(r[i]), (56 if i == 3 else 40)) for r in rows)) for i in range(5)]
        out.append("  ".join(c.ljust(w[i]) for i, c in enumerate(cols)).rstrip())
        for row in rows:
            out.append("  ".join(row[i].ljust(w[i]) for i in range(5)).rstrip())
            if row[5]:
                out.append(" " * (w[0] + 2) + "fix: " + row[5])
    diag = [ln for ln in agg.other_lines if "NCCL DIAG " in ln]  # --nccl-diag's report: kept whole for doctor
    other = [ln for ln in agg.other_lines if "NCCL DIAG " not in ln]
    if diag:
        out.append("NCCL diagnostics of the preflight all-reduce (`slurmgpu doctor` reads them):")
        out.extend("  " + ln for ln in diag)
    if other:
        out.append("other output of the preflight step:")
        out.extend("  " + ln for ln in other[:20])
        if len(other) > 20:
            out.append("  ... (%d more lines)" % (len(other) - 20))
    if not agg.ok:
        out.append(
            "preflight FAILED: fix the FAIL rows; a generated script stops here, before the launcher "
            "(the job spec can turn preflight off)."
        )
    return "\n".join(out) + "\n"


# ---------------------------------------------------------------------------
# Across nodes: every TP/CP/EP group of the job inside one NVLink domain


def stamp_layout(stamp: Mapping[str, str]) -> Layout:
    """The job's layout from its stamp words (tp, pp, dp, cp, ep, nodes, gpus_per_node)."""
    from ..stamp import stamp_int

    vals = {k: stamp_int(stamp.get(k)) for k in ("tp", "pp", "dp", "cp", "ep", "nodes", "gpus_per_node")}
    if vals["tp"] is None or vals["gpus_per_node"] is None:
        raise SlurmgpuError(
            "the stamp needs tp= and gpus_per_node= (got: %s)" % " ".join("%s=%s" % kv for kv in stamp.items())
        )
    return Layout(**{k: (v if v is not None else 1) for k, v in vals.items()})


RANK_ORDER_SOURCES = ("procid", "nodeid", "hostname")  # plan/placement.py RANK_SOURCES


def rank_node_order(agg: Aggregate, node_order: Sequence[str], rank_source: Optional[str]) -> List[str]:
    """The job's nodes in the order the launcher's ranks fill them, as the preflight step saw them:
    by the task rank each node's preflight task had (procid: srun's own order, topology order on
    26.05), by its SLURM_NODEID (nodeid), or by host name (torchrun's rendezvous sorts the nodes'
    names). Without a rank source, or when a node did not say, the order given (SLURM_JOB_NODELIST,
    name order unless TopologyParam=BlockAsNodeRank) -- what all launchers did up to 25.11."""
    names = [r.node for r in agg.reports]
    if rank_source == "hostname":
        return sorted(names)
    key = {"procid": "task_rank", "nodeid": "node_id"}.get(rank_source or "")
    if key:
        ranks = {r.node: getattr(r, key) for r in agg.reports}
        if ranks and all(v is not None for v in ranks.values()) and len(set(ranks.values())) == len(ranks):
            return sorted(names, key=lambda n: ranks[n])
    return list(node_order) or sorted(names)


def check_domain_groups(
    agg: Aggregate,
    site: Any,
    stamp: Mapping[str, str],
    node_order: Sequence[str],
    partition: Optional[str] = None,
    rank_source: Optional[str] = None,
) -> List[CheckResult]:
    """Rows for TP/CP/EP groups whose nodes report different NVLink domains (ClusterUUID/CliqueId).

    The placement is plan/placement.py's (Megatron rank order, ranks filling the job's nodes in
    the launcher's order: `rank_node_order`); the status per kind follows the site's
    policy.groups (TP: enforce unless set). Only node types whose NVLink domain spans nodes are
    checked: elsewhere a multi-node group is on the network by design and the submit filter
    already said so.
    """
    nt = site.node_type_of(partition) if partition and partition in site.partitions else site.node_type_of()
    if not nt.multi_node_nvlink:
        return []
    layout = stamp_layout(stamp)
    clique = {r.node: r.nvlink_clique for r in agg.reports}
    order = rank_node_order(agg, node_order, rank_source)
    out: List[CheckResult] = []
    for kind in DOMAIN_KINDS:
        if int(getattr(layout, kind)) <= 1:
            continue
        mode = site.policy.groups.get(kind, "enforce")
        if mode == "off":
            continue
        try:
            per_group = group_nodes(layout, kind, layout.gpus_per_node)
        except ValueError as exc:
            out.append(CheckResult(compress_hostlist(order), "nvl-domain", "warn", str(exc), "", ""))
            continue
        crossing: List[Tuple[List[str], List[str]]] = []
        unknown: List[str] = []
        for g in per_group:
            names = [order[i] for i in g if i < len(order)]
            if len(names) <= 1:
                continue  # inside one node: on its own NVLink whatever the node reports
            ids = {clique.get(n, "") for n in names}
            if "" in ids:
                unknown.extend(n for n in names if not clique.get(n))
            elif len(ids) > 1:
                crossing.append((names, sorted(ids)))
        if crossing:
            nodes = sorted({n for names, _ in crossing for n in names})
            seg = "--segment=%d" % nt.domain_nodes
            out.append(
                CheckResult(
                    compress_hostlist(nodes),
                    "nvl-domain",
                    "fail" if mode == "enforce" else "warn",
                    "%d of %d %s groups span NVLink domains (e.g. %s: %s)"
                    % (
                        len(crossing),
                        len(per_group),
                        kind.upper(),
                        compress_hostlist(crossing[0][0]),
                        " vs ".join(i.split("/")[0][:8] for i in crossing[0][1]),
                    ),
                    "each %s group inside one NVLink domain (one ClusterUUID/CliqueId)" % kind.upper(),
                    "resubmit with the --segment `slurmgpu gen` computes (at most %s on this site) so Slurm keeps "
                    "each segment in one rack; policy.groups.%s is %s" % (seg, kind, mode),
                )
            )
        if unknown:
            out.append(
                CheckResult(
                    compress_hostlist(sorted(set(unknown))),
                    "nvl-domain",
                    "warn",
                    "no NVLink domain reported: cannot tell whether the %s groups stay in one rack" % kind.upper(),
                    "ClusterUUID/CliqueId from every node",
                    "see the nvl-domain row of these nodes",
                )
            )
    return out


# ---------------------------------------------------------------------------
# Bandwidth: a short all-reduce over the allocation (one task per GPU)


def expected_busbw_gbs(nt: NodeType, nodes: int) -> float:
    """What the links should give an all-reduce, GB/s of bus bandwidth per rank."""
    if nodes > 1 and nt.fabric_gbps:
        return nt.fabric_gbps / 8.0  # node injection bandwidth, Gb/s -> GB/s
    return nt.link_gbs / 2.0  # per-GPU NVLink figure counts both directions


def bandwidth_report(
    site: Site,
    environ: Mapping[str, str],
    opts: Options = Options(),
    size_mb: int = 256,
    fraction: float = DEFAULT_BANDWIDTH_FRACTION,
    iters: int = 20,
    backend: str = "auto",
    nccl_diag: bool = False,
) -> Optional[NodeReport]:
    """Run in every task of `srun --ntasks-per-node=GPUS`; local rank 0 of each node returns the record.

    backend "auto" is NCCL on GPUs (and a failure where PyTorch sees no GPU); "gloo" measures a CPU
    all-reduce over TCP instead, which exercises the same fan-out without GPUs (tests). nccl_diag
    turns on NCCL 2.31's diagnostics for this all-reduce's communicator (the job's first NCCL
    start): its NCCL DIAG report goes to the step's output, where `slurmgpu doctor` reads it.
    """
    node = node_name(environ)
    nt = _node_type(site, opts, environ)

    def fail(found: str, expected: str, fix: str) -> NodeReport:
        return NodeReport(node, site.name, (CheckResult(node, "bandwidth", "fail", found, expected, fix),))

    try:
        import torch
    except ImportError:
        return fail(
            "PyTorch is not importable here",
            "PyTorch with NCCL",
            "run the bandwidth check inside the training container or environment (pip install torch)",
        )
    missing = [k for k in ("SLURM_PROCID", "SLURM_NTASKS", "MASTER_ADDR", "MASTER_PORT") if not environ.get(k)]
    if missing:
        return fail(
            "%s not set" % ", ".join(missing),
            "a Slurm step with MASTER_ADDR/MASTER_PORT exported",
            "run it as `srun --ntasks-per-node=GPUS slurmgpu preflight --bandwidth --record` after "
            "exporting MASTER_ADDR and MASTER_PORT",
        )
    if backend == "auto":
        if not torch.cuda.is_available():
            return fail(
                "PyTorch sees no CUDA GPU (torch %s)" % torch.__version__,
                "PyTorch with CUDA and NCCL",
                "use a CUDA build of PyTorch on the GPU nodes (or --bandwidth-backend gloo to test the "
                "fan-out on CPUs)",
            )
        backend = "nccl"
    diag = None
    if nccl_diag:
        diag = nccl_diag_check(node, backend, _nccl_version(torch) if backend == "nccl" else None)
        if diag.status == "ok":
            os.environ.update(dict(NCCL_DIAG_ENV))  # read by NCCL when the communicator starts
    busbw, n_ranks, n_nodes = allreduce_busbw(environ, size_mb, iters, backend)
    if environ.get("SLURM_LOCALID", "0") != "0":
        return None
    extra = (diag,) if diag is not None else ()
    want = expected_busbw_gbs(nt, n_nodes)
    found = "%.2f GB/s bus bandwidth (%s all-reduce of %d MiB, %d ranks on %d node%s)" % (
        busbw,
        backend,
        size_mb,
        n_ranks,
        n_nodes,
        "" if n_nodes == 1 else "s",
    )
    expect = ">= %.0f GB/s (%.0f%% of %.0f GB/s the links give)" % (fraction * want, fraction * 100, want)
    if busbw < fraction * want:
        slow = CheckResult(
            node,
            "bandwidth",
            "fail",
            found,
            expect,
            "a slow link in the allocation: run preflight on subsets of the nodes, check "
            "NCCL_IB_HCA and that NCCL uses RDMA (NCCL_DEBUG=INFO shows NET/IB, not NET/Socket)",
        )
        return NodeReport(node, site.name, (slow,) + extra)
    return NodeReport(node, site.name, (CheckResult(node, "bandwidth", "ok", found, expect),) + extra)


# NCCL 2.31's diagnostics (NVIDIA/nccl 8898068 docs/userguide/source/troubleshooting/diagnostics.rst, ras.rst)
NCCL_DIAG_ENV = (("NCCL_RUN_DIAGNOSTICS", "1"), ("NCCL_RUN_RAS_DIAGNOSTICS", "1"))
NCCL_DIAG_SINCE = (2, 31, 0)


def _nccl_version(torch: Any) -> Optional[Tuple[int, ...]]:
    """The NCCL PyTorch loads, as (major, minor, patch), or None when it cannot say."""
    try:
        v = torch.cuda.nccl.version()
    except Exception:  # no NCCL in this build, or no CUDA
        return None
    if isinstance(v, int):  # very old torch: NCCL_VERSION_CODE
        return (v // 10000, v // 100 % 100, v % 100) if v >= 10000 else (v // 1000, v // 100 % 10, v % 100)
    return tuple(int(x) for x in v)


def nccl_diag_check(node: str, backend: str, version: Optional[Tuple[int, ...]]) -> CheckResult:
    """Whether --nccl-diag can work here: a warning (never silence) when NCCL is too old or absent."""
    want = "NCCL %s or later (NCCL_RUN_DIAGNOSTICS)" % ".".join(map(str, NCCL_DIAG_SINCE[:2]))
    if backend != "nccl":
        return CheckResult(node, "nccl-diag", "warn", "backend %s: no NCCL communicator" % backend, want,
                           "run --bandwidth with NCCL on the GPUs for the diagnostics")  # fmt: skip
    if version is None:
        return CheckResult(node, "nccl-diag", "warn", "PyTorch does not say which NCCL it loads", want,
                           "set NCCL_DEBUG=VERSION to see it; the diagnostics were not turned on")  # fmt: skip
    found = "NCCL %s" % ".".join(map(str, version))
    if tuple(version) < NCCL_DIAG_SINCE:
        return CheckResult(node, "nccl-diag", "warn", found + ": older than the diagnostics", want,
                           "use a PyTorch/NCCL build with NCCL 2.31+ (or a container that has one)")  # fmt: skip
    return CheckResult(node, "nccl-diag", "ok", found + ": diagnostics on (NCCL DIAG lines in the step's output)", want)


def allreduce_busbw(environ: Mapping[str, str], size_mb: int, iters: int, backend: str) -> Tuple[float, int, int]:
    """Time `iters` all-reduces of `size_mb` MiB: (bus bandwidth GB/s, ranks, nodes), nccl-tests' busbw."""
    import time

    import torch
    import torch.distributed as dist

    rank, world = int(environ["SLURM_PROCID"]), int(environ["SLURM_NTASKS"])
    local = int(environ.get("SLURM_LOCALID", "0"))
    nodes = int(environ.get("SLURM_NNODES") or environ.get("SLURM_JOB_NUM_NODES") or "1")
    gpu = backend == "nccl"
    if gpu:
        torch.cuda.set_device(local)
    dist.init_process_group(
        backend,
        init_method="tcp://%s:%s" % (environ["MASTER_ADDR"], environ["MASTER_PORT"]),
        rank=rank,
        world_size=world,
    )
    try:
        x = torch.ones(size_mb * 2**20 // 4, dtype=torch.float32, device="cuda" if gpu else "cpu")

        def sync() -> None:
            if gpu:
                torch.cuda.synchronize()

        for _ in range(3):
            dist.all_reduce(x)
        sync()
        t0 = time.perf_counter()
        for _ in range(iters):
            dist.all_reduce(x)
        sync()
        # every node reports rank 0's timing, so the aggregated table shows one figure
        dt = torch.tensor([(time.perf_counter() - t0) / iters], dtype=torch.float64, device=x.device)
        dist.broadcast(dt, src=0)
        algbw = x.numel() * 4 / float(dt.item()) / 1e9
        busbw = algbw * 2 * (world - 1) / world if world > 1 else algbw
        dist.barrier()
        return busbw, world, nodes
    finally:
        dist.destroy_process_group()
