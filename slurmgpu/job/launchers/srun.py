"""srun, one task per GPU: the program reads RANK/LOCAL_RANK/WORLD_SIZE from Slurm's variables."""

from __future__ import annotations

from typing import Sequence, Tuple

from ...plan import Layout
from .base import Launcher, Options

LAUNCHER = Launcher("srun", "direct", "srun, one task per GPU; RANK/LOCAL_RANK/WORLD_SIZE from Slurm")


def args(layout: Layout, opts: Options, user_argv: Sequence[str] = ()) -> Tuple[str, ...]:
    return ()
