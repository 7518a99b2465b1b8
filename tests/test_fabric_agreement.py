"""One table of NCCL settings per fabric (slurmgpu.fabric.FABRIC_TABLE), three readers that agree:
what `gen` writes (fabric_env), what `probe` says a node calls for (implied_nccl_env), and what
the submit policy asks multi-node jobs to set (topology_table -> nccl-env-missing)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from slurmgpu import job as J
from slurmgpu.job import JobSpec
from slurmgpu.nccl import FABRIC_TABLE, OFI_NET, derived_names, fabric_env, parse_devlist, socket_ifname
from slurmgpu.node import Gpu, implied_nccl_env
from slurmgpu.plan import Layout
from slurmgpu.policy import check_script, topology_table
from slurmgpu.site import load_site, preset_dir, preset_names
from slurmgpu.vocab import FABRICS

_SITES = {n: load_site(str(preset_dir() / (n + ".yaml"))) for n in preset_names()}


def _partitions():
    for name, site in sorted(_SITES.items()):
        for pname in site.partitions:
            yield name, pname


PARTS = list(_partitions())


def _node(name, pname):
    site = _SITES[name]
    return site.node_types[site.partitions[pname].node_type]


def test_the_table_covers_every_fabric_kind_and_the_presets_cover_the_table():
    assert set(FABRIC_TABLE) == set(FABRICS)
    assert {_node(*p).fabric for p in PARTS} == set(FABRICS)
    kinds_vendors = {(_node(*p).fabric, _node(*p).vendor) for p in PARTS}
    assert ("slingshot", "amd") in kinds_vendors and ("slingshot", "nvidia") in kinds_vendors


@pytest.mark.parametrize("name,pname", PARTS, ids=["%s-%s" % p for p in PARTS])
def test_probe_gen_and_policy_agree(name, pname):
    nt = replace(_node(name, pname), env={})  # the table's values, not the site's own env:
    lay = Layout(tp=1, pp=1, dp=2 * nt.gpus, nodes=2, gpus_per_node=nt.gpus)
    gen = {e.name: e.value for e in fabric_env(nt, "torchrun", lay).env}
    single = {e.name: e.value for e in fabric_env(nt, "torchrun", replace(lay, nodes=1, dp=nt.gpus)).env}
    probe = implied_nccl_env(nt.fabric, nt.nics, nt.socket_ifname, [Gpu(0, nt.gpu_model, nt.vendor)])
    policy = topology_table(_SITES[name])["partitions"][pname]["nccl"]
    # what the policy asks a multi-node job for, gen writes and the probe calls for
    for var in policy:
        assert var in gen and var in probe, (var, gen, probe)
    # the same values where both say it (HCA and interface lists: the same devices)
    for var in set(gen) & set(probe):
        if var == "NCCL_IB_HCA":
            names = [n.name for n in nt.nics]
            assert [n for n in names if parse_devlist(gen[var]).matches(n)] == [
                n for n in names if parse_devlist(probe[var]).matches(n)
            ]
        elif var == "NCCL_SOCKET_IFNAME":
            assert gen[var] == socket_ifname(probe[var])[0]
        else:
            assert gen[var] == probe[var], var
    # the plugin name, for NVIDIA and AMD alike; never on a single node (HPE)
    if FABRIC_TABLE[nt.fabric].net:
        assert gen["NCCL_NET"] == probe["NCCL_NET"] == OFI_NET == "AWS Libfabric"
        assert "NCCL_NET" not in single
    # what gen derives itself is what a drafted site's env: leaves out
    assert set(gen) - {"NCCL_DEBUG", "CUDA_DEVICE_MAX_CONNECTIONS", "NCCL_IB_GID_INDEX", "NCCL_IB_TC"} <= set(
        derived_names(nt.fabric)
    )


@pytest.mark.parametrize("name,pname", PARTS, ids=["%s-%s" % p for p in PARTS])
def test_a_generated_multi_node_script_sets_what_the_policy_asks_for(name, pname, tmp_path, monkeypatch):
    monkeypatch.setenv("SLURMGPU_CACHE_DIR", str(tmp_path / "cache"))
    site = _SITES[name]
    if site.partitions[pname].max_nodes_per_job < 2:
        pytest.skip("single-node partition")
    spec = JobSpec(launcher="torchrun", partition=pname, nodes=2, command=("train.py",))
    gen = J.generate(site, spec, J.search_path(None, None, site))
    v = check_script(site, gen.script)
    assert v.decision == "accept" and "nccl-env-missing" not in v.rules, v.warnings
    # and the same script without the fabric block is warned about, where the policy asks for something
    if topology_table(site)["partitions"][pname]["nccl"]:
        bare = (
            "\n".join(
                line
                for line in gen.script.splitlines()
                if not line.startswith(("export NCCL_", "export FI_", "export HSA_"))
            )
            + "\n"
        )
        assert "nccl-env-missing" in check_script(site, bare).rules
