"""Model architectures the planner sizes jobs for: a catalogue of real ones and loaders.

The planner needs shapes, not weights: layers, hidden size, heads, FFN width, vocabulary
and, for mixture-of-experts models, the expert counts. Parameter counts are computed from
the shape (so a custom model is sized the same way as a catalogue one) and the catalogue
tests check them against the published totals.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Tuple

from ..errors import ConfigError, Issue

if TYPE_CHECKING:
    from ..schema import Field


@dataclass(frozen=True)
class ModelSpec:
    """A transformer's shape. Fields after `estimated` cover real architectures' variants."""

    name: str
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    ffn: int  # MLP width of dense layers
    vocab: int
    seq: int  # default training sequence length
    experts: int = 0  # routed experts per MoE layer (0 = dense model)
    experts_active: int = 0  # routed experts each token uses (top-k)
    moe_ffn: Optional[int] = None  # width of one expert (default: ffn)
    estimated: bool = False  # shape guessed from a parameter count
    head_dim: Optional[int] = None  # default hidden // heads (Gemma 2 differs)
    gated: bool = True  # SwiGLU/GeGLU MLP: 3 matrices instead of 2
    tied_embeddings: bool = False  # output layer shares the input embedding
    shared_experts: int = 0  # always-on experts per MoE layer (DeepSeek)
    dense_layers: int = 0  # leading layers with a dense MLP in an MoE model
    q_lora_rank: int = 0  # multi-head latent attention (DeepSeek-V2/V3): query down-projection
    kv_lora_rank: int = 0  # MLA: compressed KV width (what the KV cache holds)
    rope_head_dim: int = 0  # MLA: decoupled RoPE key width per head
    v_head_dim: Optional[int] = None  # MLA: value head width (default head_dim)
    # Architecture facts the launcher adapters pass to the framework (no effect on the planner's
    # numbers: parameter counts ignore norms and biases). Defaults are the Llama family's.
    norm: str = "rmsnorm"  # rmsnorm | layernorm
    norm_eps: float = 1e-5
    position: str = "rope"  # rope | learned (absolute position embeddings, GPT-2/3)
    rope_base: float = 10000.0  # rope_theta
    rope_scaling: str = ""  # "llama3": Llama 3.1's frequency scaling (factor 8) | "yarn" (DeepSeek-V3)
    rope_factor: float = 0.0  # yarn: scaling factor (DeepSeek-V3 40)
    rope_original_seq: int = 0  # yarn: the pre-extension context (DeepSeek-V3 4096)
    yarn: Tuple[float, ...] = ()  # yarn: beta_fast, beta_slow, mscale, mscale_all_dim
    activation: str = "silu"  # MLP activation: silu (SwiGLU) | gelu_tanh (Gemma's GeGLU) | gelu
    linear_bias: bool = False  # biases in the attention and MLP projections (GPT-2/3)
    qkv_bias: bool = False  # bias on the QKV projection only (Qwen2)
    router_score: str = "softmax"  # MoE router: softmax | sigmoid (DeepSeek-V3)
    router_topk_scale: Optional[float] = None  # routed_scaling_factor (DeepSeek-V3 2.5)
    router_groups: int = 0  # node-limited routing: expert groups (DeepSeek-V3 n_group 8)
    router_group_topk: int = 0  # groups each token may use (DeepSeek-V3 topk_group 4)
    router_expert_bias: bool = False  # aux-loss-free balancing bias (DeepSeek-V3 noaux_tc)
    title: str = ""
    source: str = ""
    gated_assumed: bool = False  # a model file without `gated:` (planned as a 2-matrix GPT-style MLP)

    # -- derived shape ------------------------------------------------------
    @property
    def hd(self) -> int:
        return self.head_dim or self.hidden // self.heads

    @property
    def is_moe(self) -> bool:
        return self.experts > 0

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank > 0

    @property
    def expert_ffn(self) -> int:
        return self.moe_ffn or self.ffn

    @property
    def moe_layers(self) -> int:
        return self.layers - self.dense_layers if self.is_moe else 0

    @property
    def attn_width(self) -> int:
        """Width of Q (and of the attention output before the output projection)."""
        return self.heads * self.hd

    @property
    def label(self) -> str:
        return self.title or self.name

    # -- parameter counts ---------------------------------------------------
    @property
    def attn_params(self) -> int:
        h, hd = self.hidden, self.hd
        if self.is_mla:
            rope, v = self.rope_head_dim, self.v_head_dim or hd
            qk = self.heads * (hd + rope)
            q = h * self.q_lora_rank + self.q_lora_rank * qk if self.q_lora_rank else h * qk
            kv = h * (self.kv_lora_rank + rope) + self.kv_lora_rank * self.heads * (hd + v)
            return q + kv + self.heads * v * h
        return 2 * h * self.attn_width + 2 * h * self.kv_heads * hd

    def mlp_params(self, width: int) -> int:
        return (3 if self.gated else 2) * self.hidden * width

    @property
    def dense_layer_params(self) -> int:
        return self.attn_params + self.mlp_params(self.ffn) + 2 * self.hidden

    @property
    def expert_params(self) -> int:
        """One routed expert."""
        return self.mlp_params(self.expert_ffn)

    @property
    def moe_layer_shared_params(self) -> int:
        """The part of an MoE layer every token uses: attention, router, shared experts, norms."""
        return (
            self.attn_params + self.hidden * self.experts + self.shared_experts * self.expert_params + 2 * self.hidden
        )

    @property
    def embedding_params(self) -> int:
        return self.vocab * self.hidden

    @property
    def output_params(self) -> int:
        return 0 if self.tied_embeddings else self.vocab * self.hidden

    @property
    def params(self) -> int:
        """Total parameters (every expert counted)."""
        dense = self.layers - self.moe_layers
        moe = self.moe_layers * (self.moe_layer_shared_params + self.experts * self.expert_params)
        return dense * self.dense_layer_params + moe + self.embedding_params + self.output_params + self.hidden

    @property
    def active_params(self) -> int:
        """Parameters one token passes through (what training FLOPs scale with)."""
        if not self.is_moe:
            return self.params
        dense = self.layers - self.moe_layers
        moe = self.moe_layers * (self.moe_layer_shared_params + self.experts_active * self.expert_params)
        return dense * self.dense_layer_params + moe + self.embedding_params + self.output_params + self.hidden

    def kv_elems_per_token_layer(self) -> int:
        """KV-cache elements per token per layer: K and V per KV head, or MLA's latent vector."""
        if self.is_mla:
            return self.kv_lora_rank + self.rope_head_dim
        return 2 * self.kv_heads * self.hd

    def to_dict(self) -> Dict[str, Any]:
        d = asdict(self)
        d["params"] = self.params
        d["active_params"] = self.active_params
        d["head_dim"] = self.hd
        d["moe_ffn"] = self.expert_ffn if self.is_moe else None
        return d


def fmt_params(n: float) -> str:
    """6738415616 -> '6.74B'."""
    for unit, div in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= div:
            v = n / div
            return ("%.3g" % v if v < 100 else "%.0f" % v) + unit
    return str(int(n))


# ---------------------------------------------------------------------------
# The catalogue. Shapes are from each model's published config (Hugging Face
# config.json of the official release, or the paper for GPT-3); `source` says which.
# The architecture facts come from the same files: rope_theta -> rope_base, rms_norm_eps ->
# norm_eps, rope_scaling.rope_type "llama3", Qwen2's attention bias, DeepSeek-V3's
# scoring_func/routed_scaling_factor/n_group/topk_group/topk_method "noaux_tc"; GPT-3 is
# GPT-2-style (LayerNorm, learned positions, biases).


def _m(name: str, title: str, source: str, **kw: Any) -> ModelSpec:
    kw.setdefault("kv_heads", kw["heads"])
    return ModelSpec(name=name, title=title, source=source, **kw)


_CATALOGUE: Tuple[ModelSpec, ...] = (
    _m(
        "llama2-7b",
        "Llama 2 7B",
        "meta-llama/Llama-2-7b-hf config.json; paper: 6.7B",
        layers=32,
        hidden=4096,
        heads=32,
        ffn=11008,
        vocab=32000,
        seq=4096,
    ),
    _m(
        "llama2-13b",
        "Llama 2 13B",
        "meta-llama/Llama-2-13b-hf config.json; paper: 13.0B",
        layers=40,
        hidden=5120,
        heads=40,
        ffn=13824,
        vocab=32000,
        seq=4096,
    ),
    _m(
        "llama2-70b",
        "Llama 2 70B",
        "meta-llama/Llama-2-70b-hf config.json; paper: 69B, GQA 8 KV heads",
        layers=80,
        hidden=8192,
        heads=64,
        kv_heads=8,
        ffn=28672,
        vocab=32000,
        seq=4096,
    ),
    _m(
        "llama3.1-8b",
        "Llama 3.1 8B",
        "meta-llama/Llama-3.1-8B config.json (pre-training seq 8192)",
        layers=32,
        hidden=4096,
        heads=32,
        kv_heads=8,
        ffn=14336,
        vocab=128256,
        seq=8192,
        rope_base=500000.0,
        rope_scaling="llama3",
    ),
    _m(
        "llama3.1-70b",
        "Llama 3.1 70B",
        "meta-llama/Llama-3.1-70B config.json (pre-training seq 8192)",
        layers=80,
        hidden=8192,
        heads=64,
        kv_heads=8,
        ffn=28672,
        vocab=128256,
        seq=8192,
        rope_base=500000.0,
        rope_scaling="llama3",
    ),
    _m(
        "llama3.1-405b",
        "Llama 3.1 405B",
        "meta-llama/Llama-3.1-405B config.json; Llama 3 paper Table 3",
        layers=126,
        hidden=16384,
        heads=128,
        kv_heads=8,
        ffn=53248,
        vocab=128256,
        seq=8192,
        rope_base=500000.0,
        rope_scaling="llama3",
    ),
    _m(
        "mistral-7b",
        "Mistral 7B",
        "mistralai/Mistral-7B-v0.1 config.json; paper: 7.3B",
        layers=32,
        hidden=4096,
        heads=32,
        kv_heads=8,
        ffn=14336,
        vocab=32000,
        seq=8192,
    ),
    _m(
        "mixtral-8x7b",
        "Mixtral 8x7B",
        "mistralai/Mixtral-8x7B-v0.1 config.json; paper: 47B total, 13B active",
        layers=32,
        hidden=4096,
        heads=32,
        kv_heads=8,
        ffn=14336,
        vocab=32000,
        seq=32768,
        experts=8,
        experts_active=2,
        rope_base=1000000.0,
    ),
    _m(
        "mixtral-8x22b",
        "Mixtral 8x22B",
        "mistralai/Mixtral-8x22B-v0.1 config.json; 141B total, 39B active",
        layers=56,
        hidden=6144,
        heads=48,
        kv_heads=8,
        ffn=16384,
        vocab=32000,
        seq=65536,
        experts=8,
        experts_active=2,
        rope_base=1000000.0,
    ),
    _m(
        "qwen2.5-7b",
        "Qwen2.5 7B",
        "Qwen/Qwen2.5-7B config.json; 7.61B",
        layers=28,
        hidden=3584,
        heads=28,
        kv_heads=4,
        ffn=18944,
        vocab=152064,
        seq=32768,
        rope_base=1000000.0,
        norm_eps=1e-6,
        qkv_bias=True,
    ),
    _m(
        "qwen2.5-72b",
        "Qwen2.5 72B",
        "Qwen/Qwen2.5-72B config.json; 72.7B",
        layers=80,
        hidden=8192,
        heads=64,
        kv_heads=8,
        ffn=29568,
        vocab=152064,
        seq=32768,
        rope_base=1000000.0,
        norm_eps=1e-6,
        qkv_bias=True,
    ),
    _m(
        "gemma2-27b",
        "Gemma 2 27B",
        "google/gemma-2-27b config.json; 27.2B, GeGLU, tied embeddings",
        layers=46,
        hidden=4608,
        heads=32,
        kv_heads=16,
        head_dim=128,
        ffn=36864,
        vocab=256000,
        seq=8192,
        tied_embeddings=True,
        norm_eps=1e-6,
        activation="gelu_tanh",  # hidden_activation gelu_pytorch_tanh
    ),
    _m(
        "deepseek-v3",
        "DeepSeek-V3",
        "deepseek-ai/DeepSeek-V3 config.json; report: 671B total, 37B active (MTP module not counted)",
        layers=61,
        hidden=7168,
        heads=128,
        head_dim=128,
        ffn=18432,
        vocab=129280,
        seq=4096,
        experts=256,
        experts_active=8,
        moe_ffn=2048,
        shared_experts=1,
        dense_layers=3,
        q_lora_rank=1536,
        kv_lora_rank=512,
        rope_head_dim=64,
        v_head_dim=128,
        norm_eps=1e-6,
        router_score="sigmoid",
        router_topk_scale=2.5,
        router_groups=8,
        router_group_topk=4,
        router_expert_bias=True,
        rope_scaling="yarn",  # rope_scaling {type: yarn, factor 40, original 4096, beta 32/1, mscale 1/1}
        rope_factor=40.0,
        rope_original_seq=4096,
        yarn=(32.0, 1.0, 1.0, 1.0),
    ),
    _m(
        "gpt3-175b",
        "GPT-3 175B",
        "Brown et al. 2020, Table 2.1 (96 layers, d_model 12288, 96 heads, ctx 2048)",
        layers=96,
        hidden=12288,
        heads=96,
        ffn=4 * 12288,
        vocab=50257,
        seq=2048,
        gated=False,
        tied_embeddings=True,
        norm="layernorm",
        position="learned",
        linear_bias=True,
        activation="gelu",
    ),
)

_ALIASES: Dict[str, str] = {
    "llama3-8b": "llama3.1-8b",
    "llama3-70b": "llama3.1-70b",
    "llama3-405b": "llama3.1-405b",
    "mistral-7b-v0.1": "mistral-7b",
    "deepseekv3": "deepseek-v3",
    "gpt3": "gpt3-175b",
    "gpt-3": "gpt3-175b",
}


def catalogue() -> List[ModelSpec]:
    return list(_CATALOGUE)


def aliases_of(name: str) -> List[str]:
    return sorted(a for a, n in _ALIASES.items() if n == name)


def _key(text: str) -> str:
    """'Llama-3.1-70B' and 'llama3.1_70b' name the same model."""
    return re.sub(r"[^a-z0-9.]", "", text.lower())


def _by_key() -> Dict[str, ModelSpec]:
    table = {_key(m.name): m for m in _CATALOGUE}
    by_name = {m.name: m for m in _CATALOGUE}
    for alias, name in _ALIASES.items():
        table.setdefault(_key(alias), by_name[name])
    return table


def _looks_like_path(ref: str) -> bool:
    return ref.endswith((".yaml", ".yml")) or os.sep in ref or "/" in ref or os.path.exists(ref)


def get_model(ref: str) -> ModelSpec:
    """A catalogue name or alias (spelling-tolerant), a Hugging Face id the catalogue has, a
    checkpoint directory (or its config.json), or the path of a model YAML file."""
    from . import hfconfig

    if hfconfig.looks_like_hf_id(ref):
        name = hfconfig.catalogue_name(ref)
        if name is None:
            raise hfconfig.unknown_id(ref, [m.name for m in _CATALOGUE])
        return next(m for m in _CATALOGUE if m.name == name)
    cfg = hfconfig.config_path(ref)
    if cfg is not None:
        return hfconfig.load_config(cfg)
    if _looks_like_path(ref):
        return load_model_file(ref)
    hit = _by_key().get(_key(ref))
    if hit is not None:
        return hit
    import difflib  # only for a mistake: not loaded on every run

    names = [m.name for m in _CATALOGUE] + list(_ALIASES)
    hint = difflib.get_close_matches(ref.lower(), names, n=1, cutoff=0.5)
    msg = "unknown model '%s'%s; known: %s (or give a YAML file, or --params 13B)" % (
        ref,
        " (did you mean '%s'?)" % hint[0] if hint else "",
        ", ".join(m.name for m in _CATALOGUE),
    )
    raise ConfigError([Issue("--model", None, None, "", msg)])


# ---------------------------------------------------------------------------
# Custom models


def model_from_params(text: str) -> ModelSpec:
    """'13B' -> a GPT-style dense shape with about that many parameters (estimated=True).

    Shape rules (a fit to Llama/GPT-3 shapes, which keep hidden ~ 128 x layers): head size
    128, heads a multiple of 8 (so TP up to 8 divides them), vocabulary 32000, FFN 4 x hidden,
    sequence 4096. Layers are then solved so that 12*L*h^2 + 2*V*h is close to the target.
    """
    from ..schema import parse_size

    n = parse_size(text)
    if n is None or n < 1e7 or n > 1e14:
        raise ConfigError(
            [
                Issue(
                    "--params",
                    None,
                    None,
                    "",
                    "expected a parameter count between 10M and 100T such as 7B, 13B or 350M, got %r" % text,
                )
            ]
        )
    vocab = 32000
    layers_guess = (n / (12 * 128**2)) ** (1 / 3)
    hidden = max(1024, int(round(math.sqrt(n / (12 * layers_guess)) / 1024.0)) * 1024)
    layers = max(1, int(round((n - 2 * vocab * hidden) / (12.0 * hidden * hidden))))
    heads = hidden // 128
    return ModelSpec(
        name="custom-%s" % text.strip().upper(),
        layers=layers,
        hidden=hidden,
        heads=heads,
        kv_heads=heads,
        ffn=4 * hidden,
        vocab=vocab,
        seq=4096,
        gated=False,
        estimated=True,
        title="model of about %s parameters (shape estimated)" % text.strip().upper(),
        source="estimated from --params %s" % text.strip(),
    )


def _fields() -> Dict[str, Field]:
    from ..schema import Field

    return {
        "name": Field("str"),
        "title": Field("str"),
        "layers": Field("int", required=True, positive=True),
        "hidden": Field("int", required=True, positive=True),
        "heads": Field("int", required=True, positive=True),
        "kv_heads": Field("int", positive=True),
        "ffn": Field("int", positive=True),
        "vocab": Field("int", required=True, positive=True),
        "seq": Field("int", required=True, positive=True),
        "experts": Field("int", minimum=0),
        "experts_active": Field("int", positive=True),
        "moe_ffn": Field("int", positive=True),
        "head_dim": Field("int", positive=True),
        "gated": Field("bool"),
        "tied_embeddings": Field("bool", default=False),
        "shared_experts": Field("int", minimum=0, default=0),
        "dense_layers": Field("int", minimum=0, default=0),
        "q_lora_rank": Field("int", minimum=0, default=0),
        "kv_lora_rank": Field("int", minimum=0, default=0),
        "rope_head_dim": Field("int", minimum=0, default=0),
        "v_head_dim": Field("int", positive=True),
        "norm": Field("str", choices=("rmsnorm", "layernorm"), default="rmsnorm"),
        "norm_eps": Field("num", positive=True, default=1e-5),
        "position": Field("str", choices=("rope", "learned"), default="rope"),
        "rope_base": Field("num", positive=True, default=10000.0),
        "rope_scaling": Field("str", choices=("", "llama3"), default=""),
        "linear_bias": Field("bool", default=False),
        "qkv_bias": Field("bool", default=False),
        "router_score": Field("str", choices=("softmax", "sigmoid"), default="softmax"),
        "router_topk_scale": Field("num", positive=True),
        "router_groups": Field("int", minimum=0, default=0),
        "router_group_topk": Field("int", minimum=0, default=0),
        "router_expert_bias": Field("bool", default=False),
    }


def load_model_file(path: str) -> ModelSpec:
    """A model YAML file; every problem is reported with file:line:col."""
    from ..schema import Checker
    from ..yamlsrc import load_yaml_file

    if not os.path.exists(path):
        hint = ""
        if not path.endswith((".yaml", ".yml")):
            hint = " (not a catalogue name either; `slurmgpu models` lists them)"
        raise ConfigError([Issue(path, None, None, "", "model file not found%s" % hint)])
    data = load_yaml_file(path)
    ck = Checker(path)
    if not isinstance(data, dict):
        ck.error(
            data,
            None,
            "",
            "expected a mapping with keys layers, hidden, heads, vocab, seq (got %s)"
            % ("an empty file" if data is None else type(data).__name__),
        )
        ck.raise_if_any()
    v = ck.take(data, _fields(), "")
    ck.raise_if_any()
    heads, hidden = v["heads"], v["hidden"]
    kv = v["kv_heads"] or heads
    if v["head_dim"] is None and hidden % heads:
        ck.error(
            data, "heads", "heads", "hidden (%d) must be a multiple of heads (%d), or give head_dim" % (hidden, heads)
        )
    if heads % kv:
        ck.error(data, "kv_heads", "kv_heads", "heads (%d) must be a multiple of kv_heads (%d)" % (heads, kv))
    experts = v["experts"] or 0
    active = v["experts_active"]
    if experts:
        if active is None:
            ck.error(
                data,
                "experts",
                "experts_active",
                "an MoE model (experts: %d) needs experts_active "
                "(experts each token is routed to, e.g. 2 for Mixtral)" % experts,
            )
        elif active > experts:
            ck.error(
                data,
                "experts_active",
                "experts_active",
                "experts_active (%d) cannot exceed experts (%d)" % (active, experts),
            )
    else:
        for key in ("experts_active", "moe_ffn", "shared_experts", "dense_layers"):
            if v[key]:
                ck.error(data, key, key, "only meaningful for an MoE model: set experts too")
    if v["dense_layers"] and v["dense_layers"] >= v["layers"]:
        ck.error(data, "dense_layers", "dense_layers", "must be fewer than layers (%d)" % v["layers"])
    ck.raise_if_any()
    ffn = v["ffn"] or 4 * hidden
    gated = v["gated"]
    gated_assumed = gated is None
    if gated is None:
        gated = False
    name = v["name"] or os.path.splitext(os.path.basename(path))[0]
    return ModelSpec(
        name=name,
        layers=v["layers"],
        hidden=hidden,
        heads=heads,
        kv_heads=kv,
        ffn=ffn,
        vocab=v["vocab"],
        seq=v["seq"],
        experts=experts,
        experts_active=active or 0,
        moe_ffn=v["moe_ffn"],
        head_dim=v["head_dim"],
        gated=gated,
        gated_assumed=gated_assumed,
        tied_embeddings=v["tied_embeddings"],
        shared_experts=v["shared_experts"],
        dense_layers=v["dense_layers"],
        q_lora_rank=v["q_lora_rank"],
        kv_lora_rank=v["kv_lora_rank"],
        rope_head_dim=v["rope_head_dim"],
        v_head_dim=v["v_head_dim"],
        norm=v["norm"],
        norm_eps=float(v["norm_eps"]),
        position=v["position"],
        rope_base=float(v["rope_base"]),
        rope_scaling=v["rope_scaling"],
        linear_bias=v["linear_bias"],
        qkv_bias=v["qkv_bias"],
        router_score=v["router_score"],
        router_topk_scale=None if v["router_topk_scale"] is None else float(v["router_topk_scale"]),
        router_groups=v["router_groups"],
        router_group_topk=v["router_group_topk"],
        router_expert_bias=v["router_expert_bias"],
        title=v["title"] or "",
        source=path,
    )
