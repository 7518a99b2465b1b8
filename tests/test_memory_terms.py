"""Each term of the training memory model, stated alone (issue 35: a term left out or sharded over the
wrong group survived the unit tests; only the 80-second framework contract test caught most).

A profile here names one framework rule at a time (a StageBytes with one field set), and the plan's
bytes must move by exactly what that rule holds per parameter, over the group it shards over. The
frameworks' own values for these fields are checked against their code in test_contract_memory.py;
this file checks that the arithmetic uses each of them.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from slurmgpu.plan import get_model
from slurmgpu.plan.memory import (
    NF4_BYTES,
    TrainShape,
    activation_bytes_per_layer,
    layer_act_base,
    layer_act_op,
    lora_params,
    stage_layers,
    stage_params,
    training_memory,
    training_stage_memory,
)
from slurmgpu.plan.profile import TERMS, Lever, MemoryProfile, StageBytes

GB = 1e9
DENSE = get_model("llama3.1-8b")  # untied output layer
MOE = get_model("mixtral-8x7b")
ZERO1 = StageBytes(1, weights=2.0, grads=2.0, master=4.0, sharded=("master", "states"))


def _shape(**kw: Any) -> TrainShape:
    d = dict(tp=2, pp=1, dp=4, cp=1, ep=1, micro_batch=1, micro_batches=8, seq=4096)
    d.update(kw)
    return TrainShape(**d)  # type: ignore[arg-type]


def _mem(st: StageBytes, model: Any = DENSE, shape: Any = None, **kw: Any) -> Any:
    prof = MemoryProfile(framework="one rule", stages=(st,), **kw.pop("profile", {}))
    return training_memory(model, shape or _shape(), zero=st.zero, profile=prof, **kw)


def _params(model: Any = DENSE, pp: int = 1, stage: int = 0) -> Any:
    return stage_params(model, stage_layers(model.layers, pp), stage)


def _dense(model: Any = DENSE, t: int = 2) -> float:
    sp = _params(model)
    return (sp.dense + sp.embed) / t


def test_weight_copies_held_to_backward_are_charged_per_parameter():
    base, more = _mem(ZERO1), _mem(replace(ZERO1, copies=2.0))
    assert (more.weights - base.weights) * GB == pytest.approx(2.0 * _dense())
    assert more.gradients == pytest.approx(base.gradients) and more.optimizer == pytest.approx(base.optimizer)


def test_ddp_buckets_are_charged_only_with_data_parallelism():
    st = StageBytes(0, buckets=2.0)
    assert (_mem(st).gradients - _mem(StageBytes(0)).gradients) * GB == pytest.approx(2.0 * _dense())
    alone = _shape(dp=1)
    assert _mem(st, shape=alone).gradients == pytest.approx(_mem(StageBytes(0), shape=alone).gradients)
    # CP ranks of one replica also reduce gradients: DP 1 x CP 2 keeps the buckets
    cp2 = _shape(dp=1, cp=2)
    assert _mem(st, shape=cp2).gradients > _mem(StageBytes(0), shape=cp2).gradients


def test_a_sharded_fp32_gradient_partition_is_split_over_dp_times_cp():
    more = _mem(replace(ZERO1, grads_sharded=4.0), shape=_shape(dp=2, cp=2))
    base = _mem(ZERO1, shape=_shape(dp=2, cp=2))
    assert (more.gradients - base.gradients) * GB == pytest.approx(4.0 * _dense() / 4)


def test_optimizer_state_is_the_master_copy_plus_the_moments():
    """optimizer_bytes is K = fp32 master + moments: Adam's 12 is 4 + 8, the master from the profile."""
    shape = _shape(dp=1)
    assert _mem(ZERO1, shape=shape).optimizer * GB == pytest.approx(12.0 * _dense())
    assert _mem(replace(ZERO1, master=2.0), shape=shape).optimizer * GB == pytest.approx(10.0 * _dense())
    assert _mem(replace(ZERO1, master=0.0), shape=shape).optimizer * GB == pytest.approx(8.0 * _dense())


def test_a_lever_sets_the_master_copy_only_when_its_flag_is_written():
    lever = Lever(key="remainder", flag="--remainder", zeros=(1,), master=2.0)
    prof = {"levers": (lever,)}
    shape = _shape(dp=1)
    plain = _mem(ZERO1, shape=shape, profile=prof)
    written = _mem(ZERO1, shape=shape, profile=prof, levers=("remainder",))
    assert (plain.optimizer - written.optimizer) * GB == pytest.approx(2.0 * _dense())
    assert written.levers == ("remainder",)


def test_the_last_stage_keeps_its_output_layer_gathered_and_pp_drops_it():
    st = StageBytes(3, sharded=TERMS, head_copy=2.0)
    base = _mem(StageBytes(3, sharded=TERMS))
    assert (_mem(st).weights - base.weights) * GB == pytest.approx(2.0 * DENSE.output_params / 2)
    # with PP, a profile that names copies_pp keeps nothing gathered: no head copy, no gathered layers
    pp = StageBytes(3, sharded=TERMS, copies=2.0, copies_pp=0.5, gathered=4.0, head_copy=2.0)
    shape = _shape(pp=2, dp=2)
    plain = StageBytes(3, sharded=TERMS)
    stages = [
        training_stage_memory(DENSE, shape, zero=3, profile=MemoryProfile(stages=(s,)), which=[1]) for s in (pp, plain)
    ]
    sp = _params(DENSE, pp=2, stage=1)
    assert (stages[0][0].weights - stages[1][0].weights) * GB == pytest.approx(0.5 * (sp.dense + sp.embed) / 2)


def test_a_fixed_gradient_buffer_is_charged_once():
    assert _mem(replace(ZERO1, buffer_gb=0.5)).gradients - _mem(ZERO1).gradients == pytest.approx(0.5)


def test_fp8_weight_cache_is_charged_on_linear_layers_under_fp8_only():
    prof = {"fp8_cache": 1.0}
    bf16, fp8 = _mem(ZERO1, profile=prof), _mem(ZERO1, profile=prof, precision="fp8")
    assert (fp8.weights - bf16.weights) * GB == pytest.approx(1.0 * _params().dense / 2)
    assert _mem(ZERO1, precision="fp8").weights == pytest.approx(bf16.weights)  # no cache in the profile


def test_hsdp_shards_inside_one_node():
    """group "node": torchtitan's HSDP shards over the DP ranks in a node (8 of DP 16 at TP 1)."""
    shape = _shape(tp=1, dp=16, gpus_per_node=8)
    node = _mem(replace(ZERO1, group="node"), shape=shape)
    every = _mem(ZERO1, shape=shape)
    assert node.optimizer * GB == pytest.approx(12.0 * _dense(t=1) / 8)
    assert every.optimizer * GB == pytest.approx(12.0 * _dense(t=1) / 16)


def test_experts_are_split_by_the_expert_tp_the_launch_sets():
    """Mixtral TP2 EP8 over DP4: EP does not divide DP x CP, so expert TP is 1 (layout.expert_tp) and
    each rank holds 1/8 of the routed experts; a framework whose experts never keep TP, the same."""
    sp = _params(MOE)
    shape = _shape(dp=4, ep=8)
    want = 2.0 * ((sp.dense + sp.embed) / 2 + sp.experts / 8)
    assert _mem(StageBytes(0), MOE, shape).weights * GB == pytest.approx(want)
    keep = _shape(dp=8, ep=4)  # EP divides DP: experts keep TP 2
    want_keep = 2.0 * ((sp.dense + sp.embed) / 2 + sp.experts / 8)
    assert _mem(StageBytes(0), MOE, keep).weights * GB == pytest.approx(want_keep)
    no_tp = _mem(StageBytes(0), MOE, keep, profile={"experts_keep_tp": False})
    assert no_tp.weights * GB == pytest.approx(2.0 * ((sp.dense + sp.embed) / 2 + sp.experts / 4))


def _acts(model: Any, shape: TrainShape, recompute: str, base: float) -> float:
    s, b, h, t = shape.seq / shape.cp, shape.micro_batch, model.hidden, shape.tp
    per = activation_bytes_per_layer(s, b, h, model.heads, t, t > 1, recompute, base, True)
    return model.layers * per + 4.0 * s * b * (h + model.vocab) / t  # + the output layer and fp32 logits


def test_full_recomputation_keeps_one_layer_live_again():
    shape = _shape()
    m = _mem(ZERO1, shape=shape, recompute="full")
    s, h = shape.seq, DENSE.hidden
    work = activation_bytes_per_layer(s, 1, h, DENSE.heads, 2, True, "selective", layer_act_base(DENSE, False))
    assert m.activations * GB == pytest.approx(_acts(DENSE, shape, "full", 0.0) + work)


def test_op_level_selective_checkpointing_keeps_what_it_saves():
    shape = _shape()
    op = _mem(ZERO1, shape=shape, selective="op")
    attn = _mem(ZERO1, shape=shape)
    assert op.activations * GB == pytest.approx(_acts(DENSE, shape, "selective", layer_act_op(DENSE)))
    assert attn.activations * GB == pytest.approx(_acts(DENSE, shape, "selective", layer_act_base(DENSE, False)))
    assert op.activations < attn.activations


def test_lora_adapters_split_by_tp_and_fsdp_shards_the_frozen_base():
    sp = _params()
    shape = _shape(dp=4)
    adapters = lora_params(DENSE, sp.dense_layers, sp.moe_layers) / 2
    plain = _mem(ZERO1, shape=shape, task="lora")
    assert plain.weights * GB == pytest.approx(2.0 * _dense() + 2.0 * adapters)
    fsdp = _mem(StageBytes(3, sharded=TERMS), shape=shape, task="lora")
    assert fsdp.weights * GB == pytest.approx(2.0 * _dense() / 4 + 2.0 * adapters / 4)


def test_qlora_quantizes_the_linear_layers_and_keeps_the_embedding_bf16():
    sp = _params()
    adapters = lora_params(DENSE, sp.dense_layers, sp.moe_layers) / 2
    m = _mem(ZERO1, task="qlora")
    assert m.weights * GB == pytest.approx(NF4_BYTES * sp.dense / 2 + 2.0 * sp.embed / 2 + 2.0 * adapters)


def test_zero3_charges_the_layers_it_gathers_whole():
    """ZeRO-3/FSDP gather each layer before use (and prefetch the next): `gathered` bytes x the
    largest layer, split by TP (DeepSpeed's estimator: 4 bytes, the current and the prefetched)."""
    st = StageBytes(3, sharded=TERMS)
    more = _mem(replace(st, gathered=4.0))
    assert (more.weights - _mem(st).weights) * GB == pytest.approx(4.0 * DENSE.dense_layer_params / 2)


def test_every_gpu_keeps_the_fixed_overhead():
    """CUDA context, NCCL buffers and the allocator's reserve: 2 GB per GPU in every estimate."""
    m = _mem(ZERO1)
    assert m.overhead == pytest.approx(2.0)
    assert m.total == pytest.approx(m.weights + m.gradients + m.optimizer + m.activations + 2.0)


def test_the_loss_keeps_the_frameworks_bytes_per_logit_on_the_last_stage():
    """A plain PyTorch loss holds 14 B per logit (bf16 output, fp32 copy, softmax and its gradient),
    Megatron's fused cross entropy 4: the difference is 10 B x sequence x micro-batch x vocab / TP."""
    shape = _shape()
    fused, plain = _mem(ZERO1, shape=shape), _mem(ZERO1, shape=shape, profile={"logits_bytes": 14.0})
    assert (plain.activations - fused.activations) * GB == pytest.approx(10.0 * shape.seq * DENSE.vocab / 2)
