"""`report` and `calibrate`: a finished run against its plan, and the site's efficiency from its runs."""

from __future__ import annotations

import os
import sys
from typing import Any, List, Optional, Tuple

import click

from .. import vocab
from ..errors import SlurmgpuError
from .app import exits, main
from .common import OUTPUT_FILE, _emit_json
from .complete import complete_files


def _percent(ctx: click.Context, param: click.Parameter, value: Optional[str]) -> Optional[Tuple[str, float]]:
    """--expect-within 10% | 10 | band -> ("pct", 10.0) | ("band", 0.0)."""
    if value is None:
        return None
    v = value.strip().lower()
    if v == "band":
        return ("band", 0.0)
    try:
        pct = float(v.rstrip("%"))
    except ValueError:
        raise click.BadParameter("a percentage such as 10%% or the word band, got %r" % value) from None
    if not 0 < pct < 1000:
        raise click.BadParameter("a percentage above 0, got %r" % value)
    return ("pct", pct)


@main.command("report")
@click.argument("targets", metavar="JOBID|LOGFILE...", nargs=-1, required=True, shell_complete=complete_files)
@click.option(
    "--site",
    "site_name",
    metavar="NAME|PATH",
    help="Site config (default: the site named in the job's stamp, else the site in effect).",
)
@click.option(
    "--script",
    "script_path",
    metavar="FILE",
    type=click.Path(dir_okay=False),
    help="The job's batch script, when neither Slurm (scontrol, or sacct with AccountingStoreFlags=job_script) "
    "nor the log has its stamp and plan line.",
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(vocab.REPORT_FORMATS),
    help="Which framework's lines to read (default: the launcher's, else the first found).",
)
@click.option(
    "--warmup",
    type=click.IntRange(0),
    metavar="STEPS",
    help="Steps to leave out as warm-up (default: the first logged interval and the first 10%% of steps).",
)
@click.option(
    "--expect-within",
    "expect",
    metavar="PCT|band",
    callback=_percent,
    help="Exit 1 when a measured term (step time, tokens/s/GPU, MFU, memory) is further than PCT from the plan "
    "(e.g. 10%%); `band`: the plan's own stated band, for the speed terms.",
)
@click.option("--record", is_flag=True, help="Append each run to the site's runs file (what `calibrate` fits).")
@click.option(
    "--runs",
    "runs_file",
    metavar="FILE",
    type=click.Path(dir_okay=False),
    help="The runs file --record appends to (default: the site's paths.runs, else "
    "$XDG_DATA_HOME/slurmgpu/runs/SITE.tsv).",
)
@click.option(
    "--diff",
    is_flag=True,
    help="With two runs of the same spec: what changed between them (nodes, image, environment, versions, figures).",
)
@click.option(
    "--html",
    "html_file",
    metavar="FILE",
    type=OUTPUT_FILE,
    help="Also write the explain view with the measured figures beside the plan's (one run).",
)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output (a list, one object per run).")
@exits(
    (0, "reported (with --expect-within: every measured term inside)"),
    (1, "a term outside --expect-within (or none it could check), or a log without any progress line report reads"),
    (2, "the job, its log or its plan cannot be found or read, or a usage error"),
)
def report_cmd(
    targets: Tuple[str, ...],
    site_name: Optional[str],
    script_path: Optional[str],
    fmt: Optional[str],
    warmup: Optional[int],
    expect: Optional[Tuple[str, float]],
    record: bool,
    runs_file: Optional[str],
    diff: bool,
    html_file: Optional[str],
    as_json: bool,
) -> None:
    """Hold a finished run against the plan it was launched from, term by term.

    Finds the plan in the job's batch script (scontrol, or sacct with AccountingStoreFlags=job_script)
    or in the log, where generated scripts echo their stamp and `# slurmgpu-plan:` line; reads the
    figures the framework printed (Megatron-LM and Megatron-Bridge iteration and memory lines,
    torchtitan's metrics, DeepSpeed's throughput timer, the HF Trainer's train metrics, vLLM and
    SGLang benchmark summaries and engine stats), leaves out warm-up, and prints plan vs measured:
    step time, tokens/s per GPU, MFU and peak memory per GPU, with the plan's stated error band.
    `slurmgpu docs report` has the formats and a worked example.

    \b
    Examples:
      slurmgpu report 123456
      slurmgpu report slurm-123456.out --script job.sh --json
      slurmgpu report 123456 --expect-within 10%
      slurmgpu report 123456 --record
      slurmgpu report --diff 123456 123789
      slurmgpu report 123456 --html report.html
    """
    from ..runs.report import report_target

    if diff and len(targets) != 2:
        raise click.UsageError("--diff compares two runs: give two JOBIDs or LOGFILEs")
    if html_file and len(targets) != 1:
        raise click.UsageError("--html draws one run: give one JOBID or LOGFILE")
    if script_path and len(targets) != 1:
        raise click.UsageError("--script is one job's batch script: give one JOBID or LOGFILE with it")
    results: List[Tuple[Any, Any]] = []
    notices = set()
    for t in targets:
        rep, site, notice = report_target(t, os.environ, script_path, site_name, fmt, warmup)
        results.append((rep, site))
        if notice and not as_json:
            notices.add(notice)
    for n in sorted(notices):
        click.echo(n if n.startswith("slurmgpu:") else "note: " + n, err=True)
    if diff:
        _diff(results, as_json)
        return
    if html_file:
        from .explain_out import report_view

        report_view(results[0][1], results[0][0], html_file)
    pct = None if expect is None or expect[0] == "band" else expect[1]
    failed = [r for r, _ in results if expect is not None and (r.outside(pct) or not r.checked(pct))]
    if record:
        _record(results, runs_file)
    if as_json:
        out = []
        for r, _ in results:
            d = r.to_dict()
            if expect is not None:
                d["expect_within_pct"] = pct if pct is not None else "band"
                d["outside"] = [t.name for t in r.outside(pct)]
                d["checked"] = [t.name for t in r.checked(pct)]
            out.append(d)
        _emit_json(out)
    else:
        from ..runs.report import render_text

        for i, (r, _) in enumerate(results):
            if i:
                click.echo("")
            click.echo(render_text(r, pct), nl=False)
            if expect is not None:
                bad = r.outside(pct)
                verdict = "every measured term inside"
                if bad:
                    verdict = "OUTSIDE (%s)" % ", ".join(t.label for t in bad)
                elif not r.checked(pct):
                    verdict = "NOTHING CHECKED: no term has both figures%s" % (
                        " and a stated band (give a percentage)" if pct is None else ""
                    )
                click.echo("  expect-within %s: %s" % ("%g%%" % pct if pct is not None else "the plan's band", verdict))
    if failed:
        sys.exit(1)


def _record(results: List[Tuple[Any, Any]], runs_file: Optional[str]) -> None:
    import datetime

    from ..runs.record import append_run, record_of
    from ..site.calibration import runs_path

    when = datetime.datetime.now().replace(microsecond=0).isoformat()
    for rep, site in results:
        if site is None:
            raise SlurmgpuError(
                "--record needs the site the job ran on (%s): pass --site" % rep.facts.stamp.get("site", "?")
            )
        path = runs_file or runs_path(site.name, site.runs_file, os.environ)
        try:
            _, msg = append_run(path, record_of(rep, site, when), site.name)
        except OSError as exc:
            raise SlurmgpuError("cannot write the runs file %s: %s" % (path, exc.strerror or exc)) from None
        click.echo("slurmgpu: %s" % msg, err=True)


def _diff(results: List[Tuple[Any, Any]], as_json: bool) -> None:
    import datetime

    from ..runs.record import RunRecord, diff_records, record_of

    when = datetime.datetime.now().replace(microsecond=0).isoformat()
    recs: List[RunRecord] = [record_of(rep, site, when) for rep, site in results]
    d = diff_records(recs[0], recs[1])
    names = [r.source for r, _ in results]
    if as_json:
        _emit_json(
            {
                "runs": names,
                "same_spec": not d["spec"],
                **{k: [{"column": c, "first": a, "second": b} for c, a, b in v] for k, v in d.items()},
            }
        )
        return
    click.echo("slurmgpu report --diff: %s vs %s" % tuple(names))
    if d["spec"]:
        click.echo("  not the same spec:")
        for c, a, b in d["spec"]:
            click.echo("    %-24s %s -> %s" % (c, a or "-", b or "-"))
    else:
        click.echo(
            "  same spec (%s, %s GPUs, %s)"
            % (recs[0].get("catalogue_model") or "?", recs[0].get("gpus"), recs[0].get("precision"))
        )
    for title, key in (("what it ran with", "fingerprint"), ("what it measured", "figures")):
        rows = d[key]
        if not rows:
            click.echo("  %s: no change" % title)
            continue
        click.echo("  %s:" % title)
        for c, a, b in rows:
            extra = ""
            try:
                extra = "  (%+.1f%%)" % (100 * (float(b) / float(a) - 1)) if key == "figures" else ""
            except (ValueError, ZeroDivisionError):
                pass
            click.echo("    %-24s %s -> %s%s" % (c, a or "-", b or "-", extra))


@main.command("calibrate")
@click.option("--site", "site_name", metavar="NAME|PATH", help="Site config (default: the site in effect).")
@click.option(
    "--runs",
    "runs_file",
    metavar="FILE",
    type=click.Path(dir_okay=False),
    help="Runs to fit (default: the site's paths.runs, else $XDG_DATA_HOME/slurmgpu/runs/SITE.tsv).",
)
@click.option(
    "-o",
    "--output",
    "out_file",
    metavar="FILE",
    type=OUTPUT_FILE,
    help="Calibration file to write (default: the site's paths.calibration, else "
    "$XDG_DATA_HOME/slurmgpu/calibration/SITE.yaml, which plan/gen/check/report then use).",
)
@click.option(
    "--min-runs",
    type=click.IntRange(3),
    default=5,
    show_default=True,
    help="Refuse to fit a GPU model from fewer runs.",
)
@click.option("--dry-run", is_flag=True, help="Fit and print the errors; write nothing.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@exits(
    (0, "fitted (and the calibration file written unless --dry-run)"),
    (1, "refused: too few runs of every GPU model, or nothing the runs can fit"),
    (2, "no runs file, a runs file that cannot be read, or a usage error"),
)
def calibrate_cmd(
    site_name: Optional[str],
    runs_file: Optional[str],
    out_file: Optional[str],
    min_runs: int,
    dry_run: bool,
    as_json: bool,
) -> None:
    """Fit the cost model's efficiency terms to this site's measured runs.

    Fits the GEMM (BF16, FP8) and attention shares of peak and the NVLink and NIC efficiency of
    each GPU model to the site's runs file (rows `slurmgpu report --record` appended), with the
    planner itself predicting each run's pinned layout. Prints the tokens/s/GPU error before and
    after, the latter leave-one-out (each run predicted by a fit without it), and writes the site's
    calibration file: plan, gen, check and report use it from then on, say so in the plan's notes
    and the script header, and state its leave-one-out error as their band. A factor is fitted only
    where enough runs depend on it and never beyond its physical limit (peak FLOP/s, line rate).
    `slurmgpu docs report` has a worked example.

    \b
    Examples:
      slurmgpu calibrate --site dgx-h100 --dry-run
      slurmgpu calibrate --runs runs.tsv --site dgx-h100 -o cal.yaml --json
    """
    from ..runs.calibrate import calibrate, render_text
    from ..site import resolve_site
    from ..site.calibration import calibration_path, calibration_text, runs_path

    site, notice = resolve_site(site_name, os.environ)
    if not as_json:
        click.echo(notice, err=True)
    runs = runs_file or runs_path(site.name, site.runs_file, os.environ)
    if not os.path.exists(runs):
        raise SlurmgpuError(
            "no runs file at %s: record runs with `slurmgpu report JOBID --record`%s"
            % (runs, "" if runs_file else " (or pass --runs FILE)")
        )
    out = out_file or calibration_path(site.name, site.calibration_file, os.environ)
    progress = None if as_json else (lambda msg: click.echo("calibrate: %s" % msg, err=True))
    result = calibrate(site, runs, out, min_runs=min_runs, progress=progress)
    wrote = None
    if result.calibration is not None and not dry_run:
        try:
            os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
            from .explain_out import write_text

            write_text(out, calibration_text(result.calibration))
        except OSError as exc:
            raise SlurmgpuError("cannot write %s: %s" % (out, exc.strerror or exc)) from None
        wrote = out
    if as_json:
        d = result.to_dict()
        d["written"] = wrote
        _emit_json(d)
    else:
        click.echo(render_text(result, wrote), nl=False)
    if result.calibration is None:
        sys.exit(1)
