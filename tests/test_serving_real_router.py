"""The engines' real routers (sglang-router 0.3.2, vllm-router 0.1.17, from the frameworks' venv
.contract-env) run with the router line a generated script builds, in front of the stand-in
workers (tests/e2e/serve_standin) started with the script's worker lines, all on this machine.

This is the part of the orchestration the cluster e2e cannot prove with its stand-in router: that
the real router starts on the line we write (its port, its Prometheus port, the workers' words in
the order the script appends them), finds every worker healthy, and forwards a request, in prefill/
decode mode to a prefill and a decode worker (SGLang: with the prefill worker's bootstrap port).
The workers are stand-ins because the engines need GPUs. Skipped locally, failed in CI, without the
venv (as every judge of tests/contract_judges.py).
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
from typing import Any, Dict, List, Optional

import pytest

from slurmgpu.job import JobSpec, generate
from slurmgpu.job.serving import METRICS
from slurmgpu.job.templates import search_path
from slurmgpu.site import load_site, preset_dir
from tests.contract_judges import _required, env_python

ROOT = Path(__file__).resolve().parents[1]
STANDIN = ROOT / "tests" / "e2e" / "serve_standin"


def _venv_bin() -> Path:
    python = env_python()
    if python is None:
        msg = "the frameworks' venv is missing: build it with `python3 contrib/contract/make_env.py`"
        if _required():
            pytest.fail(msg)
        pytest.skip(msg)
    return Path(python).parent


def _free_block(span: int = METRICS + 1) -> int:
    """A base port whose block of `span` ports is free here (the router's, the workers' and the
    metrics port are all checked by binding them)."""
    for base in range(40000, 60000 - span, span + 17):
        ok = True
        for off in (0, 1, 2, 3, 4, 5, 400, 401, 404, 405, 408, 412, METRICS):
            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", base + off))
                except OSError:
                    ok = False
                    break
        if ok:
            return base
    pytest.fail("no free port block between 40000 and 60000")


def _get(url: str) -> Optional[int]:
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return int(r.status)
    except OSError:
        return None


def _records(where: Path) -> List[Dict[str, Any]]:
    out = []
    for f in where.glob("*.jsonl"):
        out += [json.loads(line) for line in f.read_text().splitlines() if line.strip()]
    return out


@pytest.mark.parametrize(
    "engine,mode,nodes",
    [("sglang", "router", 1), ("sglang", "disaggregated", 2), ("vllm", "router", 1), ("vllm", "disaggregated", 2)],
)
def test_the_real_router_starts_on_our_line_and_forwards_to_the_workers(
    engine: str, mode: str, nodes: int, tmp_path: Path
) -> None:
    venv = _venv_bin()
    site = load_site(str(preset_dir() / "dgx-h100.yaml"))
    spec = JobSpec(launcher=engine, model="llama3.1-70b", serve=mode, nodes=nodes, weights="org/m", time="01:00:00")
    serve = generate(site, spec, search_path(None, None, site)).request.serve
    assert serve is not None and serve.mode == mode
    port0 = _free_block()

    def resolve(word: Any, w: Any) -> str:
        val = {"ROUTER_PORT": port0, "METRICS_PORT": port0 + METRICS}
        if w is not None:
            val.update(HOST="127.0.0.1", PORT=port0 + w.port, DIST=port0 + w.dist, SIDE=port0 + w.side)
        return re.sub(r"\$\{SLURMGPU_(\w+)\}", lambda m: str(val[m.group(1)]), str(word))

    record = tmp_path / "record"
    record.mkdir()
    env = dict(os.environ, PYTHONPATH=str(STANDIN), STANDIN_DELAY="0.5", STANDIN_RECORD=str(record))
    env["STANDIN_PYTHON"] = sys.executable
    procs: List[subprocess.Popen] = []  # type: ignore[type-arg]
    log = tmp_path / "router.log"
    try:
        for w in serve.workers:
            argv = [resolve(a, w) for a in w.argv]
            argv[0] = sys.executable if argv[0] == "python" else str(STANDIN / "bin" / argv[0])
            wenv = dict(env, **{k: resolve(v, w) for k, v in w.env})
            procs.append(subprocess.Popen(argv, env=wenv, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT))
        # the script's order: every worker healthy, then the router
        deadline = time.monotonic() + 30
        for w in serve.workers:
            while _get("http://127.0.0.1:%d/health" % (port0 + w.port)) != 200:
                assert time.monotonic() < deadline, "stand-in %s never became ready" % w.name
                time.sleep(0.2)
        line = [resolve(a, None) for a in serve.router.argv]
        for w in serve.workers:
            line += [resolve(a, w) for a in w.router_words]
        line[0] = str(venv / "python") if line[0] == "python" else str(venv / line[0])
        with open(log, "w") as out:
            procs.append(subprocess.Popen(line, stdout=out, stderr=subprocess.STDOUT, cwd=str(tmp_path)))
        deadline = time.monotonic() + 60
        while _get("http://127.0.0.1:%d/health" % port0) != 200:
            assert procs[-1].poll() is None, "%s ended at start:\n%s" % (serve.router.name, log.read_text()[-3000:])
            assert time.monotonic() < deadline, "%s never answered /health" % serve.router.name
            time.sleep(0.3)
        if engine == "sglang":
            path, body = "/generate", {"text": "hi", "sampling_params": {"max_new_tokens": 4}}
        else:
            path, body = "/v1/completions", {"model": "org/m", "prompt": "hi", "max_tokens": 4}
        req = urllib.request.Request(
            "http://127.0.0.1:%d%s" % (port0, path), json.dumps(body).encode(), {"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(req, timeout=30) as r:
            answer = json.loads(r.read())
        assert _get("http://127.0.0.1:%d/metrics" % (port0 + METRICS)) == 200  # its Prometheus port, ours
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
    ports = {port0 + w.port: w for w in serve.workers}
    assert ports[answer["served_by"]["port"]].role == ("replica" if mode == "router" else "decode")
    rows = _records(record)
    role = {r["pid"]: ports[r["port"]].role for r in rows if r["event"] == "start" and r["kind"] == "worker"}
    got = [(role[r["pid"]], r["body"]) for r in rows if r["event"] == "request" and r["path"] == path]
    if mode == "router":
        assert [g[0] for g in got] == ["replica"], got
        return
    assert sorted(g[0] for g in got) == ["decode", "prefill"], got
    pre = next(b for r, b in got if r == "prefill")
    if engine == "sglang":  # both sides are told which prefill worker's bootstrap port holds the KV
        assert pre.get("bootstrap_port") in {port0 + w.side for w in serve.workers if w.role == "prefill"}, pre
    else:  # vllm-router's NIXL flow: the prefill worker computes one token and hands the KV on
        assert pre["max_tokens"] == 1 and pre["kv_transfer_params"]["do_remote_decode"] is True, pre
