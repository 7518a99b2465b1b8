"""Helpers every command shares: loading the site with its notice, JSON output, atomic writes."""

from __future__ import annotations

import json
import os
from typing import Any, Callable, Dict, List, Optional

import click

from .. import vocab


def _emit_json(obj: Any) -> None:
    click.echo(json.dumps(obj, indent=2, sort_keys=False))


def _load_site(site: Optional[str], quiet: bool = False):
    from ..site import resolve_site

    s, notice = resolve_site(site, os.environ)
    if not quiet:
        click.echo(notice, err=True)
    return s


# From slurmgpu.vocab, which imports nothing, so `slurmgpu --help` loads nothing more.
_LAUNCHERS = vocab.LAUNCHERS


def _write_atomic(path: str, text: str) -> None:
    """Write via a temporary file in the same directory and rename: never a half-written script."""
    import tempfile

    d = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".%s." % os.path.basename(path), dir=d)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o777 & ~umask & 0o755)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def spec_field_options() -> List[Callable[[Any], Any]]:
    """The click options that override job-spec fields, built from slurmgpu.jobfields (the one table)."""
    from ..jobfields import CONTAINER_FIELDS, FIELDS, PARALLEL_HELP

    out: List[Callable[[Any], Any]] = []
    for f in tuple(FIELDS) + tuple(CONTAINER_FIELDS):
        if f.flag is None:
            continue
        kw: Dict[str, Any] = {"help": f.help}
        if f.metavar:
            kw["metavar"] = f.metavar
        decls = [f.flag, f.dest]
        if f.cli == "switch":
            decls = ["%s/--no-%s" % (f.flag, f.flag[2:]), f.dest]
            kw["default"] = None
        elif f.cli == "choice":
            kw["type"] = click.Choice(f.choices)
        elif f.kind == "int":
            kw["type"] = int
        if f.kind in ("strlist", "strmap"):
            kw["multiple"] = True
        out.append(click.option(*decls, **kw))
    for key, help_text in PARALLEL_HELP.items():
        out.append(click.option("--" + key.replace("_", "-"), key, type=int, help=help_text))
    return out
