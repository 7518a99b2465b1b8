"""The site's GPU -> NUMA -> CPU -> NIC map (slurmgpu/site/affinity.py): its syntax, its checks,
and that every preset documents one or says why not (issue 30)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from slurmgpu.errors import ConfigError
from slurmgpu.site import cpu_mask, format_cpulist, load_site, parse_cpulist, preset_dir, preset_names


def preset(name):
    return load_site(str(preset_dir() / (name + ".yaml")))


def write(tmp_path, text, name="site.yaml"):
    p = tmp_path / name
    p.write_text(text)
    return str(p)


@given(st.sets(st.integers(min_value=0, max_value=600), max_size=80))
def test_cpulist_round_trip(cpus):
    assert parse_cpulist(format_cpulist(cpus)) == tuple(sorted(cpus))


def test_cpulist_and_mask_forms():
    assert parse_cpulist("0-3,8,10-11") == (0, 1, 2, 3, 8, 10, 11)
    assert parse_cpulist(" 5 ") == (5,) and parse_cpulist("") == ()
    assert format_cpulist([3, 1, 2, 7]) == "1-3,7"
    assert cpu_mask([0, 1]) == "0x3" and cpu_mask([4]) == "0x10" and cpu_mask(range(56, 112)).endswith("0" * 14)
    for bad in ("0-", "a", "3-1", "0,,1", [0]):
        with pytest.raises(ValueError):
            parse_cpulist(bad)


def test_every_preset_has_a_documented_map_or_says_why_not():
    seen = 0
    for name in preset_names():
        for nt in preset(name).node_types.values():
            seen += 1
            amap = nt.affinity
            assert amap is not None, "%s/%s: no affinity block (give the map or unknown: WHY)" % (name, nt.name)
            if not amap.known:
                assert len(amap.unknown) > 20, (name, amap.unknown)
                continue
            assert amap.source and not amap.verified, (name, "presets come from documents, not from the site's nodes")
            assert len(amap.gpus) == nt.gpus
            assert all(g.numa is not None for g in amap.gpus)
            for g in amap.gpus:
                if amap.numa_cpus:
                    assert set(g.cpus) <= set(amap.numa_cpus[g.numa]), (name, g)
                assert set(g.nics) <= {n.name for n in nt.nics}
                # the NIC NCCL should use for the GPU is one of its compute NICs
                assert not g.nics or g.nics[0] in {n.name for n in nt.compute_nics}, (name, g)
    assert seen >= 15


def test_preset_facts():
    h100 = preset("dgx-h100").node_type_of().affinity
    assert [g.numa for g in h100.gpus] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert format_cpulist(h100.gpus[5].cpus) == "56-111,168-223" and h100.gpus[5].nics == ("mlx5_9",)
    a100 = preset("dgx-a100").node_type_of().affinity
    assert [g.numa for g in a100.gpus] == [3, 3, 1, 1, 7, 7, 5, 5]
    gb = preset("gb200-nvl72").node_type_of().affinity
    assert [format_cpulist(g.cpus) for g in gb.gpus] == ["0-71", "0-71", "72-143", "72-143"]
    gh = preset("alps-gh200").node_type_of().affinity
    assert [(g.numa, g.memory_numa, g.nics) for g in gh.gpus][3] == (3, 28, ("cxi3",))
    fr = preset("frontier").node_type_of().affinity
    assert fr.slices and format_cpulist(fr.gpus[0].cpus) == "49-55" and fr.gpus[4].numa == 0
    assert not preset("aws-p5").node_type_of().affinity.known


BASE = """\
name: t
partitions:
  p: {node_type: n, nodes: 2}
node_types:
  n:
    gpus: 2
    gpu_model: H100
    gpu_memory_gb: 80
    bf16_tflops: 989
    link: nvlink
    link_gbs: 900
    cpus: 8
    memory_gb: 64
    fabric: infiniband
    nics:
      - {name: mlx5_0, gbps: 400}
      - {name: mlx5_1, gbps: 400}
    affinity:
%s
"""


def load_map(tmp_path, block):
    return load_site(write(tmp_path, BASE % block)).node_types["n"].affinity


def test_a_map_with_slices_and_a_cpu_less_memory_node(tmp_path):
    amap = load_map(
        tmp_path,
        "      source: probe on n01\n      verified: true\n      numa: {0: 0-3, 1: 4-7}\n      gpus:\n"
        "        - {numa: 0, cpus: 1-3, nics: [mlx5_0], memory_numa: 2}\n        - {numa: 1, nics: [mlx5_1]}\n",
    )
    assert amap.verified and amap.slices and amap.multi_numa
    assert amap.gpus[0].cpus == (1, 2, 3) and amap.gpus[1].cpus == (4, 5, 6, 7)
    ranks = amap.ranks(2)
    assert (ranks[0].cpulist, ranks[1].nics) == ("1-3", ("mlx5_1",))
    assert amap.ranks(3) == ()


@pytest.mark.parametrize(
    "block,error",
    [
        ("      source: x\n      numa: {0: 0-7}\n      gpus:\n        - {numa: 0}\n", "has 2 GPUs but the map lists 1"),
        (
            "      source: x\n      numa: {0: 0-3}\n      gpus:\n        - {numa: 0}\n        - {numa: 1}\n",
            "NUMA node 1 is not in",
        ),
        (
            "      source: x\n      numa: {0: 0-3, 1: 4-7}\n      gpus:\n        - {numa: 0, cpus: 2-5}\n"
            "        - {numa: 1}\n",
            "CPUs 4-5 are not all on NUMA node 0",
        ),
        ("      source: x\n      numa: {0: 0-4, 1: 4-7}\n      gpus: [{numa: 0}, {numa: 1}]\n", "CPU 4 is also on"),
        ("      unknown: nobody knows\n      gpus: [{numa: 0}, {numa: 1}]\n", "not both"),
        ("      source: x\n      numa: {0: 0-3, 1: 4-7}\n      gpus: [{numa: 0}, {}]\n", "give the GPU's NUMA node"),
        (
            "      source: x\n      numa: {0: 0-3, 1: 4-7}\n      gpus: [{numa: 0, cpus: 0-}, {numa: 1}]\n",
            "not a CPU list",
        ),
        (
            "      source: x\n      numa: {0: 0-3, 1: 4-7}\n      gpus: [{numa: 0, memory_numa: 1}, {numa: 1}]\n",
            "has CPUs",
        ),
        ("      source: x\n", "needs gpus"),
    ],
)
def test_contradictions_are_errors_with_their_position(tmp_path, block, error):
    with pytest.raises(ConfigError) as e:
        load_map(tmp_path, block)
    assert error in str(e.value) and "node_types.n.affinity" in str(e.value) and "site.yaml:" in str(e.value)


def test_a_derived_site_with_its_own_nics_keeps_the_cpu_map_and_says_which_nics_it_dropped(tmp_path):
    path = write(
        tmp_path,
        "extends: dgx-h100\nname: pod\nnode_types:\n  dgx-h100:\n    nics:\n      - {name: mlx5_0, gbps: 400}\n",
    )
    amap = load_site(path).node_type_of().affinity
    assert amap.known and amap.gpus[0].nics == ("mlx5_0",) and amap.gpus[1].nics == ()
    assert len(amap.notes) == 7 and "mlx5_3 is not one of the node type's nics" in amap.notes[0]


def test_a_derived_site_says_unknown_for_its_own_nodes_or_gives_a_map_over_a_presets_unknown(tmp_path):
    """A site that extends gb200-nvl72 for trays with other CPUs said `affinity: {unknown: ...}` and
    was refused ("give either the map or unknown, not both"): the preset's numa/gpus were merged into
    its answer. The two forms replace each other whole, both ways."""
    path = write(
        tmp_path,
        "extends: gb200-nvl72\nname: trays\nnode_types:\n  gb200-tray:\n    cpus: 16\n"
        "    affinity: {unknown: 16-CPU test trays}\n",
    )
    amap = load_site(path).node_type_of().affinity
    assert not amap.known and amap.unknown == "16-CPU test trays" and amap.gpus == ()
    unknown_preset = next(
        p for p in preset_names() if not load_site(str(preset_dir() / (p + ".yaml"))).node_type_of().affinity.known
    )
    nt = load_site(str(preset_dir() / (unknown_preset + ".yaml"))).node_type_of()
    gpus = "".join("      - {numa: 0}\n" for _ in range(nt.gpus))
    path = write(
        tmp_path,
        "extends: %s\nname: probed\nnode_types:\n  %s:\n    affinity:\n      source: probe on n1\n"
        "      numa: {0: 0-%d}\n      gpus:\n%s" % (unknown_preset, nt.name, nt.cpus - 1, gpus),
        name="probed.yaml",
    )
    amap = load_site(path).node_type_of().affinity
    assert amap.known and not amap.unknown and len(amap.gpus) == nt.gpus


def test_site_show_prints_the_map_or_why_not():
    from click.testing import CliRunner

    from slurmgpu.cli import main

    out = CliRunner().invoke(main, ["site", "show", "gb200-nvl72"]).output
    assert "    GPU -> NUMA node: 0,0,1,1 (unverified)" in out
    out = CliRunner().invoke(main, ["site", "show", "aws-p5"]).output
    assert "    GPU -> NUMA node: unknown (no public p5.48xlarge" in out
