"""Known ways a multi-node GPU job dies, as data for `slurmgpu doctor`.

Each `Signature` is a set of regular expressions over log lines (NCCL,
PyTorch, Slurm, pyxis/enroot, Apptainer formats) plus what it means and what
to change. Text fields are templates: `{name}` is a named group of the
patterns, `{name_words}` its `lookups` text, or a fact doctor adds (`site`,
`compute_hcas`, `socket_ifname`, `gpu_memory_gb`, `memory_gb`, `scratch`,
`link_layer`); a `[[ ... ]]` segment is dropped when a name in it is
unknown. Lower `priority` = closer to a root cause: doctor lists matches in
that order, so a preemption or an HCA error comes before the watchdog
timeout it caused.

To add one: append a Signature here and a log under tests/data/doctor/ named
`<id>.log` (or `<id>-<anything>.log`) made of real-format lines; the tests
check that every signature has a fixture and that doctor names it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Optional, Tuple


@dataclass(frozen=True)
class Signature:
    id: str
    title: str
    category: str  # scheduler | container | gpu | network | rendezvous | memory
    priority: int
    patterns: Tuple[str, ...]
    cause: str
    fixes: Tuple[str, ...]
    lookups: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    after: int = 0  # lines after the first match worth quoting (e.g. NCCL's "Last error:")
    advisor: Optional[str] = None  # a doctor function that adds plan/site-specific advice
    info: bool = False  # its patterns match NCCL INFO lines (which doctor otherwise skips)
    all_patterns: bool = False  # reported only when every pattern matched (a sequence of lines)
    explains: Tuple[str, ...] = ()  # signatures it causes: doctor ties their match to this one
    source: str = ""  # where the recorded real lines of its fixture come from


_IB_STATUS = {
    "4": "local protection error: the HCA could not access the buffer (GPUDirect RDMA / peer memory "
    "module, or memory registration)",
    "5": "work request flushed: the queue pair was already in error from an earlier failure",
    "10": "remote access error",
    "12": "transport retry counter exceeded: the peer's HCA stopped answering; a link down or flapping, "
    "the peer node gone, or fabric congestion",
    "13": "RNR retry counter exceeded: the receiver was not ready",
}

# NVIDIA Xid codes doctor names (NVIDIA's Xid catalogue, docs.nvidia.com/deploy/xid-errors)
_XID = {
    "79": "the GPU has fallen off the bus (PCIe link lost; power, thermal or board fault)",
    "48": "double-bit (uncorrectable) ECC error in GPU memory",
    "63": "ECC page retirement / row remapping recorded: memory has failing cells",
    "64": "ECC page retirement / row remapping failed: the memory error could not be contained",
    "94": "contained ECC error: the application that touched the memory was stopped",
    "95": "uncontained ECC error: every application on the GPU is affected; the GPU needs a reset",
    "74": "NVLink error: a link between GPUs (or to the NVSwitch) failed",
}

_HTTP = {
    "400": "the registry rejected the request (often a malformed image reference)",
    "401": "not authorised: registry credentials missing or expired",
    "403": "forbidden: the account may not pull this image",
    "404": "image or tag not found",
    "429": "rate limited by the registry",
}

CATALOGUE: Tuple[Signature, ...] = (
    Signature(
        id="preemption",
        title="Job preempted by the scheduler",
        category="scheduler",
        priority=1,
        patterns=(
            r"\*\*\* (?:JOB|STEP) (?P<jobid>\S+) ON (?P<node>\S+) CANCELLED AT (?P<when>\S+) "
            r"DUE TO PREEMPTION \*\*\*",
        ),
        cause="Slurm took the nodes back for a higher-priority job at {when}; errors printed after this "
        "line are the processes being killed, not the cause.",
        fixes=(
            "Nothing is wrong with the job itself. Add `#SBATCH --requeue` and make the script resume "
            "from its last checkpoint so a preemption costs minutes, not the run.",
            "If the run must not be interrupted, submit to a partition/QOS that is not preemptible "
            "(ask your site which; `sacctmgr show qos` lists Preempt settings).",
        ),
    ),
    Signature(
        id="requeue",
        title="Job requeued",
        category="scheduler",
        priority=2,
        patterns=(
            r"\*\*\* (?:JOB|STEP) (?P<jobid>\S+) ON (?P<node>\S+) CANCELLED AT (?P<when>\S+) "
            r"DUE TO JOB REQUEUE \*\*\*",
        ),
        cause="The job was requeued at {when} (scontrol requeue, a preemption with requeue, or a node "
        "failure); it starts again from the top of the script under the same job id.",
        fixes=(
            "Make the script resume from the newest checkpoint (check $SLURM_RESTART_COUNT); otherwise "
            "each restart begins training from step 0.",
        ),
    ),
    Signature(
        id="time-limit",
        title="Time limit reached",
        category="scheduler",
        priority=3,
        patterns=(
            r"\*\*\* (?:JOB|STEP) (?P<jobid>\S+) ON (?P<node>\S+) CANCELLED AT (?P<when>\S+) "
            r"DUE TO TIME LIMIT \*\*\*",
        ),
        cause="The job ran out of its --time at {when}; Slurm killed it. Errors after this line are the "
        "kill, not the cause.",
        fixes=(
            "Ask for more time (--time) if the partition allows it.",
            "Or checkpoint before the limit and requeue: `slurmgpu gen --requeue --checkpoint-dir DIR` "
            "(`#SBATCH --signal=B:USR2@LEAD`, the steps signalled with `scancel --signal`, the launcher told "
            "to handle it; not USR1, which NCCL and PyTorch may take). See `slurmgpu docs requeue`.",
        ),
    ),
    Signature(
        id="node-failure",
        title="A node of the allocation failed",
        category="scheduler",
        priority=4,
        patterns=(
            r"\*\*\* (?:JOB|STEP) (?P<jobid>\S+) ON (?P<node>\S+) CANCELLED AT (?P<when>\S+) "
            r"DUE TO NODE FAILURE",
        ),
        cause="Slurm lost contact with a node of the job (hardware, kernel panic, network) at {when}.",
        fixes=(
            "Resubmit; the failed node is normally drained and will not be picked again. "
            "`--requeue` lets Slurm restart such jobs automatically.",
        ),
    ),
    Signature(
        id="container-pull",
        title="Container image could not be imported",
        category="container",
        priority=5,
        patterns=(
            r"pyxis: failed to import docker image",
            r"\[ERROR\] URL (?P<url>\S+) returned error code: (?P<code>\d+)(?: [A-Za-z ]+)?",
            r"FATAL:\s+While (?:making image from oci registry|performing build)",
            r"failed to get checksum for (?P<ref>docker://\S+?):\s",
        ),
        cause="The container runtime could not fetch the image[[ {ref}]][[ (HTTP {code}: {code_words})]], "
        "so no task started.",
        lookups={"code": _HTTP},
        after=0,
        fixes=(
            "Check the image reference: pyxis/enroot separate the registry with '#' "
            "(nvcr.io#nvidia/pytorch:24.05-py3); Apptainer uses docker://nvcr.io/nvidia/...",
            "Private registries need credentials on the compute nodes: enroot reads "
            "~/.config/enroot/.credentials (`machine nvcr.io login $oauthtoken password <API key>`); "
            "Apptainer uses `apptainer registry login`.",
            "Import once on a login node to shared storage and point the job at the file: "
            "`enroot import -o DIR/image.sqsh docker://REGISTRY#IMAGE:TAG`[[ (DIR on shared storage, "
            "e.g. {scratch})]] then `--container-image=DIR/image.sqsh` (no pull at job start).",
        ),
    ),
    Signature(
        id="gpu-xid",
        title="GPU Xid error in the node's kernel log",
        category="gpu",
        priority=7,
        patterns=(
            r"NVRM: Xid \(PCI:(?P<pci>[0-9A-Fa-f]{4}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2})\): (?P<xid>79|48|63|64|94|95|74),",
        ),
        lookups={"xid": _XID},
        cause="The NVIDIA driver reported Xid {xid}[[ ({xid_words})]] for the GPU at PCI {pci}[[ on {nodes}]]. "
        "It is the node's hardware, not the job: ranks on that GPU fail, the others hang until the watchdog.",
        fixes=(
            "Resubmit without that node[[: `sbatch --exclude={nodes}` (or `--sbatch=--exclude={nodes}` with "
            "slurmgpu gen)]], and report it to the admins with the Xid line.",
            "The rank: `nvidia-smi --query-gpu=index,pci.bus_id --format=csv` on that node maps PCI {pci} to "
            "the local GPU index, which is LOCAL_RANK on that node.",
            'Admins: drain it (`scontrol update nodename=NODE state=drain reason="Xid {xid}"`); Xid 95, 79 '
            "and 64 need a GPU reset or node reboot, 48/63 a memory check (row remapping), 74 the NVLink.",
        ),
        advisor="ranks",
        source="formats: NVIDIA/NVSentinel#155 (Xid 79), leptonai/gpud#1174 (Xid 94, pid/name fields), "
        "NVIDIA/open-gpu-kernel-modules#1150 (journalctl `kernel: NVRM: Xid` lines)",
    ),
    Signature(
        id="nccl-ras-missing",
        title="NCCL RAS: ranks missing or processes dead in a running job",
        category="network",
        priority=6,
        patterns=(
            r"^\s*(?P<dead>\d+) job process(?:es)? (?:is|are) considered dead \(unreachable via the RAS network\)",
            r"^\s*Missing communicator data from (?P<missing>\d+) (?:job process(?:es)?|ranks?)\s*$",
            r"PEER_DEAD: Process (?P<pid>\d+) on node (?P<addr>\S+) managing GPUs? (?P<gpu>\d+)",
        ),
        cause="NCCL's RAS (its health network between the job's processes) lists processes that stopped "
        "answering[[ ({dead} considered dead)]][[ and communicator data missing from {missing}]]: those ranks "
        "crashed or hang (a GPU fault, an OOM kill, a stuck kernel), and every collective waits for them.",
        fixes=(
            "Look at the node and GPU below first: its kernel log (`journalctl -k | grep -i xid`) and the rank's "
            "own output usually say why it stopped.",
            "`ncclras` on any node of the running job (or `echo verbose status | nc localhost 28028`) lists the "
            "missing ranks again; a process RAS marks dead stays dead.",
            "Cancel and resubmit rather than wait for the watchdog: a dead rank never rejoins the communicator.",
        ),
        advisor="ranks",
        explains=("watchdog-timeout", "nccl-remote-error"),
        source="formats: NVIDIA/nccl docs/userguide/source/troubleshooting/ras.rst (8898068: INCOMPLETE, DEAD, "
        "PEER_DEAD monitor lines) and src/ras/client_support.cc (v2.30.7: `Rank N -- GPU G managed by process P "
        "on node H`)",
    ),
    Signature(
        id="nccl-diag-p2p",
        title="NCCL diagnostics: a GPU-to-GPU path failed its check",
        category="gpu",
        priority=8,
        patterns=(
            r"NCCL DIAG \[INFO\] p2p: (?P<failure>write mismatch|read mismatch|peer-memory import failed|"
            r"destination buffer unavailable|local CUDA setup failed|topology check failed|launch/check failed) "
            r"srcRank=(?P<src>\d+) srcCudaDev=\d+ srcNvmlDev=\d+ dstRank=(?P<dst>\d+) dstCudaDev=\d+ "
            r"dstNvmlDev=\d+ path=(?P<path>\w+)",
            r"NCCL DIAG \[INFO\] p2p: only (?P<passed>\d+)/(?P<tested>\d+) GPU-to-GPU peer accesses passed "
            r"verification",
            r"NCCL DIAG \[INFO\] p2p: (?P<passed>\d+)/(?P<tested>\d+) directed GPU P2P edges verified",
            r"NCCL DIAG \[INFO\] p2p: setup failed on rank (?P<src>\d+)",
        ),
        cause="NCCL_RUN_DIAGNOSTICS checked the direct GPU-to-GPU paths at communicator start[[ and only "
        "{passed} of {tested} passed]][[: {failure} from rank {src} to rank {dst} over {path}]]. It is the "
        "system (GPU, NVLink/PCIe, driver, container isolation), not the program: collectives over that "
        "path hang or corrupt data.",
        fixes=(
            "Resubmit without the node that holds the failing pair (below) and report it with the DIAG lines.",
            "NVLink paths (NVL/NVB): `nvidia-smi topo -m` and `nvidia-smi topo -p2p n` on that node; PCIe paths: "
            "`nvidia-smi topo -p2p p`, the IOMMU mode and PCIe ACS; multi-node NVLink: `nvidia-imex-ctl -H -N`.",
            "`slurmgpu preflight --bandwidth --nccl-diag` runs the same check in the preflight step, before "
            "the training starts.",
        ),
        advisor="ranks",
        source="formats: NVIDIA/nccl 8898068 docs/userguide/source/troubleshooting/diagnostics.rst and "
        "src/diagnostics/p2p.cc (DIAG_PRINT lines; NCCL 2.31)",
    ),
    Signature(
        id="nccl-diag-ras",
        title="NCCL RAS diagnostics: ranks differ or report failing hardware",
        category="gpu",
        priority=8,
        patterns=(
            r"NCCL DIAG \[INFO\] (?P<check>ECC): uncorrected volatile errors on rank\(s\) \{(?P<ranks>[^}]*)\}",
            r"NCCL DIAG \[INFO\] (?P<check>NVLink): inactive link\(s\) on rank\(s\) \{(?P<ranks>[^}]*)\}",
            r"NCCL DIAG \[INFO\] (?P<check>NVLink|GPU inventory|CUDA driver version): (?:link-count |count |model )?"
            r"mismatch across \d+ ranks in comm 0x[0-9a-fA-F]+, rank\(s\) \{(?P<ranks>[^}]*)\} differ",
        ),
        cause="NCCL's RAS diagnostics (NCCL_RUN_RAS_DIAGNOSTICS=1 or `ncclras -D`) found {check} trouble on "
        "ranks {ranks}: uncorrected ECC errors or inactive NVLinks are the node's hardware; a GPU model, GPU "
        "count or CUDA driver that differs between ranks means the allocation mixes node types or driver "
        "versions.",
        fixes=(
            "ECC or NVLink: resubmit without the node(s) below and report them (admins: drain, then "
            "`nvidia-smi -q -d ECC` / `nvidia-smi nvlink -s`).",
            "Mismatch: pin the node type (`--constraint`, or the partition the site config names) so every "
            "node has the same GPUs and driver.",
        ),
        advisor="ranks",
        source="formats: NVIDIA/nccl 8898068 docs/userguide/source/troubleshooting/ras.rst (RAS Diagnostics) and "
        "src/ras/diagnostics_gpu.cc (report lines; NCCL 2.31)",
    ),
    Signature(
        id="gpu-lost",
        title="GPU hardware fault",
        category="gpu",
        priority=8,
        patterns=(
            r"uncorrectable ECC error encountered",
            r"GPU has fallen off the bus",
            r"Unable to determine the device handle for GPU\s*(?P<busid>\S+?):? Unknown Error",
        ),
        cause="A GPU on the node that logged this failed (ECC error or lost from the PCIe bus). "
        "It is a hardware fault, not the job.",
        fixes=(
            "Resubmit excluding that node (`sbatch --exclude=NODE`) and report it to the admins "
            "(`scontrol update nodename=NODE state=drain reason=...` if you are one).",
            "Keep preflight enabled in generated scripts: a GPU missing from nvidia-smi stops the job "
            "at start instead of mid-run.",
        ),
    ),
    Signature(
        id="ib-completion-error",
        title="InfiniBand/RoCE completion error in NCCL",
        category="network",
        priority=10,
        patterns=(
            r"NET/IB\w*\s*:\s*Got completion from peer (?P<peer>[^<\s]+)(?:<\d+>)? with "
            r"(?:error |status=)(?P<status>\d+)",
        ),
        cause="An RDMA transfer to {peer} failed with status {status}[[ ({status_words})]]; NCCL then aborts "
        "the communicator and the other ranks hang until the watchdog fires.",
        lookups={"status": _IB_STATUS},
        fixes=(
            "Check the HCAs on the node that logged it and on {peer}: `slurmgpu preflight` (or `ibstat`) "
            "must show every device of NCCL_IB_HCA ACTIVE[[ with link layer {link_layer}]].[[ "
            "The site's compute HCAs: {compute_hcas}.]]",
            "Resubmit with `--exclude=` the node whose HCA is down, and report it.",
            "If the links are healthy and it recurs under load, raise NCCL_IB_TIMEOUT (default 20; 22 "
            "or 23 on large fabrics).",
        ),
    ),
    Signature(
        id="nccl-ib-socket-fallback",
        title="NCCL fell back from InfiniBand/RoCE to TCP sockets",
        category="network",
        priority=9,
        info=True,
        all_patterns=True,
        explains=("watchdog-timeout",),
        patterns=(
            r"NCCL INFO NET/IB : No device found",
            r"NCCL INFO NET/Socket : Using (?:\[\d+\])?(?P<ifname>[\w.-]+):(?P<addr>[^<\s]+)",
        ),
        cause="NCCL found no usable RDMA device[[ on {nodes}]] and sends inter-node traffic over TCP on "
        "{ifname} ({addr}) instead[[ of the site's HCAs {compute_hcas}]]: collectives between nodes run at "
        "a small fraction of the fabric's bandwidth, and long ones hit the NCCL watchdog timeout.",
        fixes=(
            "In a container the HCAs must be visible: pyxis/enroot need /dev/infiniband (the MOFED/"
            "mellanox hook), Apptainer `--bind /dev/infiniband`, Docker `--device=/dev/infiniband`; and the "
            "image needs libibverbs/rdma-core (NCCL opens libibverbs.so at run time).",
            "NCCL_IB_HCA must name devices that exist on the node[[ (the site's: {compute_hcas})]]; "
            "`ibv_devinfo` lists them. A wrong name (or NCCL_IB_DISABLE=1) leaves NCCL only sockets.",
            "On the host: the RDMA driver (mlx5_ib, ib_uverbs) must be loaded and the ports ACTIVE; "
            "`slurmgpu preflight` checks the HCAs on every node before the launch.",
        ),
        source="NVIDIA/nccl#226 (NET/IB : No device found, NET/Socket : Using [0]ens3:...), "
        "NVIDIA/nccl#1053 (NET/Socket : Using [0]lo:127.0.0.1<0>)",
    ),
    Signature(
        id="nccl-net-not-found",
        title="NCCL network plugin not found",
        category="network",
        priority=12,
        patterns=(r"Error: network (?P<net>[^.\n]+?) not found",),
        cause="NCCL_NET={net} asks for a network that NCCL could not load; the plugin library "
        "(e.g. aws-ofi-nccl's libnccl-net.so) is not on the library path on the node.",
        fixes=(
            "Load the plugin the site documents (module or container hook) so libnccl-net*.so is on "
            "LD_LIBRARY_PATH inside the job, or point NCCL_NET_PLUGIN at it.",
            "With NCCL_DEBUG=INFO the log must show 'Using network {net}'.",
        ),
    ),
    Signature(
        id="nccl-no-socket-interface",
        title="NCCL found no socket interface",
        category="network",
        priority=15,
        patterns=(
            r"Bootstrap : no (?:NCCL_SOCKET_IFNAME )?(?:socket )?interface found",
            r"NET/Socket : no interface found",
        ),
        cause="NCCL_SOCKET_IFNAME matches no interface that is up and has an address on some node, so "
        "NCCL cannot bootstrap.",
        fixes=(
            "Set NCCL_SOCKET_IFNAME to the interface every node has[[: the site config says "
            "'{socket_ifname}']]. Use '=' for an exact name (NCCL_SOCKET_IFNAME==eth0).",
            "`slurmgpu preflight` checks the interface on every node before the launcher starts.",
        ),
    ),
    Signature(
        id="address-in-use",
        title="Rendezvous port already in use",
        category="rendezvous",
        priority=18,
        patterns=(
            r"port: (?P<port>\d+), useIpv6: \d+, code: -98, name: EADDRINUSE",
            r"EADDRINUSE",
            r"failed to bind to \S+:(?P<port>\d+) \(errno: 98 - Address already in use\)",
            r"\[Errno 98\] Address already in use",
            r"address already in use",
        ),
        cause="The launcher on the first node could not listen on its port[[ {port}]]: another process (often a "
        "second job or step on the same node, or a previous run still exiting) holds it.",
        fixes=(
            "Derive the port from the job id so jobs sharing a node differ: "
            "MASTER_PORT=$((20000 + SLURM_JOB_ID % 10000)).",
            "Do not start two launchers with the same port inside one job.",
        ),
    ),
    Signature(
        id="master-addr-unresolved",
        title="MASTER_ADDR does not resolve",
        category="rendezvous",
        priority=20,
        patterns=(
            r"network addresses of \((?P<host>[^,()]+), (?P<port>\d+)\) cannot be retrieved "
            r"\(gai error: -?\d+ - (?:Name or service not known|Temporary failure in name resolution)",
            r"host not found: Name or service not known",
            r"socket\.gaierror: \[Errno -[23]\]",
            r"MASTER_ADDR expected, but not set",
        ),
        cause="The rendezvous host[[ '{host}']] could not be resolved (or MASTER_ADDR is unset), so no rank "
        "could reach the store.",
        fixes=(
            "Set it from the allocation in the batch script: "
            "hosts=$(scontrol show hostnames \"$SLURM_JOB_NODELIST\"); MASTER_ADDR=${{hosts%%$'\\n'*}} "
            "(not `| head -n1`: under pipefail it dies of SIGPIPE on long host lists).",
            "If node names do not resolve on the compute network, use the first node's address instead "
            '(`srun -N1 -n1 -w "$MASTER_ADDR" hostname -i`).',
        ),
    ),
    Signature(
        id="cuda-oom",
        title="CUDA out of memory",
        category="memory",
        priority=25,
        patterns=(
            r"CUDA out of memory\. Tried to allocate (?P<tried>[\d.]+ [KMGT]?i?B)\. GPU (?P<gpu>\d+) "
            r"has a total capac\w+ of (?P<total>[\d.]+ [KMGT]?i?B)",
            r"CUDA out of memory\. Tried to allocate (?P<tried>[\d.]+ [KMGT]?i?B) \(GPU (?P<gpu>\d+); "
            r"(?P<total>[\d.]+ [KMGT]?i?B) total capacity",
            r"CUDA out of memory\. Tried to allocate (?P<tried>[\d.]+ [KMGT]?i?B)",
            r"torch\.(?:cuda\.)?OutOfMemoryError",
        ),
        cause="A rank asked for[[ {tried}]] more GPU memory than was free[[ (GPU capacity {total})]]: the "
        "model states, activations and buffers of this layout do not fit[[ in {gpu_memory_gb} GB]].",
        fixes=(
            "Lower the per-GPU footprint: smaller micro-batch, activation recomputation, a distributed "
            "optimizer, or more tensor/pipeline parallelism (TP up to the NVLink domain).",
            "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True helps when 'reserved but unallocated' "
            "memory is large (fragmentation).",
        ),
        advisor="oom",
    ),
    Signature(
        id="host-oom",
        title="Host memory exhausted (Slurm OOM kill)",
        category="memory",
        priority=26,
        patterns=(
            r"Detected \d+ oom[-_]kill events? in (?:StepId=)?(?P<step>\S+?)[. ]",
            r"srun: error: (?P<node>\S+): tasks? [\d,-]+: Out Of Memory",
        ),
        cause="The kernel killed a task[[ of step {step}]] for exceeding the job's host-memory limit "
        "(data loader workers, pinned buffers, or checkpoint gathering on CPU).",
        fixes=(
            "On whole nodes ask for all their memory: `--mem=0`[[ (the site's nodes have {memory_gb} GB)]].",
            "Otherwise raise --mem/--mem-per-gpu, reduce DataLoader num_workers, or save checkpoints "
            "sharded instead of gathered on rank 0.",
        ),
    ),
    Signature(
        id="nccl-system-error",
        title="NCCL system error",
        category="network",
        priority=30,
        patterns=(r"unhandled system error", r"ncclSystemError:"),
        after=2,
        cause="A system call or library NCCL depends on failed (socket connect, shared memory, IB verbs, "
        "memory allocation); the line after 'Last error:' names it.",
        fixes=(
            "Rerun with NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET to see which call failed.",
            "'No route to host' or 'Connection refused' there: the socket interface is wrong or "
            "differs between nodes[[; the site uses NCCL_SOCKET_IFNAME={socket_ifname}]].",
            "Inside containers a small /dev/shm causes it: give the container more shared memory.",
        ),
    ),
    Signature(
        id="nccl-remote-error",
        title="NCCL remote error (a peer failed first)",
        category="network",
        priority=35,
        patterns=(r"ncclRemoteError:", r"remote process exiting prematurely"),
        after=2,
        cause="A peer rank disappeared or its network connection broke; this rank only saw the consequence.",
        fixes=(
            "Find the first rank that failed (earliest error in the log, or the srun line naming a "
            "task that exited) and diagnose that one.",
        ),
    ),
    Signature(
        id="socket-timeout",
        title="Rendezvous / bootstrap connection timed out",
        category="rendezvous",
        priority=40,
        patterns=(
            r"The client socket has timed out after \S+ while trying to connect to "
            r"\((?P<host>[^,()]+), (?P<port>\d+)\)",
            r"RendezvousConnectionError|RendezvousTimeoutError",
            r"WARN Call to connect (?:failed|returned)\s*:?\s*Connection (?:timed out|refused)",
        ),
        cause="Ranks could not reach the rendezvous/bootstrap endpoint[[ {host}:{port}]]: the process that "
        "listens there had not started or had already died, or the address is on a network the "
        "other nodes cannot reach.",
        fixes=(
            "Look at the first node's log first: an earlier error there (import error, OOM, port in use) "
            "is the real cause.",
            "MASTER_ADDR must be the first node's address on an interface every node reaches"
            "[[ (site interface: {socket_ifname})]]; keep the rendezvous port the same on all nodes.",
            "If nodes start far apart (container import), raise the rendezvous timeout "
            "(torchrun --rdzv-conf timeout=900).",
        ),
    ),
    Signature(
        id="kv-transfer-device",
        title="KV-transfer library found no usable network device (NIXL / UCX)",
        category="network",
        priority=11,
        patterns=(
            r"UCX\s+WARN\s+network devices (?P<devices>'[^\n]*?) are not available, please use one or more of: "
            r"(?P<available>[^\n]+)",
            r"UCX\s+ERROR\s+no active messages transport to",
            r"nixlBackendError: NIXL_ERR_BACKEND",
            r"NIXL transfer failure: handshake_setup_failed",
        ),
        cause="The KV cache's transfer library (NIXL over UCX) could not open a network path between "
        "prefill and decode workers[[: UCX_NET_DEVICES names {devices}, which this node lacks (it has "
        "{available})]]. UCX applies UCX_NET_DEVICES to every transport, so a list of RDMA devices alone "
        "also removes the TCP loopback NIXL uses for its own endpoint, and backend creation fails.",
        fixes=(
            "UCX_NET_DEVICES must name devices the node (and the container) has[[, the site's compute HCAs "
            "{compute_hcas} with their ports]], plus `lo`: `slurmgpu gen --serve disaggregated` writes that "
            "list; check it with `ucx_info -d` on a node.",
            "In a container the HCAs must be visible (pyxis/enroot: /dev/infiniband; Apptainer: "
            "--bind /dev/infiniband) and the image's UCX must be built with its transports (`ucx_info -v`).",
            "A handshake failure on decode follows a prefill worker that died or is unreachable: read that "
            "worker's log (slurmgpu-serve-<job id>/prefill-*.log) first.",
        ),
        source="ai-dynamo/nixl#299 (UCX WARN network devices ... are not available; no active messages "
        "transport), ai-dynamo/nixl#96 and #503 (NIXL_ERR_BACKEND), sgl-project/sglang PR#40641 (keep lo in "
        "UCX_NET_DEVICES), vllm-project/vllm PR#41863 (handshake_setup_failed)",
    ),
    Signature(
        id="kv-transfer-timeout",
        title="KV cache did not reach the decode worker in time (disaggregated serving)",
        category="network",
        priority=22,
        patterns=(
            r"KVTransferError\(bootstrap_room=\d+\): Request \d+ timed out after (?P<secs>[\d.]+)s in "
            r"KVPoll\.(?P<state>\w+)",
            r"Some requests fail to receive KV Cache transfer done signal after bootstrapping",
            r"Releasing expired KV blocks for request \S+ which were retrieved by 0 (?:decode|remote) worker",
        ),
        cause="Prefill finished but the decode side never received the KV cache[[ (waited {secs} s in "
        "{state})]]: the transfer library sent it over a NIC the peer cannot reach (the management or "
        "storage interface when UCX_NET_DEVICES / --disaggregation-ib-device are unset), the RDMA path is "
        "broken, or the decode workers are too loaded to pull it before the timeout.",
        fixes=(
            "Pin the transfer to the compute NICs[[ ({compute_hcas})]]: UCX_NET_DEVICES for NIXL (SGLang's "
            "NIXL backend ignores --disaggregation-ib-device without it), --disaggregation-ib-device for "
            "Mooncake; `slurmgpu gen --serve disaggregated` writes both from the site.",
            "Run `slurmgpu preflight` on the job's nodes: an HCA down or missing in the container makes every "
            "transfer wait for its timeout.",
            "Only if transfers are slow rather than stuck: raise SGLANG_DISAGGREGATION_WAITING_TIMEOUT / "
            "SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT (SGLang, 300 s) or vLLM's kv_lease_duration / "
            "VLLM_NIXL_ABORT_REQUEST_TIMEOUT, and add decode workers (`slurmgpu plan --task inference --serve "
            "disaggregated` sizes them).",
        ),
        source="sgl-project/sglang#10110 (timed out after 300.0s in KVPoll.Bootstrapping), #11648 (timed out "
        "after 600.0s in KVPoll.WaitingForInput; the transfer-done-signal line), vllm-project/vllm#25562 "
        "(Releasing expired KV blocks ... retrieved by 0 decode worker(s))",
    ),
    Signature(
        id="router-worker-unreachable",
        title="The serving router cannot reach a worker",
        category="rendezvous",
        priority=24,
        patterns=(
            r"Worker (?P<url>\S+) health check is pending with error: (?P<error>[^\n]+)",
            r"Worker (?P<url>\S+) health check failed: (?P<error>[^\n]+)",
            r"Timeout (?P<secs>\d+)s waiting for workers to become healthy",
            r"pd_router\.rs:\d+: Stream error from (?:decode|prefill) server (?P<url>\S+): (?P<error>[^\n]+)",
        ),
        cause="The router could not talk to a worker[[ at {url}]][[ ({error})]]: the worker is still "
        "loading, died, listens on another port or only on 127.0.0.1, or its host name does not resolve "
        "from the router's node.",
        fixes=(
            "Read the worker's own log first (slurmgpu-serve-<job id>/<role>-<n>.log): a crash there is the cause.",
            "Workers must listen on an address the router's node reaches: SGLang defaults to --host "
            "127.0.0.1 (slurmgpu writes 0.0.0.0); the URL's host must be the worker's node.",
            "Scripts from `slurmgpu gen --serve router|disaggregated` start the router only after every "
            "worker answers /health; a hand-written one should wait the same way (or raise "
            "--worker-startup-timeout-secs).",
        ),
        source="sgl-project/sglang#4208 (health check is pending with error), #2778 (Timeout 300s waiting for "
        "workers to become healthy), PR#11310 (health check failed: Connection failed), #9266 (pd_router "
        "Stream error from decode server)",
    ),
    Signature(
        id="router-port-in-use",
        title="The serving router could not open its port",
        category="rendezvous",
        priority=17,
        patterns=(
            r"failed to install Prometheus metrics exporter: FailedToCreateHTTPListener\(\"(?P<error>Address "
            r"already in use[^\"]*)\"\)",
            r"Error starting router: (?P<error>Address already in use \(os error 98\))",
        ),
        cause="sglang-router / vllm-router ended at start: a port it listens on is taken[[ ({error})]]. Both "
        "routers open a Prometheus listener on 29000 unless --prometheus-port says otherwise, so a second "
        "router on the node, or a router whose own --port is 29000, collides with it.",
        fixes=(
            "Give the router a metrics port of its own: --prometheus-port (scripts from `slurmgpu gen --serve "
            "router|disaggregated` use the last port of the job's block, 20000 + (job id % 10) x 1000 + 999).",
            "Derive the router's --port from the job id so jobs sharing a node differ (the generated scripts "
            "do), and check with `ss -ltnp` on the first node what holds the port.",
        ),
        source="sglang-router 0.3.2 and vllm-router 0.1.17 from PyPI, run on slurmgpu's development machine: "
        "a second router with the same --prometheus-port (the Prometheus panic, identical for both), and a "
        "router whose --port was held (Error starting router); tests/test_serving_real_router.py runs them",
    ),
    Signature(
        id="serve-readiness-timeout",
        title="A serving worker never became ready",
        category="rendezvous",
        priority=45,
        patterns=(
            r"slurmgpu: (?P<worker>\S+) did not answer (?P<url>http://\S+) within (?P<secs>\d+) s",
            r"slurmgpu: (?P<worker>\S+) ended before it answered (?P<url>http://\S+?);",
        ),
        cause="{worker} did not answer its health check[[ within {secs} s]][[ at {url}]], so the job stopped "
        "every other step before starting the router. The lines after this one are the end of the "
        "worker's own log: the error there (out of memory, a missing model file, a NIXL/UCX error) is the "
        "cause.",
        fixes=(
            "Fix what the worker's log tail shows (it is quoted below this line in the job log, and kept in "
            "slurmgpu-serve-<job id>/{worker}.log).",
            "A worker that is only slow (a large model loading from shared storage, CUDA graph capture) needs "
            "a longer --ready-timeout (seconds, default 1800).",
        ),
        after=6,
        source="slurmgpu's serving script (templates/parts/serve.j2); the fixture is the log of "
        "tests/test_e2e_serving.py's failing-worker job on the local Slurm cluster",
    ),
    Signature(
        id="cpu-bind-outside-step",
        title="Slurm refused the step's CPU binding",
        category="scheduler",
        priority=8,
        patterns=(
            r"CPU binding outside of job step allocation, allocated CPUs are: (?P<mask>0x[0-9A-Fa-f]+)",
            r"Entire node must be allocated for (?P<bind>\S+)",
            r"Task launch for StepId=(?P<step>\S+) failed on node (?P<node>\S+): Unable to satisfy cpu bind request",
        ),
        cause="slurmd would not start the step's tasks: its --cpu-bind names CPUs the step was not given"
        "[[ (the step has {mask})]][[, or {bind} needs the whole node]]. Nothing of the program ran.",
        fixes=(
            "Give the step every CPU its masks name: --cpus-per-task x tasks per node must cover the node "
            "(slurmgpu gen writes that, and no binding at all for jobs that use part of a node).",
            "If the site map's CPU lists are wrong for these nodes, correct node_types.NAME.affinity "
            "(`slurmgpu probe` on a node prints the map) and regenerate the script.",
        ),
        source="lines recorded from Slurm 22.05 and 24.11 on the local test cluster (contrib/testcluster); "
        "wording: SchedMD/slurm src/plugins/task/affinity/dist_tasks.c",
    ),
    Signature(
        id="preflight-affinity",
        title="Preflight: a rank is not bound where the site map says",
        category="scheduler",
        priority=8,
        patterns=(
            r"^(?P<node>\S+)\s+affinity\s+FAIL\s+(?P<what>rank \d+ \(local \d+\): \S+(?: \S+)*)"
            r"(?:\s{2,}(?P<expected>\S.*?))?\s*$",
        ),
        cause="The preflight's rank step found {what}[[ on {node}]][[ where the site's affinity map says {expected}]]; "
        "the job stopped before the launcher (`slurmgpu docs affinity`).",
        fixes=(
            "Follow the `fix:` line under the row in the preflight table: enable task affinity in Slurm "
            "(TaskPlugin=task/affinity or task/cgroup), give the step the node's CPUs (--cpus-per-task), or "
            "correct node_types.NAME.affinity in the site config (`slurmgpu probe` on the node prints the map).",
        ),
        source="preflight table rows recorded from the local test cluster (tests/test_affinity_cluster.py)",
    ),
    Signature(
        id="cpu-bind-unsupported",
        title="--cpu-bind ignored: Slurm here does not bind tasks",
        category="scheduler",
        priority=40,
        patterns=(r"srun: cluster configuration lacks support for cpu binding",),
        cause="The cluster's TaskPlugin has no task/affinity or task/cgroup, so srun ignored --cpu-bind: every "
        "rank may run on any CPU of its node, far from its GPU (slower host-to-device copies and collectives; "
        "measured up to 5x in serving, NVIDIA/srt-slurm#332).",
        fixes=(
            "Ask the admins for TaskPlugin=task/affinity,task/cgroup in slurm.conf; `slurmgpu preflight --ranks` "
            "shows each rank's real CPUs.",
            "Until then bind from the launcher instead: torchrun --numa-binding=node (slurmgpu gen --launcher "
            "torchrun writes it from the site map).",
        ),
        source="line recorded from Slurm 22.05 with TaskPlugin=task/none on the local test cluster",
    ),
    Signature(
        id="numa-bind-invalid",
        title="NUMA binding to CPUs or nodes that are not there",
        category="gpu",
        priority=9,
        patterns=(
            r"numa_sched_setaffinity_v2_int\(\) failed: Invalid argument",
            r"libnuma: Warning: node argument (?P<node>\d+) is out of range",
            r"^sched_setaffinity: Invalid argument",
        ),
        cause="numactl (used by torchrun --numa-binding, vLLM --numa-bind, DeepSpeed --bind_cores_to_rank) could "
        "not bind[[ to NUMA node {node}]]: the node has no CPUs (on Grace without CDMM each GPU's memory is a "
        "CPU-less NUMA node, which NVML reports as the GPU's; vllm-project/vllm#39361) or its CPUs are outside "
        "the job's cpuset.",
        fixes=(
            "Bind by the NUMA nodes that have CPUs: the site map's (node_types.NAME.affinity; `slurmgpu probe` "
            "on a node shows which nodes have CPUs and which hold GPU memory).",
            "Ask for whole nodes (--exclusive) so the job's cpuset holds every CPU of the GPU's node.",
        ),
        source="numactl's own lines as in numactl/numactl#127; the Grace case in vllm-project/vllm#39361",
    ),
    Signature(
        id="numactl-missing",
        title="torchrun --numa-binding without numactl",
        category="container",
        priority=10,
        patterns=(r"RuntimeError: numactl CLI is required for NUMA binding",),
        cause="torchrun --numa-binding starts every worker under numactl, which the job's environment (the "
        "container image, if any) does not have; the workers did not start.",
        fixes=(
            "Install numactl in the image (apt-get install numactl / dnf install numactl), or run the job with "
            "launcher srun, where Slurm binds each task itself (--cpu-bind=mask_cpu from the site map).",
        ),
        source="torch 2.13 torch/numa/binding.py (_raise_if_binding_invalid)",
    ),
    Signature(
        id="mpich-nic-policy",
        title="Rank spans NUMA nodes, so Cray MPICH cannot pick its NIC",
        category="network",
        priority=11,
        patterns=(r"MPICH ERROR: Unable to use a NIC_POLICY of 'NUMA'\. Rank (?P<rank>\d+) is not confined",),
        cause="Cray MPICH's default NIC policy gives each rank the NIC of its NUMA node, and rank {rank} may run "
        "on CPUs of several NUMA nodes: it was not bound to its GPU's node.",
        fixes=(
            "Bind one task per GPU to its GPU's CPUs: slurmgpu gen --launcher srun writes "
            "--cpu-bind=mask_cpu from the site map (OLCF's note on NUMA domains gives Frontier's).",
            "Or set MPICH_OFI_NIC_POLICY=GPU to choose the NIC by GPU instead.",
        ),
        source="OLCF frontier_user_guide.rst (olcf/olcf-user-docs), NIC Mapping",
    ),
    Signature(
        id="watchdog-timeout",
        title="NCCL collective timed out (watchdog)",
        category="network",
        priority=60,
        patterns=(
            r"Watchdog caught collective operation timeout: WorkNCCL\(SeqNum=(?P<seq>\d+), "
            r"OpType=(?P<op>\w+)[^)]*?Timeout\(ms\)=(?P<timeout_ms>\d+)\) ran for (?P<ran_ms>\d+) "
            r"milliseconds",
        ),
        cause="Collective {op} (sequence {seq}) did not finish within {timeout_ms} ms: some rank never "
        "joined it. Usually one rank died or hung earlier (look above), a node's network path "
        "broke, or ranks issued collectives in a different order.",
        fixes=(
            "If another problem is listed above this one, fix that first: the timeout is its echo.",
            "Set TORCH_NCCL_DUMP_ON_TIMEOUT=1 and TORCH_NCCL_TRACE_BUFFER_SIZE=2000 to get a per-rank "
            "record of the last collectives; ranks with a different SeqNum are the stragglers.",
            "Run `slurmgpu preflight --bandwidth` on the same nodes to rule out a slow or broken link.",
        ),
    ),
)


def by_id() -> Mapping[str, Signature]:
    return {s.id: s for s in CATALOGUE}
