"""Nothing in a generated script dies on a large allocation.

The rendezvous lines of every launcher's script run under real bash, with the script's own
`set -euo pipefail`, against the real `scontrol show hostnames` (it expands a host list from
a minimal slurm.conf, no controller needed) for a 2,000-node allocation. `... | head -n 1`
there exits 141 (SIGPIPE) in most runs; the rendered form must never fail.
"""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from slurmgpu import job as J
from slurmgpu.job import NAMES, JobSpec
from slurmgpu.site import load_site, preset_dir
from tests import programs

RUNS = 20
NODELIST = "gpu[0001-2000]"
COMMAND = dict(
    programs.COMMAND,
    srun=("train.py",),
)


@pytest.fixture
def scontrol_env(tmp_path):
    if not shutil.which("scontrol"):
        if os.environ.get("SLURMGPU_REQUIRE_CLUSTER") == "1":
            pytest.fail("scontrol is needed (SLURMGPU_REQUIRE_CLUSTER=1): bash contrib/testcluster/install-deps.sh")
        pytest.skip("scontrol not installed (bash contrib/testcluster/install-deps.sh)")
    conf = tmp_path / "slurm.conf"
    conf.write_text("ClusterName=big\nSlurmctldHost=localhost\n")
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "SLURM_CONF": str(conf),
        "SLURM_JOB_NODELIST": NODELIST,
        "SLURM_JOB_ID": "4242",
        "LANG": "C.UTF-8",
    }
    r = subprocess.run(["scontrol", "show", "hostnames", NODELIST], env=env, capture_output=True, text=True)
    assert r.returncode == 0 and len(r.stdout.split()) == 2000, r.stderr
    return env


def rendezvous_snippet(launcher):
    """The script's shell options and its rendezvous part, exactly as rendered."""
    site = load_site(str(preset_dir() / "dgx-h100.yaml"))
    spec = JobSpec(
        launcher=launcher,
        nodes=2,
        command=COMMAND.get(launcher, ()),
        weights="org/model",
        preflight=False,
        smoke=True,  # the frameworks that need data get their mock data (the rendezvous is what is tested)
    )
    req, _ = J.build_request(site, spec, J.plan_layout(site, spec), "slurmgpu gen big")
    lines = J.render_request(req, J.search_path(None, None, site)).splitlines()
    assert "set -euo pipefail" in lines
    start = next(i for i, ln in enumerate(lines) if ln.startswith("# --- rendezvous"))
    end = lines.index("export MASTER_ADDR MASTER_PORT", start)
    return "\n".join(["set -euo pipefail"] + lines[start : end + 1] + ['printf "%s\\n" "$MASTER_ADDR"']) + "\n"


def run_many(snippet, env, runs=RUNS):
    out = []
    for _ in range(runs):
        r = subprocess.run(["bash", "-c", snippet], env=env, capture_output=True, text=True, timeout=60)
        out.append((r.returncode, r.stdout))
    return out


def test_the_old_form_does_die_here(scontrol_env):
    """The harness reproduces the failure: otherwise the next test would prove nothing."""
    old = (
        'set -euo pipefail\nMASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)\n'
        'echo "$MASTER_ADDR"\n'
    )
    codes = [rc for rc, _ in run_many(old, scontrol_env, runs=50)]
    assert 141 in codes, codes


@pytest.mark.parametrize("launcher", NAMES)
def test_rendezvous_survives_a_2000_node_allocation(scontrol_env, launcher):
    snippet = rendezvous_snippet(launcher)
    assert "| head" not in snippet
    results = run_many(snippet, scontrol_env)
    assert results == [(0, "gpu0001\n")] * RUNS


def test_no_template_pipes_into_a_command_that_stops_reading():
    """head, grep -q/-m, sed q and the like close the pipe early: SIGPIPE under pipefail."""
    import re

    bad = re.compile(r"\|\s*(head|grep\s+-[A-Za-z]*[qm]|sed\s+(-n\s+)?'?[0-9]*q|awk\s+'[^']*exit)")
    tdir = J.builtin_dir()
    found = []
    for root, _, files in os.walk(tdir):
        for name in files:
            path = os.path.join(root, name)
            with open(path, encoding="utf-8") as fh:
                for n, line in enumerate(fh, 1):
                    code = line.split("#", 1)[0] if not line.lstrip().startswith("{#") else ""
                    if bad.search(code):
                        found.append("%s:%d: %s" % (os.path.relpath(path, tdir), n, line.strip()))
    assert found == []
