"""The layers' import rules, checked over every module's `import` statements (lazy ones too).

A new upward import fails here with the file, line and the rule it breaks; docs/architecture.md
explains each package's place.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Dict, Iterator, List, Set, Tuple

import pytest

PKG = Path(__file__).resolve().parent.parent / "slurmgpu"
ROOT_MODULES = {"errors", "yamlsrc", "schema", "vocab", "cache", "stamp", "jobfields", "lazy"}

# package -> the packages it may import (root modules are always allowed, except where noted)
ALLOWED: Dict[str, Set[str]] = {
    "cli": {"site", "slurm", "plan", "nccl", "render", "job", "policy", "discover", "node", "view", "runs"},
    "runs": {"site", "slurm", "plan", "node"},  # report/calibrate: log reading, runs file, the fit
    "view": {"site", "plan"},  # the explain picture: drawn from plans, layouts and site topology
    "discover": {"site", "slurm", "node", "nccl"},
    "node": {"site", "slurm", "nccl", "plan", "policy", "render"},  # render: the script's path expansion
    "job": {"site", "plan", "nccl", "render", "policy", "slurm"},
    "policy": {"site", "slurm", "nccl"},
    "render": set(),
    "plan": {"site"},
    "nccl": {"site", "plan"},
    "site": {"slurm"},  # the one host-list codec for partitions.X.leaf_switches (slurm imports nothing)
    "slurm": set(),
}
# third-party modules only one layer may import
ONLY_IN = {"click": {"cli"}, "jinja2": {"render"}, "subprocess": {"slurm", "policy", "node", "discover", "cli"}}
ROOT_MAY_IMPORT = {
    "errors": set(),
    "vocab": set(),
    "cache": set(),
    "stamp": set(),
    "lazy": set(),
    "jobfields": {"vocab"},
    "yamlsrc": {"errors", "cache"},
    "schema": {"errors", "yamlsrc"},
}


def _modules() -> Iterator[Tuple[str, Path]]:
    for path in sorted(PKG.rglob("*.py")):
        rel = path.relative_to(PKG).with_suffix("")
        yield ".".join(rel.parts), path


def _imports(path: Path, dotted: str) -> Iterator[Tuple[int, str]]:
    """(line, absolute module) for every import in the file, relative ones resolved."""
    here = ["slurmgpu"] + dotted.split(".")
    base = here[:-1]  # the package a relative import starts from (for __init__, dotted ends in __init__)
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            for al in node.names:
                yield node.lineno, al.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = base[: len(base) - (node.level - 1)] if node.level > 1 else base
                mod = ".".join(parts + ([node.module] if node.module else []))
                if not node.module:
                    for al in node.names:
                        yield node.lineno, mod + "." + al.name
                    continue
            else:
                mod = node.module or ""
            yield node.lineno, mod


def _layer(dotted: str) -> str:
    return dotted.split(".")[0]


def _violations(modules: Iterator[Tuple[str, Path]]) -> List[str]:
    out: List[str] = []
    for dotted, path in modules:
        if dotted in ("__init__", "__main__"):
            continue
        layer = _layer(dotted)
        for line, mod in _imports(path, dotted):
            where = "%s:%d" % (path.relative_to(PKG.parent) if PKG.parent in path.parents else path.name, line)
            top = mod.split(".")[0]
            if top in ONLY_IN and layer not in ONLY_IN[top]:
                out.append("%s: %s imports %s (only %s may)" % (where, dotted, top, sorted(ONLY_IN[top])))
            if top != "slurmgpu" or mod == "slurmgpu":
                continue
            target = mod.split(".")[1] if "." in mod else ""
            if target in ("__version__", "") or target == layer:
                continue
            if dotted in ROOT_MAY_IMPORT:
                if target not in ROOT_MAY_IMPORT[dotted]:
                    out.append("%s: root module %s imports slurmgpu.%s" % (where, dotted, target))
                continue
            if layer in ROOT_MODULES:
                continue
            if target in ROOT_MODULES:
                continue
            if target == "cli":
                out.append("%s: %s imports the CLI (nothing may)" % (where, dotted))
            elif target not in ALLOWED.get(layer, set()):
                out.append(
                    "%s: %s (layer %s) imports slurmgpu.%s; %s may import only %s and root modules"
                    % (where, dotted, layer, target, layer, sorted(ALLOWED.get(layer, set())))
                )
    return out


def test_every_module_belongs_to_a_known_layer() -> None:
    unknown = [
        d
        for d, _ in _modules()
        if d not in ("__init__", "__main__") and _layer(d) not in ALLOWED and d not in ROOT_MODULES
    ]
    assert unknown == [], "add these to ALLOWED (and docs/architecture.md): %s" % unknown


def test_no_import_breaks_the_layer_rules() -> None:
    bad = _violations(_modules())
    assert bad == [], "\n".join(bad)


def test_the_checker_sees_a_planted_upward_import(tmp_path: Path) -> None:
    """The rule table must be able to fail: plan importing job is caught."""
    fake = tmp_path / "x.py"
    fake.write_text("from ..job import generate\nimport click\nfrom ..site import Site\n")
    bad = _violations(iter([("plan.x", fake)]))
    assert len(bad) == 2, bad
    assert "imports slurmgpu.job" in bad[0] and "imports click" in bad[1]


@pytest.mark.parametrize("layer", sorted(ALLOWED))
def test_each_layer_has_a_face(layer: str) -> None:
    assert (PKG / layer / "__init__.py").is_file()
