"""What CPU/NUMA binding buys per rank: host-to-device copies and a small all-reduce, with each
rank's CPUs on its GPU's NUMA node ("near"), on another NUMA node ("far") and left as started
("as-launched"), measured in one run so the ratios compare like with like.

Run it on GPU nodes, one task per GPU, unbound (each rank sets its own CPUs per case):

    srun --ntasks-per-node=8 --cpu-bind=none python bench/affinity_bench.py
    python bench/affinity_bench.py                # one process, GPU 0

Per rank and case it prints the median of --iters copies of --copy-mb MiB from pinned and from
pageable host memory (GB/s; the buffers are allocated after the CPUs are set, so first touch puts
them on that node) and, with several ranks, the median latency of a --allreduce-kb KiB NCCL
all-reduce (us; the process group is created per case, after the CPUs are set, so NCCL's threads
inherit them). The last lines are the ratios near/as-launched and near/far.

Where the GPU's NUMA node comes from: sysfs (the GPU's PCI numa_node / local_cpulist), the same
reader `slurmgpu probe` uses. H2D copies use PyTorch when it sees CUDA, else the CUDA driver
(libcuda) through ctypes. Without a GPU it says so, skips the copies and, with several ranks,
times a gloo all-reduce on the CPUs instead (exit 0): on a CPU-only machine this shows nothing
about GPUs, only that the script runs.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from slurmgpu.node.affinity import read_gpu_places, read_numa_nodes  # noqa: E402
from slurmgpu.site import format_cpulist  # noqa: E402


def env_int(*names: str, default: int = 0) -> int:
    for n in names:
        v = os.environ.get(n)
        if v and v.isdigit():
            return int(v)
    return default


# ---------------------------------------------------------------------------
# host-to-device copies: torch, or the CUDA driver through ctypes


class DriverCopy:
    """cuMemcpyHtoD through libcuda (no PyTorch needed): pinned (cuMemAllocHost) and pageable."""

    def __init__(self, device: int) -> None:
        self.cu = ctypes.CDLL("libcuda.so.1")
        self._ok(self.cu.cuInit(0), "cuInit")
        dev = ctypes.c_int()
        self._ok(self.cu.cuDeviceGet(ctypes.byref(dev), device), "cuDeviceGet")
        self.ctx = ctypes.c_void_p()
        self._ok(self.cu.cuDevicePrimaryCtxRetain(ctypes.byref(self.ctx), dev), "cuDevicePrimaryCtxRetain")
        self._ok(self.cu.cuCtxSetCurrent(self.ctx), "cuCtxSetCurrent")

    @staticmethod
    def _ok(rc: int, what: str) -> None:
        if rc != 0:
            raise RuntimeError("%s failed (CUresult %d)" % (what, rc))

    def copy_gbs(self, nbytes: int, iters: int, pinned: bool) -> float:
        dptr = ctypes.c_uint64()
        self._ok(self.cu.cuMemAlloc_v2(ctypes.byref(dptr), ctypes.c_size_t(nbytes)), "cuMemAlloc")
        host = ctypes.c_void_p()
        keep: Any = None
        try:
            if pinned:
                self._ok(self.cu.cuMemAllocHost_v2(ctypes.byref(host), ctypes.c_size_t(nbytes)), "cuMemAllocHost")
                ctypes.memset(host, 1, nbytes)  # first touch, on the CPUs set now
            else:
                keep = (ctypes.c_char * nbytes)()
                ctypes.memset(keep, 1, nbytes)
                host = ctypes.cast(keep, ctypes.c_void_p)
            times = []
            for _ in range(iters + 2):
                t0 = time.perf_counter()
                self._ok(self.cu.cuMemcpyHtoD_v2(dptr, host, ctypes.c_size_t(nbytes)), "cuMemcpyHtoD")
                self._ok(self.cu.cuCtxSynchronize(), "cuCtxSynchronize")
                times.append(time.perf_counter() - t0)
            return nbytes / statistics.median(times[2:]) / 1e9
        finally:
            if pinned and host.value:
                self.cu.cuMemFreeHost(host)
            self.cu.cuMemFree_v2(dptr)


class TorchCopy:
    def __init__(self, device: int) -> None:
        import torch

        self.torch = torch
        torch.cuda.set_device(device)
        self.dev = torch.device("cuda", device)

    def copy_gbs(self, nbytes: int, iters: int, pinned: bool) -> float:
        torch = self.torch
        src = torch.ones(nbytes, dtype=torch.uint8, pin_memory=pinned)  # allocated (touched) now
        dst = torch.empty(nbytes, dtype=torch.uint8, device=self.dev)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        times = []
        for _ in range(iters + 2):
            start.record()
            dst.copy_(src, non_blocking=pinned)
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / 1e3)
        return nbytes / statistics.median(times[2:]) / 1e9


def copier(device: int) -> Tuple[Optional[Any], str]:
    """(copier, how) or (None, why not)."""
    try:
        import torch

        if torch.cuda.is_available():
            return TorchCopy(device), "torch %s" % torch.__version__
    except ImportError:
        pass
    try:
        return DriverCopy(device), "CUDA driver (libcuda via ctypes)"
    except (OSError, RuntimeError, AttributeError) as exc:
        return None, "no CUDA device (%s): host-to-device copies skipped" % exc


# ---------------------------------------------------------------------------
# all-reduce


def allreduce_us(kb: int, iters: int, rank: int, world: int, local: int, case: str) -> Optional[float]:
    """Median latency of a small all-reduce (NCCL on GPUs, else gloo); None with one rank or no torch."""
    if world < 2:
        return None
    try:
        import torch
        import torch.distributed as dist
    except ImportError:
        return None
    gpu = torch.cuda.is_available()
    backend = "nccl" if gpu else "gloo"
    addr = os.environ.get("MASTER_ADDR", "127.0.0.1")
    port = int(os.environ.get("MASTER_PORT", "29555")) + ["as-launched", "near", "far"].index(case)
    dist.init_process_group(backend, init_method="tcp://%s:%d" % (addr, port), rank=rank, world_size=world)
    try:
        x = torch.ones(kb * 256, dtype=torch.float32, device="cuda" if gpu else "cpu")
        times = []
        for _ in range(iters + 5):
            if gpu:
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            dist.all_reduce(x)
            if gpu:
                torch.cuda.synchronize()
            times.append(time.perf_counter() - t0)
        return statistics.median(times[5:]) * 1e6
    finally:
        dist.destroy_process_group()


# ---------------------------------------------------------------------------


def cases(gpu: int, start: List[int]) -> Tuple[Dict[str, List[int]], str]:
    """CPU sets per case from sysfs: near (the GPU's NUMA node), far (another NUMA node with CPUs)."""
    numa = read_numa_nodes("/sys")
    places = read_gpu_places("/sys")
    out: Dict[str, List[int]] = {"as-launched": start}
    if gpu >= len(places):
        return out, "GPU %d not among the PCI devices in /sys (%d found): near/far skipped" % (gpu, len(places))
    node = places[gpu][1].cpu_node(numa)
    allowed = set(start)
    if node is None:
        return out, "GPU %d's NUMA node is not known (numa_node -1, no local_cpulist match)" % gpu
    near = sorted(set(numa[node]) & allowed)
    if near:
        out["near"] = near
    others = [n for n, c in sorted(numa.items()) if n != node and set(c) & allowed]
    if others:
        out["far"] = sorted(set(numa[others[0]]) & allowed)
    what = "GPU %d (%s) on NUMA node %d" % (gpu, places[gpu][1].address, node)
    if not others:
        what += "; one NUMA node with CPUs here, so no far case"
    return out, what


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--copy-mb", type=int, default=256)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--allreduce-kb", type=int, default=64)
    ap.add_argument("--json", metavar="FILE", help="also write the figures (per rank) as JSON lines to FILE")
    args = ap.parse_args()
    rank = env_int("RANK", "SLURM_PROCID")
    world = env_int("WORLD_SIZE", "SLURM_NTASKS", default=1)
    local = env_int("LOCAL_RANK", "SLURM_LOCALID")
    host = os.uname().nodename
    start = sorted(os.sched_getaffinity(0))
    sets, where = cases(local, start)
    cp, how = copier(local)
    print(
        "rank %d/%d on %s: %s; copies: %s; started on CPUs %s" % (rank, world, host, where, how, format_cpulist(start))
    )
    rows = []
    for case in ("as-launched", "near", "far"):
        if case not in sets:
            continue
        os.sched_setaffinity(0, sets[case])
        row: Dict[str, Any] = {"rank": rank, "host": host, "case": case, "cpus": format_cpulist(sets[case])}
        if cp is not None:
            row["h2d_pinned_gbs"] = cp.copy_gbs(args.copy_mb << 20, args.iters, pinned=True)
            row["h2d_pageable_gbs"] = cp.copy_gbs(args.copy_mb << 20, args.iters, pinned=False)
        us = allreduce_us(args.allreduce_kb, args.iters, rank, world, local, case)
        if us is not None:
            row["allreduce_us"] = us
        rows.append(row)
        figures = (
            "  ".join("%s %.2f" % (k, v) for k, v in row.items() if isinstance(v, float))
            or "(nothing to time: no GPU, one rank)"
        )
        print("rank %d %-12s CPUs %-16s %s" % (rank, case, row["cpus"], figures))
    os.sched_setaffinity(0, start)
    by = {r["case"]: r for r in rows}
    for key in ("h2d_pinned_gbs", "h2d_pageable_gbs", "allreduce_us"):
        for a, b in (("near", "as-launched"), ("near", "far")):
            if key in by.get(a, {}) and key in by.get(b, {}):
                ratio = by[a][key] / by[b][key]
                better = "higher is better" if key.endswith("gbs") else "lower is better"
                print("rank %d ratio %s %s/%s = %.3f (%s)" % (rank, key, a, b, ratio, better))
    if args.json:
        with open(args.json, "a") as fh:
            for r in rows:
                fh.write(json.dumps(r) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
