"""Jinja2 and shell quoting only: (template, context, search path) -> text.

The names below load their module on first use (PEP 562), so importing one layer never
imports the rest of it: start-up time is a feature on a login node."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..lazy import face

if TYPE_CHECKING:
    from .quote import (
        PATH_VARS,
        PathArg,
        RuntimeArg,
        arg_groups,
        arg_lines,
        comment,
        expand_path,
        sbatch_quote,
        shpath,
        shquote,
        shruntime,
    )
    from .templates import BUILTIN, TemplateDir, cache_dir, locate, make_environment, render, template_names

# exported name -> (module, name in it)
_EXPORTS = {
    "BUILTIN": (".templates", "BUILTIN"),
    "PATH_VARS": (".quote", "PATH_VARS"),
    "PathArg": (".quote", "PathArg"),
    "RuntimeArg": (".quote", "RuntimeArg"),
    "TemplateDir": (".templates", "TemplateDir"),
    "arg_groups": (".quote", "arg_groups"),
    "arg_lines": (".quote", "arg_lines"),
    "cache_dir": (".templates", "cache_dir"),
    "comment": (".quote", "comment"),
    "expand_path": (".quote", "expand_path"),
    "locate": (".templates", "locate"),
    "make_environment": (".templates", "make_environment"),
    "render": (".templates", "render"),
    "sbatch_quote": (".quote", "sbatch_quote"),
    "shpath": (".quote", "shpath"),
    "shquote": (".quote", "shquote"),
    "shruntime": (".quote", "shruntime"),
    "template_names": (".templates", "template_names"),
}
__all__ = [
    "BUILTIN",
    "PATH_VARS",
    "PathArg",
    "RuntimeArg",
    "TemplateDir",
    "arg_groups",
    "arg_lines",
    "cache_dir",
    "comment",
    "expand_path",
    "locate",
    "make_environment",
    "render",
    "sbatch_quote",
    "shpath",
    "shquote",
    "shruntime",
    "template_names",
]


__getattr__ = face(__name__, _EXPORTS, globals())
