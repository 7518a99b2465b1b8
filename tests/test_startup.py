"""What `gen` loads, and the parsed-YAML cache that lets it skip PyYAML for unchanged files.

The cache must never change an answer: a hit gives the same values, types, key order and
positions as a parse; an edited file, a new file name, a damaged entry, a document it cannot
hold and a YAML error all go through the parser. bench/gen_bench.py gives the time figures.
"""

from __future__ import annotations

import datetime
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from slurmgpu import yamlsrc
from slurmgpu.errors import ConfigError
from slurmgpu.yamlsrc import LocDict, LocList, load_yaml, load_yaml_file

ROOT = Path(__file__).resolve().parent.parent
PRESETS = sorted((ROOT / "site-configs").glob("*.yaml"))
GEN = [
    "gen",
    "--model",
    "llama3-70b",
    "--launcher",
    "megatron",
    "--nodes",
    "2",
    "--tp",
    "8",
    "--pp",
    "2",
    "--task",
    "lora",
    "--smoke",
    "--site",
    "dgx-h100",
]

SPEC = """\
# a job spec with every kind of node the loader makes
model: llama3-8b
launcher: torchrun
nodes: 2
parallel: {tp: 4, pp: 1}
env:
  NCCL_DEBUG: INFO
  EMPTY: ""
mounts: [/data:/data, "/scratch/$USER:/ckpt"]
defaults: &d {time: "01:00:00", qos: null}
sbatch:
  <<: *d
  time: "02:00:00"
numbers: [1, 2.5, -3, 0x1F, 1e3, .inf, true, ~, "7"]
unicode: "grüße ✓"
nested: [[1, [2, {a: [3]}]], {}, []]
1: int key
"""


@pytest.fixture
def cache(tmp_path, monkeypatch):
    d = tmp_path / "cache"
    monkeypatch.setenv("SLURMGPU_CACHE_DIR", str(d))
    return d / "yaml"


def same(a, b, where="doc"):
    """Equal values, equal types (LocDict/LocList/bool/int/...), equal key order and positions."""
    assert type(a) is type(b), "%s: %r is %s, %r is %s" % (where, a, type(a), b, type(b))
    if isinstance(a, LocDict):
        assert list(a) == list(b), where
        assert a.loc == b.loc and a.locs == b.locs, where
        for k in a:
            same(a[k], b[k], "%s.%s" % (where, k))
    elif isinstance(a, LocList):
        assert len(a) == len(b) and a.loc == b.loc and a.locs == b.locs, where
        for i, (x, y) in enumerate(zip(a, b)):
            same(x, y, "%s[%d]" % (where, i))
    else:
        assert a == b, where


def parse_fresh(text, filename, monkeypatch):
    with monkeypatch.context() as m:
        m.setenv("SLURMGPU_CACHE_DIR", "")
        return load_yaml(text, filename)


@pytest.mark.parametrize(
    "path", PRESETS + [ROOT / "tests" / "data" / "sites" / "testcluster.yaml"], ids=lambda p: p.name
)
def test_a_cache_hit_is_the_parse_exactly(path, cache, monkeypatch):
    fresh = parse_fresh(path.read_text(encoding="utf-8"), str(path), monkeypatch)
    first = load_yaml_file(str(path))  # parses, writes the entry
    assert len(list(cache.iterdir())) == 1
    second = load_yaml_file(str(path))  # from the entry
    same(fresh, first)
    same(fresh, second)


def test_a_spec_with_anchors_merges_and_every_scalar_kind_round_trips(cache, monkeypatch):
    fresh = parse_fresh(SPEC, "job.yaml", monkeypatch)
    load_yaml(SPEC, "job.yaml")
    hit = load_yaml(SPEC, "job.yaml")
    same(fresh, hit)
    assert hit["sbatch"] == {"time": "02:00:00", "qos": None}
    assert hit["numbers"][4] == "1e3" and hit["numbers"][5] == float("inf") and hit["numbers"][6] is True
    assert hit[1] == "int key" and hit.locs[1] == ("job.yaml", 17, 1)


def test_the_cache_is_really_read(cache, monkeypatch):
    """A hit does not call the parser (else the cache would only cost time)."""
    fresh = parse_fresh(SPEC, "job.yaml", monkeypatch)
    load_yaml(SPEC, "job.yaml")

    def no_parse(text, filename):
        raise AssertionError("parsed again")

    monkeypatch.setattr(yamlsrc, "_parse", no_parse)
    same(fresh, load_yaml(SPEC, "job.yaml"))


def test_an_edited_file_is_parsed_again(cache, tmp_path):
    f = tmp_path / "site.yaml"
    f.write_text("nodes: 4\nname: a\n")
    assert load_yaml_file(str(f))["nodes"] == 4
    f.write_text("nodes: 8\nname: a\n")  # same size, same mtime second: the text decides
    assert load_yaml_file(str(f))["nodes"] == 8
    assert load_yaml_file(str(f))["nodes"] == 8


def test_the_same_text_under_another_name_keeps_its_own_positions(cache):
    a = load_yaml("x: 1\n", "/a/site.yaml")
    b = load_yaml("x: 1\n", "/b/site.yaml")
    assert a.locs["x"] == ("/a/site.yaml", 1, 1) and b.locs["x"] == ("/b/site.yaml", 1, 1)
    assert load_yaml("x: 1\n", "/a/site.yaml").locs["x"][0] == "/a/site.yaml"


def test_yaml_errors_are_never_cached(cache):
    for _ in range(2):
        with pytest.raises(ConfigError, match="duplicate key"):
            load_yaml("a: 1\na: 2\n", "dup.yaml")
        with pytest.raises(ConfigError, match="invalid YAML"):
            load_yaml("a: [1, 2\n", "bad.yaml")
    assert not cache.exists() or not list(cache.iterdir())


def test_documents_json_cannot_hold_are_parsed_every_time(cache):
    text = "when: 2024-05-01\ntags: !!set {a, b}\n"
    for _ in range(2):
        data = load_yaml(text, "odd.yaml")
        assert data["when"] == datetime.date(2024, 5, 1) and data["tags"] == {"a", "b"}
    assert not list(cache.iterdir())
    deep = "a: " + "[" * 150 + "]" * 150 + "\n"  # deeper than the cache writes
    for _ in range(2):
        assert load_yaml(deep, "deep.yaml")["a"] == eval("[" * 150 + "]" * 150)
    assert not list(cache.iterdir())
    with pytest.raises(ConfigError, match="recursive"):  # and an alias inside itself stays an error
        load_yaml("a: &x [1, *x]\n", "loop.yaml")


@pytest.mark.parametrize("damage", ["", "{not json", json.dumps({"format": 1}), json.dumps([1, 2]), "FORMAT", "PARSER"])
def test_a_damaged_or_foreign_entry_is_a_miss(damage, cache, monkeypatch):
    load_yaml(SPEC, "job.yaml")
    (entry,) = cache.iterdir()
    if damage in ("FORMAT", "PARSER"):
        raw = json.loads(entry.read_text())
        raw["format" if damage == "FORMAT" else "parser"] = "another"
        raw["data"] = {"m": [["model", "poisoned", None]], "at": None}
        damage = json.dumps(raw)
    entry.write_text(damage)
    same(parse_fresh(SPEC, "job.yaml", monkeypatch), load_yaml(SPEC, "job.yaml"))
    same(parse_fresh(SPEC, "job.yaml", monkeypatch), load_yaml(SPEC, "job.yaml"))  # rewritten, then read


def test_an_empty_cache_dir_setting_turns_the_cache_off(tmp_path, monkeypatch):
    monkeypatch.setenv("SLURMGPU_CACHE_DIR", "")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    load_yaml(SPEC, "job.yaml")
    assert not (tmp_path / "xdg").exists() and not (tmp_path / "home").exists()


def _gen_loads(tmp_path, cache_dir):
    """The modules a whole `slurmgpu gen` process imported (its output checked, not just its exit)."""
    code = (
        "import sys\nfrom slurmgpu.cli import main\n"
        "try:\n    main(%r, prog_name='slurmgpu')\nexcept SystemExit as e:\n    assert not e.code, e.code\n"
        "sys.stderr.write('\\nLOADED=' + ','.join(sorted(sys.modules)) + '\\n')\n" % (GEN,)
    )
    env = dict(os.environ, PYTHONPATH=str(ROOT), SLURMGPU_CACHE_DIR=str(cache_dir))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=str(tmp_path))
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("#!/bin/bash") and "srun" in r.stdout, r.stdout[:500]
    return set(r.stderr.rsplit("LOADED=", 1)[1].strip().split(","))


def test_gen_loads_only_what_it_uses(tmp_path):
    """A warm `gen` (site and templates cached) imports no YAML parser, no psutil (preflight and
    probe run on the nodes, not here), no difflib (did-you-mean hints are for mistakes) and,
    with lupa, no subprocess machinery. Move such imports into the function that needs them."""
    first = _gen_loads(tmp_path, tmp_path / "cache")
    assert "yaml" in first  # the cold run parses the site
    warm = _gen_loads(tmp_path, tmp_path / "cache")
    unwanted = {"yaml", "psutil", "difflib"}
    try:
        import lupa.lua51  # noqa: F401

        unwanted.add("subprocess")
        assert "lupa.lua51" in warm  # the policy check ran in-process
    except ImportError:
        pass
    assert not unwanted & warm, "gen imported %s" % sorted(unwanted & warm)


def test_the_console_script_quiets_the_collector_only_for_a_moment():
    """slurmgpu.__main__ (the console script) turns the cyclic GC off at start and on again
    after GC_QUIET_S, so a long command still collects; CliRunner's path is untouched."""
    code = (
        "import gc, time, slurmgpu.__main__ as m\n"
        "m.quiet_gc(0.2)\n"
        "off = not gc.isenabled()\n"
        "m.quiet_gc(0.2)  # already off: no second timer\n"
        "time.sleep(1.0)\n"
        "print(off, gc.isenabled())\n"
    )
    r = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=str(ROOT))
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["True", "True"]
    import gc

    from click.testing import CliRunner

    from slurmgpu.cli import main

    assert CliRunner().invoke(main, ["--version"]).exit_code == 0 and gc.isenabled()


def test_python_dash_m_slurmgpu_runs_gen(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(ROOT), SLURMGPU_CACHE_DIR=str(tmp_path / "cache"))
    r = subprocess.run(
        [sys.executable, "-m", "slurmgpu"] + GEN, capture_output=True, text=True, env=env, cwd=str(tmp_path)
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("#!/bin/bash") and "tp=8 pp=2" in r.stderr
