"""Helpers the explain-view tests share: running the CLI, a strict HTML check, a PNG decoder."""

from __future__ import annotations

import os
import struct
import subprocess
import sys
import zlib
from html.parser import HTMLParser
from pathlib import Path
from typing import List, Sequence, Tuple

ROOT = Path(__file__).resolve().parents[1]
VOID = {"meta", "input", "br", "img", "hr", "link", "area", "base", "col", "embed", "source", "track", "wbr"}
# SVG elements written self-closed (<rect .../>): the HTML parser reports them as startend
SVG_EMPTY = {"rect", "line", "circle", "path", "polyline", "polygon", "use", "stop"}


def run_cli(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    for k in ("SLURMGPU_SITE",):
        env.pop(k, None)
    return subprocess.run(
        [sys.executable, "-m", "slurmgpu.cli"] + list(args), capture_output=True, text=True, cwd=str(cwd), env=env
    )


class _Strict(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: List[Tuple[str, int]] = []
        self.errors: List[str] = []
        self.ids: List[str] = []

    def _attrs(self, attrs: Sequence[Tuple[str, object]]) -> None:
        for k, v in attrs:
            if k == "id":
                self.ids.append(str(v))

    def handle_starttag(self, tag: str, attrs) -> None:  # type: ignore[no-untyped-def]
        self._attrs(attrs)
        if tag not in VOID:
            self.stack.append((tag, self.getpos()[0]))

    def handle_startendtag(self, tag: str, attrs) -> None:  # type: ignore[no-untyped-def]
        self._attrs(attrs)
        if tag not in VOID and tag not in SVG_EMPTY:
            self.errors.append("line %d: <%s/> self-closed" % (self.getpos()[0], tag))

    def handle_endtag(self, tag: str) -> None:
        if tag in VOID:
            self.errors.append("line %d: </%s> for a void element" % (self.getpos()[0], tag))
            return
        if not self.stack or self.stack[-1][0] != tag:
            self.errors.append(
                "line %d: </%s> closes %s" % (self.getpos()[0], tag, self.stack[-1] if self.stack else "nothing")
            )
            return
        self.stack.pop()


def html_problems(text: str) -> List[str]:
    """Every tag closed in order, ids unique, no URL, plus html5lib's strict parse."""
    import html5lib

    p = _Strict()
    p.feed(text)
    p.close()
    errs = list(p.errors)
    errs += ["unclosed <%s> from line %d" % t for t in p.stack]
    dup = sorted({i for i in p.ids if p.ids.count(i) > 1})
    if dup:
        errs.append("duplicate ids: %s" % dup)
    for scheme in ("http://", "https://", "//cdn", "url("):
        if scheme in text:
            errs.append("external reference %r in the file" % scheme)
    if not text.startswith("<!DOCTYPE html>"):
        errs.append("no <!DOCTYPE html>")
    try:
        html5lib.HTMLParser(strict=True, namespaceHTMLElements=False).parse(text)
    except Exception as exc:  # html5lib.html5parser.ParseError
        errs.append("html5lib: %s" % exc)
    return errs


def png_pixels(data: bytes) -> Tuple[int, int, int, List[bytes]]:
    """(width, height, bytes per pixel, unfiltered rows) of an 8-bit RGB/RGBA/grey PNG."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat = 8, b""
    width = height = bpp = 0
    while pos < len(data):
        (n,) = struct.unpack(">I", data[pos : pos + 4])
        kind = data[pos + 4 : pos + 8]
        body = data[pos + 8 : pos + 8 + n]
        if kind == b"IHDR":
            width, height, depth, ctype = struct.unpack(">IIBB", body[:10])
            assert depth == 8 and ctype in (0, 2, 4, 6), "unsupported PNG %d/%d" % (depth, ctype)
            bpp = {0: 1, 2: 3, 4: 2, 6: 4}[ctype]
        elif kind == b"IDAT":
            idat += body
        pos += n + 12
    raw = zlib.decompress(idat)
    stride = width * bpp
    rows: List[bytes] = []
    prev = bytearray(stride)
    for y in range(height):
        f = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1 : (y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b = prev[i]
            c = prev[i - bpp] if i >= bpp else 0
            if f == 1:
                line[i] = (line[i] + a) & 255
            elif f == 2:
                line[i] = (line[i] + b) & 255
            elif f == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif f == 4:
                pa, pb, pc = abs(b - c), abs(a - c), abs(a + b - 2 * c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(bytes(line))
        prev = line
    return width, height, bpp, rows


def png_stats(data: bytes) -> Tuple[int, float]:
    """(distinct colours, variance of the grey level) over a sample of the image's pixels."""
    w, h, bpp, rows = png_pixels(data)
    colours = set()
    greys: List[float] = []
    for y in range(0, h, 4):
        row = rows[y]
        for x in range(0, w, 4):
            px = row[x * bpp : x * bpp + min(bpp, 3)]
            colours.add(px)
            greys.append(sum(px) / len(px))
    mean = sum(greys) / len(greys)
    return len(colours), sum((g - mean) ** 2 for g in greys) / len(greys)
