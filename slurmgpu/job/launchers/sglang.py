"""SGLang (`python -m sglang.launch_server`): one server over the job's nodes.

Targets SGLang 0.5.23 (tests/data/contract/sglang-0.5.23.json records its flags and rules).
`--tp-size` is the total across nodes; DP replicas (`--dp-size`) run inside one node only: SGLang's
DP controller starts every replica on the local GPUs (`launch_dp_schedulers`), so across nodes the
planner keeps DP at 1 (one TP x PP server). The API binds 0.0.0.0: SGLang's default host is
127.0.0.1, which no other node (or the login node) can reach.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional, Sequence, Tuple

from ...plan import Capabilities, Layout
from ...plan.profile import MemoryProfile, ServeBudget
from ...render import RuntimeArg
from ..serving import METRICS_PORT, ROUTER_PORT, WORKER, Endpoint
from .base import Launcher, Options, given_keys

if TYPE_CHECKING:
    from ...plan import ModelSpec

RUNTIME = ("--nnodes", "--node-rank", "--dist-init-addr", "--nccl-init-addr")

LAUNCHER = Launcher(
    "sglang",
    "server",
    "SGLang server across nodes (--nnodes/--node-rank/--dist-init-addr, --dp-size on one node)",
    default_entry=("python", "-m", "sglang.launch_server"),
    needs_weights=True,
    serving=True,
    runtime_keys=RUNTIME,
    aliases=(
        ("--tp-size", ("--tp", "--tensor-parallel-size")),
        ("--pp-size", ("--pipeline-parallel-size",)),
        ("--dp-size", ("--data-parallel-size", "--attn-dp-size", "--enable-dp-attention")),
        ("--ep-size", ("--expert-parallel-size", "--ep")),
    ),
    targets="SGLang 0.5.23",
    caps=Capabilities(
        cp=False,
        virtual_stages=False,
        zero=(0,),
        serving_dp=True,
        serving_dp_nodes=False,
    ),
)


# SGLang 0.5.23's default mem_fraction_static (srt/arg_groups/memory_hook.py handle_gpu_memory_settings):
# the share of the GPU for weights + KV pool is (GPU - reserve) / GPU, reserve = 512 MB + 1.5 MB x
# max(chunked_prefill_size, 2048) + 1024 MB x tp x pp / 8 + 2 MB x the decode CUDA-graph max batch, at
# least 10 GiB above 60 GiB; chunked_prefill_size and that batch by GPU memory (the tiers below, TP < 4
# / >= 4). Not modelled: the prefill CUDA-graph reserve (8 MB per captured size, when enabled), DP
# attention, DeepEP, VLMs.
MEMORY = MemoryProfile(
    framework="SGLang 0.5.23",
    recompute=("none",),
    serve=ServeBudget(
        fraction=0.0,
        covers_all=False,
        tiers=(
            (0.0, 2048, 8, 8),
            (20.0, 4096, 48, 160),
            (35.0, 4096, 32, 160),
            (60.0, 8192, 256, 512),
            (90.0, 8192, 256, 512),
            (160.0, 16384, 512, 512),
        ),
        base_mb=512.0,
        per_token_mb=1.5,
        per_8gpus_mb=1024.0,
        per_graph_mb=2.0,
        floor_mb=10240.0,
        floor_above_gib=60.0,
        flag="mem_fraction_static",
    ),
)


def memory(precision: str, model: Optional[ModelSpec] = None) -> MemoryProfile:
    return MEMORY


def args(layout: Layout, opts: Options, user_argv: Sequence[str] = ()) -> Tuple[str, ...]:
    out: Tuple[str, ...] = ("--tp-size", str(layout.tp), "--pp-size", str(layout.pp))
    if opts.seq and "--context-length" not in given_keys(user_argv):
        out += ("--context-length", str(opts.seq))  # the context the plan sized the KV cache for
    if layout.dp > 1:
        out += ("--dp-size", str(layout.dp))
    if layout.ep > 1:
        out += ("--ep-size", str(layout.ep))
    if layout.nodes > 1:
        out += ("--nnodes", str(layout.nodes))
    if "--host" not in given_keys(user_argv):
        out += ("--host", "0.0.0.0")
    return out


# ---------------------------------------------------------------------------
# router and disaggregated deployments (job.serving): one server per worker, sglang-router in front

ROUTER = ("python", "-m", "sglang_router.launch_router")  # sglang-router 0.3.2 (PyPI), its launch script
ROUTER_NAME = "sglang-router"
# --node-rank of each node of a multi-node worker: srun starts one task per node, numbered from 0
NODE_RANK_SHELL = 'exec "$@" --node-rank "$SLURM_PROCID"'


def worker_args(
    role: str,
    tp: int,
    pp: int,
    nodes: int,
    context: int,
    end: Endpoint,
    kv_backend: Optional[str],
    ib_devices: str,
    user_argv: Sequence[str] = (),
) -> Tuple[str, ...]:
    """One worker's flags: its size, address, context, and for prefill/decode the KV transfer.

    SGLang 0.5.23 (server_args.py, arg group disaggregation): --disaggregation-mode prefill|decode,
    --disaggregation-transfer-backend (mooncake by default; nixl), --disaggregation-bootstrap-port
    (the prefill side's bootstrap server, which the router passes on to decode), and
    --disaggregation-ib-device (Mooncake's RDMA devices; NIXL reads UCX_NET_DEVICES instead)."""
    given = given_keys(user_argv)
    out: Tuple[str, ...] = ("--tp-size", str(tp), "--pp-size", str(pp))
    if "--context-length" not in given:
        out += ("--context-length", str(context))  # what the plan sized the KV cache for
    out += ("--host", "0.0.0.0", "--port", end.port)
    if nodes > 1:
        out += ("--nnodes", str(nodes), "--dist-init-addr", RuntimeArg("%s:%s" % (end.host, end.dist)))
    if role in ("prefill", "decode"):
        out += ("--disaggregation-mode", role, "--disaggregation-transfer-backend", kv_backend or "nixl")
        if role == "prefill":
            out += ("--disaggregation-bootstrap-port", end.side)
        if kv_backend == "mooncake" and ib_devices:
            out += ("--disaggregation-ib-device", ib_devices)
    return out


def worker_env(role: str, end: Endpoint) -> Tuple[Tuple[str, str], ...]:
    return ()


def router_head(mode: str) -> Tuple[str, ...]:
    """sglang-router's line before the workers (sglang_router/router_args.py, launch_router.py)."""
    out: Tuple[str, ...] = ROUTER + ("--host", "0.0.0.0", "--port", ROUTER_PORT)
    # its Prometheus listener defaults to 29000 (block 9's router port): one of the job's own
    out += ("--prometheus-port", METRICS_PORT)
    return out + (("--worker-urls",) if mode == "router" else ("--pd-disaggregation",))


def router_words(mode: str, role: str) -> Tuple[str, ...]:
    """What each worker adds to the router's line: its URL after --worker-urls; in prefill/decode mode
    --prefill URL BOOTSTRAP_PORT or --decode URL (each repeatable)."""
    if role == "prefill":
        return ("--prefill", WORKER.url, WORKER.side)
    if role == "decode":
        return ("--decode", WORKER.url)
    return (WORKER.url,)
