"""Where built-in data lives (the wheel's _data or the source tree) and how a site name or path is
found. Paths only: loading is `site.load`'s job, so the two do not import each other."""

from __future__ import annotations

import os
from pathlib import Path
from typing import List, Mapping, Optional, Tuple

from ..errors import ConfigError, Issue
from .model import DEFAULT_SITE


def data_dir(name: str) -> Path:
    """Built-in data shipped in the wheel (slurmgpu/_data/...) or the source tree."""
    pkg = Path(__file__).resolve().parent.parent
    installed = pkg / "_data" / name.replace("-", "_")
    if installed.is_dir():
        return installed
    return pkg.parent / name


def preset_dir() -> Path:
    return data_dir("site-configs")


def preset_names() -> List[str]:
    return sorted(p.stem for p in preset_dir().glob("*.yaml"))


def site_search(explicit: Optional[str], environ: Mapping[str, str]) -> Tuple[str, str]:
    """Return (path, how-it-was-chosen) following --site > $SLURMGPU_SITE > /etc > ~/.config > default."""
    home = environ.get("HOME") or os.path.expanduser("~")
    candidates = []
    if explicit:
        candidates.append((explicit, "--site"))
    elif environ.get("SLURMGPU_SITE"):
        candidates.append((environ["SLURMGPU_SITE"], "$SLURMGPU_SITE"))
    else:
        etc = environ.get("SLURMGPU_SYSTEM_SITE", "/etc/slurmgpu/site.yaml")
        user = os.path.join(environ.get("XDG_CONFIG_HOME") or os.path.join(home, ".config"), "slurmgpu", "site.yaml")
        for path, why in ((etc, "admin config"), (user, "user config")):
            if os.path.exists(path):
                return path, why
        return str(preset_dir() / (DEFAULT_SITE + ".yaml")), "built-in default"
    ref, why = candidates[0]
    return resolve_site_ref(ref, "SLURMGPU_SITE" if why == "$SLURMGPU_SITE" else None), why


def resolve_site_ref(ref: str, variable: Optional[str] = None) -> str:
    """A preset name or a path -> a path (a clear error if it is neither). `variable`: the
    environment variable it came from, which the error names (a value set long ago and forgotten)."""
    if variable:
        try:
            return resolve_site_ref(ref)
        except ConfigError as exc:
            raise ConfigError(
                [
                    Issue(
                        "$%s=%s" % (variable, ref),
                        None,
                        None,
                        "",
                        "%s (the site comes from this environment variable: fix it, unset it, or give --site)"
                        % i.message,
                    )
                    for i in exc.issues
                ]
            ) from None
    if os.path.exists(ref):
        return ref
    if "/" not in ref and not ref.endswith((".yaml", ".yml")):
        p = preset_dir() / (ref + ".yaml")
        if p.exists():
            return str(p)
        import difflib

        hint = difflib.get_close_matches(ref, preset_names(), n=1)
        raise ConfigError(
            [
                Issue(
                    ref,
                    None,
                    None,
                    "",
                    "no such site preset%s; presets: %s"
                    % (" (did you mean '%s'?)" % hint[0] if hint else "", ", ".join(preset_names())),
                )
            ]
        )
    raise ConfigError([Issue(ref, None, None, "", "site config file not found")])
