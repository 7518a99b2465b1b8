"""Affinity by construction on real Slurm (issue 30): a job written by `slurmgpu gen` binds every
rank where the site map says, its preflight checks each rank's real sched_getaffinity against the
map, and on a cluster that does not bind (TaskPlugin=task/none) that preflight stops the job.

The site describes this machine: its NUMA nodes and CPUs as `slurmgpu probe` reads them here, and
two (fake, GRES) GPUs per node, GPU 0 on the second CPU and GPU 1 on the first. The reversed order
makes the binding observable: Slurm's own automatic binding (task/affinity, one core per task)
would put task 0 on the first CPU. The preflight's node checks read a recorded node with two H200s
(SLURMGPU_PROBE_FIXTURE, built below from tests/data/probe/h200-vm and this machine's NUMA nodes);
the CPU affinity they check is each task's real one.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.cluster_fixtures import job_python_has, job_slurmgpu, testcluster
from tests.test_e2e_jobs import ROOT, _port_free, clean_env

pytestmark = pytest.mark.cluster

WORKER = str(ROOT / "tests" / "e2e" / "affinity_worker.py")
H200 = ROOT / "tests" / "data" / "probe" / "h200-vm"
GPUS = 2


def this_machine():
    """(NUMA node -> CPU list text) of this machine, from the real probe, and the CPUs online."""
    out = subprocess.run(
        [sys.executable, "-m", "slurmgpu.cli", "probe", "--json"],
        capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    numa = {int(n): c for n, c in json.loads(out.stdout)["numa_nodes"] if c}
    assert numa, "probe found no NUMA node with CPUs on this machine"
    online = sorted(os.sched_getaffinity(0))
    return numa, online


def write_site(tmp: Path, part: str, nodes: int, release: str, numa, cpus) -> Path:
    from slurmgpu.site import parse_cpulist

    node0 = min(numa)
    first = [c for c in parse_cpulist(numa[node0]) if c in cpus][:2]
    assert len(first) == 2, "the affinity test needs two CPUs on one NUMA node"
    table = ", ".join('%d: "%s"' % (n, c) for n, c in sorted(numa.items()))
    p = tmp / "site.yaml"
    p.write_text(
        textwrap.dedent("""\
        name: afftest
        slurm_version: "{release}"
        default_partition: {part}
        partitions:
          {part}: {{node_type: cpu{n}, nodes: {nodes}, exclusive: true}}
        node_types:
          cpu{n}:
            gpus: {gpus}
            gpu_model: H200-141GB
            gpu_memory_gb: 141
            bf16_tflops: 989
            link: pcie
            link_gbs: 64
            cpus: {n}
            memory_gb: 8
            fabric: ethernet
            socket_ifname: eth0
            # this machine's NUMA nodes as `slurmgpu probe` reads them; GPU 0 on the second CPU, GPU 1 on the first
            affinity:
              source: slurmgpu probe on this machine (NUMA nodes); GPUs placed by the test
              verified: true
              numa: {{{table}}}
              gpus:
                - {{numa: {node0}, cpus: "{b}"}}
                - {{numa: {node0}, cpus: "{a}"}}
        container: {{runtime: none}}
        """).format(
            release=release,
            part=part,
            nodes=nodes,
            n=len(cpus),
            gpus=GPUS,
            table=table,
            node0=node0,
            a=first[0],
            b=first[1],
        )  # fmt: skip
    )
    return p


def write_fixture(tmp: Path, numa) -> Path:
    """A recorded node with two H200s whose NUMA tree is this machine's."""
    d = tmp / "node"
    (d / "sys" / "class" / "net" / "eth0").mkdir(parents=True)
    for f, v in (("operstate", "up"), ("type", "1"), ("speed", "25000")):
        (d / "sys" / "class" / "net" / "eth0" / f).write_text(v + "\n")
    for n, c in numa.items():
        (d / "sys" / "devices" / "system" / "node" / ("node%d" % n)).mkdir(parents=True)
        (d / "sys" / "devices" / "system" / "node" / ("node%d" % n) / "cpulist").write_text(c + "\n")
    q = (H200 / "nvidia-smi-q.txt").read_text()
    head, gpu = q.split("\nGPU ", 1)
    second = (
        ("GPU " + gpu)
        .replace("00000000:00:06.0", "00000000:00:07.0")
        .replace(
            "Minor Number                                       : 0",
            "Minor Number                                       : 1",
        )
    )
    (d / "nvidia-smi-q.txt").write_text(head.replace(": 1\n", ": 2\n", 1) + "\nGPU " + gpu.rstrip("\n") + "\n" + second)
    c0 = numa[min(numa)]
    (d / "nvidia-smi-topo-m.txt").write_text(
        "\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\n"
        "GPU0\t X \tPHB\t%s\t%d\t\tN/A\nGPU1\tPHB\t X \t%s\t%d\t\tN/A\n" % (c0, min(numa), c0, min(numa))
    )
    for addr in ("0000:00:06.0", "0000:00:07.0"):
        dev = d / "sys" / "bus" / "pci" / "devices" / addr
        dev.mkdir(parents=True)
        for f, v in (("vendor", "0x10de"), ("class", "0x030200"), ("numa_node", str(min(numa))), ("local_cpulist", c0)):
            (dev / f).write_text(v + "\n")
    os.chmod(str(tmp), 0o755)
    return d


def bin_wrapper(tmp: Path, cluster) -> Path:
    """SLURMGPU_BIN for the job: this checkout's slurmgpu under the job's Python (one word)."""
    argv = job_slurmgpu(cluster)
    w = tmp / "slurmgpu"
    if argv[0] == "env":  # a chroot release: env PYTHONPATH=... python -m slurmgpu.cli
        w.write_text('#!/bin/sh\nexec %s "$@"\n' % " ".join(argv))
    else:
        w.write_text('#!/bin/sh\nPYTHONPATH=%s exec %s -m slurmgpu.cli "$@"\n' % (ROOT, sys.executable))
    w.chmod(0o755)
    return w


def run_generated(cluster, tmp: Path, task_plugin_note: str):
    numa, cpus = this_machine()
    part = next(p for p in cluster.partitions if p.default)
    site = write_site(tmp, part.name, len(part.nodes), cluster.release.major, numa, cpus)
    fixture = write_fixture(tmp, numa)
    out_dir = tmp / "ranks"
    out_dir.mkdir()
    env = clean_env(cluster, {"PYTHONPATH": str(ROOT)})
    gen = subprocess.run(
        [sys.executable, "-m", "slurmgpu.cli", "gen", "--site", str(site), "--launcher", "srun", "--nodes",
         str(len(part.nodes)), "--stdout", str(tmp / "job-%j.out"), "--", WORKER, "--out", str(out_dir)],
        capture_output=True, text=True, timeout=120, env=env, cwd=str(tmp),
    )  # fmt: skip
    assert gen.returncode == 0, gen.stderr
    script = gen.stdout
    path = tmp / "job.sh"
    path.write_text(script)
    job_env = clean_env(
        cluster,
        {
            "PYTHONPATH": str(ROOT),
            "SLURMGPU_PROBE_FIXTURE": str(fixture),
            "SLURMGPU_BIN": str(bin_wrapper(tmp, cluster)),
        },
    )
    port = re.search(r"^MASTER_PORT=\$\(\((\d+) \+ SLURM_JOB_ID % (\d+)\)\)$", script, re.M)
    for _ in range(5):
        p = subprocess.run(["sbatch", "--parsable", "-H", str(path)], capture_output=True, text=True, timeout=120,
                           env=job_env, cwd=str(tmp))  # fmt: skip
        assert p.returncode == 0, p.stderr
        job = int(p.stdout.strip().split(";")[0])
        if _port_free(int(port.group(1)) + job % int(port.group(2))):
            break
        subprocess.run(["scancel", str(job)], env=job_env, timeout=60)
    subprocess.run(["scontrol", "release", str(job)], env=job_env, timeout=60, check=True)
    res = cluster.wait_job(job, timeout=240)
    out = (tmp / ("job-%d.out" % job)).read_text() if (tmp / ("job-%d.out" % job)).exists() else (res.stdout or "")
    ranks = [json.loads(f.read_text()) for f in sorted(out_dir.glob("rank-*.json"))]
    return script, res, out, ranks


def need_python(cluster):
    if cluster.in_chroot and not job_python_has(cluster, "yaml"):
        pytest.skip("the Slurm %s chroot's Python lacks PyYAML for slurmgpu in the job" % cluster.release.major)


def shape(cpus: int):
    return (
        testcluster.Partition("aff", ("af01", "af02"), "h200", GPUS, cpus_per_node=cpus, memory_mb=8000, default=True),
    )


def test_every_rank_runs_where_the_site_map_says(new_cluster, tmp_path):
    n = len(os.sched_getaffinity(0))
    cluster = new_cluster(shape(n), task_plugin="task/affinity")
    try:
        cluster.start()
    except testcluster.ClusterError as e:
        pytest.fail("Slurm %s test cluster did not start: %s" % (cluster.release.major, e), pytrace=False)
    try:
        need_python(cluster)
        script, res, out, ranks = run_generated(cluster, tmp_path, "task/affinity")
    finally:
        cluster.stop()
    assert "--cpu-bind=mask_cpu:" in script and "--ranks srun --record" in script
    assert res.state == "COMPLETED", (res.state, out)
    assert re.search(r"slurmgpu preflight: 2 nodes, all checks passed", out), out
    from slurmgpu.site import load_site

    amap = load_site(str(tmp_path / "site.yaml")).node_type_of().affinity
    assert len(ranks) == 2 * GPUS, out
    for r in ranks:
        assert r["cpus"] == list(amap.gpus[r["local"]].cpus), (r, out)  # GPU 0 on the second CPU: our mask
    print("ranks:", [(r["node"], r["local"], r["cpus"]) for r in ranks])


def test_preflight_stops_a_job_whose_ranks_are_not_bound(new_cluster, tmp_path):
    """task/none: Slurm ignores --cpu-bind, every rank may run anywhere; preflight names the ranks and the fix."""
    n = len(os.sched_getaffinity(0))
    cluster = new_cluster(shape(n), task_plugin="task/none")
    try:
        cluster.start()
    except testcluster.ClusterError as e:
        pytest.fail("Slurm %s test cluster did not start: %s" % (cluster.release.major, e), pytrace=False)
    try:
        need_python(cluster)
        script, res, out, ranks = run_generated(cluster, tmp_path, "task/none")
    finally:
        cluster.stop()
    assert res.state == "FAILED" and res.exit_code == 1, (res.state, out)
    assert "preflight failed on this allocation; the launcher was not started" in out
    assert ranks == [], "the launcher ran although preflight failed"
    rows = [ln for ln in out.splitlines() if " affinity " in ln and "FAIL" in ln]
    assert len(rows) >= 2 * GPUS - 1, out  # every rank's own row (identical rows of two nodes merge)
    assert "fix: Slurm did not apply the job's --cpu-bind=mask_cpu" in out and "TaskPlugin" in out


def test_the_controller_warns_an_unbound_multi_node_job(slurm_cluster, job_submit, tmp_path):
    """Rule unbound-ranks in the job_submit.lua slurmctld runs: the test cluster's site with a verified
    two-NUMA-node map on partition gpu warns a job that binds nothing, not one that binds."""
    from dataclasses import replace

    from slurmgpu.policy import render_filter
    from slurmgpu.site import load_site

    text = (ROOT / "tests" / "data" / "sites" / "testcluster.yaml").read_text()
    text = text.replace(
        "    socket_ifname: lo\n",
        "    socket_ifname: lo\n    affinity:\n      source: test\n      verified: true\n"
        '      numa: {0: "0-7", 1: "8-15"}\n      gpus: [{numa: 0}, {numa: 0}, {numa: 0}, {numa: 0}, '
        "{numa: 1}, {numa: 1}, {numa: 1}, {numa: 1}]\n",
        1,
    )
    p = tmp_path / "site.yaml"
    p.write_text(text)
    site = load_site(str(p))
    job_submit(render_filter(replace(site, slurm_version=slurm_cluster.release.version), "job_submit"))
    head = "#!/bin/bash\n#SBATCH -N2 --gpus-per-node=8 -H\nexport NCCL_SOCKET_IFNAME=lo\n"
    rc, _, err = slurm_cluster.sbatch(head + "srun python train.py --tensor-model-parallel-size 8\n")
    assert rc == 0, err
    assert "sbatch: slurmgpu: multi-node job on partition 'gpu' binds no rank to CPUs, and its nodes have 2 NUMA" in err
    rc, _, err = slurm_cluster.sbatch(head + "srun --cpu-bind=map_ldom:0,0,0,0,1,1,1,1 python train.py\n")
    assert rc == 0 and "binds no rank" not in err, err
