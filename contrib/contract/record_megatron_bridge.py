#!/usr/bin/env python3
"""Record the facts the NeMo / Megatron-Bridge contract test checks, from source snapshots.

Megatron-Bridge needs Python 3.12 and CUDA-only wheels (transformer-engine, megatron-core[dev]),
so CI cannot import it; instead this script reads the pinned sources with `ast` (nothing is
executed or copied) and writes names and type annotations only:

  * the flags of scripts/training/run_recipe.py (name, type, choices) and its --dataset presets,
  * the library recipe names (megatron.bridge.recipes.*.__all__) and, per recipe the adapter uses,
    the Hugging Face config it builds the model from and the layout it sets,
  * the registered mixed-precision recipe names,
  * the fields (name -> annotation) of each ConfigContainer section the overrides touch, following
    the dataclass bases into Megatron-LM (megatron.core / megatron.training).

Usage (re-record when the pin in slurmgpu/job/launchers/nemo.py moves):
  git -C Megatron-Bridge checkout v0.6.0 && git -C Megatron-Bridge submodule update 3rdparty/Megatron-LM
  python3 contrib/contract/record_megatron_bridge.py BRIDGE_DIR MEGATRON_LM_DIR \
      --bridge-version 0.6.0 --bridge-commit SHA --mcore-commit SHA > tests/data/contract/megatron_bridge.json
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import sys
from typing import Dict, List, Optional, Tuple

# ConfigContainer section -> (module, class) whose dataclass fields the section has
SECTIONS = {
    "model": ("megatron.bridge.models.gpt_provider", "GPTModelProvider"),
    "model_mla": ("megatron.bridge.models.mla_provider", "MLAModelProvider"),
    "train": ("megatron.bridge.training.config", "TrainingConfig"),
    "optimizer": ("megatron.bridge.training.config", "OptimizerConfig"),
    "scheduler": ("megatron.bridge.training.config", "SchedulerConfig"),
    "dataset": ("megatron.bridge.training.config", "MockGPTDatasetConfig"),
    "checkpoint": ("megatron.bridge.training.config", "CheckpointConfig"),
    "tokenizer": ("megatron.bridge.training.tokenizers.config", "TokenizerConfig"),
    "mixed_precision": ("megatron.bridge.training.mixed_precision", "MixedPrecisionConfig"),
    "logger": ("megatron.bridge.training.config", "LoggerConfig"),
    "ddp": ("megatron.bridge.training.config", "DistributedDataParallelConfig"),
    "comm_overlap": ("megatron.bridge.training.comm_overlap", "CommOverlapConfig"),
    "container": ("megatron.bridge.training.config", "ConfigContainer"),
}
# library recipes whose defaults (HF config, layout) the adapter relies on
RECIPES_OF_INTEREST = (
    "llama31_8b_pretrain_config",
    "llama31_70b_pretrain_config",
    "llama31_405b_pretrain_config",
    "llama3_8b_pretrain_config",
    "llama3_70b_pretrain_config",
    "deepseek_v3_pretrain_config",
)


class Sources:
    def __init__(self, bridge: str, mlm: str) -> None:
        self.roots = (
            (os.path.join(bridge, "src"), ("megatron.bridge",)),
            (mlm, ("megatron.core", "megatron.training")),
        )
        self._cache: Dict[str, Optional[ast.Module]] = {}

    def path(self, module: str) -> Optional[str]:
        for root, prefixes in self.roots:
            if module.startswith(prefixes):
                base = os.path.join(root, *module.split("."))
                for cand in (base + ".py", os.path.join(base, "__init__.py")):
                    if os.path.exists(cand):
                        return cand
        return None

    def tree(self, module: str) -> Optional[ast.Module]:
        if module not in self._cache:
            p = self.path(module)
            self._cache[module] = ast.parse(open(p, encoding="utf-8").read()) if p else None
        return self._cache[module]

    def find_class(self, module: str, name: str, depth: int = 0) -> Optional[Tuple[str, ast.ClassDef]]:
        tree = self.tree(module)
        if tree is None or depth > 6:
            return None
        for node in tree.body:
            if isinstance(node, ast.ClassDef) and node.name == name:
                return module, node
        imported = self.imports(module)
        if name in imported:
            src_mod, src_name = imported[name]
            return self.find_class(src_mod, src_name, depth + 1)
        return None

    def imports(self, module: str) -> Dict[str, Tuple[str, str]]:
        tree = self.tree(module)
        out: Dict[str, Tuple[str, str]] = {}
        if tree is None:
            return out
        pkg = module if (self.path(module) or "").endswith("__init__.py") else module.rsplit(".", 1)[0]
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                mod = node.module or ""
                if node.level:
                    parts = pkg.split(".")
                    mod = ".".join(parts[: len(parts) - node.level + 1] + ([mod] if mod else []))
                for a in node.names:
                    out[a.asname or a.name] = (mod, a.name)
        return out

    def fields(self, module: str, name: str) -> Dict[str, str]:
        """Dataclass fields (name -> annotation source), bases first, as Python's MRO would see them."""
        found = self.find_class(module, name)
        if found is None:
            raise SystemExit("class %s not found from %s" % (name, module))
        mod, cls = found
        out: Dict[str, str] = {}
        for base in reversed(cls.bases):
            bname = base.value.id if isinstance(base, ast.Subscript) and isinstance(base.value, ast.Name) else None
            bname = base.id if isinstance(base, ast.Name) else bname
            if bname and self.find_class(mod, bname) is not None:
                out.update(self.fields(mod, bname))
        for node in cls.body:
            if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                ann = ast.unparse(node.annotation)
                if not ann.startswith("ClassVar"):
                    out[node.target.id] = ann
        return out


def run_recipe_flags(path: str) -> Dict[str, Dict[str, object]]:
    """Every add_argument of run_recipe.py: its spellings, type, choices, action."""
    tree = ast.parse(open(path, encoding="utf-8").read())
    out: Dict[str, Dict[str, object]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "add_argument":
            names = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
            info: Dict[str, object] = {"type": "str"}
            for kw in node.keywords:
                if kw.arg == "type" and isinstance(kw.value, ast.Name):
                    info["type"] = kw.value.id
                elif kw.arg == "action" and isinstance(kw.value, ast.Constant):
                    info["type"] = "flag" if kw.value.value == "store_true" else str(kw.value.value)
                elif kw.arg == "choices" and isinstance(kw.value, (ast.List, ast.Tuple)):
                    info["choices"] = [e.value for e in kw.value.elts if isinstance(e, ast.Constant)]
                elif kw.arg == "choices":
                    info["choices"] = "dataset_presets"
            for n in names:
                out[n] = info
    return dict(sorted(out.items()))


def dict_keys(tree: ast.Module, name: str) -> List[str]:
    for node in tree.body:
        target = node.target if isinstance(node, ast.AnnAssign) else None
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
        if isinstance(target, ast.Name) and target.id == name and isinstance(node.value, ast.Dict):  # type: ignore[union-attr]
            return sorted(k.value for k in node.value.keys if isinstance(k, ast.Constant))  # type: ignore[union-attr]
    raise SystemExit("%s not found" % name)


def library_recipes(src: Sources) -> Tuple[List[str], Dict[str, Tuple[str, str]]]:
    """Exported recipe names and where each is defined (after compatibility aliases)."""
    names: List[str] = []
    where: Dict[str, Tuple[str, str]] = {}
    root = os.path.join(src.roots[0][0], "megatron", "bridge", "recipes")
    for family in sorted(os.listdir(root)):
        init = os.path.join(root, family, "__init__.py")
        if not os.path.exists(init):
            continue
        module = "megatron.bridge.recipes.%s" % family
        tree = src.tree(module)
        assert tree is not None
        exported: List[str] = []
        for node in tree.body:
            if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "__all__" for t in node.targets):
                exported = [e.value for e in node.value.elts if isinstance(e, ast.Constant)]  # type: ignore[attr-defined]
        for n in exported:
            if n.endswith("_config") or "_config_" in n:
                names.append(n)
                mod, real = n, n
                m = module
                for _ in range(4):  # follow `from x import y as n` chains to the defining function
                    imp = src.imports(m)
                    if mod not in imp:
                        break
                    m, real = imp[mod]
                    mod = real
                where[n] = (m, real)
    return sorted(set(names)), where


def recipe_facts(src: Sources, module: str, func: str) -> Dict[str, object]:
    """The HF model id and the literal cfg.model.* / cfg.dataset.seq_length the recipe sets."""
    tree = src.tree(module)
    assert tree is not None
    fn = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == func)
    facts: Dict[str, object] = {"defined_in": "%s.%s" % (module, func)}
    consts = {
        n.targets[0].id: n.value.value
        for n in tree.body
        if isinstance(n, ast.Assign) and isinstance(n.targets[0], ast.Name) and isinstance(n.value, ast.Constant)
    }
    for node in ast.walk(fn):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "from_hf_pretrained" and node.args:
            arg = node.args[0]
            if isinstance(arg, ast.Constant):
                facts["hf_model"] = arg.value
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Attribute):
            key = ast.unparse(node.targets[0])
            if not key.startswith(("cfg.model.", "cfg.dataset.seq_length", "cfg.train.")):
                continue
            v = node.value
            if isinstance(v, ast.Constant) and isinstance(v.value, (int, bool, str, type(None))):
                facts[key[4:]] = v.value
            elif isinstance(v, ast.Name) and v.id in consts:
                facts[key[4:]] = consts[v.id]
    return facts


def mixed_precision_names(src: Sources) -> List[str]:
    tree = src.tree("megatron.bridge.training.mixed_precision")
    assert tree is not None
    return sorted(
        n.name
        for n in tree.body
        if isinstance(n, ast.FunctionDef) and any(getattr(d, "id", "") == "register" for d in n.decorator_list)
    )


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("bridge")
    ap.add_argument("megatron_lm")
    ap.add_argument("--bridge-version", required=True)
    ap.add_argument("--bridge-commit", required=True)
    ap.add_argument("--mcore-commit", required=True)
    a = ap.parse_args(argv)
    src = Sources(a.bridge, a.megatron_lm)
    names, where = library_recipes(src)
    ds_tree = src.tree("megatron.bridge.recipes.utils.dataset_utils")
    assert ds_tree is not None
    out = {
        "source": {
            "megatron_bridge": {"version": a.bridge_version, "commit": a.bridge_commit},
            "megatron_core": {"commit": a.mcore_commit, "path": "3rdparty/Megatron-LM"},
            "recorded_by": "contrib/contract/record_megatron_bridge.py",
        },
        "entry": "scripts/training/run_recipe.py",
        "run_recipe_flags": run_recipe_flags(os.path.join(a.bridge, "scripts", "training", "run_recipe.py")),
        "dataset_presets": dict_keys(ds_tree, "DATASET_PRESETS"),
        "mixed_precision_recipes": mixed_precision_names(src),
        "library_recipes": names,
        "recipes": {r: recipe_facts(src, *where[r]) for r in RECIPES_OF_INTEREST if r in where},
        "config": {sec: src.fields(mod, cls) for sec, (mod, cls) in SECTIONS.items()},
    }
    json.dump(out, sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
