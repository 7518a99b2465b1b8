"""Each launcher's CPU/NUMA binding, chosen from the site's affinity map (site/affinity.py).

Every launcher binds ranks in its own way, so the same map becomes different flags:

  runner        binding                                         who applies it
  direct        srun --cpu-bind=mask_cpu:M0,M1,...              Slurm, per local task (exact CPUs)
  torchrun      torchrun --numa-binding=node                    torch (numactl per worker, 2.9+)
  deepspeed     deepspeed --bind_cores_to_rank --bind_core_list DeepSpeed (numactl -C per rank)
  accelerate    accelerate launch --enable_cpu_affinity         accelerate (NVML / amdsmi per process)
  vllm          vllm serve --numa-bind --numa-bind-nodes N...   vLLM (numactl per GPU worker)
  sglang        --numa-node N...                                SGLang (libnuma per scheduler process)

A binding is written only when it is right: the map is known, the job has whole nodes (which GPUs a
partial node gets is decided at run time) and the launcher can express it. Otherwise nothing is
bound and `note` says why, in one line the script carries. The per-rank plan (`ranks`) is what
`slurmgpu preflight --ranks` checks on the nodes and what the explain view shows.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Dict, List, Optional, Sequence, Tuple

from ..site import NodeType, RankPlan, cpu_mask, format_cpulist

# How each launcher binds (the `how` of a Binding); "none" when nothing is bound.
HOWS = ("srun", "torchrun", "deepspeed", "accelerate", "vllm", "sglang", "none")

# A serving engine's own binding flags: the program is the engine, so a user who passes one of these
# binds by hand and the generator adds none. (torchrun, DeepSpeed and accelerate flags are the
# template's; the user's arguments there belong to the program.)
USER_FLAGS: Dict[str, Tuple[str, ...]] = {
    "vllm": ("--numa-bind", "--no-numa-bind", "--numa-bind-nodes", "--numa-bind-cpus"),
    "sglang": ("--numa-node",),
}


@dataclass(frozen=True)
class Binding:
    """The binding of one job: the flags for its launcher, the per-rank plan and the one-line why."""

    how: str  # one of HOWS
    note: str  # one line for the script: what binds, from which map; or why nothing does
    ranks: Tuple[RankPlan, ...] = ()  # per local rank (empty when the map is unknown)
    srun_args: Tuple[str, ...] = ()  # the per-GPU launch step's binding (also the rank preflight's)
    runner_args: Tuple[str, ...] = ()  # torchrun / deepspeed / accelerate flags
    program_args: Tuple[str, ...] = ()  # serving engine flags (vLLM, SGLang)
    rank_step_args: Tuple[str, ...] = ()  # srun flags of the rank preflight step (--ranks), besides the task count
    exact: bool = False  # Slurm itself binds each task to exactly ranks[i].cpus (mask_cpu), so the rank
    # preflight, launched with srun_args, can compare every rank's real CPUs with the plan

    @property
    def bound(self) -> bool:
        return self.how != "none"


def _runner_kind(launcher_name: str, runner: str) -> str:
    if runner == "direct":
        return "srun"
    if runner == "server":
        return launcher_name  # vllm | sglang
    return runner  # torchrun | deepspeed | accelerate


def rank_plans(node: NodeType, gpus_per_node: int) -> Tuple[RankPlan, ...]:
    """Local rank i on GPU i, from the node type's map ((): no map)."""
    amap = node.affinity
    return amap.ranks(gpus_per_node) if amap is not None and amap.known else ()


def plan_binding(
    site_name: str,
    node: NodeType,
    launcher_name: str,
    runner: str,
    gpus_per_node: int,
    cpus_per_task: int,
    tasks_per_node: int,
    user_argv: Sequence[str] = (),
) -> Binding:
    """The binding for a job of `gpus_per_node` GPUs per node launched by `launcher_name`, with the
    srun flags of its rank preflight step: the launch's own binding for one task per GPU; else one
    task per GPU on an equal share of the node, unbound, so each can see where its launcher will bind."""
    b = _plan(site_name, node, launcher_name, runner, gpus_per_node, cpus_per_task, tasks_per_node, user_argv)
    if not b.bound:
        return b
    if b.how == "srun":
        return replace(b, rank_step_args=b.srun_args)
    return replace(b, rank_step_args=("--cpus-per-task=%d" % max(1, node.cpus // node.gpus), "--cpu-bind=none"))


def _plan(
    site_name: str,
    node: NodeType,
    launcher_name: str,
    runner: str,
    gpus_per_node: int,
    cpus_per_task: int,
    tasks_per_node: int,
    user_argv: Sequence[str] = (),
) -> Binding:
    """The binding for a job of `gpus_per_node` GPUs per node launched by `launcher_name`."""
    kind = _runner_kind(launcher_name, runner)
    amap = node.affinity
    where = "site %s, node type %s" % (site_name, node.name)
    if amap is None or not amap.known:
        why = amap.unknown if amap is not None else "the site gives no affinity map"
        return Binding(
            "none",
            "none: no GPU/NUMA/CPU map for %s (%s); nothing is bound rather than guessed" % (where, why),
        )
    if gpus_per_node != node.gpus:
        return Binding(
            "none",
            "none: the job uses %d of the %d GPUs per node, and which ones Slurm hands out is known only at run "
            "time; bind whole nodes (--gpus-per-node %d) to get the site's map" % (gpus_per_node, node.gpus, node.gpus),
        )
    ranks = rank_plans(node, gpus_per_node)
    if not amap.multi_numa and not amap.slices:
        return Binding(
            "none",
            "none: %s has one NUMA node and no per-GPU CPU slices, so binding would change nothing" % where,
            ranks,
        )
    src = "map of %s (%s: %s)" % (where, amap.label(), amap.source)
    given = set(_option_names(user_argv))
    mine = [f for f in USER_FLAGS.get(kind, ()) if f in given]
    if mine:
        return Binding("none", "left to the program: its own %s is kept; the %s is not applied" % (mine[0], src), ranks)
    if kind == "srun":
        return _srun(ranks, src, cpus_per_task, tasks_per_node, node)
    if kind == "torchrun":
        return _torchrun(ranks, src, amap.slices)
    if kind == "deepspeed":
        return _deepspeed(ranks, src)
    if kind == "accelerate":
        return Binding(
            "accelerate",
            "accelerate launch --enable_cpu_affinity puts each process on its GPU's NUMA node (NVML on NVIDIA, "
            "amdsmi on AMD: the program's environment needs nvidia-ml-py or amdsmi); expected: %s" % src,
            ranks,
            runner_args=("--enable_cpu_affinity",),
        )
    if kind in ("vllm", "sglang"):
        return _serving(kind, ranks, src)
    return Binding("none", "none: launcher %s has no binding slurmgpu knows" % launcher_name, ranks)


def _option_names(argv: Sequence[str]) -> List[str]:
    return [a.split("=", 1)[0] for a in argv if a.startswith("-")]


def _srun(ranks: Tuple[RankPlan, ...], src: str, cpus_per_task: int, tasks_per_node: int, node: NodeType) -> Binding:
    """One task per GPU: Slurm binds each local task to its GPU's CPUs (mask_cpu), or NUMA node (map_ldom)."""
    if all(r.cpus for r in ranks):
        if cpus_per_task * tasks_per_node < node.cpus:
            return Binding(
                "none",
                "none: --cpus-per-task %d x %d tasks leaves CPUs of the node out of the step, and Slurm refuses a "
                "mask outside it; give --cpus-per-task %d (the node's %d CPUs over its GPUs) to bind by the %s"
                % (cpus_per_task, tasks_per_node, node.cpus // max(1, node.gpus), node.cpus, src),
                ranks,
            )
        masks = ",".join(cpu_mask(r.cpus) for r in ranks)
        return Binding(
            "srun",
            "srun --cpu-bind=mask_cpu: each task on its GPU's CPUs, from the %s" % src,
            ranks,
            srun_args=("--cpu-bind=mask_cpu:" + masks,),
            exact=True,
        )
    ldoms = ",".join(str(r.numa) for r in ranks)
    return Binding(
        "srun",
        "srun --cpu-bind=map_ldom: each task on its GPU's NUMA node (the map has no CPU lists), from the %s" % src,
        ranks,
        srun_args=("--cpu-bind=map_ldom:" + ldoms,),
    )


def _torchrun(ranks: Tuple[RankPlan, ...], src: str, slices: bool) -> Binding:
    """torch's --numa-binding=node: each worker on all CPUs of its GPU's NUMA node (torch reads the node
    from the GPU's PCI device; preflight checks that it is the map's and has CPUs)."""
    coarser = " (the map's per-GPU CPU slices are widened to their NUMA node: torchrun binds by node)" if slices else ""
    return Binding(
        "torchrun",
        "torchrun --numa-binding=node: each worker on its GPU's NUMA node (torch 2.9+, needs numactl)%s; "
        "expected: %s" % (coarser, src),
        ranks,
        runner_args=("--numa-binding=node",),
    )


def deepspeed_core_list(ranks: Sequence[RankPlan]) -> Optional[Tuple[int, ...]]:
    """The ascending core list DeepSpeed's --bind_core_list needs so that its even split gives rank i
    cores of GPU i's NUMA node (None: this node's layout cannot be written that way).

    DeepSpeed gives local rank i the i-th of n equal, consecutive chunks of the list, and the list
    must be ascending. So each GPU takes the same number of CPUs from the lowest run of its CPU
    list (its physical cores when the SMT siblings are numbered after them), GPUs sharing a node
    splitting it in order; this works when the GPUs' CPUs ascend with the GPU index.
    """
    if not ranks or not all(r.cpus for r in ranks):
        return None
    groups: Dict[Tuple[int, ...], List[int]] = {}
    for r in ranks:
        groups.setdefault(r.cpus, []).append(r.local)
    per_rank = None
    for cpus, members in groups.items():
        run = _lowest_run(cpus)
        k = len(run) // len(members)
        per_rank = k if per_rank is None else min(per_rank, k)
    if not per_rank:
        return None
    out: List[int] = []
    for r in ranks:
        members = groups[r.cpus]
        run = _lowest_run(r.cpus)
        j = members.index(r.local)
        out.extend(run[j * per_rank : (j + 1) * per_rank])
    if any(b <= a for a, b in zip(out, out[1:])):
        return None
    return tuple(out)


def _lowest_run(cpus: Tuple[int, ...]) -> Tuple[int, ...]:
    """The first run of consecutive CPU numbers: 0-55 of 0-55,112-167."""
    xs = sorted(cpus)
    end = 1
    while end < len(xs) and xs[end] == xs[end - 1] + 1:
        end += 1
    return tuple(xs[:end])


def _deepspeed(ranks: Tuple[RankPlan, ...], src: str) -> Binding:
    cores = deepspeed_core_list(ranks)
    if cores is None:
        return Binding(
            "none",
            "none: DeepSpeed's --bind_core_list must ascend and is split evenly in rank order, which cannot put "
            "each rank on its GPU's NUMA node here (%s); launcher srun binds by the map" % src,
            ranks,
        )
    per = len(cores) // len(ranks)
    planned = tuple(
        RankPlan(r.local, r.gpu, r.numa, cores[i * per : (i + 1) * per], r.nics) for i, r in enumerate(ranks)
    )
    return Binding(
        "deepspeed",
        "deepspeed --bind_cores_to_rank --bind_core_list: %d cores of its GPU's NUMA node per rank (needs numactl), "
        "from the %s" % (per, src),
        planned,
        runner_args=("--bind_cores_to_rank", "--bind_core_list=" + format_cpulist(cores)),
    )


def _serving(kind: str, ranks: Tuple[RankPlan, ...], src: str) -> Binding:
    if any(r.numa is None for r in ranks):
        return Binding("none", "none: the map does not give every GPU's NUMA node (%s)" % src, ranks)
    nodes = tuple(str(r.numa) for r in ranks)
    if kind == "vllm":
        args: Tuple[str, ...] = ("--numa-bind", "--numa-bind-nodes") + nodes
        what = "vLLM --numa-bind --numa-bind-nodes: each GPU worker on its GPU's NUMA node (needs numactl)"
    else:
        args = ("--numa-node",) + nodes
        what = "SGLang --numa-node: each GPU's scheduler process on its GPU's NUMA node (libnuma)"
    return Binding(kind, "%s, from the %s" % (what, src), ranks, program_args=args)
