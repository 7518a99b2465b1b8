"""`check` and `admin render-filter/install`."""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Any, Dict, List, Optional

import click

from ..errors import SlurmgpuError
from .app import _Group, exits, main
from .common import OUTPUT_FILE, _emit_json, _load_site, _write_atomic, complete_files

if TYPE_CHECKING:
    from ..site import Site


@main.command("check", context_settings={"ignore_unknown_options": True, "allow_interspersed_args": True})
@click.option("--site", "site_name", metavar="NAME|PATH", help="Site config (default: the site in effect).")
@click.option("--partition", metavar="NAME[,NAME]", help="Partition(s), as sbatch --partition/-p.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable verdict.")
@click.option(
    "--html",
    "html_file",
    metavar="FILE",
    type=OUTPUT_FILE,
    help="Also write the explain view to FILE: the submitted layout and, if rejected, the fix side by side.",
)
@click.argument(
    "args", nargs=-1, type=click.UNPROCESSED, metavar="SCRIPT [SBATCH_OPTIONS...]", shell_complete=complete_files
)
@exits(
    (0, "accepted (warnings on standard error)"),
    (1, "rejected by the site's submit filter (its message and the fix on standard error)"),
    (2, "refused before the filter (sbatch or slurmctld would not take it: their words), or a usage or input error"),
)
def check_cmd(
    site_name: Optional[str], partition: Optional[str], as_json: bool, html_file: Optional[str], args: Any
) -> None:
    """Give the submit filter's verdict on a batch script, as slurmctld would.

    SCRIPT is read with its #SBATCH lines; sbatch options given here (before or after
    SCRIPT) override them, and SBATCH_* / SLURMGPU_* variables of this shell count, as
    they would for sbatch. Runs the same Lua as the controller's job_submit.lua, after
    what sbatch and slurmctld themselves refuse (a word sbatch cannot read in an #SBATCH
    line, more GPUs, CPUs or memory per node than the partition's nodes have), for the
    Slurm release the site names. The verdict goes to standard output, the messages to
    standard error.

    \b
    Examples:
      slurmgpu gen --model llama3-8b --launcher megatron --smoke -o train.sbatch && slurmgpu check train.sbatch
      slurmgpu gen --launcher torchrun -o t.sh -- train.py && slurmgpu check t.sh -N 4 --gpus-per-node=8
      slurmgpu gen --site gb200-nvl72 --launcher torchrun --nodes 4 -o t.sh -- train.py && \\
          slurmgpu check --site gb200-nvl72 -p gpu --segment=4 t.sh --json
      slurmgpu gen --launcher torchrun -o t.sh -- train.py && slurmgpu check t.sh --html check.html
    """
    from ..slurm import split_command

    script_path, options, words = split_command(args)
    if script_path is None:
        raise click.UsageError("missing SCRIPT (the batch script to check)")
    try:
        _check(site_name, partition, as_json, html_file, script_path, options, words)
    except SlurmgpuError as exc:
        if not as_json:
            raise
        # tools reading --json get a verdict object for refused input too (exit 2)
        _emit_json(
            {
                "decision": "error",
                "exit_code": exc.exit_code,
                "error": str(exc),
                "messages": [],
                "warnings": [],
                "shape": None,
                "shapes": [],
                "script": script_path,
            }
        )
        sys.exit(exc.exit_code)


def _check(
    site_name: Optional[str],
    partition: Optional[str],
    as_json: bool,
    html_file: Optional[str],
    script_path: str,
    options: List[str],
    words: List[str],
) -> None:
    import getpass

    from ..policy import check_script

    try:
        if script_path == "-":
            data = sys.stdin.buffer.read()
        else:
            with open(script_path, "rb") as f:
                data = f.read()
    except OSError as exc:
        raise SlurmgpuError("cannot read %s: %s" % (script_path, exc.strerror)) from None
    if b"\r\n" in data:  # as sbatch does, before anything reaches the controller
        raise SlurmgpuError(
            "%s: sbatch refuses scripts with DOS line breaks (\\r\\n); convert it with dos2unix" % script_path
        )
    s = _load_site(site_name, quiet=as_json)
    try:
        user = getpass.getuser()
    except Exception:  # no passwd entry: the controller would fall back to the uid
        user = None
    uid = os.getuid() if hasattr(os, "getuid") else None
    verdict = check_script(
        s,
        data,
        options,
        partition=partition,
        env=dict(os.environ),
        user=user,
        uid=uid,
        script_path=script_path,
        script_args=words,
    )
    if html_file:
        from ..slurm import job_desc
        from .explain_out import check_view

        desc = job_desc(
            data,
            options,
            env=dict(os.environ),
            script_path=script_path,
            partition=partition,
            user=user,
            uid=uid,
            script_args=words,
            slurm_version=s.slurm_version,
        )
        check_view(s, verdict, desc, html_file, script_path)
    groups = _serve_groups(s, partition, data)
    if as_json:
        out = verdict.to_dict()
        out["site"] = s.name
        out["script"] = script_path
        if groups:
            out["serve_groups"] = groups
        _emit_json(out)
    else:
        # the diagnostics on standard error, the verdict line on standard output
        for msg in verdict.messages:
            click.echo("error: %s" % msg, err=True)
        for msg in verdict.warnings:
            click.echo("warning: %s" % msg, err=True)
        for msg in verdict.notes:
            click.echo("warning: %s" % msg, err=True)
        for msg in verdict.shadow_messages + verdict.shadow_warnings:  # never shown to the user
            click.echo("shadow: %s" % msg, err=True)
        if not verdict.accepted and verdict.judged_at == "batch-step":
            click.echo(
                "note: site %s judges this script when the job starts (policy.script_check batch-step): the "
                "controller accepts it (sbatch refuses it only where the site installs the cli_filter), and it "
                "fails at its batch step with the message above" % s.name,
                err=True,
            )
        lay = verdict.layout
        if verdict.exempt:
            how = "exempt from the policy"
        elif verdict.source == "none":
            how = "no parallel layout found (nothing to check for TP)"
        else:
            how = "TP=%s PP=%s CP=%s EP=%s%s, from %s%s" % (
                lay["tp"],
                lay["pp"],
                lay["cp"],
                lay["ep"],
                "" if lay["dp"] is None else " DP=%s" % lay["dp"],
                {"stamp": "the slurmgpu stamp line", "env": "SLURMGPU_* variables", "flags": "launcher flags"}.get(
                    verdict.source, verdict.source
                ),
                " (%s)" % verdict.launcher if verdict.launcher else "",
            )
        where = ", ".join(verdict.partitions) or "no managed partition"
        for g in groups:
            click.echo("serving group: %s" % g)
        click.echo(
            "%s: %s on site %s, partition %s; %s"
            % (
                script_path,
                "REJECTED"
                if not verdict.accepted
                else "accepted (shadow mode: enforcing would %s it)" % verdict.would
                if verdict.verdict.startswith("shadow-")
                else "accepted",
                s.name,
                where,
                how,
            )
        )
    sys.exit(verdict.exit_code)


def _serve_groups(s: Site, partition: Optional[str], data: bytes) -> List[str]:
    """A router or disaggregated serving script's roles, as `check` explains them."""
    from ..job.serving import SERVE_MARKER, explain_groups

    if SERVE_MARKER.encode() not in data:
        return []
    try:
        node = s.node_type_of(partition or s.default_partition)
    except SlurmgpuError:
        return []
    return explain_groups(node, data.decode("utf-8", "replace"))


@main.group("admin", cls=_Group)
def admin() -> None:
    """Cluster admin tasks: the submit filter (job_submit.lua, cli_filter.lua) and the policy
    of the SPANK launch guard (slurmgpu_spank.lua, `slurmgpu docs admin-spank`).

    \b
    Example:
      slurmgpu admin install --site /etc/slurmgpu/site.yaml --conf-dir /etc/slurm --kind all
    """


def _cluster_check(s: Site, skip: bool, slurm_conf: Optional[str] = None) -> None:
    """Refuse a site whose partitions do not match the live cluster's; warn when scontrol
    cannot reach a cluster (the filter is then rendered unchecked)."""
    if skip:
        click.echo(
            "slurmgpu: partitions of site %s not checked against the cluster (--no-cluster-check)" % s.name, err=True
        )
        return
    from ..errors import Refused
    from ..policy import check_site_partitions
    from ..slurm import SubprocessRunner

    res = check_site_partitions(s, SubprocessRunner({"SLURM_CONF": slurm_conf} if slurm_conf else None))
    if not res.reachable:
        click.echo("warning: %s" % res.summary(), err=True)
    elif not res.ok:
        raise Refused("error: " + res.problem())
    else:
        click.echo("slurmgpu: %s" % res.summary(), err=True)


_NO_CLUSTER_CHECK = click.option(
    "--no-cluster-check",
    is_flag=True,
    help="Do not compare the site's partitions with the live cluster's (scontrol show partition); "
    "for a site rendered on another cluster.",
)


@admin.command("render-filter")
@click.option("--site", "site_name", metavar="NAME|PATH", help="Site config (default: the site in effect).")
@click.option(
    "--kind",
    type=click.Choice(["job_submit", "cli_filter", "spank"]),
    required=True,
    help="job_submit.lua (slurmctld, the enforcement), cli_filter.lua (sbatch/salloc/srun) "
    "or slurmgpu_spank.lua (the SPANK launch guard, every srun step).",
)
@click.option("-o", "--output", type=OUTPUT_FILE, metavar="FILE", help="Write here (atomically) instead of stdout.")
@_NO_CLUSTER_CHECK
@exits((1, "refused: the site's partitions do not match the live cluster's (both lists on stderr)"))
def admin_render_filter(site_name: Optional[str], kind: str, output: Optional[str], no_cluster_check: bool) -> None:
    """Print the filter with the site's topology baked in (deterministic, Lua 5.1).

    Where scontrol reaches a cluster, the site's partitions must match the cluster's: a
    site partition the cluster lacks, or a cluster partition with GPUs the site does not
    describe, is refused (exit 1) with both lists, since the filter would check no job
    there. Without a reachable cluster a warning says the check was not done.

    \b
    Examples:
      slurmgpu admin render-filter --site dgx-h100 --kind job_submit -o job_submit.lua
      slurmgpu admin render-filter --site dgx-h100 --kind cli_filter > cli_filter.lua
      slurmgpu admin render-filter --site dgx-h100 --kind spank -o slurmgpu_spank.lua
      slurmgpu admin render-filter --site perlmutter --kind job_submit --no-cluster-check
    """
    from ..policy import render_filter

    s = _load_site(site_name, quiet=output is None)
    text = render_filter(s, kind)
    _cluster_check(s, no_cluster_check)
    if output is None:
        click.echo(text, nl=False)
        return
    _write_atomic(output, text, mode=0o644)
    click.echo("wrote %s (%s for site %s)" % (output, kind, s.name), err=True)


@admin.command("install")
@click.option(
    "--site",
    "site_name",
    metavar="NAME|PATH",
    help="Site config: required here (or $SLURMGPU_SITE, or /etc/slurmgpu/site.yaml).",
)
@click.option(
    "--conf-dir",
    type=click.Path(file_okay=False),
    default=None,
    help="Directory of slurm.conf (default: that of $SLURM_CONF, else /etc/slurm).",
)
@click.option(
    "--kind",
    type=click.Choice(["job_submit", "cli_filter", "spank", "all"]),
    default="job_submit",
    show_default=True,
    help="Which filter(s) to install.",
)
@click.option(
    "--force", is_flag=True, help="Replace a filter that slurmgpu did not write (a backup is kept beside it)."
)
@click.option("--dry-run", is_flag=True, help="Show the diff of what would change; write nothing.")
@click.option(
    "--allow-preset", is_flag=True, help="Install a built-in preset (an example site) as this cluster's policy."
)
@_NO_CLUSTER_CHECK
@exits(
    (0, "installed"),
    (1, "refused, nothing written (a filter slurmgpu did not write, no explicit site, partitions that do not match)"),
)
def admin_install(
    site_name: Optional[str],
    conf_dir: Optional[str],
    kind: str,
    force: bool,
    dry_run: bool,
    allow_preset: bool,
    no_cluster_check: bool,
) -> None:
    """Install the rendered filter next to slurm.conf, atomically, with a newer mtime.

    slurmctld 22.05 reloads job_submit.lua only when its mtime is newer than the last load
    (not on `scontrol reconfigure`); this command guarantees that. It prints the slurm.conf
    line to add if it is missing.

    Safety: the site must be named (--site, $SLURMGPU_SITE or /etc/slurmgpu/site.yaml;
    built-in presets need --allow-preset); its partitions must match the cluster's when
    scontrol reaches it (see render-filter); a filter that slurmgpu did not write is
    refused, with the diff, unless --force. A replaced file that changes is kept as
    NAME.bak-YYYYmmddTHHMMSS beside it.

    \b
    Examples:
      slurmgpu admin install --site /etc/slurmgpu/site.yaml
      slurmgpu admin install --site my-cluster.yaml --conf-dir /etc/slurm --kind all
      slurmgpu admin install --site my-cluster.yaml --dry-run       # the diff, nothing written
      slurmgpu admin install --site my-cluster.yaml --force         # replace a hand-written filter
      slurmgpu admin install --site my-cluster.yaml --kind spank   # see: slurmgpu docs admin-spank
    """
    from ..errors import Refused
    from ..policy import install_filter, install_site_problem, plan_install
    from ..site import load_site, site_search

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
    # all checked before anything is written
    plans = [plan_install(s, conf_dir, k, with_spank="spank" in kinds) for k in kinds]
    for note in dict.fromkeys(n for p in plans for n in p.notes):
        click.echo("warning: %s" % note, err=True)
    if dry_run:
        for p in plans:
            if p.changes:
                click.echo(p.diff(), nl=False)
            click.echo(
                "%s: %s"
                % (
                    p.path,
                    "would be created"
                    if p.existing is None
                    else "unchanged (the mtime would be made newer)"
                    if not p.changes
                    else "would be replaced; it was not written by slurmgpu (needs --force)"
                    if p.foreign
                    else "would be replaced",
                ),
                err=True,
            )
        return
    foreign = [p for p in plans if p.foreign]
    if foreign and not force:
        for p in foreign:
            click.echo(p.diff(), nl=False)
        raise Refused(
            "%s %s not written by slurmgpu (no `slurmgpu admin render-filter` header): a "
            "site's own filter. Nothing was installed; the diff above shows what would change. "
            "Re-run with --force to replace it (a backup is kept beside it)."
            % (", ".join(p.path for p in foreign), "was" if len(foreign) == 1 else "were")
        )
    for p in plans:
        k = p.kind
        res = install_filter(s, conf_dir, k, force=force, plan=p)
        if res.backup:
            click.echo(
                "slurmgpu: kept the old %s%s as %s"
                % (res.path, " (not written by slurmgpu)" if res.foreign else "", res.backup),
                err=True,
            )
        click.echo(
            "installed %s (%s for site %s%s)"
            % (
                res.path,
                k,
                s.name,
                "" if not res.replaced else ", replaced the old one" if p.changes else ", unchanged, newer mtime",
            )
        )
        if k == "spank":
            click.echo(
                "  plugstack.conf %s: %s" % ("already loads it" if res.conf_has_line else "needs", res.slurm_conf_line)
            )
            click.echo(
                "  the plugin: make -C contrib/spank install; the .so and this file must be on every"
                " node that runs srun or slurmstepd (slurmgpu docs admin-spank)"
            )
        elif res.conf_has_line:
            click.echo("  slurm.conf already has %s" % res.slurm_conf_line)
        else:
            click.echo("  add to slurm.conf: %s" % res.slurm_conf_line)
            if k == "job_submit":
                click.echo("  then restart slurmctld (a new JobSubmitPlugins value is read at startup)")
            else:
                click.echo("  on every node that runs sbatch/salloc/srun (or use configless mode)")
    click.echo("check the log after the next submission: grep slurmgpu-filter slurmctld.log")


@admin.command("topology")
@click.option("--site", "site_name", metavar="NAME|PATH", help="Site config (default: the site in effect).")
@click.option("--partition", metavar="NAME", help="Partition whose nodes to lay out (default: the site's default).")
@click.option("--nodes", "hostlist", metavar="HOSTLIST", help="The partition's nodes in rack order, e.g. gb[001-036].")
@click.option(
    "--form",
    type=click.Choice(["block", "yaml", "tree"]),
    default="block",
    show_default=True,
    help="topology.conf block form (23.11+), topology.yaml (25.05+), or tree form for IB leaf switches.",
)
@click.option(
    "--switch",
    "switches",
    multiple=True,
    metavar="NAME=HOSTLIST",
    help="An IB leaf switch (tree form; default: the partition's leaf_switches in the site file).",
)
@click.option(
    "--emit",
    type=click.Choice(["topology", "gres", "nodes"]),
    default="topology",
    show_default=True,
    help="What to print: the topology file, the matching gres.conf lines, or the slurm.conf "
    "NodeName/PartitionName/TopologyPlugin lines.",
)
@click.option(
    "--diff",
    "do_diff",
    is_flag=True,
    help="Compare with the live cluster (`scontrol show topology`) instead of printing: exit 0 when it "
    "matches, 1 when it differs, 3 when the cluster cannot be reached (said on stderr).",
)
@exits(
    (1, "--diff: the live topology differs (the difference on stdout)"),
    (3, "--diff: the live cluster cannot be reached (said on stderr)"),
)
def admin_topology(
    site_name: Optional[str],
    partition: Optional[str],
    hostlist: Optional[str],
    form: str,
    switches: Any,
    emit: str,
    do_diff: bool,
) -> None:
    """Print Slurm's topology for the site: one block per NVLink domain, or IB leaf switches.

    The same site file gives the gres.conf and slurm.conf node lines (--emit), and --diff
    checks what the running slurmctld has loaded.

    \b
    Examples:
      slurmgpu admin topology --site gb200-nvl72 --nodes 'gb[001-036]' > topology.conf
      slurmgpu admin topology --site gb200-nvl72 --nodes 'gb[001-036]' --emit gres >> gres.conf
      slurmgpu admin topology --site gb200-nvl72 --nodes 'gb[001-036]' --diff
      slurmgpu admin topology --form tree --switch leaf1='n[01-04]' --switch leaf2='n[05-08]'
    """
    from ..discover.topology import (
        block_conf,
        block_yaml,
        blocks,
        diff_live,
        gres_conf,
        node_lines,
        site_switches,
        tree_conf,
    )
    from ..slurm import SubprocessRunner
    from ..slurm.parse import parse_hostlist

    pairs: Dict[str, str] = {}
    for sw in switches:
        name, sep, hosts = sw.partition("=")
        if not sep or not name or not hosts:
            raise SlurmgpuError("--switch wants NAME=HOSTLIST, got %r" % sw)
        pairs[name] = hosts
    site = None
    if form != "tree" or not pairs or emit != "topology":
        site = _load_site(site_name, quiet=True)
    pname = partition or (site.default_partition if site else "")
    if form == "tree":
        if not pairs and site is not None:
            pairs = site_switches(site, pname)
        if not pairs:
            raise SlurmgpuError(
                "the tree form needs the IB leaf switches: --switch NAME=HOSTLIST, or partitions.%s.leaf_switches "
                "in the site file" % pname
            )
    if site is not None and emit != "topology":
        nodes = (
            parse_hostlist(hostlist)
            if hostlist
            else [n for v in site.partition(pname).leaf_switches.values() for n in v]
        )
        if not nodes:
            raise SlurmgpuError("--nodes HOSTLIST is needed: the site file gives node counts, not names")
        click.echo((gres_conf if emit == "gres" else node_lines)(site, pname, nodes), nl=False)
        return
    if form == "tree":
        wanted = {k: parse_hostlist(v) for k, v in pairs.items()}
        text, kind = tree_conf(pairs), "SwitchName"
    else:
        assert site is not None
        if not hostlist:
            raise SlurmgpuError("--nodes HOSTLIST is needed: the site file gives node counts, not names")
        nodes = parse_hostlist(hostlist)
        wanted = {k: list(v) for k, v in blocks(site, pname, nodes).items()}
        text = block_conf(site, pname, nodes) if form == "block" else block_yaml(site, pname, nodes)
        kind = "BlockName"
    if not do_diff:
        click.echo(text, nl=False)
        return
    diff, why = diff_live(SubprocessRunner(), wanted, kind)
    if diff is None:
        click.echo("warning: live topology not compared: %s" % why, err=True)
        sys.exit(3)
    click.echo(diff.text(), nl=False)
    if not diff.same:
        sys.exit(1)


@admin.command("replay")
@click.option("--site", "site_name", metavar="NAME|PATH", help="Site config (default: the site in effect).")
@click.option(
    "--since",
    metavar="WHEN",
    help="Past jobs from accounting (sacct) submitted since WHEN: 7d, 24h or a date (2026-11-01).",
)
@click.option("--until", metavar="WHEN", help="... and before WHEN (default: now).")
@click.option("--user", metavar="NAME", help="Only this user's jobs (sacct -u).")
@click.option("--partition", metavar="NAME", help="Only jobs that ran in this partition (sacct -r).")
@click.option(
    "--from-dir",
    type=click.Path(file_okay=False),
    help="Judge every file under DIR as a batch script instead (no accounting needed).",
)
@click.option(
    "--enforce",
    "as_enforce",
    is_flag=True,
    help="Replay as if every warn and shadow mode were enforce (default: the site's policy; shadow counts as enforce).",
)
@click.option(
    "--state",
    "state_file",
    type=OUTPUT_FILE,
    metavar="FILE",
    help="Keep finished jobs in FILE and skip them on a rerun (resume an interrupted replay).",
)
@click.option("--limit", type=click.IntRange(min=1), default=100000, show_default=True, help="Judge at most N jobs.")
@click.option("--json", "as_json", is_flag=True, help="The report and every job's row as JSON.")
@click.option("--csv", "as_csv", is_flag=True, help="One CSV row per job.")
@exits((0, "replayed (the report says what would have been rejected)"))
def admin_replay(
    site_name: Optional[str],
    since: Optional[str],
    until: Optional[str],
    user: Optional[str],
    partition: Optional[str],
    from_dir: Optional[str],
    as_enforce: bool,
    state_file: Optional[str],
    limit: int,
    as_json: bool,
    as_csv: bool,
) -> None:
    """Run the site's filter over past jobs: what enforcing it would have rejected or warned.

    Jobs come from accounting (--since; needs slurmdbd with AccountingStoreFlags=job_script,job_env,
    which keeps each batch script and environment; the sbatch command line is SubmitLine) or
    from a directory of scripts (--from-dir). Each is judged by the same Lua as job_submit.lua;
    the report groups the jobs that would be rejected or warned by rule, user and launcher, with
    the messages users would have seen.

    \b
    Examples:
      slurmgpu admin replay --site /etc/slurmgpu/site.yaml --since 2026-11-01
      slurmgpu admin replay --since 7d --user alice --partition gpu --json
      slurmgpu admin replay --since 2026-10-01 --state replay.json   # resumable
      slurmgpu admin replay --from-dir . --enforce --csv > verdicts.csv
    """
    import csv

    from ..policy.replay import ReplayState, SacctQuery, enforce_everywhere, jobs_from_dir, jobs_from_sacct, replay
    from ..slurm import SubprocessRunner

    if (since is None) == (from_dir is None):
        raise click.UsageError("give either --since WHEN (accounting: 7d, 24h or a date) or --from-dir DIR")
    if from_dir is not None and (until or user or partition):
        raise click.UsageError("--until, --user and --partition select accounting records: use them with --since")
    if as_json and as_csv:
        raise click.UsageError("--json and --csv are exclusive")
    s = _load_site(site_name, quiet=as_json or as_csv)
    if as_enforce:
        s = enforce_everywhere(s)
    if from_dir is not None:
        source = "dir:%s" % os.path.abspath(from_dir)
    else:
        source = "sacct:%s..%s user=%s partition=%s" % (since, until or "now", user or "*", partition or "*")
    source += " site=%s%s" % (s.name, " enforce" if as_enforce else "")
    state = ReplayState(state_file, source)
    if from_dir is not None:
        jobs = jobs_from_dir(from_dir)
    else:
        assert since is not None
        query = SacctQuery(
            _sacct_time(since, "--since"), _sacct_time(until, "--until") if until else None, user, partition
        )
        jobs = jobs_from_sacct(SubprocessRunner(), query, skip=state.rows)
    tty = sys.stderr.isatty()

    def progress(n: int) -> None:
        if n % 50 == 0:
            click.echo("\rslurmgpu: replayed %d jobs" % n, err=True, nl=False)

    report = replay(s, jobs, state, limit=limit, progress=progress if tty else None)
    if tty:
        click.echo("\r" + " " * 40 + "\r", err=True, nl=False)
    if as_json:
        _emit_json(report.to_dict())
    elif as_csv:
        w = csv.writer(sys.stdout, lineterminator="\n")
        w.writerows(report.csv_rows())
    else:
        click.echo(report.text(), nl=False)


@admin.command("stats")
@click.option("--site", "site_name", metavar="NAME|PATH", help="Site name for the metrics' site label.")
@click.option(
    "--log",
    "logs",
    multiple=True,
    type=click.Path(dir_okay=False),
    help="slurmctld.log to read (repeatable; rotated .gz files too). Default: SlurmctldLogFile of slurm.conf.",
)
@click.option(
    "--accounting", "from_accounting", is_flag=True, help="Count the AdminComment tokens in sacct instead of the log."
)
@click.option("--since", default="24h", show_default=True, metavar="WHEN", help="Window start: 24h, 7d, or a date.")
@click.option(
    "--prometheus",
    "prom_file",
    type=OUTPUT_FILE,
    metavar="FILE",
    help="Also write the counts to FILE in node-exporter textfile format (atomically).",
)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable counts.")
def admin_stats(
    site_name: Optional[str],
    logs: Any,
    from_accounting: bool,
    since: str,
    prom_file: Optional[str],
    as_json: bool,
) -> None:
    """Count the filter's verdicts (ok, warn, reject, shadow-warn, shadow-reject, exempt, error)
    per partition and rule over a window, from its slurmctld.log lines or from accounting.

    The log has every decision; accounting only jobs that were let through (a rejected job
    has no record). --prometheus writes gauges (slurmgpu_filter_decisions,
    slurmgpu_filter_rule_hits) for node-exporter's textfile collector, e.g. from cron.

    \b
    Examples:
      slurmgpu admin stats --since 7d
      slurmgpu admin stats --log /var/log/slurm/slurmctld.log --since 2026-11-01 --json
      slurmgpu admin stats --prometheus /var/lib/node_exporter/textfile/slurmgpu.prom
      slurmgpu admin stats --accounting --since 30d
    """
    from ..policy.stats import collect, collect_accounting, parse_since, prometheus_text, write_atomic
    from ..slurm import SubprocessRunner

    start = parse_since(since)
    if from_accounting:
        if logs:
            raise click.UsageError("--log and --accounting are exclusive")
        st = collect_accounting(SubprocessRunner(), start)
    else:
        paths = list(logs) or [_ctld_log_file()]
        st = collect(paths, start)
    site = site_name or os.environ.get("SLURMGPU_SITE") or "-"
    if site_name:
        site = _load_site(site_name, quiet=True).name
    if prom_file:
        write_atomic(prom_file, prometheus_text(st, site))
        click.echo("wrote %s (%d decisions)" % (prom_file, st.lines), err=True)
    if as_json:
        _emit_json(st.to_dict())
    else:
        click.echo(st.text(), nl=False)


def _sacct_time(text: str, flag: str) -> str:
    """WHEN as --since takes it everywhere (7d, 24h, 30m ago, or a date) -> sacct's date form."""
    import time

    from ..policy.stats import parse_since

    try:
        return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(parse_since(text)))
    except SlurmgpuError:
        raise SlurmgpuError(
            "%s %r: expected a duration (24h, 7d, 30m: that long ago) or a date (2026-11-01[T08:00[:00]])"
            % (flag, text)
        ) from None


def _ctld_log_file() -> str:
    """SlurmctldLogFile from slurm.conf ($SLURM_CONF or /etc/slurm/slurm.conf)."""
    import re

    conf = os.environ.get("SLURM_CONF") or "/etc/slurm/slurm.conf"
    try:
        with open(conf, encoding="utf-8", errors="replace") as f:
            for line in f:
                m = re.match(r"^\s*SlurmctldLogFile\s*=\s*(\S+)", line, re.I)
                if m:
                    return m.group(1)
    except OSError as exc:
        raise SlurmgpuError("cannot read %s (%s): name the log with --log" % (conf, exc.strerror)) from None
    raise SlurmgpuError("%s has no SlurmctldLogFile (slurmctld logs to syslog): name the log with --log" % conf)
