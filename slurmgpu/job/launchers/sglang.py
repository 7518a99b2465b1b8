"""SGLang (`python -m sglang.launch_server`): one server over the job's nodes.

Targets SGLang 0.5.23 (tests/data/contract/sglang-0.5.23.json records its flags and rules).
`--tp-size` is the total across nodes; DP replicas (`--dp-size`) run inside one node only: SGLang's
DP controller starts every replica on the local GPUs (`launch_dp_schedulers`), so across nodes the
planner keeps DP at 1 (one TP x PP server). The API binds 0.0.0.0: SGLang's default host is
127.0.0.1, which no other node (or the login node) can reach.
"""

from __future__ import annotations

from typing import Sequence, Tuple

from ...plan import Capabilities, Layout
from .base import Launcher, Options, given_keys

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


def args(layout: Layout, opts: Options, user_argv: Sequence[str] = ()) -> Tuple[str, ...]:
    out: Tuple[str, ...] = ("--tp-size", str(layout.tp), "--pp-size", str(layout.pp))
    if layout.dp > 1:
        out += ("--dp-size", str(layout.dp))
    if layout.ep > 1:
        out += ("--ep-size", str(layout.ep))
    if layout.nodes > 1:
        out += ("--nnodes", str(layout.nodes))
    if "--host" not in given_keys(user_argv):
        out += ("--host", "0.0.0.0")
    return out
