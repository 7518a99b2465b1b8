"""Account and QOS exemptions against real accounting (MariaDB + slurmdbd, native release):
job_submit sees -A / --qos as typed, before Slurm validates them, so the filter honours such an
exemption only where the site says AccountingStorageEnforce validates them (issue 16, class 6).

* enforced (``AccountingStorageEnforce=associations,qos``): root, who may use the account
  ``benchmarks`` and the QOS ``admin``, is exempt; nobody typing the same is exempt by the
  filter but refused by Slurm itself;
* not enforced (the plain accounting cluster): anyone could type -A benchmarks, so the filter
  checks the job and says why; `admin install` refuses a site that claims enforcement.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from slurmgpu.errors import Refused
from slurmgpu.policy import plan_install, render_filter
from slurmgpu.site import load_site
from tests.cluster_fixtures import ScriptSwap, testcluster

pytestmark = pytest.mark.cluster

ROOT = Path(__file__).resolve().parent.parent
TESTCLUSTER = ROOT / "tests" / "data" / "sites" / "testcluster.yaml"
REJECTED = "Invalid generic resource (gres) specification"  # what 2072 reads as
TP16 = (
    "#!/bin/bash\n#SBATCH -N2 --gpus-per-node=8 -p gpu -o /dev/null\nexport NCCL_SOCKET_IFNAME=lo\n"
    "srun true --tensor-model-parallel-size 16\n"
)
AS_NOBODY = ["runuser", "-u", "nobody", "--"]


def _site(tmp_path: Path, enforce: str):
    path = tmp_path / ("exempt-%s.yaml" % (enforce.strip("[]").replace(", ", "-") or "none"))
    path.write_text(
        "extends: %s\nname: testcluster-exempt\npolicy:\n  exempt_accounts: [benchmarks]\n"
        "  exempt_qos: [admin]\n  accounting_enforce: %s\n" % (TESTCLUSTER, enforce)
    )
    return load_site(str(path))


def _sbatch(cluster, *args: str, user=()):
    p = cluster.run(list(user) + ["sbatch", "--test-only", *args], input=TP16)
    return p.returncode, p.stderr


def test_exemptions_with_enforced_accounting(enforced_accounting_cluster, tmp_path):
    c = enforced_accounting_cluster
    site = _site(tmp_path, "[associations, qos]")
    assert plan_install(site, c.conf_dir).notes == ()  # slurm.conf enforces what the site claims
    with ScriptSwap(c.install_job_submit, testcluster.ACCEPT_ALL_JOB_SUBMIT_LUA)(render_filter(site, "job_submit")):
        mark = c.log_mark()
        rc, err = _sbatch(c)
        assert rc != 0 and REJECTED in err, err  # no exemption asked for: checked
        for flags in (["-A", "benchmarks"], ["--qos=admin"]):
            rc, err = _sbatch(c, *flags)
            assert rc == 0 and REJECTED not in err, (flags, err)  # root may use them: exempt
            rc, err = _sbatch(c, *flags, user=AS_NOBODY)
            # the filter trusts the flag because Slurm checks it right after: nobody is refused
            assert rc != 0 and REJECTED not in err and ("Invalid account" in err or "Invalid qos" in err), err
        log = c.ctld_log(mark)
        assert log.count("rules=exempt") >= 4 and "exempt-not-honoured" not in log
        assert c.job_submit_errors(mark) == []


def test_exemptions_without_enforced_accounting(accounting_cluster, accounting_job_submit, tmp_path):
    c = accounting_cluster
    with pytest.raises(Refused, match="AccountingStorageEnforce"):
        plan_install(_site(tmp_path, "[associations, qos]"), c.conf_dir)  # slurm.conf does not enforce
    site = _site(tmp_path, "[]")
    assert len(plan_install(site, c.conf_dir).notes) == 2  # the admin is told what is ignored
    accounting_job_submit(render_filter(site, "job_submit"))
    mark = c.log_mark()
    for flags, what in ((["-A", "benchmarks"], "account 'benchmarks'"), (["--qos=admin"], "QOS 'admin'")):
        for user in ((), AS_NOBODY):
            rc, err = _sbatch(c, *flags, user=user)
            assert rc != 0 and REJECTED in err, (flags, user, err)
            assert "slurmgpu: %s is exempt in the site config" % what in err, err
    log = c.ctld_log(mark)
    assert log.count("exempt-not-honoured") >= 4 and "rules=exempt " not in log
    assert c.job_submit_errors(mark) == []


def test_batch_step_account_and_qos_come_from_the_job_record(enforced_accounting_cluster, tmp_path):
    """policy.script_check batch-step: the SPANK plugin honours account and QOS exemptions at the
    batch step from SLURM_JOB_ACCOUNT and SLURM_JOB_QOS, which is safe only because slurmd sets them
    for the batch step from the job record, over a value of the same name in the submitted
    environment (as it does SLURM_JOB_PARTITION). Seen here; a step's are its srun client's."""
    import os

    c = enforced_accounting_cluster
    tmp_path.chmod(0o777)
    forged = dict(os.environ, SLURM_JOB_ACCOUNT="benchmarks", SLURM_JOB_QOS="admin", SLURM_JOB_PARTITION="other")
    shown = []
    for args in ([], ["-A", "benchmarks", "--qos=admin"]):
        out = tmp_path / ("job-%d.out" % len(shown))
        p = c.run(
            [
                "sbatch",
                "--parsable",
                "-o",
                str(out),
                *args,
                "--wrap",
                'echo "$SLURM_JOB_ACCOUNT $SLURM_JOB_QOS $SLURM_JOB_PARTITION"',
            ],
            env=forged,
        )
        assert p.returncode == 0, p.stderr
        res = c.wait_job(int(p.stdout.strip().split(";")[0]), timeout=60)
        assert res.state == "COMPLETED", res
        shown.append(out.read_text().strip())
    # root's default association is its own account and the default QOS; -A/--qos are what it asked
    assert shown == ["root normal gpu", "benchmarks admin gpu"], shown
