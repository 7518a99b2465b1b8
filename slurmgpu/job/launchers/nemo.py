"""NeMo: the layout as Hydra overrides of its GPT pretraining entry point."""

from __future__ import annotations

from typing import List, Sequence, Tuple

from ...plan import Layout
from .base import Launcher, Options

LAUNCHER = Launcher(
    "nemo",
    "direct",
    "NeMo (Hydra overrides), one task per GPU",
    default_entry=("python", "/opt/NeMo/examples/nlp/language_modeling/megatron_gpt_pretraining.py"),
)


def args(layout: Layout, opts: Options, user_argv: Sequence[str] = ()) -> Tuple[str, ...]:
    out: List[str] = [
        "trainer.num_nodes=%d" % layout.nodes,
        "trainer.devices=%d" % layout.gpus_per_node,
        "model.tensor_model_parallel_size=%d" % layout.tp,
        "model.pipeline_model_parallel_size=%d" % layout.pp,
        "model.context_parallel_size=%d" % layout.cp,
        "model.expert_model_parallel_size=%d" % layout.ep,
        "model.micro_batch_size=%d" % layout.micro_batch,
        "model.sequence_parallel=%s" % ("true" if layout.tp > 1 else "false"),
    ]
    if opts.global_batch:
        out.append("model.global_batch_size=%d" % opts.global_batch)
    if opts.seq:
        out.append("model.encoder_seq_length=%d" % opts.seq)
    return tuple(out)
