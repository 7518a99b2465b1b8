"""A serving deployment as the script runs it: which worker runs on which nodes and GPUs, its ports,
its command line, the KV-transfer environment, and the router in front.

The serving planner (plan.serving) says how many workers of each role and how large; this module
places them on the allocation's nodes in order (plan.serving.place), gives each a port block
offset, and asks the engine's adapter (launchers.vllm / launchers.sglang) for each worker's and
the router's flags. Values the job knows only at run time (host names, the job's port block)
are `RuntimeArg`s naming shell variables the template sets for the worker it is starting (one
loop per role, one line for all of that role's workers): SLURMGPU_HOST (the worker's first node),
SLURMGPU_PORT (HTTP), SLURMGPU_DIST (multi-node rendezvous), SLURMGPU_SIDE (KV-transfer bootstrap
or side channel) and SLURMGPU_ROUTER_PORT. Each worker adds its words to the router's line as it
starts (`router_words`), so the script grows by one short record per worker, not one block.

KV transfer (NIXL over UCX, or Mooncake) is told the site's compute NICs, never the management
interface: UCX_NET_DEVICES lists the compute HCAs with their ports (NIXL ignores SGLang's
--disaggregation-ib-device unless UCX_NET_DEVICES is set: sgl-project/sglang PR#28737), Mooncake
gets them as --disaggregation-ib-device. EFA and Slingshot are refused: no KV-transfer recipe for
them has been checked here, and a wrong one hangs for minutes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, List, Optional, Tuple

from ..errors import ConfigError, Issue
from ..render import RuntimeArg
from ..site import NodeType

if TYPE_CHECKING:
    from ..plan.serving import Deployment

# The job's port block: 1000 ports from 20000 + (job id % 10) x 1000, off the cluster daemons'
# and the ephemeral range. Router at offset 0; worker i's HTTP port at 1 + i, its rendezvous at
# 200 + i, its KV side channel at 400 + i x stride (vLLM's NIXL side channel takes one port per
# TP rank from its base); the router's Prometheus listener at the block's last port (both routers
# default to 29000, which is block 9's router port).
PORT_BASE = 20000
PORT_BLOCKS = 10
PORT_SPAN = 1000
MAX_WORKERS = 199
SIDE_BASE = 400
METRICS = PORT_SPAN - 1
HEALTH = "/health"  # SGLang, vLLM, sglang-router and vllm-router all answer it once ready


@dataclass(frozen=True)
class Endpoint:
    """The shell variables that hold the current worker's host and ports while the script starts
    it (one loop per role sets them for each worker in turn), as run-time arguments."""

    host: RuntimeArg = RuntimeArg("${SLURMGPU_HOST}")
    port: RuntimeArg = RuntimeArg("${SLURMGPU_PORT}")
    dist: RuntimeArg = RuntimeArg("${SLURMGPU_DIST}")
    side: RuntimeArg = RuntimeArg("${SLURMGPU_SIDE}")

    @property
    def url(self) -> RuntimeArg:
        return RuntimeArg("http://${SLURMGPU_HOST}:${SLURMGPU_PORT}")


WORKER = Endpoint()
ROUTER_PORT = RuntimeArg("${SLURMGPU_ROUTER_PORT}")
METRICS_PORT = RuntimeArg("${SLURMGPU_METRICS_PORT}")


@dataclass(frozen=True)
class ServeWorker:
    """One worker: where it runs, its ports (offsets in the job's block) and its command line."""

    role: str  # replica | prefill | decode
    rank: int  # its number among the workers of its role
    index: int  # its number among all workers (its port offsets count from it)
    node: int  # its first node, an index into the allocation's host list
    nodes: int
    gpus: Tuple[int, ...]  # GPUs it uses on each of its nodes
    tp: int
    pp: int
    port: int
    dist: int
    side: int
    argv: Tuple[str, ...]  # the whole program line (RuntimeArgs expand at run time)
    env: Tuple[Tuple[str, str], ...] = ()  # set for this worker only
    node_rank: str = ""  # multi-node: the bash -c text that adds each node's rank to "$@"
    visible_var: str = "CUDA_VISIBLE_DEVICES"
    whole_node: bool = True  # False: it shares its node and sees only `gpus`
    router_words: Tuple[str, ...] = ()  # what it adds to the router's line (its URL, the role's flag)

    @property
    def name(self) -> str:
        return "%s-%d" % (self.role, self.rank)

    @property
    def record(self) -> str:
        """The word the script places it by: index:first node:nodes:visible GPUs joined by + (- = all)."""
        gpus = "-" if self.whole_node else "+".join(str(g) for g in self.gpus)
        return "%d:%d:%d:%s" % (self.index, self.node, self.nodes, gpus)

    @property
    def visible(self) -> str:
        return ",".join(str(g) for g in self.gpus)

    def words(self) -> str:
        where = "node %d" % self.node if self.nodes == 1 else "nodes %d-%d" % (self.node, self.node + self.nodes - 1)
        gpus = ""
        if not self.whole_node:
            gpus = ", GPU %d" % self.gpus[0] if len(self.gpus) == 1 else ", GPUs %d-%d" % (self.gpus[0], self.gpus[-1])
        return "TP=%d PP=%d on %s%s" % (self.tp, self.pp, where, gpus)


@dataclass(frozen=True)
class ServeRouter:
    """The engine's router on the first node, in front of every worker."""

    name: str  # sglang-router | vllm-router
    argv: Tuple[str, ...]  # its line before the workers' words (the script appends each worker's)
    port: int = 0  # offset in the job's block
    metrics: int = METRICS  # its Prometheus listener's offset (--prometheus-port)


@dataclass(frozen=True)
class ServeDeployment:
    """Everything the serving template prints (gen --json shows it under request.serve)."""

    mode: str  # router | disaggregated
    engine: str
    workers: Tuple[ServeWorker, ...]
    router: ServeRouter
    env: Tuple[Tuple[str, str, str], ...]  # (name, value, why) for every worker: the KV-transfer NICs
    ready_timeout: int
    summary: str
    kv_backend: Optional[str] = None
    kv_over_nvlink: bool = False
    health: str = HEALTH
    port_base: int = PORT_BASE
    port_blocks: int = PORT_BLOCKS
    port_span: int = PORT_SPAN
    http0: int = 1  # worker i's HTTP port: http0 + i in the job's block
    dist0: int = 200  # its multi-node rendezvous: dist0 + i
    side0: int = SIDE_BASE  # its KV side channel / bootstrap: side0 + i x stride
    stride: int = 1

    def groups(self) -> List[Tuple[ServeWorker, Tuple[ServeWorker, ...]]]:
        """The workers by role, in order: (the first, every one); a role's workers share one line."""
        out: List[Tuple[ServeWorker, Tuple[ServeWorker, ...]]] = []
        for w in self.workers:
            if out and out[-1][0].role == w.role:
                out[-1] = (out[-1][0], out[-1][1] + (w,))
            else:
                out.append((w, (w,)))
        return out

    def uses(self, var: str) -> bool:
        """Whether any worker's or the router's line or environment reads shell variable `var`."""
        ref = "${%s}" % var
        words = list(self.router.argv)
        for w in self.workers:
            words.extend(w.argv)
            words.extend(w.router_words)
            words.extend(v for _, v in w.env)
        return any(ref in str(x) for x in words)

    def role_counts(self) -> List[Tuple[str, int, int, int]]:
        """(role, workers, TP, PP) per role, in order."""
        out: List[Tuple[str, int, int, int]] = []
        for w in self.workers:
            if out and out[-1][0] == w.role:
                r = out[-1]
                out[-1] = (r[0], r[1] + 1, r[2], r[3])
            else:
                out.append((w.role, 1, w.tp, w.pp))
        return out


def kv_ib_devices(node: NodeType) -> str:
    """The compute HCAs by name (Mooncake's --disaggregation-ib-device)."""
    return ",".join(n.name for n in node.compute_nics)


def kv_env(node: NodeType, backend: str, nvlink: bool, where: str = "") -> Tuple[Tuple[str, str, str], ...]:
    """The KV-transfer library's network settings for the site's fabric (see the module doc)."""
    fabric = node.fabric
    if fabric in ("efa", "slingshot"):
        raise ConfigError(
            [
                Issue(
                    where,
                    None,
                    None,
                    "serve",
                    "disaggregated serving moves the KV cache with NIXL or Mooncake, and slurmgpu has no checked "
                    "recipe for their %s transport (NIXL's LIBFABRIC backend; a wrong NIC choice hangs each "
                    "transfer for minutes): serve with --serve router on this site" % fabric,
                )
            ]
        )
    out: List[Tuple[str, str, str]] = []
    nics = node.compute_nics
    # UCX applies UCX_NET_DEVICES to every transport: without lo, NIXL's endpoint to itself has no
    # transport and backend creation fails with NIXL_ERR_BACKEND (sgl-project/sglang PR#40641)
    if fabric in ("infiniband", "roce") and nics:
        out.append(
            (
                "UCX_NET_DEVICES",
                ",".join(["%s:%d" % (n.name, n.port) for n in nics] + ["lo"]),
                "KV transfer (NIXL over UCX) on the compute HCAs only (and lo, NIXL's own endpoint); without it "
                "NIXL may pick the management or storage NIC and each transfer waits for its timeout "
                "(sgl-project/sglang PR#28737)",
            )
        )
    elif node.socket_ifname:
        ifname = node.socket_ifname.split(",")[0].lstrip("=^")
        out.append(
            (
                "UCX_NET_DEVICES",
                ifname if ifname == "lo" else "%s,lo" % ifname,
                "KV transfer (NIXL over UCX) over TCP on the site's %s interface (no RDMA fabric)" % fabric,
            )
        )
    else:
        raise ConfigError(
            [
                Issue(
                    where,
                    None,
                    None,
                    "serve",
                    "disaggregated serving needs the NIC the KV cache crosses, and node type %s lists no compute "
                    "NIC and no socket_ifname: add them to the site config" % node.name,
                )
            ]
        )
    if nvlink:
        out.append(
            (
                "UCX_CUDA_IPC_ENABLE_MNNVL",
                "y",
                "prefill and decode share one NVLink domain: UCX's cuda_ipc moves the KV cache over multi-node NVLink",
            )
        )
    return tuple(out)


def place_workers(deployment: Deployment) -> List[Tuple[str, int, int, int, int, int, Tuple[int, ...], bool]]:
    """(role, rank, TP, PP, first node, nodes, GPUs on each node, whole nodes) per worker, in the plan's order."""
    from ..plan.serving import place

    gpn = deployment.gpus_per_node
    groups = [(r.worker.gpus, r.count) for r in deployment.roles]
    spots, _ = place(groups, gpn)
    out = []
    i = 0
    for r in deployment.roles:
        for k in range(r.count):
            node, nodes, first = spots[i]
            i += 1
            size = r.worker.gpus
            whole = size >= gpn
            gpus = tuple(range(gpn)) if whole else tuple(range(first, first + size))
            out.append((r.role, k, r.worker.tp, r.worker.pp, node, nodes, gpus, whole))
    return out


def port_offsets(count: int, stride: int) -> Tuple[int, int, int]:
    """(first HTTP offset, first rendezvous offset, KV side-channel stride) for `count` workers."""
    if count > MAX_WORKERS or SIDE_BASE + count * stride > METRICS:
        raise ConfigError(
            [
                Issue(
                    "",
                    None,
                    None,
                    "serve",
                    "%d workers need more ports than one job's block of %d (at most %d workers, or %d with "
                    "TP=%d): use fewer, larger workers or several jobs"
                    % (count, PORT_SPAN, MAX_WORKERS, (METRICS - SIDE_BASE) // stride, stride),
                )
            ]
        )
    return 1, 200, stride


def build_deployment(
    engine: str,
    node: NodeType,
    deployment: Deployment,
    program: Tuple[str, ...],
    user_argv: Tuple[str, ...],
    context: int,
    kv_backend: Optional[str],
    ready_timeout: int,
    where: str = "",
) -> ServeDeployment:
    """The workers, ports and router of a planned deployment, with each worker's command line:
    the program (entry point, weights, the user's arguments) and the adapter's flags for its role."""
    from . import launchers as L

    adapter = L.module(engine)
    mode = deployment.mode
    spots = place_workers(deployment)
    disagg = mode == "disaggregated"
    backend = (kv_backend or "nixl") if disagg else None
    if backend == "mooncake" and engine != "sglang":
        raise ConfigError(
            [
                Issue(
                    where,
                    None,
                    None,
                    "kv_transfer",
                    "kv_transfer mooncake: slurmgpu writes Mooncake's flags for SGLang only; vLLM's prefill and "
                    "decode workers use NIXL here (--kv-transfer nixl)",
                )
            ]
        )
    env = kv_env(node, backend or "nixl", deployment.kv_over_nvlink, where) if disagg else ()
    ib = kv_ib_devices(node) if backend == "mooncake" else ""
    stride = max(tp for _, _, tp, _, _, _, _, _ in spots)
    http0, dist0, stride = port_offsets(len(spots), stride)
    visible = "HIP_VISIBLE_DEVICES" if node.vendor == "amd" else "CUDA_VISIBLE_DEVICES"
    workers: List[ServeWorker] = []
    for i, (role, rank, tp, pp, first, nodes, gpus, whole) in enumerate(spots):
        args = adapter.worker_args(role, tp, pp, nodes, context, WORKER, backend, ib, user_argv)
        L.check_conflicts(L.get_launcher(engine), user_argv, args, where or "command")
        workers.append(
            ServeWorker(
                role=role,
                rank=rank,
                index=i,
                node=first,
                nodes=nodes,
                gpus=gpus,
                tp=tp,
                pp=pp,
                port=http0 + i,
                dist=dist0 + i,
                side=SIDE_BASE + i * stride,
                argv=tuple(program) + tuple(args),
                env=adapter.worker_env(role, WORKER),
                node_rank=adapter.NODE_RANK_SHELL if nodes > 1 else "",
                visible_var=visible,
                whole_node=whole,
                router_words=adapter.router_words(mode, role),
            )
        )
    router = ServeRouter(name=adapter.ROUTER_NAME, argv=adapter.router_head(mode))
    roles = ", ".join(
        "%d %s%s (TP=%d%s)"
        % (r.count, r.role, "s" if r.count != 1 else "", r.worker.tp, " PP=%d" % r.worker.pp if r.worker.pp > 1 else "")
        for r in deployment.roles
    )
    summary = "%s: %s behind %s%s" % (
        mode,
        roles,
        router.name,
        ", KV over %s (%s)" % ("NVLink" if deployment.kv_over_nvlink else "the fabric", backend) if disagg else "",
    )
    return ServeDeployment(
        mode=mode,
        engine=engine,
        workers=tuple(workers),
        router=router,
        env=env,
        ready_timeout=ready_timeout,
        summary=summary,
        kv_backend=backend,
        kv_over_nvlink=deployment.kv_over_nvlink,
        http0=http0,
        dist0=dist0,
        stride=stride,
    )


# ---------------------------------------------------------------------------
# the script's worker lines, read back (`slurmgpu check` explains a serving job's groups)

SERVE_MARKER = "# slurmgpu-serve:"
# One line per role with its TP and PP, then one per worker with its place. TP and PP are written
# once per role, not per worker: the submit filter pays for every tp=/pp= word it meets, even in a
# comment, and 65 worker lines of them spent its whole work budget (a 195-node SGLang
# disaggregated job on juwels-booster was refused as too large to check).
_SERVE_LINE = re.compile(
    r"^# slurmgpu-serve: (?:role=([a-z]+) tp=(\d{1,4}) pp=(\d{1,4})"
    r"|worker=([a-z]+)-\d+ node=(\d{1,6}) nodes=(\d{1,6}) gpus=(\d{1,4})-(\d{1,4}))$",
    re.M,
)


@dataclass(frozen=True)
class Group:
    """The workers of one role as a script declares them."""

    role: str
    tp: int
    pp: int
    workers: Tuple[Tuple[int, int, int, int], ...]  # (first node, nodes, first GPU, last GPU) per worker

    def words(self) -> str:
        nodes = sorted({n for first, count, _, _ in self.workers for n in range(first, first + count)})
        span = "node %d" % nodes[0] if len(nodes) == 1 else "nodes %d-%d" % (nodes[0], nodes[-1])
        pp = " x PP=%d" % self.pp if self.pp > 1 else ""
        return "%d %s worker%s of TP=%d%s on %s" % (
            len(self.workers),
            self.role,
            "s" if len(self.workers) != 1 else "",
            self.tp,
            pp,
            span,
        )


def script_groups(text: str) -> List[Group]:
    """The serving roles of a generated script, in order (empty for any other script). A worker
    line belongs to the role line before it with its name; one without such a role is ignored."""
    groups: List[Group] = []
    for m in _SERVE_LINE.finditer(text[: 4 * 1024 * 1024]):
        if m.group(1):
            groups.append(Group(m.group(1), int(m.group(2)), int(m.group(3)), ()))
            continue
        if not groups or groups[-1].role != m.group(4):
            continue
        g = groups[-1]
        spot = (int(m.group(5)), int(m.group(6)), int(m.group(7)), int(m.group(8)))
        groups[-1] = Group(g.role, g.tp, g.pp, g.workers + (spot,))
    return [g for g in groups if g.workers]


def explain_groups(node: NodeType, text: str) -> List[str]:
    """`check`'s words for a serving script: each role's workers, and whether each worker's TP
    group stays inside one NVLink domain (the submit filter judged the largest TP of the script)."""
    out = []
    for g in script_groups(text):
        where = "inside one NVLink domain"
        for _, count, lo, hi in g.workers:
            per_node = hi - lo + 1
            if g.tp > node.nvlink_domain or (count == 1 and (per_node != g.tp * g.pp or lo % g.tp)):
                where = "NOT inside one NVLink domain (a worker's TP group crosses one): regenerate the script"
            elif count > 1 and g.tp > node.gpus and not node.multi_node_nvlink:
                where = "NOT inside one node (TP=%d on %d-GPU nodes)" % (g.tp, node.gpus)
        out.append("%s: TP %s" % (g.words(), where))
    return out
