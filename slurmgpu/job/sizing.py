"""Sizing a job: the planner's layout when a model is given, the user's pins when not, and the
suggestion shown when a pinned layout is refused."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Dict, Mapping, Optional, Tuple

from ..errors import ConfigError, Issue, PlanError
from ..plan import Layout
from ..site import NodeType, Site
from .launchers import Launcher, get_launcher, planner_caps

if TYPE_CHECKING:
    from ..plan import ModelSpec, PlanRequest
    from ..plan.serving import ServePlan
    from ..plan.types import Plan
    from ..site import Partition
    from .spec import JobSpec


def _model(ref: str) -> ModelSpec:
    from ..plan import get_model, model_from_params
    from ..schema import parse_size

    try:
        return get_model(ref)
    except ConfigError:
        if parse_size(ref) is not None:
            return model_from_params(ref)
        raise


def layout_from_pins(node: NodeType, nodes: Optional[int], gpus: Optional[int], pins: Mapping[str, int]) -> Layout:
    """The layout when nothing is planned: the whole allocation is DP unless pinned."""
    gpn = node.gpus
    if gpus is not None:
        if gpus < gpn and (nodes or 1) == 1:
            gpn, nodes = gpus, 1
        else:
            need = -(-gpus // gpn)
            if gpus % gpn:
                raise PlanError("--gpus %d is not a whole number of %d-GPU nodes" % (gpus, gpn))
            if nodes is not None and nodes != need:
                raise PlanError("--gpus %d and --nodes %d disagree (%d GPUs per node)" % (gpus, nodes, gpn))
            nodes = need
    nodes = nodes or 1
    world = nodes * gpn
    tp, pp, cp, ep = (pins.get(k, 1) for k in ("tp", "pp", "cp", "ep"))
    inner = tp * pp * cp
    if world % inner:
        raise PlanError(
            "tp x pp x cp = %d x %d x %d = %d does not divide the %d GPUs (%d nodes x %d)"
            % (tp, pp, cp, inner, world, nodes, gpn)
        )
    dp = pins.get("dp", world // inner)
    if tp * pp * cp * dp != world:
        raise PlanError(
            "tp x pp x cp x dp = %d, but the job has %d GPUs (%d nodes x %d)" % (inner * dp, world, nodes, gpn)
        )
    if (dp * cp) % ep:
        raise PlanError("ep=%d must divide dp x cp = %d (experts are spread over data-parallel ranks)" % (ep, dp * cp))
    return Layout(
        tp=tp, pp=pp, dp=dp, cp=cp, ep=ep, micro_batch=pins.get("micro_batch", 1), nodes=nodes, gpus_per_node=gpn
    )


@dataclass(frozen=True)
class Sizing:
    """The layout a script is rendered for: planned (with the plan) or pinned."""

    layout: Layout
    plan: Optional[Plan] = None  # when a model was planned
    model: Optional[ModelSpec] = None
    notes: Tuple[str, ...] = ()
    serve: Optional[ServePlan] = None  # router and disaggregated serving: the deployment planned


def plan_layout(site: Site, spec: JobSpec) -> Sizing:
    """Plan the job with the planner when the spec names a model; otherwise honour the pins."""
    partition = spec.partition or site.default_partition
    node = site.node_type_of(partition)
    launcher = get_launcher(spec.launcher)
    if spec.serve != "aggregated":
        return serve_sizing(site, spec, launcher)
    if not spec.model:
        pins = dict(spec.parallel)
        if launcher.serving:
            # One server over all GPUs: TP inside the NVLink domain, pipeline stages across the rest.
            if "tp" not in pins:
                pins["tp"] = min(node.gpus, node.nvlink_domain, spec.gpus or node.gpus)
            pins.setdefault("dp", 1)
            world = spec.gpus if spec.gpus is not None else (spec.nodes or 1) * node.gpus
            pins.setdefault("pp", max(1, world // (pins["tp"] * pins.get("cp", 1))))
        layout = layout_from_pins(node, spec.nodes, spec.gpus, pins)
        return Sizing(
            layout=layout,
            notes=(
                "no model given: the layout is what was pinned, the rest "
                "data parallel (give --model to have it planned)",
            ),
        )
    from ..plan import make_plan

    model = _model(spec.model)
    req = plan_request(site, spec, model)
    assumed = assumed_words(launcher, spec, req)
    try:
        plan = make_plan(site, req)
    except PlanError as exc:
        if not launcher.program or launcher.serving:
            raise
        raise PlanError("%s\n%s" % (exc, declaration_words(site, spec, launcher, model))) from None
    return Sizing(
        layout=plan.layout, plan=plan, model=model, notes=(assumed,) * bool(assumed) + tuple(plan.explanation)
    )


def declared_to_fit(site: Site, spec: JobSpec) -> Optional[JobSpec]:
    """For `init`: when the spec's model does not plan as the program is declared, the declarations
    of the usual sharded training program that make it plan: FSDP (torchrun/srun) with activation
    checkpointing, so the spec carries to sites with smaller GPUs too; None when it plans as it is,
    or nothing helps."""
    launcher = get_launcher(spec.launcher)
    if not spec.model or not launcher.program or launcher.serving:
        return None
    from ..plan import make_plan

    model = _model(spec.model)
    fsdp = launcher.runner in ("torchrun", "direct")
    for alt in (spec, replace(spec, fsdp=fsdp or spec.fsdp, implements=tuple(spec.implements) + ("recompute",))):
        try:
            make_plan(site, plan_request(site, alt, model))
        except PlanError:
            continue
        return None if alt is spec else alt
    return None


def declaration_words(site: Site, spec: JobSpec, launcher: Launcher, model: ModelSpec) -> str:
    """Why a program the launcher only starts cannot be planned as it is declared, and what would fit
    if the program ran more: the spec's declarations the planner would then use, with their plans."""
    from ..plan import make_plan
    from ..vocab import PROGRAM_DEGREES

    tries = []
    if launcher.runner in ("torchrun", "direct") and not spec.fsdp:
        tries.append(("`fsdp: true` (--fsdp)", replace(spec, fsdp=True)))
    more = tuple(k for k in PROGRAM_DEGREES if k not in spec.implements)
    if more:
        every = PROGRAM_DEGREES
        fsdp = spec.fsdp or launcher.runner in ("torchrun", "direct")
        tries.append(
            (
                "`implements: [%s]`%s" % (", ".join(every), " and `fsdp: true`" * (fsdp and not spec.fsdp)),
                replace(spec, implements=every, fsdp=fsdp),
            )
        )
    lines = [
        "%s runs your own program, planned only as what the spec says it runs (%s): data parallelism%s."
        % (
            launcher.name,
            ("`implements: [%s]`" % ", ".join(spec.implements)) if spec.implements else "no `implements:`",
            " with FSDP" if spec.fsdp else (" with DDP" if launcher.runner in ("torchrun", "direct") else ""),
        )
    ]
    for words, alt in tries:
        for nodes in (alt.nodes, None) if alt.nodes is not None else (None,):
            try:
                p = make_plan(site, plan_request(site, replace(alt, nodes=nodes), model))
            except PlanError:
                continue
            lay = p.layout
            lines.append(
                "If the program runs it, declare %s: the plan is then tp=%d pp=%d dp=%d cp=%d on %d node%s, "
                "%.1f GB per GPU%s."
                % (
                    words,
                    lay.tp,
                    lay.pp,
                    lay.dp,
                    lay.cp,
                    lay.nodes,
                    "s" if lay.nodes != 1 else "",
                    p.memory_per_gpu_gb,
                    "" if nodes is not None or spec.nodes is None else " (the smallest allocation that fits)",
                )
            )
            break
        else:
            continue
        break
    else:
        lines.append(
            "Even declaring %s would not fit on this site; use a framework launcher "
            "(--launcher megatron, torchtitan or nemo) or more GPUs." % " or ".join(w for w, _ in tries)
        )
    return "\n".join(lines)


def assumed_words(launcher: Launcher, spec: JobSpec, req: PlanRequest) -> str:
    """One line: the degrees the plan may use for a program the launcher only starts, and why."""
    if not launcher.program or launcher.serving:
        return ""
    caps = req.caps
    degrees = [k.upper() for k in ("tp", "pp", "cp", "ep") if getattr(caps, k)]
    if launcher.runner in ("torchrun", "direct"):
        shard = "FSDP (`fsdp: true`)" if spec.fsdp else "DDP (no `fsdp: true`)"
    else:
        shard = "the ZeRO/FSDP sharding %s is told to run" % launcher.name
    rec = "full recomputation" if "recompute" in spec.implements else "no recomputation"
    declared = "`implements: [%s]`" % ", ".join(spec.implements) if spec.implements else "no `implements:`"
    return (
        "Assumed: %s runs your own program, so the plan uses data parallelism with %s%s and %s, as the "
        "spec declares (%s); a program that runs more says so with `implements: [tp, pp, cp, ep, recompute]`"
        % (launcher.name, shard, " plus " + "/".join(degrees) if degrees else "", rec, declared)
    )


def workload(spec: JobSpec) -> Any:
    """The request shape of a serving spec (plan.serving.Workload), defaults filled in."""
    from ..plan.serving import DEFAULT_INPUT, DEFAULT_OUTPUT, Workload

    rate = float(spec.rate) if spec.rate is not None else None
    work = Workload(spec.input_len or DEFAULT_INPUT, spec.output_len or DEFAULT_OUTPUT, spec.concurrency, rate)
    if spec.seq is not None and spec.seq < work.context:
        raise ConfigError(
            [
                Issue(
                    spec.source or "",
                    None,
                    None,
                    "seq",
                    "seq %d (the context a request may reach) is shorter than input_len + output_len = %d + %d: "
                    "raise --seq or lower the lengths" % (spec.seq, work.input_len, work.output_len),
                )
            ]
        )
    return work


def serve_sizing(site: Site, spec: JobSpec, launcher: Launcher) -> Sizing:
    """Router or disaggregated serving: the serving planner's workers, compared with one server
    (make_plan's layout for the launcher) on the same nodes."""
    where = spec.source or ""
    if not launcher.serving:
        raise ConfigError(
            [
                Issue(
                    where,
                    None,
                    None,
                    "serve",
                    "serve %s needs a serving engine: --launcher vllm or sglang" % spec.serve,
                )
            ]
        )
    if not spec.model:
        raise ConfigError(
            [
                Issue(
                    where,
                    None,
                    None,
                    "model",
                    "serve %s sizes each worker from the model: give --model (a catalogue name, a size such as 70B, "
                    "or a model file)" % spec.serve,
                )
            ]
        )
    if spec.requeue:
        raise ConfigError(
            [
                Issue(
                    where,
                    None,
                    None,
                    "requeue",
                    "serve %s: a serving job runs until its time limit and keeps no checkpoint to resume from; "
                    "drop --requeue (submit it again to serve longer)" % spec.serve,
                )
            ]
        )
    pins = sorted(k for k, v in spec.parallel.items() if v is not None)
    if pins:
        raise ConfigError(
            [
                Issue(
                    where,
                    None,
                    None,
                    "parallel",
                    "serve %s plans each worker's TP and PP itself; drop the pinned %s (pins apply to one "
                    "aggregated server)" % (spec.serve, ", ".join(pins)),
                )
            ]
        )
    model = _model(spec.model)
    sp = serve_plan(site, spec, model, launcher)
    node = site.node_type_of(spec.partition or site.default_partition)
    dep = sp.chosen
    tp = max(r.worker.tp for r in dep.roles)
    pp = max(r.worker.pp for r in dep.roles)
    world = dep.nodes * node.gpus
    layout = Layout(
        tp=tp, pp=pp, dp=max(1, world // (tp * pp)), cp=1, ep=1, micro_batch=1, nodes=dep.nodes, gpus_per_node=node.gpus
    )
    notes = ["%s: %d x %s (%s)" % (r.role, r.count, r.worker.words(), r.why) for r in dep.roles]
    return Sizing(layout=layout, model=model, notes=tuple(notes), serve=sp)


def serve_plan(site: Site, spec: JobSpec, model: ModelSpec, launcher: Launcher) -> ServePlan:
    """The serving planner's answer for the spec's mode and request shape, every mode compared on
    the same nodes; the aggregated row is make_plan's one server for `launcher` (its caps)."""
    from ..plan import make_plan
    from ..plan.serving import MODES, plan_serving
    from .launchers import memory_profile

    partition = spec.partition or site.default_partition
    node = site.node_type_of(partition)
    work = workload(spec)
    profile = memory_profile(launcher, spec.precision, (), model)  # the engine's preallocation rule
    nodes = spec.nodes
    if spec.gpus is not None:
        nodes = -(-spec.gpus // node.gpus)
        if spec.gpus % node.gpus:
            raise PlanError(
                "serve %s takes whole nodes: --gpus %d is not a multiple of %d" % (spec.serve, spec.gpus, node.gpus)
            )
    allowed = list(MODES)
    reasons: Dict[str, str] = {}
    if node.fabric in ("efa", "slingshot"):
        allowed.remove("disaggregated")
        reasons["disaggregated"] = "no checked KV-transfer recipe for %s here (NIXL's LIBFABRIC backend)" % node.fabric
    if nodes is None and spec.serve != "aggregated":
        # the nodes the asked mode needs; every mode is then compared on them
        first = plan_serving(
            site, model, work, spec.serve, partition, None, spec.precision, None, allowed, True, reasons, profile
        )
        nodes = first.chosen.nodes
    agg: Tuple[Optional[Layout], str]
    try:
        one = make_plan(
            site,
            replace(
                plan_request(site, replace(spec, serve="aggregated"), model),
                seq=work.context,
                nodes=nodes,
            ),
        )
        agg = (one.layout, "one %s server over the nodes" % launcher.name)
        nodes = one.layout.nodes
    except PlanError as e:
        agg = (None, str(e).splitlines()[0])
        reasons["aggregated"] = agg[1]
    sp = plan_serving(
        site,
        model,
        work,
        spec.serve,
        partition,
        nodes,
        spec.precision,
        (agg[0], agg[1]) if agg[0] is not None else None,
        allowed,
        True,
        reasons,
        profile,
    )
    return sp


def plan_request(site: Site, spec: JobSpec, model: ModelSpec, **extra: Any) -> PlanRequest:
    """The planner's request for a spec (`gen` and `plan` ask the same question); `extra` sets the
    planner-only knobs (optimizer, zero, recompute, target_days)."""
    from ..plan import PlanRequest

    task = spec.task
    if get_launcher(spec.launcher).serving and task == "pretrain":
        task = "inference"
    return PlanRequest(
        model=model,
        task=task,
        partition=spec.partition or site.default_partition,
        gpus=spec.gpus,
        nodes=spec.nodes,
        seq=spec.seq,
        global_batch=spec.global_batch,
        precision=spec.precision,
        tokens=spec.tokens,
        pins=dict(spec.parallel),
        caps=planner_caps(get_launcher(spec.launcher), spec.precision, spec.implements, spec.fsdp, model),
        **extra,
    )


def segment_for(
    site: Site, node: NodeType, layout: Layout, wanted: Optional[int], planned: Optional[int] = None
) -> Optional[int]:
    """--segment on sites whose NVLink domain spans nodes (topology/block, NVL72).

    Both the choice and the check of a user's --segment are the planner's rule
    (`plan.rules.segment_for_layout`: whole TP, CP and EP groups inside one domain, from
    `plan.placement`), which is also the submit policy's.
    """
    from ..plan.placement import strict_kinds
    from ..plan.rules import layout_segment_error
    from ..plan.rules import segment_for_layout as planned_segment

    kinds = strict_kinds(site.policy.groups)
    if wanted is not None:
        if site.topology != "block":
            raise ConfigError(
                [
                    Issue(
                        "",
                        None,
                        None,
                        "segment",
                        "--segment needs a topology/block site (NVLink domains across nodes); "
                        "site %s has topology %s" % (site.name, site.topology),
                    )
                ]
            )
        err = layout_segment_error(node, layout, wanted, kinds=kinds)
        if err:
            raise ConfigError([Issue("", None, None, "segment", err)])
        return wanted
    if planned is not None:
        return planned
    seg, err = planned_segment(node, layout, kinds=kinds)
    if err:
        raise PlanError(err)
    return seg


def _check_size(spec: JobSpec, part: Partition, layout: Layout, launcher: Launcher) -> None:
    from . import launchers as L
    from .spec import time_seconds

    bad = L.serving_layout_ok(launcher, layout)
    if bad:
        raise PlanError(bad)
    if layout.nodes > part.max_nodes_per_job:
        raise PlanError(
            "partition %s allows at most %d node%s per job, the job needs %d"
            % (part.name, part.max_nodes_per_job, "s" if part.max_nodes_per_job != 1 else "", layout.nodes)
        )
    limit = time_seconds(spec.time) if spec.time else None
    if spec.requeue and spec.grace is not None and limit is not None and spec.grace >= limit:
        raise ConfigError(
            [
                Issue(
                    "",
                    None,
                    None,
                    "grace",
                    "the checkpoint signal comes %d s before the limit, "
                    "but the time limit %s is only %d s" % (spec.grace, spec.time, limit),
                )
            ]
        )


def suggestion(site: Site, spec: JobSpec, sizing: Sizing) -> str:
    """What to run instead: the planner's layout without the offending pins."""
    partition = spec.partition or site.default_partition
    node = site.node_type_of(partition)
    domain = node.nvlink_domain
    if spec.model:
        pins = {k: v for k, v in spec.parallel.items() if k not in ("tp", "pp", "dp")}
        try:
            alt = plan_layout(site, replace(spec, parallel=pins)).layout
        except (PlanError, ConfigError):
            alt = None
        if alt is not None and alt.tp <= domain:
            return (
                "suggestion: the planner picks tp=%d pp=%d dp=%d cp=%d on %d node%s: drop the --tp/--pp/--dp "
                "pins, or pin --tp %d --pp %d"
                % (alt.tp, alt.pp, alt.dp, alt.cp, alt.nodes, "s" if alt.nodes != 1 else "", alt.tp, alt.pp)
            )
    # never the TP just refused: the largest TP that stays inside one node and one domain, below it
    tp, gpn = sizing.layout.tp, sizing.layout.gpus_per_node
    smaller = [t for t in range(min(tp - 1, gpn, domain), 0, -1) if gpn % t == 0 and domain % t == 0]
    example = ", e.g. --tp %d," % smaller[0] if smaller else ""
    return (
        "suggestion: keep tp <= %d (the NVLink domain of %s on partition %s)%s and add pipeline "
        "or data parallelism across nodes" % (domain, node.name, partition, example)
    )
