"""Site + layout + spec -> `RenderRequest`: the #SBATCH lines, launcher argv, container and NCCL
environment as plain frozen data. The template contract; `gen --json` prints it."""

from __future__ import annotations

import os
import re
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, List, Mapping, Optional, Sequence, Tuple

from .. import __version__
from ..errors import ConfigError, Issue, PlanError
from ..nccl import FabricEnv, fabric_env
from ..plan import Layout
from ..plan.placement import RANK_SOURCES, spans, strict_kinds
from ..render import PATH_VARS, TemplateDir, comment, render
from ..site import NodeType, Partition, Site, preset_dir
from .binding import Binding, plan_binding
from .launchers import Launcher, Options, get_launcher
from .serving import ServeDeployment, build_deployment
from .sizing import Sizing, _check_size, segment_for

if TYPE_CHECKING:
    from ..site import Partition
    from .spec import JobSpec, Where


@dataclass(frozen=True)
class Sbatch:
    """The #SBATCH options of a script, resolved from site, layout and spec."""

    job_name: str
    nodes: int
    gpus_per_node: int
    gpu_request: str  # gpus-per-node | gres
    ntasks_per_node: int
    cpus_per_task: int
    mem: Optional[str]
    partition: str
    account: Optional[str]
    qos: Optional[str]
    constraint: Optional[str]
    time: Optional[str]
    output: str
    error: Optional[str]
    exclusive: bool
    segment: Optional[int]
    signal: Optional[str]
    requeue: bool
    dependency: Optional[str]
    extra: Tuple[str, ...] = ()
    switches: Optional[int] = None  # --switches=1: the job fits under one IB leaf switch of the site
    network: Optional[str] = None  # unique-channel-per-segment: one IMEX channel per segment (25.11)
    requeue_expedite: bool = False  # --requeue=expedite where the site enables it (25.11)


@dataclass(frozen=True)
class Launch:
    """The launcher and its full program line, as the template prints it."""

    name: str
    runner: str
    summary: str
    tasks_per_node: int
    program: Tuple[str, ...]  # entry point + user args + model/layout args, unquoted
    serving: bool = False
    targets: str = ""  # the framework version the adapter's flags are checked against
    files: Tuple[Tuple[str, str], ...] = ()  # (path, text) the script writes before the step (DeepSpeed config)
    runner_args: Tuple[str, ...] = ()  # the plan's flags for the runner itself, before the program (accelerate)
    # what the launcher numbers its ranks by (plan.placement.RANK_SOURCES): preflight --aggregate
    # places the groups on the nodes in that order
    rank_source: str = "procid"


@dataclass(frozen=True)
class ContainerPlan:
    """The container the job runs in (runtime, image, mounts), resolved for the site."""

    runtime: str  # pyxis | apptainer | none
    image: Optional[str] = None
    mounts: Tuple[str, ...] = ()
    mount_workdir: bool = False
    gpu_flag: str = "--nv"


@dataclass(frozen=True)
class Requeue:
    """Checkpoint-and-requeue before the time limit: how early, which signal, by which path."""

    grace: int  # lead time of the checkpoint signal, seconds before the time limit
    signal: str  # sent to every process of the steps to ask for a checkpoint
    max_requeues: int
    forward: str  # the batch shell's command that delivers the signal
    torchrun_signals: Optional[str]  # torchrun --signals-to-handle (None: no torchrun agent)
    exit_status: bool  # the step's exit status is the program's (75 asks for a requeue)
    clean_exit_after_signal: bool  # the framework saves on the signal and exits 0 (Megatron)
    note: str
    why: str  # how the lead time was chosen
    exit_code: int = 75


@dataclass(frozen=True)
class RenderRequest:
    """Everything a template may use; plain data, so `--json` can print it."""

    version: str
    template: str
    regen: str
    site: str
    site_ref: str  # what `slurmgpu preflight --site` should be given on the nodes
    stamp: str
    layout: Layout
    node: NodeType
    sbatch: Sbatch
    fabric: FabricEnv
    launch: Launch
    container: ContainerPlan
    env: Tuple[Tuple[str, str], ...] = ()
    checkpoint_dir: Optional[str] = None
    preflight: bool = True
    requeue: Optional[Requeue] = None
    export_srun_cpus: bool = True
    about: Tuple[str, ...] = ()
    model: Optional[str] = None  # catalogue name, read by `slurmgpu doctor` for out-of-memory advice
    serve: Optional[ServeDeployment] = None  # router / disaggregated serving: workers, ports, router
    binding: Optional[Binding] = None  # CPU/NUMA binding per launcher from the site's map (job/binding.py)
    plan_line: Optional[str] = None  # `# slurmgpu-plan: ...`, the promised figures `slurmgpu report` reads back

    def context(self) -> Dict[str, Any]:
        return {f: getattr(self, f) for f in self.__dataclass_fields__}

    def to_dict(self) -> Dict[str, Any]:
        d = asdict(self)
        d["fabric"] = self.fabric.to_dict()
        d["node"] = self.node.to_dict()
        return d


def _version_tuple(v: Optional[str]) -> Optional[Tuple[int, int]]:
    m = re.match(r"^(\d+)\.(\d+)", v or "")
    return (int(m.group(1)), int(m.group(2))) if m else None


def site_ref(site: Site) -> str:
    """How the nodes should name this site: the preset name, or the config's absolute path."""
    try:
        preset = (preset_dir() / (site.name + ".yaml")).resolve()
        if Path(site.source).resolve() == preset:
            return site.name
    except OSError:
        pass
    return str(Path(site.source).resolve())


def build_request(site: Site, spec: JobSpec, sizing: Sizing, regen: str = "") -> Tuple[RenderRequest, Tuple[str, ...]]:
    """Turn site + layout + spec into the frozen data the templates print; also return warnings."""
    warnings: List[str] = []
    layout = sizing.layout
    launcher = get_launcher(spec.launcher)
    partition = spec.partition or site.default_partition
    part = site.partition(partition)
    node = site.node_types[part.node_type]
    if sizing.serve is None:
        _check_size(spec, part, layout, launcher)
    elif layout.nodes > part.max_nodes_per_job:
        raise PlanError(
            "partition %s allows at most %d nodes per job, the deployment needs %d"
            % (part.name, part.max_nodes_per_job, layout.nodes)
        )
    fsdp = spec.fsdp or getattr(sizing.plan, "zero", None) == 3
    requeue = _requeue(site, spec, sizing, launcher, warnings)
    if sizing.serve is not None:
        argv, opts = serve_program(launcher, spec, sizing, node.gpu_model), None
    else:
        argv, opts = launch_argv(launcher, spec, sizing, fsdp, requeue.grace if requeue else None, node.gpu_model)
    from . import launchers as L

    user_argv = tuple(spec.command) + tuple(spec.args)
    container = _container(site, node, spec, warnings)
    if launcher.entry_in and container.runtime == "none" and (not spec.command or spec.command[0].startswith("-")):
        warnings.append(
            "launcher %s starts %s, which exists only in %s; with no container image the job runs on the host, "
            "where it is most likely missing: give --image with that container (or your own program after --)"
            % (launcher.name, " ".join(launcher.default_entry), launcher.entry_in)
        )
    fab = fabric_env(node, launcher.name, layout, fsdp)
    warnings.extend(_lint_user_env(fab, node, spec.env))
    warnings.extend(_lint_paths(spec.checkpoint_dir, container.mounts))
    tpn = launcher.tasks_per_node(layout.gpus_per_node)
    launch = Launch(
        name=launcher.name,
        runner=launcher.runner,
        summary=launcher.summary,
        tasks_per_node=tpn,
        program=argv,
        serving=launcher.serving,
        targets=launcher.version(spec.launcher_version)[1],  # the version the flags were written for
        files=L.framework_files(launcher, layout, opts, user_argv) if opts else (),
        runner_args=L.runner_args(launcher, layout, opts, user_argv) if opts else (),
        rank_source=RANK_SOURCES.get(launcher.name, "hostname"),
    )
    sbatch = _sbatch(site, part, node, spec, sizing, launcher, requeue)
    _check_rank_order(site, node, layout, launch, sbatch.segment)
    serve = None
    if sizing.serve is not None:
        serve = build_deployment(
            launcher.name,
            node,
            sizing.serve.chosen,
            argv,
            user_argv,
            sizing.serve.workload.context,
            spec.kv_transfer,
            spec.ready_timeout,
            spec.source or "",
        )
    ver = _version_tuple(site.slurm_version)
    binding: Optional[Binding] = plan_binding(
        site.name, node, launcher.name, launcher.runner, layout.gpus_per_node, sbatch.cpus_per_task, tpn, user_argv
    )
    if serve is not None:
        # one server's binding (SGLang --numa-node per GPU of the node, vLLM's) is not each worker's: a worker
        # on GPUs 4-7 would get GPU 0-3's NUMA nodes, and preflight would check a binding nobody applied
        binding = None
    warnings.extend("site %s: %s" % (site.name, n) for n in (node.affinity.notes if node.affinity else ()))
    req = RenderRequest(
        version=__version__,
        template=spec.template,
        regen=regen,
        site=site.name,
        site_ref=site_ref(site),
        stamp=layout.stamp(site.name),
        layout=layout,
        node=node,
        sbatch=sbatch,
        fabric=fab,
        launch=launch,
        container=container,
        env=tuple(spec.env.items()) + nccl_diag_env(spec.nccl_diag, spec.env),
        checkpoint_dir=spec.checkpoint_dir,
        preflight=spec.preflight,
        requeue=requeue,
        export_srun_cpus=ver is None or ver < (23, 11),
        about=about_lines(site, node, layout, launcher, fab, sizing),
        model=getattr(sizing.model, "name", None),
        serve=serve,
        binding=binding,
        plan_line=_plan_line(site, sizing, launcher, spec.implements),
    )
    return req, tuple(warnings)


def serve_program(launcher: Launcher, spec: JobSpec, sizing: Sizing, gpu_model: str) -> Tuple[str, ...]:
    """A serving worker's program before its role's flags: entry point, weights, the user's arguments."""
    from . import launchers as L

    where = "%s (or the arguments after --)" % spec.source if spec.source else "arguments after --"
    argv = list(L.program(launcher, spec.command, spec.args, where))
    if not spec.command or spec.command[0].startswith("-"):
        n_entry = len(launcher.default_entry)
        argv[n_entry:n_entry] = L.weights_args(launcher, spec.weights)
    return tuple(argv)


def _plan_line(site: Site, sizing: Sizing, launcher: Launcher, implements: Sequence[str] = ()) -> Optional[str]:
    if sizing.plan is None:
        return None
    from ..plan.planline import format_plan_line

    return format_plan_line(site, sizing.plan, launcher.name, implements)


def _requeue(site: Site, spec: JobSpec, sizing: Sizing, launcher: Launcher, warnings: List[str]) -> Optional[Requeue]:
    """The checkpoint signal's lead time and path for this launcher; None without --requeue."""
    if not spec.requeue:
        return None
    from .resume import REQUEUE_EXIT, lead_time, signal_path, unhandled_signal
    from .spec import time_seconds

    params = getattr(sizing.model, "params", None) if sizing.model is not None else None
    grace, why, notes = lead_time(site, params, spec.grace)
    warnings.extend(notes)
    limit = time_seconds(spec.time) if spec.time else None
    if limit is not None and grace >= limit:
        raise ConfigError(
            [
                Issue(
                    spec.source or "",
                    None,
                    None,
                    "grace",
                    "the checkpoint signal would come %d s before the limit (%s), but the time limit %s is only "
                    "%d s; give a longer --time or a shorter --grace" % (grace, why, spec.time, limit),
                )
            ]
        )
    bad = unhandled_signal(launcher, spec.checkpoint_signal)
    if bad:
        raise ConfigError([Issue(spec.source or "", None, None, "checkpoint_signal", bad)])
    if not spec.checkpoint_dir:
        warnings.append(
            "--requeue without --checkpoint-dir: the program gets no SLURMGPU_CHECKPOINT_DIR to save to and "
            "resume from, so a requeued run may start again from step 0"
        )
    path = signal_path(launcher, spec.checkpoint_signal)
    return Requeue(
        grace=grace,
        signal=spec.checkpoint_signal,
        max_requeues=spec.max_requeues,
        forward=path.forward,
        torchrun_signals=path.torchrun_signals,
        exit_status=path.exit_status,
        clean_exit_after_signal=path.clean_exit_after_signal,
        note=path.note,
        why=why,
        exit_code=REQUEUE_EXIT,
    )


def launch_argv(
    launcher: Launcher,
    spec: JobSpec,
    sizing: Sizing,
    fsdp: bool,
    grace: Optional[int] = None,
    gpu_model: str = "",
) -> Tuple[Tuple[str, ...], Options]:
    """Entry point, the user's arguments, then what the plan decided (model shape, layout); and
    the options the adapter got (for its config files and runner flags)."""
    from . import launchers as L

    plan = sizing.plan
    user_argv = tuple(spec.command) + tuple(spec.args)
    where = "%s (or the arguments after --)" % spec.source if spec.source else "arguments after --"
    argv = list(L.program(launcher, spec.command, spec.args, where))
    if not spec.command or spec.command[0].startswith("-"):  # the launcher's own entry point
        n_entry = len(launcher.default_entry)
        argv[n_entry:n_entry] = L.weights_args(launcher, spec.weights)
    seq = spec.seq or getattr(plan, "seq", None) or None
    opts = Options(
        weights=spec.weights,
        seq=seq,
        global_batch=spec.global_batch or getattr(plan, "global_batch", None) or None,
        checkpoint_dir=spec.checkpoint_dir,
        fsdp=fsdp,
        zero=getattr(plan, "zero", None),
        recompute=getattr(plan, "recompute", None),
        requeue=spec.requeue,
        checkpoint_signal=spec.checkpoint_signal,
        save_interval=spec.save_interval,
        exit_duration_mins=_exit_duration(spec, grace),
        model=sizing.model,
        precision=getattr(plan, "precision", None) or spec.precision,
        virtual_stages=getattr(plan, "virtual_stages", 1) or 1,
        stage_layers=tuple(getattr(plan, "stage_layers", ()) or ()),
        data=spec.data,
        tokenizer=spec.tokenizer,
        train_iters=spec.train_iters,
        tokens=spec.tokens,
        lr=spec.lr,
        smoke=spec.smoke,
        version=launcher.version(spec.launcher_version, spec.source or "")[0],
        gpu=gpu_model,
        gpu_fp8=_gpu_fp8(gpu_model),
        levers=tuple(getattr(plan, "levers", ()) or ()),
        implements=tuple(spec.implements),
    )
    try:
        planned = L.framework_args(launcher, sizing.layout, opts, user_argv)
    except ConfigError as missing:
        if opts.smoke:
            raise
        # missing training inputs (Megatron): name a clash in the user's arguments in the same error
        try:
            L.check_conflicts(
                launcher,
                user_argv,
                L.framework_args(launcher, sizing.layout, replace(opts, smoke=True), user_argv),
                where,
            )
        except ConfigError as clash:
            raise ConfigError(clash.issues + missing.issues) from None
        raise
    L.check_conflicts(launcher, user_argv, planned, where)
    return tuple(argv) + tuple(planned), opts


def _gpu_fp8(gpu_model: str) -> Optional[bool]:
    """Whether the GPU has FP8 tensor cores, from the one table of GPU facts (None: not in it)."""
    from ..site import lookup

    facts = lookup(gpu_model)
    return None if facts is None else facts.fp8


def _exit_duration(spec: JobSpec, grace: Optional[int]) -> Optional[int]:
    """Megatron --exit-duration-in-mins: the walltime minus the lead, so it saves before TimeLimit
    even if the signal is lost (its clock starts after initialisation, so the signal normally wins)."""
    if not spec.requeue or not spec.time or grace is None:
        return None
    from .spec import time_seconds

    limit = time_seconds(spec.time)
    return None if limit is None else max(1, (limit - grace) // 60)


def _sbatch(
    site: Site,
    part: Partition,
    node: NodeType,
    spec: JobSpec,
    sizing: Sizing,
    launcher: Launcher,
    requeue: Optional[Requeue],
) -> Sbatch:
    """The #SBATCH values: the layout's size, the launcher's tasks, the site's and spec's choices."""
    layout = sizing.layout
    tpn = launcher.tasks_per_node(layout.gpus_per_node)
    full_node = layout.gpus_per_node == node.gpus
    segment = segment_for(site, node, layout, spec.segment, _planned_segment(sizing))
    return Sbatch(
        job_name=spec.name or "%s-%s" % (_slug(spec.model) if spec.model else "job", launcher.name),
        nodes=layout.nodes,
        gpus_per_node=layout.gpus_per_node,
        gpu_request=site.gpu_request,
        ntasks_per_node=tpn,
        cpus_per_task=spec.cpus_per_task or max(1, node.cpus * layout.gpus_per_node // node.gpus // tpn),
        mem=spec.mem if spec.mem is not None else ("0" if part.exclusive or full_node else None),
        partition=part.name,
        account=spec.account or site.account,
        qos=spec.qos or site.qos,
        constraint=spec.constraint or part.constraint,
        time=spec.time,
        output=spec.output or "%x-%j.out",
        error=spec.error,
        exclusive=part.exclusive,
        segment=segment,
        signal="B:USR2@%d" % requeue.grace if requeue else None,
        requeue=spec.requeue,
        dependency=spec.dependency,
        extra=tuple(spec.sbatch),
        switches=switches_for(site, part, layout.nodes),
        network=network_for(node, layout.nodes, segment),
        requeue_expedite=spec.requeue and site.requeue.expedite,
    )


def _planned_segment(sizing: Sizing) -> Optional[int]:
    """The plan's --segment; a disaggregated deployment that moves KV over NVLink keeps all its
    nodes in one segment (one NVLink domain)."""
    if sizing.serve is not None and sizing.serve.chosen.kv_over_nvlink:
        return sizing.serve.chosen.nodes
    return getattr(sizing.plan, "segment", None)


def _check_rank_order(site: Site, node: NodeType, layout: Layout, launch: Launch, segment: Optional[int]) -> None:
    """Refuse a layout whose TP/CP/EP groups span nodes when the launcher's ranks do not walk the
    job's nodes block by block on this site (host names that interleave the NVLink blocks, and a
    rank order that follows the names): a --segment then keeps each segment in one block, but not
    the ranks of a group (plan/placement.py, "Node-rank order")."""
    if site.topology != "block" or not node.multi_node_nvlink or not segment or layout.nodes <= 1:
        return
    if site.ranks_follow_blocks(launch.rank_source):
        return
    kinds = strict_kinds(site.policy.groups)
    crossing = [s for s in spans(layout, kinds) if s.unit > 1]
    if not crossing:
        return
    fix = (
        "launch with --launcher srun (one task per GPU: 26.05 numbers srun's tasks in topology order)"
        if launch.rank_source != "procid"
        else "ask the admins for TopologyParam=BlockAsNodeRank (Slurm 25.11+), or on 26.05 drop "
        "CR_NO_DIST_TOPO_BLOCK from SelectTypeParameters"
    )
    raise PlanError(
        "%s groups span %d nodes, but on site %s the host names interleave the NVLink blocks and %s numbers "
        "its ranks by %s (node_rank_order: %s): --segment=%d keeps each segment in one block, not each group. "
        "Use groups that fit one node (e.g. TP=%d), or %s"
        % (
            crossing[0].kind.upper(),
            crossing[0].unit,
            site.name,
            launch.name,
            {"procid": "srun task", "nodeid": "SLURM_NODEID", "hostname": "host name (torchrun's rendezvous)"}[
                launch.rank_source
            ],
            site.node_rank_order,
            segment,
            node.gpus,
            fix,
        )
    )


def network_for(node: NodeType, nodes: int, segment: Optional[int]) -> Optional[str]:
    """--network=unique-channel-per-segment for a job of several segments on a node type whose site
    gives each segment its own IMEX channel (node_types.X.imex_per_segment, Slurm 25.11+): one
    channel for the whole job would span racks that share no NVLink."""
    if node.imex_per_segment and segment and nodes // segment > 1:
        return "unique-channel-per-segment"
    return None


def switches_for(site: Site, part: Partition, nodes: int) -> Optional[int]:
    """1 when the partition lists its IB leaf switches and the job's nodes fit under one of them.

    Slurm's topology/tree then waits (up to the site's max_switch_wait) for one leaf instead of
    spreading the job over the spine; block sites keep racks together with --segment instead.
    """
    if site.topology == "block" or not part.leaf_switches or nodes <= 1:
        return None
    return 1 if nodes <= part.largest_leaf else None


# NCCL 2.31's diagnostics: the active path check and the RAS readiness probe, at each communicator start
# (NVIDIA/nccl 8898068 docs/userguide/source/troubleshooting/diagnostics.rst and ras.rst)
NCCL_DIAG_VARS = (("NCCL_RUN_DIAGNOSTICS", "1"), ("NCCL_RUN_RAS_DIAGNOSTICS", "1"))


def nccl_diag_env(on: bool, env: Mapping[str, str]) -> Tuple[Tuple[str, str], ...]:
    """The diagnostics' variables for --nccl-diag, except those the user's env already sets."""
    return tuple(kv for kv in NCCL_DIAG_VARS if on and kv[0] not in env)


def _lint_user_env(fab: FabricEnv, node: NodeType, env: Mapping[str, str]) -> List[str]:
    """NCCL mistakes in the user's own environment (typos, values NCCL ignores, fabric contradictions)."""
    if not any(k.startswith(("NCCL_", "TORCH_NCCL_")) for k in env):
        return []
    from ..nccl import lint_env

    merged = {e.name: e.value for e in fab.env}
    merged.update(env)
    return ["environment: %s" % f for f in lint_env(merged, node) if f.level in ("error", "warning") and f.var in env]


def _lint_paths(checkpoint_dir: Optional[str], mounts: Sequence[str]) -> List[str]:
    """Path values that will not expand as their author probably meant (see shpath)."""
    out = []
    named = [("checkpoint_dir", checkpoint_dir)] if checkpoint_dir else []
    named += [("container mount", m) for m in mounts]
    for what, value in named:
        if value.startswith("~"):
            out.append(
                "%s %s: a leading ~ is not expanded in the job; write $HOME instead (paths expand only %s)"
                % (what, value, ", ".join("$" + v for v in PATH_VARS))
            )
    return out


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", os.path.basename(text.rstrip("/"))).strip("-") or "job"


def _container(site: Site, node: NodeType, spec: JobSpec, warnings: List[str]) -> ContainerPlan:
    """The container the job runs in, with the image in the runtime's own spelling (slurmgpu.images).

    An image the site cannot run (no runtime, the other runtime's file format, a CUDA build on
    AMD GPUs or a ROCm build on NVIDIA ones) is an error that says where the image was set and
    how to give this site its own, never dropped with a warning.
    """
    from .images import ImageError, spell

    runtime = spec.container.runtime or site.container.runtime
    image = spec.container.image or site.container.image
    at: Where
    if spec.container.image:
        at = spec.container.image_at or ("container.image", None, None, "")
    else:
        at = (site.source, None, None, "container.image")
    mounts = tuple(site.container.mounts) + tuple(spec.container.mounts)
    if runtime == "none" and image and not spec.container.runtime:
        raise ConfigError(
            [
                Issue(
                    *at,
                    (
                        "site %s runs no container runtime (its config says container.runtime: none), so nothing "
                        "would run image %s; to run on the host there, say so for that site (sites: {%s: {container: "
                        "{runtime: none}}} in slurmgpu.yaml, or --container none), or choose a runtime it has "
                        "(--container apptainer|pyxis)" % (site.name, image, site.name)
                    ),
                )
            ]
        )
    if runtime != "none" and not image:
        if spec.container.runtime:
            raise ConfigError(
                [
                    Issue(
                        "",
                        None,
                        None,
                        "container.image",
                        "container runtime %s needs an image: --image IMAGE or container.image in "
                        "slurmgpu.yaml" % runtime,
                    )
                ]
            )
        warnings.append(
            "site %s runs jobs in %s containers but no image was given: the job runs on the host "
            "(--image IMAGE to use one)" % (site.name, runtime)
        )
        runtime = "none"
    if runtime == "none" or not image:  # no image: runtime was set to "none" above
        return ContainerPlan(runtime="none")
    try:
        spelled = spell(image, runtime, site.name, node.vendor, node.gpu_model)
    except ImageError as exc:
        raise ConfigError([Issue(*at, str(exc))]) from None
    return ContainerPlan(
        runtime=runtime,
        image=spelled,
        mounts=mounts,
        mount_workdir=spec.container.mount_workdir and runtime == "pyxis",
        gpu_flag="--rocm" if node.vendor == "amd" else "--nv",
    )


def about_lines(
    site: Site, node: NodeType, layout: Layout, launcher: Launcher, fab: FabricEnv, sizing: Sizing
) -> Tuple[str, ...]:
    """The human comment block: what the layout is and why."""
    lines = [
        "Layout: %d GPUs = %d node%s x %d %s; NVLink domain %d GPUs (%s)"
        % (
            layout.world,
            layout.nodes,
            "s" if layout.nodes != 1 else "",
            layout.gpus_per_node,
            node.gpu_model,
            node.nvlink_domain,
            node.link,
        ),
        "  TP=%-3d tensor parallel: %s"
        % (
            layout.tp,
            "none (each rank holds whole layers)"
            if layout.tp == 1
            else "%d consecutive ranks, %s"
            % (layout.tp, "inside one NVLink domain" if layout.tp <= node.nvlink_domain else "SPANS NVLink domains"),
        ),
        "  PP=%-3d pipeline stages" % layout.pp,
        "  DP=%-3d data-parallel replicas" % layout.dp,
        "  CP=%-3d context parallel   EP=%d expert parallel   micro-batch %d"
        % (layout.cp, layout.ep, layout.micro_batch),
        "Launcher: %s" % launcher.summary,
        "Fabric: %s (%s), %d compute NIC%s, %g Gb/s per node"
        % (fab.kind, fab.library, len(node.compute_nics), "" if len(node.compute_nics) == 1 else "s", node.fabric_gbps),
    ]
    if sizing.model is not None:
        lines.append("Model: %s" % getattr(sizing.model, "label", sizing.model))
    for note in sizing.notes:
        lines.append("Plan: %s" % note)
    cal = site.calibration.for_gpu(node.gpu_model) if site.calibration is not None else None
    if sizing.plan is not None and cal is not None:
        lines.append(
            "Speed: calibrated on this site's %d runs (%s, fitted %s), leave-one-out error %s"
            % (
                cal.runs,
                site.calibration.path if site.calibration is not None else "",
                site.calibration.fitted if site.calibration is not None else "",
                "+-%d%%" % sizing.plan.band[1]
                if sizing.plan.band is not None and sizing.plan.band[2] == "site"
                else "not measured",
            )
        )
    return tuple(comment(x) for x in lines)


def render_request(req: RenderRequest, dirs: Sequence[TemplateDir]) -> str:
    """The script for `req`: its template rendered with its context."""
    return render(req.template, req.context(), dirs)
