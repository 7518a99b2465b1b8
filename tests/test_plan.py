"""The planner: hard rules, memory fit, the cost model's use of site figures, output, CLI."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from slurmgpu.errors import PlanError
from slurmgpu.plan import (
    Capabilities,
    Layout,
    ModelSpec,
    PlanRequest,
    catalogue,
    check_layout_rules,
    format_plan,
    get_model,
    make_plan,
    model_from_params,
    render,
    tp_group_nodes,
)
from slurmgpu.site import load_site, preset_dir, preset_names


def preset(name):
    return load_site(str(preset_dir() / (name + ".yaml")))


def derived(tmp_path: Path, base: str, body: str, name: str = "derived"):
    """A site that extends a preset with a few changed lines (YAML under `body`)."""
    p = tmp_path / ("%s.yaml" % name)
    p.write_text("extends: %s\nname: %s\n%s" % (base, name, body))
    return load_site(str(p))


def plan(site, model, **kw):
    return make_plan(site, PlanRequest(model=get_model(model) if isinstance(model, str) else model, **kw))


def run_cli(*args):
    return subprocess.run([sys.executable, "-m", "slurmgpu.cli"] + list(args), capture_output=True, text=True)


# -- the example ---------------------------------------------------------


def test_llama3_70b_pretrain_on_one_h100_node_explains_why_not_and_the_smallest_that_fits():
    # without a launcher: the ZeRO paper's 16 B/param (each launcher's own bytes: the README's Megatron
    # command is tests/test_memory_profiles.py)
    site = preset("dgx-h100")
    with pytest.raises(PlanError) as exc:
        plan(site, "llama3-70b", nodes=1)
    msg = str(exc.value)
    assert "does not fit" in msg and "80 GB" in msg
    assert "keeps 16 B/param" in msg and "= 1129 GB for 70.6B params: at least 141.1 GB per GPU over 8 GPUs" in msg
    smallest = int(msg.split("Smallest allocation that fits: ")[1].split()[0])
    assert smallest >= 2
    # the claim is consistent with the planner itself: that allocation fits, one node less does not
    ok = plan(site, "llama3-70b", nodes=smallest)
    assert ok.memory_per_gpu_gb <= 0.9 * 80
    with pytest.raises(PlanError):
        plan(site, "llama3-70b", nodes=smallest - 1)
    free = plan(site, "llama3-70b")
    assert free.layout.nodes == smallest


def test_llama3_70b_lora_on_two_nodes_keeps_tp_in_nodes_and_uses_both():
    p = plan(preset("dgx-h100"), "llama3-70b", task="lora", nodes=2)
    lay = p.layout
    assert lay.nodes == 2 and lay.gpus_per_node == 8 and lay.world == 16
    assert 8 % lay.tp == 0
    assert all(len(nodes) == 1 for nodes in tp_group_nodes(lay, 8))
    assert lay.pp * lay.dp * lay.cp >= 2  # the second node is used for PP, DP or CP
    text = format_plan(p)
    assert "Why this layout:" in text and "TP=%d" % lay.tp in text


def test_usual_recipe_tp8_pp2_is_evaluated_and_compared():
    p = plan(preset("dgx-h100"), "llama3-70b", task="lora", nodes=2, pins={"tp": 8, "pp": 2})
    assert (p.layout.tp, p.layout.pp, p.layout.dp) == (8, 2, 1)
    assert any("pinned layout" in n for n in p.notes)
    assert any(e.startswith("PP=2: 2 stages of 40 layers") for e in p.explanation)


# -- hard rules in words ------------------------------------------------------------


def test_tp_spanning_nodes_is_refused_with_the_sites_figures(tmp_path):
    with pytest.raises(PlanError) as exc:
        plan(preset("dgx-h100"), "llama3-70b", task="lora", nodes=2, pins={"tp": 16})
    assert (
        "TP=16 spans two nodes: its all-reduces would run over 400 Gb/s InfiniBand instead of 900 GB/s NVLink"
    ) in str(exc.value)
    slow = derived(
        tmp_path,
        "dgx-h100",
        "node_types:\n  dgx-h100:\n    link_gbs: 600\n    nics:\n"
        "      - {name: mlx5_0, gbps: 200}\n      - {name: mlx5_1, gbps: 200}\n",
    )
    with pytest.raises(PlanError) as exc:
        plan(slow, "llama3-70b", task="lora", nodes=2, pins={"tp": 16})
    assert "over 50 Gb/s InfiniBand instead of 600 GB/s NVLink" in str(exc.value)


def test_twelve_gpus_with_tp8():
    with pytest.raises(PlanError) as exc:
        plan(preset("dgx-h100"), "llama3-70b", task="lora", gpus=12, pins={"tp": 8})
    msg = str(exc.value)
    assert "12 GPUs on 8-GPU nodes are 2 nodes x 6 GPUs" in msg and "multiple of 8" in msg


def test_twelve_gpus_without_pins_is_planned_on_six_per_node():
    p = plan(preset("dgx-h100"), "llama2-7b", task="lora", gpus=12)
    assert (p.layout.nodes, p.layout.gpus_per_node) == (2, 6)
    assert 6 % p.layout.tp == 0
    assert any("--gpus-per-node=6" in n for n in p.notes)


@pytest.mark.parametrize(
    "layout,words",
    [
        (Layout(tp=16, pp=1, dp=1, nodes=2, gpus_per_node=8), "TP=16 spans two nodes"),
        (Layout(tp=3, pp=1, dp=8, nodes=3, gpus_per_node=8), "TP=3 does not divide the 8-GPU NVLink domain"),
        (Layout(tp=8, pp=3, dp=1, nodes=3, gpus_per_node=8), None),
        (Layout(tp=8, pp=100, dp=1, nodes=100, gpus_per_node=8), "PP=100 is more pipeline stages"),
        (Layout(tp=8, pp=1, dp=2, ep=2, nodes=2, gpus_per_node=8), "EP=2 needs a mixture-of-experts model"),
        (Layout(tp=8, pp=1, dp=1, cp=3, nodes=3, gpus_per_node=8), "CP=3 needs the sequence length (8192)"),
        (Layout(tp=8, pp=2, dp=2, nodes=2, gpus_per_node=8), "= 32 ranks, but the allocation has 16 GPUs"),
    ],
)
def test_check_layout_rules(layout, words):
    got = check_layout_rules(preset("dgx-h100"), None, get_model("llama3.1-70b"), layout)
    if words is None:
        assert got == []
    else:
        assert any(words in g for g in got), got


def test_kv_head_rule():
    lay = Layout(tp=16, pp=1, dp=1, nodes=4, gpus_per_node=4)
    got = check_layout_rules(preset("gb200-nvl72"), None, get_model("llama3.1-70b"), lay)
    assert any("does not divide the 8 KV heads" in g for g in got)


def test_pcie_nodes_allow_no_tp():
    got = check_layout_rules(
        preset("rtx-4090"), None, get_model("llama2-7b"), Layout(tp=2, pp=1, dp=4, nodes=1, gpus_per_node=8)
    )
    assert any("have none (NVLink domain of 1)" in g for g in got)


def test_nvl72_tp_across_trays_needs_segment():
    site = preset("gb200-nvl72")
    p = plan(site, "llama3-70b", nodes=4, pins={"tp": 8})
    assert p.layout.tp == 8 and p.segment is not None
    assert p.segment % 2 == 0 and (4 % p.segment == 0 or p.segment >= 4)
    assert "--segment=%d" % p.segment in format_plan(p)
    assert check_layout_rules(site, None, get_model("llama3-70b"), p.layout) == []


def test_unknown_model_and_impossible_requests(tmp_path):
    r = run_cli("plan", "--model", "llama3-7b", "--site", "dgx-h100")
    assert r.returncode == 2 and "did you mean" in r.stderr
    tiny = derived(tmp_path, "dgx-h100", "partitions:\n  gpu:\n    nodes: 1\n")
    with pytest.raises(PlanError) as exc:
        plan(tiny, "gpt3-175b")
    assert "even with all 1 node" in str(exc.value) and "needs" in str(exc.value)
    with pytest.raises(PlanError) as exc:
        plan(preset("dgx-h100"), "llama2-7b", nodes=64)
    assert "limit of 32 nodes" in str(exc.value)


def test_pinned_memory_misfit_gives_numbers():
    with pytest.raises(PlanError) as exc:
        plan(preset("dgx-h100"), "llama3-70b", nodes=1, pins={"tp": 8, "pp": 1, "dp": 1})
    assert "does not fit" in str(exc.value) and "GB per GPU" in str(exc.value)


# -- the property: TP never leaves an NVLink domain --------------------------------


def _tp_stays_in_domain(site, part_name, model, lay, segment):
    nt = site.node_type_of(part_name)
    assert lay.tp <= nt.nvlink_domain
    if nt.nvlink_domain <= nt.gpus:  # a domain inside one node: TP groups tile it
        assert nt.nvlink_domain % lay.tp == 0
    else:  # NVL72: any TP up to the domain, its groups inside one segment that fits in a domain
        assert segment is None or segment <= nt.domain_nodes, (segment, nt.domain_nodes)
    groups = tp_group_nodes(lay, lay.gpus_per_node)
    for nodes in groups:
        if nt.nvlink_domain <= nt.gpus:
            assert len(nodes) == 1, (lay, nodes)
        else:
            assert len(nodes) <= nt.domain_nodes
            if len(nodes) > 1:
                assert segment, "TP across trays without --segment"
                assert len({n // segment for n in nodes}) == 1
    assert check_layout_rules(site, part_name, model, lay) == []


SITES = {}


def _site(name):
    if name not in SITES:
        SITES[name] = preset(name)
    return SITES[name]


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def _plans_obey_the_tp_rules(planned, data):
    name = data.draw(st.sampled_from(preset_names()), label="site")
    site = _site(name)
    part = data.draw(st.sampled_from(sorted(site.partitions)), label="partition")
    p = site.partitions[part]
    nt = site.node_types[p.node_type]
    models = catalogue() + [model_from_params("3B"), model_from_params("30B")]
    model = data.draw(st.sampled_from(models), label="model")
    task = data.draw(st.sampled_from(["pretrain", "lora", "inference", "finetune"]), label="task")
    how = data.draw(st.sampled_from(["nodes", "gpus", "none"]), label="allocation")
    kw = {}
    if how == "nodes":
        kw["nodes"] = data.draw(st.integers(1, min(p.max_nodes_per_job, 48)), label="nodes")
    elif how == "gpus":
        kw["gpus"] = data.draw(st.integers(1, min(p.max_nodes_per_job, 24) * nt.gpus), label="gpus")
    try:
        result = make_plan(site, PlanRequest(model=model, task=task, partition=part, **kw))
    except PlanError:
        result = None
    assume(result is not None)  # an infeasible request says nothing about placement
    planned.append((name, part))
    _tp_stays_in_domain(site, part, model, result.layout, result.segment)
    for alt in result.alternatives:  # every layout the planner can return obeys the rules too
        assert alt.layout.tp <= nt.nvlink_domain
        if nt.nvlink_domain <= nt.gpus:
            assert nt.nvlink_domain % alt.layout.tp == 0
            assert all(len(n) == 1 for n in tp_group_nodes(alt.layout, alt.layout.gpus_per_node))
        assert check_layout_rules(site, part, model, alt.layout) == []
        assert alt.memory_per_gpu_gb <= 0.9 * result.capacity_gb + 1e-9
    assert result.memory_per_gpu_gb <= 0.9 * result.capacity_gb + 1e-9


def test_tp_never_spans_an_nvlink_domain():
    planned = []  # (site, partition) of every drawn request that got a plan
    _plans_obey_the_tp_rules(planned)
    # A planner that always raised would pass the property vacuously: require real plans.
    assert len(planned) >= 100, "only %d requests got a plan" % len(planned)
    assert len({site for site, _ in planned}) >= len(preset_names()) // 2, sorted(set(planned))


# -- the cost model uses the site's figures ------------------------------------------------


def test_tp_time_scales_with_link_bandwidth(tmp_path):
    slow = derived(tmp_path, "dgx-h100", "node_types:\n  dgx-h100:\n    link_gbs: 450\n")
    kw = dict(task="lora", nodes=2, pins={"tp": 8, "pp": 2, "micro_batch": 1}, recompute="selective")
    fast_p = plan(preset("dgx-h100"), "llama3-70b", **kw)
    slow_p = plan(slow, "llama3-70b", **kw)
    # the bandwidth term doubles; the per-all-reduce latency term does not depend on the link
    ratio = slow_p.time_breakdown["tp"] / fast_p.time_breakdown["tp"]
    assert 1.95 < ratio < 2.0
    assert slow_p.time_breakdown["compute"] == pytest.approx(fast_p.time_breakdown["compute"], rel=1e-9)


def test_dp_sync_uses_fabric_bandwidth(tmp_path):
    kw = dict(nodes=8, pins={"tp": 8, "pp": 1, "dp": 8}, global_batch=64, recompute="full")
    base = plan(preset("dgx-h100"), "llama3.1-8b", **kw)
    slow = derived(tmp_path, "dgx-h100", "node_types:\n  dgx-h100:\n    nics:\n      - {name: mlx5_0, gbps: 100}\n")
    slow_p = plan(slow, "llama3.1-8b", **kw)
    assert slow_p.step_time_s > base.step_time_s
    assert slow_p.time_breakdown["dp"] > base.time_breakdown["dp"]


def test_pipeline_bubble_is_p_minus_1_over_v_m():
    p = plan(preset("dgx-h100"), "llama3-70b", nodes=8, pins={"tp": 8, "pp": 4})
    tb = p.time_breakdown
    work = tb["compute"] + tb["recompute"] + tb["tp"] + tb["cp"] + tb["ep"]
    assert tb["bubble"] == pytest.approx(work * 3 / (p.virtual_stages * p.micro_batches), rel=1e-6)
    assert sum(tb.values()) == pytest.approx(p.step_time_s, rel=1e-9)


def test_405b_on_16k_h100_is_near_llama3_reported_mfu(tmp_path):
    # Llama 3 paper: 38-43% BF16 MFU for 405B on 8K-16K H100s with TP 8 inside nodes and PP 16
    site = derived(tmp_path, "dgx-h100", "partitions:\n  gpu:\n    nodes: 2048\n")
    p = plan(site, "llama3.1-405b", gpus=16384)
    assert p.layout.tp == 8 and p.layout.pp > 1
    assert 0.30 <= p.mfu <= 0.50


def test_moe_uses_expert_parallelism_at_scale(tmp_path):
    site = derived(tmp_path, "dgx-h100", "partitions:\n  gpu:\n    nodes: 256\n")
    p = plan(site, "deepseek-v3", gpus=2048)
    assert p.layout.ep > 1 and p.layout.dp % p.layout.ep == 0
    assert any(e.startswith("EP=%d" % p.layout.ep) for e in p.explanation)


def test_inference_fills_the_node_with_replicas():
    p = plan(preset("dgx-h100"), "llama3-70b", task="inference", nodes=1)
    assert p.layout.tp * p.layout.pp >= 2  # 140 GB of weights need more than one 80 GB GPU
    assert p.global_batch == p.layout.dp and p.memory.kv_cache > 0
    assert p.tokens_per_s == pytest.approx(p.layout.dp * p.layout.micro_batch / p.step_time_s)


def test_tokens_give_time_to_train_and_scaling():
    p = plan(preset("dgx-h100"), "llama3.1-8b", tokens=1e12, target_days=20)
    assert p.train_days == pytest.approx(1e12 / p.tokens_per_s / 86400)
    days = [s.days for s in p.scaling]
    nodes = [s.nodes for s in p.scaling]
    assert nodes[0] == p.layout.nodes and len(nodes) > 1
    assert days[-1] < days[0]
    assert any("To finish in 20 days" in e or "No allocation" in e for e in p.explanation)


def test_default_global_batch_does_not_grow_with_dp(tmp_path):
    site = derived(tmp_path, "dgx-h100", "partitions:\n  gpu:\n    nodes: 512\n")
    p = plan(site, "llama2-7b", nodes=512)  # 4096 GPUs; default: 4M tokens = 1024 sequences of 4096
    assert p.layout.dp * p.layout.micro_batch <= 1024
    assert 512 <= p.global_batch <= 1536 and p.global_batch % (p.layout.dp * p.layout.micro_batch) == 0
    assert any(r.kind == "batch" and "DP=4096" in r.reason for r in p.rejected)


# -- output ----------------------------------------------------------------------------------


def test_json_has_the_promised_keys():
    r = run_cli("plan", "--model", "llama3-70b", "--site", "dgx-h100", "--nodes", "2", "--task", "lora", "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    for k in (
        "tp",
        "pp",
        "dp",
        "cp",
        "ep",
        "nodes",
        "gpus_per_node",
        "micro_batch",
        "memory_per_gpu_gb",
        "alternatives",
    ):
        assert k in d
    assert d["nodes"] == 2 and d["tp"] * d["pp"] * d["dp"] * d["cp"] == 16
    assert all("why" in a for a in d["alternatives"])
    assert "slurmgpu: site dgx-h100" in r.stderr  # the notice goes to stderr, the plan to stdout


@pytest.mark.parametrize(
    "site,model,kw",
    [
        ("dgx-h100", "llama3-70b", dict(task="lora", nodes=2)),
        ("gb200-nvl72", "llama3-70b", dict(nodes=4, pins={"tp": 8})),
        ("dgx-h100", "llama3.1-405b", dict(nodes=32)),
        ("alps-gh200", "mixtral-8x7b", dict(nodes=64)),
    ],
)
def test_diagram_fits_80_columns(site, model, kw):
    p = plan(preset(site), model, **kw)
    pic = render(p.layout, stage_layers=p.stage_layers, segment=p.segment)
    assert all(len(line) < 80 for line in pic.splitlines())
    assert "node 0" in pic and "[" in pic
    full = format_plan(p, diagram=True)
    assert all(len(line) < 80 for line in full.splitlines())


def test_diagram_marks_tp_groups_and_stages():
    lay = Layout(tp=8, pp=2, dp=1, nodes=2, gpus_per_node=8)
    pic = render(lay, stage_layers=(40, 40))
    lines = pic.splitlines()
    n0 = next(ln for ln in lines if ln.startswith("node 0"))
    n1 = next(ln for ln in lines if ln.startswith("node 1"))
    assert n0.count("[") == 1 and n0.count("]") == 1 and "PP 0" in n0
    assert "PP 1" in n1 and " 15 ]" in n1
    assert "Layers per stage: 0: 0-39, 1: 40-79" in pic


def test_cli_help_has_examples():
    for cmd in ("plan", "models"):
        r = run_cli(cmd, "--help")
        assert r.returncode == 0 and "Examples:" in r.stdout


def test_cli_params_and_diagram():
    r = run_cli("plan", "--params", "13B", "--site", "dgx-h100", "--task", "finetune", "--diagram")
    assert r.returncode == 0, r.stderr
    assert "shape estimated" in r.stdout and "node 0" in r.stdout
    r = run_cli("plan", "--model", "llama2-7b", "--params", "7B")
    assert r.returncode == 2 and "one of them" in r.stderr


def test_hardware_figures_come_from_the_gpu_table():
    """HBM bandwidth and FP8 support live in slurmgpu.gpus.GPU_TABLE (one table for GPU facts)."""
    from slurmgpu.plan import hardware
    from slurmgpu.site import GPU_TABLE, lookup

    assert all(f.hbm_gbs > 0 for f in GPU_TABLE.values())
    for name in preset_names():
        site = preset(name)
        for pname, part in site.partitions.items():
            nt = site.node_types[part.node_type]
            facts = lookup(nt.gpu_model)
            hw = hardware(site, pname)
            assert hw.hbm == facts.hbm_for(nt.gpu_memory_gb) * 1e9
            fp8 = hardware(site, pname, "fp8")
            assert fp8.peak == (2 if facts.fp8 else 1) * hw.peak_bf16, (name, pname)
    # A100: 40 GB parts are HBM2 (1555 GB/s), 80 GB parts HBM2e (2039 GB/s); no FP8 tensor cores
    a100 = GPU_TABLE["a100"]
    assert (a100.hbm_for(40), a100.hbm_for(64), a100.hbm_for(80), a100.fp8) == (1555, 1555, 2039, False)
    pm = preset("perlmutter")
    assert hardware(pm, "gpu").hbm == 1555e9 and hardware(pm, "gpu-hbm80g").hbm == 2039e9
    assert any("no FP8" in n for n in hardware(pm, "gpu", "fp8").notes)


# -- calibration (issue 17): rules no stricter than the frameworks ------------------------------


def test_ep_may_exceed_dp_when_carved_from_dp_cp_tp():
    """Mixtral 8x22B on 256 GPUs, NeMo's recipe TP2 PP4 CP8 DP4 EP8: EP 8 > DP 4 but divides DP x CP."""
    p = plan(
        preset("dgx-h100"),
        "mixtral-8x22b",
        gpus=256,
        seq=65536,
        global_batch=64,
        precision="fp8",
        pins={"tp": 2, "pp": 4, "cp": 8, "dp": 4, "ep": 8, "micro_batch": 1},
        recompute="full",
    )
    assert (p.layout.ep, p.layout.dp) == (8, 4)
    with pytest.raises(PlanError, match="must divide DP x CP x TP"):
        plan(preset("dgx-h100"), "deepseek-v3", gpus=16, pins={"tp": 8, "pp": 1, "dp": 2, "ep": 32})


def test_virtual_pipeline_can_be_pinned_and_names_its_rule():
    kw = dict(gpus=64, global_batch=128, pins={"tp": 4, "pp": 4, "dp": 4, "micro_batch": 1})
    p = plan(preset("dgx-h100"), "llama3-70b", virtual_stages=5, **kw)
    assert p.virtual_stages == 5
    # uneven chunks (20 layers per stage in 7 + 7 + 6) run: Megatron takes them as an explicit layout
    assert plan(preset("dgx-h100"), "llama3-70b", virtual_stages=3, **kw).virtual_stages == 3
    with pytest.raises(PlanError, match="vpp-divides-layers"):  # a chunk without a layer does not
        plan(preset("dgx-h100"), "llama3-70b", virtual_stages=21, **kw)
    even = Capabilities(uneven_stages=False, launcher="x")
    with pytest.raises(PlanError, match="vpp-divides-layers.*equal chunks"):
        plan(preset("dgx-h100"), "llama3-70b", virtual_stages=3, caps=even, **kw)


def test_published_uneven_interleaving_is_not_refused():
    """Megatron-Bridge 25.11 ran Llama 3.1 405B on 128 B200 with TP 4 PP 8 CP 2 VP 8: 126 layers in 64
    chunks (before: refused by vpp-divides-layers, which wanted the chunks to divide the layers)."""
    p = plan(
        preset("dgx-b200"),
        "llama3.1-405b",
        gpus=128,
        global_batch=64,
        precision="fp8",
        virtual_stages=8,
        pins={"tp": 4, "pp": 8, "cp": 2, "dp": 2, "micro_batch": 1},
    )
    assert (p.layout.pp, p.virtual_stages) == (8, 8)


def test_zero3_with_pipeline_is_planned_when_asked():
    """torchtitan trains Llama 3.1 405B with FSDP + PP; the planner no longer refuses the pair."""
    p = plan(preset("dgx-h100"), "llama3-70b", gpus=64, zero=3, pins={"tp": 8, "pp": 2, "dp": 4})
    assert (p.zero, p.layout.pp) == (3, 2)


def test_model_file_without_gated_says_so(tmp_path):
    f = tmp_path / "m.yaml"
    f.write_text("layers: 32\nhidden: 4096\nheads: 32\nffn: 11008\nvocab: 32000\nseq: 4096\n")
    from slurmgpu.plan.models import load_model_file

    p = plan(preset("dgx-h100"), load_model_file(str(f)), nodes=1)
    assert any("gives no `gated:`" in n for n in p.notes)
    g = tmp_path / "g.yaml"
    g.write_text(f.read_text() + "gated: true\n")
    assert not any("gated" in n for n in plan(preset("dgx-h100"), load_model_file(str(g)), nodes=1).notes)


def test_plan_states_its_error_band_and_fp8_mfu_basis():
    p = plan(preset("dgx-h100"), "llama3-70b", nodes=8, precision="fp8")
    from slurmgpu.plan.accuracy import ERROR_BANDS

    runs, band = ERROR_BANDS[("dense", "fp8")]
    assert any("+-%d%% (dense FP8; 90th percentile over %d published runs" % (band, runs) in n for n in p.notes)
    assert any("fitted without its source" in n for n in p.notes)  # out of sample, never in sample
    assert any("MFU is against the FP8 peak" in n for n in p.notes)
    assert 0 < p.mfu < 1


def test_expert_groups_use_the_planned_expert_tp_for_nvlink_domains():
    """Megatron-Bridge 25.09 ran Qwen3-235B-A22B on 64 GB200 with TP 2 and EP 64 (DP 32): EP does not
    divide DP, so the experts run with expert-TP 1 and one EP group is 64 GPUs, 16 trays of one NVL72
    rack. Before, the domain rule took expert-TP = TP and refused a 128-rank group over 32 trays."""
    qwen = ModelSpec(
        name="qwen3-235b-a22b", layers=94, hidden=4096, heads=64, kv_heads=4, ffn=12288, vocab=151936,
        seq=4096, experts=128, experts_active=8, moe_ffn=1536, head_dim=128,
    )  # fmt: skip
    p = plan(
        preset("gb200-nvl72"),
        qwen,
        gpus=64,
        global_batch=1024,
        precision="fp8",
        pins={"tp": 2, "pp": 1, "dp": 32, "cp": 1, "ep": 64, "micro_batch": 1},
    )
    assert (p.layout.tp, p.layout.ep, p.segment) == (2, 64, 16)
