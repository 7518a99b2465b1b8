"""The effective hardware a plan runs on: peak FLOP/s, HBM, NVLink and fabric bandwidth of a
partition, and the efficiency factors that turn data-sheet figures into achieved ones."""

from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional, Tuple

from ..site import NodeType, Partition, Site

# Cost-model constants; docs/planner.md says where each comes from.
GEMM_EFF = 0.60  # share of dense peak that large transformer GEMMs sustain


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
    link_bw: float  # B/s a ring collective gets per GPU on the fast link
    nic_node: float  # B/s all compute NICs of a node deliver
    hbm: float  # B/s
    notes: Tuple[str, ...]

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
    if precision == "fp8":
        if facts is not None and not facts.fp8:
            notes.append("%s has no FP8 tensor cores: FP8 is planned at BF16 speed" % nt.gpu_model)
        elif key is None:
            notes.append("FP8 support of %s is unknown: planned at BF16 speed" % nt.gpu_model)
        else:
            peak = 2 * peak_bf16
            notes.append("FP8 GEMMs at 2x the BF16 peak; master weights and optimizer stay 16/32-bit")
    if precision == "fp16" and key == "v100":
        notes.append("V100's 'bf16_tflops' is its FP16 figure")
    gbps = nt.fabric_gbps
    if gbps <= 0:
        gbps = 100.0
        notes.append("the site lists no compute NIC speed for %s: assumed 100 Gb/s per node" % nt.name)
    hbm = facts.hbm_for(nt.gpu_memory_gb) if facts is not None else 0.0
    if not hbm:
        hbm = nt.bf16_tflops * 3.39  # H100's ratio (3.35 TB/s per 989 TFLOP/s)
    return Hardware(
        site=site.name,
        partition=part,
        nt=nt,
        peak=peak,
        peak_bf16=peak_bf16,
        link_bw=nt.link_gbs / 2 * LINK_EFF * 1e9,
        nic_node=gbps / 8 * NIC_EFF * 1e9,
        hbm=hbm * 1e9,
        notes=tuple(notes),
    )


def _hbm_known(hw: Hardware) -> bool:
    from ..site import lookup

    facts = lookup(hw.nt.gpu_model)
    return bool(facts and facts.hbm_gbs)
