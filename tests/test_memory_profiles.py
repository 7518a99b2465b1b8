"""Each launcher's memory profile (its framework's own bytes at the flags it writes) reaches the plan,
and a cheaper profile is planned only by writing the flag that makes it true.

The issue's repros: `gen --model llama3-70b --launcher megatron --nodes 2 --smoke` planned 68.9 GB
with NeMo's 14 B/param while Megatron, with the flags written, allocates ~87 GB; `--nodes 8` planned
9.1 GB of gradients for Megatron's fp32 18.2 GB; `llama3-8b --nodes 1` 70.0 GB for ~78.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from click.testing import CliRunner

from slurmgpu.cli import main
from slurmgpu.errors import PlanError
from slurmgpu.job import JobSpec, generate
from slurmgpu.job.launchers import get_launcher, memory_profile
from slurmgpu.job.templates import search_path
from slurmgpu.plan import get_model
from slurmgpu.plan.profile import ServeBudget
from slurmgpu.site import load_site, preset_dir

SITE = load_site(str(preset_dir() / "dgx-h100.yaml"))


def megatron(model: str, nodes: Any, **kw: Any) -> Any:
    spec = JobSpec(launcher="megatron", model=model, nodes=nodes, smoke=True, time="01:00:00", **kw)
    return generate(SITE, spec, search_path(None, None, SITE))


def test_readme_70b_on_two_nodes_fits_with_the_flags_it_writes() -> None:
    g = megatron("llama3-70b", 2)
    plan, argv = g.sizing.plan, [str(a) for a in g.request.launch.program]
    assert plan.memory_per_gpu_gb <= 72.0
    # what makes 14 B/param true in Megatron-LM: the distributed optimizer (which carries the
    # precision-aware optimizer's 16-bit master remainder) and bf16 gradients, all written
    for flag in ("--use-distributed-optimizer", "--use-precision-aware-optimizer", "--grad-reduce-in-bf16"):
        assert flag in argv, flag
    assert set(plan.levers) == {"precision_aware_optimizer", "grad_reduce_bf16"}
    flags = dict(plan.memory_flags)
    assert flags["--use-precision-aware-optimizer"] == pytest.approx(9.1, abs=0.1)
    assert flags["--grad-reduce-in-bf16"] == pytest.approx(9.1, abs=0.1)
    assert any(
        line.startswith("Memory flags") and "--grad-reduce-in-bf16 saves 9.1 GB" in line for line in plan.explanation
    )


def test_readme_70b_on_one_node_names_megatrons_bytes_and_two_nodes() -> None:
    with pytest.raises(PlanError) as e:
        megatron("llama3-70b", 1)
    msg = str(e.value)
    assert "Megatron-LM d98e8a64 keeps 14 B/param (weights 2, gradients 2, master 2, adam moments 8)" in msg
    assert "--use-distributed-optimizer --use-precision-aware-optimizer --grad-reduce-in-bf16 = 988 GB" in msg
    assert "Smallest allocation that fits: 2 nodes x 8 GPUs" in msg


def test_readme_70b_on_eight_nodes_charges_megatrons_fp32_gradients() -> None:
    g = megatron("llama3-70b", 8)
    mem = g.sizing.plan.memory
    assert mem.gradients == pytest.approx(2 * mem.weights, rel=0.01) and mem.gradients == pytest.approx(18.2, abs=0.1)
    assert "--grad-reduce-in-bf16" not in [str(a) for a in g.request.launch.program]


def test_8b_on_one_node_fits_by_megatrons_rules_without_bf16_gradients() -> None:
    """bf16 gradient accumulation changes the numerics: planned only when nothing fits without it."""
    g = megatron("llama3-8b", 1)
    plan = g.sizing.plan
    assert plan.memory_per_gpu_gb <= 72.0 and "grad_reduce_bf16" not in plan.levers
    assert "--grad-reduce-in-bf16" not in [str(a) for a in g.request.launch.program]


def test_each_launcher_has_its_own_bytes() -> None:
    per = {
        name: memory_profile(get_launcher(name)).stage(zero).per_param(8.0)
        for name, zero in (
            ("megatron", 1),
            ("nemo", 1),
            ("torchtitan", 3),
            ("deepspeed", 2),
            ("accelerate", 0),
            ("torchrun", 0),
        )
    }
    # Megatron/Bridge: 2 + 4 (fp32 main grads) + 4 + 8; FSDP2 fp32 params: 4 + 4 + 8; DeepSpeed ZeRO-2:
    # 2 + (2 + 4) + 4 + 8; DDP under autocast: 4 + 4 + 4 (buckets) + 8 + 2 (bf16 copies)
    assert per == {"megatron": 18, "nemo": 18, "torchtitan": 16, "deepspeed": 20, "accelerate": 22, "torchrun": 22}


def test_nemo_plans_only_the_sharding_it_runs() -> None:
    """Megatron-Bridge turns both distributed-optimizer switches on when either is on
    (config.py _validate_and_sync_distributed_optimizer_settings), and nothing there shards the
    gradients: plans once claimed ZeRO-2 (and ZeRO-0 with the recipe's optimizer switch left on)."""
    b200 = load_site(str(preset_dir() / "dgx-b200.yaml"))
    for site, model, nodes in ((b200, "llama3-70b", 1), (SITE, "llama3-70b", 32), (SITE, "mixtral-8x7b", 32)):
        # these were planned as ZeRO 0, 2 and 2
        spec = JobSpec(launcher="nemo", model=model, nodes=nodes, smoke=True, time="01:00:00")
        g = generate(site, spec, search_path(None, None, site))
        zero, argv = g.sizing.plan.zero, g.request.launch.program
        assert zero in (0, 1), (model, nodes, zero)
        switch = "true" if zero else "false"
        for flag in ("ddp.use_distributed_optimizer=", "optimizer.use_distributed_optimizer="):
            assert flag + switch in argv, (model, nodes, flag)


def test_nemo_deepseek_charges_its_recipes_bf16_moments() -> None:
    """DeepSeek-V3's Bridge recipe runs the precision-aware optimizer with bf16 Adam moments."""
    prof = memory_profile(get_launcher("nemo"), "bf16", model=get_model("deepseek-v3"))
    st = prof.stage(1)
    assert (st.master, st.moments) == (2.0, 4.0) and not prof.levers
    llama = memory_profile(get_launcher("nemo"), "bf16", model=get_model("llama3.1-70b")).stage(1)
    assert (llama.master, llama.moments) == (4.0, None)


def test_nemo_moe_writes_the_planners_expert_tp() -> None:
    from slurmgpu.plan.layout import expert_tp

    spec = JobSpec(launcher="nemo", model="mixtral-8x7b", nodes=4, smoke=True, time="01:00:00", parallel={"tp": 2})
    g = generate(SITE, spec, search_path(None, None, SITE))
    lay = g.request.layout
    want = "model.expert_tensor_parallel_size=%d" % expert_tp(lay.tp, lay.dp, lay.cp, lay.ep)
    assert want in g.request.launch.program


@pytest.mark.parametrize("engine,flag", [("vllm", "--max-model-len"), ("sglang", "--context-length")])
def test_serving_engines_are_told_the_context_the_kv_cache_was_sized_for(engine: str, flag: str) -> None:
    spec = JobSpec(launcher=engine, model="llama3-70b", nodes=1, weights="org/m", time="01:00:00", task="inference")
    g = generate(SITE, spec, search_path(None, None, SITE))
    argv = [str(a) for a in g.request.launch.program]
    assert argv[argv.index(flag) + 1] == str(g.sizing.plan.seq)
    mem = g.sizing.plan.memory
    assert mem.reserved > 0 and mem.kv_pool >= mem.kv_cache


def test_sglang_share_is_its_own_rule() -> None:
    """SGLang 0.5.23 on an 80 GB H100 with TP 8: reserve 512 + 1.5 x 8192 + 8/8 x 1024 + 2 x 512 MiB."""
    budget = memory_profile(get_launcher("sglang")).serve
    assert isinstance(budget, ServeBudget)
    mib = 80e9 / 2**20
    assert budget.share(80.0, "H100-SXM5-80GB", tp=8) == round((mib - 14848) / mib, 3)
    # smaller TP: a 256-batch decode graph; above 60 GiB the reserve is at least 10 GiB
    assert budget.share(80.0, "H100-SXM5-80GB", tp=1) == round((mib - (512 + 12288 + 128 + 512)) / mib, 3)
    assert memory_profile(get_launcher("vllm")).serve.share(80.0) == 0.92  # type: ignore[union-attr]


def test_plan_without_a_launcher_is_any_framework_and_with_one_is_its() -> None:
    r = CliRunner().invoke(main, ["plan", "--model", "llama3-70b", "--nodes", "8", "--site", "dgx-h100", "--json"])
    assert r.exit_code == 0, r.output
    assert '"memory_framework": "mixed-precision Adam as in the ZeRO paper"' in r.stdout
    r = CliRunner().invoke(
        main, ["plan", "--model", "llama3-70b", "--nodes", "8", "--site", "dgx-h100", "--launcher", "megatron"]
    )
    assert r.exit_code == 0, r.output
    assert re.search(r"Memory \(Megatron-LM d98e8a64\): [\d.]+ GB of 80 GB", r.stdout), r.stdout


def test_the_readme_says_what_the_planner_does() -> None:
    """README: `--nodes 1` is refused at Megatron's leanest 14 B/param = 988 GB with its three flags,
    and 2 nodes is the smallest allocation, where gen writes those flags. (It once said 14 B/param
    "with Megatron's distributed optimizer" and 2 nodes, which held for NeMo 2's profile only.)"""
    from pathlib import Path

    text = " ".join((Path(__file__).resolve().parent.parent / "README.md").read_text(encoding="utf-8").split())
    m = re.search(r"leanest \((\d+) B/param = (\d+) GB: `([^`]+)`.*?allocation that can: (\d+) nodes", text)
    assert m, "README no longer states the --nodes 1 figures"
    per, total, flags, nodes = int(m.group(1)), int(m.group(2)), m.group(3).split(), int(m.group(4))
    with pytest.raises(PlanError) as e:
        megatron("llama3-70b", 1)
    assert "keeps %d B/param" % per in str(e.value) and "= %d GB" % total in str(e.value)
    assert "Smallest allocation that fits: %d nodes" % nodes in str(e.value)
    argv = [str(a) for a in megatron("llama3-70b", nodes).request.launch.program]
    assert all(f in argv for f in flags), flags


@pytest.mark.parametrize("launcher", ["torchrun", "srun", "accelerate", "deepspeed"])
def test_a_users_program_pays_for_its_loss_at_14_bytes_per_logit(launcher: str) -> None:
    """A program these launchers start computes its loss the Hugging Face way (bf16 logits, an fp32
    upcast, cross_entropy's saved fp32 log-softmax and the fp32 gradient), measured on an H200 at
    about 14 B per logit (bench/program_memory.py: 8.9 GB over Megatron's 4 B for a 1B model at
    8 x 4096 tokens of a 32k vocab); Megatron's fused vocab-parallel loss keeps the fp32 logits only."""
    from slurmgpu.plan import model_from_params

    model = model_from_params("1B")  # the shape the H200 run measured
    program = memory_profile(get_launcher(launcher), "bf16", model=model)
    fused = memory_profile(get_launcher("megatron"), "bf16", model=model)
    assert program.logits_bytes == 14.0 and fused.logits_bytes == 4.0
    from slurmgpu.plan import PlanRequest, make_plan
    from slurmgpu.plan.types import Capabilities

    def acts(profile: Any) -> float:
        req = PlanRequest(
            model=model, task="pretrain", seq=4096, global_batch=8, gpus=1, caps=Capabilities(memory=profile)
        )
        site = load_site(str(preset_dir() / "dgx-h200.yaml"))
        plan = make_plan(site, req)
        return plan.memory.activations, plan.layout.micro_batch

    (a_prog, mb), (a_fused, mb2) = acts(program), acts(fused)
    if mb == mb2:
        assert a_prog - a_fused == pytest.approx(10.0 * 4096 * mb * model.vocab / 1e9, rel=0.01)
    else:  # the extra bytes moved the planner to a smaller micro-batch
        assert mb < mb2
