"""Layouts a user's own program can run: torchrun, srun, accelerate and DeepSpeed start a program
slurmgpu cannot see, so the planner assumes only data parallelism (DDP, or the FSDP/ZeRO the launcher
configures or the spec declares with `fsdp: true`) and the degrees the spec's `implements:` declares;
the stamp, the memory estimate, `check` and `doctor` then describe the job that runs.

Before, `init --model llama3-8b --launcher torchrun && gen` planned tp=1 pp=2 dp=4 and `--task lora
--nodes 4 --launcher torchrun -- train.py` tp=2 cp=2 dp=8, for programs that only received SLURMGPU_*
variables.
"""

from __future__ import annotations

import shlex
from typing import Any

import pytest
from click.testing import CliRunner

from slurmgpu.cli import main
from slurmgpu.errors import PlanError
from slurmgpu.job import JobSpec, generate, load_spec
from slurmgpu.job.templates import search_path
from slurmgpu.site import load_site, preset_dir
from slurmgpu.stamp import parse_stamp

SITE = load_site(str(preset_dir() / "dgx-h100.yaml"))
PROGRAMS = ("torchrun", "srun", "accelerate", "deepspeed")


def gen(launcher: str, **kw: Any) -> Any:
    spec = JobSpec(launcher=launcher, command=("train.py",), time="01:00:00", **kw)
    return generate(SITE, spec, search_path(None, None, SITE))


def degrees(g: Any) -> tuple:
    lay = g.request.layout
    return (lay.tp, lay.pp, lay.cp, lay.ep)


@pytest.mark.parametrize("launcher", PROGRAMS)
def test_without_a_declaration_the_plan_is_data_parallel(launcher: str) -> None:
    fsdp = launcher in ("torchrun", "srun")  # DeepSpeed/accelerate shard as they are told
    g = gen(launcher, model="llama3-8b", nodes=4, fsdp=fsdp, implements=("recompute",))
    assert degrees(g) == (1, 1, 1, 1) and g.request.layout.dp == 32
    # the stamp the filter reads, and what gen says it assumed
    stamp = parse_stamp(g.script)
    assert stamp is not None and (stamp["tp"], stamp["pp"], stamp["dp"], stamp["cp"]) == ("1", "1", "32", "1")
    assumed = [n for n in g.sizing.notes if n.startswith("Assumed:")]
    assert len(assumed) == 1 and launcher in assumed[0] and "data parallelism" in assumed[0]


@pytest.mark.parametrize("launcher", PROGRAMS)
def test_a_declared_degree_may_be_planned_and_only_that(launcher: str) -> None:
    """A program declaring only PP may get PP, never TP or CP; with TP and PP declared the planner may
    use both. (accelerate shards PP stages with DDP only, so 70B does not fit there: it says so.)"""
    fsdp = launcher in ("torchrun", "srun")
    try:
        only_pp = gen(launcher, model="llama3-70b", nodes=8, fsdp=fsdp, implements=("pp", "recompute"))
    except PlanError as e:
        assert launcher == "accelerate" and "declare `implements: [tp, pp, cp, ep, recompute]`" in str(e)
    else:
        assert only_pp.request.layout.tp == 1 and only_pp.request.layout.cp == 1
    both = gen(launcher, model="llama3-70b", nodes=8, fsdp=fsdp, implements=("tp", "pp", "recompute"))
    assert both.request.layout.cp == 1 and both.request.layout.ep == 1
    assert "implements: [tp, pp, recompute]" in next(n for n in both.sizing.notes if n.startswith("Assumed:"))


def test_the_readme_repro_torchrun_8b_is_refused_naming_the_declaration() -> None:
    """`init --model llama3-8b --launcher torchrun` then gen: a DDP program cannot hold Llama 3 8B's
    22 B/param anywhere; the refusal names what to declare and the plan that would follow."""
    with pytest.raises(PlanError) as e:
        gen("torchrun", model="llama3-8b")
    msg = str(e.value)
    assert "runs your own program" in msg and "data parallelism with DDP" in msg
    # FSDP alone needs 2 nodes: without recomputation a layer's activations and the loss's 14 B per
    # logit of a 128k vocabulary do not fit beside the shards on one
    assert "declare `fsdp: true` (--fsdp): the plan is then tp=1 pp=1 dp=16 cp=1 on 2 nodes" in msg
    ok = gen("torchrun", model="llama3-8b", fsdp=True)
    assert degrees(ok) == (1, 1, 1, 1) and ok.request.layout.nodes == 2
    # what `init` writes for it: FSDP and recomputation, on one node
    ok = gen("torchrun", model="llama3-8b", fsdp=True, implements=("recompute",))
    assert degrees(ok) == (1, 1, 1, 1) and ok.request.layout.nodes == 1


def test_lora_on_four_nodes_is_plain_data_parallel() -> None:
    """The issue's repro planned tp=2 cp=2 dp=8; a DDP program gets data parallelism only, and where that
    does not fit (the frozen 16-bit base, a layer's activations and 14 B per logit of the loss at seq
    8192 are 72.5 GB of 72 usable) the refusal names FSDP, never TP or CP."""
    with pytest.raises(PlanError) as e:
        gen("torchrun", model="llama3-8b", task="lora", nodes=4)
    assert "declare `fsdp: true` (--fsdp): the plan is then tp=1 pp=1 dp=32 cp=1 on 4 nodes" in str(e.value)
    g = gen("torchrun", model="llama3-8b", task="lora", nodes=4, fsdp=True)
    assert degrees(g) == (1, 1, 1, 1) and g.request.layout.dp == 32
    assert g.sizing.plan.zero == 3 and g.sizing.plan.recompute == "none"


def test_a_pin_the_program_did_not_declare_is_refused_with_the_declaration() -> None:
    with pytest.raises(PlanError, match=r"declares no tensor parallelism: drop --tp 2, or add `implements: \[tp\]`"):
        gen("torchrun", model="llama3-8b", fsdp=True, parallel={"tp": 2})
    g = gen("torchrun", model="llama3-8b", fsdp=True, parallel={"tp": 2}, implements=("tp",))
    assert g.request.layout.tp == 2


def test_deepspeed_and_accelerate_adapters_accept_a_declared_degree() -> None:
    """The adapters' own check (base.check_caps) follows the declaration: a pinned TP x PP renders for a
    program that declares them, and is refused, naming the declaration, for one that does not."""
    for launcher in ("deepspeed", "accelerate"):
        pins = {"tp": 2, "pp": 2}
        g = gen(launcher, model="llama3-8b", nodes=2, parallel=pins, implements=("tp", "pp", "recompute"))
        assert (g.request.layout.tp, g.request.layout.pp) == (2, 2), launcher
        with pytest.raises(PlanError, match=r"add `implements: \[tp\]`"):
            gen(launcher, model="llama3-8b", nodes=2, parallel=pins, implements=("recompute",))


def test_init_then_gen_then_check_then_doctor(tmp_path: Any, monkeypatch: Any) -> None:
    """The README's flow: init declares `fsdp: true` where the model fits only so (and says so), gen
    plans that, check accepts it, and doctor's memory advice is the program's (FSDP), not Megatron's."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SLURMGPU_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("SLURMGPU_SYSTEM_SITE", str(tmp_path / "none.yaml"))
    run = CliRunner()
    r = run.invoke(main, ["init", "--model", "llama3-8b", "--launcher", "torchrun"], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    assert "declares fsdp: true and implements: [recompute] so the plan fits" in r.stderr
    declared = load_spec(str(tmp_path / "slurmgpu.yaml"))
    assert declared.fsdp and declared.implements == ("recompute",)
    r = run.invoke(main, ["gen", "-o", "job.sbatch"], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    assert "Assumed: torchrun runs your own program" in r.stderr
    script = (tmp_path / "job.sbatch").read_text()
    stamp = parse_stamp(script)
    assert stamp is not None and (stamp["tp"], stamp["pp"], stamp["dp"]) == ("1", "1", "8")
    plan_line = next(ln for ln in script.splitlines() if ln.startswith("# slurmgpu-plan:"))
    assert " zero=3 " in plan_line and " launcher=torchrun " in plan_line and "implements=recompute" in plan_line
    r = run.invoke(main, ["check", "job.sbatch"], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    log = tmp_path / "slurm-1.out"
    model_line = next(ln for ln in script.splitlines() if ln.startswith("# slurmgpu-model:"))
    stamp_line = next(ln for ln in script.splitlines() if ln.startswith("# slurmgpu: "))
    log.write_text(
        "%s\n%s\n%s\ntorch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total "
        "capacity of 79.19 GiB of which 1.2 GiB is free.\n" % (stamp_line, model_line, plan_line)
    )
    r = run.invoke(main, ["doctor", str(log), "--site", "dgx-h100"], catch_exceptions=False)
    words = " ".join(shlex.split(r.output.replace("'", " ")))
    assert "a PyTorch DDP/FSDP program under torchrun, ZeRO-3" in words, r.output
