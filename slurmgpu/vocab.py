"""The name lists several layers share: one home each, so a new launcher or runtime is added once.

Imports nothing (the CLI reads these for its --help choices without loading anything else).
The submit policy's own launcher words (contrib/lua/policy/names.lua LAUNCHER_WORDS) are checked
against LAUNCHERS by tests/test_vocab.py.
"""

# How a job's program is started (slurmgpu.launchers.LAUNCHERS describes each, in this order).
LAUNCHERS = ("torchrun", "srun", "megatron", "deepspeed", "nemo", "torchtitan", "accelerate", "vllm", "sglang")

# Container runtimes a site or a job may name.
RUNTIMES = ("pyxis", "apptainer", "none")

# What the planner sizes a job for, and the other words users write for them (accepted everywhere
# -- slurmgpu.yaml, gen, plan, diff -- and read as the canonical name; help and completion list TASKS).
TASKS = ("pretrain", "finetune", "lora", "qlora", "inference")
TASK_ALIASES = (
    ("serve", "inference"),
    ("serving", "inference"),
    ("infer", "inference"),
    ("sft", "finetune"),
    ("full", "finetune"),
    ("fine-tune", "finetune"),
    ("train", "pretrain"),
)

# Layout degrees a job may pin (slurmgpu.yaml `parallel:`, --tp ..., the planner's pins).
PARALLEL_KEYS = ("tp", "pp", "dp", "cp", "ep", "micro_batch")
# what a program torchrun/srun/accelerate/DeepSpeed only starts may declare it runs itself (`implements:`)
PROGRAM_DEGREES = ("tp", "pp", "cp", "ep", "recompute")

# Number formats the planner sizes GEMMs and weights for.
PRECISIONS = ("bf16", "fp16", "fp8")

# Activation recomputation modes.
RECOMPUTE = ("none", "selective", "full")

# Inter-node fabric kinds of a node type (slurmgpu.fabric.FABRIC_TABLE has one entry for each).
FABRICS = ("infiniband", "roce", "efa", "slingshot", "ethernet")

# How a serving engine's GPUs are deployed (docs/serving.md): one server over the allocation,
# independent replicas behind the engine's router, or prefill and decode workers apart.
SERVE_MODES = ("aggregated", "router", "disaggregated")

# KV-cache transfer libraries between prefill and decode workers.
KV_TRANSFERS = ("nixl", "mooncake")

# The framework log formats `slurmgpu report` reads (slurmgpu.runs.logs.READERS, in this order).
REPORT_FORMATS = ("megatron", "torchtitan", "deepspeed", "hf-trainer", "vllm", "sglang")
