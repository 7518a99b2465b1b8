"""Jinja2 and shell quoting only: (template, context, search path) -> text."""

from __future__ import annotations

from .quote import PATH_VARS, PathArg, arg_groups, arg_lines, comment, expand_path, sbatch_quote, shpath, shquote
from .templates import BUILTIN, TemplateDir, cache_dir, locate, make_environment, render, template_names

__all__ = [
    "PathArg",
    "shpath",
    "BUILTIN",
    "PATH_VARS",
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
    "shquote",
    "template_names",
]
