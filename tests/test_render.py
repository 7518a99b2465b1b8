"""The renderer, the fabric block, the launcher facts and the job spec, checked piece by piece.

Golden files (tests/golden/*.sh) pin a few template x site x launcher outputs byte for
byte; `pytest --update-golden` rewrites them (tests/golden_plugin.py) and prints the diff.
"""

from __future__ import annotations

import difflib
import subprocess
import textwrap
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slurmgpu import job as J
from slurmgpu import render as R
from slurmgpu.errors import ConfigError, PlanError, TemplateError
from slurmgpu.job import ContainerSpec, JobSpec, apply_overrides, load_spec
from slurmgpu.job import launchers as L
from slurmgpu.nccl import cuda_device_max_connections, fabric_env, parse_devlist, socket_ifname
from slurmgpu.plan import Layout, get_model
from slurmgpu.site import load_site, preset_dir, preset_names

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = ROOT / "tests" / "golden"


def preset(name):
    return load_site(str(preset_dir() / (name + ".yaml")))


def node_of(site, partition=None):
    return site.node_type_of(partition)


@pytest.fixture(autouse=True)
def _no_template_cache(monkeypatch):
    monkeypatch.setenv("SLURMGPU_CACHE_DIR", "")


def render_spec(site, spec, layout=None, model=None, dirs=None, regen="slurmgpu gen test"):
    sizing = J.plan_layout(site, spec) if layout is None else J.Sizing(layout=layout, model=model)
    req, warnings = J.build_request(site, spec, sizing, regen)
    return J.render_request(req, dirs or J.search_path(None, None, site)), req, warnings


# ---------------------------------------------------------------------------
# Quoting

HOSTILE = [
    "plain",
    "two words",
    "it's",
    'say "hi"',
    "$HOME",
    "`id`",
    "$(touch x)",
    "a;b",
    "a|b&&c",
    "~/x",
    "*",
    "back\\slash",
    "new\nline",
    "ends in a newline\n",
    "trail\n",
    "tab\there",
    "",
    "--",
    "-",
    "=lead",
    "x=~/y",
    "#hash",
    "caf\u00e9",
    "\x01ctl",
]


def _bash_words(words):
    """What bash makes of `printf '%s\\0' WORD...` with each word quoted by shquote."""
    script = "printf '%s\\0' " + " ".join(R.shquote(w) for w in words)
    out = subprocess.run(["bash", "-c", script], capture_output=True, check=True).stdout
    return out.decode("utf-8").split("\0")[:-1]


def test_shquote_gives_bash_back_every_hostile_value():
    assert _bash_words(HOSTILE) == HOSTILE


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=12),
        min_size=1,
        max_size=6,
    )
)
def test_shquote_roundtrip_property(words):
    assert _bash_words(words) == words


def test_shquote_stays_on_one_line():
    for w in HOSTILE:
        assert "\n" not in R.shquote(w)


def test_shquote_refuses_nul():
    with pytest.raises(TemplateError):
        R.shquote("a\0b")


# Path values: only the allow-listed variables expand, when the script runs.
PATH_ENV = {
    "USER": "alice",
    "HOME": "/home/alice",
    "SCRATCH": "/lustre/alice",
    "SLURM_JOB_ID": "4242",
    "OTHER": "NOT-EXPANDED",
    "USERNAME": "NOT-EXPANDED",
}
HOSTILE_PATHS = [
    "/scratch/$USER/ckpt",
    "/scratch/${USER}/ckpt",
    "$SCRATCH/run-$SLURM_JOB_ID",
    "${HOME}/x",
    "/p/$USER/$(touch PWNED_a)",
    "/p/${USER}/`touch PWNED_b`",
    "/p/$USER/$OTHER/${OTHER}",
    "/p/$USERNAME/$USER_x",
    "/p/$USER/it's \"dq\" 'sq'",
    "/p/$USER/new\nline\ttab",
    "/p/$USER/back\\slash",
    "/p/$$USER",
    "/p/${USER",
    "/p/$USER!x",
    "$(rm -rf /)/$USER",
    "/plain/path",
    "/with space/x",
    "~/x",
    "/p/${USER:-x}",
    "/p/\\$USER",
]


def _bash_env_words(words, quote, cwd):
    script = "set -euo pipefail; printf '%s\\0' " + " ".join(quote(w) for w in words)
    out = subprocess.run(["bash", "-c", script], capture_output=True, check=True, env=PATH_ENV, cwd=str(cwd)).stdout
    return out.decode("utf-8").split("\0")[:-1]


def test_shpath_expands_only_the_path_variables(tmp_path):
    got = _bash_env_words(HOSTILE_PATHS, R.shpath, tmp_path)
    assert got == [R.expand_path(p, PATH_ENV) for p in HOSTILE_PATHS]
    assert got[:4] == ["/scratch/alice/ckpt", "/scratch/alice/ckpt", "/lustre/alice/run-4242", "/home/alice/x"]
    assert got[6] == "/p/alice/$OTHER/${OTHER}" and got[7] == "/p/$USERNAME/$USER_x"
    assert got[9] == "/p/alice/new\nline\ttab"
    assert not list(tmp_path.iterdir()), "an injected command ran"
    for p in HOSTILE_PATHS:
        assert "\n" not in R.shpath(p)
        if "$" not in p:
            assert R.shpath(p) == R.shquote(p)  # no variable: quoted exactly as before
    assert R.shpath("/scratch/$USER/ckpt") == '"/scratch/${USER}/ckpt"'


def test_shpath_stops_the_job_on_an_unset_variable():
    r = subprocess.run(
        ["bash", "-c", "set -euo pipefail; echo %s" % R.shpath("$SCRATCH/ckpt")],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin"},
    )
    assert r.returncode != 0 and "SCRATCH" in r.stderr


_PATH_TOKENS = st.sampled_from(
    [
        "$USER",
        "${USER}",
        "$SCRATCH",
        "${SLURM_JOB_ID}",
        "$HOME",
        "$OTHER",
        "$",
        "{",
        "}",
        "'",
        '"',
        "`",
        "\\",
        "\n",
        " ",
        "!",
        "$(",
        ")",
        "/",
        "x",
        "\u00e9",
        "_",
    ]
)


@settings(max_examples=60, deadline=None)
@given(st.lists(_PATH_TOKENS, min_size=1, max_size=10).map("".join))
def test_shpath_roundtrip_property(value):
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        assert _bash_env_words([value], R.shpath, d) == [R.expand_path(value, PATH_ENV)]
        assert not list(Path(d).iterdir())


def test_paths_in_the_script_expand_and_nothing_else_does():
    site = preset("dgx-h100")
    spec = _spec(
        launcher="megatron",
        command=(),
        checkpoint_dir="/scratch/$USER/ck $(id)",
        container=ContainerSpec(runtime="pyxis", image="nvcr.io#nvidia/x:$USER", mounts=("$SCRATCH:/scratch",)),
        env={"NOTE": "$USER stays"},
        args=("--data-path", "/data/$USER"),
        smoke=False,
        tokenizer="meta-llama/Llama-3.1-8B",
        train_iters=100,
        lr="3e-4",
    )
    text, req, _ = render_spec(site, spec, model=get_model("llama3.1-8b"), layout=LAY2)
    assert "export SLURMGPU_CHECKPOINT_DIR='/scratch/'\"${USER}\"'/ck $(id)'\n" in text
    assert "    --save '/scratch/'\"${USER}\"'/ck $(id)' \\\n" in text
    assert "    --load '/scratch/'\"${USER}\"'/ck $(id)' \\\n" in text
    assert "    --tokenizer-model meta-llama/Llama-3.1-8B" in text
    assert 'SLURMGPU_MOUNTS="$PWD:$PWD"",${SCRATCH}:/scratch"\n' in text
    # everything that is not a path stays literal
    assert "export NOTE='$USER stays'" in text and "--data-path '/data/$USER'" in text
    assert "SLURMGPU_IMAGE='nvcr.io#nvidia/x:$USER'" in text


def test_a_leading_tilde_in_a_path_is_a_warning():
    site = preset("dgx-h100")
    _, _, warnings = render_spec(site, _spec(checkpoint_dir="~/ckpt"))
    assert any("checkpoint_dir ~/ckpt: a leading ~ is not expanded" in w for w in warnings), warnings


def test_sbatch_quote_escapes_what_sbatch_splits_on():
    # sbatch splits on blanks, groups double quotes (\\" and \\\\ inside) and cuts at an unescaped '#'.
    # tests/test_hostile.py submits such names to real Slurm and reads them back.
    assert R.sbatch_quote("nvcr.io#nvidia/pytorch:24.04-py3") == "nvcr.io\\#nvidia/pytorch:24.04-py3"
    assert R.sbatch_quote("my job #1") == '"my job #1"'
    assert R.sbatch_quote("a\"b'c\\d") == '"a\\"b\'c\\\\d"'
    assert R.sbatch_quote("%x-%j.out") == "%x-%j.out"
    with pytest.raises(TemplateError):
        R.sbatch_quote("two\nlines")


def test_arg_lines_pairs_options_with_values():
    assert R.arg_lines(["train.py", "--lr", "3e-4", "--flag", "--x=1", "a b", "--", "c"]) == [
        "train.py",
        "--lr 3e-4",
        "--flag",
        "--x=1",
        "'a b'",
        "--",
        "c",
    ]
    assert R.arg_lines(["vllm", "serve", "org/m x", "--port", "1"]) == ["vllm serve 'org/m x'", "--port 1"]


# ---------------------------------------------------------------------------
# Fabric block: values from the site, exact lists, computed CUDA_DEVICE_MAX_CONNECTIONS

LAY2 = Layout(tp=8, pp=2, dp=1, nodes=2, gpus_per_node=8)


def _selects(value, names):
    dl = parse_devlist(value)
    return sorted(n for n in names if dl.matches(n))


@pytest.mark.parametrize(
    "name", [n for n in preset_names() if preset(n).node_type_of().fabric in ("infiniband", "roce")]
)
def test_ib_hca_is_exactly_the_compute_hcas(name):
    site = preset(name)
    nt = node_of(site)
    env = {e.name: e.value for e in fabric_env(nt, "torchrun", replace(LAY2, gpus_per_node=nt.gpus)).env}
    value = env.get("NCCL_IB_HCA", "")
    assert value.startswith("="), "an exact list, or mlx5_1 would also pick mlx5_10..19"
    # Every NIC of the node plus the names a prefix match would catch (mlx5_1 -> mlx5_10..19).
    universe = {n.name for n in nt.nics} | {n.name + str(d) for n in nt.nics for d in range(10)}
    assert _selects(value, universe) == sorted(n.name for n in nt.compute_nics)


def test_roce_gid_index_and_traffic_class_come_from_the_site():
    site = preset("hgx-h100-roce")
    nt = node_of(site)
    f = fabric_env(nt, "torchrun", LAY2)
    assert f.get("NCCL_IB_GID_INDEX") == str(nt.roce_gid_index)
    assert f.get("NCCL_IB_TC") == str(nt.roce_traffic_class)
    other = replace(nt, roce_gid_index=None, roce_traffic_class=None)
    f2 = fabric_env(other, "torchrun", LAY2)
    assert f2.get("NCCL_IB_GID_INDEX") is None and f2.get("NCCL_IB_TC") is None


def test_efa_uses_libfabric_and_the_plugin_only_across_nodes():
    nt = node_of(preset("aws-p5"))
    multi = fabric_env(nt, "torchrun", LAY2)
    assert multi.get("FI_PROVIDER") == "efa"
    assert multi.get("NCCL_NET") == "AWS Libfabric"
    assert multi.get("NCCL_IB_HCA") is None
    single = fabric_env(nt, "torchrun", replace(LAY2, nodes=1, pp=1))
    assert single.get("NCCL_NET") is None


def test_slingshot_nvidia_and_amd():
    pm = node_of(preset("perlmutter"))
    f = fabric_env(pm, "torchrun", replace(LAY2, tp=4, gpus_per_node=4, dp=1))
    assert f.get("FI_PROVIDER") == "cxi" and f.get("NCCL_NET") == "AWS Libfabric"
    assert f.library == "NCCL"
    for k, v in pm.env.items():  # the site's tuning values, verbatim
        assert f.get(k) == v
    fr = node_of(preset("frontier"))
    g = fabric_env(fr, "torchrun", LAY2)
    # aws-ofi-rccl registers only "AWS Libfabric": "OFI" would leave RCCL without a network
    assert g.library == "RCCL" and g.get("NCCL_NET") == "AWS Libfabric" and g.get("HSA_FORCE_FINE_GRAIN_PCIE") == "1"
    assert fabric_env(fr, "torchrun", replace(LAY2, nodes=1, pp=1)).get("NCCL_NET") is None


def test_ethernet_disables_ib_and_names_the_interface():
    site = preset("rtx-4090")
    nt = node_of(site)
    assert nt.fabric == "ethernet"
    f = fabric_env(nt, "torchrun", replace(LAY2, tp=1, pp=1, dp=nt.gpus * 2, gpus_per_node=nt.gpus))
    assert f.get("NCCL_IB_DISABLE") == "1"
    assert f.get("NCCL_SOCKET_IFNAME") == socket_ifname(nt.socket_ifname)[0]


def test_site_env_overrides_a_computed_value_in_place():
    nt = node_of(preset("dgx-h100"))
    custom = replace(nt, env={"NCCL_IB_HCA": "^=mlx5_bond_0", "NCCL_CROSS_NIC": "0"})
    f = fabric_env(custom, "torchrun", LAY2)
    names = [e.name for e in f.env]
    assert f.get("NCCL_IB_HCA") == "^=mlx5_bond_0"
    assert names.index("NCCL_IB_HCA") < names.index("NCCL_SOCKET_IFNAME"), "replaced where it was"
    assert names.count("NCCL_IB_HCA") == 1 and f.get("NCCL_CROSS_NIC") == "0"


def test_socket_ifname_forms():
    assert socket_ifname("bond0")[0] == "=bond0"
    assert socket_ifname("hsn0,hsn1")[0] == "=hsn0,hsn1"
    assert socket_ifname("hsn")[0] == "hsn"  # a prefix on purpose: no interface is called hsn
    assert socket_ifname("^docker,lo")[0] == "^docker,lo"


@pytest.mark.parametrize(
    "launcher,tp,cp,gpu,fsdp,want",
    [
        ("megatron", 8, 1, "H100-SXM5-80GB", False, "1"),
        ("megatron", 1, 2, "H100-SXM5-80GB", False, "1"),
        ("nemo", 2, 1, "A100-SXM4-80GB", False, "1"),
        ("megatron", 1, 1, "H100-SXM5-80GB", False, None),
        ("megatron", 8, 1, "H100-SXM5-80GB", True, None),
        ("megatron", 4, 1, "GB200-186GB", False, None),
        ("megatron", 8, 1, "B200-180GB", False, None),
        ("torchrun", 8, 1, "H100-SXM5-80GB", False, None),
        ("torchtitan", 8, 1, "H100-SXM5-80GB", False, None),
    ],
)
def test_cuda_device_max_connections_rule(launcher, tp, cp, gpu, fsdp, want):
    nt = replace(node_of(preset("dgx-h100")), gpu_model=gpu)
    lay = Layout(tp=tp, cp=cp, dp=16 // (tp * cp), nodes=2, gpus_per_node=8)
    assert cuda_device_max_connections(nt, launcher, lay, fsdp)[0] == want
    assert fabric_env(nt, launcher, lay, fsdp).get("CUDA_DEVICE_MAX_CONNECTIONS") == want


def test_fsdp_drops_a_site_wide_single_connection():
    nt = replace(node_of(preset("dgx-h100")), env={"CUDA_DEVICE_MAX_CONNECTIONS": "1"})
    f = fabric_env(nt, "megatron", LAY2, fsdp=True)
    assert f.get("CUDA_DEVICE_MAX_CONNECTIONS") is None


# ---------------------------------------------------------------------------
# Launchers


def test_program_rules():
    tr = L.get_launcher("torchrun")
    assert L.program(tr, ["python", "train.py", "--a"], []) == ("train.py", "--a")
    assert L.program(tr, ["python3", "-m", "pkg.train"], ["--b"]) == ("-m", "pkg.train", "--b")
    with pytest.raises(ConfigError, match="after `--`"):
        L.program(tr, [], [])
    with pytest.raises(ConfigError, match="options but no program"):
        L.program(tr, ["--lr", "1"], [])
    meg = L.get_launcher("megatron")
    assert L.program(meg, [], []) == ("pretrain_gpt.py",)
    assert L.program(meg, ["--data-path", "/d"], []) == ("pretrain_gpt.py", "--data-path", "/d")
    assert L.program(meg, ["my_pretrain.py"], ["--x"]) == ("my_pretrain.py", "--x")
    ds = L.get_launcher("deepspeed")
    assert L.program(ds, ["python", "-m", "m"], []) == ("--module", "m")
    srun = L.get_launcher("srun")
    assert L.program(srun, ["python", "t.py"], []) == ("python", "t.py")
    with pytest.raises(ConfigError, match="unknown launcher"):
        L.get_launcher("torchrunn")


def test_tasks_per_node_matches_the_launcher():
    for name, launcher in L.LAUNCHERS.items():
        want = 8 if name == "srun" else 1
        assert launcher.tasks_per_node(8) == want


def test_layout_arguments_carry_the_layout():
    lay = Layout(tp=4, pp=2, dp=2, cp=2, ep=2, micro_batch=3, nodes=4, gpus_per_node=8)
    meg = L.framework_args(L.get_launcher("megatron"), lay, L.Options(smoke=True))
    pairs = dict(zip(meg, meg[1:]))
    assert (
        pairs["--tensor-model-parallel-size"],
        pairs["--pipeline-model-parallel-size"],
        pairs["--context-parallel-size"],
        pairs["--expert-model-parallel-size"],
        pairs["--micro-batch-size"],
    ) == ("4", "2", "2", "2", "3")
    assert "--sequence-parallel" in meg and "--use-distributed-optimizer" in meg
    fsdp = L.framework_args(L.get_launcher("megatron"), replace(lay, pp=1, ep=1), L.Options(fsdp=True, smoke=True))
    assert "--use-torch-fsdp2" in fsdp and "--use-distributed-optimizer" not in fsdp
    assert "--no-gradient-accumulation-fusion" in fsdp  # validate_args refuses FSDP2 without it
    with pytest.raises(ConfigError, match="pipeline and expert parallelism.*drop --fsdp"):  # nor with PP or EP > 1
        L.framework_args(L.get_launcher("megatron"), lay, L.Options(fsdp=True, smoke=True))
    nemo = L.framework_args(L.get_launcher("nemo"), lay, L.Options(model=get_model("llama3.1-8b"), smoke=True))
    assert "model.tensor_model_parallel_size=4" in nemo and "model.context_parallel_size=2" in nemo
    titan = L.framework_args(
        L.get_launcher("torchtitan"), lay, L.Options(smoke=True), ("--module", "llama3", "--config", "x")
    )
    assert titan[titan.index("--parallelism.tensor_parallel_degree") + 1] == "4"
    assert titan[titan.index("--parallelism.data_parallel_shard_degree") + 1] == "2"
    assert L.framework_args(L.get_launcher("vllm"), lay, L.Options())[:4] == (
        "--tensor-parallel-size",
        "4",
        "--pipeline-parallel-size",
        "2",
    )
    assert L.framework_args(L.get_launcher("torchrun"), lay, L.Options()) == ()


def test_user_arguments_may_not_contradict_the_layout():
    meg = L.get_launcher("megatron")
    lay = Layout(tp=8, pp=2, nodes=2, gpus_per_node=8)
    gen = L.framework_args(meg, lay, L.Options(smoke=True))
    with pytest.raises(ConfigError, match="--tensor-model-parallel-size=4"):
        L.check_conflicts(meg, ["--tensor-model-parallel-size=4"], gen)
    # the user's own --lr, data and length win: the adapter leaves out what the user gives
    own = ["--lr", "1e-4", "--train-iters", "5"]
    L.check_conflicts(meg, own, L.framework_args(meg, lay, L.Options(smoke=True), own))
    nemo = L.get_launcher("nemo")
    with pytest.raises(ConfigError, match="model.tensor_model_parallel_size"):
        L.check_conflicts(
            nemo,
            ["+model.tensor_model_parallel_size=4"],
            L.framework_args(nemo, lay, L.Options(model=get_model("llama3.1-8b"), smoke=True)),
        )
    vllm = L.get_launcher("vllm")
    with pytest.raises(ConfigError, match="-tp"):
        L.check_conflicts(vllm, ["-tp", "2"], L.framework_args(vllm, lay, L.Options()))
    with pytest.raises(ConfigError, match="--node-rank"):
        L.check_conflicts(vllm, ["--node-rank", "0"], ())


# ---------------------------------------------------------------------------
# Layout without a model, and --segment on NVL72


def test_layout_from_pins():
    nt = node_of(preset("dgx-h100"))
    assert J.layout_from_pins(nt, 2, None, {}) == Layout(tp=1, pp=1, dp=16, nodes=2, gpus_per_node=8)
    assert J.layout_from_pins(nt, 2, None, {"tp": 8}).dp == 2
    assert J.layout_from_pins(nt, None, 4, {}) == Layout(dp=4, nodes=1, gpus_per_node=4)
    with pytest.raises(PlanError, match="does not divide"):
        J.layout_from_pins(nt, 2, None, {"tp": 3})
    with pytest.raises(PlanError, match="whole number"):
        J.layout_from_pins(nt, None, 12, {})
    with pytest.raises(PlanError, match="ep=3"):
        J.layout_from_pins(nt, 2, None, {"ep": 3})


def test_segment_keeps_tp_groups_inside_an_nvl72_domain():
    site = preset("gb200-nvl72")
    nt = node_of(site)
    span = 8 // nt.gpus
    lay = Layout(tp=8, nodes=4, gpus_per_node=nt.gpus, dp=2)
    assert J.segment_for(site, nt, lay, None) == 4  # the job fits in one domain
    big = replace(lay, nodes=2 * nt.domain_nodes, dp=(2 * nt.domain_nodes * nt.gpus) // 8)
    seg = J.segment_for(site, nt, big, None)
    assert seg % span == 0 and big.nodes % seg == 0 and seg <= nt.domain_nodes
    with pytest.raises(ConfigError, match="--segment=3") as err:
        J.segment_for(site, nt, lay, 3)
    assert "segment: segment:" not in str(err.value)
    h100 = preset("dgx-h100")
    assert J.segment_for(h100, node_of(h100), LAY2, None) is None
    with pytest.raises(ConfigError, match="topology/block"):
        J.segment_for(h100, node_of(h100), LAY2, 2)


def test_segment_for_tp_groups_that_cross_trays_is_the_planners_and_the_policys():
    """TP=6 on 4-GPU trays: a TP group is whole only in multiples of 3 nodes (tp / gcd(tp, 4)),
    not ceil(6 / 4) = 2 (--segment=10 would leave a group split across two domains)."""
    site = preset("gb200-nvl72")
    nt = node_of(site)
    lay = Layout(tp=6, nodes=30, gpus_per_node=4, dp=20)
    assert J.segment_for(site, nt, lay, None) == 15
    assert J.segment_for(site, nt, lay, 3) == 3  # what the policy proposes in its fix
    assert J.segment_for(site, nt, replace(lay, nodes=9, dp=6), None) == 9
    with pytest.raises(ConfigError, match=r"multiple of 3"):
        J.segment_for(site, nt, lay, 10)


def test_suggestion_never_proposes_the_tp_just_refused():
    from slurmgpu.errors import PolicyRejection

    site = preset("dgx-h100")
    spec = JobSpec(launcher="torchrun", nodes=3, parallel={"tp": 6}, command=("t.py",))
    with pytest.raises(PolicyRejection) as err:
        J.generate(site, spec, J.search_path(None, None, site))
    text = str(err.value)
    assert "TP=6" in text and "NVLink domain" in text
    line = [x for x in text.splitlines() if x.startswith("suggestion:")][0]
    assert "--tp 6" not in line and "--tp 4" in line, line


def test_segment_line_in_the_script():
    site = preset("gb200-nvl72")
    spec = JobSpec(launcher="torchrun", nodes=4, parallel={"tp": 8}, command=("t.py",))
    text, req, _ = render_spec(site, spec)
    assert "#SBATCH --segment=%d\n" % req.sbatch.segment in text and req.sbatch.segment == 4


# ---------------------------------------------------------------------------
# Rendering: search path, errors, sandbox, determinism


def _spec(**kw):
    base = dict(launcher="torchrun", nodes=2, command=("train.py",))
    base.update(kw)
    if base["launcher"] == "megatron" and not base.get("data"):
        base.setdefault("smoke", True)  # Megatron needs data+tokenizer or --smoke
    return JobSpec(**base)


def test_search_path_order(tmp_path):
    site = replace(preset("dgx-h100"), template_dir=str(tmp_path / "site"))
    for d in ("cli", "repo/.slurmgpu/templates", "site"):
        (tmp_path / d / "parts").mkdir(parents=True)
    dirs = J.search_path(str(tmp_path / "cli"), tmp_path / "repo", site)
    assert [d.label for d in dirs] == ["--templates", "repo", "site", "built-in"]
    part = "parts/rendezvous.j2"
    for label, d in (("site", "site"), ("repo", "repo/.slurmgpu/templates"), ("cli", "cli")):
        (tmp_path / d / part).write_text("# rendezvous from %s\n" % label)
        text, _, _ = render_spec(site, _spec(), dirs=dirs)
        assert "# rendezvous from %s\n" % label in text
        assert [n for n, where, _ in R.template_names(dirs) if n == part and where.path == str(tmp_path / d)]


def test_missing_template_lists_every_place(tmp_path):
    site = preset("dgx-h100")
    dirs = J.search_path(str(tmp_path), None, site)
    with pytest.raises(TemplateError) as exc:
        render_spec(site, _spec(template="nope.sh.j2"), dirs=dirs)
    msg = str(exc.value)
    assert "nope.sh.j2" in msg and str(tmp_path) in msg and J.builtin_dir() in msg


def test_syntax_error_names_file_and_line(tmp_path):
    (tmp_path / "parts").mkdir()
    (tmp_path / "parts" / "preflight.j2").write_text("# ok\n# still ok\n{% if %}\n")
    site = preset("dgx-h100")
    with pytest.raises(TemplateError) as exc:
        render_spec(site, _spec(), dirs=J.search_path(str(tmp_path), None, site))
    assert "preflight.j2:3" in str(exc.value)


def test_undefined_variable_names_file_and_line(tmp_path):
    (tmp_path / "parts").mkdir()
    (tmp_path / "parts" / "preflight.j2").write_text("# a\n# b\necho {{ no_such_thing }}\n")
    site = preset("dgx-h100")
    with pytest.raises(TemplateError) as exc:
        render_spec(site, _spec(), dirs=J.search_path(str(tmp_path), None, site))
    assert "preflight.j2:3" in str(exc.value) and "no_such_thing" in str(exc.value)


def test_repo_templates_are_sandboxed(tmp_path):
    (tmp_path / "parts").mkdir()
    (tmp_path / "parts" / "preflight.j2").write_text("{{ ''.__class__.__mro__[1].__subclasses__() }}\n")
    site = preset("dgx-h100")
    with pytest.raises(TemplateError, match="preflight.j2"):
        render_spec(site, _spec(), dirs=J.search_path(str(tmp_path), None, site))


def test_output_is_deterministic_and_has_no_machine_paths():
    site = preset("dgx-h100")
    a, req, _ = render_spec(site, _spec())
    b, _, _ = render_spec(site, _spec())
    assert a == b
    assert str(ROOT) not in a and req.site_ref == "dgx-h100"
    assert a.splitlines()[1] == Layout(tp=1, pp=1, dp=16, nodes=2, gpus_per_node=8).stamp("dgx-h100")
    assert "# Regenerate: slurmgpu gen test\n" in a


def test_site_ref_is_a_path_for_a_site_file(tmp_path):
    p = tmp_path / "my site.yaml"
    p.write_text("extends: dgx-h100\nname: mysite\n")
    site = load_site(str(p))
    text, req, _ = render_spec(site, _spec())
    assert req.site_ref == str(p.resolve())
    assert "preflight --site %s --record" % R.shquote(str(p.resolve())) in text


def test_template_cache_is_used_and_follows_edits(tmp_path, monkeypatch):
    monkeypatch.setenv("SLURMGPU_CACHE_DIR", str(tmp_path / "cache"))
    (tmp_path / "t" / "parts").mkdir(parents=True)
    part = tmp_path / "t" / "parts" / "preflight.j2"
    part.write_text("# version one\n")
    site = preset("dgx-h100")
    dirs = J.search_path(str(tmp_path / "t"), None, site)
    assert "# version one" in render_spec(site, _spec(), dirs=dirs)[0]
    assert list((tmp_path / "cache" / "jinja").iterdir())
    part.write_text("# version two\n")
    assert "# version two" in render_spec(site, _spec(), dirs=dirs)[0]


def test_template_cache_keeps_sandboxed_and_plain_code_apart(tmp_path, monkeypatch):
    """An override in one repo (sandboxed) must not hand its compiled code to a plain render elsewhere."""
    monkeypatch.delenv("SLURMGPU_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    over = tmp_path / "repo" / ".slurmgpu" / "templates" / "parts"
    over.mkdir(parents=True)
    (over / "launch_torchrun.j2").write_text((ROOT / "templates" / "parts" / "launch_torchrun.j2").read_text())
    site = preset("dgx-h100")
    sandboxed = J.search_path(None, tmp_path / "repo", site)
    plain = J.search_path(None, None, site)
    assert [d.label for d in sandboxed] == ["repo", "built-in"] and [d.label for d in plain] == ["built-in"]
    for dirs in (sandboxed, plain, sandboxed, plain):  # each order, with a warm cache
        assert "torchrun \\\n" in render_spec(site, _spec(), dirs=dirs)[0]
    assert sorted(p.name for p in (tmp_path / "cache" / "slurmgpu" / "jinja").iterdir()) == [
        "Environment",
        "SandboxedEnvironment",
    ]


def test_site_container_without_image_runs_on_the_host():
    site = preset("dgx-h100")
    assert site.container.runtime == "pyxis" and not site.container.image
    text, req, warnings = render_spec(site, _spec())
    assert req.container.runtime == "none" and "--container-image" not in text
    assert any("no image" in w for w in warnings)
    with pytest.raises(ConfigError, match="needs an image"):
        render_spec(site, _spec(container=ContainerSpec(runtime="apptainer")))


def test_pyxis_image_with_hash_and_mounts():
    site = preset("dgx-h100")
    img = "nvcr.io#nvidia/pytorch:24.04-py3"
    text, _, _ = render_spec(site, _spec(container=ContainerSpec(image=img, mounts=("/data:/data:ro",))))
    assert "SLURMGPU_IMAGE=%s\n" % R.shquote(img) in text
    assert '--container-image="$SLURMGPU_IMAGE"' in text and '--container-workdir="$PWD"' in text
    assert 'SLURMGPU_MOUNTS="$PWD:$PWD",/data:/data:ro\n' in text


def test_apptainer_nv_or_rocm():
    spec = _spec(container=ContainerSpec(runtime="apptainer", image="/img/x.sif"))
    text, _, _ = render_spec(preset("dgx-h100"), spec)
    assert 'apptainer exec --nv "$SLURMGPU_IMAGE"' in text
    text, _, _ = render_spec(preset("frontier"), spec)
    assert 'apptainer exec --rocm "$SLURMGPU_IMAGE"' in text and "MIOPEN_USER_DB_PATH" in text


def test_gres_or_gpus_per_node_as_the_site_says():
    text, _, _ = render_spec(preset("aws-p5"), _spec())
    assert "#SBATCH --gres=gpu:8\n" in text and "--gpus-per-node" not in text
    text, _, _ = render_spec(preset("dgx-h100"), _spec())
    assert "#SBATCH --gpus-per-node=8\n" in text and "--gres" not in text


def test_srun_cpus_per_task_export_follows_the_slurm_version():
    site = preset("dgx-h100")
    for version, want in (("22.05", True), ("23.02", True), ("23.11", False), ("24.05", False), (None, True)):
        text, _, _ = render_spec(replace(site, slurm_version=version), _spec())
        assert ('export SRUN_CPUS_PER_TASK="$SLURM_CPUS_PER_TASK"' in text) is want, version


def test_requeue_block():
    text, _, _ = render_spec(preset("dgx-h100"), _spec(requeue=True, grace=600, checkpoint_signal="USR2"))
    assert "#SBATCH --signal=B:USR2@600\n#SBATCH --requeue\n" in text
    # Slurm signals the batch shell; the shell signals every step process (not srun: it turns TERM into KILL)
    assert "trap slurmgpu_checkpoint_signal USR2" in text and 'scancel --signal=USR2 "$SLURM_JOB_ID"' in text
    assert "kill -s" not in text
    # armed after preflight (a signal during preflight must not find the handler's variables unset)
    assert text.index("trap slurmgpu_checkpoint_signal") > text.index("# --- preflight")
    assert "--signals-to-handle=SIGTERM,SIGINT,SIGHUP,SIGQUIT,SIGUSR2 --shutdown-timeout=600" in text
    assert 'if [ "$count" -ge 3 ]; then' in text  # max_requeues' default
    assert text.rstrip().endswith('slurmgpu_after_step "$SLURMGPU_STEP_RC"')
    plain, _, _ = render_spec(preset("dgx-h100"), _spec())
    assert "--signal" not in plain and "\ntrap " not in plain


def test_megatron_gets_model_shape_and_plan_choices():
    site = preset("dgx-h100")
    model = get_model("llama3.1-70b")
    lay = Layout(tp=8, pp=2, dp=1, nodes=2, gpus_per_node=8)
    text, req, _ = render_spec(
        site, JobSpec(launcher="megatron", model="llama3.1-70b", nodes=2, smoke=True), layout=lay, model=model
    )
    prog = req.launch.program
    pairs = dict(zip(prog, prog[1:]))
    assert prog[0] == "pretrain_gpt.py"
    assert pairs["--num-layers"] == str(model.layers) and pairs["--hidden-size"] == str(model.hidden)
    assert pairs["--num-query-groups"] == str(model.kv_heads)
    assert pairs["--tensor-model-parallel-size"] == "8" and pairs["--pipeline-model-parallel-size"] == "2"
    assert "export CUDA_DEVICE_MAX_CONNECTIONS=1 " in text


def test_env_lint_warns_about_user_nccl_mistakes():
    site = preset("dgx-h100")
    _, _, warnings = render_spec(site, _spec(env={"NCCL_IB_DISABLE": "1", "NCCL_NET_GDR_LEVEL": "PBH"}))
    joined = "\n".join(warnings)
    assert "NCCL_IB_DISABLE" in joined and "NCCL_NET_GDR_LEVEL" in joined


# ---------------------------------------------------------------------------
# The job spec


def write(tmp_path, text, name="slurmgpu.yaml"):
    p = tmp_path / name
    p.write_text(textwrap.dedent(text))
    return str(p)


def test_spec_loads_every_field(tmp_path):
    p = write(
        tmp_path,
        """\
        name: "my run"
        model: llama3-70b
        launcher: megatron
        command: "pretrain_gpt.py --data-path '/d a'"
        args: [--lr, 3e-4]
        time: 01:30:00
        nodes: plan
        parallel: {tp: 8, pp: 2}
        container: {runtime: pyxis, image: "nvcr.io#nvidia/nemo:24.07", mounts: ["/d:/d"]}
        sbatch: ["--mail-type=END"]
        env: {WANDB_PROJECT: x, N: 3}
        requeue: true
        checkpoint_signal: SIGUSR2
        tokens: 2T
        mem: 0
        """,
    )
    spec = load_spec(p)
    assert spec.command == ("pretrain_gpt.py", "--data-path", "/d a") and spec.args == ("--lr", "3e-4")
    assert spec.time == "01:30:00", "YAML 1.1 would read 01:30:00 as 5400"
    assert spec.nodes is None and spec.parallel == {"tp": 8, "pp": 2}
    assert spec.container.image == "nvcr.io#nvidia/nemo:24.07" and spec.env == {"WANDB_PROJECT": "x", "N": "3"}
    assert spec.checkpoint_signal == "USR2" and spec.tokens == 2e12 and spec.mem == "0"


def test_spec_errors_are_located(tmp_path):
    p = write(
        tmp_path,
        """\
        name: ok
        launcher: torchrunn
        time: "soon"
        nodes: -1
        sbatch: ["--nodes=4", "mail-type=END"]
        env: {"1BAD": x}
        checkpoint_signal: USR1
        parallel: {tp: 0, xp: 2}
        contianer: {}
        """,
    )
    with pytest.raises(ConfigError) as exc:
        load_spec(p)
    text = str(exc.value)
    for line, field, words in (
        (2, "launcher", "did you mean 'torchrun'"),
        (3, "time", "Slurm time limit"),
        (4, "nodes", "positive integer"),
        (5, "sbatch[0]", "set nodes in the spec"),
        (5, "sbatch[1]", "one sbatch option"),
        (6, "env.1BAD", "not a valid"),
        (7, "checkpoint_signal", "SIGUSR1"),
        (8, "parallel.tp", "positive"),
        (8, "parallel.xp", "unknown key"),
        (9, "contianer", "did you mean 'container'"),
    ):
        assert any(ln.startswith("%s:%d:" % (p, line)) and field in ln and words in ln for ln in text.splitlines()), (
            line,
            field,
            text,
        )


def test_overrides_name_the_flag():
    with pytest.raises(ConfigError) as exc:
        apply_overrides(
            JobSpec(),
            {"time": "later", "env": ["NOEQUALS"], "sbatch": ["--gres=gpu:4"], "parallel": {"tp": 0}, "nodes": "x"},
        )
    text = str(exc.value)
    for flag in ("--time", "--env", "--sbatch", "--tp", "--nodes"):
        assert flag in text
    s = apply_overrides(JobSpec(env={"A": "1"}), {"env": ["B=2=3"], "nodes": "4", "parallel": {"tp": 2}})
    assert s.env == {"A": "1", "B": "2=3"} and s.nodes == 4 and s.parallel == {"tp": 2}


# ---------------------------------------------------------------------------
# Golden files

GOLDEN_CASES = {
    # name: (site, spec, layout or None (pins), model or None)
    "job-dgx-h100-megatron": (
        "dgx-h100",
        JobSpec(
            name="llama 70b",
            launcher="megatron",
            model="llama3.1-70b",
            nodes=2,
            checkpoint_dir="/scratch/ckpt",
            container=ContainerSpec(image="nvcr.io#nvidia/nemo:24.07", mounts=("/data:/data:ro",)),
            requeue=True,
            time="2-00:00:00",
            data="/data/tok en_text_document",
            tokenizer="meta-llama/Llama-3.1-70B",
            train_iters=50000,
            lr="1.5e-4",
        ),
        Layout(tp=8, pp=2, dp=1, nodes=2, gpus_per_node=8),
        "llama3.1-70b",
    ),
    "job-perlmutter-torchrun": (
        "perlmutter",
        JobSpec(
            launcher="torchrun",
            nodes=4,
            command=("python", "train.py", "--config", "cfg.yaml"),
            account="m1234_g",
            time="04:00:00",
            env={"WANDB_PROJECT": "demo run"},
        ),
        None,
        None,
    ),
    "job-aws-p5-srun": (
        "aws-p5",
        JobSpec(launcher="srun", nodes=2, command=("python", "-u", "train.py"), preflight=False),
        None,
        None,
    ),
    "job-frontier-vllm": (
        "frontier",
        JobSpec(launcher="vllm", nodes=2, weights="/lustre/models/Llama-3.1-405B", args=("--port", "8080")),
        None,
        None,
    ),
    "job-gb200-nvl72-torchtitan": (
        "gb200-nvl72",
        JobSpec(
            launcher="torchtitan",
            model="llama3.1-70b",
            nodes=4,
            parallel={"tp": 8},
            tokenizer="/data/hf/Llama-3.1-70B",
            train_iters=1000,
            lr="1.5e-4",
            container=ContainerSpec(image="pytorch/pytorch:2.5.1-cuda12.4-cudnn9-devel"),
        ),
        None,
        None,
    ),
    "job-hgx-h100-roce-deepspeed": (
        "hgx-h100-roce",
        JobSpec(
            launcher="deepspeed",
            nodes=2,
            command=("train.py", "--deepspeed", "ds_config.json"),
            sbatch=("--mail-type=END",),
            dependency="afterok:1234",
        ),
        None,
        None,
    ),
    "job-lumi-g-sglang": (
        "lumi-g",
        JobSpec(
            launcher="sglang",
            nodes=2,
            weights="/scratch/models/qwen2.5-72b",
            container=ContainerSpec(image="/appl/sglang.sif", mounts=("/scratch:/scratch",)),
        ),
        None,
        None,
    ),
}


def golden_text(name):
    site_name, spec, layout, model = GOLDEN_CASES[name]
    text, _, _ = render_spec(
        preset(site_name),
        spec,
        layout=layout,
        model=get_model(model) if model else None,
        regen="slurmgpu gen # golden " + name,
    )
    return text


@pytest.mark.parametrize("name", sorted(GOLDEN_CASES))
def test_golden(name, request):
    path = GOLDEN / (name + ".sh")
    got = golden_text(name)
    old = path.read_text(encoding="utf-8") if path.exists() else ""
    if request.config.getoption("--update-golden", default=False):
        if got != old:
            GOLDEN.mkdir(exist_ok=True)
            path.write_text(got, encoding="utf-8")
            print("".join(difflib.unified_diff(old.splitlines(True), got.splitlines(True), str(path), "new")))
        return
    assert path.exists(), "missing %s: run python -m pytest tests/test_render.py --update-golden" % path
    if got != old:
        diff = "".join(difflib.unified_diff(old.splitlines(True), got.splitlines(True), str(path), "rendered"))
        pytest.fail(
            "%s differs from the rendered script (if intended: python -m pytest tests/test_render.py "
            "--update-golden):\n%s" % (path, diff)
        )


def test_golden_files_pass_bash_and_shellcheck():
    files = sorted(str(p) for p in GOLDEN.glob("*.sh"))
    assert len(files) == len(GOLDEN_CASES)
    for f in files:
        subprocess.run(["bash", "-n", f], check=True)
    r = subprocess.run(["shellcheck", "-x", "--severity=style"] + files, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout


def test_partition_node_limit_and_grace_are_checked():
    site = preset("lumi-g")
    small = site.partitions["small-g"]
    spec = _spec(partition="small-g", nodes=small.max_nodes_per_job + 1)
    with pytest.raises(PlanError, match="at most %d nodes" % small.max_nodes_per_job):
        render_spec(site, spec)
    with pytest.raises(ConfigError, match="only 600 s"):
        render_spec(preset("dgx-h100"), _spec(requeue=True, grace=900, time="10:00"))
