"""YAML that remembers where each value came from.

PyYAML silently keeps the last of two duplicate keys and forgets line numbers;
users of site configs and job specs need both, so mappings and lists are loaded
as `LocDict`/`LocList`, which carry the (file, line, column) of every entry.
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

from .errors import ConfigError, Issue

Loc = Tuple[str, int, int]


class LocDict(dict):
    """A dict whose entries know their source position (`locs[key]`)."""

    def __init__(self, *args: Any, **kw: Any):
        super().__init__(*args, **kw)
        self.locs: Dict[Any, Loc] = {}
        self.loc: Optional[Loc] = None


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
                    raise ConfigError([Issue(*self._loc(key_node), "", "a mapping key must be a plain value")])
                if id(key_node) not in explicit:
                    merged.add(key)
                elif key in merged:
                    merged.discard(key)
                elif key in data:
                    first = data.locs[key]
                    raise ConfigError([Issue(*self._loc(key_node), str(key),
                                             "duplicate key (first defined on line %d)" % first[1])])
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


def load_yaml_file(path: str) -> Any:
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except OSError as exc:
        raise ConfigError([Issue(path, None, None, "", "cannot read file: %s" % (exc.strerror or exc))]) from None
    except UnicodeDecodeError:
        raise ConfigError([Issue(path, None, None, "", "not a UTF-8 text file")]) from None
    return load_yaml(text, path)


def deep_merge(base: Any, override: Any) -> Any:
    """Merge `override` onto `base` (mappings recursively; anything else replaced).

    Positions follow the value that won, so errors point at the file that set it.
    """
    if isinstance(base, dict) and isinstance(override, dict):
        out = LocDict()
        out.loc = getattr(override, "loc", None) or getattr(base, "loc", None)
        for key, value in base.items():
            out[key] = value
            if key in getattr(base, "locs", {}):
                out.locs[key] = base.locs[key]
        for key, value in override.items():
            out[key] = deep_merge(out[key], value) if key in out else value
            if key in getattr(override, "locs", {}):
                out.locs[key] = override.locs[key]
        return out
    return override
