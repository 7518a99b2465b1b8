#!/usr/bin/env python3
"""Replay speed of `slurmgpu admin replay --from-dir`, in jobs per second.

Copies the submit-filter case scripts (tests/policy_cases/*.sh) into a temporary directory
N times over (default 3000 scripts), runs the replay of the lab site over them as the CLI
does (reading, rebuilding the job_desc, the Lua filter through lupa, the grouped report), and
prints jobs/s and its ratio to the target. Through sacct the speed also depends on slurmdbd
(tests/test_accounting.py prints that figure).

Target: 1000 jobs/s, so 100k jobs of a month replay in under two minutes.

    python bench/replay_speed.py [--jobs 3000]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from slurmgpu.policy.replay import ReplayState, jobs_from_dir, replay  # noqa: E402
from slurmgpu.site import load_site  # noqa: E402

TARGET_JOBS_PER_S = 1000.0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=3000)
    args = ap.parse_args()
    cases = sorted((ROOT / "tests" / "policy_cases").glob("*.sh"))
    site = load_site(str(ROOT / "tests" / "policy_cases" / "sites" / "lab.yaml"))
    with tempfile.TemporaryDirectory(prefix="slurmgpu-replay-bench-") as tmp:
        for i in range(args.jobs):
            src = cases[i % len(cases)]
            shutil.copy(src, Path(tmp) / ("%06d-%s" % (i, src.name)))
        t0 = time.monotonic()
        rep = replay(site, jobs_from_dir(tmp), ReplayState(None, "bench"), limit=args.jobs)
        rep.text()
        wall = time.monotonic() - t0
    rate = len(rep.rows) / wall
    print(
        "replay --from-dir: %d jobs in %.2f s = %.0f jobs/s (target %.0f: ratio %.2f, above 1.0 is good)"
        % (len(rep.rows), wall, rate, TARGET_JOBS_PER_S, rate / TARGET_JOBS_PER_S)
    )
    c = rep.counts()
    print(
        "  would reject %d, warn %d, accept %d, not judged %d"
        % (c["reject"], c["warn"], c["accept"], c["skipped"] + c["error"])
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
