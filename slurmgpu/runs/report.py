"""`slurmgpu report`: a finished run held against the plan it was launched from, term by term.

The plan comes from the job's batch script (or its log, which generated scripts echo it into):
the stamp gives the layout, the plan line (slurmgpu.plan.planline) the batch, precision and the
figures and error band promised when the script was written. The measured side comes from the
framework's own log lines (slurmgpu.runs.logs), steady state only. Each term says how it was
measured, so a figure derived from another (tokens/s from a step time and the batch) says so.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence, Tuple

from ..errors import SlurmgpuError
from .logs import (
    LAUNCHER_FORMAT,
    READERS,
    Measured,
    Versions,
    describe,
    median_of,
    read_all,
    read_versions,
    replica_total,
    spread_of,
    steady,
)

if TYPE_CHECKING:
    from ..node.doctor import LogSource
    from ..site import Site


class NothingMeasured(SlurmgpuError):
    """The log holds none of the framework lines report reads (exit 1, like doctor's 'nothing recognised')."""

    exit_code = 1


# ---------------------------------------------------------------------------
# The plan


@dataclass(frozen=True)
class PlanFacts:
    """What the script says was planned: stamp words, plan-line words, model, and where they were found."""

    stamp: Dict[str, str]
    plan: Dict[str, str]
    model: Optional[str]
    where: str
    recomputed: bool = False  # no plan line: the figures were recomputed from the stamp (older scripts)

    @property
    def world(self) -> int:
        try:
            return int(self.stamp["nodes"]) * int(self.stamp["gpus_per_node"])
        except (KeyError, ValueError):
            n = 1
            for k in ("tp", "pp", "dp", "cp"):
                n *= int(self.stamp.get(k, "1") or 1)
            return n

    def num(self, key: str) -> Optional[float]:
        try:
            return float(self.plan[key])
        except (KeyError, ValueError):
            return None

    def int(self, key: str, default: int = 0) -> int:
        v = self.plan.get(key, self.stamp.get(key, ""))
        return int(v) if v.isdigit() else default

    @property
    def serving(self) -> bool:
        return self.plan.get("task") == "inference"


def find_plan(log_text: str, script: Optional[str], script_label: str = "batch script") -> Optional[PlanFacts]:
    """The stamp, plan line and model of a job: from its batch script, else from its log."""
    from ..node.doctor import read_stamp
    from ..plan.planline import parse_plan_line

    for text, where in ((script, script_label), (log_text, "job log")):
        if not text:
            continue
        stamp = read_stamp(text)
        if "tp" not in stamp:
            continue
        plan = parse_plan_line(text) or {}
        return PlanFacts(stamp=stamp, plan=plan, model=stamp.get("model"), where=where)
    return None


def recompute_plan(site: Site, facts: PlanFacts, measured_gbs: Optional[int]) -> PlanFacts:
    """Scripts written before the plan line: plan the stamped layout again (today's cost model),
    with the batch the log states and BF16 unless the log says otherwise, and say so."""
    from ..plan import PlanRequest, get_model, make_plan
    from ..plan.planline import format_plan_line, parse_plan_line

    if not facts.model:
        return facts
    s = facts.stamp
    pins = {k: int(s[k]) for k in ("tp", "pp", "dp", "cp", "ep") if s.get(k, "").isdigit()}
    req = PlanRequest(model=get_model(facts.model), gpus=facts.world, global_batch=measured_gbs, pins=pins)
    plan = make_plan(site, req)
    words = parse_plan_line(format_plan_line(site, plan, "")) or {}
    words.pop("launcher", None)
    return PlanFacts(stamp=facts.stamp, plan=words, model=facts.model, where=facts.where, recomputed=True)


# ---------------------------------------------------------------------------
# Terms


@dataclass(frozen=True)
class Term:
    """One figure, planned and measured: error = measured / planned - 1."""

    name: str
    label: str
    unit: str
    plan: Optional[float]
    measured: Optional[float]
    band: Optional[float]  # the plan's stated band in percent, None where it states none
    how: str  # how the measured figure was obtained

    @property
    def error(self) -> Optional[float]:
        if self.plan is None or self.measured is None or not self.plan:
            return None
        return self.measured / self.plan - 1.0

    def inside(self, pct: Optional[float] = None) -> Optional[bool]:
        """Within `pct` percent (default: the plan's band); None when either side or the band is missing."""
        b = self.band if pct is None else pct
        e = self.error
        if e is None or b is None:
            return None
        return abs(e) * 100 <= b + 1e-9

    def to_dict(self) -> Dict[str, Any]:
        e = self.error
        return {
            "term": self.name,
            "label": self.label,
            "unit": self.unit,
            "plan": _r(self.plan),
            "measured": _r(self.measured),
            "error_pct": None if e is None else round(100 * e, 2),
            "band_pct": self.band,
            "inside_band": self.inside(),
            "how": self.how,
        }


def _r(x: Optional[float]) -> Optional[float]:
    return None if x is None else float("%.5g" % x)


@dataclass(frozen=True)
class RunReport:
    source: str
    job_id: Optional[str]
    facts: PlanFacts
    measured: Measured
    also: Tuple[str, ...]  # other formats found in the log
    terms: Tuple[Term, ...]
    warmup: int
    steady_n: int
    versions: Versions
    nodes: Tuple[str, ...]
    notes: Tuple[str, ...] = ()
    site: Optional[str] = None
    script: Optional[str] = field(default=None, repr=False)

    def term(self, name: str) -> Optional[Term]:
        return next((t for t in self.terms if t.name == name), None)

    def checked(self, pct: Optional[float]) -> List[Term]:
        """Terms that `outside(pct)` could judge (a plan figure, a measured one and a band)."""
        return [t for t in self.terms if t.inside(pct) is not None]

    def outside(self, pct: Optional[float]) -> List[Term]:
        """Terms outside `pct` (None: each term's own band); terms without a figure or band are skipped."""
        return [t for t in self.terms if t.inside(pct) is False]

    def to_dict(self) -> Dict[str, Any]:
        return {
            "source": self.source,
            "job_id": self.job_id,
            "site": self.site,
            "plan": {
                "found_in": self.facts.where,
                "recomputed": self.facts.recomputed,
                "stamp": dict(self.facts.stamp),
                "plan_line": dict(self.facts.plan),
                "model": self.facts.model,
                "gpus": self.facts.world,
            },
            "measured_from": describe(self.measured),
            "other_formats": list(self.also),
            "warmup_steps": self.warmup,
            "steady_intervals": self.steady_n,
            "terms": [t.to_dict() for t in self.terms],
            "versions": {
                "nccl": self.versions.nccl,
                "framework": self.versions.framework,
                "env": dict(self.versions.env),
            },
            "nodes": list(self.nodes),
            "notes": list(self.notes),
        }


def choose(found: Sequence[Measured], launcher: Optional[str], fmt: Optional[str]) -> Tuple[Measured, Tuple[str, ...]]:
    """The measurement to report: the asked format, else the launcher's, else the first found."""
    names = [m.framework for m in found]

    def fam(name: str) -> str:
        return "megatron" if name == "megatron-bridge" else name

    want = fmt or LAUNCHER_FORMAT.get(launcher or "")
    if want:
        for m in found:
            if fam(m.framework) == want:
                return m, tuple(n for n in names if n != m.framework)
        if fmt:
            raise NothingMeasured(
                "no %s lines in the log (found: %s); formats read: %s"
                % (fmt, ", ".join(names) or "none", ", ".join(READERS))
            )
    if not found:
        raise NothingMeasured(
            "the log has none of the progress lines report reads (%s)%s; check that the run logged its "
            "progress (Megatron --log-interval, torchtitan metrics.log_freq, DeepSpeed steps_per_print)"
            % (", ".join(READERS), "" if not launcher else "; the launcher was %s" % launcher)
        )
    return found[0], tuple(names[1:])


def build(
    src: LogSource,
    facts: PlanFacts,
    fmt: Optional[str] = None,
    warmup: Optional[int] = None,
    site: Optional[Site] = None,
) -> RunReport:
    """Read the log and hold its figures against the plan."""
    found = read_all(src.text)
    launcher = facts.plan.get("launcher")
    m, also = choose(found, launcher, fmt)
    notes: List[str] = list(m.notes)
    gbs_log = next((s.global_batch for s in m.samples if s.global_batch), None)
    if not facts.plan and site is not None and facts.model:
        facts = recompute_plan(site, facts, gbs_log)
    if not facts.plan:
        notes.append(
            "the script has no plan line (`# slurmgpu-plan:`) and names no model: nothing to compare with; "
            "generate it with `slurmgpu gen --model ...`"
        )
    elif facts.recomputed:
        notes.append(
            "the script has no plan line (written before slurmgpu recorded one): the plan was recomputed from "
            "the stamp and model with today's cost model, BF16 and the log's global batch"
        )
    if m.serving is not None or facts.serving:
        terms, kept, w = _serving_terms(facts, m, notes)
    else:
        terms, kept, w = _training_terms(facts, m, warmup, gbs_log, notes)
    return RunReport(
        source=src.label,
        job_id=src.job_id,
        facts=facts,
        measured=m,
        also=also,
        terms=tuple(terms),
        warmup=w,
        steady_n=kept,
        versions=read_versions(src.text),
        nodes=tuple(src.nodes),
        notes=tuple(notes),
        site=facts.stamp.get("site"),
        script=src.script,
    )


def _training_terms(
    facts: PlanFacts, m: Measured, warmup: Optional[int], gbs_log: Optional[int], notes: List[str]
) -> Tuple[List[Term], int, int]:
    world = facts.world
    seq = facts.int("seq")
    gbs_plan = facts.int("gbs")
    gbs = gbs_log or gbs_plan
    band = facts.num("band")
    if gbs_log and gbs_plan and gbs_log != gbs_plan:
        notes.append(
            "the log's global batch is %d, the plan's %d: the measured figures use the log's" % (gbs_log, gbs_plan)
        )
    samples, w, ok = steady(m.samples, warmup)
    if m.whole_run:
        w = 0
    elif not ok:
        notes.append(
            "no interval after the %d warm-up steps: the figures include warm-up (log more steps, or set --warmup)" % w
        )
    step = median_of(samples, "step_time_s")
    tps = median_of(samples, "tokens_per_s_gpu")
    sps = median_of(samples, "samples_per_s")
    how_step = how_tps = ""
    what = "median of %d steady-state interval%s" % (len(samples), "" if len(samples) == 1 else "s")
    if m.whole_run:
        what = "whole-run average"
    if step is not None:
        how_step = "%s, %s" % (_step_words(m), what)
        spread = spread_of(samples, "step_time_s")
        if spread and len(samples) > 1:
            how_step += " (%.4g-%.4g s)" % spread
    if tps is not None:
        how_tps = "tokens/s per GPU as printed, %s" % what
    if sps is not None:
        if tps is None and seq:
            tps = sps * seq / world
            how_tps = "%s samples/s x %d tokens / %d GPUs, %s" % (_sps_words(m), seq, world, what)
        if step is None and gbs:
            step = gbs / sps
            how_step = "global batch %d / %s samples/s, %s" % (gbs, _sps_words(m), what)
    if tps is None and step is not None and gbs and seq:
        tps = gbs * seq / step / world
        how_tps = "global batch %d x %d tokens / step time / %d GPUs" % (gbs, seq, world)
    if step is None and tps is not None and gbs and seq:
        step = gbs * seq / world / tps
        how_step = "global batch %d x %d tokens / %d GPUs / tokens/s per GPU" % (gbs, seq, world)
    plan_tps = facts.num("tokens_s_gpu")
    plan_mfu = facts.num("mfu")
    mfu = plan_mfu * tps / plan_tps if (plan_mfu and plan_tps and tps) else None
    own = median_of(samples, "mfu")
    if own is not None:
        notes.append(
            "%s's own MFU: %.1f%% (its FLOP count and peak; the MFU term uses the plan's)" % (m.framework, 100 * own)
        )
    tfl = median_of(samples, "tflops_gpu")
    if tfl is not None:
        notes.append("%s's own throughput: %.1f TFLOP/s per GPU" % (m.framework, tfl))
    peak = m.peak_memory()
    terms = [
        Term("step_time", "step time", "s", facts.num("step_s"), step, band, how_step),
        Term("tokens_per_s_gpu", "tokens/s per GPU", "tok/s", plan_tps, tps, band, how_tps),
        Term(
            "mfu",
            "MFU",
            "",
            plan_mfu,
            mfu,
            band,
            "the plan's model FLOPs per token x measured tokens/s, against the plan's peak" if mfu is not None else "",
        ),
        Term(
            "memory",
            "peak memory per GPU",
            "GB",
            facts.num("mem_gb"),
            peak.gb if peak else None,
            None,
            "%s, the highest of %d report line%s (line %d)"
            % (peak.kind, len(m.memory), "" if len(m.memory) == 1 else "s", peak.line)
            if peak
            else "",
        ),
    ]
    return terms, len(samples), w


def _step_words(m: Measured) -> str:
    return {
        "megatron": "elapsed time per iteration",
        "megatron-bridge": "elapsed time per iteration",
        "hf-trainer": "1 / train_steps_per_second",
    }.get(m.framework, "step time")


def _sps_words(m: Measured) -> str:
    return {"deepspeed": "CurrSamplesPerSec", "hf-trainer": "train_samples_per_second"}.get(m.framework, "samples/s")


def _serving_terms(facts: PlanFacts, m: Measured, notes: List[str]) -> Tuple[List[Term], int, int]:
    world = facts.world
    band = facts.num("band")
    sv = m.serving
    tps = step = ttft = None
    how_tps = how_step = how_ttft = ""
    if sv is not None:
        if sv.output_tokens_per_s is not None:
            tps = sv.output_tokens_per_s / world
            how_tps = "benchmark output token throughput %.6g tok/s / %d GPUs (line %d)" % (
                sv.output_tokens_per_s,
                world,
                sv.line,
            )
        if sv.median_tpot_s is not None:
            step = sv.median_tpot_s
            how_step = "median time per output token (the decode step) of the benchmark"
        if sv.median_ttft_s is not None:
            ttft = sv.median_ttft_s
            how_ttft = "median time to first token (prefill plus queueing) of the benchmark"
        gbs = facts.int("gbs")
        if sv.concurrency is not None and gbs and int(sv.concurrency) != gbs:
            notes.append(
                "the benchmark ran %d concurrent requests, the plan %d sequences: decode time and throughput "
                "scale with the batch" % (int(sv.concurrency), gbs)
            )
    if tps is None:
        total = replica_total(m.samples)
        if total is not None:
            tps = total / world
            how_tps = "engine generation throughput (median per engine while serving, summed) / %d GPUs" % world
            if step is None and facts.int("gbs"):
                notes.append(
                    "no benchmark summary in the log: the decode step is not measured (run `vllm bench serve` "
                    "or sglang.bench_serving)"
                )
    peak = m.peak_memory()
    terms = [
        Term("step_time", "decode step", "s", facts.num("step_s"), step, band, how_step),
        Term("tokens_per_s_gpu", "output tokens/s per GPU", "tok/s", facts.num("tokens_s_gpu"), tps, band, how_tps),
        Term("prefill", "time to first token", "s", facts.num("prefill_s"), ttft, None, how_ttft),
        Term(
            "weights",
            "weights per GPU",
            "GB",
            facts.num("weights_gb"),
            peak.gb if peak else None,
            None,
            "%s (line %d)" % (peak.kind, peak.line) if peak else "",
        ),
    ]
    return terms, len(m.samples), 0


# ---------------------------------------------------------------------------
# Text


def _fmt(x: Optional[float], unit: str) -> str:
    if x is None:
        return "-"
    if unit == "":
        return "%.1f%%" % (100 * x)
    if abs(x) >= 1000:
        return f"{x:,.0f}"
    return "%.4g" % x


def render_text(r: RunReport, expect: Optional[float] = None) -> str:
    f = r.facts
    out = ["slurmgpu report: %s" % r.source]
    lay = " ".join(
        "%s=%s" % (k, f.stamp[k]) for k in ("tp", "pp", "dp", "cp", "ep", "nodes", "gpus_per_node") if k in f.stamp
    )
    out.append(
        "  plan (%s%s): site %s, %s, %s"
        % (f.where, ", recomputed" if f.recomputed else "", f.stamp.get("site", "?"), f.model or "no model", lay)
    )
    if f.plan:
        keys = ("task", "precision", "seq", "gbs", "mbs", "zero", "recompute")
        out.append("        " + " ".join("%s=%s" % (k, f.plan[k]) for k in keys if k in f.plan))
    out.append("  measured: %s%s" % (r.measured.source, "; also in the log: " + ", ".join(r.also) if r.also else ""))
    if r.steady_n and not r.measured.whole_run and r.measured.serving is None:
        out.append(
            "  steady state: %d interval%s after %d warm-up step%s"
            % (r.steady_n, "" if r.steady_n == 1 else "s", r.warmup, "" if r.warmup == 1 else "s")
        )
    out.append("")
    width = max(len(t.label) + len(t.unit) + 3 for t in r.terms)
    out.append("  %-*s %12s %12s %9s  %s" % (width, "term", "plan", "measured", "error", "band"))
    for t in r.terms:
        e = t.error
        inside = t.inside(expect) if expect is not None else t.inside()
        limit = expect if expect is not None else t.band
        verdict = "" if inside is None else ("inside" if inside else "OUTSIDE")
        band = (
            "+-%g%% %s" % (limit, verdict)
            if limit is not None and e is not None
            else ("none stated" if t.band is None else "-")
        )
        label = t.label + (" (%s)" % t.unit if t.unit else "")
        out.append(
            "  %-*s %12s %12s %9s  %s"
            % (
                width,
                label,
                _fmt(t.plan, t.unit),
                _fmt(t.measured, t.unit),
                "-" if e is None else "%+.1f%%" % (100 * e),
                band,
            )
        )
    out.append("")
    for t in r.terms:
        if t.how and t.measured is not None:
            out.append("  %s: %s" % (t.label, t.how))
    v = r.versions
    fp = []
    if v.framework:
        fp.append(v.framework)
    if v.nccl:
        fp.append("NCCL " + v.nccl)
    fp.extend("%s=%s" % kv for kv in sorted(v.env.items()) if kv[0] != "nodes")
    if fp:
        out.append("  fingerprint: " + ", ".join(fp))
    for note in r.notes:
        out.append("  note: %s" % note)
    for ln, text in r.measured.evidence:
        out.append("   %6d | %s" % (ln, text if len(text) <= 160 else text[:157] + "..."))
    return "\n".join(out) + "\n"


# ---------------------------------------------------------------------------
# From a target to a report


def resolve_report_site(wanted: Optional[str], stamp_site: Optional[str], environ: Any) -> Tuple[Optional[Site], str]:
    """The site to read the run against: --site, else the stamp's (a preset or the site in effect
    when its name matches), else none (the report still compares figures, the record needs it)."""
    from ..site import resolve_site

    if wanted:
        return resolve_site(wanted, environ)
    if stamp_site:
        try:
            site, notice = resolve_site(stamp_site, environ)
            return site, notice.replace("(--site: ", "(named by the job's stamp: ", 1)
        except SlurmgpuError:
            pass
    try:
        site, notice = resolve_site(None, environ)
    except SlurmgpuError as exc:
        return None, "no site config (%s)" % str(exc).splitlines()[0]
    if stamp_site and site.name != stamp_site:
        return None, "the job ran on site %s, which is neither a preset nor the site in effect (%s): pass --site" % (
            stamp_site,
            site.name,
        )
    return site, notice


def report_target(
    target: str,
    environ: Any,
    script_path: Optional[str] = None,
    site_name: Optional[str] = None,
    fmt: Optional[str] = None,
    warmup: Optional[int] = None,
    runner: Any = None,
) -> Tuple[RunReport, Optional[Site], str]:
    """Read a job (id) or log file, find its plan, hold the measured figures against it."""
    from ..node.doctor import read_log

    src = read_log(target, runner)
    script = src.script
    label = "batch script of job %s" % src.job_id if src.job_id else "batch script"
    if src.script_from == "sacct":
        label += " (sacct)"
    if script_path:
        try:
            with open(script_path, errors="replace") as fh:
                script = fh.read()
        except OSError as exc:
            raise SlurmgpuError("cannot read --script %s: %s" % (script_path, exc.strerror or exc)) from None
        label = script_path
    facts = find_plan(src.text, script, label)
    if facts is None:
        raise SlurmgpuError(
            "%s: no slurmgpu stamp (`# slurmgpu: site=... tp=...`) in %s: report compares a run with the plan of a "
            "script slurmgpu wrote; give that script with --script FILE"
            % (src.label, "the batch script or the log" if script else "the log (and Slurm kept no batch script)")
        )
    site, notice = resolve_report_site(site_name, facts.stamp.get("site"), environ)
    return build(src, facts, fmt=fmt, warmup=warmup, site=site), site, notice


def rebuild_plan(site: Site, facts: PlanFacts) -> Any:
    """The Plan the plan line describes, planned again on `site` with everything pinned (for the
    explain view's memory and time sections; the report's figures stay the plan line's)."""
    from ..plan import PlanRequest, get_model, make_plan

    if not facts.model:
        raise SlurmgpuError("the script names no model")
    s, p = facts.stamp, facts.plan
    pins = {k: int(s[k]) for k in ("tp", "pp", "dp", "cp", "ep") if s.get(k, "").isdigit()}
    if p.get("mbs", "").isdigit():
        pins["micro_batch"] = int(p["mbs"])
    vp = int(p["vp"]) if p.get("vp", "").isdigit() and int(p["vp"]) > 1 else None
    req = PlanRequest(
        model=get_model(facts.model),
        task=p.get("task") or "pretrain",
        partition=p.get("partition") or None,
        gpus=facts.world,
        seq=int(p["seq"]) if p.get("seq", "").isdigit() else None,
        global_batch=int(p["gbs"]) if p.get("gbs", "").isdigit() else None,
        precision=p.get("precision") or "bf16",
        pins=pins,
        zero=int(p["zero"]) if p.get("zero", "").isdigit() else None,
        recompute=p.get("recompute") or None,
        virtual_stages=vp,
    )
    return make_plan(site, req)
