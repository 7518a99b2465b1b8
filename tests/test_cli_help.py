"""Help text is the contract: every command has an example, and docs/cli-reference.md is its copy."""

from __future__ import annotations

from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from slurmgpu.cli import main

REFERENCE = Path(__file__).resolve().parents[1] / "docs" / "cli-reference.md"


def _commands(cmd=main, path=()):
    yield path, cmd
    if isinstance(cmd, click.Group):
        for name in sorted(cmd.commands):
            yield from _commands(cmd.commands[name], path + (name,))


def _help(path):
    r = CliRunner().invoke(main, list(path) + ["--help"], env={"COLUMNS": "100"}, prog_name="slurmgpu")
    assert r.exit_code == 0, r.output
    return r.output


@pytest.mark.parametrize("path", [p for p, _ in _commands()], ids=lambda p: " ".join(p) or "slurmgpu")
def test_every_command_has_help_with_an_example(path):
    text = _help(path)
    assert "Usage: slurmgpu" in text
    assert "Example" in text, "`slurmgpu %s --help` shows no example" % " ".join(path)


def _reference() -> str:
    out = [
        "# slurmgpu command reference",
        "",
        "Generated from `--help` by `tests/test_cli_help.py` (`pytest tests/test_cli_help.py --update-golden`).",
        "",
    ]
    for path, _ in _commands():
        out += [
            "## slurmgpu %s" % " ".join(path) if path else "## slurmgpu",
            "",
            "```",
            _help(path).rstrip(),
            "```",
            "",
        ]
    return "\n".join(out)


def test_cli_reference_matches_help(request):
    text = _reference()
    if request.config.getoption("--update-golden"):
        REFERENCE.write_text(text)
    assert REFERENCE.read_text() == text, (
        "docs/cli-reference.md is stale: run pytest tests/test_cli_help.py --update-golden"
    )
