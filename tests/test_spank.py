"""The SPANK launch guard (contrib/spank): the C plugin runs the shared policy Lua in slurmstepd.

Two layers, both with the real parts:
  * the plugin's own C entry (slurm_spank_task_init) built into a small harness binary with
    the real Lua 5.1, fed the step facts slurmstepd would pass: verdicts, messages, failure
    handling (broken policy, runaway policy, bad plugstack.conf arguments);
  * the built .so loaded by slurmstepd on a local two-node cluster of each Slurm release the
    cluster tests run on (22.05 and 24.11; the plugin is built against each release's own
    spank.h, inside its chroot for the chroot release): interactive salloc+srun, a batch job
    whose script passed job_submit, warn mode, a broken policy file.
Expected messages are never written here: they come from the policy itself (the rendered
job_submit.lua run under Lua 5.1), so the tests hold the plugin to "the same message".
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import time
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Sequence, Tuple, Union

import pytest

from slurmgpu.policy import PolicyRunner, install_filter, plugstack_loads_spank, policy_source, render_filter
from slurmgpu.site import Site, load_site, preset_dir
from slurmgpu.slurm import het_count, job_desc, parse_hostlist
from slurmgpu.slurm.sbatch import SPREAD_JOB

ROOT = Path(__file__).resolve().parent.parent
SPANK_SRC = ROOT / "contrib" / "spank"
TEST_SITE = Path(__file__).resolve().parent / "data" / "sites" / "testcluster.yaml"
CASES = Path(__file__).resolve().parent / "policy_cases"
REQUIRE = os.environ.get("SLURMGPU_REQUIRE_CLUSTER") == "1"
BATCH_STEP = 0xFFFFFFFB  # SLURM_BATCH_SCRIPT
TAG = "slurmgpu: internal error"


def _unavailable(reason: str) -> None:
    if REQUIRE:
        pytest.fail(reason + " (SLURMGPU_REQUIRE_CLUSTER=1)")
    pytest.skip(reason)


# ---------------------------------------------------------------------------
# building


@pytest.fixture(scope="module")
def site() -> Site:
    return load_site(str(TEST_SITE))


@pytest.fixture(scope="module")
def build(tmp_path_factory) -> Path:
    """make the plugin and the harness (-Werror) into a fresh directory."""
    return build_plugin(tmp_path_factory)


def build_plugin(tmp_path_factory) -> Path:
    """The plugin and its harness, built into a fresh directory (also tests/test_batch_step.py)."""
    if not shutil.which("make") or not shutil.which(os.environ.get("CC", "cc")):
        _unavailable("no C toolchain (make, cc)")
    out = tmp_path_factory.mktemp("spank-build")
    probe = subprocess.run(["make", "-s", "-C", str(SPANK_SRC), "check-headers"], capture_output=True, text=True)
    if probe.returncode != 0:
        _unavailable("SPANK build headers missing: " + probe.stderr.strip())
    proc = subprocess.run(
        ["make", "-C", str(SPANK_SRC), "O=%s" % out, "all", "harness"], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    os.chmod(out, 0o755)
    return out


@pytest.fixture(scope="module")
def release_build(slurm_release, build, tmp_path_factory) -> Path:
    """The plugin built against the spank.h of the release the cluster tests run on: `build`
    for the native one, else `make` inside the release's chroot (its gcc, headers, Lua)."""
    from tests.cluster_fixtures import testcluster as mod

    if slurm_release.root is None:
        return build
    out = tmp_path_factory.mktemp("spank-build-" + slurm_release.name)
    proc = mod.release_run(
        slurm_release,
        ["make", "-C", str(SPANK_SRC), "O=%s" % out, "all"],
        shared_paths=(str(ROOT),),
        writable_paths=(str(out),),
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    os.chmod(out, 0o755)
    return out


@pytest.fixture(scope="module")
def policy_file(site: Site, tmp_path_factory) -> Path:
    """The rendered spank policy, installed the way admins do (mode 0644, beside slurm.conf)."""
    conf = tmp_path_factory.mktemp("spank-conf")
    os.chmod(conf, 0o755)
    return Path(install_filter(site, conf, "spank").path)


def harness(
    build: Path,
    plug: Sequence[str],
    argv: Sequence[str],
    *,
    nnodes: int = 1,
    local_tasks: int = 1,
    env: Optional[Dict[str, str]] = None,
    task: int = 0,
    global_task: int = 0,
    step: int = 0,
    extra: Sequence[str] = (),
    timeout: float = 30,
) -> subprocess.CompletedProcess:
    cmd = [
        str(build / "slurmgpu_spank_harness"),
        "-v",
        "-N",
        str(nnodes),
        "-n",
        str(local_tasks),
        "-t",
        str(nnodes * local_tasks),
        "-i",
        str(task),
        "-g",
        str(global_task),
        "-s",
        str(step),
    ]
    for a in plug:
        cmd += ["-p", a]
    for k, v in (env or {}).items():
        cmd += ["-e", "%s=%s" % (k, v)]
    cmd += list(extra) + ["--"] + list(argv)
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


def user_lines(stderr: str) -> List[str]:
    """What the user would see (slurm_error / slurm_spank_log), without the log-only lines."""
    return [ln for ln in stderr.splitlines() if not ln.startswith(("info: ", "debug: "))]


def errors(stderr: str) -> List[str]:
    return [ln[len("error: ") :] for ln in stderr.splitlines() if ln.startswith("error: ")]


def gpu_env(gpus: int = 8, partition: str = "gpu") -> Dict[str, str]:
    return {
        "SLURM_GPUS_ON_NODE": str(gpus),
        "SLURM_JOB_PARTITION": partition,
        "CUDA_VISIBLE_DEVICES": ",".join(str(i) for i in range(gpus)),
    }


WHERE = re.compile(r" \((?:script line \d+: )?(--[\w-]+ \d+)\)")


def same_rule_text(msg: str) -> str:
    """A policy message without where the TP value was found (script line N vs argv)."""
    return WHERE.sub(r" (\1)", msg)


def submit_filter_messages(site: Site, command: str, sbatch_args: Sequence[str]) -> List[str]:
    """The rejection lines job_submit.lua sends for `sbatch` of a script running `command`."""
    v = PolicyRunner(site).check("#!/bin/bash\nsrun %s\n" % command, sbatch_args)
    return list(v.messages)


TP16 = ["python", "pretrain_gpt.py", "--tensor-model-parallel-size", "16"]
TP8 = ["python", "pretrain_gpt.py", "--tensor-model-parallel-size", "8"]


# ---------------------------------------------------------------------------
# the plugin's C entry with the real Lua 5.1 (no cluster)


def test_plugin_exports_the_spank_symbols(build: Path) -> None:
    nm = shutil.which("nm")
    if nm is None:
        pytest.skip("nm (binutils) not installed")
    out = subprocess.run(
        [nm, "-D", "--defined-only", str(build / "slurmgpu_spank.so")], capture_output=True, text=True, check=True
    ).stdout
    names = {line.split()[-1] for line in out.splitlines() if line.strip()}
    assert {"slurm_spank_task_init", "plugin_name", "plugin_type", "plugin_version", "spank_plugin_version"} <= names
    # no other SPANK callback: in particular no user_init / job_prolog, whose failures drain nodes
    assert not {n for n in names if n.startswith("slurm_spank_")} - {"slurm_spank_task_init"}


def test_cross_node_tp_refused_with_the_submit_filter_message(build, policy_file, site) -> None:
    r = harness(build, ["policy=%s" % policy_file], TP16, nnodes=2, local_tasks=8, env=gpu_env())
    assert r.returncode == 1, r.stderr
    expected = submit_filter_messages(site, " ".join(TP16), ["-N2", "--gpus-per-node=8"])
    assert expected, "the policy must reject TP=16 on two 8-GPU nodes at submit time too"
    got = errors(r.stderr)
    assert [same_rule_text(m) for m in got] == [same_rule_text(m) for m in expected]
    assert "decision=reject" in r.stderr and "origin=spank" in r.stderr  # the log line


def test_exemptions_come_from_slurmstepd_not_the_task_environment(build, tmp_path) -> None:
    """SLURM_JOB_USER/_ACCOUNT/_QOS are the srun client's to set: a TP=16 step naming an exempt
    user, account and QOS there is still refused; the uid slurmstepd reports is what exempts
    (here the harness's own uid, listed by number and by its passwd name)."""
    import pwd
    from dataclasses import replace

    lab = load_site(str(CASES / "sites" / "lab.yaml"))
    env = dict(gpu_env(), SLURM_JOB_USER="alice", SLURM_JOB_ACCOUNT="benchmarks", SLURM_JOB_QOS="admin", USER="alice")
    env["SLURM_JOB_PARTITION"] = "h100"
    d1 = tmp_path / "plain"
    d1.mkdir()
    plain = install_filter(lab, d1, "spank").path
    r = harness(build, ["policy=%s" % plain], TP16, nnodes=2, local_tasks=8, env=env)
    assert r.returncode == 1 and "decision=reject" in r.stderr, r.stderr
    me = pwd.getpwuid(os.getuid()).pw_name
    for who in (str(os.getuid()), me):
        d = tmp_path / ("exempt-" + who)
        d.mkdir()
        site = replace(lab, policy=replace(lab.policy, exempt_users=(who,)))
        path = install_filter(site, d, "spank").path
        r = harness(build, ["policy=%s" % path], TP16, nnodes=2, local_tasks=8, env=env)
        assert r.returncode == 0 and "rules=exempt" in r.stderr, (who, r.stderr)


def test_only_the_first_task_on_a_node_prints_the_rejection(build, policy_file) -> None:
    first = harness(build, ["policy=%s" % policy_file], TP16, nnodes=2, local_tasks=8, env=gpu_env(), task=0)
    other = harness(
        build, ["policy=%s" % policy_file], TP16, nnodes=2, local_tasks=8, env=gpu_env(), task=3, global_task=11
    )
    assert first.returncode == other.returncode == 1
    assert errors(first.stderr) and not user_lines(other.stderr)


@pytest.mark.parametrize(
    "nnodes,local_tasks,argv",
    [
        (1, 8, TP8),
        (2, 8, TP8),
        (1, 8, TP16),  # inside a node (TP=16 on one node is not ours to judge)
        (2, 8, ["hostname"]),  # no parallel layout at all
        (2, 1, ["torchrun", "--nproc-per-node", "8", "train.py", "--tp", "8"]),
    ],
)
def test_node_local_steps_run(build, policy_file, nnodes, local_tasks, argv) -> None:
    r = harness(build, ["policy=%s" % policy_file], argv, nnodes=nnodes, local_tasks=local_tasks, env=gpu_env())
    assert r.returncode == 0, r.stderr
    assert not errors(r.stderr)


def test_ranks_per_node_come_from_the_step(build, policy_file) -> None:
    """TP=8 fits an 8-GPU node, but not with 4 tasks per node: the plugin passes the real count."""
    r = harness(build, ["policy=%s" % policy_file], TP8, nnodes=2, local_tasks=4, env=gpu_env())
    assert r.returncode == 1
    assert any("spans nodes" in m for m in errors(r.stderr))


@pytest.mark.parametrize("drop", [(), ("SLURM_GPUS_ON_NODE",)])
def test_gpus_on_the_node_come_from_the_step_environment(build, policy_file, drop) -> None:
    """One task per node (torchrun-style) on the 8-GPU partition: TP=8 fits a step with 8 GPUs
    per node and spans nodes in a step with 4; without SLURM_GPUS_ON_NODE the count comes from
    CUDA_VISIBLE_DEVICES."""
    verdicts = []
    for gpus in (8, 4):
        env = gpu_env(gpus)
        for name in drop:
            del env[name]
        verdicts.append(harness(build, ["policy=%s" % policy_file], TP8, nnodes=2, local_tasks=1, env=env).returncode)
    assert verdicts == [0, 1]


def test_batch_script_step_is_left_to_job_submit(build, policy_file) -> None:
    r = harness(build, ["policy=%s" % policy_file], TP16, nnodes=2, local_tasks=8, env=gpu_env(), step=BATCH_STEP)
    assert r.returncode == 0 and not r.stderr


def test_warn_mode_prints_once_and_runs(build, policy_file) -> None:
    r0 = harness(build, ["policy=%s" % policy_file, "mode=warn"], TP16, nnodes=2, local_tasks=8, env=gpu_env())
    r5 = harness(
        build,
        ["policy=%s" % policy_file, "mode=warn"],
        TP16,
        nnodes=2,
        local_tasks=8,
        env=gpu_env(),
        task=5,
        global_task=5,
    )
    assert r0.returncode == r5.returncode == 0
    shown = user_lines(r0.stderr)
    enforce = errors(harness(build, ["policy=%s" % policy_file], TP16, nnodes=2, local_tasks=8, env=gpu_env()).stderr)
    assert shown[: len(enforce)] == [m + " (not enforced: the launch-time guard is in warn mode)" for m in enforce]
    assert not user_lines(r5.stderr)


def test_mode_off_does_not_even_read_the_policy(build, tmp_path) -> None:
    r = harness(
        build, ["policy=%s" % (tmp_path / "absent.lua"), "mode=off"], TP16, nnodes=2, local_tasks=8, env=gpu_env()
    )
    assert r.returncode == 0 and not r.stderr


BROKEN = {
    "syntax": "this is not lua(\n",
    "no-entry": "x = 1\n",
    "raises": "function slurmgpu_spank_check(step, opts) error('boom') end\n",
    "bad-answer": "function slurmgpu_spank_check(step, opts) return 42 end\n",
    "unknown-action": "function slurmgpu_spank_check(step, opts) return 'maybe', '' end\n",
}


@pytest.mark.parametrize("kind", sorted(BROKEN) + ["missing"])
def test_broken_policy_allows_the_task_and_logs(build, tmp_path, kind) -> None:
    path = tmp_path / "policy.lua"
    if kind != "missing":
        path.write_text(BROKEN[kind])
    r = harness(build, ["policy=%s" % path], TP16, nnodes=2, local_tasks=8, env=gpu_env())
    assert r.returncode == 0
    assert not user_lines(r.stderr)
    assert TAG + ", task allowed (on_error=allow)" in r.stderr
    # on_error=deny: the same failure fails the task and tells the user
    d = harness(build, ["policy=%s" % path, "on_error=deny"], TP16, nnodes=2, local_tasks=8, env=gpu_env())
    assert d.returncode == 1
    assert any(TAG + ", task refused (on_error=deny)" in m for m in errors(d.stderr))


def test_runaway_policy_is_cut_off_by_its_time_budget(build, tmp_path) -> None:
    path = tmp_path / "loop.lua"
    path.write_text("function slurmgpu_spank_check(step, opts) while true do end end\n")
    t0 = time.monotonic()
    r = harness(build, ["policy=%s" % path, "timeout_ms=300"], TP16, nnodes=2, local_tasks=8, env=gpu_env())
    took = time.monotonic() - t0
    assert r.returncode == 0 and "time budget" in r.stderr
    assert took < 10, took


def test_greedy_policy_is_cut_off_by_its_memory_cap(build, tmp_path) -> None:
    path = tmp_path / "hog.lua"
    path.write_text("function slurmgpu_spank_check(step, opts)\n  local t = {} for i = 1, 1e8 do t[i] = i end\nend\n")
    r = harness(build, ["policy=%s" % path, "memory_mb=8", "timeout_ms=60000"], TP16, env=gpu_env())
    assert r.returncode == 0 and "not enough memory" in r.stderr


@pytest.mark.parametrize(
    "args", [["mode=strict"], ["on_error=maybe"], ["timeout_ms=0"], ["memory_mb=x"], ["frobnicate=1"], []]
)
def test_bad_plugstack_arguments_are_internal_errors(build, policy_file, args) -> None:
    plug = args if not args else ["policy=%s" % policy_file] + args
    r = harness(build, plug, TP16, nnodes=2, local_tasks=8, env=gpu_env())
    assert r.returncode == 0 and TAG in r.stderr
    d = harness(build, plug + ["on_error=deny"], TP16, nnodes=2, local_tasks=8, env=gpu_env())
    assert d.returncode == 1
    assert ("policy=PATH" in d.stderr) or ("bad plugin argument" in d.stderr)


def test_huge_arguments_and_environment_stay_bounded(build, policy_file) -> None:
    env = gpu_env()
    env["BIG"] = "x" * 100000  # longer than the 64 kB the plugin passes per value
    argv = TP16 + ["--flag%d=%s" % (i, "y" * 30) for i in range(5000)]
    t0 = time.monotonic()
    r = harness(build, ["policy=%s" % policy_file], argv, nnodes=2, local_tasks=8, env=env)
    assert time.monotonic() - t0 < 5
    assert r.returncode == 1 and TAG not in r.stderr, r.stderr


def test_install_spank_policy_and_plugstack_detection(site, tmp_path) -> None:
    conf = tmp_path / "etc"
    conf.mkdir()
    first = install_filter(site, conf, "spank")
    assert Path(first.path).name == "slurmgpu_spank.lua" and not first.replaced
    assert oct(Path(first.path).stat().st_mode & 0o777) == "0o644"  # read by every user's tasks
    assert "slurmgpu_spank.so policy=%s" % first.path in first.slurm_conf_line
    assert not first.conf_has_line
    (conf / "plugstack.conf").write_text("# required /x/slurmgpu_spank.so policy=%s\n" % first.path)
    assert not plugstack_loads_spank(conf, first.path)
    (conf / "plugstack.conf").write_text("required /x/slurmgpu_spank.so policy=%s mode=off\n" % first.path)
    assert not plugstack_loads_spank(conf, first.path)
    (conf / "plugstack.conf").write_text("optional /x/slurmgpu_spank.so policy=%s mode=warn\n" % first.path)
    second = install_filter(site, conf, "spank")
    assert second.replaced and second.conf_has_line
    assert Path(second.path).read_text() == render_filter(site, "spank")


def test_admin_cli_renders_and_installs_the_spank_policy(site, tmp_path) -> None:
    from click.testing import CliRunner

    from slurmgpu.cli import main

    out = tmp_path / "spank.lua"
    r = CliRunner().invoke(
        main, ["admin", "render-filter", "--site", str(TEST_SITE), "--kind", "spank", "-o", str(out)]
    )
    assert r.exit_code == 0, r.output
    assert out.read_text() == render_filter(site, "spank")
    r = CliRunner().invoke(
        main, ["admin", "install", "--site", str(TEST_SITE), "--conf-dir", str(tmp_path), "--kind", "spank"]
    )
    assert r.exit_code == 0, r.output
    installed = tmp_path / "slurmgpu_spank.lua"
    assert "plugstack.conf needs: required <plugindir>/slurmgpu_spank.so policy=%s mode=enforce" % installed in r.output
    assert installed.read_text() == render_filter(site, "spank")


def test_rendered_spank_policy_embeds_the_shared_policy(site) -> None:
    text = render_filter(site, "spank")
    policy = policy_source().rstrip("\n")
    assert policy in text  # one policy, not a copy of its rules
    assert "function slurmgpu_spank_check(step, opts)" in text


# ---------------------------------------------------------------------------
# the shared policy cases (tests/policy_cases), as the steps they launch


def case_headers(text: str) -> Tuple[Dict[str, List[str]], bool]:
    """`# key: value` headers (repeatable) and whether `# no-warnings` is there."""
    heads: Dict[str, List[str]] = {}
    quiet = False
    for line in text.splitlines()[1:]:
        if not line.startswith("# "):
            continue
        if line.strip() == "# no-warnings":
            quiet = True
        m = re.match(r"^# ([a-z-]+): (.*)$", line)
        if m:
            heads.setdefault(m.group(1), []).append(m.group(2).strip())
    return heads, quiet


def _srun_prefix(argv: List[str]) -> Tuple[List[str], Dict[str, str]]:
    """Split `srun [options] CMD...` into CMD and the options the step shape depends on."""
    if not argv or argv[0] != "srun":
        return argv, {}
    with_value = {
        "-N",
        "--nodes",
        "-n",
        "--ntasks",
        "--ntasks-per-node",
        "-p",
        "--partition",
        "-c",
        "--cpus-per-task",
        "--gpus-per-node",
        "--mpi",
        "--export",
        "-o",
        "-e",
        "-J",
        "-m",
        "--distribution",
        "--dist",
    }
    opts: Dict[str, str] = {}
    i = 1
    while i < len(argv) and argv[i].startswith("-"):
        if argv[i].startswith("-m") and len(argv[i]) > 2 and not argv[i].startswith("--"):
            opts["-m"] = argv[i][2:]  # -mcyclic: the value attached
            i += 1
            continue
        name, eq, value = argv[i].partition("=")
        if not eq and name in with_value and i + 1 < len(argv):
            i += 1
            value = argv[i]
        opts[name] = value
        i += 1
    return argv[i:], opts


_SITES: Dict[str, Site] = {}


def _case_site(name: str) -> Site:
    """A case's `# site:`: a preset, or a test site under tests/policy_cases/sites."""
    if name not in _SITES:
        local = CASES / "sites" / (name + ".yaml")
        _SITES[name] = load_site(str(local if local.is_file() else preset_dir() / (name + ".yaml")))
    return _SITES[name]


def _words(stmt: str) -> List[str]:
    """The words bash makes of a simple command (bash itself where nothing in it could run or
    expand: shlex reads `a\\ #b` as a comment, bash does not), else shlex's."""
    bash = shutil.which("bash")
    if bash and not re.search(r"[;&|<>$`()*?\[\]{}~]", stmt):
        out = subprocess.run(
            [bash, "-c", 'set -f; x() { printf "%s\\0" "$@"; }\nx ' + stmt], capture_output=True, check=False
        )
        if out.returncode == 0:
            return out.stdout.decode().split("\0")[:-1]
    return shlex.split(stmt, comments=True)


def step_of_case(path: Path) -> Union[str, Dict[str, object]]:
    """The srun step a policy case launches -- argv, nodes, tasks and GPUs per node, environment,
    as slurmstepd would hand them to the plugin -- or why the case has no step equivalent."""
    text = path.read_text()
    heads, quiet = case_headers(text)
    if re.search(r"^\s*# slurmgpu:", text, re.M):
        return "slurmgpu stamp line: a script-only source"
    env = dict(kv.split("=", 1) for kv in " ".join(heads.get("env", [])).split())
    desc = job_desc(text, shlex.split(" ".join(heads.get("args", []))), env=env, user=(heads.get("user") or [None])[0])
    if "tres_per_job" in desc or "tres_per_socket" in desc:
        return "per-job GPU totals: a running step sees its real per-node count"
    if "segment_size" in desc:
        return "--segment is an allocation request a step does not see"
    if desc.get("min_nodes", 1) != desc.get("max_nodes", desc.get("min_nodes", 1)):
        return "node range: a running step has one node count"
    if "," in str(desc.get("partition", "")):
        return "partition list: a running job is in one partition"
    if heads.get("user") or desc.get("account") or desc.get("qos"):
        # slurmstepd names the user by uid and has no account or QOS item (test_spank_ignores_...)
        return "exemption by user name, account or QOS: a step has only the uid"
    if het_count(text) > 1:
        return "het job: a step sees its own components' nodes"
    statements: List[str] = []
    current = ""
    for line in text.splitlines():
        if not current and line.strip().startswith("#"):
            continue  # a comment line: a trailing backslash continues nothing
        if line.endswith("\\"):
            current += line[:-1]  # bash drops the backslash-newline, adding nothing
            continue
        if (current + line).strip():
            statements.append((current + line).strip())
        current = ""
    commands: List[str] = []
    step_env = dict(desc["environment"])
    for stmt in statements:
        try:
            words = _words(stmt)
        except ValueError:  # $'...' quoting, which shlex does not know
            return "shell expansion of $'...' happens before the launch (the cluster batch test covers it)"
        if words and re.match(r"^[A-Za-z_]\w*=", words[0]) and len(words) > 1:
            return "environment prefix: the step gets it in its environment, not in its argv"
        if words and words[0] == "export" and all(re.match(r"^[A-Za-z_]\w*=", w) for w in words[1:]):
            step_env.update(w.split("=", 1) for w in words[1:])
        elif words:
            commands.append(stmt)
    if len(commands) != 1:
        return "%d command lines: a step is one of them" % len(commands)
    if "$" in commands[0] or "<<" in commands[0]:
        return "shell expansion happens before the launch (the cluster batch test covers it)"
    argv, srun = _srun_prefix(_words(commands[0]))
    site = _case_site(heads["site"][0])
    partition = desc.get("partition") or site.default_partition
    # the job's nodes as slurmctld allocates them: -N, raised by the -w host count, by the CPUs
    # asked for over the node's CPUs, spread one task per node by --spread-job
    job_nodes = int(desc.get("min_nodes", 1))
    if desc.get("req_nodes"):
        job_nodes = max(job_nodes, len(set(parse_hostlist(desc["req_nodes"]))))
    if desc.get("num_tasks") and desc.get("ntasks_per_node"):  # --ntasks over --ntasks-per-node, rounded up
        job_nodes = max(job_nodes, -(-int(desc["num_tasks"]) // int(desc["ntasks_per_node"])))
    # a partition the site does not describe is judged as the default one's node type (as the policy does)
    known = partition if partition in site.partitions else site.default_partition
    cpus = site.node_type_of(known).cpus
    if desc.get("min_cpus", 0) > cpus:
        job_nodes = max(job_nodes, -(-desc["min_cpus"] // cpus))
    if desc.get("bitflags", 0) & SPREAD_JOB:
        job_nodes = max(job_nodes, min(int(desc.get("num_tasks", 1)), site.partitions[known].nodes))
    gpus = None
    if desc.get("tres_per_node"):
        gpus = int(desc["tres_per_node"].split(",")[-1].rsplit(":", 1)[-1])  # the last request wins
    elif desc.get("tres_per_task") and desc.get("ntasks_per_node"):
        gpus = int(desc["tres_per_task"].rsplit(":", 1)[-1]) * int(desc["ntasks_per_node"])
    elif desc.get("shared") == 0:
        gpus = site.node_type_of(known).gpus
    local = int(srun.get("--ntasks-per-node") or desc.get("ntasks_per_node", 1))
    if desc.get("ntasks_per_tres") and desc.get("num_tasks") and gpus and "ntasks_per_node" not in desc:
        # --ntasks-per-gpu: ntasks / per-GPU GPUs, gpus on each node (seen live: 16 tasks -> 2 nodes)
        need = -(-int(desc["num_tasks"]) // int(desc["ntasks_per_tres"]))
        job_nodes = max(job_nodes, -(-need // gpus))
        local = -(-int(desc["num_tasks"]) // job_nodes)
    nodes = int(srun.get("-N") or srun.get("--nodes") or job_nodes)
    step_env["SLURM_JOB_PARTITION"] = partition
    # the step's task layout as slurmstepd gives it: SLURM_GTIDS, the task ids on this node (node 0)
    dist = srun.get("-m") or srun.get("--distribution") or srun.get("--dist") or step_env.get("SLURM_DISTRIBUTION", "")
    if dist:
        step_env["SLURM_DISTRIBUTION"] = dist  # srun sets it for the tasks of a step with -m
    step_env["SLURM_GTIDS"] = ",".join(str(t) for t in node0_tasks(dist, nodes, local))
    if gpus:
        step_env["SLURM_GPUS_ON_NODE"] = str(gpus)
        step_env["CUDA_VISIBLE_DEVICES"] = ",".join(str(i) for i in range(gpus))
    return {"site": site, "argv": argv, "nodes": nodes, "local": local, "env": step_env, "heads": heads, "quiet": quiet}


def node0_tasks(dist: str, nodes: int, local: int) -> List[int]:
    """The task ids srun places on the first node of a step of nodes x local tasks: block fills a
    node first, cyclic deals one task per node in turn, plane=P deals blocks of P."""
    kind = dist.split(":")[0].split(",")[0].lower()
    total = nodes * local
    if kind == "cyclic":
        return list(range(0, total, nodes))[:local]
    if kind.startswith("plane="):
        size = int(kind.split("=")[1])
        return [t for t in range(total) if (t // size) % nodes == 0][:local]
    return list(range(local))


def step_wording(text: str) -> str:
    """What differs between a script and a step: where TP was found, which option set the
    ranks per node (the script's srun line vs the step's own task count)."""
    return same_rule_text(text).replace("(srun --ntasks-per-node)", "(--ntasks-per-node)")


# Every case file, and the step it launches (a dict) or why it has none (a str).
CASE_STEPS = [(p, step_of_case(p)) for p in sorted(CASES.glob("*.sh"))]
STEP_CASES = [(p, st) for p, st in CASE_STEPS if isinstance(st, dict)]
NO_STEP = (
    "slurmgpu stamp line",
    "per-job GPU totals",
    "--segment",
    "node range",
    "partition list",
    "shell expansion",
    "environment prefix",
    "exemption by user name",
    "het job",
)


@pytest.fixture(scope="module")
def case_policies() -> Dict[str, Path]:
    return {}


def _policy_for(site: Site, cache: Dict[str, Path], tmp: Path) -> Path:
    if site.name not in cache:
        d = tmp / ("spank-" + site.name)
        d.mkdir()
        cache[site.name] = Path(install_filter(site, d, "spank").path)
    return cache[site.name]


def test_policy_cases_apply_to_steps() -> None:
    """Most cases have a step equivalent; the others are script- or submit-only by nature."""
    others = {p.name: st for p, st in CASE_STEPS if isinstance(st, str)}
    assert len(CASE_STEPS) >= 40 and len(STEP_CASES) >= 35, others
    for name, why in others.items():
        assert why.startswith(NO_STEP) or why.endswith("a step is one of them"), (name, why)


@pytest.mark.parametrize("path,step", STEP_CASES, ids=[p.stem for p, _ in STEP_CASES])
def test_policy_case_through_the_plugin(build, case_policies, tmp_path_factory, path: Path, step) -> None:
    heads = step["heads"]
    policy = _policy_for(step["site"], case_policies, tmp_path_factory.getbasetemp())
    r = harness(
        build, ["policy=%s" % policy], step["argv"], nnodes=step["nodes"], local_tasks=step["local"], env=step["env"]
    )
    shown = [step_wording(x) for x in user_lines(r.stderr)]
    log = [
        ln.split(": ", 1)[1]
        for ln in r.stderr.splitlines()
        if ln.startswith(("info: slurmgpu-filter:", "debug: slurmgpu-filter:"))
    ]
    assert len(log) == 1, r.stderr
    fields = dict(kv.split("=", 1) for kv in log[0].split()[1:] if "=" in kv)
    expect = heads["expect"][0]
    assert r.returncode == (1 if expect == "reject" else 0), r.stderr
    assert fields["decision"] == expect
    rules = fields["rules"].split(",")
    for rule in heads.get("rule", []):
        assert rule in rules
    for rule in heads.get("not-rule", []):
        assert rule not in rules
    for key in ("source", "launcher"):
        for value in heads.get(key, []):
            assert fields[key] == value
    for pair in " ".join(heads.get("layout", [])).split():
        k, v = pair.split("=")
        assert fields[k] == v
    for text in heads.get("message", []):
        assert any(step_wording(text) in line for line in shown), (text, shown)
    if expect == "accept":
        if fields["source"] == "none" or step["quiet"]:
            assert not shown, shown  # `srun hostname`-like steps stay quiet at launch
        for text in heads.get("warning", []) if fields["source"] != "none" else []:
            assert any(step_wording(text) in line for line in shown), (text, shown)


# ---------------------------------------------------------------------------
# the plugin in slurmstepd on the local cluster


class Guarded:
    """A running two-node cluster whose plugstack.conf loads the built plugin."""

    def __init__(self, cluster, plugstack: Path, plugin: Path, policy: Path):
        self.c = cluster
        self.plugstack = plugstack
        self.plugin = plugin
        self.policy = policy

    def plug(self, *args: str, policy: Optional[Path] = None) -> None:
        """Rewrite plugstack.conf: every new step (and srun) reads it again."""
        line = "required %s policy=%s %s\n" % (self.plugin, policy or self.policy, " ".join(args))
        tmp = self.plugstack.with_suffix(".tmp")
        tmp.write_text(line)
        os.replace(tmp, self.plugstack)

    def sh(self, command: str, timeout: float = 90) -> subprocess.CompletedProcess:
        return self.c.run(["bash", "-c", command], timeout=timeout)

    def in_allocation(self, step: str, timeout: float = 90) -> subprocess.CompletedProcess:
        """`salloc -N2 --exclusive <step>`, but with the allocation made first (--no-shell) and the
        step started into it: from 23.02 salloc sends its command to job_submit (22.05 does not),
        which refuses a TP=16 step before the plugin could see it."""
        script = (
            'out=$(salloc -N2 --exclusive --no-shell 2>&1) || { printf "%s\\n" "$out" >&2; exit 97; }\n'
            'job=$(printf "%s\\n" "$out" | sed -n "s/.*Granted job allocation \\([0-9][0-9]*\\).*/\\1/p")\n'
            '[ -n "$job" ] || { printf "%s\\n" "$out" >&2; exit 97; }\n'
            "trap 'scancel \"$job\"' EXIT\n"
            "SLURM_JOB_ID=$job " + step + "\n"
        )
        r = self.sh(script, timeout=timeout)
        assert r.returncode != 97, r.stderr
        return r

    def log_marks(self) -> Dict[str, int]:
        return {n: self.c.slurmd_log_path(n).stat().st_size for n in self.c.nodes}

    def slurmd_logs(self, since: Optional[Dict[str, int]] = None) -> str:
        """Every node's slurmd log (slurmstepd writes there too), from the marks on."""
        out = []
        for n in self.c.nodes:
            with open(self.c.slurmd_log_path(n), "rb") as f:
                f.seek((since or {}).get(n, 0))
                out.append(f.read().decode("utf-8", "replace"))
        return "".join(out)

    def assert_nodes_healthy(self) -> None:
        deadline = time.monotonic() + 20
        states: Dict[str, str] = {}
        while time.monotonic() < deadline:
            out = self.c.run(["sinfo", "-h", "-N", "-o", "%N %T"]).stdout
            states = dict(line.split(None, 1) for line in out.splitlines() if line.strip())
            # "planned": the backfill scheduler's mark, left on idle nodes by a finished het job
            # (seen on 22.05 with no job in the queue); not a drain
            if states and all(s in ("idle", "planned") for s in states.values()):
                return
            time.sleep(0.25)
        raise AssertionError("nodes not idle (drained?): %s\n%s" % (states, self.c.logs()))


@pytest.fixture(scope="module")
def guarded(release_build, policy_file, site, tmp_path_factory, new_cluster) -> Iterator[Guarded]:
    from tests.cluster_fixtures import testcluster as mod

    d = tmp_path_factory.mktemp("spank-cluster")
    os.chmod(d, 0o755)
    plugstack = d / "plugstack.conf"
    g_plugin = release_build / "slurmgpu_spank.so"
    parts = (
        mod.Partition("gpu", mod.Partition.node_names("gpu", 2), "h100", 8, features=("h100", "nvlink"), default=True),
    )
    cluster = new_cluster(
        parts, job_submit_lua=render_filter(site, "job_submit"), extra_config="PlugStackConfig=%s" % plugstack
    )
    g = Guarded(cluster, plugstack, g_plugin, policy_file)
    g.plug("mode=enforce")
    try:
        cluster.start()
    except mod.ClusterError as exc:
        _unavailable("cannot start the local Slurm cluster: %s" % exc)
    try:
        yield g
    finally:
        cluster.stop()


@pytest.fixture
def enforce(guarded: Guarded) -> Iterator[Guarded]:
    guarded.plug("mode=enforce", "on_error=allow")
    yield guarded
    guarded.plug("mode=enforce", "on_error=allow")
    guarded.assert_nodes_healthy()


STEP = "srun -N2 --ntasks-per-node=8 echo launched pretrain_gpt.py --tensor-model-parallel-size %d"
# slurmstepd's error lines in the step's output: "slurmstepd-NODE: error: TEXT" up to 24.11,
# "[TIMESTAMP] error: TEXT" on 26.05 (no node name)
_STEPD_ERROR = re.compile(r"^(?:slurmstepd-\S+:|\[\d{4}-\d\d-\d\dT[\d:.]+\]) error: (slurmgpu: .*)$")


def stepd_errors(text: str) -> List[str]:
    """The slurmgpu messages slurmstepd printed as errors into a step's output."""
    return [m.group(1) for m in map(_STEPD_ERROR.match, text.splitlines()) if m]


@pytest.mark.cluster
def test_interactive_cross_node_step_is_refused(enforce: Guarded, site: Site) -> None:
    r = enforce.in_allocation(STEP % 16)
    assert r.returncode != 0, r.stdout + r.stderr
    assert "launched" not in r.stdout
    expected = submit_filter_messages(
        site, "echo launched pretrain_gpt.py --tensor-model-parallel-size 16", ["-N2", "--exclusive"]
    )
    assert expected
    shown = stepd_errors(r.stderr)
    # once per node (the first task there), each the submit filter's rejection
    assert sorted(same_rule_text(m) for m in shown) == sorted(same_rule_text(m) for m in expected) * 2, r.stderr


@pytest.mark.cluster
def test_interactive_node_local_step_runs(enforce: Guarded) -> None:
    one = enforce.sh(
        "salloc -N2 --exclusive srun -N1 --ntasks-per-node=8 "
        "echo launched pretrain_gpt.py --tensor-model-parallel-size 8"
    )
    # the test site's fabric wants NCCL_SOCKET_IFNAME for multi-node jobs (the task env has it)
    both = enforce.sh("NCCL_SOCKET_IFNAME=lo salloc -N2 --exclusive " + STEP % 8)
    assert one.returncode == 0 and one.stdout.count("launched") == 8, one.stderr
    assert both.returncode == 0 and both.stdout.count("launched") == 16, both.stderr
    assert "slurmgpu" not in one.stderr + both.stderr


@pytest.mark.cluster
def test_advisory_warning_is_printed_once_and_the_step_runs(enforce: Guarded) -> None:
    r = enforce.sh("env -u NCCL_SOCKET_IFNAME salloc -N2 --exclusive " + STEP % 8)
    assert r.returncode == 0 and r.stdout.count("launched") == 16, r.stderr
    warned = [ln for ln in r.stderr.splitlines() if "slurmgpu:" in ln]
    assert len(warned) == 1 and "NCCL_SOCKET_IFNAME" in warned[0] and "error" not in warned[0], r.stderr


@pytest.mark.cluster
@pytest.mark.parametrize(
    "script,why",
    [
        # srun -m cyclic hidden from job_submit ($DIST only known when the script runs): tasks 0,2,.. on node 0
        (
            "#!/bin/bash\n#SBATCH -N2 --ntasks-per-node=8 --gpus-per-node=8\nDIST=$(echo cyclic)\n"
            "srun -N2 --ntasks-per-node=8 -m $DIST echo launched pretrain_gpt.py --tensor-model-parallel-size 8\n",
            "SLURM_DISTRIBUTION=cyclic",
        ),
        # a step over two 1-node het components, its list hidden the same way: each node runs 8 of 16 tasks
        (
            "#!/bin/bash\n#SBATCH -N1 --ntasks-per-node=8 --gpus-per-node=8\n#SBATCH hetjob\n"
            "#SBATCH -N1 --ntasks-per-node=8 --gpus-per-node=8\nG=$(echo 0,1)\n"
            "srun --het-group=$G echo launched pretrain_gpt.py --tensor-model-parallel-size 16\n",
            "this 2-node job",
        ),
    ],
    ids=["cyclic", "het-step"],
)
def test_step_task_layout_is_judged_at_launch(enforce: Guarded, site: Site, script: str, why: str) -> None:
    """What job_submit cannot read (a value only the running script knows) is refused at launch from
    the step's real task layout (SLURM_GTIDS, which slurmstepd sets; seen live: cyclic puts tasks
    0,2,... on node 0, a het step numbers tasks across its components), whatever node count
    the step's component reports."""
    before = enforce.log_marks()
    job = enforce.c.submit(script, "-o", "spank-%j.out")
    try:
        res = enforce.c.wait_job(job, timeout=60)
    finally:
        enforce.c.run(["scancel", str(job)])  # a het job's other component may still be held
    out = res.stdout or ""
    assert res.state == "FAILED" and "launched" not in out, out
    assert "origin=spank" in enforce.slurmd_logs(before)
    # ("slurmstepd: error: slurmgpu: ..." up to 24.11, "[timestamp] error: slurmgpu: ..." on 26.05)
    assert any(why in line and " error: slurmgpu: TP=" in line for line in out.splitlines()), out


@pytest.mark.cluster
def test_batch_step_that_passed_job_submit_is_refused_at_launch(enforce: Guarded, site: Site) -> None:
    script = (
        "#!/bin/bash\n#SBATCH -N2 --ntasks-per-node=8 --gpus-per-node=8\n"
        "TP=$(echo 16)  # only known when the script runs (the filter reads $((...)) since issue 16)\n"
        "srun -N2 --ntasks-per-node=8 echo launched pretrain_gpt.py --tensor-model-parallel-size $TP\n"
    )
    assert PolicyRunner(site).check(script).accepted  # what job_submit.lua decides, offline
    before = enforce.log_marks()
    job = enforce.c.submit(script, "-o", "spank-%j.out")  # ...and on the cluster
    res = enforce.c.wait_job(job, timeout=60)
    out = res.stdout or ""
    assert res.state == "FAILED" and "launched" not in out, out
    assert "origin=spank" in enforce.slurmd_logs(before)
    assert any(m.startswith("slurmgpu: TP=16 (--tensor-model-parallel-size 16)") for m in stepd_errors(out)), out


@pytest.mark.cluster
def test_warn_mode_runs_the_step_and_prints_the_message(enforce: Guarded) -> None:
    enforce.plug("mode=warn")
    r = enforce.in_allocation(STEP % 16)
    assert r.returncode == 0 and r.stdout.count("launched") == 16, r.stderr
    warned = [ln for ln in r.stderr.splitlines() if "(not enforced: the launch-time guard is in warn mode)" in ln]
    assert len(warned) == 1 and "TP=16" in warned[0], r.stderr


@pytest.mark.cluster
def test_broken_policy_file_does_not_stop_steps_and_is_logged(enforce: Guarded, tmp_path) -> None:
    broken = tmp_path / "broken.lua"
    broken.write_text("function slurmgpu_spank_check(step, opts) return ( end\n")
    os.chmod(tmp_path, 0o755)
    enforce.plug("mode=enforce", policy=broken)
    before = enforce.log_marks()
    r = enforce.in_allocation(STEP % 16)
    assert r.returncode == 0 and r.stdout.count("launched") == 16, r.stderr
    assert "slurmgpu" not in r.stderr
    logged = enforce.slurmd_logs(before)
    assert logged.count(TAG + ", task allowed (on_error=allow)") == 16, logged
    assert str(broken) in logged


@pytest.mark.cluster
def test_on_error_deny_fails_the_step_without_draining(enforce: Guarded, tmp_path) -> None:
    enforce.plug("mode=enforce", "on_error=deny", policy=tmp_path / "absent.lua")
    r = enforce.sh("salloc -N2 --exclusive " + STEP % 8)
    assert r.returncode != 0 and "launched" not in r.stdout
    assert TAG + ", task refused (on_error=deny)" in r.stderr


@pytest.mark.cluster
def test_plugin_built_for_another_release_is_refused(enforce: Guarded, build: Path, release_build: Path) -> None:
    """The SPANK ABI is per release: the plugin built against the host's spank.h does not load in
    the other release's srun (a `required` plugin then stops the step), hence a build per release."""
    from tests.cluster_fixtures import testcluster as mod

    if release_build == build or enforce.c.release.major == mod.native_release().major:
        pytest.skip("Slurm %s is the host's release: `build` is its own plugin" % enforce.c.release.major)
    own = enforce.plugin
    enforce.plugin = build / "slurmgpu_spank.so"
    try:
        enforce.plug("mode=enforce")
        r = enforce.sh("srun -N1 echo launched")
    finally:
        enforce.plugin = own
    assert r.returncode != 0 and "launched" not in r.stdout, r.stdout + r.stderr
    assert "Incompatible plugin version" in r.stderr and "slurmgpu_spank.so" in r.stderr, r.stderr


BATCH_TP = (
    "#!/bin/bash\n#SBATCH -N2 --ntasks-per-node=8 --gpus-per-node=8\nexport NCCL_SOCKET_IFNAME=lo\n"
    "srun -N2 --ntasks-per-node=8 echo launched pretrain_gpt.py --tensor-model-parallel-size %d\n"
)


@pytest.mark.cluster
def test_batch_step_site_judges_the_script_at_the_batch_step(enforce: Guarded, site: Site, tmp_path_factory) -> None:
    """policy.script_check batch-step (issue 33, cost): job_submit accepts a 2-node job without reading
    its script, and the plugin refuses it at the batch step, from slurmd's copy of the script, with
    the message job_submit gives on a submit site; nothing of it runs, the node is not drained, and
    the legitimate layout runs."""
    from dataclasses import replace

    bsite = replace(site, policy=replace(site.policy, script_check="batch-step"))
    conf = tmp_path_factory.mktemp("spank-batch-conf")
    os.chmod(conf, 0o755)
    policy = Path(install_filter(bsite, conf, "spank").path)
    enforce.plug("mode=enforce", policy=policy)
    enforce.c.install_job_submit(render_filter(bsite, "job_submit"))
    try:
        expected = PolicyRunner(site).check(BATCH_TP % 16).messages  # job_submit's refusal on a submit site
        assert expected
        before = enforce.log_marks()
        ctld_before = enforce.c.ctld_log_path.stat().st_size
        job = enforce.c.submit(BATCH_TP % 16, "-o", "spank-%j.out")  # accepted at submission
        res = enforce.c.wait_job(job, timeout=60)
        out = res.stdout or ""
        assert res.state == "FAILED" and "launched" not in out, out
        assert "origin=batch-step" in enforce.slurmd_logs(before)
        shown = stepd_errors(out)
        assert [same_rule_text(m) for m in shown] == [same_rule_text(m) for m in expected], out
        with open(enforce.c.ctld_log_path, "rb") as f:
            f.seek(ctld_before)
            ctld = f.read().decode("utf-8", "replace")
        assert "source=batch-step" in ctld and "tp=16" not in ctld, ctld
        # what slurmstepd sets for the batch step wins over the same names in the submitted environment
        # (one rank per GPU: with the 4 GPUs per node it has, a TP=8 group spans both nodes)
        forged = enforce.c.submit(
            "#!/bin/bash\n#SBATCH -N2 --gpus-per-node=4\nexport NCCL_SOCKET_IFNAME=lo\n"
            "srun echo launched pretrain_gpt.py --tensor-model-parallel-size 8\n",
            "-o",
            "spank-%j.out",
            env=dict(os.environ, SLURM_JOB_NUM_NODES="1", SLURM_NNODES="1", SLURM_GPUS_ON_NODE="8"),
        )
        res = enforce.c.wait_job(forged, timeout=60)
        assert res.state == "FAILED" and "launched" not in (res.stdout or ""), res.stdout
        assert any(m.startswith("slurmgpu: TP=8") for m in stepd_errors(res.stdout or "")), res.stdout
        # a het job is job_submit's (a step over components): its batch step must not refuse a legitimate one
        het = enforce.c.submit(
            "#!/bin/bash\n#SBATCH -N1 --ntasks-per-node=8 --gpus-per-node=8\n#SBATCH hetjob\n"
            "#SBATCH -N1 --ntasks-per-node=8 --gpus-per-node=8\nexport NCCL_SOCKET_IFNAME=lo\n"
            "srun --het-group=0 echo launched pretrain_gpt.py --tensor-model-parallel-size 8\n"
            "srun --het-group=1 echo launched pretrain_gpt.py --tensor-model-parallel-size 8\n",
            "-o",
            "spank-%j.out",
        )
        try:
            res = enforce.c.wait_job(het, timeout=60)
        finally:
            enforce.c.run(["scancel", str(het)])
        assert res.state == "COMPLETED" and (res.stdout or "").count("launched") == 16, res.stdout
        ok = enforce.c.submit(BATCH_TP % 8, "-o", "spank-%j.out")
        res = enforce.c.wait_job(ok, timeout=60)
        assert res.state == "COMPLETED" and (res.stdout or "").count("launched") == 16, res.stdout
        assert "error" not in (res.stdout or ""), res.stdout
    finally:
        enforce.c.install_job_submit(render_filter(site, "job_submit"))
