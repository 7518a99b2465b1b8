"""discover and probe against the local real-Slurm test cluster (contrib/testcluster).

Real sinfo/scontrol/srun, real CLI processes: `slurmgpu discover -o x.yaml`,
`slurmgpu site validate x.yaml`, `slurmgpu gen --site x.yaml`.  Expectations
come from the cluster's own layout (`slurm_cluster.partitions`), not from
hard-coded names.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

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


def _exclusive_partitions(version):
    """Extra partitions over the default nodes in the spellings release `version` reads, and the
    exclusivity discover must find: up to 25.11 OverSubscribe=EXCLUSIVE, ExclusiveUser=YES and
    (24.05+) ExclusiveTopo=YES; 26.05 Exclusive=NODE|USER|TOPO, and still the old spelling."""
    lines = {"xold": ("OverSubscribe=EXCLUSIVE", "NODE")}
    if version >= (26, 5):
        lines.update(
            {
                "xnode": ("Exclusive=NODE", "NODE"),
                "xuser": ("Exclusive=USER", "USER"),
                "xtopo": ("Exclusive=TOPO", "TOPO"),
            }
        )
    else:
        lines["xuser"] = ("ExclusiveUser=YES", "USER")
        if version >= (24, 5):
            lines["xtopo"] = ("ExclusiveTopo=YES", "TOPO")
    return lines


def test_discover_reads_partition_exclusivity_in_the_releases_spelling(slurm_release, new_cluster, tmp_path):
    """26.05 shows OverSubscribe=EXCLUSIVE as `Exclusive=NODE OverSubscribe=NO`: discover reads both
    spellings; `admin topology --emit nodes` writes the release's own (24.11's slurmctld does not
    start on an Exclusive= key), and that line loads in the release's slurmctld as a whole-node
    partition."""
    from slurmgpu.discover.cluster import read_cluster

    parts = _exclusive_partitions(slurm_release.version_tuple)
    extra = "\n".join("PartitionName=%s Nodes=gpu[01-02] %s" % (n, spelled) for n, (spelled, _) in parts.items())
    cluster = new_cluster(extra_config=extra)
    cluster.start()
    try:
        facts = read_cluster(SubprocessRunner(cluster.env), backend="commands")
        found = {p.name: p for p in facts.partitions}
        for name, (spelled, mode) in parts.items():
            assert found[name].exclusive == (mode in ("NODE", "TOPO")), (name, spelled, found[name])
            assert getattr(found[name], "exclusive_mode", None) == mode, (name, spelled, found[name])
        assert not found["gpu"].exclusive and found["gpu"].exclusive_mode == "NO"
    finally:
        cluster.stop()
    site = tmp_path / "site.yaml"
    nvl = Path(__file__).resolve().parent / "data" / "sites" / "testcluster-nvl.yaml"
    site.write_text(nvl.read_text().replace('slurm_version: "24.11"', 'slurm_version: "%s"' % slurm_release.version))
    r = cli(dict(os.environ), "admin", "topology", "--site", str(site), "--nodes", "gpu[01-02]", "--emit", "nodes")
    assert r.returncode == 0, r.stderr
    line = next(ln for ln in r.stdout.splitlines() if ln.startswith("PartitionName="))
    want = "Exclusive=NODE" if slurm_release.version_tuple >= (26, 5) else "OverSubscribe=EXCLUSIVE"
    assert want in line.split(), line
    again = new_cluster(extra_config=line.replace("PartitionName=nvl ", "PartitionName=emitted "))
    again.start()  # the release's slurmctld reads the line
    try:
        out = again.run(["scontrol", "show", "partition", "emitted"], check=True).stdout
        assert ("Exclusive=NODE" if slurm_release.version_tuple >= (26, 5) else "OverSubscribe=EXCLUSIVE") in out, out
    finally:
        again.stop()
