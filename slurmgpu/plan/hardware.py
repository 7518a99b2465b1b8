"""The effective hardware a plan runs on: peak FLOP/s, HBM, NVLink and fabric bandwidth of a
partition, and the cost terms (`CostTerms`) that turn data-sheet figures into achieved ones.

The one way terms reach the cost model: `hardware()` takes the request's terms (default
`DEFAULT_TERMS`), lays the site's calibration for the partition's GPU model over them
(slurmgpu.plan.calibration), and derives every achieved rate from the result; `with_terms` re-derives
them under other terms (what a fit tries)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import List, Optional, Tuple

from ..site import NodeType, Partition, Site
from ..site.calibration import Factors
from .placement import strict_kinds
from .terms import DEFAULT_TERMS, CostTerms

# docs/planner.md says where it comes from; the shares of data-sheet figures a step sustains (GEMM,
# attention, link and NIC efficiency, overheads, overlap) are slurmgpu.plan.terms.CostTerms.
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
    calibration: Optional[Factors] = None  # the site's calibration laid over `terms` (plan.calibration)

    @property
    def link_words(self) -> str:
        return "%g GB/s %s" % (self.nt.link_gbs, LINK_WORDS.get(self.nt.link, self.nt.link))

    def nic_words(self) -> str:
        """The fabric's line rate per GPU, e.g. '400 Gb/s InfiniBand'."""
        per = self.nic_node / self.terms.nic_eff * 8 / 1e9 / self.nt.gpus
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

    part = site.partition(partition)
    nt = site.node_types[part.node_type]
    notes: List[str] = []
    facts = lookup(nt.gpu_model)
    key = facts.key if facts else None
    peak_bf16 = nt.bf16_tflops * 1e12
    peak = peak_bf16
    arch = facts.arch if facts is not None else ""
    terms = terms or DEFAULT_TERMS
    cal: Optional[Factors] = None
    cal_note = ""
    if site.calibration is not None:
        from .calibration import calibrated

        terms, cal, cal_note = calibrated(terms, site.calibration, nt.gpu_model, arch)
    if precision == "fp8":
        if facts is not None and not facts.fp8:
            notes.append("%s has no FP8 tensor cores: FP8 is planned at BF16 speed" % nt.gpu_model)
        elif key is None:
            notes.append("FP8 support of %s is unknown: planned at BF16 speed" % nt.gpu_model)
        else:
            peak = 2 * peak_bf16
            notes.append(
                "FP8 on the linear layers only (2x the BF16 peak, %.0f%% of it sustained); attention and "
                "memory-bound work stay BF16; master weights and optimizer stay 16/32-bit; MFU is against "
                "the FP8 peak" % (100 * terms.gemm_ceiling(arch, True))
            )
    if precision == "fp16" and key == "v100":
        notes.append("V100's 'bf16_tflops' is its FP16 figure")
    if nt.fabric_gbps <= 0:
        notes.append("the site lists no compute NIC speed for %s: assumed 100 Gb/s per node" % nt.name)
    if cal_note:
        notes.append(cal_note)
    hbm = facts.hbm_for(nt.gpu_memory_gb) if facts is not None else 0.0
    if not hbm:
        hbm = nt.bf16_tflops * 3.39  # H100's ratio (3.35 TB/s per 989 TFLOP/s)
    hw = Hardware(
        site=site.name,
        partition=part,
        nt=nt,
        peak=peak,
        peak_bf16=peak_bf16,
        gemm_eff=0.0,
        attn_eff=0.0,
        link_bw=0.0,
        nic_node=0.0,
        hbm=hbm * 1e9,
        notes=tuple(notes),
        strict_kinds=strict_kinds(site.policy.groups),
        terms=terms,
        arch=arch,
        calibration=cal,
    )
    return with_terms(hw, terms)


def with_terms(hw: Hardware, terms: CostTerms) -> Hardware:
    """The same partition with every achieved rate derived from `terms` (nothing else reads them)."""
    gbps = hw.nt.fabric_gbps if hw.nt.fabric_gbps > 0 else 100.0  # the assumption hardware() notes
    return replace(
        hw,
        terms=terms,
        # FP8 GEMMs where the peak is FP8's (an architecture without FP8 was planned at BF16 above)
        gemm_eff=terms.gemm_ceiling(hw.arch, hw.peak > hw.peak_bf16),
        attn_eff=terms.attn,
        link_bw=hw.nt.link_gbs / 2 * terms.link_eff * 1e9,
        nic_node=gbps / 8 * terms.nic_eff * 1e9,
    )


def _hbm_known(hw: Hardware) -> bool:
    from ..site import lookup

    facts = lookup(hw.nt.gpu_model)
    return bool(facts and facts.hbm_gbs)
