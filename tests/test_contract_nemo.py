"""NeMo launcher contract: every rendered Megatron-Bridge command line is accepted by run_recipe.py's
rules and Hydra's own override parser, and the values it would train with are the plan's.

Megatron-Bridge 0.6.0 needs Python 3.12 and CUDA wheels, so its facts come from the catalogue
recorded at v0.6.0 (tests/data/contract/megatron_bridge.json, contrib/contract/record_megatron_bridge.py).
The overrides go through hydra-core's real OverridesParser onto a struct config with exactly the
recorded ConfigContainer fields: the same call Megatron-Bridge's parse_hydra_overrides makes, so an
unknown key fails here as it fails there ("Could not override 'model.foo'").
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path
from typing import Any, Dict, List, Tuple

import pytest

from slurmgpu.errors import ConfigError
from slurmgpu.job.launchers import nemo
from tests import contract_matrix as M

hydra_parser = pytest.importorskip("hydra.core.override_parser.overrides_parser")
loader = pytest.importorskip("hydra._internal.config_loader_impl")
from omegaconf import OmegaConf  # noqa: E402  (installed with hydra-core)

CATALOGUE = json.loads((Path(__file__).parent / "data" / "contract" / "megatron_bridge.json").read_text())
SECTIONS = ("model", "train", "optimizer", "scheduler", "dataset", "checkpoint", "tokenizer", "logger", "ddp")


def _flag_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(allow_abbrev=False, exit_on_error=False)
    for flag, info in CATALOGUE["run_recipe_flags"].items():
        if not flag.startswith("--"):
            continue
        kind = info["type"]
        if kind == "flag":
            p.add_argument(flag, action="store_true")
            continue
        choices = info.get("choices")
        if choices == "dataset_presets":
            choices = CATALOGUE["dataset_presets"]
        typ = {"int": int, "float": float}.get(kind, str)
        p.add_argument(flag, type=typ, choices=choices)
    return p


def _config_tree(recipe: str) -> Any:
    """The ConfigContainer sections as a struct OmegaConf config, recipe defaults where recorded."""
    fields = CATALOGUE["config"]
    mla = recipe.startswith("deepseek")
    tree: Dict[str, Dict[str, Any]] = {
        s: {k: None for k in fields["model_mla" if s == "model" and mla else s]} for s in SECTIONS
    }
    tree["mixed_precision"] = {k: None for k in fields["mixed_precision"]}
    for key, value in CATALOGUE["recipes"].get(recipe, {}).items():
        if "." in key:
            sec, name = key.split(".", 1)
            tree[sec][name] = value
    cfg = OmegaConf.create(tree)
    OmegaConf.set_struct(cfg, True)
    return cfg


def _type_ok(annotation: str, value: Any) -> bool:
    """Does a parsed override value fit the recorded dataclass annotation?"""
    optional = "Optional" in annotation or "None" in annotation
    if value is None:
        return optional
    lit = re.search(r"Literal\[(.*?)\]", annotation)
    if lit:
        return repr(value) in [c.strip() for c in lit.group(1).split(",")] or (
            isinstance(value, str) and "str" in annotation.replace("Literal", "")
        )
    if isinstance(value, bool):
        return "bool" in annotation
    if isinstance(value, int):
        return "int" in annotation or "float" in annotation
    if isinstance(value, float):
        return "float" in annotation
    if isinstance(value, str):
        return "str" in annotation or "MixedPrecisionConfig" in annotation
    if isinstance(value, list):
        return "List" in annotation or "list" in annotation
    return False


def check(argv: Tuple[str, ...]) -> Tuple[Any, argparse.Namespace]:
    """Apply one rendered program argv the way run_recipe.py does; return the config and its flags."""
    assert argv[0].endswith(CATALOGUE["entry"]), argv[0]
    flags = [a for a in argv[1:] if a.startswith("-")]
    values = list(argv[1:])
    known: List[str] = []
    overrides: List[str] = []
    i = 0
    while i < len(values):  # run_recipe.py: parse_known_args, then every leftover must be KEY=VALUE
        a = values[i]
        if a.startswith("-"):
            known += [a, values[i + 1]] if CATALOGUE["run_recipe_flags"][a]["type"] != "flag" else [a]
            i += 2 if CATALOGUE["run_recipe_flags"][a]["type"] != "flag" else 1
        else:
            assert "=" in a, "run_recipe.py: Expected override in KEY=VALUE form, got %r" % a
            overrides.append(a)
            i += 1
    assert flags, "no --recipe"
    ns = _flag_parser().parse_args(known)
    assert (ns.recipe is None) != (ns.model is None), "exactly one of --recipe/--model"
    assert ns.recipe in CATALOGUE["library_recipes"], ns.recipe
    cfg = _config_tree(ns.recipe)
    parsed = hydra_parser.OverridesParser.create().parse_overrides(overrides=overrides)
    loader.ConfigLoaderImpl._apply_overrides_to_config(overrides=parsed, cfg=cfg)
    fields = CATALOGUE["config"]
    for o in overrides:
        key = o.split("=", 1)[0]
        if key == "mixed_precision":
            value = OmegaConf.select(cfg, key)
            assert value in CATALOGUE["mixed_precision_recipes"] + [None], value
            continue
        sec, name = key.split(".", 1)
        table = fields["model_mla" if sec == "model" and ns.recipe.startswith("deepseek") else sec]
        value = OmegaConf.select(cfg, key)
        value = OmegaConf.to_container(value) if OmegaConf.is_config(value) else value
        assert _type_ok(table[name], value), "%s=%r does not fit %s" % (key, value, table[name])
    return cfg, ns


def _parsed_back(gen: Any, cfg: Any, ns: argparse.Namespace) -> None:
    layout = gen.sizing.layout
    model = gen.sizing.model
    m = cfg.model
    assert (m.tensor_model_parallel_size, m.pipeline_model_parallel_size) == (layout.tp, layout.pp)
    assert (m.context_parallel_size, m.expert_model_parallel_size) == (layout.cp, layout.ep)
    assert cfg.train.micro_batch_size == layout.micro_batch
    if model is not None:
        assert (m.num_layers, m.hidden_size, m.num_attention_heads) == (model.layers, model.hidden, model.heads)
        assert (m.num_moe_experts or 0) == model.experts
    precision = gen.spec.precision if gen.spec is not None and gen.spec.precision else "bf16"
    assert cfg.mixed_precision == nemo.MIXED_PRECISION[precision]
    if ns.dataset == "mock":
        assert cfg.train.train_iters == nemo.SMOKE_ITERS


def _run_matrix(**spec: object) -> Dict[str, int]:
    counts = {"checked": 0, "refused_by_planner": 0, "zero3_refused_by_adapter": 0}
    for case in M.matrix():
        try:
            gen = M.render(case, "nemo", **spec)
        except ConfigError as e:
            # the planner picked ZeRO-3, which LAUNCHER.caps excludes: gen says so (until the planner
            # honours caps, h4/serve, after which this count must be 0)
            assert "ZeRO-3" in str(e), str(e)
            counts["zero3_refused_by_adapter"] += 1
            continue
        if gen is None:
            counts["refused_by_planner"] += 1
            continue
        cfg, ns = check(gen.request.launch.program)
        _parsed_back(gen, cfg, ns)
        counts["checked"] += 1
    return counts


def test_matrix_smoke_is_accepted_and_parses_back_to_the_plan() -> None:
    counts = _run_matrix(smoke=True)
    print("nemo smoke:", counts)
    assert counts["checked"] >= 41, counts


def test_matrix_with_data_is_accepted() -> None:
    counts = _run_matrix(data="/data/dclm_text_document", tokenizer="meta-llama/Llama-3.1-8B", train_iters=1000)
    print("nemo data:", counts)
    assert counts["checked"] >= 41, counts


def test_hydra_refuses_a_key_the_container_lacks() -> None:
    # the bug this launcher had: a key the config does not have (NeMo 1 lacked model.context_parallel_size)
    argv = (nemo.ENTRY, "--recipe", "llama31_8b_pretrain_config", "--dataset", "mock", "model.no_such_key=1")
    with pytest.raises(Exception, match="Could not override 'model.no_such_key'"):
        check(argv)
    old = (nemo.ENTRY, "--recipe", "llama31_8b_pretrain_config", "trainer.num_nodes=2")
    with pytest.raises(Exception, match="Could not override 'trainer.num_nodes'"):
        check(old)


def test_missing_data_names_the_fields() -> None:
    case = M.Case("dgx-h100", "llama3.1-8b", 1, "pretrain")
    with pytest.raises(ConfigError, match="(?s)needs data.*needs tokenizer"):
        M.render(case, "nemo")
