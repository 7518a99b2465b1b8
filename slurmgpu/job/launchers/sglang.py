"""SGLang (`python -m sglang.launch_server`): one server over the job's nodes."""

from __future__ import annotations

from typing import Sequence, Tuple

from ...plan import Layout
from .base import Launcher, Options

RUNTIME = ("--nnodes", "--node-rank", "--dist-init-addr")

LAUNCHER = Launcher(
    "sglang",
    "server",
    "SGLang server across nodes (--nnodes/--node-rank/--dist-init-addr)",
    default_entry=("python", "-m", "sglang.launch_server"),
    needs_weights=True,
    serving=True,
    runtime_keys=RUNTIME,
    aliases=(("--tp", ("--tp-size",)),),
)


def args(layout: Layout, opts: Options, user_argv: Sequence[str] = ()) -> Tuple[str, ...]:
    multi = ("--nnodes", str(layout.nodes)) if layout.nodes > 1 else ()
    return ("--tp", str(layout.tp), "--pp-size", str(layout.pp)) + multi
