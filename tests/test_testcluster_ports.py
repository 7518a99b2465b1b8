"""The test cluster's daemons stay off the ports the generated scripts give their jobs, and
off each other's.

A requeue e2e job failed once with EADDRINUSE. The likely cause: its MASTER_PORT (20000 + job
id % 10000) can be a daemon's port, drawn at random from 20000-31999 on this same host.

CI failed once because a slurmd of one release's cluster could not bind its port ("Address
already in use"): the test matrix starts clusters of three releases at once, and a port probed
free by one cluster was taken by another's daemon before its own bound it. Ports are now
locked from the moment they are chosen until the cluster stops."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cluster_fixtures import testcluster

ROOT = Path(__file__).resolve().parents[1]


def test_the_excluded_range_is_the_generated_rendezvous_range():
    text = (ROOT / "templates" / "parts" / "rendezvous.j2").read_text()
    m = re.search(r"^MASTER_PORT=\$\(\((\d+) \+ SLURM_JOB_ID % (\d+)\)\)$", text, re.M)
    assert m, "no per-job MASTER_PORT formula in rendezvous.j2"
    base, span = int(m.group(1)), int(m.group(2))
    assert testcluster.JOB_PORTS == range(base, base + span)


def test_daemon_ports_are_free_and_outside_the_job_ports():
    reservation = testcluster._reserve_ports(300)
    ports = reservation.ports
    reservation.release()
    assert len(set(ports)) == 300
    jobs = testcluster.JOB_PORTS
    assert not [p for p in ports if p in jobs]
    assert all(p < 32768 for p in ports)  # below Linux's default ephemeral range


# Another process holds a reservation, as another release's test process does while its
# cluster starts (nothing is bound on those ports yet).
_HOLDER = """
import importlib.util, sys
spec = importlib.util.spec_from_file_location("sgtc_holder", sys.argv[1])
cluster = importlib.util.module_from_spec(spec)
sys.modules["sgtc_holder"] = cluster
spec.loader.exec_module(cluster)
cluster.DAEMON_PORTS = range(int(sys.argv[2]), int(sys.argv[3]))
r = cluster._reserve_ports(int(sys.argv[4]))
print(" ".join(map(str, r.ports)), flush=True)
sys.stdin.read()
"""


def _free_block(size):
    """``size`` consecutive ports of DAEMON_PORTS that no reservation holds right now."""
    for start in range(testcluster.DAEMON_PORTS.start, testcluster.DAEMON_PORTS.stop - size, size):
        probe = testcluster.PortReservation([], [])
        fds = [testcluster._lock_port(p) for p in range(start, start + size)]
        probe._fds = [fd for fd in fds if fd is not None]
        probe.release()
        if None not in fds:
            return range(start, start + size)
    raise AssertionError("no free block of daemon ports")


def test_ports_reserved_by_another_process_are_not_chosen(monkeypatch):
    block = _free_block(4)
    with subprocess.Popen(
        [
            sys.executable,
            "-c",
            _HOLDER,
            str(ROOT / "contrib" / "testcluster" / "cluster.py"),
            str(block.start),
            str(block.stop),
            "2",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    ) as holder:
        held = set(map(int, holder.stdout.readline().split()))
        assert len(held) == 2 and held <= set(block)
        monkeypatch.setattr(testcluster, "DAEMON_PORTS", block)
        mine = testcluster._reserve_ports(2)
        try:
            assert set(mine.ports) == set(block) - held
            with pytest.raises(testcluster.ClusterError, match="could not find 1 free TCP ports"):
                testcluster._reserve_ports(1)
        finally:
            mine.release()
        again = testcluster._reserve_ports(2)  # released ports are free to reserve again
        again.release()
        assert set(again.ports) == set(block) - held
        holder.stdin.close()
        holder.wait(timeout=10)
    after = testcluster._reserve_ports(4)  # the holder's exit released its ports
    after.release()
    assert set(after.ports) == set(block)
