"""The Slurm release matrix of the cluster tests (contrib/testcluster: the host's Slurm plus the
other Debian releases' in chroots: 22.05, 24.11 and 26.05) and what differs between the releases.

* the chroot release keeps to itself: its own /dev, /run/munge and munge key, nothing mounted
  in the host's namespace, nothing left running, the host's /dev/null intact;
* make-chroot.sh is idempotent (a cached chroot is reused at once) and puts it where cluster.py
  looks;
* the generated GPU request (`gpu_request: gpus-per-node | gres` in the site) is what each
  release accepts, and what it records for the job (TresPerNode: gres:gpu:N up to 23.02,
  gres/gpu:N from 23.11);
* block topology made from a site (tests/data/sites/testcluster-nvl.yaml, one BlockName per
  NVLink domain) on releases with topology/block (23.11+): the generated `--segment` keeps
  every segment in one block, a segment larger than a block is refused up to 25.11 (26.05 ignores
  a segment as large as the job and places it across blocks: the filter must refuse it); 22.05's
  sbatch has no --segment at all.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Dict, List, Sequence, Tuple

import pytest

from slurmgpu.errors import ConfigError
from slurmgpu.policy import PolicyRunner, render_filter
from slurmgpu.site import Site, load_site
from slurmgpu.slurm import parse_hostlist, slurm_version_tuple, tres_prefix
from tests.cluster_fixtures import REQUIRE_ENV, testcluster

pytestmark = pytest.mark.cluster

ROOT = Path(__file__).resolve().parents[1]
TEST_SITE = ROOT / "tests" / "data" / "sites" / "testcluster.yaml"
NVL_SITE = ROOT / "tests" / "data" / "sites" / "testcluster-nvl.yaml"
MAKE_CHROOT = ROOT / "contrib" / "testcluster" / "make-chroot.sh"
BLOCK_TOPOLOGY_FROM = (23, 11)  # topology/block
SEGMENT_OPTION_FROM = (24, 5)  # sbatch --segment
GRES_GPUS_PER_NODE_REFUSED_FROM = (26, 5)  # sbatch: --gres=gpu with --gpus-per-node is fatal
SEGMENT_AS_LARGE_AS_JOB_IGNORED_FROM = (26, 5)  # slurmctld drops a --segment >= the node count


def gen(*args: str) -> str:
    p = subprocess.run(
        [sys.executable, "-m", "slurmgpu.cli", "gen", *args], capture_output=True, text=True, timeout=120
    )
    assert p.returncode == 0, p.stderr
    return p.stdout


def admin(*args: str) -> str:
    """`slurmgpu admin ARGS` output."""
    res = subprocess.run(
        [sys.executable, "-m", "slurmgpu.cli", "admin", *args], capture_output=True, text=True, check=True
    )
    return res.stdout


def placed_nodes(sbatch_stderr: str) -> List[str]:
    """The nodes `sbatch --test-only` says the job would start on."""
    m = re.search(r" on nodes (\S+) in partition ", sbatch_stderr)
    assert m, sbatch_stderr
    return parse_hostlist(m.group(1))


# ---------------------------------------------------------------------------
# the matrix itself


def test_ci_runs_every_release(monkeypatch):
    """In CI (SLURMGPU_REQUIRE_CLUSTER=1) the matrix is the host's release plus the others, each
    able to run: on a Debian 12 or 13 host 22.05, 24.11 and 26.05. (A process may run one of
    them, SLURMGPU_TESTCLUSTER_RELEASES=<name>, as `make test` does: the matrix is the list
    without that narrowing.)"""
    monkeypatch.delenv(testcluster.RELEASES_ENV, raising=False)
    matrix = testcluster.test_releases()
    majors = [r.major for r in matrix]
    assert len(set(majors)) == len(majors), matrix
    if os.environ.get(REQUIRE_ENV) == "1" and testcluster.host_suite() in testcluster.SUITE_SLURM:
        assert sorted(majors) == ["22.05", "24.11", "26.05"], matrix
        assert all(not r.missing() for r in matrix), [(r.name, r.missing()) for r in matrix]


def test_make_chroot_reuses_the_cache_where_cluster_py_looks(slurm_release):
    if slurm_release.root is None:
        pytest.skip("the native release has no chroot")
    where = subprocess.run(
        ["bash", str(MAKE_CHROOT), "--suite", slurm_release.name, "--print-dir"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert where == slurm_release.root
    t0 = time.monotonic()
    again = subprocess.run(
        ["bash", str(MAKE_CHROOT), "--suite", slurm_release.name], capture_output=True, text=True, timeout=120
    )
    took = time.monotonic() - t0
    assert again.returncode == 0, again.stderr
    assert "chroot is current" in again.stderr and took < 20, (took, again.stderr)


def test_chroot_release_keeps_to_itself(slurm_release, new_cluster):
    """The chroot's daemons and jobs see the chroot's own /dev, /run/munge and munge key; the
    host sees none of its mounts, and nothing is left once the cluster stops."""
    if slurm_release.root is None:
        pytest.skip("the native release has no chroot")
    root = Path(slurm_release.root)
    part = testcluster.Partition("gpu", testcluster.Partition.node_names("kt", 2), "h100", 8, default=True)
    cluster = new_cluster([part])
    cluster.start()
    cluster_dir = cluster.dir
    try:
        inside = cluster.run(["stat", "-c", "%d:%i %F %t:%T", "/dev/null", "/run/munge"], check=True).stdout.split("\n")
        for line, path in zip(inside, (root / "dev" / "null", root / "run" / "munge")):
            st = os.stat(path)
            assert line.split()[0] == "%d:%d" % (st.st_dev, st.st_ino), (line, path)  # the chroot's own inode
        assert inside[0].split()[-1] == "1:3" and "character" in inside[0]
        if Path("/etc/munge/munge.key").exists():
            assert (root / "etc" / "munge" / "munge.key").read_bytes() != Path("/etc/munge/munge.key").read_bytes()
        job = cluster.submit("#!/bin/bash\ncat /etc/debian_version\nls /dev\n", "-N1")
        res = cluster.wait_job(job, timeout=60)
        assert res.ok and res.stdout is not None, res
        assert res.stdout.split()[0] == (root / "etc" / "debian_version").read_text().strip()
        assert "sda" not in res.stdout.split() and "vda" not in res.stdout.split()  # no host block devices
        # the mounts live in the cluster's namespace only
        with open("/proc/mounts") as f:
            assert str(root) not in f.read()
        ns_mounts = Path("/proc/%d/mounts" % cluster.supervisor_pid).read_text()
        assert "%s/proc " % root in ns_mounts
        assert not any(line.split()[1] in ("%s/dev" % root, "%s/run" % root) for line in ns_mounts.splitlines())
        supervisor = cluster.supervisor_pid
    finally:
        cluster.stop()
    assert cluster.host_problems(cluster_dir) == []
    assert not Path("/proc/%d" % supervisor).exists() or testcluster._pid_cmdline(supervisor) == ""
    with open("/proc/mounts") as f:
        assert str(root) not in f.read()


# ---------------------------------------------------------------------------
# the GPU request of generated scripts, per release


@pytest.mark.parametrize("gpu_request", ["gpus-per-node", "gres"])
def test_generated_gpu_request_is_accepted_and_recorded(slurm_cluster, tmp_path, gpu_request):
    site = tmp_path / "site.yaml"
    site.write_text(
        TEST_SITE.read_text()
        .replace("gpu_request: gpus-per-node", "gpu_request: " + gpu_request)
        .replace('slurm_version: "22.05"', 'slurm_version: "%s"' % slurm_cluster.release.major)
    )
    script = gen(
        "--site",
        str(site),
        "--launcher",
        "srun",
        "--nodes",
        "2",
        "--tp",
        "8",
        "--no-preflight",
        "--mem",
        "1000M",
        "--",
        "true",
    )
    line = "#SBATCH --gpus-per-node=8" if gpu_request == "gpus-per-node" else "#SBATCH --gres=gpu:8"
    assert line in script.splitlines()
    path = tmp_path / "job.sh"
    path.write_text(script)
    rc, _, err = slurm_cluster.sbatch(None, "--test-only", str(path))
    assert rc == 0, err
    job = slurm_cluster.submit(None, "-H", str(path))
    info = slurm_cluster.job_info(job)
    assert info is not None and info["TresPerNode"] == tres_prefix(slurm_cluster.release.version) + "gpu:8"


@pytest.mark.parametrize("gpu_request", ["gpus-per-node", "gres"])
def test_generated_script_passes_the_clients_checks_with_the_cli_filter(
    slurm_cluster, cli_filter, tmp_path, gpu_request
):
    """What gen writes passes sbatch's own checks with slurmgpu's cli_filter installed (26.05's
    sbatch checks the options again after cli_filter). A GPU request of the other form in the
    submitting environment is refused by 26.05's sbatch, and `check` says so first."""
    site = tmp_path / "site.yaml"
    site.write_text(
        TEST_SITE.read_text()
        .replace("gpu_request: gpus-per-node", "gpu_request: " + gpu_request)
        .replace('slurm_version: "22.05"', 'slurm_version: "%s"' % slurm_cluster.release.version)
    )
    cli_filter(render_filter(load_site(str(site)), "cli_filter"))
    script = gen("--site", str(site), "--launcher", "srun", "--nodes", "2", "--tp", "8", "--no-preflight", "--", "true")
    path = tmp_path / "job.sh"
    path.write_text(script)
    rc, _, err = slurm_cluster.sbatch(None, "--test-only", str(path))
    assert rc == 0 and "fatal" not in err, err
    other = {"SBATCH_GRES": "gpu:8"} if gpu_request == "gpus-per-node" else {"SBATCH_GPUS_PER_NODE": "8"}
    env = dict(slurm_cluster.env, **other)
    rc, _, err = slurm_cluster.sbatch(None, "--test-only", str(path), env=env)
    p = subprocess.run(
        [sys.executable, "-m", "slurmgpu.cli", "check", "--site", str(site), str(path)],
        capture_output=True,
        text=True,
        env=dict(os.environ, **other),
        timeout=120,
    )
    if slurm_cluster.release.version_tuple >= GRES_GPUS_PER_NODE_REFUSED_FROM:
        assert rc != 0 and "--gpus-per-node and --gres=gpu are mutually exclusive" in err, err
        assert p.returncode == 2 and "--gpus-per-node and --gres=gpu are mutually exclusive" in p.stderr, p.stderr
    else:
        assert rc == 0, err
        assert p.returncode == 0, p.stdout + p.stderr


def test_segment_that_does_not_divide_the_nodes(nvl):
    """-N6 --segment=4: 26.05's sbatch refuses it itself, and so does `check` on a 26.05 site;
    before, the controller refuses it (topology/block finds no placement)."""
    cluster, site, blocks = nvl
    if cluster.release.version_tuple < SEGMENT_OPTION_FROM:
        pytest.skip("Slurm %s's sbatch has no --segment" % cluster.release.major)
    args = ["-N6", "--gpus-per-node=4", "--segment=4"]
    rc, _, err = cluster.sbatch(None, "--test-only", *args, "--wrap", "true")
    runner = PolicyRunner(replace(site, slurm_version=cluster.release.version))
    script = "#!/bin/bash\nsrun true\n"
    if cluster.release.version_tuple >= (26, 5):
        assert rc != 0 and "sbatch: fatal: --segment=4 does not fit the job size (6)" in err, err
        with pytest.raises(ConfigError, match="does not fit the job size"):
            runner.check(script, args)
    else:
        assert rc != 0 and "Requested node configuration is not available" in err, err
        runner.check(script, args)  # no client refusal to mirror


def test_typed_and_untyped_gpu_requests_do_not_mix(slurm_cluster):
    """22.05 and 24.11 combine --gpus-per-node and an untyped --gres=gpu:N (TresPerNode lists
    both) and refuse a typed and an untyped request together; 26.05's sbatch refuses any
    --gres=gpu with --gpus-per-node before the controller sees it: the generator writes one."""
    both = ("-N2", "--gpus-per-node=8", "--gres=gpu:8", "--wrap", "true")
    rc, _, err = slurm_cluster.sbatch(None, "--test-only", *both)
    if slurm_cluster.release.version_tuple >= GRES_GPUS_PER_NODE_REFUSED_FROM:
        assert rc != 0 and "--gpus-per-node and --gres=gpu are mutually exclusive" in err, err
    else:
        assert rc == 0, err
    rc, _, err = slurm_cluster.sbatch(
        None, "--test-only", "-N2", "--gpus-per-node=4", "--gres=gpu:h100:8", "--wrap", "true"
    )
    assert rc != 0, err
    if slurm_cluster.release.version_tuple < GRES_GPUS_PER_NODE_REFUSED_FROM:
        assert "Invalid GRES specification (with and without type identification)" in err, err


# ---------------------------------------------------------------------------
# block topology from the site (23.11+) and --segment (24.05+)


def blocks_from_site(site: Site, partition: str, nodes: Sequence[str]) -> Dict[str, Tuple[str, ...]]:
    """topology/block for a site: one block per NVLink domain (domain_nodes consecutive nodes)."""
    per = site.node_type_of(partition).domain_nodes
    return {"rack%d" % (i // per + 1): tuple(nodes[i : i + per]) for i in range(0, len(nodes), per)}


@pytest.fixture(scope="module")
def nvl(slurm_release, new_cluster):
    """A cluster shaped like testcluster-nvl.yaml, with its blocks where the release has them."""
    site = load_site(str(NVL_SITE))
    p = site.partitions[site.default_partition]
    nt = site.node_type_of(p.name)
    part = testcluster.Partition(
        p.name, testcluster.Partition.node_names("nvl", p.nodes), nt.gres_type, nt.gpus, default=True
    )
    blocks = blocks_from_site(site, p.name, part.nodes)
    with_blocks = slurm_release.version_tuple >= BLOCK_TOPOLOGY_FROM
    # topology.conf as `slurmgpu admin topology` writes it: block form where the release has
    # topology/block, else the tree form (one IB leaf per rack)
    hosts = "nvl[01-%02d]" % p.nodes
    if with_blocks:
        conf = ("topology/block", admin("topology", "--site", str(NVL_SITE), "--nodes", hosts))
    else:
        sw = ["--switch=%s=%s" % (b, ",".join(m)) for b, m in blocks.items()]
        conf = ("topology/tree", admin("topology", "--form", "tree", *sw))
    cluster = new_cluster([part], topology_conf=conf)
    cluster.start()
    try:
        yield cluster, site, blocks
    finally:
        cluster.stop()


def test_admin_topology_loads_in_slurmctld(nvl):
    """Block form on 23.11+ (BlockName per NVLink domain), tree form (SwitchName) on 22.05."""
    cluster, site, blocks = nvl
    out = cluster.run(["scontrol", "show", "topology"], check=True).stdout
    key = "BlockName" if cluster.release.version_tuple >= BLOCK_TOPOLOGY_FROM else "SwitchName"
    for name, members in blocks.items():
        m = re.search(r"%s=%s .*Nodes=(\S+)" % (key, name), out)
        assert m and sorted(parse_hostlist(m.group(1))) == list(members), out


def test_admin_topology_diff_against_the_live_cluster(nvl):
    """`admin topology --diff` reads `scontrol show topology` from the running slurmctld: the file it
    was started with matches (exit 0); racks cut differently are named (exit 1)."""
    cluster, site, blocks = nvl
    if cluster.release.version_tuple >= BLOCK_TOPOLOGY_FROM:
        same = ["--site", str(NVL_SITE), "--nodes", "nvl[01-08]"]
        other = ["--site", str(NVL_SITE), "--nodes", "nvl[05-08],nvl[01-04]"]
    else:
        same = ["--form", "tree"] + ["--switch=%s=%s" % (b, ",".join(m)) for b, m in blocks.items()]
        other = ["--form", "tree", "--switch=rack1=nvl[01-02]", "--switch=rack2=nvl[03-08]"]
    env = cluster.env
    p = subprocess.run(
        [sys.executable, "-m", "slurmgpu.cli", "admin", "topology", *same, "--diff"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert p.returncode == 0 and "matches the site" in p.stdout, p.stdout + p.stderr
    p = subprocess.run(
        [sys.executable, "-m", "slurmgpu.cli", "admin", "topology", *other, "--diff"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert p.returncode == 1 and "rack1: site" in p.stdout, p.stdout + p.stderr


def test_block_topology_comes_from_the_site(nvl):
    cluster, site, blocks = nvl
    if cluster.release.version_tuple < BLOCK_TOPOLOGY_FROM:
        pytest.skip("Slurm %s has no topology/block" % cluster.release.major)
    assert blocks == {"rack1": ("nvl01", "nvl02", "nvl03", "nvl04"), "rack2": ("nvl05", "nvl06", "nvl07", "nvl08")}
    out = cluster.run(["scontrol", "show", "topology"], check=True).stdout
    for name, members in blocks.items():
        m = re.search(r"BlockName=%s .*Nodes=(\S+)" % name, out)
        assert m and sorted(parse_hostlist(m.group(1))) == list(members), out


@pytest.mark.parametrize("nodes,segment", [(4, 4), (8, 4)])
def test_generated_segment_keeps_each_segment_in_one_block(nvl, tmp_path, nodes, segment):
    cluster, site, blocks = nvl
    script = gen(
        "--site",
        str(NVL_SITE),
        "--launcher",
        "srun",
        "--nodes",
        str(nodes),
        "--tp",
        "16",
        "--no-preflight",
        "--",
        "true",
    )
    assert "#SBATCH --segment=%d" % segment in script.splitlines()
    path = tmp_path / "job.sh"
    path.write_text(script)
    rc, _, err = cluster.sbatch(None, "--test-only", str(path))
    if cluster.release.version_tuple < SEGMENT_OPTION_FROM:
        assert rc != 0 and "unrecognized option '--segment" in err, err
        return
    assert rc == 0, err
    placed = placed_nodes(err)
    assert len(placed) == nodes
    block_of = {n: b for b, members in blocks.items() for n in members}
    per_block: Dict[str, int] = {}
    for n in placed:
        per_block[block_of[n]] = per_block.get(block_of[n], 0) + 1
    assert all(count % segment == 0 for count in per_block.values()), (placed, blocks)


def test_segment_larger_than_a_block_is_refused(nvl, tmp_path):
    cluster, site, blocks = nvl
    if cluster.release.version_tuple < SEGMENT_OPTION_FROM:
        pytest.skip("Slurm %s's sbatch has no --segment" % cluster.release.major)
    script = gen(
        "--site", str(NVL_SITE), "--launcher", "srun", "--nodes", "8", "--tp", "16", "--no-preflight", "--", "true"
    ).replace("#SBATCH --segment=4\n", "#SBATCH --segment=8\n")
    path = tmp_path / "job.sh"
    path.write_text(script)
    rc, _, err = cluster.sbatch(None, "--test-only", str(path))
    if cluster.release.version_tuple >= SEGMENT_AS_LARGE_AS_JOB_IGNORED_FROM:
        # 26.05 ignores a segment as large as the job: it runs across both racks, so the submit
        # filter (and `check`) must refuse it, as they do on every release
        assert rc == 0, err
        placed = placed_nodes(err)
        assert {n for n in placed if n in blocks["rack1"]} and {n for n in placed if n in blocks["rack2"]}, placed
    else:
        assert rc != 0 and "Requested node configuration is not available" in err, err
    site26 = replace(site, slurm_version=cluster.release.version)
    verdict = PolicyRunner(site26).check(script)
    assert verdict.decision == "reject" and "--segment=8 does not keep each TP group" in " ".join(verdict.messages)
    rc, _, err = cluster.sbatch(None, "--test-only", "-N6", "--gpus-per-node=4", "--segment=3", "--wrap", "true")
    assert rc == 0, err
    placed = placed_nodes(err)
    racks = [sum(1 for n in placed if n in members) for members in blocks.values()]
    assert sorted(racks) == [3, 3], (placed, blocks)  # 3-node segments, one per rack


# ---------------------------------------------------------------------------
# policy.repair_segment where job_desc.segment_size is writable (25.11.2+)

SEGMENT_WRITABLE_FROM = (25, 11, 2)


def test_repair_segment_on_the_real_controller(slurm_release, new_cluster, tmp_path):
    """An 8-node TP=16 job on 4-GPU trays without --segment: the filter writes --segment=4 into
    job_desc, the job runs with it (each 4-node segment in one block: 4 + 4 nodes) and its
    AdminComment says the filter set it."""
    if (slurm_version_tuple(slurm_release.version) or (0, 0, 0)) < SEGMENT_WRITABLE_FROM:
        pytest.skip("job_desc.segment_size is writable from Slurm 25.11.2 (this is %s)" % slurm_release.version)
    site_file = tmp_path / "nvl.yaml"
    site_file.write_text(
        NVL_SITE.read_text().replace('slurm_version: "24.11"', 'slurm_version: "%s"' % slurm_release.version)
        + "  repair_segment: true\n"
    )
    site = load_site(str(site_file))
    assert site.policy.repair_segment
    p = site.partitions[site.default_partition]
    nt = site.node_type_of(p.name)
    part = testcluster.Partition(
        p.name, testcluster.Partition.node_names("nvl", p.nodes), nt.gres_type, nt.gpus, default=True
    )
    topo = admin("topology", "--site", str(site_file), "--nodes", "nvl[01-%02d]" % p.nodes)
    cluster = new_cluster(
        [part], topology_conf=("topology/block", topo), job_submit_lua=render_filter(site, "job_submit")
    )
    cluster.start()
    try:
        script = (
            "#!/bin/bash\n#SBATCH -N8 --gpus-per-node=4 --exclusive\n"
            "# slurmgpu: site=testcluster-nvl tp=16 pp=1 dp=2 cp=1 ep=1 nodes=8 gpus_per_node=4\n"
            "export NCCL_SOCKET_IFNAME=lo\nsrun --ntasks-per-node=1 hostname\n"
        )
        job = cluster.submit(script)
        res = cluster.wait_job(job, timeout=120)
        assert res.ok, (res, cluster.logs())
        comment = res.info.get("AdminComment", "")
        assert "slurmgpu: set --segment=4 (model-parallel groups inside one NVLink domain)" in comment, res.info
        assert res.info.get("SegmentSize") == "4", res.info  # the segment the job ran with
        blocks = blocks_from_site(site, p.name, part.nodes)
        placed = parse_hostlist(res.info["NodeList"])
        assert sorted(sum(1 for n in placed if n in members) for members in blocks.values()) == [4, 4], placed
    finally:
        cluster.stop()


# ---------------------------------------------------------------------------
# CliFilterParameters=cli_filter_lua_path= (25.11+): where `admin install` puts the cli_filter

CLI_FILTER_LUA_PATH_FROM = (25, 11)


def test_admin_install_writes_the_cli_filter_where_slurm_conf_says(slurm_release, new_cluster, tmp_path):
    """With cli_filter_lua_path= the clients read that file, not cli_filter.lua beside slurm.conf:
    `admin install --kind cli_filter` must write there (a copy beside slurm.conf is ignored)."""
    if slurm_release.version_tuple < CLI_FILTER_LUA_PATH_FROM:
        pytest.skip("CliFilterParameters=cli_filter_lua_path= is Slurm 25.11+ (this is %s)" % slurm_release.version)
    d = tmp_path / "clif"
    d.mkdir()
    os.chmod(d, 0o755)
    target = d / "cli_filter.lua"
    target.write_text(testcluster.PASSTHROUGH_CLI_FILTER_LUA)
    os.chmod(target, 0o644)
    cluster = new_cluster(
        cli_filter_lua=testcluster.PASSTHROUGH_CLI_FILTER_LUA,
        extra_config="CliFilterParameters=cli_filter_lua_path=%s" % target,
    )
    cluster.start()
    try:
        site = tmp_path / "site.yaml"
        site.write_text(
            TEST_SITE.read_text().replace('slurm_version: "22.05"', 'slurm_version: "%s"' % slurm_release.version)
        )
        beside = cluster.conf_dir / "cli_filter.lua"
        before = beside.read_text()
        p = subprocess.run(
            [sys.executable, "-m", "slurmgpu.cli", "admin", "install", "--site", str(site)]
            + ["--conf-dir", str(cluster.conf_dir), "--kind", "cli_filter", "--force"],
            capture_output=True,
            text=True,
            env=dict(cluster.env, SLURMGPU_SITE="", SLURMGPU_SYSTEM_SITE="/nonexistent/site.yaml"),
            timeout=120,
        )
        assert p.returncode == 0, p.stdout + p.stderr
        assert "cli_filter_lua_path=%s" % target in p.stderr + p.stdout
        assert target.read_text().startswith("-- cli_filter.lua for site") and beside.read_text() == before
        rc, _, err = cluster.sbatch(
            None,
            "--test-only",
            "-N2",
            "--gpus-per-node=8",
            "--wrap",
            "srun python pretrain_gpt.py --tensor-model-parallel-size 16",
        )
        assert rc != 0 and "slurmgpu: TP=16" in err, err  # the installed filter ran in sbatch
    finally:
        cluster.stop()


# ---------------------------------------------------------------------------
# NVL72 generation on 25.11+: one IMEX channel per segment, expedited requeue


def test_generated_network_and_expedited_requeue_are_what_the_release_takes(slurm_release, new_cluster, tmp_path):
    """A site that gives each segment its own IMEX channel and enables expedited requeue
    (Slurm 25.11+): the 8-node TP=16 job of two 4-node segments asks for
    --network=unique-channel-per-segment and --requeue=expedite, which the controller takes when
    SlurmctldParameters=enable_expedited_requeue is set and refuses otherwise (so gen writes
    =expedite only where the site says so). Older releases: the site loader refuses both."""
    site_file = tmp_path / "nvl.yaml"
    text = NVL_SITE.read_text().replace('slurm_version: "24.11"', 'slurm_version: "%s"' % slurm_release.version)
    text = text.replace("    socket_ifname: lo\n", "    socket_ifname: lo\n    imex_per_segment: true\n")
    site_file.write_text(text + "requeue:\n  expedite: true\n")
    if slurm_release.version_tuple < (25, 11):
        with pytest.raises(ConfigError, match="needs Slurm 25.11"):
            load_site(str(site_file))
        return
    site = load_site(str(site_file))
    script = gen(
        "--site",
        str(site_file),
        "--launcher",
        "srun",
        "--nodes",
        "8",
        "--tp",
        "16",
        "--no-preflight",
        "--requeue",
        "--time",
        "1:00:00",
        "--checkpoint-dir",
        str(tmp_path),
        "--",
        "true",
    )
    lines = script.splitlines()
    assert "#SBATCH --segment=4" in lines and "#SBATCH --network=unique-channel-per-segment" in lines
    assert "#SBATCH --requeue=expedite" in lines
    p = site.partitions[site.default_partition]
    nt = site.node_type_of(p.name)
    part = testcluster.Partition(
        p.name, testcluster.Partition.node_names("nvl", p.nodes), nt.gres_type, nt.gpus, default=True
    )
    topo = admin("topology", "--site", str(site_file), "--nodes", "nvl[01-%02d]" % p.nodes)
    path = tmp_path / "job.sh"
    path.write_text(script)
    for enabled in (True, False):
        cluster = new_cluster(
            [part],
            topology_conf=("topology/block", topo),
            extra_config="SlurmctldParameters=enable_expedited_requeue" if enabled else "",
        )
        cluster.start()
        try:
            rc, _, err = cluster.sbatch(None, "--test-only", str(path))
            if enabled:
                assert rc == 0, err
                placed = placed_nodes(err)
                blocks = blocks_from_site(site, p.name, part.nodes)
                assert sorted(sum(1 for n in placed if n in m) for m in blocks.values()) == [4, 4], placed
            else:
                assert rc != 0 and "Requested operation not supported" in err, err
        finally:
            cluster.stop()
