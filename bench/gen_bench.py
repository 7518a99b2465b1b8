#!/usr/bin/env python3
"""How long `slurmgpu gen` takes as a whole process, for a 2-node Llama 3 70B Megatron job.

First the comparison that the target is set on: `slurmgpu gen` (the policy check included)
against torchx's dry run of a 2-node DDP job, `torchx run --scheduler slurm --dryrun dist.ddp
-j 2x8 --script train.py` (dist.ddp needs a script; torchx needs no torch for a dry run),
timed in the same run and interleaved (gen, torchx, gen, torchx, ...) so that a busy machine
slows both alike. Target: gen's median wall time at most 0.6 of torchx's. Each side runs from
a venv of its own under the bench cache ($SLURMGPU_BENCH_CACHE, else
$XDG_CACHE_HOME/slurmgpu-bench or ~/.cache/slurmgpu-bench), built with pip the first time:
torchx pinned (TORCHX_VERSION), and for gen only slurmgpu's dependencies (this source tree
runs from PYTHONPATH), so neither pays for .pth files or packages of the interpreter that
runs the bench. Without a network the comparison is skipped with a message and the rest runs.
gen is timed with each Lua backend the machine has: lupa in-process and the `lua5.1` binary.
Wall time is the target; CPU time (user + system) is printed beside it because a loaded
machine moves it far less.

Then the absolute figures (median under 150 ms on the development machine) and where the
time goes: the interpreter itself, importing the CLI (what `slurmgpu --help` pays),
importing the generator's modules, and the stages inside one in-process run (site, plan,
render, policy). Run from anywhere:

    python bench/gen_bench.py [--runs 21] [--pairs 31] [--compare-only]
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
TARGET_RATIO = 0.6  # gen's median / torchx's median, same run, interleaved
TORCHX_VERSION = "0.7.0"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Llama 3 70B on two 8-GPU nodes with Megatron. Pretraining it does not fit in 16 x 80 GB
# (the planner says so), so the benchmark plans a LoRA run with the TP=8 x PP=2 layout.
# torchx's nearest equivalent: a 2-node x 8-GPU torchrun job as an sbatch script, not submitted.
TORCHX = ["run", "--scheduler", "slurm", "--dryrun", "dist.ddp", "-j", "2x8", "--script", "train.py"]
GEN = [
    "gen",
    "--model",
    "llama3-70b",
    "--launcher",
    "megatron",
    "--nodes",
    "2",
    "--tp",
    "8",
    "--pp",
    "2",
    "--task",
    "lora",
    "--site",
    "dgx-h100",
]


PY = sys.executable  # the interpreter that runs slurmgpu; main() swaps in the bench's clean venv


def entry_point() -> str:
    """module:function of the `slurmgpu` console script, from setup.cfg."""
    import configparser

    cfg = configparser.ConfigParser()
    cfg.read(os.path.join(ROOT, "setup.cfg"))
    for line in cfg.get("options.entry_points", "console_scripts", fallback="").splitlines():
        name, _, target = line.partition("=")
        if name.strip() == "slurmgpu":
            return target.strip()
    return "slurmgpu.cli:main"


def cli() -> list:
    # What the console script does, without depending on which copy an installed script (or a
    # pyenv shim in front of it) would run; `python -m slurmgpu.cli` would compile cli.py anew
    # on every run, which no installed `slurmgpu` does.
    module, func = entry_point().split(":")
    return [PY, "-c", "import sys; sys.argv[0] = 'slurmgpu'; from %s import %s; sys.exit(%s())" % (module, func, func)]


def with_tree(env: dict) -> dict:
    """env with this source tree first on the import path."""
    env = dict(env)
    env["PYTHONPATH"] = os.pathsep.join([ROOT] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    return env


# ---------------------------------------------------------------------------
# Clean venvs: torchx, and slurmgpu's dependencies (this tree runs from PYTHONPATH)


def bench_cache() -> str:
    if os.environ.get("SLURMGPU_BENCH_CACHE"):
        return os.environ["SLURMGPU_BENCH_CACHE"]
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "slurmgpu-bench")


def gen_requirements() -> list:
    """install_requires from setup.cfg, plus lupa (the in-process Lua) if it is not there yet."""
    import configparser

    cfg = configparser.ConfigParser()
    cfg.read(os.path.join(ROOT, "setup.cfg"))
    reqs = [r.strip() for r in cfg.get("options", "install_requires", fallback="").splitlines() if r.strip()]
    if not any(r.lower().startswith("lupa") for r in reqs):
        reqs.append("lupa>=2.1")
    return reqs


def venv(name: str, requirements: list, probe: str):
    """(python of a venv under the bench cache holding `requirements`, None) or (None, why not).
    `probe` is Python that prints the requirements back when they are all installed."""
    home = os.path.join(bench_cache(), name)
    py = os.path.join(home, "Scripts" if os.name == "nt" else "bin", "python")
    want = " ".join(requirements)

    def installed() -> bool:
        try:
            r = subprocess.run([py, "-c", probe], capture_output=True, text=True, timeout=60)
        except (OSError, subprocess.TimeoutExpired):
            return False
        return r.returncode == 0 and r.stdout.strip() == want

    if installed():
        return py, None
    print("building %s (%s, from the package index, once) ..." % (home, want), flush=True)
    shutil.rmtree(home, ignore_errors=True)
    steps = (
        [sys.executable, "-m", "venv", home],
        [py, "-m", "pip", "install", "-q", "--disable-pip-version-check", "--timeout", "30", "--retries", "2"]
        + requirements,
    )
    for argv in steps:
        try:
            r = subprocess.run(argv, capture_output=True, text=True, timeout=900)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return None, "%s: %s" % (" ".join(argv[:5]), exc)
        if r.returncode != 0:
            tail = [ln for ln in (r.stderr or r.stdout).strip().splitlines() if not ln.startswith("WARNING")]
            return None, "%s exited %d: %s" % (" ".join(argv[:5]), r.returncode, (tail or ["?"])[-1])
    if not installed():
        return None, "%s do not import in %s" % (want, home)
    return py, None


def torchx_venv():
    """(path of the torchx console script, None) or (None, why not)."""
    req = "torchx==" + TORCHX_VERSION
    py, why = venv("torchx-venv", [req], "import torchx; print('torchx==' + torchx.__version__)")
    return (os.path.join(os.path.dirname(py), "torchx"), None) if py else (None, why)


def gen_venv():
    """A venv with only slurmgpu's dependencies, as `pip install slurmgpu` makes, so neither side
    pays for .pth files or other packages of the interpreter that runs the bench."""
    reqs = gen_requirements()
    # Python that prints the requirement list back once every one of them imports.
    mods = {"pyyaml": "yaml"}
    names = [r.split(">")[0].split("=")[0].split("<")[0].split("[")[0].strip() for r in reqs]
    probe = "import %s; print(%r)" % (", ".join(mods.get(n.lower(), n.lower()) for n in names), " ".join(reqs))
    return venv("gen-venv", reqs, probe)


def timed(argv, env, cwd):
    """(wall ms, CPU ms): CPU is user + system of the process and the children it waited for
    (torchx's sinfo, the lua5.1 binary), which a busy machine disturbs far less than wall time."""
    t = time.perf_counter()
    p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, cwd=cwd)
    err = p.stderr.read()
    p.stderr.close()
    _pid, status, ru = os.wait4(p.pid, 0)
    ms = (time.perf_counter() - t) * 1000
    p.returncode = os.waitstatus_to_exitcode(status) if hasattr(os, "waitstatus_to_exitcode") else status
    if p.returncode != 0:
        raise RuntimeError("%s exited %d:\n%s" % (" ".join(argv), p.returncode, err.decode(errors="replace")))
    return ms, (ru.ru_utime + ru.ru_stime) * 1000


def compare(pairs: int, env: dict) -> None:
    """slurmgpu gen vs torchx's dry run, interleaved, ratio of the medians."""
    print("Against torchx %s (`torchx %s`), interleaved, %d rounds:" % (TORCHX_VERSION, " ".join(TORCHX), pairs))
    exe, why = torchx_venv()
    if exe is None:
        print("  SKIPPED: the torchx venv cannot be built here (%s); no ratio." % why)
        return
    work = tempfile.mkdtemp(prefix="slurmgpu-bench-cwd-")
    with open(os.path.join(work, "train.py"), "w") as f:
        f.write("print('train')\n")
    tx_env = dict(env)
    tx_env.pop("PYTHONPATH", None)
    contenders = []
    have_lupa = subprocess.run([PY, "-c", "import lupa.lua51"], capture_output=True).returncode == 0
    if have_lupa:
        contenders.append(("slurmgpu gen (lupa, in-process Lua)", cli() + GEN, with_tree(env)))
    else:
        print("  (no lupa here: gen is timed with the lua5.1 binary only)")
    if shutil.which("lua5.1"):
        # An importable package named lupa that fails to import: slurmgpu falls back to the binary.
        hide = os.path.join(work, "no-lupa")
        os.makedirs(os.path.join(hide, "lupa"))
        with open(os.path.join(hide, "lupa", "__init__.py"), "w") as f:
            f.write("raise ImportError('hidden by gen_bench')\n")
        e = with_tree(env)
        e["PYTHONPATH"] = os.pathsep.join([ROOT, hide] + e["PYTHONPATH"].split(os.pathsep)[1:])
        contenders.append(("slurmgpu gen (lua5.1 binary)", cli() + GEN, e))
    if not contenders:
        print("  SKIPPED: neither lupa nor lua5.1 here, so gen cannot run its policy check.")
        return
    tx = ("torchx run --dryrun (2x8 DDP)", [exe] + TORCHX, tx_env)
    rounds = [c for c in contenders] + [tx]
    try:
        for _label, argv, e in rounds:  # warm: .pyc, template cache, torchx's first-run work
            timed(argv, e, work)
            timed(argv, e, work)
    except RuntimeError as exc:
        print("  SKIPPED: a warm-up run failed: %s" % exc)
        shutil.rmtree(work, ignore_errors=True)
        return
    times = {label: [] for label, _a, _e in rounds}
    cpus = {label: [] for label, _a, _e in rounds}
    for _ in range(pairs):
        for label, argv, e in rounds:
            ms, cpu = timed(argv, e, work)
            times[label].append(ms)
            cpus[label].append(cpu)
    shutil.rmtree(work, ignore_errors=True)
    print("  wall time:")
    meds = {label: describe(label, t) for label, t in times.items()}
    print("  CPU time (user + system, children included):")
    cpu_meds = {label: describe(label, t) for label, t in cpus.items()}
    base, cpu_base = meds[tx[0]], cpu_meds[tx[0]]
    for label, _a, _e in contenders:
        ratio = meds[label] / base
        q = sorted(a / b for a, b in zip(times[label], times[tx[0]]))
        print(
            "  %s / torchx: wall ratio of medians %.2f (target <= %.2f: %s)\n"
            "      per round: median %.2f, middle half %.2f..%.2f, all %.2f..%.2f; CPU ratio of medians %.2f"
            % (
                label,
                ratio,
                TARGET_RATIO,
                "met" if ratio <= TARGET_RATIO else "NOT met",
                statistics.median(q),
                q[len(q) // 4],
                q[(3 * len(q)) // 4],
                q[0],
                q[-1],
                cpu_meds[label] / cpu_base,
            )
        )


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
    print("  %-50s median %6.1f ms   min %6.1f   max %6.1f   (n=%d)" % (label, med, min(times), max(times), len(times)))
    return med


STAGES = r"""
import time, os
t = [time.perf_counter()]
import slurmgpu.cli
t.append(time.perf_counter())
from slurmgpu.site import resolve_site
site, _ = resolve_site("dgx-h100", os.environ)
t.append(time.perf_counter())
from slurmgpu import job as J
from slurmgpu.job import JobSpec
spec = JobSpec(model="llama3-70b", launcher="megatron", nodes=2, task="lora", parallel={"tp": 8, "pp": 2})
t.append(time.perf_counter())
import slurmgpu.plan
t.append(time.perf_counter())
sizing = J.plan_layout(site, spec)
t.append(time.perf_counter())
import jinja2
t.append(time.perf_counter())
req, _ = J.build_request(site, spec, sizing, "x")
text = J.render_request(req, J.search_path(None, None, site))
t.append(time.perf_counter())
import slurmgpu.policy, slurmgpu.slurm.sbatch, lupa
t.append(time.perf_counter())
J.check_policy(site, spec, text, sizing)
t.append(time.perf_counter())
print(" ".join("%.2f" % (1000 * (b - a)) for a, b in zip(t, t[1:])))
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=21)
    ap.add_argument("--pairs", type=int, default=31, help="rounds of the interleaved torchx comparison")
    ap.add_argument("--compare-only", action="store_true", help="only the torchx comparison")
    args = ap.parse_args()
    cache = tempfile.mkdtemp(prefix="slurmgpu-bench-")
    # An installed slurmgpu has compiled .pyc files; PYTHONDONTWRITEBYTECODE (set in some sandboxes
    # and CI images) makes every run compile every module from source, so measure both.
    env = dict(
        os.environ, SLURMGPU_CACHE_DIR=os.path.join(cache, "templates"), PYTHONPYCACHEPREFIX=os.path.join(cache, "pyc")
    )
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    plain_env = env
    env = with_tree(env)
    # As this environment runs it: no cache prefix, and nothing written (with PYTHONDONTWRITEBYTECODE
    # set and no __pycache__ in the source tree, slurmgpu's modules are compiled on every run).
    nopyc_env = with_tree(dict(os.environ, SLURMGPU_CACHE_DIR=env["SLURMGPU_CACHE_DIR"], PYTHONDONTWRITEBYTECODE="1"))
    nopyc_env.pop("PYTHONPYCACHEPREFIX", None)
    cold_env = dict(env, SLURMGPU_CACHE_DIR="")
    argv = cli() + GEN
    print("slurmgpu gen benchmark: %s" % " ".join(["slurmgpu"] + GEN))
    print(
        "python %s on %s, %d CPUs, load average %s"
        % (
            sys.version.split()[0],
            sys.platform,
            os.cpu_count() or 0,
            " ".join("%.1f" % x for x in os.getloadavg()) if hasattr(os, "getloadavg") else "?",
        )
    )
    global PY
    py, why = gen_venv()
    if py:
        PY = py
        print("slurmgpu from %s, run by %s (a venv with only its dependencies)\n" % (ROOT, PY))
    else:
        print(
            "slurmgpu from %s, run by %s: NOTE the clean venv cannot be built (%s), so this interpreter's\n"
            "site-packages (.pth files run at every start-up) count against gen but not against torchx\n"
            % (ROOT, PY, why)
        )
    compare(args.pairs, plain_env)
    if args.compare_only:
        shutil.rmtree(cache, ignore_errors=True)
        return
    print("\nWhole process (wall time):")
    base = describe("python -c pass (interpreter start-up)", wall([PY, "-c", "pass"], args.runs, env))
    helps = describe("slurmgpu --help", wall(cli() + ["--help"], args.runs, env))
    wall(argv, 1, env)  # compile the modules and the templates once
    warm = describe("slurmgpu gen (installed: .pyc and template cache)", wall(argv, args.runs, env))
    cold = describe("slurmgpu gen (no cache: templates, YAML)", wall(argv, max(5, args.runs // 3), cold_env))
    nopyc = describe("slurmgpu gen (PYTHONDONTWRITEBYTECODE=1)", wall(argv, max(5, args.runs // 3), nopyc_env))
    print(
        "\n  target %.0f ms: %.2fx the target (%s); without the caches %.2fx; without .pyc %.2fx"
        % (TARGET_MS, warm / TARGET_MS, "met" if warm < TARGET_MS else "NOT met", cold / TARGET_MS, nopyc / TARGET_MS)
    )

    print("\nImport time (fastest of %d, interpreter start-up subtracted):" % max(5, args.runs // 3))
    n = max(5, args.runs // 3)
    fastest = min(wall([PY, "-c", "pass"], n, env))
    for label, mods in (
        ("slurmgpu.cli (what --help imports)", "slurmgpu.cli"),
        ("+ generator: spec, render, fabric, launchers", "slurmgpu.cli, slurmgpu.spec, slurmgpu.render"),
        ("+ site loader and PyYAML", "slurmgpu.cli, slurmgpu.render, slurmgpu.site, yaml"),
        ("+ planner", "slurmgpu.cli, slurmgpu.render, slurmgpu.site, yaml, slurmgpu.plan"),
        ("+ jinja2", "slurmgpu.cli, slurmgpu.render, slurmgpu.site, yaml, slurmgpu.plan, jinja2"),
        (
            "+ policy (lupa, jobdesc)",
            "slurmgpu.cli, slurmgpu.render, slurmgpu.site, yaml, "
            "slurmgpu.plan, jinja2, slurmgpu.policy, slurmgpu.jobdesc, lupa",
        ),
    ):
        t = min(wall([PY, "-c", "import " + mods], n, env))
        print("  %-50s %6.1f ms" % (label, t - fastest))

    print("\nStages of one in-process run (median of %d, .pyc, template and YAML caches warm):" % n)
    rows = []
    for _ in range(n):
        r = subprocess.run([PY, "-c", STAGES], capture_output=True, text=True, env=env, check=True)
        rows.append([float(x) for x in r.stdout.split()])
    names = (
        "import slurmgpu.cli (click)",
        "load the site (YAML cache warm)",
        "import spec + render (generator)",
        "import the planner",
        "make_plan",
        "import jinja2",
        "build request + render (generator)",
        "import policy + lupa",
        "policy check (Lua)",
    )
    for i, name in enumerate(names):
        print("  %-50s %6.1f ms" % (name, statistics.median(r[i] for r in rows)))
    shutil.rmtree(cache, ignore_errors=True)
    print("\n(help %.0f ms = start-up %.0f + CLI import; gen adds the rest)" % (helps, base))


if __name__ == "__main__":
    main()
