"""One grammar for the stamp line: slurmgpu.stamp (the generator, `slurmgpu doctor`) and the
submit filter's find_stamp in contrib/lua/policy/stamp.lua (run here under lupa, as `check` runs it)
accept exactly the same lines and read the same numbers from them."""

from __future__ import annotations

from typing import Any, Dict, Optional

import pytest

from slurmgpu.node import read_stamp
from slurmgpu.plan import Layout
from slurmgpu.policy import policy_source
from slurmgpu.stamp import KEYS, format_stamp, parse_stamp, stamp_int

lupa = pytest.importorskip("lupa")

GOOD = "# slurmgpu: site=dgx-h100 tp=8 pp=2 dp=4 cp=1 ep=1 nodes=8 gpus_per_node=8"
LINES = [
    GOOD,
    "#slurmgpu: site=a tp=8",  # no blank after '#'
    "#  slurmgpu: tp=8",  # two blanks
    "# slurmgpu:tp=8",  # no blank before the first word
    "# slurmgpu:  tp=8",
    "# slurmgpu:\ttp=8\tpp=2",
    "   # slurmgpu: tp=4 pp=1",  # leading spaces
    "\t# slurmgpu: tp=4",
    " " * 64 + "# slurmgpu: tp=4",  # as much indent as is read
    " " * 65 + "# slurmgpu: tp=4",  # one more
    "echo # slurmgpu: tp=4",  # not at the start of the line
    "x# slurmgpu: tp=4",
    "# slurmgpu: tp=8 trailing junk here",
    "# slurmgpu: tp=8 pp=2 junk tp=4",  # words stop at the junk
    "# slurmgpu: tp=8 tp=16",  # a later word wins
    "# slurmgpu: tp=8 tp=x",  # ... also when it is not a number
    "# slurmgpu: tp=8junk",
    "# slurmgpu: tp=",
    "# slurmgpu: tp=-8",
    "# slurmgpu: tp=+8",
    "# slurmgpu: tp=08",
    "# slurmgpu: tp=1234567",  # 7 digits
    "# slurmgpu: tp=12345678",  # 8: not a number to the filter
    "# slurmgpu: site=a",  # no tp
    "# slurmgpu: preflight ok",
    "# slurmgpu: tp=8\r",  # DOS line end
    "# slurmgpu: tp=8 pp=4\r extra=1",
    "# slurmgpu: model=llama3.1-8b tp=2",  # other keys are words too
    "# slurmgpu: " + " ".join("k%d=1" % i for i in range(15)) + " tp=8",  # 16th word
    "# slurmgpu: " + " ".join("k%d=1" % i for i in range(16)) + " tp=8",  # 17th: not read
    "# slurmgpu: site=" + "s" * 570 + " tp=8",  # inside the 590 characters read
    "# slurmgpu: site=" + "s" * 580 + " tp=8",  # past them
    '# slurmgpu: site=a"b tp=3',  # quotes are plain characters
    "# slurmgpu: tp=8 'pp=2'",
    "# slurmgpu: TP=8",  # keys are case-sensitive
    "# slurmgpu: site=x-y.z tp=2 pp=3 dp=5 cp=1 ep=1 nodes=30 gpus_per_node=1",
]
TEXTS = [
    "#!/bin/bash\n# slurmgpu: preflight ok\n# slurmgpu: tp=4\n",  # the first line with tp counts
    "#!/bin/bash\n#SBATCH -N 2\n  # slurmgpu: tp=2 pp=2\nsrun x\n",
    "#!/bin/bash\necho '# slurmgpu: tp=8'\n",  # quoted, not at the line start
    "".join("# slurmgpu: none\n" for _ in range(64)) + "# slurmgpu: tp=2\n",  # past 64 markers
    "".join("# slurmgpu: none\n" for _ in range(63)) + "# slurmgpu: tp=2\n",
]


@pytest.fixture(scope="module")
def lua_find():
    rt = lupa.lua51.LuaRuntime(unpack_returned_tuples=True)
    P = rt.execute(policy_source())
    detect = P["detect"]

    def find(text: str) -> Optional[Dict[str, Any]]:
        st = detect(rt.table_from({"script": text}))["stamp"]
        if st is None:
            return None
        return {k: st[k] for k in list(KEYS) + ["site"] if st[k] is not None}

    return find


def _expected(words: Dict[str, str]) -> Dict[str, Any]:
    """What the filter keeps of parse_stamp's words: the numbers it reads, and the site."""
    out: Dict[str, Any] = {k: stamp_int(words[k]) for k in KEYS if k in words and stamp_int(words[k]) is not None}
    if "site" in words:  # shown in messages: cut to 64 characters
        site = words["site"]
        out["site"] = site if len(site) <= 64 else site[:64] + "..."
    return out


@pytest.mark.parametrize("text", LINES + TEXTS, ids=range(len(LINES + TEXTS)))
def test_python_and_the_filter_accept_the_same_stamp_lines(lua_find, text):
    py = parse_stamp(text)
    lua = lua_find(text)
    assert (py is None) == (lua is None), (text, py, lua)
    if py is not None:
        assert _expected(py) == lua


def test_the_list_has_both_verdicts():
    verdicts = [parse_stamp(t) is not None for t in LINES + TEXTS]
    assert verdicts.count(True) >= 10 and verdicts.count(False) >= 10


def test_the_written_stamp_reads_back():
    lay = Layout(tp=6, pp=2, dp=5, cp=1, ep=1, nodes=30, gpus_per_node=4)
    line = lay.stamp("gb200-nvl72")
    assert line == format_stamp("gb200-nvl72", 6, 2, 5, 1, 1, 30, 4)
    assert parse_stamp(line) == {
        "site": "gb200-nvl72",
        "tp": "6",
        "pp": "2",
        "dp": "5",
        "cp": "1",
        "ep": "1",
        "nodes": "30",
        "gpus_per_node": "4",
    }


def test_doctor_reads_the_stamp_with_the_same_grammar():
    assert read_stamp("log line\n   # slurmgpu: site=a tp=2 pp=1\n") == {"site": "a", "tp": "2", "pp": "1"}
    assert read_stamp("#slurmgpu: site=a tp=2\n") == {}  # the filter would not read it either
    assert read_stamp("# slurmgpu: site=a tp=8 junk tp=4\n") == {"site": "a", "tp": "8"}
