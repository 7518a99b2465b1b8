"""Serving deployments: one server, replicas behind a router, or prefill and decode workers apart.

`plan_serving` sizes each kind of worker (a "role") for a request shape and compares the three
deployments on one allocation. Everything here is first order and unvalidated until measured
(no serving run is in bench/data yet): the plan prints it as such.

- A worker is TP x PP GPUs. TP stays inside one NVLink domain (rules._tp_rules, the filter's
  rule); PP spans nodes only when no TP that fits a node holds the weights and one request's KV.
- Memory per GPU is plan.memory's inference terms (weights, the prefill working set, overhead);
  what the usable memory leaves is the KV pool, counted in tokens and in requests at the
  request's full context (input + output).
- Prefill is compute-bound: its time is cost._infer_candidate's prefill of one prompt; a worker
  under load keeps all its GPUs busy (PP stages on different prompts). Decode is bound by HBM
  bandwidth (weights + the batch's KV read once per step) or compute, whichever is slower:
  cost._infer_candidate's decode step at the batch and the average context (input + output / 2).
- An aggregated worker (a replica) does both: its prefills interleave with its decode steps,
  so decode slows by the share of time spent in prefill. A disaggregated decode worker never
  prefills; the prompt's KV crosses the network (or NVLink) once.

Imports plan modules only (cost, memory, rules, hardware): no I/O, no script text.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, Dict, List, Optional, Sequence, Tuple

from ..errors import PlanError
from ..site import Site
from ..vocab import SERVE_MODES
from .cost import _Ctx, _infer_candidate
from .hardware import Hardware, hardware
from .layout import Layout
from .memory import GB, WEIGHT_BYTES, inference_memory, kv_cache_bytes, stage_layers, usable_gb
from .models import ModelSpec
from .profile import TEXTBOOK, MemoryProfile
from .rules import _tp_rules
from .types import PlanRequest

MODES = SERVE_MODES  # vocab's one list
DEFAULT_INPUT = 1024
DEFAULT_OUTPUT = 1024
DEFAULT_CONCURRENCY = 128
# Sequences one worker decodes per step at most: both engines capture CUDA graphs up to 256-512
# sequences and schedule about that many by default; beyond it the plan does not count on more.
MAX_BATCH = 256
ERROR_BAND = "unvalidated until measured: no serving run is in bench/data yet, so no error band is known"


@dataclass(frozen=True)
class Workload:
    """The request shape a deployment is sized for."""

    input_len: int = DEFAULT_INPUT
    output_len: int = DEFAULT_OUTPUT
    concurrency: Optional[int] = None  # requests in flight
    rate: Optional[float] = None  # requests per second

    @property
    def context(self) -> int:
        return self.input_len + self.output_len

    def to_dict(self) -> Dict[str, Any]:
        return {
            "input_len": self.input_len,
            "output_len": self.output_len,
            "concurrency": self.concurrency,
            "rate": self.rate,
        }


@dataclass(frozen=True)
class Worker:
    """One kind of worker and what one of it holds and does (per GPU memory, per worker speed)."""

    tp: int
    pp: int
    gpus_per_node: int  # the node's GPUs
    weights_gb: float  # per GPU
    work_gb: float  # prefill working set + overhead, per GPU
    kv_pool_gb: float  # per GPU
    kv_tokens: int  # tokens of KV one worker holds
    kv_seqs: int  # requests at full context one worker holds
    prefill_s: float  # one prompt alone (time to first token, before any wait)
    prefill_tok_s: float  # prompt tokens per second under load

    @property
    def gpus(self) -> int:
        return self.tp * self.pp

    @property
    def nodes(self) -> int:
        """Whole nodes one worker spans (1 when it shares a node with others)."""
        return max(1, -(-self.gpus // self.gpus_per_node))

    @property
    def per_node(self) -> int:
        """Workers that share one node (1 when a worker spans nodes)."""
        return max(1, self.gpus_per_node // self.gpus) if self.gpus <= self.gpus_per_node else 1

    def words(self) -> str:
        pp = " x PP%d over %d nodes" % (self.pp, self.nodes) if self.pp > 1 else ""
        return "TP%d%s" % (self.tp, pp)


@dataclass(frozen=True)
class Role:
    """`count` workers of one role in a deployment, with the batch each decodes and why."""

    role: str  # server | replica | prefill | decode
    count: int
    worker: Worker
    batch: int  # requests one worker decodes at once in the estimate (0: prefill only)
    decode_step_s: float  # one decode step at that batch (0: prefill only)
    why: str

    @property
    def gpus(self) -> int:
        return self.count * self.worker.gpus

    def to_dict(self) -> Dict[str, Any]:
        w = self.worker
        return {
            "role": self.role,
            "count": self.count,
            "tp": w.tp,
            "pp": w.pp,
            "gpus_per_worker": w.gpus,
            "nodes_per_worker": w.nodes if w.gpus > w.gpus_per_node else 0,
            "workers_per_node": w.per_node if w.gpus <= w.gpus_per_node else 0,
            "weights_gb_per_gpu": round(w.weights_gb, 2),
            "kv_pool_gb_per_gpu": round(w.kv_pool_gb, 2),
            "kv_tokens_per_worker": w.kv_tokens,
            "kv_requests_per_worker": w.kv_seqs,
            "batch": self.batch,
            "prefill_tokens_per_s": round(w.prefill_tok_s, 1),
            "decode_step_s": round(self.decode_step_s, 5),
            "decode_tokens_per_s": round(self.batch / self.decode_step_s, 1) if self.decode_step_s else 0.0,
            "why": self.why,
        }


@dataclass(frozen=True)
class Deployment:
    """One way to serve the workload on the allocation, with its first-order figures."""

    mode: str
    roles: Tuple[Role, ...]
    nodes: int
    gpus_per_node: int
    requests_per_s: float  # sustained
    output_tokens_per_s: float
    ttft_s: float  # time to first token of a request, no queueing
    tpot_s: float  # time per output token after the first
    concurrency: int  # requests in flight at that rate
    kv_transfer_s: float = 0.0  # disaggregated: one prompt's KV from prefill to decode
    kv_over_nvlink: bool = False  # disaggregated: prefill and decode share one NVLink domain
    notes: Tuple[str, ...] = ()

    @property
    def gpus(self) -> int:
        return sum(r.gpus for r in self.roles)

    def role(self, name: str) -> Optional[Role]:
        return next((r for r in self.roles if r.role == name), None)

    def to_dict(self) -> Dict[str, Any]:
        return {
            "mode": self.mode,
            "nodes": self.nodes,
            "gpus_per_node": self.gpus_per_node,
            "gpus_used": self.gpus,
            "roles": [r.to_dict() for r in self.roles],
            "requests_per_s": round(self.requests_per_s, 3),
            "output_tokens_per_s": round(self.output_tokens_per_s, 1),
            "ttft_s": round(self.ttft_s, 4),
            "tpot_s": round(self.tpot_s, 5),
            "concurrency": self.concurrency,
            "kv_transfer_s": round(self.kv_transfer_s, 5),
            "kv_over_nvlink": self.kv_over_nvlink,
            "notes": list(self.notes),
        }


@dataclass(frozen=True)
class ServePlan:
    """The chosen deployment, the others on the same nodes, and the modes that could not run."""

    site: str
    partition: str
    model: ModelSpec
    precision: str
    workload: Workload
    chosen: Deployment
    compared: Tuple[Deployment, ...]  # every mode that fits, the chosen one included
    refused: Tuple[Tuple[str, str], ...]  # (mode, why not)
    error_band: str = ERROR_BAND

    def to_dict(self) -> Dict[str, Any]:
        return {
            "site": self.site,
            "partition": self.partition,
            "model": self.model.name,
            "precision": self.precision,
            "workload": self.workload.to_dict(),
            "mode": self.chosen.mode,
            "deployment": self.chosen.to_dict(),
            "compared": [d.to_dict() for d in self.compared],
            "refused": [{"mode": m, "why": w} for m, w in self.refused],
            "error_band": self.error_band,
        }


# ---------------------------------------------------------------------------
# one worker


class _Sizer:
    """Worker sizing for one model on one partition (caches the cost model's context)."""

    def __init__(
        self, hw: Hardware, model: ModelSpec, precision: str, work: Workload, profile: MemoryProfile = TEXTBOOK
    ):
        self.hw, self.model, self.precision, self.work = hw, model, precision, work
        self.profile = profile
        self.gpn = hw.nt.gpus
        base = PlanRequest(model=model, task="inference", precision=precision, partition=hw.partition.name)
        self.ctx_decode = _Ctx(hw, replace(base, seq=work.input_len + work.output_len // 2))
        self.ctx_prefill = _Ctx(hw, replace(base, seq=work.input_len))
        self._cache: Dict[Tuple[int, int], Optional[Worker]] = {}
        self._steps: Dict[Tuple[int, int, int], float] = {}

    def candidates(self, max_nodes: int) -> List[Tuple[int, int]]:
        """(TP, PP) from the fewest GPUs up: TP inside a node (or an NVL72 domain); PP only for a
        model no TP worker holds, the fewest stages that hold it (on one node's GPUs, else over
        whole nodes)."""
        nt = self.hw.nt
        tps = [t for t in range(1, nt.nvlink_domain + 1) if not _tp_rules(self.hw, self.model, t, 1, min(t, nt.gpus))]
        tps = [t for t in tps if t <= nt.gpus or (nt.multi_node_nvlink and t % nt.gpus == 0)]
        out = [(t, 1) for t in tps]
        if not any(self.worker(t, 1) for t, _ in out):
            # pipeline stages: on the node's GPUs (PCIe nodes, where TP stays 1), then over whole nodes
            top = max((t for t in tps if t <= nt.gpus), default=1)
            for p in range(2, min(max_nodes * nt.gpus // top, self.model.layers) + 1):
                g = top * p
                if (nt.gpus % g == 0 or g % nt.gpus == 0) and self.worker(top, p):
                    out.append((top, p))
                    break
        return [c for c in out if self.worker(*c) is not None]

    def worker(self, tp: int, pp: int) -> Optional[Worker]:
        """What one TP x PP worker holds and does, or None when one request at full context does not fit."""
        key = (tp, pp)
        if key in self._cache:
            return self._cache[key]
        m, ctx, nt = self.model, self.work.context, self.hw.nt
        mem = inference_memory(
            m, tp, pp, 1, 1, ctx, self.precision, profile=self.profile, capacity_gb=nt.gpu_memory_gb, gpu=nt.gpu_model
        )
        if self.profile.serve is not None:  # the engine's own preallocation rule (plan/profile.py ServeBudget)
            pool = mem.kv_pool
        else:
            pool = usable_gb(nt.gpu_memory_gb) - mem.weights - mem.activations - mem.overhead
        per_token = kv_cache_bytes(m, 1, 1, WEIGHT_BYTES.get(self.precision, 2.0), tp, max(stage_layers(m.layers, pp)))
        tokens = int(pool * GB / per_token) if pool > 0 else 0
        w: Optional[Worker] = None
        if tokens >= ctx:
            lay = Layout(tp=tp, pp=pp, dp=1, cp=1, ep=1, micro_batch=1, nodes=1, gpus_per_node=tp * pp)
            pre = _infer_candidate(self.ctx_prefill, lay, 1, mem, None).prefill or 0.0
            pre = max(pre, 1e-6)
            w = Worker(
                tp=tp,
                pp=pp,
                gpus_per_node=self.gpn,
                weights_gb=mem.weights,
                work_gb=mem.activations + mem.overhead,
                kv_pool_gb=pool,
                kv_tokens=tokens,
                kv_seqs=tokens // ctx,
                prefill_s=pre,
                prefill_tok_s=self.work.input_len / pre * pp,
            )
        self._cache[key] = w
        return w

    def step(self, w: Worker, batch: int) -> float:
        """One decode step of `batch` requests at the average context (HBM- or compute-bound)."""
        key = (w.tp, w.pp, batch)
        if key not in self._steps:
            lay = Layout(tp=w.tp, pp=w.pp, dp=1, cp=1, ep=1, micro_batch=batch, nodes=1, gpus_per_node=w.gpus)
            mem = inference_memory(self.model, w.tp, w.pp, 1, batch, self.ctx_decode.seq, self.precision)
            self._steps[key] = _infer_candidate(self.ctx_decode, lay, batch, mem, None).step
        return self._steps[key]


# ---------------------------------------------------------------------------
# deployments


def _replicas(sz: _Sizer, mode: str, w: Worker, count: int, nodes: int, why: str) -> Deployment:
    """`count` workers that each prefill and decode (one server's DP replicas, or router replicas)."""
    work = sz.work
    hold = min(w.kv_seqs, MAX_BATCH)
    want = work.concurrency if work.concurrency else count * hold
    b = max(1, min(hold, -(-want // count)))
    t_d = sz.step(w, b)
    # per replica: each request costs its prefill time (the replica's GPUs under load) plus O steps
    # shared by b requests; prefill time interleaved with decode stretches every decode step
    per_req = work.input_len / w.prefill_tok_s + work.output_len * t_d / b
    lam = count / per_req
    busy = min(0.9, lam / count * work.input_len / w.prefill_tok_s)
    tpot = t_d / (1.0 - busy)
    role = Role("server" if mode == "aggregated" else "replica", count, w, b, t_d, why)
    notes = []
    if work.concurrency and work.concurrency > count * hold:
        notes.append(
            "the %d requests in flight exceed what %d %s hold (%d each at %d tokens): the rest queue"
            % (work.concurrency, count, "replicas" if count > 1 else "server", hold, work.context)
        )
    return Deployment(
        mode=mode,
        roles=(role,),
        nodes=nodes,
        gpus_per_node=sz.gpn,
        requests_per_s=lam,
        output_tokens_per_s=lam * work.output_len,
        ttft_s=w.prefill_s + t_d,
        tpot_s=tpot,
        concurrency=count * b,
        notes=tuple(notes),
    )


def _fits(workers: Sequence[Tuple[Worker, int]], nodes: int, gpn: int) -> bool:
    return nodes_needed(workers, gpn) <= nodes


def nodes_needed(workers: Sequence[Tuple[Worker, int]], gpn: int) -> int:
    """Nodes that `count` workers of each kind take, packed in order (place_workers' rule)."""
    return place(tuple((w.gpus, n) for w, n in workers), gpn)[1]


def place(groups: Sequence[Tuple[int, int]], gpn: int) -> Tuple[List[Tuple[int, int, int]], int]:
    """Where workers go, in order: groups of (GPUs per worker, count) -> per worker (first node,
    nodes, first GPU on its node), and the nodes used. A worker of at most a node's GPUs shares
    a node with the next ones while they fit whole; a larger one takes whole nodes of its own."""
    out: List[Tuple[int, int, int]] = []
    node, gpu = 0, 0
    for size, count in groups:
        for _ in range(count):
            if size >= gpn:
                if gpu:
                    node, gpu = node + 1, 0
                span = -(-size // gpn)
                out.append((node, span, 0))
                node += span
            else:
                if gpu + size > gpn:
                    node, gpu = node + 1, 0
                out.append((node, 1, gpu))
                gpu += size
                if gpu == gpn:
                    node, gpu = node + 1, 0
    return out, node + (1 if gpu else 0)


def _kv_move(sz: _Sizer, pre: Worker, nvlink: bool) -> float:
    """Seconds to move one prompt's KV cache from a prefill worker to a decode worker."""
    m = sz.model
    wb = WEIGHT_BYTES.get(sz.precision, 2.0)
    total = kv_cache_bytes(m, sz.work.input_len, 1, wb, 1)
    if nvlink:
        bw = sz.hw.link_bw * pre.gpus
    else:
        bw = sz.hw.nic_node / sz.gpn * pre.gpus
    return total / max(bw, 1.0)


def _disagg(sz: _Sizer, pre: Worker, dec: Worker, nodes: Optional[int], nvlink_ok: bool) -> Optional[Deployment]:
    """Prefill and decode counts for the workload on `nodes` (None: the fewest nodes that serve it)."""
    work = sz.work
    hold = min(dec.kv_seqs, MAX_BATCH)
    gpn = sz.gpn

    def figures(p: int, d: int) -> Tuple[float, float, float, float, int]:
        """(requests/s, decode step, prefill requests/s, decode requests/s, batch per decode worker)"""
        want = work.concurrency if work.concurrency else d * hold
        b = max(1, min(hold, -(-want // d)))
        t_d = sz.step(dec, b)
        lam_p = p * pre.prefill_tok_s / work.input_len
        lam_d = d * b / (work.output_len * t_d)
        return min(lam_p, lam_d), t_d, lam_p, lam_d, b

    best: Optional[Tuple[float, int, int]] = None
    if nodes is not None:
        cap = nodes * gpn
        for p in range(1, cap // pre.gpus + 1):
            for d in range(1, (cap - p * pre.gpus) // dec.gpus + 1):
                if not _fits(((pre, p), (dec, d)), nodes, gpn):
                    break
                lam = figures(p, d)[0]
                if best is None or lam > best[0] + 1e-9:
                    best = (lam, p, d)
    else:
        d = max(1, -(-(work.concurrency or DEFAULT_CONCURRENCY) // hold))
        if work.rate:
            while d < 4096 and figures(1, d)[3] < work.rate:
                d += 1
        p = max(1, int(math.ceil(figures(1, d)[3] * work.input_len / pre.prefill_tok_s - 1e-9)))
        best = (figures(p, d)[0], p, d)
    if best is None:
        return None
    lam, p, d = best
    _, t_d, lam_p, lam_d, b = figures(p, d)
    used = nodes_needed(((pre, p), (dec, d)), gpn)
    nvlink = nvlink_ok and sz.hw.nt.multi_node_nvlink and used <= sz.hw.nt.domain_nodes
    move = _kv_move(sz, pre, nvlink)
    why_p = (
        "prefill is compute-bound: one %s worker takes %d prompt tokens/s (%.0f ms per %d-token prompt); "
        "%d of them take %.2f requests/s"
        % (pre.words(), pre.prefill_tok_s, 1000 * pre.prefill_s, work.input_len, p, lam_p)
    )
    why_d = (
        "decode is bound by HBM bandwidth and the KV cache: one %s worker holds %d requests of %d tokens "
        "(%.1f GB KV per GPU) and decodes %d at %.1f ms a step; %d of them finish %.2f requests/s"
        % (dec.words(), dec.kv_seqs, work.context, dec.kv_pool_gb, b, 1000 * t_d, d, lam_d)
    )
    notes = []
    if nvlink:
        notes.append(
            "prefill and decode share one NVLink domain (%d nodes <= %d per domain, one --segment): the KV "
            "cache moves over NVLink (UCX cuda_ipc with multi-node NVLink)" % (used, sz.hw.nt.domain_nodes)
        )
    roles = (Role("prefill", p, pre, 0, 0.0, why_p), Role("decode", d, dec, b, t_d, why_d))
    return Deployment(
        mode="disaggregated",
        roles=roles,
        nodes=nodes if nodes is not None else used,
        gpus_per_node=gpn,
        requests_per_s=lam,
        output_tokens_per_s=lam * work.output_len,
        ttft_s=pre.prefill_s + move + t_d,
        tpot_s=t_d,
        concurrency=d * b,
        kv_transfer_s=move,
        kv_over_nvlink=nvlink,
        notes=tuple(notes),
    )


def _best_replica(sz: _Sizer, nodes: Optional[int]) -> Optional[Tuple[Worker, int, int, str]]:
    """The replica size with the most requests/s on `nodes` (None: the fewest nodes for the
    workload), as (worker, count, nodes, why)."""
    work = sz.work
    gpn = sz.gpn
    max_nodes = nodes or sz.hw.partition.max_nodes_per_job
    best: Optional[Tuple[float, float, Worker, int, int]] = None
    cands = sz.candidates(max_nodes)
    for tp, pp in cands:
        w = sz.worker(tp, pp)
        assert w is not None
        if nodes is not None:
            count = (nodes // w.nodes) * w.per_node if w.gpus >= gpn else nodes * w.per_node
            used = nodes
        else:
            hold = min(w.kv_seqs, MAX_BATCH)
            count = max(1, -(-(work.concurrency or DEFAULT_CONCURRENCY) // hold))
            if work.rate:
                per = _replicas(sz, "router", w, 1, 1, "").requests_per_s
                count = max(count, int(math.ceil(work.rate / per - 1e-9)))
            used = nodes_needed(((w, count),), gpn)
            count = (used // w.nodes) * w.per_node if w.gpus >= gpn else used * w.per_node
        if count < 1 or used > max_nodes:
            continue
        dep = _replicas(sz, "router", w, count, used, "")
        score = (dep.requests_per_s / (used * gpn), -dep.ttft_s)
        if best is None or score > best[:2]:
            best = (score[0], score[1], w, count, used)
    if best is None:
        return None
    _, _, w, count, used = best
    parts = []
    for t, p in cands:
        o = sz.worker(t, p)
        if o is not None and (t, p) != (w.tp, w.pp):
            parts.append("%s %.2f" % (o.words(), _replicas(sz, "router", o, 1, 1, "").requests_per_s))
    others = ", ".join(parts)
    why = (
        "%s is the replica size with the most requests/s per GPU at this request shape: it holds %d requests "
        "of %d tokens (%.1f GB KV per GPU next to %.1f GB of weights)%s"
        % (
            w.words(),
            w.kv_seqs,
            work.context,
            w.kv_pool_gb,
            w.weights_gb,
            "; requests/s of one replica of each other size: %s" % others if others else "",
        )
    )
    return w, count, used, why


def _disagg_sizes(sz: _Sizer, max_nodes: int) -> List[Tuple[Worker, Worker]]:
    """(prefill, decode) sizes to try, best first. Prefill: the smallest worker that holds the
    weights (prefill throughput per GPU barely changes with TP, and small workers leave more of
    them). Decode: by decode tokens/s per GPU at the batch its KV pool holds, most first."""
    cands = [w for w in (sz.worker(*c) for c in sz.candidates(max_nodes)) if w is not None]
    if not cands:
        return []
    pre = cands[0]

    def score(w: Worker) -> float:
        b = max(1, min(w.kv_seqs, MAX_BATCH))
        return b / sz.step(w, b) / w.gpus

    return [(pre, d) for d in sorted(cands, key=score, reverse=True)]


def _load_words(work: Workload) -> str:
    """The load a deployment was sized for, in the user's words."""
    if work.concurrency:
        return "%d requests in flight" % work.concurrency
    if work.rate:
        return "%g requests/s" % work.rate
    return "the default %d requests in flight" % DEFAULT_CONCURRENCY


def plan_serving(
    site: Site,
    model: ModelSpec,
    work: Workload,
    mode: str,
    partition: Optional[str] = None,
    nodes: Optional[int] = None,
    precision: str = "bf16",
    aggregated: Optional[Tuple[Layout, str]] = None,
    allowed: Sequence[str] = MODES,
    nvlink_kv: bool = True,
    reasons: Optional[Dict[str, str]] = None,
    profile: MemoryProfile = TEXTBOOK,
) -> ServePlan:
    """Size `mode` (router | disaggregated | aggregated) for `work` and compare it with the other
    modes on the same nodes. `aggregated` is the one-server layout make_plan chose (and why), or
    None when it refused; `allowed` the modes the launcher and fabric can run (the others are
    listed as refused with `reasons`' words). `profile` is the engine's memory rules (its launcher's
    MemoryProfile: the share of each GPU it preallocates and the KV pool that leaves)."""
    if mode not in MODES:
        raise PlanError("unknown serving mode %r; expected one of: %s" % (mode, ", ".join(MODES)))
    if work.input_len < 1 or work.output_len < 1:
        raise PlanError("--input-len and --output-len must be positive")
    if work.concurrency is not None and work.concurrency < 1:
        raise PlanError("--concurrency must be a positive integer, got %d" % work.concurrency)
    if work.rate is not None and work.rate <= 0:
        raise PlanError("--rate must be a positive number of requests per second, got %g" % work.rate)
    hw = hardware(site, partition, precision)
    part = hw.partition
    if nodes is not None and nodes > 0 and nodes > part.max_nodes_per_job:
        raise PlanError(
            "--nodes %d exceeds partition %s's limit of %d nodes per job" % (nodes, part.name, part.max_nodes_per_job)
        )
    sz = _Sizer(hw, model, precision, work, profile)
    if nodes is None:
        # size the asked mode alone, then compare every mode on the nodes it needs
        first = plan_serving(
            site, model, work, mode, partition, -1, precision, None, allowed, nvlink_kv, reasons, profile
        )
        nodes = first.chosen.nodes
        if nodes > part.max_nodes_per_job:
            raise PlanError(
                "serve %s of %s needs %d nodes for %s, but partition %s allows %d per job: pass --nodes %d "
                "(the deployment then holds fewer requests) or lower --concurrency / --rate"
                % (
                    mode,
                    model.label,
                    nodes,
                    _load_words(work),
                    part.name,
                    part.max_nodes_per_job,
                    part.max_nodes_per_job,
                )
            )
        return plan_serving(
            site, model, work, mode, partition, nodes, precision, aggregated, allowed, nvlink_kv, reasons, profile
        )
    sized = nodes if nodes > 0 else None
    refused: List[Tuple[str, str]] = []
    deps: Dict[str, Deployment] = {}
    rep = _best_replica(sz, sized)
    if rep is None:
        raise PlanError(
            "%s does not fit any worker on %s (%d x %s, %.0f GB each) with one %d-token request%s"
            % (
                model.label,
                part.name,
                hw.nt.gpus,
                hw.nt.gpu_model,
                hw.nt.gpu_memory_gb,
                work.context,
                " on %d nodes" % sized if sized else "",
            )
        )
    w, count, used, why = rep
    if "router" in allowed:
        deps["router"] = _replicas(sz, "router", w, count, used, why)
    on = sized if sized is not None else used
    if "disaggregated" in allowed:
        for pre, dec in _disagg_sizes(sz, on):
            d = _disagg(sz, pre, dec, sized, nvlink_kv)
            if d is not None and (sized is None or d.nodes <= sized):
                deps["disaggregated"] = d
                break
        else:
            refused.append(
                (
                    "disaggregated",
                    "one prefill and one decode worker do not fit on %d node%s" % (on, "s" if on != 1 else ""),
                )
            )
    if aggregated is not None and aggregated[0] is not None and "aggregated" in allowed:
        lay = aggregated[0]
        aw = sz.worker(lay.tp, lay.pp)
        if aw is not None:
            deps["aggregated"] = _replicas(sz, "aggregated", aw, lay.dp, lay.nodes, aggregated[1])
        else:
            refused.append(("aggregated", "one server of TP%d x PP%d holds no full-context request" % (lay.tp, lay.pp)))
    for m in MODES:
        if m not in deps and m not in (r[0] for r in refused):
            refused.append((m, (reasons or {}).get(m, "not sized for this launcher")))
    if mode not in deps:
        why_not = dict(refused).get(mode, "it does not fit")
        raise PlanError("cannot serve %s as %s on %s: %s" % (model.label, mode, part.name, why_not))
    compared = tuple(deps[m] for m in MODES if m in deps)
    return ServePlan(
        site=site.name,
        partition=part.name,
        model=model,
        precision=precision,
        workload=work,
        chosen=deps[mode],
        compared=compared,
        refused=tuple(refused),
    )


def kv_nic_words(hw: Hardware) -> str:
    """The fabric bandwidth one GPU gets, for the KV-transfer sentence."""
    return "%.0f GB/s per GPU" % (hw.nic_node / hw.terms.nic_eff / hw.nt.gpus / 1e9)


# ---------------------------------------------------------------------------
# text


def format_serve_plan(sp: ServePlan) -> str:
    """The plan's words: the chosen deployment role by role, then every mode side by side."""
    wl = sp.workload
    d = sp.chosen
    out = [
        "Serving %s on %s/%s (%s): %d-token prompts, %d output tokens%s"
        % (
            sp.model.label,
            sp.site,
            sp.partition,
            sp.precision,
            wl.input_len,
            wl.output_len,
            ", %d in flight" % wl.concurrency if wl.concurrency else ", %g requests/s" % wl.rate if wl.rate else "",
        ),
        "Mode: %s on %d node%s (%d of %d GPUs used)"
        % (d.mode, d.nodes, "s" if d.nodes != 1 else "", d.gpus, d.nodes * d.gpus_per_node),
    ]
    for r in d.roles:
        w = r.worker
        out.append(
            "  %-8s %d x %s: weights %.1f GB/GPU, KV pool %.1f GB/GPU = %d tokens = %d requests of %d tokens per worker"
            % (r.role, r.count, w.words(), w.weights_gb, w.kv_pool_gb, w.kv_tokens, w.kv_seqs, wl.context)
        )
        out.append("           why: %s" % r.why)
    out.append(
        "Estimate (first order, %s): %.2f requests/s, %.0f output tokens/s, TTFT %.0f ms, TPOT %.1f ms, %d in flight"
        % (
            sp.error_band.split(":")[0],
            d.requests_per_s,
            d.output_tokens_per_s,
            1000 * d.ttft_s,
            1000 * d.tpot_s,
            d.concurrency,
        )
    )
    if d.kv_transfer_s:
        out.append(
            "  KV transfer: %.1f ms per prompt over %s"
            % (1000 * d.kv_transfer_s, "NVLink" if d.kv_over_nvlink else "the fabric")
        )
    for n in d.notes:
        out.append("  note: %s" % n)
    out.append("Compared on the same request shape:")
    out.append(
        "  %-14s %5s %6s %10s %11s %9s %9s" % ("mode", "nodes", "GPUs", "req/s", "out tok/s", "TTFT ms", "TPOT ms")
    )
    for c in sp.compared:
        out.append(
            "  %-14s %5d %6d %10.2f %11.0f %9.0f %9.1f%s"
            % (
                c.mode,
                c.nodes,
                c.gpus,
                c.requests_per_s,
                c.output_tokens_per_s,
                1000 * c.ttft_s,
                1000 * c.tpot_s,
                "  <- chosen" if c is d else "",
            )
        )
    for m, why in sp.refused:
        out.append("  %-14s not possible: %s" % (m, why))
    out.append("Error band: %s." % sp.error_band)
    return "\n".join(out)
