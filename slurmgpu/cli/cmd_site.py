"""`site list/show/validate`, `discover` and `probe`."""

from __future__ import annotations

import os
import sys
from typing import Any, Dict, List, Optional

import click

from ..errors import SlurmgpuError
from .app import _Group, exits, main
from .common import OUTPUT_FILE, _emit_json, _load_site, _write_atomic


@main.group(cls=_Group)
def site() -> None:
    """Inspect and validate site configs (cluster descriptions).

    \b
    Examples:
      slurmgpu site list
      slurmgpu site show gb200-nvl72
      echo 'extends: dgx-h100' > my-cluster.yaml && slurmgpu site validate my-cluster.yaml
    """


@site.command("list")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def site_list(as_json: bool) -> None:
    """List the built-in site presets.

    \b
    Example:
      slurmgpu site list
    """
    from ..site import load_site, preset_dir, preset_names

    rows: List[Dict[str, Any]] = []
    for name in preset_names():
        s = load_site(str(preset_dir() / (name + ".yaml")))
        nt = s.node_type_of()
        rows.append(
            {
                "name": name,
                "gpus_per_node": nt.gpus,
                "gpu": nt.gpu_model,
                "fabric": nt.fabric,
                "nvlink_domain": nt.nvlink_domain,
                "description": s.description,
            }
        )
    if as_json:
        _emit_json(rows)
        return
    head = ("NAME", "GPUS/NODE", "GPU", "FABRIC", "NVLINK DOMAIN")
    table = [head] + [
        (r["name"], str(r["gpus_per_node"]), r["gpu"], r["fabric"], str(r["nvlink_domain"])) for r in rows
    ]
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
    click.echo(
        "  default partition: %s   gpu request: --%s   topology: %s"
        % (s.default_partition, s.gpu_request if s.gpu_request == "gpus-per-node" else "gres=gpu:N", s.topology)
    )
    for pname, p in s.partitions.items():
        nt = s.node_types[p.node_type]
        click.echo(
            "  partition %s: %d x %s%s%s"
            % (
                pname,
                p.nodes,
                p.node_type,
                ", -C %s" % p.constraint if p.constraint else "",
                ", whole nodes" if p.exclusive else "",
            )
        )
        click.echo(
            "    %d x %s (%s, %g GB), %s %g GB/s per GPU, NVLink domain %d GPU%s%s"
            % (
                nt.gpus,
                nt.gpu_model,
                nt.vendor,
                nt.gpu_memory_gb,
                nt.link,
                nt.link_gbs,
                nt.nvlink_domain,
                "s" if nt.nvlink_domain != 1 else "",
                " (%d nodes)" % nt.domain_nodes if nt.domain_nodes > 1 else "",
            )
        )
        nics = ", ".join("%s %gG" % (n.name, n.gbps) for n in nt.compute_nics) or "none"
        click.echo("    fabric %s: %s; socket interface %s" % (nt.fabric, nics, nt.socket_ifname or "-"))
        amap = nt.affinity
        if amap is not None:  # GPU -> NUMA node -> CPUs -> NIC (docs/affinity.md)
            click.echo(
                "    GPU -> NUMA node: %s (%s)" % (",".join(str(g.numa) for g in amap.gpus), amap.label())
                if amap.known
                else "    GPU -> NUMA node: unknown (%s)" % amap.unknown
            )
    click.echo("  container: %s   policy: %s" % (s.container.runtime, s.policy.mode))


@site.command("validate")
@click.argument("paths", nargs=-1, required=True, type=click.Path())
@exits((0, "every file is valid"), (1, "a file has errors (each one on stderr as file:line:col: field: message)"))
def site_validate(paths: Any) -> None:
    """Validate site config files; print file:line:col: field: message for each problem (all of
    them, in one run).

    \b
    Examples:
      echo 'extends: dgx-h100' > my-cluster.yaml && slurmgpu site validate my-cluster.yaml
      slurmgpu site validate /etc/slurmgpu/site.yaml
    """
    from ..errors import ConfigError
    from ..site import load_site

    bad = 0
    for path in paths:
        try:
            s = load_site(path)
        except ConfigError as exc:
            bad += 1
            for issue in exc.issues:
                click.echo(str(issue), err=True)
            continue
        click.echo(
            "%s: ok (site %s, %d partition%s)"
            % (path, s.name, len(s.partitions), "" if len(s.partitions) == 1 else "s")
        )
    if bad:
        sys.exit(1)


@main.command("discover")
@click.option(
    "-o",
    "--output",
    type=OUTPUT_FILE,
    default=None,
    metavar="FILE",
    help="Write the draft here, atomically (default: standard output).",
)
@click.option(
    "-p",
    "--partition",
    "partitions",
    multiple=True,
    metavar="NAME",
    help="Only this partition (repeat for several; default: every partition with GPU nodes).",
)
@click.option(
    "--probe",
    "with_probe",
    is_flag=True,
    help="Also run `slurmgpu probe` on one node of each node type through srun, for NICs, fabric and GPU links.",
)
@click.option(
    "--probe-command",
    default=None,
    metavar="CMD",
    help="How srun starts the probe on a compute node (default: slurmgpu probe --json).",
)
@click.option(
    "--probe-wait",
    default=60,
    show_default=True,
    type=click.IntRange(1),
    metavar="SECONDS",
    help="How long srun may wait for a busy node before that node type is left unprobed.",
)
@click.option(
    "--backend",
    type=click.Choice(["auto", "pyslurm", "commands"]),
    default="auto",
    show_default=True,
    help="pyslurm (if installed for this Slurm release) or the Slurm commands.",
)
@click.option("--name", default=None, help="Site name (default: Slurm's ClusterName).")
@click.option("--force", is_flag=True, help="Overwrite --output if it exists.")
@click.option(
    "--json", "as_json", is_flag=True, help="Print the draft as JSON (site, todos, notes, yaml) instead of YAML."
)
def discover_cmd(
    output: Optional[str],
    partitions: Any,
    with_probe: bool,
    probe_command: Optional[str],
    probe_wait: int,
    backend: str,
    name: Optional[str],
    force: bool,
    as_json: bool,
) -> None:
    """Draft a site config from the running Slurm cluster (run on a login node).

    Without a reachable cluster it stops with exit 2 and says what to do.

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

    from ..discover import check, discover, render
    from ..slurm import SubprocessRunner

    if output and output != "-" and os.path.exists(output) and not force:
        raise SlurmgpuError("%s exists; use --force to overwrite it" % output)
    cmd = (
        ["slurmgpu", "discover"]
        + (["-o", output] if output else [])
        + [x for p in partitions for x in ("-p", p)]
        + (["--probe"] if with_probe else [])
        + (["--name", name] if name else [])
    )
    draft = discover(
        SubprocessRunner(),
        only=tuple(partitions),
        with_probe=with_probe,
        backend=backend,
        name=name,
        probe_command=tuple(shlex.split(probe_command)) if probe_command else (),
        wait_s=probe_wait,
        command=" ".join(shlex.quote(c) for c in cmd),
    )
    text = render(draft)
    site_obj = check(text, output or "<draft>")
    for note in draft.notes:
        click.echo("note: %s" % note, err=True)
    todos = draft.todos()
    if as_json:
        _emit_json({"site": site_obj.to_dict(), "todos": todos, "notes": list(draft.notes), "yaml": text})
    elif output and output != "-":
        _write_atomic(output, text, mode=0o644)
    else:
        click.echo(text, nl=False)
    if not as_json:
        where = output if output and output != "-" else "the draft"
        click.echo(
            "%s: %d node type%s, %d partition%s, %d value%s marked TODO%s"
            % (
                where,
                len(draft.node_types),
                "" if len(draft.node_types) == 1 else "s",
                len(draft.partitions),
                "" if len(draft.partitions) == 1 else "s",
                len(todos),
                "" if len(todos) == 1 else "s",
                ":" if todos else "",
            ),
            err=True,
        )
        for t in todos:
            click.echo("  TODO %s" % t, err=True)
        if output and output != "-":
            click.echo("next: check the TODOs, then: slurmgpu site validate %s" % shlex.quote(output), err=True)


@main.command("probe")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output (what discover --probe reads).")
@click.option(
    "--sysfs",
    default="/sys",
    show_default=True,
    type=click.Path(file_okay=False),
    help="Read this sysfs tree instead (a recorded one, for testing).",
)
@click.option(
    "--domain",
    is_flag=True,
    help="Print only this node's NVLink domain (ClusterUUID/CliqueId from nvidia-smi -q) as one "
    "`SLURMGPU-NVL NODE ID` line: what discover --probe runs on every tray of a multi-node NVLink domain.",
)
def probe_cmd(as_json: bool, sysfs: str, domain: bool) -> None:
    """Report this node's GPUs, GPU links, RDMA ports, interfaces and implied NCCL settings.

    Meant for a compute node. Missing pieces (no GPU driver, no RDMA) are
    reported, not errors.

    \b
    Examples:
      srun -N1 -p gpu slurmgpu probe
      srun -N1 -p gpu --exclusive slurmgpu probe --json > node.json
      srun -N18 --ntasks-per-node=1 -p gb200 slurmgpu probe --domain
    """
    from ..node import describe, probe

    if domain:
        from ..node.probe import probe_domain

        click.echo(probe_domain())
        return

    result = probe(sysfs=sysfs)
    if as_json:
        click.echo(result.to_json())
    else:
        click.echo(describe(result))
