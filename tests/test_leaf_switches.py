"""IB leaf switches in the site file (partitions.X.leaf_switches): the loader's errors, gen's
--switches=1 hint, and `admin topology` (tree form, gres.conf/slurm.conf lines, --diff)."""

from __future__ import annotations

import textwrap

import pytest
from click.testing import CliRunner

from slurmgpu.cli import main
from slurmgpu.discover.topology import diff_live, parse_show_topology
from slurmgpu.errors import ConfigError
from slurmgpu.site import load_site
from slurmgpu.slurm import CommandResult

LEAVES = textwrap.dedent(
    """\
    extends: dgx-h100
    name: leafy
    topology: tree
    partitions:
      gpu:
        node_type: dgx-h100
        nodes: 8
        leaf_switches:
          ib-leaf1: "dgx[01-04]"
          ib-leaf2: "dgx[05-08]"
    """
)


def run(*args):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


@pytest.fixture
def leafy(tmp_path):
    f = tmp_path / "leafy.yaml"
    f.write_text(LEAVES)
    return str(f)


def test_leaf_switches_load_expanded(leafy):
    p = load_site(leafy).partitions["gpu"]
    assert p.leaf_switches["ib-leaf2"] == ("dgx05", "dgx06", "dgx07", "dgx08") and p.largest_leaf == 4


@pytest.mark.parametrize(
    "leaves, words",
    [
        ('ib-leaf1: "dgx[01-04"', "not a Slurm host list"),
        ('ib-leaf1: "dgx[01-04]"\n      ib-leaf2: "dgx[04-05]"', "dgx04 is already under leaf switch ib-leaf1"),
        ('ib-leaf1: "dgx[01-09]"', "list 9 nodes but the partition has 8"),
    ],
)
def test_bad_leaf_switches_are_located_errors(tmp_path, leaves, words):
    f = tmp_path / "bad.yaml"
    text = LEAVES.split("    leaf_switches:\n")[0] + "    leaf_switches:\n      " + leaves + "\n"
    f.write_text(text)
    with pytest.raises(ConfigError) as exc:
        load_site(str(f))
    msg = str(exc.value)
    assert words in msg and "partitions.gpu.leaf_switches" in msg and "bad.yaml" in msg


def test_gen_asks_for_one_leaf_when_the_job_fits_under_one(leafy):
    small = run("gen", "--site", leafy, "--nodes", "4", "--launcher", "srun", "--no-preflight", "--", "true")
    assert small.exit_code == 0, small.output
    assert "#SBATCH --switches=1" in small.output.splitlines()
    big = run("gen", "--site", leafy, "--nodes", "6", "--launcher", "srun", "--no-preflight", "--", "true")
    assert big.exit_code == 0 and "--switches" not in big.output
    plain = run("gen", "--site", "dgx-h100", "--nodes", "2", "--launcher", "srun", "--no-preflight", "--", "true")
    assert "--switches" not in plain.output  # no leaves listed: no hint


def test_checked_script_with_the_hint_passes(leafy, tmp_path):
    out = run("gen", "--site", leafy, "--nodes", "2", "--launcher", "srun", "--no-preflight", "--", "true").output
    job = tmp_path / "job.sh"
    job.write_text(out)
    r = run("check", "--site", leafy, str(job))
    assert r.exit_code == 0, r.output


def test_admin_topology_tree_from_the_site_and_node_lines(leafy):
    r = run("admin", "topology", "--site", leafy, "--form", "tree")
    assert r.exit_code == 0, r.output
    assert (
        "SwitchName=ib-leaf1 Nodes=dgx[01-04]" in r.output and "SwitchName=spine Switches=ib-leaf1,ib-leaf2" in r.output
    )
    g = run("admin", "topology", "--site", leafy, "--emit", "gres")
    assert "NodeName=dgx[01-08] Name=gpu Type=h100 File=/dev/nvidia[0-7]" in g.output
    n = run("admin", "topology", "--site", "gb200-nvl72", "--nodes", "gb[001-036]", "--emit", "nodes")
    lines = n.output.splitlines()
    assert "TopologyPlugin=topology/block" in lines and "SwitchType=switch/nvidia_imex" in lines
    assert "NodeName=gb[001-036] CPUs=144 RealMemory=983040 Gres=gpu:gb200:4 State=UNKNOWN" in lines


class Live:
    def __init__(self, rc, out):
        self.rc, self.out = rc, out

    def run(self, argv, timeout=60.0):
        return CommandResult(tuple(argv), self.rc, self.out, "" if self.rc == 0 else "cannot reach slurmctld")


BLOCK_OUT = (
    "BlockName=rack1 BlockIndex=0 Nodes=gb[001-018] BlockSize=18\n"
    "BlockName=rack2 BlockIndex=1 Nodes=gb[019-035] BlockSize=18\n"
    "BlockName=rack3 BlockIndex=2 Nodes=gb036 BlockSize=18\n"
)


def test_diff_against_the_live_topology():
    want = {"rack1": ["gb%03d" % i for i in range(1, 19)], "rack2": ["gb%03d" % i for i in range(19, 37)]}
    d, why = diff_live(Live(0, BLOCK_OUT), want, "BlockName")
    assert why == "" and not d.same
    assert d.only_live == ("rack3",) and d.changed == (("rack2", "gb[019-036]", "gb[019-035]"),)
    assert "only in the live cluster: rack3" in d.text()
    same, _ = diff_live(
        Live(0, BLOCK_OUT), {k: v for k, v in parse_show_topology(BLOCK_OUT, "BlockName").items()}, "BlockName"
    )
    assert same.same
    none, why = diff_live(Live(1, ""), want, "BlockName")
    assert none is None and "cannot reach slurmctld" in why


def test_cli_diff_without_a_cluster_says_so_and_exits_3(tmp_path, monkeypatch):
    monkeypatch.setenv("SLURM_CONF", str(tmp_path / "none.conf"))
    monkeypatch.setenv("PATH", str(tmp_path))  # no scontrol at all
    r = CliRunner().invoke(main, ["admin", "topology", "--site", "gb200-nvl72", "--nodes", "gb[001-036]", "--diff"])
    assert r.exit_code == 3 and "live topology not compared" in r.output
