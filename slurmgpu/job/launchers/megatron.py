"""Megatron-LM (`pretrain_gpt.py` under torchrun): the model's shape, the layout and the
checkpoint/requeue flags as Megatron's own arguments, so the planned job is the job that runs."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, List, Optional, Sequence, Tuple

from ...errors import ConfigError, Issue
from ...plan import Capabilities, Layout
from ...plan.layout import expert_tp
from ...plan.profile import TERMS, Lever, MemoryProfile, StageBytes
from ...render import PathArg
from .base import DEFAULT_SAVE_INTERVAL, Launcher, Options, field_error, given_keys, train_iters

if TYPE_CHECKING:
    from ...plan import ModelSpec

# Flags and rules checked against tests/data/contract/megatron-d98e8a64.json (recorded from this commit by
# contrib/contract/record_megatron.py); re-record it when this pin moves.
TARGET = "Megatron-LM NVIDIA/Megatron-LM@d98e8a64 (main 2026-08-22, megatron-core 0.20.0)"

LAUNCHER = Launcher(
    "megatron",
    "torchrun",
    "Megatron-LM via torchrun, one task per node",
    default_entry=("pretrain_gpt.py",),
    aliases=(("--recompute-granularity", ("--recompute-activations",)),),
    targets=TARGET,
    needs_inputs=("data", "tokenizer", "train_iters", "lr"),
    # ZeRO-3 is --use-torch-fsdp2, which validate_args refuses with PP > 1 or EP > 1; the
    # distributed optimizer shards optimizer state only (ZeRO-1), so there is no ZeRO-2.
    # FSDP2 also needs --untie-embeddings-and-output-weights: not for a model with tied embeddings.
    caps=Capabilities(zero=(0, 1, 3), zero3_with_pp=False, zero3_with_ep=False, zero3_with_tied=False),
)

# Cheaper profiles Megatron has behind one flag; the planner writes them only where nothing else fits.
PRECISION_AWARE = Lever(
    "precision_aware_optimizer",
    "--use-precision-aware-optimizer",
    zeros=(1,),
    master=2.0,
    what="TE FusedAdam keeps only the 16-bit remainder of each fp32 master weight (store_param_remainders, "
    "lossless with bf16 weights)",
)
GRAD_BF16 = Lever(
    "grad_reduce_bf16",
    "--grad-reduce-in-bf16",
    zeros=(0, 1),
    grads=2.0,
    what="main gradients accumulated over the micro-batches and reduced in bf16 instead of fp32, which "
    "Megatron's validate_args keeps by default for accuracy: written only because nothing fits without it",
    lossless=False,
)


def memory(precision: str, model: Optional[ModelSpec] = None) -> MemoryProfile:
    """What Megatron-LM d98e8a64 keeps per GPU with the flags `layout_args` writes.

    validate_args: with --bf16 and no --grad-reduce-in-bf16 it sets accumulate_allreduce_grads_in_fp32,
    so the DDP gradient buffer (main_grad) is fp32, 4 B/param and never sharded; --fp16 keeps it fp16.
    Without --use-distributed-optimizer, Float16OptimizerWithFloat16Params keeps an fp32 master copy and
    Adam's two fp32 moments on every rank (12 B/param); the distributed optimizer shards those 12 over
    the DP x CP group. --use-torch-fsdp2 (no MixedPrecisionPolicy: bf16 parameters and gradients)
    shards everything over DP x CP and gathers a layer at a time. Without --bf16/--fp16 it trains fp32
    weights (no master copy). With --fp8-format, Transformer Engine caches the FP8 weight and its
    transpose across micro-batches (Megatron passes is_first_microbatch): 2 B per linear parameter.
    """
    if precision == "fp32":
        weights, grads, master = 4.0, 4.0, 0.0
    elif precision == "fp16":
        weights, grads, master = 2.0, 2.0, 4.0
    else:
        weights, grads, master = 2.0, 4.0, 4.0
    levers: Tuple[Lever, ...] = ()
    if precision == "bf16":
        levers += (PRECISION_AWARE,)
    if precision in ("bf16", "fp8"):
        levers += (GRAD_BF16,)
    return MemoryProfile(
        framework="Megatron-LM d98e8a64",
        stages=(
            StageBytes(0, weights, grads, master, about="fp32 master and Adam moments on every rank"),
            StageBytes(
                1,
                weights,
                grads,
                master,
                sharded=("master", "states"),
                flag="--use-distributed-optimizer",
                about="fp32 master and Adam moments sharded over DP x CP = {n}",
            ),
            StageBytes(
                3,
                weights,
                weights,
                master,
                sharded=TERMS,
                gathered=2 * weights,
                flag="--use-torch-fsdp2",
                about="weights, gradients, master and moments sharded over DP x CP = {n}",
            ),
        ),
        levers=levers,
        fp8_cache=2.0 if precision == "fp8" else 0.0,
        default_zero=0,
    )


SMOKE_ITERS = 10  # --smoke: enough steps to see the loss move and the step time settle
SMOKE_LR = "1e-4"


def args(layout: Layout, opts: Options, user_argv: Sequence[str] = ()) -> Tuple[str, ...]:
    return model_args(opts, user_argv) + layout_args(layout, opts, user_argv) + run_args(layout, opts, user_argv)


def _missing(what: str) -> ConfigError:
    return ConfigError([Issue("", None, None, "data", what)])


def run_args(layout: Layout, opts: Options, user_argv: Sequence[str]) -> Tuple[str, ...]:
    """Data, tokenizer, length and learning rate: without them pretrain_gpt.py dies at init."""
    given = given_keys(user_argv)
    out: List[Any] = []

    def add(flag: str, *values: Any) -> None:
        if flag not in given:
            out.append(flag)
            out.extend(values)

    if opts.smoke:
        # a short run; the user's own data or tokenizer arguments, where given, replace the mock ones
        if "--data-path" not in given:
            add("--mock-data")
        if "--tokenizer-type" not in given and "--tokenizer-model" not in given:
            add("--tokenizer-type", "NullTokenizer")
            add("--vocab-size", str(opts.model.vocab if opts.model else 32000))
        add("--train-iters", str(opts.train_iters or SMOKE_ITERS))
        add("--eval-iters", "0")
        add("--lr", str(opts.lr or SMOKE_LR))
        add("--log-interval", "1")
        return tuple(out)
    data = opts.data or ("--data-path" in given or "--mock-data" in given)
    tok = opts.tokenizer or "--tokenizer-model" in given or "--tokenizer-type" in given
    iters = train_iters(opts)
    have_iters = iters or "--train-iters" in given or "--train-samples" in given
    lr = opts.lr or "--lr" in given
    need = []
    if not data:
        need.append("data (`data:` in slurmgpu.yaml or --data PATH: Megatron's --data-path prefix)")
    if not tok:
        need.append("tokenizer (`tokenizer:` or --tokenizer ID|PATH, e.g. meta-llama/Llama-3.1-8B)")
    if not have_iters:
        need.append(
            "training length (`train_iters:` / --train-iters STEPS, or --tokens 2T: steps from the global batch)"
        )
    if not lr:
        need.append("learning rate (`lr:` or --lr, e.g. 3e-4)")
    if need:
        raise _missing(
            "Megatron's pretrain_gpt.py would stop at initialisation without: %s. Give them, or add "
            "--smoke for a %d-step run on Megatron's mock data that proves the allocation"
            % ("; ".join(need), SMOKE_ITERS)
        )
    if opts.data:
        add("--data-path", PathArg(opts.data))
    if opts.tokenizer:
        add("--tokenizer-type", "HuggingFaceTokenizer")
        add("--tokenizer-model", PathArg(opts.tokenizer))
    if iters:
        add("--train-iters", str(iters))
    if opts.lr:
        add("--lr", str(opts.lr))
        add("--lr-decay-style", "cosine")
        add("--min-lr", "%g" % (float(opts.lr) / 10))  # Llama 3 recipe: decay to 10% of the peak
    return tuple(out)


def model_args(opts: Options, user_argv: Sequence[str]) -> Tuple[str, ...]:
    """The model's shape as Megatron arguments."""
    model = opts.model
    if model is None:
        return ()
    given = given_keys(user_argv)
    seq = opts.seq
    out: List[str] = []

    def add(flag: str, *values: Any) -> None:
        if flag not in given:
            out.extend((flag,) + tuple(str(v) for v in values))

    add("--num-layers", model.layers)
    add("--hidden-size", model.hidden)
    add("--num-attention-heads", model.heads)
    add("--ffn-hidden-size", model.ffn)
    if model.is_mla:
        add("--multi-latent-attention")
        if model.q_lora_rank:
            add("--q-lora-rank", model.q_lora_rank)
        add("--kv-lora-rank", model.kv_lora_rank)
        add("--qk-head-dim", model.hd)
        add("--qk-pos-emb-head-dim", model.rope_head_dim)
        add("--v-head-dim", model.v_head_dim or model.hd)
    else:
        if model.hd * model.heads != model.hidden:
            add("--kv-channels", model.hd)
        if model.kv_heads and model.kv_heads != model.heads:
            add("--group-query-attention")
            add("--num-query-groups", model.kv_heads)
    if model.gated and model.activation != "silu":
        # pretrain_gpt.py's only gated MLP is --swiglu (--quick-geglu is x*sigmoid(1.702x), not
        # Gemma's tanh-GELU); it has no logit soft-capping either: refuse rather than train another net
        raise field_error(
            "model",
            "Megatron-LM's pretrain_gpt.py cannot build %s: it has no %s gated MLP flag (only --swiglu), "
            "so it would train a different network. Use --launcher nemo (Megatron-Bridge has its recipe) "
            "or your own program" % (model.label, model.activation),
        )
    if model.gated:
        add("--swiglu")
    add("--normalization", "RMSNorm" if model.norm == "rmsnorm" else "LayerNorm")
    add("--norm-epsilon", "%g" % model.norm_eps)
    if model.position == "rope":
        add("--position-embedding-type", "rope")
        add("--rotary-base", int(model.rope_base))
        if model.rope_scaling == "llama3":
            add("--use-rope-scaling")  # Llama 3.1 frequency scaling, factor 8 (Megatron's default)
        elif model.rope_scaling == "yarn":
            beta_fast, beta_slow, mscale, mscale_all = model.yarn
            add("--rope-type", "yarn")
            add("--rotary-scaling-factor", "%g" % model.rope_factor)
            add("--yarn-original-max-position-embeddings", model.rope_original_seq)
            add("--yarn-beta-fast", "%g" % beta_fast)
            add("--yarn-beta-slow", "%g" % beta_slow)
            add("--mscale", "%g" % mscale)
            add("--mscale-all-dim", "%g" % mscale_all)
    else:
        add("--position-embedding-type", "learned_absolute")
    if not model.linear_bias:
        add("--disable-bias-linear")
    if model.qkv_bias:
        add("--add-qkv-bias")
    if not seq:
        add("--seq-length", model.seq)
    add("--max-position-embeddings", max(seq or 0, model.seq))
    if not model.tied_embeddings:
        add("--untie-embeddings-and-output-weights")
    if model.is_moe:
        add("--num-experts", model.experts)
        add("--moe-router-topk", model.experts_active)
        add("--moe-ffn-hidden-size", model.expert_ffn)
        if model.shared_experts:
            add("--moe-shared-expert-intermediate-size", model.shared_experts * model.expert_ffn)
        if model.dense_layers:
            add("--moe-layer-freq", "([0]*%d+[1]*%d)" % (model.dense_layers, model.layers - model.dense_layers))
        if model.router_score != "softmax":
            add("--moe-router-score-function", model.router_score)
        if model.router_topk_scale:
            add("--moe-router-topk-scaling-factor", "%g" % model.router_topk_scale)
        if model.router_groups:
            add("--moe-router-num-groups", model.router_groups)
            add("--moe-router-group-topk", model.router_group_topk)
        if model.router_expert_bias:
            add("--moe-router-enable-expert-bias")
        add("--moe-token-dispatcher-type", "alltoall")  # the default allgather does not scale with EP
        add("--moe-grouped-gemm")  # one grouped GEMM over a rank's experts instead of a loop of small ones
    return tuple(out)


def precision_args(opts: Options) -> Tuple[str, ...]:
    """Megatron trains in fp32 unless told; fp8 runs its GEMMs in fp8 on top of bf16."""
    p = opts.precision
    if p == "bf16":
        return ("--bf16",)
    if p == "fp16":
        return ("--fp16",)
    if p == "fp8":
        return ("--bf16", "--fp8-format", "hybrid")
    return ()


def pipeline_args(layout: Layout, opts: Options) -> Tuple[str, ...]:
    """The planned layers per stage and chunks per GPU, in the spelling Megatron accepts.

    Even stages: --num-virtual-stages-per-pipeline-rank. A different first/last stage with even
    middle ones: --decoder-first/last-pipeline-num-layers. Anything else (the planner takes layers
    off the first and last stages alternately: DeepSeek-V3 61 on 32 = 1,1,2,...,2,1) is spelled
    out with --pipeline-model-parallel-layout, which Megatron takes as the exact partition.
    """
    pp, vp = layout.pp, max(1, opts.virtual_stages)
    if pp == 1:
        return ()
    model = opts.model
    counts = list(opts.stage_layers) or ([model.layers // pp] * pp if model and model.layers % pp == 0 else [])
    if not counts:
        return ()
    mid = counts[1:-1]
    if len(set(counts)) == 1 and counts[0] % vp == 0:
        return ("--num-virtual-stages-per-pipeline-rank", str(vp)) if vp > 1 else ()
    if len(set(mid)) <= 1 and all(c % vp == 0 for c in counts):
        out: List[str] = []
        m = mid[0] if mid else None
        if m is None or counts[0] != m:
            out += ["--decoder-first-pipeline-num-layers", str(counts[0])]
        if m is None or counts[-1] != m:
            out += ["--decoder-last-pipeline-num-layers", str(counts[-1])]
        if vp > 1:
            out += ["--num-virtual-stages-per-pipeline-rank", str(vp)]
        return tuple(out)
    return ("--pipeline-model-parallel-layout", layout_string(counts, vp))


def layout_string(counts: Sequence[int], vp: int) -> str:
    """Stage v*pp+r holds rank r's v-th chunk; E (embedding) first, L (loss) last, t per layer."""
    pp = len(counts)
    chunks = []
    for v in range(vp):
        for r in range(pp):
            n = counts[r] // vp + (1 if v < counts[r] % vp else 0)
            chunks.append("t" * n)
    chunks[0] = "E" + chunks[0]
    chunks[-1] = chunks[-1] + "L"
    return "|".join(chunks)


def layout_args(layout: Layout, opts: Options, user_argv: Sequence[str] = ()) -> Tuple[str, ...]:
    """The parallel layout, sharding, recomputation and checkpointing the plan chose."""
    given = given_keys(user_argv)
    out: List[Any] = [
        "--tensor-model-parallel-size",
        str(layout.tp),
        "--pipeline-model-parallel-size",
        str(layout.pp),
        "--context-parallel-size",
        str(layout.cp),
        "--expert-model-parallel-size",
        str(layout.ep),
        "--micro-batch-size",
        str(layout.micro_batch),
    ]
    if layout.ep > 1:
        out += ["--expert-tensor-parallel-size", str(expert_tp(layout.tp, layout.dp, layout.cp, layout.ep))]
    out += list(pipeline_args(layout, opts))
    out += [a for a in precision_args(opts) if a not in given]
    if opts.global_batch:
        out += ["--global-batch-size", str(opts.global_batch)]
    if opts.seq:
        out += ["--seq-length", str(opts.seq)]
    if layout.tp > 1:
        out.append("--sequence-parallel")
    if opts.fsdp:
        bad = [n for n, v in (("pipeline", layout.pp), ("expert", layout.ep)) if v > 1]
        if bad or (opts.model is not None and opts.model.tied_embeddings):
            why = "%s parallelism" % " and ".join(bad) if bad else "tied embeddings"
            raise field_error(
                "parallel",
                "Megatron shards parameters (ZeRO-3) with --use-torch-fsdp2, which its validate_args "
                "refuses with %s (pp=%d ep=%d); drop --fsdp (`fsdp:`) for the distributed optimizer "
                "(ZeRO-1)%s" % (why, layout.pp, layout.ep, ", or pin --pp 1 --ep 1" if bad else ""),
            )
        # FSDP2 refuses Megatron's default fused gradient accumulation (validate_args)
        out += ["--use-torch-fsdp2", "--no-gradient-accumulation-fusion"]
    elif opts.zero != 0:
        out.append("--use-distributed-optimizer")
    # the cheaper memory profiles the plan relies on (megatron.memory): written only when planned
    for lever in (PRECISION_AWARE, GRAD_BF16):
        if lever.key in opts.levers and lever.flag not in given:
            out.append(lever.flag)
    if opts.recompute == "selective":
        out += ["--recompute-granularity", "selective"]
    elif opts.recompute == "full":
        out += ["--recompute-granularity", "full", "--recompute-method", "uniform", "--recompute-num-layers", "1"]
    if opts.checkpoint_dir:
        for flag in ("--save", "--load"):
            if flag not in given:
                out += [flag, PathArg(opts.checkpoint_dir)]
    if opts.requeue:
        # Megatron saves and exits on --exit-signal (default SIGTERM); without --save-interval it
        # never saves on its own, so every requeue would restart from iteration 0.
        if "--exit-signal-handler" not in given:
            out.append("--exit-signal-handler")
        if opts.checkpoint_signal != "TERM" and "--exit-signal" not in given:
            out += ["--exit-signal", "SIG" + opts.checkpoint_signal]
        if opts.checkpoint_dir and "--save-interval" not in given:
            out += ["--save-interval", str(opts.save_interval or DEFAULT_SAVE_INTERVAL)]
        if opts.exit_duration_mins and "--exit-duration-in-mins" not in given:
            out += ["--exit-duration-in-mins", str(opts.exit_duration_mins)]
    elif opts.checkpoint_dir and opts.save_interval and "--save-interval" not in given:
        out += ["--save-interval", str(opts.save_interval)]
    return tuple(out)
