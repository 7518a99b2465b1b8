"""`probe` reads a node's GPU -> NUMA node -> CPUs -> NIC map, and `discover --probe` writes it into the
site draft (issue 30). Recorded nodes (tests/data/probe, README there): a real single-GPU H200 VM
capture (h200-vm), and nodes written in the tools' real output formats from public facts: DGX H100,
DGX B200, GB200 trays without CDMM (rack1: HBM as CPU-less NUMA nodes 2, 10, 18, 26) and with
CDMM, a Frontier-like MI250X node (rocm-smi --showtoponuma) and an Alps-like GH200 node."""

from __future__ import annotations

import pytest

from slurmgpu.node.affinity import PciPlace, gpu_places, read_gpu_places, read_numa_nodes
from slurmgpu.node.preflight import FixtureRunner
from slurmgpu.node.probe import (
    ProbeResult,
    affinity_map,
    describe,
    parse_rocm_toponuma,
    parse_topo_matrix,
    probe,
    read_net_sysfs,
)
from slurmgpu.site import format_cpulist, load_site, preset_dir
from tests.test_discover import DATA, DirRunner, Replay, _site, build_draft, read_cluster

PROBE = DATA / "probe"


def probe_of(name):
    d = PROBE / name
    return probe(
        str(d / "sys"), FixtureRunner(str(d)), hostname=name, net_reader=read_net_sysfs, devroot=str(d / "dev")
    )


def preset_map(name):
    return load_site(str(preset_dir() / (name + ".yaml"))).node_type_of().affinity


def summary(amap):
    return [(g.numa, format_cpulist(g.cpus), g.nics, g.memory_numa) for g in amap.gpus]


@pytest.mark.parametrize(
    "node,preset",
    [("dgx-h100", "dgx-h100"), ("gb200-rack1", "gb200-nvl72"), ("gb200-cdmm", "gb200-nvl72"), ("gh200", "alps-gh200")],
)
def test_probe_gives_the_presets_map(node, preset):
    got, want = affinity_map(probe_of(node)), preset_map(preset)
    assert got is not None and got.verified and got.source == "slurmgpu probe on %s" % node
    assert [s[:3] for s in summary(got)] == [s[:3] for s in summary(want)]


def test_grace_without_cdmm_keeps_cpu_nodes_and_names_the_memory_nodes():
    """NVML's "GPU NUMA ID" (2, 10, 18, 26) is the HBM's CPU-less node: binding must use 0/1 (vllm#39361)."""
    r = probe_of("gb200-rack1")
    assert [(p.numa, p.memory_numa) for p in r.gpu_places] == [(0, 2), (0, 10), (1, 18), (1, 26)]
    assert [p.numa for p in probe_of("gb200-cdmm").gpu_places] == [0, 0, 1, 1]
    assert all(p.memory_numa is None for p in probe_of("gb200-cdmm").gpu_places)
    assert len(r.numa_nodes) == 34 and [n for n, c in r.numa_nodes if c] == [0, 1]
    assert "GPU0 0008:06:00.0  NUMA 0  CPUs 0-71  NIC mlx5_0  (memory on CPU-less NUMA 2)" in describe(r)


def test_a_gpu_whose_pci_node_has_no_cpus_is_placed_by_its_local_cpus(tmp_path):
    numa = {0: (0, 1, 2, 3), 1: (4, 5, 6, 7), 2: ()}
    d = tmp_path / "sys" / "bus" / "pci" / "devices" / "0000:01:00.0"
    d.mkdir(parents=True)
    for f, v in (("vendor", "0x10de"), ("class", "0x030200"), ("numa_node", "2"), ("local_cpulist", "4-7")):
        (d / f).write_text(v + "\n")
    p = gpu_places(str(tmp_path / "sys"), [], numa, {}, {}, {}, [])
    assert (p[0].numa, p[0].cpus, p[0].memory_numa) == (1, "4-7", 2)
    assert PciPlace("x", None, ()).cpu_node({0: (0, 1)}) == 0  # one node with CPUs: numa_node -1 means it
    assert PciPlace("x", None, ()).cpu_node({0: (0,), 1: (1,)}) is None  # two: not known, not guessed


def test_mi250x_from_sysfs_and_rocm_smi_toponuma():
    r = probe_of("mi250x")
    assert r.gpu_tool == "rocm-smi" and len(r.gpus) == 8
    got = affinity_map(r)
    assert [g.numa for g in got.gpus] == [3, 3, 1, 1, 0, 0, 2, 2]  # OLCF's GCD -> NUMA table
    assert [g.numa for g in got.gpus] == [g.numa for g in preset_map("frontier").gpus]
    assert got.gpus[0].nics == ("cxi3",)  # the Slingshot NIC on the same NUMA node
    assert "rocm-smi --showtoponuma: 8 GPUs" in r.found
    # the rocm-smi text alone (its real format: ROCm/legacy-rocm-build#4740)
    text = (PROBE / "mi250x" / "rocm-smi-showtoponuma.txt").read_text()
    assert parse_rocm_toponuma(text) == {0: 3, 1: 3, 2: 1, 3: 1, 4: 0, 5: 0, 6: 2, 7: 2}
    assert parse_rocm_toponuma("GPU[0]\t\t: (Topology) Numa Node: -1\n") == {}


def test_amd_gpus_not_in_sysfs_are_placed_by_rocm_smi(tmp_path):
    import shutil

    shutil.copytree(PROBE / "mi250x", tmp_path / "n")
    shutil.rmtree(tmp_path / "n" / "sys" / "bus")
    d = tmp_path / "n"
    r = probe(str(d / "sys"), FixtureRunner(str(d)), hostname="n", net_reader=read_net_sysfs, devroot=str(d / "dev"))
    assert [p.numa for p in r.gpu_places] == [3, 3, 1, 1, 0, 0, 2, 2]
    assert all(p.source.startswith("GPU tool") for p in r.gpu_places)


def test_a_node_without_sysfs_numa_uses_the_topology_columns():
    r = probe_of("efa-p5")
    assert any("CPU and NUMA Affinity columns" in f for f in r.found)
    got = affinity_map(r)
    assert format_cpulist(got.gpus[7].cpus) == "48-95,144-191" and len(got.gpus[0].nics) == 4


def test_the_real_h200_capture():
    """Recorded on a one-GPU H200 VM (driver 580.159.04): numa_node -1, one NUMA node, topo -m with
    the CPU/NUMA/GPU NUMA ID columns."""
    r = probe_of("h200-vm")
    assert [(g.name, g.bus_id) for g in r.gpus] == [("NVIDIA H200", "00000000:00:06.0")]
    assert r.topology.affinity == {"GPU0": {"CPU Affinity": "0-15", "NUMA Affinity": "0", "GPU NUMA ID": "N/A"}}
    got = affinity_map(r, gpus=1)
    assert summary(got) == [(0, "0-15", (), None)] and not got.multi_numa
    assert affinity_map(r, gpus=8) is None  # Slurm's GRES disagrees with what the node has


def test_topology_columns_of_older_and_newer_drivers():
    old = "\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \tNV4\t0-19\nGPU1\tNV4\t X \t0-19\n"
    t = parse_topo_matrix(old)
    assert t.affinity == {"GPU0": {"CPU Affinity": "0-19"}, "GPU1": {"CPU Affinity": "0-19"}}
    assert t.numa_of("GPU0") is None
    t = parse_topo_matrix((PROBE / "dgx-h100" / "nvidia-smi-topo-m.txt").read_text())
    assert t.numa_of("GPU5") == 1 and t.nearest_nics("GPU5") == ("mlx5_9",)
    assert t.affinity["NIC0" if "NIC0" in t.affinity else "GPU0"]["CPU Affinity"] == "0-55,112-167"


def test_probe_result_json_round_trip():
    r = probe_of("gb200-rack1")
    back = ProbeResult.from_dict(r.to_dict())
    assert back.gpu_places == r.gpu_places and back.numa_nodes == r.numa_nodes
    assert back.topology.affinity == r.topology.affinity


def test_sysfs_readers_on_this_machine():
    """The live readers on the real /sys of whatever runs the tests: every CPU this process may use
    is on some NUMA node that sysfs lists."""
    import os

    numa = read_numa_nodes("/sys")
    if not numa:
        pytest.skip("this kernel exposes no /sys/devices/system/node")
    assert set(os.sched_getaffinity(0)) <= {c for cpus in numa.values() for c in cpus}
    assert all(v in ("nvidia", "amd") for v, _ in read_gpu_places("/sys"))


def test_discover_probe_writes_the_map_into_the_draft():
    facts = read_cluster(Replay("23.11.4-reconstructed"))
    node = PROBE / "dgx-h100"
    pr = probe(str(node / "sys"), DirRunner(node), hostname="dgx001")
    d = build_draft(facts, (), {"h100x8": pr})
    v = d.node_types["h100x8"]["affinity"]
    assert not v.todo and "probe of dgx001" in v.comment
    got = _site(d).node_types["h100x8"].affinity  # the draft reads back as a valid site
    assert got.verified and summary(got) == summary(preset_map("dgx-h100"))


def test_discover_without_probe_leaves_the_map_unknown_with_how_to_find_it():
    d = build_draft(read_cluster(Replay("23.11.4-reconstructed")), (), {})
    v = d.node_types["h100x8"]["affinity"]
    assert v.todo and "slurmgpu probe" in v.comment and "find it with:" in v.comment
    assert not _site(d).node_types["h100x8"].affinity.known
