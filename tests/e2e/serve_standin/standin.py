"""Stand-ins for the serving engines and their routers, for the orchestration end-to-end test
(tests/test_e2e_serving.py). The real engines need GPUs; these answer what the generated script
and the routers ask of them, with the command lines the script writes:

* a worker (`python -m sglang.launch_server ...`, `vllm serve ...`) answers GET /health once it
  has "loaded" (STANDIN_DELAY seconds after it starts) and POST /generate, /v1/completions with
  a JSON body naming itself; a vLLM node started --headless, or an SGLang node of --node-rank > 0,
  serves nothing (as the engines' non-first nodes);
* a router (`python -m sglang_router.launch_router ...`, `vllm-router ...`) checks every worker's
  /health once when it starts (the real routers wait for their workers), then answers /health and
  forwards each request the way its engine's router does: to one worker in turn, or, prefill/decode
  disaggregated, to a prefill worker (SGLang: with bootstrap_host/port/room added, sent together
  with the decode request; vLLM: with max_tokens 1, then to a decode worker) and returns what the
  decode worker answered.

Every process appends JSON lines (start, ready, request, stop) with its argv, environment and
times to STANDIN_RECORD/<pid>.jsonl. STANDIN_FAIL=ROLE makes every worker of that role
(prefill, decode, replica) print a traceback-like line and exit 1 before it is ready.
Standard library only: the stand-ins run in the job's Python.
"""

from __future__ import annotations

import http.server
import itertools
import json
import os
import random
import signal
import socket
import sys
import threading
import time
import urllib.request
from typing import Any, Dict, List, Optional

ENV_KEYS = (
    "CUDA_VISIBLE_DEVICES",
    "UCX_NET_DEVICES",
    "UCX_CUDA_IPC_ENABLE_MNNVL",
    "VLLM_NIXL_SIDE_CHANNEL_HOST",
    "VLLM_NIXL_SIDE_CHANNEL_PORT",
    "SLURM_PROCID",
    "SLURMD_NODENAME",
    "SLURM_STEP_ID",
)


def record(event: str, **kw: Any) -> None:
    where = os.environ.get("STANDIN_RECORD")
    if not where:
        return
    row = dict(event=event, t=time.time(), pid=os.getpid(), **kw)
    with open(os.path.join(where, "%d.jsonl" % os.getpid()), "a") as f:
        f.write(json.dumps(row) + "\n")


def values(argv: List[str], flag: str) -> List[List[str]]:
    """The words after each occurrence of `flag`, up to the next option."""
    out = []
    for i, a in enumerate(argv):
        if a == flag:
            got = list(itertools.takewhile(lambda w: not w.startswith("--"), argv[i + 1 :]))
            out.append(got)
    return out


def value(argv: List[str], flag: str, default: Optional[str] = None) -> Optional[str]:
    v = values(argv, flag)
    return v[-1][0] if v and v[-1] else default


def post(url: str, body: Dict[str, Any], timeout: float = 10.0) -> Dict[str, Any]:
    req = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read())


def healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url + "/health", timeout=5) as r:
            return r.status == 200
    except OSError:
        return False


class Handler(http.server.BaseHTTPRequestHandler):
    server_version = "standin"
    answer: Any = None  # (path, body) -> dict
    ready = threading.Event()

    def log_message(self, *a: Any) -> None:  # quiet
        pass

    def _send(self, code: int, body: Dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:  # noqa: N802
        if self.path == "/health" and self.ready.is_set():
            self._send(200, {"ok": True})
        else:
            self._send(503 if self.path == "/health" else 404, {"ok": False})

    def do_POST(self) -> None:  # noqa: N802
        n = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(n) or b"{}")
        try:
            self._send(200, type(self).answer(self.path, body))
        except Exception as e:  # the test reads the error back
            self._send(500, {"error": repr(e)})


def serve(port: int, answer: Any, ready_after: float) -> None:
    Handler.answer = staticmethod(answer)
    httpd = http.server.ThreadingHTTPServer(("0.0.0.0", port), Handler)
    httpd.daemon_threads = True

    def mark() -> None:
        time.sleep(ready_after)
        Handler.ready.set()
        record("ready", port=port)

    threading.Thread(target=mark, daemon=True).start()
    httpd.serve_forever()


def on_term(*_: Any) -> None:
    record("stop")
    sys.exit(0)


def worker(engine: str, argv: List[str]) -> None:
    role = value(argv, "--disaggregation-mode") or ("kv_both" if "--kv-transfer-config" in argv else "replica")
    port = int(value(argv, "--port", "8000") or 8000)
    rank = int(value(argv, "--node-rank", "0") or 0)
    record("start", kind="worker", engine=engine, role=role, port=port, argv=argv, node_rank=rank,
           env={k: os.environ.get(k) for k in ENV_KEYS}, host=socket.gethostname())  # fmt: skip
    fail = os.environ.get("STANDIN_FAIL")
    if fail and fail == role and rank == 0:
        time.sleep(1)
        msg = "RuntimeError: stand-in %s worker on port %d failed while loading (STANDIN_FAIL)" % (fail, port)
        print(msg, flush=True)
        record("fail")
        sys.exit(1)
    if rank > 0 or "--headless" in argv:
        while True:  # a later node of a multi-node worker: no API server
            time.sleep(60)

    def answer(path: str, body: Dict[str, Any]) -> Dict[str, Any]:
        record("request", path=path, body=body)
        return {"served_by": {"engine": engine, "port": port, "role": role}, "path": path, "got": body}

    print("stand-in %s worker: serving on port %d" % (engine, port), flush=True)
    serve(port, answer, float(os.environ.get("STANDIN_DELAY", "2")))


def router(engine: str, argv: List[str]) -> None:
    port = int(value(argv, "--port", "30000") or 30000)
    workers = [u for v in values(argv, "--worker-urls") for u in v]
    prefill = [v for v in values(argv, "--prefill")]
    decode = [v[0] for v in values(argv, "--decode") if v]
    pd = "--pd-disaggregation" in argv or "--vllm-pd-disaggregation" in argv
    record("start", kind="router", engine=engine, port=port, argv=argv, workers=workers, prefill=prefill,
           decode=decode, pd=pd, host=socket.gethostname())  # fmt: skip
    urls = workers + [p[0] for p in prefill] + decode
    down = [u for u in urls if not healthy(u)]
    if down or not urls or (pd and not (prefill and decode)):
        print("stand-in router: workers not ready: %s" % down, flush=True)
        record("fail", down=down)
        sys.exit(1)
    turn = itertools.count()

    def answer(path: str, body: Dict[str, Any]) -> Dict[str, Any]:
        k = next(turn)
        if not pd:
            return post(workers[k % len(workers)] + path, body)
        p = prefill[k % len(prefill)]
        d = decode[k % len(decode)]
        if engine == "sglang":
            host = p[0].split("//")[1].rsplit(":", 1)[0]
            extra = dict(bootstrap_host=host, bootstrap_port=int(p[1]) if len(p) > 1 else None,
                         bootstrap_room=random.getrandbits(63))  # fmt: skip
            pre_body = dict(body, **extra)
            out: Dict[str, Any] = {}
            t = threading.Thread(target=lambda: out.update(prefill=post(p[0] + path, pre_body)))
            t.start()
            dec = post(d + path, dict(body, **extra))
            t.join()
        else:
            out = {"prefill": post(p[0] + path, dict(body, max_tokens=1))}
            dec = post(d + path, body)
        dec["prefill"] = out.get("prefill")
        return dec

    print("stand-in %s router: serving on port %d over %d workers" % (engine, port, len(urls)), flush=True)
    serve(port, answer, 0.0)


def main(kind: str) -> None:
    signal.signal(signal.SIGTERM, on_term)
    argv = sys.argv[1:]
    engine = "vllm" if kind.startswith("vllm") else "sglang"
    if kind.endswith("router"):
        router(engine, argv)
    else:
        if engine == "vllm":
            argv = argv[1:] if argv[:1] == ["serve"] else argv
        worker(engine, argv)
