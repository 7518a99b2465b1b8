"""The explain view as one self-contained HTML file: inline SVG and CSS, no script, no URL.

The colourings are plain radio inputs; CSS `:checked ~` rules recolour the GPU cells by their
classes, so the page works from a shared filesystem in any browser and by keyboard alone.
`plan`, `gen`, `check` and `doctor` build the same page from their own data.
"""

from __future__ import annotations

from html import escape
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from ..plan.layout import GROUP_KINDS, Layout
from ..plan.memory import MemoryBreakdown, usable_gb
from ..plan.types import Plan
from .figure import KIND_LETTER, PALETTE, RED, Marks, Topology, crossings, group_counts, membership, svg

KIND_WORDS = {
    "tp": "TP group",
    "pp": "PP stage",
    "dp": "DP replica",
    "cp": "CP rank",
    "ep": "EP group",
}
KIND_HELP = {
    "tp": "ranks that all-reduce every layer (keep inside one NVLink domain)",
    "pp": "pipeline stage: which layers a GPU holds",
    "dp": "data-parallel replica: a full copy of the model",
    "cp": "context-parallel rank: which slice of the sequence",
    "ep": "ranks that exchange tokens between experts (all-to-all)",
}
MEMORY_COLOURS = {
    "weights": "#4e79a7",
    "gradients": "#f28e2b",
    "optimizer": "#59a14f",
    "activations": "#b07aa1",
    "kv cache": "#76b7b2",
    "overhead": "#bab0ac",
}
TIME_COLOURS = ("#4e79a7", "#f28e2b", "#59a14f", "#b07aa1", "#76b7b2", "#edc948", "#9c755f", "#bab0ac")

CSS_BASE = """
body{font-family:sans-serif;margin:1.5em;color:#222;max-width:1300px}
h1{font-size:1.4em}h2{font-size:1.15em;margin-top:1.4em}
.colourings{margin:.6em 0}
.colourings label{margin-right:1.2em;cursor:pointer}
input[type=radio]:focus-visible+label{outline:2px solid #2a6f97;outline-offset:2px}
.legend{display:none;margin:.4em 0 .8em}
.legend span.sw{display:inline-block;width:1em;height:1em;vertical-align:middle;
margin:0 .3em 0 .8em;border:1px solid #333}
.figs{display:flex;flex-wrap:wrap;gap:1.5em;align-items:flex-start}
figure{margin:0}
figcaption{font-weight:bold;margin-bottom:.3em}
.bad{color:#d62728}
table{border-collapse:collapse;font-size:.9em}
td,th{border:1px solid #ccc;padding:.2em .5em;text-align:right}
td.l,th.l{text-align:left}
"""


def _css() -> str:
    rules = [CSS_BASE.strip()]
    for k in GROUP_KINDS:
        rules.append("#c-%s:checked ~ .legends .lg-%s{display:block}" % (k, k))
    for k in GROUP_KINDS:
        if k == "tp":
            continue  # the cells' own fill is the TP colouring
        for i, c in enumerate(PALETTE):
            rules.append("#c-%s:checked ~ .figs .%s%d{fill:%s}" % (k, KIND_LETTER[k], i, c))
        rules.append("#c-%s:checked ~ .figs .%snone{fill:#fff}" % (k, KIND_LETTER[k]))  # no such groups
    return "\n".join(rules)


def _legend(lays: Sequence[Layout]) -> str:
    each = [group_counts(lay) for lay in lays]
    counts = {k: max(c[k] for c in each) for k in GROUP_KINDS}
    out = ['<div class="legends">']
    for k in GROUP_KINDS:
        n = counts[k]
        why = [membership(lay).missing[k] for lay in lays if k in membership(lay).missing]
        if why:
            out.append(
                '<div class="legend lg-%s"><strong class="bad">No %ss drawn</strong> (white): %s</div>'
                % (k, KIND_WORDS[k], escape("; ".join(why)))
            )
            continue
        shown = min(n, len(PALETTE))
        items = "".join(
            '<span class="sw" style="background:%s"></span>%s %d%s'
            % (PALETTE[i], KIND_WORDS[k], i, " (+ every %dth)" % len(PALETTE) if n > len(PALETTE) else "")
            for i in range(shown)
        )
        extra = ""
        if k == "tp":
            extra = '<span class="sw" style="background:%s"></span>crosses an NVLink domain boundary' % RED
        out.append(
            '<div class="legend lg-%s"><strong>%s</strong> (%d; %s): %s%s</div>'
            % (k, KIND_WORDS[k], n, escape(KIND_HELP[k]), items, extra)
        )
    out.append("</div>")
    return "\n".join(out)


def _radios() -> str:
    out = []
    for k in GROUP_KINDS:
        out.append(
            '<input type="radio" name="colouring" id="c-%s" value="%s"%s><label for="c-%s">%s</label>'
            % (k, k, " checked" if k == "tp" else "", k, KIND_WORDS[k])
        )
    return "\n".join(out)


def _doc(title: str, body: Sequence[str]) -> str:
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        "<title>%s</title>\n<style>\n%s\n</style>\n</head>\n<body>\n<main>\n%s\n</main>\n</body>\n</html>\n"
        % (escape(title), _css(), "\n".join(body))
    )


def _view(
    heading: str,
    intro: Sequence[str],
    figures: Sequence[Tuple[str, str]],
    lays: Sequence[Layout],
    after: Sequence[str],
) -> str:
    """Heading, intro paragraphs, the colouring radios and legends, the figures, then sections."""
    body = ["<h1>%s</h1>" % escape(heading)]
    body.extend("<p>%s</p>" % p for p in intro)
    body.append('<p class="colourings" id="colourings-help">Colour the GPUs by:</p>')
    body.append(_radios())
    body.append(_legend(lays))
    body.append('<div class="figs">')
    for caption, pic in figures:
        body.append("<figure><figcaption>%s</figcaption>\n%s</figure>" % (escape(caption), pic))
    body.append("</div>")
    body.extend(after)
    return _doc(heading, body)


def _bar(parts: Sequence[Tuple[str, float, str]], total: float, unit: str, marks: Sequence[Tuple[float, str]]) -> str:
    """A horizontal stacked bar scaled to `total`, with labelled vertical marks."""
    width, x = 640.0, 0.0
    scale = width / total if total > 0 else 0.0
    out = ['<svg class="bar" width="700" height="74" viewBox="0 0 700 74" font-family="sans-serif">']
    out.append('<rect x="0" y="8" width="%d" height="26" fill="#eee" stroke="#999"/>' % width)
    for name, value, col in parts:
        w = value * scale
        out.append(
            '<rect class="part" data-part="%s" x="%.1f" y="8" width="%.1f" height="26" fill="%s">'
            "<title>%s: %.3g %s</title></rect>" % (escape(name), x, w, col, escape(name), value, unit)
        )
        x += w
    for n, (value, label) in enumerate(marks):
        mx = min(value * scale, width)
        out.append('<line x1="%.1f" y1="2" x2="%.1f" y2="40" stroke="#000" stroke-width="1.5"/>' % (mx, mx))
        out.append(
            '<text x="%.1f" y="%d" font-size="10" text-anchor="middle">%s</text>'
            % (min(max(mx, 40), width - 20), 52 + 14 * (n % 2), escape(label))
        )
    out.append("</svg>")
    key = " ".join(
        '<span class="sw" style="display:inline-block;width:.9em;height:.9em;background:%s"></span> %s %.3g %s'
        % (col, escape(name), value, unit)
        for name, value, col in parts
    )
    return "\n".join(out) + "\n<p>%s</p>" % key


MAX_STAGE_BARS = 16  # above this many stages, draw the first, the last, the most loaded and the
# planner's own and summarise the rest (range of totals), so PP=64 stays a readable page


def _stage_rows(plan: Plan) -> List[Tuple[str, MemoryBreakdown]]:
    """(label, breakdown) per drawn bar; a label names the stages a bar stands for."""
    stages = list(plan.stage_memory) or [plan.memory]
    counts = list(plan.stage_layers)

    def label(m: MemoryBreakdown) -> str:
        layers = " (%d layers)" % counts[m.stage] if m.stage < len(counts) else ""
        return "stage %d%s" % (m.stage, layers)

    if len(stages) <= MAX_STAGE_BARS:
        return [(label(m), m) for m in stages]
    worst = max(stages, key=lambda m: m.total)
    keep = sorted({0, len(stages) - 1, worst.stage, plan.memory.stage})
    rows: List[Tuple[str, MemoryBreakdown]] = []
    prev = -1
    for i in keep:
        gap = stages[prev + 1 : i]
        if gap:
            heaviest = max(gap, key=lambda m: m.total)  # stands for the run, so no row understates it
            rows.append(("stages %d-%d (not drawn)" % (gap[0].stage, gap[-1].stage), heaviest))
        rows.append((label(stages[i]), stages[i]))
        prev = i
    return rows


def _stage_bars(rows: Sequence[Tuple[str, MemoryBreakdown]], capacity: float, usable: float) -> str:
    """One stacked bar per pipeline stage on a common GB scale, with the usable and capacity lines."""
    label_w, width, row_h, gap, top = 190.0, 600.0, 22, 6, 6
    total = max([capacity] + [m.total for _, m in rows])
    scale = width / total if total > 0 else 0.0
    height = top + len(rows) * (row_h + gap) + 36
    out = [
        '<svg class="bar stages" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif">'
        % (label_w + width + 50, height, label_w + width + 50, height)
    ]
    for n, (name, m) in enumerate(rows):
        y = top + n * (row_h + gap)
        drawn = not name.endswith("(not drawn)")
        out.append(
            '<g class="stage" data-stage="%d" data-label="%s" data-total-gb="%.6f"%s>'
            % (m.stage, escape(name), m.total, "" if drawn else ' data-summary="1"')
        )
        out.append(
            '<text x="0" y="%d" font-size="11">%s</text>'
            % (y + 15, escape(name if drawn else "%s: up to %.1f GB" % (name, m.total)))
        )
        out.append(
            '<rect x="%d" y="%d" width="%d" height="%d" fill="#eee" stroke="#999"/>' % (label_w, y, width, row_h)
        )
        x = label_w
        for part, value in m.parts() if drawn else []:
            w = value * scale
            out.append(
                '<rect class="part" data-part="%s" data-gb="%.6f" x="%.1f" y="%d" width="%.2f" height="%d" '
                'fill="%s"><title>stage %d %s: %.3g GB</title></rect>'
                % (escape(part), value, x, y, w, row_h, MEMORY_COLOURS.get(part, "#999"), m.stage, escape(part), value)
            )
            x += w
        if drawn:
            out.append(
                '<text x="%.1f" y="%d" font-size="10">%.1f GB</text>'
                % (min(x + 4, label_w + width - 40), y + 15, m.total)
            )
        out.append("</g>")
    bottom = top + len(rows) * (row_h + gap)
    for n, (value, text) in enumerate(((usable, "usable %.0f GB" % usable), (capacity, "capacity %.0f GB" % capacity))):
        mx = label_w + min(value * scale, width)
        out.append('<line x1="%.1f" y1="2" x2="%.1f" y2="%d" stroke="#000" stroke-width="1.5"/>' % (mx, mx, bottom))
        out.append(
            '<text x="%.1f" y="%d" font-size="10" text-anchor="middle">%s</text>'
            % (min(mx, label_w + width - 20), bottom + 12 + 14 * n, escape(text))
        )
    out.append("</svg>")
    names = [p for p in MEMORY_COLOURS if any(p == q for _, m in rows for q, _v in m.parts())]
    key = " ".join(
        '<span class="sw" style="display:inline-block;width:.9em;height:.9em;background:%s"></span> %s'
        % (MEMORY_COLOURS[p], escape(p))
        for p in names
    )
    return "\n".join(out) + "\n<p>%s</p>" % key


def _memory_section(plan: Plan) -> str:
    mem = plan.memory
    usable = usable_gb(plan.capacity_gb)
    rows = _stage_rows(plan)
    pp = plan.layout.pp
    stages = list(plan.stage_memory) or [mem]
    head = (
        "<h2>Memory per GPU</h2><p>One bar per pipeline stage (%d stage%s). The planner ranks layouts by "
        "stage %d: %.1f GB of %.0f GB (usable %.1f GB, headroom %.1f GB).%s</p>"
        % (
            pp,
            "s" if pp != 1 else "",
            mem.stage,
            mem.total,
            plan.capacity_gb,
            usable,
            usable - mem.total,
            " Stages not drawn are summarised by their heaviest stage." if len(rows) < len(stages) else "",
        )
    )
    worst = max(stages, key=lambda m: m.total)
    if worst.total > mem.total + 0.0005:
        head += (
            '<p class="bad">Stage %d holds %.1f GB, more than the %.1f GB of stage %d the planner checked '
            "against the usable %.1f GB (the search evaluates only the first, the first full and the "
            "last stage).</p>" % (worst.stage, worst.total, mem.total, mem.stage, usable)
        )
    if not plan.stage_memory:
        head += "<p>Only the most loaded stage's breakdown is known for this plan.</p>"
    return head + _stage_bars(rows, plan.capacity_gb, usable)


def _time_section(plan: Plan) -> str:
    items = [(k, v) for k, v in plan.time_breakdown.items() if v > 0]
    if not items:
        return ""
    total = sum(v for _, v in items)
    parts = [(k, v, TIME_COLOURS[i % len(TIME_COLOURS)]) for i, (k, v) in enumerate(items)]
    return "<h2>Step time</h2><p>%.3g s per step, %.0f tokens/s, MFU %.0f%%.</p>" % (
        plan.step_time_s,
        plan.tokens_per_s,
        plan.mfu * 100,
    ) + _bar(parts, total, "s", [])


def _traffic_section(plan: Plan) -> str:
    if not plan.traffic:
        return ""
    rows = "".join(
        '<tr><td class="l">%s</td><td>%.3g</td></tr>' % (escape(k), v) for k, v in sorted(plan.traffic.items())
    )
    return (
        '<h2>Traffic per link type</h2><table><thead><tr><th class="l">link</th><th>GB per GPU per step</th>'
        "</tr></thead><tbody>%s</tbody></table>" % rows
    )


def _alternatives_section(plan: Plan) -> str:
    if not plan.alternatives:
        return ""
    rows = []
    for a in plan.alternatives:
        lay = a.layout
        rows.append(
            "<tr><td>%d</td><td>%d</td><td>%d</td><td>%d</td><td>%d</td><td>%d</td><td>%.1f</td><td>%.3g</td>"
            '<td>%.0f</td><td>%.0f%%</td><td class="l">%s</td></tr>'
            % (
                lay.tp,
                lay.pp,
                lay.dp,
                lay.cp,
                lay.ep,
                lay.nodes,
                a.memory_per_gpu_gb,
                a.step_time_s,
                a.tokens_per_s,
                a.mfu * 100,
                escape(a.why),
            )
        )
    return (
        "<h2>Alternatives</h2><table><thead><tr><th>TP</th><th>PP</th><th>DP</th><th>CP</th><th>EP</th>"
        '<th>nodes</th><th>GB/GPU</th><th>step s</th><th>tokens/s</th><th>MFU</th><th class="l">why not</th>'
        "</tr></thead><tbody>%s</tbody></table>" % "".join(rows)
    )


def _list(title: str, lines: Sequence[str], cls: str = "") -> str:
    if not lines:
        return ""
    return "<h2>%s</h2><ul%s>%s</ul>" % (
        escape(title),
        ' class="%s"' % cls if cls else "",
        "".join("<li>%s</li>" % escape(x) for x in lines),
    )


def _binding_section(topo: Topology) -> str:
    """Which CPUs and NIC each GPU's rank uses (the same on every node), and what binds them."""
    head = "<h2>CPUs and NIC per GPU</h2><p>%s</p>" % escape(topo.binding_note or "no binding")
    if not topo.binding:
        return head
    rows = "".join(
        '<tr><td>%d</td><td>%d</td><td>%s</td><td class="l">%s</td><td class="l">%s</td></tr>'
        % (i, gpu, escape(numa), escape(cpus), escape(nics))
        for i, (gpu, numa, cpus, nics) in enumerate(topo.binding)
    )
    return (
        head + '<table class="binding"><thead><tr><th>local rank</th><th>GPU</th><th>NUMA node</th>'
        '<th class="l">CPUs</th><th class="l">NIC</th></tr></thead><tbody>%s</tbody></table>' % rows
    )


def _crossing_words(lay: Layout, topo: Topology) -> List[str]:
    cross = crossings(lay, topo)
    if not cross:
        return ["Every TP group stays inside one NVLink domain (%s)." % escape(topo.link)]
    c = cross[0]
    return [
        '<span class="bad">%d TP group%s an NVLink domain boundary: group %d (ranks %d-%d) spans domains '
        "%s and runs its all-reduces over %s instead of %s.</span>"
        % (
            len(cross),
            "s cross" if len(cross) != 1 else " crosses",
            c.group,
            c.ranks[0],
            c.ranks[-1],
            ", ".join(str(d) for d in c.domains)
            if len(c.domains) <= 4
            else "%d-%d (%d domains)" % (c.domains[0], c.domains[-1], len(c.domains)),
            escape(topo.fabric),
            escape(topo.link),
        )
    ]


def plan_page(plan: Plan, topo: Topology) -> str:
    """`plan --html` / `gen --explain-html`: the picture, the numbers and the alternatives."""
    lay = plan.layout
    name = plan.model.name if plan.model is not None else "job"
    heading = "%s on %s/%s: TP=%d PP=%d DP=%d CP=%d EP=%d on %d x %d GPUs" % (
        name,
        plan.site,
        plan.partition,
        lay.tp,
        lay.pp,
        lay.dp,
        lay.cp,
        lay.ep,
        lay.nodes,
        lay.gpus_per_node,
    )
    intro = [
        "Task %s, %s, sequence %d, global batch %d, micro-batch %d, ZeRO-%d, recompute %s."
        % (
            escape(plan.task),
            escape(plan.precision),
            plan.seq,
            plan.global_batch,
            lay.micro_batch,
            plan.zero,
            escape(plan.recompute),
        )
    ] + _crossing_words(lay, topo)
    after = [
        _memory_section(plan),
        _time_section(plan),
        _traffic_section(plan),
        _alternatives_section(plan),
        _binding_section(topo),
        _list("Why this layout", list(plan.explanation)),
        _list("Notes", list(plan.notes)),
    ]
    figure = svg(lay, topo, standalone=False, prefix="plan")
    return _view(heading, intro, [("Topology and groups", figure)], [lay], [a for a in after if a])


def fix_layout(lay: Layout, domain_gpus: int, gpus_per_node: int) -> Optional[Layout]:
    """The same GPUs with TP cut to the largest divisor that fits one NVLink domain (and one node,
    when the domain is the node), the rest moved to PP; None when TP=1 is needed but PP cannot grow."""
    limit = domain_gpus if domain_gpus > gpus_per_node else min(domain_gpus, gpus_per_node)
    for t in range(min(lay.tp, limit), 0, -1):
        if lay.tp % t == 0 and limit % t == 0:
            if t == lay.tp:
                return None
            from dataclasses import replace

            return replace(lay, tp=t, pp=lay.pp * (lay.tp // t))
    return None


def check_page(
    submitted: Layout,
    fix: Optional[Layout],
    topo: Topology,
    accepted: bool,
    messages: Sequence[str],
    warnings: Sequence[str],
    script: str,
    site: str,
    fix_topo: Optional[Topology] = None,
    fix_note: str = "",
) -> str:
    """`check --html`: the submitted layout and, for a rejected one, the suggested fix side by side
    (`fix_topo`: the domains the fix is placed in, e.g. with the --segment named in `fix_note`)."""
    verdict = "accepted" if accepted else "REJECTED"
    heading = "%s: %s on site %s" % (script, verdict, site)
    figures = [
        (
            "Submitted: TP=%d PP=%d DP=%d CP=%d EP=%d"
            % (submitted.tp, submitted.pp, submitted.dp, submitted.cp, submitted.ep),
            svg(submitted, topo, standalone=False, prefix="submitted"),
        )
    ]
    intro = _crossing_words(submitted, topo)
    if fix is not None:
        figures.append(
            (
                "Suggested fix: TP=%d PP=%d DP=%d CP=%d EP=%d (same GPUs%s)"
                % (fix.tp, fix.pp, fix.dp, fix.cp, fix.ep, fix_note),
                svg(fix, fix_topo or topo, standalone=False, prefix="fix"),
            )
        )
        intro.append(
            "Suggested fix: TP=%d with PP=%d%s keeps every TP group inside one NVLink domain on the same %d GPUs."
            % (fix.tp, fix.pp, escape(fix_note), fix.nodes * fix.gpus_per_node)
        )
    after = [_list("Why it was rejected", messages, "bad"), _list("Warnings", warnings), _binding_section(topo)]
    lays = [submitted] + ([fix] if fix is not None else [])
    return _view(heading, intro, figures, lays, [a for a in after if a])


def doctor_page(
    lay: Optional[Layout],
    topo: Optional[Topology],
    problems: Sequence[Mapping[str, Any]],
    marks: Marks,
    source: str,
) -> str:
    """`doctor --html`: the job's layout with failing ranks and nodes highlighted, and each problem."""
    heading = "doctor: %s" % source
    items = []
    for p in problems:
        hosts = ", ".join(str(h) for h in p.get("hosts", []))
        items.append(
            "<li><strong>%s</strong>%s<br>%s%s</li>"
            % (
                escape(str(p.get("title", p.get("id", "")))),
                " on %s" % escape(hosts) if hosts else "",
                escape(str(p.get("cause", ""))),
                "".join("<br>fix: %s" % escape(str(f)) for f in p.get("fixes", [])),
            )
        )
    probs = "<h2>Problems, root cause first</h2><ol>%s</ol>" % "".join(items) if items else "<p>Nothing recognised.</p>"
    if lay is None or topo is None:
        return _doc(
            heading,
            [
                "<h1>%s</h1>" % escape(heading),
                "<p>No layout to draw: the log has no slurmgpu stamp line (tp, pp, dp, nodes, gpus_per_node).</p>",
                probs,
            ],
        )
    failing: Dict[str, List[int]] = {"ranks": sorted(marks.ranks), "nodes": sorted(marks.nodes)}
    intro = [
        "Failing ranks (black outline): %s; failing nodes (red box): %s."
        % (
            escape(", ".join(str(r) for r in failing["ranks"][:40]) or "none named"),
            escape(", ".join(_node_name(topo, n) for n in failing["nodes"][:40]) or "none named"),
        )
    ]
    figure = svg(lay, topo, marks=marks, standalone=False, prefix="doctor")
    return _view(heading, intro, [("The job's layout", figure)], [lay], [probs])


def _node_name(topo: Topology, n: int) -> str:
    return topo.node_names[n] if n < len(topo.node_names) else "node %d" % n


def report_page(
    lay: Optional[Layout], topo: Optional[Topology], report: Mapping[str, Any], plan: Optional[Plan]
) -> str:
    """`report --html`: the job's layout, plan vs measured per term (RunReport.to_dict()), and the
    plan's memory and time sections when the plan could be rebuilt."""
    heading = "report: %s" % report.get("source", "")
    rows = []
    for t in report.get("terms", []):
        err = t.get("error_pct")
        inside = t.get("inside_band")
        verdict = "" if inside is None else ("inside" if inside else "OUTSIDE")
        cls = "" if inside is None or inside else ' class="bad"'
        rows.append(
            '<tr%s><td class="l">%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td class="l">%s</td></tr>'
            % (
                cls,
                escape("%s%s" % (t.get("label", ""), " (%s)" % t["unit"] if t.get("unit") else "")),
                _val(t.get("plan"), t.get("unit")),
                _val(t.get("measured"), t.get("unit")),
                "-" if err is None else "%+.1f%%" % err,
                "none stated" if t.get("band_pct") is None else escape("+-%s%% %s" % (t["band_pct"], verdict)),
                escape(str(t.get("how", ""))),
            )
        )
    table = (
        '<h2>Plan vs measured</h2><table><thead><tr><th class="l">term</th><th>plan</th><th>measured</th>'
        '<th>error</th><th>band</th><th class="l">how it was measured</th></tr></thead><tbody>%s</tbody></table>'
        % "".join(rows)
    )
    pl = report.get("plan", {})
    words = pl.get("plan_line", {})
    intro = [
        escape(
            "Plan from the %s%s: %s, %s; measured from %s."
            % (
                pl.get("found_in", "?"),
                " (recomputed)" if pl.get("recomputed") else "",
                pl.get("model") or "no model",
                ", ".join(
                    "%s %s" % (k, words[k])
                    for k in ("precision", "seq", "gbs", "mbs", "zero", "recompute")
                    if k in words
                ),
                report.get("measured_from", {}).get("source", "?"),
            )
        )
    ]
    after = [table, _list("Notes", [str(n) for n in report.get("notes", [])])]
    if plan is not None:
        after += [_memory_section(plan), _time_section(plan)]
    after = [a for a in after if a]
    if lay is None or topo is None:
        return _doc(heading, ["<h1>%s</h1>" % escape(heading)] + ["<p>%s</p>" % p for p in intro] + after)
    intro += _crossing_words(lay, topo)
    figure = svg(lay, topo, standalone=False, prefix="report")
    return _view(heading, intro, [("The job's layout", figure)], [lay], after)


def _val(x: Any, unit: Any) -> str:
    if x is None:
        return "-"
    if unit == "":
        return "%.1f%%" % (100 * float(x))
    return "%.4g" % float(x)
