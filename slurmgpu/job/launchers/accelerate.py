"""Hugging Face accelerate: `accelerate launch`, one task per node; the program is the user's.

The plan reaches accelerate as launch flags: `--mixed_precision`, and for ZeRO-2/3 torch FSDP2
(`--use_fsdp --fsdp_version 2`, parameters resharded after forward for stage 3 only). Stage 0
is plain DDP. FSDP has no optimizer-only sharding, so ZeRO-1 is not among the caps.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Optional, Sequence, Tuple

from ...plan import Capabilities, Layout
from ...plan.profile import TERMS, MemoryProfile, StageBytes
from .base import PROGRAM_LOGITS_BYTES, Launcher, Options, check_caps, field_error, torch_ddp

if TYPE_CHECKING:
    from ...plan import ModelSpec

TARGETS = "accelerate 1.15.0"
PRECISION = {"bf16": "bf16", "fp16": "fp16", "fp8": "fp8", "fp32": "no"}

# accelerate's TP/CP (--parallelism_config_*) need a model with a Transformers tp_plan; a user
# program is run as data parallel, sharded with FSDP2.
CAPS = Capabilities(
    tp=False,
    pp=False,
    cp=False,
    ep=False,
    virtual_stages=False,
    uneven_stages=False,
    zero=(0, 2, 3),
    zero3_with_pp=False,
    zero3_with_ep=False,
)

LAUNCHER = Launcher(
    "accelerate",
    "accelerate",
    "Hugging Face accelerate launch, one task per node",
    targets=TARGETS,
    caps=CAPS,
    program=True,
)


def memory(precision: str, model: Optional[ModelSpec] = None) -> MemoryProfile:
    """What accelerate 1.15.0 runs for the launch flags `runner_args` writes, on the user's fp32 model.

    ZeRO-0 (--multi_gpu): torch DDP (DistributedDataParallelKwargs.gradient_as_bucket_view False) keeps
    fp32 weights, gradients and its reducer buckets, AdamW fp32 moments, and the bf16 copies of the
    weights autocast (--mixed_precision) saves for backward: 4 + 4 + 4 + 8 + 2 B/param. ZeRO-2/3
    (--use_fsdp --fsdp_version 2): fsdp2_prepare_model upcasts to fp32 and shards weights, gradients
    and moments over DP; with no --fsdp_auto_wrap_policy (NO_WRAP) the whole model is one FSDP unit,
    so its compute copy (bf16 under MixedPrecisionPolicy) is gathered whole in forward and backward.
    """
    half = 4.0 if precision == "fp32" else 2.0
    fsdp = StageBytes(
        2,
        weights=4.0,
        grads=4.0,
        master=0.0,
        sharded=TERMS,
        copies=half,
        flag="--use_fsdp --fsdp_version 2",
        about="FSDP2: fp32 weights, gradients and Adam moments over DP = {n}, the model gathered whole",
    )
    return MemoryProfile(
        framework=TARGETS,
        stages=(
            torch_ddp(precision),  # --multi_gpu: DistributedDataParallelKwargs leaves gradient_as_bucket_view False
            fsdp,
            replace(fsdp, zero=3),
        ),
        sequence_parallel=False,
        recompute=("none",),
        default_zero=0,
        logits_bytes=PROGRAM_LOGITS_BYTES,  # the user's program computes its loss
    )


def args(layout: Layout, opts: Options, user_argv: Sequence[str] = ()) -> Tuple[str, ...]:
    """Nothing for the program itself: the plan goes to `accelerate launch` (runner_args)."""
    runner_args(layout, opts, user_argv)
    return ()


def runner_args(layout: Layout, opts: Options, user_argv: Sequence[str] = ()) -> Tuple[str, ...]:
    """Launch flags, before the program: accelerate applies them to the program's Accelerator."""
    zero = 3 if opts.fsdp and opts.zero is None else opts.zero
    check_caps(LAUNCHER, layout, zero, opts.implements, opts.fsdp)
    if opts.precision not in PRECISION:
        raise field_error(
            "precision", "accelerate's --mixed_precision has no %r: use bf16, fp16, fp8 or fp32" % opts.precision
        )
    out = ["--mixed_precision", PRECISION[opts.precision]]
    if zero not in (2, 3):
        # accelerate refuses --multi_gpu together with --use_fsdp (one distributed type at a time)
        return tuple(out + (["--multi_gpu"] if layout.nodes * layout.gpus_per_node > 1 else []))
    if zero in (2, 3):
        out += ["--use_fsdp", "--fsdp_version", "2", "--fsdp_reshard_after_forward", "true" if zero == 3 else "false"]
    return tuple(out)
