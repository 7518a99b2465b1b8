"""The root click group: error mapping to exit codes, version, shell completion."""

from __future__ import annotations

from typing import Any

import click

from .. import __version__
from ..errors import SlurmgpuError

COMPLETION_HELP = """
Shell completion (bash): eval "$(_SLURMGPU_COMPLETE=bash_source slurmgpu)"
(zsh: zsh_source, fish: fish_source).
"""


class _Group(click.Group):
    """Turns SlurmgpuError into a one-line message and its exit code, never a traceback."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except SlurmgpuError as exc:
            click.echo("error: %s" % exc if "\n" not in str(exc) else str(exc), err=True)
            ctx.exit(exc.exit_code)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]}, epilog=COMPLETION_HELP)
@click.version_option(__version__, "--version", prog_name="slurmgpu")
def main() -> None:
    """Multi-node GPU jobs on Slurm that are correct by construction.

    \b
    Examples:
      slurmgpu site list
      slurmgpu site show dgx-h100 --json
      slurmgpu site validate my-cluster.yaml
    """
