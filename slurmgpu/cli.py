"""The `slurmgpu` command line. Click lives here and nowhere else.

Heavy modules (yaml, jinja2, psutil, lupa) are imported inside commands so that
`slurmgpu --help` stays fast on a busy login node.
"""
from __future__ import annotations

import json
import os
import sys
from typing import Any, Optional

import click

from . import __version__
from .errors import SlurmgpuError

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
    """Inspect and validate site configs (cluster descriptions)."""


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


if __name__ == "__main__":  # pragma: no cover
    main()
