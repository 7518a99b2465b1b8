"""A small declarative checker for YAML mappings that reports every problem with its position.

Used by the site config, job spec and model loaders: each describes its fields
as `Field`s and gets back plain values or a list of `Issue`s, never a traceback.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple

from .errors import ConfigError, Issue

_TYPE_WORDS = {
    "str": "a string",
    "int": "an integer",
    "num": "a number",
    "bool": "true or false",
    "strlist": "a list of strings",
    "strmap": "a mapping of names to strings",
    "map": "a mapping",
    "list": "a list",
}


@dataclass(frozen=True)
class Field:
    """How one config key is checked: its kind, whether required, default and limits."""

    kind: str
    required: bool = False
    default: Any = None
    choices: Optional[Sequence[str]] = None
    minimum: Optional[float] = None
    positive: bool = False
    nullable: bool = True


class Checker:
    """Collects issues for one document; positions come from LocDict/LocList."""

    def __init__(self, filename: str):
        self.filename = filename
        self.issues: List[Issue] = []

    def where(self, container: Any, key: Any = None) -> Tuple[str, Optional[int], Optional[int]]:
        loc = None
        if key is not None:
            locs = getattr(container, "locs", None)
            if isinstance(locs, dict):
                loc = locs.get(key)
            elif isinstance(locs, list) and isinstance(key, int) and key < len(locs):
                loc = locs[key]
        if loc is None:
            loc = getattr(container, "loc", None)
        if loc is None:
            return (self.filename, None, None)
        return loc

    def error(self, container: Any, key: Any, path: str, message: str) -> None:
        self.issues.append(Issue(*self.where(container, key), path, message))

    def raise_if_any(self) -> None:
        if self.issues:
            raise ConfigError(sorted(self.issues, key=lambda i: (i.file, i.line or 0, i.col or 0)))

    # -- typed access -------------------------------------------------
    def mapping(self, value: Any, container: Any, key: Any, path: str) -> Optional[dict]:
        if value is None:
            return None
        if not isinstance(value, dict):
            self.error(container, key, path, "expected a mapping, got %s" % describe(value))
            return None
        return value

    def take(
        self, data: Any, fields: Dict[str, Field], path: str, container: Any = None, key: Any = None
    ) -> Dict[str, Any]:
        """Check `data` against `fields`; unknown keys get a did-you-mean."""
        out: Dict[str, Any] = {}
        # An empty entry (`name:` with nothing after it) has no position of its own, so
        # missing fields are reported where its key is; after a wrong type, only that error.
        anchor: Tuple[Any, Any] = (data, None)
        if data is None:
            anchor = (container, key) if container is not None else (None, None)
            data = {}
        elif not isinstance(data, dict):
            self.error(
                container if container is not None else data, key, path, "expected a mapping, got %s" % describe(data)
            )
            return {name: (f.default() if callable(f.default) else f.default) for name, f in fields.items()}
        for k in data:
            if k not in fields:
                import difflib  # only for a mistake: not loaded on every run

                hint = difflib.get_close_matches(str(k), list(fields), n=1)
                msg = "unknown key"
                if hint:
                    msg += " (did you mean '%s'?)" % hint[0]
                else:
                    msg += "; expected one of: %s" % ", ".join(sorted(fields))
                self.error(data, k, join(path, k), msg)
        for name, f in fields.items():
            p = join(path, name)
            if name not in data or (data[name] is None and f.nullable and not f.required):
                if f.required:
                    self.error(anchor[0], anchor[1], p, "missing required field (%s)" % _TYPE_WORDS.get(f.kind, f.kind))
                out[name] = f.default() if callable(f.default) else f.default
                continue
            out[name] = self.value(data[name], f, data, name, p)
        return out

    def value(self, v: Any, f: Field, container: Any, key: Any, path: str) -> Any:
        bad = None
        if f.kind == "str":
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                v = str(v)
            if not isinstance(v, str):
                bad = True
        elif f.kind == "int":
            if isinstance(v, bool) or not isinstance(v, int):
                bad = True
        elif f.kind == "num":
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                bad = True
        elif f.kind == "bool":
            if not isinstance(v, bool):
                bad = True
        elif f.kind in ("strlist", "strmap"):
            if not isinstance(v, list if f.kind == "strlist" else dict):
                bad = True
            else:
                return self._scalars(v, f, path)
        elif f.kind == "map":
            if not isinstance(v, dict):
                bad = True
        elif f.kind == "list":
            if not isinstance(v, list):
                bad = True
        if bad:
            self.error(container, key, path, "expected %s, got %s" % (_TYPE_WORDS.get(f.kind, f.kind), describe(v)))
            return f.default() if callable(f.default) else f.default
        if f.choices is not None and v not in f.choices:
            import difflib

            hint = difflib.get_close_matches(str(v), list(f.choices), n=1)
            msg = "must be one of %s, got %r" % (", ".join(f.choices), v)
            if hint:
                msg += " (did you mean '%s'?)" % hint[0]
            self.error(container, key, path, msg)
        if f.positive and isinstance(v, (int, float)) and v <= 0:
            self.error(
                container, key, path, "must be a positive %s, got %r" % ("integer" if f.kind == "int" else "number", v)
            )
        elif f.minimum is not None and isinstance(v, (int, float)) and v < f.minimum:
            self.error(container, key, path, "must be at least %s, got %r" % (f.minimum, v))
        return v

    def _scalars(self, v: Any, f: Field, path: str) -> Any:
        """Entries of a strlist/strmap must be plain scalars (numbers become strings); each bad one is named."""
        pairs = list(enumerate(v)) if isinstance(v, list) else list(v.items())
        ok = True
        for k, x in pairs:
            where = join(path, k if isinstance(v, list) else str(k))
            if isinstance(v, dict) and not isinstance(k, str):
                self.error(v, k, where, "names must be strings, got %s" % describe(k))
                ok = False
            elif isinstance(x, bool) or not isinstance(x, (str, int, float)):
                self.error(v, k, where, "expected a string, got %s" % describe(x))
                ok = False
        if not ok:
            return f.default() if callable(f.default) else f.default
        if isinstance(v, list):
            return tuple(str(x) for x in v)
        return {k: str(x) for k, x in v.items()}


def join(path: str, key: Any) -> str:
    if isinstance(key, int):
        return "%s[%d]" % (path, key)
    return "%s.%s" % (path, key) if path else str(key)


def describe(v: Any) -> str:
    if v is None:
        return "nothing (null)"
    if isinstance(v, bool):
        return "a boolean (%s)" % str(v).lower()
    if isinstance(v, int):
        return "an integer (%d)" % v
    if isinstance(v, float):
        return "a number (%g)" % v
    if isinstance(v, str):
        return "a string (%r)" % (v if len(v) < 40 else v[:37] + "...")
    if isinstance(v, dict):
        return "a mapping"
    if isinstance(v, list):
        return "a list"
    return type(v).__name__


def parse_size(text: Any) -> Optional[float]:
    """'13B' -> 13e9, '70m' -> 7e7, plain numbers pass through."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        return float(text)
    if not isinstance(text, str):
        return None
    t = text.strip().upper()
    mult = {"K": 1e3, "M": 1e6, "B": 1e9, "G": 1e9, "T": 1e12}
    try:
        if t and t[-1] in mult:
            return float(t[:-1]) * mult[t[-1]]
        return float(t)
    except ValueError:
        return None
