"""What a cluster is: the site model, its loader and the built-in presets (files only, no Slurm).

The names below load their module on first use (PEP 562), so importing one layer never
imports the rest of it: start-up time is a feature on a login node."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..lazy import face

if TYPE_CHECKING:
    from .affinity import AffinityMap, GpuAffinity, RankPlan, cpu_mask, format_cpulist, parse_cpulist
    from .gpus import GPU_TABLE, GpuFacts, lookup
    from .load import load_site, resolve_site, site_from_data
    from .model import DEFAULT_SITE, LINKS, Nic, NodeType, Partition, Site, SitePreflight, SiteRequeue
    from .presets import data_dir, preset_dir, preset_names, resolve_site_ref, site_search

# exported name -> (module, name in it)
_EXPORTS = {
    "AffinityMap": (".affinity", "AffinityMap"),
    "GpuAffinity": (".affinity", "GpuAffinity"),
    "RankPlan": (".affinity", "RankPlan"),
    "cpu_mask": (".affinity", "cpu_mask"),
    "format_cpulist": (".affinity", "format_cpulist"),
    "parse_cpulist": (".affinity", "parse_cpulist"),
    "DEFAULT_SITE": (".model", "DEFAULT_SITE"),
    "GPU_TABLE": (".gpus", "GPU_TABLE"),
    "GpuFacts": (".gpus", "GpuFacts"),
    "LINKS": (".model", "LINKS"),
    "Nic": (".model", "Nic"),
    "NodeType": (".model", "NodeType"),
    "Partition": (".model", "Partition"),
    "Site": (".model", "Site"),
    "SitePreflight": (".model", "SitePreflight"),
    "SiteRequeue": (".model", "SiteRequeue"),
    "data_dir": (".presets", "data_dir"),
    "load_site": (".load", "load_site"),
    "lookup": (".gpus", "lookup"),
    "preset_dir": (".presets", "preset_dir"),
    "preset_names": (".presets", "preset_names"),
    "resolve_site": (".load", "resolve_site"),
    "resolve_site_ref": (".presets", "resolve_site_ref"),
    "site_from_data": (".load", "site_from_data"),
    "site_search": (".presets", "site_search"),
}
__all__ = [
    "AffinityMap",
    "GpuAffinity",
    "RankPlan",
    "cpu_mask",
    "format_cpulist",
    "parse_cpulist",
    "DEFAULT_SITE",
    "GPU_TABLE",
    "GpuFacts",
    "LINKS",
    "Nic",
    "NodeType",
    "Partition",
    "Site",
    "SitePreflight",
    "SiteRequeue",
    "data_dir",
    "load_site",
    "lookup",
    "preset_dir",
    "preset_names",
    "resolve_site",
    "resolve_site_ref",
    "site_from_data",
    "site_search",
]


__getattr__ = face(__name__, _EXPORTS, globals())
