"""policy.repair_segment: on Slurm 25.11.2+ job_submit.lua sets a missing --segment instead of
rejecting. Here the write path runs on the stub job_desc (contrib/lua/slurm_stub.lua) that models
both behaviours (`S.segment_writable`); on the real 26.05 controller it runs end to end in
tests/test_slurm_releases.py (test_repair_segment_on_the_real_controller)."""

from __future__ import annotations

import pytest

from slurmgpu.errors import ConfigError
from slurmgpu.policy import PolicyRunner, lua_literal, part_list, render_filter
from slurmgpu.site import load_site
from slurmgpu.slurm import job_desc
from tests.test_policy_lua import lua_version, run_lua  # noqa: F401 (fixture)

EP64 = (
    "#!/bin/bash\n#SBATCH -N32 --gpus-per-node=4\nexport NCCL_IB_HCA==mlx5_0,mlx5_1,mlx5_4,mlx5_5\n"
    "srun python pretrain_gpt.py --tensor-model-parallel-size 1 --expert-model-parallel-size 64\n"
)


def _site(tmp_path, version: str, repair: bool = True):
    f = tmp_path / ("s%s.yaml" % version.replace(".", ""))
    f.write_text(
        'extends: gb200-nvl72\nname: s\nslurm_version: "%s"\npartitions:\n  gpu: {node_type: gb200-tray, nodes: 36}\n'
        "policy:\n  repair_segment: %s\n" % (version, "true" if repair else "false")
    )
    return load_site(str(f))


BODY = """
S.segment_writable = %(writable)s
local rc, msgs, log = S.submit(%(desc)s, %(parts)s, 1000)
out({rc = rc, msgs = msgs, log = log, seg = S.last_desc.segment_size, note = S.last_desc.admin_comment})
"""


def _submit(tmp_path, site, writable: bool, lua: str):
    desc = job_desc(EP64, ["-p", "gpu"], user="bob")
    body = BODY % {
        "writable": "true" if writable else "false",
        "desc": lua_literal(desc),
        "parts": lua_literal(part_list(site)),
    }
    (res,) = run_lua(tmp_path / ("run" + lua), body, render_filter(site, "job_submit"), lua=lua)
    return res


def test_repair_sets_the_segment_and_says_so(tmp_path, lua_version):  # noqa: F811 (the fixture)
    res = _submit(tmp_path, _site(tmp_path, "25.11.2"), True, lua_version)
    assert res["rc"] == 0, res
    assert res["seg"] == 16
    # the repair note, then the audit token (the verdict is a warning: the job was repaired)
    note, token = res["note"].split(" slurmgpu=", 1)
    assert note == "slurmgpu: set --segment=16 (model-parallel groups inside one NVLink domain)"
    assert token.startswith("warn:ep-needs-segment"), token
    assert any("repaired: this cluster set --segment=16" in m for m in res["msgs"]), res["msgs"]


def test_a_controller_that_drops_the_write_rejects_with_the_exact_segment(tmp_path):
    # a site that claims 25.11.2 on an older slurmctld: the write is dropped, never accepted silently
    res = _submit(tmp_path, _site(tmp_path, "25.11.2"), False, "5.1")
    assert res["rc"] == 2072 and res["seg"] == 65534, res
    assert any("resubmit with --segment=16" in m for m in res["msgs"]), res["msgs"]


def test_without_repair_the_job_is_rejected_with_the_segment_to_add(tmp_path):
    res = _submit(tmp_path, _site(tmp_path, "24.11", repair=False), False, "5.1")
    assert res["rc"] == 2072
    assert any("add --segment=16" in m and "EP=64" in m for m in res["msgs"]), res["msgs"]


@pytest.mark.parametrize("version", ["24.11", "25.11", "25.11.1"])
def test_repair_on_an_older_slurm_is_a_located_config_error(tmp_path, version):
    """The write exists from 25.11.2 (a backport): "25.11" without its patch level is 25.11.0."""
    with pytest.raises(ConfigError) as e:
        _site(tmp_path, version)
    assert "policy.repair_segment" in str(e.value) and "25.11.2" in str(e.value)


@pytest.mark.parametrize("version", ["25.11.2", "25.11.9", "26.05", "26.05.5"])
def test_repair_from_25_11_2_on_loads(tmp_path, version):
    assert _site(tmp_path, version).policy.repair_segment


def test_check_shows_the_repair(tmp_path):
    v = PolicyRunner(_site(tmp_path, "25.11.2")).check(EP64, ["-p", "gpu"])
    assert v.accepted and v.repair_segment == 16
