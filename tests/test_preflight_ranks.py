"""`slurmgpu preflight --ranks HOW`: every rank's real CPUs, memory policy, GPU NUMA node and NIC
against the site map, merged into the node table by `--aggregate` (issue 30). The facts come from
recorded nodes (tests/data/probe) where this machine lacks the hardware; CPU affinity is injected
in the pure checks and real in the CLI test (this process's own sched_getaffinity)."""

from __future__ import annotations

import os
import shutil

import pytest
from click.testing import CliRunner

from slurmgpu.cli import main
from slurmgpu.node import preflight as pf
from slurmgpu.node.affinity import PciPlace, RankFacts, check_rank, gather_rank_facts
from slurmgpu.site import RankPlan, load_site, parse_cpulist, preset_dir
from tests.test_discover import DATA

H100 = str(DATA / "probe" / "dgx-h100")
GB200 = str(DATA / "probe" / "gb200-rack1")


def site(name="dgx-h100"):
    return load_site(str(preset_dir() / (name + ".yaml")))


def env(local, fixture=H100, **more):
    e = {
        "SLURMD_NODENAME": "dgx001",
        "SLURM_LOCALID": str(local),
        "SLURM_PROCID": str(8 + local),
        "PATH": "/nonexistent",
    }
    e[pf.FIXTURE_ENV] = fixture
    e.update(more)
    return e


def cpus(text):
    return lambda: parse_cpulist(text)


def rows(report):
    return [(r.status, r.found) for r in report.results]


def test_a_rank_bound_as_planned_passes():
    rep, key = pf.rank_report(site(), env(5), "srun", affinity=cpus("56-111,168-223"))
    assert key == "dgx001/5"
    assert [s for s, _ in rows(rep)] == ["ok"], rows(rep)
    assert "rank 13 (local 5): CPUs 56-111,168-223, GPU 5 on NUMA node 1, NIC mlx5_9" in rep.results[0].found


def test_an_unbound_rank_fails_with_the_fix():
    rep, _ = pf.rank_report(site(), env(2), "srun", affinity=cpus("0-223"))
    (fail,) = [r for r in rep.results if r.status == "fail"]
    assert fail.found == "rank 10 (local 2): CPUs 0-223" and "CPUs 0-55,112-167 (GPU 2, NUMA node 0)" in fail.expected
    assert "TaskPlugin" in fail.fix and "--cpus-per-task 28" in fail.fix and "task/affinity" in fail.fix


def test_a_rank_on_the_far_socket_fails():
    rep, _ = pf.rank_report(site(), env(0), "srun", affinity=cpus("56-111,168-223"))
    assert [r.status for r in rep.results] == ["fail"]


def test_a_wrong_site_map_is_caught_against_the_nodes_sysfs(tmp_path):
    # the map puts GPU 0 on NUMA node 1; the node's sysfs says its PCI device is on node 0
    text = (
        (preset_dir() / "dgx-h100.yaml")
        .read_text()
        .replace("- {numa: 0, nics: [mlx5_0]}", "- {numa: 1, nics: [mlx5_0]}")
    )
    p = tmp_path / "wrong.yaml"
    p.write_text(text)
    rep, _ = pf.rank_report(load_site(str(p)), env(0), "torchrun", affinity=cpus("0-223"))
    found = [r for r in rep.results if r.status == "fail"]
    assert any("GPU 0 (0000:1b:00.0) sits on NUMA node 0" in r.found and "numa: 0" in r.fix for r in found), rows(rep)


def test_torchrun_on_a_gpu_whose_pci_node_has_no_cpus(tmp_path):
    """Grace without CDMM where the GPU's PCI numa_node is its CPU-less memory node: torch's
    --numa-binding=node would bind to nothing; preflight says so before the launch."""
    shutil.copytree(GB200, tmp_path / "tray")
    (tmp_path / "tray" / "sys" / "bus" / "pci" / "devices" / "0008:06:00.0" / "numa_node").write_text("2\n")
    rep, _ = pf.rank_report(site("gb200-nvl72"), env(0, str(tmp_path / "tray")), "torchrun", affinity=cpus("0-143"))
    fails = [r for r in rep.results if r.status == "fail"]
    assert len(fails) == 1 and "PCI numa_node is 2, which has no CPUs" in fails[0].found
    assert "launcher srun" in fails[0].fix


def test_the_launchers_tool_is_required_where_it_binds():
    rep, _ = pf.rank_report(site(), env(0), "torchrun", affinity=cpus("0-223"))
    (warn,) = [r for r in rep.results if r.status == "warn"]
    assert "numactl not found" in warn.found and "container image" in warn.fix


def facts(**kw):
    base = dict(
        node="n", local=0, rank=0, cpus=(0, 1, 2, 3), mempolicy=("default", ()), mems=(0, 1),
        numa_nodes={0: (0, 1, 2, 3), 1: (4, 5, 6, 7)}, gpu=PciPlace("0000:01:00.0", 0, (0, 1, 2, 3)),
        gpus_found=2, nic_places={"mlx5_0": PciPlace("", 0, ())}, nic_states={"mlx5_0": "ACTIVE"}, tools={},
    )  # fmt: skip
    base.update(kw)
    return RankFacts(**base)


PLAN = RankPlan(local=0, gpu=0, numa=0, cpus=(0, 1, 2, 3), nics=("mlx5_0",))


@pytest.mark.parametrize(
    "change,words",
    [
        ({"mempolicy": ("bind", (1,))}, "memory policy bind to NUMA node 1"),
        ({"mems": (1,)}, "cpuset allows memory on NUMA node 1 only"),
        ({"nic_states": {"mlx5_0": "DOWN"}}, "NIC mlx5_0 is DOWN"),
        ({"nic_places": {"mlx5_0": None}}, "NIC mlx5_0 not found"),
        ({"ib_hca": "=mlx5_1,mlx5_2"}, "NCCL_IB_HCA==mlx5_1,mlx5_2 leaves out mlx5_0"),
        ({"numa_nodes": {0: (0, 1), 1: (4, 5, 6, 7)}}, "NUMA node 0 has CPUs 0-1"),
        ({"numa_nodes": {0: (), 1: (4, 5, 6, 7)}}, "NUMA node 0 has no CPUs here"),
    ],
)
def test_each_mismatch_fails_with_its_own_row(change, words):
    from slurmgpu.site import NodeType

    nt = site().node_type_of()
    assert isinstance(nt, NodeType)
    got = check_rank(facts(**change), PLAN, "srun", True, nt, "s")
    bad = [f for f in got if f.status == "fail"]
    assert len(bad) == 1 and words in bad[0].found and bad[0].fix, got


def test_the_default_memory_policy_and_a_nic_on_another_node():
    nt = site().node_type_of()
    got = check_rank(facts(nic_places={"mlx5_0": PciPlace("", 1, ())}), PLAN, "srun", True, nt, "s")
    assert [f.status for f in got] == ["warn"] and "NIC mlx5_0 sits on NUMA node 1" in got[0].found
    assert [f.status for f in check_rank(facts(), PLAN, "srun", True, nt, "s")] == ["ok"]


def test_rank_records_merge_into_their_nodes_row_and_missing_ranks_fail():
    node, _ = pf.NodeReport("dgx001", "dgx-h100", (pf.CheckResult("dgx001", "gpus", "ok", "8 x H100"),)), None
    lines = [node.record()]
    for local, mask in ((0, "0-55,112-167"), (1, "0-223")):
        rep, key = pf.rank_report(site(), env(local), "srun", affinity=cpus(mask))
        lines.extend(rep.record(key).split("\n"))
    agg = pf.parse_records(lines, ["dgx001"])
    assert [r.node for r in agg.reports] == ["dgx001"] and agg.rank_keys == {"dgx001": ["dgx001/0", "dgx001/1"]}
    assert not agg.ok and [r.check for r in agg.reports[0].results] == ["gpus", "affinity", "affinity"]
    short = pf.check_rank_counts(agg, ["dgx001"], 8)
    assert [(r.status, r.found) for r in short] == [("fail", "2 of 8 ranks reported")]
    table = pf.render_table(agg, "dgx-h100")
    assert "rank 9 (local 1): CPUs 0-223" in table and "fix: Slurm did not apply" in table


def test_gather_reads_this_process():
    f = gather_rank_facts({"SLURM_LOCALID": "0"}, "/sys", None, "here", "srun")
    assert set(f.cpus) == set(os.sched_getaffinity(0)) and f.mempolicy[0] in ("default", "unknown", "local")


def test_cli_rank_record_with_this_processs_real_affinity(tmp_path):
    """The real sched_getaffinity of this process (2 CPUs here) against the DGX H100 plan: a FAIL row."""
    res = CliRunner().invoke(main, ["preflight", "--site", "dgx-h100", "--ranks", "srun", "--record"], env=env(3))
    assert res.exit_code == 1, res.output
    assert res.output.startswith(pf.RECORD_PREFIX + "dgx001/3 1/1 ")
    agg = pf.parse_records(res.output.splitlines(), ["dgx001"])
    (r,) = agg.reports[0].results
    want = "CPUs %s" % __import__("slurmgpu.site", fromlist=["format_cpulist"]).format_cpulist(os.sched_getaffinity(0))
    assert r.status == "fail" and want in r.found


def test_cli_aggregate_counts_the_rank_records(tmp_path):
    lines = pf.NodeReport("dgx001", "dgx-h100", (pf.CheckResult("dgx001", "gpus", "ok", "8 x H100"),)).record()
    src = tmp_path / "records.txt"
    src.write_text(lines + "\n")
    res = CliRunner().invoke(
        main, ["preflight", "--site", "dgx-h100", "--aggregate", str(src), "--nodes", "dgx001", "--ranks-per-node", "8"]
    )
    assert res.exit_code == 1 and "0 of 8 ranks reported" in res.output, res.output
