"""Does a site config describe the partitions of the live cluster?

A submit filter rendered for a site whose partition names differ from the cluster's checks
nothing: every job lands on a partition the policy does not know and is accepted. So
`slurmgpu admin install` and `admin render-filter` compare the site's partitions with what
`scontrol show partition` (and, for the GPUs, `scontrol show node`) reports, through a
`Runner`, and refuse a site that misses any of them. Parsing is slurm_parse's; nothing here
prints or exits.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

from ..site import Site
from ..slurm import Runner, parse_scontrol_nodes, parse_scontrol_partitions

TIMEOUT_S = 20.0  # scontrol retries an unreachable controller for a while; do not hang install
PARTITION_CMD = ("scontrol", "--all", "--oneliner", "show", "partition")
NODE_CMD = ("scontrol", "--all", "--oneliner", "show", "node")


@dataclass(frozen=True)
class ClusterPartition:
    name: str
    gpus: Optional[int]  # GPUs in the partition (TRES, else the nodes' Gres); None: unknown


@dataclass(frozen=True)
class PartitionCheck:
    """The site's partitions against the cluster's. `reachable` False: nothing was compared
    (`why` says what failed)."""

    site: str
    site_partitions: Tuple[str, ...]
    reachable: bool
    why: str = ""
    cluster_partitions: Tuple[ClusterPartition, ...] = ()
    missing_on_cluster: Tuple[str, ...] = ()  # site partitions the cluster does not have
    not_in_site: Tuple[str, ...] = ()  # cluster partitions with GPUs the site does not describe

    @property
    def ok(self) -> bool:
        return self.reachable and not self.missing_on_cluster and not self.not_in_site

    def _cluster_words(self) -> str:
        return (
            ", ".join(
                "%s (%s)" % (p.name, "%d GPUs" % p.gpus if p.gpus else "no GPUs" if p.gpus == 0 else "GPUs unknown")
                for p in self.cluster_partitions
            )
            or "(none)"
        )

    def problem(self) -> str:
        """The error text for a mismatch (several lines), '' when it matches."""
        if self.ok or not self.reachable:
            return ""
        lines = ["site '%s' does not describe this cluster's partitions (%s):" % (self.site, " ".join(PARTITION_CMD))]
        if self.missing_on_cluster:
            lines.append("  site partitions missing on the cluster: %s" % ", ".join(self.missing_on_cluster))
        if self.not_in_site:
            lines.append(
                "  cluster partitions with GPUs that the site does not describe: %s" % ", ".join(self.not_in_site)
            )
        lines.append("  the site has: %s" % (", ".join(self.site_partitions) or "(none)"))
        lines.append("  the cluster has: %s" % self._cluster_words())
        lines.append(
            "A filter rendered from this site checks no job on a partition it does not describe. "
            "Name the site's partitions as Slurm does (`slurmgpu discover -o site.yaml` drafts them "
            "from this cluster); give a partition `policy: off` to leave it unchecked on purpose; "
            "or pass --no-cluster-check if this site is for another cluster."
        )
        return "\n".join(lines)

    def summary(self) -> str:
        """One line for a match or an unreachable cluster."""
        if not self.reachable:
            return (
                "partitions of site '%s' not checked against the cluster: %s (pass --no-cluster-check "
                "to skip this check)" % (self.site, self.why)
            )
        return "site '%s' describes the cluster's partitions: %s" % (self.site, self._cluster_words())


def read_cluster_partitions(runner: Runner) -> Tuple[Optional[List[ClusterPartition]], str]:
    """The cluster's partitions with their GPU counts, or (None, why) when scontrol fails."""
    res = runner.run(list(PARTITION_CMD), timeout=TIMEOUT_S)
    if not res.ok:
        return None, res.why()
    parts = parse_scontrol_partitions(res.stdout)
    if not parts and res.stdout.strip():
        return None, "%s printed no partition records" % " ".join(PARTITION_CMD)
    gpus: Dict[str, Optional[int]] = {p.name: p.tres_gpus for p in parts}
    if any(v is None for v in gpus.values()):
        # TRES lists GPUs only when AccountingStorageTRES has gres/gpu: count the nodes' Gres
        nres = runner.run(list(NODE_CMD), timeout=TIMEOUT_S)
        if nres.ok:
            by_node = {n.name: n.gpus for n in parse_scontrol_nodes(nres.stdout)}
            for p in parts:
                if gpus[p.name] is None:
                    known = [by_node[n] for n in p.nodes if n in by_node]
                    gpus[p.name] = sum(known) if known else None
    return [ClusterPartition(p.name, gpus[p.name]) for p in parts], ""


def compare(site: Site, cluster: List[ClusterPartition]) -> PartitionCheck:
    """Site partitions missing on the cluster, and cluster partitions with GPUs that the site
    does not describe (a partition whose GPUs could not be counted is listed, not flagged)."""
    names = {p.name for p in cluster}
    missing = tuple(n for n in site.partitions if n not in names)
    unmanaged = tuple(p.name for p in cluster if p.name not in site.partitions and p.gpus)
    return PartitionCheck(
        site=site.name,
        site_partitions=tuple(site.partitions),
        reachable=True,
        cluster_partitions=tuple(cluster),
        missing_on_cluster=missing,
        not_in_site=unmanaged,
    )


def check_site_partitions(site: Site, runner: Runner) -> PartitionCheck:
    """Compare the site with the live cluster that `runner`'s scontrol reaches."""
    cluster, why = read_cluster_partitions(runner)
    if cluster is None:
        return PartitionCheck(site=site.name, site_partitions=tuple(site.partitions), reachable=False, why=why)
    return compare(site, cluster)
