"""The `slurmgpu` command line. Click lives here and nowhere else.

Heavy modules (yaml, jinja2, psutil, lupa) are imported inside commands so that
`slurmgpu --help` stays fast on a busy login node.
"""
from __future__ import annotations

import functools
import json
import os
import sys
from typing import Any, Optional

import click

from . import __version__, vocab
from .errors import SlurmgpuError
from .site import SitePreflight

COMPLETION_HELP = """
Shell completion (bash): eval "$(_SLURMGPU_COMPLETE=bash_source slurmgpu)"
(zsh: zsh_source, fish: fish_source).
"""


class _Group(click.Group):
    """Turns SlurmgpuError into a one-line message and its exit code, never a traceback."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except SlurmgpuError as exc:
            click.echo("error: %s" % exc if "\n" not in str(exc) else str(exc), err=True)
            ctx.exit(exc.exit_code)


def _emit_json(obj: Any) -> None:
    click.echo(json.dumps(obj, indent=2, sort_keys=False))


def _load_site(site: Optional[str], quiet: bool = False):
    from .site import resolve_site

    s, notice = resolve_site(site, os.environ)
    if not quiet:
        click.echo(notice, err=True)
    return s


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]},
             epilog=COMPLETION_HELP)
@click.version_option(__version__, "--version", prog_name="slurmgpu")
def main() -> None:
    """Multi-node GPU jobs on Slurm that are correct by construction.

    \b
    Examples:
      slurmgpu site list
      slurmgpu site show dgx-h100 --json
      slurmgpu site validate my-cluster.yaml
    """


# ---------------------------------------------------------------------------
# site

@main.group(cls=_Group)
def site() -> None:
    """Inspect and validate site configs (cluster descriptions).

    \b
    Examples:
      slurmgpu site list
      slurmgpu site show gb200-nvl72
      slurmgpu site validate /etc/slurmgpu/site.yaml
    """


@site.command("list")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def site_list(as_json: bool) -> None:
    """List the built-in site presets.

    \b
    Example:
      slurmgpu site list
    """
    from .site import load_site, preset_dir, preset_names

    rows = []
    for name in preset_names():
        s = load_site(str(preset_dir() / (name + ".yaml")))
        nt = s.node_type_of()
        rows.append({"name": name, "gpus_per_node": nt.gpus, "gpu": nt.gpu_model, "fabric": nt.fabric,
                     "nvlink_domain": nt.nvlink_domain, "description": s.description})
    if as_json:
        _emit_json(rows)
        return
    head = ("NAME", "GPUS/NODE", "GPU", "FABRIC", "NVLINK DOMAIN")
    table = [head] + [(r["name"], str(r["gpus_per_node"]), r["gpu"], r["fabric"], str(r["nvlink_domain"]))
                      for r in rows]
    widths = [max(len(row[i]) for row in table) for i in range(len(head))]
    for row in table:
        click.echo("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip())


@site.command("show")
@click.argument("name", required=False)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def site_show(name: Optional[str], as_json: bool) -> None:
    """Show a site (preset NAME or PATH; default: the site in effect).

    \b
    Examples:
      slurmgpu site show                 # the site slurmgpu would use now
      slurmgpu site show perlmutter --json
    """
    s = _load_site(name)
    if as_json:
        _emit_json(s.to_dict())
        return
    click.echo("site %s: %s" % (s.name, s.description))
    click.echo("  source: %s" % s.source)
    if s.slurm_version:
        click.echo("  slurm: %s" % s.slurm_version)
    click.echo("  default partition: %s   gpu request: --%s   topology: %s" % (
        s.default_partition, s.gpu_request if s.gpu_request == "gpus-per-node" else "gres=gpu:N", s.topology))
    for pname, p in s.partitions.items():
        nt = s.node_types[p.node_type]
        click.echo("  partition %s: %d x %s%s%s" % (pname, p.nodes, p.node_type,
                                                  ", -C %s" % p.constraint if p.constraint else "",
                                                  ", whole nodes" if p.exclusive else ""))
        click.echo("    %d x %s (%s, %g GB), %s %g GB/s per GPU, NVLink domain %d GPU%s%s" % (
            nt.gpus, nt.gpu_model, nt.vendor, nt.gpu_memory_gb, nt.link, nt.link_gbs, nt.nvlink_domain,
            "s" if nt.nvlink_domain != 1 else "",
            " (%d nodes)" % nt.domain_nodes if nt.domain_nodes > 1 else ""))
        nics = ", ".join("%s %gG" % (n.name, n.gbps) for n in nt.compute_nics) or "none"
        click.echo("    fabric %s: %s; socket interface %s" % (nt.fabric, nics, nt.socket_ifname or "-"))
    click.echo("  container: %s   policy: %s" % (s.container.runtime, s.policy.mode))


@site.command("validate")
@click.argument("paths", nargs=-1, required=True, type=click.Path())
def site_validate(paths: Any) -> None:
    """Validate site config files; print file:line:col: field: message for each problem.

    Exits 1 if any file has errors.

    \b
    Example:
      slurmgpu site validate /etc/slurmgpu/site.yaml
    """
    from .errors import ConfigError
    from .site import load_site

    bad = 0
    for path in paths:
        try:
            s = load_site(path)
        except ConfigError as exc:
            bad += 1
            for issue in exc.issues:
                click.echo(str(issue), err=True)
            continue
        click.echo("%s: ok (site %s, %d partition%s)" % (path, s.name, len(s.partitions),
                                                       "" if len(s.partitions) == 1 else "s"))
    if bad:
        sys.exit(1)


# ---------------------------------------------------------------------------
# discover / probe

@main.command("discover")
@click.option("-o", "--output", type=click.Path(dir_okay=False), default=None,
              help="Write the draft here (default: standard output).")
@click.option("-p", "--partition", "partitions", multiple=True, metavar="NAME",
              help="Only this partition (repeat for several; default: every partition with GPU nodes).")
@click.option("--probe", "with_probe", is_flag=True,
              help="Also run `slurmgpu probe` on one node of each node type through srun, for NICs, fabric "
                   "and GPU links.")
@click.option("--probe-command", default=None, metavar="CMD",
              help="How srun starts the probe on a compute node (default: slurmgpu probe --json).")
@click.option("--probe-wait", default=60, show_default=True, type=click.IntRange(1), metavar="SECONDS",
              help="How long srun may wait for a busy node before that node type is left unprobed.")
@click.option("--backend", type=click.Choice(["auto", "pyslurm", "commands"]), default="auto", show_default=True,
              help="pyslurm (if installed for this Slurm release) or the Slurm commands.")
@click.option("--name", default=None, help="Site name (default: Slurm's ClusterName).")
@click.option("--force", is_flag=True, help="Overwrite --output if it exists.")
@click.option("--json", "as_json", is_flag=True,
              help="Print the draft as JSON (site, todos, notes, yaml) instead of YAML.")
def discover_cmd(output: Optional[str], partitions: Any, with_probe: bool, probe_command: Optional[str],
                 probe_wait: int, backend: str, name: Optional[str], force: bool, as_json: bool) -> None:
    """Draft a site config from the running Slurm cluster (run on a login node).

    Reads partitions, nodes, CPUs, memory, features and GPU GRES, groups
    identical GPU nodes into node types and fills in GPU facts slurmgpu knows.
    What Slurm cannot tell (fabric, NICs, sometimes GPU memory) is marked
    `# TODO` with the command that finds it; --probe finds most of it.

    \b
    Examples:
      slurmgpu discover -o site.yaml && slurmgpu site validate site.yaml
      slurmgpu discover --probe -p gpu -o site.yaml
      slurmgpu discover --json | jq '.todos'
    """
    import shlex

    from .discover import discover
    from .runner import SubprocessRunner
    from .site_draft import check, render

    if output and output != "-" and os.path.exists(output) and not force:
        raise SlurmgpuError("%s exists; use --force to overwrite it" % output)
    cmd = ["slurmgpu", "discover"] + (["-o", output] if output else []) + \
        [x for p in partitions for x in ("-p", p)] + (["--probe"] if with_probe else []) + \
        (["--name", name] if name else [])
    draft = discover(SubprocessRunner(), only=tuple(partitions), with_probe=with_probe, backend=backend, name=name,
                     probe_command=tuple(shlex.split(probe_command)) if probe_command else (), wait_s=probe_wait,
                     command=" ".join(shlex.quote(c) for c in cmd))
    text = render(draft)
    site_obj = check(text, output or "<draft>")
    for note in draft.notes:
        click.echo("note: %s" % note, err=True)
    todos = draft.todos()
    if as_json:
        _emit_json({"site": site_obj.to_dict(), "todos": todos, "notes": list(draft.notes), "yaml": text})
    elif output and output != "-":
        with open(output, "w", encoding="utf-8") as fh:
            fh.write(text)
    else:
        click.echo(text, nl=False)
    if not as_json:
        where = output if output and output != "-" else "the draft"
        click.echo("%s: %d node type%s, %d partition%s, %d value%s marked TODO%s" % (
            where, len(draft.node_types), "" if len(draft.node_types) == 1 else "s", len(draft.partitions),
            "" if len(draft.partitions) == 1 else "s", len(todos), "" if len(todos) == 1 else "s",
            ":" if todos else ""), err=True)
        for t in todos:
            click.echo("  TODO %s" % t, err=True)
        if output and output != "-":
            click.echo("next: check the TODOs, then: slurmgpu site validate %s" % shlex.quote(output), err=True)


@main.command("probe")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output (what discover --probe reads).")
@click.option("--sysfs", default="/sys", show_default=True, type=click.Path(file_okay=False),
              help="Read this sysfs tree instead (a recorded one, for testing).")
def probe_cmd(as_json: bool, sysfs: str) -> None:
    """Report this node's GPUs, GPU links, RDMA ports, interfaces and implied NCCL settings.

    Meant for a compute node. Missing pieces (no GPU driver, no RDMA) are
    reported, not errors.

    \b
    Examples:
      srun -N1 -p gpu slurmgpu probe
      srun -N1 -p gpu --exclusive slurmgpu probe --json > node.json
    """
    from .probe import describe, probe

    result = probe(sysfs=sysfs)
    if as_json:
        click.echo(result.to_json())
    else:
        click.echo(describe(result))


# ---------------------------------------------------------------------------
# preflight

@main.command("preflight")
@click.option("--site", "site_name", metavar="NAME|PATH", help="Site config (default: the site in effect).")
@click.option("--partition", help="Partition whose node type to expect (default: $SLURM_JOB_PARTITION, "
                                  "else the site's default).")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option("--record", is_flag=True, help="Print this node's result as SLURMGPU-PREFLIGHT record lines for "
                                              "--aggregate (what generated scripts run on every node).")
@click.option("--aggregate", metavar="FILE", help="Read the record lines of all nodes (FILE, or - for stdin), print "
                                                  "one table, failing nodes first; exit 1 if any node failed.")
@click.option("--nodes", "expect_nodes", metavar="HOSTLIST", help="With --aggregate: nodes that must report, e.g. "
                                                                  "\"$SLURM_JOB_NODELIST\".")
@click.option("--bandwidth", is_flag=True, help="Run a short NCCL all-reduce instead (one task per GPU, needs "
                                                 "PyTorch); fails below --min-bandwidth-fraction of the links' speed.")
@click.option("--bandwidth-size-mb", type=click.IntRange(1, 16384), default=256, show_default=True,
              help="All-reduce buffer for --bandwidth.")
@click.option("--min-bandwidth-fraction", type=click.FloatRange(0.0, 1.0),
              help="--bandwidth fails below this share of the expected bus bandwidth "
                   "(default: the site's preflight.min_bandwidth_fraction, %g unless set)."
                   % SitePreflight.min_bandwidth_fraction)
@click.option("--bandwidth-backend", type=click.Choice(("auto", "nccl", "gloo")), default="auto", show_default=True,
              help="auto = NCCL on GPUs; gloo times a CPU all-reduce (to test the fan-out without GPUs).")
@click.option("--port", "rdzv_port", type=click.IntRange(1, 65535), help="Rendezvous port that must be free on "
                                                                        "the first node (default: $MASTER_PORT or 29500).")
@click.option("--first-node/--not-first-node", default=None, help="Whether this node hosts the rendezvous "
                                                                  "(default: $SLURM_NODEID is 0).")
@click.option("--container-runtime", type=click.Choice(vocab.RUNTIMES),
              help="Runtime the job uses (default: the site's).")
@click.option("--checkpoint-dir", metavar="DIR", help="Where the job writes checkpoints (default: "
                                                       "$SLURMGPU_CHECKPOINT_DIR, else the site's paths.checkpoint).")
@click.option("--min-free-gb", type=click.FloatRange(0.0),
              help="Free space the checkpoint directory needs (default: the site's preflight.min_free_gb, %g)."
                   % SitePreflight.min_free_gb)
@click.option("--strict", is_flag=True, help="Treat warnings as failures.")
def preflight_cmd(site_name: Optional[str], partition: Optional[str], as_json: bool, record: bool,
                  aggregate: Optional[str], expect_nodes: Optional[str], bandwidth: bool, bandwidth_size_mb: int,
                  min_bandwidth_fraction: Optional[float], bandwidth_backend: str, rdzv_port: Optional[int],
                  first_node: Optional[bool],
                  container_runtime: Optional[str], checkpoint_dir: Optional[str], min_free_gb: Optional[float],
                  strict: bool) -> None:
    """Check this node before a multi-node job starts; exit 1 with node, check, found, expected, fix.

    Checks GPUs (count, model) and NVLink, every HCA of NCCL_IB_HCA (exists, ACTIVE, link layer),
    the socket interface, the NCCL variables (values NCCL ignores silently, prefix lists such as
    mlx5_1 that also match mlx5_10), the rendezvous port, the container runtime and checkpoint space.

    Generated scripts run it on every node and aggregate the records (docs/preflight.md).
    For tests, SLURMGPU_PROBE_FIXTURE=DIR reads a recorded node instead of this one.

    \b
    Examples:
      slurmgpu preflight                          # this node, as a table
      srun -N "$SLURM_JOB_NUM_NODES" -n "$SLURM_JOB_NUM_NODES" --ntasks-per-node=1 \\
          slurmgpu preflight --record \\
        | slurmgpu preflight --aggregate - --nodes "$SLURM_JOB_NODELIST"
      srun --ntasks-per-node=8 slurmgpu preflight --bandwidth --record \\
        | slurmgpu preflight --aggregate - --nodes "$SLURM_JOB_NODELIST"
    """
    from . import preflight as pf

    if aggregate:
        _preflight_aggregate(pf, aggregate, expect_nodes, as_json, site_name, strict)
        return
    node = pf.node_name(os.environ)
    try:
        s = _load_site(site_name, quiet=record or as_json)
        opts = pf.Options(partition=partition, rdzv_port=rdzv_port, first_node=first_node,
                          container_runtime=container_runtime, checkpoint_dir=checkpoint_dir,
                          min_free_gb=s.preflight.min_free_gb if min_free_gb is None else min_free_gb)
        if min_bandwidth_fraction is None:
            min_bandwidth_fraction = s.preflight.min_bandwidth_fraction
        if bandwidth:
            rep = pf.bandwidth_report(s, os.environ, opts, size_mb=bandwidth_size_mb,
                                      fraction=min_bandwidth_fraction, backend=bandwidth_backend)
            if rep is None:  # not local rank 0: rank 0 of the node reports
                return
        else:
            rep = pf.preflight_node(s, os.environ, opts)
    except Exception as exc:  # in --record mode every node must still report, even a crash
        if not record:
            raise
        rep = pf.NodeReport(node, site_name or "", (pf.CheckResult(
            node, "bandwidth" if bandwidth else "preflight", "fail",
            "%s: %s" % (type(exc).__name__, (str(exc).splitlines() or [""])[0]), "the check runs",
            "run `slurmgpu preflight%s` on %s to see the whole error" % (" --bandwidth" if bandwidth else "", node)),))
    failed = not rep.ok or (strict and any(r.status == "warn" for r in rep.results))
    if record:
        click.echo(rep.record())
    elif as_json:
        _emit_json(rep.to_dict())
    else:
        click.echo(pf.render_table(pf.Aggregate(reports=[rep]), rep.site), nl=False)
    if failed:
        sys.exit(1)


def _preflight_aggregate(pf: Any, source: str, expect_nodes: Optional[str], as_json: bool,
                         site_name: Optional[str], strict: bool) -> None:
    from .slurm_parse import parse_hostlist

    try:
        fh = sys.stdin if source == "-" else open(source, errors="replace")
    except OSError as exc:
        raise SlurmgpuError("cannot read %s: %s" % (source, exc.strerror or exc)) from None
    with fh:
        agg = pf.parse_records(fh, parse_hostlist(expect_nodes) if expect_nodes else ())
    site_label = site_name or next((r.site for r in agg.reports if r.site), "")
    if as_json:
        _emit_json(agg.to_dict())
    else:
        click.echo(pf.render_table(agg, site_label), nl=False)
    warned = any(x.status == "warn" for r in agg.reports for x in r.results)
    if not agg.ok or (strict and warned):
        sys.exit(1)


# ---------------------------------------------------------------------------
# doctor

@main.command("doctor")
@click.argument("target", metavar="JOBID|LOGFILE")
@click.option("--site", "site_name", metavar="NAME|PATH", help="Site config for the advice (default: the site "
                                                               "named in the job's stamp line, else the site in effect).")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def doctor_cmd(target: str, site_name: Optional[str], as_json: bool) -> None:
    """Explain why a job failed and what to change.

    Reads the job's output (found with scontrol/sacct for a JOBID, or the LOGFILE; - for stdin),
    recognises known failure signatures (NCCL/IB errors, watchdog and socket timeouts,
    unresolvable MASTER_ADDR, port in use, CUDA OOM, container pulls, preemption, ...) and
    lists them root cause first with the fix. Exit status: 0 diagnosed, 1 nothing recognised.

    \b
    Examples:
      slurmgpu doctor 123456
      slurmgpu doctor slurm-123456.out --site dgx-h100
      slurmgpu doctor train.log --json | jq '.problems[0].id'
    """
    from . import doctor as dr
    from .site import resolve_site

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
    d = dr.diagnose(src.text, site=site, stamp=stamp, source=src.label)
    if as_json:
        _emit_json(d.to_dict())
    else:
        click.echo(dr.render_text(d), nl=False)
    if not d.matches:
        sys.exit(1)


# ---------------------------------------------------------------------------
# gen / submit / init / templates

class _CommandWithProgram(click.Command):
    """Everything after `--` is the program to launch (as with srun), never the SPEC argument."""

    def parse_args(self, ctx: click.Context, args: Any) -> Any:
        args = list(args)
        ctx.meta["slurmgpu.raw_args"] = list(args)
        if "--" in args:
            i = args.index("--")
            ctx.meta["slurmgpu.command"] = args[i + 1:]
            args = args[:i]
        return super().parse_args(ctx, args)


# From slurmgpu.vocab, which imports nothing, so `slurmgpu --help` loads nothing more.
_LAUNCHERS = vocab.LAUNCHERS
_RUNTIMES = vocab.RUNTIMES


def _job_options(f: Any, skip: Any = ()) -> Any:
    """The flags gen and submit share; each overrides one field of slurmgpu.yaml.

    `skip` names parameters a command replaces with its own (diff takes --site twice, writes no script).
    """
    opts = [
        click.argument("spec_file", metavar="[SPEC]", required=False, type=click.Path(dir_okay=False)),
        click.option("--site", "site_name", metavar="NAME|PATH", help="Site config (default: $SLURMGPU_SITE, "
                     "/etc/slurmgpu/site.yaml, ~/.config/slurmgpu/site.yaml, then dgx-h100)."),
        click.option("--model", help="Catalogue model (llama3-70b), a size (13B) or a model YAML file."),
        click.option("--launcher", type=click.Choice(_LAUNCHERS), help="How the program is started."),
        click.option("--nodes", metavar="N|plan", help="Node count, or 'plan' to let the planner choose."),
        click.option("--gpus", type=int, help="Total GPUs (instead of --nodes)."),
        click.option("--job-name", "name", metavar="NAME", help="Slurm job name."),
        click.option("-o", "--output", "out_file", type=click.Path(dir_okay=False),
                     help="Write the script to FILE (atomically) instead of standard output."),
        click.option("--json", "as_json", is_flag=True, help="Print script, plan and policy verdict as JSON."),
        click.option("--partition", help="Slurm partition (default: the site's)."),
        click.option("--account", help="Slurm account."),
        click.option("--qos", help="Slurm QOS."),
        click.option("--constraint", help="Slurm --constraint (default: the partition's)."),
        click.option("--time", metavar="D-HH:MM:SS", help="Time limit."),
        click.option("--task", help="pretrain (default), finetune, serve... (what the planner sizes for)."),
        click.option("--tp", type=int, help="Pin tensor parallelism."),
        click.option("--pp", type=int, help="Pin pipeline parallelism."),
        click.option("--dp", type=int, help="Pin data parallelism."),
        click.option("--cp", type=int, help="Pin context parallelism."),
        click.option("--ep", type=int, help="Pin expert parallelism."),
        click.option("--micro-batch", type=int, help="Pin the micro-batch size."),
        click.option("--seq", type=int, help="Sequence length."),
        click.option("--global-batch", type=int, help="Global batch size (sequences)."),
        click.option("--tokens", help="Training tokens, e.g. 2T."),
        click.option("--precision", help="bf16 (default), fp8..."),
        click.option("--fsdp/--no-fsdp", default=None, help="The program shards with FSDP (changes "
                     "CUDA_DEVICE_MAX_CONNECTIONS)."),
        click.option("--weights", metavar="ID|PATH", help="Checkpoint a serving engine (vllm, sglang) loads."),
        click.option("--image", help="Container image (registry image or file; written in the site "
                     "runtime's spelling)."),
        click.option("--container", type=click.Choice(_RUNTIMES), help="Container runtime (default: the site's)."),
        click.option("--mount", "mounts", multiple=True, metavar="SRC:DST",
                     help="Container mount (repeatable); $USER, $HOME, $SCRATCH, $SLURM_JOB_ID expand on the node."),
        click.option("--env", "env", multiple=True, metavar="NAME=VALUE", help="Export in the job (repeatable)."),
        click.option("--sbatch", "sbatch", multiple=True, metavar="--OPT=VALUE",
                     help="Extra #SBATCH option (repeatable), e.g. --sbatch=--mail-type=END."),
        click.option("--checkpoint-dir", metavar="DIR", help="Checkpoint directory (exported, created); $USER, "
                     "$HOME, $SCRATCH, $SLURM_JOB_ID expand on the node."),
        click.option("--preflight/--no-preflight", default=None, help="Run `slurmgpu preflight` on every node "
                     "before the launch (default: on)."),
        click.option("--requeue/--no-requeue", default=None, help="Checkpoint and requeue before the time limit."),
        click.option("--grace", type=int, metavar="SECONDS", help="With --requeue: how long before the limit "
                     "(default 300)."),
        click.option("--checkpoint-signal", metavar="SIG", help="Signal that asks the program to save "
                     "(default TERM; not USR1)."),
        click.option("--dependency", metavar="TYPE:JOBID", help="Slurm dependency, e.g. afterok:1234."),
        click.option("--stdout", "log_output", metavar="PATH", help="The job's output file (default %x-%j.out)."),
        click.option("--stderr", "log_error", metavar="PATH", help="The job's error file (default: with stdout)."),
        click.option("--mem", help="Memory per node (default: all of it on whole nodes)."),
        click.option("--cpus-per-task", type=int, help="CPUs per task (default: the node's CPUs / tasks)."),
        click.option("--segment", type=int, help="Slurm --segment on topology/block sites (default: computed)."),
        click.option("--template", metavar="NAME", help="Top-level template (default job.sh.j2)."),
        click.option("--templates", "templates_dir", type=click.Path(file_okay=False), metavar="DIR",
                     help="Look for templates here first."),
    ]
    for opt in reversed(opts):
        f = opt(f)
    if skip:
        f.__click_params__ = [p for p in f.__click_params__ if p.name not in skip]
    return f


_GEN_ONLY_FLAGS = {"--json": 0, "--test-only": 0, "--chain": 1}


def _regen_command(ctx: click.Context) -> str:
    """`slurmgpu gen ...` with the flags that shaped this script (for the script's header)."""
    from .render import shquote

    raw = list(ctx.meta.get("slurmgpu.raw_args", []))
    cut = raw.index("--") if "--" in raw else len(raw)
    out, skip = [], 0
    for a in raw[:cut]:
        if skip:
            skip -= 1
            continue
        name = a.split("=", 1)[0]
        if name in _GEN_ONLY_FLAGS:
            skip = _GEN_ONLY_FLAGS[name] if "=" not in a else 0
            continue
        out.append(a)
    out += raw[cut:]
    return "slurmgpu gen" + "".join(" " + shquote(a) for a in out)


def _job_spec(ctx: Optional[click.Context], kw: Any) -> Any:
    """The spec file (or the repo's slurmgpu.yaml) and the flags that override it -> (repo root, spec, flags)."""
    from .spec import JobSpec, find_repo, load_spec

    spec_file = kw.pop("spec_file")
    root, found = find_repo(os.path.dirname(os.path.abspath(spec_file)) if spec_file else None)
    if spec_file:
        spec = load_spec(spec_file)
    elif found is not None:
        click.echo("slurmgpu: job spec %s" % found, err=True)
        spec = load_spec(str(found))
    else:
        spec = JobSpec()
    flags = dict(kw)
    flags["parallel"] = {k: flags.pop(k, None) for k in vocab.PARALLEL_KEYS}
    flags["output"], flags["error"] = flags.pop("log_output", None), flags.pop("log_error", None)
    flags["command"] = ctx.meta.get("slurmgpu.command") if ctx is not None else None
    return root, spec, flags


def _spec_for_site(spec: Any, flags: Any, site: Any, known: Any = ()) -> Any:
    """Precedence: flags > the spec's sites.<site> block > its top-level fields."""
    from .spec import apply_overrides, for_site

    spec, warnings = for_site(spec, site.name, known)
    for w in warnings:
        click.echo("warning: %s" % w, err=True)
    if spec.site_override:
        block = next(o for o in spec.sites if o.site == spec.site_override)
        click.echo("slurmgpu: sites.%s from %s: %s" % (spec.site_override, spec.source,
                                                        ", ".join(block.values) or "nothing"), err=True)
    return apply_overrides(spec, flags)


def _build_job(ctx: click.Context, kw: Any) -> Any:
    """Spec file (or the repo's slurmgpu.yaml) + the site's block + flags -> (site, spec, generated)."""
    from .render import generate, search_path

    root, spec, flags = _job_spec(ctx, kw)
    site = _load_site(kw["site_name"])
    spec = _spec_for_site(spec, flags, site)
    dirs = search_path(kw["templates_dir"], root, site)
    return site, spec, generate(site, spec, dirs, regen=_regen_command(ctx))


def _summary(gen: Any) -> None:
    """The plan, on standard error (standard output carries the script)."""
    req = gen.request
    lay = req.layout
    click.echo("slurmgpu: %s on %s/%s: %d node%s x %d GPUs, tp=%d pp=%d dp=%d cp=%d ep=%d, micro-batch %d, "
               "launcher %s" % (gen.sizing.model.name if gen.sizing.model is not None else "job", req.site,
                                req.sbatch.partition, lay.nodes, "s" if lay.nodes != 1 else "", lay.gpus_per_node,
                                lay.tp, lay.pp, lay.dp, lay.cp, lay.ep, lay.micro_batch, req.launch.name), err=True)
    for line in req.about:
        if line.startswith("Plan:"):
            click.echo("  " + line, err=True)
    for w in gen.warnings:
        click.echo("warning: %s" % w, err=True)


def _write_atomic(path: str, text: str) -> None:
    """Write via a temporary file in the same directory and rename: never a half-written script."""
    import tempfile

    d = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".%s." % os.path.basename(path), dir=d)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o777 & ~umask & 0o755)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


@main.command("gen", cls=_CommandWithProgram)
@_job_options
@click.pass_context
def gen_cmd(ctx: click.Context, out_file: Optional[str], as_json: bool, **kw: Any) -> None:
    """Write the batch script for a job: plan it, render it for the site, check it.

    SPEC is a slurmgpu.yaml (default: the repo's, if any); flags override its
    fields, and its sites.<name> block for the site in effect sits between the
    two (docs/gen.md). The program to launch goes after `--`, as with srun. The script goes
    to standard output (or -o FILE), the plan summary to standard error. A layout
    whose tensor parallelism leaves an NVLink domain is refused (exit 1) with the
    submit filter's message and the planner's suggestion.

    \b
    Examples:
      slurmgpu gen --model llama3-70b --launcher megatron --nodes 2
      slurmgpu gen --site perlmutter --nodes 4 -- train.py --lr 3e-4
      slurmgpu gen slurmgpu.yaml --site aws-p5 -o job.sh
      slurmgpu gen --launcher vllm --weights meta-llama/Llama-3.1-70B-Instruct --nodes 2 --json
    """
    _site, _spec, gen = _build_job(ctx, kw)
    _summary(gen)
    if out_file:
        _write_atomic(out_file, gen.script)
        click.echo("slurmgpu: wrote %s" % out_file, err=True)
    if as_json:
        d = gen.to_dict()
        d["path"] = out_file
        _emit_json(d)
    elif not out_file:
        click.echo(gen.script, nl=False)


@main.command("submit", cls=_CommandWithProgram)
@_job_options
@click.option("--test-only", is_flag=True, help="Ask sbatch whether and when the job would start; submit nothing.")
@click.option("--chain", type=click.IntRange(1, 1000), default=1, show_default=True,
              help="Submit N copies, each starting after the previous ends (afterany): a long run in pieces.")
@click.pass_context
def submit_cmd(ctx: click.Context, out_file: Optional[str], as_json: bool, test_only: bool, chain: int,
               **kw: Any) -> None:
    """Generate the script (as `gen` does) and submit it with sbatch; print the job id.

    \b
    Examples:
      slurmgpu submit --model llama3-70b --launcher megatron --nodes 2
      slurmgpu submit slurmgpu.yaml --test-only
      slurmgpu submit slurmgpu.yaml --requeue --chain 4 --time 24:00:00
    """
    import shutil
    import subprocess

    from .errors import SlurmError

    _site, _spec, gen = _build_job(ctx, kw)
    _summary(gen)
    if out_file:
        _write_atomic(out_file, gen.script)
    sbatch = shutil.which("sbatch")
    if sbatch is None:
        raise SlurmError("sbatch not found on PATH: run this on a login node, or write the script with "
                         "`slurmgpu gen -o job.sh` and submit it there")
    ids = []
    prev = None
    for _ in range(chain):
        argv = [sbatch, "--parsable"] + (["--test-only"] if test_only else [])
        if prev is not None:
            argv.append("--dependency=afterany:%s" % prev)
        argv += [out_file] if out_file else []
        r = subprocess.run(argv, input=None if out_file else gen.script, capture_output=True, text=True)
        if r.returncode != 0:
            raise SlurmError("sbatch failed (exit %d): %s" % (r.returncode, (r.stderr or r.stdout).strip()))
        if test_only:
            click.echo((r.stderr or r.stdout).strip(), err=True)
            break
        if r.stderr.strip():  # the controller's warnings (slurm.log_user) come back here
            click.echo(r.stderr.strip(), err=True)
        prev = r.stdout.strip().split(";")[0]
        ids.append(prev)
    if as_json:
        _emit_json({"job_ids": ids, "test_only": test_only, "layout": gen.request.layout.to_dict(),
                    "stamp": gen.request.stamp, "path": out_file})
    else:
        for job_id in ids:
            click.echo(job_id)


@main.command("diff", cls=_CommandWithProgram)
@click.option("--site", "sites", multiple=True, required=True, metavar="NAME|PATH",
              help="A site to compare (give it twice or more: --site A --site B).")
@click.option("--all", "show_all", is_flag=True, help="Also show the values that are the same on every site.")
@click.option("--json", "as_json", is_flag=True, help="Print the rows, warnings, errors and each site's render "
              "request as JSON.")
@functools.partial(_job_options, skip=("site_name", "out_file", "as_json"))
@click.pass_context
def diff_cmd(ctx: click.Context, sites: Any, show_all: bool, as_json: bool, **kw: Any) -> None:
    """Show what changes when the same job is generated for other sites.

    Takes the spec (SPEC, else the repo's slurmgpu.yaml) and the flags `gen` takes, applies
    each site's `sites.<name>` block, plans and renders the job for every --site, and lines
    up what differs: node count and layout (TP/PP/DP...), the #SBATCH values (GPU request,
    partition, account, ...), the NCCL/RCCL environment, the container and the launch.

    Exit status: 0 when the job generates on every site; otherwise that of `gen` for the
    failing site (1 refused by the site's policy, 2 cannot be planned or a bad input),
    with the other columns still shown.

    \b
    Examples:
      slurmgpu diff --site dgx-h100 --site perlmutter
      slurmgpu diff --site dgx-h100 --site lumi-g --model llama3-70b --launcher megatron --nodes 8
      slurmgpu diff --site dgx-h100 --site perlmutter --site lumi-g slurmgpu.yaml --all
      slurmgpu diff --site perlmutter --site my-cluster.yaml --json | jq '.rows[] | select(.same | not)'
    """
    from .render import generate, search_path
    from .sitediff import Column, compare, render_text

    if len(sites) < 2:
        raise click.UsageError("give at least two sites to compare: --site A --site B")
    root, spec, flags = _job_spec(ctx, kw)
    loaded = [_load_site(name) for name in sites]
    known = [x.name for x in loaded]
    columns = []
    for site_obj in loaded:
        site_spec = _spec_for_site(spec, flags, site_obj, known)
        dirs = search_path(kw["templates_dir"], root, site_obj)
        try:
            gen = generate(site_obj, site_spec, dirs, regen="")
        except SlurmgpuError as exc:
            columns.append(Column(site=site_obj.name, error=str(exc), exit_code=exc.exit_code))
            continue
        columns.append(Column(site=site_obj.name, request=gen.request, warnings=gen.warnings))
    shown = spec.source
    if shown and not os.path.relpath(shown).startswith(".."):
        shown = os.path.relpath(shown)
    d = compare(columns, spec=shown)
    if as_json:
        _emit_json(d.to_dict())
    else:
        click.echo(render_text(d, show_all=show_all), nl=False)
    if d.exit_code:
        sys.exit(d.exit_code)


@main.command("init")
@click.option("--site", "site_name", metavar="NAME|PATH", help="Site to check the spec against (not stored).")
@click.option("--model", help="Model to plan for (catalogue name or size).")
@click.option("--launcher", type=click.Choice(_LAUNCHERS), help="How the program starts.")
@click.option("--nodes", type=click.IntRange(1), help="Node count (default: planned).")
@click.option("--job-name", "name", metavar="NAME", help="Job name (default: the directory's name).")
@click.option("--time", default="04:00:00", show_default=True, help="Time limit.")
@click.option("--image", help="Container image.")
@click.option("--dir", "directory", type=click.Path(file_okay=False), default=".", show_default=True,
              help="Repository to scaffold.")
@click.option("--force", is_flag=True, help="Overwrite an existing slurmgpu.yaml.")
@click.option("-y", "--yes", is_flag=True, help="Ask nothing; use defaults for what was not given.")
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
def init_cmd(site_name: Optional[str], model: Optional[str], launcher: Optional[str], nodes: Optional[int],
             name: Optional[str], time: str, image: Optional[str], directory: str, force: bool, yes: bool,
             command: Any) -> None:
    """Scaffold slurmgpu.yaml and .slurmgpu/templates/ in a research repo.

    Asks for what is missing only on a terminal and only when no job flag was
    given; the program to launch may follow `--`. Launchers that need a program
    (torchrun, srun, deepspeed, accelerate) get `command: [train.py]` when none
    is given: a placeholder to edit, so that `slurmgpu gen` works at once.

    \b
    Examples:
      slurmgpu init --launcher torchrun -- train.py --config configs/base.yaml
      slurmgpu init --model llama3-8b --launcher torchrun && slurmgpu gen -o job.sbatch
      slurmgpu init --model llama3-70b --launcher megatron --nodes 2 --image nvcr.io#nvidia/nemo:24.07
      slurmgpu init -y
    """
    import shlex
    from pathlib import Path

    from .launchers import get_launcher
    from .spec import PLACEHOLDER_PROGRAM, REPO_DIR, SPEC_FILE, load_spec, scaffold

    root = Path(directory).resolve()
    if not root.is_dir():
        raise SlurmgpuError("%s: no such directory" % directory)
    target = root / SPEC_FILE
    if target.exists() and not force:
        raise SlurmgpuError("%s exists; use --force to replace it" % target)
    ask = not yes and sys.stdin.isatty() and not any((model, launcher, nodes, name, command))
    command = tuple(command)
    if ask:
        launcher = click.prompt("Launcher", default="torchrun", type=click.Choice(_LAUNCHERS))
        model = click.prompt("Model (catalogue name or size; empty: none)", default="", show_default=False) or None
        name = click.prompt("Job name", default=root.name)
        if not get_launcher(launcher).default_entry:
            command = tuple(shlex.split(click.prompt("Program and its arguments", default=PLACEHOLDER_PROGRAM)))
    launcher = launcher or "torchrun"
    placeholder = not command and not get_launcher(launcher).default_entry
    if placeholder:
        command = (PLACEHOLDER_PROGRAM,)
    site = _load_site(site_name, quiet=True)
    text = scaffold(name=name or root.name, site=site.name, launcher=launcher, model=model,
                    nodes=nodes, command=command, time=time, image=image, placeholder=placeholder)
    (root / REPO_DIR / "templates").mkdir(parents=True, exist_ok=True)
    readme = root / REPO_DIR / "README.md"
    if not readme.exists():
        readme.write_text("Templates in templates/ override slurmgpu's built-in ones for this repo.\n"
                          "Copy one here with `slurmgpu templates eject NAME`; see `slurmgpu templates list`.\n",
                          encoding="utf-8")
    _write_atomic(str(target), text)
    load_spec(str(target))  # what init writes must load
    click.echo("slurmgpu: wrote %s and %s/" % (target, root / REPO_DIR), err=True)
    if placeholder and not (root / PLACEHOLDER_PROGRAM).exists():
        click.echo("slurmgpu: command: %s is a placeholder (there is no %s in %s yet): put your program in "
                   "`command:` in %s" % (PLACEHOLDER_PROGRAM, PLACEHOLDER_PROGRAM, root, SPEC_FILE), err=True)
    nxt = ["slurmgpu", "gen"]
    if root != Path.cwd().resolve():
        nxt.append(str(target))
    if site_name:  # the site is not stored in the spec
        nxt += ["--site", site_name]
    click.echo("next: %s -o job.sbatch" % " ".join(shlex.quote(a) for a in nxt), err=True)


@main.group("templates", cls=_Group)
def templates_grp() -> None:
    """List, show and eject the batch-script templates.

    Search order: --templates DIR, the repo's .slurmgpu/templates/, the site's
    template directory, then the built-in ones.

    \b
    Examples:
      slurmgpu templates list
      slurmgpu templates show parts/fabric_infiniband.j2
      slurmgpu templates eject parts/launch_torchrun.j2
    """


def _template_dirs(templates_dir: Optional[str], site_name: Optional[str]) -> Any:
    from .render import search_path
    from .spec import find_repo

    root, _ = find_repo()
    site = _load_site(site_name, quiet=True)
    return root, search_path(templates_dir, root, site)


def _template_name(name: str, dirs: Any) -> str:
    """Accept 'parts/fabric_roce.j2', 'fabric_roce' or 'parts/fabric_roce'."""
    from .render import locate

    cands = [name] if name.endswith(".j2") else [name + ".j2"]
    cands += ["parts/" + c for c in cands if not c.startswith("parts/")]
    for c in cands:
        try:
            locate(c, dirs)
            return c
        except SlurmgpuError:
            continue
    return cands[0]


_TEMPLATE_OPTS = [
    click.option("--templates", "templates_dir", type=click.Path(file_okay=False), metavar="DIR",
                 help="Look here first."),
    click.option("--site", "site_name", metavar="NAME|PATH", help="Site whose template directory to include."),
]


def _template_opts(f: Any) -> Any:
    for opt in reversed(_TEMPLATE_OPTS):
        f = opt(f)
    return f


@templates_grp.command("list")
@_template_opts
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def templates_list(templates_dir: Optional[str], site_name: Optional[str], as_json: bool) -> None:
    """List every template and where it comes from (and what it overrides).

    \b
    Example:
      slurmgpu templates list --json
    """
    from .render import template_names

    _root, dirs = _template_dirs(templates_dir, site_name)
    rows = [{"name": n, "source": d.label, "path": os.path.join(d.path, n),
             "overrides": [s.label for s in shadowed]} for n, d, shadowed in template_names(dirs)]
    if as_json:
        _emit_json(rows)
        return
    width = max(len(r["name"]) for r in rows)
    for r in rows:
        extra = "  (overrides %s)" % ", ".join(r["overrides"]) if r["overrides"] else ""
        click.echo("%s  %s%s" % (r["name"].ljust(width), r["source"], extra))


@templates_grp.command("show")
@click.argument("name")
@_template_opts
def templates_show(name: str, templates_dir: Optional[str], site_name: Optional[str]) -> None:
    """Print the template NAME that the search path resolves to.

    \b
    Example:
      slurmgpu templates show fabric_slingshot
    """
    from .render import locate

    _root, dirs = _template_dirs(templates_dir, site_name)
    path, where = locate(_template_name(name, dirs), dirs)
    click.echo("slurmgpu: %s (%s)" % (path, where.label), err=True)
    click.echo(path.read_text(encoding="utf-8"), nl=False)


@templates_grp.command("eject")
@click.argument("name")
@click.option("--force", is_flag=True, help="Overwrite the repo's copy.")
@_template_opts
def templates_eject(name: str, force: bool, templates_dir: Optional[str], site_name: Optional[str]) -> None:
    """Copy a built-in template into the repo's .slurmgpu/templates/ to customise it.

    \b
    Example:
      slurmgpu templates eject parts/launch_torchrun.j2 && $EDITOR .slurmgpu/templates/parts/launch_torchrun.j2
    """
    from pathlib import Path

    from .render import BUILTIN, REPO_TEMPLATES, builtin_dir, locate

    root, dirs = _template_dirs(templates_dir, site_name)
    builtin = [d for d in dirs if d.label == BUILTIN]
    rel = _template_name(name, builtin)
    src, _ = locate(rel, builtin)
    dest = Path(root) / REPO_TEMPLATES / rel
    if dest.exists() and not force:
        raise SlurmgpuError("%s exists; use --force to replace it" % dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    _write_atomic(str(dest), src.read_text(encoding="utf-8"))
    os.chmod(str(dest), 0o644)
    click.echo("slurmgpu: copied %s (built-in, %s) to %s" % (rel, builtin_dir(), dest), err=True)



# ---------------------------------------------------------------------------
# models, plan

@main.command("models")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def models_cmd(as_json: bool) -> None:
    """List the model catalogue (the names --model accepts).

    Parameter counts are computed from each shape, the way custom models are sized.

    \b
    Examples:
      slurmgpu models
      slurmgpu models --json
    """
    from .models import aliases_of, catalogue, fmt_params

    models = catalogue()
    if as_json:
        _emit_json([dict(m.to_dict(), aliases=aliases_of(m.name)) for m in models])
        return
    head = ("NAME", "PARAMS", "ACTIVE", "LAYERS", "HIDDEN", "HEADS/KV", "FFN", "VOCAB", "SEQ", "ALIASES")
    rows = [head]
    for m in models:
        ffn = "%dx%d" % (m.experts, m.expert_ffn) if m.is_moe else str(m.ffn)
        rows.append((m.name, fmt_params(m.params), fmt_params(m.active_params), str(m.layers), str(m.hidden),
                     "%d/%d" % (m.heads, m.kv_heads), ffn, str(m.vocab), str(m.seq),
                     ",".join(aliases_of(m.name)) or "-"))
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    for r in rows:
        click.echo("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())


@main.command("plan")
@click.option("--model", "model_ref", metavar="NAME|FILE", help="Catalogue model (see `slurmgpu models`), "
              "a model YAML file (layers, hidden, heads, kv_heads, ffn, vocab, seq; MoE: experts, "
              "experts_active, moe_ffn), or a size such as 13B.")
@click.option("--params", metavar="SIZE", help="A model of this many parameters (e.g. 13B); shape estimated.")
@click.option("--site", "site_name", metavar="NAME|PATH", help="Site config (default: $SLURMGPU_SITE, "
              "/etc/slurmgpu/site.yaml, ~/.config/slurmgpu/site.yaml, then dgx-h100).")
@click.option("--spec", "spec_file", metavar="FILE", type=click.Path(dir_okay=False),
              help="Job spec to plan (default: the repo's slurmgpu.yaml, if any); flags override its fields.")
@click.option("--partition", help="Partition (default: the spec's, else the site's).")
@click.option("--task", type=click.Choice(vocab.TASKS),
              help="What to size for; finetune is full fine-tuning (default: the spec's, else pretrain).")
@click.option("--gpus", type=int, help="Plan for exactly this many GPUs.")
@click.option("--nodes", type=int, help="Plan for exactly this many whole nodes.")
@click.option("--seq", type=int, help="Sequence length (inference: context length). Default: the model's.")
@click.option("--global-batch", type=int, help="Sequences per optimizer step (inference: concurrent "
              "sequences). Default: ~4M tokens for pretraining.")
@click.option("--tokens", metavar="N", help="Training tokens (e.g. 15T): prints the time to train and how it "
              "scales with more nodes.")
@click.option("--target-days", type=float, help="With --tokens: the smallest node count that trains in time.")
@click.option("--precision", type=click.Choice(vocab.PRECISIONS),
              help="Number format (default: the spec's, else bf16).")
@click.option("--optimizer", default="adam", show_default=True, type=click.Choice(["adam", "adam8bit", "sgd"]),
              help="Optimizer state: adam is 12 B/param on top of 16-bit weights and gradients.")
@click.option("--zero", type=click.IntRange(0, 3), help="ZeRO stage over DP (default: distributed "
              "optimizer, ZeRO-1; 2/3 only when needed and PP=1).")
@click.option("--recompute", type=click.Choice(vocab.RECOMPUTE),
              help="Activation recomputation (default: selective, full only when needed).")
@click.option("--tp", type=int, help="Pin tensor parallelism.")
@click.option("--pp", type=int, help="Pin pipeline parallelism.")
@click.option("--dp", type=int, help="Pin data parallelism.")
@click.option("--cp", type=int, help="Pin context parallelism.")
@click.option("--ep", type=int, help="Pin expert parallelism (MoE).")
@click.option("--micro-batch", type=int, help="Pin the micro-batch size.")
@click.option("--diagram", is_flag=True, help="Draw the nodes and GPUs with TP/PP/DP groups.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output (keys tp, pp, dp, cp, ep, "
              "nodes, gpus_per_node, micro_batch, memory_per_gpu_gb, alternatives, ...).")
def plan_cmd(model_ref: Optional[str], params: Optional[str], site_name: Optional[str], spec_file: Optional[str],
             partition: Optional[str], task: Optional[str], gpus: Optional[int], nodes: Optional[int],
             seq: Optional[int], global_batch: Optional[int], tokens: Optional[str], target_days: Optional[float],
             precision: Optional[str],
             optimizer: str, zero: Optional[int], recompute: Optional[str], tp: Optional[int],
             pp: Optional[int], dp: Optional[int], cp: Optional[int], ep: Optional[int],
             micro_batch: Optional[int], diagram: bool, as_json: bool) -> None:
    """Choose TP x PP x DP (x CP, x EP) and the node count for a model, and say why.

    Without --gpus/--nodes it finds the smallest allocation that fits. Pin any degree
    (--tp, --pp, ...) to have your layout checked and compared with the best one.
    In a repo with slurmgpu.yaml (or with --spec FILE) it plans that job, as `gen`
    would, with the site's sites.<name> block applied; flags override the spec.

    \b
    Examples:
      slurmgpu plan --model llama3-70b --nodes 2
      slurmgpu plan --spec slurmgpu.yaml --site perlmutter
      slurmgpu plan --model llama3-70b --task lora --nodes 2 --diagram
      slurmgpu plan --model llama3.1-405b --tokens 15T --target-days 60
      slurmgpu plan --params 13B --task finetune --site perlmutter --json
      slurmgpu plan --model llama3-70b --nodes 2 --task inference --tp 8 --pp 2
    """
    from .errors import PlanError
    from .plan import format_plan, make_plan
    from .render import plan_request
    from .schema import parse_size

    if model_ref and params:
        raise click.UsageError("give --model NAME|FILE or --params SIZE (one of them)")
    if tokens is not None and parse_size(tokens) is None:
        raise PlanError("--tokens expects a count such as 15T, 2e12 or 300B, got %r" % tokens)
    _root, spec, flags = _job_spec(None, dict(
        spec_file=spec_file, model=model_ref, partition=partition, task=task, gpus=gpus, nodes=nodes, seq=seq,
        global_batch=global_batch, tokens=tokens, precision=precision, tp=tp, pp=pp, dp=dp, cp=cp, ep=ep,
        micro_batch=micro_batch))
    site_obj = _load_site(site_name)
    spec = _spec_for_site(spec, flags, site_obj)
    if not params and not spec.model:
        raise click.UsageError("give --model NAME|FILE or --params SIZE (or model: in slurmgpu.yaml)")
    model = _plan_model(None if params else spec.model, params)
    req = plan_request(site_obj, spec, model, zero=zero, recompute=recompute, optimizer=optimizer,
                       target_days=target_days)
    plan = make_plan(site_obj, req)
    if as_json:
        out = plan.to_dict()
        if diagram:
            from .diagram import render

            out["diagram"] = render(plan.layout, stage_layers=plan.stage_layers, segment=plan.segment)
        _emit_json(out)
        return
    click.echo(format_plan(plan, diagram=diagram))


def _plan_model(model_ref: Optional[str], params: Optional[str]) -> Any:
    """--model (catalogue, file, or a size) or --params."""
    from .errors import ConfigError
    from .models import get_model, model_from_params
    from .schema import parse_size

    if params:
        return model_from_params(params)
    assert model_ref is not None
    try:
        return get_model(model_ref)
    except ConfigError:
        if parse_size(model_ref) is not None and not os.path.exists(model_ref):
            return model_from_params(model_ref)
        raise


# ---------------------------------------------------------------------------
# check / admin (the submit filter)

@main.command("check", context_settings={"ignore_unknown_options": True, "allow_interspersed_args": True})
@click.option("--site", "site_name", metavar="NAME|PATH", help="Site config (default: the site in effect).")
@click.option("--partition", metavar="NAME[,NAME]", help="Partition(s), as sbatch --partition/-p.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable verdict.")
@click.argument("args", nargs=-1, type=click.UNPROCESSED, metavar="SCRIPT [SBATCH_OPTIONS...]")
def check_cmd(site_name: Optional[str], partition: Optional[str], as_json: bool, args: Any) -> None:
    """Give the submit filter's verdict on a batch script, as slurmctld would.

    SCRIPT is read with its #SBATCH lines; sbatch options given here (before or after
    SCRIPT) override them, and SBATCH_* / SLURMGPU_* variables of this shell count, as
    they would for sbatch. Runs the same Lua as the controller's job_submit.lua.

    Exit status: 0 accepted (warnings printed), 1 rejected, 2 usage or input error.

    \b
    Examples:
      slurmgpu check train.sbatch
      slurmgpu check train.sbatch -N 4 --gpus-per-node=8
      slurmgpu check --site gb200-nvl72 -p gpu --segment=4 train.sbatch --json
    """
    import getpass

    from .jobdesc import split_command
    from .policy import check_script

    script_path, options, words = split_command(args)
    if script_path is None:
        raise click.UsageError("missing SCRIPT (the batch script to check)")
    try:
        if script_path == "-":
            data = sys.stdin.buffer.read()
        else:
            with open(script_path, "rb") as f:
                data = f.read()
    except OSError as exc:
        raise SlurmgpuError("cannot read %s: %s" % (script_path, exc.strerror)) from None
    if b"\r\n" in data:  # as sbatch does, before anything reaches the controller
        raise SlurmgpuError("%s: sbatch refuses scripts with DOS line breaks (\\r\\n); convert it with dos2unix"
                            % script_path)
    s = _load_site(site_name, quiet=as_json)
    try:
        user = getpass.getuser()
    except Exception:  # no passwd entry: the controller would fall back to the uid
        user = None
    uid = os.getuid() if hasattr(os, "getuid") else None
    verdict = check_script(s, data, options, partition=partition, env=dict(os.environ), user=user, uid=uid,
                           script_path=script_path, script_args=words)
    if as_json:
        out = verdict.to_dict()
        out["site"] = s.name
        out["script"] = script_path
        _emit_json(out)
    else:
        for msg in verdict.messages:
            click.echo("error: %s" % msg)
        for msg in verdict.warnings:
            click.echo("warning: %s" % msg)
        for msg in verdict.notes:
            click.echo("warning: %s" % msg)
        lay = verdict.layout
        if verdict.exempt:
            how = "exempt from the policy"
        elif verdict.source == "none":
            how = "no parallel layout found (nothing to check for TP)"
        else:
            how = "TP=%s PP=%s CP=%s EP=%s%s, from %s%s" % (
                lay["tp"], lay["pp"], lay["cp"], lay["ep"], "" if lay["dp"] is None else " DP=%s" % lay["dp"],
                {"stamp": "the slurmgpu stamp line", "env": "SLURMGPU_* variables",
                 "flags": "launcher flags"}.get(verdict.source, verdict.source),
                " (%s)" % verdict.launcher if verdict.launcher else "")
        where = ", ".join(verdict.partitions) or "no managed partition"
        click.echo("%s: %s on site %s, partition %s; %s" % (
            script_path, "REJECTED" if not verdict.accepted else "accepted", s.name, where, how))
    sys.exit(verdict.exit_code)


@main.group("admin", cls=_Group)
def admin() -> None:
    """Cluster admin tasks: the submit filter (job_submit.lua, cli_filter.lua) and the policy
    of the SPANK launch guard (slurmgpu_spank.lua, docs/admin-spank.md).

    \b
    Example:
      slurmgpu admin install --site /etc/slurmgpu/site.yaml --conf-dir /etc/slurm --kind all
    """


def _cluster_check(s: Any, skip: bool, slurm_conf: Optional[str] = None) -> None:
    """Refuse a site whose partitions do not match the live cluster's; warn when scontrol
    cannot reach a cluster (the filter is then rendered unchecked)."""
    if skip:
        click.echo("slurmgpu: partitions of site %s not checked against the cluster (--no-cluster-check)"
                   % s.name, err=True)
        return
    from .cluster_check import check_site_partitions
    from .errors import Refused
    from .runner import SubprocessRunner

    res = check_site_partitions(s, SubprocessRunner({"SLURM_CONF": slurm_conf} if slurm_conf else None))
    if not res.reachable:
        click.echo("warning: %s" % res.summary(), err=True)
    elif not res.ok:
        raise Refused("error: " + res.problem())
    else:
        click.echo("slurmgpu: %s" % res.summary(), err=True)


_NO_CLUSTER_CHECK = click.option(
    "--no-cluster-check", is_flag=True,
    help="Do not compare the site's partitions with the live cluster's (scontrol show partition); "
         "for a site rendered on another cluster.")


@admin.command("render-filter")
@click.option("--site", "site_name", metavar="NAME|PATH", help="Site config (default: the site in effect).")
@click.option("--kind", type=click.Choice(["job_submit", "cli_filter", "spank"]), required=True,
              help="job_submit.lua (slurmctld, the enforcement), cli_filter.lua (sbatch/salloc/srun) "
                   "or slurmgpu_spank.lua (the SPANK launch guard, every srun step).")
@click.option("-o", "--output", type=click.Path(dir_okay=False), help="Write here instead of stdout.")
@_NO_CLUSTER_CHECK
def admin_render_filter(site_name: Optional[str], kind: str, output: Optional[str], no_cluster_check: bool) -> None:
    """Print the filter with the site's topology baked in (deterministic, Lua 5.1).

    Where scontrol reaches a cluster, the site's partitions must match the cluster's: a
    site partition the cluster lacks, or a cluster partition with GPUs the site does not
    describe, is refused (exit 1) with both lists, since the filter would check no job
    there. Without a reachable cluster a warning says the check was not done.

    \b
    Examples:
      slurmgpu admin render-filter --site my-cluster.yaml --kind job_submit -o job_submit.lua
      slurmgpu admin render-filter --site dgx-h100 --kind cli_filter | less
      slurmgpu admin render-filter --site dgx-h100 --kind spank -o /etc/slurm/slurmgpu_spank.lua
      slurmgpu admin render-filter --site other.yaml --kind job_submit --no-cluster-check
    """
    from .policy import render_filter

    s = _load_site(site_name, quiet=output is None)
    text = render_filter(s, kind)
    _cluster_check(s, no_cluster_check)
    if output is None:
        click.echo(text, nl=False)
        return
    with open(output, "w", encoding="utf-8") as f:
        f.write(text)
    click.echo("wrote %s (%s for site %s)" % (output, kind, s.name), err=True)


@admin.command("install")
@click.option("--site", "site_name", metavar="NAME|PATH",
              help="Site config: required here (or $SLURMGPU_SITE, or /etc/slurmgpu/site.yaml).")
@click.option("--conf-dir", type=click.Path(file_okay=False), default=None,
              help="Directory of slurm.conf (default: that of $SLURM_CONF, else /etc/slurm).")
@click.option("--kind", type=click.Choice(["job_submit", "cli_filter", "spank", "all"]), default="job_submit",
              show_default=True, help="Which filter(s) to install.")
@click.option("--force", is_flag=True,
              help="Replace a filter that slurmgpu did not write (a backup is kept beside it).")
@click.option("--dry-run", is_flag=True, help="Show the diff of what would change; write nothing.")
@click.option("--allow-preset", is_flag=True,
              help="Install a built-in preset (an example site) as this cluster's policy.")
@_NO_CLUSTER_CHECK
def admin_install(site_name: Optional[str], conf_dir: Optional[str], kind: str, force: bool, dry_run: bool,
                  allow_preset: bool, no_cluster_check: bool) -> None:
    """Install the rendered filter next to slurm.conf, atomically, with a newer mtime.

    slurmctld 22.05 reloads job_submit.lua only when its mtime is newer than the last load
    (not on `scontrol reconfigure`); this command guarantees that. It prints the slurm.conf
    line to add if it is missing.

    Safety: the site must be named (--site, $SLURMGPU_SITE or /etc/slurmgpu/site.yaml;
    built-in presets need --allow-preset); its partitions must match the cluster's when
    scontrol reaches it (see render-filter); a filter that slurmgpu did not write is
    refused, with the diff, unless --force. A replaced file that changes is kept as
    NAME.bak-YYYYmmddTHHMMSS beside it. Exit status: 0 installed, 1 refused (nothing
    written), 2 usage or input error.

    \b
    Examples:
      slurmgpu admin install --site /etc/slurmgpu/site.yaml
      slurmgpu admin install --site my-cluster.yaml --conf-dir /etc/slurm --kind all
      slurmgpu admin install --site my-cluster.yaml --dry-run       # the diff, nothing written
      slurmgpu admin install --site my-cluster.yaml --force         # replace a hand-written filter
      slurmgpu admin install --site my-cluster.yaml --kind spank   # see docs/admin-spank.md
    """
    from .errors import Refused
    from .policy import install_filter, install_site_problem, plan_install
    from .site import load_site, site_search

    path, why = site_search(site_name, os.environ)
    problem = install_site_problem(path, why, allow_preset=allow_preset)
    if problem:
        raise Refused(problem)
    s = load_site(path)
    click.echo("slurmgpu: site %s (%s: %s)" % (s.name, why, path), err=True)
    if conf_dir is None:
        conf_dir = os.path.dirname(os.environ["SLURM_CONF"]) if os.environ.get("SLURM_CONF") else "/etc/slurm"
    conf_file = os.path.join(conf_dir, "slurm.conf")
    _cluster_check(s, no_cluster_check, conf_file if os.path.isfile(conf_file) else None)
    kinds = ["job_submit", "cli_filter", "spank"] if kind == "all" else [kind]
    plans = [plan_install(s, conf_dir, k) for k in kinds]  # all checked before anything is written
    if dry_run:
        for p in plans:
            if p.changes:
                click.echo(p.diff(), nl=False)
            click.echo("%s: %s" % (p.path, "would be created" if p.existing is None else
                                   "unchanged (the mtime would be made newer)" if not p.changes else
                                   "would be replaced; it was not written by slurmgpu (needs --force)"
                                   if p.foreign else "would be replaced"), err=True)
        return
    foreign = [p for p in plans if p.foreign]
    if foreign and not force:
        for p in foreign:
            click.echo(p.diff(), nl=False)
        raise Refused("%s %s not written by slurmgpu (no `slurmgpu admin render-filter` header): a "
                      "site's own filter. Nothing was installed; the diff above shows what would change. "
                      "Re-run with --force to replace it (a backup is kept beside it)."
                      % (", ".join(p.path for p in foreign), "was" if len(foreign) == 1 else "were"))
    for p in plans:
        k = p.kind
        res = install_filter(s, conf_dir, k, force=force, plan=p)
        if res.backup:
            click.echo("slurmgpu: kept the old %s%s as %s" % (
                res.path, " (not written by slurmgpu)" if res.foreign else "", res.backup), err=True)
        click.echo("installed %s (%s for site %s%s)" % (
            res.path, k, s.name, "" if not res.replaced else ", replaced the old one" if p.changes else
            ", unchanged, newer mtime"))
        if k == "spank":
            click.echo("  plugstack.conf %s: %s" % ("already loads it" if res.conf_has_line else "needs", res.slurm_conf_line))
            click.echo("  the plugin: make -C contrib/spank install; the .so and this file must be on every"
                       " node that runs srun or slurmstepd (docs/admin-spank.md)")
        elif res.conf_has_line:
            click.echo("  slurm.conf already has %s" % res.slurm_conf_line)
        else:
            click.echo("  add to slurm.conf: %s" % res.slurm_conf_line)
            if k == "job_submit":
                click.echo("  then restart slurmctld (a new JobSubmitPlugins value is read at startup)")
            else:
                click.echo("  on every node that runs sbatch/salloc/srun (or use configless mode)")
    click.echo("check the log after the next submission: grep slurmgpu-filter slurmctld.log")


if __name__ == "__main__":  # pragma: no cover
    main()
