"""Shell and #SBATCH quoting. Generated scripts run as the user on hundreds of GPUs, so every user
value goes through one of these functions (also the templates' filters)."""

from __future__ import annotations

import re
from typing import Any, List, Mapping, Sequence, Tuple

from ..errors import TemplateError

_SAFE = re.compile(r"^[A-Za-z0-9_@%+:,./-][A-Za-z0-9_@%+=:,./-]*\Z")  # \Z: "$" would let a final newline through


_CTRL = re.compile(r"[\x00-\x1f\x7f]")


_SBATCH_SPECIAL = re.compile(r"[\\\"'#\s]")


_SBATCH_QUOTE = re.compile(r"[\\\"'\s]")


class PathArg(str):
    """A program argument that is a path from the spec or site (the checkpoint directory):
    the templates quote it with `shpath`, so $USER, $SCRATCH, ... expand on the node."""

    __slots__ = ()


class RuntimeArg(str):
    """A program argument slurmgpu builds from values the job's shell knows only at run time
    (a worker's host and port: `http://${SLURMGPU_HOST}:${SLURMGPU_PORT}`): the templates
    quote it with `shruntime`, so only ${SLURMGPU_*} references expand."""

    __slots__ = ()


_RUNTIME_VAR = re.compile(r"\$\{(SLURMGPU_[A-Z0-9_]+)\}")


def shruntime(value: Any) -> str:
    """One bash word in which each ${SLURMGPU_NAME} expands and everything else stays literal."""
    s = str(value)
    if not _RUNTIME_VAR.search(s):
        return shquote(s)
    parts: List[str] = []
    pos = 0
    for m in _RUNTIME_VAR.finditer(s):
        if m.start() > pos:
            parts.append(_quoted(s[pos : m.start()]))
        parts.append('"${%s}"' % m.group(1))
        pos = m.end()
    if pos < len(s):
        parts.append(_quoted(s[pos:]))
    return "".join(parts) or "''"


def shquote(value: Any) -> str:
    """One bash word that expands to exactly `value` and stays on one line.

    Plain words stay bare; anything else is single-quoted; control characters
    (newlines) use bash's $'...' form so no generated line is ever split.
    """
    s = str(value)
    if _SAFE.match(s):
        return s
    if "\x00" in s:
        raise TemplateError("cannot put a NUL byte in a shell argument: %r" % s)
    if not _CTRL.search(s):
        return "'" + s.replace("'", "'\\''") + "'"
    out = []
    for ch in s:
        if ch == "\\":
            out.append("\\\\")
        elif ch == "'":
            out.append("\\'")
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\t":
            out.append("\\t")
        elif ch == "\r":
            out.append("\\r")
        elif _CTRL.match(ch):
            out.append("\\x%02x" % ord(ch))
        else:
            out.append(ch)
    return "$'" + "".join(out) + "'"


# The variables a path may use; the job's shell expands them on the compute node. Nothing
# else in any user value expands (docs/gen.md, "Paths").
PATH_VARS = ("USER", "HOME", "SCRATCH", "SLURM_JOB_ID")


_PATH_VAR = re.compile(r"\$(?:\{(%s)\}|(%s)(?![A-Za-z0-9_]))" % ("|".join(PATH_VARS), "|".join(PATH_VARS)))


_DQ_UNSAFE = re.compile(r'[$`"\\!\x00-\x1f\x7f]')


def expand_path(text: str, environ: Mapping[str, str]) -> str:
    """What the job's shell makes of a path value: each $VAR / ${VAR} of PATH_VARS replaced from
    `environ` (left as written when unset there), everything else as written."""
    return _PATH_VAR.sub(lambda m: environ.get(m.group(1) or m.group(2), m.group(0)), text)


def shpath(value: Any) -> str:
    """One bash word for a path: $USER, $HOME, $SCRATCH and $SLURM_JOB_ID (also as ${...})
    expand when the script runs; every other character stays literal, as with `shquote`.

    '/scratch/$USER/ckpt' -> "/scratch/${USER}/ckpt"; a value with no such variable is
    quoted exactly as by `shquote`. An unset variable stops the job (`set -u`) instead of
    writing to a truncated path.
    """
    s = str(value)
    pieces: List[Tuple[bool, str]] = []  # (is a variable, text)
    pos = 0
    for m in _PATH_VAR.finditer(s):
        if m.start() > pos:
            pieces.append((False, s[pos : m.start()]))
        pieces.append((True, m.group(1) or m.group(2)))
        pos = m.end()
    if not any(is_var for is_var, _ in pieces):
        return shquote(s)
    if pos < len(s):
        pieces.append((False, s[pos:]))
    if not any(_DQ_UNSAFE.search(text) for is_var, text in pieces if not is_var):
        return '"' + "".join("${%s}" % text if is_var else text for is_var, text in pieces) + '"'
    # Mixed: each literal piece quoted on its own (never bare, so shellcheck reads no "A"B"C").
    return "".join('"${%s}"' % text if is_var else _quoted(text) for is_var, text in pieces)


def _quoted(text: str) -> str:
    q = shquote(text)
    return q if q.startswith(("'", "$'")) else "'" + q + "'"  # a bare shquote word has no quote in it


def sbatch_quote(value: Any) -> str:
    """A value for an #SBATCH line, as sbatch's own parser reads it back.

    sbatch splits the line on blanks, groups "double quotes" (with \\" and \\\\ inside) and
    treats an unescaped '#' as the start of a comment, so a pyxis image is written
    nvcr.io\\#nvidia/pytorch:24.04-py3 and anything with blanks or quotes goes in double
    quotes. (A backslash before a blank does not work: checked against Slurm 22.05.)
    """
    s = str(value)
    if _CTRL.search(s):
        raise TemplateError("an #SBATCH value must be one line: %r" % s)
    if not _SBATCH_SPECIAL.search(s):
        return s
    if not _SBATCH_QUOTE.search(s):
        return s.replace("#", "\\#")
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def comment(value: Any) -> str:
    """Text safe inside a '# ...' line: control characters become spaces."""
    return _CTRL.sub(" ", str(value))


def arg_groups(argv: Sequence[str]) -> List[Tuple[str, ...]]:
    """Arguments grouped as they are displayed: the leading words (the program), then each option
    with its value (or alone). The words are kept as given (a launchers.PathArg stays one)."""
    groups: List[Tuple[str, ...]] = []
    i = 0
    while i < len(argv) and not str(argv[i]).startswith("-"):
        i += 1
    if i:
        groups.append(tuple(argv[:i]))
    while i < len(argv):
        a = str(argv[i])
        nxt = str(argv[i + 1]) if i + 1 < len(argv) else None
        if a.startswith("-") and a != "--" and "=" not in a and nxt is not None and not nxt.startswith("-"):
            groups.append((argv[i], argv[i + 1]))
            i += 2
        else:
            groups.append((argv[i],))
            i += 1
    return groups


def arg_lines(argv: Sequence[str]) -> List[str]:
    """Quoted arguments grouped for display: the leading words (the program) share a line, and so
    does an option with its value. Only the layout of the script changes, never the words.
    Path arguments (launchers.PathArg) are quoted with `shpath`, every other one with `shquote`."""

    def word(a: Any) -> str:
        if isinstance(a, RuntimeArg):
            return shruntime(a)
        return shpath(a) if isinstance(a, PathArg) else shquote(a)

    return [" ".join(word(a) for a in g) for g in arg_groups(argv)]
