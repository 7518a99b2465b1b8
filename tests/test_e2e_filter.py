"""The rendered submit filter inside real Slurm 22.05 daemons (issue 6, end to end).

`render_filter(testcluster site, kind)` is installed as the local test cluster's
job_submit.lua and cli_filter.lua (contrib/testcluster), and real sbatch/srun/salloc/scontrol
clients talk to the real slurmctld. The verdicts are read where Slurm puts them: the client's
exit status and stderr, and the filter's `slurmgpu-filter:` line in slurmctld.log.
`sbatch --test-only` runs job_submit without creating a job; `-H` keeps accepted jobs pending.

Every case file in tests/policy_cases/ also goes through a real slurmctld whose partitions
are those of the case's site, and must get the verdict the case expects and the one
`slurmgpu check` (PolicyRunner, the same Lua under lupa) gives: Python, Lua and slurmctld agree.
So must their views of what `--export` sends. Heterogeneous jobs (one job_submit call per
component) and `scontrol update` of a held job (slurm_job_modify) are covered too.

Needs root and the Debian slurm packages; skipped otherwise unless SLURMGPU_REQUIRE_CLUSTER=1.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

import pytest
import yaml

from slurmgpu.errors import ConfigError
from slurmgpu.policy import PolicyRunner, lua_literal, part_list, render_filter
from slurmgpu.site import Site, load_site, resolve_site_ref
from slurmgpu.slurm import het_count, job_desc, tres_prefix
from tests.cluster_fixtures import testcluster
from tests.policy_cases.cases import PolicyCase, load_cases, problems

pytestmark = pytest.mark.cluster

ROOT = Path(__file__).resolve().parents[1]
SITE_FILE = ROOT / "tests" / "data" / "sites" / "testcluster.yaml"
CASES = load_cases()

# srun and salloc send their whole command line with an allocation request (job_desc.argv) from
# 23.02 (Slurm's src/srun/allocate.c; 22.05 sends argv[0] only); seen on 22.05.8 vs 24.11.5.
SRUN_SENDS_ITS_COMMAND = (23, 2)

# A job the filter accepts on the test cluster: TP=8 inside each 8-GPU node, PP=2 across two.
GOOD_SCRIPT = """\
#!/bin/bash
#SBATCH -N2 --gpus-per-node=8 -p gpu
export NCCL_SOCKET_IFNAME=lo
srun python pretrain_gpt.py --tensor-model-parallel-size 8 --pipeline-model-parallel-size 2
"""

# TP=16 over two 8-GPU nodes, in each launcher's spelling: (launcher, command line).
TP16_SPELLINGS = [
    ("megatron", "srun python pretrain_gpt.py --tensor-model-parallel-size 16 --num-layers 80"),
    (
        "nemo",
        "srun python megatron_gpt_pretraining.py trainer.num_nodes=2 trainer.devices=8 "
        "model.tensor_model_parallel_size=16",
    ),
    ("vllm", "vllm serve meta-llama/Llama-3.1-70B-Instruct --tensor-parallel-size 16"),
]
# The GPU request, in the spellings sbatch takes: (#SBATCH line, sbatch arguments).
GPU_SPELLINGS = [
    ("gpus-per-node", "#SBATCH -N2 --gpus-per-node=8 -p gpu", ()),
    ("gres-typed", "#SBATCH -p gpu", ("--gres=gpu:h100:8", "-N2")),
    ("gpus-total", "#SBATCH -p gpu", ("--gpus=16", "-N2")),
]


# ---------------------------------------------------------------------------
# helpers


def clean_env(cluster, extra: Optional[Mapping[str, str]] = None) -> Dict[str, str]:
    """A small, fixed client environment (sbatch exports it to the job, and the filter reads
    SLURMGPU_*/NCCL_*/SBATCH_* from it), so the caller's shell cannot change a verdict."""
    env = {k: os.environ[k] for k in ("PATH", "HOME", "LANG", "TERM") if k in os.environ}
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "/usr/bin:/bin")
    if cluster.bin_dir is not None:  # a chroot release: its clients first
        env["PATH"] = str(cluster.bin_dir) + os.pathsep + env["PATH"]
    env["SLURM_CONF"] = str(cluster.conf_path)
    env.update(extra or {})
    return env


def client(
    cluster,
    argv: Sequence[str],
    stdin: Optional[str] = None,
    env: Optional[Mapping[str, str]] = None,
    timeout: float = 60,
) -> Tuple[int, str, str]:
    """Run a Slurm client with clean_env(); (rc, stdout, stderr)."""
    p = subprocess.run(
        list(argv),
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=clean_env(cluster, env),
        cwd=str(cluster.jobs_dir),
    )
    return p.returncode, p.stdout, p.stderr


_LOG_KEYS = re.compile(r" (origin|user|het_offset|tp|pp|cp|ep|source|launcher|mode|rules|exempt|code)=(\S+)")


def filter_lines(cluster, since: int) -> List[Dict[str, str]]:
    """The filter's `slurmgpu-filter: decision=...` lines in slurmctld.log since `since`."""
    out = []
    for line in cluster.ctld_log(since).splitlines():
        m = re.search(r"slurmgpu-filter: decision=(\w+)(.*)$", line)
        if m:
            d = dict(_LOG_KEYS.findall(m.group(2)))
            d["decision"] = m.group(1)
            out.append(d)
    return out


def submit_lines(cluster, since: int) -> List[Dict[str, str]]:
    return [d for d in filter_lines(cluster, since) if d.get("origin") == "job_submit"]


def squeue_ids(cluster) -> List[str]:
    return cluster.run(["squeue", "-h", "-o", "%A"]).stdout.split()


def site_copy(tmp_path: Path, **policy) -> Site:
    """The test cluster's site config with its policy section changed, written to tmp_path."""
    data = yaml.safe_load(SITE_FILE.read_text())
    data["policy"] = dict(data.get("policy") or {}, **policy)
    path = tmp_path / "site.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return load_site(str(path))


def tp16_script(command: str, sbatch_line: str = "#SBATCH -N2 --gpus-per-node=8 -p gpu") -> str:
    return "#!/bin/bash\n%s\nexport NCCL_SOCKET_IFNAME=lo\n%s\n" % (sbatch_line, command)


# ---------------------------------------------------------------------------
# fixtures


@pytest.fixture(scope="module")
def site() -> Site:
    return load_site(str(SITE_FILE))


@pytest.fixture(scope="module")
def rendered(site) -> Dict[str, str]:
    return {kind: render_filter(site, kind) for kind in ("job_submit", "cli_filter")}


@pytest.fixture
def policy(slurm_cluster, job_submit, cli_filter, rendered):
    """Both rendered filters installed (job_submit's load verified by a --test-only probe); the
    log mark from before the install. Afterwards: slurmctld logged no job_submit/lua error, no
    non-numeric return code and no failed reload."""
    mark = slurm_cluster.log_mark()
    job_submit(rendered["job_submit"])
    cli_filter(rendered["cli_filter"])
    yield mark
    assert slurm_cluster.job_submit_errors(mark) == []


# ---------------------------------------------------------------------------
# 1. the rendered filters load and run in the daemons


def test_rendered_filters_load_and_run_in_the_daemons(slurm_cluster, policy, rendered):
    mark = slurm_cluster.log_mark()
    rc, out, err = client(slurm_cluster, ["sbatch", "--test-only"], GOOD_SCRIPT)
    assert rc == 0, err
    assert re.search(r"to start at .* on nodes gpu\[0\d-0\d\] in partition gpu", err), err
    assert "error" not in err and "slurmgpu" not in err  # cli_filter.lua loaded, nothing to say
    lines = submit_lines(slurm_cluster, mark)
    assert [(d["decision"], d["tp"], d["pp"], d["source"], d["launcher"]) for d in lines] == [
        ("accept", "8", "2", "flags", "megatron")
    ]
    assert squeue_ids(slurm_cluster) == []  # --test-only created no job

    # the cli_filter runs in the client, before the controller: --wrap text is visible to it
    mark = slurm_cluster.log_mark()
    rc, out, err = client(
        slurm_cluster,
        [
            "sbatch",
            "--test-only",
            "-N2",
            "--gpus-per-node=8",
            "-p",
            "gpu",
            "--wrap",
            "srun python pretrain_gpt.py --tensor-model-parallel-size 16",
        ],
    )
    assert rc != 0
    assert "cli_filter plugin terminated with error" in err
    assert re.search(
        r"error: lua: slurmgpu: TP=16 \(script line 2: --tensor-model-parallel-size 16\) is larger "
        r"than the NVLink domain",
        err,
    ), err
    assert submit_lines(slurm_cluster, mark) == []  # never reached slurmctld

    log = slurm_cluster.ctld_log(policy)
    assert "job_submit/lua" not in log and "non-numeric return code" not in log
    assert slurm_cluster.job_submit_path.read_text() == rendered["job_submit"]


def test_accepted_job_held_with_H_stays_pending(slurm_cluster, policy):
    mark = slurm_cluster.log_mark()
    rc, out, err = client(slurm_cluster, ["sbatch", "--parsable", "-H"], GOOD_SCRIPT)
    assert rc == 0, err
    job_id = int(out.strip().split(";")[0])
    info = slurm_cluster.job_info(job_id)
    assert info is not None
    assert (info["JobState"], info["Reason"]) == ("PENDING", "JobHeldUser")
    assert [d["decision"] for d in submit_lines(slurm_cluster, mark)] == ["accept"]


# ---------------------------------------------------------------------------
# 2. TP that spans nodes is rejected, in every spelling


def test_gen_refuses_tp16_with_the_filters_message_and_slurmctld_agrees(slurm_cluster, policy, tmp_path):
    gen = [
        sys.executable,
        "-m",
        "slurmgpu.cli",
        "gen",
        "--site",
        str(SITE_FILE),
        "--launcher",
        "megatron",
        "--nodes",
        "2",
        "--no-preflight",
    ]
    refused = subprocess.run(gen + ["--tp", "16", "--", "pretrain_gpt.py"], capture_output=True, text=True)
    assert refused.returncode == 1, refused.stderr
    gen_msg = next(line for line in refused.stderr.splitlines() if line.startswith("slurmgpu: TP=16"))

    # The same job written with TP=8, then hand-edited to TP=16 in its launch flag (and its stamp
    # line: a stamp alone no longer outranks the flags, issue 16): the real filter rejects it with
    # the words gen used (the script line it names may differ: the two scripts' comments differ).
    # (the refused job above has no training inputs: the filter's verdict still comes first)
    ok = subprocess.run(gen + ["--tp", "8", "--smoke", "--", "pretrain_gpt.py"], capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    assert re.search(r"^# slurmgpu: site=testcluster tp=8 ", ok.stdout, re.M)
    edited = re.sub(r"^(# slurmgpu: site=testcluster) tp=8 ", r"\1 tp=16 ", ok.stdout, count=1, flags=re.M)
    edited = re.sub(r"--tensor-model-parallel-size 8\b", "--tensor-model-parallel-size 16", edited)
    gen_msg = re.sub(r"script line \d+:", "script line N:", gen_msg)
    path = tmp_path / "edited.sh"
    path.write_text(edited)

    mark = slurm_cluster.log_mark()
    rc, out, err = client(slurm_cluster, ["sbatch", "--test-only", str(path)])
    assert rc != 0 and out == ""
    got = [re.sub(r"script line \d+:", "script line N:", line) for line in err.splitlines()]
    assert "sbatch: error: " + gen_msg in got, (gen_msg, err)
    assert "Invalid generic resource (gres) specification" in err
    lines = submit_lines(slurm_cluster, mark)
    assert [(d["decision"], d["tp"], d["source"]) for d in lines] == [("reject", "16", "flags")]


@pytest.mark.parametrize("gpu_spelling", GPU_SPELLINGS, ids=[g[0] for g in GPU_SPELLINGS])
@pytest.mark.parametrize("launcher,command", TP16_SPELLINGS, ids=[s[0] for s in TP16_SPELLINGS])
def test_hand_written_tp16_across_two_nodes_is_rejected(
    slurm_cluster, policy, tmp_path, launcher, command, gpu_spelling
):
    _, sbatch_line, args = gpu_spelling
    path = tmp_path / "job.sh"
    path.write_text(tp16_script(command, sbatch_line))

    mark = slurm_cluster.log_mark()
    rc, out, err = client(slurm_cluster, ["sbatch", "--test-only", *args, str(path)])

    assert rc != 0, err
    assert "is larger than the NVLink domain on partition 'gpu' (8 GPUs per node" in err, err
    assert "across nodes 0-1 over the network. Fix: use TP=8 and PP=2" in err
    lines = submit_lines(slurm_cluster, mark)
    assert [(d["decision"], d["tp"], d["launcher"], d["rules"].split(",")[0]) for d in lines] == [
        ("reject", "16", launcher, "tp-exceeds-domain")
    ], lines
    assert squeue_ids(slurm_cluster) == []


@pytest.mark.parametrize("gpu_spelling", GPU_SPELLINGS, ids=[g[0] for g in GPU_SPELLINGS])
def test_the_same_shapes_with_tp8_pp2_are_accepted(slurm_cluster, policy, tmp_path, gpu_spelling):
    _, sbatch_line, args = gpu_spelling
    path = tmp_path / "job.sh"
    path.write_text(
        tp16_script(
            "srun python pretrain_gpt.py --tensor-model-parallel-size 8 --pipeline-model-parallel-size 2", sbatch_line
        )
    )
    mark = slurm_cluster.log_mark()
    rc, out, err = client(slurm_cluster, ["sbatch", "--test-only", *args, str(path)])
    assert rc == 0, err
    assert "slurmgpu:" not in err  # no warnings either
    assert [d["decision"] for d in submit_lines(slurm_cluster, mark)] == ["accept"]


def test_srun_new_allocation_with_tp16_is_rejected_before_it_starts(slurm_cluster, policy, cli_filter):
    argv = [
        "srun",
        "--test-only",
        "-N2",
        "--gpus-per-node=8",
        "-p",
        "gpu",
        "python",
        "train.py",
        "--tensor-model-parallel-size",
        "16",
    ]
    mark = slurm_cluster.log_mark()
    rc, out, err = client(slurm_cluster, argv)
    assert rc != 0
    assert "srun: error: lua: slurmgpu: TP=16 (--tensor-model-parallel-size 16) is larger" in err, err
    assert "cli_filter plugin terminated with error" in err
    assert submit_lines(slurm_cluster, mark) == []

    # Without the cli_filter the allocation still goes through job_submit. 22.05's srun sends
    # slurmctld only the shape (no command line, no environment), so it cannot see TP there;
    # from 23.02 srun sends its whole command (job_desc.argv), and job_submit refuses it too.
    cli_filter(testcluster.PASSTHROUGH_CLI_FILTER_LUA)
    mark = slurm_cluster.log_mark()
    rc, out, err = client(slurm_cluster, argv)
    lines = submit_lines(slurm_cluster, mark)
    if slurm_cluster.release.version_tuple >= SRUN_SENDS_ITS_COMMAND:
        assert rc != 0 and "srun: error: slurmgpu: TP=16 (--tensor-model-parallel-size 16) is larger" in err, err
        assert [(d["decision"], d["source"]) for d in lines] == [("reject", "flags")]
    else:
        assert rc == 0, err
        assert [(d["decision"], d["source"]) for d in lines] == [("accept", "none")]


def test_salloc_then_srun_step_with_tp16_never_runs(slurm_cluster, policy, tmp_path):
    # 22.05: salloc's cli_filter sees no command (it fills options.argv only for srun), so the
    # allocation is granted; the srun step inside is what the cli_filter refuses.  24.11's
    # salloc hands its command to the cli_filter, which refuses the allocation itself.
    marker = tmp_path / "ran"
    rc, out, err = client(
        slurm_cluster,
        [
            "salloc",
            "-N2",
            "--gpus-per-node=8",
            "-p",
            "gpu",
            "srun",
            "bash",
            "-c",
            'touch "$0"',
            str(marker),
            "--tensor-model-parallel-size",
            "16",
        ],
    )
    assert rc != 0
    who = "salloc" if slurm_cluster.release.version_tuple >= SRUN_SENDS_ITS_COMMAND else "srun"
    assert "%s: error: lua: slurmgpu: TP=16 (--tensor-model-parallel-size 16)" % who in err, err
    assert "cli_filter plugin terminated with error" in err
    assert not marker.exists()


def test_warn_mode_accepts_with_the_message(slurm_cluster, job_submit, tmp_path):
    job_submit(render_filter(site_copy(tmp_path, mode="warn"), "job_submit"))
    path = tmp_path / "job.sh"
    path.write_text(tp16_script(TP16_SPELLINGS[0][1]))
    mark = slurm_cluster.log_mark()
    rc, out, err = client(slurm_cluster, ["sbatch", "--test-only", str(path)])
    assert rc == 0, err
    assert re.search(
        r"^sbatch: slurmgpu: TP=16 .* is larger than the NVLink domain .*\(not enforced: warn-only", err, re.M
    ), err
    lines = submit_lines(slurm_cluster, mark)
    assert [(d["decision"], d["mode"], d["rules"].split(",")[0]) for d in lines] == [
        ("accept", "warn", "tp-exceeds-domain")
    ]
    assert slurm_cluster.job_submit_errors(mark) == []


def test_exempt_user_passes(slurm_cluster, job_submit, tmp_path):
    assert os.geteuid() == 0  # the cluster tests submit as root
    job_submit(render_filter(site_copy(tmp_path, exempt_users=["root"]), "job_submit"))
    path = tmp_path / "job.sh"
    path.write_text(tp16_script(TP16_SPELLINGS[0][1]))
    mark = slurm_cluster.log_mark()
    rc, out, err = client(slurm_cluster, ["sbatch", "--test-only", str(path)])
    assert rc == 0, err
    assert "slurmgpu" not in err
    lines = submit_lines(slurm_cluster, mark)
    assert [(d["decision"], d.get("exempt")) for d in lines] == [("accept", "user:root")]
    assert slurm_cluster.job_submit_errors(mark) == []


# ---------------------------------------------------------------------------
# heterogeneous jobs and scontrol update (slurm_job_modify)


def test_het_job_component_with_tp16_in_its_environment_is_rejected(slurm_cluster, policy):
    # Component 1 (2 nodes) carries SLURMGPU_TP=16. Real submissions (-H), not --test-only:
    # 22.05's will-run path for het jobs sends the components as plain jobs, and the second
    # one without its environment, so job_submit could not see TP there.
    mark = slurm_cluster.log_mark()
    rc, out, err = client(
        slurm_cluster,
        ["sbatch", "-H", "-N1", "--gpus-per-node=8", ":", "-N2", "--gpus-per-node=8", "--wrap", "srun true"],
        env={"SLURMGPU_TP": "16", "NCCL_SOCKET_IFNAME": "lo"},
    )
    assert rc != 0
    # the cli_filter sees the user's environment and refuses it in the client
    assert "sbatch: error: lua: slurmgpu: TP=16 (from SLURMGPU_TP in the job environment)" in err, err
    assert "cli_filter plugin terminated with error" in err
    assert submit_lines(slurm_cluster, mark) == []
    assert squeue_ids(slurm_cluster) == []


def test_het_job_component_with_tp16_in_its_environment_is_rejected_by_job_submit(slurm_cluster, policy, cli_filter):
    # job_submit runs once per component, with het_job_offset 0 and 1
    cli_filter(testcluster.PASSTHROUGH_CLI_FILTER_LUA)
    mark = slurm_cluster.log_mark()
    rc, out, err = client(
        slurm_cluster,
        ["sbatch", "-H", "-N1", "--gpus-per-node=8", ":", "-N2", "--gpus-per-node=8", "--wrap", "srun true"],
        env={"SLURMGPU_TP": "16", "NCCL_SOCKET_IFNAME": "lo"},
    )
    assert rc != 0
    assert "sbatch: error: 1: slurmgpu: TP=16 (from SLURMGPU_TP in the job environment)" in err, err
    lines = submit_lines(slurm_cluster, mark)
    assert [(d["het_offset"], d["decision"]) for d in lines] == [("0", "accept"), ("1", "reject")]
    assert squeue_ids(slurm_cluster) == []


def test_het_job_with_tp16_in_the_script_on_the_two_node_component_is_rejected(slurm_cluster, policy, tmp_path):
    # Slurm gives only component 0 the script; the filter must still check it for component 1.
    path = tmp_path / "het.sh"
    path.write_text(
        "#!/bin/bash\n#SBATCH -N1 --gpus-per-node=8 -p gpu\n#SBATCH hetjob\n"
        "#SBATCH -N2 --gpus-per-node=8 -p gpu\nexport NCCL_SOCKET_IFNAME=lo\n"
        "srun --het-group=1 python pretrain_gpt.py --tensor-model-parallel-size 16\n"
    )
    mark = slurm_cluster.log_mark()
    rc, out, err = client(slurm_cluster, ["sbatch", "-H", str(path)])
    assert rc != 0, (out, err)
    assert "sbatch: error: 1: slurmgpu: TP=16 (script line 6: --tensor-model-parallel-size 16) is larger" in err, err
    lines = submit_lines(slurm_cluster, mark)
    assert [(d["het_offset"], d["decision"], d["tp"]) for d in lines] == [
        ("0", "accept", "16"),
        ("1", "reject", "16"),
    ], lines
    assert squeue_ids(slurm_cluster) == []


def _as_nobody(cluster, argv: Sequence[str], stdin: Optional[str] = None) -> Tuple[int, str, str]:
    """A client run as user nobody: root's updates are admin updates the filter lets through."""
    env = clean_env(cluster)
    p = cluster.run(
        ["runuser", "-u", "nobody", "--", "env", "SLURM_CONF=" + env["SLURM_CONF"], "PATH=" + env["PATH"], *argv],
        input=stdin,
        timeout=60,
        cwd="/",
    )
    return p.returncode, p.stdout, p.stderr


def test_scontrol_update_of_a_held_job_goes_through_job_modify(slurm_cluster, policy):
    # TP=8 on 2 x 8 GPUs is fine; shrinking it to 4 GPUs per node puts each TP group on 2 nodes.
    script = GOOD_SCRIPT.replace(" --pipeline-model-parallel-size 2", "")
    rc, out, err = _as_nobody(slurm_cluster, ["sbatch", "--parsable", "-H", "-D", "/", "-o", "/dev/null"], script)
    if rc != 0 and "runuser" in err:
        pytest.skip("cannot run a client as user nobody: %s" % err.strip())
    assert rc == 0, err
    job_id = out.strip().split(";")[0]

    mark = slurm_cluster.log_mark()
    rc, out, err = _as_nobody(slurm_cluster, ["scontrol", "update", "JobId=" + job_id, "TresPerNode=gres:gpu:4"])
    assert rc != 0
    assert "Invalid generic resource (gres) specification" in err, err  # 22.05 sends no message here
    rc, _, err = _as_nobody(slurm_cluster, ["scontrol", "update", "JobId=" + job_id, "NumNodes=1-1"])
    assert rc == 0, err  # one node: TP=8 fits
    lines = [d for d in filter_lines(slurm_cluster, mark) if d.get("origin") == "job_modify"]
    assert [(d["decision"], d["rules"].split(",")[0]) for d in lines] == [
        ("reject", "tp-spans-nodes"),
        ("accept", "-"),
    ], lines
    info = slurm_cluster.job_info(int(job_id))
    gpus8 = tres_prefix(slurm_cluster.release.version) + "gpu:8"  # gres/gpu:8 from 23.11
    assert info is not None and info["TresPerNode"] == gpus8 and info["NumNodes"].startswith("1")

    # root's update is an admin update: let through and logged
    mark = slurm_cluster.log_mark()
    rc, _, err = client(slurm_cluster, ["scontrol", "update", "JobId=" + job_id, "NumNodes=2-2"])
    assert rc == 0, err
    assert "decision=accept origin=job_modify uid=0 (admin update" in slurm_cluster.ctld_log(mark)


# sbatch 22.05 (seen live): --export=NONE passes every name starting with SLURM, SLURMGPU_TP
# included; NIL and a list of names pass only SLURM_* names besides the listed ones.
EXPORTS = [None, "ALL", "NONE", "NIL", "FOO", "ALL,FOO", "FOO,SLURMGPU_TP", "SLURMGPU_TP=16"]


@pytest.mark.parametrize("export", EXPORTS)
def test_what_export_sends_is_what_check_and_cli_filter_assume(
    slurm_cluster, job_submit, cli_filter, site, rendered, tmp_path, export
):
    # SLURMGPU_TP=16 in the submitting shell; whether it reaches slurmctld (and the job)
    # depends on --export. `slurmgpu check` (slurmgpu.jobdesc) and the cli_filter, which
    # reads the client's environment, must model that as slurmctld sees it.
    job_submit(rendered["job_submit"])
    script = "#!/bin/bash\n#SBATCH -N2 --gpus-per-node=8 -p gpu\nexport NCCL_SOCKET_IFNAME=lo\nsrun python train.py\n"
    path = tmp_path / "job.sh"
    path.write_text(script)
    argv = ["sbatch", "--test-only"] + ([] if export is None else ["--export=" + export]) + [str(path)]
    shell = {"SLURMGPU_TP": "16", "FOO": "1"}

    mark = slurm_cluster.log_mark()
    rc, out, err = client(slurm_cluster, argv, env=shell)
    real = submit_lines(slurm_cluster, mark)
    assert len(real) == 1, err
    env = {k: v for k, v in clean_env(slurm_cluster, shell).items() if k != "SLURM_CONF"}
    v = PolicyRunner(replace(site, slurm_version=slurm_cluster.release.version)).check(
        script, argv[2:-1], env=env, user="root", uid=0, script_path=str(path)
    )

    cli_filter(render_filter(replace(site, slurm_version=slurm_cluster.release.version), "cli_filter"))
    rc, out, cf_err = client(slurm_cluster, argv, env=shell)
    cf = "reject" if "cli_filter plugin terminated with error" in cf_err else "accept"

    assert (real[0]["decision"], real[0]["source"]) == (v.decision, v.source), ("check", err)
    assert real[0]["decision"] == cf, ("cli_filter", cf_err)


# ---------------------------------------------------------------------------
# every shared policy case through a real slurmctld

# sbatch refuses some case scripts itself, before any filter runs (22.05: no --segment; 26.05:
# its checks after cli_filter, which `slurmgpu check` mirrors: the case says `expect-slurm: ... sbatch`).
CLIENT_REFUSALS = {
    "unrecognized option '--segment": "Slurm 22.05's sbatch has no --segment (added in 24.11)",
    "DOS line breaks": "sbatch refuses scripts with CRLF line ends",
    "--gpus-per-node and --gres=gpu are mutually exclusive": "Slurm 26.05's sbatch: --gres=gpu with --gpus-per-node",
    "node count must be evenly divisible by segment size": "Slurm 26.05's sbatch: --segment must divide -N",
}


def _named_partitions(case: PolicyCase) -> List[str]:
    """The partitions a case's -p / --partition (options or #SBATCH lines) names."""
    text = case.script.decode("utf-8", "replace") if isinstance(case.script, bytes) else case.script
    words = " ".join(list(case.args) + [ln[7:] for ln in text.splitlines() if ln.startswith("#SBATCH")]).split()
    out = []
    for i, w in enumerate(words):
        if w in ("-p", "--partition") and i + 1 < len(words):
            out += words[i + 1].split(",")
        elif w.startswith("--partition="):
            out += w.split("=", 1)[1].split(",")
    return out


def _partitions_for(site: Site):
    """Test-cluster partitions named and shaped as the site's (one node per node shape), and those
    the site's cases name that it does not describe (a partition added to the cluster after the
    filter was installed: the default partition's nodes under another name)."""
    shapes: Dict[str, str] = {}
    parts = []
    for name, p in site.partitions.items():
        nt = site.node_types[p.node_type]
        node = shapes.setdefault(p.node_type, "c%s%02d" % (re.sub(r"[^a-z]", "", site.name)[:4], len(shapes) + 1))
        gres_type = nt.gres_type or nt.gpu_model.split("-")[0].lower()
        parts.append(testcluster.Partition(name, (node,), gres_type, nt.gpus, default=name == site.default_partition))
    default = next((p for p in parts if p.default), parts[0])
    extra = sorted({n for c in CASES if c.site == site.name for n in _named_partitions(c)} - set(site.partitions))
    for name in extra:
        parts.append(testcluster.Partition(name, default.nodes, default.gpu_type, default.gpus_per_node))
    return parts


class _CaseClusters:
    """One test cluster per case site, started on first use, its job_submit.lua rendered
    from that site."""

    def __init__(self, new_cluster, release) -> None:
        self.new_cluster = new_cluster
        self.release = release
        self.clusters: Dict[str, object] = {}
        self.runners: Dict[str, PolicyRunner] = {}
        self.filters: Dict[str, Tuple[Site, str]] = {}  # the job_submit.lua each controller loaded

    def get(self, case: PolicyCase):
        if case.site_ref not in self.clusters:
            # the site as run by this release: `slurmgpu check` models its sbatch; a log line per
            # job (policy.single_node_log_s 0) to match each submission to its verdict
            s = load_site(resolve_site_ref(case.site_ref))
            s = replace(s, slurm_version=self.release.version, policy=replace(s.policy, single_node_log_s=0))
            self.filters[case.site_ref] = (s, render_filter(s, "job_submit"))
            c = self.new_cluster(_partitions_for(s), job_submit_lua=self.filters[case.site_ref][1])
            self.clusters[case.site_ref] = c
            c.start()
            self.runners[case.site_ref] = PolicyRunner(s)
        return self.clusters[case.site_ref], self.runners[case.site_ref]

    def stop(self) -> None:
        for c in self.clusters.values():
            c.stop()


@pytest.fixture(scope="module")
def case_clusters(slurm_cluster, new_cluster):  # slurm_cluster: skip/fail exactly as the other cluster tests
    cc = _CaseClusters(new_cluster, slurm_cluster.release)
    try:
        yield cc
    finally:
        cc.stop()


# Cases that name another submitting user run in tests/test_policy.py only: these tests submit as root.
# Het jobs neither: `sbatch --test-only` asks about each component on its own, so a step over
# several components is judged only by a real submission (tests/test_policy_cluster.py).
HET_CASES = [c for c in CASES if het_count(c.script, c.args) > 1]
ROOT_CASES = [c for c in CASES if c.user in (None, "root") and c not in HET_CASES]


def test_cases_left_to_the_python_side_are_only_other_users():
    others = sorted(c.name for c in CASES if c not in ROOT_CASES and c not in HET_CASES)
    assert all(c.user for c in CASES if c not in ROOT_CASES and c not in HET_CASES)
    assert len(others) <= 3, others
    # the het cases are really submitted by tests/test_policy_cluster.py (test_het_cases_match_the_controller)
    assert all(c.site == "dgx-h100" for c in HET_CASES)


def _filter_directly(case: PolicyCase, site: Site, rendered: str, tmp: Path) -> None:
    """A case this release's sbatch refuses for --segment (22.05 has none) still has its filter
    verdict checked: the job_submit.lua this controller loaded, under Debian's lua5.1 driven as
    slurmctld drives it (contrib/lua/slurm_stub.lua), given the job_desc of a release whose sbatch
    takes --segment (24.11). Otherwise the case would check only sbatch's refusal."""
    from tests.test_policy_lua import run_lua

    desc = job_desc(
        case.script, case.args, env=case.env, user="root", script_path=case.path.name, slurm_version="24.11"
    )
    body = "local rc, msgs = S.submit(%s, %s, 0)\nout({rc = rc, msgs = msgs})\n" % (
        lua_literal(desc),
        lua_literal(part_list(site)),
    )
    (res,) = run_lua(tmp / "direct", body, rendered)
    decision = {0: "accept", 2072: "reject"}.get(res["rc"], "rc=%s" % res["rc"])
    # the user lines of a refused job are its refusal; of an accepted one, its warnings
    warnings = res["msgs"] if decision == "accept" else []
    found = problems(case, decision, res["msgs"], warnings, slurm_version="24.11")
    assert not found, (case.name, found, res["msgs"])


@pytest.mark.parametrize("case", ROOT_CASES, ids=[c.name for c in ROOT_CASES])
def test_policy_case_verdict_from_real_slurmctld(case_clusters, case, tmp_path):
    cluster, runner = case_clusters.get(case)
    path = tmp_path / case.path.name
    path.write_bytes(case.script)
    env = clean_env(cluster, case.env)

    extra = (["--account=" + case.account] if case.account else []) + (["--qos=" + case.qos] if case.qos else [])
    mark = cluster.log_mark()
    p = subprocess.run(
        ["sbatch", "--test-only", *extra, *case.args, str(path)],
        capture_output=True,
        text=True,
        env=env,
        cwd=str(cluster.jobs_dir),
        timeout=60,
    )
    lines = submit_lines(cluster, mark)
    expect = case.expect_for(cluster.release.version)
    if expect == "sbatch" or not lines:
        reason = next((why for text, why in CLIENT_REFUSALS.items() if text in p.stderr), None)
        # sbatch itself refuses the job before any filter (22.05: no --segment, CRLF scripts;
        # 26.05: its checks after cli_filter): a known refusal is the real outcome here;
        # anything else means the filter never ran
        assert p.returncode != 0 and reason and not lines, "the filter did not run: %s" % p.stderr
        if expect == "sbatch":  # ... and `slurmgpu check` refuses it as that sbatch does
            with pytest.raises(ConfigError, match="Slurm %s's sbatch refuses" % cluster.release.major):
                runner.check(case.script, case.args, env=env, user="root", uid=0, script_path=str(path))
        elif "--segment" in reason:  # the filter is still judged: see _filter_directly
            _filter_directly(case, *case_clusters.filters[case.site_ref], tmp_path)
        return

    # `slurmgpu check`'s verdict: same script path, options, environment and user
    v = runner.check(
        case.script,
        case.args,
        env={k: v for k, v in env.items() if k != "SLURM_CONF"},
        user="root",
        uid=0,
        account=case.account,
        qos=case.qos,
        script_path=str(path),
    )
    assert len(lines) == 1, lines
    real = lines[0]
    assert (real["decision"], v.decision) == (expect, expect), (real, v, p.stderr)
    if real["source"] == "single-node":
        # slurmctld decided a job that runs on one node from its fields (issue 33: the controller's
        # cost); its advice is check's and cli_filter's, so sbatch prints none of it
        assert real["rules"] == "-" and not v.messages, (real, v)
        assert "slurmgpu:" not in p.stderr, p.stderr
        assert cluster.job_submit_errors(mark) == []
        return
    assert real["rules"] == (",".join(v.rules) or "-")
    assert (real["tp"], real["pp"], real["source"]) == (str(v.layout["tp"]), str(v.layout["pp"]), v.source)
    # every line the check prints reaches the user through sbatch
    for text in v.messages + v.warnings:
        assert text in p.stderr, (text, p.stderr)
    if expect == "reject":
        assert p.returncode != 0
    else:
        assert "Invalid generic resource" not in p.stderr
    assert cluster.job_submit_errors(mark) == []
