"""`slurmgpu doctor`: read a failed job's output and say what to change.

Input is a log file or a job id (its StdOut/StdErr found with `scontrol show
job`, else `sacct`). Lines are matched against the catalogue in
signatures.py; matches are reported root-cause first, with the evidence lines,
the cause and fixes filled in from the site config and the job's stamp line
(`# slurmgpu: site=... tp=... ` echoed by generated scripts). For a CUDA OOM
the planner's memory estimate for the stamped layout is shown.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Set, Tuple

from ..errors import SlurmError, SlurmgpuError
from ..slurm import Runner, SubprocessRunner, parse_hostlist, parse_scontrol_records
from .signatures import CATALOGUE, Signature

if TYPE_CHECKING:
    from ..plan import Capabilities, ModelSpec
    from ..plan.types import Plan
    from ..site import Site

MAX_EVIDENCE = 3
MAX_LINES = 4096  # matching lines an advisor may look at again (a RAS report names one rank a line)


# ---------------------------------------------------------------------------
# Finding the log


@dataclass(frozen=True)
class LogSource:
    label: str  # what was read, for the report header
    paths: Tuple[str, ...]
    text: str
    job_id: Optional[str] = None
    script: Optional[str] = None  # the batch script, when Slurm still has it
    nodes: Tuple[str, ...] = ()  # the job's nodes in Slurm's order (scontrol NodeList), when known
    script_from: str = ""  # "scontrol" or "sacct" (AccountingStoreFlags=job_script): where the script came from


_JOBID = re.compile(r"^\d+(?:_\d+)?(?:\+\d+)?$")


def is_job_id(target: str) -> bool:
    return bool(_JOBID.match(target)) and not os.path.exists(target)


def expand_output_pattern(pattern: str, info: Mapping[str, str]) -> str:
    """Expand sbatch filename patterns (%j %A %a %x %u %N %n %t %%) as Slurm does."""
    job = info.get("JobId", "")
    array_job = info.get("ArrayJobId") or job
    subs = {
        "j": job,
        "A": array_job,
        "a": info.get("ArrayTaskId", ""),
        "x": info.get("JobName", ""),
        "u": (info.get("UserId", "") or "").split("(")[0],
        "N": _first_node(info.get("BatchHost") or info.get("NodeList", "")),
        "n": "0",
        "t": "0",
        "s": "batch",
        "%": "%",
    }

    def repl(m: re.Match[str]) -> str:
        width, key = m.group(1), m.group(2)
        val = subs.get(key, m.group(0))
        if width and val.isdigit():
            val = val.zfill(int(width))
        return val

    return re.sub(r"%(\d*)([jAaxuNntsj%])", repl, pattern)


def _first_node(nodelist: str) -> str:
    try:
        nodes = parse_hostlist(nodelist)
    except SlurmgpuError:
        return ""
    return nodes[0] if nodes else ""


def find_job_log(job_id: str, runner: Optional[Runner] = None) -> LogSource:
    """The job's output via scontrol (recent jobs) or sacct (older ones)."""
    runner = runner or SubprocessRunner()
    res = runner.run(["scontrol", "show", "job", "-o", job_id], timeout=30)
    recs = parse_scontrol_records(res.stdout, "JobId") if res.ok else []
    info: Dict[str, str] = recs[0] if recs else _from_sacct(job_id, runner)
    if not info:
        raise SlurmError(
            "job %s: scontrol does not know it (%s) and sacct has no record of its output; pass the "
            "log file instead (its path in place of the job id)" % (job_id, res.why() if not res.ok else "no record")
        )
    script, script_from = batch_script(job_id, runner)
    paths: List[str] = []
    for key in ("StdOut", "StdErr"):
        p = info.get(key)
        if p:
            paths.append(p)
    if not paths and script:  # sacct before 23.02 has no StdOut: the script's own #SBATCH --output/--error
        paths.extend(_script_outputs(script))
    paths = _expand_paths(paths, info)
    if not paths and info.get("WorkDir"):
        paths.append(os.path.join(info["WorkDir"], "slurm-%s.out" % job_id.split("+")[0]))
    texts = []
    readable = []
    for p in paths:
        try:
            with open(p, errors="replace") as f:
                texts.append(f.read())
            readable.append(p)
        except OSError:
            continue
    if not readable:
        raise SlurmError(
            "job %s: cannot read its output (%s); it may be on another host or deleted"
            % (job_id, ", ".join(paths) or "no path recorded")
        )
    try:
        nodes = tuple(parse_hostlist(info.get("NodeList", ""))) if info.get("NodeList", "(null)") != "(null)" else ()
    except SlurmgpuError:
        nodes = ()
    return LogSource(
        label="job %s (%s)" % (job_id, ", ".join(readable)),
        paths=tuple(readable),
        text="\n".join(texts),
        job_id=job_id,
        script=script,
        nodes=nodes,
        script_from=script_from,
    )


def _expand_paths(paths: Sequence[str], info: Mapping[str, str]) -> List[str]:
    out: List[str] = []
    for p in paths:
        p = expand_output_pattern(p, info)
        if not os.path.isabs(p) and info.get("WorkDir"):
            p = os.path.join(info["WorkDir"], p)
        if p not in out:
            out.append(p)
    return out


_SBATCH_OUT = re.compile(r"^#SBATCH\s+(?:--output|--error|-o|-e)(?:=|\s+)(\S+)", re.M)


def _script_outputs(script: str) -> List[str]:
    """The --output/--error patterns of a batch script's #SBATCH lines (sbatch stops reading them at
    the first command line; a generated script has them all in its header)."""
    head = []
    for line in script.splitlines():
        if line.strip() and not line.startswith("#"):
            break
        head.append(line)
    return [m.strip("'\"") for m in _SBATCH_OUT.findall("\n".join(head))]


def batch_script(job_id: str, runner: Runner) -> Tuple[Optional[str], str]:
    """(the job's batch script, where from): scontrol while the controller has the job, then sacct
    (kept by slurmdbd under AccountingStoreFlags=job_script); (None, "") when neither has it."""
    res = runner.run(["scontrol", "write", "batch_script", job_id, "-"], timeout=30)
    if res.ok and res.stdout.strip():
        return res.stdout, "scontrol"
    res = runner.run(["sacct", "-j", job_id.split("+")[0], "--batch-script", "-n"], timeout=30)
    if not res.ok:
        return None, ""
    text = res.stdout
    # "Batch Script for ID" and a line of dashes come first; "NONE" when nothing was stored
    m = re.search(r"^-{20,}\n", text, re.M)
    body = text[m.end() :] if m else text
    if not body.strip() or body.strip() == "NONE":
        return None, ""
    return body, "sacct"


def _from_sacct(job_id: str, runner: Runner) -> Dict[str, str]:
    fields = ["JobId", "JobName", "WorkDir", "StdOut", "StdErr", "NodeList"]
    res = runner.run(["sacct", "-j", job_id, "-X", "-n", "-P", "-o", ",".join(fields)], timeout=30)
    if not res.ok:  # sacct before 23.02 has no StdOut/StdErr fields
        fields = ["JobId", "JobName", "WorkDir", "NodeList"]
        res = runner.run(["sacct", "-j", job_id, "-X", "-n", "-P", "-o", ",".join(fields)], timeout=30)
    if not res.ok or not res.stdout.strip():
        return {}
    values = res.stdout.strip().splitlines()[0].split("|")
    return {k: v for k, v in zip(fields, values) if v}


def read_log(target: str, runner: Optional[Runner] = None) -> LogSource:
    if target == "-":
        import sys

        return LogSource(label="standard input", paths=(), text=sys.stdin.read())
    if is_job_id(target):
        return find_job_log(target, runner)
    try:
        with open(target, errors="replace") as f:
            return LogSource(label=target, paths=(target,), text=f.read())
    except OSError as exc:
        raise SlurmgpuError(
            "cannot read %s: %s (give a log file or a numeric job id)" % (target, exc.strerror or exc)
        ) from None


# ---------------------------------------------------------------------------
# Stamp line


def read_stamp(*texts: Optional[str]) -> Dict[str, str]:
    """Fields of the first stamp line (`# slurmgpu: k=v ...`, read as the submit filter reads it:
    slurmgpu.stamp), plus `# slurmgpu-model: NAME` and the plan line's words (`# slurmgpu-plan:
    launcher=... zero=... recompute=... mbs=... gbs=... levers=...`: what the memory advice
    recomputes the job's memory from, by its launcher's rules)."""
    from ..plan.planline import parse_plan_line
    from ..stamp import parse_stamp

    out: Dict[str, str] = {}
    for text in texts:
        if not text:
            continue
        for k, v in (parse_stamp(text) or {}).items():
            out.setdefault(k, v)
        m = re.search(r"^#\s*slurmgpu-model:\s*(\S+)", text, re.M)
        if m and "model" not in out:
            out["model"] = m.group(1)
        for k, v in (parse_plan_line(text) or {}).items():
            out.setdefault(k, v)
    return out


# ---------------------------------------------------------------------------
# Matching


@dataclass
class Match:
    signature: Signature
    first_line: int
    evidence: List[Tuple[int, str]] = field(default_factory=list)
    count: int = 0
    groups: Dict[str, str] = field(default_factory=dict)
    lines: List[int] = field(default_factory=list)  # every matching line (capped), for advisors
    hosts: List[str] = field(default_factory=list)
    cause: str = ""
    fixes: List[str] = field(default_factory=list)
    advice: List[str] = field(default_factory=list)
    places: List[Dict[str, Any]] = field(default_factory=list)  # ranks the advice placed (node, groups)

    def to_dict(self) -> Dict[str, Any]:
        s = self.signature
        return {
            "id": s.id,
            "title": s.title,
            "category": s.category,
            "priority": s.priority,
            "first_line": self.first_line,
            "count": self.count,
            "evidence": [{"line": n, "text": t} for n, t in self.evidence],
            "values": dict(self.groups),
            "hosts": list(self.hosts),
            "cause": self.cause,
            "fixes": list(self.fixes),
            "advice": list(self.advice),
            "ranks": list(self.places),
        }


@dataclass
class Diagnosis:
    source: str
    lines: int
    matches: List[Match]
    stamp: Dict[str, str]
    site: Optional[str]
    tail: List[Tuple[int, str]]

    def to_dict(self) -> Dict[str, Any]:
        return {
            "source": self.source,
            "lines": self.lines,
            "site": self.site,
            "stamp": dict(self.stamp),
            "diagnosed": bool(self.matches),
            "problems": [m.to_dict() for m in self.matches],
            "tail": [{"line": n, "text": t} for n, t in self.tail],
        }


class _Compiled:
    def __init__(self, catalogue: Sequence[Signature]):
        self.sigs = list(catalogue)
        self.patterns = [[re.compile(p) for p in s.patterns] for s in self.sigs]
        plain = [re.sub(r"\(\?P<\w+>", "(?:", p) for s in self.sigs for p in s.patterns]
        self.any = re.compile("|".join("(?:%s)" % p for p in plain))
        info = [re.sub(r"\(\?P<\w+>", "(?:", p) for s in self.sigs if s.info for p in s.patterns]
        self.info = re.compile("|".join("(?:%s)" % p for p in info)) if info else None


_HOST_RES = (
    re.compile(r"^(?:\S+:\s+)?(?:\[[^\]]*\]\s*)?(?P<h>[A-Za-z][\w.-]*):\d+:\d+ \[\d+\]"),  # NCCL prefix
    re.compile(r"\bON (?P<h>\S+) (?:CANCELLED|FAILED)"),
    re.compile(r"srun: error: (?P<h>[\w.-]+): tasks?"),
    # syslog / journalctl -k: "Mar 21 02:05:11 gpu09 kernel: ..." or an ISO time stamp
    re.compile(r"^(?:[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d|\d{4}-\d\d-\d\dT\S+) (?P<h>[\w.-]+) kernel: "),
)


def _host_of(line: str) -> Optional[str]:
    for r in _HOST_RES:
        m = r.search(line)
        if m:
            return m.group("h")
    return None


def match_lines(lines: Iterable[str], catalogue: Sequence[Signature] = CATALOGUE) -> List[Match]:
    """Scan lines once; one Match per signature seen, ordered root cause first."""
    comp = _Compiled(catalogue)
    found: Dict[str, Match] = {}
    pending_after: Dict[str, int] = {}  # signature id -> context lines still to quote
    seen: Dict[str, Set[int]] = {}  # signature id -> which of its patterns matched
    for n, raw in enumerate(lines, 1):
        line = raw.rstrip("\n")
        if pending_after:  # context after a quoted match (e.g. the line after NCCL's "Last error:")
            for sid in list(pending_after):
                found[sid].evidence.append((n, line))
                pending_after[sid] -= 1
                if not pending_after[sid]:
                    del pending_after[sid]
        # NCCL INFO lines (often most of a debug log) never carry a failure: skip them cheaply
        # NCCL INFO lines (often most of a debug log) carry no failure, except for the few
        # signatures made of them (info=True): skip the rest cheaply
        is_info = " NCCL INFO " in line
        if is_info and (comp.info is None or not comp.info.search(line)):
            continue
        if not is_info and not comp.any.search(line):
            continue
        for sig, pats in zip(comp.sigs, comp.patterns):
            if is_info and not sig.info:
                continue
            hits = [mo for mo in (pat.search(line) for pat in pats) if mo]
            if not hits:
                continue
            m = found.get(sig.id)
            if m is None:
                m = found[sig.id] = Match(signature=sig, first_line=n)
            seen.setdefault(sig.id, set()).update(i for i, pat in enumerate(pats) if pat.search(line))
            for mo in hits:
                for k, v in mo.groupdict().items():
                    if v is not None:
                        m.groups.setdefault(k, v)
            m.count += 1
            if len(m.lines) < MAX_LINES:
                m.lines.append(n)
            if m.count <= MAX_EVIDENCE:
                m.evidence.append((n, line))
                if sig.after:
                    pending_after[sig.id] = sig.after
            host = hits[0].groupdict().get("node") or _host_of(line)
            if host and host not in m.hosts:
                m.hosts.append(host)
    for sid, m in list(found.items()):
        if m.signature.all_patterns and len(seen.get(sid, ())) < len(m.signature.patterns):
            del found[sid]  # only part of the sequence (e.g. no IB device, but no socket fallback)
            continue
        m.evidence = sorted(set(m.evidence))
    return sorted(found.values(), key=lambda m: (m.signature.priority, m.first_line))


# ---------------------------------------------------------------------------
# Filling in the text


class _Ctx(dict):
    def __missing__(self, key: str) -> str:
        raise KeyError(key)


def fill(template: str, values: Mapping[str, Any]) -> str:
    """Format `{name}` fields; drop `[[...]]` segments that name an unknown field."""

    def seg(m: re.Match[str]) -> str:
        try:
            return m.group(1).format_map(_Ctx(values))
        except (KeyError, IndexError, ValueError):
            return ""

    text = re.sub(r"\[\[(.*?)\]\]", seg, template, flags=re.S)
    try:
        return text.format_map(_Ctx(values))
    except (KeyError, IndexError, ValueError):
        return re.sub(r"\{(\w+)\}", lambda mo: str(values.get(mo.group(1), "?")), text)


def site_context(site: Optional[Site], stamp: Mapping[str, str]) -> Dict[str, Any]:
    """Facts from the site config that the fixes quote."""
    if site is None:
        return {}
    ctx: Dict[str, Any] = {"site": site.name}
    try:
        nt = site.node_type_of(stamp.get("partition"))
    except SlurmgpuError:
        nt = site.node_type_of()
    ctx["gpu_memory_gb"] = "%g" % nt.gpu_memory_gb
    ctx["memory_gb"] = "%g" % nt.memory_gb
    ctx["gpus_per_node"] = nt.gpus
    if nt.compute_nics:
        ctx["compute_hcas"] = ",".join(n.name for n in nt.compute_nics)
        layers = {n.link_layer for n in nt.compute_nics}
        ctx["link_layer"] = "/".join("InfiniBand" if x == "infiniband" else "Ethernet" for x in sorted(layers))
    if nt.socket_ifname:
        ctx["socket_ifname"] = nt.socket_ifname
    if site.scratch:
        ctx["scratch"] = site.scratch
    return ctx


def _values(m: Match, ctx: Mapping[str, Any]) -> Dict[str, Any]:
    vals: Dict[str, Any] = dict(ctx)
    vals.update(m.groups)
    if m.hosts:
        vals["nodes"] = ",".join(m.hosts)
    for g, table in m.signature.lookups.items():
        if g in m.groups and m.groups[g] in table:
            vals[g + "_words"] = table[m.groups[g]]
    return vals


def diagnose(
    text: str,
    site: Optional[Site] = None,
    stamp: Optional[Mapping[str, str]] = None,
    source: str = "log",
    catalogue: Sequence[Signature] = CATALOGUE,
    nodes: Sequence[str] = (),
    caps: Optional[Capabilities] = None,
) -> Diagnosis:
    """Match `text`; `nodes` (the job's node list, in order) lets rank findings name their node;
    `caps` (the stamped launcher's, with its framework's memory rules) sizes the memory advice."""
    lines = text.splitlines()
    stamp = dict(stamp or read_stamp(text))
    matches = match_lines(lines, catalogue)
    ctx = site_context(site, stamp)
    if site is not None and "compute_hcas" not in ctx:  # an Ethernet-only site: sockets are its network
        matches = [m for m in matches if m.signature.id != "nccl-ib-socket-fallback"]
    by_sig = {m.signature.id: m for m in matches}
    job = JobContext(lines=lines, nodes=tuple(nodes), caps=caps)
    for m in matches:
        vals = _values(m, ctx)
        m.cause = fill(m.signature.cause, vals)
        m.fixes = [fill(f, vals) for f in m.signature.fixes]
        adv = ADVISORS.get(m.signature.advisor or "")
        if adv is not None:
            m.advice = adv(m, site, stamp, job)
        for sid in m.signature.explains:  # the echo it causes, later in the log
            echo = by_sig.get(sid)
            if echo is not None and echo.first_line > m.first_line:
                m.advice.append(
                    "The %s at line %d follows from this: fix this first." % (echo.signature.title, echo.first_line)
                )
    tail = [(i + 1, lines[i]) for i in range(max(0, len(lines) - 15), len(lines))] if not matches else []
    return Diagnosis(
        source=source, lines=len(lines), matches=matches, stamp=stamp, site=getattr(site, "name", None), tail=tail
    )


# ---------------------------------------------------------------------------
# Advisors: plan-aware advice


@dataclass(frozen=True)
class JobContext:
    """What advisors may read besides the match: the whole log and the job's node list."""

    lines: Sequence[str]
    nodes: Tuple[str, ...] = ()
    caps: Optional[Capabilities] = None  # the job's launcher and its framework's memory rules (None: unknown)


def oom_advice(m: Match, site: Optional[Site], stamp: Mapping[str, str], job: JobContext) -> List[str]:
    """What the stamped layout needs per GPU, and a layout that fits."""
    out: List[str] = []
    layout = {k: stamp[k] for k in ("tp", "pp", "dp", "cp", "ep", "nodes", "gpus_per_node") if k in stamp}
    if layout:
        out.append("This job's layout (stamp): %s." % " ".join("%s=%s" % kv for kv in layout.items()))
    model = stamp.get("model")
    if not model:
        out.append(
            "The job names no model (no model= in the stamp, no `# slurmgpu-model: NAME` line), so "
            "slurmgpu cannot estimate its memory; generate the script with a model to get one."
        )
        return out
    try:
        out.extend(memory_advice(model, stamp, site, job.caps))
    except SlurmgpuError as exc:
        out.append("Could not evaluate model %s: %s" % (model, str(exc).splitlines()[0]))
    return out


def _int(stamp: Mapping[str, str], *keys: str, default: int = 1) -> int:
    for k in keys:
        v = stamp.get(k, "")
        if v.isdigit() and int(v) > 0:
            return int(v)
    return default


def memory_advice(
    model_name: str, stamp: Mapping[str, str], site: Optional[Site], caps: Optional[Capabilities] = None
) -> List[str]:
    """The memory model's estimate for the stamped layout and the least-split layout of the same GPUs that fits.

    With `caps` (the stamped launcher's) the estimate is its framework's, with the sharding stage,
    recomputation and cheaper-memory flags gen planned (the `# slurmgpu-model:` line's words)."""
    from ..plan import Capabilities, TrainShape, get_model, training_memory, usable_gb

    caps = caps or Capabilities()
    model = get_model(model_name)
    tp, pp, dp = _int(stamp, "tp"), _int(stamp, "pp"), _int(stamp, "dp")
    cp, ep = _int(stamp, "cp"), _int(stamp, "ep")
    mbs = _int(stamp, "micro_batch", "mbs")
    seq = _int(stamp, "seq", default=model.seq)
    recompute = stamp.get("recompute", "selective")
    gbs = _int(stamp, "global_batch", "gbs", default=0)
    zero = int(stamp["zero"]) if stamp.get("zero", "").isdigit() else (1 if dp * cp > 1 else 0)
    levers = tuple(x for x in stamp.get("levers", "").split(",") if x)
    m_count = max(pp, gbs // (mbs * dp) if gbs else pp)
    nt = (
        site.node_type_of(stamp.get("partition"))
        if site is not None and stamp.get("partition") in getattr(site, "partitions", {})
        else (site.node_type_of() if site is not None else None)
    )
    cap = nt.gpu_memory_gb if nt is not None else None
    gpn = _int(stamp, "gpus_per_node", default=0)
    est = training_memory(
        model,
        TrainShape(tp, pp, dp, cp, ep, mbs, m_count, seq, gpn),
        recompute=recompute,
        zero=zero,
        profile=caps.memory,
        levers=levers,
        precision=stamp.get("precision", "bf16"),
    )
    parts = ", ".join("%s %.1f" % (n, gb) for n, gb in est.parts())
    out = [
        "Memory estimate for %s at tp=%d pp=%d cp=%d micro_batch=%d seq=%d (%s recompute, %s%s): %.1f GB per GPU "
        "(%s)%s."
        % (
            model.name,
            tp,
            pp,
            cp,
            mbs,
            seq,
            recompute,
            caps.memory.framework,
            ", ZeRO-%d" % zero if zero else "",
            est.total,
            parts,
            "; the GPU has %g GB, %.0f usable" % (cap, usable_gb(cap)) if cap else "",
        )
    ]
    if site is None:
        return out
    out.append(_planner_layout(site, model, stamp, tp * pp * dp * cp, seq, gbs, caps))
    return out


def _planner_layout(
    site: Site,
    model: ModelSpec,
    stamp: Mapping[str, str],
    world: int,
    seq: int,
    gbs: int,
    caps: Optional[Capabilities] = None,
) -> str:
    """The planner's choice on the job's own GPUs, else the smallest allocation it would use."""
    from ..errors import PlanError
    from ..plan import Capabilities, PlanRequest, make_plan

    part = stamp.get("partition") if stamp.get("partition") in site.partitions else None
    base = PlanRequest(model=model, partition=part, seq=seq, global_batch=gbs or None, caps=caps or Capabilities())
    try:
        p = make_plan(site, PlanRequest(**dict(base.__dict__, gpus=world)))
        return "The planner's layout for these %d GPUs: %s." % (world, _plan_words(p))
    except PlanError as exc:
        first = str(exc).splitlines()[0]
    try:
        p = make_plan(site, base)
    except PlanError:
        return "The planner finds no layout of %d GPUs that fits: %s" % (world, first)
    return "No layout of %d GPUs fits (%s); the planner needs %d node%s: %s." % (
        world,
        first.rstrip("."),
        p.layout.nodes,
        "" if p.layout.nodes == 1 else "s",
        _plan_words(p),
    )


def _plan_words(p: Plan) -> str:
    lay = p.layout
    zero = {0: "no optimizer sharding", 1: "distributed optimizer (ZeRO-1)"}.get(p.zero, "ZeRO-%d" % p.zero)
    return (
        "tp=%d pp=%d dp=%d cp=%d micro_batch=%d, %s, %s recompute, ~%.1f GB per GPU of %g (`slurmgpu plan "
        "--model %s` explains it)"
        % (
            lay.tp,
            lay.pp,
            lay.dp,
            lay.cp,
            lay.micro_batch,
            zero,
            p.recompute,
            p.memory_per_gpu_gb,
            p.capacity_gb,
            p.model.name,
        )
    )


def _rank_advice(m: Match, site: Optional[Site], stamp: Mapping[str, str], job: JobContext) -> List[str]:
    from .rankmap import rank_advice
    from .ranks import RankPlace

    placed: List[RankPlace] = []
    out = rank_advice(
        m.signature.id, [job.lines[n - 1] for n in m.lines], job.lines, m.lines, site, stamp, job.nodes, placed
    )
    m.places = [p.to_dict() for p in placed]
    return out


Advisor = Callable[[Match, Optional["Site"], Mapping[str, str], JobContext], List[str]]
ADVISORS: Dict[str, Advisor] = {"oom": oom_advice, "ranks": _rank_advice}


# ---------------------------------------------------------------------------
# Text report


def render_text(d: Diagnosis) -> str:
    out: List[str] = []
    n = len(d.matches)
    out.append(
        "slurmgpu doctor: %s, %d lines, %s"
        % (d.source, d.lines, "%d known problem%s" % (n, "" if n == 1 else "s") if n else "no known failure signature")
    )
    if d.stamp:
        out.append("  plan (stamp): %s" % " ".join("%s=%s" % kv for kv in d.stamp.items()))
    for i, m in enumerate(d.matches, 1):
        s = m.signature
        where = (
            " on %s" % ", ".join(m.hosts[:4]) + (" (+%d)" % (len(m.hosts) - 4) if len(m.hosts) > 4 else "")
            if m.hosts
            else ""
        )
        out.append("")
        out.append(
            "%d. %s [%s]%s, first at line %d%s"
            % (i, s.title, s.id, where, m.first_line, " (%d lines)" % m.count if m.count > 1 else "")
        )
        for ln, text in m.evidence:
            out.append("   %6d | %s" % (ln, text if len(text) <= 200 else text[:197] + "..."))
        out.append("   cause: %s" % m.cause)
        for f in m.fixes:
            out.append("   fix:   %s" % f)
        for a in m.advice:
            out.append("   plan:  %s" % a)
    if not d.matches:
        out.append("  The end of the log (none of the %d known signatures matched):" % len(CATALOGUE))
        for ln, text in d.tail:
            out.append("   %6d | %s" % (ln, text))
        out.append("  If this is a failure doctor should know, add it to slurmgpu/signatures.py.")
    elif len(d.matches) > 1:
        out.append("")
        out.append("Start with #1: problems are listed root cause first; later ones are often its echo.")
    return "\n".join(out) + "\n"
