"""The model catalogue against published parameter counts, and the custom-model loaders."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slurmgpu.errors import ConfigError
from slurmgpu.plan import catalogue, get_model, load_model_file, model_from_params

# Published totals: exact figures are Hugging Face safetensors parameter counts of the official
# releases; rounded ones are the papers' / model cards' (Mixtral paper: 47B total, 13B active;
# Mixtral 8x22B card: 141B / 39B; DeepSeek-V3 report: 671B / 37B; GPT-3 paper: 175B).
PUBLISHED = [
    ("llama2-7b", 6_738_415_616, None, 0.0001),
    ("llama2-13b", 13_015_864_320, None, 0.0001),
    ("llama2-70b", 68_976_648_192, None, 0.0001),
    ("llama3.1-8b", 8_030_261_248, None, 0.0001),
    ("llama3.1-70b", 70_553_706_496, None, 0.0001),
    ("llama3.1-405b", 405_853_388_800, None, 0.0001),
    ("mistral-7b", 7_241_732_096, None, 0.0001),
    ("mixtral-8x7b", 46_702_792_704, 12.9e9, 0.01),
    ("mixtral-8x22b", 141e9, 39e9, 0.01),
    ("qwen2.5-7b", 7.61e9, None, 0.005),
    ("qwen2.5-72b", 72.7e9, None, 0.005),
    ("gemma2-27b", 27.2e9, None, 0.005),
    ("deepseek-v3", 671e9, 37e9, 0.02),
    ("gpt3-175b", 175e9, None, 0.005),
]


@pytest.mark.parametrize("name,total,active,tol", PUBLISHED)
def test_parameter_counts_match_published_figures(name, total, active, tol):
    m = get_model(name)
    assert m.params == pytest.approx(total, rel=tol)
    if active is None:
        assert m.active_params == m.params
    else:
        assert m.active_params == pytest.approx(active, rel=max(tol, 0.02))
        assert m.active_params < m.params


def test_catalogue_covers_the_required_models():
    names = {m.name for m in catalogue()}
    for want in (
        "llama2-7b",
        "llama2-13b",
        "llama2-70b",
        "llama3.1-8b",
        "llama3.1-70b",
        "llama3.1-405b",
        "mistral-7b",
        "mixtral-8x7b",
        "mixtral-8x22b",
        "qwen2.5-7b",
        "qwen2.5-72b",
        "gemma2-27b",
        "deepseek-v3",
        "gpt3-175b",
    ):
        assert want in names


@pytest.mark.parametrize(
    "ref,name",
    [
        ("llama3-70b", "llama3.1-70b"),
        ("Llama-3.1-70B", "llama3.1-70b"),
        ("llama3_405b", "llama3.1-405b"),
        ("DeepSeek-V3", "deepseek-v3"),
        ("gpt-3", "gpt3-175b"),
    ],
)
def test_names_and_aliases_resolve(ref, name):
    assert get_model(ref).name == name


def test_unknown_model_suggests_the_closest_name():
    with pytest.raises(ConfigError) as exc:
        get_model("llama3-7b")
    msg = str(exc.value)
    assert "did you mean 'llama3-70b'" in msg or "did you mean 'llama3-8b'" in msg
    assert "mixtral-8x7b" in msg  # lists what exists


def test_kv_and_shape_details():
    m = get_model("gemma2-27b")
    assert m.hd == 128 and m.attn_width == 4096  # Gemma 2 heads are not hidden/heads wide
    ds = get_model("deepseek-v3")
    assert ds.kv_elems_per_token_layer() == 512 + 64  # MLA caches the compressed latent
    assert get_model("llama3.1-70b").kv_elems_per_token_layer() == 2 * 8 * 128


def test_to_dict_has_counts_and_json_serialises():
    d = get_model("mixtral-8x7b").to_dict()
    assert d["params"] > d["active_params"] and d["experts"] == 8 and d["moe_ffn"] == 14336
    json.dumps(d)


# -- --params ------------------------------------------------------------


@pytest.mark.parametrize("text,target", [("13B", 13e9), ("70b", 70e9), ("350M", 350e6), ("1.5T", 1.5e12)])
def test_model_from_params_is_close_and_marked_estimated(text, target):
    m = model_from_params(text)
    assert m.estimated
    assert m.params == pytest.approx(target, rel=0.12)
    assert m.heads % 8 == 0 and m.hidden % m.heads == 0


@settings(max_examples=60, deadline=None)
@given(st.floats(min_value=1e9, max_value=2e12))
def test_model_from_params_tracks_any_size(n):
    m = model_from_params("%.0f" % n)
    assert m.params == pytest.approx(n, rel=0.12)
    assert m.layers >= 1 and m.kv_heads == m.heads


@pytest.mark.parametrize("bad", ["lots", "-3B", "5"])
def test_model_from_params_rejects_nonsense(bad):
    with pytest.raises(ConfigError) as exc:
        model_from_params(bad)
    assert "--params" in str(exc.value)


# -- model YAML files ----------------------------------------------------------


def test_yaml_model_with_defaults(tmp_path):
    p = tmp_path / "tiny.yaml"
    p.write_text("layers: 24\nhidden: 2048\nheads: 16\nvocab: 50000\nseq: 2048\n")
    m = get_model(str(p))
    assert (m.kv_heads, m.ffn, m.gated, m.name) == (16, 8192, False, "tiny")
    # 12 h^2 per layer for a 4h two-matrix MLP, plus untied embedding and output layer
    assert m.params == 24 * (12 * 2048**2 + 2 * 2048) + 2 * 50000 * 2048 + 2048


def test_yaml_moe_model(tmp_path):
    p = tmp_path / "moe.yaml"
    p.write_text(
        "layers: 32\nhidden: 4096\nheads: 32\nkv_heads: 8\nffn: 14336\nvocab: 32000\nseq: 4096\n"
        "experts: 8\nexperts_active: 2\ngated: true\n"
    )
    m = load_model_file(str(p))
    assert m.params == get_model("mixtral-8x7b").params  # the same shape as the catalogue entry


def test_yaml_errors_name_file_line_and_field(tmp_path):
    p = tmp_path / "bad.yaml"
    p.write_text("layer: 24\nhidden: 2048\nheads: 16\nvocab: 50000\nseq: 2048\n")
    with pytest.raises(ConfigError) as exc:
        get_model(str(p))
    msg = str(exc.value)
    assert "%s:1:1: layer: unknown key (did you mean 'layers'?)" % p in msg
    assert "layers: missing required field" in msg


def test_yaml_semantic_errors(tmp_path):
    p = tmp_path / "bad.yaml"
    p.write_text("layers: 24\nhidden: 2048\nheads: 16\nkv_heads: 5\nvocab: 50000\nseq: 2048\nexperts: 8\n")
    with pytest.raises(ConfigError) as exc:
        get_model(str(p))
    msg = str(exc.value)
    assert "%s:4:1: kv_heads: heads (16) must be a multiple of kv_heads (5)" % p in msg
    assert "experts_active" in msg


def test_missing_model_file(tmp_path):
    with pytest.raises(ConfigError) as exc:
        get_model(str(tmp_path / "nope.yaml"))
    assert "not found" in str(exc.value)


def test_models_command_lists_catalogue():
    out = subprocess.run(
        [sys.executable, "-m", "slurmgpu.cli", "models", "--json"], capture_output=True, text=True, check=True
    ).stdout
    rows = json.loads(out)
    by = {r["name"]: r for r in rows}
    assert by["llama3.1-70b"]["aliases"] == ["llama3-70b"]
    assert by["deepseek-v3"]["active_params"] < by["deepseek-v3"]["params"]
    text = subprocess.run(
        [sys.executable, "-m", "slurmgpu.cli", "models"], capture_output=True, text=True, check=True
    ).stdout
    assert text.splitlines()[0].split()[:3] == ["NAME", "PARAMS", "ACTIVE"]
    assert len(text.splitlines()) == len(catalogue()) + 1
