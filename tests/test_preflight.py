"""Preflight checks on recorded nodes (nvidia-smi output + sysfs trees), aggregation, CLI."""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slurmgpu.node import preflight as pf
from slurmgpu.node import probe, read_net_sysfs
from slurmgpu.site import load_site, preset_dir
from slurmgpu.slurm import parse_hostlist

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROBE = os.path.join(ROOT, "tests", "data", "probe")
DATA = os.path.join(ROOT, "tests", "data", "preflight")
DGX = os.path.join(PROBE, "dgx-h100")
HCA_DOWN = os.path.join(DATA, "dgx-h100-hca-down")
NO_CONTAINER = pf.Options(container_runtime="none")


def preset(name):
    return load_site(str(preset_dir() / (name + ".yaml")))


def facts(d, node="n1"):
    return probe(sysfs=os.path.join(d, "sys"), runner=pf.FixtureRunner(d), hostname=node, net_reader=read_net_sysfs)


def check(site, d, env=None, opts=NO_CONTAINER, node="gpu01", addresses=None):
    env = {"SLURM_NODEID": "1"} if env is None else env  # not the first node unless a test says so
    return pf.run_checks(site, facts(d, node), env, opts, node=node, addresses=addresses)


def rows(rep, check_name=None, status=None):
    return [
        r
        for r in rep.results
        if (check_name is None or r.check == check_name) and (status is None or r.status == status)
    ]


def derived(tmp_path, name="node"):
    """A writable copy of the DGX H100 fixture to break one thing in."""
    d = tmp_path / name
    shutil.copytree(DGX, str(d))
    return d


@pytest.fixture(scope="module")
def dgx():
    return preset("dgx-h100")


# -- a healthy node -----------------------------------------------------------------


def test_healthy_dgx_passes_every_check(dgx):
    rep = check(dgx, DGX, {"SLURM_NODEID": "0", "MASTER_PORT": str(free_port())})
    assert rep.ok, rep.results
    assert {r.check for r in rep.results} >= {"gpus", "nvlink", "hca", "socket", "nccl-env", "rendezvous"}
    assert rows(rep, "gpus")[0].found == "8 x NVIDIA H100 80GB HBM3"
    assert "8 RDMA ports ACTIVE" in rows(rep, "hca")[0].found
    assert rows(rep, "socket")[0].found == "bond0 up"


def test_efa_node_against_aws_preset():
    rep = check(preset("aws-p5"), os.path.join(PROBE, "efa-p5"))
    assert rep.ok, [r for r in rep.results if r.status != "ok"]
    assert "32 RDMA ports ACTIVE" in rows(rep, "hca")[0].found


# -- the down-HCA fixture -------------------------------------------------------------


def test_down_hca_fails_with_node_device_and_fix(dgx):
    rep = check(dgx, HCA_DOWN, node="gpu02")
    assert not rep.ok
    bad = rows(rep, "hca", "fail")
    assert len(bad) == 1
    r = bad[0]
    assert r.node == "gpu02" and r.found == "mlx5_3 port 1: DOWN"
    assert r.expected.startswith("ACTIVE, InfiniBand, 400 Gb/s")
    assert "--exclude=gpu02" in r.fix and "ibstat mlx5_3" in r.fix
    # the other checks still pass: the report isolates the one problem
    assert [x.check for x in rep.results if x.status == "fail"] == ["hca"]


def test_down_hca_outside_nccl_ib_hca_does_not_fail(dgx):
    env = {"SLURM_NODEID": "1", "NCCL_IB_HCA": "=mlx5_0,mlx5_4,mlx5_5,mlx5_6,mlx5_9,mlx5_10,mlx5_11"}
    rep = check(dgx, HCA_DOWN, env)
    assert rows(rep, "hca", "fail") == []
    assert "7 RDMA ports ACTIVE (NCCL_IB_HCA=" in rows(rep, "hca")[0].found


def test_hca_named_in_env_that_does_not_exist(dgx):
    rep = check(dgx, DGX, {"SLURM_NODEID": "1", "NCCL_IB_HCA": "=mlx5_0,mlx5_12"})
    bad = rows(rep, "hca", "fail")
    assert bad and bad[0].found.startswith("mlx5_12: no such device in /sys/class/infiniband")


def test_prefix_list_in_env_fails_the_nccl_env_check(dgx):
    rep = check(dgx, DGX, {"SLURM_NODEID": "1", "NCCL_IB_HCA": "mlx5_0,mlx5_1"})
    bad = rows(rep, "nccl-env", "fail")
    assert any("also selects mlx5_10, mlx5_11" in r.found for r in bad)


def test_silently_ignored_gdr_level_fails(dgx):
    rep = check(dgx, DGX, {"SLURM_NODEID": "1", "NCCL_NET_GDR_LEVEL": "PBH"})
    bad = rows(rep, "nccl-env", "fail")
    assert bad and "did you mean PHB?" in bad[0].found


def test_roce_port_on_an_infiniband_site_fails_on_link_layer(tmp_path):
    roce = os.path.join(PROBE, "roce-a100")
    site_file = tmp_path / "ibsite.yaml"
    site_file.write_text(ROCE_SITE.replace("fabric: roce", "fabric: infiniband").replace("ethernet", "infiniband"))
    rep = check(load_site(str(site_file)), roce)
    bad = rows(rep, "hca", "fail")
    assert bad and bad[0].found == "mlx5_0 port 1: link layer Ethernet" and "mlxconfig" in bad[0].fix


ROCE_SITE = """\
name: roce-test
partitions: {gpu: {node_type: a100-roce, nodes: 4}}
node_types:
  a100-roce:
    gpus: 8
    gpu_model: A100-SXM4-80GB
    gpu_memory_gb: 80
    bf16_tflops: 312
    link: nvlink
    link_gbs: 600
    cpus: 96
    memory_gb: 1024
    fabric: roce
    socket_ifname: eth0
    roce_traffic_class: 106
    nics:
%s
""" % "\n".join("      - {name: mlx5_%d, link_layer: ethernet, gbps: 200}" % i for i in range(8))


def test_roce_node_passes_and_traffic_class_is_checked(tmp_path):
    (tmp_path / "roce.yaml").write_text(ROCE_SITE)
    site = load_site(str(tmp_path / "roce.yaml"))
    roce = os.path.join(PROBE, "roce-a100")
    assert check(site, roce).ok
    rep = check(site, roce, {"SLURM_NODEID": "1", "NCCL_IB_TC": "41"})
    assert any("NCCL_IB_TC=106" in r.fix for r in rows(rep, "nccl-env", "fail"))


# -- GPUs and NVLink ---------------------------------------------------------------


def drop_gpu(text: str, index: int) -> str:
    blocks = re.split(r"(?m)^(?=GPU [0-9A-F]{8}:)", text)
    head, gpus = blocks[0], blocks[1:]
    del gpus[index]
    return head.replace(
        "Attached GPUs                             : 8", "Attached GPUs                             : 7"
    ) + "".join(gpus)


def test_lost_gpu_fails_the_count(dgx, tmp_path):
    d = derived(tmp_path)
    q = d / "nvidia-smi-q.txt"
    q.write_text(drop_gpu(q.read_text(), 5))
    rep = check(dgx, str(d))
    bad = rows(rep, "gpus", "fail")
    assert bad and bad[0].found.startswith("7 x NVIDIA H100") and "--exclude=gpu01" in bad[0].fix


def test_allocation_of_fewer_gpus_only_needs_those(dgx, tmp_path):
    d = derived(tmp_path)
    q = d / "nvidia-smi-q.txt"
    q.write_text(drop_gpu(q.read_text(), 5))
    rep = check(dgx, str(d), {"SLURM_NODEID": "1", "SLURM_GPUS_ON_NODE": "4"})
    assert rows(rep, "gpus", "fail") == []


def test_wrong_gpu_model_fails(dgx):
    rep = check(dgx, os.path.join(PROBE, "roce-a100"))
    bad = rows(rep, "gpus", "fail")
    assert bad and "A100" in bad[0].found and "not a H100-SXM5-80GB node" in bad[0].fix


def test_degraded_nvlink_pair_fails(dgx, tmp_path):
    d = derived(tmp_path)
    t = d / "nvidia-smi-topo-m.txt"
    lines = t.read_text().splitlines(True)
    for row, col in ((3, 6), (6, 3)):  # header is line 0; GPU2 row is line 3, GPU5 column is field 6
        cells = lines[row].split("\t")
        cells[col] = "NV17"
        lines[row] = "\t".join(cells)
    t.write_text("".join(lines))
    rep = check(dgx, str(d))
    bad = rows(rep, "nvlink", "fail")
    assert bad and bad[0].found == "GPU2-GPU5 NV17" and bad[0].expected == "NV18 between every pair"


def test_no_nvidia_smi_fails_only_where_gpus_are_expected(dgx, tmp_path):
    d = tmp_path / "bare"
    shutil.copytree(os.path.join(DGX, "sys"), str(d / "sys"))
    rep = check(dgx, str(d))
    bad = rows(rep, "gpus", "fail")
    assert bad and "nvidia-smi: command not found" in bad[0].found


@pytest.mark.parametrize(
    "site_model, smi, ok",
    [
        ("H100-SXM5-80GB", "NVIDIA H100 80GB HBM3", True),
        ("H100-SXM5-80GB", "NVIDIA A100-SXM4-80GB", False),
        ("A100-SXM4-40GB", "NVIDIA A100-SXM4-40GB", True),
        ("GH200-96GB", "NVIDIA GH200 480GB", True),
        ("H200-SXM-141GB", "NVIDIA H100 80GB HBM3", False),
        ("RTX-4090", "NVIDIA GeForce RTX 4090", True),
        ("RTX-4090", "NVIDIA GeForce RTX 3090", False),
        ("MI250X", "AMD Instinct MI250X", True),
    ],
)
def test_gpu_model_matching(site_model, smi, ok):
    assert pf.gpu_model_matches(site_model, smi) is ok


# -- socket interface, rendezvous, container, checkpoint ------------------------------


def test_socket_interface_missing_or_down(dgx):
    rep = check(dgx, DGX, {"SLURM_NODEID": "1", "NCCL_SOCKET_IFNAME": "=eth9"})
    bad = rows(rep, "socket", "fail")
    assert bad and bad[0].found.startswith("no interface matches (present: bond0, docker0")
    rep = check(dgx, DGX, {"SLURM_NODEID": "1", "NCCL_SOCKET_IFNAME": "=docker0"})
    assert rows(rep, "socket", "fail")[0].found == "docker0 down"


def test_socket_interface_needs_an_address_on_a_real_node(dgx):
    rep = check(dgx, DGX, addresses={"bond0": []})
    assert rows(rep, "socket", "fail")[0].found == "bond0 up but without an IP address"
    rep = check(dgx, DGX, addresses={"bond0": ["10.0.0.1"]})
    assert rows(rep, "socket", "ok")


def free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def test_busy_rendezvous_port_fails_on_the_first_node_only(dgx):
    listener = socket.socket()
    listener.bind(("0.0.0.0", 0))
    listener.listen(1)
    port = listener.getsockname()[1]
    try:
        rep = check(dgx, DGX, {"SLURM_NODEID": "0", "MASTER_PORT": str(port)})
        bad = rows(rep, "rendezvous", "fail")
        assert bad and bad[0].found.startswith("port %d busy" % port) and "MASTER_PORT=$((20000" in bad[0].fix
        rep = check(dgx, DGX, {"SLURM_NODEID": "1", "MASTER_PORT": str(port)})
        assert rows(rep, "rendezvous") == []
    finally:
        listener.close()


def test_master_addr_must_resolve(dgx):
    rep = check(dgx, DGX, {"SLURM_NODEID": "1", "MASTER_ADDR": "localhost"})
    assert rows(rep, "rendezvous", "ok")[0].found == "MASTER_ADDR=localhost resolves"
    rep = check(dgx, DGX, {"SLURM_NODEID": "1", "MASTER_ADDR": "no-such-node.invalid"})
    bad = rows(rep, "rendezvous", "fail")
    assert bad and "does not resolve" in bad[0].found and "scontrol show hostnames" in bad[0].fix


def test_container_runtime_must_be_on_path(dgx, tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    rep = check(dgx, DGX, opts=pf.Options())  # the preset uses pyxis
    assert rows(rep, "container", "fail")[0].found == "enroot not found on PATH"
    tool = tmp_path / "enroot"
    tool.write_text("#!/bin/sh\nexit 0\n")
    tool.chmod(0o755)
    rep = check(dgx, DGX, opts=pf.Options())
    assert rows(rep, "container", "ok")[0].found == "enroot at %s" % tool


def test_checkpoint_space(dgx, tmp_path):
    target = tmp_path / "ckpt" / "run1"
    rep = check(dgx, DGX, opts=pf.Options(container_runtime="none", checkpoint_dir=str(target), min_free_gb=1e9))
    bad = rows(rep, "checkpoint", "fail")
    assert bad and "GB free at %s (for %s)" % (tmp_path, target) in bad[0].found
    rep = check(
        dgx,
        DGX,
        {"SLURM_NODEID": "1", "SLURMGPU_CHECKPOINT_DIR": str(tmp_path)},
        opts=pf.Options(container_runtime="none", min_free_gb=0.0),
    )
    assert rows(rep, "checkpoint", "ok")


# -- aggregation -----------------------------------------------------------------


def report(dgx, d, node):
    return check(dgx, d, node=node)


def lines_of(*records: str, label: str = ""):
    return [label + ln for r in records for ln in r.splitlines()]


def test_aggregate_puts_failing_nodes_first_and_merges_passing_ones(dgx):
    lines = (
        lines_of(report(dgx, DGX, "gpu01").record())
        + lines_of(report(dgx, HCA_DOWN, "gpu02").record(), label="1: ")
        + lines_of(report(dgx, DGX, "gpu03").record())
        + ["srun: error: gpu02: task 1: Exited with exit code 1"]
    )
    agg = pf.parse_records(lines, parse_hostlist("gpu[01-04]"))
    assert not agg.ok and agg.missing == ["gpu04"]
    table = pf.render_table(agg, "dgx-h100")
    out = table.splitlines()
    assert out[0] == "slurmgpu preflight: 4 nodes, 2 FAILED (gpu[02,04]) (site dgx-h100)"
    assert out[1].split() == ["NODE", "CHECK", "STATUS", "FOUND", "EXPECTED"]
    body = [ln for ln in out[2:] if ln.strip() and not ln.lstrip().startswith("fix:")]
    assert body[0].startswith("gpu04") and "no report" in body[0]
    assert body[1].startswith("gpu02") and "mlx5_3 port 1: DOWN" in body[1]
    assert body[2].startswith("gpu[01,03]") and "checks passed" in body[2]
    assert "srun: error: gpu02" in table  # other output of the step is kept


def test_identical_failures_are_one_row(dgx):
    env = {"SLURM_NODEID": "1", "NCCL_NET_GDR_LEVEL": "PBH"}
    recs = [pf.run_checks(dgx, facts(DGX, n), env, NO_CONTAINER, node=n).record() for n in ("a1", "a2", "a3")]
    table = pf.render_table(pf.parse_records(lines_of(*recs)))
    assert len([ln for ln in table.splitlines() if "NCCL_NET_GDR_LEVEL=PBH" in ln]) == 1
    assert "a[1-3]" in table


def noisy_report(node: str, rows: int) -> pf.NodeReport:
    """A report whose text does not compress away (hash digests), to force multi-line records."""
    import hashlib

    return pf.NodeReport(
        node,
        "x",
        tuple(
            pf.CheckResult(node, "nccl-env", "fail", hashlib.sha256(b"%d" % i).hexdigest(), "e", "f")
            for i in range(rows)
        ),
    )


def test_record_round_trip_and_short_lines(dgx):
    rep = report(dgx, HCA_DOWN, "gpu02")
    assert pf.parse_records(lines_of(rep.record())).reports == [rep]
    big = noisy_report("gpu02", 200)
    lines = lines_of(big.record())
    assert len(lines) > 3 and max(len(ln) for ln in lines) < 1000  # srun splits lines of 1 KiB and more
    assert pf.parse_records(lines).reports == [big]


def test_interleaved_record_lines_are_reassembled_and_broken_ones_reported(dgx):
    a = lines_of(noisy_report("gpu01", 40).record())
    b = lines_of(report(dgx, HCA_DOWN, "gpu02").record())
    assert len(a) > 2
    mixed = [ln for pair in zip(a, b) for ln in pair] + a[len(b) :] + b[len(a) :]
    agg = pf.parse_records(mixed, ["gpu01", "gpu02"])
    assert [r.node for r in agg.reports] == ["gpu01", "gpu02"] and agg.missing == []
    agg = pf.parse_records(a[:-1] + b, ["gpu01", "gpu02"])
    assert agg.missing == ["gpu01"] and any("unreadable preflight record from gpu01" in ln for ln in agg.other_lines)


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.tuples(st.sampled_from(["gpu", "n", "rack1-n"]), st.integers(0, 120)), min_size=1, max_size=30),
    st.integers(1, 3),
)
def test_compress_hostlist_inverts_slurm_expansion(items, width):
    names = sorted({"%s%0*d" % (p, width, i) for p, i in items})
    assert sorted(parse_hostlist(pf.compress_hostlist(names))) == names


def test_one_hostlist_codec_for_preflight_and_discover():
    from slurmgpu.discover import cluster as discover
    from slurmgpu.slurm import parse as slurm_parse

    assert pf.compress_hostlist is slurm_parse.compress_hostlist is discover.compress_hostlist
    assert not hasattr(discover, "_compress")
    assert slurm_parse.compress_hostlist(["login", "gpu02", "gpu01", "gpu01", "gpu04"]) == "login,gpu[01-02,04]"


# -- fixture hook and the command line ---------------------------------------------


def test_fixture_hook_per_node(dgx):
    cluster = os.path.join(DATA, "cluster-one-hca-down")
    f1, hooked = pf.gather_facts("gpu01", {pf.FIXTURE_ENV: cluster})
    f2, _ = pf.gather_facts("gpu02", {pf.FIXTURE_ENV: cluster})
    assert hooked and f1.hostname == "gpu01"
    assert [p.state for p in f1.rdma if p.device == "mlx5_3"] == ["ACTIVE"]
    assert [p.state for p in f2.rdma if p.device == "mlx5_3"] == ["DOWN"]


def cli(*args, env=None, stdin=""):
    full = dict(os.environ)
    full.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "slurmgpu.cli", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        env=full,
    )


def test_cli_record_then_aggregate_exit_codes(tmp_path):
    base = {pf.FIXTURE_ENV: os.path.join(DATA, "cluster-one-hca-down"), "MASTER_PORT": str(free_port())}
    recs = []
    for i, node in enumerate(("gpu01", "gpu02")):
        p = cli(
            "preflight",
            "--site",
            "dgx-h100",
            "--container-runtime",
            "none",
            "--record",
            env=dict(base, SLURMD_NODENAME=node, SLURM_NODEID=str(i)),
        )
        assert p.returncode == (0 if node == "gpu01" else 1), p.stderr
        assert all(ln.startswith(pf.RECORD_PREFIX + node + " ") for ln in p.stdout.splitlines())
        recs.append(p.stdout)
    p = cli("preflight", "--aggregate", "-", "--nodes", "gpu[01-02]", stdin="".join(recs))
    assert p.returncode == 1 and "gpu02  hca" in p.stdout
    p = cli("preflight", "--aggregate", "-", "--nodes", "gpu01", "--json", stdin=recs[0])
    assert p.returncode == 0 and json.loads(p.stdout)["ok"] is True


def test_cli_record_mode_reports_a_crash_as_a_failing_record():
    p = cli("preflight", "--site", "no-such-site", "--record", env={"SLURMD_NODENAME": "gpu07"})
    assert p.returncode == 1
    rec = pf.parse_records(p.stdout.splitlines()).reports[0]
    assert rec.node == "gpu07" and rec.results[0].check == "preflight"
    assert "no such site preset" in rec.results[0].found


def test_bandwidth_without_pytorch_fails_with_the_reason(dgx, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)  # what Python does when torch is not installed
    rep = pf.bandwidth_report(dgx, {"SLURMD_NODENAME": "gpu01"})
    r = rep.results[0]
    assert not rep.ok and r.check == "bandwidth" and r.found == "PyTorch is not importable here"


def test_bandwidth_needs_a_gpu_build_or_an_explicit_cpu_backend(dgx):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a GPU is visible here")
    env = {
        "SLURMD_NODENAME": "gpu01",
        "SLURM_PROCID": "0",
        "SLURM_NTASKS": "1",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(free_port()),
    }
    rep = pf.bandwidth_report(dgx, env)
    assert rep.results[0].status == "fail" and "PyTorch sees no CUDA GPU" in rep.results[0].found
    rep = pf.bandwidth_report(dgx, dict(env, SLURM_NNODES="1"), size_mb=1, iters=2, backend="gloo", fraction=0.0)
    assert rep.ok and "gloo all-reduce of 1 MiB, 1 ranks on 1 node" in rep.results[0].found


def test_bandwidth_outside_a_step_says_what_is_missing(dgx):
    pytest.importorskip("torch")
    rep = pf.bandwidth_report(dgx, {"SLURMD_NODENAME": "gpu01"}, backend="gloo")
    assert "SLURM_PROCID, SLURM_NTASKS, MASTER_ADDR, MASTER_PORT not set" in rep.results[0].found


def test_expected_bus_bandwidth_from_the_site():
    nt = preset("dgx-h100").node_type_of()
    assert pf.expected_busbw_gbs(nt, 4) == 400.0  # 8 x 400 Gb/s compute NICs
    assert pf.expected_busbw_gbs(nt, 1) == 450.0  # 900 GB/s NVLink counts both directions


def test_cli_help_has_examples():
    p = cli("preflight", "--help")
    assert p.returncode == 0 and "Examples:" in p.stdout and "--aggregate - --nodes" in p.stdout


def test_site_preflight_thresholds_are_the_cli_defaults(tmp_path):
    """preflight.min_free_gb in the site config applies unless --min-free-gb is given."""
    site = tmp_path / "site.yaml"
    site.write_text("extends: dgx-h100\npreflight:\n  min_free_gb: 1000000000\n")
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    env = {pf.FIXTURE_ENV: DGX, "SLURMD_NODENAME": "gpu01", "MASTER_PORT": str(free_port())}
    args = ("preflight", "--site", str(site), "--container-runtime", "none", "--checkpoint-dir", str(ckpt), "--json")
    p = cli(*args, env=env)
    rows_ = {(r["check"], r["status"]) for r in json.loads(p.stdout)["results"]}
    assert ("checkpoint", "fail") in rows_, p.stdout
    p = cli(*args, "--min-free-gb", "0", env=env)
    rows_ = {(r["check"], r["status"]) for r in json.loads(p.stdout)["results"]}
    assert ("checkpoint", "ok") in rows_, p.stdout


def test_preflight_thresholds_default_to_the_site_models_one_place():
    """0.7 of the bus bandwidth and 10 GB free: site.SitePreflight says it once; the YAML
    loader, preflight's own defaults and the CLI help read it from there."""
    import inspect

    from slurmgpu.node import preflight as PF
    from slurmgpu.site import SitePreflight, load_site, preset_dir

    d = SitePreflight()
    assert PF.Options().min_free_gb == d.min_free_gb
    assert inspect.signature(PF.bandwidth_report).parameters["fraction"].default == d.min_bandwidth_fraction
    site = load_site(str(preset_dir() / "dgx-h100.yaml"))  # no preflight: section
    assert site.preflight == d
    src = Path(PF.__file__).read_text()
    assert "0.7" not in src and "10.0" not in src


# -- multi-node NVLink (GB200 NVL72): NVLink domain per node, IMEX, groups across nodes ----------

RACK1 = os.path.join(PROBE, "gb200-rack1")
RACK2 = os.path.join(PROBE, "gb200-rack2")
NO_IMEX = os.path.join(PROBE, "gb200-rack1-noimex")
MULTI = {"SLURM_NODEID": "1", "SLURM_JOB_NUM_NODES": "4"}


def nvl_facts(d, node):
    return probe(
        sysfs=os.path.join(d, "sys"),
        runner=pf.FixtureRunner(d),
        hostname=node,
        net_reader=read_net_sysfs,
        devroot=os.path.join(d, "dev"),
    )


def nvl_report(site, d, node, env=MULTI):
    return pf.run_checks(site, nvl_facts(d, node), env, NO_CONTAINER, node=node)


@pytest.fixture(scope="module")
def gb200():
    return preset("gb200-nvl72")


def test_gb200_tray_passes_and_reports_its_nvlink_domain(gb200):
    rep = nvl_report(gb200, RACK1, "gb01")
    assert rep.ok, [r for r in rep.results if r.status != "ok"]
    assert rep.nvlink_clique == "5d3c2b1a-9e8f-4a7b-8c6d-1e2f3a4b5c6d/32766"
    assert [r.status for r in rows(rep, "imex")] == ["ok"]
    # the record carries it to the aggregation step
    back = pf.parse_records(rep.record().splitlines()).reports[0]
    assert back.nvlink_clique == rep.nvlink_clique


def test_missing_imex_channel_fails_a_multi_node_job_only(gb200, tmp_path):
    rep = nvl_report(gb200, NO_IMEX, "gb02")
    (r,) = rows(rep, "imex")
    assert r.status == "fail" and "switch/nvidia_imex" in r.fix and not rep.ok
    single = nvl_report(gb200, NO_IMEX, "gb02", env={"SLURM_NODEID": "0", "SLURM_JOB_NUM_NODES": "1"})
    assert rows(single, "imex") == []
    site_file = tmp_path / "auto.yaml"
    site_file.write_text("extends: gb200-nvl72\nname: gb-auto\nnode_types:\n  gb200-tray:\n    mnnvl: auto\n")
    (r,) = rows(nvl_report(load_site(str(site_file)), NO_IMEX, "gb02"), "imex")
    assert r.status == "warn" and "falls back to the network" in r.fix


def test_fabric_not_ready_warns_with_the_state(gb200, tmp_path):
    d = tmp_path / "tray"
    shutil.copytree(RACK1, str(d))
    q = d / "nvidia-smi-q.txt"
    q.write_text(
        q.read_text().replace(
            "State                             : Completed", "State                             : In Progress", 1
        )
    )
    rep = nvl_report(gb200, str(d), "gb03")
    (r,) = rows(rep, "nvl-domain")
    assert r.status == "warn" and "In Progress" in r.found and rep.nvlink_clique == ""


def _agg(gb200, placement):
    reports = [nvl_report(gb200, d, n) for n, d in placement]
    return pf.Aggregate(reports=reports)


STAMP = {
    "site": "gb200-nvl72",
    "tp": "2",
    "pp": "1",
    "dp": "8",
    "cp": "1",
    "ep": "4",
    "nodes": "4",
    "gpus_per_node": "4",
}


def test_ep_groups_inside_one_rack_pass(gb200):
    agg = _agg(gb200, [("gb01", RACK1), ("gb02", RACK1), ("gb03", RACK2), ("gb04", RACK2)])
    # EP=4 x expert TP=2: 8-rank blocks = 2 trays: gb01+gb02, gb03+gb04, each in one rack
    assert pf.check_domain_groups(agg, gb200, STAMP, ["gb01", "gb02", "gb03", "gb04"]) == []


def test_ep_group_across_racks_fails_per_site_policy(gb200, tmp_path):
    agg = _agg(gb200, [("gb01", RACK1), ("gb02", RACK2), ("gb03", RACK1), ("gb04", RACK2)])
    (r,) = pf.check_domain_groups(agg, gb200, STAMP, ["gb01", "gb02", "gb03", "gb04"])
    assert r.status == "fail" and r.check == "nvl-domain" and r.node == "gb[01-04]"
    assert r.found.startswith("4 of 4 EP groups span NVLink domains") and "--segment=18" in r.fix
    agg.job = [r]
    assert not agg.ok and "gb[01-04]" in pf.render_table(agg).splitlines()[0]
    site_file = tmp_path / "warn.yaml"
    site_file.write_text("extends: gb200-nvl72\nname: gb-warn\npolicy:\n  groups:\n    ep: warn\n")
    (w,) = pf.check_domain_groups(agg, load_site(str(site_file)), STAMP, ["gb01", "gb02", "gb03", "gb04"])
    assert w.status == "warn"
    # TP=2 stays inside a tray: no TP row either way
    assert all("EP" in x.found for x in (r, w))


def test_node_without_domain_report_is_a_warning_not_a_pass(gb200, tmp_path):
    d = tmp_path / "tray"
    shutil.copytree(RACK1, str(d))
    q = d / "nvidia-smi-q.txt"
    q.write_text(q.read_text().replace("5d3c2b1a-9e8f-4a7b-8c6d-1e2f3a4b5c6d", "N/A"))
    agg = _agg(gb200, [("gb01", RACK1), ("gb02", str(d))])
    stamp = dict(STAMP, dp="4", nodes="2")
    (r,) = pf.check_domain_groups(agg, gb200, stamp, ["gb01", "gb02"])
    assert r.status == "warn" and r.node == "gb02"


def test_cli_aggregate_with_stamp_rejects_ep_across_racks(tmp_path):
    nodes = {"gb01": "gb200-rack1", "gb02": "gb200-rack2", "gb03": "gb200-rack1", "gb04": "gb200-rack2"}
    (tmp_path / "nodes.json").write_text(json.dumps({n: os.path.join(PROBE, d) for n, d in nodes.items()}))
    recs = []
    for i, node in enumerate(nodes):
        env = {
            pf.FIXTURE_ENV: str(tmp_path),
            "SLURMD_NODENAME": node,
            "SLURM_NODEID": str(i + 1),
            "SLURM_JOB_NUM_NODES": "4",
        }
        p = cli("preflight", "--site", "gb200-nvl72", "--container-runtime", "none", "--record", env=env)
        assert p.returncode == 0, p.stdout + p.stderr
        recs.append(p.stdout)
    stamp = "# slurmgpu: site=gb200-nvl72 tp=2 pp=1 dp=8 cp=1 ep=4 nodes=4 gpus_per_node=4"
    p = cli("preflight", "--aggregate", "-", "--nodes", "gb[01-04]", "--stamp", stamp, stdin="".join(recs))
    assert p.returncode == 1 and "nvl-domain" in p.stdout and "EP groups span" in p.stdout
    p = cli("preflight", "--aggregate", "-", "--nodes", "gb[01-04]", stdin="".join(recs))
    assert p.returncode == 0, p.stdout


# --- --nccl-diag: NCCL 2.31's diagnostics for the preflight all-reduce ---


@pytest.mark.parametrize(
    "backend, version, status, words",
    [
        ("nccl", (2, 31, 2), "ok", "NCCL 2.31.2: diagnostics on"),
        ("nccl", (2, 30, 7), "warn", "NCCL 2.30.7: older than the diagnostics"),
        ("nccl", None, "warn", "PyTorch does not say which NCCL"),
        ("gloo", None, "warn", "backend gloo: no NCCL communicator"),
    ],
)
def test_nccl_diag_check_warns_where_the_diagnostics_cannot_run(backend, version, status, words):
    r = pf.nccl_diag_check("gpu01", backend, version)
    assert r.status == status and words in r.found and r.check == "nccl-diag"


def test_bandwidth_with_nccl_diag_on_gloo_says_no_diagnostics_ran(dgx, monkeypatch):
    pytest.importorskip("torch")
    monkeypatch.delenv("NCCL_RUN_DIAGNOSTICS", raising=False)
    env = {"SLURMD_NODENAME": "gpu01", "SLURM_PROCID": "0", "SLURM_NTASKS": "1", "SLURM_NNODES": "1",
           "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port())}  # fmt: skip
    rep = pf.bandwidth_report(dgx, env, size_mb=1, iters=2, backend="gloo", fraction=0.0, nccl_diag=True)
    (diag,) = rows(rep, "nccl-diag")
    assert diag.status == "warn" and "no NCCL communicator" in diag.found
    assert "NCCL_RUN_DIAGNOSTICS" not in os.environ  # not turned on where it cannot run


def test_aggregate_keeps_the_whole_nccl_diag_report_for_doctor(dgx):
    from slurmgpu.node import diagnose

    rec = pf.NodeReport("gpu01", "dgx-h100", (pf.CheckResult("gpu01", "bandwidth", "ok", "x", "y"),)).record()
    noise = ["0: some other line %d" % i for i in range(30)]
    with open(os.path.join(ROOT, "tests", "data", "doctor", "nccl-diag-p2p.log")) as f:
        diag = [ln.rstrip("\n") for ln in f if "NCCL DIAG" in ln]
    agg = pf.parse_records(noise + diag + rec.splitlines(), ["gpu01"])
    table = pf.render_table(agg, "dgx-h100")
    assert all(ln in table for ln in diag)  # not cut by the 20-line cap on other output
    stamp = "# slurmgpu: site=dgx-h100 tp=8 pp=1 dp=2 cp=1 ep=1 nodes=2 gpus_per_node=8\n"
    d = diagnose(stamp + table, site=dgx, nodes=["gpu01", "gpu02"])
    assert [m.signature.id for m in d.matches] == ["nccl-diag-p2p"]
    assert any("rank 10: node gpu02" in a for a in d.matches[0].advice)


def test_nccl_diag_needs_bandwidth():
    from click.testing import CliRunner

    from slurmgpu.cli import main

    r = CliRunner().invoke(main, ["preflight", "--nccl-diag"])
    assert r.exit_code == 2 and "--nccl-diag needs --bandwidth" in r.output
