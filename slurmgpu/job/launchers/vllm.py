"""vLLM (`vllm serve`): one server over the job's nodes; DP replicas inside it, workers `--headless`.

Targets vLLM 0.33.0 (tests/data/contract/vllm-0.33.0.json records its flags). Multi-node runs use
vLLM's own multiprocessing backend: every node gets `--nnodes/--node-rank/--master-addr/--master-port`
and vLLM derives each node's DP ranks and local DP size from them (`EngineArgs.create_engine_config`:
local world = world / nnodes); node 0 serves the API, the others run `--headless`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional, Sequence, Tuple

from ...plan import Capabilities, Layout
from ...plan.profile import MemoryProfile, ServeBudget
from ..serving import METRICS_PORT, ROUTER_PORT, WORKER, Endpoint
from .base import Launcher, Options, given_keys

if TYPE_CHECKING:
    from ...plan import ModelSpec

# Flags the template adds per node at run time (node rank, rendezvous address): the user may not pass them.
# vLLM starts one API server process per DP rank on node 0 when --api-server-count is not given
# (serve.py: api_server_count defaults to data_parallel_size), 512 for DP 512 on 64 nodes: node
# 0's CPUs would go to HTTP front-ends instead of its own engines. A few front-ends keep every
# replica fed (each balances over all DP engines); more only when tokenization or HTTP is the
# bottleneck, which the user can say with --api-server-count.
API_SERVERS = 4

RUNTIME = ("--nnodes", "--node-rank", "--master-addr", "--master-port", "--headless")

LAUNCHER = Launcher(
    "vllm",
    "server",
    "vLLM server across nodes (--nnodes/--node-rank, DP replicas inside it, workers --headless)",
    default_entry=("vllm", "serve"),
    needs_weights=True,
    serving=True,
    runtime_keys=RUNTIME,
    aliases=(
        ("--tensor-parallel-size", ("-tp",)),
        ("--pipeline-parallel-size", ("-pp",)),
        ("--data-parallel-size", ("-dp",)),
        ("--nnodes", ("-n",)),
        ("--node-rank", ("-r",)),
        ("--data-parallel-size-local", ("-dpl",)),
        ("--data-parallel-start-rank", ("-dpr",)),
        ("--data-parallel-address", ("-dpa",)),
        ("--data-parallel-rpc-port", ("-dpp",)),
        ("--enable-expert-parallel", ("-ep", "--disable-expert-parallel")),
    ),
    targets="vLLM 0.33.0",
    caps=Capabilities(
        cp=False,  # prefill context parallelism is not what the planner's CP means
        virtual_stages=False,
        zero=(0,),
        serving_dp=True,
        serving_dp_nodes=True,
    ),
)


# vLLM 0.33.0 defaults (vllm/config/cache.py, vllm/engine/arg_utils.py get_batch_defaults): the engine
# takes gpu_memory_utilization 0.92 of each GPU for everything it holds (weights, the profiled prefill
# of max_num_batched_tokens, CUDA graphs, the rest KV cache); the API server's max_num_batched_tokens is
# 8192 on >= 70 GiB GPUs but A100s, 16384 on >= 160 GiB, 2048 below. CUDA graphs up to 512 sequences:
# estimated at 2 MB per captured batch size (SGLang's own reserve rule; vLLM profiles them).
MEMORY = MemoryProfile(
    framework="vLLM 0.33.0",
    recompute=("none",),
    serve=ServeBudget(
        fraction=0.92,
        tiers=((0.0, 2048, 512, 512), (70.0, 8192, 512, 512), (160.0, 16384, 512, 512)),
        small_names=("a100",),
        flag="gpu_memory_utilization",
    ),
)


def memory(precision: str, model: Optional[ModelSpec] = None) -> MemoryProfile:
    return MEMORY


def args(layout: Layout, opts: Options, user_argv: Sequence[str] = ()) -> Tuple[str, ...]:
    out: Tuple[str, ...] = ("--tensor-parallel-size", str(layout.tp), "--pipeline-parallel-size", str(layout.pp))
    if opts.seq and "--max-model-len" not in given_keys(user_argv):
        # the context the plan sized the KV cache for: without it vLLM takes the checkpoint's (128K for
        # Llama 3.1) and refuses to start when the KV cache cannot hold one sequence of that length
        out += ("--max-model-len", str(opts.seq))
    if layout.dp > 1:
        out += ("--data-parallel-size", str(layout.dp))
        if "--api-server-count" not in given_keys(user_argv) and "-asc" not in given_keys(user_argv):
            out += ("--api-server-count", str(min(layout.dp, API_SERVERS)))
    if layout.ep > 1:
        out += ("--enable-expert-parallel",)  # EP = TP x DP (base.serving_layout_ok checks the plan agrees)
    if layout.nodes > 1:
        out += ("--nnodes", str(layout.nodes))
    return out


# ---------------------------------------------------------------------------
# router and disaggregated deployments (job.serving): one server per worker, vllm-router in front

ROUTER = ("vllm-router",)  # vllm-router 0.1.17 (PyPI; vLLM's docs name it the proxy for P/D)
ROUTER_NAME = "vllm-router"
# nodes other than a worker's first run headless; each passes its rank within the worker's step
NODE_RANK_SHELL = 'if [ "$SLURM_PROCID" -ne 0 ]; then set -- "$@" --headless; fi; exec "$@" --node-rank "$SLURM_PROCID"'
# vLLM's NIXL connector (vllm/distributed/kv_transfer/kv_connector/factory.py registers NixlConnector);
# kv_both lets one instance act as either side, as vLLM's NIXL guide runs prefill and decode
KV_CONFIG = '{"kv_connector":"NixlConnector","kv_role":"kv_both"}'


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
    """One worker's flags: its size, port, context, and for prefill/decode the NIXL connector."""
    given = given_keys(user_argv)
    out: Tuple[str, ...] = ("--tensor-parallel-size", str(tp), "--pipeline-parallel-size", str(pp))
    if "--max-model-len" not in given:
        out += ("--max-model-len", str(context))  # what the plan sized the KV cache for
    out += ("--port", end.port)
    if nodes > 1:
        out += ("--nnodes", str(nodes), "--master-addr", end.host, "--master-port", end.dist)
    if role in ("prefill", "decode"):
        out += ("--kv-transfer-config", KV_CONFIG)
    return out


def worker_env(role: str, end: Endpoint) -> Tuple[Tuple[str, str], ...]:
    """NIXL's side channel (vllm/envs.py VLLM_NIXL_SIDE_CHANNEL_HOST/PORT): the peer connects to this
    host and port for the handshake, so each worker gets its own host name and port."""
    if role not in ("prefill", "decode"):
        return ()
    return (("VLLM_NIXL_SIDE_CHANNEL_HOST", end.host), ("VLLM_NIXL_SIDE_CHANNEL_PORT", end.side))


def router_head(mode: str) -> Tuple[str, ...]:
    """vllm-router's line before the workers (vllm_router/router_args.py; NIXL is its default
    --kv-connector)."""
    out: Tuple[str, ...] = ROUTER + ("--host", "0.0.0.0", "--port", ROUTER_PORT)
    # its Prometheus listener defaults to 29000 (block 9's router port): one of the job's own
    out += ("--prometheus-port", METRICS_PORT)
    return out + (("--worker-urls",) if mode == "router" else ("--vllm-pd-disaggregation",))


def router_words(mode: str, role: str) -> Tuple[str, ...]:
    """What each worker adds to the router's line: its URL after --worker-urls; in prefill/decode mode
    --prefill URL or --decode URL (each repeatable)."""
    if role in ("prefill", "decode"):
        return ("--" + role, WORKER.url)
    return (WORKER.url,)
