"""torchrun contract: the torchrun options torchrun_step.j2 writes are accepted by torch's own
parser (torch.distributed.run.get_args_parser), for every matrix case a torchrun launcher renders."""

from __future__ import annotations

import re
import shlex

import pytest

from slurmgpu.errors import ConfigError
from tests.contract_matrix import matrix, render

run = pytest.importorskip("torch.distributed.run")  # torch 2.13.0 CPU is a dependency of the contract extra


def torchrun_options(script: str) -> list:
    """The torchrun line's own options, as bash would pass them (env values stand in)."""
    m = re.search(r"\n\s*torchrun \\\n(.*?)(?=\n\s*(?:-m |\S+\.py|pretrain_gpt\.py))", script, re.S)
    assert m, "no torchrun step"
    text = re.sub(r"\\\s*\n", " ", m.group(1)).rstrip(" \\")
    text = text.replace("$SLURM_JOB_ID", "1234").replace("$MASTER_ADDR", "node1").replace("$MASTER_PORT", "21234")
    return shlex.split(text)


# the user's program declares FSDP and recomputation (as a DDP program, no matrix model fits anywhere)
PROGRAM = {"command": ("train.py",), "fsdp": True, "implements": ("recompute",)}


@pytest.mark.parametrize("launcher,spec", [("torchrun", PROGRAM), ("torchtitan", {"smoke": True})])
@pytest.mark.parametrize("requeue", [False, True])
def test_torchrun_parser_accepts_the_step(launcher: str, spec: dict, requeue: bool) -> None:
    checked = 0
    for case in matrix("pretrain"):
        try:
            gen = render(case, launcher, requeue=requeue, **spec)
        except ConfigError:
            continue  # a model torchtitan has no config for (its own contract test counts those)
        if gen is None:
            continue
        opts = torchrun_options(gen.script)
        a = run.get_args_parser().parse_args(opts + ["train.py"])
        lay = gen.request.layout
        assert (a.nnodes, a.nproc_per_node, a.rdzv_backend) == (str(lay.nodes), str(lay.gpus_per_node), "c10d")
        assert a.rdzv_endpoint == "node1:21234" and a.rdzv_id == "1234"
        checked += 1
    print("torchrun parser (%s, requeue=%s): %d accepted" % (launcher, requeue, checked))
    assert checked >= 40
