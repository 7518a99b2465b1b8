"""Megatron-LM contract: every matrix job's argv is accepted by Megatron's recorded argument rules
(tests/data/contract/megatron-d98e8a64.json, NVIDIA/Megatron-LM d98e8a64) and means the planned job.

Before the adapter rewrite, 30 of the 61 jobs the planner renders broke a recorded rule (20 FSDP2
without --no-gradient-accumulation-fusion, 10 PP not dividing the layers) and none parsed back to
the planned precision (no --bf16).
"""

from __future__ import annotations

import pytest

from slurmgpu.errors import ConfigError
from slurmgpu.job import JobSpec, generate
from slurmgpu.job.launchers import get_launcher
from slurmgpu.job.templates import search_path
from slurmgpu.site import load_site, preset_dir
from tests import contract_matrix as CM
from tests import megatron_catalogue as M

CAT = M.load()
REAL = dict(data="$SCRATCH/tok/text_document", tokenizer="meta-llama/Llama-3.1-8B", train_iters=1000, lr="3e-4")


def _check(g):  # type: ignore[no-untyped-def]
    req = g.request
    argv = [str(a) for a in req.launch.program][1:]  # drop pretrain_gpt.py
    ns, broken = M.check(CAT, argv, req.layout.world)
    lay, plan, model = req.layout, g.sizing.plan, g.sizing.model
    got = dict(
        tp=ns.tensor_model_parallel_size,
        pp=ns.pipeline_model_parallel_size,
        cp=ns.context_parallel_size,
        ep=ns.expert_model_parallel_size,
        vp=M.virtual_stages(ns),
        layers=ns.num_layers,
        hidden=ns.hidden_size,
        heads=ns.num_attention_heads,
        experts=ns.num_experts or 0,
        expert_ffn=ns.moe_ffn_hidden_size if ns.num_experts else None,
        precision=M.precision(ns),
        micro=ns.micro_batch_size,
    )
    want = dict(
        tp=lay.tp,
        pp=lay.pp,
        cp=lay.cp,
        ep=lay.ep,
        vp=plan.virtual_stages,
        layers=model.layers,
        hidden=model.hidden,
        heads=model.heads,
        experts=model.experts,
        expert_ffn=model.expert_ffn if model.is_moe else None,
        precision=plan.precision,
        micro=lay.micro_batch,
    )
    if lay.pp > 1 and plan.stage_layers:
        got["stages"], want["stages"] = M.stage_layers(ns), list(plan.stage_layers)
    return broken, got, want


@pytest.mark.parametrize("spec", [dict(smoke=True), REAL], ids=["smoke", "data"])
def test_matrix_accepted_and_parsed_back(spec: dict) -> None:
    checked, failures = 0, []
    counts: dict = {}
    for case in CM.matrix("pretrain"):
        # the planner honours Megatron's caps (no ZeRO-3 with PP/EP): every plan it makes renders
        try:
            g = CM.render(case, "megatron", **spec)
        except ConfigError as e:  # pretrain_gpt.py has no GeGLU: Gemma 2 is refused by name
            assert case.model == "gemma2-27b" and "cannot build Gemma 2 27B" in str(e), (case.id, e)
            CM.count(counts, "refused: no gelu_tanh gated MLP in pretrain_gpt.py")
            continue
        if g is None:
            CM.count(counts, "refused by the planner (does not fit)")
            continue
        checked += 1
        broken, got, want = _check(g)
        if broken or got != want:
            failures.append((case.id, broken, {k: (got[k], want[k]) for k in got if got[k] != want[k]}))
    print(
        "megatron contract (%s): %d checked, %d pass, %s" % (sorted(spec)[0], checked, checked - len(failures), counts)
    )
    assert checked >= 200
    assert not failures, failures


def test_catalogue_names_the_pin() -> None:
    assert CAT.commit.startswith("d98e8a64")
    assert get_launcher("megatron").targets.startswith("Megatron-LM NVIDIA/Megatron-LM@d98e8a64")
    assert len(CAT.arguments) > 800


def test_checker_rejects_what_megatron_rejects() -> None:
    base = ["--num-layers", "61", "--hidden-size", "64", "--num-attention-heads", "8", "--micro-batch-size", "1"]
    assert M.check(CAT, base + ["--pipeline-model-parallel-size", "32"], 64)[1]
    assert M.check(CAT, base + ["--use-torch-fsdp2", "--untie-embeddings-and-output-weights"], 8)[1]
    with pytest.raises(M.ArgvError):
        M.check(CAT, base + ["--fp8-format", "e5m2"], 8)
    with pytest.raises(M.ArgvError):
        M.check(CAT, base + ["--normalisation", "RMSNorm"], 8)


def _gen(**kw):  # type: ignore[no-untyped-def]
    site = load_site(str(preset_dir() / "dgx-h100.yaml"))
    js = JobSpec(launcher="megatron", model="llama3.1-8b", nodes=1, time="01:00:00", **kw)
    return generate(site, js, search_path(None, None, site))


def test_missing_inputs_are_named() -> None:
    with pytest.raises(ConfigError) as e:
        _gen()
    msg = str(e.value)
    for word in ("--data", "--tokenizer", "--train-iters", "--lr", "--smoke"):
        assert word in msg
    with pytest.raises(ConfigError) as e:
        _gen(data="/d/text_document", tokenizer="t", lr="3e-4")
    assert "--train-iters" in str(e.value) and "--data" not in str(e.value).split("without:")[1]


def test_real_inputs_reach_megatron() -> None:
    g = _gen(**REAL)
    ns, broken = M.check(CAT, [str(a) for a in g.request.launch.program][1:], g.request.layout.world)
    assert not broken
    assert ns.data_path == ["$SCRATCH/tok/text_document"]
    assert (ns.tokenizer_type, ns.tokenizer_model) == ("HuggingFaceTokenizer", "meta-llama/Llama-3.1-8B")
    assert (ns.train_iters, ns.lr, ns.mock_data) == (1000, 3e-4, False)
    g2 = _gen(data="/d", tokenizer="t", lr="3e-4", tokens=1e9, global_batch=64)
    ns2, _ = M.check(CAT, [str(a) for a in g2.request.launch.program][1:], g2.request.layout.world)
    assert ns2.train_iters == -(-int(1e9) // (64 * 8192))


def test_smoke_keeps_the_users_own_data_and_tokenizer() -> None:
    own = ("--data-path", "/d/text_document", "--tokenizer-type", "HuggingFaceTokenizer", "--tokenizer-model", "t")
    g = _gen(smoke=True, args=own)
    ns, broken = M.check(CAT, [str(a) for a in g.request.launch.program][1:], g.request.layout.world)
    assert not broken
    assert (ns.mock_data, ns.data_path, ns.tokenizer_type) == (False, ["/d/text_document"], "HuggingFaceTokenizer")
    assert ns.train_iters == 10  # still the smoke run's length
    plain, _ = M.check(CAT, [str(a) for a in _gen(smoke=True).request.launch.program][1:], 8)
    assert (plain.mock_data, plain.tokenizer_type, plain.vocab_size) == (True, "NullTokenizer", 128256)


def test_a_model_with_tied_embeddings_is_never_planned_onto_fsdp2() -> None:
    """FSDP2 needs untied embeddings (validate_args): GPT-3 175B on 32 Perlmutter nodes (and gemma2-27b
    everywhere) once got ZeRO-3 and gen refused its own plan; the planner now keeps it on the
    distributed optimizer."""
    site = load_site(str(preset_dir() / "perlmutter.yaml"))
    for nodes in (32,):
        js = JobSpec(launcher="megatron", model="gpt3-175b", nodes=nodes, time="01:00:00", smoke=True)
        g = generate(site, js, search_path(None, None, site))
        argv = [str(a) for a in g.request.launch.program][1:]
        ns, broken = M.check(CAT, argv, g.request.layout.world)
        assert not broken and not ns.use_torch_fsdp2 and g.sizing.plan.zero != 3, (nodes, broken)


def test_deepseek_v3_gets_its_yarn_rope_and_grouped_experts() -> None:
    site = load_site(str(preset_dir() / "gb200-nvl72.yaml"))
    js = JobSpec(launcher="megatron", model="deepseek-v3", nodes=32, time="01:00:00", smoke=True)
    g = generate(site, js, search_path(None, None, site))
    ns, broken = M.check(CAT, [str(a) for a in g.request.launch.program][1:], g.request.layout.world)
    assert not broken
    # deepseek-ai/DeepSeek-V3 config.json rope_scaling: yarn, factor 40, original 4096, beta 32/1, mscale 1/1
    assert (ns.rope_type, ns.rotary_scaling_factor, ns.yarn_original_max_position_embeddings) == ("yarn", 40.0, 4096)
    assert (ns.yarn_beta_fast, ns.yarn_beta_slow, ns.mscale, ns.mscale_all_dim) == (32.0, 1.0, 1.0, 1.0)
    assert ns.rotary_base == 10000 and ns.moe_grouped_gemm and ns.multi_latent_attention


def test_a_gated_mlp_megatron_has_no_flag_for_is_refused_by_name() -> None:
    """Gemma 2's GeGLU (tanh-GELU): pretrain_gpt.py's only gated MLP is --swiglu, so it would have
    trained another network; gen refuses and names the launcher that has the recipe."""
    site = load_site(str(preset_dir() / "dgx-h100.yaml"))
    js = JobSpec(launcher="megatron", model="gemma2-27b", nodes=2, time="01:00:00", smoke=True)
    with pytest.raises(ConfigError, match="cannot build Gemma 2 27B.*gelu_tanh.*--launcher nemo"):
        generate(site, js, search_path(None, None, site))


def test_the_worked_example_in_the_docs_renders_what_they_show(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """docs/launchers.md's Megatron command, through the real CLI: every line the docs show is in the script."""
    import re
    import shlex
    from pathlib import Path

    from click.testing import CliRunner

    from slurmgpu.cli import main

    text = (Path(__file__).resolve().parent.parent / "docs" / "launchers.md").read_text(encoding="utf-8")
    after = text[text.index("<!-- worked-example: megatron -->") :]
    cmd, shown = re.findall(r"```\n(.*?)```", after, re.S)[:2]
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SLURMGPU_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("SLURMGPU_SYSTEM_SITE", str(tmp_path / "none.yaml"))
    r = CliRunner().invoke(main, shlex.split(cmd.strip())[1:], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    script = r.stdout
    for line in shown.splitlines():
        assert line + "\n" in script, line
