"""Router and disaggregated serving scripts as real jobs on the local Slurm test cluster (issue 32).

The engines need GPUs, so the workers and routers the generated script starts are stand-ins
(tests/e2e/serve_standin/standin.py): found first on the job's PATH and PYTHONPATH, which sbatch
passes, so the script runs unchanged. They take the script's real command lines, answer /health
after a delay as a loading engine does, and forward requests the way each engine's router does.
What is proved on two nodes of partition gpu4 (2 x 4 fake A100s):

* start order: every worker answers /health before its router starts, and the router checks
  them all when it starts (the stand-in router refuses to run otherwise); the script announces
  the URL only after the router answers;
* hosts, ports and roles agree: each worker listens where the router's command line says, sees
  only its own GPUs (CUDA_VISIBLE_DEVICES), and prefill/decode workers get the site's KV NIC;
* a request to the announced URL reaches a worker (prefill and decode, disaggregated);
* teardown: a worker that fails while loading fails the job with its log tail, before any
  router starts, and no step is left running; scancel of a serving job ends every step.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Dict, List, Tuple

import pytest

from tests.test_e2e_jobs import ROOT, SITE_FILE, clean_env, policy, run  # noqa: F401 (policy is a fixture)

pytestmark = pytest.mark.cluster

STANDIN = ROOT / "tests" / "e2e" / "serve_standin"
MODEL = ("--model", "llama3-8b", "--weights", "org/llama-3.1-8b", "--partition", "gpu4", "--nodes", "2")
COMMON = ("--time", "00:10:00", "--no-preflight", "--input-len", "512", "--output-len", "512")


def gen(cluster, *args: str) -> str:
    """The real CLI, this checkout's code (as the other e2e tests' jobs run it)."""
    p = subprocess.run(
        [sys.executable, "-m", "slurmgpu.cli", "gen", "--site", SITE_FILE, *args],
        capture_output=True, text=True, timeout=120, env=clean_env(cluster, {"PYTHONPATH": str(ROOT)}),
        cwd=str(cluster.jobs_dir),
    )  # fmt: skip
    assert p.returncode == 0, p.stderr
    return p.stdout


def _free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("0.0.0.0", port))
        except OSError:
            return False
    return True


def _block(script: str, job_id: int) -> Tuple[int, int]:
    m = re.search(r"^SLURMGPU_PORT0=\$\(\((\d+) \+ SLURM_JOB_ID % (\d+) \* (\d+)\)\)$", script, re.M)
    assert m, "no per-job port block in the script"
    base, blocks, span = (int(x) for x in m.groups())
    return base + job_id % blocks * span, span


def _env(cluster, tmp_path: Path, **extra: str) -> Dict[str, str]:
    """The job's environment: the stand-ins first on PATH and PYTHONPATH (a chroot release's jobs
    run its own python3)."""
    rec = tmp_path / "record"
    rec.mkdir(exist_ok=True)
    env = {
        "PATH": "%s:%s" % (STANDIN / "bin", clean_env(cluster)["PATH"]),
        "PYTHONPATH": str(STANDIN),
        "STANDIN_RECORD": str(rec),
        "STANDIN_DELAY": "3",
    }
    if not cluster.in_chroot:
        env["STANDIN_PYTHON"] = sys.executable
    env.update(extra)
    return env


def submit(cluster, script: str, tmp_path: Path, env: Dict[str, str]) -> Tuple[int, int]:
    """sbatch the script unchanged (held until its port block is free); (job id, first port)."""
    path = tmp_path / "serve.sh"
    path.write_text(script)
    for _ in range(8):
        p = subprocess.run(
            ["sbatch", "--parsable", "-H", str(path)],
            capture_output=True, text=True, timeout=120, env=clean_env(cluster, env), cwd=str(tmp_path),
        )  # fmt: skip
        assert p.returncode == 0, p.stderr
        job_id = int(p.stdout.strip().split(";")[0])
        port0, _ = _block(script, job_id)
        if all(_free(port0 + k) for k in (0, 1, 2, 3, 4, 5, 6, 7, 8, 200, 201, 400, 401, 402, 403, 404)):
            break
        run(cluster, ["scancel", str(job_id)])
    else:
        pytest.fail("no free port block after 8 submissions")
    rc, _, err = run(cluster, ["scontrol", "release", str(job_id)])
    assert rc == 0, err
    return job_id, port0


def wait_url(tmp_path: Path, job_id: int, cluster, timeout: float = 90.0) -> str:
    url_file = tmp_path / ("slurmgpu-serve-%d" % job_id) / "url"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if url_file.exists() and url_file.read_text().strip():
            return url_file.read_text().strip()
        info = cluster.job_info(job_id) or {}
        if info.get("JobState") in ("FAILED", "COMPLETED", "CANCELLED", "TIMEOUT"):
            break
        time.sleep(0.5)
    result = cluster.wait_job(job_id, timeout=30)
    pytest.fail("no URL announced; job %s ended %s:\n%s" % (job_id, result.state, result.stdout))


def planned(script: str) -> List[Tuple[str, int, int]]:
    """(name, TP, GPUs on its node) of each worker, from the script's worker lines."""
    from slurmgpu.job.serving import script_groups

    rows = re.findall(r"^# slurmgpu-serve: worker=(\S+) node=\d+ nodes=1 gpus=(\d+)-(\d+)$", script, re.M)
    tp = {g.role: g.tp for g in script_groups(script) if g.pp == 1}
    return [(name, tp[name.rsplit("-", 1)[0]], int(hi) - int(lo) + 1) for name, lo, hi in rows]


def records(tmp_path: Path) -> List[Dict]:
    rows: List[Dict] = []
    for f in sorted((tmp_path / "record").glob("*.jsonl")):
        rows.extend(json.loads(line) for line in f.read_text().splitlines() if line.strip())
    return rows


def by_pid(rows: List[Dict]) -> Dict[int, Dict[str, Dict]]:
    out: Dict[int, Dict[str, Dict]] = {}
    for r in rows:
        out.setdefault(r["pid"], {})[r["event"]] = r
    return out


def ask(url: str, path: str, body: Dict) -> Dict:
    req = urllib.request.Request(url + path, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=20) as r:
        return json.loads(r.read())


def all_gone(pids: List[int], timeout: float = 30.0) -> List[int]:
    deadline = time.monotonic() + timeout
    alive = list(pids)
    while alive and time.monotonic() < deadline:
        alive = [p for p in alive if os.path.exists("/proc/%d" % p)]
        time.sleep(0.25)
    return alive


def finish(cluster, job_id: int, pids: List[int]) -> str:
    """scancel the serving job; every stand-in must be gone. Returns the job's output."""
    run(cluster, ["scancel", str(job_id)])
    result = cluster.wait_job(job_id, timeout=60)
    assert all_gone(pids) == [], "stand-in processes left after scancel"
    return result.stdout or ""


def no_filter_noise(out: str) -> None:
    """The site's cli_filter judges every srun step of the job: a serving script's steps must give it
    nothing to warn about (they did when the batch shell exported one layout, SLURMGPU_TP/DP, for
    workers of other sizes)."""
    assert not [line for line in out.splitlines() if "lua: slurmgpu" in line], out


def test_sglang_router_job_waits_for_every_replica_then_routes(slurm_cluster, policy, tmp_path):  # noqa: F811
    script = gen(slurm_cluster, "--launcher", "sglang", "--serve", "router", *MODEL, *COMMON)
    assert "python -m sglang_router.launch_router" in script.replace(" \\\n    ", " ")
    job_id, port0 = submit(slurm_cluster, script, tmp_path, _env(slurm_cluster, tmp_path))
    url = wait_url(tmp_path, job_id, slurm_cluster)
    assert url.endswith(":%d" % port0)
    plan = planned(script)
    assert plan and all(name.startswith("replica-") for name, _, _ in plan), plan
    procs = by_pid(records(tmp_path))
    workers = [p for p in procs.values() if p["start"]["kind"] == "worker"]
    routers = [p for p in procs.values() if p["start"]["kind"] == "router"]
    assert len(routers) == 1 and len(workers) == len(plan), procs
    router = routers[0]
    # start order: every worker was ready before the router started (and the router checked them)
    assert max(w["ready"]["t"] for w in workers) < router["start"]["t"]
    assert "fail" not in router
    # hosts, ports and GPUs agree with the router's line: one URL per worker, its own GPUs
    ports = sorted(w["start"]["port"] for w in workers)
    assert ports == list(range(port0 + 1, port0 + 1 + len(plan)))
    assert sorted(int(u.rsplit(":", 1)[1]) for u in router["start"]["workers"]) == ports
    argv = router["start"]["argv"]  # its metrics listener is the job's last port, not the routers' 29000
    assert argv[argv.index("--prometheus-port") + 1] == str(port0 + 999)
    assert sorted(u.split("//")[1].rsplit(":", 1)[0] for u in router["start"]["workers"]) == sorted(
        w["start"]["env"]["SLURMD_NODENAME"] for w in workers
    )
    gpus = [(w["start"]["env"]["SLURMD_NODENAME"], w["start"]["env"]["CUDA_VISIBLE_DEVICES"]) for w in workers]
    assert len(set(gpus)) == len(plan)  # no two replicas share a GPU
    used = [g for _, vis in gpus for g in vis.split(",")]
    assert len(used) == sum(n for _, _, n in plan)
    for w in workers:
        argv = w["start"]["argv"]
        assert argv[argv.index("--tp-size") + 1] == str(plan[0][1]) and argv[argv.index("--host") + 1] == "0.0.0.0"
    # a request through the announced URL reaches a replica
    got = ask(url.replace(url.split("//")[1].split(":")[0], "127.0.0.1"), "/generate", {"text": "hi"})
    assert got["served_by"]["role"] == "replica" and got["served_by"]["port"] in ports
    pids = [w["start"]["pid"] for w in workers] + [router["start"]["pid"]]
    out = finish(slurm_cluster, job_id, pids)
    no_filter_noise(out)
    ready = [out.index("slurmgpu: %s ready at" % name) for name, _, _ in plan]
    assert max(ready) < out.index("slurmgpu: router ready at") < out.index("slurmgpu: serving at " + url)


def test_vllm_disaggregated_job_routes_prefill_then_decode(slurm_cluster, policy, tmp_path):  # noqa: F811
    script = gen(slurm_cluster, "--launcher", "vllm", "--serve", "disaggregated", *MODEL, *COMMON)
    job_id, port0 = submit(slurm_cluster, script, tmp_path, _env(slurm_cluster, tmp_path))
    url = wait_url(tmp_path, job_id, slurm_cluster)
    procs = by_pid(records(tmp_path))
    workers = [p for p in procs.values() if p["start"]["kind"] == "worker"]
    (router,) = [p for p in procs.values() if p["start"]["kind"] == "router"]
    assert router["start"]["pd"] and router["start"]["prefill"] and router["start"]["decode"]
    assert max(w["ready"]["t"] for w in workers) < router["start"]["t"]
    by_port = {w["start"]["port"]: w for w in workers}
    pre = [int(p[0].rsplit(":", 1)[1]) for p in router["start"]["prefill"]]
    dec = [int(d.rsplit(":", 1)[1]) for d in router["start"]["decode"]]
    assert sorted(pre + dec) == sorted(by_port) and not set(pre) & set(dec)
    for w in by_port.values():
        env = w["start"]["env"]
        # the KV transfer goes over the site's NIC (testcluster: ethernet on lo), with its own side channel
        assert env["UCX_NET_DEVICES"] == "lo"
        assert env["VLLM_NIXL_SIDE_CHANNEL_HOST"] == env["SLURMD_NODENAME"]
        assert int(env["VLLM_NIXL_SIDE_CHANNEL_PORT"]) >= port0 + 400
        assert "--kv-transfer-config" in w["start"]["argv"]
    sides = [w["start"]["env"]["VLLM_NIXL_SIDE_CHANNEL_PORT"] for w in workers]
    assert len(set(sides)) == len(sides)
    got = ask("http://127.0.0.1:%s" % url.rsplit(":", 1)[1], "/v1/completions", {"prompt": "hi", "max_tokens": 8})
    assert got["served_by"]["port"] in dec and got["prefill"]["served_by"]["port"] in pre
    assert got["prefill"]["got"]["max_tokens"] == 1  # vllm-router's prefill leg
    no_filter_noise(finish(slurm_cluster, job_id, [w["start"]["pid"] for w in workers] + [router["start"]["pid"]]))


def test_a_worker_that_fails_to_load_fails_the_job_with_its_log_tail(slurm_cluster, policy, tmp_path):  # noqa: F811
    script = gen(slurm_cluster, "--launcher", "sglang", "--serve", "disaggregated", *MODEL, *COMMON)
    job_id, _ = submit(slurm_cluster, script, tmp_path, _env(slurm_cluster, tmp_path, STANDIN_FAIL="decode"))
    result = slurm_cluster.wait_job(job_id, timeout=120)
    assert result.state == "FAILED" and result.exit_code == 1, result
    out = result.stdout or ""
    assert re.search(r"slurmgpu: decode-\d ended before it answered http://\S+/health; the last lines of", out), out
    assert "RuntimeError: stand-in decode worker on port" in out  # the worker's own log tail
    no_filter_noise(out)
    procs = by_pid(records(tmp_path))
    assert not [p for p in procs.values() if p["start"]["kind"] == "router"], "a router started"
    prefill = [p for p in procs.values() if p["start"].get("role") == "prefill"]
    assert prefill and all("--disaggregation-bootstrap-port" in p["start"]["argv"] for p in prefill)
    assert all_gone([p["start"]["pid"] for p in procs.values()]) == []
