"""The planner never chooses a layout the launcher cannot express (plan.types.Capabilities), and a
pin that contradicts the launcher's capabilities is an error naming the launcher and the flag."""

from __future__ import annotations

from typing import Any

import pytest

from slurmgpu.errors import PlanError
from slurmgpu.plan import Capabilities, PlanRequest, get_model, make_plan
from slurmgpu.plan.types import Plan
from slurmgpu.site import load_site, preset_dir

SITE = load_site(str(preset_dir() / "dgx-h100.yaml"))


def plan(model: str, nodes: int, task: str = "pretrain", **kw: Any) -> Plan:
    return make_plan(SITE, PlanRequest(model=get_model(model), task=task, nodes=nodes, **kw))


def test_no_pipeline_or_context_parallel_when_the_launcher_has_none() -> None:
    free = plan("llama3.1-70b", 4).layout
    assert free.pp > 1 and free.cp > 1  # what the planner picks when anything goes
    assert plan("llama3.1-70b", 4, caps=Capabilities(pp=False)).layout.pp == 1
    assert plan("llama3.1-70b", 4, caps=Capabilities(cp=False)).layout.cp == 1


def test_no_expert_parallel_and_only_even_stages_when_unsupported() -> None:
    free = plan("deepseek-v3", 32)
    assert free.layout.ep > 1 and len(set(free.stage_layers)) > 1  # 61 layers on 32 stages
    assert plan("deepseek-v3", 32, caps=Capabilities(ep=False)).layout.ep == 1
    even = plan("deepseek-v3", 32, caps=Capabilities(uneven_stages=False))
    assert len(set(even.stage_layers)) == 1


def test_zero_stages_and_virtual_stages_follow_the_caps() -> None:
    assert plan("gemma2-27b", 1).zero == 3  # what the planner picks when anything goes
    assert plan("gemma2-27b", 1, caps=Capabilities(zero=(0, 1))).zero in (0, 1)
    lean = plan("llama3.1-405b", 16, caps=Capabilities(zero=(0, 1)))
    assert lean.zero in (0, 1) and lean.virtual_stages > 1
    flat = plan("llama3.1-405b", 16, caps=Capabilities(zero=(0, 1), virtual_stages=False))
    assert flat.virtual_stages == 1


def test_zero3_is_not_combined_with_pp_or_ep_where_the_launcher_cannot() -> None:
    assert plan("llama3.1-70b", 4, zero=3).layout.pp > 1
    assert plan("llama3.1-70b", 4, zero=3, caps=Capabilities(zero3_with_pp=False)).layout.pp == 1
    assert plan("deepseek-v3", 32, zero=3).layout.ep > 1
    assert plan("deepseek-v3", 32, zero=3, caps=Capabilities(zero3_with_ep=False)).layout.ep == 1


def test_serving_dp_only_where_the_engine_runs_replicas() -> None:
    assert plan("llama3.1-8b", 1, task="inference").layout.dp > 1
    one = plan("llama3.1-8b", 1, task="inference", caps=Capabilities(serving_dp=False)).layout
    assert one.dp == 1 and one.tp * one.pp == 8
    assert plan("llama3.1-8b", 2, task="inference").layout.dp > 1
    local = plan("llama3.1-8b", 2, task="inference", caps=Capabilities(serving_dp_nodes=False)).layout
    assert local.dp == 1 and local.tp * local.pp == 16
    assert plan("llama3.1-8b", 1, task="inference", caps=Capabilities(serving_dp_nodes=False)).layout.dp > 1


@pytest.mark.parametrize(
    "caps,kw,words",
    [
        (Capabilities(pp=False), {"pins": {"pp": 2}}, "--pp 2"),
        (Capabilities(cp=False), {"pins": {"cp": 2}}, "--cp 2"),
        (Capabilities(ep=False), {"pins": {"ep": 2}}, "--ep 2"),
        (Capabilities(zero=(0, 1)), {"zero": 3}, "--zero 3"),
        (Capabilities(zero3_with_pp=False), {"zero": 3, "pins": {"pp": 2}}, "--pp 2"),
        (Capabilities(zero3_with_ep=False), {"zero": 3, "pins": {"ep": 2}}, "--ep 2"),
        (Capabilities(virtual_stages=False), {"pins": {"pp": 2}, "virtual_stages": 2}, "--virtual-stages 2"),
        (Capabilities(uneven_stages=False), {"pins": {"pp": 3}}, "--pp 3"),
    ],
)
def test_pins_against_the_caps_name_launcher_and_flag(caps: Capabilities, kw: Any, words: str) -> None:
    from dataclasses import replace

    with pytest.raises(PlanError) as e:
        plan("mixtral-8x7b", 4, caps=replace(caps, launcher="fwk"), **kw)
    assert "launcher fwk" in str(e.value) and words in str(e.value)


def test_serving_dp_pin_against_the_caps() -> None:
    with pytest.raises(PlanError, match="launcher eng .*--dp 2"):
        plan("llama3.1-8b", 1, task="inference", pins={"dp": 2}, caps=Capabilities(serving_dp=False, launcher="eng"))
    with pytest.raises(PlanError, match="launcher eng .*inside one node.*--dp 4"):
        plan(
            "llama3.1-8b",
            2,
            task="inference",
            pins={"dp": 4},
            caps=Capabilities(serving_dp_nodes=False, launcher="eng"),
        )


def test_expert_parallel_stays_inside_the_shard_where_the_launcher_borrows_ep_from_it() -> None:
    """torchtitan's EP comes out of dp_shard x CP x TP, and its ZeRO-1/2 shard inside one node: DeepSeek-V3
    on 32 nodes was planned with ZeRO-1 and EP 64 over a 2-rank shard, which torchtitan refuses."""
    from slurmgpu.plan import node_shard

    pins = {"tp": 4, "pp": 1, "dp": 64, "ep": 64}
    caps = Capabilities(zero=(1, 2, 3), ep_within_shard=True)
    p = plan("deepseek-v3", 32, pins=pins, caps=caps)
    lay = p.layout
    assert (node_shard(lay.dp, lay.cp, lay.tp, lay.gpus_per_node) * lay.cp * lay.tp) % lay.ep != 0
    assert p.zero == 3  # full sharding: dp_shard is all 64 DP ranks (before: ZeRO-1, a 2-rank shard)
    assert plan("deepseek-v3", 32, pins=pins).zero in (1, 2)  # a launcher without the constraint: not forced to 3
    # with pipeline stages too: torchtitan runs FSDP + PP (before the fix: no strategy left, "does not fit")
    staged = plan("deepseek-v3", 32, pins={"tp": 2, "pp": 4, "dp": 32, "ep": 64}, caps=caps)
    assert (staged.layout.pp, staged.zero) == (4, 3)
