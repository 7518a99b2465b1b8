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

from typing import TYPE_CHECKING, List, Optional, Sequence, Set, Tuple

from ...errors import ConfigError, Issue
from ...plan import Capabilities, Layout
from ...plan.layout import expert_tp
from ...plan.profile import Lever, MemoryProfile, StageBytes
from .base import DEFAULT_SAVE_INTERVAL, Launcher, Options, field_error, given_keys, option_key, train_iters
from .megatron import layout_string

if TYPE_CHECKING:
    from ...plan import ModelSpec

BRIDGE_VERSION = "0.6.0"
ENTRY = "/opt/Megatron-Bridge/scripts/training/run_recipe.py"  # where NeMo containers keep the checkout

LAUNCHER = Launcher(
    "nemo",
    "torchrun",
    "NeMo Megatron-Bridge recipe (run_recipe.py) via torchrun, one task per node",
    default_entry=(ENTRY,),
    entry_in="NVIDIA's NeMo container (nvcr.io/nvidia/nemo, with Megatron-Bridge %s)" % BRIDGE_VERSION,
    targets="Megatron-Bridge %s (NVIDIA-NeMo/Megatron-Bridge v0.6.0 @ 51885cf1, scripts/training/run_recipe.py)"
    % BRIDGE_VERSION,
    # Megatron-FSDP exists in Bridge but needs its own checkpoint format: not offered here. ZeRO-0 is
    # both distributed-optimizer switches off (ConfigContainer turns both on when either is on); ZeRO-2
    # is not a Bridge stage (nothing shards the gradients of the distributed optimizer).
    caps=Capabilities(zero=(0, 1), zero3_with_pp=False, zero3_with_ep=False),
)

# slurmgpu model -> the library recipe built from that model's own Hugging Face config (its HF
# checkpoint id in the recipe: Llama-2-7b-hf, Meta-Llama-3.1-*, Qwen2.5-*, gemma-2-27b, DeepSeek-V3;
# GPT-3 175B is a hand-written GPTModelProvider). A recipe carries what the catalogue does not
# describe (Gemma 2's logit soft-capping, sliding window and query scaling), so a model that has
# one uses it; the catalogue's own fields are written explicitly either way (_model_overrides).
RECIPES = {
    "llama2-7b": "llama2_7b_pretrain_config",
    "llama3.1-8b": "llama31_8b_pretrain_config",
    "llama3.1-70b": "llama31_70b_pretrain_config",
    "llama3.1-405b": "llama31_405b_pretrain_config",
    "qwen2.5-7b": "qwen25_7b_pretrain_config",
    "qwen2.5-72b": "qwen25_72b_pretrain_config",
    "gemma2-27b": "gemma2_27b_pretrain_config",
    "deepseek-v3": "deepseek_v3_pretrain_config",
    # exported under its hardware name only (recipes.gpt.h100), which run_recipe.py finds
    "gpt3-175b": "gpt3_175b_pretrain_32gpu_h100_bf16_config",
}
# a model without its own recipe starts from the closest provider class; every catalogue field is
# then set by override, so the base contributes only what the catalogue has no field for
BASE_GATED = "llama2_7b_pretrain_config"  # GPTModelProvider: RMSNorm, RoPE, gated MLP
BASE_MLA = "deepseek_v3_pretrain_config"  # MLAModelProvider (latent attention has its own class)
BASE_GPT = "gpt3_175b_pretrain_32gpu_h100_bf16_config"  # GPTModelProvider: LayerNorm, learned positions
# the catalogue's activation -> Bridge's serializable activation name (megatron.bridge.utils.activation_map)
ACTIVATIONS = {"silu": "silu", "gelu": "gelu", "gelu_tanh": "fast_gelu"}
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


def memory(precision: str, model: Optional[ModelSpec] = None) -> MemoryProfile:
    """What Megatron-Bridge 0.6.0 keeps per GPU for the library recipe of `model` and the overrides
    this adapter writes.

    The recipes (recipes/common.py, recipes/llama/h100/llama3.py) run the distributed optimizer without
    the precision-aware optimizer (fp32 master + Adam moments, 12 B/param, sharded over DP x CP);
    DeepSeek-V3's (recipes/deepseek/h100/deepseek_v3.py) runs the precision-aware optimizer with bf16
    moments: a 16-bit master remainder + 2 + 2 B/param. The mixed-precision recipe written
    (`mixed_precision=`) sets the gradient buffer: bf16_mixed and the FP8 recipes keep
    grad_reduce_in_fp32=True (4 B/param, unsharded), fp16_mixed False (2); `null` trains fp32 weights.
    The FP8 recipes keep FP8 primary weights (fp8_param_gather) with their transposes: 2 B/param, as
    bf16. ZeRO-0 (both distributed-optimizer switches off) is written with fp32 moments and no
    precision-aware optimizer: the fp32 master and Adam state on every rank.
    """
    if precision == "fp32":
        weights, grads, master = 4.0, 4.0, 0.0
    else:
        weights, grads, master = 2.0, (2.0 if precision == "fp16" else 4.0), 4.0
    try:
        recipe = recipe_for(Options(model=model)) if model is not None else ""
    except ConfigError:
        recipe = ""
    bf16_moments = recipe == BASE_MLA and precision != "fp32"
    dist = StageBytes(
        1,
        weights,
        grads,
        2.0 if bf16_moments and precision == "bf16" else master,
        sharded=("master", "states"),
        moments=4.0 if bf16_moments else None,
        flag="ddp.use_distributed_optimizer=true",
        about="master and Adam moments sharded over DP x CP = {n}",
    )
    return MemoryProfile(
        framework="Megatron-Bridge %s" % BRIDGE_VERSION,
        stages=(StageBytes(0, weights, grads, master, about="fp32 master and Adam moments on every rank"), dist),
        levers=(PRECISION_AWARE,) if precision == "bf16" and not bf16_moments else (),
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
    if model.activation not in ACTIVATIONS:
        raise field_error(
            "model",
            "launcher nemo cannot build %s: Megatron-Bridge %s has no %r activation (it takes %s), so it would "
            "train a different network; use your own program (--launcher torchrun)"
            % (model.label, BRIDGE_VERSION, model.activation, ", ".join(sorted(ACTIVATIONS))),
        )
    if model.is_mla:
        return BASE_MLA
    return BASE_GATED if model.gated else BASE_GPT


def args(layout: Layout, opts: Options, user_argv: Sequence[str] = ()) -> Tuple[str, ...]:
    given = given_keys(user_argv) | {k for k in (option_key(a) for a in user_argv) if k}
    out: List[str] = []
    if "--recipe" not in given and "--model" not in given:
        out += ["--recipe", recipe_for(opts)]
    if "--mode" not in given:
        out += ["--mode", "pretrain"]
    out += _data_args(opts, given)
    overrides = _model_overrides(opts) + _layout_overrides(layout, opts) + _training_overrides(opts, given)
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


def _num(x: float) -> str:
    """A float as Hydra reads it back (1e-06, 500000.0)."""
    return repr(float(x))


def _model_overrides(opts: Options) -> List[str]:
    """Every architecture field of the catalogue model, explicit whatever the recipe's HF config
    says: the recipe is a base (provider class, kernels, what the catalogue has no field for)."""
    m = opts.model
    if m is None:
        return []
    out = [
        "model.num_layers=%d" % m.layers,
        "model.hidden_size=%d" % m.hidden,
        "model.num_attention_heads=%d" % m.heads,
        "model.ffn_hidden_size=%d" % m.ffn,
        "model.vocab_size=%d" % m.vocab,
        "model.gated_linear_unit=%s" % _bool(m.gated),
        "model.activation_func=%s" % ACTIVATIONS[m.activation],
        "model.normalization=%s" % ("RMSNorm" if m.norm == "rmsnorm" else "LayerNorm"),
        "model.layernorm_epsilon=%s" % _num(m.norm_eps),
        "model.add_bias_linear=%s" % _bool(m.linear_bias),
        "model.add_qkv_bias=%s" % _bool(m.qkv_bias or m.linear_bias),
        "model.share_embeddings_and_output_weights=%s" % _bool(m.tied_embeddings),
        # the catalogue counts no multi-token-prediction module (DeepSeek-V3's recipe adds one)
        "model.mtp_num_layers=null",
    ]
    if m.is_mla:
        out += [
            "model.q_lora_rank=%s" % (m.q_lora_rank or "null"),
            "model.kv_lora_rank=%d" % m.kv_lora_rank,
            "model.qk_head_dim=%d" % m.hd,
            "model.qk_pos_emb_head_dim=%d" % m.rope_head_dim,
            "model.v_head_dim=%d" % (m.v_head_dim or m.hd),
            "model.rotary_base=%s" % _num(m.rope_base),
        ]
        if m.rope_scaling == "yarn":
            beta_fast, beta_slow, mscale, mscale_all = m.yarn
            out += [
                "model.rope_type=yarn",
                "model.rotary_scaling_factor=%s" % _num(m.rope_factor),
                "model.original_max_position_embeddings=%d" % m.rope_original_seq,
                "model.beta_fast=%s" % _num(beta_fast),
                "model.beta_slow=%s" % _num(beta_slow),
                "model.mscale=%s" % _num(mscale),
                "model.mscale_all_dim=%s" % _num(mscale_all),
            ]
        else:
            out.append("model.rope_type=rope")
    else:
        out += [
            "model.num_query_groups=%d" % (m.kv_heads or m.heads),
            "model.kv_channels=%d" % m.hd,
            "model.position_embedding_type=%s" % ("rope" if m.position == "rope" else "learned_absolute"),
        ]
        if m.position == "rope":
            if m.rope_scaling not in ("", "llama3"):
                raise field_error(
                    "model",
                    "launcher nemo cannot give %s its %s RoPE scaling on a GPT provider (Megatron-Bridge %s "
                    "scales RoPE the Llama 3.1 way only); use --launcher megatron"
                    % (m.label, m.rope_scaling, BRIDGE_VERSION),
                )
            out += [
                "model.rotary_base=%s" % _num(m.rope_base),
                "model.rope_scaling=%s" % _bool(m.rope_scaling == "llama3"),
                "model.rope_scaling_factor=%s" % _num(8.0 if m.rope_scaling == "llama3" else 1.0),
            ]
    if m.is_moe:
        out += [
            "model.num_moe_experts=%d" % m.experts,
            "model.moe_router_topk=%d" % m.experts_active,
            "model.moe_ffn_hidden_size=%d" % m.expert_ffn,
            "model.moe_shared_expert_intermediate_size=%s"
            % (m.shared_experts * m.expert_ffn if m.shared_experts else "null"),
            "model.moe_layer_freq=[%s]" % ",".join("0" if i < m.dense_layers else "1" for i in range(m.layers)),
            "model.moe_router_score_function=%s" % m.router_score,
            "model.moe_router_topk_scaling_factor=%s" % (_num(m.router_topk_scale) if m.router_topk_scale else "null"),
            "model.moe_router_num_groups=%s" % (m.router_groups or "null"),
            "model.moe_router_group_topk=%s" % (m.router_group_topk or "null"),
            "model.moe_router_enable_expert_bias=%s" % _bool(m.router_expert_bias),
        ]
    else:
        out.append("model.num_moe_experts=null")
    return out


def _bool(v: bool) -> str:
    return "true" if v else "false"


def pipeline_overrides(layout: Layout, opts: Options) -> List[str]:
    """The plan's layers per stage and chunks per rank, exactly: megatron-core refuses uneven
    first/last stages that its interleaving cannot divide (Llama 3.1 405B on PP 16 with VP 4:
    "number of layers at first stage: 7 must be divisible by virtual pipeline parallel degree 4"),
    and first/last counts cannot say DeepSeek-V3's 1,1,2,...,2,1. The layout string
    (megatron-core's PipelineParallelLayerLayout, the one --pipeline-model-parallel-layout takes)
    says any split; even splits need no layout."""
    vp = max(1, opts.virtual_stages)
    out = [
        "model.virtual_pipeline_model_parallel_size=%s" % (vp if vp > 1 else "null"),
        "model.num_layers_in_first_pipeline_stage=null",
        "model.num_layers_in_last_pipeline_stage=null",
        # the plan's split, not the recipe's embedding/loss accounting
        "model.account_for_embedding_in_pipeline_split=false",
        "model.account_for_loss_in_pipeline_split=false",
    ]
    m = opts.model
    counts = list(opts.stage_layers)
    if layout.pp > 1 and not counts and m is not None and m.layers % layout.pp == 0:
        counts = [m.layers // layout.pp] * layout.pp
    even = len(set(counts)) <= 1 and (not counts or counts[0] % vp == 0)
    if layout.pp > 1 and counts and not even:
        out.append("model.pipeline_model_parallel_layout='%s'" % layout_string(counts, vp))
    else:
        out.append("model.pipeline_model_parallel_layout=null")
    return out


def _layout_overrides(layout: Layout, opts: Options) -> List[str]:
    out = [
        "model.tensor_model_parallel_size=%d" % layout.tp,
        "model.pipeline_model_parallel_size=%d" % layout.pp,
        "model.context_parallel_size=%d" % layout.cp,
        "model.expert_model_parallel_size=%d" % layout.ep,
        "model.sequence_parallel=%s" % ("true" if layout.tp > 1 else "false"),
        "train.micro_batch_size=%d" % layout.micro_batch,
    ]
    out += pipeline_overrides(layout, opts)
    if opts.model is not None and opts.model.is_moe:
        # the planner's expert-TP (plan.layout.expert_tp), which its memory and cost assume
        out.append("model.expert_tensor_parallel_size=%d" % expert_tp(layout.tp, layout.dp, layout.cp, layout.ep))
    out += _recompute(opts.recompute)
    zero = opts.zero if opts.zero is not None else 1
    if opts.fsdp or zero >= 3:
        raise field_error(
            "zero",
            "launcher nemo (Megatron-Bridge %s) is not given ZeRO-3/FSDP plans (Megatron-FSDP needs its "
            "own checkpoint format); pin --zero 1 (distributed optimizer) or use more nodes" % BRIDGE_VERSION,
        )
    # both switches: ConfigContainer.validate() turns the distributed optimizer on if either is on
    # (the recipes set optimizer.use_distributed_optimizer=true), so ZeRO-0 needs both false
    dist = "true" if zero >= 1 else "false"
    out += ["ddp.use_distributed_optimizer=%s" % dist, "optimizer.use_distributed_optimizer=%s" % dist]
    if zero == 0:  # DeepSeek-V3's recipe keeps Adam states in bf16, which needs the distributed optimizer
        out.append("optimizer.use_precision_aware_optimizer=false")
        out += [
            "optimizer.%s=fp32" % f
            for f in ("main_grads_dtype", "main_params_dtype", "exp_avg_dtype", "exp_avg_sq_dtype")
        ]
    if zero >= 1 and PRECISION_AWARE.key in opts.levers:
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


def _training_overrides(opts: Options, given: Set[str]) -> List[str]:
    seq = opts.seq or (opts.model.seq if opts.model else None)
    out: List[str] = []
    if opts.global_batch:
        out.append("train.global_batch_size=%d" % opts.global_batch)
    if seq:
        out.append("dataset.seq_length=%d" % seq)  # run_recipe.py copies it to model.seq_length
    iters = train_iters(opts) or (SMOKE_ITERS if opts.smoke else None)
    if not iters and "train.train_iters" not in given:
        # the recipes train for their own length (1,168,251 iterations for Llama 2/3.1): never silently
        raise field_error(
            "train_iters",
            "launcher nemo needs the training length: give --train-iters STEPS or --tokens 2T (steps from the "
            "global batch and sequence), or `train_iters:` / `tokens:` in slurmgpu.yaml; without it the "
            "Megatron-Bridge recipe trains its own length (e.g. 1,168,251 iterations)",
        )
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
