"""Measure, on the GPU this runs on, the shares of peak the cost model's fitted terms claim.

Times large BF16 and FP8 GEMMs (cuBLAS via torch.matmul / torch._scaled_mm), a TP-split GEMM, and
causal attention through PyTorch SDPA (FlashAttention-2 kernels), and prints each as a share of the
GPU's datasheet peak next to the term in slurmgpu.plan.terms.DEFAULT_TERMS that stands for it. One
GPU, about a minute; needs torch with CUDA. Prints JSON with --json.

    python bench/gpu_terms.py [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Callable, Dict, List

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from slurmgpu.plan.terms import DEFAULT_TERMS  # noqa: E402
from slurmgpu.site import lookup  # noqa: E402


def _timed(fn: Callable[[], object], iters: int = 20) -> float:
    """Seconds per call, by CUDA events after a warm-up."""
    import torch

    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / 1000.0 / iters


def measure() -> Dict[str, object]:
    import torch
    import torch.nn.functional as F

    name = torch.cuda.get_device_name()
    facts = lookup(name)
    peak = (facts.bf16_tflops if facts else float("nan")) * 1e12
    arch = facts.arch if facts else ""
    out: Dict[str, object] = {"gpu": name, "torch": torch.__version__, "bf16_peak_tflops": peak / 1e12}
    rows: List[Dict[str, object]] = []
    t = DEFAULT_TERMS

    def gemm(m: int, n: int, k: int) -> float:
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
        return 2.0 * m * n * k / _timed(lambda: a @ b)

    def model(width: float) -> float:  # the cost model's curve at 8192 tokens
        return t.gemm_ceiling(arch, False) * width / (width + t.gemm_w0) * 8192 / (8192 + t.gemm_t0)

    big = gemm(8192, 8192, 8192)
    rows.append({"what": "BF16 GEMM 8192^3", "share": big / peak, "term": "gemm_%s_bf16" % arch, "model": model(8192)})
    # a TP-8 split of an 8192-wide layer: the width knee (gemm_w0)
    narrow = gemm(8192, 1024, 8192)
    rows.append({"what": "BF16 GEMM 8192x8192 -> 1024 (TP 8)", "share": narrow / peak, "term": "gemm_w0",
                 "model": model(1024)})  # fmt: skip
    if hasattr(torch, "_scaled_mm") and hasattr(torch, "float8_e4m3fn"):
        try:
            a8 = torch.randn(8192, 8192, device="cuda").to(torch.float8_e4m3fn)
            b8 = torch.randn(8192, 8192, device="cuda").to(torch.float8_e4m3fn).t()
            one = torch.ones((), device="cuda")
            fp8 = 2.0 * 8192**3 / _timed(lambda: torch._scaled_mm(a8, b8, one, one, out_dtype=torch.bfloat16))
            rows.append({"what": "FP8 GEMM 8192^3 (vs 2x BF16 peak)", "share": fp8 / (2 * peak),
                         "term": "gemm_%s_fp8" % arch, "model": t.gemm_ceiling(arch, True)})  # fmt: skip
        except (RuntimeError, TypeError) as e:  # an older torch spells _scaled_mm differently
            out["fp8_error"] = str(e).splitlines()[0]
    for seq in (4096, 16384):
        q, k, v = (
            torch.randn(1, 32, seq, 128, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3)
        )

        def step(q=q, k=k, v=v) -> None:  # type: ignore[no-untyped-def]
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            o.backward(torch.ones_like(o))

        flops = 6.0 * seq * 32 * 128 * seq  # the cost model's 6 s d_attn per token, causal, fwd + bwd
        share = flops / _timed(step, 10) / peak
        knee = seq / (seq + t.attn_s0)
        sdpa = t.attn_sdpa if arch in ("hopper", "blackwell") else 1.0
        rows.append({"what": "SDPA causal attention s=%d fwd+bwd" % seq, "share": share,
                     "term": "attn x attn_sdpa", "model": t.attn * knee * sdpa})  # fmt: skip
    out["rows"] = rows
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    try:
        import torch
    except ImportError:
        print("torch is not installed: nothing to measure")
        return 2
    if not torch.cuda.is_available():
        print("no CUDA GPU: nothing to measure")
        return 2
    res = measure()
    if args.json:
        print(json.dumps(res, indent=1))
        return 0
    print("%s (torch %s), BF16 peak %.0f TFLOP/s" % (res["gpu"], res["torch"], res["bf16_peak_tflops"]))
    for r in res["rows"]:  # type: ignore[union-attr]
        print(
            "  %-40s measured %5.1f%% of peak  cost model %5.1f%% (%s)  ratio %.2f"
            % (r["what"], 100 * r["share"], 100 * r["model"], r["term"], r["share"] / r["model"])
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
