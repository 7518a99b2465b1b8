#!/usr/bin/env python3
"""Measure what a plain PyTorch training program holds on one GPU, beside what the plan promised.

The planner charges a program torchrun/srun only starts as PyTorch's defaults: fp32 weights and
gradients, AdamW's fp32 moments, the bf16 copies torch.autocast saves for backward, and the
activations of its layers (slurmgpu/job/launchers/base.py program_memory). This builds the
planned model's shape (slurmgpu.plan.model_from_params / the catalogue) as such a program, with
FlashAttention (scaled_dot_product_attention) and bf16 autocast, runs a few optimizer steps of
the planned micro-batches, and prints the allocator's peaks and the step time next to the plan's
terms. It needs a CUDA GPU and torch; nothing in the test suite runs it.

    python3 bench/program_memory.py --model 1B --seq 4096 --micro-batches 8 --plan-json plan.json
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def build(m, torch):  # type: ignore[no-untyped-def]
    nn, F = torch.nn, torch.nn.functional

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            h, hd = m.hidden, m.hd
            self.n1, self.n2 = nn.RMSNorm(h), nn.RMSNorm(h)
            self.qkv = nn.Linear(h, (m.heads + 2 * m.kv_heads) * hd, bias=False)
            self.o = nn.Linear(m.heads * hd, h, bias=False)
            if m.gated:
                self.up = nn.Linear(h, 2 * m.ffn, bias=False)
            else:
                self.up = nn.Linear(h, m.ffn, bias=False)
            self.down = nn.Linear(m.ffn, h, bias=False)

        def forward(self, x):  # type: ignore[no-untyped-def]
            b, s, _ = x.shape
            hd = m.hd
            q, k, v = self.qkv(self.n1(x)).split([m.heads * hd, m.kv_heads * hd, m.kv_heads * hd], dim=-1)
            q = q.view(b, s, m.heads, hd).transpose(1, 2)
            k = k.view(b, s, m.kv_heads, hd).transpose(1, 2)
            v = v.view(b, s, m.kv_heads, hd).transpose(1, 2)
            gqa = {"enable_gqa": True} if m.kv_heads != m.heads else {}
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True, **gqa)
            x = x + self.o(a.transpose(1, 2).reshape(b, s, -1))
            u = self.up(self.n2(x))
            if m.gated:
                g, u = u.chunk(2, dim=-1)
                u = F.silu(g) * u
            else:
                u = F.gelu(u)
            return x + self.down(u)

    class LM(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.emb = nn.Embedding(m.vocab, m.hidden)
            self.layers = nn.ModuleList(Block() for _ in range(m.layers))
            self.norm = nn.RMSNorm(m.hidden)
            self.out = nn.Linear(m.hidden, m.vocab, bias=False)

        def forward(self, ids):  # type: ignore[no-untyped-def]
            x = self.emb(ids)
            for blk in self.layers:
                x = blk(x)
            return self.out(self.norm(x))

    return LM()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="1B", help="catalogue name or a size (model_from_params)")
    ap.add_argument("--seq", type=int, default=4096)
    ap.add_argument("--micro-batch", type=int, default=1)
    ap.add_argument("--micro-batches", type=int, default=8, help="gradient accumulation steps per optimizer step")
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--plan-json", help="`slurmgpu plan ... --json` output to print beside the measurement")
    ap.add_argument("--shape", help="JSON {layers, hidden, heads, kv_heads, hd, ffn, vocab, gated} instead of --model")
    ns = ap.parse_args()
    import torch

    if ns.shape:
        m = argparse.Namespace(name="shape", **json.loads(ns.shape))
    else:
        from slurmgpu.plan import get_model, model_from_params

        try:
            m = get_model(ns.model)
        except Exception:
            m = model_from_params(ns.model)
    dev = torch.device("cuda")
    model = build(m, torch).to(dev)
    params = sum(p.numel() for p in model.parameters())
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)  # the default (foreach) implementation
    gb = 1e9
    out = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "params": params, "model": m.name}
    times = []
    for step in range(ns.steps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        torch.cuda.reset_peak_memory_stats()
        for _ in range(ns.micro_batches):
            ids = torch.randint(0, m.vocab, (ns.micro_batch, ns.seq), device=dev)
            with torch.autocast("cuda", dtype=torch.bfloat16):
                logits = model(ids)
            loss = torch.nn.functional.cross_entropy(logits.float().view(-1, m.vocab), ids.view(-1))
            loss.backward()
        torch.cuda.synchronize()
        fwd_bwd = torch.cuda.max_memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        opt.step()
        opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
        out["step%d" % step] = {
            "peak_fwd_bwd_gb": round(fwd_bwd / gb, 2),
            "peak_optimizer_step_gb": round(torch.cuda.max_memory_allocated() / gb, 2),
            "reserved_gb": round(torch.cuda.max_memory_reserved() / gb, 2),
            "seconds": round(times[-1], 3),
        }
    free, total = torch.cuda.mem_get_info()
    out["process_used_gb_now"] = round((total - free) / gb, 2)
    out["states_gb_after_step"] = round(torch.cuda.memory_allocated() / gb, 2)  # weights + Adam moments
    out["step_time_s"] = round(sorted(times[1:])[len(times[1:]) // 2], 3) if len(times) > 1 else times[0]
    out["bytes_per_param_states"] = round(torch.cuda.memory_allocated() / params, 2)
    out["tokens_per_s"] = round(ns.micro_batches * ns.micro_batch * ns.seq / out["step_time_s"], 1)
    if ns.plan_json:
        plan = json.loads(Path(ns.plan_json).read_text())
        out["plan"] = {"memory": plan["memory"], "step_time_s": plan["step_time_s"], "mfu": plan["mfu"]}
        allocator = plan["memory"]["total_gb"] - plan["memory"]["overhead_gb"]
        peak = max(out["step%d" % s]["peak_fwd_bwd_gb"] for s in range(ns.steps))
        out["peak_vs_plan_without_overhead"] = round(peak / allocator, 3) if allocator else None
        out["step_vs_plan"] = round(out["step_time_s"] / plan["step_time_s"], 3)
    print(json.dumps(out, indent=1))
    return 0 if math.isfinite(out["step_time_s"]) else 1


if __name__ == "__main__":
    sys.exit(main())
