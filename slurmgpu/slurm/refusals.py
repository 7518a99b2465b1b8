"""What sbatch and slurmctld refuse before any job_submit filter runs, so `check` never says
"accepted" for a job the cluster would turn away.

`check` runs the site's filter on the job_desc sbatch would send (slurm.sbatch); but sbatch
itself stops at a word it cannot read in an #SBATCH line, and slurmctld refuses a request no
node of the partition can satisfy. Those refusals are rows of one table, RULES: each names who
refuses (sbatch or slurmctld), the releases it holds for (`since`/`until`, Slurm versions as
slurm_version_tuple gives them; None: open), and a function from the request to sbatch's own
words. A release-specific refusal is one more row (with `since`), and its test case one more
recorded line in tests/test_refusals.py.

Seen live on the test cluster (Slurm 22.05.8 and 24.11.5, `sbatch` and `sbatch --test-only`):

* `#SBATCH nodes=2` -> "sbatch: error: Invalid directive found in batch script: nodes=2" (exit 255)
* `#SBATCH --foo=1` -> "sbatch: unrecognized option '--foo=1'" (exit 255)
* `--time=90m` -> "sbatch: error: Invalid --time specification" (exit 255)
* `-p gpu4 --gpus-per-node=8` on 4-GPU nodes, more CPUs or memory per node than the nodes
  have -> "sbatch: error: Batch job submission failed: Requested node configuration is not
  available" (exit 1); a held job (-H) is accepted instead and pends for ever.
* more nodes than the partition has: 22.05 and 26.05 accept it (EnforcePartLimits=NO, the
  default) and it pends with Reason=PartitionConfig for ever (a warning); 24.11 refuses it
  ("Requested node configuration is not available").

Plain data in, plain data out: the site's figures come in as PartitionFacts, so this module
knows no site config (slurm imports only root modules).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from .sbatch import TIME_UNLIMITED, Stray, Version, slurm_version_tuple, time_seconds

Where = Tuple[str, Optional[int]]
# more nodes than the partition: refused, not left pending, from 24.11 until 26.05 (26.05.5 accepts it again)
PARTITION_NODES_REFUSED_FROM = (24, 11, 0)
PARTITION_NODES_REFUSED_UNTIL = (26, 5, 0)


@dataclass(frozen=True)
class PartitionFacts:
    """What one partition's nodes have, in Slurm's terms (from the site config)."""

    nodes: int
    gpus: int  # GPUs per node
    cpus: int  # CPUs per node as Slurm counts them
    memory_mb: int  # host memory per node


@dataclass(frozen=True)
class Request:
    """One sbatch submission as the rules see it."""

    desc: Mapping[str, Any]  # the job_desc (slurm.sbatch.job_desc)
    options: Mapping[str, Tuple[Optional[str], Where]]  # sbatch long option -> (last value, where)
    strays: Sequence[Stray]  # words sbatch cannot read (slurm.sbatch.script_strays + the command line)
    partitions: Mapping[str, PartitionFacts]  # the site's partitions
    default_partition: str
    version: Optional[Version] = None  # the release emulated (None: 22.05's behaviour)


@dataclass(frozen=True)
class Refusal:
    """One refusal (or, with `warn`, a job accepted that can never start)."""

    rule: str
    by: str  # "sbatch" | "slurmctld"
    message: str  # sbatch's own words, then what to do
    where: Where = ("", None)
    warn: bool = False


@dataclass(frozen=True)
class Rule:
    rule: str
    by: str
    find: Callable[[Request], Iterable[Refusal]]
    since: Optional[Version] = None  # first release it holds for
    until: Optional[Version] = None  # first release it no longer holds for
    seen: Tuple[str, ...] = field(default=("22.05", "24.11"))  # releases it was seen live on

    def applies(self, version: Optional[Version]) -> bool:
        v = version or (22, 5, 99)
        return (self.since is None or v >= self.since) and (self.until is None or v < self.until)


def _strays(req: Request) -> Iterable[Refusal]:
    for kind, token, where in req.strays:
        if kind == "word":
            yield Refusal(
                "invalid-directive",
                "sbatch",
                "sbatch: error: Invalid directive found in batch script: %s -- sbatch stops here and submits "
                "nothing; an #SBATCH line holds sbatch options only (--name=value), a comment starts with #" % token,
                where,
            )
        elif token.startswith("--"):
            yield Refusal(
                "unrecognized-option",
                "sbatch",
                "sbatch: unrecognized option '%s' -- sbatch submits nothing; `sbatch --help` lists the options" % token,
                where,
            )
        else:
            yield Refusal(
                "invalid-option",
                "sbatch",
                "sbatch: invalid option -- '%s' -- sbatch submits nothing; `sbatch --help` lists the options"
                % token.lstrip("-")[:1],
                where,
            )


def _time(req: Request) -> Iterable[Refusal]:
    value, where = req.options.get("time", (None, ("", None)))
    if value is None:
        return
    v = value.strip()
    if v.lower() in TIME_UNLIMITED or time_seconds(v) is not None:
        return
    yield Refusal(
        "invalid-time",
        "sbatch",
        "sbatch: error: Invalid --time specification (%r) -- write minutes (90), HH:MM:SS or D-HH:MM:SS" % value,
        where,
    )


def _mem_mb(text: str) -> Optional[int]:
    m = re.match(r"^\s*(\d+)\s*([KMGT]?)B?\s*$", text, re.I)
    if not m:
        return None
    scale = {"": 1, "K": 1.0 / 1024, "M": 1, "G": 1024, "T": 1024 * 1024}[m.group(2).upper()]
    return int(math.ceil(int(m.group(1)) * scale))


def _gpus_per_node(desc: Mapping[str, Any]) -> Optional[int]:
    tres = str(desc.get("tres_per_node") or "")
    counts = [int(n) for n in re.findall(r"gpu(?::[\w.-]+)?:(\d+)", tres)]
    if counts:  # --gpus-per-node with --gres: both reach the controller, the last one counts
        return counts[-1]
    total = re.findall(r"gpu(?::[\w.-]+)?:(\d+)", str(desc.get("tres_per_job") or ""))
    nodes = desc.get("max_nodes") or None
    if total and nodes and nodes == desc.get("min_nodes"):
        return -(-sum(int(n) for n in total) // int(nodes))
    return None


def _node_config(req: Request) -> Iterable[Refusal]:
    """slurmctld: "Requested node configuration is not available" when no requested partition's
    nodes have the GPUs, CPUs or memory the job asks per node (partitions the site does not
    describe count as able: nothing is known of them)."""
    desc = req.desc
    names = [p for p in str(desc.get("partition") or req.default_partition).split(",") if p]
    gpn = _gpus_per_node(desc)
    tasks = int(desc.get("ntasks_per_node") or 0)
    cpt = int(desc.get("cpus_per_task") or 1)
    cpn = tasks * cpt if tasks else None
    mem_value, mem_where = req.options.get("mem", (None, ("", None)))
    mem = _mem_mb(mem_value) if mem_value else None
    why: List[str] = []
    causes: List[str] = []  # the options that ask too much, for the line to point at
    for name in names:
        facts = req.partitions.get(name)
        if facts is None:
            return  # a partition the site does not describe: it may fit there
        short = []
        if gpn is not None and gpn > facts.gpus:
            short.append("%d GPUs per node (its nodes have %d)" % (gpn, facts.gpus))
            causes += ["gpus-per-node", "gres", "gpus"]
        if cpn is not None and cpn > facts.cpus:
            short.append("%d CPUs per node = %d tasks x %d (its nodes have %d)" % (cpn, tasks, cpt, facts.cpus))
            causes += ["cpus-per-task", "ntasks-per-node"]
        if mem and mem > facts.memory_mb:
            short.append("--mem=%s (its nodes have %d MB)" % (mem_value, facts.memory_mb))
            causes.append("mem")
        if not short:
            return  # this partition can hold the job
        why.append("partition %s: %s" % (name, ", ".join(short)))
    if not why:
        return
    held = "hold" in req.options
    where = next((req.options[c][1] for c in causes if c in req.options), mem_where)
    if held:
        yield Refusal(
            "node-configuration",
            "slurmctld",
            "the job is held (-H), so slurmctld accepts it, but it can never start: %s" % "; ".join(why),
            where,
            warn=True,
        )
        return
    yield Refusal(
        "node-configuration",
        "slurmctld",
        "sbatch: error: Batch job submission failed: Requested node configuration is not available -- %s"
        % "; ".join(why),
        where,
    )


def _too_many_nodes(req: Request) -> Optional[str]:
    lo = req.desc.get("min_nodes")
    names = [p for p in str(req.desc.get("partition") or req.default_partition).split(",") if p]
    facts = [req.partitions.get(n) for n in names]
    if not lo or any(f is None for f in facts) or not all(f is not None and lo > f.nodes for f in facts):
        return None
    first = facts[0]
    return "the job asks for %d nodes but %s" % (
        lo,
        "partition %s has %d" % (names[0], first.nodes) if len(names) == 1 and first else "its partitions have fewer",
    )


def _node_count_pends(req: Request) -> Iterable[Refusal]:
    """22.05 and 26.05: more nodes than the partition has is accepted under EnforcePartLimits=NO (the default)
    and pends for ever (Reason=PartitionConfig)."""
    why = _too_many_nodes(req)
    if why:
        yield Refusal(
            "partition-nodes",
            "slurmctld",
            "%s: slurmctld accepts it and it pends for ever (Reason=PartitionConfig), or refuses it where "
            "EnforcePartLimits is set" % why,
            req.options.get("nodes", (None, ("", None)))[1],
            warn=True,
        )


def _node_count_refused(req: Request) -> Iterable[Refusal]:
    """24.11 (not 26.05): the same request is refused at submission, EnforcePartLimits=NO or not."""
    why = _too_many_nodes(req)
    if why:
        yield Refusal(
            "partition-nodes",
            "slurmctld",
            "sbatch: error: Batch job submission failed: Requested node configuration is not available -- %s" % why,
            req.options.get("nodes", (None, ("", None)))[1],
        )


RULES: List[Rule] = [
    Rule("invalid-directive", "sbatch", _strays),
    Rule("invalid-time", "sbatch", _time),
    Rule("node-configuration", "slurmctld", _node_config),
    # seen: 22.05.8 and 26.05.5 accept (pending for ever), 24.11.5 refuses; the releases between are unverified
    Rule("partition-nodes", "slurmctld", _node_count_pends, until=PARTITION_NODES_REFUSED_FROM, seen=("22.05",)),
    Rule(
        "partition-nodes",
        "slurmctld",
        _node_count_refused,
        since=PARTITION_NODES_REFUSED_FROM,
        until=PARTITION_NODES_REFUSED_UNTIL,
        seen=("24.11",),
    ),
    Rule("partition-nodes", "slurmctld", _node_count_pends, since=PARTITION_NODES_REFUSED_UNTIL, seen=("26.05",)),
]


def refusals(req: Request) -> List[Refusal]:
    """Every refusal (and warning) of the rules that hold for the request's release."""
    out: List[Refusal] = []
    for rule in RULES:
        if rule.applies(req.version):
            out.extend(rule.find(req))
    return out


def request_for(
    desc: Mapping[str, Any],
    options: Sequence[Tuple[str, Optional[str], Where]],
    strays: Sequence[Stray],
    partitions: Mapping[str, PartitionFacts],
    default_partition: str,
    slurm_version: Optional[str] = None,
) -> Request:
    """A Request from job_desc's inputs (the last value of each option wins, as in sbatch)."""
    last: Dict[str, Tuple[Optional[str], Where]] = {}
    for name, value, where in options:
        last[name] = (value, where)
    return Request(
        desc=desc,
        options=last,
        strays=tuple(strays),
        partitions=partitions,
        default_partition=default_partition,
        version=slurm_version_tuple(slurm_version),
    )
