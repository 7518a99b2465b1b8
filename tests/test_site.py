"""Site model: the built-in presets, `extends:`, every class of bad input, the `site` CLI, and
which site is picked when the user does not say.

Error tests compare whole messages (`file:line:col: field.path: message`), with the line and
column computed from the YAML text the test wrote, so a wrong position fails as loudly as a
wrong word.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Optional

import pytest
from click.testing import CliRunner

from slurmgpu import __version__
from slurmgpu.cli import main
from slurmgpu.errors import ConfigError
from slurmgpu.site import DEFAULT_SITE, LINKS, load_site, preset_dir, preset_names, resolve_site, site_search
from slurmgpu.vocab import FABRICS

ROOT = Path(__file__).resolve().parent.parent
TEST_SITE = Path(__file__).resolve().parent / "data" / "sites" / "testcluster.yaml"
LOCATED = re.compile(r"^(?P<file>[^:]+):(?P<line>\d+):(?P<col>\d+): (?P<path>[\w.\[\]-]+): (?P<msg>.+)$")

# The smallest complete site; tests derive bad variants from it by replacing one line.
BASE = """\
name: mini
partitions:
  gpu:
    node_type: h100x8
    nodes: 2
node_types:
  h100x8:
    gpus: 8
    gpu_model: H100
    gpu_memory_gb: 80
    bf16_tflops: 989
    link: nvlink
    link_gbs: 900
    cpus: 16
    memory_gb: 64
    fabric: ethernet
    socket_ifname: lo
"""

EXPECTED_PRESETS = {
    "dgx-h100",
    "dgx-a100",
    "dgx-h200",
    "dgx-b200",
    "gb200-nvl72",
    "hgx-h100-roce",
    "aws-p5",
    "perlmutter",
    "lumi-g",
    "frontier",
    "juwels-booster",
    "leonardo",
    "alps-gh200",
    "rtx-4090",
}


# ---------------------------------------------------------------------------
# helpers


def write(tmp_path: Path, text: str, name: str = "site.yaml") -> str:
    p = tmp_path / name
    p.write_text(text)
    return str(p)


def issues_of(path: str) -> List[str]:
    with pytest.raises(ConfigError) as exc:
        load_site(path)
    return [str(i) for i in exc.value.issues]


def at(path: str, text: str, needle: str, field: str, message: str, occurrence: int = 1) -> str:
    """The message expected for `needle` (a key or item) in `text`: position of its n-th line."""
    seen = 0
    for n, line in enumerate(text.splitlines(), 1):
        col = line.find(needle)
        if col >= 0:
            seen += 1
            if seen == occurrence:
                return "%s:%d:%d: %s: %s" % (path, n, col + 1, field, message)
    raise AssertionError("%r not in test text" % needle)


def replace(old: str, new: str, text: str = BASE) -> str:
    assert text.count(old) == 1, old
    return text.replace(old, new)


def preset(name: str):
    return load_site(str(preset_dir() / (name + ".yaml")))


def runner() -> CliRunner:
    try:  # click < 8.2 mixes stderr into output unless told not to
        return CliRunner(mix_stderr=False)  # type: ignore[call-arg]
    except TypeError:
        return CliRunner()


# ---------------------------------------------------------------------------
# presets


def test_preset_set_is_complete():
    names = preset_names()
    assert EXPECTED_PRESETS <= set(names), EXPECTED_PRESETS - set(names)
    assert DEFAULT_SITE in names


@pytest.mark.parametrize("name", preset_names())
def test_preset_loads_and_is_consistent(name: str):
    text = (preset_dir() / (name + ".yaml")).read_text()
    assert text.startswith("#") and "Source" in text.split("\nname:")[0], (
        "%s: a preset starts with a comment block citing its sources" % name
    )
    s = preset(name)
    assert s.name == name
    assert s.description
    assert s.default_partition in s.partitions
    for p in s.partitions.values():
        nt = s.node_types[p.node_type]
        assert 1 <= p.max_nodes_per_job <= p.nodes
        assert nt.fabric in FABRICS and nt.link in LINKS
        assert 0 < nt.gpu_memory_gb <= 300 and 0 < nt.bf16_tflops <= 5000  # B300 / GB300: 288 GB HBM3e
        # the NVLink domain tiles the node or a whole number of nodes
        assert nt.gpus % nt.nvlink_domain == 0 or nt.nvlink_domain % nt.gpus == 0
        if nt.domain_nodes > 1:
            assert s.topology == "block", "%s: multi-node NVLink domain needs topology: block" % name
        if nt.link == "pcie":
            assert nt.nvlink_domain == 1
        if nt.fabric in ("infiniband", "roce", "efa"):
            assert nt.fabric_gbps > 0
            names = [n.name for n in nt.nics]
            assert len(names) == len(set(names))
        if nt.fabric in ("slingshot", "ethernet"):
            assert nt.socket_ifname
        assert nt.socket_ifname != "lo", "the loopback interface belongs to the test site only"
        if nt.vendor == "amd":
            assert nt.link == "xgmi"


def test_test_site_is_not_a_preset():
    assert "testcluster" not in preset_names()
    assert not list(preset_dir().glob("test*"))


def test_presets_validate_from_the_cli():
    files = sorted(str(p) for p in preset_dir().glob("*.yaml"))
    r = runner().invoke(main, ["site", "validate"] + files)
    assert r.exit_code == 0, r.stderr
    assert len([line for line in r.stdout.splitlines() if line.endswith(")") and ": ok (" in line]) == len(files)


def test_dgx_h100_compute_nics_are_exactly_the_eight_rails():
    nt = preset("dgx-h100").node_type_of()
    assert [n.name for n in nt.compute_nics] == [
        "mlx5_0",
        "mlx5_3",
        "mlx5_4",
        "mlx5_5",
        "mlx5_6",
        "mlx5_9",
        "mlx5_10",
        "mlx5_11",
    ]
    assert all(n.link_layer == "infiniband" and n.gbps == 400 for n in nt.compute_nics)
    assert sorted(n.name for n in nt.nics if n.role == "storage") == ["mlx5_1", "mlx5_2", "mlx5_7", "mlx5_8"]
    assert nt.fabric_gbps == 3200


def test_dgx_family_figures():
    a100, h200, b200 = (preset(n).node_type_of() for n in ("dgx-a100", "dgx-h200", "dgx-b200"))
    assert (a100.gpu_memory_gb, a100.link_gbs, a100.bf16_tflops, a100.fabric_gbps) == (80, 600, 312, 1600)
    assert len(a100.compute_nics) == 8 and {n.gbps for n in a100.compute_nics} == {200}
    assert (h200.gpu_memory_gb, h200.link_gbs) == (141, 900)
    assert (b200.gpu_memory_gb, b200.link_gbs, b200.fabric_gbps) == (180, 1800, 3200)


def test_gb200_domain_spans_eighteen_trays():
    s = preset("gb200-nvl72")
    nt = s.node_type_of()
    assert (nt.gpus, nt.nvlink_domain, nt.domain_nodes) == (4, 72, 18)
    assert s.topology == "block"
    assert [n.name for n in nt.compute_nics] == ["mlx5_0", "mlx5_1", "mlx5_4", "mlx5_5"]


def test_rtx4090_has_no_nvlink():
    nt = preset("rtx-4090").node_type_of()
    assert (nt.link, nt.nvlink_domain, nt.domain_nodes, nt.gpus) == ("pcie", 1, 1, 8)
    assert nt.fabric == "ethernet"
    assert nt.env["NCCL_P2P_DISABLE"] == "1"


def test_roce_preset_carries_gid_and_traffic_class():
    nt = preset("hgx-h100-roce").node_type_of()
    assert nt.fabric == "roce"
    assert nt.roce_gid_index == 3 and nt.roce_traffic_class is not None
    assert len(nt.compute_nics) == 8 and all(n.link_layer == "ethernet" for n in nt.compute_nics)


def test_aws_p5_has_32_efa_devices():
    s = preset("aws-p5")
    nt = s.node_type_of()
    assert nt.fabric == "efa" and s.gpu_request == "gres"
    assert len(nt.compute_nics) == 32 and all(re.match(r"^rdmap\d+s0$", n.name) for n in nt.compute_nics)
    assert nt.fabric_gbps == 3200


def test_slingshot_sites():
    pm = preset("perlmutter")
    assert pm.gpu_request == "gpus-per-node" and pm.qos == "regular"
    assert pm.partition().constraint == "gpu" and pm.node_type_of().socket_ifname == "hsn0"
    assert pm.node_type_of("gpu-hbm80g").gpu_memory_gb == 80
    alps = preset("alps-gh200").node_type_of()
    assert (alps.gpus, alps.fabric, alps.env["NCCL_PROTO"]) == (4, "slingshot", "^LL128")
    for name in ("lumi-g", "frontier"):
        nt = preset(name).node_type_of()
        assert (nt.vendor, nt.link, nt.gpus, nt.gpu_memory_gb, nt.fabric) == ("amd", "xgmi", 8, 64, "slingshot")


def test_european_infiniband_sites():
    jb = preset("juwels-booster")
    assert jb.gpu_request == "gres"
    assert (jb.node_type_of().gpus, jb.node_type_of().fabric_gbps) == (4, 800)
    leo = preset("leonardo")
    nt = leo.node_type_of()
    assert (nt.gpu_memory_gb, len(nt.compute_nics), nt.fabric_gbps) == (64, 4, 400)
    assert leo.partition().exclusive is False


def _load_testcluster_module():
    path = ROOT / "contrib" / "testcluster" / "cluster.py"
    spec = importlib.util.spec_from_file_location("slurmgpu_testcluster_for_site_test", str(path))
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    try:
        spec.loader.exec_module(mod)  # type: ignore[union-attr]
    finally:
        del sys.modules[spec.name]
    return mod


def test_test_site_matches_the_test_cluster():
    s = load_site(str(TEST_SITE))
    parts = _load_testcluster_module().DEFAULT_PARTITIONS
    assert list(s.partitions) == [p.name for p in parts]
    assert s.default_partition == next(p.name for p in parts if p.default)
    for p in parts:
        sp = s.partitions[p.name]
        nt = s.node_types[sp.node_type]
        assert sp.nodes == len(p.nodes)
        assert (nt.gpus, nt.gres_type, nt.cpus) == (p.gpus_per_node, p.gpu_type, p.cpus_per_node)
        assert nt.memory_gb * 1024 == p.memory_mb
        assert ("pcie" in p.features) == (nt.link == "pcie")
        assert ("nvlink" in p.features) == (nt.link == "nvlink")
    assert s.container.runtime == "none"


# ---------------------------------------------------------------------------
# extends


def test_extends_overrides_one_field_and_inherits_the_rest(tmp_path):
    path = write(tmp_path, "extends: dgx-h100\ndescription: our DGX pod\n", "ours.yaml")
    s, base = load_site(path), preset("dgx-h100")
    assert s.description == "our DGX pod"
    assert s.name == "ours"  # a derived site is named after its file unless it says otherwise
    assert s.node_types == base.node_types and s.partitions == base.partitions
    assert (s.container, s.policy, s.topology) == (base.container, base.policy, base.topology)


def test_extends_merges_nested_mappings_and_replaces_lists(tmp_path):
    text = """\
extends: dgx-h100
name: pod2
partitions:
  gpu:
    nodes: 4
node_types:
  dgx-h100:
    gpu_memory_gb: 94
    nics:
      - {name: mlx5_0, gbps: 400}
"""
    s = load_site(write(tmp_path, text))
    base = preset("dgx-h100")
    p, nt, bnt = s.partition(), s.node_type_of(), base.node_type_of()
    assert (s.name, p.nodes, p.max_nodes_per_job, p.exclusive) == ("pod2", 4, 4, base.partition().exclusive)
    assert nt.gpu_memory_gb == 94
    assert (nt.gpus, nt.link_gbs, nt.bf16_tflops, nt.socket_ifname) == (
        bnt.gpus,
        bnt.link_gbs,
        bnt.bf16_tflops,
        bnt.socket_ifname,
    )
    assert [n.name for n in nt.nics] == ["mlx5_0"]


def test_extends_a_relative_path_chain(tmp_path):
    (tmp_path / "sub").mkdir()
    write(tmp_path, "extends: rtx-4090\nnode_types:\n  rtx4090x8:\n    cpus: 32\n", "mid.yaml")
    s = load_site(write(tmp_path, "extends: ../mid.yaml\nqos: normal\n", "sub/leaf.yaml"))
    assert (s.name, s.qos, s.node_type_of().cpus, s.node_type_of().link) == ("leaf", "normal", 32, "pcie")


def test_errors_in_a_child_point_at_the_child(tmp_path):
    text = "extends: dgx-h100\nnode_types:\n  dgx-h100:\n    gpus: eight\n"
    path = write(tmp_path, text)
    assert issues_of(path) == [
        at(path, text, "gpus", "node_types.dgx-h100.gpus", "expected an integer, got a string ('eight')")
    ]


def test_circular_extends(tmp_path):
    a_text = "extends: b.yaml\n"
    a = write(tmp_path, a_text, "a.yaml")
    write(tmp_path, "description: b\nextends: a.yaml\n", "b.yaml")
    (msg,) = issues_of(a)
    m = LOCATED.match(msg)
    assert m and m["file"].endswith("b.yaml") and (m["line"], m["col"], m["path"]) == ("2", "1", "extends")
    assert m["msg"].startswith("circular 'extends' through ") and m["msg"].endswith("a.yaml")


def test_extends_itself(tmp_path):
    text = "extends: self.yaml\n"
    path = write(tmp_path, text, "self.yaml")
    assert issues_of(path) == [at(path, text, "extends", "extends", "circular 'extends' through %s" % path)]


def test_extends_unknown_preset(tmp_path):
    text = "description: x\nextends: dgx-h999\n"
    path = write(tmp_path, text)
    (msg,) = issues_of(path)
    expected = at(
        path,
        text,
        "extends",
        "extends",
        "no such site 'dgx-h999' (looked for %s); presets: %s"
        % (preset_dir() / "dgx-h999.yaml", ", ".join(preset_names())),
    )
    assert msg == expected


def test_extends_must_be_a_string(tmp_path):
    text = "extends: [dgx-h100]\n"
    path = write(tmp_path, text)
    assert issues_of(path) == [at(path, text, "extends", "extends", "expected a preset name or a path")]


# ---------------------------------------------------------------------------
# bad input: one test per class, whole messages


def test_base_site_is_valid(tmp_path):
    s = load_site(write(tmp_path, BASE))
    assert (s.default_partition, s.node_type_of().nvlink_domain, s.topology) == ("gpu", 8, "flat")


def test_unknown_key_with_did_you_mean(tmp_path):
    text = replace("    cpus: 16\n", "    cpu: 16\n")
    path = write(tmp_path, text)
    assert issues_of(path) == [
        at(path, text, "gpus", "node_types.h100x8.cpus", "missing required field (an integer)"),
        at(path, text, "cpu:", "node_types.h100x8.cpu", "unknown key (did you mean 'cpus'?)"),
    ]


def test_unknown_key_without_a_close_match(tmp_path):
    text = BASE + "colour: blue\n"
    path = write(tmp_path, text)
    (msg,) = issues_of(path)
    assert msg.startswith(at(path, text, "colour", "colour", "unknown key; expected one of: account, "))


@pytest.mark.parametrize(
    "value, message",
    [
        ("0", "must be a positive integer, got 0"),
        ("-8", "must be a positive integer, got -8"),
        ("eight", "expected an integer, got a string ('eight')"),
        ("8.5", "expected an integer, got a number (8.5)"),
        ("true", "expected an integer, got a boolean (true)"),
    ],
)
def test_bad_gpu_count(tmp_path, value, message):
    text = replace("gpus: 8", "gpus: %s" % value)
    path = write(tmp_path, text)
    assert issues_of(path) == [at(path, text, "gpus:", "node_types.h100x8.gpus", message)]


def test_wrong_type(tmp_path):
    text = replace("memory_gb: 64", "memory_gb: lots")
    path = write(tmp_path, text)
    assert issues_of(path) == [
        at(path, text, "memory_gb: lots", "node_types.h100x8.memory_gb", "expected a number, got a string ('lots')")
    ]


def test_wrong_choice_with_did_you_mean(tmp_path):
    text = replace("link: nvlink", "link: nvlnk")
    path = write(tmp_path, text)
    assert issues_of(path) == [
        at(
            path,
            text,
            "link:",
            "node_types.h100x8.link",
            "must be one of nvlink, xgmi, pcie, got 'nvlnk' (did you mean 'nvlink'?)",
        )
    ]


def test_unquoted_slurm_version(tmp_path):
    text = "slurm_version: 23.10\n" + BASE
    path = write(tmp_path, text)
    assert issues_of(path) == [
        at(
            path,
            text,
            "slurm_version",
            "slurm_version",
            'write the version in quotes, e.g. "23.11"; unquoted, YAML reads it as the number 23.1',
        )
    ]
    assert load_site(write(tmp_path, text.replace("23.10", '"23.10"'), "ok.yaml")).slurm_version == "23.10"


def test_partition_names_unknown_node_type(tmp_path):
    text = replace("node_type: h100x8", "node_type: h100x9")
    path = write(tmp_path, text)
    assert issues_of(path) == [
        at(
            path,
            text,
            "node_type",
            "partitions.gpu.node_type",
            "unknown node type 'h100x9' (did you mean 'h100x8'?) (defined: h100x8)",
        )
    ]


def test_nvlink_domain_not_a_multiple_of_the_node(tmp_path):
    text = replace("    cpus: 16\n", "    nvlink_domain: 12\n    cpus: 16\n")
    path = write(tmp_path, text)
    assert issues_of(path) == [
        at(
            path,
            text,
            "nvlink_domain",
            "node_types.h100x8.nvlink_domain",
            "an NVLink domain larger than a node must be a whole number of nodes: 12 is not a multiple of "
            "8 GPUs per node (e.g. GB200 NVL72: 72 = 18 trays x 4)",
        )
    ]


def test_nvlink_domain_not_dividing_the_node(tmp_path):
    text = replace("    cpus: 16\n", "    nvlink_domain: 3\n    cpus: 16\n")
    path = write(tmp_path, text)
    assert issues_of(path) == [
        at(
            path,
            text,
            "nvlink_domain",
            "node_types.h100x8.nvlink_domain",
            "an NVLink domain smaller than a node must divide its 8 GPUs, got 3",
        )
    ]


def test_multi_node_domain_needs_block_topology(tmp_path):
    text = replace("    cpus: 16\n", "    nvlink_domain: 16\n    cpus: 16\n", "topology: tree\n" + BASE)
    path = write(tmp_path, text)
    assert issues_of(path) == [
        at(
            path,
            text,
            "topology",
            "topology",
            "node type 'h100x8' has an NVLink domain of 16 GPUs across 2 nodes; set topology: block "
            "so jobs can ask to stay inside one domain (--segment)",
        )
    ]
    ok = load_site(write(tmp_path, text.replace("topology: tree", "topology: block"), "ok.yaml"))
    assert ok.node_type_of().domain_nodes == 2


def test_pcie_cannot_span_nodes(tmp_path):
    text = replace("link: nvlink", "link: pcie", replace("    cpus: 16\n", "    nvlink_domain: 16\n    cpus: 16\n"))
    path = write(tmp_path, text)
    assert issues_of(path) == [
        at(
            path,
            text,
            "nvlink_domain",
            "node_types.h100x8.nvlink_domain",
            "link: pcie cannot form a multi-node NVLink domain (got 16 GPUs)",
        )
    ]


def test_pcie_domain_defaults_to_one(tmp_path):
    s = load_site(write(tmp_path, replace("link: nvlink", "link: pcie")))
    assert s.node_type_of().nvlink_domain == 1


def test_duplicate_key(tmp_path):
    text = replace("    cpus: 16\n", "    cpus: 16\n    gpus: 4\n")
    path = write(tmp_path, text)
    first = text.splitlines().index("    gpus: 8") + 1
    assert issues_of(path) == [
        at(path, text, "gpus", "gpus", "duplicate key (first defined on line %d)" % first, occurrence=2)
    ]


def test_yaml_syntax_error_has_a_line(tmp_path):
    text = replace("    nodes: 2\n", "    nodes: 2: 3\n")
    path = write(tmp_path, text)
    line = text.splitlines().index("    nodes: 2: 3")
    col = text.splitlines()[line].index(": 3")
    (issue,) = issues_of(path)
    # libyaml says "... in this context", the pure-Python parser "... here": same place either way
    assert issue.startswith("%s:%d:%d: invalid YAML: mapping values are not allowed " % (path, line + 1, col + 1))


@pytest.mark.parametrize("text", ["", "# only a comment\n", "---\n"])
def test_empty_file(tmp_path, text):
    path = write(tmp_path, text)
    assert issues_of(path) == ["%s: file is empty; expected a site config mapping" % path]


def test_top_level_must_be_a_mapping(tmp_path):
    path = write(tmp_path, "- gpu\n")
    assert issues_of(path) == ["%s:1:1: expected a mapping at the top level of a site config" % path]


def test_missing_required_field(tmp_path):
    text = replace("    gpu_model: H100\n", "")
    path = write(tmp_path, text)
    assert issues_of(path) == [
        at(path, text, "gpus", "node_types.h100x8.gpu_model", "missing required field (a string)")
    ]


def test_missing_top_level_section(tmp_path):
    text = BASE.split("node_types:")[0]
    path = write(tmp_path, text)
    assert issues_of(path) == ["%s:1:1: node_types: missing required field (a mapping)" % path]


def test_empty_entry_is_reported_at_its_key(tmp_path):
    text = replace("  gpu:\n    node_type: h100x8\n    nodes: 2\n", "  gpu:\n")
    path = write(tmp_path, text)
    assert issues_of(path) == [
        at(path, text, "gpu:", "partitions.gpu.node_type", "missing required field (a string)"),
        at(path, text, "gpu:", "partitions.gpu.nodes", "missing required field (an integer)"),
    ]


def test_section_of_the_wrong_type_gives_one_error(tmp_path):
    text = BASE.split("node_types:")[0] + "node_types: [h100x8]\n"
    path = write(tmp_path, text)
    assert issues_of(path) == [at(path, text, "node_types", "node_types", "expected a mapping, got a list")]


def test_infiniband_fabric_with_an_ethernet_nic(tmp_path):
    text = replace(
        "    fabric: ethernet\n",
        "    fabric: infiniband\n    nics:\n      - {name: mlx5_0, link_layer: ethernet, gbps: 400}\n",
    )
    path = write(tmp_path, text)
    assert issues_of(path) == [
        at(
            path,
            text,
            "nics",
            "node_types.h100x8.nics",
            "fabric infiniband needs compute NICs with link_layer: infiniband",
        )
    ]


def test_roce_fabric_with_an_infiniband_nic(tmp_path):
    text = replace("    fabric: ethernet\n", "    fabric: roce\n    nics:\n      - {name: mlx5_0, gbps: 400}\n")
    path = write(tmp_path, text)
    assert issues_of(path) == [
        at(
            path,
            text,
            "nics",
            "node_types.h100x8.nics",
            "fabric roce (RDMA over Ethernet) needs compute NICs with link_layer: ethernet",
        )
    ]


def test_rdma_fabric_without_nics(tmp_path):
    text = replace("fabric: ethernet", "fabric: efa")
    path = write(tmp_path, text)
    assert issues_of(path) == [
        at(
            path,
            text,
            "gpus",
            "node_types.h100x8.nics",
            "fabric efa needs at least one compute NIC (name, gbps) so NCCL can be pointed at it",
        )
    ]


def test_slingshot_needs_socket_ifname(tmp_path):
    text = replace("    fabric: ethernet\n    socket_ifname: lo\n", "    fabric: slingshot\n")
    path = write(tmp_path, text)
    assert issues_of(path) == [
        at(
            path,
            text,
            "gpus",
            "node_types.h100x8.socket_ifname",
            "fabric slingshot needs socket_ifname (the interface NCCL should use, e.g. hsn0 or eth0)",
        )
    ]


def test_nic_listed_twice(tmp_path):
    text = replace(
        "    socket_ifname: lo\n",
        "    socket_ifname: lo\n    nics:\n"
        "      - {name: eth0, link_layer: ethernet, gbps: 100}\n"
        "      - {name: eth0, link_layer: ethernet, gbps: 100}\n",
    )
    path = write(tmp_path, text)
    assert issues_of(path) == [
        at(path, text, "{name: eth0", "node_types.h100x8.nics[1]", "NIC 'eth0' is listed twice", occurrence=2)
    ]


def test_nic_of_the_wrong_type_gives_one_error(tmp_path):
    text = replace("    socket_ifname: lo\n", "    socket_ifname: lo\n    nics:\n      - eth0\n")
    path = write(tmp_path, text)
    assert issues_of(path) == [
        at(path, text, "eth0", "node_types.h100x8.nics[0]", "expected a mapping, got a string ('eth0')")
    ]


def test_env_value_must_be_a_string(tmp_path):
    text = replace("    socket_ifname: lo\n", "    socket_ifname: lo\n    env:\n      NCCL_DEBUG: [WARN]\n")
    path = write(tmp_path, text)
    assert issues_of(path) == [
        at(path, text, "NCCL_DEBUG", "node_types.h100x8.env.NCCL_DEBUG", "expected a string, got a list")
    ]


def test_env_numbers_become_strings(tmp_path):
    text = replace("    socket_ifname: lo\n", "    socket_ifname: lo\n    env: {NCCL_CROSS_NIC: 1}\n")
    assert load_site(write(tmp_path, text)).node_type_of().env == {"NCCL_CROSS_NIC": "1"}


def test_default_partition_unknown(tmp_path):
    text = "default_partition: gpux\n" + BASE
    path = write(tmp_path, text)
    assert issues_of(path) == [
        at(path, text, "default_partition", "default_partition", "no partition named 'gpux' (defined: gpu)")
    ]


def test_max_nodes_per_job_exceeds_nodes(tmp_path):
    text = replace("    nodes: 2\n", "    nodes: 2\n    max_nodes_per_job: 3\n")
    path = write(tmp_path, text)
    assert issues_of(path) == [
        at(
            path,
            text,
            "max_nodes_per_job",
            "partitions.gpu.max_nodes_per_job",
            "max_nodes_per_job (3) exceeds the partition's 2 nodes",
        )
    ]


def test_bad_policy_mode(tmp_path):
    text = BASE + "policy:\n  mode: enforced\n"
    path = write(tmp_path, text)
    assert issues_of(path) == [
        at(
            path,
            text,
            "mode: enforced",
            "policy.mode",
            "must be one of enforce, warn, shadow, off, got 'enforced' (did you mean 'enforce'?)",
        )
    ]


def test_bad_partition_policy_and_launcher_policy(tmp_path):
    text = (
        replace("    nodes: 2\n", "    nodes: 2\n    policy: strict\n")
        + "policy:\n  launchers:\n    torchrunn: warn\n    vllm: never\n"
    )
    path = write(tmp_path, text)
    assert issues_of(path) == [
        at(
            path,
            text,
            "policy: strict",
            "partitions.gpu.policy",
            "must be one of enforce, warn, shadow, off, got 'strict'",
        ),
        at(
            path,
            text,
            "torchrunn",
            "policy.launchers.torchrunn",
            "unknown launcher; expected one of: "
            "torchrun, srun, megatron, deepspeed, nemo, torchtitan, accelerate, vllm, sglang",
        ),
        at(path, text, "vllm", "policy.launchers.vllm", "must be one of enforce, warn, shadow, off, got 'never'"),
    ]


def test_all_problems_are_reported_at_once_in_file_order(tmp_path):
    text = replace("gpus: 8", "gpus: 0", replace("nodes: 2", "nodes: two", BASE + "policy: {mode: x}\n"))
    path = write(tmp_path, text)
    msgs = issues_of(path)
    assert [LOCATED.match(m)["path"] for m in msgs] == ["partitions.gpu.nodes", "node_types.h100x8.gpus", "policy.mode"]
    assert [int(LOCATED.match(m)["line"]) for m in msgs] == sorted(int(LOCATED.match(m)["line"]) for m in msgs)


def test_unreadable_file(tmp_path):
    path = str(tmp_path / "nope.yaml")
    assert issues_of(path) == ["%s: cannot read file: No such file or directory" % path]


def test_yaml_merge_keys_may_be_overridden(tmp_path):
    text = (
        replace("  h100x8:\n", "  h100x8: &node\n") + "  h100x4:\n    <<: *node\n    gpus: 4\n    gpu_model: H100-NVL\n"
    )
    s = load_site(write(tmp_path, text))
    assert (s.node_types["h100x4"].gpus, s.node_types["h100x4"].gpu_model) == (4, "H100-NVL")
    assert s.node_types["h100x4"].link_gbs == s.node_types["h100x8"].link_gbs
    # two explicit keys are still a duplicate, merge or not
    bad = text + "    gpus: 2\n"
    path = write(tmp_path, bad, "bad.yaml")
    first = bad.splitlines().index("    gpus: 4") + 1
    assert issues_of(path) == [at(path, bad, "gpus: 2", "gpus", "duplicate key (first defined on line %d)" % first)]


def test_every_located_issue_has_the_documented_shape(tmp_path):
    text = replace("gpus: 8", "gpus: -1", replace("link: nvlink", "link: copper", BASE + "bogus: 1\n"))
    path = write(tmp_path, text)
    for msg in issues_of(path):
        m = LOCATED.match(msg)
        assert m and m["file"] == path and int(m["line"]) >= 1 and int(m["col"]) >= 1, msg


def test_unknown_partition_lookup(tmp_path):
    s = load_site(write(tmp_path, BASE))
    with pytest.raises(ConfigError) as exc:
        s.partition("gpx")
    assert str(exc.value) == "%s: partitions: site 'mini' has no partition 'gpx' (it has: gpu)" % s.source


# ---------------------------------------------------------------------------
# CLI


def test_cli_validate_bad_file(tmp_path):
    text = replace("gpus: 8", "gpus: 0")
    bad = write(tmp_path, text, "bad.yaml")
    good = str(preset_dir() / "dgx-h100.yaml")
    r = runner().invoke(main, ["site", "validate", good, bad])
    assert r.exit_code == 1
    assert r.stderr.splitlines() == [
        at(bad, text, "gpus", "node_types.h100x8.gpus", "must be a positive integer, got 0")
    ]
    assert r.stdout == "%s: ok (site dgx-h100, 1 partition)\n" % good


def test_cli_validate_bad_file_in_a_subprocess(tmp_path):
    text = replace("link: nvlink", "link: warp")
    bad = write(tmp_path, text, "bad.yaml")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    p = subprocess.run(
        [sys.executable, "-m", "slurmgpu.cli", "site", "validate", bad],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert p.returncode == 1
    assert p.stdout == ""
    assert p.stderr.startswith(at(bad, text, "link:", "node_types.h100x8.link", "must be one of nvlink, xgmi, pcie"))


def test_cli_site_list():
    r = runner().invoke(main, ["site", "list"])
    assert r.exit_code == 0, r.stderr
    rows = r.stdout.splitlines()
    assert len(rows) == len(preset_names()) + 1 >= 13
    assert rows[0].split()[:2] == ["NAME", "GPUS/NODE"]
    assert [row.split()[0] for row in rows[1:]] == preset_names()
    gb = next(row.split() for row in rows if row.startswith("gb200-nvl72 "))
    assert (gb[1], gb[-1]) == ("4", "72")


def test_cli_site_list_json():
    r = runner().invoke(main, ["site", "list", "--json"])
    rows = json.loads(r.stdout)
    assert [row["name"] for row in rows] == preset_names()
    assert {row["name"]: row["nvlink_domain"] for row in rows}["rtx-4090"] == 1


def test_cli_site_show_json(tmp_path):
    r = runner().invoke(main, ["site", "show", "lumi-g", "--json"], env={"HOME": str(tmp_path)})
    assert r.exit_code == 0, r.stderr
    data = json.loads(r.stdout)
    assert data["name"] == "lumi-g" and data["default_partition"] == "standard-g"
    assert data["node_types"]["lumi-g"]["vendor"] == "amd"
    assert r.stderr.startswith("slurmgpu: site lumi-g (--site: ")


def test_cli_site_show_text_names_the_domain_nodes():
    r = runner().invoke(main, ["site", "show", "gb200-nvl72"])
    assert r.exit_code == 0, r.stderr
    assert "NVLink domain 72 GPUs (18 nodes)" in r.stdout


def test_cli_site_show_unknown_preset():
    r = runner().invoke(main, ["site", "show", "dgx-h10"])
    assert r.exit_code == 2
    assert "no such site preset (did you mean 'dgx-h100'?)" in r.stderr


def test_cli_version():
    r = runner().invoke(main, ["--version"])
    assert r.exit_code == 0
    assert r.stdout.strip() == "slurmgpu, version %s" % __version__


@pytest.mark.parametrize("args", [[], ["site"], ["site", "list"], ["site", "show"], ["site", "validate"]])
def test_cli_help_has_an_example(args):
    r = runner().invoke(main, args + ["--help"])
    assert r.exit_code == 0
    assert "Example" in r.stdout and "slurmgpu site" in r.stdout


# ---------------------------------------------------------------------------
# which site: --site > $SLURMGPU_SITE > admin file > user file > built-in default


def _env(tmp_path: Path, **kw: Optional[str]) -> Dict[str, str]:
    env = {"HOME": str(tmp_path / "home"), "SLURMGPU_SYSTEM_SITE": str(tmp_path / "etc" / "site.yaml")}
    env.update({k: v for k, v in kw.items() if v is not None})
    return env


def _all_levels(tmp_path: Path) -> Dict[str, str]:
    """A site file at every level, each naming itself, and the environment that points at them."""
    paths = {}
    for level in ("explicit", "envvar", "admin", "xdg"):
        d = tmp_path / level
        d.mkdir()
        p = d / "site.yaml"
        p.write_text("extends: rtx-4090\nname: %s\n" % level)
        paths[level] = str(p)
    (tmp_path / "xdg" / "slurmgpu").mkdir()
    os.replace(paths["xdg"], str(tmp_path / "xdg" / "slurmgpu" / "site.yaml"))
    paths["xdg"] = str(tmp_path / "xdg" / "slurmgpu" / "site.yaml")
    return paths


def test_site_flag_wins(tmp_path):
    p = _all_levels(tmp_path)
    env = _env(
        tmp_path, SLURMGPU_SITE=p["envvar"], SLURMGPU_SYSTEM_SITE=p["admin"], XDG_CONFIG_HOME=str(tmp_path / "xdg")
    )
    assert site_search(p["explicit"], env) == (p["explicit"], "--site")


def test_env_var_beats_files(tmp_path):
    p = _all_levels(tmp_path)
    env = _env(
        tmp_path, SLURMGPU_SITE=p["envvar"], SLURMGPU_SYSTEM_SITE=p["admin"], XDG_CONFIG_HOME=str(tmp_path / "xdg")
    )
    assert site_search(None, env) == (p["envvar"], "$SLURMGPU_SITE")


def test_env_var_may_name_a_preset(tmp_path):
    assert site_search(None, _env(tmp_path, SLURMGPU_SITE="frontier")) == (
        str(preset_dir() / "frontier.yaml"),
        "$SLURMGPU_SITE",
    )


def test_admin_file_beats_user_file(tmp_path):
    p = _all_levels(tmp_path)
    env = _env(tmp_path, SLURMGPU_SYSTEM_SITE=p["admin"], XDG_CONFIG_HOME=str(tmp_path / "xdg"))
    assert site_search(None, env) == (p["admin"], "admin config")


def test_user_file_when_no_admin_file(tmp_path):
    p = _all_levels(tmp_path)
    env = _env(tmp_path, XDG_CONFIG_HOME=str(tmp_path / "xdg"))
    assert site_search(None, env) == (p["xdg"], "user config")


def test_user_file_under_home_without_xdg(tmp_path):
    user = tmp_path / "home" / ".config" / "slurmgpu" / "site.yaml"
    user.parent.mkdir(parents=True)
    user.write_text("extends: rtx-4090\n")
    assert site_search(None, _env(tmp_path)) == (str(user), "user config")


def test_built_in_default_last(tmp_path):
    assert site_search(None, _env(tmp_path)) == (str(preset_dir() / (DEFAULT_SITE + ".yaml")), "built-in default")


def test_unknown_site_name(tmp_path):
    with pytest.raises(ConfigError) as exc:
        site_search("perlmuter", _env(tmp_path))
    assert str(exc.value) == "perlmuter: no such site preset (did you mean 'perlmutter'?); presets: %s" % (
        ", ".join(preset_names())
    )


def test_missing_site_file(tmp_path):
    missing = str(tmp_path / "nope.yaml")
    with pytest.raises(ConfigError) as exc:
        site_search(missing, _env(tmp_path))
    assert str(exc.value) == "%s: site config file not found" % missing


def test_resolve_site_says_which_and_why(tmp_path):
    p = _all_levels(tmp_path)
    env = _env(tmp_path, SLURMGPU_SYSTEM_SITE=p["admin"], XDG_CONFIG_HOME=str(tmp_path / "xdg"))
    site, notice = resolve_site(None, env)
    assert site.name == "admin"
    assert notice == "slurmgpu: site admin (admin config: %s)" % p["admin"]


def test_cli_uses_the_environment_and_prints_the_notice_on_stderr(tmp_path):
    p = _all_levels(tmp_path)
    env = _env(tmp_path, XDG_CONFIG_HOME=str(tmp_path / "xdg"))
    env["SLURMGPU_SITE"] = ""  # set but empty counts as unset
    r = runner().invoke(main, ["site", "show", "--json"], env=env)
    assert r.exit_code == 0, r.stderr
    assert json.loads(r.stdout)["name"] == "xdg"
    assert r.stderr == "slurmgpu: site xdg (user config: %s)\n" % p["xdg"]


def test_preflight_thresholds(tmp_path):
    path = write(tmp_path, "extends: dgx-h100\npreflight:\n  min_bandwidth_fraction: 0.5\n  min_free_gb: 200\n")
    s = load_site(path)
    assert (s.preflight.min_bandwidth_fraction, s.preflight.min_free_gb) == (0.5, 200.0)
    assert preset("dgx-h100").preflight.min_bandwidth_fraction == 0.7
    bad = write(tmp_path, "extends: dgx-h100\npreflight:\n  min_bandwidth_fraction: 70\n", "bad.yaml")
    assert issues_of(bad) == [
        "%s:3:3: preflight.min_bandwidth_fraction: a share of the expected bandwidth: between 0 and 1, got 70" % bad
    ]
