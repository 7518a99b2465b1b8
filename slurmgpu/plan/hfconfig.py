"""Hugging Face model references for --model: a repository id the catalogue knows, or a local
checkpoint directory's config.json read as a model shape.

Users pass the same ids to --weights and --tokenizer (`meta-llama/Llama-3.1-70B`), so --model
takes them too. An id maps to a catalogue model only where that repository's config.json has
the catalogue entry's shape *and* the architecture facts the launchers pass on (rope base and
scaling, vocabulary): a variant that differs (Llama 3's rope without 3.1's scaling, a larger
vocabulary) is not silently replaced; the error names the catalogue model it is closest to
and the two ways to be exact (the checkpoint directory, or a model YAML file).

A config.json is read with the key names of transformers' config classes (LlamaConfig,
MixtralConfig, Qwen2Config, Gemma2Config, DeepseekV3Config, GPT2Config); keys it lacks take
those classes' defaults.
"""

from __future__ import annotations

import json
import os
import re
from typing import Any, Dict, List, Mapping, Optional, Tuple

from ..errors import ConfigError, Issue
from .models import ModelSpec

# Repository id (lower case) -> catalogue name. Each id's config.json has the catalogue
# entry's shape and architecture facts (tests/test_hfconfig.py reads the recorded ones).
HF_IDS: Dict[str, str] = {
    "meta-llama/llama-2-7b-hf": "llama2-7b",
    "meta-llama/llama-2-7b-chat-hf": "llama2-7b",
    "meta-llama/llama-2-13b-hf": "llama2-13b",
    "meta-llama/llama-2-13b-chat-hf": "llama2-13b",
    "meta-llama/llama-2-70b-hf": "llama2-70b",
    "meta-llama/llama-2-70b-chat-hf": "llama2-70b",
    "meta-llama/llama-3.1-8b": "llama3.1-8b",
    "meta-llama/llama-3.1-8b-instruct": "llama3.1-8b",
    "meta-llama/meta-llama-3.1-8b": "llama3.1-8b",
    "meta-llama/meta-llama-3.1-8b-instruct": "llama3.1-8b",
    "meta-llama/llama-3.1-70b": "llama3.1-70b",
    "meta-llama/llama-3.1-70b-instruct": "llama3.1-70b",
    "meta-llama/meta-llama-3.1-70b": "llama3.1-70b",
    "meta-llama/meta-llama-3.1-70b-instruct": "llama3.1-70b",
    "meta-llama/llama-3.3-70b-instruct": "llama3.1-70b",
    "meta-llama/llama-3.1-405b": "llama3.1-405b",
    "meta-llama/llama-3.1-405b-instruct": "llama3.1-405b",
    "meta-llama/meta-llama-3.1-405b": "llama3.1-405b",
    "meta-llama/meta-llama-3.1-405b-instruct": "llama3.1-405b",
    "mistralai/mistral-7b-v0.1": "mistral-7b",
    "mistralai/mistral-7b-instruct-v0.1": "mistral-7b",
    "mistralai/mixtral-8x7b-v0.1": "mixtral-8x7b",
    "mistralai/mixtral-8x7b-instruct-v0.1": "mixtral-8x7b",
    "mistralai/mixtral-8x22b-v0.1": "mixtral-8x22b",
    "qwen/qwen2.5-7b": "qwen2.5-7b",
    "qwen/qwen2.5-7b-instruct": "qwen2.5-7b",
    "qwen/qwen2.5-72b": "qwen2.5-72b",
    "qwen/qwen2.5-72b-instruct": "qwen2.5-72b",
    "google/gemma-2-27b": "gemma2-27b",
    "google/gemma-2-27b-it": "gemma2-27b",
    "deepseek-ai/deepseek-v3": "deepseek-v3",
    "deepseek-ai/deepseek-v3-base": "deepseek-v3",
}

_HF_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
# A context longer than this in config.json (a long-context extension) is not the length to
# plan training for: the shape is planned at PLAN_SEQ, which --seq changes.
LONG_CONTEXT = 32768
PLAN_SEQ = 8192
# Families whose MLP is gated (SwiGLU/GeGLU: three matrices), by config.json model_type.
_GATED: Tuple[str, ...] = ("llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "gemma")
_GATED += ("gemma2", "gemma3_text", "deepseek_v2", "deepseek_v3", "phi3", "olmo2", "granite")


def looks_like_hf_id(ref: str) -> bool:
    """`org/name` that is not a file or directory here."""
    return bool(_HF_ID.match(ref)) and not os.path.exists(ref) and not ref.endswith((".yaml", ".yml", ".json"))


def catalogue_name(ref: str) -> Optional[str]:
    """The catalogue model a Hugging Face id stands for (None: not one the catalogue has)."""
    return HF_IDS.get(ref.strip().lower())


def closest(ref: str, names: List[str]) -> Optional[str]:
    """The catalogue model an unknown id is most likely a variant of: same family and size."""
    name = ref.split("/", 1)[-1].lower()
    size = re.search(r"(\d+(?:\.\d+)?)b\b", name.replace("-", " ").replace("_", " "))
    family = re.match(r"(?:meta-)?([a-z]+)", name)
    cands = [n for n in names if family and n.startswith(family.group(1))]
    if size:  # a catalogue model of another size is no closer than none
        want = size.group(1).rstrip("0").rstrip(".") if "." in size.group(1) else size.group(1)
        cands = [n for n in cands if re.search(r"[-x]%sb$" % re.escape(want), n)]
    return cands[-1] if cands else None


def unknown_id(ref: str, names: List[str]) -> ConfigError:
    near = closest(ref, names)
    return ConfigError(
        [
            Issue(
                "--model",
                None,
                None,
                "",
                "%s is a Hugging Face id the model catalogue does not have%s; to plan it exactly, pass a local "
                "checkpoint directory holding its config.json (--model /path/to/checkpoint), or describe it in a "
                "model YAML file; `slurmgpu models` lists the catalogue"
                % (
                    ref,
                    " (the closest catalogue model is %s: --model %s, if that is the same shape)" % (near, near)
                    if near
                    else "",
                ),
            )
        ]
    )


def config_path(ref: str) -> Optional[str]:
    """The config.json `ref` names: the file itself, or the one in a checkpoint directory."""
    if os.path.isdir(ref):
        return os.path.join(ref, "config.json")
    if os.path.basename(ref) == "config.json" or (ref.endswith(".json") and os.path.isfile(ref)):
        return ref
    return None


def load_config(path: str, label: Optional[str] = None) -> ModelSpec:
    """A model shape from a Hugging Face config.json (a checkpoint directory's)."""
    try:
        with open(path, encoding="utf-8") as f:
            cfg = json.load(f)
    except FileNotFoundError:
        where = os.path.dirname(path) or "."
        raise ConfigError(
            [
                Issue(
                    where,
                    None,
                    None,
                    "",
                    "no config.json in this directory: --model takes a checkpoint directory "
                    "with a Hugging Face config.json, a catalogue name, a model YAML file or a size such as 13B",
                )
            ]
        ) from None
    except (OSError, ValueError) as exc:
        raise ConfigError([Issue(path, None, None, "", "cannot read it as JSON: %s" % exc)]) from None
    if not isinstance(cfg, dict):
        raise ConfigError([Issue(path, None, None, "", "expected a JSON object (a Hugging Face config.json)")])
    return from_config(cfg, path, label)


def _get(cfg: Mapping[str, Any], *keys: str) -> Any:
    for k in keys:
        if cfg.get(k) is not None:
            return cfg[k]
    return None


def from_config(cfg: Mapping[str, Any], source: str, label: Optional[str] = None) -> ModelSpec:
    """ModelSpec from config.json keys; every missing or invalid required key is reported at once."""
    text = cfg.get("text_config")
    if isinstance(text, dict) and "hidden_size" not in cfg:  # multimodal wrappers keep the LM here
        cfg = dict(text, model_type=text.get("model_type") or cfg.get("model_type"))
    mtype = str(cfg.get("model_type") or "")
    issues: List[Issue] = []

    def need(field: str, *keys: str) -> int:
        v = _get(cfg, *keys)
        if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
            issues.append(Issue(source, None, None, keys[0], "expected a positive integer (%s), got %r" % (field, v)))
            return 1
        return int(v)

    layers = need("layers", "num_hidden_layers", "n_layer", "num_layers")
    hidden = need("hidden size", "hidden_size", "n_embd", "d_model")
    heads = need("attention heads", "num_attention_heads", "n_head")
    vocab = need("vocabulary", "vocab_size")
    if issues:
        raise ConfigError(issues)
    kv = _get(cfg, "num_key_value_heads") or heads
    ffn = _get(cfg, "intermediate_size", "n_inner") or 4 * hidden
    rope = cfg.get("rope_scaling") or {}
    params = cfg.get("rope_parameters") or {}  # transformers 5 spelling of rope_theta / rope_scaling
    if not rope and isinstance(params, dict) and params.get("rope_type") not in (None, "default"):
        rope = params
    rope = rope if isinstance(rope, dict) else {}
    ctx = int(
        rope.get("original_max_position_embeddings") or _get(cfg, "max_position_embeddings", "n_positions") or 4096
    )
    seq = ctx if ctx <= LONG_CONTEXT else PLAN_SEQ
    experts = int(_get(cfg, "num_local_experts", "n_routed_experts", "num_experts") or 0)
    gated = mtype in _GATED or (mtype == "" and str(cfg.get("hidden_act", "")) in ("silu", "swiglu"))
    layernorm = "layer_norm_eps" in cfg or "layer_norm_epsilon" in cfg or mtype in ("gpt2", "gpt_neox", "opt")
    rope_type = str(rope.get("rope_type") or rope.get("type") or "")
    act = str(_get(cfg, "hidden_activation", "hidden_act", "activation_function") or "silu")
    mla = bool(cfg.get("kv_lora_rank"))
    name = label or os.path.basename(os.path.dirname(os.path.abspath(source))) or "config"
    return ModelSpec(
        name=name,
        layers=layers,
        hidden=hidden,
        heads=heads,
        kv_heads=int(kv),
        ffn=int(ffn),
        vocab=vocab,
        seq=seq,
        experts=experts,
        experts_active=int(cfg.get("num_experts_per_tok") or (2 if experts else 0)),
        moe_ffn=cfg.get("moe_intermediate_size") if experts else None,
        head_dim=(cfg.get("qk_nope_head_dim") if mla else cfg.get("head_dim")) or None,
        gated=gated,
        tied_embeddings=bool(cfg.get("tie_word_embeddings", mtype in ("gpt2", "gemma", "gemma2"))),
        shared_experts=int(cfg.get("n_shared_experts") or 0) if experts else 0,
        dense_layers=int(cfg.get("first_k_dense_replace") or 0) if experts else 0,
        q_lora_rank=int(cfg.get("q_lora_rank") or 0),
        kv_lora_rank=int(cfg.get("kv_lora_rank") or 0),
        rope_head_dim=int(cfg.get("qk_rope_head_dim") or 0) if mla else 0,
        v_head_dim=cfg.get("v_head_dim") if mla else None,
        norm="layernorm" if layernorm else "rmsnorm",
        norm_eps=float(_get(cfg, "rms_norm_eps", "layer_norm_eps", "layer_norm_epsilon") or 1e-5),
        position="learned" if mtype in ("gpt2", "opt") else "rope",
        rope_base=float(_get(cfg, "rope_theta") or params.get("rope_theta") or 10000.0),
        rope_scaling=rope_type if rope_type in ("llama3", "yarn") else "",
        rope_factor=float(rope.get("factor") or 0.0) if rope_type == "yarn" else 0.0,
        rope_original_seq=int(rope.get("original_max_position_embeddings") or 0) if rope_type == "yarn" else 0,
        yarn=tuple(
            float(rope.get(k, d))
            for k, d in (("beta_fast", 32), ("beta_slow", 1), ("mscale", 1), ("mscale_all_dim", 0))
        )
        if rope_type == "yarn"
        else (),
        activation="gelu_tanh" if "tanh" in act else "gelu" if act.startswith("gelu") else "silu",
        linear_bias=mtype in ("gpt2", "opt"),
        qkv_bias=mtype.startswith("qwen2"),
        router_score=str(cfg.get("scoring_func") or "softmax") if experts else "softmax",
        router_topk_scale=float(cfg["routed_scaling_factor"]) if experts and cfg.get("routed_scaling_factor") else None,
        router_groups=int(cfg.get("n_group") or 0) if experts else 0,
        router_group_topk=int(cfg.get("topk_group") or 0) if experts else 0,
        router_expert_bias=cfg.get("topk_method") == "noaux_tc",
        title="%s (from %s%s)"
        % (name, source, "; context %d, planned at %d: --seq to change" % (ctx, seq) if seq != ctx else ""),
        source=source,
    )
