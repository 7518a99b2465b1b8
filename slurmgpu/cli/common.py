"""Helpers every command shares: loading the site with its notice, JSON output, atomic writes."""

from __future__ import annotations

import json
import os
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence

import click

from .. import vocab
from ..errors import SlurmgpuError
from .complete import complete_files as complete_files  # re-exported for the commands


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


def _write_atomic(path: str, text: str, mode: int = 0o755, say: bool = False) -> None:
    """Write via a temporary file in the same directory and rename: never a half-written file.

    `mode` before the umask: 0o755 for scripts, 0o644 for specs, pages and data. A failure is
    one line naming the file (exit 2) and leaves nothing behind."""
    import tempfile

    d = os.path.dirname(os.path.abspath(path))
    try:
        fd, tmp = tempfile.mkstemp(prefix=".%s." % os.path.basename(path), dir=d)
    except OSError as exc:
        raise SlurmgpuError("cannot write %s: %s" % (path, _why(exc, d))) from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, mode & ~umask)
        os.replace(tmp, path)
    except BaseException as exc:
        if os.path.exists(tmp):
            os.unlink(tmp)
        if isinstance(exc, OSError):
            raise SlurmgpuError("cannot write %s: %s" % (path, _why(exc, path))) from None
        raise
    if say:
        click.echo("slurmgpu: wrote %s" % path, err=True)


def _why(exc: OSError, where: str) -> str:
    return "%s (%s)" % (exc.strerror or exc, where) if exc.strerror else str(exc)


def output_problem(path: str, directory: bool = False) -> Optional[str]:
    """Why `path` cannot be written (None: it can): checked before any work, so a command that
    cannot write its result stops at once with one line and leaves nothing half-written."""
    if path == "-" and not directory:
        return None
    target = os.path.abspath(path)
    parent = target if directory else os.path.dirname(target)
    if not directory and os.path.isdir(target):
        return "%s is a directory; give a file name" % path
    if not os.path.exists(parent):
        return "directory %s does not exist (create it first: mkdir -p %s)" % (parent, shlex_quote(parent))
    if not os.path.isdir(parent):
        return "%s is not a directory" % parent
    if not os.access(parent, os.W_OK | os.X_OK):
        return "directory %s is not writable by you" % parent
    if not directory and os.path.exists(target) and not os.access(target, os.W_OK):
        return "%s exists and is not writable by you" % path
    return None


def shlex_quote(s: str) -> str:
    import shlex

    return shlex.quote(s)


class OutputPath(click.ParamType):
    """A file (or with `directory`, a directory) the command will write: checked when the command
    line is parsed, before any work. Completes file names."""

    name = "output"
    no_help_hint = True  # the error says what to do; --help would not add to it

    def __init__(self, directory: bool = False) -> None:
        self.directory = directory

    def convert(self, value: Any, param: Optional[click.Parameter], ctx: Optional[click.Context]) -> Any:
        problem = output_problem(str(value), self.directory)
        if problem:
            self.fail("cannot write %s: %s" % (value, problem) if not problem.startswith(str(value)) else problem)
        return str(value)

    def shell_complete(self, ctx: click.Context, param: click.Parameter, incomplete: str) -> Any:
        from click.shell_completion import CompletionItem

        return [CompletionItem(incomplete, type="dir" if self.directory else "file")]


class VocabChoice(click.Choice):
    """A choice among vocab names that also takes their aliases (serve -> inference), in any case;
    --help and completion show the canonical names, the value passed on is the canonical one."""

    def __init__(self, names: Sequence[str], aliases: Optional[Mapping[str, str]] = None) -> None:
        super().__init__(list(names), case_sensitive=False)
        self.aliases = dict(aliases or {})

    def convert(self, value: Any, param: Optional[click.Parameter], ctx: Optional[click.Context]) -> Any:
        if isinstance(value, str) and value.lower() in self.aliases:
            return self.aliases[value.lower()]
        if isinstance(value, str) and value.lower() in [c.lower() for c in self.choices]:
            return next(c for c in self.choices if c.lower() == value.lower())
        import difflib

        hint = difflib.get_close_matches(str(value).lower(), list(self.choices) + list(self.aliases), n=1)
        mean = ""
        if hint:
            mean = " (did you mean '%s'%s?)" % (
                hint[0],
                " = " + self.aliases[hint[0]] if hint[0] in self.aliases else "",
            )
        self.fail("%r is not one of %s%s" % (value, ", ".join(self.choices), mean), param, ctx)


OUTPUT_FILE = OutputPath()
OUTPUT_DIR = OutputPath(directory=True)


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
            kw["type"] = VocabChoice(f.choices, dict(f.aliases))
        elif f.kind == "int":
            kw["type"] = int
        if f.kind in ("strlist", "strmap"):
            kw["multiple"] = True
        out.append(click.option(*decls, **kw))
    for key, help_text in PARALLEL_HELP.items():
        out.append(click.option("--" + key.replace("_", "-"), key, type=int, help=help_text))
    return out
