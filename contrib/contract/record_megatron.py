#!/usr/bin/env python3
"""Record Megatron-LM's argument catalogue (facts, no code) from a source snapshot.

Megatron-LM's `megatron/training/arguments.py` is not in the `megatron-core` wheel, so the
contract test cannot import it on the CI machine. This script builds Megatron's real argparse
parser from a checkout and writes what the test needs as data: every flag's name, destination,
action kind, nargs, type, choices and default, plus the `validate_args` / TransformerConfig rules
the slurmgpu adapter relies on, each located by the line of its assertion in that snapshot (a rule
whose anchor text is gone fails the recording: the rule must be re-read).

Usage (re-run when the pin moves; the test names the commit it checks against):

    git clone https://github.com/NVIDIA/Megatron-LM && git -C Megatron-LM checkout <commit>
    pip install --target /tmp/tri --no-deps triton      # megatron.core imports it at module level
    PYTHONPATH=/tmp/tri python3 contrib/contract/record_megatron.py Megatron-LM \\
        --out tests/data/contract/megatron-d98e8a64.json

Needs torch (CPU is enough). Nothing from the snapshot is copied into the output but flag
names, values and line numbers.
"""

from __future__ import annotations

import argparse
import enum
import json
import os
import subprocess
import sys
import typing
from typing import Any, Dict, List, Optional

# The rules the adapter relies on, restated (our words, not Megatron's code) as expressions over
# the parsed arguments plus `world_size`. `when` gates the rule; `require` must then hold.
# `anchor` is a text that must occur in `file` of the snapshot; its line is recorded as the source.
RULES: List[Dict[str, str]] = [
    {
        "id": "world-divisible",
        "file": "megatron/training/arguments.py",
        "anchor": "assert args.world_size % total_model_size == 0",
        "when": "True",
        "require": "world_size % (tensor_model_parallel_size * pipeline_model_parallel_size"
        " * context_parallel_size) == 0",
    },
    {
        "id": "global-batch-divisible",
        "file": "megatron/core/num_microbatches_calculator.py",
        "anchor": "assert global_batch_size % micro_batch_times_data_parallel_size == 0",
        "when": "global_batch_size is not None",
        "require": "global_batch_size % (micro_batch_size * world_size // (tensor_model_parallel_size"
        " * pipeline_model_parallel_size * context_parallel_size)) == 0",
    },
    {
        "id": "fsdp2-no-pp",
        "file": "megatron/training/arguments.py",
        "anchor": "'--use-torch-fsdp2 is not supported with pipeline parallelism'",
        "when": "use_torch_fsdp2",
        "require": "pipeline_model_parallel_size == 1",
    },
    {
        "id": "fsdp2-no-ep",
        "file": "megatron/training/arguments.py",
        "anchor": "'--use-torch-fsdp2 is not supported with expert parallelism'",
        "when": "use_torch_fsdp2",
        "require": "expert_model_parallel_size == 1",
    },
    {
        "id": "fsdp2-no-distributed-optimizer",
        "file": "megatron/training/arguments.py",
        "anchor": '"--use-torch-fsdp2 is not supported with MCore\'s distributed optimizer"',
        "when": "use_torch_fsdp2",
        "require": "not use_distributed_optimizer",
    },
    {
        "id": "fsdp2-no-grad-acc-fusion",
        "file": "megatron/training/arguments.py",
        "anchor": "'--use-torch-fsdp2 is not supported with gradient accumulation fusion'",
        "when": "use_torch_fsdp2",
        "require": "not gradient_accumulation_fusion",
    },
    {
        "id": "fsdp2-ckpt-format",
        "file": "megatron/training/arguments.py",
        "anchor": "'--use-torch-fsdp2 requires --ckpt-format torch_dist or torch_dcp'",
        "when": "use_torch_fsdp2",
        "require": "ckpt_format in ('torch_dist', 'torch_dcp')",
    },
    {
        "id": "fsdp2-untied",
        "file": "megatron/training/arguments.py",
        "anchor": "'--use-torch-fsdp2 requires --untie-embeddings-and-output-weights'",
        "when": "use_torch_fsdp2",
        "require": "untie_embeddings_and_output_weights",
    },
    {
        "id": "fsdp2-no-fp16",
        "file": "megatron/training/arguments.py",
        "anchor": "'--use-torch-fsdp2 not supported with fp16 yet'",
        "when": "use_torch_fsdp2",
        "require": "not fp16",
    },
    {
        "id": "vpp-one-spelling",
        "file": "megatron/training/arguments.py",
        "anchor": "'No more than one of the following arguments can be set at the same time: '",
        "when": "True",
        "require": "(num_layers_per_virtual_pipeline_stage is not None) + (num_virtual_stages_per_pipeline_rank"
        " is not None) + (pipeline_model_parallel_layout is not None) <= 1",
    },
    {
        "id": "pp-divides-layers",
        "file": "megatron/training/arguments.py",
        "anchor": "'Number of layers should be divisible by the pipeline-model-parallel size'",
        "when": "pipeline_model_parallel_layout is None and num_layers_per_virtual_pipeline_stage is None"
        " and num_virtual_stages_per_pipeline_rank is None and decoder_first_pipeline_num_layers is None"
        " and decoder_last_pipeline_num_layers is None",
        "require": "num_layers % pipeline_model_parallel_size == 0",
    },
    {
        "id": "uneven-needs-virtual-stages-flag",
        "file": "megatron/training/arguments.py",
        "anchor": "'please use --num-virtual-stages-per-pipeline-rank to specify virtual pipeline",
        "when": "num_layers_per_virtual_pipeline_stage is not None",
        "require": "decoder_first_pipeline_num_layers is None and decoder_last_pipeline_num_layers is None"
        " and num_layers % pipeline_model_parallel_size == 0 and (num_layers // pipeline_model_parallel_size)"
        " % num_layers_per_virtual_pipeline_stage == 0",
    },
    {
        "id": "interleaved-needs-pp",
        "file": "megatron/training/arguments.py",
        "anchor": "'When interleaved schedule is used, pipeline-model-parallel size '",
        "when": "(num_virtual_stages_per_pipeline_rank or 1) > 1 or num_layers_per_virtual_pipeline_stage is not None",
        "require": "pipeline_model_parallel_size > 1 if overlap_p2p_comm else pipeline_model_parallel_size > 2",
    },
    {
        "id": "uneven-middle-divisible",
        "file": "megatron/core/transformer/transformer_config.py",
        "anchor": 'f"the middle pipeline model parallel size {pipeline_parallel_size}"',
        "when": "decoder_first_pipeline_num_layers is not None or decoder_last_pipeline_num_layers is not None",
        "require": "_middle_ok(num_layers, pipeline_model_parallel_size, decoder_first_pipeline_num_layers,"
        " decoder_last_pipeline_num_layers, num_virtual_stages_per_pipeline_rank)",
    },
    {
        "id": "layout-stages",
        "file": "megatron/core/transformer/pipeline_parallel_layer_layout.py",
        "anchor": 'f"Number of decoder layers {self.flatten_layout.count(LayerType.decoder)}"',
        "when": "pipeline_model_parallel_layout is not None",
        "require": "_layout_ok(pipeline_model_parallel_layout, num_layers, pipeline_model_parallel_size)",
    },
    {
        "id": "bf16-xor-fp16",
        "file": "megatron/training/arguments.py",
        "anchor": "        assert not args.bf16\n",
        "when": "fp16",
        "require": "not bf16",
    },
    {
        "id": "ep-needs-experts",
        "file": "megatron/training/arguments.py",
        "anchor": '"Number of experts should be a multiple of expert model parallel_size."',
        "when": "expert_model_parallel_size > 1",
        "require": "num_experts is not None and num_experts % expert_model_parallel_size == 0",
    },
    {
        "id": "mla-not-gqa",
        "file": "megatron/training/arguments.py",
        "anchor": '"Group query attention is mutually exclusive with multi latent attention."',
        "when": "multi_latent_attention",
        "require": "not group_query_attention",
    },
    {
        "id": "selective-no-method",
        "file": "megatron/training/arguments.py",
        "anchor": "'recompute method is not yet supported for '",
        "when": "recompute_granularity == 'selective'",
        "require": "recompute_method is None",
    },
    {
        # Megatron only warns and turns it off; the adapter must not emit what is discarded.
        "id": "sequence-parallel-needs-tp",
        "file": "megatron/training/arguments.py",
        "anchor": '"Disabling sequence parallelism because tensor model parallelism is disabled"',
        "when": "sequence_parallel",
        "require": "tensor_model_parallel_size > 1",
    },
    {
        "id": "heads-divisible-by-tp",
        "file": "megatron/core/transformer/transformer_config.py",
        "anchor": "if self.num_attention_heads % self.tensor_model_parallel_size != 0:",
        "when": "True",
        "require": "num_attention_heads % tensor_model_parallel_size == 0",
    },
    {
        "id": "query-groups-divisible-by-tp",
        "file": "megatron/core/transformer/transformer_config.py",
        "anchor": "self.num_query_groups % self.tensor_model_parallel_size != 0",
        "when": "group_query_attention",
        "require": "num_query_groups % tensor_model_parallel_size == 0",
    },
    {
        "id": "moe-layer-freq-length",
        "file": "megatron/core/transformer/transformer_config.py",
        "anchor": "moe_layer_freq: Union[int, List[int]] = 1",
        "when": "isinstance(moe_layer_freq, list)",
        "require": "len(moe_layer_freq) == num_layers",
    },
]


def _install_shims() -> None:
    """Python < 3.12 lacks typing.override, which megatron.training.models imports."""
    if not hasattr(typing, "override"):
        typing.override = lambda f: f  # type: ignore[attr-defined]


def _jsonable(v: Any) -> Any:
    if isinstance(v, enum.Enum):
        return v.name
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    return repr(v)


def _kind(action: argparse.Action) -> str:
    name = type(action).__name__.lstrip("_")
    return {
        "StoreAction": "store",
        "StoreTrueAction": "store_true",
        "StoreFalseAction": "store_false",
        "StoreConstAction": "store_const",
        "AppendAction": "append",
        "CountAction": "count",
        "BooleanOptionalAction": "boolean_optional",
    }.get(name, name)


def _type(action: argparse.Action) -> Optional[str]:
    t = action.type
    if t is None:
        return None
    if t in (int, float, str):
        return t.__name__
    if action.choices and all(isinstance(c, enum.Enum) for c in action.choices):
        return "enum"  # given by member name (SIGTERM, flash, ...)
    return getattr(t, "__name__", repr(t))


def record(snapshot: str, commit: Optional[str]) -> Dict[str, Any]:
    sys.path.insert(0, snapshot)
    _install_shims()
    from megatron.training.arguments import add_megatron_arguments  # type: ignore[import-not-found]

    parser = argparse.ArgumentParser(allow_abbrev=False)
    add_megatron_arguments(parser)
    args: List[Dict[str, Any]] = []
    for a in parser._actions:
        if not a.option_strings or isinstance(a, argparse._HelpAction):
            continue
        entry: Dict[str, Any] = {"flags": list(a.option_strings), "dest": a.dest, "kind": _kind(a)}
        if a.nargs is not None and entry["kind"] not in (
            "store_true",
            "store_false",
            "store_const",
            "boolean_optional",
        ):
            entry["nargs"] = a.nargs
        t = _type(a) if entry["kind"] != "boolean_optional" else None
        if t:
            entry["type"] = t
        if a.choices is not None:
            entry["choices"] = [_jsonable(c) for c in a.choices]
        entry["default"] = _jsonable(a.default)
        if entry["kind"] == "store_const":
            entry["const"] = _jsonable(a.const)
        args.append(entry)
    rules = []
    for r in RULES:
        path = os.path.join(snapshot, r["file"])
        with open(path) as f:
            text = f.read()
        at = text.find(r["anchor"])
        if at < 0:
            raise SystemExit("rule %s: anchor not found in %s; re-read the rule" % (r["id"], r["file"]))
        line = text.count("\n", 0, at) + 1
        rules.append(
            {"id": r["id"], "source": "%s L%d" % (r["file"], line), "when": r["when"], "require": r["require"]}
        )
    if commit is None:
        try:
            commit = subprocess.run(
                ["git", "-C", snapshot, "rev-parse", "HEAD"], capture_output=True, text=True, check=True
            ).stdout.strip()
        except (OSError, subprocess.CalledProcessError):
            commit = "unknown"
    version = {}
    with open(os.path.join(snapshot, "megatron/core/package_info.py")) as f:
        exec(
            compile(
                "\n".join(ln for ln in f.read().splitlines() if ln.startswith(("MAJOR", "MINOR", "PATCH"))),
                "pi",
                "exec",
            ),
            version,
        )
    return {
        "framework": "Megatron-LM",
        "repository": "https://github.com/NVIDIA/Megatron-LM",
        "commit": commit,
        "megatron_core": "%d.%d.%d" % (version["MAJOR"], version["MINOR"], version["PATCH"]),
        "recorded_by": "contrib/contract/record_megatron.py",
        "parser": "megatron.training.arguments.add_megatron_arguments(ArgumentParser(allow_abbrev=False))",
        "arguments": args,
        "rules": rules,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("snapshot", help="a Megatron-LM checkout (the pinned commit)")
    ap.add_argument("--commit", help="commit id to record (default: git rev-parse HEAD in the snapshot)")
    ap.add_argument("--date", default="", help="commit date to record (YYYY-MM-DD)")
    ap.add_argument("--out", default="-", help="output JSON file (default: stdout)")
    ns = ap.parse_args()
    cat = record(os.path.abspath(ns.snapshot), ns.commit)
    if ns.date:
        cat["commit_date"] = ns.date
    text = json.dumps(cat, indent=1, sort_keys=False) + "\n"
    if ns.out == "-":
        sys.stdout.write(text)
    else:
        with open(ns.out, "w") as f:
            f.write(text)
        print(
            "%s: %d arguments, %d rules, commit %s" % (ns.out, len(cat["arguments"]), len(cat["rules"]), cat["commit"])
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
