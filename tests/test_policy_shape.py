"""Filter rules the case files cannot reach through a release's sbatch, checked on the job_desc the
rule reads (the same rendered policy as every case, through lupa).

* The node count from tasks x --cpus-per-task and from --nodelist: sbatch also fills min_cpus and
  min_nodes, so a case file never sees these terms alone; a job_desc without them does (what
  `scontrol update` leaves when only CPUsPerTask or ReqNodeList change, and a SPANK step).
* sbatch --external (25.05+) and a GPU request the filter cannot read: the local 22.05/24.11
  sbatch refuses both before any filter runs, so the real-cluster case runners could not carry them.
"""

from __future__ import annotations

from dataclasses import replace

from slurmgpu.policy import PolicyRunner
from slurmgpu.site import load_site, preset_dir
from slurmgpu.slurm import job_desc

SCRIPT = (
    "#!/bin/bash\nexport NCCL_IB_HCA==mlx5_0,mlx5_3\nexport NCCL_SOCKET_IFNAME=bond0\n"
    "srun python pretrain_gpt.py --tensor-model-parallel-size %d\n"
)


def _runner(version: str = "23.11") -> PolicyRunner:
    return PolicyRunner(replace(load_site(str(preset_dir() / "dgx-h100.yaml")), slurm_version=version), backend="lupa")


def test_tasks_times_cpus_per_task_count_nodes_without_min_cpus():
    """-n 2 -c 200 on 224-CPU nodes is 400 CPUs: two nodes, so TP=16 runs across them."""
    desc = job_desc(SCRIPT % 16, ["-n", "2", "-c", "200", "--gpus-per-node=8"])
    desc.pop("min_cpus")
    v = _runner().evaluate_desc(desc)
    assert v.decision == "reject" and "tp-exceeds-domain" in v.rules
    assert any("this 2-node job would run tensor-parallel ranks 0-15 across nodes 0-1" in m for m in v.messages)
    assert [s.nodes for s in v.shapes] == [2]
    one = job_desc(SCRIPT % 16, ["-n", "2", "-c", "100", "--gpus-per-node=8"])  # 200 CPUs: one node
    one.pop("min_cpus")
    assert [s.nodes for s in _runner().evaluate_desc(one).shapes] == [1]


def test_a_nodelist_counts_its_hosts_without_min_nodes():
    desc = job_desc(SCRIPT % 16, ["-w", "dgx[01-02]", "--gpus-per-node=8"])
    desc.pop("min_nodes")
    v = _runner().evaluate_desc(desc)
    assert any("this 2-node job would run tensor-parallel ranks 0-15 across nodes 0-1" in m for m in v.messages)
    assert [s.nodes for s in v.shapes] == [2]


def test_an_external_multi_node_gpu_job_is_refused():
    """sbatch --external (25.05+) brings no script or environment: nothing can clear its layout."""
    v = _runner("25.05").check(SCRIPT % 8, ["--external", "-N2", "--gpus-per-node=8"], user="root", uid=0)
    assert v.decision == "reject" and "external-gpu-job" in v.rules
    one = _runner("25.05").check(SCRIPT % 8, ["--external", "-N1", "--gpus-per-node=8"], user="root", uid=0)
    assert "external-gpu-job" not in one.rules


def test_an_unreadable_gpu_request_refuses_a_multi_node_tp_job_and_warns_otherwise():
    args = ["-N2", "--gres=gpu:h100:8:x"]
    v = _runner().check(SCRIPT % 8, args)
    assert v.decision == "reject" and "gpu-request-unreadable" in v.rules, v.messages
    single = _runner().check(SCRIPT % 1, args)
    assert single.decision == "accept" and any("cannot read the GPU request" in w for w in single.warnings)


def test_a_host_named_twice_in_a_nodelist_is_one_node():
    """Slurm keeps one of each host in --nodelist (dgx01,dgx01 is one node), so the filter counts one:
    counting names would make this one-node job a two-node one."""
    desc = job_desc(SCRIPT % 8, ["-w", "dgx01,dgx01", "--gpus-per-node=8"])
    desc.pop("min_nodes")
    v = _runner().evaluate_desc(desc)
    assert [s.nodes for s in v.shapes] == [1]
    two = job_desc(SCRIPT % 8, ["-w", "dgx01,dgx02,dgx01", "--gpus-per-node=8"])
    two.pop("min_nodes")
    assert [s.nodes for s in _runner().evaluate_desc(two).shapes] == [2]
    # a bracket range and a plain name of the same host: two hosts, not three
    mixed = job_desc(SCRIPT % 8, ["-w", "dgx01,dgx[01-02]", "--gpus-per-node=8"])
    mixed.pop("min_nodes")
    assert [s.nodes for s in _runner().evaluate_desc(mixed).shapes] == [2]
