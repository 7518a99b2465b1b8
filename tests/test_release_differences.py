"""What changed between Slurm 24.11 and 26.05 that the filter and `check` must model, without a
cluster (the real-controller side of each is in tests/test_policy_cluster.py and
tests/test_slurm_releases.py, on every release of the matrix):

* job_desc.bitflags is 64 bits wide: sbatch options set bits 38-45, and none may hide
  --spread-job (bit 8) from the filter;
* 25.11.2+ show a job without --segment as segment_size 0 (not NO_VAL16): no segment;
* 26.05's sbatch refuses --gres=gpu with --gpus-per-node (also from the environment) and a
  --segment that does not divide the node count, after cli_filter ran: `check` says so too.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from slurmgpu.errors import ConfigError
from slurmgpu.policy import PolicyRunner
from slurmgpu.site import load_site
from slurmgpu.slurm import job_desc

ROOT = Path(__file__).resolve().parents[1]
TESTCLUSTER = ROOT / "tests" / "data" / "sites" / "testcluster.yaml"
NVL = ROOT / "tests" / "data" / "sites" / "testcluster-nvl.yaml"
TP8 = "#!/bin/bash\nsrun python train.py --tensor-model-parallel-size 8\n"
SPREAD_JOB = 1 << 8


@pytest.fixture(scope="module")
def runner26():
    return PolicyRunner(replace(load_site(str(TESTCLUSTER)), slurm_version="26.05"), backend="lupa")


@pytest.mark.parametrize(
    "option,bit",
    [
        ("--gres-flags=multiple-tasks-per-sharing", 39),
        ("--gres-flags=one-task-per-sharing", 38),
        ("--gres-flags=disable-binding", 19),
        ("--stepmgr", 41),
        ("--external", 24),
        ("--spread-segments", 43),
        ("--consolidate-segments", 44),
        ("--requeue=expedite", 45),
    ],
)
def test_options_set_their_bitflags_bit(option, bit):
    desc = job_desc(TP8, ["--spread-job", option], slurm_version="26.05")
    assert desc["bitflags"] == SPREAD_JOB | (1 << bit)


def test_plain_requeue_sets_no_bit_and_allow_task_sharing_is_srun_only():
    assert "bitflags" not in job_desc(TP8, ["--requeue"], slurm_version="26.05")
    with pytest.raises(ConfigError, match="allow-task-sharing is for srun only"):
        job_desc(TP8, ["--gres-flags=allow-task-sharing"], slurm_version="26.05")


@pytest.mark.parametrize("bit", [32, 38, 39, 40, 41, 43, 44, 45, 52])
def test_spread_job_is_read_next_to_any_bit_below_2_53(runner26, bit):
    """--gpus=8 --ntasks=8 --spread-job: 4 nodes of 8 GPUs, so TP=8 crosses nodes, whatever
    other bit is set (a 32-bit read of the field dropped --spread-job: a 1-node job)."""
    desc = job_desc(TP8, ["--gpus=8", "--ntasks=8", "-p", "gpu"], slurm_version="26.05")
    desc["bitflags"] = SPREAD_JOB | (1 << bit)
    v = runner26.evaluate_desc(desc, uid=0)
    assert v.decision == "reject" and "over 4 nodes" in " ".join(v.messages), v.messages
    desc["bitflags"] = 1 << bit  # no --spread-job: one node, TP=8 inside it
    assert runner26.evaluate_desc(desc, uid=0).decision == "accept"


def test_bitflags_beyond_2_53_are_logged_not_guessed(runner26):
    desc = job_desc(TP8, ["--gpus=8", "--ntasks=8", "-p", "gpu"], slurm_version="26.05")
    desc["bitflags"] = float(2**60 + SPREAD_JOB)
    rc, _, log = runner26.submit_desc_logged(desc, uid=0)
    assert any("warning bitflags" in line and "not exact" in line for line in log), log


def test_segment_size_zero_is_no_segment():
    """26.05's controller shows a job without --segment as segment_size=0; the message must say
    the job does not ask for a segment (it said "--segment=0 does not keep ...")."""
    site = replace(load_site(str(NVL)), slurm_version="26.05")
    r = PolicyRunner(site, backend="lupa")
    script = "#!/bin/bash\n#SBATCH -N4 --gpus-per-node=4\nsrun python t.py --tensor-model-parallel-size 16\n"
    desc = job_desc(script, [], slurm_version="26.05")
    desc["segment_size"] = 0
    v = r.evaluate_desc(desc, uid=0)
    text = " ".join(v.messages)
    assert v.decision == "reject" and "does not ask to stay inside one NVLink domain" in text and "=0" not in text


# ---------------------------------------------------------------------------
# 26.05's client checks after cli_filter (src/common/slurm_opt.c, validate_options_salloc_sbatch_srun)

GRES_AND_GPN = "--gpus-per-node and --gres=gpu are mutually exclusive"


@pytest.mark.parametrize(
    "script_opts,args,env",
    [
        ("-N2 --gpus-per-node=8 --gres=gpu:4", [], {}),
        ("-N2 --gres=gpu:h100:8", ["--gpus-per-node=8"], {}),
        ("-N2 --gpus-per-node=8", [], {"SBATCH_GRES": "gpu:8"}),
        ("-N2 --gres=gres/gpu:8", [], {"SBATCH_GPUS_PER_NODE": "8"}),
    ],
)
def test_gres_gpu_with_gpus_per_node_is_refused_from_26_05(script_opts, args, env):
    script = "#!/bin/bash\n#SBATCH %s\nsrun true\n" % script_opts
    with pytest.raises(ConfigError, match=GRES_AND_GPN) as exc:
        job_desc(script, args, env=env, slurm_version="26.05.5")
    assert "Slurm 26.05's sbatch refuses" in str(exc.value)
    for older in ("24.11", "25.11.2", None):
        job_desc(script, args, env=env, slurm_version=older)  # no error


def test_gres_none_or_other_gres_with_gpus_per_node_is_fine():
    for gres in ("none", "shard:2", "nic:1"):
        job_desc("#!/bin/bash\n#SBATCH -N2 --gpus-per-node=8 --gres=%s\n" % gres, [], slurm_version="26.05")


@pytest.mark.parametrize(
    "nodes,segment,refused",
    [("6", 4, True), ("8", 4, False), ("3", 4, False), ("4", 4, False), ("4-6", 4, True), ("2-8", 4, False)],
)
def test_segment_must_divide_the_node_count_from_26_05(nodes, segment, refused):
    script = "#!/bin/bash\n#SBATCH -N%s --gpus-per-node=4 --segment=%d\n" % (nodes, segment)
    job_desc(script, [], slurm_version="25.11.2")  # no client check before 26.05
    if refused:
        with pytest.raises(ConfigError, match="node count must be evenly divisible by segment size"):
            job_desc(script, [], slurm_version="26.05")
    else:
        job_desc(script, [], slurm_version="26.05")


def test_check_reports_the_26_05_refusal_as_an_error(tmp_path):
    """`slurmgpu check` on a 26.05 site: exit 2 with sbatch's words, as sbatch would stop there."""
    from click.testing import CliRunner

    from slurmgpu.cli import main

    site = tmp_path / "site.yaml"
    site.write_text(TESTCLUSTER.read_text().replace('slurm_version: "22.05"', 'slurm_version: "26.05"'))
    path = tmp_path / "job.sh"
    path.write_text("#!/bin/bash\n#SBATCH -N2 --gpus-per-node=8 --gres=gpu:8\nsrun true\n")
    r = CliRunner().invoke(main, ["check", "--site", str(site), str(path)])
    assert r.exit_code == 2 and GRES_AND_GPN in r.output, r.output


# ---------------------------------------------------------------------------
# NVL72 generation on 25.11+ (the real controller's side: tests/test_slurm_releases.py)


def _nvl_site(tmp_path, version="26.05", imex=True, expedite=True, mnnvl=None):
    text = NVL.read_text().replace('slurm_version: "24.11"', 'slurm_version: "%s"' % version)
    extra = "    imex_per_segment: %s\n" % ("true" if imex else "false")
    if mnnvl:
        extra += '    mnnvl: "%s"\n' % mnnvl
    text = text.replace("    socket_ifname: lo\n", "    socket_ifname: lo\n" + extra)
    f = tmp_path / "nvl.yaml"
    f.write_text(text + "requeue:\n  expedite: %s\n" % ("true" if expedite else "false"))
    return f


def _gen(site_file, *args):
    from click.testing import CliRunner

    from slurmgpu.cli import main

    r = CliRunner().invoke(main, ["gen", "--site", str(site_file), "--launcher", "srun", "--no-preflight", *args])
    assert r.exit_code == 0, r.output
    return [ln for ln in r.stdout.splitlines() if ln.startswith("#SBATCH")]


def test_one_imex_channel_per_segment_only_for_jobs_of_several_segments(tmp_path):
    site = _nvl_site(tmp_path)
    assert "#SBATCH --network=unique-channel-per-segment" in _gen(site, "--nodes", "8", "--tp", "16", "--", "true")
    one = _gen(site, "--nodes", "4", "--tp", "16", "--", "true")  # a single segment: one channel anyway
    assert "#SBATCH --segment=4" in one and not any("--network" in ln for ln in one)
    off = _gen(_nvl_site(tmp_path, imex=False), "--nodes", "8", "--tp", "16", "--", "true")
    assert not any("--network" in ln for ln in off)


def test_expedited_requeue_only_where_the_site_enables_it(tmp_path):
    args = ("--nodes", "8", "--tp", "16", "--requeue", "--time", "1:00:00", "--checkpoint-dir", str(tmp_path))
    assert "#SBATCH --requeue=expedite" in _gen(_nvl_site(tmp_path), *args, "--", "true")
    assert "#SBATCH --requeue" in _gen(_nvl_site(tmp_path, expedite=False), *args, "--", "true")


@pytest.mark.parametrize(
    "version,imex,expedite,mnnvl,error",
    [
        ("24.11", True, False, None, "needs Slurm 25.11 or later and topology: block"),
        ("25.05", False, True, None, "--requeue=expedite needs Slurm 25.11"),
        ("26.05", True, False, "off", "IMEX channels serve NVLink domains"),
        ("25.11", True, True, None, None),
    ],
)
def test_the_site_loader_checks_the_25_11_switches(tmp_path, version, imex, expedite, mnnvl, error):
    f = _nvl_site(tmp_path, version, imex, expedite, mnnvl)
    if error is None:
        s = load_site(str(f))
        assert s.requeue.expedite and s.node_type_of().imex_per_segment
    else:
        with pytest.raises(ConfigError, match=error):
            load_site(str(f))


# ---------------------------------------------------------------------------
# Node-rank order (the real controllers: tests/test_rank_order_cluster.py)


def _interleaved(tmp_path, version, order=None, follow=False):
    text = NVL.read_text().replace(
        'slurm_version: "24.11"',
        'slurm_version: "%s"\nblocks_follow_names: %s%s'
        % (version, "true" if follow else "false", "\nnode_rank_order: %s" % order if order else ""),
    )
    f = tmp_path / ("il-%s-%s.yaml" % (version, order))
    f.write_text(text)
    return load_site(str(f))


@pytest.mark.parametrize(
    "version,order,want", [("24.11", None, "name"), ("25.11.2", None, "name"), ("26.05", None, "tasks-block")]
)
def test_node_rank_order_defaults_to_the_releases(tmp_path, version, order, want):
    assert _interleaved(tmp_path, version, order).node_rank_order == want


@pytest.mark.parametrize("version,order", [("24.11", "block"), ("25.11", "tasks-block")])
def test_node_rank_order_the_release_cannot_have_is_refused(tmp_path, version, order):
    with pytest.raises(ConfigError, match="node_rank_order"):
        _interleaved(tmp_path, version, order)


@pytest.mark.parametrize(
    "order,follow,procid,nodeid,hostname",
    [
        ("name", True, True, True, True),  # blocks are runs of names: every order walks them
        ("name", False, False, False, False),
        ("tasks-block", False, True, False, False),  # 26.05's default
        ("block", False, True, True, False),  # BlockAsNodeRank; torchrun still sorts host names
    ],
)
def test_which_rank_sources_walk_the_blocks(tmp_path, order, follow, procid, nodeid, hostname):
    s = _interleaved(tmp_path, "26.05", order, follow)
    assert [s.ranks_follow_blocks(x) for x in ("procid", "nodeid", "hostname")] == [procid, nodeid, hostname]


SRUN_TP16 = (
    "#!/bin/bash\n#SBATCH -N8 --gpus-per-node=4 --ntasks-per-node=4 --segment=4\nexport NCCL_SOCKET_IFNAME=lo\n"
    "srun python pretrain_gpt.py --tensor-model-parallel-size 16\n"
)
TORCHRUN_TP16 = (
    "#!/bin/bash\n#SBATCH -N8 --gpus-per-node=4 --segment=4\nexport NCCL_SOCKET_IFNAME=lo\n"
    "srun torchrun --nproc-per-node=4 pretrain_gpt.py --tensor-model-parallel-size 16\n"
)


@pytest.mark.parametrize(
    "version,script,decision",
    [
        ("26.05", SRUN_TP16, "accept"),  # srun's tasks in topology order
        ("26.05", TORCHRUN_TP16, "reject"),  # torchrun's rendezvous sorts host names
        ("24.11", SRUN_TP16, "reject"),  # srun's tasks by host name
    ],
)
def test_the_filter_checks_the_rank_order_where_names_interleave(tmp_path, version, script, decision):
    site = _interleaved(tmp_path, version)
    v = PolicyRunner(site, backend="lupa").check(script, [])
    assert v.decision == decision, v.messages
    assert ("rank-order" in v.rules) == (decision == "reject"), v.rules
    # where the blocks are runs of names, the same jobs pass
    assert PolicyRunner(_interleaved(tmp_path, version, follow=True), backend="lupa").check(script, []).accepted


def test_preflight_places_the_groups_in_the_launchers_order():
    """Records carry the task rank and node id each node had in the preflight step; the job check
    orders the nodes by the launcher's rank source, else by the --nodes list (the old way)."""
    from slurmgpu.node import preflight as pf

    names = ["nvl01", "nvl02", "nvl03", "nvl04"]
    task = {"nvl01": 0, "nvl03": 1, "nvl02": 2, "nvl04": 3}  # 26.05: topology order
    agg = pf.Aggregate(
        reports=[pf.NodeReport(n, "s", (), "c", task_rank=task[n], node_id=names.index(n)) for n in names]
    )
    assert pf.rank_node_order(agg, names, "procid") == ["nvl01", "nvl03", "nvl02", "nvl04"]
    assert pf.rank_node_order(agg, names, "nodeid") == names
    assert pf.rank_node_order(agg, list(reversed(names)), "hostname") == names
    assert pf.rank_node_order(agg, names, None) == names
    rec = pf.NodeReport.from_dict(pf.NodeReport("nvl03", "s", (), task_rank=1, node_id=2).to_dict())
    assert (rec.task_rank, rec.node_id) == (1, 2)
