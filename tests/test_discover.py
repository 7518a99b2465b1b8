"""slurmgpu discover on recorded Slurm output (tests/data/slurm, see its README).

The commands are replayed through the same Runner interface the real
discover uses; parsers see the exact recorded text.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Dict, List, Optional

import pytest
import yaml
from click.testing import CliRunner
from hypothesis import example, given
from hypothesis import strategies as st

from slurmgpu.cli import main
from slurmgpu.discover import (
    build_draft,
    check,
    discover,
    group_nodes,
    pyslurm_mismatch,
    pyslurm_status,
    read_cluster,
    render,
    scalar,
)
from slurmgpu.errors import SlurmError
from slurmgpu.node import probe
from slurmgpu.site import GPU_TABLE, load_site, lookup, preset_dir
from slurmgpu.slurm import (
    NOT_FOUND,
    CommandResult,
    Gres,
    parse_gres,
    parse_hostlist,
    parse_scontrol_nodes,
    parse_scontrol_partitions,
    parse_scontrol_records,
    parse_sinfo_json,
    parse_version,
)

DATA = Path(__file__).parent / "data"
SLURM = DATA / "slurm"
SAMPLES = sorted(p.name for p in SLURM.iterdir() if p.is_dir())
FILES = {
    ("sinfo", "--version"): "sinfo_version.txt",
    ("sinfo", "--json"): "sinfo_json.json",
    ("scontrol", "show", "node", "-o"): "scontrol_node_o.txt",
    ("scontrol", "show", "partition", "-o"): "scontrol_partition_o.txt",
    ("scontrol", "show", "config"): "scontrol_config.txt",
}


class Replay:
    """Answers Slurm commands from a recorded directory; `override` replaces or fails single commands."""

    def __init__(self, sample: str, override: Optional[Dict[tuple, CommandResult]] = None):
        self.dir = SLURM / sample
        self.override = override or {}
        self.calls: List[tuple] = []

    def run(self, argv, timeout=60.0):
        argv = tuple(argv)
        self.calls.append(argv)
        if argv in self.override:
            return self.override[argv]
        name = FILES.get(argv)
        if name and (self.dir / name).exists():
            return CommandResult(argv, 0, (self.dir / name).read_text(), "")
        return CommandResult(argv, NOT_FOUND, "", "%s: command not found" % argv[0])


class DirRunner:
    """Answers nvidia-smi from a recorded node directory (tests/data/probe/<node>)."""

    def __init__(self, d: Path):
        self.d = Path(d)

    def run(self, argv, timeout=60.0):
        f = self.d / ("-".join(a.lstrip("-") for a in argv) + ".txt")
        if f.exists():
            return CommandResult(tuple(argv), 0, f.read_text(), "")
        return CommandResult(tuple(argv), NOT_FOUND, "", "%s: command not found" % argv[0])


def text(sample: str, name: str) -> str:
    return (SLURM / sample / name).read_text()


def failed(argv: tuple, msg: str = "boom") -> CommandResult:
    return CommandResult(argv, 1, "", msg)


# ---------------------------------------------------------------------------
# parsers


@pytest.mark.parametrize("sample", SAMPLES)
def test_sinfo_json_and_scontrol_agree(sample):
    sj = parse_sinfo_json(text(sample, "sinfo_json.json"))
    sc = parse_scontrol_nodes(text(sample, "scontrol_node_o.txt"))

    def key(n):
        return (
            n.name,
            n.cpus,
            n.memory_mb,
            n.gres,
            n.features,
            tuple(sorted(n.partitions)),
            n.sockets,
            n.cores_per_socket,
            n.threads_per_core,
        )

    assert sorted(map(key, sj.nodes)) == sorted(map(key, sc))
    assert sj.version == parse_version(text(sample, "sinfo_version.txt"))[0]
    assert not sj.ambiguous


@pytest.mark.parametrize("sample", [s for s in SAMPLES if (SLURM / s / "scontrol_node.txt").exists()])
def test_multiline_scontrol_equals_oneliner(sample):
    assert parse_scontrol_nodes(text(sample, "scontrol_node.txt")) == parse_scontrol_nodes(
        text(sample, "scontrol_node_o.txt")
    )


def test_2205_live_values():
    nodes = {n.name: n for n in parse_scontrol_nodes(text("22.05.8-live", "scontrol_node_o.txt"))}
    assert len(nodes) == 8
    g = nodes["gpu03"]
    assert (g.cpus, g.memory_mb, g.gres, g.features, g.partitions) == (
        16,
        64000,
        (Gres("gpu", "h100", 8),),
        ("h100", "nvlink"),
        ("gpu",),
    )
    parts = {p.name: p for p in parse_scontrol_partitions(text("22.05.8-live", "scontrol_partition_o.txt"))}
    assert parts["gpu"].default and not parts["pcie"].default
    assert parts["gpu4"].nodes == ("g4n01", "g4n02")


def test_2311_values():
    sj = parse_sinfo_json(text("23.11.4-reconstructed", "sinfo_json.json"))
    assert sj.version == (23, 11, 4) and sj.release == "23.11.4"
    nodes = {n.name: n for n in sj.nodes}
    assert nodes["dgx001"].partitions == ("batch", "debug")
    assert nodes["dgx004"].state == "IDLE+DRAIN"
    assert nodes["gh02"].gres == (Gres("gpu", "nvidia_gh200_480gb", 4),)
    assert nodes["cpu01"].gres == ()
    recs = parse_scontrol_records(text("23.11.4-reconstructed", "scontrol_node_o.txt"), "NodeName")
    assert recs[0]["OS"] == "Linux 5.15.0-1040-nvidia #40-Ubuntu SMP Wed Nov 8 15:22:17 UTC 2023"
    assert recs[3]["Reason"] == "nvlink errors [root@2024-03-10T10:11:12]"
    prec = parse_scontrol_records(text("23.11.4-reconstructed", "scontrol_partition_o.txt"), "PartitionName")
    assert prec[0]["TRESBillingWeights"] == "CPU=1.0,GRES/gpu=16.0"
    parts = {p.name: p for p in parse_scontrol_partitions(text("23.11.4-reconstructed", "scontrol_partition_o.txt"))}
    assert parts["batch"].exclusive and parts["debug"].max_nodes == 1 and parts["gh"].max_nodes is None


@pytest.mark.parametrize(
    "given_, want",
    [
        ("gpu:h100:8", [("gpu", "h100", 8)]),
        ("gpu:h100:8(S:0-1)", [("gpu", "h100", 8)]),
        ("gpu:8", [("gpu", None, 8)]),
        ("gpu:4(S:0)", [("gpu", None, 4)]),
        ("gpu:a100:4,gpu:v100:2", [("gpu", "a100", 4), ("gpu", "v100", 2)]),
        ("gpu:nvidia_h100_80gb_hbm3:8(S:0,1),nic:1", [("gpu", "nvidia_h100_80gb_hbm3", 8), ("nic", None, 1)]),
        ("gpu", [("gpu", None, 1)]),
        ("shard:h100:1k", [("shard", "h100", 1024)]),
        ("(null)", []),
        ("N/A", []),
        ("", []),
    ],
)
def test_parse_gres(given_, want):
    assert [(g.name, g.type, g.count) for g in parse_gres(given_)] == want


def test_parse_gres_rejects_garbage():
    with pytest.raises(SlurmError, match="cannot read GRES"):
        parse_gres("gpu:h100:8:extra:stuff")


@pytest.mark.parametrize(
    "given_, want",
    [
        ("gpu[01-03]", ["gpu01", "gpu02", "gpu03"]),
        ("gpu[01-02,07],login1", ["gpu01", "gpu02", "gpu07", "login1"]),
        ("r[1-2]n[01-02]", ["r1n01", "r1n02", "r2n01", "r2n02"]),
        ("node9,node10", ["node9", "node10"]),
        ("(null)", []),
    ],
)
def test_parse_hostlist(given_, want):
    assert parse_hostlist(given_) == want


@pytest.mark.parametrize(
    "given_, want",
    [
        ("slurm-wlm 22.05.8", (22, 5, 8)),
        ("slurm 23.11.4", (23, 11, 4)),
        ("slurm 24.05.0-0rc1", (24, 5, 0)),
        ("slurm 25.11", (25, 11, 0)),
    ],
)
def test_parse_version(given_, want):
    assert parse_version(given_)[0] == want


def test_parse_version_rejects_garbage():
    with pytest.raises(SlurmError, match="cannot read a Slurm version"):
        parse_version("sinfo: fatal: Could not establish a configuration source")


def test_sinfo_json_rejects_other_json():
    with pytest.raises(SlurmError, match="neither 'sinfo' nor 'nodes'"):
        parse_sinfo_json(json.dumps({"meta": {}, "errors": [{"error": "x"}]}))
    with pytest.raises(SlurmError, match="not JSON"):
        parse_sinfo_json("sinfo: error: ...")


# ---------------------------------------------------------------------------
# reading the cluster: back ends and fallbacks


def test_commands_backend_order():
    r = Replay("22.05.8-live")
    facts = read_cluster(r)
    assert facts.backend == "sinfo --json + scontrol show partition"
    assert ("scontrol", "show", "node", "-o") not in r.calls
    assert facts.cluster_name == "slurmgpu-test" and facts.topology_plugin == "topology/none"


@pytest.mark.parametrize("sample", SAMPLES)
def test_sinfo_failure_falls_back_to_scontrol_with_same_draft(sample):
    plain = render(discover(Replay(sample)))
    r = Replay(sample, {("sinfo", "--json"): failed(("sinfo", "--json"), "sinfo: unrecognized option '--json'")})
    d = discover(r)
    assert ("scontrol", "show", "node", "-o") in r.calls
    assert any("reading scontrol show node instead" in n for n in d.notes)
    strip = re.compile(r"^# Site config draft.*\n", re.M)
    assert strip.sub("", render(d)) == strip.sub("", plain)


def test_grouped_sinfo_entry_falls_back_to_scontrol():
    doc = json.loads(text("23.11.4-reconstructed", "sinfo_json.json"))
    entry = next(e for e in doc["sinfo"] if e["partition"]["name"] == "gh")
    entry["memory"]["minimum"] -= 1000  # sinfo merged nodes of different memory into one line
    r = Replay(
        "23.11.4-reconstructed", {("sinfo", "--json"): CommandResult(("sinfo", "--json"), 0, json.dumps(doc), "")}
    )
    facts = read_cluster(r)
    assert facts.backend.startswith("scontrol show node")
    assert any("grouped unlike nodes" in n for n in facts.notes)


def test_partition_failure_uses_node_membership():
    argv = ("scontrol", "show", "partition", "-o")
    d = discover(Replay("22.05.8-live", {argv: failed(argv)}))
    assert set(d.partitions) == {"gpu", "gpu4", "pcie"}
    assert any("default partition and limits are unknown" in n for n in d.notes)
    check(render(d))


def test_missing_sinfo_is_a_clear_error():
    argv = ("sinfo", "--version")
    with pytest.raises(SlurmError, match="login node with the Slurm client commands"):
        read_cluster(Replay("22.05.8-live", {argv: CommandResult(argv, NOT_FOUND, "", "not found")}))


def test_pyslurm_not_installed_path():
    import importlib.util

    if importlib.util.find_spec("pyslurm") is not None:
        pytest.skip("pyslurm is installed here")
    st_ = pyslurm_status((22, 5, 8))
    assert not st_.usable and st_.version is None
    assert "PyPI has no pyslurm for Slurm 22.05" in st_.message and "pip install" not in st_.message
    st_ = pyslurm_status((25, 11, 2))
    assert "pip install 'slurmgpu[pyslurm]' 'pyslurm==25.11.*'" in st_.message
    facts = read_cluster(Replay("22.05.8-live"))
    assert any("pyslurm is not installed" in n for n in facts.notes)
    with pytest.raises(SlurmError, match="pyslurm is not installed"):
        read_cluster(Replay("22.05.8-live"), backend="pyslurm")
    assert read_cluster(Replay("22.05.8-live"), backend="commands").notes == ()


@pytest.mark.parametrize(
    "installed, slurm, ok",
    [
        ("22.5.1", (22, 5, 8), True),
        ("23.11.2", (23, 11, 4), True),
        ("24.5.0", (24, 5, 3), True),
        ("23.2.2", (22, 5, 8), False),
        ("24.11.0", (24, 5, 3), False),
        ("unknown", (23, 11, 4), False),
        ("25.11.2", (26, 5, 5), False),
        ("24.11.0", (25, 11, 2), False),
    ],
)
def test_pyslurm_version_match(installed, slurm, ok):
    """The advice names a pyslurm PyPI has for the cluster's release (only 25.11.x today), or none."""
    why = pyslurm_mismatch(installed, slurm)
    assert (why is None) == ok
    if not ok:
        assert "Slurm %d.%02d.%d" % slurm in why
        if slurm[:2] == (25, 11):
            assert "pip install 'slurmgpu[pyslurm]' 'pyslurm==25.11.*'" in why
        else:
            assert "pip install" not in why and "PyPI has no pyslurm for Slurm %d.%02d" % slurm[:2] in why


# ---------------------------------------------------------------------------
# the draft


def _site(draft):
    return check(render(draft))


def test_2205_live_draft():
    d = discover(Replay("22.05.8-live"))
    s = _site(d)
    assert s.name == "slurmgpu-test" and s.slurm_version == "22.05" and s.default_partition == "gpu"
    assert {p: (x.node_type, x.nodes) for p, x in s.partitions.items()} == {
        "gpu": ("h100x8", 4),
        "gpu4": ("a100x4", 2),
        "pcie": ("l40sx8", 2),
    }
    h = s.node_types["h100x8"]
    assert (h.gpus, h.cpus, h.memory_gb, h.gres_type) == (8, 16, 62.5, "h100")
    assert (h.gpu_memory_gb, h.bf16_tflops, h.link, h.link_gbs) == (80, 989, "nvlink", 900)
    assert s.node_types["l40sx8"].link == "pcie" and s.node_types["l40sx8"].nvlink_domain == 1
    assert s.topology == "flat"
    todos = "\n".join(d.todos())
    assert "a100x4.gpu_memory_gb" in todos  # 40 or 80 GB: Slurm cannot tell
    assert "h100x8.fabric" in todos and "h100x8.socket_ifname" in todos
    assert "h100x8.gpu_memory_gb" not in todos


def test_2311_draft_matches_sources():
    d = discover(Replay("23.11.4-reconstructed"))
    s = _site(d)
    assert set(s.partitions) == {"batch", "debug", "gh"}  # cpu has no GPUs
    assert any("partition 'cpu'" in n for n in d.notes)
    assert s.default_partition == "batch" and s.topology == "tree"
    assert s.partitions["debug"].max_nodes_per_job == 1 and s.partitions["batch"].max_nodes_per_job == 4
    gh = s.node_types["gh200x4"]
    assert gh.gres_type == "nvidia_gh200_480gb" and gh.gpu_model == "GH200-H100-96GB" and gh.cpus == 288


def test_mixed_partition_gets_a_constraint():
    d = discover(Replay("22.05.8-live-mixed"))
    s = _site(d)
    allp = s.partitions["all"]
    assert (allp.node_type, allp.nodes, allp.constraint, allp.max_nodes_per_job) == ("h100x8", 2, "h100", 2)
    assert any("partition 'all' mixes node types" in n for n in d.notes)


def test_partition_filter():
    d = discover(Replay("22.05.8-live"), only=("gpu4",))
    s = _site(d)
    assert list(s.partitions) == ["gpu4"] and list(s.node_types) == ["a100x4"]
    assert s.default_partition == "gpu4"
    with pytest.raises(SlurmError, match="no partition 'nope'.*gpu, gpu4, pcie"):
        discover(Replay("22.05.8-live"), only=("nope",))
    with pytest.raises(SlurmError, match="no GPU nodes found in partition cpu"):
        discover(Replay("23.11.4-reconstructed"), only=("cpu",))


def test_every_todo_says_how_to_find_it():
    for sample in SAMPLES:
        for line in render(discover(Replay(sample))).splitlines():
            if "TODO" in line and not line.startswith("#"):
                assert "find it with:" in line or "add one" in line or "ask the" in line, line


def test_unknown_gpu_type_still_validates():
    nodes = text("22.05.8-live", "scontrol_node_o.txt").replace("gpu:l40s:8", "gpu:mystery9000:8")
    over = {
        ("sinfo", "--json"): failed(("sinfo", "--json")),
        ("scontrol", "show", "node", "-o"): CommandResult(("scontrol", "show", "node", "-o"), 0, nodes, ""),
    }
    d = discover(Replay("22.05.8-live", over))
    s = _site(d)
    nt = s.node_types["mystery9000x8"]
    assert nt.gpu_model == "mystery9000" and nt.gres_type == "mystery9000"
    todos = "\n".join(d.todos())
    for f in ("gpu_model", "gpu_memory_gb", "bf16_tflops", "link", "link_gbs", "nvlink_domain"):
        assert "mystery9000x8.%s" % f in todos


def test_gb200_needs_block_topology():
    nodes = text("22.05.8-live", "scontrol_node_o.txt").replace("gpu:h100:8", "gpu:gb200:4")
    over = {
        ("sinfo", "--json"): failed(("sinfo", "--json")),
        ("scontrol", "show", "node", "-o"): CommandResult(("scontrol", "show", "node", "-o"), 0, nodes, ""),
    }
    d = discover(Replay("22.05.8-live", over))
    s = _site(d)
    assert s.node_types["gb200x4"].nvlink_domain == 72 and s.topology == "block"
    assert any(t.startswith("topology:") for t in d.todos())


def test_probe_results_fill_the_fabric_like_the_preset():
    """The recorded DGX H100 node, merged into the 23.11 draft, gives the dgx-h100 preset's NICs."""
    facts = read_cluster(Replay("23.11.4-reconstructed"))
    node = DATA / "probe" / "dgx-h100"
    pr = probe(str(node / "sys"), DirRunner(node), hostname="dgx001")
    d = build_draft(facts, (), {"h100x8": pr})
    s = _site(d)
    got, want = s.node_types["h100x8"], load_site(str(preset_dir() / "dgx-h100.yaml")).node_types["dgx-h100"]
    assert got.fabric == want.fabric == "infiniband"
    assert sorted((n.name, n.role, n.link_layer, n.gbps) for n in got.nics) == sorted(
        (n.name, n.role, n.link_layer, n.gbps) for n in want.nics
    )
    assert got.socket_ifname == want.socket_ifname == "bond0"
    assert (got.gpu_model, got.gpu_memory_gb, got.nvlink_domain) == (want.gpu_model, want.gpu_memory_gb, 8)
    assert not [t for t in d.todos() if t.startswith("node_types.h100x8.")]


def test_probed_slingshot_env_leaves_what_gen_writes_itself_to_gen(tmp_path):
    """NCCL_NET is written by gen for multi-node jobs only (HPE: not for single-node runs); a site's
    env: would set it for every job, so the draft keeps only the fabric's tuning values."""
    sysfs = tmp_path / "sys"
    for i in range(4):
        d = sysfs / "class" / "net" / ("hsn%d" % i)
        d.mkdir(parents=True)
        (d / "operstate").write_text("up\n")
        (d / "type").write_text("1\n")
        (sysfs / "class" / "cxi" / ("cxi%d" % i)).mkdir(parents=True)
    pr = probe(str(sysfs), DirRunner(DATA / "probe" / "dgx-h100"), hostname="nid001")
    assert pr.fabric == "slingshot" and pr.nccl_env["NCCL_NET"] == "AWS Libfabric"
    d = build_draft(read_cluster(Replay("23.11.4-reconstructed")), (), {"h100x8": pr})
    env = dict(_site(d).node_types["h100x8"].env)
    assert "NCCL_NET" not in env and "NCCL_SOCKET_IFNAME" not in env
    assert env["NCCL_CROSS_NIC"] == "1" and env["NCCL_NET_GDR_LEVEL"] == "PHB"


def test_probe_that_sees_other_gpus_is_flagged():
    facts = read_cluster(Replay("22.05.8-live"))
    node = DATA / "probe" / "roce-a100"
    pr = probe(str(node / "sys"), DirRunner(node), hostname="g4n01")  # 8 GPUs; Slurm says 4
    d = build_draft(facts, (), {"a100x4": pr})
    s = _site(d)
    nt = s.node_types["a100x4"]
    assert nt.fabric == "roce" and nt.gpu_memory_gb == 80 and nt.nvlink_domain == 4
    assert any("a100x4.gpus" in t and "saw 8 GPUs" in t for t in d.todos())
    assert any("roce_traffic_class" in t for t in d.todos())


def test_group_nodes_splits_by_cpus():
    nodes = parse_scontrol_nodes(
        text("22.05.8-live", "scontrol_node_o.txt").replace(
            "NodeName=gpu04 Arch=x86_64 CoresPerSocket=8  CPUAlloc=0 CPUEfctv=16 CPUTot=16",
            "NodeName=gpu04 Arch=x86_64 CoresPerSocket=8  CPUAlloc=0 CPUEfctv=32 CPUTot=32",
        )
    )
    names = sorted(g.name for g in group_nodes(nodes))
    assert names == ["a100x4", "h100x8", "h100x8-32c", "l40sx8"]


# ---------------------------------------------------------------------------
# YAML writing


@given(st.text(max_size=40))
@example("A\n")  # a plain word with a final newline was written unquoted and read back without it
def test_scalar_round_trips(s):
    assert yaml.safe_load("k: %s" % scalar(s))["k"] == s


@given(
    st.one_of(
        st.integers(-(10**9), 10**9),
        st.floats(allow_nan=False, allow_infinity=False, width=32),
        st.booleans(),
        st.none(),
    )
)
def test_scalar_round_trips_numbers(v):
    got = yaml.safe_load("k: %s" % scalar(v))["k"]
    assert got == v and type(got) in ((type(v),) if not isinstance(v, float) else (float, int))


def test_draft_is_deterministic():
    assert render(discover(Replay("23.11.4-reconstructed"))) == render(discover(Replay("23.11.4-reconstructed")))


# ---------------------------------------------------------------------------
# GPU table


def test_gpu_table_agrees_with_presets():
    """One figure per fact: a preset and gpus.py must not disagree."""
    seen = 0
    for path in sorted(preset_dir().glob("*.yaml")):
        s = load_site(str(path))
        for name, nt in s.node_types.items():
            f = lookup(nt.gres_type or nt.gpu_model)
            if f is None:
                continue
            seen += 1
            assert (f.vendor, f.bf16_tflops, f.link, f.link_gbs) == (nt.vendor, nt.bf16_tflops, nt.link, nt.link_gbs), (
                path.name,
                name,
            )
            assert nt.gpu_memory_gb in (f.memory_choices or (f.memory_gb,)), (path.name, name)
            if f.nvlink_domain:
                assert f.nvlink_domain == nt.nvlink_domain, (path.name, name)
    assert seen >= 5


@pytest.mark.parametrize(
    "name, key, mem",
    [
        ("h100", "h100", 80),
        ("nvidia_h100_80gb_hbm3", "h100", 80),
        ("NVIDIA A100-SXM4-40GB", "a100", 40),
        ("a100_80g", "a100", 80),
        ("NVIDIA GH200 480GB", "gh200", 96),
        ("NVIDIA H100 PCIe", "h100_pcie", 80),
        ("NVIDIA GeForce RTX 4090", "rtx4090", 24),
        ("AMD Instinct MI300X", "mi300x", 192),
        ("gh200", "gh200", 96),
        ("tesla_v100-sxm2-32gb", "v100", 32),
        ("NVIDIA GB300", "gb300", 288),
        ("NVIDIA B300 SXM6 AC", "b300", 270),
        ("NVIDIA GB200", "gb200", 186),
    ],
)
def test_gpu_lookup(name, key, mem):
    f = lookup(name)
    assert (f.key, f.memory_gb) == (key, mem)


@pytest.mark.parametrize("name", ["rtx_a1000", "gpu", "", "tesla", "a10"])
def test_gpu_lookup_unknown(name):
    assert lookup(name) is None


def test_gpu_table_entries_are_complete():
    for f in GPU_TABLE.values():
        assert f.memory_gb > 0 and f.bf16_tflops > 0 and f.link_gbs > 0 and f.source
        assert f.link in ("nvlink", "xgmi", "pcie") and f.vendor in ("nvidia", "amd")
        assert set(f.unverified) <= {"gpu_memory_gb", "bf16_tflops", "link_gbs"}


# ---------------------------------------------------------------------------
# CLI


def test_cli_help_has_examples():
    r = CliRunner().invoke(main, ["discover", "--help"])
    assert r.exit_code == 0 and "Examples:" in r.output and "slurmgpu discover -o site.yaml" in r.output


def test_cli_refuses_to_overwrite(tmp_path):
    out = tmp_path / "site.yaml"
    out.write_text("name: mine\n")
    r = CliRunner().invoke(main, ["discover", "-o", str(out)])
    assert r.exit_code == 2 and "use --force" in r.output
    assert out.read_text() == "name: mine\n"


def test_cli_without_slurm_explains(tmp_path):
    env = {"PATH": str(tmp_path), "SLURM_CONF": str(tmp_path / "none.conf")}
    r = CliRunner().invoke(main, ["discover"], env=env)
    assert r.exit_code == 2 and "cannot run sinfo" in r.output


class ProbeCluster(Replay):
    """Replay plus srun: `probe --json` answers with a recorded GB200 tray, `probe --domain` with
    one line per node from the racks given (tests/data/probe/gb200-rack*)."""

    def __init__(self, sample, override, racks):
        super().__init__(sample, override)
        self.racks = racks

    def run(self, argv, timeout=60.0):
        argv = tuple(argv)
        if argv[:1] != ("srun",):
            return super().run(argv, timeout)
        self.calls.append(argv)
        if "--domain" in argv:
            lines = []
            for node, rack in self.racks.items():
                d = DATA / "probe" / rack
                lines.append(pr_domain(DirRunner(d), node))
            return CommandResult(argv, 0, "\n".join(lines) + "\n", "")
        node = argv[argv.index("-w") + 1]
        d = DATA / "probe" / self.racks.get(node, "pcie-l40s")
        pr = probe(str(d / "sys"), DirRunner(d), hostname=node, devroot=str(d / "dev"))
        return CommandResult(argv, 0, pr.to_json(), "")


def pr_domain(runner, node):
    from slurmgpu.node.probe import probe_domain

    return probe_domain(runner, node)


def _gb200_cluster(racks):
    nodes = text("22.05.8-live", "scontrol_node_o.txt").replace("gpu:h100:8", "gpu:gb200:4")
    over = {
        ("sinfo", "--json"): failed(("sinfo", "--json")),
        ("scontrol", "show", "node", "-o"): CommandResult(("scontrol", "show", "node", "-o"), 0, nodes, ""),
    }
    return ProbeCluster("22.05.8-live", over, racks)


def test_probe_counts_the_nvlink_domains_from_the_trays():
    """gpu01-02 report rack1's ClusterUUID, gpu03-04 rack2's: two domains of 2 trays = 8 GPUs, measured."""
    racks = {"gpu01": "gb200-rack1", "gpu02": "gb200-rack1", "gpu03": "gb200-rack2", "gpu04": "gb200-rack2"}
    runner = _gb200_cluster(racks)
    d = discover(runner, with_probe=True)
    s = _site(d)
    assert s.node_types["gb200x4"].nvlink_domain == 8 and s.topology == "block"
    v = d.node_types["gb200x4"]["nvlink_domain"]
    assert not v.todo and "2 NVLink domains" in v.comment
    dom_calls = [c for c in runner.calls if "--domain" in c]
    assert len(dom_calls) == 1 and "-N4" in dom_calls[0] and "--json" not in dom_calls[0]
    assert any("gpu[01-02]" in n and "5d3c2b1a" in n for n in d.notes)


def test_uneven_or_silent_trays_leave_the_domain_marked_todo():
    racks = {"gpu01": "gb200-rack1", "gpu02": "gb200-rack1", "gpu03": "gb200-rack2", "gpu04": "dgx-h100"}
    d = discover(_gb200_cluster(racks), with_probe=True)
    v = d.node_types["gb200x4"]["nvlink_domain"]
    assert v.todo and v.value == 8 and "no domain reported by gpu04" in v.comment
