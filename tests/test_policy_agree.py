"""Python side and Lua side give identical verdicts on 10,000 generated jobs.

Python side: `slurmgpu check`'s path: the script's #SBATCH lines and the sbatch options go
through slurmgpu.jobdesc, then the rendered job_submit.lua runs in lupa.lua51.
Lua side: the same rendered job_submit.lua under Debian's `lua5.1` binary, called as slurmctld
calls it (slurm_job_submit with a 22.05-style job_desc proxy), where the job_desc is written
here, independently, from what the generator chose (e.g. "--gres=gpu:h100:8" -> tres_per_node
"gres:gpu:h100:8"), not by slurmgpu.jobdesc.

Both must agree on the decision (0 / 2072) and on every line sent to the user, in order.
Scripts mix launcher spellings, shell variables, continuations, comments, decoys, stamps and
environment layouts; GPU requests cover every spelling on every partition shape of the lab site.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any, Dict, List, Tuple

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from slurmgpu.policy import PolicyRunner, lua_dir, lua_literal, part_list, render_filter
from slurmgpu.site import load_site

LUA = shutil.which("lua5.1")
ROOT = Path(__file__).resolve().parent.parent
LAB = str(ROOT / "tests" / "policy_cases" / "sites" / "lab.yaml")
JOBS = int(os.environ.get("SLURMGPU_AGREE_JOBS", "10000"))

pytestmark = [pytest.mark.skipif(LUA is None, reason="needs Debian's lua5.1"), pytest.mark.slow]

# TP flag spellings: (template, launcher prefix); {v} is the value, {sep} is ' ' or '='
TP_FLAGS = [
    ("--tensor-model-parallel-size{sep}{v}", "srun python pretrain_gpt.py"),
    ("--tensor_model_parallel_size{sep}{v}", "srun python pretrain_gpt.py"),
    ("--tensor-parallel-size{sep}{v}", "vllm serve meta-llama/Llama-3.1-70B"),
    ("-tp{sep}{v}", "vllm serve m"),
    ("--tp{sep}{v}", "python -m sglang.launch_server --model-path m"),
    ("--tp-size{sep}{v}", "python -m sglang.launch_server --model-path m"),
    ("--parallelism.tensor_parallel_degree{sep}{v}", "srun torchrun -m torchtitan.train"),
    ("model.tensor_model_parallel_size={v}", "srun python megatron_gpt_pretraining.py"),
    ("--tensor-model-parallel-size{sep}{v}", "deepspeed --num_gpus 8 pretrain_gpt.py"),
]
PP_FLAGS = ["--pipeline-model-parallel-size{sep}{v}", "--pp{sep}{v}", "--pipeline-parallel-size{sep}{v}"]
VALUES = [1, 2, 3, 4, 6, 8, 12, 16, 32, 72, 128]
PARTITIONS = [None, "h100", "six", "quad", "pcie", "nvl72", "soft", "free", "shared", "h100,quad", "nosuch"]
GPU_KINDS = ["gpn", "gpn_typed", "gres", "gres_typed", "gpus", "per_task", "exclusive", "none", "gres_dup"]


@st.composite
def jobs(draw) -> Dict[str, Any]:
    tp = draw(st.sampled_from(VALUES))
    flag, prefix = draw(st.sampled_from(TP_FLAGS))
    sep = draw(st.sampled_from([" ", "="]))
    form = draw(st.sampled_from(["literal", "var", "braces", "default", "quoted", "env-var"]))
    job: Dict[str, Any] = {
        "tp": tp,
        "flag": flag,
        "prefix": prefix,
        "sep": sep,
        "form": form,
        "pp": draw(st.one_of(st.none(), st.sampled_from([1, 2, 3, 4, 8]))),
        "pp_flag": draw(st.sampled_from(PP_FLAGS)),
        "continuation": draw(st.booleans()),
        "decoy": draw(st.sampled_from(["none", "line", "inline", "quoted-hash", "other-var"])),
        "decoy_tp": draw(st.sampled_from(VALUES)),
        "stamp": draw(
            st.one_of(
                st.none(),
                st.tuples(
                    st.sampled_from(VALUES),
                    st.sampled_from([1, 2, 4]),
                    st.sampled_from([1, 2, 4, 8]),
                    st.sampled_from([4, 6, 8]),
                    st.sampled_from(["lab", "dgx-h100"]),
                ),
            )
        ),
        "env_tp": draw(st.one_of(st.none(), st.sampled_from(VALUES))),
        "nccl": draw(st.sampled_from(["none", "script", "env"])),
        "nproc": draw(st.one_of(st.none(), st.sampled_from(["4", "8", "gpu", "$SLURM_GPUS_ON_NODE"]))),
        "partition": draw(st.sampled_from(PARTITIONS)),
        "nodes": draw(st.one_of(st.none(), st.integers(1, 5), st.just("1-2"))),
        "gpu": draw(st.sampled_from(GPU_KINDS)),
        "count": draw(st.sampled_from([1, 2, 4, 6, 8])),
        "ntasks_per_node": draw(st.one_of(st.none(), st.sampled_from([1, 2, 4, 6, 8]))),
        "segment": draw(st.one_of(st.none(), st.integers(1, 6))),
        "user": draw(st.sampled_from(["bob", "bob", "bob", "alice"])),
        "in_script": draw(st.lists(st.booleans(), min_size=8, max_size=8)),
        "crlf": draw(st.integers(0, 19)) == 0,
    }
    return job


def _value_text(job: Dict[str, Any]) -> Tuple[str, List[str]]:
    """The flag's value as written, and any lines that must come before the launch line."""
    tp, form = job["tp"], job["form"]
    if form == "literal":
        return str(tp), []
    if form == "var":
        return "$TP", ["TP=%d" % tp]
    if form == "braces":
        return "${TP_SIZE}", ["export TP_SIZE=%d" % tp]
    if form == "default":
        return "${TP:-%d}" % tp, []
    if form == "quoted":
        return '"%d"' % tp, []
    return "$MY_TP", []  # env-var: from the submitting environment


def build(job: Dict[str, Any]) -> Tuple[str, List[str], Dict[str, str], Dict[str, Any]]:
    """(script, sbatch args, env) for the Python side and the job_desc for the Lua side."""
    options: List[Tuple[List[str], Dict[str, Any]]] = []  # (sbatch words, job_desc fields)
    nodes = job["nodes"]
    desc: Dict[str, Any] = {}
    if job["partition"]:
        options.append((["--partition=%s" % job["partition"]], {"partition": job["partition"]}))
    nmin = None
    if nodes is not None:
        lo, hi = (1, 2) if nodes == "1-2" else (nodes, nodes)
        nmin = lo
        options.append((["--nodes=%s" % nodes], {"min_nodes": lo, "max_nodes": hi}))
    c = job["count"]
    kind = job["gpu"]
    tres = {
        "gpn": (["--gpus-per-node=%d" % c], {"tres_per_node": "gres:gpu:%d" % c}),
        "gpn_typed": (["--gpus-per-node=h100:%d" % c], {"tres_per_node": "gres:gpu:h100:%d" % c}),
        "gres": (["--gres=gpu:%d" % c], {"tres_per_node": "gres:gpu:%d" % c}),
        "gres_typed": (["--gres=gpu:h100:%d" % c], {"tres_per_node": "gres:gpu:h100:%d" % c}),
        "gpus": (["--gpus=%d" % (c * (nmin or 1))], {"tres_per_job": "gres:gpu:%d" % (c * (nmin or 1))}),
        "per_task": (["--gpus-per-task=1"], {"tres_per_task": "gres:gpu:1"}),
        "exclusive": (["--exclusive"], {"shared": 0}),
        "gres_dup": (["--gpus-per-node=8", "--gres=gpu:%d" % c], {"tres_per_node": "gres:gpu:8,gres:gpu:%d" % c}),
    }
    if kind in tres:
        options.append(tres[kind])
    if job["ntasks_per_node"]:
        n = job["ntasks_per_node"]
        fields: Dict[str, Any] = {"ntasks_per_node": n}
        if nmin is not None:
            fields["num_tasks"] = nmin * n
        options.append((["--ntasks-per-node=%d" % n], fields))
    if job["segment"]:
        options.append((["--segment=%d" % job["segment"]], {"segment_size": job["segment"]}))
    header: List[str] = []
    args: List[str] = []
    for i, (words, fields) in enumerate(options):
        (header if job["in_script"][i % 8] else args).extend(words)
        desc.update(fields)

    lines = ["#!/bin/bash"]
    if job["stamp"]:
        stp, spp, sdp, sgpn, ssite = job["stamp"]
        lines.append(
            "# slurmgpu: site=%s tp=%d pp=%d dp=%d cp=1 ep=1 nodes=2 gpus_per_node=%d" % (ssite, stp, spp, sdp, sgpn)
        )
    lines.append("# generated case")
    for w in header:
        lines.append("#SBATCH %s" % w)
    if job["nccl"] == "script":
        lines += ["export NCCL_IB_HCA==mlx5_0,mlx5_1", "export NCCL_SOCKET_IFNAME=eth0", 'export NCCL_NET="OFI"']
    value, pre = _value_text(job)
    lines += pre
    decoy = job["decoy"]
    if decoy == "line":
        lines.append("# %s %s" % (job["prefix"], job["flag"].format(sep=" ", v=job["decoy_tp"])))
    if decoy == "other-var":
        lines.append("OTHER_TP=%d" % job["decoy_tp"])
    launch = job["prefix"]
    if job["nproc"] and "torchrun" not in launch:
        launch = "srun torchrun --nproc-per-node=%s train.py" % job["nproc"]
    flag = job["flag"].format(sep=job["sep"], v=value)
    parts = [launch]
    if decoy == "quoted-hash":
        parts.append('--run-name "exp #%d"' % job["decoy_tp"])
    parts.append(flag)
    if job["pp"]:
        parts.append(job["pp_flag"].format(sep=job["sep"], v=job["pp"]))
    joiner = " \\\n    " if job["continuation"] else " "
    text = joiner.join(parts)
    if decoy == "inline":
        text += "  # " + job["flag"].format(sep=" ", v=job["decoy_tp"])
    lines.append(text)
    script = "\n".join(lines) + "\n"
    if job["crlf"]:
        script = script.replace("\n", "\r\n")

    env: Dict[str, str] = {"HOME": "/home/u"}
    if job["form"] == "env-var":
        env["MY_TP"] = str(job["tp"])
    if job["env_tp"]:
        env["SLURMGPU_TP"] = str(job["env_tp"])
    if job["nccl"] == "env":
        env.update({"NCCL_IB_HCA": "=mlx5_0", "NCCL_SOCKET_IFNAME": "eth0", "NCCL_NET": "OFI"})
    desc.update(
        {"script": script, "argv": ["job.sh"], "environment": dict(env), "user_name": job["user"], "user_id": 1000}
    )
    return script, args, env, desc


@pytest.fixture(scope="module")
def lab():
    return load_site(LAB)


@pytest.fixture(scope="module")
def python_side(lab):
    return PolicyRunner(lab, backend="lupa")


class LuaSide:
    """One lua5.1 process running the rendered job_submit.lua; one job_desc literal per line in,
    one JSON verdict per line out (so 10,000 jobs do not start 10,000 interpreters)."""

    def __init__(self, d: Path, lab):
        shutil.copy(lua_dir() / "slurm_stub.lua", d / "slurm_stub.lua")
        (d / "job_submit.lua").write_text(render_filter(lab, "job_submit"))
        (d / "driver.lua").write_text(
            "dofile('slurm_stub.lua')\nassert(dofile('job_submit.lua') == 0)\nlocal S = slurmgpu_stub\n"
            "local parts = %s\n"
            "for line in io.lines() do\n"
            "  local desc = assert(loadstring('return ' .. line))()\n"
            "  local rc, msgs, log = S.submit(desc, parts, 1000)\n"
            "  io.write(S.json({rc = rc, msgs = msgs, log = log}), '\\n')\n  io.flush()\nend\n"
            % lua_literal(part_list(lab))
        )
        self.proc = subprocess.Popen(
            [LUA or "lua5.1", "driver.lua"],
            cwd=str(d),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
        )

    def submit(self, desc: Dict[str, Any]) -> Dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(lua_literal(desc).replace("\n", " ").encode("ascii") + b"\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        assert line, "lua5.1 died (rc %s)" % self.proc.poll()
        return json.loads(line)

    def close(self) -> None:
        if self.proc.stdin:
            self.proc.stdin.close()
        self.proc.wait(timeout=30)
        if self.proc.stdout:
            self.proc.stdout.close()


@pytest.fixture(scope="module")
def lua_side(tmp_path_factory, lab):
    side = LuaSide(tmp_path_factory.mktemp("agree"), lab)
    yield side
    side.close()


@settings(max_examples=JOBS, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(job=jobs())
def test_python_and_lua_agree(job, python_side, lua_side):
    script, args, env, desc = build(job)
    v = python_side.check(script, args, env=env, user=job["user"], uid=1000, script_path="job.sh")
    res = lua_side.submit(desc)
    where = "script:\n%s\nargs: %s\nenv: %s" % (script, args, env)
    assert res["rc"] == v.slurm_code, where
    own = [line for line in res["log"] if "slurmgpu-filter: decision=" in line and " count=" not in line]
    if not own or "source=single-node" in own[0]:
        # slurmctld decided a one-node job from its fields (no advice; counted for a summary line,
        # policy.single_node_log_s): check accepts it too
        assert v.decision == "accept" and not v.messages and not res["msgs"], where
    else:
        assert res["msgs"] == list(v.messages) + list(v.warnings), where


COVERAGE_JOBS = 3000  # every rule below fires within this fixed sample (about 1 in 300 for tp-needs-segment)


def test_agreement_covered_enough(python_side):
    """The job generator reaches both decisions and the main rules, so agreement means something.

    It runs its own fixed (derandomized) sample of the same generator, whatever else ran.
    """
    seen: Dict[str, Any] = {"jobs": 0, "decisions": set(), "rules": set()}

    @settings(
        max_examples=COVERAGE_JOBS,
        deadline=None,
        database=None,
        derandomize=True,
        suppress_health_check=[HealthCheck.too_slow],
    )
    @given(job=jobs())
    def sample(job):
        script, args, env, _ = build(job)
        v = python_side.check(script, args, env=env, user=job["user"], uid=1000, script_path="job.sh")
        seen["jobs"] += 1
        seen["decisions"].add(v.decision)
        seen["rules"].update(v.rules)

    sample()
    assert seen["jobs"] == COVERAGE_JOBS
    assert seen["decisions"] == {"accept", "reject"}
    for rule in (
        "tp-exceeds-domain",
        "tp-spans-nodes",
        "tp-needs-segment",
        "gpus-per-node-unknown",
        "world-mismatch",
        "pcie-multinode",
        "nccl-env-missing",
        "exempt",
    ):
        assert rule in seen["rules"], (rule, sorted(seen["rules"]))
