"""Memory profiles: what one framework keeps on each GPU, as plain data the planner charges.

The planner used to charge one framework's byte counts for every launcher. Frameworks differ
by more than the layout: Megatron-LM keeps fp32 main gradients and an unsharded fp32 master
copy unless told otherwise, FSDP2 keeps fp32 parameters and gathers bf16 copies, DeepSpeed's
ZeRO stages each keep their own buffers, a plain PyTorch DDP program holds fp32 weights, fp32
gradients, DDP's reducer buckets and the bf16 copies autocast saves for backward. So each
launcher adapter (slurmgpu.job.launchers) builds a `MemoryProfile` for the flags it writes,
from the framework's own defaults at the version it targets, and hands it to the planner
inside `Capabilities.memory`; plan/ reads the profile and never imports the adapters.

A profile names, per sharding stage (`zero`, the planner's ZeRO stage as the adapter spells
it), the bytes per parameter of weights, gradients and master copy, which of them shard over
the data-parallel group, and the further copies that stage keeps; `levers` are cheaper
profiles the framework has behind one flag, which the planner may use only by writing that
flag (the plan says which flag bought how many GB). Serving engines instead declare the share
of the GPU they preallocate (`ServeBudget`).

Sizes are bytes per parameter; GB figures are decimal (1e9), as everywhere in plan/.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Dict, Iterable, Optional, Tuple

from ..vocab import RECOMPUTE

GIB = 2.0**30

# Optimizer moments per trained parameter (fp32): Adam m + v = 8; 8-bit Adam 2; SGD momentum 4.
# (The master copy is the profile's: a framework that trains fp32 weights keeps none.)
STATE_BYTES: Dict[str, float] = {"adam": 8.0, "adam8bit": 2.0, "sgd": 4.0}

TERMS = ("weights", "grads", "master", "states")


@dataclass(frozen=True)
class StageBytes:
    """What one sharding stage of one framework keeps per trained parameter, and what it shards.

    `sharded` names the TERMS divided over the sharding group: `group` "dp_cp" is every
    data- and context-parallel rank (Megatron's distributed optimizer, ZeRO, FSDP), "node" the
    DP x CP ranks inside one node (torchtitan's HSDP). Experts shard over the expert-DP ranks.
    """

    zero: int
    weights: float = 2.0  # the stored weights (bf16 2; fp32 4 where the framework trains fp32 parameters)
    grads: float = 2.0  # the gradient buffer
    master: float = 4.0  # fp32 master copy beside 16-bit weights (0: the weights are the master)
    grads_sharded: float = 0.0  # a further gradient copy kept sharded (DeepSpeed ZeRO-1's fp32 partition)
    moments: Optional[float] = None  # the optimizer moments' bytes where the framework sets them (bf16 Adam: 4)
    sharded: Tuple[str, ...] = ()
    group: str = "dp_cp"
    # bf16 copies of the weights held from forward to backward (autocast's casts saved for backward;
    # FSDP parameters left gathered after forward), per parameter of the rank's share of the model
    copies: float = 0.0
    copies_pp: Optional[float] = (
        None  # `copies` with PP > 1 instead, and nothing gathered (FSDP kept gathered under PP)
    )
    head_copy: float = 0.0  # bytes per output-layer parameter left gathered after forward (last stage)
    buckets: float = 0.0  # torch DDP's reducer buckets beside .grad (no gradient_as_bucket_view), when DP > 1
    gathered: float = 0.0  # bytes x largest layer gathered at a time (ZeRO-3/FSDP: the current and the prefetched)
    buffer_gb: float = 0.0  # fixed gradient communication buffers (DeepSpeed's reduce bucket)
    flag: str = ""  # what selects this stage, as the adapter writes it ("--use-distributed-optimizer")
    about: str = ""  # the framework's own words for the stage, for the plan's notes

    def per_param(self, state_bytes: float) -> float:
        """All bytes per parameter before any sharding: the leanest allocation charges this / GPUs."""
        moments = state_bytes if self.moments is None else self.moments
        return self.weights + self.grads + self.grads_sharded + self.master + moments + self.copies + self.buckets


@dataclass(frozen=True)
class Lever:
    """A cheaper profile the framework has behind one flag (bf16 gradient reduction, a 16-bit master
    remainder): the planner uses it only where nothing cheaper fits, and only by writing `flag`."""

    key: str  # what the adapter reads in Options.levers
    flag: str  # what it writes, in the plan's words
    zeros: Tuple[int, ...]  # the stages it applies to
    grads: Optional[float] = None  # the gradient bytes it sets
    master: Optional[float] = None  # the master-copy bytes it sets
    copies: Optional[float] = None  # the copies it sets
    gathered: Optional[float] = None  # the gathered layers it sets
    what: str = ""
    # False: it changes the numerics (bf16 gradient accumulation), so the planner writes it only
    # when no layout of the allocation fits without it, never to buy speed
    lossless: bool = True


@dataclass(frozen=True)
class ServeBudget:
    """How a serving engine sizes its preallocation on each GPU.

    `fraction` > 0: the engine takes that share of the GPU for everything it holds (vLLM's
    gpu_memory_utilization). Otherwise the share for weights + KV pool is (GPU - reserve) / GPU
    with reserve = base + per_token x prefill tokens + per_8gpus x TP x PP / 8 + per_graph x decode
    graph batch, at least `floor_mb` on GPUs above `floor_above_gib` (SGLang's mem_fraction_static).
    `tiers`: (from GiB, prefill tokens, decode graph max batch with TP < 4, with TP >= 4), the
    engine's defaults by GPU memory; `small_names`: GPU models kept on the tier below 70 GiB.
    """

    fraction: float = 0.0
    covers_all: bool = True  # the share holds every term; False: weights + KV pool only
    tiers: Tuple[Tuple[float, int, int, int], ...] = ((0.0, 8192, 512, 512),)
    small_names: Tuple[str, ...] = ()
    base_mb: float = 0.0
    per_token_mb: float = 0.0
    per_8gpus_mb: float = 0.0
    per_graph_mb: float = 2.0  # CUDA graph memory per captured decode batch size (SGLang's estimate)
    floor_mb: float = 0.0
    floor_above_gib: float = 0.0
    flag: str = ""  # the engine's own name for the share, for the plan's words

    def tier(self, capacity_gb: float, gpu: str = "", tp: int = 1) -> Tuple[int, int]:
        """(prefill tokens, decode CUDA-graph max batch) the engine picks on this GPU."""
        gib = capacity_gb * 1e9 / GIB
        small = any(s in gpu.lower() for s in self.small_names)
        chosen = self.tiers[0]
        for t in self.tiers:
            if gib >= t[0] and not (small and t[0] >= 70):
                chosen = t
        return chosen[1], chosen[2] if tp < 4 else chosen[3]

    def share(self, capacity_gb: float, gpu: str = "", tp: int = 1, pp: int = 1) -> float:
        """The share of the GPU the engine preallocates (covers_all) or gives weights + KV (not)."""
        if self.fraction > 0:
            return self.fraction
        tokens, graphs = self.tier(capacity_gb, gpu, tp)
        mib = capacity_gb * 1e9 / 2**20
        reserve = self.base_mb + self.per_token_mb * max(tokens, 2048) + self.per_8gpus_mb * tp * pp / 8.0
        reserve += self.per_graph_mb * graphs
        if mib > self.floor_above_gib * 1024:
            reserve = max(reserve, self.floor_mb)
        return round((mib - reserve) / mib, 3)

    def graph_gb(self, capacity_gb: float, gpu: str = "", tp: int = 1) -> float:
        return self.per_graph_mb * self.tier(capacity_gb, gpu, tp)[1] * 2**20 / 1e9


def _textbook() -> Tuple[StageBytes, ...]:
    base = StageBytes(0, weights=2.0, grads=2.0, master=4.0)
    return (
        base,
        replace(base, zero=1, sharded=("master", "states")),
        replace(base, zero=2, sharded=("grads", "master", "states")),
        replace(base, zero=3, sharded=TERMS, gathered=4.0),
    )


@dataclass(frozen=True)
class MemoryProfile:
    """One framework's memory at the version and flags its launcher writes (see the module doc).

    The default is the ZeRO paper's mixed-precision Adam (2 + 2 + 12 = 16 B/param, ZeRO-1/2/3
    sharding the optimizer / + gradients / + weights): what `make_plan` charges when no launcher
    says otherwise.
    """

    framework: str = "mixed-precision Adam as in the ZeRO paper"
    stages: Tuple[StageBytes, ...] = _textbook()
    levers: Tuple[Lever, ...] = ()
    # FP8: bytes per linear-layer parameter of FP8 weight copies kept across micro-batches
    # (Transformer Engine caches the FP8 weight and its transpose when Megatron passes is_first_microbatch)
    fp8_cache: float = 0.0
    sequence_parallel: bool = True  # with TP, activations outside the TP regions are split over TP
    # routed experts keep the attention's TP when EP divides DP x CP (Megatron's expert-TP, layout.expert_tp);
    # False: with EP > 1 the experts shard over EP only (torchtitan), with EP 1 over TP
    experts_keep_tp: bool = True
    recompute: Tuple[str, ...] = RECOMPUTE  # what the launcher can ask for
    serve: Optional[ServeBudget] = None  # serving engines: how they preallocate
    default_zero: int = 0  # the stage the framework runs when told nothing (memory_flags count savings from it)
    # bytes per logit (sequence x micro-batch x vocab / TP) live on the last stage at the loss: Megatron's
    # vocab-parallel cross entropy keeps the fp32 logits (4); a plain PyTorch program keeps more (program_memory)
    logits_bytes: float = 4.0

    def stage(self, zero: int) -> StageBytes:
        for s in self.stages:
            if s.zero == zero:
                return s
        # a stage the framework does not name: the textbook ZeRO bytes (caps keep the planner off it)
        return next(s for s in _textbook() if s.zero == zero)

    def applied(self, zero: int, levers: Iterable[str] = ()) -> StageBytes:
        """The stage's bytes with the named levers' flags written."""
        st = self.stage(zero)
        for lv in self.levers:
            if lv.key in levers and zero in lv.zeros:
                for name in ("grads", "master", "copies", "gathered"):
                    if getattr(lv, name) is not None:
                        st = replace(st, **{name: getattr(lv, name)})
        return st

    def lever_sets(self, zero: int, lossy: bool = False) -> Tuple[Tuple[str, ...], ...]:
        """The lever combinations to try at `zero`, closest to the framework's defaults first:
        none, then one more lever at a time in the order the profile lists them (the lossless
        ones; `lossy` also those that change the numerics)."""
        keys = [lv.key for lv in self.levers if zero in lv.zeros and (lossy or lv.lossless)]
        return tuple(tuple(keys[:i]) for i in range(len(keys) + 1))

    @property
    def lossy(self) -> bool:
        """Whether a lever changes the numerics (the search tries those last, as a second pass)."""
        return any(not lv.lossless for lv in self.levers)

    def lever(self, key: str) -> Lever:
        return next(lv for lv in self.levers if lv.key == key)

    def leanest(self, state_bytes: float) -> float:
        """The fewest bytes per parameter any stage and lever can hold (the planner's lower bound)."""
        best = None
        for st in self.stages:
            every = tuple(lv.key for lv in self.levers)
            b = self.applied(st.zero, every).per_param(state_bytes)
            best = b if best is None else min(best, b)
        return best if best is not None else 16.0


TEXTBOOK = MemoryProfile()
