"""The effective hardware a plan runs on: peak FLOP/s, HBM, NVLink and fabric bandwidth of a
partition, and the efficiency factors that turn data-sheet figures into achieved ones."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import List, Optional, Tuple

from ..site import NodeType, Partition, Site
from ..site.calibration import Factors
from .placement import strict_kinds
from .terms import DEFAULT_TERMS, CostTerms

# Link constants; docs/planner.md says where each comes from. The efficiency terms a fit may move
# (GEMM and attention shares, overheads, overlap) are slurmgpu.plan.terms.CostTerms.
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
    terms: CostTerms = DEFAULT_TERMS  # the cost model's fitted terms this plan uses
    arch: str = ""  # tensor-core generation (GpuFacts.arch)
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


def hardware(
    site: Site, partition: Optional[str], precision: str = "bf16", terms: Optional[CostTerms] = None
) -> Hardware:
    from ..site import lookup

    terms = terms or DEFAULT_TERMS

    part = site.partition(partition)
    nt = site.node_types[part.node_type]
    notes: List[str] = []
    facts = lookup(nt.gpu_model)
    key = facts.key if facts else None
    peak_bf16 = nt.bf16_tflops * 1e12
    peak = peak_bf16
    arch = facts.arch if facts is not None else ""
    gemm_eff = terms.gemm_ceiling(arch, False)
    attn_eff = terms.attn
    if precision == "fp8":
        if facts is not None and not facts.fp8:
            notes.append("%s has no FP8 tensor cores: FP8 is planned at BF16 speed" % nt.gpu_model)
        elif key is None:
            notes.append("FP8 support of %s is unknown: planned at BF16 speed" % nt.gpu_model)
        else:
            peak = 2 * peak_bf16
            if arch:
                gemm_eff = terms.gemm_ceiling(arch, True)
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
        terms=terms,
        arch=arch,
    )
    if site.calibration is not None:
        from .calibration import calibrated

        hw = calibrated(hw, site.calibration, precision)
    return hw


def with_terms(hw: Hardware, terms: CostTerms) -> Hardware:
    """The same partition under other cost terms (the fitted efficiencies follow the terms)."""
    gemm = terms.gemm_ceiling(hw.arch, hw.peak > hw.peak_bf16)
    out = replace(hw, terms=terms, gemm_eff=gemm, attn_eff=terms.attn)
    if hw.calibration is not None:  # the site's measured efficiency still wins (plan.calibration)
        from .calibration import with_factors

        out = with_factors(out, hw.calibration)
    return out


def _hbm_known(hw: Hardware) -> bool:
    from ..site import lookup

    facts = lookup(hw.nt.gpu_model)
    return bool(facts and facts.hbm_gbs)
