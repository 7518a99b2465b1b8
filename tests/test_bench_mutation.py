"""bench/mutation.py's own rules: a stale or ambiguous snippet is found and named, the list is
checked when it is read, a planted mutation lives only in the scratch copy and is undone, and a
run kills what its tests catch and counts what they miss."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _bench():
    spec = importlib.util.spec_from_file_location("slurmgpu_mutation_bench", ROOT / "bench" / "mutation.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


B = _bench()


def _list(tmp_path: Path, body: str) -> Path:
    f = tmp_path / "m.toml"
    f.write_text(
        'must_kill = ["a"]\n[classes]\na = "class a"\n[tests]\nt = ["tests/test_x.py"]\n' + body, encoding="utf-8"
    )
    return f


def _mut(**kw: str) -> str:
    d = dict(id="m1", **{"class": "a"}, file="pkg/*.py", find="x + 1", replace="x - 1", tests="t")
    d.update(kw)
    return "[[mutation]]\n" + "".join('%s = "%s"\n' % (k, v) for k, v in d.items())


def test_the_repositorys_list_is_well_formed():
    spec = B.load_spec(B.LIST)
    assert len(spec.mutations) >= 80
    assert set(spec.must_kill) <= set(spec.classes)
    classes = {m.cls for m in spec.mutations}
    assert {"filter-verdict", "placement", "launch-flags", "memory"} <= classes
    ids = {m.id for m in spec.mutations}
    # the three surviving bugs stay in the list
    assert {"filter.ntasks-rounds-down", "placement.lua-segment-multiple", "launch.megatron-expert-tp"} <= ids


def test_every_mutation_of_the_list_still_finds_its_snippet_once():
    """The list is kept with the code: a change to a guarded line must move its mutation with it,
    or `make mutation` (not run by CI) would stop at a stale snippet long after the change."""
    spec = B.load_spec(B.LIST)
    files = B.tree_files(ROOT)
    where = {m.id: B.locate(ROOT, files, m) for m in spec.mutations}
    bad = {k: v[0] for k, v in where.items() if v[0] != "ok"}
    assert not bad, "bench/mutations.toml: re-point these mutations to the code as it is now: %s" % bad


@pytest.mark.parametrize(
    "body,error",
    [
        (_mut(tests="nope"), "tests 'nope' is not a set"),
        (_mut(**{"class": "b"}), "class 'b' is not in [classes]"),
        (_mut(replace="x + 1"), "the replacement is the snippet itself"),
        (_mut() + _mut(), "id given twice"),
        (_mut(find=""), "'find' must be a non-empty string"),
    ],
)
def test_a_bad_list_is_refused_with_the_mutation_named(tmp_path, body, error):
    with pytest.raises(SystemExit) as e:
        B.load_spec(_list(tmp_path, body))
    assert error in str(e.value) and "m.toml: mutation #" in str(e.value)


def test_stale_and_ambiguous_snippets_are_found(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "a.py").write_text("y = x + 1\n")
    (tmp_path / "pkg" / "b.py").write_text("z = x + 2\n")
    files = ["pkg/a.py", "pkg/b.py"]
    spec = B.load_spec(_list(tmp_path, _mut()))
    assert B.locate(tmp_path, files, spec.mutations[0]) == ("ok", ["pkg/a.py"])
    (tmp_path / "pkg" / "b.py").write_text("z = x + 1\n")
    assert B.locate(tmp_path, files, spec.mutations[0])[0] == "ambiguous"
    (tmp_path / "pkg" / "a.py").write_text("y = x+1\n")
    (tmp_path / "pkg" / "b.py").write_text("\n")
    assert B.locate(tmp_path, files, spec.mutations[0]) == ("stale", [])


def test_a_run_kills_what_its_tests_catch_and_reports_the_rest(tmp_path):
    """A toy repository: one mutation its test catches, one it misses, one stale. The work tree is
    never touched; the table counts each; the stale one and the survivor fail the run."""
    repo = tmp_path / "repo"
    (repo / "pkg").mkdir(parents=True)
    (repo / "tests").mkdir()
    (repo / "pkg" / "__init__.py").write_text("")
    (repo / "pkg" / "calc.py").write_text("def nodes(tasks, per):\n    return -(-tasks // per)\n\nLIMIT = 4\n")
    (repo / "tests" / "test_calc.py").write_text(
        "from pkg.calc import nodes\n\ndef test_rounds_up():\n    assert nodes(12, 8) == 2\n"
    )
    body = (
        _mut(id="caught", file="pkg/calc.py", find="-(-tasks // per)", replace="tasks // per")
        + _mut(id="missed", file="pkg/calc.py", find="LIMIT = 4", replace="LIMIT = 5")
        + _mut(id="gone", file="pkg/calc.py", find="no such code", replace="x")
    )
    lst = _list(tmp_path, body.replace("tests/test_x.py", "tests/test_calc.py"))
    lst.write_text(lst.read_text().replace("tests/test_x.py", "tests/test_calc.py"))
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    before = (repo / "pkg" / "calc.py").read_text()
    out = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "mutation.py"), "--list", str(lst), "--root", str(repo)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert (repo / "pkg" / "calc.py").read_text() == before
    assert out.returncode == 1, out.stdout + out.stderr
    assert "STALE gone (stale)" in out.stdout
    assert "killed" in out.stdout and "caught" in out.stdout
    assert "| a | 2 | 1 | 1 | 50 % |" in out.stdout, out.stdout
    assert "missed [a] pkg/calc.py" in out.stdout
    assert "survivors in classes that must be killed (a): 1" in out.stdout
