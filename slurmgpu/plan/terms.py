"""The cost model's fitted terms: every number in the step-time model that is not a datasheet figure.

Datasheet figures (peak FLOP/s, HBM, link and NIC bandwidth) come from the site and
`slurmgpu.site.gpus`; how much of them a real training step sustains does not, so it is a term
here, fitted on measured runs (`slurmgpu.plan.calibrate.fit_terms`) inside the physical bounds
`BOUNDS` states. One frozen value per planning request (`PlanRequest.terms`; default
`DEFAULT_TERMS`), so a site that fits its own runs plans with its own terms and nothing global
changes.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Dict, Tuple


@dataclass(frozen=True)
class CostTerms:
    """Efficiencies, shape knees and overheads of the step-time model (docs/planner.md, section 4)."""

    # share of the precision's dense peak that large training GEMMs sustain, by GPU architecture
    gemm_ampere_bf16: float = 0.80
    gemm_hopper_bf16: float = 0.78
    gemm_hopper_fp8: float = 0.66
    gemm_blackwell_bf16: float = 0.75
    gemm_blackwell_fp8: float = 0.55
    gemm_other: float = 0.60  # GPUs of no known architecture
    attn: float = 0.33  # fused attention's share of the BF16 peak (attention stays BF16 under FP8)
    # PyTorch SDPA's FlashAttention-2 kernels / the fused kernels frameworks like Transformer Engine run
    # (cuDNN, FlashAttention-3) on Hopper and newer, whose tensor-core paths FlashAttention-2 does not
    # use; on Ampere both are FlashAttention-2 class (1)
    attn_sdpa: float = 0.6
    # knees of eff = ceiling x w/(w + gemm_w0) x t/(t + gemm_t0): w the TP-sharded width, t the tokens
    # of one micro-batch on one rank (small GEMMs do not fill the SMs)
    gemm_w0: float = 500.0
    gemm_t0: float = 60.0
    attn_s0: float = 3200.0  # FlashAttention reaches half its ceiling at this many keys
    # memory-bound work: HBM passes over each stored activation byte per layer (fwd + bwd), and FP8
    # casts (amax + quantise of each GEMM input) as bytes per token per hidden unit
    mem_passes: float = 10.0
    fp8_cast_bytes: float = 12.0
    layer_overhead_s: float = 8e-6  # kernel launches and host latency per layer per micro-batch
    tp_exposed: float = 0.175  # share of TP collective time not hidden behind GEMMs
    dp_exposed: float = 0.05  # share of the gradient sync not hidden behind backward (last bucket)
    fsdp_exposed: float = 0.05  # share of FSDP's per-micro-batch gathers and reduce-scatters not prefetched
    cp_exposed: float = 0.1  # share of the CP ring exchange on the critical path even when attention covers it
    # MoE: all-to-all time on the critical path per unit of ring-bandwidth time (the share not
    # overlapped with the other micro-batch's compute, over all-to-all vs ring efficiency)
    ep_exposed: float = 1.0
    grouped_gemm: float = 1.0  # routed experts' grouped GEMMs / a dense GEMM of the same shape
    # per MoE layer per micro-batch (fwd + bwd): router, token counting (a device-to-host sync for
    # dropless grouped GEMMs), permutation and all-to-all setup: host-bound, the same for any batch
    moe_layer_overhead_s: float = 1e-4
    # links: a ring collective's bus bandwidth over one direction of the fast link (nccl-tests: ~370
    # of 450 GB/s on NVLink4 without NVLS), and what the compute NICs deliver of their line rate (NCCL
    # maintainers: 46-48 GB/s on 400 Gb/s NDR)
    link_eff: float = 0.80
    nic_eff: float = 0.92

    def gemm_ceiling(self, arch: str, fp8: bool) -> float:
        """The large-GEMM efficiency of an architecture at BF16 or (where it has it) FP8."""
        return float(getattr(self, gemm_term(arch, fp8)))

    def to_dict(self) -> Dict[str, float]:
        return {f.name: float(getattr(self, f.name)) for f in fields(self)}


def gemm_term(arch: str, fp8: bool) -> str:
    """The field holding an architecture's large-GEMM efficiency at BF16 or (where it has it) FP8."""
    if arch in ("hopper", "blackwell"):
        return "gemm_%s_%s" % (arch, "fp8" if fp8 else "bf16")
    if arch == "ampere":
        return "gemm_ampere_bf16"
    return "gemm_other"


# (low, high) of each term: what the hardware allows, not what fits best. An efficiency is a share
# of a peak (at most 1; large GEMMs reach 0.6-0.9 of peak in cuBLAS/Transformer Engine benchmarks);
# a knee is a size in elements or tokens; an overhead is a time a GPU or host really takes.
BOUNDS: Dict[str, Tuple[float, float]] = {
    "gemm_ampere_bf16": (0.4, 1.0),
    "gemm_hopper_bf16": (0.4, 1.0),
    "gemm_hopper_fp8": (0.3, 1.0),
    "gemm_blackwell_bf16": (0.4, 1.0),
    "gemm_blackwell_fp8": (0.3, 1.0),
    "gemm_other": (0.3, 1.0),
    "attn": (0.15, 0.75),
    "attn_sdpa": (0.3, 1.0),
    "gemm_w0": (50.0, 4000.0),
    "gemm_t0": (8.0, 1000.0),
    "attn_s0": (200.0, 16000.0),
    "mem_passes": (2.0, 40.0),
    "fp8_cast_bytes": (0.0, 40.0),
    "layer_overhead_s": (1e-6, 100e-6),
    "tp_exposed": (0.0, 1.0),
    "dp_exposed": (0.0, 1.0),
    "fsdp_exposed": (0.0, 1.0),
    "cp_exposed": (0.0, 1.0),
    "ep_exposed": (0.05, 2.0),  # 2: nothing hidden and all-to-alls at half the ring bandwidth
    "grouped_gemm": (0.3, 1.0),
    "moe_layer_overhead_s": (0.0, 3e-3),
    # no collective above the line rate; below a quarter of it the install is broken, not inefficient
    "link_eff": (0.25, 1.0),
    "nic_eff": (0.25, 1.0),
}


# What a fresh fit starts from and is pulled towards where the runs say nothing: rounded
# public figures (cuBLAS large-GEMM shares, FlashAttention-2/3 papers' attention shares, NCCL
# all-to-all vs ring), not fitted on any run.
PRIOR_TERMS = CostTerms()


# The terms every plan uses unless the request carries its own: fit_terms over every run of
# bench/data/calibration_runs.tsv (bench/plan_accuracy.py --fit prints them).
DEFAULT_TERMS = CostTerms(
    gemm_ampere_bf16=0.8,
    gemm_hopper_bf16=0.7853,
    gemm_hopper_fp8=0.6798,
    gemm_blackwell_bf16=0.6975,
    gemm_blackwell_fp8=0.5885,
    gemm_other=0.6,
    attn=0.3201,
    attn_sdpa=0.618,
    gemm_w0=485,
    gemm_t0=68.63,
    attn_s0=2800,
    mem_passes=9.7,
    fp8_cast_bytes=10.82,
    layer_overhead_s=8e-06,
    tp_exposed=0.2529,
    dp_exposed=0.06315,
    fsdp_exposed=0.04995,
    cp_exposed=0.1302,
    ep_exposed=0.425,
    grouped_gemm=0.8245,
    moe_layer_overhead_s=0.000113,
    link_eff=0.8,
    nic_eff=0.92,
)
