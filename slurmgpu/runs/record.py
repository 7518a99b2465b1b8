"""The site's runs file: one row per measured run, the columns of bench/data/calibration_runs.tsv.

`slurmgpu report --record` appends a row; `slurmgpu calibrate` fits the site's efficiency to the
rows. The first columns are exactly the project's calibration table's (so a site's runs and the
published runs are one format, read by one reader), then the fingerprint a run needs to be told
apart from another run of the same spec: job id, nodes, image, Python environment hash,
framework and NCCL versions.
"""

from __future__ import annotations

import csv
import io
import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Dict, List, Mapping, Optional, Sequence, Tuple

from ..errors import ConfigError, Issue, SlurmgpuError
from .logs import GIB

if TYPE_CHECKING:
    from ..plan.calibrate import MeasuredRun
    from ..site import Site
    from .report import RunReport

# bench/data/calibration_runs.tsv's header, in order (tests/test_report.py keeps the two equal)
CALIBRATION_COLUMNS = (
    "name", "source", "gpu", "gpus", "layers", "hidden", "heads", "kv_heads", "ffn", "vocab", "seq", "experts",
    "experts_active", "moe_ffn", "shared_experts", "dense_layers", "head_dim", "gated", "precision", "task", "gbs",
    "mbs", "tp", "pp", "cp", "ep", "vp", "dp", "zero", "recompute", "metric_kind", "metric_value",
    "measured_tokens_s_gpu", "measured_mfu_model_bf16", "measured_mem_gib", "layout_only", "uncertain", "notes",
    "source_id", "catalogue_model",
)  # fmt: skip
# what a site's run adds: where it ran and what it ran with
FINGERPRINT_COLUMNS = (
    "site", "partition", "gpu_model", "job_id", "launcher", "framework", "framework_version",
    "nccl_version", "torch_version", "env_hash", "image", "nodes", "step_time_s", "plan_tokens_s_gpu",
    "plan_band_pct", "recorded",
)  # fmt: skip
COLUMNS = CALIBRATION_COLUMNS + FINGERPRINT_COLUMNS
FINGERPRINT = (
    "image",
    "env_hash",
    "framework_version",
    "torch_version",
    "nccl_version",
    "nodes",
)  # what --diff compares
SPEC = (
    "catalogue_model", "site", "partition", "gpus", "precision", "task", "seq", "gbs", "mbs", "tp", "pp", "cp", "ep",
    "vp", "dp", "zero", "recompute",
)  # fmt: skip


@dataclass(frozen=True)
class RunRecord:
    """One row of the runs file (every value a string, '' for unknown, as in the TSV)."""

    values: Mapping[str, str] = field(default_factory=dict)

    def get(self, key: str) -> str:
        return self.values.get(key, "") or ""

    def row(self) -> List[str]:
        return [_cell(self.get(c)) for c in COLUMNS]


def _cell(v: str) -> str:
    """A TSV cell: tabs and line breaks would break the row."""
    return " ".join(str(v).split()) if any(ch in str(v) for ch in "\t\r\n") else str(v)


def header(site: str) -> str:
    return (
        "# slurmgpu runs of site %s, one row per run (`slurmgpu report JOBID --record` appends; `slurmgpu "
        "calibrate` fits to them).\n# Columns: those of bench/data/calibration_runs.tsv, then the run's "
        "fingerprint (job, nodes, image, environment, versions).\n" % site
    )


def read_runs(path: str) -> List[RunRecord]:
    """The rows of a runs file (comment lines skipped); a clear error for a file that is not one."""
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except OSError as exc:
        raise ConfigError(
            [Issue(path, None, None, "", "cannot read the runs file: %s" % (exc.strerror or exc))]
        ) from None
    lines = [ln for ln in text.splitlines() if ln.strip() and not ln.startswith("#")]
    if not lines:
        return []
    head = lines[0].split("\t")
    missing = [c for c in ("name", "gpus", "precision", "tp", "measured_tokens_s_gpu") if c not in head]
    if missing:
        raise ConfigError(
            [
                Issue(
                    path,
                    None,
                    None,
                    "",
                    "not a runs file: the header lacks %s (expected the columns of "
                    "bench/data/calibration_runs.tsv)" % ", ".join(missing),
                )
            ]  # fmt: skip
        )
    out = []
    for row in csv.DictReader(lines, delimiter="\t", quoting=csv.QUOTE_NONE):
        out.append(RunRecord({k: (v or "") for k, v in row.items() if k is not None}))
    return out


def append_run(path: str, rec: RunRecord, site: str) -> Tuple[bool, str]:
    """Append `rec` (a new file gets the header); (False, why) when that job is already recorded.

    The new file is written whole through a temporary file; an existing one is appended with one
    write of one line, so a concurrent reader never sees half a row."""
    job = rec.get("job_id")
    if os.path.exists(path):
        for i, old in enumerate(read_runs(path), 1):
            if job and old.get("job_id") == job and old.get("site") == rec.get("site"):
                return False, "job %s is already recorded in %s (row %d); nothing appended" % (job, path, i)
        line = "\t".join(rec.row()) + "\n"
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(line)
        return True, "appended job %s to %s" % (job or rec.get("name"), path)
    d = os.path.dirname(os.path.abspath(path))
    os.makedirs(d, exist_ok=True)
    buf = io.StringIO()
    buf.write(header(site))
    buf.write("\t".join(COLUMNS) + "\n")
    buf.write("\t".join(rec.row()) + "\n")
    import tempfile

    fd, tmp = tempfile.mkstemp(prefix=".runs.", dir=d)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(buf.getvalue())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return True, "created %s with job %s" % (path, job or rec.get("name"))


def _int(v: str, default: int = 0) -> int:
    v = v.strip()
    return int(float(v)) if v else default


def measured_run(rec: RunRecord, path: str, line: int, site: Site) -> MeasuredRun:
    """A row as the fit reads it, on `site` with its layout pinned; ConfigError naming the row and
    column when it cannot be read."""
    from ..plan import PlanRequest, get_model
    from ..plan.calibrate import MeasuredRun
    from ..plan.models import ModelSpec

    def bad(col: str, why: str) -> ConfigError:
        return ConfigError([Issue(path, line, None, col, why)])

    try:
        measured = float(rec.get("measured_tokens_s_gpu"))
    except ValueError:
        raise bad(
            "measured_tokens_s_gpu", "no measured tokens/s/GPU (got %r)" % rec.get("measured_tokens_s_gpu")
        ) from None
    if not measured > 0:
        raise bad("measured_tokens_s_gpu", "must be positive, got %r" % measured)
    model = None
    if rec.get("catalogue_model"):
        try:
            model = get_model(rec.get("catalogue_model"))
        except ConfigError:
            model = None
    try:
        if model is None:
            experts = _int(rec.get("experts"))
            model = ModelSpec(
                name=rec.get("name"),
                layers=_int(rec.get("layers")),
                hidden=_int(rec.get("hidden")),
                heads=_int(rec.get("heads")),
                kv_heads=_int(rec.get("kv_heads")),
                ffn=_int(rec.get("ffn")),
                vocab=_int(rec.get("vocab")),
                seq=_int(rec.get("seq")),
                experts=experts,
                experts_active=_int(rec.get("experts_active")),
                moe_ffn=_int(rec.get("moe_ffn")) or None,
                head_dim=_int(rec.get("head_dim")) or None,
                gated=rec.get("gated") == "True",
                shared_experts=_int(rec.get("shared_experts")),
                dense_layers=_int(rec.get("dense_layers")),
            )
            if not (model.layers and model.hidden and model.heads and model.vocab):
                raise bad(
                    "layers", "the row names no catalogue model and lacks its shape (layers, hidden, heads, vocab)"
                )
        zero = rec.get("zero").strip()
        pp = _int(rec.get("pp"), 1)
        pins = {
            "tp": _int(rec.get("tp"), 1),
            "pp": pp,
            "dp": _int(rec.get("dp"), 1),
            "cp": _int(rec.get("cp"), 1),
            "ep": _int(rec.get("ep"), 1),
            "micro_batch": _int(rec.get("mbs"), 1),
        }
        request = PlanRequest(
            model=model,
            task=rec.get("task") or "pretrain",
            partition=rec.get("partition") or None,
            gpus=_int(rec.get("gpus")),
            seq=_int(rec.get("seq")) or model.seq,
            global_batch=_int(rec.get("gbs")),
            precision=rec.get("precision") or "bf16",
            pins=pins,
            zero=int(zero) if zero else None,
            recompute=rec.get("recompute").strip() or None,
            virtual_stages=_int(rec.get("vp"), 1) if pp > 1 else None,
        )
        name = rec.get("name") or "row %d" % line
        return MeasuredRun(name, rec.get("source_id") or name, site, request, measured)
    except ValueError as exc:
        raise bad("", "a number column does not hold a number (%s)" % exc) from None


def diff_records(a: RunRecord, b: RunRecord) -> Dict[str, List[Tuple[str, str, str]]]:
    """(column, first, second) that differ: the spec (should be none), the fingerprint, the figures."""

    def changed(cols: Sequence[str]) -> List[Tuple[str, str, str]]:
        return [(c, a.get(c), b.get(c)) for c in cols if a.get(c) != b.get(c)]

    return {
        "spec": changed(SPEC),
        "fingerprint": changed(FINGERPRINT),
        "figures": changed(("step_time_s", "measured_tokens_s_gpu", "measured_mfu_model_bf16", "measured_mem_gib")),
    }


def _hostlist(nodes: Sequence[str]) -> str:
    from ..slurm import compress_hostlist

    return compress_hostlist(nodes)


def record_of(r: RunReport, site: Optional[Site], when: str) -> RunRecord:
    """The runs-file row of a report: what ran (plan line, stamp, model shape) and what it measured."""
    from ..plan import get_model

    f = r.facts
    if not f.plan:
        raise SlurmgpuError("cannot record %s: the script has no plan line to say what ran" % r.source)
    tps = r.term("tokens_per_s_gpu")
    if tps is None or tps.measured is None:
        raise SlurmgpuError("cannot record %s: no tokens/s per GPU measured (%s)" % (r.source, r.measured.source))
    v: Dict[str, str] = {}
    model = None
    if f.model:
        try:
            model = get_model(f.model)
        except SlurmgpuError:
            model = None
    if model is not None:
        v.update(
            layers=str(model.layers), hidden=str(model.hidden), heads=str(model.heads), kv_heads=str(model.kv_heads),
            ffn=str(model.ffn), vocab=str(model.vocab), experts=str(model.experts or ""),
            experts_active=str(model.experts_active or ""), moe_ffn=str(model.moe_ffn or ""),
            shared_experts=str(model.shared_experts or ""), dense_layers=str(model.dense_layers or ""),
            head_dim=str(model.head_dim or ""), gated=str(model.gated),
        )  # fmt: skip
    st, pl = f.stamp, f.plan
    part = pl.get("partition") or ""
    gpu_key = gpu_model = ""
    peak_ratio = None
    if site is not None:
        from ..site import lookup

        try:
            nt = site.node_type_of(part or None)
            gpu_model = nt.gpu_model
            facts = lookup(nt.gpu_model)
            gpu_key = facts.key if facts is not None else nt.gpu_model
            peak_ratio = 2.0 if pl.get("precision") == "fp8" and facts is not None and facts.fp8 else 1.0
        except SlurmgpuError:
            pass
    mfu = r.term("mfu")
    mem = r.term("memory") or r.term("weights")
    step = r.term("step_time")
    ver = r.versions
    env = ver.env
    fw_ver = ver.framework or next(
        ("%s %s" % (k, env[k]) for k in ("megatron-core", "megatron-bridge", "deepspeed", "torchtitan", "vllm",
                                           "sglang", "accelerate", "transformers") if k in env), "")  # fmt: skip
    nccl = ver.nccl or next((v for k, v in sorted(env.items()) if "nccl" in k), "")
    v.update(
        name="%s-%s" % (f.model or "run", ("job" + r.job_id) if r.job_id else when.replace(":", "")),
        source="slurmgpu report %s" % r.source,
        gpu=gpu_key,
        gpus=str(f.world),
        seq=pl.get("seq", ""),
        precision=pl.get("precision", ""),
        task=pl.get("task", ""),
        gbs=pl.get("gbs", ""),
        mbs=pl.get("mbs", ""),
        tp=st.get("tp", ""),
        pp=st.get("pp", ""),
        cp=st.get("cp", ""),
        ep=st.get("ep", ""),
        dp=st.get("dp", ""),
        vp=pl.get("vp", ""),
        zero=pl.get("zero", ""),
        recompute=pl.get("recompute", ""),
        metric_kind="%s (%s)" % (tps.how or "tokens/s per GPU", r.measured.framework),
        metric_value="%.6g" % tps.measured,
        measured_tokens_s_gpu="%.6g" % tps.measured,
        measured_mfu_model_bf16="%.4f" % (mfu.measured * peak_ratio) if mfu and mfu.measured and peak_ratio else "",
        measured_mem_gib="%.3f" % (mem.measured / GIB) if mem and mem.measured else "",
        layout_only="False",
        uncertain=str(bool(r.measured.whole_run or any("include warm-up" in n for n in r.notes))),
        notes="; ".join(r.notes)[:500],
        catalogue_model=f.model or "",
        source_id="%s-%s" % (st.get("site", "site"), ("job" + r.job_id) if r.job_id else when.replace(":", "")),
        site=st.get("site", ""),
        partition=part,
        gpu_model=gpu_model,
        job_id=r.job_id or "",
        launcher=pl.get("launcher", ""),
        framework=r.measured.framework,
        framework_version=fw_ver,
        nccl_version=nccl,
        torch_version=env.get("torch", ""),
        env_hash=env.get("env_hash", ""),
        image=env.get("image", ""),
        nodes=_hostlist(r.nodes) if r.nodes else env.get("nodes", ""),
        step_time_s="%.6g" % step.measured if step and step.measured else "",
        plan_tokens_s_gpu=pl.get("tokens_s_gpu", ""),
        plan_band_pct=pl.get("band", ""),
        recorded=when,
    )
    return RunRecord(v)
