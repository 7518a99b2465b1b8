#!/usr/bin/env python3
"""A throw-away local Slurm cluster with fake GPUs, for tests (22.05, 24.11, 26.05: see Releases).

Everything runs on this one host, as root, out of a fresh temporary
directory: one ``slurmctld`` and one ``slurmd -N <name>`` per node, each on
its own randomly chosen TCP port, so two clusters (or a stale one) never
collide: each port is locked in ``/tmp/sgtc-ports`` from the moment it is chosen until the
cluster stops, so clusters started at once by several processes never pick the same one.
Nothing under /etc/slurm is read or written.

Default layout (see ``DEFAULT_PARTITIONS``; change it with the
``partitions=`` argument)::

    partition  nodes        per node                       features
    ---------  -----------  -----------------------------  ------------
    gpu *      gpu[01-04]   16 CPUs, 64000 MB, gpu:h100:8  h100,nvlink
    gpu4       g4n[01-02]   16 CPUs, 64000 MB, gpu:a100:4  a100,nvlink
    pcie       pc[01-02]    16 CPUs, 64000 MB, gpu:l40s:8  l40s,pcie
    (* = default partition; 8 slurmd processes in all)

The nodes claim their CPUs, memory and GPUs through
``SlurmdParameters=config_overrides``; each GPU is a character device
``<dir>/dev/nvidiaN`` (a copy of /dev/null: slurmd ignores plain files) named
in gres.conf, so jobs get a real ``CUDA_VISIBLE_DEVICES``.  No cgroups (``proctrack/linuxproc``,
``task/none``; ``task_plugin="task/affinity"`` makes slurmd bind tasks, for nodes that claim this
machine's real CPU count), no accounting (unless ``accounting=True``, below), ``select/cons_tres`` with ``CR_Core``.
Node names are added to /etc/hosts as 127.0.0.1 (needed for MASTER_ADDR).

Accounting (``accounting=True``, native release only): a private MariaDB
(``<dir>/mysql/data``, a copy of a pristine data directory ``mariadb-install-db`` makes once
per MariaDB version in the chroot cache directory, ``mariadbd --user=mysql``
on a random loopback port, never the system service) and ``slurmdbd`` with its
own ``slurmdbd.conf`` (mode 600) are started before slurmctld, which then runs
``AccountingStorageType=accounting_storage/slurmdbd`` with
``AccountingStoreFlags=job_script,job_env``; the cluster, the account
``research`` and the users ``root`` and ``nobody`` are created with
``sacctmgr -i``.  It costs a few seconds of start-up (``accounting_seconds``),
so only clusters that ask for it pay it.

``job_submit.lua`` and ``cli_filter.lua`` live next to slurm.conf.  They are
enabled only when their text is given to the constructor, because an
enabled but missing script is fatal to slurmctld (job_submit) or makes
sbatch/srun/salloc fail (cli_filter).
``install_job_submit`` replaces the script atomically and gives it an mtime
strictly newer than the previous one: slurmctld 22.05 reloads it on the next
submission only when ``st_mtime`` is greater than the mtime it loaded.

The daemons are children of a small supervisor process (a Linux child
subreaper) that reaps the slurmstepd processes slurmd double-forks; stop()
signals only the pids it started and the job processes that carry this
cluster's SLURM_CONF.  munge is started (system-wide) if it is not running
and left running.

Usage::

    with TestCluster(job_submit_lua=ACCEPT_ALL_JOB_SUBMIT_LUA) as c:
        job_id = c.submit("#!/bin/bash\\nsrun hostname\\n", "-N2")
        result = c.wait_job(job_id)          # JobResult: state, exit_code, ...
        rc, out, err = c.sbatch(None, "--test-only", "--wrap", "true")

Releases
--------
A cluster runs one Slurm release (``Release``): the host's own packages
(``native_release()``), or another Debian release's packages in a chroot built
by ``make-chroot.sh`` (``chroot_release("trixie")``: Slurm 24.11, and
``chroot_release("forky")``: Slurm 26.05, on a Debian 12 host; ``bookworm`` and
``forky`` on a Debian 13 host).  For a chroot release, slurmctld,
slurmd, munged and every client run inside the chroot, in a private mount
namespace (the supervisor's) that holds the chroot's /proc and bind mounts of
the cluster's base directory and ``shared_paths`` at the same paths, so file
names mean the same inside and out; the mounts vanish with the namespace and
never show in the host's /proc/mounts.  The chroot has its own /dev nodes and
munge key; each such cluster runs its own munged (socket in the cluster
directory, ``AuthInfo=socket=``), stopped by its pid file.  ``run()`` runs a
command inside the release's root; ``env`` puts ``bin_dir`` first in PATH,
whose wrappers run the release's clients from host programs (``slurmgpu
discover``, ``subprocess.run(["sbatch", ...], env=cluster.env)``).

Debugging from a shell (prints the SLURM_CONF export line)::

    python contrib/testcluster/cluster.py up
    python contrib/testcluster/cluster.py down

Standard library only; Python 3.9+.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import random
import re
import shlex
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Mapping, Optional, Sequence, Tuple, Union

__all__ = [
    "ACCEPT_ALL_JOB_SUBMIT_LUA",
    "Release",
    "chroot_release",
    "native_release",
    "other_suite",
    "other_suites",
    "release_run",
    "test_releases",
    "PASSTHROUGH_CLI_FILTER_LUA",
    "DEFAULT_PARTITIONS",
    "ClusterError",
    "JobResult",
    "Partition",
    "TestCluster",
    "missing_prerequisites",
]

ACCEPT_ALL_JOB_SUBMIT_LUA = """\
-- slurmgpu test cluster: accept every job.
function slurm_job_submit(job_desc, part_list, submit_uid)
    return slurm.SUCCESS
end

function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
    return slurm.SUCCESS
end

return slurm.SUCCESS
"""

PASSTHROUGH_CLI_FILTER_LUA = """\
-- slurmgpu test cluster: change nothing.
function slurm_cli_setup_defaults(options, early_pass)
    return slurm.SUCCESS
end

function slurm_cli_pre_submit(options, offset)
    return slurm.SUCCESS
end

function slurm_cli_post_submit(offset, jobid, stepid)
    return slurm.SUCCESS
end

return slurm.SUCCESS
"""

# ctld.log lines that mean a job_submit script did not load or failed open.
JOB_SUBMIT_ERROR_MARKERS = (
    "error: job_submit/lua",
    "non-numeric return code",
    "using previous script",
    "using old script",
)

# ... and the subset that means a new script was refused (the old one stays).
_LOAD_FAILURE_MARKERS = (
    "using previous script",
    " on load",  # "<path>: returned N on load"
    "required function(s) not present",
)

TERMINAL_JOB_STATES = frozenset(
    {
        "BOOT_FAIL",
        "CANCELLED",
        "COMPLETED",
        "DEADLINE",
        "FAILED",
        "NODE_FAIL",
        "OUT_OF_MEMORY",
        "PREEMPTED",
        "TIMEOUT",
    }
)

_HOSTS_FILE = "/etc/hosts"
_HOSTS_TAG = "# slurmgpu-testcluster"
_DEFAULT_STATE_FILE = "/tmp/slurmgpu-testcluster.json"
_REQUIRED_BINARIES = (
    "slurmctld",
    "slurmd",
    "sbatch",
    "srun",
    "squeue",
    "sinfo",
    "scontrol",
    "scancel",
    "munge",
    "unmunge",
    "munged",
)


class ClusterError(RuntimeError):
    """The test cluster could not be started, or a Slurm command failed."""


# ---------------------------------------------------------------- releases
CHROOT_CACHE_ENV = "SLURMGPU_CHROOT_CACHE"  # make-chroot.sh reads it too
DEFAULT_CHROOT_CACHE = "/var/cache/slurmgpu-testcluster"
RELEASES_ENV = "SLURMGPU_TESTCLUSTER_RELEASES"  # e.g. "native,trixie"
CHROOT_STAMP = ".slurmgpu-testcluster-stamp"  # written last by make-chroot.sh
MAKE_CHROOT = Path(__file__).resolve().parent / "make-chroot.sh"
# Debian suite -> the Slurm major release it ships (sid ships what forky does).
SUITE_SLURM = {"bookworm": "22.05", "trixie": "24.11", "forky": "26.05"}
# The suites whose chroots the matrix uses, one per Slurm release (make-chroot.sh's default list).
MATRIX_SUITES = ("bookworm", "trixie", "forky")


@dataclass(frozen=True)
class Release:
    """Where one Slurm release's daemons and clients live.

    ``root`` is None for the host's own binaries, else the chroot directory.
    ``version`` is the full ``slurmctld -V`` version ("24.11.5"); for a chroot
    that is not built yet, the major release its suite ships."""

    name: str  # "native" or the chroot's Debian suite
    version: str
    root: Optional[str] = None

    @property
    def major(self) -> str:
        """ "24.11" """
        return ".".join(self.version.split(".")[:2])

    @property
    def version_tuple(self) -> Tuple[int, int]:
        try:
            a, b = self.major.split(".")
            return int(a), int(b)
        except ValueError:
            return (0, 0)

    @property
    def label(self) -> str:
        """Test id: "slurm24.11"."""
        return "slurm" + (self.major or self.name)

    @property
    def python(self) -> str:
        """A Python 3 interpreter that jobs of this release can run."""
        return sys.executable if self.root is None else "/usr/bin/python3"

    def missing(self) -> List[str]:
        """Reasons this release cannot run a TestCluster (empty when it can)."""
        reasons = []
        if os.geteuid() != 0:
            reasons.append("the test cluster needs root (slurmd runs jobs as root and /etc/hosts may need node names)")
        if self.root is None:
            missing = [b for b in _REQUIRED_BINARIES if not _which(b)]
            if missing:
                reasons.append("not installed: " + ", ".join(missing) + " (run contrib/testcluster/install-deps.sh)")
            return reasons
        if not (Path(self.root) / CHROOT_STAMP).is_file():
            reasons.append(
                f"the {self.name} chroot (Slurm {self.major}) is not built in {self.root} (run {MAKE_CHROOT} as root)"
            )
        for tool in ("unshare", "nsenter", "chroot"):
            if not _which(tool):
                reasons.append(f"{tool} not found (util-linux/coreutils)")
        return reasons


def _slurm_version(argv: Sequence[str]) -> str:
    try:
        out = subprocess.run(list(argv), capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return ""
    m = re.search(r"(\d+\.\d+\.\d+)", out)
    return m.group(1) if m else ""


def native_release() -> Release:
    """The host's own Slurm (version "" when it is not installed)."""
    ctld = _which("slurmctld")
    return Release("native", _slurm_version([ctld, "-V"]) if ctld else "")


def host_suite() -> str:
    """The host's Debian codename ("bookworm"), "" if unknown."""
    try:
        text = Path("/etc/os-release").read_text()
    except OSError:
        return ""
    m = re.search(r'^VERSION_CODENAME="?([a-z]+)"?$', text, re.M)
    return m.group(1) if m else ""


def other_suites() -> List[str]:
    """The Debian suites of the matrix whose Slurm the host does not have: trixie
    (24.11) and forky (26.05) on bookworm (22.05) and anywhere else, bookworm and
    forky on trixie (the list make-chroot.sh builds when called without --suite)."""
    host = "forky" if host_suite() == "sid" else host_suite()
    if host not in MATRIX_SUITES:
        host = "bookworm"
    return [s for s in MATRIX_SUITES if s != host]


def other_suite() -> str:
    """The first of ``other_suites()`` (trixie on bookworm, bookworm on trixie)."""
    return other_suites()[0]


def chroot_cache() -> Path:
    return Path(os.environ.get(CHROOT_CACHE_ENV) or DEFAULT_CHROOT_CACHE)


def chroot_release(suite: str) -> Release:
    """The release in ``make-chroot.sh --suite SUITE``'s chroot (built or not)."""
    root = chroot_cache() / suite
    version = SUITE_SLURM.get("forky" if suite == "sid" else suite, "")
    try:
        m = re.search(r"^slurm_version=(\S+)$", (root / CHROOT_STAMP).read_text(), re.M)
        if m:
            version = m.group(1)
    except OSError:
        pass
    return Release(suite, version, str(root))


def test_releases() -> List[Release]:
    """The releases the cluster tests run on: the native one and the other
    Debian releases' chroots (``other_suites()``) -- or what
    ``SLURMGPU_TESTCLUSTER_RELEASES`` names ("native", suite names,
    comma-separated).  A chroot of the same major release as the native one
    is left out unless named."""
    names = [n.strip() for n in os.environ.get(RELEASES_ENV, "").split(",") if n.strip()]
    if names:
        return [native_release() if n == "native" else chroot_release(n) for n in names]
    native = native_release()
    others = [chroot_release(s) for s in other_suites()]
    return [native] + [o for o in others if o.major != native.major]


@dataclass(frozen=True)
class Partition:
    """One partition and the shape of every node in it.

    Two partitions may list the same node names; they must then agree on
    the node shape.
    """

    name: str
    nodes: Tuple[str, ...]
    gpu_type: str
    gpus_per_node: int
    cpus_per_node: int = 16
    memory_mb: int = 64000
    features: Tuple[str, ...] = ()
    default: bool = False

    @staticmethod
    def node_names(prefix: str, count: int, width: int = 2) -> Tuple[str, ...]:
        """``node_names("gpu", 4)`` -> ``("gpu01", ..., "gpu04")``."""
        return tuple(f"{prefix}{i:0{width}d}" for i in range(1, count + 1))


DEFAULT_PARTITIONS: Tuple[Partition, ...] = (
    Partition("gpu", Partition.node_names("gpu", 4), "h100", 8, features=("h100", "nvlink"), default=True),
    Partition("gpu4", Partition.node_names("g4n", 2), "a100", 4, features=("a100", "nvlink")),
    Partition("pcie", Partition.node_names("pc", 2), "l40s", 8, features=("l40s", "pcie")),
)


@dataclass
class JobResult:
    """Final state of a job, as ``scontrol show job`` reported it."""

    job_id: int
    state: str  # e.g. "COMPLETED", "FAILED"
    exit_code: int  # from ExitCode=<code>:<signal>
    signal: int
    info: Dict[str, str] = field(default_factory=dict)  # all key=value pairs
    stdout: Optional[str] = None  # contents of StdOut, if readable

    @property
    def ok(self) -> bool:
        return self.state == "COMPLETED" and self.exit_code == 0


@dataclass(frozen=True)
class _Node:
    name: str
    cpus: int
    memory_mb: int
    gpu_type: str
    gpus: int
    features: Tuple[str, ...]


ACCOUNTING_BINARIES = ("slurmdbd", "mariadbd", "mariadb-install-db", "mariadb", "sacct", "sacctmgr")
ACCOUNTING_ACCOUNT = "research"
ACCOUNTING_USERS = ("root", "nobody")


def accounting_missing(release: Optional[Release] = None) -> List[str]:
    """Reasons a cluster of ``release`` cannot run with accounting (empty when it can)."""
    release = release or Release("native", "")
    if release.root is not None:
        return [f"accounting (slurmdbd + MariaDB) runs on the native release only, not the {release.name} chroot"]
    missing = [b for b in ACCOUNTING_BINARIES if not _which(b)]
    if missing:
        return ["not installed: " + ", ".join(missing) + " (run contrib/testcluster/install-deps.sh)"]
    return []


def missing_prerequisites(release: Optional[Release] = None) -> List[str]:
    """Reasons this process cannot run a TestCluster of ``release`` (default:
    the native one); empty when it can."""
    return (release or Release("native", "")).missing()


def _which(name: str) -> Optional[str]:
    return shutil.which(name, path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin:/usr/bin:/bin")


def _nodes_from_partitions(partitions: Sequence[Partition]) -> List[_Node]:
    nodes: Dict[str, _Node] = {}
    for part in partitions:
        for name in part.nodes:
            node = _Node(name, part.cpus_per_node, part.memory_mb, part.gpu_type, part.gpus_per_node, part.features)
            if nodes.setdefault(name, node) != node:
                raise ValueError(f"node {name} is listed in several partitions with different shapes")
    if not nodes:
        raise ValueError("no nodes")
    if sum(p.default for p in partitions) > 1:
        raise ValueError("more than one default partition")
    return list(nodes.values())


# The daemons' ports: above the per-job rendezvous ports of generated scripts
# (MASTER_PORT=$((20000 + SLURM_JOB_ID % 10000)), templates/parts/rendezvous.j2), which a job
# on this host would otherwise find taken by a slurmd now and then (EADDRINUSE), and below
# Linux's ephemeral range (32768-60999 by default).
JOB_PORTS = range(20000, 30000)
DAEMON_PORTS = range(30000, 32768)


# Where clusters of every process on this host (the test matrix runs one process per Slurm
# release at once) reserve their ports: a file per port, held under flock(2) from the moment
# the port is chosen until the cluster's daemons are stopped.  Probing a port free and binding
# it later leaves a window in which another process's cluster can pick the same port (seen in
# CI: a slurmd died with "Address already in use"); the lock closes it for our own clusters,
# and the kernel drops it if the process dies.
PORT_LOCK_DIR = Path("/tmp/sgtc-ports")


class PortReservation:
    """Ports chosen for one cluster, each locked against every other reservation on this
    host until ``release()``."""

    def __init__(self, ports: List[int], fds: List[int]) -> None:
        self.ports = ports
        self._fds = fds

    def release(self) -> None:
        """Unlock the ports (safe to call twice)."""
        fds, self._fds = self._fds, []
        for fd in fds:
            os.close(fd)


def _lock_port(port: int) -> Optional[int]:
    """An fd holding the port's lock, or None when another reservation holds it."""
    path = PORT_LOCK_DIR / str(port)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CREAT, 0o644)
    except PermissionError:  # another user's lock file this process cannot create or read
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None
    return fd


def _reserve_ports(count: int) -> PortReservation:
    """``count`` distinct TCP ports, random, from DAEMON_PORTS: each unlocked by any other
    reservation on this host and free to bind when chosen."""
    if not PORT_LOCK_DIR.is_dir():
        PORT_LOCK_DIR.mkdir(parents=True, exist_ok=True)
        try:
            os.chmod(PORT_LOCK_DIR, 0o1777)  # like /tmp: any user's clusters lock here
        except PermissionError:
            pass
    ports: List[int] = []
    fds: List[int] = []
    rng = random.SystemRandom()
    for _ in range(count * 50):
        if len(ports) == count:
            break
        port = rng.choice(DAEMON_PORTS)
        if port in ports:
            continue
        fd = _lock_port(port)
        if fd is None:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("0.0.0.0", port))
            except OSError:
                os.close(fd)
                continue
        ports.append(port)
        fds.append(fd)
    if len(ports) != count:
        PortReservation(ports, fds).release()
        raise ClusterError(f"could not find {count} free TCP ports in {DAEMON_PORTS.start}-{DAEMON_PORTS.stop - 1}")
    return PortReservation(ports, fds)


def _tail(path: Path, lines: int) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 200 * lines))
            data = f.read().decode("utf-8", "replace")
    except OSError as e:
        return f"<cannot read {path}: {e}>"
    return "\n".join(data.splitlines()[-lines:])


def _pid_alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read()
    except OSError:
        return False
    # "pid (comm) S ..."; comm may contain spaces and parentheses.
    return fields[fields.rfind(b")") + 2 :][:1] not in (b"Z", b"X", b"")


def _pid_cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode("utf-8", "replace")
    except OSError:
        return ""


def _proc_table() -> Dict[int, Tuple[int, str, str]]:
    """pid -> (ppid, state, comm) for every process we can see."""
    table = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                raw = f.read().decode("utf-8", "replace")
        except OSError:
            continue
        comm = raw[raw.find("(") + 1 : raw.rfind(")")]
        rest = raw[raw.rfind(")") + 2 :].split()
        if len(rest) >= 2:
            table[int(entry)] = (int(rest[1]), rest[0], comm)
    return table


def _has_env(pid: int, needle: bytes) -> bool:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return needle in f.read().split(b"\0")
    except OSError:
        return False


def _job_processes(conf: str) -> List[int]:
    """slurmstepd processes of the cluster whose slurm.conf is ``conf`` (they
    inherit SLURM_CONF from slurmd and outlive it), plus their descendants
    (job tasks, srun).  Children first."""
    table = _proc_table()
    needle = f"SLURM_CONF={conf}".encode()
    roots = {
        pid
        for pid, (_, state, comm) in table.items()
        if comm == "slurmstepd" and state != "Z" and _has_env(pid, needle)
    }
    children: Dict[int, List[int]] = {}
    for pid, (ppid, _, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    order: List[int] = []
    todo = list(roots)
    while todo:
        pid = todo.pop()
        if pid in order or pid == os.getpid():
            continue
        order.append(pid)
        todo.extend(children.get(pid, ()))
    return order[::-1]


# The daemons are started by a tiny supervisor process that is a Linux "child
# subreaper": slurmd double-forks slurmstepd, so without it finished steps
# become zombies of pid 1, which containers and micro-VMs often never reap.
# Protocol: one JSON request per stdin line {"argv", "env", "cwd", "log"},
# answered by one line {"pid": N} or {"error": "..."}.  After stdin closes the
# supervisor only reaps, and exits when it has no children left.
_SUPERVISOR = r"""
import ctypes, json, os, select, subprocess, sys
try:
    ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)
except Exception:
    pass
def reap():
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return False
        if pid == 0:
            return True
stdin_open = True
while stdin_open:
    ready, _, _ = select.select([sys.stdin], [], [], 0.5)
    if ready:
        line = sys.stdin.readline()
        if not line:
            stdin_open = False
            break
        req = json.loads(line)
        try:
            with open(req["log"], "ab") as log:
                proc = subprocess.Popen(req["argv"], env=req["env"],
                                        cwd=req["cwd"], stdin=subprocess.DEVNULL,
                                        stdout=log, stderr=subprocess.STDOUT)
            reply = {"pid": proc.pid}
        except OSError as e:
            reply = {"error": str(e)}
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()
    reap()
sys.stdout.close()
while True:
    try:
        os.wait()
    except ChildProcessError:
        break
    except InterruptedError:
        pass
"""


# sh -c script run by unshare(1) in the new mount namespace before the
# supervisor: "$1" the chroot, then "rw:/path" / "ro:/path" host directories to
# bind at the same path inside it, "--", the supervisor's argv.  /proc is the
# only other mount; /dev and /run stay the chroot's own.
_NS_SETUP = r"""
set -eu
root=$1; shift
mount -t proc -o nosuid,nodev,noexec proc "$root/proc"
while [ "$1" != "--" ]; do
    mode=${1%%:*}; path=${1#*:}
    mkdir -p "$root$path"
    if [ "$mode" = ro ]; then
        mount -o bind,ro "$path" "$root$path"
    else
        mount --bind "$path" "$root$path"
    fi
    shift
done
shift
exec "$@"
"""


def _bind_specs(writable: Sequence[Union[str, os.PathLike]], readonly: Sequence[Union[str, os.PathLike]]) -> List[str]:
    """ "rw:/path" / "ro:/path" arguments for _NS_SETUP: outermost first, none
    inside another (a read-write one wins over a read-only one of the same
    path)."""
    wanted = [("rw", str(Path(p).resolve())) for p in writable] + [("ro", str(Path(p).resolve())) for p in readonly]
    out: List[Tuple[str, str]] = []
    for mode, path in sorted(wanted, key=lambda mp: (len(mp[1]), mp[0] == "ro")):
        if not any(path == q or path.startswith(q.rstrip("/") + "/") for _, q in out):
            out.append((mode, path))
    return [f"{mode}:{path}" for mode, path in out]


def release_run(
    release: Release,
    argv: Sequence[str],
    *,
    shared_paths: Sequence[Union[str, os.PathLike]] = (),
    writable_paths: Sequence[Union[str, os.PathLike]] = (),
    cwd: Optional[Union[str, os.PathLike]] = None,
    env: Optional[Mapping[str, str]] = None,
    timeout: float = 300.0,
) -> subprocess.CompletedProcess[str]:
    """Run one command with ``release``'s programs, no cluster needed (e.g.
    ``make`` of the SPANK plugin against its spank.h): natively, or inside
    its chroot in a private mount namespace of its own that shares
    ``shared_paths`` (read-only) and ``writable_paths`` at the same paths,
    and is gone when the command exits."""
    workdir = str(cwd) if cwd else "/"
    if release.root is None:
        return subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, cwd=workdir, env=env)
    reasons = release.missing()
    if reasons:
        raise ClusterError("; ".join(reasons))
    binds = _bind_specs(writable_paths, shared_paths)
    cmd = [
        "unshare",
        "--mount",
        "--propagation",
        "private",
        "--",
        "/bin/sh",
        "-c",
        _NS_SETUP,
        "sh",
        release.root,
        *binds,
        "--",
        "chroot",
        release.root,
        "/usr/bin/env",
        "-C",
        workdir,
        "--",
        *argv,
    ]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)


def _host_problems(release: Release, cluster_dir: Optional[Union[str, os.PathLike]]) -> List[str]:
    problems = []
    try:
        st = os.stat("/dev/null")
        if not stat.S_ISCHR(st.st_mode) or os.major(st.st_rdev) != 1 or os.minor(st.st_rdev) != 3:
            problems.append("the host's /dev/null is not the null device (char 1:3) any more")
    except OSError as e:
        problems.append(f"cannot stat the host's /dev/null: {e}")
    if release.root is None:
        return problems
    root = str(Path(release.root).resolve())
    try:
        with open("/proc/self/mounts") as f:
            mounts = [line.split()[1] for line in f if len(line.split()) > 1]
    except OSError:
        mounts = []
    leaked = [m for m in mounts if m == root or m.startswith(root + "/")]
    if leaked:
        problems.append("mounts of the chroot in the host's /proc/mounts: " + ", ".join(leaked))
    if cluster_dir:
        for pid in _proc_table():
            if TestCluster._root_of(pid) == root and str(cluster_dir) in _pid_cmdline(pid):
                problems.append(f"process {pid} left in the chroot: {_pid_cmdline(pid)[:120]}")
    return problems


def _write_atomic(path: Path, text: str, mtime: Optional[int] = None) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    os.chmod(tmp, 0o644)
    if mtime is not None:
        os.utime(tmp, (mtime, mtime))
    os.replace(tmp, path)


def _make_fake_gpu(path: Path) -> None:
    """A character device that behaves like /dev/null: slurmd refuses plain
    files in gres.conf ("not a valid character or block device") and then
    sets no CUDA_VISIBLE_DEVICES."""
    try:
        os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    except OSError:
        os.symlink("/dev/null", path)  # stat() follows it: still a char dev


_SCONTROL_KEY = re.compile(r"[A-Za-z][A-Za-z0-9_:/]*")


def _parse_scontrol_oneliner(text: str) -> Dict[str, str]:
    """Parse one line of ``scontrol show ... -o`` output into a dict.  A
    space-separated word that is not ``Key=...`` belongs to the previous
    value (Command= or Comment= with spaces)."""
    info: Dict[str, str] = {}
    key = None
    for token in text.strip().split(" "):
        name, sep, value = token.partition("=")
        if sep and _SCONTROL_KEY.fullmatch(name):
            key = name
            info[key] = value
        elif key is not None:
            info[key] += " " + token
    return info


class TestCluster:
    """A local fake-GPU Slurm cluster; use as a context manager.

    ``TestCluster(...)`` only records settings; ``start()`` (or ``with``)
    creates the directory and the daemons, ``stop()`` removes them.
    """

    __test__ = False  # not a pytest test class, despite the name

    def __init__(
        self,
        partitions: Optional[Sequence[Partition]] = None,
        *,
        job_submit_lua: Optional[str] = None,
        cli_filter_lua: Optional[str] = None,
        base_dir: Optional[Union[str, os.PathLike]] = None,
        keep_dir: bool = False,
        start_timeout: float = 60.0,
        extra_config: str = "",
        debug_level: str = "info",
        release: Optional[Release] = None,
        shared_paths: Sequence[Union[str, os.PathLike]] = (),
        writable_paths: Sequence[Union[str, os.PathLike]] = (),
        topology_blocks: Optional[Mapping[str, Sequence[str]]] = None,
        block_sizes: Sequence[int] = (),
        topology_conf: Optional[Tuple[str, str]] = None,
        accounting: bool = False,
        task_plugin: str = "task/none",
    ) -> None:
        self.release = release or native_release()
        # TaskPlugin: task/none by default; task/affinity makes slurmd bind tasks (--cpu-bind) for
        # the affinity tests (give such a cluster nodes with this machine's real CPU count)
        self.task_plugin = task_plugin
        self.accounting = accounting
        self.dbd_port = 0
        self.db_port = 0
        self.accounting_seconds: Optional[float] = None
        # host directories a chroot release sees at the same path: read-only,
        # read-write (the base directory always is)
        self.shared_paths = tuple(str(Path(p).resolve()) for p in shared_paths)
        self.writable_paths = tuple(str(Path(p).resolve()) for p in writable_paths)
        # topology/block (Slurm 23.11+): block name -> its nodes, BlockSizes
        self.topology_blocks = dict(topology_blocks or {})
        self.block_sizes = tuple(block_sizes)
        # (TopologyPlugin, topology.conf text) as `slurmgpu admin topology` writes it
        self.topology_conf = topology_conf
        self.partitions: Tuple[Partition, ...] = tuple(DEFAULT_PARTITIONS if partitions is None else partitions)
        self._shapes = _nodes_from_partitions(self.partitions)
        self.nodes: List[str] = [n.name for n in self._shapes]
        self.job_submit_enabled = job_submit_lua is not None
        self.cli_filter_enabled = cli_filter_lua is not None
        self._initial_job_submit = job_submit_lua
        self._initial_cli_filter = cli_filter_lua
        self._base_dir = Path(base_dir) if base_dir else Path("/tmp")
        self.keep_dir = keep_dir
        self.start_timeout = start_timeout
        self.extra_config = extra_config
        self.debug_level = debug_level
        self.dir: Optional[Path] = None
        self.ctld_port = 0
        self.node_ports: Dict[str, int] = {}
        self._ports: Optional[PortReservation] = None
        self.pids: Dict[str, int] = {}  # "slurmctld" / node name -> pid
        self._supervisor: Optional[subprocess.Popen] = None
        self.supervisor_pid = 0
        self.startup_seconds: Optional[float] = None
        self.hosts_warning: Optional[str] = None
        self._munged_pid = 0

    @property
    def in_chroot(self) -> bool:
        return self.release.root is not None

    @property
    def root(self) -> Optional[Path]:
        """The chroot of the release; None for the native one."""
        return Path(self.release.root) if self.release.root else None

    @property
    def python(self) -> str:
        """A Python 3 that this cluster's jobs can run (see Release.python)."""
        return self.release.python

    # ----------------------------------------------------------------- paths
    def _require_dir(self) -> Path:
        if self.dir is None:
            raise ClusterError("the test cluster is not started")
        return self.dir

    @property
    def conf_path(self) -> Path:
        """Absolute path of slurm.conf (what SLURM_CONF must name)."""
        return self._require_dir() / "etc" / "slurm.conf"

    @property
    def conf_dir(self) -> Path:
        return self.conf_path.parent

    @property
    def job_submit_path(self) -> Path:
        return self.conf_dir / "job_submit.lua"

    @property
    def cli_filter_path(self) -> Path:
        return self.conf_dir / "cli_filter.lua"

    @property
    def jobs_dir(self) -> Path:
        """Working directory of ``sbatch()``; default job output lands here."""
        return self._require_dir() / "jobs"

    @property
    def log_dir(self) -> Path:
        return self._require_dir() / "log"

    @property
    def ctld_log_path(self) -> Path:
        return self.log_dir / "slurmctld.log"

    def slurmd_log_path(self, node: str) -> Path:
        return self.log_dir / f"slurmd-{node}.log"

    @property
    def dbd_conf_path(self) -> Path:
        return self.conf_dir / "slurmdbd.conf"

    @property
    def mysql_dir(self) -> Path:
        """MariaDB's directory (owned by mysql): data/, the socket, the error log."""
        return self._require_dir() / "mysql"

    @property
    def bin_dir(self) -> Optional[Path]:
        """For a chroot release: wrappers that run its clients (sbatch, srun,
        ...) in the chroot, first in ``env``'s PATH; None for the native one."""
        return self._require_dir() / "bin" if self.in_chroot else None

    @property
    def munge_socket(self) -> Optional[Path]:
        """The cluster's own munged socket (chroot releases); None: the
        system's munged."""
        return self._require_dir() / "munge" / "munge.socket" if self.in_chroot else None

    @property
    def env(self) -> Dict[str, str]:
        """Environment for Slurm clients: ``os.environ`` plus SLURM_CONF (and
        for a chroot release ``bin_dir`` first in PATH)."""
        env = dict(os.environ)
        for key in list(env):  # don't leak an outer job's settings
            if key.startswith(("SLURM_", "SBATCH_", "SALLOC_", "SRUN_", "SQUEUE_", "SINFO_")):
                del env[key]
        env["SLURM_CONF"] = str(self.conf_path)
        if self.bin_dir is not None:
            env["PATH"] = os.pathsep.join([str(self.bin_dir), env.get("PATH") or "/usr/bin:/bin"])
        return env

    @property
    def default_partition(self) -> Optional[str]:
        for p in self.partitions:
            if p.default:
                return p.name
        return None

    # ------------------------------------------------------------- lifecycle
    def __enter__(self) -> TestCluster:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def start(self) -> TestCluster:
        """Create the config, start munge (if needed), slurmctld and every
        slurmd; return once ``sinfo`` shows every node idle."""
        if self.dir is not None:
            raise ClusterError("the test cluster is already started")
        reasons = self.release.missing() + (accounting_missing(self.release) if self.accounting else [])
        if reasons:
            raise ClusterError("; ".join(reasons))
        t0 = time.monotonic()
        self._base_dir.mkdir(parents=True, exist_ok=True)
        # Short paths: slurmd puts unix sockets (108-byte limit) in its spool.
        self.dir = Path(tempfile.mkdtemp(prefix="sgtc-", dir=self._base_dir))
        try:
            os.chmod(self.dir, 0o755)
            self._ports = _reserve_ports(3 + len(self.nodes))
            ports = self._ports.ports
            self.ctld_port, self.dbd_port, self.db_port = ports[:3]
            self.node_ports = dict(zip(self.nodes, ports[3:]))
            self._write_config()
            self._ensure_hosts()
            if not self.in_chroot:
                _ensure_munge()
            self._start_daemons()
            self._wait_idle(t0 + self.start_timeout)
        except BaseException:
            self.stop()
            raise
        self.startup_seconds = time.monotonic() - t0
        return self

    def stop(self) -> None:
        """Cancel jobs, stop the daemons this object started (by pid), kill
        leftover job processes of this cluster, remove the directory unless
        ``keep_dir``.  Safe to call twice."""
        if self.dir is None:
            return
        if self.pids.get("slurmctld") and _pid_alive(self.pids["slurmctld"]):
            self._cancel_all_jobs(wait=5.0)
        self._kill_job_processes()
        # slurmctld and slurmd first, then slurmdbd (they talk to it), then the database
        last = ("slurmdbd", "mariadbd")
        groups = [[p for n, p in self.pids.items() if n not in last]] + [[self.pids[n]] for n in last if n in self.pids]
        for group in groups:
            for pid in group:
                self._signal(pid, signal.SIGTERM)
            deadline = time.monotonic() + 10
            for pid in group:
                if not self._wait_exit(pid, deadline):
                    self._signal(pid, signal.SIGKILL)
                    self._wait_exit(pid, time.monotonic() + 5)
        self._kill_job_processes()
        self._stop_munged()
        self._stop_supervisor()
        self.pids.clear()
        if self._ports is not None:  # only now: the daemons that bound them are gone
            self._ports.release()
            self._ports = None
        if not self.keep_dir:
            shutil.rmtree(self.dir, ignore_errors=True)
        self.dir = None

    def host_problems(self, cluster_dir: Optional[Union[str, os.PathLike]] = None) -> List[str]:
        """What a chroot release may have done to the host (empty: nothing): the host's
        /dev/null no longer the null character device, a mount of the chroot visible in the
        host's /proc/mounts, a process left running in the chroot for this cluster (one whose
        command line names ``cluster_dir``, default the current directory)."""
        return _host_problems(self.release, cluster_dir or self.dir)

    # --------------------------------------------------------------- clients
    def run(
        self,
        cmd: Union[str, Sequence[str]],
        *,
        input: Optional[str] = None,
        timeout: float = 60.0,
        check: bool = False,
        env: Optional[Mapping[str, str]] = None,
        cwd: Optional[Union[str, os.PathLike]] = None,
        host: bool = False,
    ) -> subprocess.CompletedProcess[str]:
        """Run a client command (``"sinfo -N"`` or a list) with ``self.env``
        (updated by ``env``); text output captured.  ``check=True`` raises
        ClusterError with stdout/stderr on a non-zero exit.

        For a chroot release the command runs inside the chroot (``runuser
        -u nobody -- sbatch`` works there); ``host=True`` runs a host program
        instead (``slurmgpu doctor``), which finds the clients through PATH."""
        argv = shlex.split(cmd) if isinstance(cmd, str) else list(cmd)
        full_env = self.env
        if env:
            full_env.update(env)
        workdir = str(cwd) if cwd else str(self.jobs_dir)
        if self.in_chroot and not host:
            argv = self.root_argv(argv, workdir)
        proc = subprocess.run(
            argv,
            input=input,
            capture_output=True,
            text=True,
            timeout=timeout,
            env=full_env,
            cwd=workdir if not self.in_chroot or host else "/",
        )
        if check and proc.returncode != 0:
            raise ClusterError(
                f"{shlex.join(argv)} exited {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
            )
        return proc

    def sbatch(
        self, script_text: Optional[str], *args: str, timeout: float = 60.0, env: Optional[Mapping[str, str]] = None
    ) -> Tuple[int, str, str]:
        """``sbatch *args`` with ``script_text`` on stdin (None: no script,
        e.g. with ``--wrap``), run in ``jobs_dir``.  Returns
        ``(returncode, stdout, stderr)``."""
        proc = self.run(["sbatch", *args], input=script_text, timeout=timeout, env=env)
        return proc.returncode, proc.stdout, proc.stderr

    def submit(
        self, script_text: Optional[str], *args: str, timeout: float = 60.0, env: Optional[Mapping[str, str]] = None
    ) -> int:
        """Like ``sbatch`` but returns the job id; raises ClusterError if the
        submission fails."""
        rc, out, err = self.sbatch(script_text, "--parsable", *args, timeout=timeout, env=env)
        if rc != 0:
            raise ClusterError(f"sbatch failed (rc {rc}): {err.strip()}")
        return int(out.strip().split(";")[0])

    def job_info(self, job_id: int) -> Optional[Dict[str, str]]:
        """``scontrol show job -o`` as a dict; None if the job is unknown."""
        proc = self.run(["scontrol", "show", "job", "-o", str(job_id)])
        if proc.returncode != 0 or not proc.stdout.strip():
            return None
        return _parse_scontrol_oneliner(proc.stdout.splitlines()[0])

    def wait_job(self, job_id: int, timeout: float = 60.0) -> JobResult:
        """Poll until the job reaches a terminal state; return it.  Raises
        ClusterError (with the job record and log tails) on timeout."""
        deadline = time.monotonic() + timeout
        info: Optional[Dict[str, str]] = None
        while time.monotonic() < deadline:
            info = self.job_info(job_id)
            if info is not None:
                state = info.get("JobState", "")
                if state in TERMINAL_JOB_STATES:
                    code, _, sig = info.get("ExitCode", "0:0").partition(":")
                    return JobResult(job_id, state, int(code or 0), int(sig or 0), info, self._read_stdout(info))
            time.sleep(0.25)
        raise ClusterError(f"job {job_id} did not finish within {timeout} s; last record: {info}\n{self.logs()}")

    def _read_stdout(self, info: Mapping[str, str]) -> Optional[str]:
        path = info.get("StdOut")
        if not path:
            return None
        try:
            return Path(path).read_text(errors="replace")
        except OSError:
            return None

    def cancel_all_jobs(self) -> None:
        """scancel every job of this cluster and wait until they are gone."""
        self._cancel_all_jobs(wait=15.0)

    def _cancel_all_jobs(self, wait: float) -> None:
        try:
            ids = self.run(["squeue", "-h", "-o", "%A"], timeout=10).stdout.split()
            if ids:
                self.run(["scancel", *ids], timeout=10)
            deadline = time.monotonic() + wait
            while ids and time.monotonic() < deadline:
                time.sleep(0.25)
                ids = self.run(["squeue", "-h", "-o", "%A"], timeout=10).stdout.split()
        except (subprocess.SubprocessError, OSError):
            pass

    def sinfo_json(self) -> dict:
        """Parsed ``sinfo --json``."""
        return json.loads(self.run(["sinfo", "--json"], check=True).stdout)

    # ------------------------------------------------------------ lua scripts
    def install_job_submit(self, lua_text: str, *, verify: bool = True) -> None:
        """Replace job_submit.lua atomically with an mtime newer than the
        previous file's, so slurmctld reloads it on the next submission.

        ``verify=True`` then submits ``sbatch --test-only --wrap true`` (which
        runs the filter and creates no job) to force the reload, and raises
        ClusterError if ctld.log reports that the script did not load.  That
        probe consumes messages queued by a top-level ``slurm.log_user``; pass
        ``verify=False`` to install a deliberately broken script."""
        if not self.job_submit_enabled:
            raise ClusterError("start the cluster with job_submit_lua=... to enable JobSubmitPlugins=lua")
        self._install_script(self.job_submit_path, lua_text)
        if verify:
            mark = self.log_mark()
            self.sbatch(None, "--test-only", "--wrap", "true")
            bad = [line for line in self.ctld_log(mark).splitlines() if any(m in line for m in _LOAD_FAILURE_MARKERS)]
            if bad:
                raise ClusterError("job_submit.lua did not load:\n" + "\n".join(bad))

    def install_cli_filter(self, lua_text: str) -> None:
        """Replace cli_filter.lua atomically (clients read it on every
        command, so it takes effect at once)."""
        if not self.cli_filter_enabled:
            raise ClusterError("start the cluster with cli_filter_lua=... to enable CliFilterPlugins=lua")
        self._install_script(self.cli_filter_path, lua_text)

    def _install_script(self, path: Path, text: str) -> None:
        try:
            previous = int(path.stat().st_mtime)
        except FileNotFoundError:
            previous = 0
        # 22.05 reloads only if st_mtime (whole seconds) > the loaded mtime.
        _write_atomic(path, text, max(int(time.time()), previous + 1))

    # ------------------------------------------------------------------ logs
    def log_mark(self) -> int:
        """Current size of ctld.log; pass it to ``ctld_log(since=...)``."""
        try:
            return self.ctld_log_path.stat().st_size
        except OSError:
            return 0

    def ctld_log(self, since: int = 0) -> str:
        """slurmctld.log from byte offset ``since``."""
        try:
            with open(self.ctld_log_path, "rb") as f:
                f.seek(since)
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def job_submit_errors(self, since: int = 0) -> List[str]:
        """ctld.log lines (from ``since``) showing job_submit/lua errors, a
        non-numeric return (both fail open on 22.05) or a failed reload."""
        return [line for line in self.ctld_log(since).splitlines() if any(m in line for m in JOB_SUBMIT_ERROR_MARKERS)]

    def logs(self, lines: int = 40, node_lines: int = 10) -> str:
        """Tails of slurmctld.log and of every slurmd log, for test-failure
        output.  A daemon's captured stderr is shown instead of its log when
        it died or never opened the log (early ``fatal:`` lines)."""
        if self.dir is None:
            return "<test cluster not running>"
        parts = [f"== test cluster {self.dir} (SLURM_CONF={self.conf_path})"]
        if self.accounting:
            for path in (self.log_dir / "slurmdbd.log", self.mysql_dir / "mysqld.err"):
                if path.exists() and path.stat().st_size:
                    parts.append(f"== {path.name} last {node_lines} lines:\n" + _tail(path, node_lines))
        daemons = [("slurmctld", self.ctld_log_path, lines)] + [
            (node, self.slurmd_log_path(node), node_lines) for node in self.nodes
        ]
        supervisor = self.log_dir / "supervisor.stderr"
        if supervisor.exists() and supervisor.stat().st_size:
            parts.append("== supervisor.stderr:\n" + _tail(supervisor, lines))
        munged = self.dir / "munge" / "munged.log"
        if self.in_chroot and munged.exists() and munged.stat().st_size:
            parts.append(f"== munged.log ({self.release.name} chroot):\n" + _tail(munged, node_lines))
        for name, log, count in daemons:
            label = "slurmctld" if name == "slurmctld" else f"slurmd-{name}"
            pid = self.pids.get(name)
            dead = pid is not None and not _pid_alive(pid)
            paths = [log]
            if dead or not log.exists() or not log.stat().st_size:
                paths.append(self.log_dir / f"{label}.stderr")
            for path in paths:
                if path.exists() and path.stat().st_size:
                    parts.append(
                        f"== {path.name}{' (DEAD)' if dead else ''} last {count} lines:\n" + _tail(path, count)
                    )
        return "\n".join(parts)

    # -------------------------------------------------------------- internals
    def _write_config(self) -> None:
        d = self._require_dir()
        for sub in ("etc", "log", "run", "state", "spool", "jobs", "dev"):
            (d / sub).mkdir(mode=0o755)
        if self.in_chroot:
            self._prepare_root()
        nodes = self._shapes
        for i in range(max(n.gpus for n in nodes)):  # shared by all nodes
            _make_fake_gpu(d / "dev" / f"nvidia{i}")
        for node in nodes:
            (d / "spool" / node.name).mkdir(mode=0o755)
        host = socket.gethostname().split(".")[0]
        lines = [
            "# Generated by contrib/testcluster/cluster.py",
            "ClusterName=slurmgpu-test",
            "MailProg=/bin/true",
            f"SlurmctldHost={host}(127.0.0.1)",
            f"SlurmctldPort={self.ctld_port}",
            "SlurmUser=root",
            "SlurmdUser=root",
            "AuthType=auth/munge",
            # 23.11 replaced CryptoType with CredType (default cred/munge)
            "CryptoType=crypto/munge" if self.release.version_tuple < (23, 11) else "CredType=cred/munge",
            f"StateSaveLocation={d}/state",
            f"SlurmdSpoolDir={d}/spool/%n",
            f"SlurmctldPidFile={d}/run/slurmctld.pid",
            f"SlurmdPidFile={d}/run/slurmd-%n.pid",
            f"SlurmctldLogFile={self.ctld_log_path}",
            f"SlurmdLogFile={d}/log/slurmd-%n.log",
            f"SlurmctldDebug={self.debug_level}",
            f"SlurmdDebug={self.debug_level}",
            "SlurmdParameters=config_overrides",
            "ProctrackType=proctrack/linuxproc",
            f"TaskPlugin={self.task_plugin}",
            "SwitchType=switch/none",
            "MpiDefault=none",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core",
            "SchedulerType=sched/backfill",
            # Start batch jobs at once (default: up to 3 s delay).
            "SchedulerParameters=batch_sched_delay=0",
            "GresTypes=gpu",
            *self._accounting_lines(),
            "JobAcctGatherType=jobacct_gather/none",
            "JobCompType=jobcomp/none",
            "PropagateResourceLimits=NONE",
            "ReturnToService=2",
            "HealthCheckInterval=0",
            "InactiveLimit=0",
            "KillWait=2",
            "MinJobAge=600",
            "MessageTimeout=10",
            "SlurmctldTimeout=30",
            "SlurmdTimeout=30",
            "TCPTimeout=5",
            "Waittime=0",
            "BatchStartTimeout=20",
            "CompleteWait=0",
        ]
        # cred_expire is also how long a requeued job waits before it may start again (Slurm sets its
        # BeginTime to now + cred_expire + 1; default 120 s); 10 s keeps requeue tests short.
        auth_info = ["cred_expire=10"]
        if self.munge_socket is not None:
            auth_info.insert(0, f"socket={self.munge_socket}")
        lines.append("AuthInfo=" + ",".join(auth_info))
        if self.topology_conf:
            lines.append("TopologyPlugin=" + self.topology_conf[0])
        elif self.topology_blocks:
            lines.append("TopologyPlugin=topology/block")
        if self.job_submit_enabled:
            lines.append("JobSubmitPlugins=lua")
            _write_atomic(self.job_submit_path, self._initial_job_submit or "")
        if self.cli_filter_enabled:
            lines.append("CliFilterPlugins=lua")
            _write_atomic(self.cli_filter_path, self._initial_cli_filter or "")
        gres = []
        for node in nodes:
            sockets = 2 if node.cpus % 2 == 0 else 1
            feat = f" Feature={','.join(node.features)}" if node.features else ""
            gpus = f" Gres=gpu:{node.gpu_type}:{node.gpus}" if node.gpus else ""
            lines.append(
                f"NodeName={node.name} NodeHostname=localhost "
                f"NodeAddr=127.0.0.1 Port={self.node_ports[node.name]} "
                f"CPUs={node.cpus} Boards=1 SocketsPerBoard={sockets} "
                f"CoresPerSocket={node.cpus // sockets} ThreadsPerCore=1 "
                f"RealMemory={node.memory_mb}{gpus}{feat} State=UNKNOWN"
            )
            if node.gpus:
                files = f"{d}/dev/nvidia0" if node.gpus == 1 else f"{d}/dev/nvidia[0-{node.gpus - 1}]"
                gres.append(f"NodeName={node.name} Name=gpu Type={node.gpu_type} File={files}")
        for part in self.partitions:
            lines.append(
                f"PartitionName={part.name} Nodes={','.join(part.nodes)} "
                f"Default={'YES' if part.default else 'NO'} "
                f"MaxTime=INFINITE State=UP"
            )
        if self.extra_config:
            lines.append(self.extra_config)
        (d / "etc" / "slurm.conf").write_text("\n".join(lines) + "\n")
        if self.accounting:
            self._write_dbd_config()
        (d / "etc" / "gres.conf").write_text("\n".join(gres) + "\n")
        (d / "etc" / "cgroup.conf").write_text(self._cgroup_conf())
        if self.topology_conf:
            (d / "etc" / "topology.conf").write_text(self.topology_conf[1])
        elif self.topology_blocks:
            topo = [f"BlockName={name} Nodes={','.join(members)}" for name, members in self.topology_blocks.items()]
            if self.block_sizes:
                topo.append("BlockSizes=" + ",".join(map(str, self.block_sizes)))
            (d / "etc" / "topology.conf").write_text("\n".join(topo) + "\n")

    def _accounting_lines(self) -> List[str]:
        if not self.accounting:
            return ["AccountingStorageType=accounting_storage/none"]
        return [
            "AccountingStorageType=accounting_storage/slurmdbd",
            "AccountingStorageHost=127.0.0.1",
            f"AccountingStoragePort={self.dbd_port}",
            "AccountingStoreFlags=job_script,job_env",
        ]

    def _write_dbd_config(self) -> None:
        """slurmdbd.conf (mode 600, owned by SlurmUser, as slurmdbd demands) and MariaDB's
        directory (owned by mysql)."""
        d = self._require_dir()
        text = "\n".join(
            [
                "# Generated by contrib/testcluster/cluster.py",
                "AuthType=auth/munge",
                "DbdHost=localhost",
                "DbdAddr=127.0.0.1",
                f"DbdPort={self.dbd_port}",
                "SlurmUser=root",
                f"DebugLevel={self.debug_level}",
                f"LogFile={self.log_dir / 'slurmdbd.log'}",
                f"PidFile={d / 'run' / 'slurmdbd.pid'}",
                "StorageType=accounting_storage/mysql",
                "StorageHost=127.0.0.1",
                f"StoragePort={self.db_port}",
                "StorageUser=root",
                "StorageLoc=slurm_acct_db",
                "",
            ]
        )
        fd = os.open(self.dbd_conf_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(text)
        uid, gid = _user_ids("mysql")
        self.mysql_dir.mkdir(mode=0o750)
        os.chown(self.mysql_dir, uid, gid)

    # MariaDB sized for a test: small log and buffer pool, no binary log, no performance schema
    _MARIADB_OPTS = (
        "--skip-name-resolve",
        "--innodb-log-file-size=4M",
        "--innodb-buffer-pool-size=16M",
        "--innodb-data-file-path=ibdata1:4M:autoextend",
    )

    def _start_accounting(self) -> None:
        """A private mariadbd and slurmdbd (children of the supervisor), then the cluster's
        associations; before slurmctld, which registers with slurmdbd at start-up."""
        t0 = time.monotonic()
        m = self.mysql_dir
        data = m / "data"
        _mariadb_datadir(data, self._MARIADB_OPTS)
        self._spawn(
            "mariadbd",
            [
                _which("mariadbd") or "mariadbd",
                "--no-defaults",
                f"--datadir={data}",
                "--user=mysql",
                "--bind-address=127.0.0.1",
                f"--port={self.db_port}",
                f"--socket={m / 'mysqld.sock'}",
                f"--pid-file={m / 'mysqld.pid'}",
                f"--log-error={m / 'mysqld.err'}",
                "--skip-log-bin",
                "--performance-schema=OFF",
                *self._MARIADB_OPTS,
            ],
        )
        probe = [_which("mariadb") or "mariadb", "--no-defaults", "-h127.0.0.1", f"-P{self.db_port}", "-uroot"]
        self._wait_for(
            "mariadbd", lambda: subprocess.run(probe + ["-e", "select 1"], capture_output=True).returncode == 0
        )
        self._spawn("slurmdbd", [self._daemon("slurmdbd"), "-D"])
        self._wait_for("slurmdbd", lambda: self.run(["sacctmgr", "-n", "list", "cluster"], timeout=10).returncode == 0)
        users = ",".join(ACCOUNTING_USERS)
        for cmd in (
            ["sacctmgr", "-i", "add", "cluster", "slurmgpu-test"],
            ["sacctmgr", "-i", "add", "account", ACCOUNTING_ACCOUNT, "Cluster=slurmgpu-test", "Description=tests"],
            ["sacctmgr", "-i", "add", "user", users, f"Account={ACCOUNTING_ACCOUNT}", "Cluster=slurmgpu-test"],
        ):
            self.run(cmd, timeout=30, check=True)
        self.accounting_seconds = time.monotonic() - t0

    def _wait_for(self, what: str, ready, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self._check_alive()
            if ready():
                return
            time.sleep(0.2)
        raise ClusterError(f"{what} not ready after {timeout:.0f} s\n{self.logs()}")

    def sacct(self, *args: str, timeout: float = 60.0) -> str:
        """``sacct *args`` (accounting clusters), stdout; raises ClusterError on failure."""
        return self.run(["sacct", *args], timeout=timeout, check=True).stdout

    def _cgroup_conf(self) -> str:
        """No cgroups are used (task/none, proctrack/linuxproc), but slurmd
        (22.05 and 24.11 alike) initialises its cgroup plugin at start-up
        whatever the task plugin, and ``autodetect`` dies when /sys/fs/cgroup
        is not mounted (a chroot has no /sys).  cgroup/v1 loads without
        touching any cgroup file system until a task or proctrack plugin asks
        for a controller."""
        if self.in_chroot:
            return "CgroupPlugin=cgroup/v1\n"
        return "CgroupPlugin=autodetect\n"

    def _ensure_hosts(self) -> None:
        try:
            text = Path(_HOSTS_FILE).read_text()
            known = {tok for line in text.splitlines() for tok in line.split("#", 1)[0].split()[1:]}
            missing = [n for n in self.nodes if n not in known]
            if missing:
                sep = "" if not text or text.endswith("\n") else "\n"
                with open(_HOSTS_FILE, "a") as f:
                    f.write(f"{sep}127.0.0.1 {' '.join(missing)} {_HOSTS_TAG}\n")
        except OSError as e:
            self.hosts_warning = f"could not add node names to {_HOSTS_FILE}: {e}; MASTER_ADDR=<node> will not resolve"
        if self.root is not None:  # the chroot resolves names like the host
            try:
                _write_atomic(self.root / "etc" / "hosts", Path(_HOSTS_FILE).read_text())
            except OSError as e:
                raise ClusterError(f"cannot write the chroot's /etc/hosts: {e}") from e

    # ------------------------------------------------------- chroot releases
    def _prepare_root(self) -> None:
        """Refuse a chroot whose /dev is not its own; make the cluster's munge
        directory (owned by the chroot's munge user)."""
        root = self._require_root()
        for name in ("null", "zero", "random", "urandom", "tty", "full"):
            st = os.lstat(root / "dev" / name)
            if not stat.S_ISCHR(st.st_mode):
                raise ClusterError(
                    f"{root}/dev/{name} is not a character device: rebuild the chroot ({MAKE_CHROOT} --rebuild)"
                )
        if os.path.ismount(root / "dev") or os.path.ismount(root / "run"):
            raise ClusterError(
                f"something is mounted on {root}/dev or {root}/run in this namespace: the chroot must have its own"
            )
        uid, gid = self._root_user("munge")
        munge_dir = self._require_dir() / "munge"
        munge_dir.mkdir(mode=0o755)
        os.chown(munge_dir, uid, gid)

    def _require_root(self) -> Path:
        if self.root is None:
            raise ClusterError("not a chroot release")
        return self.root

    def _root_user(self, name: str) -> Tuple[int, int]:
        """uid and gid of ``name`` in the chroot's /etc/passwd."""
        for line in (self._require_root() / "etc" / "passwd").read_text().splitlines():
            fields = line.split(":")
            if len(fields) > 3 and fields[0] == name:
                return int(fields[2]), int(fields[3])
        raise ClusterError(f"no user {name} in {self.root}/etc/passwd")

    def _shared(self) -> List[str]:
        """Host directories bound into the chroot at the same path, outermost
        first, none inside another: the base directory (read-write) and
        ``writable_paths``, ``shared_paths`` (read-only), as "rw:/path" /
        "ro:/path"."""
        return _bind_specs([self._base_dir, *self.writable_paths], self.shared_paths)

    def root_argv(self, argv: Sequence[str], cwd: Optional[str] = None) -> List[str]:
        """``argv`` as a command that runs it inside the chroot, in the
        supervisor's mount namespace, in directory ``cwd`` (default /)."""
        if not self.supervisor_pid:
            raise ClusterError("the cluster's mount namespace is gone (not started?)")
        return [
            "nsenter",
            f"--mount=/proc/{self.supervisor_pid}/ns/mnt",
            "--",
            "chroot",
            str(self._require_root()),
            "/usr/bin/env",
            "-C",
            cwd or "/",
            "--",
            *argv,
        ]

    def _write_wrappers(self) -> None:
        """bin_dir/<client> for every program of the chroot's slurm-client:
        from the host it enters the namespace and the chroot; inside the
        chroot (jobs inherit PATH) it runs the real program."""
        root = self._require_root()
        listing = root / "var" / "lib" / "dpkg" / "info" / "slurm-client.list"
        try:
            names = sorted({Path(p).name for p in listing.read_text().split() if p.startswith("/usr/bin/")})
        except OSError as e:
            raise ClusterError(f"cannot list the chroot's Slurm clients: {e}") from e
        bin_dir = self.bin_dir
        assert bin_dir is not None
        bin_dir.mkdir(mode=0o755)
        enter = shlex.join(
            [
                "nsenter",
                f"--mount=/proc/{self.supervisor_pid}/ns/mnt",
                "--",
                "chroot",
                str(root),
                "/bin/sh",
                "-c",
                'cd "$0" 2>/dev/null || cd /; exec "$@"',
            ]
        )
        for name in names:
            prog = shlex.quote(f"/usr/bin/{name}")
            text = (
                f"#!/bin/sh\n"
                f"# slurmgpu test cluster: {name} of Slurm {self.release.version} in {root}\n"
                f'if [ -e /{CHROOT_STAMP} ]; then exec {prog} "$@"; fi\n'
                f'exec {enter} "$PWD" {prog} "$@"\n'
            )
            path = bin_dir / name
            path.write_text(text)
            os.chmod(path, 0o755)

    def _start_munged(self) -> None:
        """The cluster's own munged inside the chroot (the chroot's key, a
        socket in the cluster directory); waits until a credential round-trips."""
        d = self._require_dir() / "munge"
        sock = str(self.munge_socket)
        argv = [
            "/usr/bin/setpriv",
            "--reuid=munge",
            "--regid=munge",
            "--init-groups",
            "/usr/sbin/munged",
            "--foreground",
            f"--socket={sock}",
            f"--pid-file={d}/munged.pid",
            f"--log-file={d}/munged.log",
            f"--seed-file={d}/munged.seed",
        ]
        self._spawn("munged", argv)
        self._munged_pid = self.pids.pop("munged")
        probe = shlex.join(["munge", "-n", "-S", sock]) + " | " + shlex.join(["unmunge", "-S", sock])
        deadline = time.monotonic() + 15
        last = ""
        while time.monotonic() < deadline:
            if not _pid_alive(self._munged_pid):
                break
            p = subprocess.run(self.root_argv(["/bin/sh", "-c", probe]), capture_output=True, text=True, timeout=15)
            if p.returncode == 0:
                return
            last = p.stderr.strip()
            time.sleep(0.2)
        raise ClusterError(
            f"the chroot's munged did not work: {last}\n"
            + _tail(d / "munged.log", 10)
            + "\n"
            + _tail(self.log_dir / "munged.stderr", 10)
        )

    def _stop_munged(self) -> None:
        """Stop the chroot's munged by its pid file (and the pid it started as,
        which must be the same process: a munged in this chroot)."""
        if not self._munged_pid or self.dir is None:
            return
        pids = {self._munged_pid}
        try:
            pids.add(int((self.dir / "munge" / "munged.pid").read_text().split()[0]))
        except (OSError, ValueError, IndexError):
            pass
        for pid in pids:
            if _pid_alive(pid) and self._root_of(pid) == str(self.root) and "munged" in _pid_cmdline(pid):
                try:
                    os.kill(pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        deadline = time.monotonic() + 5
        for pid in pids:
            if not self._wait_exit(pid, deadline) and "munged" in _pid_cmdline(pid):
                os.kill(pid, signal.SIGKILL)
        self._munged_pid = 0

    @staticmethod
    def _root_of(pid: int) -> str:
        try:
            return os.readlink(f"/proc/{pid}/root")
        except OSError:
            return ""

    def _start_daemons(self) -> None:
        conf = str(self.conf_path)
        argv = [sys.executable, "-c", _SUPERVISOR]
        if self.in_chroot:
            # a private mount namespace for the chroot's mounts: they vanish
            # with its last process and never show in the host's /proc/mounts
            argv = [
                "unshare",
                "--mount",
                "--propagation",
                "private",
                "--",
                "/bin/sh",
                "-c",
                _NS_SETUP,
                "sh",
                str(self._require_root()),
                *self._shared(),
                "--",
                *argv,
            ]
        with open(self.log_dir / "supervisor.stderr", "wb") as err:
            self._supervisor = subprocess.Popen(
                argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=err,
                text=True,
                cwd=str(self.dir),
                start_new_session=True,
            )  # no SIGINT from the terminal
        self.supervisor_pid = self._supervisor.pid
        if self.in_chroot:
            self._start_munged()
            self._write_wrappers()
        if self.accounting:
            self._start_accounting()
        self._spawn("slurmctld", [self._daemon("slurmctld"), "-D", "-f", conf])
        # Let slurmctld bind its port before the nodes register.
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            self._check_alive()
            if self.run(["scontrol", "ping"], timeout=10).returncode == 0:
                break
            time.sleep(0.2)
        for node in self.nodes:
            self._spawn(node, [self._daemon("slurmd"), "-D", "-N", node, "-f", conf])
        assert self._supervisor.stdin is not None
        self._supervisor.stdin.close()  # from now on it only reaps

    def _daemon(self, name: str) -> str:
        if self.in_chroot:
            return f"/usr/sbin/{name}"
        return _which(name) or name

    def _spawn(self, name: str, argv: List[str]) -> None:
        sup = self._supervisor
        assert sup is not None and sup.stdin and sup.stdout
        label = name if name in ("slurmctld", "munged", "slurmdbd", "mariadbd") else f"slurmd-{name}"
        if self.in_chroot:
            argv = ["chroot", str(self._require_root()), "/usr/bin/env", "-C", str(self.dir), "--", *argv]
        request = {"argv": argv, "env": self.env, "cwd": str(self.dir), "log": str(self.log_dir / f"{label}.stderr")}
        sup.stdin.write(json.dumps(request) + "\n")
        sup.stdin.flush()
        reply = json.loads(sup.stdout.readline() or '{"error": "no reply"}')
        if "pid" not in reply:
            raise ClusterError(f"cannot start {label}: {reply.get('error')}")
        self.pids[name] = int(reply["pid"])

    def _check_alive(self) -> None:
        dead = [n for n, pid in self.pids.items() if not _pid_alive(pid)]
        if dead:
            raise ClusterError(f"exited during start-up: {', '.join(dead)}\n{self.logs()}")

    def _wait_idle(self, deadline: float) -> None:
        states: Dict[str, str] = {}
        while time.monotonic() < deadline:
            self._check_alive()
            proc = self.run(["sinfo", "-h", "-N", "-o", "%N %T"], timeout=10)
            states = dict(line.split(None, 1) for line in proc.stdout.splitlines() if line.strip())
            if proc.returncode == 0 and set(states) >= set(self.nodes) and all(states[n] == "idle" for n in self.nodes):
                return
            time.sleep(0.25)
        raise ClusterError(f"nodes not idle after {self.start_timeout:.0f} s: {states}\n{self.logs()}")

    def _signal(self, pid: int, sig: int) -> None:
        # Only processes of this cluster: guards against pid reuse (slurmdbd's command line
        # names no file of the cluster: it has the cluster's SLURM_CONF in its environment).
        if str(self.conf_path) not in _pid_cmdline(pid) and not (
            str(self.dir) in _pid_cmdline(pid) or _has_env(pid, f"SLURM_CONF={self.conf_path}".encode())
        ):
            return
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass

    @staticmethod
    def _wait_exit(pid: int, deadline: float) -> bool:
        while time.monotonic() < deadline:
            if not _pid_alive(pid):
                return True
            time.sleep(0.1)
        return False

    def _kill_job_processes(self) -> None:
        """Kill slurmstepd and job tasks of this cluster that survived
        scancel (they outlive slurmd)."""
        for sig in (signal.SIGTERM, signal.SIGKILL):
            pids = _job_processes(str(self.conf_path))
            if not pids:
                return
            for pid in pids:
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass
            deadline = time.monotonic() + 3
            for pid in pids:
                self._wait_exit(pid, deadline)

    def _stop_supervisor(self) -> None:
        """It exits by itself once every child is gone and reaped."""
        pid = self.supervisor_pid
        if not pid:
            return
        if self._supervisor is not None:
            if self._supervisor.stdin and not self._supervisor.stdin.closed:
                self._supervisor.stdin.close()
            try:
                self._supervisor.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._supervisor.kill()
                self._supervisor.wait()
            if self._supervisor.stdout:
                self._supervisor.stdout.close()
        elif not self._wait_exit(pid, time.monotonic() + 5):
            if "prctl(36" in _pid_cmdline(pid):
                os.kill(pid, signal.SIGKILL)
        self._supervisor = None
        self.supervisor_pid = 0

    # ---------------------------------------------------------- CLI support
    def _state(self) -> dict:
        return {
            "dir": str(self.dir),
            "pids": self.pids,
            "supervisor": self.supervisor_pid,
            "release": self.release.name,
            "munged": self._munged_pid,
            "partitions": [p.__dict__ for p in self.partitions],
            "job_submit": self.job_submit_enabled,
            "cli_filter": self.cli_filter_enabled,
            "accounting": self.accounting,
        }

    @classmethod
    def _from_state(cls, state: Mapping) -> TestCluster:
        parts = [
            Partition(**{k: tuple(v) if isinstance(v, list) else v for k, v in p.items()}) for p in state["partitions"]
        ]
        name = state.get("release", "native")
        release = native_release() if name == "native" else chroot_release(name)
        c = cls(
            parts,
            job_submit_lua="" if state["job_submit"] else None,
            cli_filter_lua="" if state["cli_filter"] else None,
            release=release,
            accounting=bool(state.get("accounting")),
        )
        c.dir = Path(state["dir"])
        c.pids = {k: int(v) for k, v in state["pids"].items()}
        c.supervisor_pid = int(state.get("supervisor", 0))
        c._munged_pid = int(state.get("munged", 0))
        return c


def _install_db(data: Path, opts: Sequence[str]) -> None:
    proc = subprocess.run(
        [
            _which("mariadb-install-db") or "mariadb-install-db",
            "--no-defaults",
            f"--datadir={data}",
            "--user=mysql",
            "--auth-root-authentication-method=normal",
            "--skip-test-db",
            *opts,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    if proc.returncode != 0:
        raise ClusterError(f"mariadb-install-db failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")


def _mariadb_datadir(data: Path, opts: Sequence[str]) -> None:
    """An empty MariaDB data directory at ``data``: a copy (``cp -a``, owner kept) of a pristine
    one that ``mariadb-install-db`` made once per MariaDB version in the chroot cache
    directory, since making one costs seconds and copying it a fraction of that.  Without a
    writable cache it is made in place."""
    ver = re.sub(r"[^\w.-]", "_", _slurm_version([_which("mariadbd") or "mariadbd", "--version"]) or "unknown")
    cache = chroot_cache() / f"mariadb-{ver}"
    if not (cache / ".ready").is_file():
        tmp = cache.with_name(f".{cache.name}.{os.getpid()}.new")
        try:
            cache.parent.mkdir(parents=True, exist_ok=True)
            shutil.rmtree(tmp, ignore_errors=True)
            tmp.mkdir(mode=0o750)
            uid, gid = _user_ids("mysql")
            os.chown(tmp, uid, gid)
            _install_db(tmp, opts)
            (tmp / ".ready").write_text("made by contrib/testcluster/cluster.py\n")
            os.rename(tmp, cache)
        except OSError:  # no cache (read-only, or another process was faster): in place
            shutil.rmtree(tmp, ignore_errors=True)
            if not (cache / ".ready").is_file():
                _install_db(data, opts)
                return
    proc = subprocess.run(["cp", "-a", str(cache), str(data)], capture_output=True, text=True)
    if proc.returncode != 0:
        raise ClusterError(f"cannot copy {cache}: {proc.stderr.strip()}")


def _user_ids(name: str) -> Tuple[int, int]:
    import pwd

    try:
        pw = pwd.getpwnam(name)
    except KeyError:
        raise ClusterError(f"no user {name} (install mariadb-server: contrib/testcluster/install-deps.sh)") from None
    return pw.pw_uid, pw.pw_gid


def _munge_works() -> bool:
    try:
        cred = subprocess.run(["munge", "-n"], capture_output=True, timeout=10)
        if cred.returncode != 0:
            return False
        return subprocess.run(["unmunge"], input=cred.stdout, capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def _ensure_munge() -> None:
    """Start munged (and create its key) unless it already works."""
    if _munge_works():
        return
    key = Path("/etc/munge/munge.key")
    if not key.exists():
        key.parent.mkdir(parents=True, exist_ok=True)
        if subprocess.run(["mungekey", "--create", "--keyfile", str(key)], capture_output=True).returncode != 0:
            key.write_bytes(os.urandom(1024))
        shutil.chown(key, "munge", "munge")
        os.chmod(key, 0o400)
    for d, mode in (("/run/munge", 0o755), ("/var/lib/munge", 0o700), ("/var/log/munge", 0o700)):
        Path(d).mkdir(parents=True, exist_ok=True)
        shutil.chown(d, "munge", "munge")
        os.chmod(d, mode)
    attempts = [["service", "munge", "start"], ["runuser", "-u", "munge", "--", _which("munged") or "munged"]]
    errors = []
    for argv in attempts:
        try:
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=30)
            errors.append(f"{shlex.join(argv)}: rc {proc.returncode} {proc.stderr.strip()}")
        except (OSError, subprocess.SubprocessError) as e:
            errors.append(f"{shlex.join(argv)}: {e}")
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            if _munge_works():
                return
            time.sleep(0.2)
    raise ClusterError("munge is not working: " + "; ".join(errors))


# -------------------------------------------------------------------- CLI
def _main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(
        description="Start or stop a local fake-GPU Slurm test cluster (for debugging; the test suite starts its own), "
        "or list the releases the cluster tests run on."
    )
    ap.add_argument("action", choices=("up", "down", "releases"))
    ap.add_argument(
        "--state", default=_DEFAULT_STATE_FILE, help=f"where 'up' records pids (default {_DEFAULT_STATE_FILE})"
    )
    ap.add_argument("--job-submit", metavar="LUA_FILE", help="job_submit.lua to start with (default: accept all)")
    ap.add_argument("--cli-filter", metavar="LUA_FILE", help="cli_filter.lua to start with (default: pass-through)")
    ap.add_argument("--keep-dir", action="store_true", help="down: keep the cluster directory (logs)")
    ap.add_argument("--accounting", action="store_true", help="up: with slurmdbd and a private MariaDB (sacct works)")
    ap.add_argument(
        "--release",
        default="native",
        help="up: 'native' (default) or a chroot suite built by make-chroot.sh: 'trixie' (24.11), 'forky' (26.05)",
    )
    args = ap.parse_args(argv)
    if args.action == "releases":  # the matrix, one release a line: name, Slurm version, why it cannot run
        for r in test_releases():
            print("\t".join((r.name, r.version or "-", "; ".join(r.missing()) or "ok")))
        return 0
    state_file = Path(args.state)
    if args.action == "up":
        if state_file.exists():
            print(f"{state_file} exists: run 'down' first", file=sys.stderr)
            return 1
        js = Path(args.job_submit).read_text() if args.job_submit else ACCEPT_ALL_JOB_SUBMIT_LUA
        cf = Path(args.cli_filter).read_text() if args.cli_filter else PASSTHROUGH_CLI_FILTER_LUA
        try:
            release = native_release() if args.release == "native" else chroot_release(args.release)
            c = TestCluster(
                job_submit_lua=js, cli_filter_lua=cf, keep_dir=True, release=release, accounting=args.accounting
            )
            c.start()
        except ClusterError as e:
            print(f"error: {e}", file=sys.stderr)
            return 1
        state_file.write_text(json.dumps(c._state(), indent=1))
        print(f"# cluster up in {c.startup_seconds:.1f} s, dir {c.dir}")
        if c.accounting_seconds is not None:
            print(f"# of which accounting (MariaDB + slurmdbd + sacctmgr): {c.accounting_seconds:.1f} s")
        if c.hosts_warning:
            print(f"# warning: {c.hosts_warning}")
        print(f"export SLURM_CONF={c.conf_path}")
        if c.bin_dir is not None:
            print(f"export PATH={c.bin_dir}:$PATH")
        return 0
    try:
        state = json.loads(state_file.read_text())
    except OSError as e:
        print(f"no cluster state: {e}", file=sys.stderr)
        return 1
    c = TestCluster._from_state(state)
    c.keep_dir = args.keep_dir
    c.stop()
    state_file.unlink()
    print(f"# cluster in {state['dir']} stopped" + (" (directory kept)" if args.keep_dir else ""))
    return 0


if __name__ == "__main__":
    sys.exit(_main())
