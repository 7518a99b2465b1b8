"""The refusals of sbatch and slurmctld (slurm.refusals) for a job on a site: `check` and `gen`
give them before the filter's verdict, since the filter never sees a job the cluster turned away.

A refusal raises ConfigError (exit 2: the job does not reach the controller's filter) at the
#SBATCH line or option that caused it, in sbatch's words and what to do; a job accepted that
can never start comes back as a warning.
"""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional, Sequence, Union

from ..errors import ConfigError, Issue
from ..site import Site


def partition_facts(site: Site) -> Dict[str, Any]:
    """The site's partitions in the terms slurmctld checks a request against."""
    from ..slurm.refusals import PartitionFacts

    out: Dict[str, Any] = {}
    for name, p in site.partitions.items():
        nt = site.node_types[p.node_type]
        out[name] = PartitionFacts(nodes=p.nodes, gpus=nt.gpus, cpus=nt.cpus, memory_mb=int(nt.memory_gb * 1024))
    return out


def cluster_refusals(
    site: Site,
    script: Union[str, bytes],
    sbatch_args: Sequence[str],
    descs: Sequence[Mapping[str, Any]],
    env: Optional[Mapping[str, str]] = None,
    script_path: str = "script.sh",
    partition: Optional[str] = None,
) -> List[str]:
    """Raise ConfigError for what sbatch or slurmctld refuses; return the warnings (accepted jobs
    that can never start)."""
    from ..slurm.refusals import refusals, request_for
    from ..slurm.sbatch import option_sources, script_strays

    facts = partition_facts(site)
    issues: List[Issue] = []
    warnings: List[str] = []
    strays = script_strays(script, script_path)
    for i, desc in enumerate(descs):
        cmdline: List[Any] = []
        options = option_sources(
            script, sbatch_args, env, script_path, partition, i if len(descs) > 1 else None, cmdline
        )
        req = request_for(
            desc, options, (strays if i == 0 else []) + cmdline, facts, site.default_partition, site.slurm_version
        )
        for r in refusals(req):
            if r.warn:
                warnings.append(r.message)
            else:
                issues.append(Issue(r.where[0], r.where[1], None, "", r.message))
    if issues:
        raise ConfigError(list(dict.fromkeys(issues)))
    return list(dict.fromkeys(warnings))
