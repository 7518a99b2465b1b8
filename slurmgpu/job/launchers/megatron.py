"""Megatron-LM (`pretrain_gpt.py` under torchrun): the model's shape, the layout and the
checkpoint/requeue flags as Megatron's own arguments, so the planned job is the job that runs."""

from __future__ import annotations

from typing import Any, List, Sequence, Tuple

from ...plan import Layout
from ...render import PathArg
from .base import DEFAULT_SAVE_INTERVAL, Launcher, Options, given_keys

LAUNCHER = Launcher(
    "megatron",
    "torchrun",
    "Megatron-LM via torchrun, one task per node",
    default_entry=("pretrain_gpt.py",),
    aliases=(("--recompute-granularity", ("--recompute-activations",)),),
)


def args(layout: Layout, opts: Options, user_argv: Sequence[str] = ()) -> Tuple[str, ...]:
    return model_args(opts, user_argv) + layout_args(layout, opts, user_argv)


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
    if model.kv_heads and model.kv_heads != model.heads:
        add("--group-query-attention")
        add("--num-query-groups", model.kv_heads)
    if model.gated:
        add("--swiglu")
    if not seq:
        add("--seq-length", model.seq)
    add("--max-position-embeddings", max(seq or 0, model.seq))
    if not model.tied_embeddings:
        add("--untie-embeddings-and-output-weights")
    if model.is_moe:
        add("--num-experts", model.experts)
        add("--moe-router-topk", model.experts_active)
    return tuple(out)


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
    if opts.global_batch:
        out += ["--global-batch-size", str(opts.global_batch)]
    if opts.seq:
        out += ["--seq-length", str(opts.seq)]
    if layout.tp > 1:
        out.append("--sequence-parallel")
    if opts.fsdp:
        out.append("--use-torch-fsdp2")
    elif opts.zero != 0:
        out.append("--use-distributed-optimizer")
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
