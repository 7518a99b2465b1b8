#!/usr/bin/env python3
"""How long `slurmgpu gen` takes as a whole process, for a 2-node Llama 3 70B Megatron job.

Target: median under 150 ms on the development machine. Prints the median, the spread and
the ratio to the target, then where the time goes: the interpreter itself, importing
the CLI (what `slurmgpu --help` pays), importing the generator's modules, and the
stages inside one in-process run (site, plan, render, policy). Run from anywhere:

    python bench/gen_bench.py [--runs 21]
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

TARGET_MS = 150.0
# Llama 3 70B on two 8-GPU nodes with Megatron. Pretraining it does not fit in 16 x 80 GB
# (the planner says so), so the benchmark plans a LoRA run with the TP=8 x PP=2 layout.
GEN = ["gen", "--model", "llama3-70b", "--launcher", "megatron", "--nodes", "2", "--tp", "8", "--pp", "2",
       "--task", "lora", "--site", "dgx-h100"]


def cli() -> list:
    exe = shutil.which("slurmgpu")
    return [exe] if exe else [sys.executable, "-m", "slurmgpu.cli"]


def wall(argv, runs, env):
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        r = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
        times.append((time.perf_counter() - t) * 1000)
        if r.returncode != 0:
            sys.exit("failed: %s\n%s" % (" ".join(argv), r.stderr.decode()))
    return times


def describe(label, times):
    med = statistics.median(times)
    print("  %-50s median %6.1f ms   min %6.1f   max %6.1f   (n=%d)" % (label, med, min(times), max(times),
                                                                       len(times)))
    return med


STAGES = r"""
import time, os
t = [time.perf_counter()]
import slurmgpu.cli
t.append(time.perf_counter())
from slurmgpu.site import resolve_site
site, _ = resolve_site("dgx-h100", os.environ)
t.append(time.perf_counter())
from slurmgpu import render as R
from slurmgpu.spec import JobSpec
spec = JobSpec(model="llama3-70b", launcher="megatron", nodes=2, task="lora", parallel={"tp": 8, "pp": 2})
t.append(time.perf_counter())
import slurmgpu.plan
t.append(time.perf_counter())
sizing = R.plan_layout(site, spec)
t.append(time.perf_counter())
import jinja2
t.append(time.perf_counter())
req, _ = R.build_request(site, spec, sizing, "x")
text = R.render(req, R.search_path(None, None, site))
t.append(time.perf_counter())
import slurmgpu.policy, slurmgpu.jobdesc, lupa
t.append(time.perf_counter())
R.check_policy(site, spec, text, sizing)
t.append(time.perf_counter())
print(" ".join("%.2f" % (1000 * (b - a)) for a, b in zip(t, t[1:])))
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=21)
    args = ap.parse_args()
    cache = tempfile.mkdtemp(prefix="slurmgpu-bench-")
    # An installed slurmgpu has compiled .pyc files; PYTHONDONTWRITEBYTECODE (set in some sandboxes
    # and CI images) makes every run compile every module from source, so measure both.
    env = dict(os.environ, SLURMGPU_CACHE_DIR=os.path.join(cache, "templates"),
               PYTHONPYCACHEPREFIX=os.path.join(cache, "pyc"))
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    # As this environment runs it: no cache prefix, and nothing written (with PYTHONDONTWRITEBYTECODE
    # set and no __pycache__ in the source tree, slurmgpu's modules are compiled on every run).
    nopyc_env = dict(os.environ, SLURMGPU_CACHE_DIR=env["SLURMGPU_CACHE_DIR"], PYTHONDONTWRITEBYTECODE="1")
    nopyc_env.pop("PYTHONPYCACHEPREFIX", None)
    cold_env = dict(env, SLURMGPU_CACHE_DIR="")
    argv = cli() + GEN
    print("slurmgpu gen benchmark: %s" % " ".join(["slurmgpu"] + GEN))
    print("python %s on %s, %d CPUs, load average %s" % (
        sys.version.split()[0], sys.platform, os.cpu_count() or 0,
        " ".join("%.1f" % x for x in os.getloadavg()) if hasattr(os, "getloadavg") else "?"))
    print("\nWhole process (wall time):")
    base = describe("python -c pass (interpreter start-up)", wall([sys.executable, "-c", "pass"], args.runs, env))
    helps = describe("slurmgpu --help", wall(cli() + ["--help"], args.runs, env))
    wall(argv, 1, env)  # compile the modules and the templates once
    warm = describe("slurmgpu gen (installed: .pyc and template cache)", wall(argv, args.runs, env))
    cold = describe("slurmgpu gen (no template cache)", wall(argv, max(5, args.runs // 3), cold_env))
    nopyc = describe("slurmgpu gen (PYTHONDONTWRITEBYTECODE=1)", wall(argv, max(5, args.runs // 3), nopyc_env))
    print("\n  target %.0f ms: %.2fx the target (%s); without the template cache %.2fx; without .pyc %.2fx" % (
        TARGET_MS, warm / TARGET_MS, "met" if warm < TARGET_MS else "NOT met", cold / TARGET_MS,
        nopyc / TARGET_MS))

    print("\nImport time (fastest of %d, interpreter start-up subtracted):" % max(5, args.runs // 3))
    n = max(5, args.runs // 3)
    fastest = min(wall([sys.executable, "-c", "pass"], n, env))
    for label, mods in (("slurmgpu.cli (what --help imports)", "slurmgpu.cli"),
                        ("+ generator: spec, render, fabric, launchers",
                         "slurmgpu.cli, slurmgpu.spec, slurmgpu.render"),
                        ("+ site loader and PyYAML", "slurmgpu.cli, slurmgpu.render, slurmgpu.site, yaml"),
                        ("+ planner", "slurmgpu.cli, slurmgpu.render, slurmgpu.site, yaml, slurmgpu.plan"),
                        ("+ jinja2", "slurmgpu.cli, slurmgpu.render, slurmgpu.site, yaml, slurmgpu.plan, jinja2"),
                        ("+ policy (lupa, jobdesc)", "slurmgpu.cli, slurmgpu.render, slurmgpu.site, yaml, "
                         "slurmgpu.plan, jinja2, slurmgpu.policy, slurmgpu.jobdesc, lupa")):
        t = min(wall([sys.executable, "-c", "import " + mods], n, env))
        print("  %-50s %6.1f ms" % (label, t - fastest))

    print("\nStages of one in-process run (median of %d, .pyc and template cache warm):" % n)
    rows = []
    for _ in range(n):
        r = subprocess.run([sys.executable, "-c", STAGES], capture_output=True, text=True, env=env, check=True)
        rows.append([float(x) for x in r.stdout.split()])
    names = ("import slurmgpu.cli (click)", "load the site (imports PyYAML)", "import spec + render (generator)",
             "import the planner", "make_plan", "import jinja2", "build request + render (generator)",
             "import policy + lupa", "policy check (Lua)")
    for i, name in enumerate(names):
        print("  %-50s %6.1f ms" % (name, statistics.median(r[i] for r in rows)))
    shutil.rmtree(cache, ignore_errors=True)
    print("\n(help %.0f ms = start-up %.0f + CLI import; gen adds the rest)" % (helps, base))


if __name__ == "__main__":
    main()
