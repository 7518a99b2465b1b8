"""Where a job's templates come from: --templates, the repo's .slurmgpu/templates, the site's, then
the built-in set, in that order."""

from __future__ import annotations

import os
from pathlib import Path
from typing import List, Optional, Tuple

from ..errors import TemplateError
from ..render import BUILTIN, TemplateDir
from ..site import Site

REPO_TEMPLATES = os.path.join(".slurmgpu", "templates")


def builtin_dir() -> str:
    from ..site import data_dir

    return str(data_dir("templates"))


def search_path(templates: Optional[str], repo_root: Optional[Path], site: Optional[Site]) -> Tuple[TemplateDir, ...]:
    """--templates DIR > <repo>/.slurmgpu/templates > the site's template dir > built-in."""
    dirs: List[TemplateDir] = []
    if templates:
        if not os.path.isdir(templates):
            raise TemplateError("--templates %s: no such directory" % templates)
        dirs.append(TemplateDir(os.path.abspath(templates), "--templates"))
    if repo_root is not None and (repo_root / REPO_TEMPLATES).is_dir():
        dirs.append(TemplateDir(str(repo_root / REPO_TEMPLATES), "repo"))
    if site is not None and site.template_dir:
        if os.path.isdir(site.template_dir):
            dirs.append(TemplateDir(site.template_dir, "site"))
    dirs.append(TemplateDir(builtin_dir(), BUILTIN))
    return tuple(dirs)
