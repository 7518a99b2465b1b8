"""Record the torchtitan catalogue the contract test checks against, from the real ConfigManager.

Run in an environment where torchtitan imports (it needs triton, datasets, tensorboard, ...,
about 2 GB, which is why CI reads the recorded data instead):

    pip install torchtitan==0.3.0 triton     # into a venv that shares torch 2.13 CPU
    python contrib/contract/record_torchtitan.py > tests/data/contract/torchtitan-0.3.0.json
    python contrib/contract/record_torchtitan.py --check argv.json   # parse emitted argvs for real

torchtitan main: the same venv, main's source tree first on PYTHONPATH (plus the imports main
added: grain==0.2.18, torch_checkpointing, etils[epath], portpicker, array_record, --no-deps):

    git -C torchtitan checkout b5bcd76c66d0acb1a08b176d9639425bc55e0b2a
    PYTHONPATH=torchtitan python contrib/contract/record_torchtitan.py --version main \
        --commit b5bcd76c66d0acb1a08b176d9639425bc55e0b2a > tests/data/contract/torchtitan-main.json

The catalogue holds facts only: every CLI option tyro builds (names, value kind, choices), the
activation-checkpoint subcommands, and per config function the defaults the adapter relies on.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from typing import Any, Dict, List

CONFIGS = {
    "llama3": ("llama3_debugmodel", "llama3_8b", "llama3_70b", "llama3_405b"),
    "deepseek_v3": ("deepseek_v3_debugmodel", "deepseek_v3_16b", "deepseek_v3_671b"),
}


# TrainingConfig fields the adapter writes: 0.3.0 counts sequences, main (b5bcd76c) counts tokens
TRAINING_FIELDS = (
    "steps",
    "seq_len",
    "local_batch_size",
    "global_batch_size",
    "max_context_length",
    "num_tokens_per_microbatch_per_dp_rank",
    "num_tokens_per_train_step",
)

PARALLEL_FIELDS = (
    "data_parallel_shard_degree",
    "data_parallel_replicate_degree",
    "tensor_parallel_degree",
    "pipeline_parallel_degree",
    "pipeline_parallel_schedule",
    "context_parallel_degree",
    "expert_parallel_degree",
    "expert_tensor_parallel_degree",
)


def _dataset(loader: Any) -> Any:
    """0.3.0: the dataset name; main: the Grain dataset recipe, by type and source (a nested config)."""
    ds = getattr(loader, "dataset", None)
    if ds is None or isinstance(ds, str):
        return ds
    return re.sub(r" at 0x[0-9a-f]+", "", repr(ds))[:300]  # function reprs carry their address


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
    # training fields of either version (0.3.0: sequences; main: token counts), those present
    training = {k: getattr(c.training, k) for k in TRAINING_FIELDS if hasattr(c.training, k)}
    # a config function may set degrees itself (deepseek_v3_671b: expert_parallel_degree): a degree
    # the command line leaves out is this one
    par = {k: getattr(c.parallelism, k) for k in PARALLEL_FIELDS if hasattr(c.parallelism, k)}
    facts = {
        "parallelism": par,
        "activation_checkpoint": ac,
        "hf_assets_path": c.hf_assets_path,
        "dataset": _dataset(c.dataloader),
        "training": training,
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


# The rules the adapter relies on that the parser does not enforce, with where they are (read from
# the source at the recorded version; facts, not code)
RULES: Dict[str, Dict[str, str]] = {
    "0.3.0": {
        "activation-checkpoint:<mode> is a tyro subcommand; options after it are refused": (
            "torchtitan/distributed/activation_checkpoint.py ActivationCheckpointingConfig (tyro.conf.subcommand)"
        ),
        "dp_shard*cp*tp divisible by ep": (
            "torchtitan/config/configs.py ParallelismConfig.expert_parallel_degree doc (efsdp = dp_shard*cp*tp/ep)"
        ),
        "pp>1 or ep>1 requires --training.disable_cuda_graphs": (
            "torchtitan/trainer.py Trainer.Config.__post_init__ (0.3.0): 'CUDA graphs do not support pipeline "
            "parallelism yet' / 'CUDA graphs support only expert parallel token dispatcher configurations without "
            "CPU synchronization'"
        ),
    },
    "main": {
        "activation-checkpoint:<mode> is a tyro subcommand; options after it are refused": (
            "torchtitan/distributed/activation_checkpoint.py ActivationCheckpointingConfig (tyro.conf.subcommand)"
        ),
        "dp_shard*cp*tp divisible by ep": (
            "torchtitan/config/configs.py ParallelismConfig.expert_parallel_degree doc (dp_shard*cp*tp == efsdp*ep)"
        ),
        "pp>1 or ep>1 requires --training.disable_cuda_graphs": (
            "torchtitan/trainer.py Trainer.Config._validate_cuda_graphs: 'CUDA graphs do not support pipeline "
            "parallelism yet' / EP only with MinimalAsyncEP or HybridEP non_blocking_capacity_factor"
        ),
        "num_tokens_per_train_step % (num_tokens_per_microbatch_per_dp_rank * num_pp_microbatches * dp) == 0": (
            "torchtitan/trainer.py Trainer.__init__ (gradient_accumulation_steps is the quotient; "
            "num_pp_microbatches counts only when pipeline_parallel_degree > 1)"
        ),
        "num_tokens_per_microbatch_per_dp_rank % ((tp if enable_sequence_parallel) * (2*cp if cp > 1)) == 0": (
            "torchtitan/trainer.py Trainer.__init__ 'The number of tokens per pipeline microbatch ... must be "
            "divisible' (enable_sequence_parallel defaults to True)"
        ),
        "the dataset is chosen only by the config function (no --dataloader.dataset/dataset_path)": (
            "torchtitan/components/data/loader.py GrainDataLoader.Config.dataset: Annotated[..., tyro.conf.Suppress]"
        ),
    },
}


def record(version: str = "", commit: str = "") -> Dict[str, Any]:
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
    version = version or torchtitan.__version__
    out: Dict[str, Any] = {
        "framework": "torchtitan",
        "version": version,
        "package_version": torchtitan.__version__,  # main's assets/version.txt lags the releases
        "recorded_by": "contrib/contract/record_torchtitan.py (tyro parser of ConfigManager)",
        "rules": RULES.get(version, {}),
        "options": options,
        "subcommands": subcommands,
        "configs": per_config,
    }
    if commit:
        out["commit"] = commit
    return out


def check(path: str) -> int:
    """Parse each recorded argv with the real ConfigManager; print one line per case."""
    from torchtitan.config.manager import ConfigManager

    cases = json.load(open(path))
    bad = 0
    for case_id, case in cases.items():
        # a case is an argv, or {"argv": [...], "want": [tp, pp, cp, dp, ep, seq, global_batch, micro_batch]}
        argv, want = (case["argv"], case.get("want")) if isinstance(case, dict) else (case, None)
        try:
            c = ConfigManager().parse_args(list(argv))
            p = c.parallelism
            if want:
                tp, pp, cp, dp, ep, seq, g, mb = want
                dp_got = p.data_parallel_shard_degree * p.data_parallel_replicate_degree
                mesh = (p.tensor_parallel_degree, p.pipeline_parallel_degree, p.context_parallel_degree, dp_got)
                assert mesh + (p.expert_parallel_degree,) == (tp, pp, cp, dp, ep), (mesh, want)
                t = c.training
                if hasattr(t, "max_context_length"):  # main: tokens
                    assert (t.max_context_length, t.num_tokens_per_microbatch_per_dp_rank) == (seq, mb * seq)
                    n_pp = p.num_pp_microbatches if pp > 1 else 1
                    step = t.num_tokens_per_train_step
                    step = step if step > 0 else mb * seq * n_pp * dp
                    assert step % (mb * seq * n_pp * dp) == 0 and (g % (mb * dp) or step == g * seq), (step, g)
                else:
                    assert t.seq_len == seq, (t.seq_len, seq)
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
                # batch: 0.3.0 sequences (local, global, seq_len); main tokens (microbatch, step, context)
                *[getattr(c.training, k) for k in TRAINING_FIELDS[1:] if hasattr(c.training, k)],
                getattr(p, "num_pp_microbatches", getattr(p, "pipeline_parallel_microbatch_size", None)),
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
    ap.add_argument("--version", default="", help="the label to record (default: torchtitan.__version__); main")
    ap.add_argument("--commit", default="", help="the upstream commit of the source tree recorded")
    a = ap.parse_args()
    if a.check:
        sys.exit(check(a.check))
    json.dump(record(a.version, a.commit), sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")
