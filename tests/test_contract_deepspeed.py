"""DeepSpeed contract: over the golden matrix, the generated runner line is accepted by DeepSpeed's
own runner parser (deepspeed.launcher.runner.parse_args) and the config the script writes is
accepted by DeepSpeed's own config class, with the plan's ZeRO stage, precision and batch sizes.

Needs the `contract` extra (deepspeed==0.19.8); in CI it is installed, elsewhere the module skips.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import List

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from contract_matrix import FIRST, matrix, render  # noqa: E402
from launch_parse import heredocs, runner_words  # noqa: E402

from slurmgpu.errors import ConfigError  # noqa: E402
from slurmgpu.job.launchers import deepspeed as adapter  # noqa: E402

runner = pytest.importorskip("deepspeed.launcher.runner")
ds_config = pytest.importorskip("deepspeed.runtime.config")

COMMAND = ("train.py", "--epochs", "1")
DP_ONLY = {"tp": 1, "pp": 1, "cp": 1, "ep": 1}


def check(gen) -> List[str]:
    """What is wrong with one generated job (empty: DeepSpeed accepts it as the plan)."""
    req, plan = gen.request, gen.sizing.plan
    lay = req.layout
    args = runner.parse_args(["--node_rank=0"] + runner_words(gen.script, "deepspeed"))
    bad = []
    got = (args.num_nodes, args.num_gpus, args.no_ssh, args.user_script)
    if got != (lay.nodes, lay.gpus_per_node, True, COMMAND[0]):
        bad.append("runner: nodes/gpus/no_ssh/script %r" % (got,))
    files = dict(heredocs(gen.script))
    path = args.user_args[args.user_args.index("--deepspeed_config") + 1]
    if path not in files:
        return bad + ["--deepspeed_config %s is not the file the script writes (%s)" % (path, sorted(files))]
    raw = json.loads(files[path])
    # DeepSpeedConfig takes the DP size from an initialised process group (world 1 without one;
    # deepspeed.init_distributed on CPU/gloo did not return here), so it checks every key but the
    # batch identity, which is checked below with the layout's DP: train = micro x acc x DP.
    one_rank = {k: v for k, v in raw.items() if k != "train_batch_size"}
    cfg = ds_config.DeepSpeedConfig(one_rank)
    if raw["train_batch_size"] != cfg.train_micro_batch_size_per_gpu * cfg.gradient_accumulation_steps * lay.dp:
        bad.append("train_batch_size %d != micro x accumulation x dp" % raw["train_batch_size"])
    want = {
        "zero": plan.zero,
        "bf16": plan.precision == "bf16",
        "fp16": plan.precision == "fp16",
        "micro": lay.micro_batch,
        "accumulation": plan.micro_batches,
        "global": plan.global_batch,
    }
    have = {
        "zero": cfg.zero_optimization_stage,
        "bf16": cfg.bfloat16_config.enabled,
        "fp16": cfg.float16_config.enabled,
        "micro": cfg.train_micro_batch_size_per_gpu,
        "accumulation": cfg.gradient_accumulation_steps,
        "global": raw["train_batch_size"],
    }
    if have != want:
        bad.append("config %r != plan %r" % (have, want))
    if lay.world != lay.dp:
        bad.append("layout is not pure DP: %r" % (lay,))
    return bad


def test_every_case_is_the_plan_deepspeed_runs():
    checked, refused, failed = 0, 0, []
    for case in matrix("pretrain"):
        # the program declares activation checkpointing (`implements: [recompute]`): without it the planner
        # may not assume any, and the larger models fit nowhere as plain DP + ZeRO
        gen = render(case, "deepspeed", command=COMMAND, parallel=DP_ONLY, implements=("recompute",))
        if gen is None:
            refused += 1
            continue
        checked += 1
        bad = check(gen)
        if bad:
            failed.append("%s: %s" % (case.id, "; ".join(bad)))
    print("deepspeed contract: %d checked, %d refused by the planner, %d failed" % (checked, refused, len(failed)))
    assert checked >= 40, "the matrix should give DeepSpeed at least 40 DP+ZeRO jobs, got %d" % checked
    assert not failed, "\n".join(failed)


def test_default_plan_stays_inside_the_caps():
    """Without pins the planner must honour DeepSpeed's caps (pure DP): a layout outside them is
    refused with a clear error instead of a script that runs something else."""
    outside = []
    for case in matrix("pretrain"):
        try:
            gen = render(case, "deepspeed", command=COMMAND)
        except ConfigError as e:
            assert "cannot run" in str(e) and "--tp 1" in str(e)
            outside.append(case.id)
            continue
        if gen is not None:
            assert not check(gen), case.id
    assert not outside, "default plans outside DeepSpeed's caps: %s" % ", ".join(outside)


def test_user_config_flag_is_refused():
    case = FIRST
    for flag in ("--deepspeed_config", "--deepscale_config"):
        with pytest.raises(ConfigError, match="sets %s itself" % flag):
            render(
                case, "deepspeed", command=("train.py", flag, "mine.json"), parallel=DP_ONLY, implements=("recompute",)
            )


def test_fp8_is_refused_not_run_in_bf16():
    case = FIRST
    with pytest.raises(ConfigError, match="no fp8 training switch"):
        render(case, "deepspeed", command=COMMAND, parallel=DP_ONLY, precision="fp8", implements=("recompute",))


def test_header_names_the_version():
    gen = render(FIRST, "deepspeed", command=COMMAND, parallel=DP_ONLY, implements=("recompute",))
    assert gen is not None and adapter.TARGETS in gen.script
