"""The placement rules: TP inside one NVLink domain, the NVL72 segment, divisibility. This is the
Python copy of the rule the Lua policy enforces; tests/test_agreement.py pins the two together."""

from __future__ import annotations

import math
from typing import List, Optional, Sequence, Tuple, Union

from ..site import NodeType, Partition, Site
from .hardware import Hardware, hardware
from .layout import Layout, expert_tp
from .models import ModelSpec
from .placement import DOMAIN_KINDS, choose_segment, spans


def _nodes_word(n: int) -> str:
    return {2: "two", 3: "three", 4: "four"}.get(n, str(n))


def segment_unit(tp: int, gpn: int) -> int:
    """Fewest nodes that hold whole TP groups: tp / gcd(tp, GPUs per node) (TP=6 on 4-GPU trays: 3).

    The one rule for where --segment may cut a job; contrib/lua/policy/rule_groups.lua applies the same
    (`kbase = tp / gcd(tp, rpn)`), and tests/test_agreement.py keeps the two together.
    """
    return tp // math.gcd(tp, gpn)


def segment_for(nt: NodeType, tp: int, nodes: int, gpn: int) -> Tuple[Optional[int], Optional[str]]:
    """On a multi-node NVLink domain: the --segment size (nodes) and an error if none works.

    The largest segment of whole TP groups (a multiple of `segment_unit`) that fits in one
    domain and divides the node count: the whole job when it fits in one domain.
    """
    if nt.nvlink_domain <= nt.gpus or nodes <= 1:
        return None, None
    dn = nt.domain_nodes
    tn = segment_unit(tp, gpn)
    if nodes <= dn and nodes % tn == 0:
        return nodes, None
    for seg in range(dn - dn % tn, 0, -tn):
        if nodes % seg == 0:
            return (seg if seg > 1 else None), None
    return None, (
        "TP=%d needs segments of %d nodes (whole TP groups) inside the %d-GPU NVLink domain, but "
        "%d nodes cannot be cut into such segments that fit in one %d-node domain (use a multiple "
        "of %d nodes)" % (tp, tn, nt.nvlink_domain, nodes, dn, tn)
    )


def segment_error(nt: NodeType, tp: int, nodes: int, gpn: int, segment: int) -> Optional[str]:
    """Why an explicit --segment does not keep each TP group inside one NVLink domain (None: it does).

    A segment must hold whole TP groups (a multiple of tp / gcd(tp, gpn) nodes), fit in one
    domain, and cut the job into whole segments (divide the node count, or hold the whole job).
    """
    dn = nt.domain_nodes
    tn = segment_unit(tp, gpn)
    if segment >= 1 and segment % tn == 0 and segment <= dn and (segment >= nodes or nodes % segment == 0):
        return None
    return (
        "--segment=%d does not keep TP groups inside one %d-node NVLink domain for a %d-node job: TP=%d on "
        "%d GPUs per node needs %d node%s per group (tp / gcd(tp, %d)), so the segment must be a multiple of "
        "%d, divide %d and be at most %d" % (segment, dn, nodes, tp, gpn, tn, "s" if tn > 1 else "", gpn, tn, nodes, dn)
    )


def segment_for_layout(
    nt: NodeType,
    layout: Layout,
    ranks_per_node: Optional[int] = None,
    etp: Optional[int] = None,
    kinds: Sequence[str] = DOMAIN_KINDS,
) -> Tuple[Optional[int], Optional[str]]:
    """The --segment that keeps every TP, CP and EP group of `layout` inside one NVLink domain.

    Dense and MoE alike: the unit is the least common multiple of each group's span in nodes
    (`placement.group_unit`: TP tp, CP tp*cp, EP etp*ep ranks); PP and DP may cross domains.
    For MLPerf's Llama 3.1 405B (TP4 CP2 on 4-GPU trays, 1,280 nodes) that is 16-node segments.
    """
    if nt.nvlink_domain <= nt.gpus or layout.nodes <= 1:
        return None, None
    etp = _etp(layout, etp)
    return choose_segment(
        nt.domain_nodes, nt.nvlink_domain, layout.nodes, spans(layout, ranks_per_node, kinds=kinds, etp=etp)
    )


def _etp(layout: Layout, etp: Optional[int]) -> int:
    """The expert TP the plan runs: given, else what the memory and cost model assume (layout.expert_tp),
    so an EP group of TP 2 x EP 64 over DP 32 spans 64 ranks, not 128."""
    return etp if etp is not None else expert_tp(layout.tp, layout.dp, layout.cp, layout.ep)


def layout_segment_error(
    nt: NodeType,
    layout: Layout,
    segment: int,
    ranks_per_node: Optional[int] = None,
    etp: Optional[int] = None,
    kinds: Sequence[str] = DOMAIN_KINDS,
) -> Optional[str]:
    """Why an explicit --segment lets some TP/CP/EP group of `layout` leave its NVLink domain."""
    from .placement import segment_unit_of

    sp = spans(layout, ranks_per_node, kinds=kinds, etp=_etp(layout, etp))
    unit = segment_unit_of(sp)
    dn, nodes = nt.domain_nodes, layout.nodes
    if segment >= 1 and segment % unit == 0 and segment <= dn and (segment >= nodes or nodes % segment == 0):
        return None
    what = ", ".join("%s=%d needs %d-node blocks" % (s.kind.upper(), s.size, s.unit) for s in sp)
    rule = "divide %d and be at most %d" % (nodes, dn)
    if unit > 1:
        rule = "be a multiple of %d, %s" % (unit, rule)
    if not what:  # no group leaves a node: the segment only has to tile the job inside one domain
        return "--segment=%d does not tile the %d-node job into %d-node NVLink domains: the segment must %s" % (
            segment,
            nodes,
            dn,
            rule,
        )
    return (
        "--segment=%d does not keep TP groups and the other model-parallel groups inside one %d-node NVLink "
        "domain for a %d-node job (%s): the segment must %s" % (segment, dn, nodes, what, rule)
    )


def _tp_rules(hw: Hardware, model: ModelSpec, tp: int, nodes: int, gpn: int) -> List[str]:
    nt = hw.nt
    out: List[str] = []
    dom = nt.nvlink_domain
    if tp > 1:
        if dom > nt.gpus:  # multi-node NVLink domain (NVL72)
            if tp > dom:
                out.append(
                    "TP=%d is larger than the %d-GPU NVLink domain (%d nodes): its all-reduces would "
                    "run over %s instead of %s" % (tp, dom, nt.domain_nodes, hw.nic_words(), hw.link_words)
                )
            else:  # groups may cross trays: inside one domain (one --segment) that is still NVLink
                _, err = segment_for(nt, tp, nodes, gpn)
                if err:
                    out.append(err)
        elif dom == 1:
            out.append(
                "TP=%d needs GPUs that share NVLink, but %s GPUs have none (NVLink domain of 1): its "
                "all-reduces would run over %s; keep TP=1 and use PP/DP"
                % (tp, nt.gpu_model, hw.link_words if nt.link == "pcie" else "PCIe")
            )
        elif tp > min(dom, gpn):
            if tp > gpn:
                span = -(-tp // gpn)
                if gpn < nt.gpus:
                    out.append(
                        "TP=%d needs %d GPUs of one NVLink domain, but %d GPUs on %d-GPU nodes are %d "
                        "nodes x %d GPUs: its groups would span nodes and run over %s instead of %s; "
                        "use a multiple of %d GPUs"
                        % (tp, tp, nodes * gpn, nt.gpus, nodes, gpn, hw.nic_words(), hw.link_words, nt.gpus)
                    )
                else:
                    out.append(
                        "TP=%d spans %s nodes: its all-reduces would run over %s instead of %s"
                        % (tp, _nodes_word(span), hw.nic_words(), hw.link_words)
                    )
            else:
                out.append(
                    "TP=%d is larger than the %d-GPU %s domain: its all-reduces would leave the fast "
                    "link" % (tp, dom, hw.link_name)
                )
        elif dom % tp:
            out.append(
                "TP=%d does not divide the %d-GPU NVLink domain: some TP groups would straddle two domains" % (tp, dom)
            )
        elif gpn % tp:
            out.append(
                "TP=%d does not divide the %d GPUs used per node: some TP groups would straddle two nodes" % (tp, gpn)
            )
    if model.heads % tp:
        out.append("TP=%d does not divide the %d attention heads" % (tp, model.heads))
    elif not model.is_mla and model.kv_heads % tp:
        out.append(
            "TP=%d does not divide the %d KV heads (grouped-query attention): each rank must hold "
            "whole KV heads" % (tp, model.kv_heads)
        )
    return out


def check_layout_rules(
    site: Site, partition: Union[str, Partition, None], model: ModelSpec, layout: Layout, seq: Optional[int] = None
) -> List[str]:
    """Hard-rule violations of `layout` in words; empty when the layout is allowed."""
    pname = partition.name if isinstance(partition, Partition) else partition
    hw = hardware(site, pname)
    return _layout_rules(hw, model, layout, seq or model.seq)


def _layout_rules(hw: Hardware, model: ModelSpec, lay: Layout, seq: int) -> List[str]:
    nt, part = hw.nt, hw.partition
    out: List[str] = []
    for k in ("tp", "pp", "dp", "cp", "ep", "micro_batch", "nodes", "gpus_per_node"):
        if getattr(lay, k) < 1:
            out.append("%s must be at least 1, got %d" % (k.replace("_", "-"), getattr(lay, k)))
    if out:
        return out
    gpus = lay.nodes * lay.gpus_per_node
    if lay.world != gpus:
        out.append(
            "TP x PP x DP x CP = %d x %d x %d x %d = %d ranks, but the allocation has %d GPUs "
            "(%d nodes x %d)" % (lay.tp, lay.pp, lay.dp, lay.cp, lay.world, gpus, lay.nodes, lay.gpus_per_node)
        )
    if lay.gpus_per_node > nt.gpus:
        out.append("%d GPUs per node asked, but %s nodes have %d" % (lay.gpus_per_node, nt.name, nt.gpus))
    if lay.nodes > part.max_nodes_per_job:
        out.append(
            "%d nodes exceed partition %s's limit of %d nodes per job" % (lay.nodes, part.name, part.max_nodes_per_job)
        )
    out.extend(_tp_rules(hw, model, lay.tp, lay.nodes, lay.gpus_per_node))
    if lay.pp > model.layers:
        out.append("PP=%d is more pipeline stages than the model's %d layers" % (lay.pp, model.layers))
    if lay.cp > 1 and seq % (2 * lay.cp):
        out.append(
            "CP=%d needs the sequence length (%d) to be a multiple of 2 x CP = %d (causal load "
            "balancing)" % (lay.cp, seq, 2 * lay.cp)
        )
    if lay.ep > 1:
        if not model.is_moe:
            out.append("EP=%d needs a mixture-of-experts model; %s is dense" % (lay.ep, model.label))
        elif model.experts % lay.ep:
            out.append("EP=%d does not divide the %d experts" % (lay.ep, model.experts))
        elif (lay.dp * lay.cp * lay.tp) % lay.ep:
            out.append(
                "EP=%d must divide DP x CP x TP = %d: Megatron carves expert-parallel groups out of "
                "the data-, context- and tensor-parallel ranks" % (lay.ep, lay.dp * lay.cp * lay.tp)
            )
    if not out and nt.nvlink_domain > nt.gpus and lay.nodes > 1 and (lay.cp > 1 or lay.ep > 1):
        # NVL72: CP and EP groups need NVLink as much as TP (EP all-to-alls across racks stall),
        # unless the site's policy.groups only warns for that kind
        _, err = segment_for_layout(nt, lay, kinds=hw.strict_kinds)
        if err:
            out.append(err)
    return out


def _divisors(n: int) -> List[int]:
    small, large = [], []
    i = 1
    while i * i <= n:
        if n % i == 0:
            small.append(i)
            if i * i != n:
                large.append(n // i)
        i += 1
    return small + large[::-1]
