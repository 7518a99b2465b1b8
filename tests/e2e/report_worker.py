"""A CPU stand-in for a training program, run by a generated script on the local Slurm cluster:
rank 0 prints progress lines in Megatron-LM's and torchtitan's print formats (the formats of
tests/data/report), with figures the test knows, so `slurmgpu report JOBID` can be checked end to
end: plan from the job's batch script, figures from the job's log. No framework runs here.
"""

from __future__ import annotations

import os
import sys

# (iteration, elapsed ms): iteration 1 is warm-up (initialisation), 40 a checkpoint save
MEGATRON = [(1, 9000.0), (2, 1210.0), (3, 1190.0), (4, 1200.0), (5, 1205.0), (6, 1195.0), (7, 1800.0), (8, 1200.0)]
TITAN_TPS = [(1, 900), (2, 4990), (3, 5010), (4, 5000), (5, 5005), (6, 4995), (7, 5000), (8, 5002)]


def main() -> int:
    if os.environ.get("RANK", os.environ.get("SLURM_PROCID", "0")) != "0":
        return 0
    gbs = int(sys.argv[1]) if len(sys.argv) > 1 else 64
    for it, ms in MEGATRON:
        print(
            " [2026-09-14 09:31:%02d.000000] iteration %8d/%8d | consumed samples: %12d | elapsed time per iteration "
            "(ms): %.1f | learning rate: %.6E | global batch size: %5d | lm loss: %.6E | loss scale: %.1f | number of "
            "skipped iterations: %3d | number of nan iterations: %3d |"
            % (it, it, 8, it * gbs, ms, 1e-4, gbs, 10.0, 1.0, 0, 0)
        )
        if it == 2:
            print("[Rank 0] (after 2 iterations) memory (MB) | allocated: 1000.00 | max allocated: 2000.00 | "
                  "reserved: 3000.00 | max reserved: 3500.00")  # fmt: skip
    for step, tps in TITAN_TPS:
        print(
            "[titan] 2026-09-14 09:32:%02d,000 - root - INFO - \033[31mstep: %2d  \033[32mloss: %8.5f  "
            "\033[38;2;180;60;0m"
            "grad_norm: %7.4f  \033[38;2;54;234;195mmemory: %5.2fGiB(%.2f%%)  \033[34mtps: %s  \033[36mtflops: %s  "
            "\033[35mmfu: %s\033[39m" % (step, step, 10.0, 1.0, 3.25, 8.1, f"{tps:,}", "12.00", "1.20%")
        )
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
