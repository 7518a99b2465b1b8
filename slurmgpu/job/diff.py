"""`slurmgpu diff`: what changes when the same job spec is rendered for other sites.

Built from the generator's `RenderRequest`s (the data the templates print), not from
the scripts' text: each request becomes labelled rows (site, layout, #SBATCH values,
collective-library environment, container, launch), and the rows are lined up by
label. A site whose job cannot be generated keeps its column, with the error.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence, Tuple

if TYPE_CHECKING:
    from ..render import TemplateDir
    from ..site import Site
    from .request import RenderRequest
    from .spec import JobSpec

SECTIONS = ("site", "layout", "sbatch", "env", "container", "launch")


@dataclass(frozen=True)
class Row:
    section: str
    key: str
    values: Tuple[Optional[str], ...]  # one per site; None: not set there (or the job failed there)
    failed: Tuple[bool, ...] = ()  # per site: no request to read (the value is None)

    @property
    def same(self) -> bool:
        """Equal on every site where the job was generated."""
        ok = [v for i, v in enumerate(self.values) if not (self.failed and self.failed[i])]
        return len(set(ok)) <= 1


@dataclass(frozen=True)
class Column:
    """One site's side: its request (None if the job failed there), warnings and error."""

    site: str
    request: Optional[RenderRequest] = None
    warnings: Tuple[str, ...] = ()
    error: Optional[str] = None
    exit_code: int = 0
    partition: Optional[str] = None  # where the job failed
    fits: Tuple[str, ...] = ()  # the site's other partitions where the same job generates
    others: Tuple[str, ...] = ()  # the site's other partitions (tried when the job did not fit)


@dataclass(frozen=True)
class SiteDiff:
    columns: Tuple[Column, ...]
    rows: Tuple[Row, ...]
    spec: Optional[str] = None  # the spec file, if one was read

    @property
    def changed(self) -> Tuple[Row, ...]:
        return tuple(r for r in self.rows if not r.same)

    @property
    def exit_code(self) -> int:
        return max((c.exit_code for c in self.columns), default=0)

    def to_dict(self) -> Dict[str, Any]:
        return {
            "sites": [c.site for c in self.columns],
            "spec": self.spec,
            "changed": len(self.changed),
            "compared": len(self.rows),
            "rows": [{"section": r.section, "key": r.key, "values": list(r.values), "same": r.same} for r in self.rows],
            "failed": [c.request is None for c in self.columns],
            "warnings": [list(c.warnings) for c in self.columns],
            "errors": [c.error for c in self.columns],
            "fits": [list(c.fits) for c in self.columns],
            "requests": [c.request.to_dict() if c.request is not None else None for c in self.columns],
        }


def site_column(site: Site, spec: JobSpec, dirs: Sequence[TemplateDir]) -> Column:
    """The job generated for one site; where it does not fit (cannot be planned, or the filter
    refuses it), also the site's other partitions where the same job does."""
    from ..errors import PlanError, PolicyRejection, SlurmgpuError
    from .generate import generate

    try:
        gen = generate(site, spec, dirs, regen="")
    except SlurmgpuError as exc:
        part = spec.partition or site.default_partition
        others = tuple(p for p in site.partitions if p != part)
        fits: Tuple[str, ...] = ()
        if isinstance(exc, (PlanError, PolicyRejection)):
            fits = tuple(p for p in others if _generates(site, replace(spec, partition=p), dirs))
        return Column(
            site=site.name,
            error=str(exc),
            exit_code=exc.exit_code,
            partition=part,
            fits=fits,
            others=others if isinstance(exc, (PlanError, PolicyRejection)) else (),
        )
    return Column(site=site.name, request=gen.request, warnings=gen.warnings)


def _generates(site: Site, spec: JobSpec, dirs: Sequence[TemplateDir]) -> bool:
    from ..errors import SlurmgpuError
    from .generate import generate

    try:
        generate(site, spec, dirs, regen="")
    except SlurmgpuError:
        return False
    return True


def failure_lines(col: Column) -> List[str]:
    """Why the job fails on a site, first, then where on that site it would fit."""
    lines = (col.error or "").splitlines() or ["the job cannot be generated"]
    out = ["error: %s: %s" % (col.site, lines[0])] + ["  " + x for x in lines[1:]]
    if col.fits:
        out.append(
            "  fits on %s partition%s %s: add --partition %s (or `sites.%s: {partition: %s}` in slurmgpu.yaml)"
            % (col.site, "s" if len(col.fits) > 1 else "", ", ".join(col.fits), col.fits[0], col.site, col.fits[0])
        )
    elif col.others:
        out.append("  no other partition of %s fits it either (tried %s)" % (col.site, ", ".join(col.others)))
    return out


def _yes(flag: bool) -> Optional[str]:
    return "yes" if flag else None


def _s(v: Any) -> Optional[str]:
    return None if v is None else str(v)


def request_rows(req: RenderRequest) -> List[Tuple[str, str, Optional[str]]]:
    """(section, key, value) for everything a site can change about a job, in script order."""
    from ..render import arg_groups, shquote

    node, lay, sb, c = req.node, req.layout, req.sbatch, req.container
    rows: List[Tuple[str, str, Optional[str]]] = [
        ("site", "GPUs per node", "%d x %s (%s)" % (node.gpus, node.gpu_model, node.vendor)),
        ("site", "NVLink domain", "%d GPUs (%s)" % (node.nvlink_domain, node.link)),
        (
            "site",
            "fabric",
            "%s (%s), %d NIC%s, %g Gb/s"
            % (
                req.fabric.kind,
                req.fabric.library,
                len(node.compute_nics),
                "" if len(node.compute_nics) == 1 else "s",
                node.fabric_gbps,
            ),
        ),
        ("layout", "nodes", str(lay.nodes)),
        ("layout", "GPUs per node", str(lay.gpus_per_node)),
        ("layout", "GPUs", str(lay.world)),
        ("layout", "tp", str(lay.tp)),
        ("layout", "pp", str(lay.pp)),
        ("layout", "dp", str(lay.dp)),
        ("layout", "cp", str(lay.cp)),
        ("layout", "ep", str(lay.ep)),
        ("layout", "micro-batch", str(lay.micro_batch)),
        ("sbatch", "--nodes", str(sb.nodes)),
        (
            "sbatch",
            "GPU request",
            "--gres=gpu:%d" % sb.gpus_per_node if sb.gpu_request == "gres" else "--gpus-per-node=%d" % sb.gpus_per_node,
        ),
        ("sbatch", "--ntasks-per-node", str(sb.ntasks_per_node)),
        ("sbatch", "--cpus-per-task", str(sb.cpus_per_task)),
        ("sbatch", "--mem", _s(sb.mem)),
        ("sbatch", "--partition", sb.partition),
        ("sbatch", "--account", _s(sb.account)),
        ("sbatch", "--qos", _s(sb.qos)),
        ("sbatch", "--constraint", _s(sb.constraint)),
        ("sbatch", "--time", _s(sb.time)),
        ("sbatch", "--exclusive", _yes(sb.exclusive)),
        ("sbatch", "--segment", _s(sb.segment)),
        ("sbatch", "--switches", _s(sb.switches)),
        ("sbatch", "--signal", _s(sb.signal)),
        ("sbatch", "other", " ".join(sb.extra) or None),
    ]
    env: Dict[str, str] = {e.name: e.value for e in req.fabric.env}
    env.update(dict(req.env))  # the job's own env: comes after the fabric's in the script
    rows += [("env", name, value) for name, value in env.items()]
    rows += [
        ("container", "runtime", c.runtime),
        ("container", "image", _s(c.image)),
        ("container", "mounts", ",".join(c.mounts) or None),
    ]
    if c.runtime == "pyxis":
        line = "srun --container-image=%s" % c.image
        if c.mounts or c.mount_workdir:
            line += " --container-mounts=%s" % ",".join((("$PWD:$PWD",) if c.mount_workdir else ()) + c.mounts)
    elif c.runtime == "apptainer":
        line = "apptainer exec %s%s %s" % (c.gpu_flag, " --bind " + ",".join(c.mounts) if c.mounts else "", c.image)
    else:
        line = "(none: the host's software)"
    rows.append(("container", "launch step", line))
    rows.append(
        (
            "launch",
            "launcher",
            "%s (%d task%s per node)"
            % (req.launch.name, req.launch.tasks_per_node, "" if req.launch.tasks_per_node == 1 else "s"),
        )
    )
    seen: Dict[str, int] = {}
    for group in arg_groups(req.launch.program):  # one row per option, so a changed degree stands out
        if group[0].startswith("-") and group[0] != "--":
            key, value = group[0], " ".join(shquote(a) for a in group[1:]) or "yes"
        else:
            key, value = "program", " ".join(shquote(a) for a in group)
        seen[key] = seen.get(key, 0) + 1
        rows.append(("launch", key if seen[key] == 1 else "%s (%d)" % (key, seen[key]), value))
    return rows


def compare(columns: Sequence[Column], spec: Optional[str] = None) -> SiteDiff:
    """Line the columns' rows up by (section, key); a key one site lacks is None there."""
    per_site: List[Dict[Tuple[str, str], Optional[str]]] = []
    order: List[Tuple[str, str]] = []
    for col in columns:
        vals: Dict[Tuple[str, str], Optional[str]] = {}
        for section, key, value in request_rows(col.request) if col.request is not None else ():
            vals[(section, key)] = value
            if (section, key) not in order:
                order.append((section, key))
        per_site.append(vals)
    order.sort(key=lambda sk: SECTIONS.index(sk[0]))  # stable: script order inside each section
    failed = tuple(c.request is None for c in columns)
    rows = [
        Row(section=sk[0], key=sk[1], values=tuple(vals.get(sk) for vals in per_site), failed=failed) for sk in order
    ]
    return SiteDiff(columns=tuple(columns), rows=tuple(rows), spec=spec)


def _wrap(text: str, width: int) -> List[str]:
    """Cut a long value into lines of at most `width`, after commas, blanks or slashes where possible."""
    out: List[str] = []
    while len(text) > width:
        cut = max(text.rfind(",", 0, width), text.rfind(" ", 0, width), text.rfind("/", 0, width))
        cut = cut + 1 if cut > width // 3 else width
        out.append(text[:cut].rstrip())
        text = text[cut:].lstrip()
    out.append(text)
    return out


def render_text(d: SiteDiff, show_all: bool = False, width: int = 40) -> str:
    """Side by side: one column per site, changed rows marked '*' (only those unless show_all)."""
    names = [c.site for c in d.columns]
    failed = [c.request is None for c in d.columns]
    alone = len(failed) - sum(failed) < 2  # nothing to compare against: show what there is
    show_all = show_all or alone
    rows = d.rows if show_all else d.changed

    def shown(v: Optional[str], i: int) -> str:
        return "(failed)" if failed[i] else "-" if v is None else v

    key_w = max([len(r.key) for r in rows] + [8]) + 2
    col_w = [min(width, max([len(names[i])] + [len(shown(r.values[i], i)) for r in rows])) for i in range(len(names))]
    head = "slurmgpu diff: %s%s: " % (" vs ".join(names), " (spec %s)" % d.spec if d.spec else "")
    if not alone:
        head += "%d of %d values differ" % (len(d.changed), len(d.rows))
        if not show_all and len(d.changed) < len(d.rows):
            head += " (--all shows the rest)"
        head += "; " if any(failed) else ""
    if any(failed):
        head += "the job fails on %s" % ", ".join(n for n, bad in zip(names, failed) if bad)
    out = [head]
    for col in d.columns:
        if col.request is None:
            out += failure_lines(col)
    out.append("")
    out.append(("    " + "".ljust(key_w) + "  ".join(n.ljust(w) for n, w in zip(names, col_w))).rstrip())
    section = None
    for r in rows:
        if r.section != section:
            section = r.section
            out.append(section)
        cells = [_wrap(shown(v, i), w) for i, (v, w) in enumerate(zip(r.values, col_w))]
        for i in range(max(len(c) for c in cells)):
            mark = ("* " if not r.same else "  ") if i == 0 else "  "
            key = r.key if i == 0 else ""
            line = (
                "  "
                + mark
                + key.ljust(key_w)
                + "  ".join((c[i] if i < len(c) else "").ljust(w) for c, w in zip(cells, col_w))
            )
            out.append(line.rstrip())
    if not rows:
        out.append("  (the job is the same on every site)")
    for col in d.columns:
        for w in col.warnings:
            out.append("warning: %s: %s" % (col.site, w))
    return "\n".join(out) + "\n"
