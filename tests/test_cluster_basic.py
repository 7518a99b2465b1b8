"""The real-Slurm test cluster itself works: nodes, GPUs, jobs, Lua filters.

Needs root and the Debian slurm packages (contrib/testcluster/install-deps.sh);
skipped otherwise unless SLURMGPU_REQUIRE_CLUSTER=1.
"""

from __future__ import annotations

import json
import re

import pytest

from slurmgpu.slurm import parse_sinfo_json

pytestmark = pytest.mark.cluster

GPU_NODES = {"gpu01", "gpu02", "gpu03", "gpu04"}

REJECT_MARKER_LUA = """\
function slurm_job_submit(job_desc, part_list, submit_uid)
    local script = job_desc.script
    if script ~= nil and string.find(script, "REJECTME", 1, true) then
        slurm.log_user("slurmgpu-test: the script contains the reject marker")
        return slurm.ERROR
    end
    return slurm.SUCCESS
end

function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
    return slurm.SUCCESS
end

return slurm.SUCCESS
"""


def _reject_all_lua(message: str) -> str:
    return f"""\
function slurm_job_submit(job_desc, part_list, submit_uid)
    slurm.log_user("%s", "{message}")
    return slurm.ERROR
end

function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
    return slurm.SUCCESS
end

return slurm.SUCCESS
"""


def test_sinfo_json_lists_partitions_and_gres(slurm_cluster):
    # 22.05 prints one object per node ("nodes"), 23.11+ one per node group and partition
    # ("sinfo"): slurmgpu's parser reads both, and this is the real output of each release
    text = slurm_cluster.run(["sinfo", "--json"], check=True).stdout
    doc = parse_sinfo_json(text)
    assert ("sinfo" if slurm_cluster.release.version_tuple >= (23, 11) else "nodes") in json.loads(text)
    assert doc.release is not None and doc.release.startswith(slurm_cluster.release.major)
    nodes = {n.name: n for n in doc.nodes}

    assert set(nodes) == set(slurm_cluster.nodes)
    by_partition: dict = {}
    for node in nodes.values():
        for part in node.partitions:
            by_partition.setdefault(part, set()).add(node.name)
    assert by_partition == {"gpu": GPU_NODES, "gpu4": {"g4n01", "g4n02"}, "pcie": {"pc01", "pc02"}}
    for name in GPU_NODES:
        assert [str(g) for g in nodes[name].gres] == ["gpu:h100:8"]
        assert nodes[name].cpus == 16
        assert nodes[name].state.lower() == "idle"
    assert [str(g) for g in nodes["g4n01"].gres] == ["gpu:a100:4"]
    assert [str(g) for g in nodes["pc01"].gres] == ["gpu:l40s:8"]
    assert "pcie" in nodes["pc01"].features


def test_two_node_gpu_job_runs_on_two_nodes(slurm_cluster):
    script = """\
#!/bin/bash
#SBATCH -N2 --gpus-per-node=8 -p gpu
#SBATCH -t 5
srun --ntasks-per-node=1 bash -c \
    'echo "task node=$SLURMD_NODENAME gpus=$SLURM_GPUS_ON_NODE cvd=$CUDA_VISIBLE_DEVICES"'
master=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n1)
echo "master=$master addr=$(getent hosts "$master" | awk '{print $1}')"
"""
    job_id = slurm_cluster.submit(script)
    result = slurm_cluster.wait_job(job_id, timeout=60)

    assert (result.state, result.exit_code) == ("COMPLETED", 0), result.stdout
    tasks = re.findall(r"^task node=(\S+) gpus=(\S+) cvd=(\S+)$", result.stdout or "", re.M)
    assert len({node for node, _, _ in tasks}) == 2, result.stdout
    assert {node for node, _, _ in tasks} <= GPU_NODES
    assert all(gpus == "8" and cvd == "0,1,2,3,4,5,6,7" for _, gpus, cvd in tasks), result.stdout
    # MASTER_ADDR=<first node> must resolve (node names are in /etc/hosts).
    assert re.search(r"^master=gpu0\d addr=127\.0\.0\.1$", result.stdout, re.M)


@pytest.mark.parametrize(
    "partition,gpus,cvd",
    [
        ("gpu4", 4, "0,1,2,3"),
        ("pcie", 8, "0,1,2,3,4,5,6,7"),
    ],
)
def test_single_node_job_on_other_partitions(slurm_cluster, partition, gpus, cvd):
    job_id = slurm_cluster.submit(
        None, "-p", partition, f"--gpus-per-node={gpus}", "--wrap", 'echo "cvd=$CUDA_VISIBLE_DEVICES"'
    )
    result = slurm_cluster.wait_job(job_id, timeout=60)

    assert result.ok, result
    assert f"cvd={cvd}" in (result.stdout or "")


def test_sbatch_test_only_creates_no_job(slurm_cluster):
    rc, _, err = slurm_cluster.sbatch(None, "--test-only", "-N2", "--gpus-per-node=8", "-p", "gpu", "--wrap", "true")

    assert rc == 0, err
    assert re.search(r"to start at .* on nodes gpu\[0\d-0\d\] in partition gpu", err)
    assert slurm_cluster.run("squeue -h").stdout.strip() == ""


def test_sbatch_test_only_rejects_more_gpus_than_a_node_has(slurm_cluster):
    rc, _, err = slurm_cluster.sbatch(None, "--test-only", "-p", "gpu4", "--gpus-per-node=8", "--wrap", "true")

    assert rc != 0
    assert "Requested node configuration is not available" in err


def test_job_submit_lua_rejection_reaches_sbatch_stderr(slurm_cluster, job_submit):
    mark = slurm_cluster.log_mark()
    job_submit(REJECT_MARKER_LUA)

    rc, out, err = slurm_cluster.sbatch("#!/bin/bash\necho REJECTME\n")
    assert rc != 0
    assert "slurmgpu-test: the script contains the reject marker" in err
    assert "Batch job submission failed" in err
    assert out == ""

    rc, _, err = slurm_cluster.sbatch("#!/bin/bash\necho fine\n", "--test-only")
    assert rc == 0, err
    assert slurm_cluster.job_submit_errors(mark) == []


def test_job_submit_reloads_on_quick_successive_installs(slurm_cluster, job_submit):
    # Both installs happen within one second; the second must still win.
    job_submit(_reject_all_lua("version A"))
    job_submit(_reject_all_lua("version B"))

    rc, _, err = slurm_cluster.sbatch(None, "--test-only", "--wrap", "true")
    assert rc != 0
    assert "version B" in err and "version A" not in err


def test_job_submit_runtime_error_is_logged_and_fails_open_before_26_05(slurm_cluster, job_submit):
    """A Lua error inside slurm_job_submit lets the job through up to 25.11 (logged); 26.05
    rejects the job and shows the raw Lua error, script path included, to the user -- which is
    why the adapter catches its own errors (tests/test_policy_cluster.py)."""
    mark = slurm_cluster.log_mark()
    job_submit("""\
function slurm_job_submit(job_desc, part_list, submit_uid)
    error("slurmgpu-test boom")
end
function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
    return slurm.SUCCESS
end
return slurm.SUCCESS
""")

    rc, _, err = slurm_cluster.sbatch(None, "--test-only", "--wrap", "true")
    if slurm_cluster.release.version_tuple >= (26, 5):
        assert rc != 0 and "%s:2: slurmgpu-test boom" % slurm_cluster.job_submit_path in err, err
        return
    assert rc == 0, err
    errors = slurm_cluster.job_submit_errors(mark)
    assert any("slurmgpu-test boom" in line for line in errors), errors


def test_job_submit_install_detects_a_script_that_does_not_load(slurm_cluster, job_submit):
    with pytest.raises(RuntimeError, match="did not load"):  # ClusterError
        job_submit("this is not lua")
    # The previous (accept-all) script stays active.
    rc, _, err = slurm_cluster.sbatch(None, "--test-only", "--wrap", "true")
    assert rc == 0, err


def test_cli_filter_lua_loads_and_can_reject(slurm_cluster, cli_filter):
    cli_filter("""\
function slurm_cli_setup_defaults(options, early_pass)
    return slurm.SUCCESS
end

function slurm_cli_pre_submit(options, offset)
    slurm.log_error("slurmgpu-cli-filter: type=%s nodes=%s",
                    tostring(options.type), tostring(options.nodes))
    if options["job-name"] == "clireject" then
        return slurm.ERROR
    end
    return slurm.SUCCESS
end

function slurm_cli_post_submit(offset, jobid, stepid)
    return slurm.SUCCESS
end

return slurm.SUCCESS
""")

    rc, _, err = slurm_cluster.sbatch(None, "--test-only", "-N2", "--wrap", "true")
    assert rc == 0, err
    assert "slurmgpu-cli-filter: type=sbatch nodes=2" in err

    rc, _, err = slurm_cluster.sbatch(None, "--test-only", "-J", "clireject", "--wrap", "true")
    assert rc != 0
    assert "cli_filter plugin terminated with error" in err
