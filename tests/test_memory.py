"""Memory formulas against the papers' worked numbers, and the estimate's behaviour."""

from __future__ import annotations

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from slurmgpu.plan import (
    TrainShape,
    activation_bytes_per_layer,
    get_model,
    inference_memory,
    kv_cache_bytes,
    layer_act_base,
    model_states_bytes,
    stage_layers,
    training_memory,
)

GiB = 2**30


def test_70b_bf16_weights_are_140_gb():
    w, _, _ = model_states_bytes(70e9, weight_bytes=2.0)
    assert w == 140e9
    mem = inference_memory(get_model("llama2-70b"), tp=1, pp=1, ep=1, batch=1, seq=1)
    assert mem.weights == pytest.approx(2 * 68.98, rel=0.001)  # the real model is 68.98B


@pytest.mark.parametrize("zero,published", [(0, 120.0), (1, 31.4), (2, 16.6), (3, 1.9)])
def test_zero_paper_figure_1(zero, published):
    # Rajbhandari et al. 2020, Fig. 1: 7.5B parameters, DP 64, mixed-precision Adam (K = 12)
    total = sum(model_states_bytes(7.5e9, dp=64, zero=zero)) / 1e9
    assert total == pytest.approx(published, abs=0.06)


@pytest.mark.parametrize(
    "recompute,sp,published_gb",
    [
        ("none", False, 0.579),
        ("none", True, 0.359),
        ("selective", False, 0.327),
        ("selective", True, 0.107),
        ("full", False, 0.050),
    ],
)
def test_korthikanti_table_2_gpt3_layer(recompute, sp, published_gb):
    # GPT-3 175B layer with s=2048, b=1, h=12288, a=96, t=8 (Korthikanti et al. 2022, Table 2 formulas)
    got = activation_bytes_per_layer(2048, 1, 12288, 96, t=8, sp=sp, recompute=recompute) / 1e9
    assert got == pytest.approx(published_gb, abs=0.0015)


def test_no_parallelism_per_layer_formula():
    s, b, h, a = 2048, 1, 12288, 96
    assert activation_bytes_per_layer(s, b, h, a) == s * b * h * (34 + 5 * a * s / h)


def test_selective_with_sp_is_under_20_percent_of_tp_baseline():
    # the 22B model of the paper (b=4, h=6144, a=64, t=8): "under 20%" of the TP baseline
    base = activation_bytes_per_layer(2048, 4, 6144, 64, t=8, sp=False, recompute="none")
    lean = activation_bytes_per_layer(2048, 4, 6144, 64, t=8, sp=True, recompute="selective")
    assert lean / base < 0.20


def test_gpt3_layer_constant_is_34():
    assert layer_act_base(get_model("gpt3-175b"), moe=False) == pytest.approx(34.0)
    # a gated MLP of 3.5h keeps more per token than a 4h GeLU one
    assert layer_act_base(get_model("llama3.1-70b"), moe=False) > 34.0


def test_kv_cache_public_examples():
    # Llama 2 7B fp16, 4096 tokens: 2 x 32 layers x 4096 x 4096 x 2 B = 2 GiB
    assert kv_cache_bytes(get_model("llama2-7b"), seq=4096, batch=1) == 2 * GiB
    # Llama 3 70B: 327,680 B per token; 405B: 516,096 B per token, 63 GiB at 128K
    assert kv_cache_bytes(get_model("llama3.1-70b"), seq=1) == 327_680
    assert kv_cache_bytes(get_model("llama3.1-405b"), seq=1) == 516_096
    assert kv_cache_bytes(get_model("llama3.1-405b"), seq=131072) / GiB == pytest.approx(63, abs=0.01)
    # GQA heads shard over TP; MLA's latent is replicated
    assert kv_cache_bytes(get_model("llama3.1-70b"), 8192, tp=8) * 8 == kv_cache_bytes(get_model("llama3.1-70b"), 8192)
    ds = get_model("deepseek-v3")
    assert kv_cache_bytes(ds, 8192, tp=8) == kv_cache_bytes(ds, 8192)


def test_llama3_405b_uneven_stages():
    assert stage_layers(126, 16) == [7] + [8] * 14 + [7]  # Llama 3 paper's split


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 200), st.integers(1, 64))
def test_stage_split_properties(layers, pp):
    assume(pp <= layers)
    counts = stage_layers(layers, pp)
    assert sum(counts) == layers and len(counts) == pp
    assert max(counts) - min(counts) <= 1
    assert counts[0] == min(counts)  # the embedding stage never gets the extra layer first


def _shape(tp=1, pp=1, dp=1, cp=1, ep=1, mb=1, m=8, seq=4096):
    return TrainShape(tp, pp, dp, cp, ep, mb, m, seq)


def test_training_memory_model_states_match_16_bytes_per_param():
    m = get_model("llama2-7b")
    # without a launcher's profile the planner charges the ZeRO paper's mixed-precision Adam: 16 bytes
    # (each framework's own bytes: tests/test_memory_profiles.py and the contract tests)
    for zero in (0, 1, 2):
        mem = training_memory(m, _shape(), zero=zero)
        assert (mem.weights + mem.gradients + mem.optimizer) == pytest.approx(16 * m.params / 1e9, rel=1e-9)


def test_more_sharding_means_less_memory():
    m = get_model("llama3.1-70b")
    a = training_memory(m, _shape(tp=4, dp=2), zero=1).total
    b = training_memory(m, _shape(tp=8, dp=1), zero=1).total
    c = training_memory(m, _shape(tp=8, pp=4), zero=1).total
    assert a > b > c
    z1 = training_memory(m, _shape(tp=8, dp=8), zero=1)
    z3 = training_memory(m, _shape(tp=8, dp=8), zero=3)
    assert z3.weights < z1.weights and z3.gradients < z1.gradients and z3.optimizer == pytest.approx(z1.optimizer)


def test_recomputation_trades_activations():
    m = get_model("llama3.1-70b")
    acts = {r: training_memory(m, _shape(tp=8), recompute=r).activations for r in ("none", "selective", "full")}
    # FlashAttention stores no s x s scores, so `none` keeps what `selective` keeps (Megatron's
    # selective recompute is the attention core); full recompute keeps only the layer inputs
    assert acts["none"] == acts["selective"] > acts["full"]


def test_flash_attention_drops_the_score_term():
    s, b, h, a = 2048, 1, 12288, 96
    korthikanti = activation_bytes_per_layer(s, b, h, a, t=8, sp=True, recompute="none")
    flash = activation_bytes_per_layer(s, b, h, a, t=8, sp=True, recompute="none", flash=True)
    assert korthikanti - flash == pytest.approx(s * b * h * 5 * a * s / h / 8)
    assert flash == activation_bytes_per_layer(s, b, h, a, t=8, sp=True, recompute="selective")


def test_first_stage_keeps_all_layers_of_activations():
    # 1F1B: stage 0 holds p micro-batches of L/p layers = L layers regardless of p (Korthikanti Eq. 5)
    m = get_model("gpt3-175b")
    acts = [training_memory(m, _shape(tp=8, pp=p, m=16), recompute="selective").activations for p in (2, 4, 8)]
    assert acts[0] == pytest.approx(acts[1], rel=0.01) == pytest.approx(acts[2], rel=0.01)
    fewer = training_memory(m, _shape(tp=8, pp=8, m=2), recompute="selective").activations
    assert fewer < acts[2] / 3  # only 2 micro-batches in flight


def test_interleaving_costs_activation_memory():
    m = get_model("gpt3-175b")
    plain = training_memory(m, _shape(tp=8, pp=8, m=16)).activations
    inter = training_memory(m, _shape(tp=8, pp=8, m=16), interleave=4).activations
    assert inter == pytest.approx(plain * (1 + 7 / 32), rel=0.02)


def test_lora_and_qlora_hold_frozen_weights_only():
    m = get_model("llama3.1-70b")
    lora = training_memory(m, _shape(tp=8), task="lora")
    qlora = training_memory(m, _shape(tp=8), task="qlora")
    full = training_memory(m, _shape(tp=8), task="finetune")
    assert lora.optimizer < 0.01 * full.optimizer
    assert qlora.weights < 0.35 * lora.weights
    assert lora.weights == pytest.approx(full.weights, rel=0.01)


def test_moe_experts_shard_over_ep():
    m = get_model("mixtral-8x7b")
    a = training_memory(m, _shape(tp=2, dp=8, ep=1))
    b = training_memory(m, _shape(tp=2, dp=8, ep=8))
    assert b.weights < a.weights / 3


def test_inference_memory_has_kv_cache():
    m = get_model("llama3.1-70b")
    small = inference_memory(m, 8, 1, 1, batch=1, seq=8192)
    big = inference_memory(m, 8, 1, 1, batch=32, seq=8192)
    assert big.kv_cache == pytest.approx(32 * small.kv_cache)
    assert small.gradients == small.optimizer == 0
    assert inference_memory(m, 8, 1, 1, 1, 8192, precision="fp8").weights == pytest.approx(small.weights / 2)
