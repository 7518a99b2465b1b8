"""--model takes Hugging Face ids and checkpoint directories (issue 29, point 5).

The configs under tests/data/hf_configs are those repositories' config.json files as published
(the catalogue cites them as its source); a checkpoint directory holding one must plan exactly
as the catalogue model it is. Before, `--model meta-llama/Llama-3.1-70B` was "model file not
found" and a checkpoint directory was not read at all.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from slurmgpu.cli import main
from slurmgpu.errors import ConfigError
from slurmgpu.plan import catalogue, get_model
from slurmgpu.plan.hfconfig import HF_IDS, load_config

CONFIGS = Path(__file__).resolve().parent / "data" / "hf_configs"
IGNORED = {"name", "title", "source", "estimated", "gated_assumed"}


def _shape(m):
    return {f.name: getattr(m, f.name) for f in dataclasses.fields(m) if f.name not in IGNORED}


@pytest.mark.parametrize("path", sorted(CONFIGS.glob("*.json")), ids=lambda p: p.stem)
def test_a_checkpoint_directory_plans_as_its_catalogue_model(path, tmp_path):
    hf_id = path.stem.replace("--", "/")
    want = get_model(HF_IDS[hf_id.lower()])
    ckpt = tmp_path / "checkpoint"
    ckpt.mkdir()
    shutil.copy(str(path), str(ckpt / "config.json"))
    got = get_model(str(ckpt))
    assert _shape(got) == _shape(want)
    assert got.params == want.params and got.active_params == want.active_params
    assert load_config(str(path)).params == want.params


def test_known_ids_are_catalogue_models():
    names = {m.name for m in catalogue()}
    assert set(HF_IDS.values()) <= names
    for hf_id, name in HF_IDS.items():
        assert get_model(hf_id).name == name
    assert get_model("meta-llama/Llama-3.1-70B").name == "llama3.1-70b"


def test_an_unknown_id_names_the_catalogue_model_it_is_closest_to():
    with pytest.raises(ConfigError) as e:
        get_model("meta-llama/Meta-Llama-3-8B")
    msg = str(e.value)
    assert "Hugging Face id the model catalogue does not have" in msg and "--model llama3.1-8b" in msg
    assert "checkpoint directory" in msg
    with pytest.raises(ConfigError) as e:
        get_model("Qwen/Qwen3-32B")
    assert "closest" not in str(e.value)  # no catalogue model of that size: no guess


def test_a_directory_without_config_json_says_so(tmp_path):
    with pytest.raises(ConfigError, match="no config.json in this directory"):
        get_model(str(tmp_path))


def test_a_long_context_config_is_planned_at_a_training_length(tmp_path):
    cfg = json.loads((CONFIGS / "mistralai--Mixtral-8x7B-v0.1.json").read_text())
    cfg["max_position_embeddings"] = 131072
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    m = get_model(str(tmp_path))
    assert m.seq == 8192 and "--seq to change" in m.title


def test_gen_and_plan_take_the_ids_users_give_weights_and_tokenizer(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SLURMGPU_SYSTEM_SITE", str(tmp_path / "none.yaml"))
    monkeypatch.setenv("SLURMGPU_CACHE_DIR", str(tmp_path / "cache"))
    r = CliRunner().invoke(main, ["plan", "--model", "meta-llama/Llama-3.1-70B", "--nodes", "4", "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["model"]["name"] == "llama3.1-70b"
    r = CliRunner().invoke(
        main, ["gen", "--model", "meta-llama/Llama-3.1-70B", "--launcher", "megatron", "--nodes", "2", "--smoke"]
    )
    assert r.exit_code == 0, r.output
    assert "--num-layers 80" in r.stdout
