"""Known facts about GPU models, keyed by the names Slurm GRES types use.

Slurm tells `discover` a GPU *type name* (``gpu:h100:8``, or with
``AutoDetect=nvml`` something like ``nvidia_h100_80gb_hbm3``) and nothing else:
not the memory, the NVLink bandwidth or the size of the NVLink domain.  This
table fills those in.  It is the one place for such figures; the planner and
preflight may use it too.

Every entry says where its figures come from.  Fields listed in `unverified`
are best public figures that no fact sheet of this project confirms; the site
config draft marks them for the admin to check.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Any, Dict, List, Optional, Tuple


@dataclass(frozen=True)
class GpuFacts:
    """Datasheet facts for one GPU model, with where each figure comes from."""

    key: str  # canonical GRES type name, e.g. "h100"
    model: str  # what the site config calls it (gpu_model)
    vendor: str  # nvidia | amd
    memory_gb: float
    bf16_tflops: float  # dense (no sparsity), per GPU as Slurm counts GPUs
    link: str  # nvlink | xgmi | pcie
    link_gbs: float  # per-GPU intra-domain bandwidth, GB/s, both directions
    nvlink_domain: Optional[int]  # GPUs in the fast-link domain; None = the whole node
    source: str
    aliases: Tuple[str, ...] = ()
    memory_choices: Tuple[float, ...] = ()  # several sizes are sold under this name
    unverified: Tuple[str, ...] = ()  # fields whose figure is not confirmed by a fact sheet
    note: str = ""
    hbm_gbs: float = 0.0  # memory bandwidth, GB/s, vendor datasheet (the planner's decode speed); 0: unknown
    hbm_smaller: Optional[Tuple[float, float]] = None  # (memory_gb, GB/s): parts with less memory are slower
    fp8: bool = True  # FP8 tensor cores (the planner doubles the BF16 peak for fp8)
    # tensor-core generation (ampere | hopper | blackwell; "" unknown): the planner's fitted GEMM
    # efficiencies are per architecture (slurmgpu.plan.terms.CostTerms)
    arch: str = ""

    def hbm_for(self, memory_gb: float) -> float:
        """The memory bandwidth of the part with this much memory (A100 40 GB: HBM2, 1555 GB/s)."""
        if self.hbm_smaller is not None and memory_gb < self.hbm_smaller[0]:
            return self.hbm_smaller[1]
        return self.hbm_gbs

    @property
    def memory_ambiguous(self) -> bool:
        return len(self.memory_choices) > 1

    @property
    def model_name(self) -> str:
        """The model with its memory size once that is settled: 'A100-SXM4-80GB'."""
        if self.memory_ambiguous or re.search(r"\d+GB$", self.model):
            return self.model
        return "%s-%gGB" % (self.model, self.memory_gb)


def _f(
    key: str,
    model: str,
    vendor: str,
    memory_gb: float,
    bf16: float,
    link: str,
    link_gbs: float,
    domain: Optional[int],
    source: str,
    **kw: Any,
) -> GpuFacts:
    return GpuFacts(key, model, vendor, memory_gb, bf16, link, link_gbs, domain, source, **kw)


# Sources: "<name> preset" is site-configs/<name>.yaml, whose header cites the
# vendor documents; "fabric_facts" is the project's fabric fact sheet (section
# given).  Entries without a preset cite the vendor datasheet and are marked
# unverified where no fact sheet confirms them.  hbm_gbs is the vendor datasheet's
# memory bandwidth (A100: 2039 GB/s for 80 GB HBM2e, 1555 for 40 GB HBM2).
GPU_TABLE: Dict[str, GpuFacts] = {
    f.key: f
    for f in (
        _f(
            "h100",
            "H100-SXM5-80GB",
            "nvidia",
            80,
            989,
            "nvlink",
            900,
            None,
            "dgx-h100 preset (H100 SXM datasheet: 80 GB, 989 TFLOP/s dense BF16; NVLink4 900 GB/s)",
            aliases=("h100_sxm", "h100_sxm5", "h100_80gb", "h100_80gb_hbm3"),
            hbm_gbs=3350,
            arch="hopper",
        ),
        _f(
            "h100_pcie",
            "H100-PCIe-80GB",
            "nvidia",
            80,
            756,
            "pcie",
            128,
            1,
            "NVIDIA H100 PCIe product brief (756 TFLOP/s dense BF16, PCIe Gen5 x16)",
            unverified=("bf16_tflops", "link_gbs"),
            note="NVLink bridges may pair two cards; nvidia-smi topo -m shows NV# between them if so",
            hbm_gbs=2000,
        ),
        _f(
            "h800",
            "H800-SXM5-80GB",
            "nvidia",
            80,
            989,
            "nvlink",
            400,
            None,
            "DeepSeek-V3 technical report (arXiv 2412.19437) sec. 3.1: 2048 H800 in nodes of 8 on NVLink/NVSwitch "
            "and InfiniBand; the H800 is the H100 SXM with NVLink cut to 400 GB/s (NVIDIA H800 product brief), "
            "UNVERIFIED by a fact sheet of this project",
            aliases=("h800_sxm", "h800_sxm5", "h800_80gb"),
            unverified=("bf16_tflops", "link_gbs"),
            hbm_gbs=3350,
            arch="hopper",
        ),
        _f(
            "h100_hbm2e",
            "H100-SXM5-96GB-HBM2e",
            "nvidia",
            96,
            989,
            "nvlink",
            900,
            None,
            "torchtitan benchmarks/llama3_h100_202412_torchtitan.md (Meta Grand Teton: H100 with 96 GB HBM2e at "
            "2.4 TB/s, NVLink within 8, 500 W power limit); BF16 is the SXM figure, which the benchmark says is "
            "above what its 500 W parts reach (UNVERIFIED)",
            aliases=("h100_sxm5_96gb_hbm2e", "h100_96gb_hbm2e"),
            unverified=("bf16_tflops",),
            note="power-limited to 500 W in the published runs: sustained tensor throughput below the SXM datasheet",
            hbm_gbs=2400,
            arch="hopper",
        ),
        _f(
            "h200",
            "H200-SXM5-141GB",
            "nvidia",
            141,
            989,
            "nvlink",
            900,
            None,
            "dgx-h200 preset (BasePOD RA: 141 GB; NVLink4 900 GB/s; H200 datasheet: same tensor rate as H100 SXM)",
            aliases=("h200_sxm", "h200_sxm5", "h200_141gb"),
            hbm_gbs=4800,
            arch="hopper",
        ),
        _f(
            "gh200",
            "GH200-H100-96GB",
            "nvidia",
            96,
            989,
            "nvlink",
            900,
            None,
            "alps-gh200 preset (CSCS/JSC: ~96 GB HBM3, 300 GB/s per GPU pair x 3 peers; GH200 datasheet BF16)",
            memory_choices=(96, 144),
            note="4 GH200 per node (Alps, JUPITER, Isambard-AI); 144 GB HBM3e variants exist",
            hbm_gbs=4000,
            arch="hopper",
        ),
        _f(
            "a100",
            "A100-SXM4",
            "nvidia",
            40,
            312,
            "nvlink",
            600,
            None,
            "dgx-a100 preset (A100 datasheet: 312 TFLOP/s dense BF16, NVLink3 600 GB/s); sizes: perlmutter, "
            "juwels-booster, leonardo presets (40/64/80 GB)",
            aliases=("a100_sxm4", "a100_sxm"),
            memory_choices=(40, 64, 80),
            note="sold as 40 GB and 80 GB (Leonardo: 64 GB); the smaller size is assumed until checked",
            hbm_gbs=2039,
            arch="ampere",
            hbm_smaller=(80, 1555),
            fp8=False,
        ),
        _f(
            "a100_pcie",
            "A100-PCIe",
            "nvidia",
            40,
            312,
            "pcie",
            64,
            1,
            "NVIDIA A100 datasheet (PCIe Gen4 x16)",
            memory_choices=(40, 80),
            unverified=("link_gbs",),
            hbm_gbs=1935,
            fp8=False,
        ),
        _f(
            "b200",
            "B200-180GB",
            "nvidia",
            180,
            2250,
            "nvlink",
            1800,
            None,
            "dgx-b200 preset (DGX B200 user guide: 180 GB; NVLink5 1.8 TB/s; "
            "BF16 = half the sparse figure, UNVERIFIED)",
            unverified=("bf16_tflops",),
            hbm_gbs=8000,
            arch="blackwell",
        ),
        _f(
            "gb200",
            "GB200-NVL72",
            "nvidia",
            186,
            2500,
            "nvlink",
            1800,
            72,
            "gb200-nvl72 preset (NVIDIA blog: 72 GPUs over 18 trays of 4, NVLink5 1.8 TB/s; ~186 GB UNVERIFIED)",
            unverified=("gpu_memory_gb", "bf16_tflops"),
            note="one NVLink domain spans a rack: the site needs topology: block",
            hbm_gbs=8000,
            arch="blackwell",
        ),
        _f(
            "gb300",
            "GB300-NVL72",
            "nvidia",
            288,
            2500,
            "nvlink",
            1800,
            72,
            "gb300-nvl72 preset (NVIDIA NVL72 Enterprise RA: 72 Blackwell Ultra GPUs over 18 trays of 4, NVLink5 "
            "1.8 TB/s; GB300 NVL72 page: 288 GB HBM3e, 8 TB/s, BF16 = half the sparse 360 PF / 72, UNVERIFIED)",
            unverified=("gpu_memory_gb", "bf16_tflops"),
            note="one NVLink domain spans a rack: the site needs topology: block; nvidia-smi shows ~279 GB usable",
            hbm_gbs=8000,
            arch="blackwell",
        ),
        _f(
            "b300",
            "B300-270GB",
            "nvidia",
            270,
            2250,
            "nvlink",
            1800,
            None,
            "NVIDIA HGX B300 (Blackwell Ultra, 8 GPUs, NVLink5 1.8 TB/s; ~2.1 TB HBM3e per board / 8; BF16 dense "
            "as B200: half the sparse figure), UNVERIFIED: no preset or fact sheet of this project confirms them",
            aliases=("hgx_b300", "b300_sxm"),
            unverified=("gpu_memory_gb", "bf16_tflops"),
            hbm_gbs=8000,
            arch="blackwell",
        ),
        _f(
            "mi250x",
            "MI250X-GCD-64GB",
            "amd",
            64,
            191.5,
            "xgmi",
            200,
            None,
            "frontier / lumi-g presets (one GCD = one Slurm GPU, 64 GB; BF16 half of 383 TFLOP/s per package; "
            "link_gbs 200 a planning figure)",
            aliases=("mi250",),
            hbm_gbs=1638,
            fp8=False,
        ),
        _f(
            "mi300x",
            "MI300X-192GB",
            "amd",
            192,
            1307,
            "xgmi",
            448,
            None,
            "fabric_facts 2.9 (192 GB, fully connected xGMI; per-link bandwidth UNVERIFIED there); BF16 AMD datasheet",
            unverified=("bf16_tflops", "link_gbs"),
            hbm_gbs=5300,
        ),
        _f(
            "l40s",
            "L40S-48GB",
            "nvidia",
            48,
            362,
            "pcie",
            64,
            1,
            "NVIDIA L40S datasheet (362 TFLOP/s dense BF16, PCIe Gen4 x16, no NVLink)",
            unverified=("bf16_tflops",),
            hbm_gbs=864,
        ),
        _f(
            "rtx4090",
            "RTX-4090-24GB",
            "nvidia",
            24,
            165,
            "pcie",
            64,
            1,
            "rtx-4090 preset (24 GB, no NVLink, PCIe 4.0 x16; BF16 with FP32 accumulate, UNVERIFIED)",
            aliases=("geforce_rtx_4090", "rtx_4090", "4090"),
            unverified=("bf16_tflops", "link_gbs"),
            note="stock drivers lack GeForce P2P: NCCL_P2P_DISABLE=1 is the usual fix for hangs",
            hbm_gbs=1008,
        ),
        _f(
            "rtx5090",
            "RTX-5090-32GB",
            "nvidia",
            32,
            209,
            "pcie",
            128,
            1,
            "fabric_facts 3.1 (32 GB, PCIe only; PCIe generation UNVERIFIED there)",
            aliases=("geforce_rtx_5090", "rtx_5090", "5090"),
            unverified=("bf16_tflops", "link_gbs"),
            hbm_gbs=1792,
        ),
        _f(
            "v100",
            "V100-SXM2",
            "nvidia",
            16,
            125,
            "nvlink",
            300,
            None,
            "NVIDIA V100 datasheet (125 TFLOP/s FP16 tensor: V100 has no BF16; NVLink2 300 GB/s)",
            aliases=("tesla_v100", "v100_sxm2"),
            memory_choices=(16, 32),
            unverified=("bf16_tflops", "link_gbs"),
            note="no BF16 units: the figure is FP16; DGX-1 NVLink is a hybrid cube mesh, not all-to-all",
            hbm_gbs=900,
            fp8=False,
        ),
    )
}

_VENDOR_PREFIXES = ("nvidia_", "tesla_", "amd_", "instinct_", "geforce_")
_MEM_TOKEN = re.compile(r"(?:^|_)(\d{2,3})g(?:b)?(?=$|_)")


def normalize(name: str) -> str:
    """'NVIDIA_H100-80GB HBM3' -> 'h100_80gb_hbm3' (lowercase, '_' separators, no vendor prefix)."""
    n = re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_")
    changed = True
    while changed:
        changed = False
        for p in _VENDOR_PREFIXES:
            if n.startswith(p):
                n = n[len(p) :]
                changed = True
    return n


def _candidates() -> List[Tuple[str, GpuFacts]]:
    out = []
    for f in GPU_TABLE.values():
        for alias in (f.key,) + f.aliases:
            out.append((normalize(alias), f))
    out.sort(key=lambda t: -len(t[0]))  # longest first: "h100_pcie" before "h100"
    return out


def lookup(name: Optional[str]) -> Optional[GpuFacts]:
    """Facts for a GRES type or product name, or None if the model is not known.

    Works for nvidia-smi product names too ("NVIDIA A100-SXM4-80GB").  A memory
    size in the name (``a100_80gb``) picks that size and settles an ambiguous one.
    """
    if not name:
        return None
    n = normalize(name)
    if not n:
        return None
    hit = None
    words = "_%s_" % n  # an alias matches whole '_'-separated words (no regex per alias to compile)
    for alias, facts in _candidates():
        if "_%s_" % alias in words:
            hit = facts
            break
    if hit is None:
        return None
    if "pcie" in n.split("_") and hit.link != "pcie" and (hit.key + "_pcie") in GPU_TABLE:
        hit = GPU_TABLE[hit.key + "_pcie"]
    for m in _MEM_TOKEN.finditer(n):
        size = float(m.group(1))
        # "GH200 480GB" names CPU+GPU memory: only sizes this model is sold with count
        if size in hit.memory_choices or size == hit.memory_gb:
            hit = replace(
                hit,
                memory_gb=size,
                memory_choices=(size,),
                unverified=tuple(u for u in hit.unverified if u != "gpu_memory_gb"),
            )
            break
    return hit
