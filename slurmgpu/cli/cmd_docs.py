"""`docs`: the guides, readable on a login node after `pip install`."""

from __future__ import annotations

import os
import sys
from typing import Optional

import click

from ..errors import SlurmgpuError
from .app import main
from .complete import complete_doc


@main.command("docs")
@click.argument("topic", required=False, shell_complete=complete_doc)
@click.option("--path", "show_path", is_flag=True, help="Print the guide's file path instead of its text.")
def docs_cmd(topic: Optional[str], show_path: bool) -> None:
    """Print a guide shipped with slurmgpu (no TOPIC: list them).

    The same Markdown as the docs/ directory of the source tree; through a pager when
    standard output is a terminal ($PAGER, else less).

    \b
    Examples:
      slurmgpu docs
      slurmgpu docs gen
      slurmgpu docs launchers --path
    """
    from .docs import docs_dir, topic_path, topics

    if not topic:
        names = topics()
        if not names:
            raise SlurmgpuError("no guides found in %s (a broken installation?)" % docs_dir())
        width = max(len(n) for n in names)
        for name, head in names.items():
            click.echo("%s  %s" % (name.ljust(width), head))
        click.echo("\nslurmgpu docs TOPIC prints one (slurmgpu docs TOPIC --path: its file).", err=True)
        return
    path = topic_path(topic)
    if path is None:
        import difflib

        hint = difflib.get_close_matches(topic, list(topics()), n=1)
        raise SlurmgpuError(
            "no guide called %r%s; `slurmgpu docs` lists them"
            % (topic, " (did you mean '%s'?)" % hint[0] if hint else "")
        )
    if show_path:
        click.echo(str(path))
        return
    text = path.read_text(encoding="utf-8")
    if sys.stdout.isatty() and not os.environ.get("SLURMGPU_NO_PAGER"):
        click.echo_via_pager(text)
    else:
        click.echo(text, nl=False)
