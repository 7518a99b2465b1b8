"""vLLM (`vllm serve`): one engine over the job's nodes, workers started `--headless`."""

from __future__ import annotations

from typing import Sequence, Tuple

from ...plan import Layout
from .base import Launcher, Options

# Flags the template adds per node at run time (node rank, rendezvous address): the user may not pass them.
RUNTIME = ("--nnodes", "--node-rank", "--master-addr", "--master-port", "--headless")

LAUNCHER = Launcher(
    "vllm",
    "server",
    "vLLM server across nodes (--nnodes/--node-rank, workers --headless)",
    default_entry=("vllm", "serve"),
    needs_weights=True,
    serving=True,
    runtime_keys=RUNTIME,
    aliases=(("--tensor-parallel-size", ("-tp",)), ("--pipeline-parallel-size", ("-pp",))),
)


def args(layout: Layout, opts: Options, user_argv: Sequence[str] = ()) -> Tuple[str, ...]:
    multi = ("--nnodes", str(layout.nodes)) if layout.nodes > 1 else ()
    return ("--tensor-parallel-size", str(layout.tp), "--pipeline-parallel-size", str(layout.pp)) + multi
