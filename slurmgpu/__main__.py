"""The `slurmgpu` console script and `python -m slurmgpu`: slurmgpu.cli's main, started lean.

A command such as `gen` spends most of its life importing modules, whose objects are never
garbage; Python's cyclic collector still walks them some 40 times (about 7% of `gen`). So the
collector is off for the first GC_QUIET_S seconds, which a short command ends within, and on
again after that for a long one (discover, preflight, submit --wait). Reference counting frees
everything else as usual. `slurmgpu.cli.main` itself (click's group, what CliRunner calls)
leaves the collector alone.
"""

from __future__ import annotations

import gc
import sys

GC_QUIET_S = 1.0


def quiet_gc(seconds: float = GC_QUIET_S) -> None:
    """Turn the cyclic collector off now and back on after `seconds` (a daemon timer thread,
    so exit never waits for it). No-op if the collector is already off."""
    if not gc.isenabled():
        return
    import threading

    gc.disable()
    timer = threading.Timer(seconds, gc.enable)
    timer.daemon = True
    timer.start()


def main() -> None:
    quiet_gc()
    try:
        from .cli import main as cli

        sys.exit(cli())
    except KeyboardInterrupt:  # before click runs (imports) or after it (teardown): the same one line
        sys.stderr.write("slurmgpu: interrupted\n")
        sys.exit(130)


if __name__ == "__main__":  # pragma: no cover
    main()
