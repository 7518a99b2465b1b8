"""Measured figures from a job log: the frameworks' own progress lines, read as they print them.

Each reader follows the print statement of its framework at the version slurmgpu writes flags for
(docs/report.md lists the file and line of each); tests/data/report holds recorded lines. What a
reader finds is a series of `Sample`s (one per logged interval) and the peak memory lines; the
steady state is the median over the samples after warm-up, because the first intervals carry
compilation, allocator growth and data-loader start, and a checkpoint save makes one late spike.

Units: every figure here is converted to seconds, tokens per second per GPU and GB (1e9 bytes,
the plan's unit), and the framework's own label is kept in `memory_kind`.
"""

from __future__ import annotations

import re
import statistics
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

GIB = 1024.0**3 / 1e9  # GB per GiB
MIB = 1024.0**2 / 1e9  # GB per MiB
MAX_EVIDENCE = 3
WARMUP_SHARE = 0.1  # default warm-up: the first logged interval and every step up to 10 % of the last one

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_NUM = r"([0-9][0-9,]*(?:\.[0-9]*)?(?:[eE][-+]?[0-9]+)?)"


def _f(text: str) -> float:
    return float(text.replace(",", ""))


@dataclass(frozen=True)
class Sample:
    """One logged interval: the framework's figures at `step` (None where it prints none)."""

    step: int
    line: int
    step_time_s: Optional[float] = None
    tokens_per_s_gpu: Optional[float] = None
    samples_per_s: Optional[float] = None  # sequences per second, all GPUs
    tflops_gpu: Optional[float] = None
    mfu: Optional[float] = None  # the framework's own MFU (its FLOP count and peak), a fraction
    global_batch: Optional[int] = None
    key: str = ""  # which engine/replica printed it (serving), for summing over replicas


@dataclass(frozen=True)
class Memory:
    """One memory report line: peak per GPU in GB and what the framework calls it."""

    gb: float
    kind: str
    line: int
    rank: Optional[int] = None


@dataclass(frozen=True)
class Serving:
    """A serving benchmark's summary (vLLM `vllm bench serve`, SGLang `bench_serving`)."""

    line: int
    output_tokens_per_s: Optional[float] = None  # all servers together
    total_tokens_per_s: Optional[float] = None
    request_per_s: Optional[float] = None
    concurrency: Optional[float] = None  # the client's limit (max concurrency), when set
    mean_ttft_s: Optional[float] = None
    median_ttft_s: Optional[float] = None
    mean_tpot_s: Optional[float] = None
    median_tpot_s: Optional[float] = None
    completed: Optional[int] = None
    values: Tuple[Tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Measured:
    """What one framework's lines in a log say about the run."""

    framework: str  # megatron | megatron-bridge | torchtitan | deepspeed | hf-trainer | vllm | sglang
    source: str  # which lines, in words
    samples: Tuple[Sample, ...] = ()
    memory: Tuple[Memory, ...] = ()
    serving: Optional[Serving] = None
    whole_run: bool = False  # the framework prints one average over the whole run (warm-up included)
    evidence: Tuple[Tuple[int, str], ...] = ()
    notes: Tuple[str, ...] = ()

    def peak_memory(self) -> Optional[Memory]:
        return max(self.memory, key=lambda m: m.gb) if self.memory else None


@dataclass(frozen=True)
class Versions:
    """Versions the log itself states (None where it states none)."""

    nccl: Optional[str] = None
    framework: Optional[str] = None  # "deepspeed 0.19.8", "vllm 0.33.0", ...
    env: Dict[str, str] = field(default_factory=dict)  # the `# slurmgpu-env:` line generated scripts echo


# ---------------------------------------------------------------------------
# Readers, one per framework


_MEGATRON_ITER = re.compile(r"\biteration\s+(\d+)/\s*\d+\s*\|")
_MEGATRON_FIELDS = {
    "elapsed time per iteration (ms)": "ms",
    "throughput per GPU (TFLOP/s/GPU)": "tflops",
    "global batch size": "gbs",
}
_MEM_LINE = re.compile(r"(?:\[Rank (\d+)\] )?\(after (\d+) iterations\) memory \((MB|GB)\)(.*)$")


def _pairs(text: str) -> Dict[str, str]:
    """'a: 1 | b: 2 |' -> {'a': '1', 'b': '2'} (Megatron's ' | '-separated log fields)."""
    out: Dict[str, str] = {}
    for part in text.split("|"):
        k, sep, v = part.partition(":")
        if sep:
            out[k.strip()] = v.strip()
    return out


def read_megatron(lines: Sequence[str]) -> Optional[Measured]:
    """Megatron-LM `training_log` (megatron/training/training.py) and Megatron-Bridge's copy of it
    (train_utils.py): ' iteration N/M | ... | elapsed time per iteration (ms): X | throughput per
    GPU (TFLOP/s/GPU): Y | ... | global batch size: B |', and `report_memory` lines
    '[Rank r] (after N iterations) memory (MB) | allocated: .. | max allocated: ..' (Megatron-LM, MiB)
    or '... memory (GB) | mem-max-allocated-gigabytes: ..' (Bridge, 1e9 bytes)."""
    samples: List[Sample] = []
    memory: List[Memory] = []
    evidence: List[Tuple[int, str]] = []
    bridge = False
    for n, line in enumerate(lines, 1):
        m = _MEGATRON_ITER.search(line)
        if m:
            f = _pairs(line[m.end() :])
            ms = f.get("elapsed time per iteration (ms)")
            if ms is None:
                continue
            try:
                samples.append(
                    Sample(
                        step=int(m.group(1)),
                        line=n,
                        step_time_s=_f(ms) / 1000.0,
                        tflops_gpu=_f(f["throughput per GPU (TFLOP/s/GPU)"])
                        if "throughput per GPU (TFLOP/s/GPU)" in f
                        else None,
                        global_batch=int(f["global batch size"]) if f.get("global batch size", "").isdigit() else None,
                    )
                )
            except ValueError:
                continue
            if len(evidence) < MAX_EVIDENCE:
                evidence.append((n, line.strip()))
            continue
        mm = _MEM_LINE.search(line)
        if mm:
            f = _pairs(mm.group(4))
            rank = int(mm.group(1)) if mm.group(1) else None
            if mm.group(3) == "MB":
                for key, kind in (("max reserved", "max reserved"), ("max allocated", "max allocated")):
                    if key in f:
                        memory.append(Memory(_f(f[key]) * MIB, kind, n, rank))
                        break
            else:
                bridge = True
                for key, kind in (
                    ("mem-max-reserved-gigabytes", "max reserved"),
                    ("mem-max-allocated-gigabytes", "max allocated"),
                ):
                    if key in f:
                        memory.append(Memory(_f(f[key]), kind, n, rank))
                        break
            if len(evidence) < MAX_EVIDENCE + 1:
                evidence.append((n, line.strip()))
    if not samples and not memory:
        return None
    name = "megatron-bridge" if bridge else "megatron"
    return Measured(
        framework=name,
        source="%s training log (iteration lines: elapsed time per iteration; memory report lines)"
        % ("Megatron-Bridge" if bridge else "Megatron-LM"),
        samples=tuple(samples),
        memory=tuple(memory),
        evidence=tuple(evidence),
    )


_TITAN = re.compile(
    r"(?<!validate )\bstep:\s*(\d+)\s.*?\bmemory:\s*" + _NUM + r"GiB\(.*?\btps:\s*" + _NUM + r"(?:.*?\btflops:\s*"
    r"" + _NUM + r")?(?:.*?\bmfu:\s*(?:" + _NUM + r"%|N/A))?"
)


def read_torchtitan(lines: Sequence[str]) -> Optional[Measured]:
    """torchtitan `MetricsProcessor.log` (torchtitan/components/metrics.py): 'step: N  loss: ..
    grad_norm: ..  memory: X.XXGiB(P%)  tps: T  tflops: F  mfu: M%' in colour; tps is tokens per
    second per GPU, memory the peak reserved GiB, mfu against the BF16 peak ('N/A' under FP8)."""
    samples: List[Sample] = []
    memory: List[Memory] = []
    evidence: List[Tuple[int, str]] = []
    for n, raw in enumerate(lines, 1):
        if "tps:" not in raw:
            continue
        line = _ANSI.sub("", raw)
        m = _TITAN.search(line)
        if not m:
            continue
        step, mem, tps, tflops, mfu = m.groups()
        samples.append(
            Sample(
                step=int(step),
                line=n,
                tokens_per_s_gpu=_f(tps),
                tflops_gpu=_f(tflops) if tflops else None,
                mfu=_f(mfu) / 100.0 if mfu else None,
            )
        )
        memory.append(Memory(_f(mem) * GIB, "max reserved", n))
        if len(evidence) < MAX_EVIDENCE:
            evidence.append((n, line.strip()))
    if not samples:
        return None
    return Measured(
        framework="torchtitan",
        source="torchtitan metrics lines (step, memory, tps, tflops, mfu)",
        samples=tuple(samples),
        memory=tuple(memory),
        evidence=tuple(evidence),
    )


_DS = re.compile(
    r"epoch=\d+/micro_step=\d+/global_step=(\d+), RunningAvgSamplesPerSec=(\S+), CurrSamplesPerSec=" + _NUM
    + r", MemAllocated=" + _NUM + r"GB, MaxMemAllocated=" + _NUM + r"GB"
)  # fmt: skip


def read_deepspeed(lines: Sequence[str]) -> Optional[Measured]:
    """DeepSpeed `ThroughputTimer.stop` (deepspeed/utils/timer.py), every `steps_per_print` steps:
    'epoch=E/micro_step=M/global_step=G, RunningAvgSamplesPerSec=.., CurrSamplesPerSec=S,
    MemAllocated=..GB, MaxMemAllocated=XGB'; samples are sequences of the whole job (train_batch_size
    per step), memory is allocated bytes / 1024**3 although printed as GB."""
    samples: List[Sample] = []
    memory: List[Memory] = []
    evidence: List[Tuple[int, str]] = []
    for n, line in enumerate(lines, 1):
        if "CurrSamplesPerSec=" not in line:
            continue
        m = _DS.search(line)
        if not m:
            continue
        samples.append(Sample(step=int(m.group(1)), line=n, samples_per_s=_f(m.group(3))))
        memory.append(Memory(_f(m.group(5)) * GIB, "max allocated", n))
        if len(evidence) < MAX_EVIDENCE:
            evidence.append((n, line.strip()))
    if not samples:
        return None
    return Measured(
        framework="deepspeed",
        source="DeepSpeed throughput timer lines (CurrSamplesPerSec, MaxMemAllocated)",
        samples=tuple(samples),
        memory=tuple(memory),
        evidence=tuple(evidence),
    )


def _hf_value(line: str, key: str) -> Optional[float]:
    m = re.search(r"['\"]%s['\"]:\s*['\"]?%s['\"]?" % (re.escape(key), _NUM), line)
    return _f(m.group(1)) if m else None


def read_hf_trainer(lines: Sequence[str]) -> Optional[Measured]:
    """Hugging Face Trainer's end-of-training metrics (transformers trainer.py `_finalize_training`,
    printed by ProgressCallback/PrinterCallback as a dict, floats as '{:.4g}' strings in 5.x):
    {'train_runtime': .., 'train_samples_per_second': .., 'train_steps_per_second': .., ...}. One
    average over the whole run, warm-up included: the Trainer prints no per-step time."""
    for n, line in enumerate(lines, 1):
        if "train_samples_per_second" not in line:
            continue
        sps = _hf_value(line, "train_samples_per_second")
        steps = _hf_value(line, "train_steps_per_second")
        if sps is None:
            continue
        sample = Sample(
            step=0,
            line=n,
            samples_per_s=sps,
            step_time_s=1.0 / steps if steps else None,
        )
        return Measured(
            framework="hf-trainer",
            source="Hugging Face Trainer train metrics (train_samples_per_second, train_steps_per_second)",
            samples=(sample,),
            whole_run=True,
            evidence=((n, line.strip()),),
            notes=("the Trainer prints one average over the whole run: warm-up is included",),
        )
    return None


_BENCH_HEAD = re.compile(r"=+ Serving Benchmark Result =+")
_BENCH_KV = re.compile(r"^\s*([A-Za-z][^:]*?):\s+(\S+)\s*$")


def _bench(lines: Sequence[str]) -> Optional[Tuple[int, Dict[str, str]]]:
    """The last 'Serving Benchmark Result' block: its first line and 'Key: value' pairs."""
    start = None
    for n, line in enumerate(lines):
        if _BENCH_HEAD.search(line):
            start = n
    if start is None:
        return None
    vals: Dict[str, str] = {}
    for line in lines[start + 1 : start + 80]:
        if re.match(r"^\s*=+\s*$", line):
            break
        m = _BENCH_KV.match(line)
        if m:
            vals.setdefault(m.group(1).strip(), m.group(2))
    return start + 1, vals


def _serving(line: int, vals: Dict[str, str]) -> Serving:
    def num(*keys: str, scale: float = 1.0) -> Optional[float]:
        for k in keys:
            try:
                return _f(vals[k]) * scale
            except (KeyError, ValueError):
                continue
        return None

    done = num("Successful requests")
    return Serving(
        line=line,
        output_tokens_per_s=num("Output token throughput (tok/s)"),
        total_tokens_per_s=num("Total token throughput (tok/s)"),
        request_per_s=num("Request throughput (req/s)"),
        concurrency=num("Maximum request concurrency", "Max request concurrency"),
        mean_ttft_s=num("Mean TTFT (ms)", scale=1e-3),
        median_ttft_s=num("Median TTFT (ms)", scale=1e-3),
        mean_tpot_s=num("Mean TPOT (ms)", scale=1e-3),
        median_tpot_s=num("Median TPOT (ms)", scale=1e-3),
        completed=int(done) if done is not None else None,
        values=tuple(sorted(vals.items())),
    )


_VLLM_STATS = re.compile(
    r"(?:Engine (\d+): |(\d+ Engines Aggregated): )?Avg prompt throughput: " + _NUM + r" tokens/s, Avg generation "
    r"throughput: " + _NUM + r" tokens/s, Running: (\d+) reqs"
)  # fmt: skip
_VLLM_LOAD = re.compile(r"Model loading took " + _NUM + r" GiB memory")


def read_vllm(lines: Sequence[str]) -> Optional[Measured]:
    """vLLM 0.33: the `vllm bench serve` summary (vllm/benchmarks/serve.py: '====== Serving
    Benchmark Result ======', 'Output token throughput (tok/s):', 'Median TPOT (ms):', ...), the
    engines' periodic stats (vllm/v1/metrics/loggers.py: 'Engine 000: Avg prompt throughput: X
    tokens/s, Avg generation throughput: Y tokens/s, Running: N reqs, ...', or 'K Engines Aggregated:'
    under --aggregate-engine-logging) and the workers' 'Model loading took X GiB memory'
    (gpu_model_runner.py)."""
    samples: List[Sample] = []
    memory: List[Memory] = []
    evidence: List[Tuple[int, str]] = []
    for n, line in enumerate(lines, 1):
        if "Avg generation throughput" in line:
            m = _VLLM_STATS.search(line)
            if m and int(m.group(5)) > 0:  # an engine with requests running (idle ones log at debug)
                key = m.group(1) or m.group(2) or "0"  # --aggregate-engine-logging: one line for all engines
                samples.append(Sample(step=len(samples), line=n, tokens_per_s_gpu=_f(m.group(4)), key=key))
                if len(evidence) < MAX_EVIDENCE:
                    evidence.append((n, line.strip()))
        elif "Model loading took" in line:
            m = _VLLM_LOAD.search(line)
            if m:
                memory.append(Memory(_f(m.group(1)) * GIB, "model weights (loaded)", n))
    bench = _bench(lines)
    if bench is not None and "Backend" in bench[1]:
        bench = None  # SGLang's bench_serving prints the same header with a Backend line
    return _engine_measured(
        "vllm", ("vLLM `vllm bench serve` summary", "vLLM engine stats lines (generation throughput)"),
        lines, bench, samples, memory, evidence,
    )  # fmt: skip


_SGL_DECODE = re.compile(r"Decode batch\b.*?#running-req: (\d+),.*?gen throughput \(token/s\): " + _NUM)
_SGL_PREFIX = re.compile(r"^\[[^\]]*?\bDP(\d+)\b")
_SGL_LOAD = re.compile(r"Load weight end\..*?mem usage=" + _NUM + " GB")


def read_sglang(lines: Sequence[str]) -> Optional[Measured]:
    """SGLang 0.5.23: `python -m sglang.bench_serving` (sglang/benchmark/serving.py, the same summary
    keys as vLLM's plus 'Backend:'), the schedulers' 'Decode batch, #running-req: N, ..., gen
    throughput (token/s): X, #queue-req: Q' (metrics_reporter.py; '[time DPd TPt]' prefix) and
    'Load weight end. ... mem usage=X GB.' (model_runner.py; X is GiB: bytes / (1 << 30))."""
    samples: List[Sample] = []
    memory: List[Memory] = []
    evidence: List[Tuple[int, str]] = []
    for n, line in enumerate(lines, 1):
        if "gen throughput (token/s)" in line:
            m = _SGL_DECODE.search(line)
            if m and int(m.group(1)) > 0:
                p = _SGL_PREFIX.search(line)
                samples.append(
                    Sample(step=len(samples), line=n, tokens_per_s_gpu=_f(m.group(2)), key=p.group(1) if p else "0")
                )
                if len(evidence) < MAX_EVIDENCE:
                    evidence.append((n, line.strip()))
        elif "Load weight end" in line:
            m = _SGL_LOAD.search(line)
            if m:
                memory.append(Memory(_f(m.group(1)) * GIB, "model weights (loaded)", n))
    bench = _bench(lines)
    if bench is not None and "Backend" not in bench[1]:
        bench = None
    return _engine_measured(
        "sglang", ("SGLang bench_serving summary", "SGLang scheduler decode lines (gen throughput)"),
        lines, bench, samples, memory, evidence,
    )  # fmt: skip


def _engine_measured(
    framework: str,
    sources: Tuple[str, str],
    lines: Sequence[str],
    bench: Any,
    samples: List[Any],
    memory: List[Any],
    evidence: List[Tuple[int, str]],
) -> Optional[Measured]:
    """A serving engine's measurement: its benchmark summary when the log has one (sources[0]),
    else its own periodic throughput lines (sources[1]); None when the log has neither."""
    if not samples and not memory and bench is None:
        return None
    serving = _serving(*bench) if bench is not None else None
    if bench is not None:
        evidence.insert(0, (bench[0], lines[bench[0] - 1].strip()))
    return Measured(
        framework=framework,
        source=sources[0] if serving else sources[1],
        samples=tuple(samples),
        memory=tuple(memory),
        serving=serving,
        evidence=tuple(evidence),
    )


READERS: Dict[str, Callable[[Sequence[str]], Optional[Measured]]] = {
    "megatron": read_megatron,  # also Megatron-Bridge (the same training_log)
    "torchtitan": read_torchtitan,
    "deepspeed": read_deepspeed,
    "hf-trainer": read_hf_trainer,
    "vllm": read_vllm,
    "sglang": read_sglang,
}
FORMATS = tuple(READERS)  # `report --format` choices (slurmgpu.vocab.REPORT_FORMATS)

# the format a launcher's program prints (None: a user program, any format)
LAUNCHER_FORMAT: Dict[str, Optional[str]] = {
    "megatron": "megatron",
    "nemo": "megatron",
    "torchtitan": "torchtitan",
    "deepspeed": "deepspeed",
    "accelerate": "hf-trainer",
    "vllm": "vllm",
    "sglang": "sglang",
    "torchrun": None,
    "srun": None,
}


def read_all(text: str) -> List[Measured]:
    """Every format found in the log, in READERS order."""
    lines = text.splitlines()
    out = []
    for reader in READERS.values():
        got = reader(lines)
        if got is not None:
            out.append(got)
    return out


# ---------------------------------------------------------------------------
# Steady state


def default_warmup(samples: Sequence[Sample]) -> int:
    """Steps that count as warm-up: the first logged interval, and every step up to 10 % of the last."""
    if not samples:
        return 0
    first = min(s.step for s in samples)
    last = max(s.step for s in samples)
    return max(first, int(WARMUP_SHARE * last))


def steady(samples: Sequence[Sample], warmup: Optional[int] = None) -> Tuple[Tuple[Sample, ...], int, bool]:
    """(samples after warm-up, the warm-up in steps, whether any were left): with none left the
    whole series is returned and the flag says so."""
    w = default_warmup(samples) if warmup is None else warmup
    kept = tuple(s for s in samples if s.step > w)
    if kept:
        return kept, w, True
    return tuple(samples), w, False


def median_of(samples: Sequence[Sample], name: str) -> Optional[float]:
    vals = [getattr(s, name) for s in samples if getattr(s, name) is not None]
    return statistics.median(vals) if vals else None


def spread_of(samples: Sequence[Sample], name: str) -> Optional[Tuple[float, float]]:
    vals = [getattr(s, name) for s in samples if getattr(s, name) is not None]
    return (min(vals), max(vals)) if vals else None


def replica_total(samples: Sequence[Sample]) -> Optional[float]:
    """Serving engine stats: the median of each engine/replica's series, summed over them."""
    by: Dict[str, List[float]] = {}
    for s in samples:
        if s.tokens_per_s_gpu is not None:
            by.setdefault(s.key, []).append(s.tokens_per_s_gpu)
    if not by:
        return None
    return sum(statistics.median(v) for v in by.values())


# ---------------------------------------------------------------------------
# Versions


_NCCL = re.compile(r"\bNCCL version (\d+\.\d+\.\d+[^\s,]*)")
_FRAMEWORK_VERSIONS = (
    ("deepspeed", re.compile(r"DeepSpeed info: version=([^,\s]+)")),
    ("vllm", re.compile(r"Initializing a V1 LLM engine \(v([^)\s]+)\)")),
)
_ENV = re.compile(r"^[ \t]*(?:\S+: )?# slurmgpu-env:([^\r\n]*)$", re.M)


def read_versions(text: str) -> Versions:
    """NCCL's version line (printed at NCCL_DEBUG=WARN and INFO), the framework's own version line
    where it prints one, and the `# slurmgpu-env:` line generated scripts echo."""
    m = _NCCL.search(text)
    nccl = m.group(1) if m else None
    fw = None
    for name, rx in _FRAMEWORK_VERSIONS:
        mm = rx.search(text)
        if mm:
            fw = "%s %s" % (name, mm.group(1))
            break
    env: Dict[str, str] = {}
    me = _ENV.search(text)
    if me:
        for k, v in re.findall(r"([A-Za-z0-9_.-]+)=(\S*)", me.group(1)):
            # distribution names as PEP 503 normalises them (megatron_core and megatron-core are one)
            env[k if k in ("nodes", "env_hash", "image") else re.sub(r"[-_.]+", "-", k.lower())] = v
    return Versions(nccl=nccl, framework=fw, env=env)


def with_notes(m: Measured, *notes: str) -> Measured:
    return replace(m, notes=m.notes + tuple(notes))


def describe(m: Measured) -> Dict[str, Any]:
    """A summary of what was read, for --json."""
    peak = m.peak_memory()
    return {
        "framework": m.framework,
        "source": m.source,
        "intervals": len(m.samples),
        "memory_lines": len(m.memory),
        "peak_memory": None if peak is None else {"gb": round(peak.gb, 3), "kind": peak.kind, "line": peak.line},
        "whole_run_average": m.whole_run,
        "evidence": [{"line": n, "text": t} for n, t in m.evidence],
        "notes": list(m.notes),
    }
