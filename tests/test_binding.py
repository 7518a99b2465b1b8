"""Each launcher's binding from the site map (slurmgpu/job/binding.py), through the real generator:
the flags in the script, the per-rank plan, and no binding (with the one line saying why) where a
binding would be a guess."""

from __future__ import annotations

import re
import subprocess
from dataclasses import replace

import pytest

from slurmgpu.job import JobSpec, generate
from slurmgpu.job.binding import deepspeed_core_list, plan_binding
from slurmgpu.job.templates import search_path
from slurmgpu.site import format_cpulist, load_site, parse_cpulist, preset_dir


def site(name):
    return load_site(str(preset_dir() / (name + ".yaml")))


def gen(preset, launcher, nodes=2, **spec):
    s = site(preset)
    base = JobSpec(launcher=launcher, nodes=nodes, command=("train.py",), parallel={"tp": 1, "pp": 1}, time="01:00:00")
    if launcher in ("vllm", "sglang"):
        base = replace(base, command=(), weights="org/model", task="inference", parallel={})
    return generate(s, replace(base, **spec), search_path(None, None, s))


def code(script):
    """The script without its comment lines."""
    return "\n".join(line for line in script.split("\n") if not line.lstrip().startswith("#"))


def note_line(script):
    m = re.search(r"^# --- CPU/NUMA binding: (.*) ---$", script, re.M)
    assert m, "no binding line"
    return m.group(1)


def test_srun_masks_each_task_with_its_gpus_numa_node():
    g = gen("dgx-h100", "srun")
    b = g.request.binding
    assert b.how == "srun" and b.exact
    masks = b.srun_args[0].split(":", 1)[1].split(",")
    assert len(masks) == 8
    for i, m in enumerate(masks):
        cpus = [c for c in range(256) if int(m, 16) >> c & 1]
        assert format_cpulist(cpus) == ("0-55,112-167" if i < 4 else "56-111,168-223")
    assert "--cpu-bind=mask_cpu:" + ",".join(masks) in g.script
    # the launch step and the rank preflight step bind alike, and the sbatch CPUs cover the masks
    assert code(g.script).count("--cpu-bind=mask_cpu:") == 2 and "#SBATCH --cpus-per-task=28" in g.script
    assert "local rank 5: GPU 5, NUMA node 1, CPUs 56-111,168-223, NIC mlx5_9" in g.script


def test_srun_with_slices_binds_the_slices():
    b = gen("frontier", "srun").request.binding
    assert [format_cpulist(r.cpus) for r in b.ranks][:2] == ["49-55", "57-63"]
    assert b.srun_args == ("--cpu-bind=mask_cpu:" + ",".join("0x%x" % sum(1 << c for c in r.cpus) for r in b.ranks),)


def test_srun_without_cpu_lists_binds_numa_nodes():
    b = gen("juwels-booster", "srun").request.binding
    assert b.srun_args == ("--cpu-bind=map_ldom:3,1,7,5",) and not b.exact


@pytest.mark.parametrize("launcher", ["torchrun", "megatron", "nemo", "torchtitan"])
def test_torchrun_family_gets_numa_binding(launcher):
    spec = {"smoke": True, "model": "llama3.1-8b", "parallel": {}, "command": ()}
    g = gen("gb200-nvl72", launcher, **(spec if launcher != "torchrun" else {}))
    assert g.request.binding.runner_args == ("--numa-binding=node",)
    assert re.search(r"--rdzv-endpoint=\"\$MASTER_ADDR:\$MASTER_PORT\" \\\n    --numa-binding=node \\\n", g.script)
    assert "--ranks torchrun --record" in g.script and "--cpu-bind=none" in g.script


def test_deepspeed_core_list_follows_the_gpus_numa_nodes():
    g = gen("dgx-h100", "deepspeed")
    assert "--bind_cores_to_rank --bind_core_list=0-111" in g.script
    ranks = g.request.binding.ranks
    assert [format_cpulist(r.cpus) for r in ranks][:5] == ["0-13", "14-27", "28-41", "42-55", "56-69"]


def test_deepspeed_refuses_a_layout_its_ascending_list_cannot_express():
    # DGX A100: GPU0,1 on NUMA 3 (48-63), GPU2,3 on NUMA 1 (16-31): rank 0 would get the lowest cores
    assert deepspeed_core_list(site("dgx-a100").node_type_of().affinity.ranks(8)) is None
    g = gen("dgx-a100", "deepspeed")
    assert g.request.binding.how == "none" and "--bind_core" not in code(g.script)
    assert note_line(g.script).startswith("none: DeepSpeed's --bind_core_list must ascend")


def test_accelerate_vllm_sglang_flags():
    assert "    --enable_cpu_affinity \\\n" in gen("dgx-h100", "accelerate").script
    v = gen("dgx-a100", "vllm")
    assert v.request.binding.program_args == (
        "--numa-bind",
        "--numa-bind-nodes",
        "3",
        "3",
        "1",
        "1",
        "7",
        "7",
        "5",
        "5",
    )
    assert "--numa-bind --numa-bind-nodes 3 3 1 1 7 7 5 5" in v.script
    s = gen("alps-gh200", "sglang", nodes=1)
    assert "--numa-node 0 1 2 3" in s.script


@pytest.mark.parametrize(
    "preset,launcher,spec,why",
    [
        ("aws-p5", "srun", {}, "none: no GPU/NUMA/CPU map for site aws-p5"),
        ("dgx-h100", "srun", {"gpus": 4, "nodes": None}, "none: the job uses 4 of the 8 GPUs per node"),
        ("dgx-h100", "vllm", {"args": ("--no-numa-bind",)}, "left to the program"),
        ("dgx-h100", "srun", {"cpus_per_task": 4}, "none: --cpus-per-task 4 x 8 tasks leaves CPUs"),
    ],
)
def test_no_binding_rather_than_a_wrong_one(preset, launcher, spec, why):
    g = gen(preset, launcher, **spec)
    assert g.request.binding.how == "none"
    assert note_line(g.script).startswith(why)
    assert "--cpu-bind=" not in code(g.script) and "--numa-bind-nodes" not in code(g.script)
    assert "--ranks " not in g.script


def test_one_numa_node_without_slices_binds_nothing(tmp_path):
    p = tmp_path / "one.yaml"
    text = (preset_dir() / "dgx-h100.yaml").read_text()
    text = re.sub(r"      numa: \{0: .*\}\n", "      numa: {0: 0-223}\n", text).replace("numa: 1,", "numa: 0,")
    p.write_text(text)
    s = load_site(str(p))
    b = plan_binding(s.name, s.node_type_of(), "srun", "direct", 8, 28, 8)
    assert b.how == "none" and "one NUMA node" in b.note


def test_every_preset_and_launcher_renders_a_binding_line_and_valid_shell(tmp_path):
    """Bound or not, the script says so in one line, and bash accepts it."""
    launchers = ("srun", "torchrun", "deepspeed", "accelerate", "vllm", "sglang")
    checked = 0
    for name in ("dgx-h100", "dgx-a100", "gb200-nvl72", "alps-gh200", "frontier", "perlmutter", "rtx-4090"):
        for launcher in launchers:
            try:
                g = gen(name, launcher)
            except Exception as exc:  # a layout this launcher/site cannot run: not this test's business
                assert "binding" not in str(exc)
                continue
            note = note_line(g.script)
            assert ("none:" in note) == (g.request.binding.how == "none") or note.startswith("left to")
            path = tmp_path / ("%s-%s.sh" % (name, launcher))
            path.write_text(g.script)
            assert subprocess.run(["bash", "-n", str(path)]).returncode == 0
            checked += 1
    assert checked >= 30


def test_ranks_follow_the_site_map_for_the_explain_view():
    ranks = gen("dgx-h100", "torchrun").request.binding.ranks
    assert [(r.local, r.numa, r.nics) for r in ranks][::4] == [(0, 0, ("mlx5_0",)), (4, 1, ("mlx5_6",))]
    assert parse_cpulist(ranks[7].cpulist) == tuple(range(56, 112)) + tuple(range(168, 224))
