"""torchtitan (`-m torchtitan.train` under torchrun): the layout as its `--parallelism.*` options."""

from __future__ import annotations

from typing import List, Sequence, Tuple

from ...plan import Layout
from .base import Launcher, Options

LAUNCHER = Launcher(
    "torchtitan", "torchrun", "torchtitan via torchrun, one task per node", default_entry=("-m", "torchtitan.train")
)


def args(layout: Layout, opts: Options, user_argv: Sequence[str] = ()) -> Tuple[str, ...]:
    out: List[str] = [
        "--parallelism.tensor_parallel_degree",
        str(layout.tp),
        "--parallelism.pipeline_parallel_degree",
        str(layout.pp),
        "--parallelism.context_parallel_degree",
        str(layout.cp),
        "--parallelism.data_parallel_shard_degree",
        str(layout.dp),
        "--parallelism.data_parallel_replicate_degree",
        "1",
    ]
    if layout.ep > 1:
        out += ["--parallelism.expert_parallel_degree", str(layout.ep)]
    return tuple(out)
