"""The filter under Debian's real `lua5.1` binary: the rendered job_submit.lua / cli_filter.lua
driven the way Slurm 22.05 drives them (contrib/lua/slurm_stub.lua), and policy.lua on its own
with plain job tables (the contract the SPANK plugin uses).

Covers: every case file through slurm_job_submit (return code and log_user lines), pcall
safety (fields that raise or have the wrong type, a log_user that raises, a broken site table),
slurm_job_modify re-checking changed GPU/node fields, cli_filter for sbatch/salloc/srun steps,
and hostile scripts.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Dict, List, Optional

import pytest

from slurmgpu.policy import lua_dir, lua_literal, part_list, policy_source, render_filter, topology_lua
from slurmgpu.policy.stats import parse_line
from slurmgpu.site import load_site, preset_dir, resolve_site_ref
from slurmgpu.slurm import het_count, job_desc
from tests.policy_cases.cases import load_cases, problems

LUA = shutil.which("lua5.1")
pytestmark = pytest.mark.skipif(LUA is None, reason="needs Debian's lua5.1 (apt-get install lua5.1)")
ROOT = Path(__file__).resolve().parent.parent
LAB = str(ROOT / "tests" / "policy_cases" / "sites" / "lab.yaml")
CASES = load_cases()


def dgx():
    return load_site(str(preset_dir() / "dgx-h100.yaml"))


def dgx_each():
    """dgx-h100 logging a line for every job (policy.single_node_log_s 0), one-node accepts too."""
    site = dgx()
    return replace(site, policy=replace(site.policy, single_node_log_s=0))


# The same driver under lupa's Lua 5.3 / 5.4 (RHEL-family Slurm builds link the distribution's Lua),
# in a child process like lua5.1 (own cwd and environment, os.getenv sees `env`).
LUPA_DRIVER = """
import sys
from lupa import %s as lua
rt = lua.LuaRuntime()
rt.execute(open("driver.lua", "rb").read().decode("utf-8", "surrogateescape"))
"""


@pytest.fixture(params=["5.1", "5.3", "5.4"])
def lua_version(request) -> str:
    if request.param != "5.1":
        pytest.importorskip("lupa.lua" + request.param.replace(".", ""))
    return request.param


def run_lua(
    tmp: Path,
    body: str,
    rendered: Optional[str] = None,
    env: Optional[Dict[str, str]] = None,
    timeout: float = 120,
    lua: str = "5.1",
) -> List[Any]:
    """Run `body` under lua5.1 (or `lua` 5.3/5.4 through lupa) after the stub (and a rendered
    filter); it prints one JSON value per line."""
    tmp.mkdir(parents=True, exist_ok=True)
    shutil.copy(lua_dir() / "slurm_stub.lua", tmp / "slurm_stub.lua")
    (tmp / "policy.lua").write_text(policy_source())
    head = "dofile('slurm_stub.lua')\nlocal S = slurmgpu_stub\nlocal function out(v) io.write(S.json(v), '\\n') end\n"
    if rendered is not None:
        (tmp / "filter.lua").write_text(rendered)
        head += "assert(dofile('filter.lua') == 0)\n"
    (tmp / "driver.lua").write_bytes((head + body).encode("utf-8", "surrogateescape"))
    run_env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    run_env.update(env or {})
    argv = [LUA, "driver.lua"] if lua == "5.1" else [sys.executable, "-c", LUPA_DRIVER % ("lua" + lua.replace(".", ""))]
    if lua != "5.1":
        run_env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    proc = subprocess.run(argv, cwd=str(tmp), capture_output=True, timeout=timeout, env=run_env)
    assert proc.returncode == 0, proc.stderr.decode("utf-8", "replace")
    return [json.loads(line) for line in proc.stdout.decode("utf-8").splitlines() if line]


# ---------------------------------------------------------------------------
# the case files through slurm_job_submit


def test_cases_through_slurm_job_submit(tmp_path, lua_version):
    by_site: Dict[str, list] = {}
    for c in CASES:
        by_site.setdefault(c.site_ref, []).append(c)
    checked = 0
    for ref, cases in by_site.items():
        site = load_site(resolve_site_ref(ref))
        # one list of component job_descs per case (a het job has several, submitted in order;
        # like slurmctld, the first rejected component ends the submission)
        descs = [
            [
                job_desc(
                    c.script,
                    c.args,
                    env=c.env,
                    user=c.user or "bob",
                    account=c.account,
                    qos=c.qos,
                    script_path=c.path.name,
                    het_component=i if het_count(c.script, c.args) > 1 else None,
                )
                for i in range(het_count(c.script, c.args))
            ]
            for c in cases
        ]
        body = (
            "local parts = %s\nlocal descs = %s\nfor i = 1, #descs do\n"
            "  local rc, msgs, log, audit, all = 0, {}, {}, nil, {}\n"
            "  for k = 1, #descs[i] do\n"
            "    rc, msgs, log, audit = S.submit(descs[i][k], parts, 1000)\n"
            "    for j = 1, #msgs do all[#all + 1] = msgs[j] end\n"
            "    if rc ~= 0 then break end\n"
            "  end\n"
            "  out({rc = rc, msgs = all, log = log, audit = audit})\nend\n"
            % (lua_literal(part_list(site)), lua_literal(descs))
        )
        results = run_lua(tmp_path / site.name, body, render_filter(site, "job_submit"), lua=lua_version)
        assert len(results) == len(cases)
        for c, res in zip(cases, results):
            decision = {0: "accept", 2072: "reject"}.get(res["rc"], "rc=%s" % res["rc"])
            # the verdict's line (a partition the site does not describe adds its own, once; a summary
            # of earlier one-node jobs may come first, should a minute pass during the run)
            tagged = [
                line
                for line in res["log"]
                if "slurmgpu-filter:" in line and "unknown-partition=" not in line and " count=" not in line
            ]
            # none: decided from its fields (a one-node job), counted for the summary line (policy.single_node_log_s)
            single = not tagged
            found = problems(c, decision, res["msgs"], res["msgs"], single_node=single)
            assert not found, (c.name, found, res["msgs"])
            assert all(m.startswith("slurmgpu: ") for m in res["msgs"])
            if single:
                assert decision == "accept" and re.search(r"(^| )slurmgpu=ok$", res["audit"] or ""), (c.name, res)
                checked += 1
                continue
            assert len(tagged) == 1 and ("decision=%s" % decision) in tagged[0], res["log"]
            assert "source=single-node" not in tagged[0], tagged
            if c.would == "reject":  # shadow: the would-be verdict is in the log line and the token
                assert " verdict=shadow-reject" in tagged[0] or " verdict=reject" in tagged[0], tagged
            if decision == "accept":
                assert re.search(r"(^| )slurmgpu=[a-z-]+", res["audit"] or ""), res
            assert not any(line.startswith("error") for line in res["log"]), res["log"]
            checked += 1
    assert checked == len(CASES)


# ---------------------------------------------------------------------------
# pcall safety: slurm_job_submit always returns a number

SAFETY = r"""
local parts = %(parts)s
local good = %(good)s
local function raising()
  return setmetatable({}, {__index = function(_, k) error("field " .. tostring(k) .. " exploded") end})
end
local function desc_with(over)
  local d = {}
  for k, v in pairs(good) do d[k] = v end
  for k, v in pairs(over) do d[k] = v end
  return S.job_desc(d)
end
local variants = {
  raising(),
  desc_with({script = {}}),
  desc_with({script = 42, min_nodes = "two", tres_per_node = 8}),
  desc_with({tres_per_node = "gres:gpu:" .. string.rep("9", 400)}),
  desc_with({tres_per_node = string.rep("gres:gpu:1,", 5000)}),
  desc_with({partition = string.rep(",", 1000)}),
  desc_with({user_name = "100%%s%%d", name = "%%n"}),
  desc_with({environment = false}),
  desc_with({argv = {"a", {}, 5}}),
  desc_with({min_nodes = -1, max_nodes = 1e300, num_tasks = 0/0}),
  nil,
  desc_with({het_job_offset = 1, script = nil}),
}
for i = 1, 12 do
  S.reset()
  local ok, rc = pcall(slurm_job_submit, variants[i], (i %% 2 == 0) and parts or "nonsense",
                       (i %% 3 == 0) and "uid" or 1000)
  out({ok = ok, rc = rc, t = type(rc), msgs = S.user_msgs})
end
-- a log_user that raises (as 22.05 does on a nil argument)
slurm.log_user = function() error("bad argument #2 to 'format'") end
out({rc = slurm_job_submit(desc_with({}), parts, 1000)})
"""


@pytest.mark.parametrize("on_error,expect_rc", [("accept", 0), ("reject", -1)])
def test_job_submit_never_raises(tmp_path, on_error, expect_rc, lua_version):
    site_file = tmp_path / "s.yaml"
    site_file.write_text("extends: dgx-h100\nname: s\npolicy:\n  on_internal_error: %s\n" % on_error)
    site = load_site(str(site_file))
    good = job_desc("#!/bin/bash\nsrun x --tensor-model-parallel-size 16\n", ["-N2", "--gpus-per-node=8"])
    body = SAFETY % {"parts": lua_literal(part_list(site)), "good": lua_literal(good)}
    res = run_lua(tmp_path / "run", body, render_filter(site, "job_submit"), lua=lua_version)
    assert len(res) == 13
    for r in res[:12]:
        assert r["ok"] is True and r["t"] == "number", r
        assert r["rc"] in (0, 2072, -1)
    # the TP=16 job is still rejected when only log_user is broken
    assert res[12]["rc"] == 2072
    # a broken site table is an internal error: decided by on_internal_error
    body = (
        "S.reset()\nslurmgpu_filter.topo.partitions.gpu.gpus = {}\n"
        "out({rc = slurm_job_submit(S.job_desc(%s), S.part_list(%s), 1000), msgs = S.user_msgs, log = S.log})\n"
        % (lua_literal(good), lua_literal(part_list(site)))
    )
    (r,) = run_lua(tmp_path / "broken", body, render_filter(site, "job_submit"), lua=lua_version)
    assert r["rc"] == expect_rc
    assert any("slurmgpu-filter:" in line and "internal-error" in line for line in r["log"])
    if expect_rc == -1:
        assert r["msgs"] and "internal error" in r["msgs"][0]


def test_reading_the_script_once(tmp_path):
    """job_desc.script is copied by Slurm on every access: the adapter reads it once."""
    site = dgx()
    good = job_desc("#!/bin/bash\nsrun x --tensor-model-parallel-size 16\n", ["-N2", "--gpus-per-node=8"])
    body = """
local fields = %s
local reads = 0
local d = S.job_desc(fields)
local mt = getmetatable(d)
local inner = mt.__index
mt.__index = function(t, k) if k == "script" then reads = reads + 1 end return inner(t, k) end
local rc = slurm_job_submit(d, S.part_list(%s), 1000)
out({rc = rc, reads = reads})
""" % (lua_literal(good), lua_literal(part_list(site)))
    (r,) = run_lua(tmp_path, body, render_filter(site, "job_submit"))
    assert r == {"rc": 2072, "reads": 1}


def test_one_node_jobs_are_decided_from_their_fields(tmp_path):
    """Issue 33 (cost): in slurmctld, a job that runs on one node on every partition it may use cannot
    put a TP group on two nodes, so job_submit accepts it without reading its script, arguments or
    environment (what costs the controller most); its log line says source=single-node. A job that
    may span nodes (-N 1-2, --gpus=16, -n 16 at 8 per node) or is a het component is read whole. Before
    the fix every job's script and environment were read (1 and 1). (A line per job here:
    policy.single_node_log_s 0; the default counts them, test_one_node_accepts_are_counted.)"""
    site = dgx_each()
    script = "#!/bin/bash\nsrun x --tensor-model-parallel-size 16\n"
    jobs = [
        ("one node", job_desc(script, ["-N1", "--gpus-per-node=8"]), 0, True),
        ("one GPU", job_desc(script, ["--gpus-per-node=1"]), 0, True),
        ("a node range", job_desc(script, ["-N", "1-2", "--gpus-per-node=8"]), 2072, False),
        ("16 GPUs", job_desc(script, ["--gpus=16"]), 2072, False),
        ("16 tasks", job_desc(script, ["-n", "16", "--ntasks-per-node=8", "--gpus-per-node=8"]), 2072, False),
    ]
    body = """
local parts = S.part_list(%s)
for _, fields in ipairs(%s) do
  S.reset()
  local reads = {script = 0, environment = 0, argv = 0}
  local d = S.job_desc(fields)
  local mt = getmetatable(d)
  local inner = mt.__index
  mt.__index = function(t, k) if reads[k] then reads[k] = reads[k] + 1 end return inner(t, k) end
  local rc = slurm_job_submit(d, parts, 1000)
  local line = ""
  for i = 1, #S.log do if S.log[i]:find("decision=", 1, true) then line = S.log[i] end end
  out({rc = rc, script = reads.script, env = reads.environment, argv = reads.argv, line = line})
end
""" % (lua_literal(part_list(site)), lua_literal([d for _, d, _, _ in jobs]))
    results = run_lua(tmp_path, body, render_filter(site, "job_submit"))
    for (what, _, rc, single), r in zip(jobs, results):
        assert r["rc"] == rc, (what, r)
        if single:
            assert r["script"] == r["env"] == r["argv"] == 0 and "source=single-node" in r["line"], (what, r)
        else:
            assert r["script"] == 1 and "source=single-node" not in r["line"], (what, r)


SUMMARY = """
local parts = S.part_list(%s)
local now = 1000
os.time = function() return now end -- slurmctld's clock, moved by the test
local out_lines = {}
for _, step in ipairs(%s) do
  now = 1000 + step[1]
  S.reset()
  local rc = slurm_job_submit(S.job_desc(step[2]), parts, 1000)
  local lines = {}
  for i = 1, #S.log do if S.log[i]:find("slurmgpu-filter: decision=", 1, true) then lines[#lines + 1] = S.log[i] end end
  out({rc = rc, lines = lines})
end
"""


def test_one_node_accepts_are_counted(tmp_path):
    """Issue 33 (cost): the log line was most of what a one-node job costs slurmctld (it is written
    to the log file and, under systemd, the journal: +60 us of the controller's time per job in
    bench/submit_bench.py, where the production filters add 30-70 us in all). So the jobs accepted
    from their fields get no line of their own: each partition's count is written in one summary
    line by the first submission a window (policy.single_node_log_s, 60 s) after the first job it
    counts; every other verdict keeps its own line. Before, every job wrote one (5 lines here)."""
    site = dgx()
    one = job_desc("#!/bin/bash\nsrun x\n", ["-N1", "--gpus-per-node=8", "-p", "gpu"])
    two = job_desc("#!/bin/bash\nsrun x --tensor-model-parallel-size 8\n", ["-N2", "--gpus-per-node=8", "-p", "gpu"])
    steps = [(0, one), (10, one), (20, two), (59, one), (61, two), (62, one), (200, one)]
    body = SUMMARY % (lua_literal(part_list(site)), lua_literal([list(x) for x in steps]))
    results = run_lua(tmp_path, body, render_filter(site, "job_submit"))
    assert [r["rc"] for r in results] == [0] * 7
    lines = [r["lines"] for r in results]
    assert lines[0] == lines[1] == lines[3] == [] and len(lines[2]) == 1 and "source=single-node" not in lines[2][0]
    # at 61 s: the summary of the three one-node jobs since 0 s, then the 2-node job's own line
    assert len(lines[4]) == 2 and "source=single-node count=3 window_s=61 verdict=ok" in lines[4][0], lines[4]
    assert " partition=gpu " in lines[4][0] and "source=single-node" not in lines[4][1]
    assert lines[5] == [] and len(lines[6]) == 1 and " count=1 window_s=138 " in lines[6][0], lines
    v = parse_line(lines[4][0])
    assert v is not None and (v.verdict, v.partition, v.count) == ("ok", "gpu", 3)


def test_batch_step_accepts_are_counted_apart(tmp_path):
    """policy.script_check batch-step: the multi-node jobs job_submit leaves to the batch step are
    counted in their own summary line (source=batch-step), beside the one-node ones; a refused TP=16
    job no longer exists for job_submit (its batch step refuses it), and an exempt user's job keeps
    a line of its own."""
    site = dgx()
    site = replace(site, policy=replace(site.policy, script_check="batch-step", exempt_users=("root",)))
    one = job_desc("#!/bin/bash\nsrun x\n", ["-N1", "--gpus-per-node=8", "-p", "gpu"])
    two = job_desc("#!/bin/bash\nsrun x --tensor-model-parallel-size 16\n", ["-N2", "--gpus-per-node=8", "-p", "gpu"])
    steps = [(0, two), (10, one), (20, two), (61, two)]
    body = SUMMARY % (lua_literal(part_list(site)), lua_literal([list(x) for x in steps]))
    results = run_lua(tmp_path, body, render_filter(site, "job_submit"))
    assert [r["rc"] for r in results] == [0] * 4
    lines = [r["lines"] for r in results]
    assert lines[:3] == [[], [], []], lines
    assert len(lines[3]) == 2, lines[3]
    assert "partition=gpu source=batch-step count=2 window_s=61 verdict=ok" in lines[3][0], lines[3]
    assert "partition=gpu source=single-node count=1 window_s=61 verdict=ok" in lines[3][1], lines[3]
    assert [parse_line(ln).count for ln in lines[3]] == [2, 1]  # type: ignore[union-attr]
    exempt = dict(two, user_name="root")
    results = run_lua(
        tmp_path / "exempt",
        SUMMARY % (lua_literal(part_list(site)), lua_literal([[0, exempt]])),
        render_filter(site, "job_submit"),
    )
    assert results[0]["rc"] == 0 and len(results[0]["lines"]) == 1 and "verdict=exempt" in results[0]["lines"][0]


USER_READS = """
local parts = S.part_list(%(parts)s)
local function submit(fields)
  S.reset()
  local counted = {user_name = 0, qos = 0, tres_per_job = 0}
  local d = S.job_desc(fields)
  local mt = getmetatable(d)
  local inner = mt.__index
  mt.__index = function(t, k) if counted[k] then counted[k] = counted[k] + 1 end return inner(t, k) end
  local rc = slurm_job_submit(d, parts, 1000)
  local line = ""
  for i = 1, #S.log do if S.log[i]:find("decision=", 1, true) then line = S.log[i] end end
  out({rc = rc, user_reads = counted.user_name, qos_reads = counted.qos, tres_job_reads = counted.tres_per_job,
       line = line})
end
submit(%(ok)s)
submit(%(reject)s)
"""


def test_user_name_and_rare_fields_read_only_when_needed(tmp_path):
    """Reading job_desc.user_name makes slurmctld resolve the uid through NSS (an LDAP query on many
    sites), so a plain accept logs the uid and never asks; a rejected job's line names the user.
    Fields the verdict does not need (QOS without QOS exemptions, --gpus when --gpus-per-node is
    given) are not read either."""
    site = dgx_each()
    ok = job_desc("#!/bin/bash\nsrun x --tensor-model-parallel-size 8\n", ["-N1", "--gpus-per-node=8"], user="bob")
    bad = job_desc("#!/bin/bash\nsrun x --tensor-model-parallel-size 16\n", ["-N2", "--gpus-per-node=8"], user="bob")
    ok["user_id"] = bad["user_id"] = 1000
    body = USER_READS % {"parts": lua_literal(part_list(site)), "ok": lua_literal(ok), "reject": lua_literal(bad)}
    r_ok, r_bad = run_lua(tmp_path, body, render_filter(site, "job_submit"))
    assert r_ok["rc"] == 0 and r_ok["user_reads"] == 0, r_ok
    assert " uid=1000 " in r_ok["line"] and " user=" not in r_ok["line"], r_ok["line"]
    assert r_ok["qos_reads"] == 0 and r_ok["tres_job_reads"] == 0, r_ok
    assert r_bad["rc"] == 2072 and r_bad["user_reads"] == 1, r_bad
    assert " user=bob uid=1000 " in r_bad["line"], r_bad["line"]


def test_exempt_user_is_looked_up_and_honoured(tmp_path):
    site = dgx()
    site = replace(site, policy=replace(site.policy, exempt_users=("bob",)))
    bad = job_desc("#!/bin/bash\nsrun x --tensor-model-parallel-size 16\n", ["-N2", "--gpus-per-node=8"], user="bob")
    other = dict(bad, user_name="carol")
    body = USER_READS % {"parts": lua_literal(part_list(site)), "ok": lua_literal(bad), "reject": lua_literal(other)}
    r_bob, r_carol = run_lua(tmp_path, body, render_filter(site, "job_submit"))
    assert r_bob["rc"] == 0 and r_bob["user_reads"] == 1 and "exempt=user:bob" in r_bob["line"], r_bob
    assert r_carol["rc"] == 2072 and r_carol["user_reads"] == 1, r_carol


# ---------------------------------------------------------------------------
# slurm_job_modify

MODIFY = r"""
local parts = S.part_list(%(parts)s)
local rec_fields = %(rec)s
local script_reads = 0
local function rec()
  local r = S.job_desc(rec_fields)
  local mt = getmetatable(r)
  local inner = mt.__index
  mt.__index = function(t, k) if k == "script" then script_reads = script_reads + 1 end return inner(t, k) end
  return r
end
local function modify(delta, uid)
  S.reset()
  script_reads = 0
  local rc = slurm_job_modify(S.job_desc(delta), rec(), parts, uid)
  out({rc = rc, reads = script_reads, log = S.log, msgs = S.user_msgs})
end
modify({tres_per_node = "gres:gpu:4"}, 1000)     -- 4 per node: TP=8 groups span nodes
modify({tres_per_node = "gres:gpu:4"}, 0)        -- root may
modify({comment = "hello"}, 1000)                -- nothing that moves ranks: the script is not read
modify({min_nodes = 1, max_nodes = 1}, 1000)     -- one node: fine
modify({partition = "quad"}, 1000)               -- 4-GPU nodes: rejected
modify({tres_per_node = "gpu:8"}, 1000)          -- raw scontrol spelling, still 8: fine
"""


def test_job_modify_rechecks_changed_shape(tmp_path, lua_version):
    site = load_site(LAB)
    rec = job_desc(
        "#!/bin/bash\nexport NCCL_IB_HCA==mlx5_0\n"
        "srun x --tensor-model-parallel-size 8 --pipeline-model-parallel-size 2\n",
        ["-N2", "--gpus-per-node=8", "-p", "h100"],
        user="bob",
        uid=1000,
    )
    del rec["environment"]  # job_rec has none
    res = run_lua(
        tmp_path,
        MODIFY % {"parts": lua_literal(part_list(site)), "rec": lua_literal(rec)},
        render_filter(site, "job_submit"),
        lua=lua_version,
    )
    rcs = [r["rc"] for r in res]
    assert rcs == [2072, 0, 0, 0, 2072, 0]
    assert [r["reads"] for r in res] == [1, 0, 0, 1, 1, 1]
    assert "origin=job_modify" in " ".join(res[0]["log"]) and "changed=tres_per_node" in " ".join(res[0]["log"])
    # 22.05 refuses log_user in job_modify (ctld logs an error): the adapter does not call it there
    assert res[0]["msgs"] == []


MODIFY_SHAPE = r"""
local parts = S.part_list(%(parts)s)
local rec_fields = %(rec)s
local function modify(delta)
  S.reset()
  local rc = slurm_job_modify(S.job_desc(delta), S.job_desc(rec_fields), parts, 1000)
  out({rc = rc, log = S.log})
end
modify({min_cpus = 224})          -- scontrol update NumCPUs=224: two 112-CPU nodes for 8 GPUs
modify({min_cpus = 64})           -- still one node
modify({req_nodes = "n[1-2]"})    -- scontrol update ReqNodeList=: two hosts
modify({cpus_per_task = 4})       -- no task count to multiply: one node
"""


def test_job_modify_rechecks_cpus_and_node_lists(tmp_path, lua_version):
    """Changes of NumCPUs or the node list can force more nodes: a 1-node --gpus=8 TP=8 job
    moved to two nodes gets its 8 GPUs split unevenly, so the update is re-checked."""
    site = load_site(LAB)
    rec = job_desc(
        "#!/bin/bash\nsrun x --tensor-model-parallel-size 8\n", ["--gpus=8", "-p", "h100"], user="bob", uid=1000
    )
    del rec["environment"]
    rec.update(min_nodes=1, min_cpus=1)  # what slurmctld stored for the job
    res = run_lua(
        tmp_path,
        MODIFY_SHAPE % {"parts": lua_literal(part_list(site)), "rec": lua_literal(rec)},
        render_filter(site, "job_submit"),
        lua=lua_version,
    )
    assert [r["rc"] for r in res] == [2072, 0, 2072, 0], res
    assert "changed=min_cpus" in " ".join(res[0]["log"]) and "rules=gpus-per-node-unknown" in " ".join(res[0]["log"])


MODIFY_TASKS = r"""
local parts = S.part_list(%(parts)s)
local function modify(delta, rec_fields)
  S.reset()
  local rc = slurm_job_modify(S.job_desc(delta), S.job_desc(rec_fields), parts, 1000)
  out({rc = rc, log = S.log})
end
local script = "#!/bin/bash\n#SBATCH --ntasks-per-node=8 -n8 --gpus-per-node=8\n"
  .. "srun x --tensor-model-parallel-size 16\n"
local bare = "#!/bin/bash\nsrun x --tensor-model-parallel-size 16\n"
-- scontrol update NumTasks=16: 8 tasks per node (the script's #SBATCH line) -> two nodes
modify({num_tasks = 16}, {script = script, tres_per_node = "gres:gpu:8", min_nodes = 1, min_cpus = 8,
                         pn_min_cpus = 8, partition = "h100", user_id = 1000, user_name = "bob"})
-- the same with --ntasks-per-node on the command line: the record's 8 CPUs per node say it
modify({num_tasks = 16}, {script = bare, tres_per_node = "gres:gpu:8", min_nodes = 1, min_cpus = 8,
                         pn_min_cpus = 8, partition = "h100", user_id = 1000, user_name = "bob"})
-- NumTasks=8: still one node
modify({num_tasks = 8}, {script = script, tres_per_node = "gres:gpu:8", min_nodes = 1, min_cpus = 8,
                        pn_min_cpus = 8, partition = "h100", user_id = 1000, user_name = "bob"})
-- ntasks per node from the update, the task count from the record's CPUs (min_cpus 16 = 16 tasks)
modify({ntasks_per_node = 8}, {script = bare, tres_per_node = "gres:gpu:8", min_nodes = 1, min_cpus = 16,
                              pn_min_cpus = 1, partition = "h100", user_id = 1000, user_name = "bob"})
"""


def test_job_modify_takes_the_task_layout_the_update_leaves_from_the_job(tmp_path, lua_version):
    """scontrol update NumTasks=16 of a held 8-task TP=16 job (8 tasks per node) makes it two
    nodes (seen live: NumNodes 1 -> 2). The job record has no num_tasks, ntasks_per_node or
    cpus_per_task (no release exposes them), so the modify hook takes them from the script's
    #SBATCH lines, else from the record's CPUs (pn_min_cpus, min_cpus)."""
    site = load_site(LAB)
    res = run_lua(
        tmp_path,
        MODIFY_TASKS % {"parts": lua_literal(part_list(site))},
        render_filter(site, "job_submit"),
        lua=lua_version,
    )
    assert [r["rc"] for r in res] == [2072, 2072, 0, 2072], res
    assert "changed=num_tasks" in " ".join(res[0]["log"])


def test_repeated_script_is_judged_with_its_own_environment_and_options(tmp_path, lua_version):
    """slurmctld keeps one Lua state and the filter reuses the scan of a script submitted
    again: the verdict must still follow each submission's environment and options."""
    site = load_site(LAB)
    script = "#!/bin/bash\nexport NCCL_IB_HCA==mlx5_0\nsrun x --tensor-model-parallel-size ${TP:-8}\n"
    runs = [
        (["-N2", "--gpus-per-node=8"], {"TP": "16"}, 2072),
        (["-N2", "--gpus-per-node=8"], {"TP": "8"}, 0),
        (["-N2", "--gpus-per-node=8"], {}, 0),
        (["-N2", "--gpus-per-node=8"], {"TP": "16"}, 2072),
        (["-N1", "--gpus-per-node=8"], {"TP": "16"}, 0),
        (["-N2", "--gpus-per-node=4"], {"TP": "8"}, 2072),
    ]
    descs = [job_desc(script, args, env=env, user="bob") for args, env, _ in runs]
    body = (
        "local parts = %s\nlocal descs = %s\nfor i = 1, #descs do\n"
        "  local rc = S.submit(descs[i], parts, 1000)\n  out({rc = rc})\nend\n"
        % (lua_literal(part_list(site)), lua_literal(descs))
    )
    res = run_lua(tmp_path, body, render_filter(site, "job_submit"), lua=lua_version)
    assert [r["rc"] for r in res] == [rc for _, _, rc in runs]


# ---------------------------------------------------------------------------
# cli_filter

CLI = r"""
local function pre(o, offset)
  S.reset()
  local rc = slurm_cli_pre_submit(o and S.cli_options(o) or nil, offset or 0)
  out({rc = rc, log = S.log})
end
assert(slurm_cli_setup_defaults({}, true) == 0)
assert(slurm_cli_post_submit(0, 1, 2) == 0)
"""
CLI_SHAPES = (
    CLI
    + r"""
pre({type = "sbatch", nodes = "2", ["gpus-per-node"] = "8", wrap = "srun x --tensor-model-parallel-size 16", argv = {}})
pre({type = "sbatch", nodes = "2", ["gpus-per-node"] = "h100:4", wrap = "srun x --tp 4", argv = {}})
pre({type = "salloc", nodes = "2", gres = "gres:gpu:8", wrap = "invalid-context", export = "invalid-context",
     argv = {}})
pre({type = "srun", nodes = "1-0", argv = {"python", "x.py", "--tensor-model-parallel-size", "8"}})
pre(nil)
pre({type = "sbatch", nodelist = "gpu[01-02]", ["gpus-per-node"] = "8", wrap = "srun x --tp 16", argv = {}})
pre({type = "sbatch", ntasks = "2", ["cpus-per-task"] = "200", ["gpus-per-node"] = "8", wrap = "srun x --tp 16",
     argv = {}})
pre({type = "sbatch", nodelist = "gpu01", ["gpus-per-node"] = "8", wrap = "srun x --tp 8", argv = {}})
slurmgpu_filter.topo.partitions.gpu.gpus = {}
pre({type = "sbatch", nodes = "2", ["gpus-per-node"] = "8", wrap = "srun x --tp 16", argv = {}})
"""
)
CLI_ENV = (
    CLI
    + r"""
pre({type = "sbatch", nodes = "2", exclusive = "exclusive", argv = {"job.sh"}, export = "NONE",
     wrap = "srun x --tensor-model-parallel-size ${TP:-8}"})
pre({type = "sbatch", nodes = "2", exclusive = "exclusive", argv = {"job.sh"},
     wrap = "srun x --tensor-model-parallel-size ${TP:-8}"})
pre({type = "sbatch", nodes = "2", exclusive = "exclusive", argv = {"job.sh"}, export = "NONE"})
pre({type = "sbatch", nodes = "2", exclusive = "exclusive", argv = {"job.sh"}, export = "NIL"})
pre({type = "sbatch", nodes = "2", exclusive = "exclusive", argv = {"job.sh"}, export = "FOO"})
pre({type = "sbatch", nodes = "2", exclusive = "exclusive", argv = {"job.sh"}, export = "FOO,SLURMGPU_TP"})
"""
)


def test_cli_filter(tmp_path, lua_version):
    site = dgx()
    step = {
        "SLURM_JOB_ID": "77",
        "SLURM_GPUS_ON_NODE": "4",
        "SLURM_JOB_NUM_NODES": "2",
        "SLURM_JOB_PARTITION": "gpu",
        "USER": "bob",
    }
    res = run_lua(tmp_path / "a", CLI_SHAPES, render_filter(site, "cli_filter"), env=step, lua=lua_version)
    # --wrap with TP=16 rejected; TP=4 on 4 GPUs per node fine; salloc: shape only; an srun
    # step inside a 4-GPU-per-node, 2-node allocation with TP=8 rejected; no options at all is
    # an empty request; -w of two hosts and 2 x 200 CPUs are two nodes (TP=16 refused), -w of
    # one host is one node; a broken site table is an internal error (accept by default)
    assert [r["rc"] for r in res] == [-1, 0, 0, -1, 0, -1, -1, 0, 0], res
    assert any(line.startswith("error: slurmgpu: TP=16") for line in res[0]["log"])
    assert any("with 4 ranks per node" in line for line in res[3]["log"]), res[3]
    assert any("slurmgpu-filter:" in line and "origin=cli_filter-step" in line for line in res[3]["log"])
    assert any("decision=accept" in line for line in res[4]["log"])
    assert any("internal-error" in line for line in res[8]["log"])
    # the user's environment is what sbatch exports: --export=NONE hides TP but passes every
    # SLURM* name such as SLURMGPU_TP; NIL and name lists pass only SLURM_* and the names listed
    res = run_lua(tmp_path / "b", CLI_ENV, render_filter(site, "cli_filter"), env={"TP": "16"}, lua=lua_version)
    assert [r["rc"] for r in res[:2]] == [0, -1], res
    res = run_lua(
        tmp_path / "c", CLI_ENV, render_filter(site, "cli_filter"), env={"SLURMGPU_TP": "16"}, lua=lua_version
    )
    # the first two show the flag (TP=8 by its default): visible flags beat SLURMGPU_TP (issue 16)
    assert [r["rc"] for r in res] == [0, 0, -1, 0, 0, -1], res
    assert any("SLURMGPU_TP environment variable says TP=16" in line for line in res[0]["log"]), res[0]
    # from 24.05 NIL and name lists pass every SLURM* name too (seen on 24.11): the filter
    # rendered for such a site models that
    site24 = replace(site, slurm_version="24.11")
    res = run_lua(
        tmp_path / "d", CLI_ENV, render_filter(site24, "cli_filter"), env={"SLURMGPU_TP": "16"}, lua=lua_version
    )
    assert [r["rc"] for r in res] == [0, 0, -1, -1, -1, -1], res


CLI_SCRIPT = (
    CLI
    + r"""
pre({type = "sbatch", nodes = "2", ["gpus-per-node"] = "8", argv = {"tp16.sh", "--resume"}})
pre({type = "sbatch", nodes = "2", ["gpus-per-node"] = "8", argv = {"tp8.sh"}})
pre({type = "sbatch", nodes = "2", ["gpus-per-node"] = "8", argv = {}})
pre({type = "sbatch", nodes = "2", ["gpus-per-node"] = "8", argv = {"missing.sh"}})
pre({type = "sbatch", nodes = "2", ["gpus-per-node"] = "8", argv = {"huge.sh"}})
"""
)


def test_cli_filter_reads_the_script_file_on_batch_step_sites(tmp_path, lua_version):
    """policy.script_check batch-step: job_submit no longer reads a multi-node job's script, so the
    cli_filter reads sbatch's script file (argv[1]) and the user hears a refusal at submission; a
    script from standard input, a missing file or one over 4 MB is left to the batch step. On a
    submit site it reads no file (job_submit judges the script)."""
    site = dgx()
    batch = replace(site, policy=replace(site.policy, script_check="batch-step"))
    tp = (
        "#!/bin/bash\nexport NCCL_SOCKET_IFNAME=ib0 NCCL_IB_HCA==mlx5_0\n"
        "srun python pretrain_gpt.py --tensor-model-parallel-size %d\n"
    )
    for where in (tmp_path / "batch", tmp_path / "submit"):
        where.mkdir()
        (where / "tp16.sh").write_text(tp % 16)
        (where / "tp8.sh").write_text(tp % 8)
        (where / "huge.sh").write_text(tp % 16 + "#" * (4 * 1024 * 1024))
    res = run_lua(tmp_path / "batch", CLI_SCRIPT, render_filter(batch, "cli_filter"), lua=lua_version)
    assert [r["rc"] for r in res] == [-1, 0, 0, 0, 0], res
    assert any(line.startswith("error: slurmgpu: TP=16 (script line 3") for line in res[0]["log"]), res[0]
    res = run_lua(tmp_path / "submit", CLI_SCRIPT, render_filter(site, "cli_filter"), lua=lua_version)
    assert [r["rc"] for r in res] == [0] * 5, res


# ---------------------------------------------------------------------------
# policy.lua on its own: the job-table contract (SPANK plugin)

CONTRACT = r"""
local P = dofile('policy.lua')
local topo = dofile('topo.lua')
local function show(job) local v = P.decide(job, topo); out(S.export(v)) end
-- a task's view: argv, the complete task environment, GPUs on the node, node count
show({origin = "spank", argv = {"python", "train.py", "--tensor-model-parallel-size", "16"}, env = {},
      env_complete = true, nodes_min = 2, gpus_per_node = 8, ntasks_per_node = 8, partition = "gpu"})
show({origin = "spank", argv = {"python", "train.py", "--tensor-model-parallel-size", "8"},
      env = {NCCL_IB_HCA = "=mlx5_0", NCCL_SOCKET_IFNAME = "bond0"}, env_complete = true,
      nodes_min = 2, gpus_per_node = 8, ntasks_per_node = 8})
show({origin = "spank", argv = {"python", "train.py"}, env = {SLURMGPU_TP = "8"}, env_complete = true,
      nodes_min = 2, gpus_per_node = 4, ntasks_per_node = 4})
show({origin = "spank", argv = {"vllm", "serve", "m", "-tp", "16"}, env = {}, nodes_min = 2, gpus_per_node = 8,
      launcher = "vllm"})
show({})
out({tag = P.TAG, reject = P.REJECT_CODE, err = P.ERROR_CODE, version = P.VERSION})
out({P.parse_gpus("gres:gpu:8"), P.parse_gpus("gres/gpu=8"), P.parse_gpus("gpu:h100:8"),
     P.parse_gpus("gres:gpu:a:3,gres:gpu:b:1"), P.parse_gpus("gres:gpu:4,gres:gpu:2"),
     P.parse_gpus("gres:gpu:1k"), P.parse_gpus("gres:gpu:h100"), P.parse_gpus("cpu=10,gres/gpu:gtx=1,license/iop1=1")})
out({P.parse_gpus("gres:nic:1") == nil, select(2, P.parse_gpus("gres:gpu:8:9:x")) ~= nil, P.parse_gpus(nil) == nil})
"""


def test_policy_contract_plain_tables(tmp_path, lua_version):
    (tmp_path).mkdir(exist_ok=True)
    (tmp_path / "topo.lua").write_text(topology_lua(dgx()))
    res = run_lua(tmp_path, CONTRACT, lua=lua_version)
    spans, fits, env_four, vllm, empty, consts, counts, odd = res
    assert spans["decision"] == "reject" and spans["code"] == 2072
    assert "TP=16 (--tensor-model-parallel-size 16)" in spans["messages"][0]
    assert any("NCCL_IB_HCA" in w for w in spans["warnings"])  # the task env is complete: it is checked
    assert fits["decision"] == "accept" and fits["warnings"] == []
    assert env_four["decision"] == "reject" and env_four["source"] == "env"
    assert vllm["decision"] == "reject" and vllm["launcher"] == "vllm"
    assert empty["decision"] == "accept" and empty["partitions"] == ["gpu"]
    assert consts == {"tag": "slurmgpu-filter:", "reject": 2072, "err": -1, "version": "1"}
    assert counts == [8, 8, 8, 4, 2, 1024, 1, 1]
    assert odd == [True, True, True]


# ---------------------------------------------------------------------------
# hostile scripts under the real binary


def test_hostile_scripts_under_lua51(tmp_path):
    site = dgx()
    hdr = b"#!/bin/bash\n#SBATCH -N2 --gpus-per-node=8\n"
    scripts = [
        hdr + bytes((i * 2654435761 >> 11) & 0xFF for i in range(4 << 20)) + b"\nsrun x --tp 16\n",
        hdr + b"srun x " + b"b" * (1 << 20) + b" --tp 16\n",
        hdr + b"srun x " + b"--tp 1 " * 100000 + b"--tp 16\n",
        hdr + b"--tensor-model-parallel-siz" * 150000 + b"\nsrun x --tp 16\n",
        hdr + b"".join(b"srun x --tp ${V%d:-1}\n" % i for i in range(60000)) + b"srun x --tp 16\n",
    ]
    for i, s in enumerate(scripts):
        (tmp_path / ("s%d.bin" % i)).write_bytes(s)
    body = """
local parts = %s
for i = 0, %d do
  local f = io.open('../s' .. i .. '.bin', 'rb'); local s = f:read('*a'); f:close()
  local t = os.clock()
  local rc = S.submit({script = s, min_nodes = 2, max_nodes = 2, tres_per_node = 'gres:gpu:8', argv = {'s.sh'},
                       environment = {}}, parts, 1000)
  out({rc = rc, secs = os.clock() - t})
end
""" % (lua_literal(part_list(site)), len(scripts) - 1)
    t0 = time.perf_counter()
    res = run_lua(tmp_path / "run", body, render_filter(site, "job_submit"))
    assert time.perf_counter() - t0 < 30
    for r in res:
        assert r["rc"] == 2072, res  # found, or refused as unscannable: never an error
        assert r["secs"] < 5.0, res


HET = r"""
local parts = %(parts)s
local function submit(d) local rc = S.submit(d, parts, d.user_id) ; out(rc) end
local script = "#!/bin/bash\nsrun --het-group=1 python train.py --tensor-model-parallel-size 16\n"
-- component 0 (one node) has the script; component 1 (two nodes) does not, as in slurmctld
submit({script = script, het_job_offset = 0, min_nodes = 1, max_nodes = 1, tres_per_node = "gres:gpu:8",
        environment = {}, user_id = 1000})
submit({het_job_offset = 1, min_nodes = 2, max_nodes = 2, tres_per_node = "gres:gpu:8", environment = {},
        user_id = 1000})
-- a component 1 not preceded by its component 0 (another call in between) does not inherit it
submit({script = script, het_job_offset = 0, min_nodes = 1, tres_per_node = "gres:gpu:8", environment = {},
        user_id = 1000})
submit({script = "#!/bin/bash\ntrue\n", min_nodes = 1, tres_per_node = "gres:gpu:8", environment = {}, user_id = 1000})
submit({het_job_offset = 1, min_nodes = 2, tres_per_node = "gres:gpu:8", environment = {}, user_id = 1000})
-- nor does another user's component
submit({script = script, het_job_offset = 0, min_nodes = 1, tres_per_node = "gres:gpu:8", environment = {},
        user_id = 1000})
submit({het_job_offset = 1, min_nodes = 2, tres_per_node = "gres:gpu:8", environment = {}, user_id = 1001})
"""


def test_het_components_share_the_batch_script(tmp_path, lua_version):
    """Only het component 0 carries the script; its srun lines may run on the others."""
    site = dgx()
    res = run_lua(
        tmp_path, HET % {"parts": lua_literal(part_list(site))}, render_filter(site, "job_submit"), lua=lua_version
    )
    assert res == [0, 2072, 0, 0, 0, 0, 0]


ARGV_NOT_SHELL = r"""
local P = dofile('policy.lua')
local topo = dofile('topo.lua')
local function show(argv)
  local v = P.decide({origin = "cli_filter", argv = argv, env = {}, nodes_min = 2, gpus_per_node = 8,
                      ntasks_per_node = 8, partition = "gpu"}, topo)
  out({v.decision, v.source})
end
-- a lone "#" argument is data, not a comment: the flag after it still counts
show({"python", "x.py", "#", "--tensor-model-parallel-size", "16"})
-- a newline inside an argument cannot forge a stamp line that claims tp=8
show({"python", "x.py", "a\n# slurmgpu: site=dgx-h100 tp=8 pp=2 dp=1 cp=1 ep=1 nodes=2 gpus_per_node=8",
      "--tensor-model-parallel-size", "16"})
-- more than the old 256-argument window: the flag at the end is still read
local long = {"python", "x.py"}
for i = 1, 400 do long[#long + 1] = "--opt" .. i end
long[#long + 1] = "--tensor-model-parallel-size"; long[#long + 1] = "16"
show(long)
"""


def test_argv_is_not_read_as_shell_text(tmp_path, lua_version):
    (tmp_path / "topo.lua").write_text(topology_lua(dgx()))
    hash_arg, forged, long = run_lua(tmp_path, ARGV_NOT_SHELL, lua=lua_version)
    assert hash_arg == ["reject", "flags"]
    assert forged == ["reject", "flags"]
    assert long == ["reject", "flags"]


# ---------------------------------------------------------------------------
# a GPU job on a partition the site does not describe (added after install): judged as the
# default partition's node type, the user told, the admins' log line written once per name

UNKNOWN_PARTITION = r"""
local parts = %(parts)s
local function desc(p, gres)
  return {script = "#!/bin/bash\nsrun x --tp 16\n", partition = p, tres_per_node = gres,
          min_nodes = 2, max_nodes = 2, user_name = "bob", user_id = 1000}
end
local subs = {{"h100", "gres:gpu:8"}, {"h100", "gres:gpu:8"}, {"cpu", nil}, {"a100", "gres:gpu:4"},
              {"h100,a100", "gres:gpu:8"}, {"gpu", "gres:gpu:8"}}
for i = 1, #subs do
  local rc, msgs, log = S.submit(desc(subs[i][1], subs[i][2]), parts, 1000)
  out({rc = rc, msgs = msgs, log = log})
end
-- job_modify moving a held job to an unknown partition logs through the same memory
S.reset()
local rec = S.job_desc({partition = "gpu", tres_per_node = "gres:gpu:8", min_nodes = 2, max_nodes = 2,
                        user_name = "bob", user_id = 1000, script = "#!/bin/bash\nsrun x --tp 16\n"})
local rc = slurm_job_modify(S.job_desc({partition = "b200"}), rec, S.part_list(parts), 1000)
out({rc = rc, log = S.log})
"""


def test_unknown_gpu_partition_is_judged_and_logged_once_under_lua51(tmp_path):
    site = load_site(str(ROOT / "tests" / "data" / "sites" / "testcluster.yaml"))
    results = run_lua(
        tmp_path, UNKNOWN_PARTITION % {"parts": lua_literal(part_list(site))}, render_filter(site, "job_submit")
    )
    *subs, modify = results
    # TP=16 on 2 nodes is refused wherever GPUs are asked for: judged as the default partition gpu
    assert [r["rc"] for r in subs] == [2072, 2072, 0, 2072, 2072, 2072]
    warned = [[line for line in r["log"] if "unknown-partition=" in line] for r in subs]
    assert [len(w) for w in warned] == [1, 0, 0, 1, 0, 0], warned
    assert warned[0][0].startswith(
        "info: slurmgpu-filter: warning unknown-partition=h100: partition 'h100' is "
        "not described by site 'testcluster' (it describes: gpu, gpu4, pcie); GPU jobs there are judged as on "
        "the default partition 'gpu'"
    )
    assert "unknown-partition=a100:" in warned[3][0]
    told = [[m for m in r["msgs"] if "is not described by site 'testcluster'" in m] for r in subs]
    assert [len(x) for x in told] == [1, 1, 0, 1, 2, 0], told  # the user is told, every time, per name
    # scontrol update Partition=b200 (not described) of a held TP=16 2-node job: judged too
    assert modify["rc"] == 2072 and [line for line in modify["log"] if "unknown-partition=b200:" in line]
