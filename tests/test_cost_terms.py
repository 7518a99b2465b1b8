"""Behaviour of the cost model's fitted terms: each moves the step time it is named for, in the
direction physics says, and nothing else; and the published layouts they were fitted on are planned."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

import plan_accuracy  # noqa: E402

from slurmgpu.errors import PlanError  # noqa: E402
from slurmgpu.plan import Capabilities, ModelSpec, PlanRequest, get_model, make_plan  # noqa: E402
from slurmgpu.plan.cost import _Ctx, _ep_bytes  # noqa: E402
from slurmgpu.plan.hardware import hardware  # noqa: E402
from slurmgpu.plan.memory import layer_act_base, layer_act_op  # noqa: E402
from slurmgpu.plan.terms import DEFAULT_TERMS  # noqa: E402

QWEN3_30B = ModelSpec(
    name="qwen3-30b-a3b", layers=48, hidden=2048, heads=32, kv_heads=4, ffn=6144, vocab=151936, seq=4096,
    experts=128, experts_active=8, moe_ffn=768, head_dim=128,
)  # fmt: skip


def site(gpu: str, gpus: int):
    return plan_accuracy.site_for(gpu, gpus)


def pinned(gpu, gpus, model, pins, terms=DEFAULT_TERMS, **kw):
    kw.setdefault("precision", "bf16")
    req = PlanRequest(model=model, gpus=gpus, pins=pins, terms=terms, **kw)
    return make_plan(site(gpu, gpus), req)


def test_node_limited_routing_caps_the_fabric_copies_of_a_token():
    """DeepSeek-V3 routes each token to at most 4 of 8 expert groups; with EP 64 over 8 nodes the
    token crosses the fabric at most 4 times (forwarded inside the node), not 7/8 of its 8 copies."""
    dsv3 = get_model("deepseek-v3")
    ctx = _Ctx(hardware(site("h100", 512), None), PlanRequest(model=dsv3))
    near, far = _ep_bytes(ctx, 4096.0, 64, 8)
    unit = 4 * 4096 * dsv3.hidden * 2.0
    assert far == pytest.approx(unit * 4)
    assert near == pytest.approx(unit * 8 * 7 / 64)
    free = replace(dsv3, router_groups=0, router_group_topk=0)
    _, far_free = _ep_bytes(_Ctx(ctx.hw, PlanRequest(model=free)), 4096.0, 64, 8)
    assert far_free == pytest.approx(unit * 8 * 56 / 64)
    # inside one node nothing crosses the fabric, limited or not
    assert _ep_bytes(ctx, 4096.0, 8, 8)[1] == 0.0


def test_ep_exposed_scales_only_the_all_to_all_time():
    pins = {"tp": 1, "pp": 1, "dp": 8, "ep": 8, "micro_batch": 2}
    a = pinned("h100", 8, QWEN3_30B, pins, global_batch=64, recompute="full")
    b = pinned("h100", 8, QWEN3_30B, pins, replace(DEFAULT_TERMS, ep_exposed=2 * DEFAULT_TERMS.ep_exposed),
               global_batch=64, recompute="full")  # fmt: skip
    assert b.time_breakdown["ep"] == pytest.approx(2 * a.time_breakdown["ep"])
    assert b.time_breakdown["compute"] == pytest.approx(a.time_breakdown["compute"])


def test_moe_layer_overhead_is_paid_per_micro_batch_so_small_micro_batches_pay_most():
    """Megatron-Bridge 26.02 ran Qwen3-30B-A3B on 8 B200 at 9691 tokens/s/GPU with micro-batch 1 and
    26695 with 4: a fixed host-bound cost per MoE layer per micro-batch, not a per-token one."""

    def speed(mb, overhead):
        t = replace(DEFAULT_TERMS, moe_layer_overhead_s=overhead)
        pins = {"tp": 1, "pp": 1, "dp": 8, "ep": 8, "micro_batch": mb}
        return pinned("b200", 8, QWEN3_30B, pins, t, global_batch=512, precision="fp8").tokens_per_s

    low, high = 1e-5, 1e-3
    assert speed(4, high) / speed(1, high) > 1.2 * speed(4, low) / speed(1, low)
    dense = get_model("llama3.1-8b")
    pins = {"tp": 1, "pp": 1, "dp": 8, "micro_batch": 1}
    for t in (replace(DEFAULT_TERMS, moe_layer_overhead_s=low), replace(DEFAULT_TERMS, moe_layer_overhead_s=high)):
        assert pinned("b200", 8, dense, pins, t, global_batch=64).tokens_per_s == pytest.approx(
            pinned("b200", 8, dense, pins, global_batch=64).tokens_per_s
        )


def test_grouped_gemm_slows_the_routed_experts_only():
    pins = {"tp": 1, "pp": 1, "dp": 8, "ep": 8, "micro_batch": 2}
    slow = replace(DEFAULT_TERMS, grouped_gemm=0.5)
    moe = [pinned("h100", 8, QWEN3_30B, pins, t, global_batch=64, recompute="full") for t in (DEFAULT_TERMS, slow)]
    assert moe[1].time_breakdown["compute"] > moe[0].time_breakdown["compute"]
    dense = get_model("llama3.1-8b")
    d = [pinned("h100", 8, dense, {"tp": 1, "pp": 1, "dp": 8}, t, global_batch=64) for t in (DEFAULT_TERMS, slow)]
    assert d[0].tokens_per_s == pytest.approx(d[1].tokens_per_s)


def test_sdpa_attention_is_slower_on_hopper_and_not_on_ampere():
    """torchtitan's 8B at 128K on 8 GPUs (CP 4) spends most of its time in attention: PyTorch SDPA's
    FlashAttention-2 reaches a share of the fused kernels' speed on Hopper (attn_sdpa), the same on Ampere."""
    model = get_model("llama3.1-8b")
    pins = {"tp": 1, "pp": 1, "dp": 2, "cp": 4, "micro_batch": 1}
    kw = dict(global_batch=2, seq=131072, recompute="full", zero=3)

    def speed(gpu, attention):
        return pinned(gpu, 8, model, pins, caps=Capabilities(attention=attention), **kw).tokens_per_s

    h_fused, h_sdpa = speed("h100", "fused"), speed("h100", "sdpa")
    assert DEFAULT_TERMS.attn_sdpa < h_sdpa / h_fused < 0.9  # attention-bound, not all of the step
    assert speed("a100", "sdpa") == pytest.approx(speed("a100", "fused"))


def test_cp_exposed_keeps_part_of_the_ring_exchange_on_the_critical_path():
    model = get_model("llama3.1-8b")
    pins = {"tp": 1, "pp": 1, "dp": 2, "cp": 4, "micro_batch": 1}
    kw = dict(global_batch=2, seq=131072, recompute="full", zero=3)
    hidden = pinned("h100", 8, model, pins, replace(DEFAULT_TERMS, cp_exposed=0.0), **kw)
    part = pinned("h100", 8, model, pins, replace(DEFAULT_TERMS, cp_exposed=0.5), **kw)
    assert hidden.time_breakdown["cp"] == 0.0  # attention covers the whole ring at 128K
    assert part.time_breakdown["cp"] > 0.0
    assert part.time_breakdown["compute"] == pytest.approx(hidden.time_breakdown["compute"])


def test_fsdp_exposed_charges_the_gathers_compute_cannot_hide():
    model = get_model("llama3.1-8b")
    pins = {"tp": 1, "pp": 1, "dp": 8, "micro_batch": 1}
    a = pinned("h100", 8, model, pins, replace(DEFAULT_TERMS, fsdp_exposed=0.0), global_batch=16, zero=3)
    b = pinned("h100", 8, model, pins, replace(DEFAULT_TERMS, fsdp_exposed=0.5), global_batch=16, zero=3)
    assert a.time_breakdown["dp"] < b.time_breakdown["dp"]
    zero1 = [pinned("h100", 8, model, pins, t, global_batch=16, zero=1) for t in (DEFAULT_TERMS, replace(
        DEFAULT_TERMS, fsdp_exposed=0.5))]  # fmt: skip
    assert zero1[0].time_breakdown["dp"] == pytest.approx(zero1[1].time_breakdown["dp"])


# -- op-level selective checkpointing and the published torchtitan runs it lets plan -----------------------


def tt_request(gpus, caps):
    return PlanRequest(
        model=get_model("llama3.1-8b"),
        gpus=gpus,
        global_batch=2 * gpus,
        pins={"tp": 1, "pp": 1, "dp": gpus, "cp": 1, "micro_batch": 2},
        zero=3,
        recompute="selective",
        caps=caps,
    )


@pytest.mark.parametrize("gpus", [8, 128])
@pytest.mark.parametrize("gpu", ["h100", "h100-hbm2e"])
def test_torchtitan_fsdp_of_llama3_8b_with_op_checkpointing_is_planned(gpu, gpus):
    """torchtitan's published runs (benchmarks/llama3_h100_202412): Llama 3.1 8B, FSDP on 8 and 128
    H100, local batch 2, selective op checkpointing, 77 / 62 GiB measured. They were refused: the
    planner took `selective` for Megatron's attention-core recompute, which keeps every other
    activation (92 GB for this layout)."""
    with pytest.raises(PlanError, match="does not fit"):
        make_plan(site(gpu, gpus), tt_request(gpus, Capabilities()))
    plan = make_plan(site(gpu, gpus), tt_request(gpus, Capabilities(selective="op", launcher="torchtitan")))
    assert (plan.layout.dp, plan.zero, plan.recompute) == (gpus, 3, "selective")
    assert plan.memory_per_gpu_gb < plan.capacity_gb * 0.9


def test_op_checkpointing_keeps_fewer_bytes_and_recomputes_less_than_full():
    m = get_model("llama3.1-8b")
    assert 0.3 < layer_act_op(m) / layer_act_base(m, False) < 0.5
    caps = Capabilities(selective="op")
    times = {}
    for rec in ("selective", "full"):
        req = replace(tt_request(8, caps), recompute=rec)
        times[rec] = make_plan(site("h100-hbm2e", 8), req).time_breakdown["recompute"]
    assert 0 < times["selective"] < times["full"]
