"""The root click group: one error style, exit codes stated in every --help, Ctrl-C, completion.

Every command and group registered on `main` gets these classes (command_class/group_class),
so a command added later inherits the error style, the "Exit status" section and the
deprecated-alias handling without doing anything.
"""

from __future__ import annotations

import sys
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import click

from .. import __version__
from ..errors import SlurmgpuError

COMPLETION_HELP = """
Shell completion (bash): eval "$(_SLURMGPU_COMPLETE=bash_source slurmgpu)"
(zsh: zsh_source, fish: fish_source). The guides: slurmgpu docs.
"""

INTERRUPTED = 130  # 128 + SIGINT, what shells report for a command stopped by Ctrl-C
# What every command may exit with; a command adds or rewords codes with @exits.
STANDARD_EXITS: Tuple[Tuple[int, str], ...] = (
    (0, "done"),
    (2, "usage or input error (one line on standard error says what to change)"),
    (INTERRUPTED, "interrupted (Ctrl-C)"),
)
_EXITS_ATTR = "__slurmgpu_exits__"


def exits(*codes: Tuple[int, str]) -> Any:
    """Declare a command's exit codes beyond (or rewording) STANDARD_EXITS; --help lists them all.

    tests/test_cli_examples.py runs every --help example and checks its exit code is listed here."""

    def deco(f: Any) -> Any:
        setattr(f, _EXITS_ATTR, tuple(codes))
        return f

    return deco


def exit_codes(cmd: click.Command) -> Dict[int, str]:
    """The exit codes a command documents (standard ones merged with its own), in order."""
    out = dict(STANDARD_EXITS)
    for code, what in getattr(cmd.callback, _EXITS_ATTR, ()) or ():
        out[code] = what
    return dict(sorted(out.items()))


def interrupted() -> None:
    """The one line and exit status of a command stopped by Ctrl-C."""
    click.echo("slurmgpu: interrupted", err=True)
    sys.exit(INTERRUPTED)


class AliasOption(click.Option):
    """A hidden, deprecated spelling of another option (kept for users' scripts): its value goes to
    `alias_for` with a one-line notice naming the current spelling."""

    def __init__(self, decls: Sequence[str], alias_for: str, new_flag: str, **kw: Any) -> None:
        kw.setdefault("hidden", True)
        super().__init__(list(decls), **kw)
        self.alias_for = alias_for
        self.new_flag = new_flag


def alias(old_flag: str, new_flag: str, dest: str, **kw: Any) -> Any:
    """Decorator: `old_flag` stays accepted (hidden) as a deprecated spelling of `new_flag`."""
    return click.option(
        old_flag,
        "_alias_" + old_flag.lstrip("-").replace("-", "_"),
        cls=AliasOption,
        alias_for=dest,
        new_flag=new_flag,
        **kw,
    )


def _add_completion(cmd: click.Command) -> None:
    """Give each option of `cmd` that completion.BY_FLAG knows (and that has no completer of its
    own) that completer: --site, --model, --template ... complete the same in every command."""
    from .complete import BY_FLAG

    for p in cmd.params:
        if getattr(p, "_custom_shell_complete", None) is not None:
            continue
        for flag in getattr(p, "opts", ()):
            if flag in BY_FLAG:
                p._custom_shell_complete = BY_FLAG[flag]
                break


class _Command(click.Command):
    """A command whose --help ends with its exit codes, whose deprecated aliases are merged and
    whose options complete by flag (complete.BY_FLAG)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        _add_completion(self)

    def format_epilog(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        super().format_epilog(ctx, formatter)
        _format_exits(self, formatter)

    def invoke(self, ctx: click.Context) -> Any:
        _merge_aliases(self, ctx)
        return super().invoke(ctx)


def _format_exits(cmd: click.Command, formatter: click.HelpFormatter) -> None:
    with formatter.section("Exit status"):
        formatter.write_dl([(str(code), what) for code, what in exit_codes(cmd).items()])


def _merge_aliases(cmd: click.Command, ctx: click.Context) -> None:
    for p in cmd.params:
        if not isinstance(p, AliasOption) or p.name is None:
            continue
        value = ctx.params.pop(p.name, None)
        if value in (None, (), False):
            continue
        click.echo("warning: %s is an old spelling, still accepted: use %s" % (p.opts[0], p.new_flag), err=True)
        if ctx.params.get(p.alias_for) in (None, (), False):
            ctx.params[p.alias_for] = value


def _param_name(exc: click.ClickException) -> str:
    param = getattr(exc, "param", None)
    if param is None:
        return getattr(exc, "param_hint", None) or ""
    if isinstance(param, click.Option):
        visible = [o for o in param.opts if o.startswith("--")] or param.opts
        return visible[0]
    return (param.human_readable_name or "").upper()


def usage_line(exc: click.ClickException) -> str:
    """click's errors in the style of slurmgpu's own: `error: --flag: what is wrong (see ... --help)`."""
    ctx = getattr(exc, "ctx", None)
    param = getattr(exc, "param", None)
    hint = ctx is not None and not getattr(getattr(param, "type", None), "no_help_hint", False)
    where = " (see `%s --help`)" % ctx.command_path if hint and ctx is not None else ""
    if isinstance(exc, click.BadParameter) and not isinstance(exc, click.MissingParameter):
        name = _param_name(exc)
        msg = exc.message.rstrip(".")
        return "error: %s%s%s" % (name + ": " if name else "", msg, where)
    msg = " ".join(exc.format_message().split()).rstrip(".")
    return "error: %s%s" % (msg[:1].lower() + msg[1:], where)


class _Group(click.Group):
    """Turns SlurmgpuError into a one-line message and its exit code, never a traceback; click's own
    usage errors get the same style, Ctrl-C exits 130 with one line."""

    command_class = _Command
    group_class = type  # subgroups are _Group too

    def main(
        self,
        args: Optional[Sequence[str]] = None,
        prog_name: Optional[str] = None,
        complete_var: Optional[str] = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, False, **extra)
        try:
            rv = super().main(args, prog_name, complete_var, False, **extra)
        except click.ClickException as exc:
            click.echo(usage_line(exc), err=True)
            sys.exit(exc.exit_code)
        except (click.Abort, KeyboardInterrupt) as exc:
            if isinstance(exc.__cause__, EOFError) or isinstance(exc.__context__, EOFError):
                click.echo("error: no answer (standard input is closed): give the values as flags", err=True)
                sys.exit(2)
            interrupted()
        sys.exit(rv if isinstance(rv, int) else 0)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except SlurmgpuError as exc:
            click.echo("error: %s" % exc if "\n" not in str(exc) else str(exc), err=True)
            ctx.exit(exc.exit_code)
        except KeyboardInterrupt:
            interrupted()
        except OSError as exc:
            # a file the user named (or its directory) cannot be read or written: one line, exit 2
            if exc.filename is None or exc.strerror is None:
                raise
            click.echo("error: %s: %s" % (exc.filename, exc.strerror), err=True)
            ctx.exit(2)

    def format_epilog(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        super().format_epilog(ctx, formatter)
        _format_exits(self, formatter)


def iter_commands(cmd: click.Command, path: Tuple[str, ...] = ()) -> List[Tuple[Tuple[str, ...], click.Command]]:
    """Every command and group under `cmd` with its path (for tests and the docs command)."""
    out = [(path, cmd)]
    if isinstance(cmd, click.Group):
        for name in sorted(cmd.commands):
            out += iter_commands(cmd.commands[name], path + (name,))
    return out


def choices_help(names: Sequence[str], aliases: Mapping[str, str]) -> str:
    """`pretrain, finetune, ... (also: serve=inference)` for a Choice's help line."""
    extra = ", ".join("%s=%s" % kv for kv in aliases.items())
    return ", ".join(names) + (" (also: %s)" % extra if extra else "")


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]}, epilog=COMPLETION_HELP)
@click.version_option(__version__, "--version", prog_name="slurmgpu")
def main() -> None:
    """Multi-node GPU jobs on Slurm that are correct by construction.

    \b
    Examples:
      slurmgpu site list
      slurmgpu site show dgx-h100 --json
      slurmgpu gen --model llama3-8b --launcher megatron --nodes 2 --smoke -o job.sh
      slurmgpu docs gen
    """
