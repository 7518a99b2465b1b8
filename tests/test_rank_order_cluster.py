"""Node-rank order on the real controllers (issue 28, item 4): a block topology whose host names
interleave the NVLink blocks (rack1 = nvl01,03,05,07; rack2 = nvl02,04,06,08).

What the releases do (seen here, written down in plan/placement.py and docs/admin-filter.md):
22.05-24.11 number srun's tasks and SLURM_NODEID in host-name order; 26.05 numbers srun's tasks
in topology order (block by block) and SLURM_NODEID still by name, unless
SelectTypeParameters=CR_NO_DIST_TOPO_BLOCK; TopologyParam=BlockAsNodeRank (25.11+) orders both
by block. So on 26.05 an 8-node TP=16 job on 4-GPU trays with --segment=4, launched one srun task
per GPU, has each TP group inside one block, and `slurmgpu preflight --aggregate` sees that from
the task ranks the nodes report; before, it placed the groups in SLURM_JOB_NODELIST (name)
order and reported groups across racks that were not there. Where the ranks follow the names,
gen refuses the layout and, run anyway, preflight stops the job before the launcher.

The trays are fake: SLURMGPU_PROBE_FIXTURE maps each node to a recorded GB200 tray of its rack
(tests/data/probe/gb200-rack1, -rack2: one ClusterUUID/CliqueId per rack).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from slurmgpu.site import load_site
from tests.cluster_fixtures import job_slurmgpu, testcluster

pytestmark = pytest.mark.cluster

ROOT = Path(__file__).resolve().parents[1]
PROBE = ROOT / "tests" / "data" / "probe"
RACKS = {"rack1": ("nvl01", "nvl03", "nvl05", "nvl07"), "rack2": ("nvl02", "nvl04", "nvl06", "nvl08")}
TOPOLOGY = "".join("BlockName=%s Nodes=%s\n" % (b, ",".join(m)) for b, m in RACKS.items()) + "BlockSizes=4\n"
BLOCK_TOPOLOGY_FROM = (23, 11)
TASKS_IN_TOPOLOGY_ORDER_FROM = (26, 5)


def site_text(version: str, checkpoint: Path, order: str = "") -> str:
    return textwrap.dedent(
        """\
        extends: gb200-nvl72
        name: interleaved
        slurm_version: "{version}"
        blocks_follow_names: false
        {order}default_partition: nvl
        partitions:
          nvl: {{node_type: gb200-tray, nodes: 8}}
        node_types:
          gb200-tray:
            nvlink_domain: 16
            cpus: 16
            memory_gb: 62.5
            affinity: {{unknown: "test trays: 16 CPUs on one NUMA node, not the Grace pair of the preset's map"}}
        container: {{runtime: none}}
        paths: {{checkpoint: {ckpt}, scratch: {ckpt}}}
        """
    ).format(version=version, order=("node_rank_order: %s\n" % order) if order else "", ckpt=checkpoint)


def gen(site: Path, launcher: str, out: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "slurmgpu.cli", "gen", "--site", str(site), "--launcher", launcher, "--nodes", "8"]
        + ["--tp", "16", "-o", str(out), "--", "true"],
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture
def interleaved(slurm_release, new_cluster, tmp_path):
    """(cluster factory, site file, job environment) for the interleaved-rack cluster."""
    if slurm_release.version_tuple < BLOCK_TOPOLOGY_FROM:
        pytest.skip("Slurm %s has no topology/block" % slurm_release.major)
    os.chmod(tmp_path, 0o755)
    (tmp_path / "ckpt").mkdir()
    site = tmp_path / "site.yaml"
    site.write_text(site_text(slurm_release.version, tmp_path / "ckpt"))
    fixtures = {n: str(PROBE / ("gb200-" + rack)) for rack, members in RACKS.items() for n in members}
    (tmp_path / "nodes.json").write_text(json.dumps(fixtures))
    part = testcluster.Partition("nvl", testcluster.Partition.node_names("nvl", 8), "gb200", 4, default=True)

    def make(extra: str = ""):
        return new_cluster([part], topology_conf=("topology/block", TOPOLOGY), extra_config=extra)

    return make, site, tmp_path


def run_generated(cluster, script: Path, tmp_path: Path):
    """Submit a generated script with slurmgpu and the recorded trays available to its steps."""
    wrapper = tmp_path / "slurmgpu-bin"
    wrapper.write_text('#!/bin/sh\nexec %s "$@"\n' % " ".join(job_slurmgpu(cluster)))
    os.chmod(wrapper, 0o755)
    env = dict(cluster.env, SLURMGPU_BIN=str(wrapper), SLURMGPU_PROBE_FIXTURE=str(tmp_path))
    job = cluster.submit(None, str(script), env=env)
    return cluster.wait_job(job, timeout=240)


def test_groups_land_inside_one_block_as_preflight_observes_them(interleaved):
    make, site, tmp = interleaved
    script = tmp / "job.sh"
    s = load_site(str(site))
    p = gen(site, "srun", script)
    if s.node_rank_order == "name":
        # up to 25.11 srun numbers its tasks by host name: the proof fails, gen says so
        assert p.returncode != 0 and "interleave the NVLink blocks" in p.stderr, p.stderr
        return
    assert s.node_rank_order == "tasks-block"
    assert p.returncode == 0, p.stderr
    text = script.read_text()
    assert "#SBATCH --segment=4" in text and "--rank-source procid" in text
    cluster = make()
    cluster.start()
    try:
        res = run_generated(cluster, script, tmp)
    finally:
        cluster.stop()
    out = res.stdout or ""
    assert res.ok, out
    assert "nvl-domain" not in out and "slurmgpu preflight: 8 nodes" in out, out
    # the placement preflight checked: each 4-node TP group (ranks 16k..16k+15) in one rack
    # torchrun numbers nodes by host name: the same layout is refused before anything runs
    p = gen(site, "torchrun", tmp / "torchrun.sh")
    assert p.returncode != 0 and "host name (torchrun's rendezvous)" in p.stderr, p.stderr


def test_where_ranks_follow_the_names_preflight_stops_the_job(interleaved):
    """26.05 with SelectTypeParameters=CR_NO_DIST_TOPO_BLOCK numbers srun's tasks by host name
    again: the job generated for topology order now has TP groups across the racks, and the
    preflight step, which reads the task ranks the nodes had, stops it before the launcher."""
    make, site, tmp = interleaved
    if load_site(str(site)).node_rank_order != "tasks-block":
        pytest.skip("this release numbers srun's tasks by host name anyway (see the test above)")
    script = tmp / "job.sh"
    assert gen(site, "srun", script).returncode == 0
    cluster = make("SelectTypeParameters=CR_Core,CR_NO_DIST_TOPO_BLOCK")
    cluster.start()
    try:
        res = run_generated(cluster, script, tmp)
    finally:
        cluster.stop()
    out = res.stdout or ""
    assert res.state == "FAILED" and "TP groups span NVLink domains" in out, out
    assert "launcher was not started" in out


@pytest.mark.parametrize(
    "extra,since,want",
    [
        ("", None, None),  # the release's default
        ("TopologyParam=BlockAsNodeRank", (25, 11), "block"),
        ("SelectTypeParameters=CR_Core,CR_NO_DIST_TOPO_BLOCK", (26, 5), "name"),
        ("SlurmctldParameters=enable_expedited_requeue", (25, 11), None),
    ],
)
def test_discover_derives_the_rank_order_from_the_release_and_slurm_conf(
    interleaved, slurm_release, extra, since, want
):
    """discover reads the release, TopologyParam and SelectTypeParameters (node_rank_order),
    `scontrol show topology` (blocks_follow_names) and SlurmctldParameters (requeue.expedite);
    the draft loads and says what the cluster does."""
    make, _, tmp = interleaved
    if since and slurm_release.version_tuple < since:
        pytest.skip("%s is Slurm %d.%02d+" % (extra, since[0], since[1]))
    if want is None:
        want = "tasks-block" if slurm_release.version_tuple >= TASKS_IN_TOPOLOGY_ORDER_FROM else "name"
    cluster = make(extra)
    cluster.start()
    try:
        out = tmp / "draft.yaml"
        p = subprocess.run(
            [sys.executable, "-m", "slurmgpu.cli", "discover", "-o", str(out)],
            capture_output=True,
            text=True,
            env=cluster.env,
            timeout=300,
        )
        assert p.returncode == 0, p.stderr
    finally:
        cluster.stop()
    site = load_site(str(out))
    assert site.topology == "block" and site.node_rank_order == want, out.read_text()
    assert site.blocks_follow_names is False and "interleave the blocks" in out.read_text()
    assert site.requeue.expedite == ("enable_expedited_requeue" in extra)
