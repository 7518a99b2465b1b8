"""Hostile user values: the generated script must do exactly what was asked, nothing more.

Each generated script is run for real by bash, with small stand-ins for the cluster
commands on PATH: `srun` drops its own options and runs the step as one task, `scontrol`
answers `show hostnames`, `apptainer exec` runs its command, and the launchers (torchrun,
deepspeed, accelerate, vllm, python, slurmgpu) record their argv and environment. The
recorded argv must equal the hostile values verbatim, and no injected command may run.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from slurmgpu import job as J
from slurmgpu import render as R
from slurmgpu.job import ContainerSpec, JobSpec
from slurmgpu.site import load_site, preset_dir
from tests import programs
from tests.cluster_fixtures import dgx_site_for

STUB = r"""
import json, os, signal, sys, time
name = os.path.basename(sys.argv[0])
args = sys.argv[1:]
keep = ("HOSTILE", "RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "SLURMGPU_CHECKPOINT_DIR",
        "NCCL_IB_HCA", "SLURMGPU_TP")
def record(**extra):
    rec = {"prog": name, "argv": args, "env": {k: os.environ[k] for k in keep if k in os.environ}}
    rec.update(extra)
    with open(os.environ["STUB_RECORD"], "a") as fh:
        fh.write(json.dumps(rec) + "\n")
if name == "srun":
    record()
    i = 0
    while i < len(args) and args[i].startswith("-"):
        i += 1
    if i == len(args):
        sys.exit(0)
    env = dict(os.environ, SLURM_NODEID="0", SLURM_PROCID="0", SLURM_LOCALID="0", SLURM_NTASKS="16")
    os.execvpe(args[i], args[i:], env)
if name == "scontrol":
    record()
    if args[:2] == ["show", "hostnames"]:
        print("node001\nnode002")
    sys.exit(0)
if name == "apptainer":
    record()
    rest = args[1:]
    while rest[0].startswith("-"):
        rest = rest[2:] if rest[0] == "--bind" else rest[1:]
    os.execvp(rest[1], rest[1:])
if name == "scancel":  # like slurmstepd: deliver --signal=SIG to the step's processes (the blocking stub)
    record()
    sig = [a.split("=", 1)[1] for a in args if a.startswith("--signal=")]
    pids = [json.loads(ln).get("pid") for ln in open(os.environ["STUB_RECORD"])]
    for pid in [p for p in pids if p] if sig else []:
        os.kill(pid, getattr(signal, "SIG" + sig[0]))
    sys.exit(0)
if os.environ.get("STUB_BLOCK") == name:
    def on_term(sig, frame):
        record(signal=sig)
        if os.environ.get("STUB_ASK"):  # the program saved and asks for a requeue (docs/requeue.md)
            open(os.environ["SLURMGPU_REQUEUE_REQUEST"], "w").close()
        sys.exit(0)
    signal.signal(signal.SIGTERM, on_term)
    record(blocking=True, pid=os.getpid())
    time.sleep(60)
    sys.exit(3)
record()
"""

PROGRAMS = (
    "srun",
    "scontrol",
    "scancel",
    "apptainer",
    "torchrun",
    "deepspeed",
    "accelerate",
    "vllm",
    "python",
    "python3",
    "slurmgpu",
)

HOSTILE_ARGS = (
    "$(touch PWNED_a)",
    "`touch PWNED_b`",
    "'; touch PWNED_c; '",
    '"; touch PWNED_d; "',
    "a b  c",
    "--lr=$HOME",
    "multi\nline",
    "*",
    "~",
    "back\\slash",
    "",
    "|| touch PWNED_e",
    "&& touch PWNED_f #",
    "$'x'",
    "caf\u00e9",
)


@pytest.fixture
def stubs(tmp_path):
    return make_stubs(tmp_path / "bin", PROGRAMS)


def make_stubs(bin_dir, names, python=sys.executable):
    """Stub programs (run by `python`: the jobs' interpreter on the cluster)."""
    bin_dir.mkdir()
    (bin_dir / "stub.py").write_text(STUB)
    for name in names:
        p = bin_dir / name
        p.write_text(
            "#!%s\nimport sys\nsys.argv[0] = %r\nexec(compile(open(%r).read(), 'stub.py', 'exec'))\n"
            % (python, str(p), str(bin_dir / "stub.py"))
        )
        p.chmod(0o755)
    return bin_dir


def script_env(tmp_path, bin_dir, **extra):
    env = {
        "PATH": "%s:/usr/bin:/bin" % bin_dir,
        "HOME": str(tmp_path),
        "STUB_RECORD": str(tmp_path / "record.jsonl"),
        "SLURM_JOB_ID": "4242",
        "SLURM_JOB_NODELIST": "node[001-002]",
        "SLURM_JOB_NUM_NODES": "2",
        "SLURM_CPUS_PER_TASK": "8",
        "SLURMGPU_BIN": str(bin_dir / "slurmgpu"),
        "LANG": "C.UTF-8",
    }
    env.update(extra)
    return env


def records(tmp_path):
    path = tmp_path / "record.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def generate(site_name, spec):
    site = load_site(str(preset_dir() / (site_name + ".yaml")))
    req, _ = J.build_request(site, spec, J.plan_layout(site, spec), "slurmgpu gen hostile")
    return J.render_request(req, J.search_path(None, None, site)), req


def pwned(tmp_path):
    return sorted(str(p) for p in tmp_path.rglob("PWNED*"))


def hostile_spec(tmp_path, launcher, container):
    """Hostile arguments after the launcher's own entry point (or a program where it has none)."""
    cmd = programs.COMMAND.get(launcher, ())
    # Megatron refuses to render without its training inputs: hostile ones, which must arrive verbatim
    inputs = (
        {
            "data": "/data/my corpus $(touch PWNED_data);x",
            "tokenizer": "org/tok `touch PWNED_tok`",
            "train_iters": 100,
            "lr": "3e-4",
        }
        if launcher == "megatron"
        # NeMo and torchtitan refuse to run without a training length (their recipes' own is not the plan's)
        else {"train_iters": 100}
        if launcher in ("nemo", "torchtitan")
        else {}
    )
    return JobSpec(
        name='pwn"; touch PWNED_name; echo " #x',
        launcher=launcher,
        nodes=2,
        command=cmd,
        args=HOSTILE_ARGS,
        env={"HOSTILE": "$(touch PWNED_env) ; `touch PWNED_env2` 'q' \"dq\"\nline2"},
        checkpoint_dir=str(tmp_path / "ckpt dir $(touch PWNED_ckpt)"),
        output="logs/%x $(touch PWNED_out).out",
        sbatch=("--comment=$(touch PWNED_sb) # not a comment",),
        container=container,
        preflight=True,
        weights="org/model $(touch PWNED_w)",
        **inputs,
    )


CONTAINERS = {
    "none": ContainerSpec(runtime="none"),
    "pyxis": ContainerSpec(
        runtime="pyxis", image="nvcr.io#nvidia/py torch:$(touch PWNED_img)", mounts=("/data dir:/data;touch PWNED_mnt",)
    ),
    "apptainer": ContainerSpec(
        runtime="apptainer", image="/images/my image $(touch PWNED_sif).sif", mounts=("/scratch x:/scratch",)
    ),
}


@pytest.mark.parametrize(
    "launcher", ["torchrun", "srun", "megatron", "deepspeed", "nemo", "torchtitan", "accelerate", "vllm", "sglang"]
)
@pytest.mark.parametrize("container", ["none", "pyxis", "apptainer"])
def test_hostile_values_reach_the_program_verbatim(tmp_path, stubs, launcher, container):
    work = tmp_path / "work"
    work.mkdir()
    spec = hostile_spec(tmp_path, launcher, CONTAINERS[container])
    text, req = generate("dgx-h100", spec)
    script = work / "job.sh"
    script.write_text(text)
    subprocess.run(["bash", "-n", str(script)], check=True)
    r = subprocess.run(
        ["bash", str(script)],
        cwd=str(work),
        env=script_env(tmp_path, stubs),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0, r.stderr
    assert pwned(tmp_path) == [], "an injected command ran"
    recs = records(tmp_path)
    # path words slurmgpu writes itself (DeepSpeed's config file) expand $SLURM_JOB_ID on the node
    prog = [a.replace("$SLURM_JOB_ID", "4242") if a.startswith(".slurmgpu-") else a for a in req.launch.program]
    runner = {
        "torchrun": "torchrun",
        "megatron": "torchrun",
        "torchtitan": "torchrun",
        "nemo": "torchrun",
        "deepspeed": "deepspeed",
        "accelerate": "accelerate",
    }.get(launcher, prog[0])
    ran = [x for x in recs if x["prog"] == runner]
    assert len(ran) == 1, recs
    got = ran[0]["argv"]
    if runner == prog[0]:  # the program itself ran (srun, vllm, sglang)
        want = prog[1:]
        assert got[: len(want)] == want
        if launcher in ("vllm", "sglang"):  # multi-node: the rendezvous and the node rank follow
            assert got[-2:] == ["--node-rank", "0"]
        else:
            assert got == want
    else:
        assert got[-len(prog) :] == prog
    for a in HOSTILE_ARGS:
        assert a in got
    if launcher in ("vllm", "sglang"):
        assert spec.weights in got
    if launcher == "megatron":
        assert got[got.index("--data-path") + 1] == spec.data
        assert got[got.index("--tokenizer-model") + 1] == spec.tokenizer
    env = ran[0]["env"]
    assert env["HOSTILE"] == spec.env["HOSTILE"]
    assert env["SLURMGPU_CHECKPOINT_DIR"] == spec.checkpoint_dir and os.path.isdir(spec.checkpoint_dir)
    if launcher == "srun":
        assert (env["RANK"], env["LOCAL_RANK"], env["WORLD_SIZE"]) == ("0", "0", "16")
    pre = [x for x in recs if x["prog"] == "slurmgpu"]
    # the per-node records and the aggregation run as the two ends of one pipe, in either order
    stamp = next(ln for ln in text.splitlines() if ln.startswith("# slurmgpu: "))
    from slurmgpu.plan.placement import RANK_SOURCES

    agg = ["preflight", "--site", "dgx-h100", "--aggregate", "-", "--nodes", "node[001-002]", "--stamp", stamp]
    agg += ["--rank-source", RANK_SOURCES[launcher]]
    want_pre = [agg, ["preflight", "--site", "dgx-h100", "--record"]]
    if req.binding is not None and req.binding.bound:  # the rank step (docs/affinity.md)
        want_pre = [agg + ["--ranks-per-node", "8"], want_pre[1]]
        want_pre.append(["preflight", "--site", "dgx-h100", "--ranks", req.binding.how, "--record"])
    assert sorted(x["argv"] for x in pre) == sorted(want_pre)
    srun_main = [x for x in recs if x["prog"] == "srun"][-1]["argv"]
    if container == "pyxis":
        assert "--container-image=" + spec.container.image in srun_main
        assert "--container-mounts=%s:%s,%s" % (work, work, spec.container.mounts[0]) in srun_main
    if container == "apptainer":
        app = [x for x in recs if x["prog"] == "apptainer"][0]["argv"]
        assert app[:2] == ["exec", "--nv"] and spec.container.image in app and "/scratch x:/scratch" in app


def test_hostile_values_stay_in_sbatch_comments(tmp_path):
    spec = hostile_spec(tmp_path, "torchrun", CONTAINERS["none"])
    text, _ = generate("dgx-h100", spec)
    header = [ln for ln in text.splitlines() if ln.startswith("#SBATCH")]
    assert '#SBATCH --job-name="pwn\\"; touch PWNED_name; echo \\" #x"' in header
    assert '#SBATCH --output="logs/%x $(touch PWNED_out).out"' in header
    assert '#SBATCH "--comment=$(touch PWNED_sb) # not a comment"' in header
    for line in text.splitlines():  # every user value stays on its own line
        assert "line2" not in line or line.startswith("export HOSTILE=$'")


def test_the_script_passes_shellcheck_with_hostile_values(tmp_path):
    files = []
    for launcher in ("torchrun", "srun", "deepspeed", "vllm"):
        for container in CONTAINERS:
            text, _ = generate("dgx-h100", hostile_spec(tmp_path, launcher, CONTAINERS[container]))
            p = tmp_path / ("%s-%s.sh" % (launcher, container))
            p.write_text(text)
            files.append(str(p))
    r = subprocess.run(["shellcheck", "--severity=style"] + files, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout


def test_requeue_trap_asks_for_a_checkpoint_then_requeues(tmp_path, stubs):
    work = tmp_path / "work"
    work.mkdir()
    spec = JobSpec(launcher="torchrun", nodes=2, command=("train.py", "--resume"), requeue=True, preflight=False)
    text, _ = generate("dgx-h100", spec)
    (work / "job.sh").write_text(text)
    proc = subprocess.Popen(
        ["bash", str(work / "job.sh")],
        cwd=str(work),
        env=script_env(tmp_path, stubs, STUB_BLOCK="torchrun", STUB_ASK="1"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 30
        while not any(r.get("blocking") for r in records(tmp_path)):
            assert time.monotonic() < deadline, "the launch never started"
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.05)
        proc.send_signal(signal.SIGUSR2)  # what Slurm sends grace seconds before the limit
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    recs = records(tmp_path)
    scancel = [r for r in recs if r["prog"] == "scancel"]
    term = [r for r in recs if r["prog"] == "torchrun" and r.get("signal") == signal.SIGTERM]
    requeue = [r for r in recs if r["prog"] == "scontrol" and r["argv"][:1] == ["requeue"]]
    # the shell signals the steps through Slurm (not srun, which would turn TERM into KILL)
    assert scancel and scancel[0]["argv"] == ["--signal=TERM", "4242"], recs
    assert term, "the program was not asked to checkpoint: %s" % recs
    assert requeue and requeue[0]["argv"] == ["requeue", "4242"]
    assert recs.index(term[0]) < recs.index(requeue[0]), "requeued before the program had saved"
    assert "sending SIGTERM to the job's steps" in err and "requeue 1 of at most 3" in err
    assert proc.returncode == 0


def test_requeue_needs_the_programs_ask(tmp_path, stubs):
    """A program that ends on the signal without asking (no request file) is not requeued."""
    work = tmp_path / "work"
    work.mkdir()
    spec = JobSpec(launcher="torchrun", nodes=2, command=("train.py",), requeue=True, preflight=False)
    text, _ = generate("dgx-h100", spec)
    (work / "job.sh").write_text(text)
    proc = subprocess.Popen(
        ["bash", str(work / "job.sh")],
        cwd=str(work),
        env=script_env(tmp_path, stubs, STUB_BLOCK="torchrun"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 30
        while not any(r.get("blocking") for r in records(tmp_path)):
            assert time.monotonic() < deadline, "the launch never started"
            time.sleep(0.05)
        proc.send_signal(signal.SIGUSR2)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert not [r for r in records(tmp_path) if r["prog"] == "scontrol" and r["argv"][:1] == ["requeue"]]
    assert "did not ask for a requeue" in err


# ---------------------------------------------------------------------------
# On the real Slurm test cluster: sbatch parses the #SBATCH lines, srun starts the step.


@pytest.mark.cluster
def test_hostile_job_through_real_slurm(tmp_path, slurm_cluster):
    stubs = make_stubs(tmp_path / "bin", ("torchrun",), python=slurm_cluster.python)  # the real srun and scontrol run
    site_file = tmp_path / "site.yaml"
    site_file.write_text(dgx_site_for(slurm_cluster))
    os.chmod(str(tmp_path), 0o755)
    site = load_site(str(site_file))
    work = tmp_path / "work"
    work.mkdir()
    os.chmod(str(work), 0o777)
    spec = JobSpec(
        name='pwn"; touch PWNED_name; echo " #x',
        launcher="torchrun",
        nodes=2,
        command=("train.py",) + HOSTILE_ARGS,
        preflight=False,
        mem="1000M",
        output=str(work / "out %j.log"),
        env={"HOSTILE": "$(touch PWNED_env) 'q'"},
    )
    req, _ = J.build_request(site, spec, J.plan_layout(site, spec), "slurmgpu gen hostile")
    text = J.render_request(req, J.search_path(None, None, site))
    env = {"PATH": "%s:%s" % (stubs, os.environ.get("PATH", "")), "STUB_RECORD": str(tmp_path / "record.jsonl")}
    (tmp_path / "record.jsonl").touch()
    os.chmod(str(tmp_path / "record.jsonl"), 0o666)
    rc, out, err = slurm_cluster.sbatch(text, "--parsable", "--chdir=%s" % work, "--export=ALL", env=env)
    assert rc == 0, err
    job = int(out.strip().split(";")[0])
    info = slurm_cluster.job_info(job)
    assert info["JobName"] == spec.name
    result = slurm_cluster.wait_job(job, timeout=90)
    assert result.ok, (result, slurm_cluster.logs())
    assert pwned(tmp_path) == []
    ran = [r for r in records(tmp_path) if r["prog"] == "torchrun"]
    assert len(ran) == 2  # one torchrun per node
    for r in ran:
        assert r["argv"][-len(req.launch.program) :] == list(req.launch.program)
        assert r["env"]["HOSTILE"] == spec.env["HOSTILE"]


# ---------------------------------------------------------------------------
# Paths: $USER, $HOME, $SCRATCH, $SLURM_JOB_ID expand on the node; nothing else does.

PATH_ENV = {"USER": "alice", "OTHER": "NOT-EXPANDED"}


def path_spec(tmp_path, launcher, container):
    ckpt = (
        str(tmp_path) + "/ck $USER/${SLURM_JOB_ID}/$(touch PWNED_p1) `touch PWNED_p2` $OTHER ${OTHER} "
        'it\'s "q" $USERNAME ;touch PWNED_p3'
    )
    runtime = {
        "pyxis": ContainerSpec(
            runtime="pyxis",
            image="nvcr.io#nvidia/pytorch:24.04-py3",
            mounts=("$SCRATCH/data:/data", "/d/$(touch PWNED_m) $USER:/e"),
        ),
        "apptainer": ContainerSpec(
            runtime="apptainer", image="/images/x.sif", mounts=("${SCRATCH}/data:/data", "/d/`touch PWNED_m` $USER:/e")
        ),
        "none": ContainerSpec(runtime="none"),
    }[container]
    cmd = {"torchrun": ("train.py",)}.get(launcher, ())
    inputs = (
        {"data": "$SCRATCH/corpus/$USER text", "tokenizer": "${HOME}/tok $OTHER", "train_iters": 10, "lr": "1e-4"}
        if launcher == "megatron"
        # NeMo and torchtitan refuse to run without a training length (their recipes' own is not the plan's)
        else {"train_iters": 100}
        if launcher in ("nemo", "torchtitan")
        else {}
    )
    return JobSpec(
        launcher=launcher,
        nodes=2,
        command=cmd,
        checkpoint_dir=ckpt,
        container=runtime,
        preflight=False,
        env={"NOTE": "$USER $(touch PWNED_env)"},
        args=("--data", "$SCRATCH/tok"),
        **inputs,
    )


@pytest.mark.parametrize("launcher", ["megatron", "torchrun"])
@pytest.mark.parametrize("container", ["none", "pyxis", "apptainer"])
def test_path_variables_expand_on_the_node_and_nothing_else(tmp_path, stubs, launcher, container):
    work = tmp_path / "work"
    work.mkdir()
    spec = path_spec(tmp_path, launcher, container)
    text, req = generate("dgx-h100", spec)
    script = work / "job.sh"
    script.write_text(text)
    env = script_env(tmp_path, stubs, SCRATCH=str(tmp_path / "scratch"), **PATH_ENV)
    r = subprocess.run(["bash", str(script)], cwd=str(work), env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert pwned(tmp_path) == [], "an injected command ran"
    want_ckpt = (
        str(tmp_path) + "/ck alice/4242/$(touch PWNED_p1) `touch PWNED_p2` $OTHER ${OTHER} "
        'it\'s "q" $USERNAME ;touch PWNED_p3'
    )
    assert R.expand_path(spec.checkpoint_dir, env) == want_ckpt
    recs = records(tmp_path)
    ran = [x for x in recs if x["prog"] == "torchrun"]
    assert len(ran) == 1, recs
    assert ran[0]["env"]["SLURMGPU_CHECKPOINT_DIR"] == want_ckpt and os.path.isdir(want_ckpt)
    got = ran[0]["argv"]
    assert got[got.index("--data") + 1] == "$SCRATCH/tok"  # a program argument: literal
    if launcher == "megatron":
        assert got[got.index("--save") + 1] == want_ckpt and got[got.index("--load") + 1] == want_ckpt
        # the data prefix and the tokenizer are paths: $SCRATCH/$USER/$HOME expand on the node, $OTHER does not
        assert got[got.index("--data-path") + 1] == str(tmp_path / "scratch") + "/corpus/alice text"
        assert got[got.index("--tokenizer-model") + 1] == env["HOME"] + "/tok $OTHER"
    scratch = str(tmp_path / "scratch")
    if container == "pyxis":
        srun_main = [x for x in recs if x["prog"] == "srun"][-1]["argv"]
        assert (
            "--container-mounts=%s:%s,%s/data:/data,/d/$(touch PWNED_m) alice:/e" % (work, work, scratch) in srun_main
        )
    if container == "apptainer":
        app = [x for x in recs if x["prog"] == "apptainer"][0]["argv"]
        assert app[app.index("--bind") + 1] == "%s/data:/data,/d/`touch PWNED_m` alice:/e" % scratch


def test_path_values_pass_shellcheck(tmp_path):
    files = []
    for launcher in ("megatron", "torchrun"):
        for container in ("none", "pyxis", "apptainer"):
            text, _ = generate("dgx-h100", path_spec(tmp_path, launcher, container))
            assert "${USER}" in text
            p = tmp_path / ("%s-%s.sh" % (launcher, container))
            p.write_text(text)
            files.append(str(p))
    r = subprocess.run(["shellcheck", "--severity=style"] + files, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout
