"""slurmgpu probe on recorded nodes (tests/data/probe, see its README) and on this machine."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from slurmgpu.cli import main
from slurmgpu.node import (
    Gpu,
    Nic,
    ProbeResult,
    classify,
    describe,
    implied_nccl_env,
    nvlink_summary,
    parse_nvidia_smi_q,
    parse_rocm_smi_json,
    parse_topo_matrix,
    probe,
    read_net_psutil,
    read_net_sysfs,
    read_rdma,
)
from slurmgpu.site import load_site, preset_dir
from slurmgpu.slurm import NOT_FOUND, CommandResult

PROBE = Path(__file__).parent / "data" / "probe"
NODES = sorted(p.name for p in PROBE.iterdir() if p.is_dir())


class DirRunner:
    """Answers commands from a recorded node: `nvidia-smi topo -m` -> nvidia-smi-topo-m.txt."""

    def __init__(self, d):
        self.d = Path(d)
        self.calls = []

    def run(self, argv, timeout=60.0):
        self.calls.append(tuple(argv))
        f = self.d / ("-".join(a.lstrip("-") for a in argv) + ".txt")
        if f.exists():
            return CommandResult(tuple(argv), 0, f.read_text(), "")
        return CommandResult(tuple(argv), NOT_FOUND, "", "%s: command not found" % argv[0])


def probed(node: str) -> ProbeResult:
    d = PROBE / node
    return probe(str(d / "sys"), DirRunner(d), hostname=node)


def preset(name: str, node_type: str):
    return load_site(str(preset_dir() / (name + ".yaml"))).node_types[node_type]


# ---------------------------------------------------------------------------
# parsers


@pytest.mark.parametrize(
    "node, name, mib",
    [
        ("dgx-h100", "NVIDIA H100 80GB HBM3", 81559),
        ("roce-a100", "NVIDIA A100-SXM4-80GB", 81920),
        ("efa-p5", "NVIDIA H100 80GB HBM3", 81559),
        ("pcie-l40s", "NVIDIA L40S", 46068),
    ],
)
def test_nvidia_smi_q(node, name, mib):
    gpus = parse_nvidia_smi_q((PROBE / node / "nvidia-smi-q.txt").read_text())
    assert [g.index for g in gpus] == list(range(8))
    assert {(g.name, g.memory_mib, g.vendor) for g in gpus} == {(name, mib, "nvidia")}
    assert len({g.bus_id for g in gpus}) == 8


def test_topo_new_format_resolves_nic_legend():
    t = parse_topo_matrix((PROBE / "dgx-h100" / "nvidia-smi-topo-m.txt").read_text())
    assert t.gpus == tuple("GPU%d" % i for i in range(8))
    assert t.nics == tuple("mlx5_%d" % i for i in range(12))
    assert t.link("GPU0", "mlx5_0") == "PXB" and t.link("GPU5", "mlx5_9") == "PXB"
    assert t.link("GPU0", "GPU7") == "NV18" and t.link("mlx5_1", "mlx5_2") == "PIX"
    for a in t.devices:  # the matrix is symmetric
        for b in t.devices:
            assert t.link(a, b) == t.link(b, a)


def test_topo_old_format_names_hcas_in_header():
    t = parse_topo_matrix((PROBE / "roce-a100" / "nvidia-smi-topo-m.txt").read_text())
    assert t.nics == tuple("mlx5_%d" % i for i in range(8))
    assert t.link("GPU3", "mlx5_3") == "PXB" and t.link("GPU3", "mlx5_5") == "SYS"


@pytest.mark.parametrize(
    "node, want",
    [
        ("dgx-h100", ("nvlink", 8, 18)),
        ("roce-a100", ("nvlink", 8, 12)),
        ("efa-p5", ("nvlink", 8, 18)),
        ("pcie-l40s", ("pcie", 1, None)),
    ],
)
def test_nvlink_summary(node, want):
    assert nvlink_summary(parse_topo_matrix((PROBE / node / "nvidia-smi-topo-m.txt").read_text())) == want


def test_nvlink_bridge_pairs_make_domains_of_two():
    text = (
        "\tGPU0\tGPU1\tGPU2\tGPU3\tCPU Affinity\tNUMA Affinity\n"
        "GPU0\t X \tNV4\tSYS\tSYS\t0-31\t0\n"
        "GPU1\tNV4\t X \tSYS\tSYS\t0-31\t0\n"
        "GPU2\tSYS\tSYS\t X \tNV4\t32-63\t1\n"
        "GPU3\tSYS\tSYS\tNV4\t X \t32-63\t1\n\nLegend:\n"
    )
    assert nvlink_summary(parse_topo_matrix(text)) == ("nvlink", 2, 4)


def test_topo_with_colours_and_no_header_fails_clearly():
    with pytest.raises(ValueError, match="no device header"):
        parse_topo_matrix("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.")
    coloured = (PROBE / "pcie-l40s" / "nvidia-smi-topo-m.txt").read_text().replace("PIX", "\x1b[32mPIX\x1b[0m")
    assert nvlink_summary(parse_topo_matrix(coloured)) == ("pcie", 1, None)


def test_rocm_smi_json_reconstructed():
    # Reconstructed from rocm-smi's key names, not a recording: the AMD path is untested against hardware.
    doc = {
        "card0": {"Card Series": "AMD Instinct MI300X", "VRAM Total Memory (B)": str(192 * 2**30)},
        "card1": {"Card series": "AMD Instinct MI300X", "VRAM Total Memory (B)": str(192 * 2**30)},
        "system": {"Driver version": "6.7.0"},
    }
    gpus = parse_rocm_smi_json(json.dumps(doc))
    assert [(g.index, g.name, g.vendor, g.memory_mib) for g in gpus] == [
        (0, "AMD Instinct MI300X", "amd", 192 * 1024),
        (1, "AMD Instinct MI300X", "amd", 192 * 1024),
    ]
    assert parse_rocm_smi_json("not json") == []


def test_read_rdma_kinds():
    assert {(p.kind, p.link_layer) for p in read_rdma(str(PROBE / "dgx-h100" / "sys"))} == {
        ("infiniband", "InfiniBand"),
        ("roce", "Ethernet"),
    }
    efa = read_rdma(str(PROBE / "efa-p5" / "sys"))
    assert len(efa) == 32 and {(p.kind, p.link_layer, p.gbps, p.vendor_id) for p in efa} == {
        ("efa", "Unknown", 100.0, "0x1d0f")
    }
    assert read_rdma(str(PROBE / "pcie-l40s" / "sys")) == []
    ib0 = next(p for p in read_rdma(str(PROBE / "dgx-h100" / "sys")) if p.device == "mlx5_0")
    assert (ib0.state, ib0.gbps, ib0.netdevs) == ("ACTIVE", 400.0, ("ibp24s0",))


# ---------------------------------------------------------------------------
# whole nodes


def test_dgx_h100_matches_the_preset():
    r = probed("dgx-h100")
    want = preset("dgx-h100", "dgx-h100")
    assert r.fabric == want.fabric == "infiniband"
    assert [n.name for n in r.nics if n.role == "compute"] == [n.name for n in want.compute_nics]
    assert sorted(n.name for n in r.nics if n.role == "storage") == sorted(
        n.name for n in want.nics if n.role == "storage"
    )
    assert sum(n.gbps for n in r.nics if n.role == "compute") == want.fabric_gbps == 3200
    assert r.socket_ifname == "bond0" and (r.link, r.nvlink_domain, r.nvlinks_per_gpu) == ("nvlink", 8, 18)
    assert r.nccl_env["NCCL_IB_HCA"] == "=" + ",".join(n.name for n in want.compute_nics)


def test_roce_node():
    r = probed("roce-a100")
    assert r.fabric == "roce"
    assert [(n.name, n.link_layer, n.gbps, n.role) for n in r.nics] == [
        ("mlx5_%d" % i, "ethernet", 200.0, "compute") for i in range(8)
    ]
    assert r.socket_ifname == "eth0"
    assert r.nccl_env["NCCL_IB_HCA"] == "=" + ",".join("mlx5_%d" % i for i in range(8))


def test_efa_node():
    r = probed("efa-p5")
    assert r.fabric == "efa" and len(r.nics) == 32 and all(n.role == "compute" for n in r.nics)
    assert sum(n.gbps for n in r.nics) == 3200
    assert r.socket_ifname == "ens32" and r.nccl_env["NCCL_NET"] == "AWS Libfabric"
    assert "NCCL_IB_HCA" not in r.nccl_env


def test_pcie_node():
    r = probed("pcie-l40s")
    assert (r.link, r.nvlink_domain, r.fabric, r.nics, r.socket_ifname) == ("pcie", 1, "ethernet", (), "eth0")
    assert any("no RDMA devices" in m for m in r.missing)
    assert r.nccl_env == {"NCCL_SOCKET_IFNAME": "eth0"}


@pytest.mark.parametrize("node", NODES)
def test_json_round_trip(node):
    r = probed(node)
    back = ProbeResult.from_dict(json.loads(r.to_json()))
    assert back == r
    assert describe(back) == describe(r)


def test_down_port_is_left_out(tmp_path):
    sysfs = tmp_path / "sys"
    shutil.copytree(PROBE / "roce-a100" / "sys", sysfs)
    (sysfs / "class/infiniband/mlx5_3/ports/1/state").write_text("1: DOWN\n")
    r = probe(str(sysfs), DirRunner(PROBE / "roce-a100"), hostname="x")
    assert "mlx5_3" not in [n.name for n in r.nics] and len(r.nics) == 7
    assert any("mlx5_3:1 is DOWN" in m for m in r.missing)


def test_slingshot_node(tmp_path):
    sysfs = tmp_path / "sys"
    for i in range(4):
        d = sysfs / "class" / "net" / ("hsn%d" % i)
        d.mkdir(parents=True)
        (d / "operstate").write_text("up\n")
        (d / "speed").write_text("200000\n")
        (d / "type").write_text("1\n")
        (sysfs / "class" / "cxi" / ("cxi%d" % i)).mkdir(parents=True)
    r = probe(str(sysfs), DirRunner(tmp_path), hostname="nid001")
    assert r.fabric == "slingshot" and r.socket_ifname == "hsn" and r.nics == ()
    assert r.nccl_env["NCCL_NET"] == "AWS Libfabric" and r.nccl_env["NCCL_NET_GDR_LEVEL"] == "PHB"
    assert r.cxi_devices == ("cxi0", "cxi1", "cxi2", "cxi3")


def test_geforce_needs_p2p_off():
    env = implied_nccl_env("ethernet", [], "eth0", [Gpu(0, "NVIDIA GeForce RTX 4090", "nvidia", 24564)])
    assert env["NCCL_P2P_DISABLE"] == "1"
    assert "NCCL_P2P_DISABLE" not in implied_nccl_env("ethernet", [], "eth0", [Gpu(0, "NVIDIA L40S", "nvidia")])


def test_ib_hca_names_a_port_only_when_not_the_first():
    env = implied_nccl_env(
        "infiniband",
        [
            Nic("mlx5_0", 1, "infiniband", 400, "compute"),
            Nic("mlx5_1", 2, "infiniband", 400, "compute"),
            Nic("mlx5_2", 1, "ethernet", 100, "storage"),
        ],
        None,
        [],
    )
    assert env == {"NCCL_IB_HCA": "=mlx5_0,mlx5_1:2"}


def test_classify_without_topology_keeps_all_ib_ports():
    rdma = read_rdma(str(PROBE / "dgx-h100" / "sys"))
    fabric, nics, ifname, _ = classify(rdma, read_net_sysfs(str(PROBE / "dgx-h100" / "sys")), (), None)
    assert fabric == "infiniband" and ifname == "bond0"
    assert len([n for n in nics if n.role == "compute"]) == 8  # the IB ones; Ethernet ports carry storage


# ---------------------------------------------------------------------------
# this machine


def test_probe_runs_here():
    r = probe()
    assert r.hostname
    assert any(i.kind == "loopback" for i in r.interfaces) or r.interfaces
    if shutil.which("nvidia-smi") is None:
        assert r.gpus == () and any(m.startswith("nvidia-smi: command not found") for m in r.missing)
    if not os.path.isdir("/sys/class/infiniband"):
        assert r.rdma == () and any("no RDMA devices" in m for m in r.missing)
    assert "not found / left out" in describe(r) or not r.missing


def test_psutil_and_sysfs_readers_agree_here():
    if not os.path.isdir("/sys/class/net"):
        pytest.skip("no /sys/class/net")
    a = {i.name: (i.up, i.kind) for i in read_net_psutil()}
    b = {i.name: (i.up, i.kind) for i in read_net_sysfs("/sys")}
    assert set(a) == set(b)
    assert {n: k for n, (_, k) in a.items()} == {n: k for n, (_, k) in b.items()}


def test_cli_probe_json_on_recorded_sysfs():
    r = CliRunner().invoke(main, ["probe", "--json", "--sysfs", str(PROBE / "dgx-h100" / "sys")])
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    assert len(d["rdma"]) == 12 and d["fabric"] == "infiniband"


def test_cli_probe_help():
    r = CliRunner().invoke(main, ["probe", "--help"])
    assert r.exit_code == 0 and "srun -N1" in r.output and "Examples:" in r.output


def test_probe_and_site_share_one_nic_type():
    import importlib

    from slurmgpu import site as S

    P = importlib.import_module("slurmgpu.node.probe")  # the module (the face's `probe` is the function)

    assert P.Nic is S.Nic
    r = probed("dgx-h100")
    assert all(isinstance(n, S.Nic) for n in r.nics)


# -- the Fabric section (multi-node NVLink: GB200 NVL72) ---------------------------------------


def test_gb200_fabric_section_gives_the_nvlink_domain():
    d = PROBE / "gb200-rack1"
    gpus = parse_nvidia_smi_q((d / "nvidia-smi-q.txt").read_text())
    assert [(g.fabric_state, g.fabric_status, g.clique_id) for g in gpus] == [("Completed", "Success", "32766")] * 4
    assert {g.cluster_uuid for g in gpus} == {"5d3c2b1a-9e8f-4a7b-8c6d-1e2f3a4b5c6d"}
    r = probe(str(d / "sys"), DirRunner(d), hostname="gb01", devroot=str(d / "dev"))
    assert r.nvlink_clique == "5d3c2b1a-9e8f-4a7b-8c6d-1e2f3a4b5c6d/32766" and r.imex_channels == ("channel0",)
    assert "ClusterUUID/CliqueId" in describe(r)
    other = probe(str(PROBE / "gb200-rack2" / "sys"), DirRunner(PROBE / "gb200-rack2"), hostname="gb19")
    assert other.nvlink_clique and other.nvlink_clique != r.nvlink_clique
    assert any("no IMEX channel" in m for m in other.missing)  # devroot /dev here has none


def test_nodes_without_multi_node_nvlink_report_no_domain(tmp_path):
    assert probed("dgx-h100").nvlink_clique is None  # no Fabric section at all (driver 535 fixture)
    d = tmp_path / "n"
    shutil.copytree(PROBE / "gb200-rack1", d)
    q = d / "nvidia-smi-q.txt"
    text = q.read_text()
    # single-node NVSwitch systems: N/A, or an all-zero ClusterUUID
    for uuid in ("N/A", "00000000-0000-0000-0000-000000000000"):
        q.write_text(text.replace("5d3c2b1a-9e8f-4a7b-8c6d-1e2f3a4b5c6d", uuid))
        r = probe(str(d / "sys"), DirRunner(d), hostname="x", devroot=str(d / "dev"))
        assert r.nvlink_clique is None and not any("NVLink" in m for m in r.missing)


def test_gpus_disagreeing_on_the_domain_is_a_note(tmp_path):
    d = tmp_path / "n"
    shutil.copytree(PROBE / "gb200-rack1", d)
    q = d / "nvidia-smi-q.txt"
    text = q.read_text()
    last = text.rfind("CliqueId                          : 32766")
    q.write_text(text[:last] + text[last:].replace(": 32766", ": 7", 1))
    r = probe(str(d / "sys"), DirRunner(d), hostname="x", devroot=str(d / "dev"))
    assert r.nvlink_clique is None and any("different NVLink domains" in m for m in r.missing)
