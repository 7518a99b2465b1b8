"""Record the torchtitan catalogue the contract test checks against, from the real ConfigManager.

Run in an environment where torchtitan imports (it needs triton, datasets, tensorboard, ...,
about 2 GB, which is why CI reads the recorded data instead):

    pip install torchtitan==0.3.0 triton     # into a venv that shares torch 2.13 CPU
    python contrib/contract/record_torchtitan.py > tests/data/contract/torchtitan-0.3.0.json
    python contrib/contract/record_torchtitan.py --check argv.json   # parse emitted argvs for real

The catalogue holds facts only: every CLI option tyro builds (names, value kind, choices), the
activation-checkpoint subcommands, and per config function the defaults the adapter relies on.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, Dict, List

CONFIGS = {
    "llama3": ("llama3_debugmodel", "llama3_8b", "llama3_70b", "llama3_405b"),
    "deepseek_v3": ("deepseek_v3_debugmodel", "deepseek_v3_16b", "deepseek_v3_671b"),
}


def _options(module: str, config: str) -> Dict[str, Any]:
    import tyro
    from torchtitan.config.manager import ConfigManager, custom_registry

    loaded, _ = ConfigManager()._load_config(["--module", module, "--config", config])
    parser = tyro.extras.get_parser(type(loaded), default=loaded, registry=custom_registry)
    opts: Dict[str, Any] = {}
    subcommands: List[str] = []
    for a in parser._actions:
        if a.option_strings and a.option_strings[0] not in ("-h",):
            flag = a.option_strings[0]
            opts[flag] = {
                "negation": [o for o in a.option_strings[1:] if o.startswith("--")] or None,
                "metavar": None if a.metavar is None else str(a.metavar),
                "choices": None if not a.choices else [str(c) for c in a.choices],
            }
        if hasattr(a, "_name_parser_map"):
            subcommands += list(a._name_parser_map)
    c = loaded
    ac = type(c.activation_checkpoint).__qualname__ if c.activation_checkpoint is not None else None
    spec = c.model_spec
    facts = {
        "activation_checkpoint": ac,
        "hf_assets_path": c.hf_assets_path,
        "dataset": c.dataloader.dataset,
        "steps": c.training.steps,
        "seq_len": c.training.seq_len,
        "local_batch_size": c.training.local_batch_size,
        "model": {"name": spec.name, "flavor": spec.flavor} if hasattr(spec, "flavor") else {"name": str(spec.name)},
        "model_config": _model_dims(spec),
    }
    return {"options": opts, "subcommands": sorted(set(subcommands)), "defaults": facts}


def _model_dims(spec: Any) -> Dict[str, Any]:
    """The shape the config function builds (layers, width, heads, experts), for the parsed-back check."""
    mc = spec.model
    layers = list(getattr(mc, "layers", None) or [])
    out: Dict[str, Any] = {"dim": mc.dim, "vocab": mc.vocab_size, "layers": len(layers)}
    if layers:
        attn = layers[-1].attention
        out["heads"] = getattr(attn, "n_heads", None)
        out["kv_heads"] = getattr(attn, "n_kv_heads", None)
        out["kv_lora_rank"] = getattr(attn, "kv_lora_rank", None)
        moe = getattr(layers[-1], "moe", None)
        out["experts"] = getattr(moe, "num_experts", 0) if moe is not None else 0
    return out


def record() -> Dict[str, Any]:
    import torchtitan

    per_config: Dict[str, Any] = {}
    options: Dict[str, Any] = {}
    subcommands: List[str] = []
    for module, names in CONFIGS.items():
        for name in names:
            try:
                got = _options(module, name)
            except (ImportError, ValueError, AssertionError) as e:  # llama3_405b builds float8 (SM89+) at load
                per_config["%s:%s" % (module, name)] = {"load_error": "%s: %s" % (type(e).__name__, str(e)[:160])}
                continue
            for k, v in got["options"].items():
                options.setdefault(k, v)
            subcommands = sorted(set(subcommands) | set(got["subcommands"]))
            per_config["%s:%s" % (module, name)] = dict(got["defaults"], options=sorted(got["options"]))
    return {
        "framework": "torchtitan",
        "version": torchtitan.__version__,
        "recorded_by": "contrib/contract/record_torchtitan.py (tyro parser of ConfigManager)",
        "options": options,
        "subcommands": subcommands,
        "configs": per_config,
    }


def check(path: str) -> int:
    """Parse each recorded argv with the real ConfigManager; print one line per case."""
    from torchtitan.config.manager import ConfigManager

    cases = json.load(open(path))
    bad = 0
    for case_id, argv in cases.items():
        try:
            c = ConfigManager().parse_args(list(argv))
            p = c.parallelism
            print(
                "ok",
                case_id,
                p.tensor_parallel_degree,
                p.pipeline_parallel_degree,
                p.context_parallel_degree,
                p.data_parallel_shard_degree,
                p.data_parallel_replicate_degree,
                p.expert_parallel_degree,
                c.training.mixed_precision_param,
                type(c.activation_checkpoint).__qualname__,
            )
        except BaseException as e:  # noqa: BLE001 - tyro exits with SystemExit on a bad flag
            bad += 1
            print("FAIL", case_id, type(e).__name__, str(e)[:200])
    print("checked %d, failed %d" % (len(cases), bad))
    return 1 if bad else 0


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", metavar="ARGV_JSON", help="parse {case: argv} with the real ConfigManager")
    a = ap.parse_args()
    if a.check:
        sys.exit(check(a.check))
    json.dump(record(), sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")
