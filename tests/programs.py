"""What a test job runs when it names no model: the user's program, or for the frameworks that
build the network themselves, what picks it (a Megatron-Bridge recipe, a torchtitan config
function) and its data. One table, so a launcher that starts to need an input changes one line."""

from __future__ import annotations

from typing import Dict, Tuple

COMMAND: Dict[str, Tuple[str, ...]] = {
    "torchrun": ("train.py",),
    "srun": ("python", "train.py"),
    "deepspeed": ("train.py",),
    "accelerate": ("train.py",),
    "nemo": ("--recipe", "llama31_8b_pretrain_config", "--dataset", "mock"),
    "torchtitan": ("--module", "llama3", "--config", "llama3_debugmodel", "--hf_assets_path", "./assets"),
}
