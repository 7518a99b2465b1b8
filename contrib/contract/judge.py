#!/usr/bin/env python3
"""The frameworks' own code as the judge of a generated launch line (runs in .contract-env).

One request per stdin line (JSON), one answer per stdout line:

  {"kind": "bridge", "argv": [run_recipe.py's arguments], "world": 64, "gpu": GPU}
  {"kind": "titan", "argv": [torchtitan.train's arguments], "world": 64, "gpu": GPU}
  {"kind": "sglang_router" | "vllm_router", "argv": [the router's arguments], "world": 0}

where GPU is {"vendor": "nvidia", "capability": [9, 0], "name": "NVIDIA H100", "memory_gb": 80},

and answers {"ok": true, "values": {...}} with what the framework built, or {"ok": false,
"error": "..."} with the exception the framework raised. Heavy imports happen once, on the first
request of a kind, so a pytest session pays them once (tests/contract_judges.py).

bridge: what Megatron-Bridge 0.6.0's scripts/training/run_recipe.py does for a library recipe
(that script is not in the PyPI wheel; its steps, in order, are: load the recipe by name, build the
--dataset preset, apply the KEY=VALUE overrides with Bridge's process_config_with_overrides, rebuild
a recipe-owned pipeline layout when PP/VP were overridden and the layout was not, copy the
dataset's seq_length to the model), then its --dry-run step: runtime_config_update with the job's
WORLD_SIZE, which resolves the mixed-precision recipe and runs ConfigContainer.validate() and
TransformerConfig's __post_init__ checks. The layers each pipeline rank builds come from
megatron-core's get_num_layers_to_build with that rank set in parallel_state.

titan: torchtitan 0.3.0's ConfigManager.parse_args (its config function, tyro, Trainer.Config
checks), then what the trainer derives before it touches a GPU: ParallelDims, the layers per
pipeline stage (pipeline_parallel._get_pipeline_metadata / _generate_llm_fqn_per_model_part /
_get_pp_rank_to_stage_indices_mapping), the model's module names (the model built on the meta
device, no memory) and the float8 layers its converters put in.

Stubs (GPU-only pieces): contrib/contract/stubs.py.
"""

from __future__ import annotations

import argparse
import dataclasses
import io
import json
import os
import sys
import tempfile
import traceback
from contextlib import redirect_stdout
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

sys.path.insert(0, str(Path(__file__).resolve().parent))
import stubs  # noqa: E402

HF_CONFIGS = Path(__file__).resolve().parents[2] / "tests" / "data" / "contract" / "hf_configs.json"


def _hf_cache(path: Path) -> str:
    """An offline Hugging Face Hub cache holding the recorded config.json files."""
    root = Path(tempfile.mkdtemp(prefix="slurmgpu-hf-"))
    for repo, cfg in json.loads(path.read_text()).items():
        if repo.startswith("_"):
            continue
        d = root / "hub" / ("models--" + repo.replace("/", "--"))
        (d / "snapshots" / "recorded").mkdir(parents=True)
        (d / "refs").mkdir()
        (d / "refs" / "main").write_text("recorded")
        (d / "snapshots" / "recorded" / "config.json").write_text(json.dumps(cfg))
    return str(root)


# ---------------------------------------------------------------------------- Megatron-Bridge

_BRIDGE: Dict[str, Any] = {}


def _bridge_imports() -> Dict[str, Any]:
    if not _BRIDGE:
        os.environ.setdefault("HF_HOME", _hf_cache(HF_CONFIGS))
        os.environ["HF_HUB_OFFLINE"] = "1"
        os.environ["TRANSFORMERS_OFFLINE"] = "1"
        stubs.python_shims()
        stubs.transformer_engine()
        import megatron.bridge.recipes as recipes
        from megatron.bridge.recipes.utils.dataset_utils import build_dataset_config, dataset_train_mode
        from megatron.bridge.training.config import runtime_config_update
        from megatron.bridge.training.utils.omegaconf_utils import process_config_with_overrides
        from megatron.bridge.utils.activation_map import callable_to_str
        from megatron.core import parallel_state
        from megatron.core.transformer.transformer_block import get_num_layers_to_build

        _BRIDGE.update(
            recipes=recipes,
            build_dataset_config=build_dataset_config,
            dataset_train_mode=dataset_train_mode,
            runtime_config_update=runtime_config_update,
            process_config_with_overrides=process_config_with_overrides,
            callable_to_str=callable_to_str,
            parallel_state=parallel_state,
            get_num_layers_to_build=get_num_layers_to_build,
        )
    return _BRIDGE


def _run_recipe_args(argv: List[str]) -> Tuple[argparse.Namespace, List[str]]:
    """run_recipe.py's selection arguments, then every leftover must be KEY=VALUE (its rule)."""
    p = argparse.ArgumentParser(allow_abbrev=False, exit_on_error=False)
    sel = p.add_mutually_exclusive_group(required=True)
    sel.add_argument("--model")
    sel.add_argument("--recipe")
    p.add_argument("--mode", choices=["pretrain", "sft", "lora", "dora"])
    p.add_argument("--dataset")
    args, unknown = p.parse_known_args(argv)
    for value in unknown:
        if value.startswith("-"):
            raise ValueError("run_recipe.py: Unknown option: %s" % value)
        if "=" not in value:
            raise ValueError("run_recipe.py: Expected override in KEY=VALUE form, got %r" % value)
    return args, unknown


def _find_recipe(recipes: Any, name: str) -> Any:
    """run_recipe.py's find_library_recipe: an attribute of megatron.bridge.recipes, else of one of
    its <family>.h100 modules (where the hardware-named recipes live)."""
    import importlib
    import pkgutil

    fn = getattr(recipes, name, None)
    if callable(fn):
        return fn
    for info in pkgutil.iter_modules(recipes.__path__):
        if not info.ispkg or info.name.startswith("_") or info.name == "utils":
            continue
        try:
            mod = importlib.import_module("%s.%s.h100" % (recipes.__name__, info.name))
        except ModuleNotFoundError:
            continue
        fn = getattr(mod, name, None)
        if callable(fn):
            return fn
    raise AttributeError("Recipe '%s' not found in megatron.bridge.recipes or megatron.bridge.perf_recipes." % name)


def judge_bridge(argv: List[str], world: int) -> Dict[str, Any]:
    B = _bridge_imports()
    args, overrides = _run_recipe_args(argv)
    name = args.recipe or "%s_pretrain_config" % args.model
    cfg = _find_recipe(B["recipes"], name)()
    if args.dataset is not None:
        cfg.dataset = B["build_dataset_config"](cfg, args.dataset)
        if B["dataset_train_mode"](cfg.dataset) != "pretrain":
            raise ValueError("Mode 'pretrain' is incompatible with dataset '%s'." % args.dataset)
    cfg = B["process_config_with_overrides"](cfg, cli_overrides=overrides or None)
    keys = {o.lstrip("+~").split("=", 1)[0] for o in overrides}
    topology = {"model.pipeline_model_parallel_size", "model.virtual_pipeline_model_parallel_size"}
    if keys & topology and "model.pipeline_model_parallel_layout" not in keys:
        builder = getattr(cfg.model, "_pipeline_model_parallel_layout_builder", None)
        if builder is not None:
            cfg.model.pipeline_model_parallel_layout = builder(
                cfg.model.pipeline_model_parallel_size, cfg.model.virtual_pipeline_model_parallel_size
            )
    seq = getattr(cfg.dataset, "seq_length", None) or getattr(cfg.dataset, "sequence_length", None)
    if seq is not None and cfg.model.seq_length != seq:
        cfg.model.seq_length = seq
    saved = {k: os.environ.get(k) for k in ("WORLD_SIZE", "RANK")}
    os.environ.update(WORLD_SIZE=str(world), RANK="0")
    try:
        B["runtime_config_update"](cfg)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return _bridge_values(cfg, B)


def _plain(v: Any) -> Any:
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    if hasattr(v, "name") and hasattr(v, "value"):  # enums
        return str(v.name)
    return str(v)


MODEL_FIELDS = (
    "num_layers hidden_size num_attention_heads num_query_groups kv_channels ffn_hidden_size vocab_size "
    "seq_length position_embedding_type rotary_base rope_scaling rope_scaling_factor gated_linear_unit "
    "add_bias_linear add_qkv_bias share_embeddings_and_output_weights normalization layernorm_epsilon "
    "num_moe_experts moe_router_topk moe_ffn_hidden_size moe_shared_expert_intermediate_size moe_layer_freq "
    "moe_router_score_function moe_router_topk_scaling_factor moe_router_num_groups moe_router_group_topk "
    "moe_router_enable_expert_bias multi_latent_attention q_lora_rank kv_lora_rank qk_head_dim "
    "qk_pos_emb_head_dim v_head_dim rotary_scaling_factor original_max_position_embeddings beta_fast beta_slow "
    "mscale mscale_all_dim mtp_num_layers window_size attn_logit_softcapping final_logit_softcapping "
    "query_pre_attn_scalar tensor_model_parallel_size pipeline_model_parallel_size "
    "virtual_pipeline_model_parallel_size context_parallel_size expert_model_parallel_size "
    "expert_tensor_parallel_size sequence_parallel recompute_granularity recompute_method recompute_num_layers "
    "bf16 fp16 fp8 fp8_recipe params_dtype num_layers_in_first_pipeline_stage num_layers_in_last_pipeline_stage"
).split()


def _bridge_values(cfg: Any, B: Dict[str, Any]) -> Dict[str, Any]:
    m = cfg.model
    model = {f: _plain(getattr(m, f, None)) for f in MODEL_FIELDS}
    model["activation"] = B["callable_to_str"](m.activation_func) or getattr(m.activation_func, "__name__", None)
    model["layout"] = str(m.pipeline_model_parallel_layout) if m.pipeline_model_parallel_layout is not None else None
    ps, build = B["parallel_state"], B["get_num_layers_to_build"]
    pp = m.pipeline_model_parallel_size
    vp = m.virtual_pipeline_model_parallel_size or 1
    stages: List[List[int]] = []
    ps.set_pipeline_model_parallel_world_size(pp)
    ps.set_virtual_pipeline_model_parallel_world_size(vp if vp > 1 else None)
    try:
        for r in range(pp):
            ps.set_pipeline_model_parallel_rank(r)
            stages.append([build(m, vp_stage=v if vp > 1 else None, pp_rank=r) for v in range(vp)])
    finally:
        ps.set_pipeline_model_parallel_world_size(None)
        ps.set_virtual_pipeline_model_parallel_world_size(None)
        ps.set_pipeline_model_parallel_rank(None)
    ds, tok = cfg.dataset, cfg.tokenizer
    blend = getattr(ds, "blend", None)
    return {
        "model": model,
        "stages": stages,
        "train": {
            "train_iters": cfg.train.train_iters,
            "global_batch_size": cfg.train.global_batch_size,
            "micro_batch_size": cfg.train.micro_batch_size,
            "exit_duration_in_mins": getattr(cfg.train, "exit_duration_in_mins", None),
        },
        "optimizer": {
            "lr": cfg.optimizer.lr,
            "min_lr": cfg.optimizer.min_lr,
            "use_distributed_optimizer": cfg.optimizer.use_distributed_optimizer,
            "use_precision_aware_optimizer": cfg.optimizer.use_precision_aware_optimizer,
            "main_params_dtype": _plain(getattr(cfg.optimizer, "main_params_dtype", None)),
            "exp_avg_dtype": _plain(getattr(cfg.optimizer, "exp_avg_dtype", None)),
            "exp_avg_sq_dtype": _plain(getattr(cfg.optimizer, "exp_avg_sq_dtype", None)),
        },
        "scheduler": {
            "lr_warmup_iters": cfg.scheduler.lr_warmup_iters,
            "lr_decay_iters": cfg.scheduler.lr_decay_iters,
        },
        "dataset": {
            "type": type(ds).__name__,
            "mock": bool(getattr(ds, "mock", False)),
            "blend": _plain(blend[0]) if blend else None,
            "seq_length": getattr(ds, "seq_length", None),
        },
        "tokenizer": {
            "type": tok.tokenizer_type,
            "model": tok.tokenizer_model,
            "vocab_size": getattr(tok, "vocab_size", None),
        },
        "checkpoint": {
            "save": cfg.checkpoint.save,
            "load": cfg.checkpoint.load,
            "save_interval": cfg.checkpoint.save_interval,
        },
        "ddp": {"use_distributed_optimizer": cfg.ddp.use_distributed_optimizer},
        "mixed_precision": {
            "bf16": getattr(cfg.mixed_precision, "bf16", None),
            "fp16": getattr(cfg.mixed_precision, "fp16", None),
            "fp8": getattr(cfg.mixed_precision, "fp8", None),
            "fp8_recipe": getattr(cfg.mixed_precision, "fp8_recipe", None),
        },
        "data_parallel_size": getattr(cfg, "data_parallel_size", None),
    }


# ---------------------------------------------------------------------------- torchtitan

_TITAN: Dict[str, Any] = {}
_FQNS: Dict[str, List[str]] = {}


def _titan_imports() -> Dict[str, Any]:
    if not _TITAN:
        import torchtitan.components.quantization.float8 as f8
        import torchtitan.tools.utils as tu

        for mod in (tu, f8):
            mod.has_cuda_capability = stubs.has_cuda_capability
            mod.has_rocm_capability = stubs.has_rocm_capability
        from torchtitan.config import ConfigManager
        from torchtitan.distributed import pipeline_parallel as pp
        from torchtitan.distributed.parallel_dims import ParallelDims

        _TITAN.update(ConfigManager=ConfigManager, pp=pp, ParallelDims=ParallelDims, float8=f8)
    return _TITAN


def _walk(obj: Any, seen: Optional[set] = None) -> Any:
    """Every dataclass config object under obj (lists included)."""
    seen = set() if seen is None else seen
    if id(obj) in seen:
        return
    seen.add(id(obj))
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        yield obj
        for f in dataclasses.fields(obj):
            yield from _walk(getattr(obj, f.name, None), seen)
    elif isinstance(obj, (list, tuple)):
        for x in obj:
            yield from _walk(x, seen)


def _module_names(key: str, model_config: Any) -> List[str]:
    """The model's top-level and layer module names (built on the meta device: no memory)."""
    if key not in _FQNS:
        import torch

        with torch.device("meta"):
            model = model_config.build()
        names = [n for n, _ in model.named_children()]
        layers = getattr(model, "layers", None)
        if layers is not None:
            names += ["layers.%s" % n for n, _ in layers.named_children()]
        _FQNS[key] = names
    return _FQNS[key]


def judge_titan(argv: List[str], world: int) -> Dict[str, Any]:
    T = _titan_imports()
    try:
        cfg = T["ConfigManager"]().parse_args(list(argv))
    except SystemExit as e:  # tyro prints its reason to stderr and exits
        raise ValueError("torchtitan refused the arguments (tyro exit %s)" % e.code) from None
    par, tr = cfg.parallelism, cfg.training
    dims = T["ParallelDims"].from_config(par, world)
    mc = cfg.model_spec.model
    key = "%s:%s" % (cfg.model_spec.name, cfg.model_spec.flavor)
    layer = mc.layers[-1]
    attn = layer.attention
    moe = getattr(layer, "moe", None)
    rope = getattr(attn, "rope", None)
    float8 = sum(1 for c in _walk(mc) if type(c).__qualname__ == "Float8Linear.Config")
    dense = next((lay.feed_forward for lay in mc.layers if getattr(lay, "feed_forward", None) is not None), None)
    model = {
        "layers": len(mc.layers),
        "dim": mc.dim,
        "vocab_size": mc.vocab_size,
        "heads": attn.n_heads,
        "kv_heads": getattr(attn, "n_kv_heads", None),
        "kv_lora_rank": getattr(attn, "kv_lora_rank", None),
        "q_lora_rank": getattr(attn, "q_lora_rank", None),
        "experts": moe.num_experts if moe is not None else 0,
        "norm_eps": layer.attention_norm.eps,
        "rope_theta": getattr(rope, "theta", None),
        "rope_scaling": getattr(rope, "scaling", None),
        "rope_factor": getattr(
            rope, "rope_factor" if getattr(rope, "scaling", None) == "yarn" else "scaling_factor", None
        ),
        "ffn": dense.w1.out_features if dense is not None else None,
        "dense_layers": sum(1 for lay in mc.layers if getattr(lay, "moe", None) is None),
        "weight_tying": getattr(mc, "enable_weight_tying", None),
        "float8_layers": float8,
    }
    stages: List[List[int]] = []
    if dims.pp > 1:
        P = T["pp"]
        n_virtual, n_layers, w_in, w_out = P._get_pipeline_metadata(dims, par, mc)
        parts = par.module_fqns_per_model_part or P._generate_llm_fqn_per_model_part(n_virtual, n_layers, w_in, w_out)
        known = set(_module_names(key, mc))
        unknown = sorted({n for part in parts for n in part} - known)
        if unknown:
            raise ValueError("torchtitan: module names not in the model: %s" % ", ".join(unknown[:5]))
        for r in range(dims.pp):
            idx = P._get_pp_rank_to_stage_indices_mapping(r, dims.pp, par.pipeline_parallel_schedule, len(parts))
            stages.append([sum(1 for n in parts[i] if n.startswith("layers.")) for i in idx])
    opt = cfg.optimizer
    lr = None
    groups = getattr(opt, "param_groups", None)
    if groups:
        lr = (getattr(groups[0], "optimizer_kwargs", None) or {}).get("lr")
    return {
        "model": model,
        "stages": stages,
        "dims": {
            "dp_shard": dims.dp_shard,
            "dp_replicate": dims.dp_replicate,
            "tp": dims.tp,
            "pp": dims.pp,
            "cp": dims.cp,
            "ep": dims.ep,
        },
        "schedule": par.pipeline_parallel_schedule,
        "training": {
            "steps": tr.steps,
            "seq_len": tr.seq_len,
            "local_batch_size": tr.local_batch_size,
            "global_batch_size": tr.global_batch_size,
            "mixed_precision_param": tr.mixed_precision_param,
        },
        "lr": lr,
        "warmup_steps": cfg.lr_scheduler.warmup_steps,
        "hf_assets_path": cfg.hf_assets_path,
        "dataset": getattr(cfg.dataloader, "dataset", None),
        "dataset_path": getattr(cfg.dataloader, "dataset_path", None),
        "checkpoint": {
            "enable": cfg.checkpoint.enable,
            "folder": cfg.checkpoint.folder,
            "interval": cfg.checkpoint.interval,
        },
        "activation_checkpoint": type(cfg.activation_checkpoint).__qualname__,
    }


# ---------------------------------------------------------------------------- serving routers


def _router(package: str, argv: List[str]) -> Dict[str, Any]:
    """A router's own launcher on the line: launch_router.parse_router_args (argparse, then
    RouterArgs.from_cli_args), RouterArgs._validate_router_args, and Router.from_args, which builds
    the Rust router's configuration without starting it. argparse's exit becomes the refusal."""
    import importlib
    from contextlib import redirect_stderr

    launch = importlib.import_module(package + ".launch_router")
    router = importlib.import_module(package + ".router")
    err = io.StringIO()
    try:
        with redirect_stderr(err):
            args = launch.parse_router_args(argv)
    except SystemExit:
        msg = err.getvalue().strip().splitlines()[-1] if err.getvalue().strip() else "argparse exit"
        raise ValueError(msg) from None
    args._validate_router_args()
    router.Router.from_args(args)
    pd = bool(getattr(args, "pd_disaggregation", False) or getattr(args, "vllm_pd_disaggregation", False))
    return {
        "host": args.host,
        "port": args.port,
        "worker_urls": list(args.worker_urls or ()),
        "pd": pd,
        "prefill_urls": [list(p) if isinstance(p, (tuple, list)) else [p] for p in args.prefill_urls or ()],
        "decode_urls": list(args.decode_urls or ()),
        "policy": args.policy,
        "prometheus_port": getattr(args, "prometheus_port", None),
    }


def judge_sglang_router(argv: List[str], world: int) -> Dict[str, Any]:
    """sglang-router 0.3.2: `python -m sglang_router.launch_router` without the module words."""
    return _router("sglang_router", argv)


def judge_vllm_router(argv: List[str], world: int) -> Dict[str, Any]:
    """vllm-router 0.1.17: the `vllm-router` console script's parser (vllm_router.launch_router)."""
    return _router("vllm_router", argv)


# ---------------------------------------------------------------------------- loop

JUDGES = {
    "bridge": judge_bridge,
    "titan": judge_titan,
    "sglang_router": judge_sglang_router,
    "vllm_router": judge_vllm_router,
}


def answer(req: Dict[str, Any]) -> Dict[str, Any]:
    gpu = req.get("gpu") or {}
    stubs.set_gpu(
        gpu.get("vendor", "nvidia"), tuple(gpu.get("capability", (9, 0))), gpu.get("name", ""), gpu.get("memory_gb", 80)
    )
    try:
        return {"ok": True, "values": JUDGES[req["kind"]](list(req["argv"]), int(req["world"]))}
    except Exception as e:  # the framework's refusal is the answer
        return {"ok": False, "error": "%s: %s" % (type(e).__name__, e), "trace": traceback.format_exc(limit=4)}


def main() -> None:
    out = sys.stdout
    sys.stdout = sys.stderr  # frameworks print; only answers go to the real stdout
    stubs.python_shims()
    stubs.transformer_engine()
    for line in sys.stdin:
        if not line.strip():
            continue
        with redirect_stdout(io.StringIO()):
            res = answer(json.loads(line))
        out.write(json.dumps(res, default=str) + "\n")
        out.flush()


if __name__ == "__main__":
    main()
