"""Router and disaggregated serving jobs judged by the engines' and routers' own parsers (issue 32).

Cases: the golden corner of tests/contract_matrix.py (five presets x five models), both modes
and both engines, plus one (mode, engine) per other (preset, model) pair drawn by its hash; the
planner picks the node count (the fewest that serve the default request shape). Each rendered
job passed the site's submit filter inside `generate`. Then:

* every worker's line, with what the script adds on each node (the node rank; vLLM's --headless)
  and sample hosts and ports for its run-time values, parses with the engine's recorded parser
  (tests/data/contract/<engine>-<version>.json via test_contract_serving.build), and the parsed
  TP, PP, node count, role and KV-transfer settings are the plan's;
* the router's line parses with the router's own launcher (sglang-router 0.3.2, vllm-router
  0.1.17 in .contract-env; contrib/contract/judge.py builds the Rust router's configuration
  without starting it), and names exactly the workers of each role, at their hosts and ports;
* the workers' GPUs do not overlap and stay inside the allocation.
"""

from __future__ import annotations

import json
import re
import zlib
from dataclasses import replace
from typing import Any, Dict, List, Optional, Tuple

import pytest

from slurmgpu.job import JobSpec, generate
from slurmgpu.job.generate import Generated
from slurmgpu.job.serving import METRICS
from slurmgpu.job.templates import search_path
from tests.contract_judges import judge
from tests.contract_matrix import GOLDEN_MODELS, GOLDEN_PRESETS, MODELS, PRESETS, _site
from tests.test_contract_serving import Refused, build, catalogue, parse

MODES = ("router", "disaggregated")
ENGINES = ("vllm", "sglang")
ENTRY = {"vllm": 2, "sglang": 3}  # `vllm serve`, `python -m sglang.launch_server`
ROUTER_ENTRY = {"vllm": 1, "sglang": 3}  # `vllm-router`, `python -m sglang_router.launch_router`
PORT0 = 20000
_VAR = re.compile(r"\$\{SLURMGPU_(HOST|PORT|DIST|SIDE|ROUTER_PORT|METRICS_PORT)\}")


def cases() -> List[Tuple[str, str, str, str]]:
    out = {(p, m, mode, e) for p in GOLDEN_PRESETS for m in GOLDEN_MODELS for mode in MODES for e in ENGINES}
    combos = [(mode, e) for mode in MODES for e in ENGINES]
    for p in PRESETS:
        for m in MODELS:
            if p not in GOLDEN_PRESETS or m not in GOLDEN_MODELS:
                out.add((p, m) + combos[zlib.crc32(("%s/%s" % (p, m)).encode()) % len(combos)])
    return sorted(out)


def render(preset: str, model: str, mode: str, engine: str) -> Tuple[Optional[Generated], str]:
    site = _site(preset)
    spec = JobSpec(launcher=engine, model=model, serve=mode, weights="org/model", time="04:00:00")
    try:
        return generate(site, spec, search_path(None, None, site)), ""
    except Exception as e:  # counted with its reason below; ConfigError too (a fabric without a KV recipe)
        return None, "%s: %s" % (type(e).__name__, str(e).splitlines()[0])


def resolve(word: Any, w: Any) -> str:
    """A run-time word as the script's shell makes it while it starts worker `w` (node i called n<i>)."""

    def one(m: re.Match) -> str:  # type: ignore[type-arg]
        what = m.group(1)
        if what == "ROUTER_PORT":
            return str(PORT0)
        if what == "METRICS_PORT":
            return str(PORT0 + METRICS)
        if what == "HOST":
            return "n%d" % w.node
        return str(PORT0 + {"PORT": w.port, "DIST": w.dist, "SIDE": w.side}[what])

    return _VAR.sub(one, str(word))


def router_line(engine: str, serve: Any) -> List[str]:
    """The router's line: its head, then each worker's words in the order the script starts them."""
    out = [resolve(a, None) for a in serve.router.argv[ROUTER_ENTRY[engine] :]]
    for w in serve.workers:
        out += [resolve(a, w) for a in w.router_words]
    return out


def worker_lines(engine: str, w: Any, workers: Any) -> List[List[str]]:
    """The line each node of the worker runs (what the template's node-rank shell adds)."""
    argv = [resolve(a, w) for a in w.argv[ENTRY[engine] :]]
    if w.nodes == 1:
        return [argv]
    out = []
    for rank in range(w.nodes):
        extra = ["--headless"] if engine == "vllm" and rank else []
        out.append(argv + extra + ["--node-rank", str(rank)])
    return out


def check_worker(engine: str, ns: Any, w: Any, serve: Any) -> List[str]:
    bad = []
    if engine == "vllm":
        got = (ns.tensor_parallel_size, ns.pipeline_parallel_size, ns.nnodes or 1, ns.port)
        if w.role != "replica":
            cfg = json.loads(ns.kv_transfer_config)
            if cfg.get("kv_connector") != "NixlConnector" or cfg.get("kv_role") != "kv_both":
                bad.append("kv-transfer-config %s" % cfg)
        elif ns.kv_transfer_config:
            bad.append("a replica with a KV connector")
        if w.nodes > 1 and (ns.master_addr != "n%d" % w.node or ns.master_port != PORT0 + w.dist):
            bad.append("rendezvous %s:%s" % (ns.master_addr, ns.master_port))
    else:
        got = (ns.tp_size, ns.pp_size, ns.nnodes or 1, ns.port)
        want_mode = w.role if w.role != "replica" else None
        if (ns.disaggregation_mode or None) not in (want_mode, "null" if want_mode is None else want_mode):
            bad.append("disaggregation-mode %s for %s" % (ns.disaggregation_mode, w.role))
        if w.role != "replica" and ns.disaggregation_transfer_backend != serve.kv_backend:
            bad.append("transfer backend %s" % ns.disaggregation_transfer_backend)
        if w.role == "prefill" and ns.disaggregation_bootstrap_port != PORT0 + w.side:
            bad.append("bootstrap port %s" % ns.disaggregation_bootstrap_port)
        if ns.host != "0.0.0.0":
            bad.append("host %s" % ns.host)
        if w.nodes > 1 and ns.dist_init_addr != "n%d:%d" % (w.node, PORT0 + w.dist):
            bad.append("dist-init-addr %s" % ns.dist_init_addr)
    if got != (w.tp, w.pp, w.nodes, PORT0 + w.port):
        bad.append("parsed tp/pp/nnodes/port %s != %s" % (got, (w.tp, w.pp, w.nodes, PORT0 + w.port)))
    return bad


def check_router(engine: str, values: Dict[str, Any], serve: Any) -> List[str]:
    url = {w.index: "http://n%d:%d" % (w.node, PORT0 + w.port) for w in serve.workers}
    role = {r: [w for w in serve.workers if w.role == r] for r in ("replica", "prefill", "decode")}
    bad = []
    if values["port"] != PORT0 or values["host"] != "0.0.0.0":
        bad.append("router at %s:%s" % (values["host"], values["port"]))
    if values["prometheus_port"] != PORT0 + METRICS:  # the routers' default 29000 is block 9's router port
        bad.append("router metrics on port %s" % values["prometheus_port"])
    if serve.mode == "router":
        if values["pd"] or values["worker_urls"] != [url[w.index] for w in role["replica"]]:
            bad.append("worker urls %s" % values["worker_urls"])
    else:
        pre = [p[0] for p in values["prefill_urls"]]
        if not values["pd"] or pre != [url[w.index] for w in role["prefill"]]:
            bad.append("prefill urls %s" % values["prefill_urls"])
        if values["decode_urls"] != [url[w.index] for w in role["decode"]]:
            bad.append("decode urls %s" % values["decode_urls"])
        if engine == "sglang" and [p[1] for p in values["prefill_urls"]] != [PORT0 + w.side for w in role["prefill"]]:
            bad.append("bootstrap ports %s" % values["prefill_urls"])
    return bad


def check_placement(gen: Generated) -> List[str]:
    serve, lay = gen.request.serve, gen.request.layout
    used = set()
    for w in serve.workers:
        for n in range(w.node, w.node + w.nodes):
            for g in w.gpus:
                if (n, g) in used or n >= lay.nodes or g >= lay.gpus_per_node:
                    return ["%s: GPU %d of node %d used twice or outside the allocation" % (w.name, g, n)]
                used.add((n, g))
    return []


@pytest.mark.slow
def test_every_router_and_disaggregated_line_is_accepted() -> None:
    parsers = {e: build(catalogue(e)) for e in ENGINES}
    rendered, refused, failures = 0, {}, []  # type: ignore[var-annotated]
    for preset, model, mode, engine in cases():
        gen, why = render(preset, model, mode, engine)
        if gen is None:
            refused[why] = refused.get(why, 0) + 1
            continue
        rendered += 1
        serve = gen.request.serve
        cid = "%s/%s/%s/%s" % (preset, model, mode, engine)
        assert serve is not None and serve.mode == mode, cid
        bad = check_placement(gen)
        for w in serve.workers:
            for line in worker_lines(engine, w, serve.workers):
                try:
                    ns = parse(parsers[engine], line)
                except Refused as e:
                    bad.append("%s refused: %s" % (w.name, e))
                    continue
                bad += ["%s: %s" % (w.name, b) for b in check_worker(engine, ns, w, serve)]
        ans = judge().ask("%s_router" % engine, router_line(engine, serve), 0, {})
        if not ans["ok"]:
            bad.append("router refused: %s" % ans["error"])
        else:
            bad += check_router(engine, ans["values"], serve)
        failures += ["%s: %s" % (cid, b) for b in bad]
    print("%d rendered; refused: %s" % (rendered, json.dumps(refused, indent=1)))
    assert not failures, "\n".join(failures[:20])
    assert rendered >= 200
    # refusals: models that fit no worker (one full-context request), fabrics without a KV recipe, and
    # deployments that need more nodes than the partition allows for the default concurrency
    for why in refused:
        assert "does not fit any worker" in why or "KV-transfer recipe" in why or "allows" in why, why


def test_the_rules_the_serving_modes_rely_on_are_recorded() -> None:
    """The hand-recorded facts (tests/data/contract/serving_rules.json) the worker and router lines use."""
    from tests.test_contract_serving import RULES

    ids = {e: {r["id"] for r in RULES[e]["rules"]} for e in ENGINES}
    assert {"nixl-kv-config", "nixl-side-channel", "router-pd"} <= ids["vllm"]
    assert {"disagg-mode", "nixl-needs-ucx-devices", "ucx-keep-loopback", "router-pd"} <= ids["sglang"]


def test_the_router_judge_can_refuse() -> None:
    """The judges are not rubber stamps: an unknown flag, a policy the router lacks and a --prefill
    without its URL fail. (sglang-router's parser accepts abbreviations such as --worker-url.)"""
    assert not judge().ask("sglang_router", ["--worker-urlz", "http://a:1"], 0, {})["ok"]
    assert not judge().ask("sglang_router", ["--worker-urls", "http://a:1", "--policy", "fastest"], 0, {})["ok"]
    assert not judge().ask("vllm_router", ["--vllm-pd-disaggregation", "--prefill"], 0, {})["ok"]
    ok = judge().ask("vllm_router", ["--worker-urls", "http://a:1", "http://b:2"], 0, {})
    assert ok["ok"] and ok["values"]["worker_urls"] == ["http://a:1", "http://b:2"]


def test_a_wrong_worker_line_is_caught() -> None:
    """check_worker fails a line whose role or port the plan did not write (a planted bug)."""
    gen, _ = render("dgx-h100", "llama3.1-70b", "disaggregated", "sglang")
    assert gen is not None and gen.request.serve is not None
    serve = gen.request.serve
    w = next(w for w in serve.workers if w.role == "prefill")
    wrong = replace(w, argv=tuple("decode" if a == "prefill" else a for a in w.argv))  # the role's line, altered
    ns = parse(build(catalogue("sglang")), worker_lines("sglang", wrong, serve.workers)[0])
    assert any("disaggregation-mode" in b for b in check_worker("sglang", ns, w, serve))
