"""Shared name lists live in slurmgpu.vocab; every layer reads them from there (no copies), and
the Lua policy's launcher words name exactly those launchers."""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import click

from slurmgpu import cli, jobfields, vocab
from slurmgpu.job import launchers, spec
from slurmgpu.nccl import FABRIC_TABLE
from slurmgpu.plan import memory
from slurmgpu.policy import lua_dir

# the modules that read the lists (package faces re-export only what other layers use)
site = importlib.import_module("slurmgpu.site.load")
site_model = importlib.import_module("slurmgpu.site.model")
plan = importlib.import_module("slurmgpu.plan.planner")

ROOT = Path(__file__).resolve().parent.parent


def test_vocab_imports_nothing():
    tree = ast.parse((ROOT / "slurmgpu" / "vocab.py").read_text())
    assert not [n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))]


def test_launchers_are_described_in_the_vocab_order():
    assert tuple(launchers.LAUNCHERS) == vocab.LAUNCHERS
    assert launchers.NAMES is vocab.LAUNCHERS and jobfields.by_key("launcher").choices is vocab.LAUNCHERS
    assert site.LAUNCHERS is vocab.LAUNCHERS


def test_no_layer_keeps_its_own_copy():
    assert jobfields.CONTAINER_FIELDS[0].choices is site.RUNTIMES is vocab.RUNTIMES
    assert spec.PARALLEL_KEYS is plan.PIN_KEYS is vocab.PARALLEL_KEYS
    assert plan.TASKS is vocab.TASKS and plan.PRECISIONS is vocab.PRECISIONS and plan.RECOMPUTE is vocab.RECOMPUTE
    assert site.FABRICS is vocab.FABRICS and tuple(FABRIC_TABLE) == vocab.FABRICS
    assert not hasattr(memory, "RECOMPUTE") and not hasattr(site_model, "LAUNCHER_KINDS")
    # no literal copy of a list left in the code (a tuple literal equal to one of them)
    lists = {v for k, v in vars(vocab).items() if k.isupper()}
    for path in sorted((ROOT / "slurmgpu").rglob("*.py")):
        if path.name == "vocab.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, (ast.Tuple, ast.List))
                and len(node.elts) > 2
                and all(isinstance(e, ast.Constant) for e in node.elts)
            ):
                assert tuple(e.value for e in node.elts) not in lists, "%s:%d" % (path.name, node.lineno)


def _choices(command, option):
    for p in command.params:
        if option in getattr(p, "opts", ()):
            assert isinstance(p.type, click.Choice)
            return tuple(p.type.choices)
    raise AssertionError("no %s on %s" % (option, command.name))


def test_cli_choices_are_the_vocab():
    for name in ("gen", "submit"):
        assert _choices(cli.main.commands[name], "--launcher") == vocab.LAUNCHERS
        assert _choices(cli.main.commands[name], "--container") == vocab.RUNTIMES
    p = cli.main.commands["plan"]
    assert _choices(p, "--task") == vocab.TASKS and _choices(p, "--recompute") == vocab.RECOMPUTE
    assert _choices(p, "--precision") == vocab.PRECISIONS
    assert _choices(cli.main.commands["preflight"], "--container-runtime") == vocab.RUNTIMES


def test_the_policy_names_the_same_launchers():
    text = (lua_dir() / "policy" / "names.lua").read_text()
    block = re.search(r"local LAUNCHER_WORDS = \{(.*?)\n\}", text, re.S).group(1)
    pairs = re.findall(r'\{"([^"]+)", "([^"]+)"\}', block)
    assert pairs and {name for _, name in pairs} == set(vocab.LAUNCHERS)
    # and each word is what finds it: the launcher's own name, or how it is started
    for word, name in pairs:
        assert name in word or word == "torch.distributed.run", (word, name)
