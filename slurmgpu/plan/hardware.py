"""The effective hardware a plan runs on: peak FLOP/s, HBM, NVLink and fabric bandwidth of a
partition, and the efficiency factors that turn data-sheet figures into achieved ones."""

from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional, Tuple

from ..site import NodeType, Partition, Site
from ..site.calibration import Factors
from .placement import strict_kinds

# Cost-model constants; docs/planner.md says where each comes from.
GEMM_EFF = 0.60  # share of dense peak that large transformer GEMMs sustain (GPUs without gemm_eff)


ATTN_EFF = 0.33  # FlashAttention's share of the BF16 peak (GPUs without gemm_eff)


# Shape knees of the GEMM efficiency curve eff = ceiling x w/(w + GEMM_W0) x t/(t + GEMM_T0), where w
# is the TP-sharded width and t the tokens of one micro-batch on one rank (small GEMMs do not fill
# the SMs); fitted on bench/data/calibration_runs.tsv.
GEMM_W0 = 500.0


GEMM_T0 = 60.0


ATTN_S0 = 3200.0  # FlashAttention reaches half its ceiling at this many keys (shorter: fewer tiles per query)


# Memory-bound work (norms, activations, dropout, softmax statistics, residual adds, MoE
# permutation): HBM passes over each stored activation byte per layer, forward + backward, plus
# FP8 casts (amax + quantise of each GEMM input) as bytes per token per hidden unit.
MEM_PASSES = 10.0


FP8_CAST_BYTES = 12.0


LAYER_OVERHEAD_S = 8e-6  # kernel launches and host latency per layer per micro-batch (fwd + bwd)


# Share of each collective's time that is not hidden behind compute.
TP_EXPOSED = 0.175  # TP all-reduce / RS+AG (sequence parallel, partial comm-GEMM overlap)


DP_EXPOSED = 0.05  # gradient reduce-scatter / param all-gather: bucketed, overlapped with backward


EP_A2A_EFF = 0.98  # all-to-all bandwidth / ring bandwidth; fitted on only two measured MoE runs (weak)


LINK_EFF = 0.80  # ring all-reduce bus bandwidth / one direction of the link (nccl-tests: 368 of 450 GB/s)


NIC_EFF = 0.92  # achieved / line rate per NIC (NCCL maintainers: 46-48 GB/s on 400 Gb/s NDR)


LATENCY_S = 10e-6  # one small collective or hop (decode steps are latency-bound)


FABRIC_WORDS = {
    "infiniband": "InfiniBand",
    "roce": "RoCE",
    "efa": "EFA",
    "slingshot": "Slingshot",
    "ethernet": "Ethernet",
}


LINK_WORDS = {"nvlink": "NVLink", "xgmi": "Infinity Fabric", "pcie": "PCIe"}


@dataclass(frozen=True)
class Hardware:
    """The planner's view of one partition: peak FLOP/s and the bandwidths of each link."""

    site: str
    partition: Partition
    nt: NodeType
    peak: float  # FLOP/s per GPU at the requested precision
    peak_bf16: float
    gemm_eff: float  # large-GEMM share of `peak` (the linear layers run at the requested precision)
    attn_eff: float  # FlashAttention's share of `peak_bf16` (attention stays BF16 under FP8)
    link_bw: float  # B/s a ring collective gets per GPU on the fast link
    nic_node: float  # B/s all compute NICs of a node deliver
    hbm: float  # B/s
    notes: Tuple[str, ...]
    # kinds whose groups must stay in one NVLink domain (rules.strict_kinds of the site's policy.groups)
    strict_kinds: Tuple[str, ...] = ("tp", "cp", "ep")
    calibration: Optional[Factors] = None  # the site's fitted efficiency in effect (plan.calibration)

    @property
    def link_words(self) -> str:
        return "%g GB/s %s" % (self.nt.link_gbs, LINK_WORDS.get(self.nt.link, self.nt.link))

    def nic_words(self) -> str:
        """The fabric's line rate per GPU, e.g. '400 Gb/s InfiniBand'."""
        per = self.nic_node / NIC_EFF * 8 / 1e9 / self.nt.gpus
        return "%g Gb/s %s" % (round(per, 1), FABRIC_WORDS.get(self.nt.fabric, self.nt.fabric))

    @property
    def fabric_name(self) -> str:
        return FABRIC_WORDS.get(self.nt.fabric, self.nt.fabric)

    @property
    def link_name(self) -> str:
        return LINK_WORDS.get(self.nt.link, self.nt.link)


def hardware(site: Site, partition: Optional[str], precision: str = "bf16") -> Hardware:
    from ..site import lookup

    part = site.partition(partition)
    nt = site.node_types[part.node_type]
    notes: List[str] = []
    facts = lookup(nt.gpu_model)
    key = facts.key if facts else None
    peak_bf16 = nt.bf16_tflops * 1e12
    peak = peak_bf16
    known = facts.gemm_eff if facts is not None and facts.gemm_eff[0] else None
    gemm_eff = known[0] if known else GEMM_EFF
    attn_eff = known[2] if known else ATTN_EFF
    if precision == "fp8":
        if facts is not None and not facts.fp8:
            notes.append("%s has no FP8 tensor cores: FP8 is planned at BF16 speed" % nt.gpu_model)
        elif key is None:
            notes.append("FP8 support of %s is unknown: planned at BF16 speed" % nt.gpu_model)
        else:
            peak = 2 * peak_bf16
            if known and known[1]:
                gemm_eff = known[1]
            notes.append(
                "FP8 on the linear layers only (2x the BF16 peak, %.0f%% of it sustained); attention and "
                "memory-bound work stay BF16; master weights and optimizer stay 16/32-bit; MFU is against "
                "the FP8 peak" % (100 * gemm_eff)
            )
    if precision == "fp16" and key == "v100":
        notes.append("V100's 'bf16_tflops' is its FP16 figure")
    gbps = nt.fabric_gbps
    if gbps <= 0:
        gbps = 100.0
        notes.append("the site lists no compute NIC speed for %s: assumed 100 Gb/s per node" % nt.name)
    hbm = facts.hbm_for(nt.gpu_memory_gb) if facts is not None else 0.0
    if not hbm:
        hbm = nt.bf16_tflops * 3.39  # H100's ratio (3.35 TB/s per 989 TFLOP/s)
    hw = Hardware(
        site=site.name,
        partition=part,
        nt=nt,
        peak=peak,
        peak_bf16=peak_bf16,
        gemm_eff=gemm_eff,
        attn_eff=attn_eff,
        link_bw=nt.link_gbs / 2 * LINK_EFF * 1e9,
        nic_node=gbps / 8 * NIC_EFF * 1e9,
        hbm=hbm * 1e9,
        notes=tuple(notes),
        strict_kinds=strict_kinds(site.policy.groups),
    )
    if site.calibration is not None:
        from .calibration import calibrated

        hw = calibrated(hw, site.calibration, precision)
    return hw


def _hbm_known(hw: Hardware) -> bool:
    from ..site import lookup

    facts = lookup(hw.nt.gpu_model)
    return bool(facts and facts.hbm_gbs)
