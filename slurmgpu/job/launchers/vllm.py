"""vLLM (`vllm serve`): one server over the job's nodes; DP replicas inside it, workers `--headless`.

Targets vLLM 0.33.0 (tests/data/contract/vllm-0.33.0.json records its flags). Multi-node runs use
vLLM's own multiprocessing backend: every node gets `--nnodes/--node-rank/--master-addr/--master-port`
and vLLM derives each node's DP ranks and local DP size from them (`EngineArgs.create_engine_config`:
local world = world / nnodes); node 0 serves the API, the others run `--headless`.
"""

from __future__ import annotations

from typing import Sequence, Tuple

from ...plan import Capabilities, Layout
from .base import Launcher, Options

# Flags the template adds per node at run time (node rank, rendezvous address): the user may not pass them.
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


def args(layout: Layout, opts: Options, user_argv: Sequence[str] = ()) -> Tuple[str, ...]:
    out: Tuple[str, ...] = ("--tensor-parallel-size", str(layout.tp), "--pipeline-parallel-size", str(layout.pp))
    if layout.dp > 1:
        out += ("--data-parallel-size", str(layout.dp))
    if layout.ep > 1:
        out += ("--enable-expert-parallel",)  # EP = TP x DP (base.serving_layout_ok checks the plan agrees)
    if layout.nodes > 1:
        out += ("--nnodes", str(layout.nodes))
    return out
