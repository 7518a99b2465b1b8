"""Writing the explain view (--html / --svg / --explain-html) for plan, gen, check and doctor.

Kept out of the cmd_*.py modules so each command only adds its option and one call here.
"""

from __future__ import annotations

import re
from typing import Any, List, Mapping, Optional

import click

from .common import _write_atomic

HTML_HELP = "Also write the explain view (one self-contained HTML file: topology, groups, numbers) to FILE."


def write_text(path: str, text: str) -> None:
    """Atomically (temporary file in the same directory, then rename): never a half-written page."""
    _write_atomic(path, text, mode=0o644, say=True)


def _topology(site: Any, partition: Optional[str], gpus_per_node: int, segment: Optional[int], names: Any = ()) -> Any:
    from ..view import Topology

    nt = site.node_type_of(partition or site.default_partition)
    return Topology.of(nt, gpus_per_node, segment=segment, node_names=names)


def plan_view(site: Any, plan: Any, html: Optional[str], svg_path: Optional[str]) -> None:
    from ..view import plan_page, svg

    topo = _topology(site, plan.partition, plan.layout.gpus_per_node, plan.segment)
    if svg_path:
        write_text(svg_path, svg(plan.layout, topo))
    if html:
        write_text(html, plan_page(plan, topo))


def gen_view(site: Any, gen: Any, html: str) -> None:
    """The planned job's page; a job without a model (pins only) gets the picture without numbers."""
    from ..view import check_page, plan_page

    req = gen.request
    plan = gen.sizing.plan
    lay = req.layout
    seg = plan.segment if plan is not None else None
    topo = _topology(site, req.sbatch.partition, lay.gpus_per_node, seg)
    if req.binding is not None:  # what this launcher binds (DeepSpeed's cores are a share of the node's)
        from dataclasses import replace

        from ..view import binding_rows

        topo = replace(topo, binding=binding_rows(req.binding.ranks), binding_note=req.binding.note)
    if plan is not None:
        write_text(html, plan_page(plan, topo))
        return
    verdict = gen.verdict
    write_text(
        html,
        check_page(
            lay,
            None,
            topo,
            True,
            (),
            list(getattr(verdict, "warnings", ()) or ()),
            "generated script",
            req.site,
        ),
    )


def check_view(site: Any, verdict: Any, desc: Mapping[str, Any], html: str, script: str) -> None:
    """The submitted layout and, when rejected, the fix that keeps the GPUs; nodes and GPUs per node
    come from the job_desc sbatch would send (the stamp's values when the layout came from it)."""
    from ..plan import Layout
    from ..view import check_page, fix_layout

    parts = list(verdict.partitions) or [site.default_partition]
    nt = site.node_type_of(parts[0])
    lay_in = verdict.layout
    nodes = _int(desc.get("min_nodes")) or 1
    gpn = _gpus_per_node(desc) or nt.gpus
    tp, pp, cp, ep = (_int(lay_in.get(k)) or 1 for k in ("tp", "pp", "cp", "ep"))
    dp = _int(lay_in.get("dp")) or max(1, nodes * gpn // max(1, tp * pp * cp))
    lay = Layout(tp=tp, pp=pp, dp=dp, cp=cp, ep=ep, nodes=nodes, gpus_per_node=gpn)
    if lay.world > nodes * gpn:
        click.echo(
            "warning: the layout (%d ranks) needs more than the %d x %d GPUs requested: drawing %d nodes"
            % (lay.world, nodes, gpn, -(-lay.world // gpn)),
            err=True,
        )
        lay = Layout(tp=tp, pp=pp, dp=dp, cp=cp, ep=ep, nodes=-(-lay.world // gpn), gpus_per_node=gpn)
    seg = _int(desc.get("segment_size"))
    domain = nt.nvlink_domain
    unplaced = nt.domain_nodes > 1 and not seg and nodes > 1
    if unplaced:  # without --segment Slurm may put each node in another NVLink domain (the filter's rule)
        seg = 1
        if tp <= domain:
            domain = gpn  # the other fix, --segment, is in the filter's message
    topo = _topology(site, parts[0], gpn, seg)
    fix = None if verdict.accepted else fix_layout(lay, domain, gpn)
    fix_topo, fix_note = topo, ""
    if fix is not None and unplaced and fix.tp > gpn:
        from ..plan import segment_for

        need, _err = segment_for(nt, fix.tp, nodes, gpn)
        fix_topo = _topology(site, parts[0], gpn, need)
        fix_note = " with --segment=%d" % need if need else ""
    write_text(
        html,
        check_page(
            lay,
            fix,
            topo,
            verdict.accepted,
            list(verdict.messages),
            list(verdict.warnings),
            script,
            site.name,
            fix_topo=fix_topo,
            fix_note=fix_note,
        ),
    )


def doctor_view(site: Any, diagnosis: Any, text: str, html: str) -> None:
    """The job's layout (from its stamp line) with the failing ranks and nodes highlighted."""
    from ..plan import Layout
    from ..view import doctor_marks, doctor_page

    d = diagnosis.to_dict()
    st = d.get("stamp") or {}
    names = _nodelist(text)
    lay = None
    topo = None
    try:
        lay = Layout(
            tp=int(st["tp"]),
            pp=int(st["pp"]),
            dp=int(st["dp"]),
            cp=int(st.get("cp", 1)),
            ep=int(st.get("ep", 1)),
            nodes=int(st["nodes"]),
            gpus_per_node=int(st["gpus_per_node"]),
        )
    except (KeyError, ValueError):
        click.echo("warning: no complete slurmgpu stamp line in the log: the page has no layout picture", err=True)
    if lay is not None and site is not None:
        topo = _topology(site, None, lay.gpus_per_node, None, names)
    elif lay is not None:
        click.echo("warning: no site config: the page has no layout picture", err=True)
        lay = None
    write_text(
        html,
        doctor_page(
            lay, topo, d["problems"], doctor_marks(d["problems"], names, lay.gpus_per_node if lay else 0), d["source"]
        ),
    )


def _nodelist(text: str) -> List[str]:
    """The job's nodes in order, from SLURM_JOB_NODELIST / SLURM_NODELIST lines of the log."""
    from ..slurm import parse_hostlist

    m = re.search(r"SLURM_(?:JOB_)?NODELIST=(\S+)", text)
    if not m:
        return []
    try:
        return parse_hostlist(m.group(1).strip("'\""))
    except Exception as exc:  # a log line is not trusted input: say so and draw without names
        click.echo("warning: cannot read the node list %r: %s" % (m.group(1), exc), err=True)
        return []


def _gpus_per_node(desc: Mapping[str, Any]) -> Optional[int]:
    tres = str(desc.get("tres_per_node") or "")
    m = re.search(r"gpu(?::[\w.-]+)?:(\d+)", tres)
    return int(m.group(1)) if m else None


def _int(v: Any) -> Optional[int]:
    try:
        return int(v) if v is not None else None
    except (TypeError, ValueError):
        return None


def report_view(site: Any, rep: Any, html: str) -> None:
    """`report --html`: the job's layout, and the measured figures beside the plan's (with the
    plan's memory and time sections when the plan can be rebuilt from the script)."""
    from ..errors import SlurmgpuError
    from ..plan import Layout
    from ..view import report_page

    st = rep.facts.stamp
    lay = topo = plan = None
    try:
        lay = Layout(
            tp=int(st["tp"]),
            pp=int(st["pp"]),
            dp=int(st["dp"]),
            cp=int(st.get("cp", 1)),
            ep=int(st.get("ep", 1)),
            micro_batch=int(rep.facts.plan.get("mbs", "1") or 1),
            nodes=int(st["nodes"]),
            gpus_per_node=int(st["gpus_per_node"]),
        )
    except (KeyError, ValueError):
        click.echo("warning: no complete slurmgpu stamp: the page has no layout picture", err=True)
    if lay is not None and site is not None:
        topo = _topology(site, rep.facts.plan.get("partition"), lay.gpus_per_node, None, rep.nodes)
        try:
            from ..runs.report import rebuild_plan

            plan = rebuild_plan(site, rep.facts)
        except SlurmgpuError as exc:
            click.echo("note: the plan's breakdown is not drawn: %s" % str(exc).splitlines()[0], err=True)
    elif lay is not None:
        click.echo("warning: no site config: the page has no layout picture", err=True)
        lay = None
    try:
        write_text(html, report_page(lay, topo, rep.to_dict(), plan))
    except OSError as exc:
        raise SlurmgpuError("cannot write %s: %s" % (html, exc.strerror or exc)) from None
