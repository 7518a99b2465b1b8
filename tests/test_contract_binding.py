"""Binding contract (issue 30): the CPU/NUMA binding flags the generator writes for each launcher
are accepted by that launcher's own parser, and where the framework computes the binding itself
from our flags (DeepSpeed's core split), its own code puts every rank on its GPU's NUMA node.

torchrun: torch.distributed.run's parser and torch.numa.binding's mode enum (torch 2.13, pinned).
DeepSpeed: deepspeed.launcher.runner.parse_args and deepspeed.utils.numa.get_numactl_cmd (0.19.8).
accelerate: accelerate.commands.launch.launch_command_parser (1.15.0).
vLLM / SGLang: argparse built from the engines' recorded flags (tests/data/contract/*.json).
"""

from __future__ import annotations

import shlex
from typing import List

import pytest

from slurmgpu.site import parse_cpulist
from tests.contract_matrix import PRESETS, cases
from tests.launch_parse import runner_words
from tests.test_contract_torchrun import PROGRAM, torchrun_options

BOUND_PRESETS = [p for p in PRESETS]


def launch_words(script: str) -> List[str]:
    """The words of the launch step after srun and its options (or after `bash -c '...' bash`)."""
    lines = script.split("\n")
    i = next(k for k, line in enumerate(lines) if line.startswith("# --- launch"))
    start = next(k for k in range(i, len(lines)) if lines[k].startswith("srun "))
    text = []
    for line in lines[start:]:
        text.append(line.rstrip("\\").rstrip())
        if not line.endswith("\\"):
            break
    words = shlex.split(" ".join(text))
    if "bash" in words[1:]:
        return words[words.index("bash", words.index("bash") + 1) + 1 :]
    k = 1
    while k < len(words) and words[k].startswith("-"):
        k += 1
    return words[k:]


def test_torchrun_numa_binding_is_torchs_own_option():
    run = pytest.importorskip("torch.distributed.run")
    binding = pytest.importorskip("torch.numa.binding")
    checked = 0
    for case, gen in cases("torchrun", **PROGRAM):
        if gen is None:
            continue
        a = run.get_args_parser().parse_args(torchrun_options(gen.script) + ["train.py"])
        b = gen.request.binding
        if b.how == "torchrun":
            opts = binding.NumaOptions(affinity_mode=binding.AffinityMode(a.numa_binding))
            assert opts.affinity_mode.value == "node", case.id
            checked += 1
        else:
            assert a.numa_binding is None, case.id
    assert checked >= 40


def test_deepspeed_splits_our_core_list_onto_each_gpus_numa_node(monkeypatch):
    runner = pytest.importorskip("deepspeed.launcher.runner")
    numa = pytest.importorskip("deepspeed.utils.numa")
    # only prints "please install numactl" (through dpkg, leaving its pipes open); the split is untouched
    monkeypatch.setattr(numa, "check_for_numactl_pkg", lambda: True)
    checked = 0
    for case, gen in cases(
        "deepspeed", command=("train.py",), parallel={"tp": 1, "pp": 1, "cp": 1, "ep": 1}, implements=("recompute",)
    ):
        if gen is None or gen.request.binding.how != "deepspeed":
            continue
        args = runner.parse_args(["--node_rank=0"] + runner_words(gen.script, "deepspeed"))
        assert args.bind_cores_to_rank and args.bind_core_list
        nt = gen.request.node
        plan = nt.affinity.ranks(nt.gpus)
        for local in range(args.num_gpus):
            # DeepSpeed's own split (numactl is not installed here: it binds by -C alone)
            _, cmd = numa.get_numactl_cmd(args.bind_core_list, args.num_gpus, local)
            cores = set(parse_cpulist(cmd[cmd.index("-C") + 1]))
            assert cores and cores <= set(plan[local].cpus), (case.id, local, cmd)
        checked += 1
    assert checked >= 20


def test_accelerate_enable_cpu_affinity_is_a_launch_flag():
    launch = pytest.importorskip("accelerate.commands.launch")
    checked = 0
    for case, gen in cases("accelerate", command=("train.py",), implements=("recompute",)):
        if gen is None:
            continue
        args = launch.launch_command_parser().parse_args(
            ["--machine_rank=0"] + runner_words(gen.script, "accelerate launch")
        )
        assert args.enable_cpu_affinity == (gen.request.binding.how == "accelerate"), case.id
        checked += args.enable_cpu_affinity
    assert checked >= 20


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_serving_numa_flags_parse_with_the_engines_recorded_flags(engine):
    from tests.test_contract_serving import ENTRY, build, catalogue, parse, runtime

    parser = build(catalogue(engine))
    checked = 0
    for case, gen in cases(engine, task="inference"):
        if gen is None:
            continue
        b = gen.request.binding
        lay = gen.request.layout
        words = launch_words(gen.script)[ENTRY[engine] :]
        words = [w.replace("$MASTER_ADDR", "n0").replace("$MASTER_PORT", "29500") for w in words]
        ns = parse(parser, words + list(runtime(engine, lay.nodes, 0)))
        want = [r.numa for r in b.ranks]
        if engine == "vllm":
            assert (bool(ns.numa_bind), [int(n) for n in ns.numa_bind_nodes or ()]) == (
                b.bound,
                want if b.bound else [],
            ), case.id
        else:
            assert list(ns.numa_node or ()) == (want if b.bound else []), case.id
        checked += b.bound
    assert checked >= 20
