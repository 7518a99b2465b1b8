"""torchrun: one agent per node, c10d rendezvous on the first node; the program is the user's."""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional, Sequence, Tuple

from ...plan import Layout
from ...plan.profile import MemoryProfile
from .base import Launcher, Options, program_memory

if TYPE_CHECKING:
    from ...plan import ModelSpec

LAUNCHER = Launcher(
    "torchrun", "torchrun", "torchrun, one task per node, c10d rendezvous on the first node", program=True
)


def memory(precision: str, model: Optional[ModelSpec] = None) -> MemoryProfile:
    """A program torchrun only starts: PyTorch DDP, or FSDP2 with `fsdp: true` (base.program_memory)."""
    return program_memory(LAUNCHER.name, precision)


def args(layout: Layout, opts: Options, user_argv: Sequence[str] = ()) -> Tuple[str, ...]:
    return ()
