"""A first day without surprises (issue 29): errors, exit codes, option names, completion, docs.

Each test names the point of the issue it covers; each failed on the tree before the fix.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from slurmgpu.cli import main
from slurmgpu.cli.app import iter_commands
from slurmgpu.cli.common import OutputPath
from slurmgpu.errors import ConfigError
from slurmgpu.site import load_site, preset_dir

ROOT = Path(__file__).resolve().parent.parent
SMOKE = ["--model", "llama3-8b", "--launcher", "megatron", "--smoke"]


@pytest.fixture
def repo(tmp_path, monkeypatch):
    """An empty directory as the working directory, with no site or cache from the user's home."""
    (tmp_path / ".git").mkdir()
    monkeypatch.chdir(tmp_path)
    for var in ("SLURMGPU_SITE", "XDG_CONFIG_HOME", "SLURM_JOB_ID", "SLURMGPU_PROBE_FIXTURE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("SLURMGPU_CACHE_DIR", str(tmp_path / ".cache"))
    monkeypatch.setenv("SLURMGPU_SYSTEM_SITE", str(tmp_path / "no-admin-site.yaml"))
    return tmp_path


def run(*args, input=None):
    return CliRunner().invoke(main, list(args), input=input, catch_exceptions=False)


def one_error_line(r):
    """The last stderr line is the one `error:` line (notices such as the site's may come before)."""
    lines = [x for x in r.stderr.splitlines() if x.strip()]
    assert lines and lines[-1].startswith("error: "), r.stderr
    assert sum(1 for x in lines if x.startswith("error: ")) == 1, r.stderr
    assert "Traceback" not in r.output
    return lines[-1]


# ---------------------------------------------------------------------------
# 1. output paths


# Every option that names a file or directory a command writes, with the arguments that make the
# command otherwise valid. test_every_output_option_is_checked_before_work finds new ones.
OUTPUTS = [
    (["gen"] + SMOKE, "-o"),
    (["gen"] + SMOKE, "--html"),
    (["gen"] + SMOKE, "--explain-html"),
    (["submit"] + SMOKE, "-o"),
    (["plan", "--model", "llama3-8b"], "--html"),
    (["plan", "--model", "llama3-8b"], "--svg"),
    (["check", "job.sh"], "--html"),
    (["doctor", "log.txt"], "--html"),
    (["report", "log.txt"], "--html"),
    (["calibrate", "--runs", "runs.tsv"], "-o"),
    (["admin", "render-filter", "--site", "dgx-h100", "--kind", "job_submit", "--no-cluster-check"], "-o"),
    (["admin", "replay", "--from-dir", "."], "--state"),
    (["admin", "stats", "--log", "ctld.log"], "--prometheus"),
    (["discover"], "-o"),
    (["init", "-y"], "--dir"),
]


def _output_params():
    for path, cmd in iter_commands(main):
        for p in cmd.params:
            if isinstance(p, click.Option) and isinstance(p.type, OutputPath):
                yield path, p


def test_every_output_option_is_checked_before_work():
    """Options that write a file (by their names) all use OutputPath, and each is in OUTPUTS."""
    named = re.compile(r"^--(output|html|svg|state|prometheus|explain-html|dir|out)$")
    checked = {(p, o) for p, o in ((path, opt) for path, param in _output_params() for opt in param.opts)}
    for path, cmd in iter_commands(main):
        for p in cmd.params:
            if isinstance(p, click.Option) and any(named.match(o) for o in p.opts):
                assert isinstance(p.type, OutputPath), "%s %s writes a file without OutputPath" % (path, p.opts)
    covered = {(tuple(a[: 2 if a[0] == "admin" else 1]), o) for a, o in OUTPUTS}
    for path, opt in checked:
        short = [o for o in (opt,) if o.startswith("-")]
        if short and not any(path == c[0] and (opt == c[1] or opt in _aliases(path, c[1])) for c in covered):
            pytest.fail("add %s %s to OUTPUTS" % (" ".join(path), opt))


def _aliases(path, flag):
    cmd = main
    for name in path:
        cmd = cmd.commands[name]
    for p in cmd.params:
        if flag in p.opts:
            return p.opts
    return ()


@pytest.mark.parametrize("args,flag", OUTPUTS, ids=["%s %s" % (" ".join(a[:2]), f) for a, f in OUTPUTS])
def test_an_output_path_in_a_missing_directory_is_one_line_and_exit_2(repo, args, flag):
    (repo / "job.sh").write_text("#!/bin/bash\n#SBATCH -N1\nsrun true\n")
    (repo / "log.txt").write_text("NCCL WARN something\n")
    (repo / "ctld.log").write_text("")
    target = repo / "missing" / "out"
    r = run(*args, flag, str(target))
    assert r.exit_code == 2, r.output
    line = one_error_line(r)
    assert "does not exist" in line and str(repo / "missing") in line
    assert not (repo / "missing").exists()
    assert sorted(p.name for p in repo.iterdir()) == sorted([".git", "job.sh", "log.txt", "ctld.log"])


def test_an_unwritable_directory_as_a_plain_user_is_one_line(tmp_path):
    """As nobody (when root) a read-only directory: one line, exit 2, nothing written. Before, gen -o
    there wrote nothing and died with PermissionError's traceback, exit 1."""
    from tests.firstday import Sandbox

    sb = Sandbox()
    try:
        work, home = sb.empty_dir()
        ro = work / "ro"
        ro.mkdir()
        os.chmod(str(ro), 0o555)
        for cmd in (
            "slurmgpu gen --model llama3-8b --launcher megatron --smoke -o ro/job.sh",
            "slurmgpu plan --model llama3-8b --html ro/p.html",
            "slurmgpu init -y --dir ro",
        ):
            r = sb.run(cmd, work, home)
            if sb.prefix or os.geteuid() != 0:  # root writes anywhere: only a plain user is refused
                assert r.returncode == 2 and "Traceback" not in r.stderr, (cmd, r.stderr)
                assert r.stderr.strip().splitlines()[-1].startswith("error: ") and "not writable" in r.stderr
                assert os.listdir(str(ro)) == []
    finally:
        sb.close()


def test_a_failed_write_leaves_nothing_behind(repo, monkeypatch):
    """A write that fails after the check (disk full, a race) is still one line and no temporary file."""
    from slurmgpu.cli import common

    real = os.replace

    def full(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(common.os, "replace", full)
    r = run("gen", *SMOKE, "-o", "job.sh")
    monkeypatch.setattr(common.os, "replace", real)
    assert r.exit_code == 2 and "No space left on device" in one_error_line(r)
    assert sorted(p.name for p in repo.iterdir()) == [".cache", ".git"]


def test_init_writes_nothing_when_the_spec_would_not_load(repo):
    r = run("init", "-y", "--time", "4 hours")
    assert r.exit_code == 2 and "time" in r.stderr
    assert not (repo / "slurmgpu.yaml").exists() and not (repo / ".slurmgpu").exists()


# ---------------------------------------------------------------------------
# 2. exit codes, Ctrl-C


def _interrupt(argv, env, delay=2.0):
    p = subprocess.Popen(
        argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True
    )
    time.sleep(delay)
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=30)
    return p.returncode, err


def test_ctrl_c_exits_130_with_one_line(repo):
    """`doctor -` waits on standard input; Ctrl-C there exited 1 ("Aborted!", the same as a
    rejection) and could print a KeyboardInterrupt traceback."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    rc, err = _interrupt([sys.executable, "-m", "slurmgpu", "doctor", "-"], env)
    assert rc == 130 and err == "slurmgpu: interrupted\n", (rc, err)


def test_ctrl_c_inside_a_command_is_130(repo, monkeypatch):
    import slurmgpu.plan as plan

    def interrupted(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(plan, "make_plan", interrupted)
    r = CliRunner().invoke(main, ["plan", "--model", "llama3-8b"])
    assert r.exit_code == 130 and r.stderr.strip().splitlines()[-1] == "slurmgpu: interrupted"


def test_doctor_documents_the_exit_it_gives_for_an_unknown_job(repo, monkeypatch):
    (repo / "empty.conf").write_text("")  # a missing SLURM_CONF makes Slurm's commands retry for 60 s
    monkeypatch.setenv("SLURM_CONF", str(repo / "empty.conf"))
    r = run("doctor", "424242")
    assert r.exit_code == 2
    help_text = run("doctor", "--help").output.split("Exit status:")[1]
    assert re.search(r"^\s+2\s+the job or its log cannot be found", help_text, re.M)


# ---------------------------------------------------------------------------
# 4. gen without a spec


def test_gen_without_a_spec_says_where_it_looked(repo):
    sub = repo / "a" / "b"
    sub.mkdir(parents=True)
    os.chdir(str(sub))
    r = run("gen")
    assert r.exit_code == 2
    line = one_error_line(r)
    assert "no slurmgpu.yaml found" in line and "arguments after --" not in line
    assert "looked in %s and its parents up to the git root %s" % (sub, repo) in line
    assert "slurmgpu init" in line and "--model" in line and "--launcher" in line
    r = run("diff", "--site", "dgx-h100", "--site", "perlmutter")
    assert r.exit_code == 2 and "no slurmgpu.yaml found" in one_error_line(r)


def test_gen_with_flags_only_still_works_without_a_spec(repo):
    assert run("gen", *SMOKE).exit_code == 0
    assert run("gen", "--launcher", "torchrun", "--", "train.py").exit_code == 0


# ---------------------------------------------------------------------------
# 6. one task vocabulary


def test_task_words_are_the_same_in_gen_plan_and_the_spec(repo):
    for args in (
        ["plan", "--model", "llama3-8b"],
        ["gen", "--model", "llama3-8b", "--launcher", "vllm", "--weights", "meta-llama/Llama-3.1-8B"],
    ):
        r = run(*args, "--task", "serve")
        assert r.exit_code == 0, r.output
    (repo / "slurmgpu.yaml").write_text("model: llama3-8b\nlauncher: torchrun\ncommand: [train.py]\ntask: serve\n")
    from slurmgpu.job import load_spec

    assert load_spec(str(repo / "slurmgpu.yaml")).task == "inference"
    helps = [run(c, "--help").output for c in ("gen", "plan", "submit", "diff")]
    for h in helps:
        assert "[pretrain|finetune|lora|qlora|inference]" in h, h
    errs = [one_error_line(run(c, "--model", "llama3-8b", "--task", "pretrian")) for c in ("plan", "gen")]
    assert all("--task: 'pretrian' is not one of pretrain, finetune, lora, qlora, inference" in e for e in errs)
    assert all("did you mean 'pretrain'" in e for e in errs)


def test_precision_is_a_choice_in_gen_too(repo):
    r = run("gen", *SMOKE, "--precision", "bf8")
    assert r.exit_code == 2 and "--precision: 'bf8' is not one of bf16, fp16, fp8" in one_error_line(r)


# ---------------------------------------------------------------------------
# 7. every independent error in one run

SPEC_7 = """\
name: x
model: llama3-7b
task: pretrian
launcher: megatron
time: "4 hours"
partition: gpux
precision: bf8
nodse: 2
"""


def test_a_spec_with_seven_mistakes_reports_seven_in_one_run(repo):
    """Before: six runs (time and nodse, then partition, model, task, precision, the inputs)."""
    (repo / "slurmgpu.yaml").write_text(SPEC_7)
    r = run("gen")
    assert r.exit_code == 2
    spec = str(repo / "slurmgpu.yaml")
    lines = [x for x in r.stderr.splitlines() if x.startswith(spec)]
    fields = [x[len(spec) :].split(": ")[1] if x[len(spec) :].startswith(":") else "" for x in lines]
    assert fields == ["model", "task", "time", "partition", "precision", "nodse", "data"], r.stderr  # by line
    assert "%s:6:1: partition: site dgx-h100 has no partition 'gpux'" % spec in r.stderr
    assert "%s:2:1: model: unknown model 'llama3-7b'" % spec in r.stderr


def test_flags_are_located_as_flags(repo):
    r = run("gen", "--launcher", "torchrun", "--partition", "nope", "--model", "nosuch-9b", "--", "t.py")
    assert r.exit_code == 2
    assert "--partition: partition: site dgx-h100 has no partition 'nope'" in r.stderr
    assert "--model: model: unknown model 'nosuch-9b'" in r.stderr


SITE_3 = """\
name: mine
default_partition: gpux
partitions:
  gpu: {nodes: 4, node_type: h100}
node_types:
  h100:
    gpus: 8
    gpu_model: H100-SXM5-80GB
    gpu_memory_gb: 80
    bf16_tflops: 989
    link: nvlink
    link_gbs: 900
    cpus: 0
    memory_gb: 2000
    fabric: infiniband
    nics: [{name: mlx5_0, gbps: 400}]
    nvlink_domain: 16
"""


def test_a_site_file_reports_independent_errors_in_one_run(tmp_path):
    """Before: cpus first; topology and default_partition only once the node type loaded."""
    path = tmp_path / "site.yaml"
    path.write_text(SITE_3)
    with pytest.raises(ConfigError) as e:
        load_site(str(path))
    assert sorted(i.path for i in e.value.issues) == ["default_partition", "node_types.h100.cpus", "topology"]


# ---------------------------------------------------------------------------
# 8. Slurm's errors with what to do

RECORDED = [  # stderr lines recorded from Slurm 22.05.8 (sbatch, scontrol, sacct; this machine and the test cluster)
    ("sbatch: fatal: Could not establish a configuration source", "SLURM_CONF"),
    ("scontrol: error: resolve_ctls_from_dns_srv: res_nsearch error: Unknown host", "SLURM_CONF"),
    (
        "sbatch: error: Batch job submission failed: Unable to contact slurm controller (connect failure)",
        "scontrol ping",
    ),
    (
        "sbatch: error: Batch job submission failed: Invalid account or account/partition combination specified",
        "--account",
    ),
    ("sbatch: error: Batch job submission failed: Invalid partition name specified", "sinfo -s"),
    ("sbatch: error: Batch job submission failed: Requested node configuration is not available", "slurmgpu check"),
    (
        "sbatch: error: Batch job submission failed: Job violates accounting/QOS policy "
        "(job submit limit, user's size and/or time limits)",
        "--qos",
    ),
    ("sacct: error: Slurm accounting storage is disabled", "--from-dir"),
]


@pytest.mark.parametrize("line,todo", RECORDED, ids=[r[0][:40] for r in RECORDED])
def test_slurm_errors_get_what_to_do(line, todo):
    from slurmgpu.slurm import CommandResult, advice

    assert todo in (advice(line, line.split(":")[0]) or "")
    res = CommandResult(("sbatch", "x.sh"), 1, "", line + "\n")
    assert todo in res.why()


def test_other_commands_get_no_slurm_advice():
    from slurmgpu.slurm import CommandResult

    assert "Slurm" not in CommandResult(("nvidia-smi",), 127, "", "nvidia-smi: command not found").why()


def test_submit_without_slurm_says_what_to_do(repo, monkeypatch):
    (repo / "empty.conf").write_text("")  # Slurm's commands read no cluster from it
    monkeypatch.setenv("SLURM_CONF", str(repo / "empty.conf"))
    r = run("submit", *SMOKE)
    assert r.exit_code == 2
    line = one_error_line(r)
    assert "no Slurm configuration is reachable" in line and "SLURM_CONF" in line


def test_preflight_on_a_login_node_says_it_is_not_in_a_job(repo):
    r = run("preflight", "--site", "dgx-h100")
    assert r.exit_code == 1
    assert "not inside a Slurm job" in r.stderr
    assert "--exclude=" not in r.stdout  # no job to exclude this machine from


# ---------------------------------------------------------------------------
# 10. one spelling, one error style


def test_html_is_the_spelling_and_explain_html_a_hidden_alias(repo):
    assert "--explain-html" not in run("gen", "--help").output
    r = run("gen", *SMOKE, "--explain-html", "a.html")
    assert r.exit_code == 0 and (repo / "a.html").exists()
    assert "warning: --explain-html is an old spelling, still accepted: use --html" in r.stderr
    assert run("gen", *SMOKE, "--html", "b.html").exit_code == 0 and (repo / "b.html").exists()


def test_plan_takes_the_spec_as_gen_does(repo):
    (repo / "job.yaml").write_text(
        "model: llama3-8b\nlauncher: torchrun\ncommand: [t.py]\nfsdp: true\nimplements: [recompute]\nnodes: 1\n"
    )
    a = run("plan", "job.yaml", "--json")
    b = run("plan", "--spec", "job.yaml", "--json")
    assert a.exit_code == b.exit_code == 0 and a.stdout == b.stdout
    assert "--spec" not in run("plan", "--help").output and "old spelling" in b.stderr


def test_since_takes_the_same_words_in_replay_and_stats():
    from slurmgpu.cli.cmd_policy import _sacct_time

    assert re.match(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d$", _sacct_time("7d", "--since"))
    assert _sacct_time("2026-11-01", "--since") == "2026-11-01T00:00:00"
    for cmd in (["admin", "replay"], ["admin", "stats"]):
        assert "--since WHEN" in run(*cmd, "--help").output


def test_click_errors_have_our_style(repo):
    for args in (["plan", "--nodes", "x"], ["gen", "--nodes", "1", "--tp", "x"], ["check"], ["gen", "--nosuch"]):
        r = run(*args)
        assert r.exit_code == 2
        line = one_error_line(r)
        assert "Usage:" not in r.output and "Try '" not in r.output, r.output
        assert line.endswith("--help`)"), line


# ---------------------------------------------------------------------------
# 11. docs after pip install


def test_docs_command_prints_the_guides(repo):
    r = run("docs")
    assert r.exit_code == 0 and "gen " in r.stdout and "launchers " in r.stdout
    r = run("docs", "gen")
    assert r.exit_code == 0 and r.stdout == (ROOT / "docs" / "gen.md").read_text()
    assert run("docs", "nosuch").exit_code == 2


def test_help_and_init_point_to_docs_that_exist(repo):
    """No --help text or init's YAML names a docs/*.md path (not installed); every `slurmgpu docs X`
    they name prints a guide."""
    texts = [run(*p, "--help").output for p, _ in iter_commands(main)]
    assert run("init", "-y").exit_code == 0
    texts.append((repo / "slurmgpu.yaml").read_text())
    for t in texts:
        assert not re.search(r"docs/[\w-]+\.md", t), t
        for topic in re.findall(r"slurmgpu docs ([\w-]+)", t):
            assert topic in ("TOPIC",) or run("docs", topic).exit_code == 0, topic
    assert "slurmgpu docs gen" in texts[-1]


def test_the_wheel_ships_the_docs():
    cfg = (ROOT / "setup.cfg").read_text()
    assert "slurmgpu._data.docs = docs" in cfg and "slurmgpu._data.docs = *.md" in cfg


# ---------------------------------------------------------------------------
# 12. diff: the reason first, the partitions that fit


def test_diff_puts_the_reason_first_and_names_a_partition_that_fits(repo):
    r = run(
        "diff",
        "--site",
        "dgx-h100",
        "--site",
        "perlmutter",
        "--model",
        "llama3-70b",
        "--launcher",
        "megatron",
        "--nodes",
        "4",
        "--smoke",
    )
    assert r.exit_code == 2
    lines = r.stdout.splitlines()
    assert lines[1].startswith("error: perlmutter: Llama 3.1 70B") and "does not fit" in lines[1]
    fits = [x for x in lines[:12] if "fits on perlmutter partition gpu-hbm80g" in x]
    assert fits and "--partition gpu-hbm80g" in fits[0]
    assert (
        run(
            "gen",
            "--site",
            "perlmutter",
            "--partition",
            "gpu-hbm80g",
            "--model",
            "llama3-70b",
            "--launcher",
            "megatron",
            "--nodes",
            "4",
            "--smoke",
        ).exit_code
        == 0
    )


# ---------------------------------------------------------------------------
# 13. completion


def complete(words):
    """What `slurmgpu WORDS<TAB>` offers (bash completion protocol), as (type, value) pairs."""
    env = {
        "_SLURMGPU_COMPLETE": "bash_complete",
        "COMP_WORDS": "slurmgpu " + words,
        "COMP_CWORD": str(len(words.split(" "))),
    }
    r = CliRunner().invoke(main, [], env=env, prog_name="slurmgpu")
    out = r.output.splitlines()
    return [tuple(x.split(",", 1)) for x in out]


def test_every_site_option_completes_presets_and_files():
    presets = {("plain", n) for n in (p.stem for p in preset_dir().glob("*.yaml"))}
    for path, cmd in iter_commands(main):
        if any("--site" in getattr(p, "opts", ()) for p in cmd.params):
            got = set(complete(" ".join(path) + " --site "))
            assert presets <= got and ("file", "") in got, path


def test_model_launcher_task_template_and_file_completion():
    assert ("plain", "llama3-70b") in complete("gen --model ")
    assert ("plain", "llama3.1-70b") in complete("plan --model llama3.1")
    assert ("plain", "megatron") in complete("gen --launcher ")
    assert {("plain", t) for t in ("pretrain", "lora", "qlora", "inference")} <= set(complete("plan --task "))
    assert {("plain", t) for t in ("pretrain", "lora", "qlora", "inference")} <= set(complete("gen --task "))
    assert ("plain", "fabric_infiniband") in complete("templates show fab")
    assert ("plain", "parts/fabric_infiniband.j2") in complete("templates show parts/fab")
    assert ("plain", "parts/launch_torchrun.j2") in complete("templates eject parts/launch_t")
    assert ("file", "") in complete("check ")
    assert ("file", "") in complete("doctor ")
    assert ("plain", "gen") in complete("docs g")


# ---------------------------------------------------------------------------
# 14. docs that paste, nemo without an image


def test_doc_commands_quote_the_variables_that_expand_on_the_node():
    """In the guides' command lines for gen/submit/init/diff/plan, a $VAR outside single quotes
    expands in the user's shell (empty $SCRATCH on a login node), not on the node."""
    bad = []
    for md in sorted((ROOT / "docs").glob("*.md")) + [ROOT / "README.md"]:
        for block in re.findall(r"```[a-z]*\n(.*?)```", md.read_text(), re.S):
            for line in block.replace("\\\n", " ").splitlines():
                if not re.match(r"^\s*(\$ )?slurmgpu (gen|submit|init|diff|plan)\b", line):
                    continue
                outside = re.sub(r"'[^']*'", "", line)
                if re.search(r"\$\{?(SCRATCH|USER|HOME|SLURM_\w+)", outside):
                    bad.append("%s: %s" % (md.name, line.strip()))
    assert not bad, bad


def test_nemo_without_an_image_is_warned_by_name(repo):
    r = run("gen", "--launcher", "nemo", "--model", "llama3-8b", "--smoke", "--nodes", "1")
    assert r.exit_code == 0, r.stderr
    assert (
        "launcher nemo starts /opt/Megatron-Bridge/scripts/training/run_recipe.py, which exists only in "
        "NVIDIA's NeMo container" in r.stderr
    )
    r = run(
        "gen",
        "--launcher",
        "nemo",
        "--model",
        "llama3-8b",
        "--smoke",
        "--nodes",
        "1",
        "--image",
        "nvcr.io#nvidia/nemo:25.09",
    )
    assert r.exit_code == 0 and "exists only in" not in r.stderr


# ---------------------------------------------------------------------------
# 15. smaller ones


def test_init_writes_the_spec_0644(repo):
    os.umask(0o022)
    assert run("init", "-y").exit_code == 0
    assert (repo / "slurmgpu.yaml").stat().st_mode & 0o777 == 0o644


def test_check_sends_its_diagnostics_to_stderr(repo):
    (repo / "j.sh").write_text("#!/bin/bash\n#SBATCH -N2 --gpus-per-node=8\nsrun x --tensor-model-parallel-size 16\n")
    r = run("check", "j.sh")
    assert r.exit_code == 1
    assert r.stdout.startswith("j.sh: REJECTED") and len(r.stdout.splitlines()) == 1
    assert "error: slurmgpu: TP=16" in r.stderr


def test_a_bad_slurmgpu_site_names_the_variable(repo, monkeypatch):
    monkeypatch.setenv("SLURMGPU_SITE", "nosuch")
    r = run("site", "show")
    assert r.exit_code == 2
    assert one_error_line(r).startswith("error: $SLURMGPU_SITE=nosuch: no such site preset")


def test_wording(repo):
    r = run("gen", "--launcher", "torchrun", "--nodes", "2", "--", "t.py")
    assert "1 consecutive ranks" not in r.stdout and "TP=1   tensor parallel: none" in r.stdout
    r = run("plan", "--model", "llama3-8b", "--nodes", "1", "--tp", "1", "--pp", "8")
    assert "none recomputation" not in r.stdout and "no activation recomputation" in r.stdout
    r = run("plan", "--model", "llama3-70b", "--nodes", "2", "--task", "inference", "--tp", "8", "--pp", "2")
    note = " ".join(r.stdout.split("Notes:")[1].split())
    assert "% slower" not in note and "within 1% of the best" not in note
    assert re.search(r"predicted at \d+% of the throughput of the planner's best", note)


def test_a_requeued_chain_needs_a_checkpoint_dir(repo, monkeypatch):
    monkeypatch.setenv("PATH", str(repo / "no-bin"))  # nothing may be submitted either way
    r = run("submit", "--launcher", "torchrun", "--requeue", "--chain", "3", "--", "t.py")
    assert r.exit_code == 2 and "--checkpoint-dir" in one_error_line(r)
