"""Runs under `accelerate launch` or DeepSpeed's runner inside a generated sbatch script on the
local Slurm cluster (tests/test_e2e_launchers.py).

Each rank builds a two-layer model, takes one training step through the framework, all-reduces a
1 over the world, and writes what the framework itself reports (accelerate's state and FSDP
plugin; the DeepSpeed engine's ZeRO stage, precision and batch sizes) to OUT/rank-N.json, so
the test can compare it with the plan the script announced.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Dict, Union

Report = Dict[str, Union[str, int, float, bool, None]]


def write(out: str, rank: int, report: Report) -> None:
    report["node"] = os.environ.get("SLURMD_NODENAME", "?")
    path = os.path.join(out, "rank-%d.json" % rank)
    with open(path + ".tmp", "w") as fh:
        json.dump(report, fh)
    os.replace(path + ".tmp", path)


def run_accelerate(out: str) -> int:
    import torch
    import torch.distributed as dist
    from accelerate import Accelerator
    from accelerate.utils import FullyShardedDataParallelPlugin

    acc = Accelerator()
    state = acc.state
    model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.Linear(16, 4))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model, opt = acc.prepare(model, opt)
    x = torch.randn(2, 16, device=acc.device)
    with acc.autocast():
        loss = model(x).float().pow(2).mean()
        autocast_dtype = torch.mm(x, x.t()).dtype  # what the program's matmuls run in
    acc.backward(loss)
    opt.step()
    total = torch.ones(1)
    dist.all_reduce(total)
    # The plugin accelerate builds from the launch environment (ACCELERATE_USE_FSDP, FSDP_*): on a
    # GPU node Accelerator() shards with it; on CPU (MULTI_CPU) accelerate 1.15 runs DDP instead.
    fsdp = FullyShardedDataParallelPlugin() if os.environ.get("ACCELERATE_USE_FSDP") == "true" else None
    write(
        out,
        state.process_index,
        {
            "rank": state.process_index,
            "world": state.num_processes,
            "machines": int(os.environ.get("SLURM_NNODES", "0")),
            "distributed_type": str(state.distributed_type.value),
            "backend": state.backend,
            "mixed_precision": state.mixed_precision,
            "autocast_dtype": str(autocast_dtype),
            "use_fsdp": os.environ.get("ACCELERATE_USE_FSDP"),
            "fsdp_version": fsdp.fsdp_version if fsdp else None,
            "reshard_after_forward": bool(fsdp.reshard_after_forward) if fsdp else None,
            "allreduce": float(total.item()),
            "loss_finite": bool(torch.isfinite(loss).item()),
        },
    )
    acc.wait_for_everyone()
    acc.end_training()
    return 0


def run_deepspeed(out: str, argv: list) -> int:
    import deepspeed
    import torch
    import torch.distributed as dist

    ap = argparse.ArgumentParser()
    ap.add_argument("--local_rank", type=int, default=-1)
    ap = deepspeed.add_config_arguments(ap)
    args = ap.parse_args(argv)
    model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.Linear(16, 4))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)  # one of ZeRO's tested optimizers
    engine, _, _, _ = deepspeed.initialize(args=args, model=model, optimizer=opt)
    dtype = torch.bfloat16 if engine.bfloat16_enabled() else torch.float16 if engine.fp16_enabled() else torch.float32
    x = torch.randn(engine.train_micro_batch_size_per_gpu(), 16, dtype=dtype, device=engine.device)
    loss = engine(x).float().pow(2).mean()
    engine.backward(loss)
    engine.step()
    total = torch.ones(1)
    dist.all_reduce(total)
    write(
        out,
        dist.get_rank(),
        {
            "rank": dist.get_rank(),
            "world": dist.get_world_size(),
            "backend": dist.get_backend(),
            "accelerator": deepspeed.get_accelerator().device_name(),
            "config": args.deepspeed_config,
            "zero_stage": engine.zero_optimization_stage(),
            "bf16": engine.bfloat16_enabled(),
            "fp16": engine.fp16_enabled(),
            "param_dtype": str(next(engine.module.parameters()).dtype),
            "train_batch_size": engine.train_batch_size(),
            "micro_batch": engine.train_micro_batch_size_per_gpu(),
            "accumulation": engine.gradient_accumulation_steps(),
            "gradient_clipping": engine.gradient_clipping(),
            "allreduce": float(total.item()),
            "loss_finite": bool(torch.isfinite(loss).item()),
        },
    )
    dist.barrier()
    dist.destroy_process_group()
    return 0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("framework", choices=("accelerate", "deepspeed"))
    ap.add_argument("--out", required=True)
    args, rest = ap.parse_known_args()
    if args.framework == "accelerate":
        return run_accelerate(args.out)
    return run_deepspeed(args.out, rest)


if __name__ == "__main__":
    sys.exit(main())
