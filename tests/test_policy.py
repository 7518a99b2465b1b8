"""The submit filter seen from Python: `slurmgpu check`, check_script, rendering, installing, and
the sbatch emulation that turns a script + options into the job_desc slurmctld would get.

The verdicts come from the policy (contrib/lua/policy/) run under real Lua 5.1 (lupa.lua51); the case
files in tests/policy_cases/ hold the expectations, so the same cases drive the lua5.1-binary
tests, the real-cluster tests and the SPANK tests.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from dataclasses import replace
from pathlib import Path
from typing import Dict

import pytest
from click.testing import CliRunner

from slurmgpu.cli import main
from slurmgpu.errors import ConfigError, SlurmgpuError
from slurmgpu.policy import (
    PolicyRunner,
    Verdict,
    check_script,
    install_filter,
    lua_literal,
    render_filter,
    topology_table,
)
from slurmgpu.site import load_site, preset_dir, preset_names, resolve_site_ref
from slurmgpu.slurm import job_desc, split_command
from tests.policy_cases.cases import load_cases, problems

ROOT = Path(__file__).resolve().parent.parent
CASES = load_cases()
LAB = str(ROOT / "tests" / "policy_cases" / "sites" / "lab.yaml")


@pytest.fixture(scope="module")
def runners() -> Dict[str, PolicyRunner]:
    return {}


def runner_for(runners: Dict[str, PolicyRunner], ref: str) -> PolicyRunner:
    if ref not in runners:
        runners[ref] = PolicyRunner(load_site(resolve_site_ref(ref)), backend="lupa")
    return runners[ref]


def dgx():
    return load_site(str(preset_dir() / "dgx-h100.yaml"))


# ---------------------------------------------------------------------------
# the case files


def test_there_are_enough_cases():
    assert len(CASES) >= 40
    assert {c.expect for c in CASES} == {"accept", "reject"}


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_case(case, runners):
    r = runner_for(runners, case.site_ref)
    v = r.check(
        case.script,
        case.args,
        env=case.env,
        user=case.user or "bob",
        account=case.account,
        qos=case.qos,
        script_path=case.path.name,
    )
    found = problems(
        case,
        v.decision,
        v.messages,
        v.warnings,
        v.rules,
        v.source,
        v.launcher or "",
        v.layout,
        slurm_version=r.site.slurm_version,
        would=v.would,
        shadow=(v.shadow_messages, v.shadow_warnings),
    )
    assert not found, "%s (%s)\nmessages: %s\nwarnings: %s" % (
        found,
        case.description,
        list(v.messages),
        list(v.warnings),
    )
    expect = case.expect_for(r.site.slurm_version)
    assert v.exit_code == (0 if expect == "accept" else 1)
    assert v.slurm_code == (0 if expect == "accept" else 2072)
    for line in v.messages + v.warnings:
        assert re.match(r"^(\d+: )?slurmgpu: ", line)  # "1: ": a het component, as sbatch shows it
        assert re.match(r"^[\x20-\x7e]+$", line), line


@pytest.mark.parametrize("lua", ["5.3", "5.4"])
def test_cases_under_other_lua_versions(lua):
    """RHEL-family Slurm builds link the distribution's Lua (5.3, 5.4): the rendered filter gives
    every case the same verdict, messages and log fields there as under 5.1 (test_case)."""
    runners: Dict[str, PolicyRunner] = {}
    bad = []
    for case in CASES:
        if case.site_ref not in runners:
            runners[case.site_ref] = PolicyRunner(load_site(resolve_site_ref(case.site_ref)), backend="lupa", lua=lua)
        r = runners[case.site_ref]
        v = r.check(
            case.script,
            case.args,
            env=case.env,
            user=case.user or "bob",
            account=case.account,
            qos=case.qos,
            script_path=case.path.name,
        )
        ref = runner_for(_LUA51, case.site_ref).check(
            case.script,
            case.args,
            env=case.env,
            user=case.user or "bob",
            account=case.account,
            qos=case.qos,
            script_path=case.path.name,
        )
        found = problems(
            case,
            v.decision,
            v.messages,
            v.warnings,
            v.rules,
            v.source,
            v.launcher or "",
            v.layout,
            slurm_version=r.site.slurm_version,
        )
        if found or v != ref:
            bad.append((case.name, found, v, ref))
        # slurm_job_submit itself: return code, the user's lines and the controller log line
        desc = job_desc(
            case.script,
            case.args,
            env=case.env,
            user=case.user or "bob",
            account=case.account,
            qos=case.qos,
            script_path=case.path.name,
            slurm_version=r.site.slurm_version,
        )
        got = r.submit_desc_logged(desc, 1000)
        want = runner_for(_LUA51, case.site_ref).submit_desc_logged(desc, 1000)
        # an unknown partition is logged once per Lua state: the 5.1 runner may have seen it before
        got, want = [(rc, msgs, [x for x in log if "unknown-partition=" not in x]) for rc, msgs, log in (got, want)]
        if got != want:
            bad.append((case.name, got, want))
    assert not bad, bad


_LUA51: Dict[str, PolicyRunner] = {}


def test_reject_message_names_tp_partition_gpus_and_fix():
    v = check_script(dgx(), "#!/bin/bash\n#SBATCH -N2 --gpus-per-node=8\nsrun x --tensor-model-parallel-size 16\n")
    assert v.decision == "reject" and v.exit_code == 1
    (msg,) = v.messages
    for part in ("TP=16", "partition 'gpu'", "8 GPUs per node", "Fix: use TP=8 and PP=2", "script line 3"):
        assert part in msg


def test_layout_sources_in_order():
    """Visible flags > stamp > SLURMGPU_* (issue 16 class 1): the stamp and the environment only
    fill in what no flag shows, and one that disagrees with the flags is reported, not used."""
    body = "#!/bin/bash\n%s#SBATCH -N2 --gpus-per-node=8\nsrun x %s\n"
    stamp = "# slurmgpu: site=dgx-h100 tp=2 pp=1 dp=8 cp=1 ep=1 nodes=2 gpus_per_node=8\n"
    env = {"SLURMGPU_TP": "8", "SLURMGPU_PP": "2"}
    flag = "--tensor-model-parallel-size 4"
    assert check_script(dgx(), body % ("", flag)).source == "flags"
    v = check_script(dgx(), body % ("", flag), env=env)
    assert (v.source, v.layout["tp"], v.layout["pp"]) == ("flags", 4, 1)
    assert any("SLURMGPU_TP environment variable says TP=8" in w for w in v.warnings)
    v = check_script(dgx(), body % (stamp, flag), env=env)
    assert (v.source, v.layout["tp"], v.layout["dp"]) == ("flags", 4, None)
    assert any("stamp says TP=2 but the script's launcher flags say TP=4" in w for w in v.warnings)
    # no flag: the stamp, then the environment
    v = check_script(dgx(), body % (stamp, ""), env=env)
    assert (v.source, v.layout["tp"], v.layout["dp"]) == ("stamp", 2, 8)
    v = check_script(dgx(), body % ("", ""), env=env)
    assert (v.source, v.layout["tp"], v.layout["pp"]) == ("env", 8, 2)
    # flags agree with the stamp: the stamp fills in PP
    v = check_script(dgx(), body % (stamp.replace("pp=1", "pp=2"), "--tensor-model-parallel-size 2"))
    assert (v.source, v.layout["tp"], v.layout["pp"]) == ("flags", 2, 2)


def test_comments_and_quotes():
    base = "#!/bin/bash\n#SBATCH -N2 --gpus-per-node=8\n"
    cases = {
        "srun x --tp 16\n": 16,
        "# srun x --tp 16\nsrun x --tp 2\n": 2,
        "srun x --tp 2 # --tp 16\n": 2,
        "srun x --name 'a # b' --tp 16\n": 16,
        'srun x --name "a # b" --tp 16\n': 16,
        "srun x $# --tp 16\n": 16,  # $# starts no comment
        'echo "$#: --tp 16"\n': 1,  # an echo message (corpus x07)
        'echo "--tp 16" | sh\n': 16,  # piped into a shell: it runs
        "srun x \\\n  --tp 16 \\\n  --pp 1\n": 16,
        "srun x --tp=16\n": 16,
        "srun x --tp-size=16\n": 16,
        "srun x --tp16\n": 1,
        "srun x --tpu 16\n": 1,
        "srun x -tp 16\n": 16,
        "srun x tp=16\n": 1,
    }
    for text, tp in cases.items():
        v = check_script(dgx(), base + text)
        assert v.layout["tp"] == tp, (text, v.layout)


def test_shell_variables():
    base = "#!/bin/bash\n#SBATCH -N1 --gpus-per-node=8\n"
    cases = [
        ("TP=4\nsrun x --tensor-model-parallel-size $TP\n", {}, 4),
        ("TP=4\nsrun x --tensor-model-parallel-size ${TP}\n", {}, 4),
        ('TP=4\nsrun x --tensor-model-parallel-size "$TP"\n', {}, 4),
        ("srun x --tensor-model-parallel-size ${TP:-4}\n", {}, 4),
        ("srun x --tensor-model-parallel-size ${TP:-4}\n", {"TP": "2"}, 2),
        ("srun x --tensor-model-parallel-size $TP\nTP=4\n", {}, 1),  # used before it is set
        ("A=2\nB=$A\nsrun x --tensor-model-parallel-size $B\n", {}, 2),
        ("MY_TP=8\nTP=2\nsrun x --tensor-model-parallel-size $TP\n", {}, 2),
        ("# TP=8\nTP=2\nsrun x --tensor-model-parallel-size $TP\n", {}, 2),
        ("srun x --tensor-model-parallel-size $SLURM_GPUS_ON_NODE\n", {}, 8),
    ]
    for text, env, tp in cases:
        v = check_script(dgx(), base + text, env=env)
        assert v.layout["tp"] == tp, (text, env, v.layout)


def test_gpu_request_spellings_reach_the_same_verdict():
    """Every spelling of 8 GPUs per node on 2 nodes gives the same rejection of TP=16."""
    spellings = [
        ["--gpus-per-node=8"],
        ["--gpus-per-node=h100:8"],
        ["--gres=gpu:8"],
        ["--gres=gpu:h100:8"],
        ["--gpus=16"],
        ["--gpus-per-task=1", "--ntasks-per-node=8"],
        ["--exclusive"],
        ["--gpus-per-node", "8"],
        ["-G", "16"],
        ["--gres=gpu:8,nic:1"],
    ]
    script = "#!/bin/bash\nsrun x --tensor-model-parallel-size 16\n"
    msgs = set()
    for sp in spellings:
        v = check_script(dgx(), script, ["-N2"] + sp)
        assert v.decision == "reject", sp
        assert "8 GPUs per node" in v.messages[0]
        msgs.add(v.messages[0])
    assert len(msgs) == 1


def test_default_and_multiple_partitions():
    lab = load_site(LAB)
    script = "#!/bin/bash\n#SBATCH -N2 --gpus-per-node=4\nsrun x --tensor-model-parallel-size 8\n"
    assert check_script(lab, script).partitions == ("h100",)
    v = check_script(lab, script, partition="h100,quad")
    assert v.partitions == ("h100", "quad") and v.decision == "reject"
    # a partition the site does not describe (added after install): judged as the default
    # partition's node type (h100: 8 GPUs per node), and the user is told
    v = check_script(lab, script, partition="nosuch")
    assert v.partitions == ("nosuch",) and v.decision == "reject" and "unknown-partition" in v.rules
    assert any("'nosuch' is not described by site 'lab'" in w for w in v.warnings), v.warnings
    ok = "#!/bin/bash\n#SBATCH -N2 --gpus-per-node=4\nsrun x --tensor-model-parallel-size 4\n"
    assert check_script(lab, ok, partition="nosuch").decision == "accept"


def test_verdict_to_dict_is_json():
    v = check_script(dgx(), "#!/bin/bash\nsrun x\n")
    d = json.loads(json.dumps(v.to_dict()))
    assert d["decision"] == "accept" and d["layout"]["tp"] == 1 and d["layout"]["dp"] is None
    assert isinstance(v, Verdict) and v.accepted


def test_internal_error_accepts_by_default_and_rejects_when_asked(tmp_path):
    """A bug in the policy must not stop a cluster (default), or must reject (opt-in)."""
    for mode, decision, code in (("accept", "accept", 0), ("reject", "reject", -1)):
        site_file = tmp_path / ("s-%s.yaml" % mode)
        site_file.write_text("extends: dgx-h100\nname: s\npolicy:\n  on_internal_error: %s\n" % mode)
        r = PolicyRunner(load_site(str(site_file)), backend="lupa")
        # break the site table the policy reads (what a bug looks like from outside)
        r._lua.execute("slurmgpu_filter.topo.partitions.gpu.gpus = 'eight'")
        v = r.check("#!/bin/bash\nsrun x --tp 16\n", ["-N2"])
        assert (v.decision, v.slurm_code) == (decision, code)
        assert v.internal_error and "attempt to" in v.internal_error
        assert v.rules == ("internal-error",)


# ---------------------------------------------------------------------------
# hostile input (generous bounds: safety nets; the benchmark measures speed)


def _hostile_scripts():
    hdr = b"#!/bin/bash\n#SBATCH -N2 --gpus-per-node=8\n"
    # no NUL byte: sbatch refuses those scripts, and so does `check` (test_nul_byte_is_refused)
    junk = bytes(((i * 2654435761 >> 13) & 0xFF) or 1 for i in range(4 * 1024 * 1024))
    return {
        "4MB-junk": hdr + junk + b"\nsrun x --tp 16\n",
        "1MB-line": hdr + b"srun x " + b"a" * (1 << 20) + b" --tensor-model-parallel-size 16\n",
        "100k-tp": hdr + b"srun x " + b"--tp 1 " * 100000 + b"--tp 16\n",
        "4MB-newlines": hdr + b"\n" * (4 << 20) + b"srun x --tp 16\n",
        "4MB-near-miss": hdr + b"--tensor-model-parallel-siz" * 150000 + b"\nsrun x --tp 16\n",
        "4MB-quotes": hdr + b"\"'#" * 1300000 + b"\nsrun x --tp 16\n",
        "100k-vars": hdr + b"".join(b"srun x --tp $V%d\n" % i for i in range(100000)),
    }


@pytest.mark.parametrize("name", sorted(_hostile_scripts()))
def test_hostile_input_completes(name, runners):
    script = _hostile_scripts()[name]
    r = runner_for(runners, "dgx-h100")
    t0 = time.perf_counter()
    v = r.check(script)
    assert time.perf_counter() - t0 < 5.0
    assert v.internal_error is None
    assert v.decision == "reject"  # TP=16 at the end is found, or the unscannable job is refused
    assert v.rules[0] in ("tp-exceeds-domain", "scan-truncated")


def test_truncated_scan_is_only_a_warning_for_one_node(runners):
    r = runner_for(runners, "dgx-h100")
    v = r.check(b"#!/bin/bash\n" + b"srun x --tp 1\n" * 60000, ["-N1", "--gpus-per-node=8"])
    assert v.decision == "accept" and "scan-truncated" in v.rules


# ---------------------------------------------------------------------------
# sbatch emulation (job_desc as slurmctld 22.05 receives it)


def test_job_desc_formats():
    d = job_desc(
        "#!/bin/bash\n#SBATCH -N 2 --gpus-per-node=h100:8\n#SBATCH --gres=gpu:2 -p gpu\nsrun x\n#SBATCH -N 9\n"
    )
    assert d["min_nodes"] == 2 and d["max_nodes"] == 2  # the #SBATCH after the first command is ignored
    assert d["tres_per_node"] == "gres:gpu:h100:8,gres:gpu:2"
    assert d["partition"] == "gpu"
    d = job_desc("#!/bin/bash\n", ["--gpus=16", "--ntasks-per-node=8", "-N", "2-4", "--exclusive", "--segment=4"])
    assert (d["tres_per_job"], d["ntasks_per_node"], d["num_tasks"]) == ("gres:gpu:16", 8, 16)
    assert (d["min_nodes"], d["max_nodes"], d["shared"], d["segment_size"]) == (2, 4, 0, 4)
    d = job_desc("#!/bin/bash\n", ["--gpus-per-task=1", "--gpus-per-socket=2", "--sockets-per-node=2"])
    assert (d["tres_per_task"], d["tres_per_socket"], d["sockets_per_node"]) == ("gres:gpu:1", "gres:gpu:2", 2)
    assert "min_nodes" not in d and "tres_per_node" not in d


def test_job_desc_follows_the_slurm_release():
    """What sbatch sends differs per release (seen on the test cluster's 22.05.8 and 24.11.5)."""
    script = "#!/bin/bash\n#SBATCH --gpus-per-node=8\n"
    assert job_desc(script, slurm_version="22.05")["tres_per_node"] == "gres:gpu:8"
    assert job_desc(script, slurm_version="23.11")["tres_per_node"] == "gres/gpu:8"
    assert (
        job_desc(script, ["--gres=gpu:h100:8"], slurm_version="24.11")["tres_per_node"] == "gres/gpu:8,gres/gpu:h100:8"
    )
    assert job_desc(script, ["--gpus=16"], slurm_version="24.11")["tres_per_job"] == "gres/gpu:16"
    # --export=NIL and name lists: the SLURM_* names up to 23.11, every SLURM* name from 24.05
    env = {"SLURM_X": "1", "SLURMGPU_TP": "16", "FOO": "1"}
    for ver, passed in (
        ("22.05", {"SLURM_X"}),
        ("23.11", {"SLURM_X"}),
        ("24.05", {"SLURM_X", "SLURMGPU_TP"}),
        ("24.11", {"SLURM_X", "SLURMGPU_TP"}),
        (None, {"SLURM_X"}),
    ):
        assert set(job_desc(script, ["--export=NIL"], env=env, slurm_version=ver)["environment"]) == passed, ver
        assert set(job_desc(script, ["--export=FOO"], env=env, slurm_version=ver)["environment"]) == passed | {"FOO"}, (
            ver
        )
    # a command-line --segment: job_submit.lua sees job_desc.segment_size only from 25.11.2 (sbatch before
    # 24.05 has no --segment at all, so nothing to hide there)
    for ver, seen in (
        ("22.05", True),
        ("24.05", False),
        ("24.11", False),
        ("25.11.1", False),
        ("25.11.2", True),
        ("25.11", True),
        ("26.05", True),
        (None, True),
    ):
        assert ("segment_size" in job_desc("#!/bin/bash\n", ["--segment=4"], slurm_version=ver)) == seen, ver


def test_command_line_segment_is_not_seen_by_a_24_11_controller(runners):
    """Case 42 (--segment=4 on the command line keeps TP=16 in one NVL72 rack): accepted where
    job_submit sees the segment, rejected by 24.11's (it only reads #SBATCH --segment lines)."""
    case = next(c for c in CASES if c.name == "42-nvl72-segment-option")
    lab = load_site(resolve_site_ref(case.site_ref))
    for ver, verdict in (("24.11", "reject"), ("25.11.2", "accept")):
        v = PolicyRunner(replace(lab, slurm_version=ver), backend="lupa").check(
            case.script, case.args, env=case.env, user="bob", script_path=case.path.name
        )
        assert v.decision == verdict == case.expect_for(ver), (ver, v.messages)
    directive = case.script.replace(b"-N4 --gpus-per-node=4", b"-N4 --gpus-per-node=4 --segment=4")
    v = PolicyRunner(replace(lab, slurm_version="24.11"), backend="lupa").check(
        directive, (), env=case.env, user="bob", script_path=case.path.name
    )
    assert v.decision == "accept", v.messages


def test_job_desc_precedence_and_export():
    script = "#!/bin/bash\n#SBATCH --gpus-per-node=8 -p a\n"
    env = {"SBATCH_PARTITION": "b", "SBATCH_GPUS_PER_NODE": "4", "TP": "16", "SLURM_X": "1", "SLURMGPU_TP": "8"}
    d = job_desc(script, ["-p", "c"], env=env)
    assert (d["partition"], d["tres_per_node"]) == ("c", "gres:gpu:4")
    assert d["environment"]["TP"] == "16"
    assert job_desc(script, ["--export=NONE"], env=env)["environment"] == {
        "SLURM_X": "1",
        "SLURMGPU_TP": "8",
        "SLURM_GET_USER_ENV": "1",
    }
    assert job_desc(script, ["--export=TP,X=2"], env=env)["environment"] == {"SLURM_X": "1", "TP": "16", "X": "2"}
    assert job_desc(script, ["--export=NIL"], env=env)["environment"] == {"SLURM_X": "1"}
    assert job_desc(script, ["--export=ALL,X=2"], env=env)["environment"]["X"] == "2"
    assert job_desc(script, ["--part=z"])["partition"] == "z"  # getopt_long prefixes


def test_job_desc_errors_name_file_line_and_option():
    with pytest.raises(ConfigError) as e:
        job_desc("#!/bin/bash\n#SBATCH -N 2\n#SBATCH --nodes=two\n", script_path="job.sh")
    assert str(e.value) == "job.sh:3: --nodes: expected a node count like 2 or 2-4, got 'two'"
    with pytest.raises(ConfigError, match="command line: --ntasks-per-node: expected a whole number"):
        job_desc("", ["--ntasks-per-node=x"])
    with pytest.raises(ConfigError, match="ambiguous option"):
        job_desc("", ["--gpus-per=8"])
    with pytest.raises(ConfigError, match="heterogeneous"):
        job_desc("", ["-N1", ":", "-N2"])
    with pytest.raises(ConfigError, match="job.sh:2: #SBATCH: cannot split"):
        job_desc("#!/bin/sh\n#SBATCH -J 'x\n", script_path="job.sh")


def test_split_command():
    assert split_command(["-N", "2", "job.sh", "--gpus-per-node=8", "arg"]) == (
        "job.sh",
        ["-N", "2", "--gpus-per-node=8"],
        ["arg"],
    )
    assert split_command(["job.sh", "-p", "gpu", "--exclusive"]) == ("job.sh", ["-p", "gpu", "--exclusive"], [])
    assert split_command(["--hold"]) == (None, ["--hold"], [])


# ---------------------------------------------------------------------------
# rendering and installing


@pytest.mark.parametrize("kind", ["job_submit", "cli_filter"])
def test_render_is_deterministic_lua51(kind):
    from lupa import lua51

    for name in preset_names():
        site = load_site(str(preset_dir() / (name + ".yaml")))
        text = render_filter(site, kind)
        assert text == render_filter(load_site(str(preset_dir() / (name + ".yaml"))), kind)
        rt = lua51.LuaRuntime()
        ok, err = rt.eval("function(s) local f, e = loadstring(s, 'r'); return f ~= nil, e end")(text)
        assert ok, (name, err)
    code = re.sub(r"--.*", "", re.sub(r"--\[\[.*?\]\]", "", text, flags=re.S))
    for word in ("table.unpack", "goto ", "//", "os.execute", "io.popen", "require", "dofile", "loadfile"):
        assert word not in code, word
    if kind == "job_submit":  # slurmctld side: no io, and of os only its clock (the summary lines' window)
        assert "io." not in code
        assert set(re.findall(r"\bos\.(\w+)", code)) <= {"time"}, code
    else:  # the client, as the user: of io only opening sbatch's script file (script_check batch-step)
        assert set(re.findall(r"\bio\.(\w+)", code)) == {"open"}, code
    assert str(ROOT) not in text  # no paths of this machine


def test_topology_table_presets():
    t = topology_table(load_site(str(preset_dir() / "gb200-nvl72.yaml")))
    assert t["partitions"]["gpu"]["domain"] == 72 and t["partitions"]["gpu"]["domain_nodes"] == 18
    assert t["partitions"]["gpu"]["gpus"] == 4
    for name in preset_names():
        t = topology_table(load_site(str(preset_dir() / (name + ".yaml"))))
        assert t["mode"] == "enforce"  # presets enforce everywhere
        assert all(p["mode"] == "enforce" for p in t["partitions"].values())
    lab = topology_table(load_site(LAB))
    assert lab["launchers"] == {"sglang": "off", "vllm": "warn"}
    assert lab["partitions"]["soft"]["mode"] == "warn" and lab["exempt_users"] == ["alice"]


def test_lua_literal_round_trips_bytes():
    from lupa import lua51

    data = bytes(range(256)) + b'"\\]]\n\r'
    rt = lua51.LuaRuntime(encoding=None)
    assert rt.execute("return " + lua_literal(data)) == data
    assert lua_literal({"b": [1, 2], "a": {"x-y": True}}) == lua_literal({"a": {"x-y": True}, "b": [1, 2]})


def test_install_is_atomic_with_a_newer_mtime(tmp_path):
    (tmp_path / "slurm.conf").write_text("ClusterName=x\nJobSubmitPlugins=job_submit/lua # here\n")
    site = dgx()
    first = install_filter(site, tmp_path, "job_submit")
    assert first.conf_has_line and not first.replaced
    path = Path(first.path)
    m1 = path.stat().st_mtime
    second = install_filter(site, tmp_path, "job_submit")  # same second: must still be newer
    assert second.replaced and path.stat().st_mtime >= m1 + 1
    assert path.read_text() == render_filter(site, "job_submit")
    assert oct(path.stat().st_mode & 0o777) == "0o644"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["job_submit.lua", "slurm.conf"]  # no temp files left
    cli = install_filter(site, tmp_path, "cli_filter")
    assert not cli.conf_has_line and cli.slurm_conf_line == "CliFilterPlugins=lua"
    with pytest.raises(SlurmgpuError, match="not a directory"):
        install_filter(site, tmp_path / "nope", "job_submit")


# ---------------------------------------------------------------------------
# the CLI


def _write(tmp_path, text, name="job.sh"):
    p = tmp_path / name
    p.write_text(text)
    return str(p)


def test_cli_check_exit_codes(tmp_path):
    r = CliRunner()
    bad = _write(tmp_path, "#!/bin/bash\n#SBATCH -N2 --gpus-per-node=8\nsrun x --tensor-model-parallel-size 16\n")
    good = _write(
        tmp_path,
        "#!/bin/bash\n#SBATCH -N2 --gpus-per-node=8\nexport NCCL_IB_HCA==mlx5_0\n"
        "export NCCL_SOCKET_IFNAME=bond0\n"
        "srun x --tensor-model-parallel-size 8 --pipeline-model-parallel-size 2\n",
        "good.sh",
    )
    res = r.invoke(main, ["check", "--site", "dgx-h100", bad], env={"SLURMGPU_TP": None})
    assert res.exit_code == 1, res.output
    assert "error: slurmgpu: TP=16" in res.output and "use TP=8 and PP=2" in res.output
    assert "REJECTED" in res.output
    res = r.invoke(main, ["check", "--site", "dgx-h100", good])
    assert res.exit_code == 0, res.output
    assert "accepted" in res.output and "TP=8 PP=2" in res.output
    # options after the script, and sbatch short options
    res = r.invoke(main, ["check", "--site", "dgx-h100", bad, "-N", "1"])
    assert res.exit_code == 0, res.output
    assert "warning: slurmgpu:" in res.output
    res = r.invoke(main, ["check", "-N", "1", "--site", "dgx-h100", bad, "--json"])
    assert res.exit_code == 0
    d = json.loads(res.stdout)
    assert d["decision"] == "accept" and d["site"] == "dgx-h100" and d["layout"]["tp"] == 16
    # usage and input errors: 2
    assert r.invoke(main, ["check", "--site", "dgx-h100"]).exit_code == 2
    assert r.invoke(main, ["check", "--site", "dgx-h100", str(tmp_path / "missing.sh")]).exit_code == 2
    assert r.invoke(main, ["check", "--site", "dgx-h100", bad, "--nodes=x"]).exit_code == 2
    assert r.invoke(main, ["check", "--site", "no-such-site", bad]).exit_code == 2


def test_cli_check_reads_environment(tmp_path):
    r = CliRunner()
    script = _write(tmp_path, "#!/bin/bash\n#SBATCH -N2 --gpus-per-node=8\nsrun x\n")
    res = r.invoke(main, ["check", "--site", "dgx-h100", script], env={"SLURMGPU_TP": "16"})
    assert res.exit_code == 1 and "from SLURMGPU_TP" in res.output


def test_cli_check_subprocess_and_stdin(tmp_path):
    """The installed entry point, reading the script from stdin."""
    text = "#!/bin/bash\n#SBATCH -N2 --gpus-per-node=8\nsrun x -tp 16\n"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURMGPU_", "SBATCH_"))}
    proc = subprocess.run(
        ["slurmgpu", "check", "--site", "dgx-h100", "-"], input=text, capture_output=True, text=True, env=env
    )
    assert proc.returncode == 1, proc.stderr
    assert "TP=16" in proc.stdout


def test_cli_render_and_install(tmp_path):
    r = CliRunner()
    res = r.invoke(main, ["admin", "render-filter", "--site", "dgx-h100", "--kind", "job_submit"])
    assert res.exit_code == 0 and res.stdout == render_filter(dgx(), "job_submit")
    out = tmp_path / "cf.lua"
    res = r.invoke(main, ["admin", "render-filter", "--site", "dgx-h100", "--kind", "cli_filter", "-o", str(out)])
    assert res.exit_code == 0 and out.read_text() == render_filter(dgx(), "cli_filter")
    assert r.invoke(main, ["admin", "render-filter", "--site", "dgx-h100", "--kind", "nope"]).exit_code == 2
    res = r.invoke(
        main, ["admin", "install", "--site", "dgx-h100", "--allow-preset", "--conf-dir", str(tmp_path), "--kind", "all"]
    )
    assert res.exit_code == 0, res.output
    assert "add to slurm.conf: JobSubmitPlugins=lua" in res.output
    assert "add to slurm.conf: CliFilterPlugins=lua" in res.output
    assert (tmp_path / "job_submit.lua").exists() and (tmp_path / "cli_filter.lua").exists()
    for cmd in (["check"], ["admin"], ["admin", "render-filter"], ["admin", "install"]):
        res = r.invoke(main, cmd + ["--help"])
        assert res.exit_code == 0 and "Example" in res.output or cmd == ["admin"]


def test_lupa_and_lua51_binary_agree_on_the_cases():
    """Both runtimes check_script can use give the same verdicts (a sample of the cases)."""
    site = dgx()
    a, b = PolicyRunner(site, backend="lupa"), PolicyRunner(site, backend="lua5.1")
    for case in [c for c in CASES if c.site == "dgx-h100"][:8]:
        va = a.check(case.script, case.args, env=case.env)
        vb = b.check(case.script, case.args, env=case.env)
        assert va.to_dict() == vb.to_dict(), case.name


def test_salloc_het_allocation_command_is_judged_on_its_last_component():
    """salloc -N1 : -N1 srun --het-group=0,1 ... --tensor-model-parallel-size 16: Slurm (from 23.02)
    hands the command to job_submit with the last component (recorded live on 24.11: argv
    /bin/bash on component 0, the command on component 1) and no script; the step over both
    components is judged there."""
    r = PolicyRunner(load_site(str(ROOT / "tests" / "data" / "sites" / "testcluster.yaml")), backend="lupa")
    base = dict(partition="gpu", tres_per_node="gres/gpu:8", min_nodes=1, max_nodes=1, user_name="bob", user_id=1000)
    command = ["srun", "--het-group=0,1", "true", "--tensor-model-parallel-size"]
    for tp, decision in (("16", "reject"), ("8", "accept")):
        v = r.evaluate_het(
            [dict(base, het_job_offset=0, argv=["/bin/bash"]), dict(base, het_job_offset=1, argv=command + [tp])], 1000
        )
        assert v.decision == decision and "het-step" in v.rules, (v.messages, v.rules)
