"""One adapter per framework: plan + model + spec -> the framework's own command line.

Each module (megatron, torchtitan, vllm, ...) declares its `LAUNCHER` record and an
`args(layout, opts, user_argv)` function; this face assembles the registry in the order of
`slurmgpu.vocab.LAUNCHERS` and dispatches. Shared pieces live in `base`.
"""

from __future__ import annotations

from dataclasses import replace
from types import ModuleType
from typing import TYPE_CHECKING, Dict, Optional, Sequence, Tuple

from ...errors import ConfigError, Issue
from ...plan import Capabilities, Layout
from ...plan.profile import MemoryProfile
from ...vocab import LAUNCHERS as NAMES
from . import accelerate, deepspeed, megatron, nemo, sglang, srun, torchrun, torchtitan, vllm

if TYPE_CHECKING:
    from ...plan import ModelSpec
from .base import (
    DEFAULT_SAVE_INTERVAL,
    PYTHONS,
    RUNNERS,
    Launcher,
    Options,
    check_caps,
    check_conflicts,
    check_precision,
    given_keys,
    option_key,
    program,
    program_caps,
    serving_layout_ok,
    weights_args,
)

_MODULES: Dict[str, ModuleType] = {
    m.LAUNCHER.name: m for m in (torchrun, srun, megatron, deepspeed, nemo, torchtitan, accelerate, vllm, sglang)
}
# tests/test_vocab.py checks this describes every name of slurmgpu.vocab.LAUNCHERS, in order
LAUNCHERS: Dict[str, Launcher] = {n: _MODULES[n].LAUNCHER for n in NAMES if n in _MODULES}


def framework_args(launcher: Launcher, layout: Layout, opts: Options, user_argv: Sequence[str] = ()) -> Tuple[str, ...]:
    """What the framework must be told about the planned model, precision and layout."""
    check_precision(launcher, opts)
    out: Tuple[str, ...] = _MODULES[launcher.name].args(layout, opts, user_argv)
    return out


def framework_files(
    launcher: Launcher, layout: Layout, opts: Options, user_argv: Sequence[str] = ()
) -> Tuple[Tuple[str, str], ...]:
    """Files the script writes before the launch step, (path, text): e.g. DeepSpeed's config."""
    files = getattr(_MODULES[launcher.name], "files", None)
    out: Tuple[Tuple[str, str], ...] = files(layout, opts, user_argv) if files else ()
    return out


def runner_args(launcher: Launcher, layout: Layout, opts: Options, user_argv: Sequence[str] = ()) -> Tuple[str, ...]:
    """The plan's flags for the runner itself (`accelerate launch --mixed_precision bf16 ...`)."""
    fn = getattr(_MODULES[launcher.name], "runner_args", None)
    out: Tuple[str, ...] = fn(layout, opts, user_argv) if fn else ()
    return out


def module(name: str) -> ModuleType:
    """The adapter module of a launcher (the serving engines' role and router functions live there)."""
    return _MODULES[name]


def memory_profile(
    launcher: Launcher, precision: str = "bf16", implements: Sequence[str] = (), model: Optional[ModelSpec] = None
) -> MemoryProfile:
    """What the launcher's framework keeps per GPU with the flags its adapter writes for `model` (each
    module's `memory(precision, model)`); for a program the launcher only starts, the recomputation it
    declares."""
    prof: MemoryProfile = _MODULES[launcher.name].memory(precision or "bf16", model)
    if launcher.program:
        prof = replace(prof, recompute=("full",) if "recompute" in implements else ("none",))
    return prof


def planner_caps(
    launcher: Launcher,
    precision: str = "bf16",
    implements: Sequence[str] = (),
    fsdp: bool = False,
    model: Optional[ModelSpec] = None,
) -> Capabilities:
    """The Capabilities the planner gets for a job: what the launcher (and a program it starts,
    by its declaration) can run, and its framework's memory profile for the model."""
    caps = program_caps(launcher, implements, fsdp)
    return replace(caps, launcher=launcher.name, memory=memory_profile(launcher, precision, implements, model))


def get_launcher(name: str) -> Launcher:
    try:
        return LAUNCHERS[name]
    except KeyError:
        import difflib

        hint = difflib.get_close_matches(name, NAMES, n=1)
        raise ConfigError(
            [
                Issue(
                    "--launcher",
                    None,
                    None,
                    "launcher",
                    "unknown launcher %r%s; expected one of: %s"
                    % (name, " (did you mean '%s'?)" % hint[0] if hint else "", ", ".join(NAMES)),
                )
            ]
        ) from None


__all__ = [
    "DEFAULT_SAVE_INTERVAL",
    "LAUNCHERS",
    "NAMES",
    "PYTHONS",
    "RUNNERS",
    "Launcher",
    "Options",
    "check_caps",
    "check_conflicts",
    "check_precision",
    "framework_args",
    "framework_files",
    "get_launcher",
    "module",
    "given_keys",
    "memory_profile",
    "planner_caps",
    "program_caps",
    "option_key",
    "program",
    "runner_args",
    "serving_layout_ok",
    "weights_args",
]
