"""Shell completion of option values: sites (presets and files), models, templates, file names.

BY_FLAG maps an option's flag to its completer; every command registered on the root group
gets it for that flag (cli.app._Command), so a command added later with --site or --model
completes like the others without doing anything. Completers import their layer only when
the shell asks (never on a normal run).
"""

from __future__ import annotations

import os
from typing import Any, Callable, Dict, List

import click


def _files(incomplete: str, kind: str = "file") -> List[Any]:
    from click.shell_completion import CompletionItem

    return [CompletionItem(incomplete, type=kind)]


def complete_files(ctx: click.Context, param: click.Parameter, incomplete: str) -> List[Any]:
    """File names (the shell lists them)."""
    return _files(incomplete)


def complete_dirs(ctx: click.Context, param: click.Parameter, incomplete: str) -> List[Any]:
    return _files(incomplete, "dir")


def _named(names: List[str], incomplete: str, help_of: Callable[[str], str] = lambda n: "") -> List[Any]:
    from click.shell_completion import CompletionItem

    return [CompletionItem(n, help=help_of(n) or None) for n in names if n.startswith(incomplete)]


def complete_site(ctx: click.Context, param: click.Parameter, incomplete: str) -> List[Any]:
    """Built-in presets by name, and site files."""
    from ..site import preset_names

    return _named(preset_names(), incomplete) + _files(incomplete)


def complete_model(ctx: click.Context, param: click.Parameter, incomplete: str) -> List[Any]:
    """Catalogue names and aliases, and model files or checkpoint directories."""
    from ..plan import aliases_of, catalogue

    names: List[str] = []
    titles: Dict[str, str] = {}
    for m in catalogue():
        names.append(m.name)
        titles[m.name] = m.title
        for a in aliases_of(m.name):
            names.append(a)
            titles[a] = m.title
    return _named(names, incomplete, lambda n: titles.get(n, "")) + _files(incomplete)


def template_names() -> List[str]:
    """The built-in templates and the repo's own (.slurmgpu/templates), as `templates show` takes them."""
    from ..job import REPO_TEMPLATES, builtin_dir, find_repo

    root, _ = find_repo()
    out: List[str] = []
    for base in (str(builtin_dir()), os.path.join(str(root), REPO_TEMPLATES)):
        for dirpath, _dirs, files in os.walk(base):
            for f in files:
                if f.endswith(".j2"):
                    out.append(os.path.relpath(os.path.join(dirpath, f), base))
    return sorted(set(out))


def complete_template(ctx: click.Context, param: click.Parameter, incomplete: str) -> List[Any]:
    names = template_names()  # the full names, and the short ones `templates show` also takes
    short = [n[len("parts/") : -len(".j2")] for n in names if n.startswith("parts/")]
    return _named(sorted(set(names) | set(short)), incomplete)


def complete_doc(ctx: click.Context, param: click.Parameter, incomplete: str) -> List[Any]:
    from .docs import topics

    return _named(list(topics()), incomplete, lambda n: topics().get(n, ""))


# flag -> completer, for every command that has the flag (cli.app._Command applies it)
BY_FLAG: Dict[str, Callable[[click.Context, click.Parameter, str], List[Any]]] = {
    "--site": complete_site,
    "--model": complete_model,
    "--template": complete_template,
    "--templates": complete_dirs,
    "--spec": complete_files,
    "--log": complete_files,
    "--from-dir": complete_dirs,
    "--aggregate": complete_files,
    "--checkpoint-dir": complete_dirs,
}
