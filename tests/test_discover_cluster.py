"""discover and probe against the local real-Slurm test cluster (contrib/testcluster).

Real sinfo/scontrol/srun, real CLI processes: `slurmgpu discover -o x.yaml`,
`slurmgpu site validate x.yaml`, `slurmgpu gen --site x.yaml`.  Expectations
come from the cluster's own layout (`slurm_cluster.partitions`), not from
hard-coded names.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time

import pytest

from slurmgpu.discover import check, discover, render
from slurmgpu.site import load_site
from slurmgpu.slurm import SubprocessRunner
from tests.cluster_fixtures import job_slurmgpu

pytestmark = pytest.mark.cluster


def cli(env, *args, timeout=300):
    return subprocess.run(
        [sys.executable, "-m", "slurmgpu.cli"] + list(args), env=env, capture_output=True, text=True, timeout=timeout
    )


def expect_layout(site, cluster):
    assert set(site.partitions) == {p.name for p in cluster.partitions}
    for p in cluster.partitions:
        sp = site.partitions[p.name]
        nt = site.node_types[sp.node_type]
        assert sp.nodes == len(p.nodes), p.name
        assert (nt.gpus, nt.gres_type, nt.cpus) == (p.gpus_per_node, p.gpu_type, p.cpus_per_node), p.name
        assert nt.memory_gb == round(p.memory_mb / 1024.0, 1), p.name
    if cluster.default_partition:
        assert site.default_partition == cluster.default_partition


def test_discover_validate_gen(slurm_cluster, tmp_path):
    env = dict(slurm_cluster.env)
    out = tmp_path / "x.yaml"
    r = cli(env, "discover", "-o", str(out))
    assert r.returncode == 0, r.stderr + slurm_cluster.logs()
    assert "value" in r.stderr and "marked TODO" in r.stderr
    v = cli(env, "site", "validate", str(out))
    assert v.returncode == 0 and ": ok (site " in v.stdout, v.stdout + v.stderr
    site = load_site(str(out))
    expect_layout(site, slurm_cluster)
    again = cli(env, "discover", "-o", str(out))
    assert again.returncode == 2 and "--force" in again.stderr

    g = cli(env, "gen", "--site", str(out), "--launcher", "torchrun", "--", "python", "-c", "pass")
    assert g.returncode == 0, g.stderr
    assert "#SBATCH --partition=%s" % site.default_partition in g.stdout
    assert "# slurmgpu: site=%s " % site.name in g.stdout


def test_discover_probe_runs_srun_on_each_node_type(slurm_cluster, tmp_path):
    runner = SubprocessRunner(dict(slurm_cluster.env))
    draft = discover(runner, with_probe=True, probe_command=job_slurmgpu(slurm_cluster) + ["probe", "--json"])
    site = check(render(draft))
    expect_layout(site, slurm_cluster)
    text = render(draft)
    types = {p.node_type for p in site.partitions.values()}
    # every node type was probed on one of its nodes through srun: the fabric comment names the node
    for nt in types:
        block = text.split("  %s:\n" % nt, 1)[1]
        assert "fabric: " in block and "# probe of " in block.split("fabric: ", 1)[1].splitlines()[0], nt
    assert not [n for n in draft.notes if n.startswith("probe of")], draft.notes
    if shutil.which("nvidia-smi") is None:
        # the test nodes have no GPU driver: Slurm's GRES count stays, and the draft says the probe saw none
        assert "saw no GPUs" in text


def test_discover_one_partition(slurm_cluster, tmp_path):
    name = slurm_cluster.partitions[-1].name
    r = cli(dict(slurm_cluster.env), "discover", "-p", name, "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert list(doc["site"]["partitions"]) == [name]
    assert doc["site"]["default_partition"] == name
    assert doc["yaml"].startswith("# Site config draft")


def test_busy_node_type_keeps_its_todos(slurm_cluster):
    """A node type whose nodes are all taken is not probed: a note, and its fabric stays TODO."""
    busy = slurm_cluster.partitions[0]
    job = slurm_cluster.submit(None, "-p", busy.name, "-N", str(len(busy.nodes)), "--exclusive", "--wrap", "sleep 300")
    try:
        deadline = 30
        t0 = time.monotonic()
        while (slurm_cluster.job_info(job) or {}).get("JobState") != "RUNNING":
            assert time.monotonic() - t0 < deadline, slurm_cluster.job_info(job)
            time.sleep(0.2)
        draft = discover(
            SubprocessRunner(dict(slurm_cluster.env)),
            with_probe=True,
            wait_s=1,
            probe_command=job_slurmgpu(slurm_cluster) + ["probe", "--json"],
        )
    finally:
        slurm_cluster.run(["scancel", str(job)])
    site = check(render(draft))
    nt = site.partitions[busy.name].node_type
    assert any(n.startswith("probe of ") and "(%s) failed" % nt in n for n in draft.notes), draft.notes
    assert "node_types.%s.fabric" % nt in "\n".join(draft.todos())
    others = {p.node_type for p in site.partitions.values()} - {nt}
    for other in others:
        assert "node_types.%s.fabric" % other not in "\n".join(draft.todos())
