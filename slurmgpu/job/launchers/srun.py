"""srun, one task per GPU: the program reads RANK/LOCAL_RANK/WORLD_SIZE from Slurm's variables."""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional, Sequence, Tuple

from ...plan import Layout
from ...plan.profile import MemoryProfile
from .base import Launcher, Options, program_memory

if TYPE_CHECKING:
    from ...plan import ModelSpec

LAUNCHER = Launcher("srun", "direct", "srun, one task per GPU; RANK/LOCAL_RANK/WORLD_SIZE from Slurm", program=True)


def memory(precision: str, model: Optional[ModelSpec] = None) -> MemoryProfile:
    """A program srun only starts: PyTorch DDP, or FSDP2 with `fsdp: true` (base.program_memory)."""
    return program_memory(LAUNCHER.name, precision)


def args(layout: Layout, opts: Options, user_argv: Sequence[str] = ()) -> Tuple[str, ...]:
    return ()
