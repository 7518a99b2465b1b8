"""What to do about a Slurm command's error: sbatch, scontrol and sacct print what went wrong in
their own words, which a first-time user cannot act on. One table maps those words to the next
step; every place that reports a failed Slurm command (`CommandResult.why`, `submit`) adds it.

The patterns are the messages Slurm 22.05-25.11 print (slurm_strerror texts and the commands'
own fatal lines), matched case-insensitively on the command's standard error. A new row is a
(pattern, advice) pair; tests/test_firstday.py holds recorded lines they must match.
"""

from __future__ import annotations

import re
from typing import Optional, Tuple

NO_CONFIG = (
    "no Slurm configuration is reachable from this machine: run on a login node of the cluster, "
    "or point SLURM_CONF at its slurm.conf"
)

ADVICE: Tuple[Tuple[str, str], ...] = (
    # no slurm.conf and no configless DNS record (seen live: sbatch/scontrol/sacct of 22.05 and 24.11)
    (
        r"could not establish a configuration source|slurm\.conf: no such file|fetch_config: dns srv|"
        r"resolve_ctls_from_dns_srv|unable to process configuration file",
        NO_CONFIG,
    ),
    (
        r"unable to contact slurm controller|slurm_load_\w+ error: unable to contact|connection refused",
        "the controller (slurmctld) does not answer: check `scontrol ping` and try again; if it stays down, "
        "tell the cluster's admins",
    ),
    (
        r"invalid account or account/partition combination",
        "give an account you belong to with --account (`sacctmgr show assoc user=$USER format=account,partition` "
        "lists them)",
    ),
    (r"invalid partition name", "name a partition of this cluster with --partition (`sinfo -s` lists them)"),
    (r"invalid qos specification", "give a QOS you may use with --qos (`sacctmgr show assoc user=$USER format=qos`)"),
    (
        r"requested node configuration is not available",
        "no node of the partition has what the job asks for (GPUs per node, memory, constraint): compare with "
        "`sinfo -N -o '%P %G %m %f'` and the site config (`slurmgpu check SCRIPT` names the difference)",
    ),
    (
        r"node count specification invalid",
        "the job asks for more nodes than the partition has (`sinfo -s` shows its size): ask for fewer",
    ),
    (
        r"requested time limit is invalid|time limit.*exceeds",
        "the time limit is above the partition's (`sinfo -o '%P %l'` shows MaxTime): give a shorter --time",
    ),
    (
        r"job violates accounting/qos policy|qosmax\w*|assoc\w*limit",
        "the account's or QOS's limits refuse the job's size or time (`sacctmgr show qos` and `sshare -U`): "
        "ask for less, or another --qos",
    ),
    (
        r"slurm accounting storage is disabled|accounting_storage/none",
        "this cluster keeps no job accounting (slurmdbd): use what does not need it (`admin replay --from-dir DIR`, "
        "`doctor LOGFILE`)",
    ),
    (r"access/permission denied|access denied", "your user may not do this here: ask the cluster's admins"),
    (r"command not found", "the Slurm client commands are not installed here: run on a login node of the cluster"),
)
# the commands whose errors the table reads (other commands' "command not found" means something else)
SLURM_COMMANDS = frozenset(
    "sbatch salloc srun scontrol sacct sacctmgr sinfo squeue scancel sshare sprio sstat sdiag".split()
)
_COMPILED = tuple((re.compile(p, re.I), a) for p, a in ADVICE)


def advice(text: str, command: str = "sbatch") -> Optional[str]:
    """The next step for a Slurm command's error output (None: nothing known, or not a Slurm command)."""
    if command.rsplit("/", 1)[-1] not in SLURM_COMMANDS:
        return None
    for pattern, what in _COMPILED:
        if pattern.search(text or ""):
            return what
    return None
