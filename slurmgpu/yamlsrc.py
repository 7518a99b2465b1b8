"""YAML that remembers where each value came from.

PyYAML silently keeps the last of two duplicate keys and forgets line numbers;
users of site configs and job specs need both, so mappings and lists are loaded
as `LocDict`/`LocList`, which carry the (file, line, column) of every entry.

A document that parsed cleanly is kept, positions and all, as JSON in the cache
(slurmgpu.cache: <cache>/yaml), keyed by its file name and checked against its whole
text and the PyYAML installed: `gen` for an unchanged site and spec never imports
PyYAML, which costs more than the rest of loading a site.
"""

from __future__ import annotations

import os
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from .errors import ConfigError, Issue

Loc = Tuple[str, int, int]
# A position given to a mapping built after parsing (a merged site block): the line may be unknown.
Pos = Tuple[str, Optional[int], Optional[int]]


class LocDict(dict):
    """A dict whose entries know their source position (`locs[key]`)."""

    def __init__(self, *args: Any, **kw: Any):
        super().__init__(*args, **kw)
        self.locs: Dict[Any, Pos] = {}
        self.loc: Optional[Pos] = None


class LocList(list):
    """A list whose items know their source position (`locs[index]`)."""

    def __init__(self, *args: Any):
        super().__init__(*args)
        self.locs: List[Loc] = []
        self.loc: Optional[Loc] = None


def _loader_class():
    import yaml

    # libyaml parses several times faster; the constructors below (ours) keep the positions.
    base = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

    class Loader(base):  # type: ignore[valid-type,misc]
        filename = "<string>"

        def _loc(self, node) -> Loc:
            return (self.filename, node.start_mark.line + 1, node.start_mark.column + 1)

        def construct_yaml_map(self, node):
            data = LocDict()
            data.loc = self._loc(node)
            yield data
            # Entries pulled in by a `<<: *anchor` merge may be overridden by the mapping's own
            # keys (and by later merges); only two explicit entries with one key are an error.
            explicit = {id(k) for k, _ in node.value if k.tag != "tag:yaml.org,2002:merge"}
            self.flatten_mapping(node)
            merged = set()
            for key_node, value_node in node.value:
                key = self.construct_object(key_node, deep=True)
                try:
                    hash(key)
                except TypeError:
                    msg = "a mapping key must be a plain value"
                    raise ConfigError([Issue(*self._loc(key_node), "", msg)]) from None
                if id(key_node) not in explicit:
                    merged.add(key)
                elif key in merged:
                    merged.discard(key)
                elif key in data:
                    first = data.locs[key]
                    raise ConfigError(
                        [Issue(*self._loc(key_node), str(key), "duplicate key (first defined on line %s)" % first[1])]
                    )
                data[key] = self.construct_object(value_node, deep=True)
                data.locs[key] = self._loc(key_node)

        def construct_yaml_seq(self, node):
            data = LocList()
            data.loc = self._loc(node)
            yield data
            for child in node.value:
                data.append(self.construct_object(child, deep=True))
                data.locs.append(self._loc(child))

    Loader.add_constructor("tag:yaml.org,2002:map", Loader.construct_yaml_map)
    Loader.add_constructor("tag:yaml.org,2002:seq", Loader.construct_yaml_seq)
    return Loader


def load_yaml(text: str, filename: str) -> Any:
    """Parse YAML text; syntax errors become a ConfigError with file:line:col."""
    entry = _cache_file(filename)
    if entry is not None:
        hit = _cache_get(entry, text, filename)
        if hit is not _MISS:
            return hit
    data = _parse(text, filename)
    if entry is not None:
        _cache_put(entry, text, filename, data)
    return data


def _parse(text: str, filename: str) -> Any:
    import yaml

    Loader = _loader_class()
    loader = Loader(text)
    loader.filename = filename
    try:
        return loader.get_single_data()
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark else None
        col = mark.column + 1 if mark else None
        msg = "invalid YAML: %s" % (exc.problem or exc.context or "syntax error")
        raise ConfigError([Issue(filename, line, col, "", msg)]) from None
    except yaml.YAMLError as exc:
        raise ConfigError([Issue(filename, None, None, "", "invalid YAML: %s" % exc)]) from None
    finally:
        loader.dispose()


# ---------------------------------------------------------------------------
# The parsed-YAML cache. JSON, never pickle: an entry holds only data. Entries are written
# for documents of plain scalars, mappings and lists (one with a timestamp or a set is
# parsed every time); mappings keep their key order and every position.

_CACHE_FORMAT = 1  # bump when the entries' shape or the loader's output changes
_MISS = object()


class _Uncacheable(Exception):
    pass


def _cache_file(filename: str) -> Optional[str]:
    from .cache import cache_subdir

    d = cache_subdir("yaml")
    if d is None:
        return None
    import zlib

    return os.path.join(d, "%08x.json" % zlib.crc32(filename.encode("utf-8", "surrogateescape")))


def _parser_id() -> Optional[str]:
    """Which PyYAML would parse (its file, size and mtime), without importing it."""
    import importlib.util

    try:
        spec = importlib.util.find_spec("yaml")
        origin = spec.origin if spec is not None else None
        st = os.stat(origin) if origin else None
    except (ImportError, ValueError, OSError):
        return None
    return None if st is None else "%s:%d:%d" % (origin, st.st_size, st.st_mtime_ns)


def _scalar(v: Any) -> Any:
    if v is None or type(v) in (str, int, float, bool):
        return v
    raise _Uncacheable


def _encode(v: Any, depth: int = 0) -> Any:
    if depth > 100:  # deeper than any config: parse it each time
        raise _Uncacheable
    if type(v) is LocDict:
        return {"m": [[_scalar(k), _encode(x, depth + 1), v.locs.get(k)] for k, x in v.items()], "at": v.loc}
    if type(v) is LocList:
        if len(v.locs) != len(v):
            raise _Uncacheable
        return {"s": [[_encode(x, depth + 1), loc] for x, loc in zip(v, v.locs)], "at": v.loc}
    return _scalar(v)


def _loc(raw: Any) -> Optional[Loc]:
    return _loc3(raw) if raw else None


def _loc3(raw: Sequence[Any]) -> Loc:
    """A cached position; a missing one raises, and the damaged entry is parsed again."""
    return (raw[0], raw[1], raw[2])


def _decode(v: Any) -> Any:
    if type(v) is not dict:
        return v
    if "m" in v:
        d = LocDict()
        d.loc = _loc(v["at"])
        for k, x, loc in v["m"]:
            d[k] = _decode(x)
            if loc:
                d.locs[k] = _loc3(loc)
        return d
    seq = LocList()
    seq.loc = _loc(v["at"])
    for x, loc in v["s"]:
        seq.append(_decode(x))
        seq.locs.append(_loc3(loc))
    return seq


def _cache_get(entry: str, text: str, filename: str) -> Any:
    """The cached document for exactly this text and file name, else _MISS."""
    import json

    try:
        with open(entry, encoding="utf-8") as fh:
            raw = json.load(fh)
        if (
            raw.get("format") != _CACHE_FORMAT
            or raw.get("filename") != filename
            or raw.get("text") != text
            or raw.get("parser") != _parser_id()
            or raw["parser"] is None
        ):
            return _MISS
        return _decode(raw["data"])
    except Exception:  # absent, unreadable, damaged or another format: parse the file again
        return _MISS


def _cache_put(entry: str, text: str, filename: str, data: Any) -> None:
    import json

    parser = _parser_id()
    if parser is None:
        return
    try:
        blob = json.dumps(
            {"format": _CACHE_FORMAT, "filename": filename, "text": text, "parser": parser, "data": _encode(data)}
        )
    except (_Uncacheable, ValueError, TypeError):
        return
    tmp = "%s.%d.tmp" % (entry, os.getpid())
    try:
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(blob)
        os.replace(tmp, entry)
    except OSError:
        try:
            os.unlink(tmp)
        except OSError:
            pass


def load_yaml_file(path: str) -> Any:
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except OSError as exc:
        raise ConfigError([Issue(path, None, None, "", "cannot read file: %s" % (exc.strerror or exc))]) from None
    except UnicodeDecodeError:
        raise ConfigError([Issue(path, None, None, "", "not a UTF-8 text file")]) from None
    return load_yaml(text, path)


def deep_merge(base: Any, override: Any, whole: Optional[Callable[[str, Any, Any], bool]] = None) -> Any:
    """Merge `override` onto `base` (mappings recursively; anything else replaced).

    Positions follow the value that won, so errors point at the file that set it. `whole(key, base,
    override)` names mappings whose fields are alternatives rather than additions: there the
    override replaces the base value entirely instead of being merged into it.
    """
    if isinstance(base, dict) and isinstance(override, dict):
        out = LocDict()
        out.loc = getattr(override, "loc", None) or getattr(base, "loc", None)
        base_locs = getattr(base, "locs", {})
        for key, value in base.items():
            out[key] = value
            if key in base_locs:
                out.locs[key] = base_locs[key]
        override_locs = getattr(override, "locs", {})
        for key, value in override.items():
            if key in out and not (whole and whole(key, out[key], value)):
                out[key] = deep_merge(out[key], value, whole)
            else:
                out[key] = value
            if key in override_locs:
                out.locs[key] = override_locs[key]
        return out
    return override
