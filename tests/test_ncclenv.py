"""The NCCL environment validator: NCCL's parsing rules, the prefix trap, fabric contradictions."""

from __future__ import annotations

import os
import string

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slurmgpu.nccl import PATH_LEVELS, VARS, errors, lint_env, parse_devlist, prefix_traps
from slurmgpu.node import probe
from slurmgpu.site import load_site, preset_dir, preset_names

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROBE = os.path.join(ROOT, "tests", "data", "probe")


def nt_of(preset: str):
    return load_site(str(preset_dir() / (preset + ".yaml"))).node_type_of()


def by_var(findings, var):
    return [f for f in findings if f.var == var]


# -- device lists ---------------------------------------------------------------


def test_prefix_list_on_dgx_h100_also_selects_mlx5_10_and_11():
    f = lint_env({"NCCL_IB_HCA": "mlx5_0,mlx5_1"}, nt_of("dgx-h100"))
    trap = [x for x in f if "prefix" in x.message]
    assert len(trap) == 1 and trap[0].level == "error"
    assert "mlx5_10, mlx5_11" in trap[0].message
    assert trap[0].fix.startswith("prefix the list with '='") and "NCCL_IB_HCA==mlx5_0,mlx5_1" in trap[0].fix


def test_exact_list_has_no_prefix_trap():
    nt = nt_of("dgx-h100")
    exact = "=" + ",".join(n.name for n in nt.compute_nics)
    assert lint_env({"NCCL_IB_HCA": exact}, nt) == []


def test_exclude_prefix_list_excludes_more_than_meant():
    f = lint_env({"NCCL_IB_HCA": "^mlx5_1"}, nt_of("dgx-h100"))
    trap = [x for x in f if "prefix" in x.message]
    assert trap and "excludes mlx5_10, mlx5_11" in trap[0].message
    assert "NCCL_IB_HCA=^=mlx5_1" in trap[0].fix


def test_prefix_trap_uses_devices_present_on_the_node():
    # no site: only the node's own devices tell that mlx5_1 is a prefix
    assert not [x for x in lint_env({"NCCL_IB_HCA": "mlx5_1"}) if "prefix" in x.message]
    f = lint_env({"NCCL_IB_HCA": "mlx5_1"}, hcas=["mlx5_1", "mlx5_12"])
    assert [x for x in f if "also selects mlx5_12" in x.message]


@pytest.mark.parametrize(
    "value, words",
    [
        ("=^mlx5_bond_0", "'=^' does not exclude"),
        ("mlx5_0,^mlx5_1", "only work at the very start"),
        ("mlx5_0,=mlx5_3", "only work at the very start"),
        ("mlx5_0, mlx5_3", "has spaces"),
        ("mlx5_0:x", "port must be a number"),
        ("mlx5_0:0", "port must be a number"),
        ("mlx5_0,,mlx5_3", "empty entry"),
    ],
)
def test_list_syntax_nccl_misreads(value, words):
    f = lint_env({"NCCL_IB_HCA": value})
    assert any(words in x.message and x.level == "error" for x in f), f


def test_devlist_matching_follows_nccl():
    dl = parse_devlist("^=mlx5_bond_0")
    assert dl.exclude and dl.exact
    assert dl.select(["mlx5_0", "mlx5_bond_0", "mlx5_bond_01"]) == ["mlx5_0", "mlx5_bond_01"]
    dl = parse_devlist("mlx5_0:1,mlx5_3")
    assert dl.entries == (("mlx5_0", 1), ("mlx5_3", None))
    assert dl.matches("mlx5_0", 1) and not dl.matches("mlx5_0", 2) and dl.matches("mlx5_30", 2)


names = st.text(alphabet=string.ascii_lowercase + string.digits + "_", min_size=1, max_size=8)


@settings(max_examples=150, deadline=None)
@given(entries=st.lists(names, min_size=1, max_size=4, unique=True), devices=st.lists(names, max_size=10, unique=True))
def test_exact_selects_exactly_and_prefix_selects_superset(entries, devices):
    exact = parse_devlist("=" + ",".join(entries))
    prefix = parse_devlist(",".join(entries))
    assert exact.select(devices) == [d for d in devices if d in entries]
    assert set(exact.select(devices)) <= set(prefix.select(devices))
    extra = set(prefix.select(devices)) - set(exact.select(devices))
    # every device a prefix list adds beyond the exact one is reported by a trap or by no entry at all
    traps = {d for _, ds in prefix_traps(prefix, devices) for d in ds}
    for d in extra:
        assert any(d.startswith(e) for e in entries)
        owner = [e for e in entries if d.startswith(e)]
        assert d in traps or not any(e in devices or e[-1].isdigit() for e in owner)


# -- values NCCL ignores silently -----------------------------------------------------


@pytest.mark.parametrize("value, hint", [("PBH", "PHB"), ("PHX", None), ("phb", "write NCCL_NET_GDR_LEVEL=PHB")])
def test_bad_gdr_level_is_an_error_with_a_hint(value, hint):
    f = by_var(lint_env({"NCCL_NET_GDR_LEVEL": value}), "NCCL_NET_GDR_LEVEL")
    assert f and f[0].level == "error"
    if hint:
        assert hint in f[0].message + f[0].fix


@pytest.mark.parametrize("value", list(PATH_LEVELS) + ["0", "3", "5", "9"])
def test_valid_levels_pass(value):
    assert lint_env({"NCCL_NET_GDR_LEVEL": value, "NCCL_P2P_LEVEL": value}) == []


@pytest.mark.parametrize(
    "value, ok",
    [
        ("22", True),
        ("0x16", True),
        ("026", True),
        ("22x", False),
        ("08", False),
        ("", False),
        ("2.5", False),
        ("40", False),
    ],
)
def test_integer_parameters_parse_like_strtoll(value, ok):
    f = lint_env({"NCCL_IB_TIMEOUT": value})
    assert (f == []) is ok, f


def test_booleans_and_enums():
    assert lint_env({"NCCL_IB_DISABLE": "0", "NCCL_CROSS_NIC": "2", "NCCL_DEBUG": "warn"}) == []
    f = lint_env({"NCCL_IB_DISABLE": "yes", "NCCL_CROSS_NIC": "3", "NCCL_DEBUG": "VERBOSE"})
    assert {x.var for x in errors(f)} == {"NCCL_IB_DISABLE", "NCCL_CROSS_NIC", "NCCL_DEBUG"}


def test_proto_and_algo_lists():
    assert lint_env({"NCCL_PROTO": "^LL128", "NCCL_ALGO": "Ring,Tree"}) == []
    f = lint_env({"NCCL_PROTO": "LL,LL256"})
    assert errors(f) and "'LL256'" in f[0].message


def test_misspelled_variable_gets_did_you_mean():
    f = lint_env({"NCCL_SOCKT_IFNAME": "eth0"})
    assert f[0].level == "warning" and "NCCL_SOCKET_IFNAME" in f[0].message
    f = lint_env({"TORCH_NCCL_ASYNC_ERROR_HANDLNG": "1"})
    assert "TORCH_NCCL_ASYNC_ERROR_HANDLING" in f[0].fix
    f = lint_env({"NCCL_TOTALLY_NEW_KNOB": "1"})
    assert [x.level for x in f] == ["info"]


def test_unknown_net_name_warns_but_plugin_names_pass():
    assert lint_env({"NCCL_NET": "aws libfabric"}) == []
    f = lint_env({"NCCL_NET": "Libfabrik"})
    assert f[0].level == "warning" and "network Libfabrik not found" in f[0].message


def test_only_nccl_variables_are_linted():
    assert lint_env({"PATH": "/bin", "FI_PROVIDER": "cxi", "CUDA_VISIBLE_DEVICES": "0"}) == []


# -- contradictions with the fabric --------------------------------------------------


def test_ib_disable_on_infiniband_is_an_error_but_not_on_slingshot():
    assert [x.var for x in errors(lint_env({"NCCL_IB_DISABLE": "1"}, nt_of("dgx-h100")))] == ["NCCL_IB_DISABLE"]
    assert errors(lint_env({"NCCL_IB_DISABLE": "1"}, nt_of("perlmutter"))) == []


def test_net_transport_against_fabric():
    assert errors(lint_env({"NCCL_NET": "Socket"}, nt_of("dgx-h100")))
    assert errors(lint_env({"NCCL_NET": "IB"}, nt_of("perlmutter")))
    assert errors(lint_env({"NCCL_NET": "AWS Libfabric"}, nt_of("perlmutter"))) == []


def test_hca_list_with_storage_nic_and_unknown_nic():
    nt = nt_of("dgx-h100")
    f = lint_env({"NCCL_IB_HCA": "=mlx5_0,mlx5_2"}, nt)
    assert any("storage/in-band NIC mlx5_2" in x.message for x in f)
    f = lint_env({"NCCL_IB_HCA": "=mlx5_0,mlx5_77"}, nt)
    assert any("mlx5_77 matches no NIC" in x.message for x in f)
    f = lint_env({"NCCL_IB_HCA": "=mlx5_77"}, nt)
    assert any(x.level == "error" and "falls back to TCP" in x.message for x in f)


def test_hca_list_on_slingshot_has_no_effect():
    f = lint_env({"NCCL_IB_HCA": "=mlx5_0"}, nt_of("perlmutter"))
    assert [x.level for x in f] == ["warning"] and "no effect" in f[0].message


def test_roce_traffic_class_must_match_the_site():
    nt = nt_of("hgx-h100-roce")
    assert nt.roce_traffic_class is not None
    bad = errors(lint_env({"NCCL_IB_TC": str(nt.roce_traffic_class + 1)}, nt))
    assert bad and "NCCL_IB_TC=%d" % nt.roce_traffic_class in bad[0].fix
    assert lint_env({"NCCL_IB_TC": str(nt.roce_traffic_class)}, nt) == []


def test_socket_ifname_not_selecting_site_interface_warns():
    nt = nt_of("dgx-h100")
    f = lint_env({"NCCL_SOCKET_IFNAME": "eth"}, nt)
    assert f and f[0].level == "warning" and nt.socket_ifname in f[0].message
    assert lint_env({"NCCL_SOCKET_IFNAME": "bond"}, nt) == []


def test_p2p_disable_on_nvlink_node_warns():
    f = lint_env({"NCCL_P2P_DISABLE": "1"}, nt_of("dgx-h100"))
    assert f and f[0].level == "warning" and "NVLink" in f[0].message
    assert lint_env({"NCCL_P2P_DISABLE": "1"}, nt_of("rtx-4090")) == []


# -- the table and the generators' own output ---------------------------------------


def test_table_kinds_are_known():
    kinds = {"int", "bool", "tri", "level", "enum", "list", "devlist", "net", "str"}
    assert {v.kind for v in VARS.values()} <= kinds
    assert all(v.choices for v in VARS.values() if v.kind in ("enum", "list"))


@pytest.mark.parametrize("preset", preset_names())
def test_every_preset_env_is_clean(preset):
    site = load_site(str(preset_dir() / (preset + ".yaml")))
    for nt in site.node_types.values():
        assert errors(lint_env(nt.env, nt)) == [], (preset, nt.name)


@pytest.mark.parametrize("fixture", ["dgx-h100", "roce-a100", "efa-p5"])
def test_env_probe_implies_is_clean(fixture):
    from slurmgpu.node import FixtureRunner, read_net_sysfs

    d = os.path.join(PROBE, fixture)
    r = probe(sysfs=os.path.join(d, "sys"), runner=FixtureRunner(d), hostname="n1", net_reader=read_net_sysfs)
    assert r.nccl_env
    assert errors(lint_env(r.nccl_env, hcas=[p.device for p in r.rdma], ifaces=[i.name for i in r.interfaces])) == []


@pytest.mark.parametrize(
    "preset,value,ok",
    [
        ("frontier", "=hsn0,hsn1,hsn2,hsn3", True),  # the site's own comma list, written exactly
        ("frontier", "=eth0", False),
        ("lumi-g", "=hsn0,hsn1", True),  # the site gives a prefix (hsn)
        ("lumi-g", "eth", False),
        ("dgx-h100", "=bond0", True),
        ("dgx-h100", "=bond1", False),
    ],
)
def test_socket_ifname_compared_with_lists_and_prefixes_from_the_site(preset, value, ok):
    from slurmgpu.nccl import lint_env
    from slurmgpu.site import load_site, preset_dir

    nt = load_site(str(preset_dir() / (preset + ".yaml"))).node_type_of()
    found = [f for f in lint_env({"NCCL_SOCKET_IFNAME": value}, nt) if f.var == "NCCL_SOCKET_IFNAME"]
    assert (not found) == ok, found


def test_mnnvl_settings_follow_the_site(tmp_path):
    """GB200 preset (mnnvl: on) forces NCCL_MNNVL_ENABLE=1 on multi-node jobs; off disables MNNVL and NVLS."""
    from slurmgpu.nccl import fabric_env
    from slurmgpu.plan import Layout

    site = load_site(str(preset_dir() / "gb200-nvl72.yaml"))
    nt = site.node_type_of()
    multi, single = Layout(tp=4, dp=8, nodes=8, gpus_per_node=4), Layout(tp=4, nodes=1, gpus_per_node=4)
    assert fabric_env(nt, "torchrun", multi).get("NCCL_MNNVL_ENABLE") == "1"
    assert fabric_env(nt, "torchrun", single).get("NCCL_MNNVL_ENABLE") is None
    f = tmp_path / "off.yaml"
    f.write_text('extends: gb200-nvl72\nname: gb-off\nnode_types:\n  gb200-tray:\n    mnnvl: "off"\n')
    env = fabric_env(load_site(str(f)).node_type_of(), "torchrun", multi)
    assert (env.get("NCCL_MNNVL_ENABLE"), env.get("NCCL_NVLS_ENABLE")) == ("0", "0")
    h100 = load_site(str(preset_dir() / "dgx-h100.yaml")).node_type_of()
    assert fabric_env(h100, "torchrun", Layout(tp=8, dp=2, nodes=2, gpus_per_node=8)).get("NCCL_MNNVL_ENABLE") is None


def test_mnnvl_on_a_single_node_domain_is_a_located_error(tmp_path):
    from slurmgpu.errors import ConfigError

    f = tmp_path / "bad.yaml"
    f.write_text('extends: dgx-h100\nname: bad\nnode_types:\n  dgx-h100:\n    mnnvl: "on"\n')
    with pytest.raises(ConfigError) as exc:
        load_site(str(f))
    assert "mnnvl" in str(exc.value) and "nvlink_domain" in str(exc.value)


@pytest.mark.parametrize("var", ["NCCL_MNNVL_ENABLE", "NCCL_CUMEM_ENABLE"])
@pytest.mark.parametrize("mnnvl,level", [("on", "error"), ("auto", "warning"), ("off", None)])
def test_mnnvl_or_cumem_off_on_an_nvl72_partition_is_flagged(tmp_path, var, mnnvl, level):
    """Either variable at 0 keeps all traffic between an NVL72 rack's trays on the network, with no
    message from NCCL (MNNVL needs cuMem, src/mnnvl.cc). A site without IMEX (mnnvl: off) sets
    NCCL_MNNVL_ENABLE=0 itself: nothing to flag there; nor on a one-node NVLink domain."""
    f = tmp_path / "s.yaml"
    f.write_text('extends: gb200-nvl72\nname: gb\nnode_types:\n  gb200-tray:\n    mnnvl: "%s"\n' % mnnvl)
    nt = load_site(str(f)).node_type_of()
    found = by_var(lint_env({var: "0"}, nt), var)
    if level is None:
        assert found == []
    else:
        assert [x.level for x in found] == [level], found
        assert "silently goes over" in found[0].message and "unset %s" % var in found[0].fix
    assert by_var(lint_env({var: "1"}, nt), var) == []
    assert by_var(lint_env({var: "0"}, nt_of("dgx-h100")), var) == []
