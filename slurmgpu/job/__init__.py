"""The user's job: spec -> sized layout -> render request -> script -> policy verdict -> submit.

The names below load their module on first use (PEP 562), so importing one layer never
imports the rest of it: start-up time is a feature on a login node."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..lazy import face

if TYPE_CHECKING:
    from ..render import PathArg
    from .diff import Column, compare, render_text, site_column
    from .generate import Generated, check_policy, generate
    from .images import ImageError, parse_image, spell
    from .launchers import NAMES, Launcher, Options, get_launcher
    from .request import RenderRequest, build_request, render_request
    from .sizing import Sizing, layout_from_pins, plan_layout, plan_request, segment_for, suggestion
    from .spec import (
        PLACEHOLDER_PROGRAM,
        REPO_DIR,
        SPEC_FILE,
        ContainerSpec,
        JobSpec,
        apply_overrides,
        find_repo,
        for_site,
        load_spec,
        load_spec_issues,
        scaffold,
        spec_from_text,
    )
    from .templates import REPO_TEMPLATES, builtin_dir, search_path
    from .validate import check_spec, spec_issues

# A name that is also a submodule's name is bound now: once any sibling imported the
# submodule, the package attribute would otherwise be the module, not the function.
from .generate import generate  # noqa: E402

# exported name -> (module, name in it)
_EXPORTS = {
    "Column": (".diff", "Column"),
    "ContainerSpec": (".spec", "ContainerSpec"),
    "Generated": (".generate", "Generated"),
    "ImageError": (".images", "ImageError"),
    "JobSpec": (".spec", "JobSpec"),
    "Launcher": (".launchers", "Launcher"),
    "NAMES": (".launchers", "NAMES"),
    "Options": (".launchers", "Options"),
    "PLACEHOLDER_PROGRAM": (".spec", "PLACEHOLDER_PROGRAM"),
    "PathArg": ("..render", "PathArg"),
    "REPO_DIR": (".spec", "REPO_DIR"),
    "REPO_TEMPLATES": (".templates", "REPO_TEMPLATES"),
    "RenderRequest": (".request", "RenderRequest"),
    "SPEC_FILE": (".spec", "SPEC_FILE"),
    "Sizing": (".sizing", "Sizing"),
    "apply_overrides": (".spec", "apply_overrides"),
    "build_request": (".request", "build_request"),
    "builtin_dir": (".templates", "builtin_dir"),
    "check_policy": (".generate", "check_policy"),
    "compare": (".diff", "compare"),
    "find_repo": (".spec", "find_repo"),
    "for_site": (".spec", "for_site"),
    "get_launcher": (".launchers", "get_launcher"),
    "layout_from_pins": (".sizing", "layout_from_pins"),
    "load_spec": (".spec", "load_spec"),
    "load_spec_issues": (".spec", "load_spec_issues"),
    "check_spec": (".validate", "check_spec"),
    "spec_issues": (".validate", "spec_issues"),
    "parse_image": (".images", "parse_image"),
    "plan_layout": (".sizing", "plan_layout"),
    "plan_request": (".sizing", "plan_request"),
    "render_request": (".request", "render_request"),
    "render_text": (".diff", "render_text"),
    "scaffold": (".spec", "scaffold"),
    "search_path": (".templates", "search_path"),
    "segment_for": (".sizing", "segment_for"),
    "site_column": (".diff", "site_column"),
    "spec_from_text": (".spec", "spec_from_text"),
    "spell": (".images", "spell"),
    "suggestion": (".sizing", "suggestion"),
}
__all__ = [
    "Column",
    "ContainerSpec",
    "Generated",
    "ImageError",
    "JobSpec",
    "Launcher",
    "NAMES",
    "Options",
    "PLACEHOLDER_PROGRAM",
    "PathArg",
    "REPO_DIR",
    "REPO_TEMPLATES",
    "RenderRequest",
    "SPEC_FILE",
    "Sizing",
    "apply_overrides",
    "build_request",
    "builtin_dir",
    "check_policy",
    "compare",
    "find_repo",
    "for_site",
    "generate",
    "get_launcher",
    "layout_from_pins",
    "load_spec",
    "load_spec_issues",
    "check_spec",
    "spec_issues",
    "parse_image",
    "plan_layout",
    "plan_request",
    "render_request",
    "render_text",
    "scaffold",
    "search_path",
    "segment_for",
    "site_column",
    "spec_from_text",
    "spell",
    "suggestion",
]


__getattr__ = face(__name__, _EXPORTS, globals())
