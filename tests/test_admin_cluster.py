"""`slurmgpu admin install` / `render-filter` against the real local Slurm 22.05 cluster
(issue 12, items 6 and 7): the site's partitions are compared with what the live controller
reports, and a rendered filter logs a GPU job on a partition the site does not describe once
per name in slurmctld.log.

The test cluster (contrib/testcluster) has partitions gpu (4 x 8 H100), gpu4 (2 x 4 A100)
and pcie (2 x 8 L40S); tests/data/sites/testcluster.yaml describes all three, the dgx-h100
preset only `gpu`.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from slurmgpu.cli import main
from slurmgpu.policy import check_site_partitions, render_filter, written_by_slurmgpu
from slurmgpu.site import load_site
from slurmgpu.slurm import SubprocessRunner

pytestmark = pytest.mark.cluster

ROOT = Path(__file__).resolve().parents[1]
SITE_FILE = ROOT / "tests" / "data" / "sites" / "testcluster.yaml"


def _cli(args, **env):
    full = {"SLURMGPU_SITE": None, "SLURMGPU_SYSTEM_SITE": "/nonexistent/site.yaml", "SLURM_CONF": None}
    full.update(env)
    return CliRunner().invoke(main, args, env=full)


def _path(cluster) -> str:
    """PATH that reaches this cluster's release of scontrol (a chroot release's wrappers first)."""
    return cluster.env.get("PATH") or "/usr/bin:/bin"


def _partial_site(tmp_path: Path, keep) -> Path:
    """The test-cluster site with only the partitions in `keep`."""
    data = yaml.safe_load(SITE_FILE.read_text())
    data["name"] = "partial"
    data["partitions"] = {k: v for k, v in data["partitions"].items() if k in keep}
    path = tmp_path / "partial.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def test_the_live_partitions_match_the_test_cluster_site(slurm_cluster):
    res = check_site_partitions(load_site(str(SITE_FILE)), SubprocessRunner(slurm_cluster.env))
    assert res.ok, res.problem() or res.why
    assert {p.name: p.gpus for p in res.cluster_partitions} == {
        p.name: p.gpus_per_node * len(p.nodes) for p in slurm_cluster.partitions
    }


def test_install_passes_the_check_and_replaces_our_own_filter(slurm_cluster, job_submit):
    site = load_site(str(SITE_FILE))
    job_submit(render_filter(site, "job_submit"))  # ours; the fixture restores the default afterwards
    conf = slurm_cluster.conf_dir
    res = _cli(["admin", "install", "--site", str(SITE_FILE), "--conf-dir", str(conf)], PATH=_path(slurm_cluster))
    assert res.exit_code == 0, res.output
    # the check asked this cluster (slurm.conf in --conf-dir), not the environment's
    assert (
        "slurmgpu: site 'testcluster' describes the cluster's partitions: gpu (32 GPUs), gpu4 (8 GPUs), "
        "pcie (16 GPUs)" in res.stderr
    )
    assert "unchanged, newer mtime" in res.stdout
    rc, out, err = slurm_cluster.sbatch(None, "--test-only", "-N2", "--gpus-per-node=8", "--wrap", "srun true --tp 16")
    assert rc != 0 and "TP=16" in err, err


def test_the_dgx_preset_fails_against_the_test_cluster_naming_both_sides(slurm_cluster):
    conf = slurm_cluster.conf_dir
    before = slurm_cluster.job_submit_path.read_bytes()
    res = _cli(
        ["admin", "install", "--site", "dgx-h100", "--allow-preset", "--conf-dir", str(conf), "--force"],
        PATH=_path(slurm_cluster),
    )
    assert res.exit_code == 1, res.output
    assert "error: site 'dgx-h100' does not describe this cluster's partitions" in res.stderr
    assert "cluster partitions with GPUs that the site does not describe: gpu4, pcie" in res.stderr
    assert "the site has: gpu\n" in res.stderr
    assert "the cluster has: gpu (32 GPUs), gpu4 (8 GPUs), pcie (16 GPUs)" in res.stderr
    assert slurm_cluster.job_submit_path.read_bytes() == before  # nothing written, --force or not


def test_render_filter_checks_the_cluster_of_slurm_conf(slurm_cluster, tmp_path):
    env = {"SLURM_CONF": str(slurm_cluster.conf_path), "PATH": _path(slurm_cluster)}
    partial = _partial_site(tmp_path, ("gpu", "gpu4"))
    res = _cli(["admin", "render-filter", "--site", str(partial), "--kind", "job_submit"], **env)
    assert res.exit_code == 1 and res.stdout == "", res.output
    assert "cluster partitions with GPUs that the site does not describe: pcie" in res.stderr
    renamed = tmp_path / "renamed.yaml"  # the case: `h100` on the site, `gpu` on the cluster
    data = yaml.safe_load(SITE_FILE.read_text())
    data["partitions"]["h100"] = data["partitions"].pop("gpu")
    data["default_partition"] = "h100"
    renamed.write_text(yaml.safe_dump(data))
    res = _cli(["admin", "render-filter", "--site", str(renamed), "--kind", "cli_filter"], **env)
    assert res.exit_code == 1, res.output
    assert "site partitions missing on the cluster: h100" in res.stderr
    assert "cluster partitions with GPUs that the site does not describe: gpu\n" in res.stderr
    # escape hatch, and a matching site
    res = _cli(["admin", "render-filter", "--site", str(partial), "--kind", "job_submit", "--no-cluster-check"], **env)
    assert res.exit_code == 0 and written_by_slurmgpu(res.stdout)
    res = _cli(["admin", "render-filter", "--site", str(SITE_FILE), "--kind", "job_submit"], **env)
    assert res.exit_code == 0 and res.stdout == render_filter(load_site(str(SITE_FILE)), "job_submit")


def test_unknown_gpu_partition_is_logged_once_by_slurmctld(slurm_cluster, job_submit, tmp_path):
    """A filter from a site without `pcie` (a partition added after install, issue 33): GPU jobs
    there are judged as on the site's default partition and the user is told; two that fit are
    accepted, one whose TP=16 spans nodes is refused, and slurmctld.log gets one warning for the
    name; jobs on described partitions are still checked."""
    job_submit(render_filter(load_site(str(_partial_site(tmp_path, ("gpu", "gpu4")))), "job_submit"))
    mark = slurm_cluster.log_mark()
    told = "partition 'pcie' is not described by site 'partial'; the filter judged this job as on the site's default"
    for _ in range(2):
        rc, out, err = slurm_cluster.sbatch(
            None, "--test-only", "-p", "pcie", "-N2", "--gpus-per-node=8", "--wrap", "srun true --tp 8"
        )
        assert rc == 0 and told in err, err
    rc, out, err = slurm_cluster.sbatch(
        None, "--test-only", "-p", "pcie", "-N2", "--gpus-per-node=8", "--wrap", "srun true --tp 16"
    )
    assert rc != 0 and "TP=16" in err and told in err, err
    rc, out, err = slurm_cluster.sbatch(
        None, "--test-only", "-p", "gpu", "-N2", "--gpus-per-node=8", "--wrap", "srun true --tp 16"
    )
    assert rc != 0 and "TP=16" in err, err
    log = slurm_cluster.ctld_log(mark)
    warned = [line for line in log.splitlines() if "warning unknown-partition=" in line]
    assert len(warned) == 1, log
    assert re.search(
        r"slurmgpu-filter: warning unknown-partition=pcie: partition 'pcie' is not described by "
        r"site 'partial' \(it describes: gpu, gpu4\)",
        warned[0],
    ), warned
    assert log.count("slurmgpu-filter: decision=accept") >= 2
    assert slurm_cluster.job_submit_errors(mark) == []
