"""The user's job: spec -> sized layout -> render request -> script -> policy verdict -> submit."""

from __future__ import annotations

from ..render import PathArg
from .diff import Column, compare, render_text
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
    scaffold,
)
from .templates import REPO_TEMPLATES, builtin_dir, search_path

__all__ = [
    "render_request",
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
    "parse_image",
    "plan_layout",
    "plan_request",
    "render_text",
    "scaffold",
    "search_path",
    "segment_for",
    "spell",
    "suggestion",
]
