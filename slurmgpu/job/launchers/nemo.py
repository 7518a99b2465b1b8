"""NeMo: a Megatron-Bridge recipe (`scripts/training/run_recipe.py`) under torchrun, the planned
model, precision and layout as the ConfigContainer overrides that script applies.

Why Megatron-Bridge and not NeMo 2 / NeMo 1: NVIDIA moved LLM training out of NeMo (the repo is
now NVIDIA-NeMo/Speech; NeMo 1's examples/nlp and NeMo 2's nemo.collections.llm are gone) into
Megatron-Bridge, whose migration guide maps every NeMo 2 recipe to a Bridge recipe. Its rank-local
entry `run_recipe.py` takes `--recipe NAME --dataset mock|megatron-indexed` and Hydra-style
`KEY=VALUE` overrides, and its docs launch it with torchrun inside srun, one task per node.
Targets Megatron-Bridge 0.6.0 (tag v0.6.0, 51885cf1; megatron-core at 3rdparty cd4afffa); the
contract test checks every line against tests/data/contract/megatron_bridge.json recorded there.
"""

from __future__ import annotations

from typing import List, Optional, Sequence, Set, Tuple

from ...errors import ConfigError, Issue
from ...plan import Capabilities, Layout
from ...plan.layout import expert_tp
from ...plan.profile import Lever, MemoryProfile, StageBytes
from .base import DEFAULT_SAVE_INTERVAL, Launcher, Options, field_error, given_keys, option_key
from .megatron import _layout_string

BRIDGE_VERSION = "0.6.0"
ENTRY = "/opt/Megatron-Bridge/scripts/training/run_recipe.py"  # where NeMo containers keep the checkout

LAUNCHER = Launcher(
    "nemo",
    "torchrun",
    "NeMo Megatron-Bridge recipe (run_recipe.py) via torchrun, one task per node",
    default_entry=(ENTRY,),
    targets="Megatron-Bridge %s (NVIDIA-NeMo/Megatron-Bridge v0.6.0 @ 51885cf1, scripts/training/run_recipe.py)"
    % BRIDGE_VERSION,
    # Megatron-FSDP exists in Bridge but needs its own checkpoint format: not offered here. The
    # distributed optimizer (ZeRO-1) is the only stage: the recipes set optimizer.use_distributed_optimizer,
    # and ConfigContainer turns ddp's back on when either asks (_validate_and_sync_distributed_optimizer_settings),
    # so `ddp.use_distributed_optimizer=false` alone never ran ZeRO-0; nothing shards the gradients (no ZeRO-2).
    caps=Capabilities(zero=(1,), zero3_with_pp=False, zero3_with_ep=False),
)

# slurmgpu model name -> the library recipe that builds that architecture (its HF config)
RECIPES = {
    "llama3.1-8b": "llama31_8b_pretrain_config",
    "llama3.1-70b": "llama31_70b_pretrain_config",
    "llama3.1-405b": "llama31_405b_pretrain_config",
    "deepseek-v3": "deepseek_v3_pretrain_config",
}
# a model without its own recipe starts from the closest architecture and gets its shape explicitly
BASE_LLAMA = "llama31_8b_pretrain_config"  # RMSNorm, RoPE, SwiGLU, no bias, untied (also Mixtral)
BASE_MLA = "deepseek_v3_pretrain_config"
BASE_GPT = "vanilla_gpt_pretrain_config"  # LayerNorm, 2-matrix MLP
# the plan's precision -> a registered mixed-precision recipe (megatron.bridge.training.mixed_precision)
MIXED_PRECISION = {
    "bf16": "bf16_mixed",
    "fp8": "bf16_with_fp8_current_scaling_mixed",
    "fp16": "fp16_mixed",
    "fp32": "null",
}
SMOKE_ITERS = 10

PRECISION_AWARE = Lever(
    "precision_aware_optimizer",
    "optimizer.use_precision_aware_optimizer=true",
    zeros=(1,),
    master=2.0,
    what="TE FusedAdam keeps only the 16-bit remainder of each fp32 master weight (store_param_remainders, "
    "lossless with bf16 weights)",
)


def memory(precision: str) -> MemoryProfile:
    """What Megatron-Bridge 0.6.0 keeps per GPU for the library recipes and overrides this adapter writes.

    The recipes (recipes/common.py, recipes/llama/h100/llama3.py) run the distributed optimizer without
    the precision-aware optimizer (fp32 master + Adam moments, 12 B/param, sharded over DP x CP), and
    the mixed-precision recipe sets the gradient buffer: bf16_mixed and the FP8 recipes keep
    grad_reduce_in_fp32=True (4 B/param, unsharded), fp16_mixed False (2); `mixed_precision=null`
    trains fp32 weights. The FP8 recipes keep FP8 primary weights (fp8_param_gather) with their
    transposes: 2 B/param, as bf16.
    """
    if precision == "fp32":
        weights, grads, master = 4.0, 4.0, 0.0
    else:
        weights, grads, master = 2.0, (2.0 if precision == "fp16" else 4.0), 4.0
    return MemoryProfile(
        framework="Megatron-Bridge %s" % BRIDGE_VERSION,
        stages=(
            StageBytes(
                1,
                weights,
                grads,
                master,
                sharded=("master", "states"),
                flag="ddp.use_distributed_optimizer=true",
                about="fp32 master and Adam moments sharded over DP x CP = {n}",
            ),
        ),
        levers=(PRECISION_AWARE,) if precision == "bf16" else (),
        default_zero=1,
    )


def recipe_for(opts: Options) -> str:
    model = opts.model
    if model is None:
        raise field_error(
            "model",
            "launcher nemo builds the network from a Megatron-Bridge recipe: give --model (e.g. "
            "--model llama3.1-70b) or `model:` in slurmgpu.yaml",
        )
    if model.name in RECIPES:
        return RECIPES[model.name]
    if model.is_mla:
        return BASE_MLA
    return BASE_LLAMA if model.gated else BASE_GPT


def args(layout: Layout, opts: Options, user_argv: Sequence[str] = ()) -> Tuple[str, ...]:
    given = given_keys(user_argv) | {k for k in (option_key(a) for a in user_argv) if k}
    out: List[str] = []
    if "--recipe" not in given and "--model" not in given:
        out += ["--recipe", recipe_for(opts)]
    if "--mode" not in given:
        out += ["--mode", "pretrain"]
    out += _data_args(opts, given)
    overrides = _model_overrides(opts) + _layout_overrides(layout, opts) + _training_overrides(opts)
    out += [o for o in overrides if o.split("=", 1)[0] not in given]
    return tuple(out)


def _data_args(opts: Options, given: Set[str]) -> List[str]:
    if "--dataset" in given:
        return []
    model = opts.model
    if opts.smoke:
        vocab = ["tokenizer.vocab_size=%d" % model.vocab] if model else []
        return ["--dataset", "mock"] + vocab
    missing = [f for f, v in (("data", opts.data), ("tokenizer", opts.tokenizer)) if not v]
    if missing:
        raise ConfigError(
            [
                Issue(
                    "",
                    None,
                    None,
                    f,
                    "launcher nemo needs %s: give --%s (%s) or `%s:` in slurmgpu.yaml, or --smoke for a short "
                    "run on Megatron-Bridge's mock data"
                    % (
                        f,
                        f,
                        "a Megatron .bin/.idx prefix, e.g. /data/dclm_text_document"
                        if f == "data"
                        else "a Hugging Face tokenizer id or path, e.g. meta-llama/Llama-3.1-8B",
                        f,
                    ),
                )
                for f in missing
            ]
        )
    return [
        "--dataset",
        "megatron-indexed",
        "dataset.data_path=%s" % opts.data,
        "tokenizer.tokenizer_type=HuggingFaceTokenizer",
        "tokenizer.tokenizer_model=%s" % opts.tokenizer,
    ]


def _model_overrides(opts: Options) -> List[str]:
    """The planned shape, explicit even where the recipe's HF config agrees, so the plan is what trains."""
    m = opts.model
    if m is None:
        return []
    out = [
        "model.num_layers=%d" % m.layers,
        "model.hidden_size=%d" % m.hidden,
        "model.num_attention_heads=%d" % m.heads,
        "model.ffn_hidden_size=%d" % m.ffn,
    ]
    if m.is_mla:
        out += [
            "model.q_lora_rank=%s" % (m.q_lora_rank or "null"),
            "model.kv_lora_rank=%d" % m.kv_lora_rank,
            "model.qk_head_dim=%d" % m.hd,
            "model.qk_pos_emb_head_dim=%d" % m.rope_head_dim,
            "model.v_head_dim=%d" % (m.v_head_dim or m.hd),
        ]
    else:
        out.append("model.num_query_groups=%d" % (m.kv_heads or m.heads))
        if m.head_dim:
            out.append("model.kv_channels=%d" % m.head_dim)
    if m.is_moe:
        out += [
            "model.num_moe_experts=%d" % m.experts,
            "model.moe_router_topk=%d" % m.experts_active,
            "model.moe_ffn_hidden_size=%d" % (m.moe_ffn or m.ffn),
        ]
        if m.shared_experts:
            out.append("model.moe_shared_expert_intermediate_size=%d" % (m.shared_experts * (m.moe_ffn or m.ffn)))
        if m.dense_layers and m.name not in RECIPES:
            freq = [0] * m.dense_layers + [1] * (m.layers - m.dense_layers)
            out.append("model.moe_layer_freq=[%s]" % ",".join(str(f) for f in freq))
    return out


def _layout_overrides(layout: Layout, opts: Options) -> List[str]:
    out = [
        "model.tensor_model_parallel_size=%d" % layout.tp,
        "model.pipeline_model_parallel_size=%d" % layout.pp,
        "model.virtual_pipeline_model_parallel_size=%s" % (opts.virtual_stages if opts.virtual_stages > 1 else "null"),
        "model.context_parallel_size=%d" % layout.cp,
        "model.expert_model_parallel_size=%d" % layout.ep,
        "model.sequence_parallel=%s" % ("true" if layout.tp > 1 else "false"),
        "train.micro_batch_size=%d" % layout.micro_batch,
        # the plan's split, not the recipe's own layout or its embedding/loss accounting
        "model.pipeline_model_parallel_layout=null",
        "model.account_for_embedding_in_pipeline_split=false",
        "model.account_for_loss_in_pipeline_split=false",
    ]
    if opts.model is not None and opts.model.is_moe:
        # the planner's expert-TP (plan.layout.expert_tp), which its memory and cost assume
        out.append("model.expert_tensor_parallel_size=%d" % expert_tp(layout.tp, layout.dp, layout.cp, layout.ep))
    stages = opts.stage_layers
    if stages and len(set(stages)) > 1:
        if len(set(stages[1:-1])) <= 1:
            out += [
                "model.num_layers_in_first_pipeline_stage=%d" % stages[0],
                "model.num_layers_in_last_pipeline_stage=%d" % stages[-1],
            ]
        else:
            # middle stages megatron-core cannot spread evenly (DeepSeek-V3's 61 layers on 32 stages:
            # TransformerConfig refuses first/last with an uneven middle): the exact partition instead
            exact = "model.pipeline_model_parallel_layout='%s'" % _layout_string(stages, max(1, opts.virtual_stages))
            out = [exact if o.startswith("model.pipeline_model_parallel_layout=") else o for o in out]
    out += _recompute(opts.recompute)
    zero = opts.zero if opts.zero is not None else 1
    if opts.fsdp or zero >= 3:
        raise field_error(
            "zero",
            "launcher nemo (Megatron-Bridge %s) is not given ZeRO-3/FSDP plans (Megatron-FSDP needs its "
            "own checkpoint format); pin --zero 1 (distributed optimizer) or use more nodes" % BRIDGE_VERSION,
        )
    out.append("ddp.use_distributed_optimizer=%s" % ("true" if zero >= 1 else "false"))
    if PRECISION_AWARE.key in opts.levers:
        out.append(PRECISION_AWARE.flag)
    out.append("mixed_precision=%s" % MIXED_PRECISION.get(opts.precision, "bf16_mixed"))
    return out


def _recompute(mode: Optional[str]) -> List[str]:
    if mode == "full":
        return [
            "model.recompute_granularity=full",
            "model.recompute_method=uniform",
            "model.recompute_num_layers=1",
        ]
    if mode == "selective":
        return ["model.recompute_granularity=selective"]
    return ["model.recompute_granularity=null"]


def _training_overrides(opts: Options) -> List[str]:
    seq = opts.seq or (opts.model.seq if opts.model else None)
    out: List[str] = []
    if opts.global_batch:
        out.append("train.global_batch_size=%d" % opts.global_batch)
    if seq:
        out.append("dataset.seq_length=%d" % seq)  # run_recipe.py copies it to model.seq_length
    iters = opts.train_iters or (SMOKE_ITERS if opts.smoke else None)
    if iters:
        # the recipes warm up for 2000 iterations and decay over train_iters: a short run must not
        # end inside its warmup (the scheduler refuses warmup >= decay)
        out += [
            "train.train_iters=%d" % iters,
            "scheduler.lr_decay_iters=%d" % iters,
            "scheduler.lr_warmup_iters=%d" % max(1, min(2000, iters // 10)),
        ]
    if opts.lr:
        out.append("optimizer.lr=%s" % opts.lr)
    if opts.checkpoint_dir:
        out += ["checkpoint.save=%s" % opts.checkpoint_dir, "checkpoint.load=%s" % opts.checkpoint_dir]
        interval = opts.save_interval or (DEFAULT_SAVE_INTERVAL if opts.requeue else None)
        if interval:
            out.append("checkpoint.save_interval=%d" % interval)
    if opts.requeue and opts.exit_duration_mins:
        out.append("train.exit_duration_in_mins=%d" % opts.exit_duration_mins)
    return out
