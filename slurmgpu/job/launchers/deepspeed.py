"""DeepSpeed: its runner with --no_ssh, one task per node; the program is the user's.

The plan reaches DeepSpeed as a config file the script writes next to the hostfile (ZeRO stage,
bf16/fp16, micro and global batch, gradient clipping); the program is told with
`--deepspeed_config`, the argument `deepspeed.add_config_arguments` gives it. slurmgpu owns that
file, so a user `--deepspeed_config` is refused rather than silently contradicting the plan.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Dict, Optional, Sequence, Tuple, Union

from ...plan import Capabilities, Layout
from ...plan.profile import TERMS, MemoryProfile, StageBytes
from ...render import PathArg
from .base import PROGRAM_LOGITS_BYTES, Launcher, Options, check_caps, field_error

if TYPE_CHECKING:
    from ...plan import ModelSpec

TARGETS = "DeepSpeed 0.19.8"
# Relative to the submit directory, where the program (train.py) is found as well; the job's
# shell expands $SLURM_JOB_ID, so requeued and concurrent jobs never share a file.
CONFIG_PATH = ".slurmgpu-deepspeed-$SLURM_JOB_ID.json"
CONFIG_FLAG = "--deepspeed_config"
GRADIENT_CLIPPING = 1.0  # the global-norm clip of the Llama/Megatron recipes the planner models
# DeepSpeed prints its throughput line (samples/s, peak memory) every `steps_per_print` steps, at INFO:
# its logger starts at WARNING and steps_per_print defaults to None, so without these two keys a run
# logs no speed at all and `slurmgpu report` has nothing to read (deepspeed/utils/timer.py, 0.19.8).
STEPS_PER_PRINT = 10

# DeepSpeed shards with ZeRO over data parallelism. Pipelines need a PipelineModule, sequence
# parallelism (Ulysses) DistributedAttention, and AutoTP/AutoEP model code the launcher cannot see,
# so a user program is run as plain DP + ZeRO.
CAPS = Capabilities(
    tp=False,
    pp=False,
    cp=False,
    ep=False,
    virtual_stages=False,
    uneven_stages=False,
    zero=(0, 1, 2, 3),
    zero3_with_pp=False,
    zero3_with_ep=False,
)

LAUNCHER = Launcher(
    "deepspeed",
    "deepspeed",
    "DeepSpeed runner (--no_ssh), one task per node",
    aliases=((CONFIG_FLAG, ("--deepscale_config",)),),
    targets=TARGETS,
    caps=CAPS,
    program=True,
)

REDUCE_BUCKET = 5e8  # zero_optimization.reduce_bucket_size default (elements), one bf16 bucket for stages 2 and 3


def memory(precision: str, model: Optional[ModelSpec] = None) -> MemoryProfile:
    """What DeepSpeed 0.19.8 keeps per GPU for the config `ds_config` writes (bf16 or fp16 enabled).

    The engine casts the model to bf16 (2 B/param). Stage 0 with bf16 runs FP16_Optimizer (engine
    _do_optimizer_sanity_check: DDP_BFLOAT16): bf16 gradients, fp32 master and Adam moments on every
    rank. Stage 1 keeps the bf16 gradients whole and an fp32 gradient partition beside the sharded
    master and moments. Stages 2 and 3 are DeepSpeed's own estimators
    (estimate_zero2_model_states_mem_needs: 2 + 18/N; estimate_zero3_model_states_mem_needs: 18/N +
    4 x the largest layer), plus the reduce bucket (reduce_bucket_size 5e8 elements, bf16).
    fp32 (no bf16/fp16 in the config): plain torch Adam on fp32 weights.
    """
    lp = 4.0 if precision == "fp32" else 2.0
    master = 0.0 if precision == "fp32" else 4.0
    bucket = REDUCE_BUCKET * lp / 1e9
    return MemoryProfile(
        framework=TARGETS,
        stages=(
            StageBytes(0, lp, lp, master, about="fp32 master and Adam moments on every rank"),
            StageBytes(
                1,
                lp,
                lp,
                master,
                sharded=("master", "states"),
                grads_sharded=4.0,
                flag='"zero_optimization": {"stage": 1}',
                about="fp32 master, gradient partition and Adam moments over DP = {n}",
            ),
            StageBytes(
                2,
                lp,
                lp + 4.0,
                master,
                sharded=("grads", "master", "states"),
                buffer_gb=bucket,
                flag='"zero_optimization": {"stage": 2}',
                about="gradients, fp32 master and Adam moments over DP = {n}",
            ),
            StageBytes(
                3,
                lp,
                4.0,
                master,
                sharded=TERMS,
                gathered=4.0,
                buffer_gb=bucket,
                flag='"zero_optimization": {"stage": 3}',
                about="weights, gradients, fp32 master and Adam moments over DP = {n}",
            ),
        ),
        sequence_parallel=False,
        recompute=("none",),
        default_zero=0,
        logits_bytes=PROGRAM_LOGITS_BYTES,  # the user's program computes its loss
    )


Value = Union[int, float, bool, str, Dict[str, Union[int, bool]]]


def ds_config(layout: Layout, opts: Options) -> Dict[str, Value]:
    """The DeepSpeed config of the plan: train_batch_size = micro x accumulation x DP."""
    check_caps(LAUNCHER, layout, opts.zero, opts.implements, opts.fsdp)
    micro = layout.micro_batch
    per_step = micro * layout.dp
    batch = opts.global_batch or per_step
    if batch % per_step:
        raise field_error(
            "global_batch",
            "DeepSpeed needs train_batch_size = micro batch x accumulation steps x data-parallel ranks; "
            "%d is not a multiple of %d x %d = %d: give a global batch that is" % (batch, micro, layout.dp, per_step),
        )
    cfg: Dict[str, Value] = {
        "train_batch_size": batch,
        "train_micro_batch_size_per_gpu": micro,
        "gradient_accumulation_steps": batch // per_step,
        "gradient_clipping": GRADIENT_CLIPPING,
        "steps_per_print": STEPS_PER_PRINT,
        "log_level": "info",
    }
    if opts.zero is not None:
        cfg["zero_optimization"] = {"stage": opts.zero}
    if opts.precision == "bf16":
        cfg["bf16"] = {"enabled": True}
    elif opts.precision == "fp16":
        cfg["fp16"] = {"enabled": True}
    elif opts.precision != "fp32":
        raise field_error(
            "precision",
            "DeepSpeed's config has no %s training switch (only bf16, fp16 or fp32): use --precision bf16, "
            "or run fp8 from the program itself (Transformer Engine)" % opts.precision,
        )
    return cfg


def files(layout: Layout, opts: Options, user_argv: Sequence[str] = ()) -> Tuple[Tuple[str, str], ...]:
    """The files the script writes before the launch step: (path, text)."""
    return ((CONFIG_PATH, json.dumps(ds_config(layout, opts), indent=2, sort_keys=True) + "\n"),)


def args(layout: Layout, opts: Options, user_argv: Sequence[str] = ()) -> Tuple[str, ...]:
    ds_config(layout, opts)  # refuse what DeepSpeed cannot run before anything is written
    return (CONFIG_FLAG, PathArg(CONFIG_PATH))
