"""The one Jinja2 environment factory and `render(template, context, dirs)`. Strict undefined, sandboxed
when a template can come from a repo or a site; errors name the template file and line."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from ..errors import TemplateError
from .quote import arg_lines, comment, sbatch_quote, shpath, shquote, shruntime

BUILTIN = "built-in"


@dataclass(frozen=True)
class TemplateDir:
    """One directory of the template search path and where it comes from."""

    path: str
    label: str  # --templates | repo | site | built-in


def make_environment(dirs: Sequence[TemplateDir]) -> Any:
    """Strict: an undefined variable is an error, never an empty string in a job script.

    Sandboxed whenever a template can come from a repo or a site.
    """
    import jinja2

    if all(d.label == BUILTIN for d in dirs):
        env_class = jinja2.Environment
    else:
        from jinja2.sandbox import SandboxedEnvironment

        env_class = SandboxedEnvironment
    loader = jinja2.FileSystemLoader([d.path for d in dirs])
    env = env_class(
        loader=loader,
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,
        auto_reload=False,
        bytecode_cache=_bytecode_cache(env_class.__name__),
    )
    env.filters.update(
        shquote=shquote,
        shpath=shpath,
        shruntime=shruntime,
        sbatch_quote=sbatch_quote,
        comment=comment,
        arg_lines=arg_lines,
    )
    return env


def cache_dir(environ: Optional[Mapping[str, str]] = None) -> Optional[str]:
    """Where compiled templates are cached: $SLURMGPU_CACHE_DIR (empty: no cache), else
    $XDG_CACHE_HOME/slurmgpu or ~/.cache/slurmgpu. Jinja checks each template's source
    against the cached code, so an edited template is recompiled."""
    from ..cache import cache_dir as root

    return root(environ)


def _bytecode_cache(kind: str) -> Any:
    """A compiled-template cache (saves most of the template time on every later run), or None.

    One directory per environment class: the sandbox compiles the same source to different
    code (its calls go through `environment.call`), and Jinja's cache key is only the
    template's name and file, so a shared directory would hand one class the other's code.
    """
    d = cache_dir()
    if not d:
        return None
    # entries carry Jinja's and Python's bytecode magic; stale ones are redone
    d = os.path.join(d, "jinja", kind)
    try:
        os.makedirs(d, mode=0o700, exist_ok=True)
    except OSError:
        return None
    if not os.access(d, os.W_OK):
        return None
    from jinja2.bccache import FileSystemBytecodeCache

    return FileSystemBytecodeCache(d)


def template_names(dirs: Sequence[TemplateDir]) -> List[Tuple[str, TemplateDir, Tuple[TemplateDir, ...]]]:
    """Every template on the path: (name, where it resolves, the places it shadows)."""
    found: Dict[str, List[TemplateDir]] = {}
    for d in dirs:
        base = Path(d.path)
        for p in sorted(base.rglob("*.j2")):
            found.setdefault(p.relative_to(base).as_posix(), []).append(d)
    return [(n, where[0], tuple(where[1:])) for n, where in sorted(found.items())]


def locate(name: str, dirs: Sequence[TemplateDir]) -> Tuple[Path, TemplateDir]:
    for d in dirs:
        p = Path(d.path) / name
        if p.is_file():
            return p, d
    raise TemplateError(_not_found(name, dirs))


def _not_found(name: str, dirs: Sequence[TemplateDir]) -> str:
    looked = "\n".join("  %s (%s)" % (os.path.join(d.path, name), d.label) for d in dirs)
    return "template %r not found; looked in:\n%s" % (name, looked)


def render(template: str, context: Mapping[str, Any], dirs: Sequence[TemplateDir]) -> str:
    """Render `template` with `context`; errors name the template file and line."""
    import jinja2

    env = make_environment(dirs)
    try:
        return env.get_template(template).render(**context)
    except jinja2.TemplateNotFound as exc:
        name = exc.name if isinstance(exc.name, str) and exc.name else template  # not a jinja2.Undefined
        raise TemplateError(_not_found(name, dirs)) from None
    except jinja2.TemplateSyntaxError as exc:
        raise TemplateError(
            "%s:%s: template syntax error: %s" % (exc.filename or exc.name, exc.lineno, exc.message)
        ) from None
    except TemplateError as exc:
        raise TemplateError("%s: %s" % (_where(exc), exc)) from None
    except Exception as exc:  # undefined variables, sandbox refusals, template bugs
        if isinstance(
            exc,
            (
                jinja2.UndefinedError,
                jinja2.TemplateError,
                TypeError,
                ValueError,
                AttributeError,
                KeyError,
                IndexError,
                ZeroDivisionError,
            ),
        ):
            raise TemplateError("%s: %s: %s" % (_where(exc), type(exc).__name__, exc)) from None
        raise


def _where(exc: BaseException) -> str:
    """file:line of the innermost template frame in a traceback (Jinja rewrites them)."""
    import traceback

    for frame in reversed(traceback.extract_tb(exc.__traceback__)):
        if frame.filename.endswith(".j2"):
            return "%s:%s" % (frame.filename, frame.lineno)
    return "<template>"
