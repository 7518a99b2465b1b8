"""`preflight` and `doctor`."""

from __future__ import annotations

import os
import sys
from typing import Any, Mapping, Optional

import click

from .. import vocab
from ..errors import SlurmgpuError
from ..site import SitePreflight
from .app import exits, main
from .common import OUTPUT_FILE, _emit_json, _load_site, complete_files


@main.command("preflight")
@click.option("--site", "site_name", metavar="NAME|PATH", help="Site config (default: the site in effect).")
@click.option(
    "--partition", help="Partition whose node type to expect (default: $SLURM_JOB_PARTITION, else the site's default)."
)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option(
    "--record",
    is_flag=True,
    help="Print this node's result as SLURMGPU-PREFLIGHT record lines for "
    "--aggregate (what generated scripts run on every node).",
)
@click.option(
    "--aggregate",
    metavar="FILE",
    help="Read the record lines of all nodes (FILE, or - for stdin), print "
    "one table, failing nodes first; exit 1 if any node failed.",
)
@click.option(
    "--nodes",
    "expect_nodes",
    metavar="HOSTLIST",
    help='With --aggregate: nodes that must report, e.g. "$SLURM_JOB_NODELIST".',
)
@click.option(
    "--stamp",
    "stamp_line",
    metavar="LINE",
    help="With --aggregate: the job's stamp line (`# slurmgpu: tp=.. cp=.. ep=.. gpus_per_node=..`); "
    "on multi-node NVLink sites (NVL72) every TP/CP/EP group must then report one ClusterUUID/CliqueId.",
)
@click.option(
    "--rank-source",
    type=click.Choice(("procid", "nodeid", "hostname")),
    help="With --aggregate --stamp: what the launcher numbers its ranks by (srun tasks, SLURM_NODEID, "
    "torchrun's host-name order); the groups are placed on the nodes in that order as each node's "
    "record reports it (default: the --nodes order).",
)
@click.option(
    "--bandwidth",
    is_flag=True,
    help="Run a short NCCL all-reduce instead (one task per GPU, needs "
    "PyTorch); fails below --min-bandwidth-fraction of the links' speed.",
)
@click.option(
    "--bandwidth-size-mb",
    type=click.IntRange(1, 16384),
    default=256,
    show_default=True,
    help="All-reduce buffer for --bandwidth.",
)
@click.option(
    "--min-bandwidth-fraction",
    type=click.FloatRange(0.0, 1.0),
    help="--bandwidth fails below this share of the expected bus bandwidth "
    "(default: the site's preflight.min_bandwidth_fraction, %g unless set)." % SitePreflight.min_bandwidth_fraction,
)
@click.option(
    "--bandwidth-backend",
    type=click.Choice(("auto", "nccl", "gloo")),
    default="auto",
    show_default=True,
    help="auto = NCCL on GPUs; gloo times a CPU all-reduce (to test the fan-out without GPUs).",
)
@click.option(
    "--nccl-diag",
    is_flag=True,
    help="With --bandwidth: run NCCL's own diagnostics (NCCL 2.31+, NCCL_RUN_DIAGNOSTICS=1 and "
    "NCCL_RUN_RAS_DIAGNOSTICS=1) when its communicator starts, the job's first; the NCCL DIAG report "
    "lands in the aggregated output, where `slurmgpu doctor` places its ranks.",
)
@click.option(
    "--port",
    "rdzv_port",
    type=click.IntRange(1, 65535),
    help="Rendezvous port that must be free on the first node (default: $MASTER_PORT or 29500).",
)
@click.option(
    "--first-node/--not-first-node",
    default=None,
    help="Whether this node hosts the rendezvous (default: $SLURM_NODEID is 0).",
)
@click.option(
    "--container-runtime", type=click.Choice(vocab.RUNTIMES), help="Runtime the job uses (default: the site's)."
)
@click.option(
    "--checkpoint-dir",
    metavar="DIR",
    help="Where the job writes checkpoints (default: $SLURMGPU_CHECKPOINT_DIR, else the site's paths.checkpoint).",
)
@click.option(
    "--min-free-gb",
    type=click.FloatRange(0.0),
    help="Free space the checkpoint directory needs (default: the site's preflight.min_free_gb, %g)."
    % SitePreflight.min_free_gb,
)
@click.option(
    "--ranks",
    "ranks_how",
    type=click.Choice(("srun", "torchrun", "deepspeed", "accelerate", "vllm", "sglang")),
    help="Check this task as one rank (one task per GPU, launched with the job's binding): its real CPUs "
    "(sched_getaffinity), memory policy, its GPU's NUMA node and NIC against the site's affinity map, for a "
    "job whose launcher binds as HOW (`slurmgpu docs affinity`).",
)
@click.option(
    "--ranks-per-node",
    type=click.IntRange(1),
    metavar="N",
    help="With --aggregate: every node must also send N rank records (the --ranks step).",
)
@click.option("--strict", is_flag=True, help="Treat warnings as failures.")
@exits(
    (0, "every check passed (warnings allowed unless --strict)"),
    (1, "a check failed on a node (the FAIL rows say what to fix)"),
)
def preflight_cmd(
    site_name: Optional[str],
    partition: Optional[str],
    as_json: bool,
    record: bool,
    aggregate: Optional[str],
    expect_nodes: Optional[str],
    stamp_line: Optional[str],
    rank_source: Optional[str],
    bandwidth: bool,
    bandwidth_size_mb: int,
    min_bandwidth_fraction: Optional[float],
    bandwidth_backend: str,
    nccl_diag: bool,
    rdzv_port: Optional[int],
    first_node: Optional[bool],
    container_runtime: Optional[str],
    checkpoint_dir: Optional[str],
    min_free_gb: Optional[float],
    ranks_how: Optional[str],
    ranks_per_node: Optional[int],
    strict: bool,
) -> None:
    """Check this node before a multi-node job starts; exit 1 with node, check, found, expected, fix.

    Checks GPUs (count, model) and NVLink, every HCA of NCCL_IB_HCA (exists, ACTIVE, link layer),
    the socket interface, the NCCL variables (values NCCL ignores silently, prefix lists such as
    mlx5_1 that also match mlx5_10), the rendezvous port, the container runtime and checkpoint space.

    Generated scripts run it on every node and aggregate the records (`slurmgpu docs preflight`).
    For tests, SLURMGPU_PROBE_FIXTURE=DIR reads a recorded node instead of this one.

    \b
    Examples:
      slurmgpu preflight                          # this node, as a table
      srun -N "$SLURM_JOB_NUM_NODES" -n "$SLURM_JOB_NUM_NODES" --ntasks-per-node=1 \\
          slurmgpu preflight --record \\
        | slurmgpu preflight --aggregate - --nodes "$SLURM_JOB_NODELIST" \\
            --stamp "# slurmgpu: site=gb200-nvl72 tp=4 pp=1 dp=8 cp=1 ep=8 nodes=8 gpus_per_node=4"
      srun --ntasks-per-node=8 slurmgpu preflight --bandwidth --record \\
        | slurmgpu preflight --aggregate - --nodes "$SLURM_JOB_NODELIST"
      srun --ntasks-per-node=8 slurmgpu preflight --bandwidth --nccl-diag --record \\
        | slurmgpu preflight --aggregate - --nodes "$SLURM_JOB_NODELIST"
      srun --ntasks-per-node=8 --cpu-bind=none slurmgpu preflight --ranks torchrun --record \\
        | slurmgpu preflight --aggregate - --nodes "$SLURM_JOB_NODELIST" --ranks-per-node 8
    """
    from ..node import preflight as pf

    if nccl_diag and not bandwidth:
        raise click.UsageError(
            "--nccl-diag needs --bandwidth: NCCL runs its diagnostics when a communicator starts, and the "
            "bandwidth check is the preflight step that starts one (or `slurmgpu gen --nccl-diag` for the launch)"
        )
    if aggregate:
        _preflight_aggregate(
            pf, aggregate, expect_nodes, as_json, site_name, strict, stamp_line, partition, rank_source, ranks_per_node
        )
        return
    node = pf.node_name(os.environ)
    key = None
    try:
        s = _load_site(site_name, quiet=record or as_json)
        opts = pf.Options(
            partition=partition,
            rdzv_port=rdzv_port,
            first_node=first_node,
            container_runtime=container_runtime,
            checkpoint_dir=checkpoint_dir,
            min_free_gb=s.preflight.min_free_gb if min_free_gb is None else min_free_gb,
        )
        if min_bandwidth_fraction is None:
            min_bandwidth_fraction = s.preflight.min_bandwidth_fraction
        rep: Optional[Any]
        if ranks_how:
            rep, key = pf.rank_report(s, os.environ, ranks_how, opts)
        elif bandwidth:
            rep = pf.bandwidth_report(
                s,
                os.environ,
                opts,
                size_mb=bandwidth_size_mb,
                fraction=min_bandwidth_fraction,
                backend=bandwidth_backend,
                nccl_diag=nccl_diag,
            )
            if rep is None:  # not local rank 0: rank 0 of the node reports
                return
        else:
            rep = pf.preflight_node(s, os.environ, opts)
    except Exception as exc:  # in --record mode every node must still report, even a crash
        if not record:
            raise
        rep = pf.NodeReport(
            node,
            site_name or "",
            (
                pf.CheckResult(
                    node,
                    "affinity" if ranks_how else "bandwidth" if bandwidth else "preflight",
                    "fail",
                    "%s: %s" % (type(exc).__name__, (str(exc).splitlines() or [""])[0]),
                    "the check runs",
                    "run `slurmgpu preflight%s` on %s to see the whole error"
                    % (" --ranks %s" % ranks_how if ranks_how else " --bandwidth" if bandwidth else "", node),
                ),
            ),
        )
    if not record and not pf.in_job(os.environ):
        click.echo("note: %s" % pf.outside_job_note(node), err=True)
        rep = pf.outside_job(rep)
    failed = not rep.ok or (strict and any(r.status == "warn" for r in rep.results))
    if record:
        if ranks_how and key is None:
            key = "%s/%s" % (node, os.environ.get("SLURM_LOCALID", "0"))
        click.echo(rep.record(key))
    elif as_json:
        _emit_json(rep.to_dict())
    else:
        click.echo(pf.render_table(pf.Aggregate(reports=[rep]), rep.site), nl=False)
    if failed:
        sys.exit(1)


def _preflight_aggregate(
    pf: Any,
    source: str,
    expect_nodes: Optional[str],
    as_json: bool,
    site_name: Optional[str],
    strict: bool,
    stamp_line: Optional[str] = None,
    partition: Optional[str] = None,
    rank_source: Optional[str] = None,
    ranks_per_node: Optional[int] = None,
) -> None:
    from ..slurm import parse_hostlist
    from ..stamp import parse_stamp

    try:
        fh = sys.stdin if source == "-" else open(source, errors="replace")
    except OSError as exc:
        raise SlurmgpuError("cannot read %s: %s" % (source, exc.strerror or exc)) from None
    with fh:
        agg = pf.parse_records(fh, parse_hostlist(expect_nodes) if expect_nodes else ())
    if stamp_line:
        words = parse_stamp(stamp_line)
        if words is None:
            raise SlurmgpuError(
                "--stamp: not a stamp line (expected `# slurmgpu: site=NAME tp=N ...`): %r" % stamp_line
            )
        s = _load_site(site_name or words.get("site"), quiet=True)
        agg.job = pf.check_domain_groups(
            agg,
            s,
            words,
            parse_hostlist(expect_nodes) if expect_nodes else (),
            partition or os.environ.get("SLURM_JOB_PARTITION"),
            rank_source,
        )
    if ranks_per_node:
        agg.job.extend(pf.check_rank_counts(agg, parse_hostlist(expect_nodes) if expect_nodes else (), ranks_per_node))
    site_label = site_name or next((r.site for r in agg.reports if r.site), "")
    if as_json:
        _emit_json(agg.to_dict())
    else:
        click.echo(pf.render_table(agg, site_label), nl=False)
    warned = any(x.status == "warn" for r in agg.reports for x in r.results) or any(x.status == "warn" for x in agg.job)
    if not agg.ok or (strict and warned):
        sys.exit(1)


@main.command("doctor")
@click.argument("target", metavar="JOBID|LOGFILE", shell_complete=complete_files)
@click.option(
    "--site",
    "site_name",
    metavar="NAME|PATH",
    help="Site config for the advice (default: the site named in the job's stamp line, else the site in effect).",
)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option(
    "--html",
    "html_file",
    metavar="FILE",
    type=OUTPUT_FILE,
    help="Also write the explain view to FILE: the job's layout with the failing ranks and nodes highlighted.",
)
@click.option(
    "--nodes",
    "node_list",
    metavar="HOSTLIST",
    help="The job's nodes in order (e.g. gpu[01-04]), so ranks in NCCL DIAG/RAS reports and Xid lines are named "
    "by node (default: the job's NodeList for a JOBID).",
)
@exits(
    (0, "diagnosed: a known failure was recognised (root cause first)"),
    (1, "the log was read but nothing in it was recognised"),
    (2, "the job or its log cannot be found or read (e.g. no Slurm here: pass the log file), or a usage error"),
)
def doctor_cmd(
    target: str, site_name: Optional[str], as_json: bool, html_file: Optional[str], node_list: Optional[str]
) -> None:
    """Explain why a job failed and what to change.

    Reads the job's output (found with scontrol/sacct for a JOBID, or the LOGFILE; - for stdin),
    recognises known failure signatures (NCCL/IB errors, watchdog and socket timeouts,
    unresolvable MASTER_ADDR, port in use, CUDA OOM, container pulls, preemption, ...) and
    lists them root cause first with the fix. NCCL's own reports (NCCL DIAG lines of
    NCCL_RUN_DIAGNOSTICS / NCCL_RUN_RAS_DIAGNOSTICS, `ncclras` status with missing or dead ranks)
    and GPU Xid lines are placed: rank -> node -> local GPU -> TP/PP/DP group, from the stamp.

    \b
    Examples:
      slurmgpu doctor 123456
      slurmgpu doctor slurm-123456.out --site dgx-h100
      slurmgpu doctor train.log --json | jq '.problems[0].id'
      slurmgpu doctor slurm-123456.out --html doctor.html
      ncclras | slurmgpu doctor - --nodes "$SLURM_JOB_NODELIST"
    """
    from ..node import doctor as dr
    from ..site import resolve_site

    src = dr.read_log(target)
    stamp = dr.read_stamp(src.text, src.script)
    site = None
    wanted = site_name or stamp.get("site")
    try:
        site, _ = resolve_site(wanted, os.environ)
    except SlurmgpuError as exc:
        if site_name:
            raise
        click.echo("note: no site config for the advice (%s)" % str(exc).splitlines()[0], err=True)
    nodes = src.nodes
    if node_list:
        from ..slurm import parse_hostlist

        nodes = tuple(parse_hostlist(node_list))
    d = dr.diagnose(src.text, site=site, stamp=stamp, source=src.label, nodes=nodes, caps=_stamped_caps(stamp))
    if html_file:
        from .explain_out import doctor_view

        doctor_view(site, d, src.text, html_file)
    if as_json:
        _emit_json(d.to_dict())
    else:
        click.echo(dr.render_text(d), nl=False)
    if not d.matches:
        sys.exit(1)


def _stamped_caps(stamp: Mapping[str, str]) -> Any:
    """The stamped launcher's capabilities and memory rules, with what gen declared of the program
    (the plan line's launcher, implements and ZeRO stage); None when the job names none."""
    from ..job.launchers import LAUNCHERS, planner_caps

    launcher = LAUNCHERS.get(stamp.get("launcher", ""))
    if launcher is None:
        return None
    from ..errors import ConfigError
    from ..plan import get_model

    implements = tuple(x for x in stamp.get("implements", "").split(",") if x)
    try:
        model = get_model(stamp.get("model", ""))
    except ConfigError:
        model = None
    # a program torchrun/srun start is planned as FSDP exactly when the spec said `fsdp: true` (ZeRO-3)
    fsdp = launcher.program and stamp.get("zero") == "3"
    return planner_caps(launcher, stamp.get("precision", "bf16"), implements, fsdp, model)
