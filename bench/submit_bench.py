#!/usr/bin/env python3
"""Submission throughput of a real slurmctld with the slurmgpu job_submit.lua vs an accept-all one.

Target: throughput with the slurmgpu filter >= 0.95 x throughput with the accept-all filter,
for a typical ~10 KB generated Megatron script (what the controller reads and scans).

Both filters are measured in one run, on one controller, in interleaved batches (A B, B A,
A B, ...), so drift of the machine hits both alike. Each switch installs the other
job_submit.lua (newer mtime, so slurmctld reloads it) and proves it is active with one
untimed probe: a TP=16 job the slurmgpu filter rejects and accept-all lets through.
Submissions are `sbatch --test-only` (job_submit runs, no job is created) or, with
--mode hold, `sbatch -H` (a real pending job; cancelled after each batch, untimed).
Also printed: the time slurmctld itself spent per submission RPC (sdiag, reset before each
batch), which isolates the filter from client start-up, and the filter's own cost per job
run in-process under lupa (same Lua).

Needs root and the Debian slurm packages (contrib/testcluster/install-deps.sh). Starts its
own test cluster, or uses a running one (with JobSubmitPlugins=lua) whose slurm.conf is
given by --slurm-conf or $SLURMGPU_BENCH_SLURM_CONF; its job_submit.lua is restored after.

    python bench/submit_bench.py [--jobs 400] [--batch 25] [--mode test-only|hold] [--concurrency 1]
                                 [--compare OTHER_job_submit.lua ...] [--compare-rev GIT_REV ...]

--compare adds another rendered job_submit.lua (e.g. `slurmgpu admin render-filter` of an
older checkout; repeat it for several, each named by its file name) to the same interleaved
rounds, so a change is measured against its base under the same machine load (this matters on
a shared machine: sdiag times are wall times). Filters that do part of the work (only reading
the job, only the scan) measured this way show where the controller's time goes; --parts adds
such filters, made from the rendered one.
--compare-rev does the same for the filter of a git revision of this repository (its tree is
exported to a temporary directory and its own `slurmgpu admin render-filter` renders it), and
the cost the filter adds is also printed as a ratio to that revision's. A ratio carries over
between machines where absolute microseconds do not: 3c250e7, the filter before the enforcement
work, is the one the 100 us target was set against (about 240 us on the machine it was measured
on).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Dict, List, Optional, Tuple, Union

ROOT = Path(__file__).resolve().parents[1]
SITE_FILE = ROOT / "tests" / "data" / "sites" / "testcluster.yaml"
TARGET = 0.95
CTLD_TARGET_US = 100  # what the filter may add per submission inside slurmctld (sdiag)

# A realistic Megatron-LM command line (data, model shape, optimizer, logging): with the
# generated header, layout notes and requeue handling the script is about 10 KB.
MEGATRON_ARGS = """pretrain_gpt.py
--num-layers 80 --hidden-size 8192 --ffn-hidden-size 28672 --num-attention-heads 64
--group-query-attention --num-query-groups 8 --max-position-embeddings 8192
--position-embedding-type rope --rotary-base 500000 --normalization RMSNorm --swiglu
--untie-embeddings-and-output-weights --disable-bias-linear --attention-dropout 0.0 --hidden-dropout 0.0
--init-method-std 0.008 --lr 1.5e-4 --min-lr 1.5e-5 --lr-decay-style cosine
--lr-warmup-iters 2000 --lr-decay-iters 480000 --train-iters 500000 --weight-decay 0.1
--adam-beta1 0.9 --adam-beta2 0.95 --adam-eps 1e-8 --clip-grad 1.0 --bf16
--use-flash-attn --overlap-grad-reduce --overlap-param-gather --distributed-timeout-minutes 30
--tokenizer-type HuggingFaceTokenizer --tokenizer-model /datasets/tokenizers/llama3
--data-path 0.30 /datasets/redpajama/arxiv_text_document 0.25 /datasets/redpajama/book_text_document
0.20 /datasets/redpajama/c4_text_document 0.15 /datasets/redpajama/github_text_document
0.04 /datasets/redpajama/wikipedia_text_document 0.02 /datasets/pile/pubmed_central_text_document
0.01 /datasets/pile/freelaw_text_document 0.01 /datasets/pile/uspto_text_document
0.01 /datasets/pile/hackernews_text_document 0.01 /datasets/pile/stackexchange_text_document
0.01 /datasets/pile/dm_mathematics_text_document 0.01 /datasets/pile/europarl_text_document
0.01 /datasets/pile/philpapers_text_document 0.01 /datasets/pile/nih_exporter_text_document
0.01 /datasets/pile/opensubtitles_text_document 0.01 /datasets/pile/gutenberg_pg19_text_document
0.01 /datasets/pile/ubuntu_irc_text_document 0.01 /datasets/pile/enron_emails_text_document
0.01 /datasets/pile/youtube_subtitles_text_document 0.01 /datasets/pile/bookcorpus2_text_document
0.01 /datasets/pile/openwebtext2_text_document 0.01 /datasets/pile/books3_text_document
0.01 /datasets/pile/pile_cc_text_document 0.01 /datasets/pile/arxiv_text_document
--split 989,10,1 --num-workers 8
--data-cache-path /scratch/megatron-cache --save /checkpoints/llama3-70b --load /checkpoints/llama3-70b
--save-interval 1000 --eval-interval 1000 --eval-iters 10 --log-interval 10 --log-throughput
--log-timers-to-tensorboard --log-validation-ppl-to-tensorboard --log-memory-to-tensorboard
--tensorboard-dir /checkpoints/llama3-70b/tensorboard --wandb-project llama3-70b --wandb-exp-name run-01
--timing-log-level 1 --exit-signal-handler --ckpt-format torch_dist --async-save
--manual-gc --manual-gc-interval 50""".split()

PROBE = (
    "#!/bin/bash\n#SBATCH -N2 --gpus-per-node=8 -p gpu\nsrun python pretrain_gpt.py --tensor-model-parallel-size 16\n"
)


def cpu_seconds(pid: Optional[int]) -> float:
    """User + system CPU time of a process, its exited threads included (0 without a pid)."""
    if not pid:
        return 0.0
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def load_testcluster():
    spec = importlib.util.spec_from_file_location(
        "slurmgpu_testcluster", ROOT / "contrib" / "testcluster" / "cluster.py"
    )
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def render_at_rev(rev: str) -> str:
    """The job_submit.lua that revision `rev` of this repository renders for the bench site."""
    with tempfile.TemporaryDirectory(prefix="slurmgpu-rev-") as tmp:
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev], capture_output=True)
        if archive.returncode != 0:
            sys.exit(
                "--compare-rev %s: git archive failed: %s" % (rev, archive.stderr.decode(errors="replace").strip())
            )
        subprocess.run(["tar", "-x", "-C", tmp], input=archive.stdout, check=True)
        out = Path(tmp) / "job_submit.lua"
        argv = [sys.executable, "-m", "slurmgpu.cli", "admin", "render-filter", "--site", str(SITE_FILE)]
        argv += ["--kind", "job_submit", "--no-cluster-check", "-o", str(out)]
        env = dict(os.environ, PYTHONPATH=tmp)
        r = subprocess.run(argv, capture_output=True, text=True, cwd=tmp, env=env)
        if r.returncode != 0 or not out.exists():
            sys.exit("--compare-rev %s: render-filter failed (exit %d):\n%s" % (rev, r.returncode, r.stderr))
        return out.read_text(encoding="utf-8")


# Filters that stop part-way (--parts): the rendered filter with its submit function replaced.
# Each rejects a script under 200 bytes (the probe), so a switch to it can be proven, and
# otherwise accepts; what it adds over accept-all is the cost of that much of the work.
PART_BODIES = {
    "read-script": "local s = desc.script\n  if #s < 200 then return 2072 end",
    "read-fields": "local job = job_from_desc(desc, part_list, uid)\n  if #job.script < 200 then return 2072 end",
    "fields+log-line": "local job = job_from_desc(desc, part_list, uid)\n  if #job.script < 200 then return 2072 end\n"
    '  log(string.format("slurmgpu-filter: decision=accept code=0 origin=job_submit uid=%d partition=gpu tp=8 pp=2 "'
    ' .. "cp=1 ep=1 source=flags launcher=megatron mode=enforce rules=- verdict=ok", job.uid or 0))',
    "decide": "local job = job_from_desc(desc, part_list, uid)\n  if #job.script < 200 then return 2072 end\n"
    "  P.decide(job, TOPO)",
}
SUBMIT_START = "local function submit(desc, part_list, uid)"
SUBMIT_END = "function slurm_job_submit(job_desc, part_list, submit_uid)"


def part_filters(full: str) -> Dict[str, str]:
    """The --parts filters, made from the rendered job_submit.lua `full`."""
    start, end = full.find(SUBMIT_START), full.find(SUBMIT_END)
    if start < 0 or end < start:
        sys.exit("--parts: the rendered filter has no '%s' ... '%s' to replace" % (SUBMIT_START, SUBMIT_END))
    return {
        name: full[:start] + SUBMIT_START + "\n  " + body + "\n  return SUCCESS\nend\n\n" + full[end:]
        for name, body in PART_BODIES.items()
    }


def generate_script() -> str:
    argv = [
        sys.executable,
        "-m",
        "slurmgpu.cli",
        "gen",
        "--site",
        str(SITE_FILE),
        "--model",
        "llama3-70b",
        "--task",
        "lora",
        "--launcher",
        "megatron",
        "--nodes",
        "2",
        "--tp",
        "8",
        "--pp",
        "2",
        "--requeue",
        "--no-preflight",
        "--",
    ] + MEGATRON_ARGS
    r = subprocess.run(argv, capture_output=True, text=True, cwd=str(ROOT))
    if r.returncode != 0:
        sys.exit("slurmgpu gen failed:\n%s" % r.stderr)
    return r.stdout


class Controller:
    """A slurmctld to submit to: its client environment and its job_submit.lua."""

    def __init__(self, conf: Path) -> None:
        self.conf = conf
        self.job_submit = conf.parent / "job_submit.lua"
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "SBATCH_", "SLURMGPU_"))}
        self.env["SLURM_CONF"] = str(conf)
        self.workdir = Path(tempfile.mkdtemp(prefix="slurmgpu-submit-bench-"))
        self._mtime = 0

    def install(self, text: str) -> None:
        """Atomic replace with an mtime newer than any before: 22.05 reloads on a newer mtime."""
        try:
            prev = int(self.job_submit.stat().st_mtime)
        except FileNotFoundError:
            prev = 0
        self._mtime = max(int(time.time()), prev + 1, self._mtime + 1)
        tmp = self.job_submit.with_name(".%s.bench" % self.job_submit.name)
        tmp.write_text(text)
        os.chmod(tmp, 0o644)
        os.utime(tmp, (self._mtime, self._mtime))
        os.replace(tmp, self.job_submit)

    def sbatch(self, args: List[str], stdin: Optional[str] = None) -> Tuple[int, str, str]:
        p = subprocess.run(
            ["sbatch", *args],
            input=stdin,
            capture_output=True,
            text=True,
            env=self.env,
            cwd=str(self.workdir),
            timeout=60,
        )
        return p.returncode, p.stdout, p.stderr

    def probe_rejects(self) -> bool:
        rc, _, _ = self.sbatch(["--test-only"], PROBE)
        return rc != 0

    def reset_stats(self) -> None:
        subprocess.run(["sdiag", "-r"], env=self.env, capture_output=True, timeout=60, check=True)

    def rpc_time(self, rpc: str) -> Tuple[int, int]:
        """(count, total microseconds) slurmctld spent on this RPC type since the last reset."""
        out = subprocess.run(["sdiag"], env=self.env, capture_output=True, text=True, timeout=60).stdout
        m = re.search(r"^\s*%s\s+\(\s*\d+\) count:(\d+)\s+ave_time:\d+\s+total_time:(\d+)" % rpc, out, re.M)
        return (int(m.group(1)), int(m.group(2))) if m else (0, 0)

    def cancel(self, ids: List[str]) -> None:
        for i in range(0, len(ids), 200):
            subprocess.run(["scancel", *ids[i : i + 200]], env=self.env, capture_output=True, timeout=60)


def run_batch(
    ctl: Controller, script: Union[Path, List[Path]], n: int, mode: str, concurrency: int
) -> Tuple[float, List[str]]:
    """Wall seconds for n submissions (of `script`, or of the i-th of a list); ids of the jobs
    created (hold mode)."""
    scripts = script if isinstance(script, list) else [script]

    def one(i: int) -> str:
        path = str(scripts[i % len(scripts)])
        args = ["--test-only", path] if mode == "test-only" else ["--parsable", "-H", path]
        rc, out, err = ctl.sbatch(args)
        if rc != 0:
            raise RuntimeError("sbatch %s failed (rc %d): %s" % (shlex.join(args), rc, err.strip()))
        return out.strip().split(";")[0]

    t0 = time.perf_counter()
    if concurrency == 1:
        ids = [one(i) for i in range(n)]
    else:
        with ThreadPoolExecutor(concurrency) as pool:
            ids = list(pool.map(one, range(n)))
    return time.perf_counter() - t0, [i for i in ids if i] if mode == "hold" else []


def filter_cost_us(script_text: str, repeat: int = 200) -> Tuple[float, float]:
    """Median microseconds of one slurm_job_submit call of the rendered filter (lupa,
    in-process): for a different script each call, and for the same script again."""
    from slurmgpu.policy import PolicyRunner
    from slurmgpu.site import load_site
    from slurmgpu.slurm import job_desc

    runner = PolicyRunner(load_site(str(SITE_FILE)), backend="lupa")

    def desc(k: Optional[int]) -> Dict[str, object]:
        text = script_text if k is None else script_text + "# submission %d\n" % k
        return job_desc(text, [], env={"PATH": "/usr/bin"}, script_path="job.sh", user="root", uid=0)

    code, _ = runner.submit_desc(desc(None), 0)
    if code != 0:
        sys.exit("the benchmark script is rejected by the filter (code %d)" % code)
    out = []
    for descs in ([desc(k) for k in range(repeat)], [desc(None)] * repeat):
        times = []
        for d in descs:
            t = time.perf_counter()
            runner.submit_desc(d, 0)
            times.append((time.perf_counter() - t) * 1e6)
        out.append(statistics.median(times))
    return out[0], out[1]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=400, help="submissions per filter (default 400)")
    ap.add_argument("--batch", type=int, default=25, help="submissions per timed batch (default 25)")
    ap.add_argument("--mode", choices=("test-only", "hold"), default="test-only")
    ap.add_argument("--concurrency", type=int, default=1, help="sbatch clients at once (default 1)")
    ap.add_argument(
        "--slurm-conf",
        default=os.environ.get("SLURMGPU_BENCH_SLURM_CONF"),
        help="use this running test cluster instead of starting one",
    )
    ap.add_argument(
        "--compare",
        metavar="FILE",
        action="append",
        default=[],
        help="also measure this rendered job_submit.lua, interleaved (repeatable)",
    )
    ap.add_argument(
        "--compare-rev",
        metavar="REV",
        action="append",
        default=[],
        help="also measure the filter of this git revision (e.g. 3c250e7, the base of the 100 us target), "
        "interleaved, and print the added cost as a ratio to it (repeatable)",
    )
    ap.add_argument(
        "--parts",
        action="store_true",
        help="also measure filters that stop part-way (read the script; read every field; the fields and one "
        "log line; the verdict without log line or AdminComment), to show where the time goes",
    )
    ap.add_argument(
        "--renice",
        type=int,
        default=0,
        metavar="N",
        help="run the controller this bench starts at nice -N (every thread), so that on a shared machine "
        "other processes do not inflate sdiag's wall times (root)",
    )
    ap.add_argument(
        "--pin",
        action="store_true",
        help="run the controller this bench starts on the last CPU and the bench and its sbatch clients on the "
        "others: on a production controller the clients run elsewhere and do not evict its caches",
    )
    ap.add_argument(
        "--same-script",
        action="store_true",
        help="submit one script again and again (the filter reuses its scan); default: every submission "
        "is a different script (a unique comment line), as on a real cluster",
    )
    args = ap.parse_args()
    if args.pin and args.slurm_conf:
        ap.error("--pin moves the controller this bench starts; it cannot with --slurm-conf")
    if args.pin and len(os.sched_getaffinity(0)) < 2:
        ap.error("--pin needs at least two CPUs")
    sys.path.insert(0, str(ROOT))
    from slurmgpu.policy import render_filter
    from slurmgpu.site import load_site

    tc = load_testcluster()
    filters: Dict[str, str] = {
        "accept-all": tc.ACCEPT_ALL_JOB_SUBMIT_LUA,
        "slurmgpu": render_filter(load_site(str(SITE_FILE)), "job_submit"),
    }
    compares: List[str] = []

    def add_compare(name: str, text: str) -> None:
        while name in filters:  # the same file or revision given twice
            name += "'"
        filters[name] = text
        compares.append(name)

    for path in args.compare:
        add_compare("compare:" + Path(path).name, Path(path).read_text(encoding="utf-8"))
    for rev in args.compare_rev:
        add_compare("rev:" + rev, render_at_rev(rev))
    if args.parts:
        for part, text in part_filters(filters["slurmgpu"]).items():
            add_compare("part:" + part, text)
    rejecting = {"slurmgpu", *compares}
    script_text = generate_script()
    cluster = None
    restore: Optional[str] = None
    if args.slurm_conf:
        ctl = Controller(Path(args.slurm_conf).resolve())
        if ctl.job_submit.exists():
            restore = ctl.job_submit.read_text()
    else:
        reasons = tc.missing_prerequisites()
        if reasons:
            sys.exit("cannot start a test cluster: " + "; ".join(reasons))
        cluster = tc.TestCluster(job_submit_lua=tc.ACCEPT_ALL_JOB_SUBMIT_LUA)
        cluster.start()
        ctl = Controller(cluster.conf_path)
        cpus = sorted(os.sched_getaffinity(0))
        for tid in os.listdir("/proc/%d/task" % cluster.pids["slurmctld"]) if args.renice or args.pin else []:
            if args.renice:  # new RPC threads inherit their creator's priority and CPUs
                os.setpriority(os.PRIO_PROCESS, int(tid), -args.renice)
            if args.pin:
                os.sched_setaffinity(int(tid), {cpus[-1]})
        if args.pin:
            os.sched_setaffinity(0, set(cpus[:-1]))  # this bench and its sbatch clients
    try:
        script = ctl.workdir / "job.sh"
        script.write_text(script_text)
        print(
            "submit benchmark: %d x sbatch %s of a %.1f KB generated script (%d lines) per filter,"
            % (
                args.jobs,
                "--test-only" if args.mode == "test-only" else "-H",
                len(script_text.encode()) / 1024,
                script_text.count("\n"),
            )
        )
        print(
            "  batches of %d, interleaved, %d client(s) at once; %s; controller %s"
            % (
                args.batch,
                args.concurrency,
                "one script again and again" if args.same_script else "a different script each time",
                (
                    "started here"
                    + (" at nice -%d" % args.renice if args.renice else "")
                    + (", alone on the last CPU (clients on the others)" if args.pin else "")
                )
                if cluster
                else args.slurm_conf,
            )
        )
        print("python %s, %d CPUs" % (sys.version.split()[0], os.cpu_count() or 0))

        rpc = "REQUEST_JOB_WILL_RUN" if args.mode == "test-only" else "REQUEST_SUBMIT_BATCH_JOB"
        ctld_pid = cluster.pids["slurmctld"] if cluster else None
        cpu_used = {name: 0.0 for name in filters}  # slurmctld's CPU seconds (all threads) per filter
        ctld = {name: [0, 0] for name in filters}  # RPC count, microseconds inside slurmctld
        totals = {name: [0.0, 0] for name in filters}
        per_round: Dict[str, List[float]] = {name: [] for name in filters}
        us_round: Dict[str, List[float]] = {name: [] for name in filters}  # sdiag us per RPC, per batch
        names = list(filters)
        rounds = max(1, args.jobs // args.batch)
        serial = 0
        # one untimed warm-up batch each (page cache, munge, first reload)
        for name in names:
            ctl.install(filters[name])
            if ctl.probe_rejects() != (name in rejecting):
                sys.exit("the %s job_submit.lua did not take effect" % name)
            _, ids = run_batch(ctl, script, min(5, args.batch), args.mode, args.concurrency)
            ctl.cancel(ids)
        for r in range(rounds):
            for name in names if r % 2 == 0 else names[::-1]:
                ctl.install(filters[name])
                if ctl.probe_rejects() != (name in rejecting):
                    sys.exit("the %s job_submit.lua did not take effect (round %d)" % (name, r))
                batch: Union[Path, List[Path]] = script
                if not args.same_script:  # untimed: this batch's own scripts
                    batch = []
                    for k in range(args.batch):
                        serial += 1
                        path = ctl.workdir / ("job-%d.sh" % k)
                        path.write_text(script_text + "# submission %d\n" % serial)
                        batch.append(path)
                ctl.reset_stats()
                cpu0 = cpu_seconds(ctld_pid)
                secs, ids = run_batch(ctl, batch, args.batch, args.mode, args.concurrency)
                cpu_used[name] += cpu_seconds(ctld_pid) - cpu0
                count, usec = ctl.rpc_time(rpc)
                ctl.cancel(ids)
                ctld[name][0] += count
                ctld[name][1] += usec
                if count:
                    us_round[name].append(usec / count)
                totals[name][0] += secs
                totals[name][1] += args.batch
                per_round[name].append(args.batch / secs)

        rate = {name: n / secs for name, (secs, n) in totals.items()}
        print("\nThroughput (submissions per second):")
        for name in names:
            rs = per_round[name]
            print(
                "  %-11s %7.1f /s   (%d jobs; per batch median %.1f, min %.1f, max %.1f; %.2f ms per job)"
                % (name, rate[name], totals[name][1], statistics.median(rs), min(rs), max(rs), 1000 / rate[name])
            )
        ratio = rate["slurmgpu"] / rate["accept-all"]
        paired = statistics.median(s / a for s, a in zip(per_round["slurmgpu"], per_round["accept-all"]))
        print(
            "\n  ratio slurmgpu / accept-all: %.3f overall, %.3f median of paired batches  (target >= %.2f: %s)"
            % (ratio, paired, TARGET, "met" if ratio >= TARGET else "NOT met")
        )
        per = {name: (us / n if n else float("nan")) for name, (n, us) in ctld.items()}
        print(
            "\nInside slurmctld (sdiag, %s): accept-all %.0f us, slurmgpu %.0f us per submission; the filter "
            "adds %.0f us;\n  the controller alone could take %.0f vs %.0f submissions/s (ratio %.3f)"
            % (
                rpc,
                per["accept-all"],
                per["slurmgpu"],
                per["slurmgpu"] - per["accept-all"],
                1e6 / per["accept-all"],
                1e6 / per["slurmgpu"],
                per["accept-all"] / per["slurmgpu"],
            )
        )
        med = {name: statistics.median(v) if v else float("nan") for name, v in us_round.items()}
        print(
            "  median of batches: accept-all %.0f us, slurmgpu %.0f us (adds %.0f us; target <= %d us: %s)"
            % (
                med["accept-all"],
                med["slurmgpu"],
                med["slurmgpu"] - med["accept-all"],
                CTLD_TARGET_US,
                "met" if med["slurmgpu"] - med["accept-all"] <= CTLD_TARGET_US else "NOT met",
            )
        )

        if ctld_pid:
            cpu = {name: cpu_used[name] / totals[name][1] * 1e6 for name in names}
            print(
                "  slurmctld CPU time (all threads, /proc): accept-all %.0f us, slurmgpu %.0f us per submission "
                "(adds %.0f us)" % (cpu["accept-all"], cpu["slurmgpu"], cpu["slurmgpu"] - cpu["accept-all"])
            )
            for name in compares:
                print("    %s: %.0f us (adds %.0f us)" % (name, cpu[name], cpu[name] - cpu["accept-all"]))

        def paired(name: str) -> float:
            """Median over rounds of this filter's batch minus accept-all's batch of the same round
            (neighbours in time: the machine's drift cancels)."""
            pairs = [a - b for a, b in zip(us_round[name], us_round["accept-all"])]
            return statistics.median(pairs) if pairs else float("nan")

        print(
            "  paired per round (median of filter batch - accept-all batch): slurmgpu adds %.0f us" % paired("slurmgpu")
        )
        for name in compares:
            print(
                "  --%s: %.0f us per submission (adds %.0f us; median of batches %.0f, adds %.0f; paired %.0f)"
                % (
                    name,
                    per[name],
                    per[name] - per["accept-all"],
                    med[name],
                    med[name] - med["accept-all"],
                    paired(name),
                )
            )
        for name in compares:
            base = paired(name)
            if base > 0:
                print("  added cost of slurmgpu / added cost of %s (paired): %.2f" % (name, paired("slurmgpu") / base))
        distinct, same = filter_cost_us(script_text)
        print(
            "  the filter alone, in-process under lupa: %.0f us per job (%.0f us for a script seen before)"
            % (distinct, same)
        )
    finally:
        if restore is not None:
            ctl.install(restore)
        if cluster is not None:
            cluster.stop()
        subprocess.run(["rm", "-rf", str(ctl.workdir)])
    return 0


if __name__ == "__main__":
    sys.exit(main())
