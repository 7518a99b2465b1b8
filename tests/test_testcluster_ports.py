"""The test cluster's daemons stay off the ports the generated scripts give their jobs.

A requeue e2e job failed once with EADDRINUSE. The likely cause: its MASTER_PORT (20000 + job
id % 10000) can be a daemon's port, drawn at random from 20000-31999 on this same host."""

from __future__ import annotations

import re
from pathlib import Path

from tests.cluster_fixtures import testcluster

ROOT = Path(__file__).resolve().parents[1]


def test_the_excluded_range_is_the_generated_rendezvous_range():
    text = (ROOT / "templates" / "parts" / "rendezvous.j2").read_text()
    m = re.search(r"^MASTER_PORT=\$\(\((\d+) \+ SLURM_JOB_ID % (\d+)\)\)$", text, re.M)
    assert m, "no per-job MASTER_PORT formula in rendezvous.j2"
    base, span = int(m.group(1)), int(m.group(2))
    assert testcluster.JOB_PORTS == range(base, base + span)


def test_daemon_ports_are_free_and_outside_the_job_ports():
    ports = testcluster._free_ports(300)
    assert len(set(ports)) == 300
    jobs = testcluster.JOB_PORTS
    assert not [p for p in ports if p in jobs]
    assert all(p < 32768 for p in ports)  # below Linux's default ephemeral range
