"""A tiny training run that follows slurmgpu's checkpoint-and-requeue contract (docs/requeue.md).

Every rank trains the same tiny linear model on gloo (gradients all-reduced); every --every steps
rank 0 writes a checkpoint into a temporary directory, renames it into place and then points the
`latest` marker at it, so a checkpoint half-written when the job dies is never loaded. On
SIGTERM/SIGUSR2 (the checkpoint signal, or Slurm's preemption SIGTERM) the ranks agree on the
stop step (all-reduce of the flag), rank 0 saves, all meet at a barrier, then the program asks for
a requeue: --ask file creates $SLURMGPU_REQUEUE_REQUEST, --ask exit exits with 75.
Prints `step N` per step, `resumed from step N` at start, `done` at the end (rank 0).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time

STOP = [0]


def _on_signal(signum, frame):  # noqa: ARG001
    STOP[0] = 1


def load_latest(ckdir: str):
    import torch

    marker = os.path.join(ckdir, "latest")
    if not os.path.exists(marker):
        return None
    with open(marker) as fh:
        name = fh.read().strip()
    return torch.load(os.path.join(ckdir, name, "state.pt"))


def save(ckdir: str, step: int, model, opt) -> None:
    import torch

    name = "step-%06d" % step
    tmp = os.path.join(ckdir, ".tmp-" + name)
    os.makedirs(tmp, exist_ok=True)
    torch.save({"step": step, "model": model.state_dict(), "opt": opt.state_dict()}, os.path.join(tmp, "state.pt"))
    final = os.path.join(ckdir, name)
    if os.path.exists(final):
        import shutil

        shutil.rmtree(final)
    os.rename(tmp, final)
    with open(os.path.join(ckdir, ".latest.tmp"), "w") as fh:
        fh.write(name + "\n")
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(os.path.join(ckdir, ".latest.tmp"), os.path.join(ckdir, "latest"))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, required=True)
    ap.add_argument("--every", type=int, default=5)
    ap.add_argument("--step-time", type=float, default=0.5)
    ap.add_argument("--ask", choices=("file", "exit"), default="file")
    args = ap.parse_args()
    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGUSR2, _on_signal)

    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    ckdir = os.environ["SLURMGPU_CHECKPOINT_DIR"]
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    start = 0
    state = load_latest(ckdir)
    if state is not None:
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        start = state["step"]
    if rank == 0:
        print("resumed from step %d restart=%s" % (start, os.environ.get("SLURM_RESTART_COUNT", "0")), flush=True)
    step = start
    while step < args.steps:
        flag = torch.tensor([STOP[0]])
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        if flag.item():
            if rank == 0:
                save(ckdir, step, model, opt)
                print("saved on signal at step %d" % step, flush=True)
            dist.barrier()
            if args.ask == "file" and rank == 0:
                open(os.environ["SLURMGPU_REQUEUE_REQUEST"], "w").close()
            dist.destroy_process_group()
            return int(os.environ.get("SLURMGPU_REQUEUE_EXIT", "75")) if args.ask == "exit" else 0
        x = torch.randn(4, 8)
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        for p in model.parameters():
            dist.all_reduce(p.grad)
        opt.step()
        step += 1
        if rank == 0:
            print("step %d" % step, flush=True)
        if step % args.every == 0 and rank == 0:
            save(ckdir, step, model, opt)
        time.sleep(args.step_time)
    dist.barrier()
    if rank == 0:
        print("done", flush=True)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
