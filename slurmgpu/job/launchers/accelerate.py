"""Hugging Face accelerate: `accelerate launch`, one task per node; the program is the user's."""

from __future__ import annotations

from typing import Sequence, Tuple

from ...plan import Layout
from .base import Launcher, Options

LAUNCHER = Launcher("accelerate", "accelerate", "Hugging Face accelerate launch, one task per node")


def args(layout: Layout, opts: Options, user_argv: Sequence[str] = ()) -> Tuple[str, ...]:
    return ()
