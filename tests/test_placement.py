"""Placement of every communication group, and the --segment computed from the group spans."""

import itertools
from dataclasses import replace

import pytest

from slurmgpu.plan import Layout, PlanRequest, get_model, make_plan
from slurmgpu.plan.placement import Span, choose_segment, crossings, group_nodes, groups, segment_unit_of, spans
from slurmgpu.plan.rules import check_layout_rules, layout_segment_error, segment_for, segment_for_layout
from slurmgpu.site import load_site
from slurmgpu.site.presets import preset_dir


def _gb200(nodes: int):
    site = load_site(str(preset_dir() / "gb200-nvl72.yaml"))
    part = replace(site.partitions["gpu"], nodes=nodes, max_nodes_per_job=nodes)
    return replace(site, partitions={"gpu": part})


def test_megatron_groups_tp_innermost_then_cp_and_the_expert_mesh():
    lay = Layout(tp=2, cp=2, dp=2, ep=2, pp=2, nodes=4, gpus_per_node=4)
    assert groups(lay, "tp")[:2] == [[0, 1], [2, 3]]
    assert groups(lay, "cp")[:3] == [[0, 2], [1, 3], [4, 6]]
    assert groups(lay, "dp")[0] == [0, 4]
    assert groups(lay, "pp")[0] == [0, 8]
    # expert mesh etp-ep-edp-pp with etp = tp: EP carved out of CP x DP
    assert groups(lay, "ep")[:3] == [[0, 2], [1, 3], [4, 6]]
    assert group_nodes(lay, "pp")[0] == [0, 2]  # PP stages on different nodes


@pytest.mark.parametrize("tp,cp,ep,rpn", list(itertools.product((1, 2, 3, 4, 6, 8), (1, 2, 3), (1, 2, 4, 8), (4, 2))))
def test_the_span_formula_matches_the_explicit_placement(tp, cp, ep, rpn):
    dp = 24
    nodes = tp * cp * dp * 2 // rpn
    lay = Layout(tp=tp, cp=cp, dp=dp, ep=ep, pp=2, nodes=nodes, gpus_per_node=rpn)
    unit = segment_unit_of(spans(lay))
    for seg in range(1, nodes + 1):
        if nodes % seg:
            continue
        crossed = crossings(lay, nodes, seg)
        assert (not crossed) == (seg % unit == 0), (seg, unit, crossed)


def test_mlperf_llama_405b_on_1280_gb200_nodes_gets_16_node_segments():
    site = _gb200(1280)
    nt = site.node_types["gb200-tray"]
    lay = Layout(tp=4, cp=2, pp=8, dp=80, nodes=1280, gpus_per_node=4)
    assert segment_for_layout(nt, lay) == (16, None)  # = TP*PP*CP / GPUs per node, as MLPerf v5.1 sets it
    assert not crossings(lay, nt.domain_nodes, 16)
    plan = make_plan(site, PlanRequest(model=get_model("llama3.1-405b"), nodes=1280, pins={"tp": 4, "cp": 2, "pp": 8}))
    assert (plan.layout.tp, plan.layout.cp, plan.layout.pp) == (4, 2, 8)
    assert plan.segment == 16


def test_deepseek_v3_ep64_gets_16_node_segments_and_ep128_is_refused():
    site = _gb200(256)
    nt = site.node_types["gb200-tray"]
    lay = Layout(tp=1, pp=16, dp=64, ep=64, nodes=256, gpus_per_node=4)
    assert segment_for_layout(nt, lay) == (16, None)  # 64 expert ranks = 16 trays, one rack
    plan = make_plan(site, PlanRequest(model=get_model("deepseek-v3"), nodes=256, pins={"tp": 1, "pp": 16, "ep": 64}))
    assert plan.layout.ep == 64 and plan.segment == 16
    wide = Layout(tp=1, pp=8, dp=128, ep=128, nodes=256, gpus_per_node=4)
    errs = check_layout_rules(site, "gpu", get_model("deepseek-v3"), wide)
    assert any("EP group" in e and "more than one 72-GPU NVLink domain" in e for e in errs), errs
    # unpinned, the planner never picks an EP group that leaves a rack
    free = make_plan(site, PlanRequest(model=get_model("deepseek-v3"), nodes=256))
    assert free.layout.tp * free.layout.ep <= 72 and free.segment


def test_no_segment_says_which_node_counts_would_work():
    sp = spans(Layout(tp=1, dp=80, ep=32, nodes=20, gpus_per_node=4))
    seg, err = choose_segment(18, 72, 20, sp)
    assert seg is None and "16 or 24 nodes would work" in err, err


def test_explicit_segment_must_hold_whole_ep_groups():
    nt = _gb200(32).node_types["gb200-tray"]
    lay = Layout(tp=1, dp=128, ep=32, nodes=32, gpus_per_node=4)
    assert layout_segment_error(nt, lay, 16) is None
    err = layout_segment_error(nt, lay, 4)
    assert err and "EP=32 needs 8-node blocks" in err


def test_ep_set_to_warn_is_preferred_not_required(tmp_path):
    """policy.groups.ep: warn: the planner takes a pinned EP group larger than a rack (its all-to-all
    then runs on the NICs, which the cost model charges) and the segment keeps only TP whole; with
    the default (enforce) the same pins are refused. Unpinned, it still picks EP inside a rack."""
    from slurmgpu.errors import PlanError
    from slurmgpu.site import load_site

    pins = {"tp": 1, "pp": 8, "ep": 128}
    with pytest.raises(PlanError):
        make_plan(_gb200(256), PlanRequest(model=get_model("deepseek-v3"), nodes=256, pins=pins))
    f = tmp_path / "warn.yaml"
    f.write_text(
        "extends: gb200-nvl72\nname: gb-warn\npartitions:\n  gpu:\n    node_type: gb200-tray\n    nodes: 256\n"
        "policy:\n  groups:\n    ep: warn\n"
    )
    warn = load_site(str(f))
    plan = make_plan(warn, PlanRequest(model=get_model("deepseek-v3"), nodes=256, pins=pins))
    assert plan.layout.ep == 128 and (plan.segment is None or plan.segment <= 18)
    assert any("EP groups may cross NVLink domains" in n for n in plan.notes)
    free = make_plan(warn, PlanRequest(model=get_model("deepseek-v3"), nodes=256))
    assert free.layout.tp * free.layout.ep <= 72


def test_expert_groups_follow_the_plans_expert_tp():
    """TP2 EP64 over DP32 (DeepSeek-V3 on 32 GB200 trays, PP2): EP does not divide DP x CP, so the
    experts run with expert TP 1 (what megatron.py writes): one EP group is 64 consecutive ranks, 16
    trays of one rack, and the rules, the segment and the crossings all agree. Before, placement took
    expert TP = TP unless a caller passed it (none did): groups() raised, spans() said 32 trays."""
    site = _gb200(32)
    nt = site.node_types["gb200-tray"]
    lay = Layout(tp=2, pp=2, dp=32, ep=64, nodes=32, gpus_per_node=4)
    assert groups(lay, "ep")[0] == list(range(64))
    assert [(s.block, s.unit) for s in spans(lay) if s.kind == "ep"] == [(64, 16)]
    assert group_nodes(lay, "ep")[0] == list(range(16))
    assert segment_for_layout(nt, lay) == (16, None)
    assert layout_segment_error(nt, lay, 16) is None and layout_segment_error(nt, lay, 8)
    assert not crossings(lay, nt.domain_nodes, 16) and crossings(lay, nt.domain_nodes, 8) == {"ep": 2}
    assert check_layout_rules(site, "gpu", get_model("deepseek-v3"), lay) == []
    # EP dividing DP x CP: the experts keep TP, an EP group strides over TP's ranks
    keep = Layout(tp=2, dp=16, ep=4, nodes=8, gpus_per_node=4)
    assert groups(keep, "ep")[:2] == [[0, 2, 4, 6], [1, 3, 5, 7]]
    assert [s.unit for s in spans(keep) if s.kind == "ep"] == [2]


def test_an_explicit_segment_must_be_a_multiple_of_the_span_and_fit_one_domain():
    """TP=12 on 4-GPU trays spans 3 trays: --segment=4 is larger than a group but cuts groups (issue
    35's NVL72 mutation: 'a multiple' read as 'at least'); a 36-node segment holds whole groups and the
    whole job but is two racks."""
    nt = _gb200(36).node_types["gb200-tray"]
    lay = Layout(tp=12, dp=4, nodes=12, gpus_per_node=4)
    assert layout_segment_error(nt, lay, 3) is None and layout_segment_error(nt, lay, 6) is None
    assert "be a multiple of 3" in (layout_segment_error(nt, lay, 4) or "")
    assert layout_segment_error(nt, lay, 5)
    whole = Layout(tp=12, dp=12, nodes=36, gpus_per_node=4)
    assert layout_segment_error(nt, whole, 18) is None
    assert "be at most 18" in (layout_segment_error(nt, whole, 36) or "")


def test_the_planners_segment_holds_whole_tp_groups_of_trays():
    """rules.segment_for: TP=9 (9 trays per group: 9 / gcd(9, 4)) on 9 trays is one 9-node segment;
    TP=6 (3 trays) on 2 trays has none; on 12 trays a whole-job 12-node segment; on 30 trays 15."""
    nt = _gb200(36).node_types["gb200-tray"]
    assert segment_for(nt, 9, 9, 4) == (9, None)
    seg, err = segment_for(nt, 6, 2, 4)
    assert seg is None and "segments of 3 nodes" in (err or "")
    assert segment_for(nt, 6, 12, 4) == (12, None)
    assert segment_for(nt, 6, 30, 4) == (15, None)
    assert segment_for(nt, 8, 20, 4) == (10, None)  # not 18: it must divide the node count
    assert segment_for(nt, 8, 19, 4)[0] is None


def test_choose_segment_never_leaves_nodes_over():
    two = [Span("tp", 8, 8, 2)]
    assert choose_segment(18, 72, 20, two) == (10, None)
    seg, err = choose_segment(18, 72, 19, two)
    assert seg is None and "18 or 20 nodes would work" in (err or "")


def test_tp_larger_than_the_domain_and_ep_not_dividing_are_named():
    site = _gb200(72)
    errs = check_layout_rules(site, "gpu", get_model("llama3.1-405b"), Layout(tp=144, dp=2, nodes=72, gpus_per_node=4))
    assert any("TP=144 is larger than the 72-GPU NVLink domain" in e for e in errs), errs
    errs = check_layout_rules(
        site, "gpu", get_model("deepseek-v3"), Layout(tp=1, dp=24, ep=16, nodes=6, gpus_per_node=4)
    )
    assert any("EP=16 must divide DP x CP x TP = 24" in e for e in errs), errs
