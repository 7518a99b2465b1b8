"""torchrun: one agent per node, c10d rendezvous on the first node; the program is the user's."""

from __future__ import annotations

from typing import Sequence, Tuple

from ...plan import Layout
from .base import Launcher, Options

LAUNCHER = Launcher("torchrun", "torchrun", "torchrun, one task per node, c10d rendezvous on the first node")


def args(layout: Layout, opts: Options, user_argv: Sequence[str] = ()) -> Tuple[str, ...]:
    return ()
