"""The stamp line: `# slurmgpu: site=NAME tp=8 pp=2 dp=4 cp=1 ep=1 nodes=8 gpus_per_node=8`.

Every generated script carries it (and echoes it into the job log); the submit filter reads
the layout from it first, `slurmgpu doctor` reads it back from a log or a script. One grammar,
the one contrib/lua/policy/stamp.lua (`find_stamp`) applies in slurmctld, and tests/test_stamp.py
runs that Lua over a list of lines to keep the two equal:

- the marker `# slurmgpu:` (one blank after '#'), with only blanks or tabs (at most 64
  characters) before it on its line;
- then `key=value` words, each after blanks or tabs: a key of ASCII letters, digits and '_',
  a value of anything but blanks, tabs, CR or LF; the words end at the first thing that is not
  such a word, after 16 words, or 590 characters after the marker; a later word wins;
- the line is a stamp only if `tp` is 1 to 7 decimal digits; the first such line of the
  first 64 markers counts.

Imports nothing of slurmgpu.
"""

from __future__ import annotations

import re
from typing import Dict, Optional

MARKER = "# slurmgpu:"
KEYS = ("tp", "pp", "dp", "cp", "ep", "nodes", "gpus_per_node")  # the numbers the filter reads
MAX_MARKERS = 64  # markers looked at in one text
MAX_INDENT = 64  # blanks allowed before the marker
MAX_WORDS = 16
WINDOW = 590  # characters after the marker that are read
_WORD = re.compile(r"[ \t]+([A-Za-z0-9_]+)=([^ \t\r\n]*)")


def format_stamp(site: str, tp: int, pp: int, dp: int, cp: int, ep: int, nodes: int, gpus_per_node: int) -> str:
    """The stamp line for a layout on a site (no newline)."""
    return "%s site=%s tp=%d pp=%d dp=%d cp=%d ep=%d nodes=%d gpus_per_node=%d" % (
        MARKER,
        site,
        tp,
        pp,
        dp,
        cp,
        ep,
        nodes,
        gpus_per_node,
    )


def stamp_int(value: Optional[str]) -> Optional[int]:
    """A stamp number as the filter reads it: 1 to 7 decimal digits, else None."""
    if value is None or not 0 < len(value) <= 7 or not value.isascii() or not value.isdigit():
        return None
    return int(value)


def parse_stamp(text: str) -> Optional[Dict[str, str]]:
    """The words of the first stamp line in `text` (a line, a script or a log), or None."""
    p = 0
    for _ in range(MAX_MARKERS):
        h = text.find(MARKER, p)
        if h < 0:
            return None
        p = h + len(MARKER)
        ls = text.rfind("\n", 0, h) + 1
        if h - ls > MAX_INDENT or text[ls:h].strip(" \t"):
            continue
        nl = text.find("\n", h)
        window = text[p : min(len(text) if nl < 0 else nl, p + WINDOW)]
        words: Dict[str, str] = {}
        pos = 0
        for _ in range(MAX_WORDS):
            m = _WORD.match(window, pos)
            if m is None:
                break
            pos = m.end()
            words.pop(m.group(1), None)  # a later word wins, and keeps the order it came in
            words[m.group(1)] = m.group(2)
        if stamp_int(words.get("tp")) is not None:
            return words
    return None
