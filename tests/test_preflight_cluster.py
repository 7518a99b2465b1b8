"""Preflight and doctor inside real jobs on the local Slurm test cluster (contrib/testcluster).

A batch job fans `slurmgpu preflight --record` out over its nodes with srun and
pipes the records into one `--aggregate` step, the way generated scripts do
(docs/preflight.md). The nodes have no GPUs or HCAs, so SLURMGPU_PROBE_FIXTURE
points them at recorded nodes: a healthy DGX H100, and for one node the same
machine with its compute HCA mlx5_3 down.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import socket
import sys
import textwrap

import pytest

from tests.cluster_fixtures import job_python_has
from tests.cluster_fixtures import job_slurmgpu as cluster_job_slurmgpu

pytestmark = pytest.mark.cluster

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DGX = os.path.join(ROOT, "tests", "data", "probe", "dgx-h100")
HCA_DOWN = os.path.join(ROOT, "tests", "data", "preflight", "dgx-h100-hca-down")
SLURMGPU = shutil.which("slurmgpu") or "%s -m slurmgpu.cli" % shlex.quote(sys.executable)


def job_slurmgpu(cluster) -> str:
    """The slurmgpu command line a job of `cluster` runs (see cluster_fixtures.job_slurmgpu)."""
    return shlex.join(cluster_job_slurmgpu(cluster))


def free_port() -> int:
    s = socket.socket()
    s.bind(("0.0.0.0", 0))
    port = s.getsockname()[1]
    s.close()
    return port


@pytest.fixture
def gpu_nodes(slurm_cluster):
    """The default partition of the test cluster and its first two nodes."""
    part = next(p for p in slurm_cluster.partitions if p.default)
    assert len(part.nodes) >= 2
    return part, list(part.nodes[:2])


@pytest.fixture
def site_file(tmp_path, gpu_nodes):
    """The DGX H100 preset with the test cluster's partition name and no container runtime."""
    part, _ = gpu_nodes
    (tmp_path / "ckpt").mkdir()
    path = tmp_path / "site.yaml"
    path.write_text(
        textwrap.dedent("""\
        extends: dgx-h100
        name: testdgx
        default_partition: {part}
        partitions:
          {part}: {{node_type: dgx-h100, nodes: {n}}}
        container: {{runtime: none}}
        paths: {{checkpoint: {ckpt}}}
        """).format(part=part.name, n=len(part.nodes), ckpt=tmp_path / "ckpt")
    )
    os.chmod(str(tmp_path), 0o755)
    return str(path)


def batch_script(site: str, fixture: str, nodes: int, extra: str = "", sg: str = SLURMGPU) -> str:
    """The preflight lines docs/preflight.md gives the generator, then a stand-in launcher."""
    return textwrap.dedent("""\
        #!/bin/bash
        #SBATCH --nodes={nodes}
        #SBATCH --ntasks-per-node=1
        export SLURMGPU_PROBE_FIXTURE={fixture}
        export MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n1)
        export MASTER_PORT={port}
        srun --nodes="$SLURM_JOB_NUM_NODES" --ntasks="$SLURM_JOB_NUM_NODES" --ntasks-per-node=1 \\
            --kill-on-bad-exit=0 {sg} preflight --site {site} --record \\
          | {sg} preflight --aggregate - --nodes "$SLURM_JOB_NODELIST" \\
          || {{ echo "slurmgpu: preflight failed; launcher not started" >&2; exit 1; }}
        {extra}
        echo "LAUNCHER STARTED on $SLURM_JOB_NODELIST"
        """).format(
        nodes=nodes, fixture=shlex.quote(fixture), port=free_port(), sg=sg, site=shlex.quote(site), extra=extra
    )


def run_job(cluster, script: str, *args: str, timeout: float = 180):
    job = cluster.submit(script, *args)
    res = cluster.wait_job(job, timeout=timeout)
    assert res.stdout is not None, cluster.logs()
    return res


def test_preflight_runs_on_every_node_then_the_launcher(slurm_cluster, site_file, gpu_nodes):
    res = run_job(slurm_cluster, batch_script(site_file, DGX, 2, sg=job_slurmgpu(slurm_cluster)))
    assert res.ok, res.stdout
    out = res.stdout
    assert "slurmgpu preflight: 2 nodes, all checks passed (site testdgx)" in out
    table_row = [ln for ln in out.splitlines() if ln.split()[1:3] == ["all", "ok"]]
    assert table_row, out
    # both allocated nodes reported (merged into one row), and only then did the launcher run
    from slurmgpu.slurm import parse_hostlist

    allocated = parse_hostlist(res.info["NodeList"])
    assert sorted(parse_hostlist(table_row[0].split()[0])) == sorted(allocated)
    assert out.index("all checks passed") < out.index("LAUNCHER STARTED")


def test_down_hca_on_one_node_stops_the_job_before_the_launcher(slurm_cluster, site_file, gpu_nodes, tmp_path):
    _, (good, bad) = gpu_nodes
    fixture = tmp_path / "fixture"
    fixture.mkdir()
    (fixture / "nodes.json").write_text(json.dumps({bad: HCA_DOWN, "*": DGX}))
    res = run_job(
        slurm_cluster,
        batch_script(site_file, str(fixture), 2, sg=job_slurmgpu(slurm_cluster)),
        "--nodelist=%s,%s" % (good, bad),
    )
    out = res.stdout
    assert res.state == "FAILED" and res.exit_code == 1, out
    assert "Warning" not in out  # srun honoured one task per node
    assert "LAUNCHER STARTED" not in out
    assert "2 nodes, 1 FAILED (%s)" % bad in out, out
    lines = out.splitlines()
    fail_row = next(i for i, ln in enumerate(lines) if ln.startswith(bad + " ") and " hca " in ln)
    assert "FAIL" in lines[fail_row] and "mlx5_3 port 1: DOWN" in lines[fail_row]
    assert "--exclude=%s" % bad in lines[fail_row + 1] and "fix:" in lines[fail_row + 1]
    ok_row = next(i for i, ln in enumerate(lines) if ln.startswith(good + " ") and "checks passed" in ln)
    assert fail_row < ok_row  # failing nodes first
    assert "preflight failed; launcher not started" in out


def test_bandwidth_fanout_over_the_allocation(slurm_cluster, site_file, gpu_nodes):
    pytest.importorskip("torch")
    if slurm_cluster.in_chroot and not job_python_has(slurm_cluster, "torch"):
        pytest.skip(
            "PyTorch is not installed in the Slurm %s chroot: the gloo bandwidth test runs on the "
            "native release" % slurm_cluster.release.major
        )
    sg = job_slurmgpu(slurm_cluster)
    bw = textwrap.dedent("""\
        srun --nodes="$SLURM_JOB_NUM_NODES" --ntasks="$SLURM_NTASKS" --ntasks-per-node=2 --kill-on-bad-exit=0 \\
            {sg} preflight --site {site} --bandwidth --bandwidth-backend gloo --bandwidth-size-mb 2 \\
            --min-bandwidth-fraction 0 --record \\
          | {sg} preflight --aggregate - --nodes "$SLURM_JOB_NODELIST" || exit 1
        """).format(sg=sg, site=shlex.quote(site_file))
    script = batch_script(site_file, DGX, 2, extra=bw, sg=sg).replace(
        "--ntasks-per-node=1\n", "--ntasks-per-node=2\n", 1
    )
    res = run_job(slurm_cluster, script, timeout=300)
    assert res.ok, res.stdout + slurm_cluster.logs()
    assert "gloo all-reduce of 2 MiB, 4 ranks on 2 nodes" in res.stdout
    assert "LAUNCHER STARTED" in res.stdout


def test_doctor_reads_a_job_by_id(slurm_cluster, tmp_path):
    log = os.path.join(ROOT, "tests", "data", "doctor", "ib-completion-error.log")
    script = (
        "#!/bin/bash\n# slurmgpu: site=dgx-h100 tp=8 pp=2 dp=2 cp=1 ep=1 nodes=4 gpus_per_node=8\n"
        "grep -v '^# slurmgpu' %s\nexit 1\n" % shlex.quote(log)
    )
    job = slurm_cluster.submit(script, "--nodes=1", "--job-name=ibtest", "--output=%x-%j.out")
    slurm_cluster.wait_job(job, timeout=60)
    p = slurm_cluster.run(shlex.split(SLURMGPU) + ["doctor", str(job), "--json"], host=True)
    assert p.returncode == 0, p.stdout + p.stderr
    doc = json.loads(p.stdout)
    assert doc["source"].startswith("job %d (" % job) and doc["source"].endswith("ibtest-%d.out)" % job)
    assert [x["id"] for x in doc["problems"]] == ["ib-completion-error", "watchdog-timeout"]
    assert doc["stamp"]["site"] == "dgx-h100"  # from the batch script Slurm kept (the log has no stamp)


@pytest.mark.slow
def test_doctor_names_a_real_time_limit(slurm_cluster):
    job = slurm_cluster.submit("#!/bin/bash\nsrun sleep 600\n", "--nodes=1", "--time=1")
    res = slurm_cluster.wait_job(job, timeout=240)
    assert res.state == "TIMEOUT"
    p = slurm_cluster.run(shlex.split(SLURMGPU) + ["doctor", str(job), "--json"], host=True)
    doc = json.loads(p.stdout)
    assert p.returncode == 0 and doc["problems"][0]["id"] == "time-limit", res.stdout
