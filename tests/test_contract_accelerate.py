"""accelerate contract: over the golden matrix, the generated `accelerate launch` line is accepted by
accelerate's own parser and launch checks, and the environment it hands the program carries the
plan's machines, processes, precision and FSDP sharding.

Needs the `contract` extra (accelerate==1.15.0); in CI it is installed, elsewhere the module skips.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import List

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from contract_matrix import FIRST, matrix, render  # noqa: E402
from launch_parse import runner_words  # noqa: E402

from slurmgpu.errors import ConfigError  # noqa: E402
from slurmgpu.job.launchers import accelerate as adapter  # noqa: E402

launch = pytest.importorskip("accelerate.commands.launch")
acc_utils = pytest.importorskip("accelerate.utils.launch")

COMMAND = ("train.py",)
DP_ONLY = {"tp": 1, "pp": 1, "cp": 1, "ep": 1}


def check(gen) -> List[str]:
    lay, plan = gen.request.layout, gen.sizing.plan
    words = runner_words(gen.script, "accelerate launch")
    args = launch.launch_command_parser().parse_args(["--machine_rank=0"] + words)
    args, _, _ = launch._validate_launch_command(args)
    env = acc_utils.prepare_multi_gpu_env(args)
    want = {
        "machines": lay.nodes,
        "processes": lay.world,
        "precision": {"fp32": "no"}.get(plan.precision, plan.precision),
        "fsdp": plan.zero in (2, 3),
        "reshard": "true" if plan.zero == 3 else ("false" if plan.zero == 2 else None),
        "script": COMMAND[0],
    }
    have = {
        "machines": args.num_machines,
        "processes": int(env["WORLD_SIZE"]) if "WORLD_SIZE" in env else args.num_processes,
        "precision": env.get("ACCELERATE_MIXED_PRECISION"),
        "fsdp": env.get("ACCELERATE_USE_FSDP") == "true",
        "reshard": env.get("FSDP_RESHARD_AFTER_FORWARD") if env.get("FSDP_VERSION") == "2" else None,
        "script": args.training_script,
    }
    return [] if have == want else ["%r != plan %r" % (have, want)]


def test_every_case_is_the_plan_accelerate_runs():
    checked, refused, failed, outside = 0, 0, [], []
    for case in matrix("pretrain"):
        try:
            gen = render(case, "accelerate", command=COMMAND, parallel=DP_ONLY, implements=("recompute",))
        except ConfigError as e:
            assert "cannot run ZeRO stage 1" in str(e), str(e)
            outside.append(case.id)
            continue
        if gen is None:
            refused += 1
            continue
        checked += 1
        bad = check(gen)
        if bad:
            failed.append("%s: %s" % (case.id, "; ".join(bad)))
    print("accelerate contract: %d checked, %d refused by the planner, %d failed" % (checked, refused, len(failed)))
    # FSDP2 without an auto-wrap policy gathers the whole model (accelerate's NO_WRAP default), so only
    # the 8B-class models fit as the planner charges them (tests/test_contract_memory.py)
    assert checked >= 20, checked
    assert not failed, "\n".join(failed)
    assert not outside, "plans outside accelerate's caps (ZeRO-1): %s" % ", ".join(outside)


def test_header_names_the_version():
    gen = render(FIRST, "accelerate", command=COMMAND, parallel=DP_ONLY, implements=("recompute",))
    assert gen is not None and adapter.TARGETS in gen.script
