"""Checkpoint-and-requeue: the lead time of the checkpoint signal and each launcher's signal path.

Why a path per launcher: srun turns SIGTERM/SIGHUP into SIGKILL for its tasks and drops SIGINT
(srun(1), signal forwarding), so the batch shell signals the steps with `scancel --signal`, which
slurmstepd delivers to every process of each step. torchrun then must handle that signal
(`--signals-to-handle`) and wait for its workers at least the lead time (`--shutdown-timeout`,
default 30 s); torchrun, DeepSpeed and accelerate report any worker failure as status 1, so there
the program asks for a requeue with a file, where srun passes its status on (exit 75).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import List, Optional, Tuple

from ..site import Site
from .launchers import Launcher

REQUEUE_EXIT = 75  # EX_TEMPFAIL (sysexits.h): "saved; run me again"
TORCHRUN_DEFAULT_SIGNALS = ("SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT")  # torch 2.13 run.py
DEFAULT_CHECKPOINT_GBPS = 2.0  # assumed when the site gives no requeue.checkpoint_gbps
BYTES_PER_PARAM = 14  # bf16 weights + fp32 master copy + two fp32 Adam moments
MARGIN_S = 60  # start-up of the save, barrier, and the requeue itself
MEGATRON_SIGNALS = ("TERM", "INT", "USR1", "USR2")  # Megatron --exit-signal choices


@dataclass(frozen=True)
class SignalPath:
    """How the checkpoint signal reaches the program and how the program asks to be requeued."""

    forward: str  # the batch shell's command that signals the steps
    torchrun_signals: Optional[str]  # --signals-to-handle for a torchrun agent, None without one
    exit_status: bool  # the step's status is the program's own (exit 75 asks for a requeue)
    clean_exit_after_signal: bool  # the framework saves on the signal and exits 0 (Megatron)
    note: str


# Signals a runner that cannot be told which to handle survives (and forwards): deepspeed's launch.py
# traps SIGINT/SIGTERM; accelerate launch runs torch's elastic agent with its default set. Any other
# checkpoint signal kills the runner, and with it the step, while the workers save.
RUNNER_HANDLED = {"deepspeed": ("TERM", "INT"), "accelerate": ("TERM", "INT", "HUP", "QUIT")}


def unhandled_signal(launcher: Launcher, signal: str) -> Optional[str]:
    """Why `signal` cannot be this launcher's checkpoint signal, or None."""
    handled = RUNNER_HANDLED.get(launcher.runner)
    if handled is None or signal in handled:
        return None
    return "the %s runner handles only %s; SIG%s would kill it (and the step) while the program saves: use %s" % (
        launcher.runner,
        "/".join("SIG" + h for h in handled),
        signal,
        " or ".join(handled),
    )


def signal_path(launcher: Launcher, signal: str) -> SignalPath:
    sig = "SIG" + signal
    forward = 'scancel --signal=%s "$SLURM_JOB_ID"' % signal
    handled = TORCHRUN_DEFAULT_SIGNALS + (() if sig in TORCHRUN_DEFAULT_SIGNALS else (sig,))
    if launcher.runner == "torchrun":
        return SignalPath(
            forward,
            ",".join(handled),
            False,
            launcher.name == "megatron",
            "torchrun handles %s and forwards it to its workers, waiting for them up to the lead time" % sig,
        )
    if launcher.runner == "direct":
        return SignalPath(forward, None, True, False, "each task (the program itself) gets %s" % sig)
    note = {
        "deepspeed": "the deepspeed runner answers %s by terminating its workers, then kills them 30 s later: "
        "save within 30 s" % sig,
        "accelerate": "accelerate launch runs torch's elastic agent (handles TERM/INT/HUP/QUIT, 30 s to exit)",
    }.get(launcher.runner, "the server gets %s" % sig)
    return SignalPath(forward, None, False, False, note)


def lead_time(site: Site, params: Optional[int], grace: Optional[int]) -> Tuple[int, str, List[str]]:
    """Seconds before the limit the checkpoint signal comes, why, and notes for the user.

    Twice the time to write one checkpoint at the site's bandwidth plus KillWait and a margin,
    so a save that starts late still ends before Slurm's SIGTERM+KillWait+SIGKILL.
    """
    notes: List[str] = []
    if grace is not None:
        return grace, "given (--grace)", notes
    gbps = site.requeue.checkpoint_gbps
    if gbps is None:
        gbps = DEFAULT_CHECKPOINT_GBPS
        notes.append(
            "site %s gives no requeue.checkpoint_gbps: assuming %g GB/s to the checkpoint file system for the "
            "checkpoint signal's lead time (set it in the site config, or pass --grace)" % (site.name, gbps)
        )
    if not params:
        return 300, "default 300 s (no model given, so no checkpoint size)", notes
    write = params * BYTES_PER_PARAM / (gbps * 1e9)
    lead = int(math.ceil(2 * write)) + site.requeue.kill_wait + MARGIN_S
    why = "2 x %.0f s to write %.0f GB at %g GB/s + KillWait %d s + %d s" % (
        write,
        params * BYTES_PER_PARAM / 1e9,
        gbps,
        site.requeue.kill_wait,
        MARGIN_S,
    )
    return min(lead, 65535), why, notes
