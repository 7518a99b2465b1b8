"""What a cluster is: the site model, its loader and the built-in presets (files only, no Slurm)."""

from __future__ import annotations

from .gpus import GPU_TABLE, GpuFacts, lookup
from .load import load_site, resolve_site, site_from_data
from .model import DEFAULT_SITE, LINKS, Nic, NodeType, Partition, Site, SitePreflight, SiteRequeue
from .presets import data_dir, preset_dir, preset_names, resolve_site_ref, site_search

__all__ = [
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
