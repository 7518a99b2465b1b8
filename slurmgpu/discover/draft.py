"""Write a site config draft as YAML text, with a comment on every guess.

`yaml.dump` cannot write comments, and a draft is only useful if the admin can
see which values were read from Slurm, which came from the GPU table and which
are guesses (``# TODO: ... (find it with: <command>)``).  So the text is built
here, in a fixed key order, and checked by loading it back with the real
site loader before anyone sees it.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, List, Mapping, Tuple

from ..errors import ConfigError, SlurmgpuError


@dataclass(frozen=True)
class Value:
    value: Any
    comment: str = ""
    todo: bool = False  # a guess the admin must check


@dataclass(frozen=True)
class SiteDraft:
    header: Tuple[str, ...]  # comment lines at the top
    top: Mapping[str, Value]  # name, description, slurm_version, ...
    partitions: Mapping[str, Mapping[str, Value]]
    node_types: Mapping[str, Mapping[str, Value]]
    footer: Tuple[str, ...] = ()
    notes: Tuple[str, ...] = ()  # said on stderr too

    def todos(self) -> List[str]:
        """'node_types.h100x8.fabric: <comment>' for every TODO value."""
        out = []
        for k, v in self.top.items():
            if v.todo:
                out.append("%s: %s" % (k, v.comment))
        for group, items in (("partitions", self.partitions), ("node_types", self.node_types)):
            for name, fields in items.items():
                for k, v in fields.items():
                    if v.todo:
                        out.append("%s.%s.%s: %s" % (group, name, k, v.comment))
        return out


_PLAIN = re.compile(r"[A-Za-z_][A-Za-z0-9_./+-]*")  # used with fullmatch: `$` would let a final newline through
_RESERVED = {"true", "false", "yes", "no", "on", "off", "null", "y", "n", "~"}


def scalar(v: Any) -> str:
    """A YAML scalar that reads back as exactly `v` (JSON strings are valid YAML)."""
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return str(int(v)) if v.is_integer() else repr(v)
    s = str(v)
    if _PLAIN.fullmatch(s) and s.lower() not in _RESERVED and not re.match(r"^[-+.\d]", s):
        return s
    # JSON's double-quoted string is YAML's too, but YAML reads "\ud800\udc00" as two
    # characters: keep non-ASCII as is and escape only what YAML cannot carry raw.
    return _UNSAFE.sub(lambda m: "\\u%04x" % ord(m.group()), json.dumps(s, ensure_ascii=False))


_UNSAFE = re.compile("[\x7f-\x9f\u2028\u2029\ufeff\ufffe\uffff\ud800-\udfff]")


def _flow(v: Any) -> str:
    if isinstance(v, Mapping):
        return "{" + ", ".join("%s: %s" % (scalar(k), _flow(x)) for k, x in v.items()) + "}"
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_flow(x) for x in v) + "]"
    return scalar(v)


def _comment(text: str) -> str:
    return "  # " + " ".join(text.split()) if text else ""


def _field(key: str, val: Value, indent: str) -> List[str]:
    c = _comment(("TODO: " if val.todo else "") + val.comment)
    v = val.value
    if isinstance(v, (list, tuple)) and v and isinstance(v[0], Mapping):
        lines = ["%s%s:%s" % (indent, key, c)]
        lines.extend("%s  - %s" % (indent, _flow(item)) for item in v)
        return lines
    if isinstance(v, Mapping) and v and any(isinstance(x, (Mapping, list, tuple)) for x in v.values()):
        return ["%s%s: %s%s" % (indent, key, _flow(v), c)]  # nested (the affinity map): one flow mapping
    if isinstance(v, Mapping) and v:
        lines = ["%s%s:%s" % (indent, key, c)]
        lines.extend("%s  %s: %s" % (indent, scalar(k), scalar(x)) for k, x in v.items())
        return lines
    return ["%s%s: %s%s" % (indent, key, _flow(v), c)]


def render(d: SiteDraft) -> str:
    lines = ["# " + h if h else "#" for h in d.header]
    for k, v in d.top.items():
        lines.extend(_field(k, v, ""))
    for group, items in (("partitions", d.partitions), ("node_types", d.node_types)):
        lines.append("%s:" % group)
        for name, fields in items.items():
            lines.append("  %s:" % scalar(name))
            for k, v in fields.items():
                lines.extend(_field(k, v, "    "))
    lines.extend("# " + f if f else "#" for f in d.footer)
    return "\n".join(lines) + "\n"


def check(text: str, filename: str = "<draft>"):
    """Load the draft with the real site loader; a failure is a bug in discover."""
    from ..site import site_from_data
    from ..yamlsrc import load_yaml

    try:
        return site_from_data(load_yaml(text, filename), filename)
    except ConfigError as exc:
        raise SlurmgpuError(
            "internal error: the site draft does not validate (please report this):\n%s\n--- draft ---\n%s"
            % ("\n".join(str(i) for i in exc.issues), text)
        ) from None


__all__ = ["Value", "SiteDraft", "render", "check", "scalar"]
