"""`slurmgpu doctor` on fixture logs in real NCCL / PyTorch / Slurm / pyxis formats."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from typing import Sequence

import pytest

from slurmgpu.errors import SlurmError
from slurmgpu.node import (
    CATALOGUE,
    by_id,
    diagnose,
    expand_output_pattern,
    fill,
    find_job_log,
    match_lines,
    read_log,
    read_stamp,
    render_text,
)
from slurmgpu.site import load_site, preset_dir
from slurmgpu.slurm import CommandResult

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(ROOT, "tests", "data", "doctor")
LOGS = sorted(f for f in os.listdir(DATA) if f.endswith(".log"))
IDS = sorted(by_id(), key=len, reverse=True)  # longest first: "nccl-system-error" before "nccl"


def expected_id(filename: str):
    """<id>.log or <id>-<variant>.log; no-match-*.log expects nothing."""
    if filename.startswith("no-match"):
        return None
    stem = filename[:-4]
    for sid in IDS:
        if stem == sid or stem.startswith(sid + "-"):
            return sid
    raise AssertionError("fixture %s names no signature" % filename)


def read(name: str) -> str:
    with open(os.path.join(DATA, name)) as f:
        return f.read()


@pytest.fixture(scope="module")
def site():
    return load_site(str(preset_dir() / "dgx-h100.yaml"))


def test_every_signature_has_a_fixture():
    covered = {expected_id(f) for f in LOGS}
    assert {s.id for s in CATALOGUE} <= covered


def test_catalogue_ids_are_unique_and_patterns_compile():
    assert len(by_id()) == len(CATALOGUE)
    for s in CATALOGUE:
        assert s.patterns and s.fixes and s.cause
        for p in s.patterns:
            re.compile(p)


@pytest.mark.parametrize("name", LOGS)
def test_fixture_is_diagnosed_as_its_signature(name, site):
    d = diagnose(read(name), site=site, source=name)
    want = expected_id(name)
    if want is None:
        assert d.matches == [] and d.tail
        return
    assert d.matches, "nothing recognised in %s" % name
    top = d.matches[0]
    assert top.signature.id == want
    assert top.evidence and all(read(name).splitlines()[n - 1] == text for n, text in top.evidence)
    assert "?" not in top.cause and "{" not in top.cause and "[[" not in top.cause
    text = render_text(d)
    assert top.signature.title in text and ("[%s]" % want) in text


def test_root_cause_is_listed_before_the_watchdog_echo(site):
    d = diagnose(read("ib-completion-error.log"), site=site)
    assert [m.signature.id for m in d.matches] == ["ib-completion-error", "watchdog-timeout"]
    ib = d.matches[0]
    assert ib.hosts == ["gpu02"] and ib.count == 2
    assert ib.groups["peer"] == "10.20.0.13" and ib.groups["status"] == "12"
    assert "transport retry counter exceeded" in ib.cause
    # the site's HCAs are quoted in the fix
    assert "mlx5_0,mlx5_3,mlx5_4,mlx5_5,mlx5_6,mlx5_9,mlx5_10,mlx5_11" in " ".join(ib.fixes)
    wd = d.matches[1]
    assert wd.groups["op"] == "ALLREDUCE" and wd.groups["timeout_ms"] == "600000"
    assert "Start with #1" in render_text(d)


def test_preemption_wins_over_the_errors_the_kill_causes(site):
    d = diagnose(read("preemption.log"), site=site)
    assert d.matches[0].signature.id == "preemption" and d.matches[0].hosts == ["gpu07"]


def test_container_pull_quotes_http_status(site):
    d = diagnose(read("container-pull-pyxis.log"), site=site)
    assert "HTTP 401: not authorised" in d.matches[0].cause
    d = diagnose(read("container-pull-apptainer.log"), site=site)
    assert "docker://acme/trainer:2.3" in d.matches[0].cause and "HTTP" not in d.matches[0].cause


def test_port_and_host_are_taken_from_the_log(site):
    d = diagnose(read("address-in-use.log"), site=site)
    assert d.matches[0].groups["port"] == "29500" and "port 29500" in d.matches[0].cause
    d = diagnose(read("master-addr-unresolved.log"), site=site)
    assert "'gpu-head-ib'" in d.matches[0].cause
    d = diagnose(read("socket-timeout.log"), site=site)
    assert "10.30.4.17:29500" in d.matches[0].cause
    assert "bond0" in " ".join(d.matches[0].fixes)  # the site's socket interface


def test_system_error_quotes_the_last_error_line(site):
    d = diagnose(read("nccl-system-error.log"), site=site)
    texts = [t for _, t in d.matches[0].evidence]
    assert any("Software caused connection abort" in t for t in texts)


def test_without_a_site_optional_facts_are_dropped():
    d = diagnose(read("ib-completion-error.log"))
    fixes = " ".join(d.matches[0].fixes)
    assert "compute HCAs" not in fixes and "?" not in fixes and "{" not in fixes


def test_fill_drops_segments_with_unknown_fields():
    assert fill("a[[ b={b}]] c={c}", {"c": 1}) == "a c=1"
    assert fill("a[[ b={b}]]", {"b": 2}) == "a b=2"
    assert fill("x={x}", {}) == "x=?"


def test_oom_advice_gives_the_estimate_and_the_planners_layout(site):
    from slurmgpu.plan import TrainShape, get_model, training_memory

    d = diagnose(read("cuda-oom.log"), site=site)
    adv = " ".join(d.matches[0].advice)
    assert "llama3.1-8b" in adv and "tp=1 pp=1 cp=1 micro_batch=1 seq=8192" in adv
    est = float(re.search(r"\): ([\d.]+) GB per GPU", adv).group(1))
    model = get_model("llama3.1-8b")
    assert est == round(training_memory(model, TrainShape(1, 1, 16, 1, 1, 1, 1, 8192)).total, 1)
    assert est > 0.9 * 80  # the estimate agrees the stamped layout did not fit
    fit = re.search(r"layout for these 16 GPUs: tp=(\d+) pp=(\d+) dp=(\d+) cp=(\d+).*?~([\d.]+) GB per GPU of 80", adv)
    assert fit, adv
    tp, pp, dp, cp = (int(fit.group(i)) for i in range(1, 5))
    gb = float(fit.group(5))
    assert tp * pp * dp * cp == 16 and gb <= 0.9 * 80


def test_oom_advice_when_the_job_is_too_small_names_the_node_count(site):
    text = read("cuda-oom.log").replace("llama3.1-8b", "llama3.1-405b")  # 405B cannot fit in 16 GPUs
    adv = " ".join(diagnose(text, site=site).matches[0].advice)
    m = re.search(r"No layout of 16 GPUs fits .*the planner needs (\d+) nodes: tp=(\d+) pp=(\d+) dp=(\d+)", adv)
    assert m, adv
    nodes, tp, pp, dp = (int(x) for x in m.groups())
    assert nodes > 2 and tp * pp * dp == nodes * 8


def test_oom_without_model_says_what_is_missing(site):
    d = diagnose(read("cuda-oom-old-format.log"), site=site)
    assert d.matches[0].groups["total"] == "39.59 GiB"
    assert any("names no model" in a for a in d.matches[0].advice)


def test_stamp_from_log_or_script():
    assert read_stamp("x\n# slurmgpu: site=a tp=2 pp=1 dp=4\n# slurmgpu-model: llama3.1-8b\n") == {
        "site": "a",
        "tp": "2",
        "pp": "1",
        "dp": "4",
        "model": "llama3.1-8b",
    }
    assert read_stamp("no stamp", "#!/bin/bash\n# slurmgpu: site=b tp=8 model=gpt3-175b\n") == {
        "site": "b",
        "tp": "8",
        "model": "gpt3-175b",
    }
    assert read_stamp("# slurmgpu: preflight ok\n") == {}


def test_match_lines_scales_linearly_enough():
    filler = ["[rank0]: step %d | loss 2.0" % i for i in range(20000)]
    lines = filler + read("ib-completion-error.log").splitlines()
    found = match_lines(lines)
    assert found[0].signature.id == "ib-completion-error" and found[0].first_line > 20000


# -- finding a job's log -------------------------------------------------------------

SCONTROL_JOB = (
    "JobId=41 JobName=myjob UserId=alice(1000) GroupId=alice(1000) MCS_label=N/A Priority=1 "
    "JobState=FAILED Reason=NonZeroExitCode ExitCode=1:0 NodeList=gpu[01-02] BatchHost=gpu01 "
    "WorkDir=%(wd)s StdErr=%(wd)s/%%x-%%j.err StdIn=/dev/null StdOut=%(wd)s/%%x-%%j.out Power=\n"
)


class Replay:
    """Recorded Slurm client output, keyed by command line."""

    def __init__(self, table):
        self.table = table
        self.calls = []

    def run(self, argv: Sequence[str], timeout: float = 60.0) -> CommandResult:
        self.calls.append(" ".join(argv))
        rc, out = self.table.get(" ".join(argv), (1, ""))
        return CommandResult(tuple(argv), rc, out, "" if rc == 0 else "slurm_load_jobs error: Invalid job id specified")


def test_output_patterns_expand_like_slurm():
    info = {
        "JobId": "41",
        "JobName": "train",
        "UserId": "alice(1000)",
        "NodeList": "gpu[03-04]",
        "ArrayJobId": "40",
        "ArrayTaskId": "7",
    }
    assert expand_output_pattern("/s/%x-%j.out", info) == "/s/train-41.out"
    assert expand_output_pattern("%A_%a.%u.%N.%%", info) == "40_7.alice.gpu03.%"
    assert expand_output_pattern("slurm-%6j.out", info) == "slurm-000041.out"


def test_job_id_reads_stdout_and_stderr_and_the_batch_script(tmp_path):
    (tmp_path / "myjob-41.out").write_text(read("socket-timeout.log"))
    no_stamp = "".join(ln for ln in read("address-in-use.log").splitlines(True) if not ln.startswith("# slurmgpu"))
    (tmp_path / "myjob-41.err").write_text(no_stamp)
    r = Replay(
        {
            "scontrol show job -o 41": (0, SCONTROL_JOB % {"wd": tmp_path}),
            "scontrol write batch_script 41 -": (0, "#!/bin/bash\n# slurmgpu: site=dgx-h100 tp=8\n"),
        }
    )
    src = find_job_log("41", r)
    assert src.paths == (str(tmp_path / "myjob-41.out"), str(tmp_path / "myjob-41.err"))
    d = diagnose(src.text, stamp=read_stamp(src.text, src.script))
    assert [m.signature.id for m in d.matches] == ["address-in-use", "socket-timeout"]
    assert d.stamp == {"site": "dgx-h100", "tp": "8"}


def test_old_job_falls_back_to_sacct(tmp_path):
    (tmp_path / "slurm-77.out").write_text(read("time-limit.log"))
    r = Replay({"sacct -j 77 -X -n -P -o JobId,JobName,WorkDir,NodeList": (0, "77|train|%s|gpu01\n" % tmp_path)})
    src = find_job_log("77", r)
    assert src.paths == (str(tmp_path / "slurm-77.out"),)
    assert any(c.startswith("sacct -j 77 -X -n -P -o JobId,JobName,WorkDir,StdOut") for c in r.calls)


def test_unknown_job_is_a_clear_error():
    with pytest.raises(SlurmError, match="pass the log file instead"):
        find_job_log("99", Replay({}))


def test_read_log_prefers_an_existing_file_named_like_a_job_id(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "123").write_text(read("requeue.log"))
    assert read_log("123").paths == ("123",)


# -- the command line ------------------------------------------------------------------


def cli(*args: str, stdin: str = ""):
    return subprocess.run(
        [sys.executable, "-m", "slurmgpu.cli", *args], input=stdin, capture_output=True, text=True, timeout=60, cwd=ROOT
    )


def test_cli_diagnoses_a_file_with_the_stamp_site():
    p = cli("doctor", os.path.join(DATA, "ib-completion-error.log"))
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith("slurmgpu doctor:") and "1. InfiniBand/RoCE completion error" in p.stdout
    assert "mlx5_11" in p.stdout  # the stamp's site (dgx-h100) supplied the HCA list


def test_cli_json_and_stdin():
    p = cli("doctor", "-", "--json", stdin=read("gpu-lost.log"))
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert doc["diagnosed"] and doc["problems"][0]["id"] == "gpu-lost"
    assert doc["stamp"]["site"] == "dgx-h100" and doc["problems"][0]["evidence"][0]["line"] == 6


def test_cli_nothing_recognised_exits_1():
    p = cli("doctor", os.path.join(DATA, "no-match-clean.log"))
    assert p.returncode == 1 and "no known failure signature" in p.stdout


def test_cli_missing_file_is_an_error_not_a_traceback():
    p = cli("doctor", "/nonexistent/x.log")
    assert p.returncode == 2 and "cannot read /nonexistent/x.log" in p.stderr and "Traceback" not in p.stderr


def test_cli_help_has_examples():
    p = cli("doctor", "--help")
    assert p.returncode == 0 and "Examples:" in p.stdout and "slurmgpu doctor 123456" in p.stdout


# ---------------------------------------------------------------------------
# IB -> socket fallback and GPU Xid lines (issue 15)


def test_ib_socket_fallback_is_the_cause_of_the_watchdog_timeout(site):
    d = diagnose(read("nccl-ib-socket-fallback.log"), site=site)
    assert [m.signature.id for m in d.matches] == ["nccl-ib-socket-fallback", "watchdog-timeout"]
    fb = d.matches[0]
    assert fb.hosts == ["gpu01", "gpu02"] and fb.groups["ifname"] == "enp86s0f0"
    assert "over TCP on enp86s0f0 (10.10.1.1)" in fb.cause
    assert "mlx5_0,mlx5_3" in fb.cause  # the HCAs the site has and NCCL did not find
    assert any("/dev/infiniband" in f for f in fb.fixes) and any("NCCL_IB_HCA" in f for f in fb.fixes)
    assert fb.advice == ["The NCCL collective timed out (watchdog) at line 12 follows from this: fix this first."]
    # the two lines of the sequence are quoted as evidence
    texts = [t for _, t in fb.evidence]
    assert any("NET/IB : No device found" in t for t in texts) and any("NET/Socket : Using" in t for t in texts)


def test_ib_socket_fallback_needs_both_lines():
    lines = read("nccl-ib-socket-fallback.log").splitlines()
    only_ib = [ln for ln in lines if "NET/Socket" not in ln]
    assert "nccl-ib-socket-fallback" not in [m.signature.id for m in match_lines(only_ib)]
    only_socket = [ln for ln in lines if "NET/IB" not in ln]
    assert "nccl-ib-socket-fallback" not in [m.signature.id for m in match_lines(only_socket)]


def test_sockets_are_no_fallback_on_an_ethernet_only_site(site):
    from dataclasses import replace

    no_hca = {k: replace(v, nics=tuple(n for n in v.nics if n.role != "compute")) for k, v in site.node_types.items()}
    eth = replace(site, node_types=no_hca)
    d = diagnose(read("nccl-ib-socket-fallback.log"), site=eth)
    assert [m.signature.id for m in d.matches] == ["watchdog-timeout"]
    # without a site doctor cannot tell, and names it
    assert diagnose(read("nccl-ib-socket-fallback.log")).matches[0].signature.id == "nccl-ib-socket-fallback"


@pytest.mark.parametrize(
    "xid,words",
    [
        ("79", "fallen off the bus"),
        ("48", "double-bit"),
        ("63", "row remapping recorded"),
        ("64", "row remapping failed"),
        ("94", "contained ECC error"),
        ("95", "uncontained ECC error"),
        ("74", "NVLink error"),
    ],
)
def test_xid_names_the_node_and_the_exclude_fix(site, xid, words):
    line = "Mar 21 02:05:11 gpu09 kernel: NVRM: Xid (PCI:0000:9b:00): %s, pid=41872, name=python3, details" % xid
    d = diagnose(line, site=site)
    m = d.matches[0]
    assert m.signature.id == "gpu-xid" and m.hosts == ["gpu09"]
    assert ("Xid %s (" % xid) in m.cause and words in m.cause and "PCI 0000:9b:00 on gpu09" in m.cause
    assert "`sbatch --exclude=gpu09`" in m.fixes[0]


def test_other_xids_are_not_hardware_verdicts(site):
    # Xid 45 (channel torn down: the consequence of another error or of a killed process) and 13
    # (an application fault) do not condemn the node
    for xid in ("45", "13", "31"):
        line = "Mar 21 02:05:11 gpu09 kernel: NVRM: Xid (PCI:0000:9b:00): %s, pid=1, name=python3, Ch 00000008" % xid
        assert diagnose(line, site=site).matches == []


def test_xid_without_a_node_drops_the_exclude_command(site):
    d = diagnose("NVRM: Xid (PCI:0000:44:00): 79, GPU has fallen off the bus", site=site)
    m = d.matches[0]
    assert m.signature.id == "gpu-xid" and m.hosts == []
    assert "?" not in m.fixes[0] and "--exclude" not in m.fixes[0]


def test_new_signatures_name_the_source_of_their_recorded_lines():
    for sid in ("nccl-ib-socket-fallback", "gpu-xid"):
        assert "#" in by_id()[sid].source  # an upstream issue the format was recorded from


# --- NCCL DIAG / RAS reports and Xid lines placed on rank -> node -> group (slurmgpu.node.rankmap) ---


def _advice(name: str, site, nodes: Sequence[str] = (), sid: str = "") -> str:
    d = diagnose(read(name), site=site, nodes=nodes)
    m = next(m for m in d.matches if m.signature.id == (sid or expected_id(name)))
    return "\n".join(m.advice)


def test_ras_missing_rank_is_placed_on_its_node_tp_group_and_stage(site):
    adv = _advice("nccl-ras-missing.log", site, ["gpu01", "gpu02", "gpu03", "gpu04"])
    # rank 21 of tp=8 pp=2 dp=2 on 8-GPU nodes: node 2, TP group 2 (16-23), stage 1, DP peers 5/21... 21,29
    assert "Missing: rank 21: node gpu03 (node 2 of the job), local rank 5" in adv
    assert "TP group 2 (ranks 16-23) as its rank 5" in adv
    assert "pipeline stage 1 of 2" in adv
    assert "DP group 13 (ranks 21,29) as its rank 0" in adv
    # the process RAS names by address is the same rank, through NCCL's bootstrap line (gpu03 = .213)
    assert "Unresponsive process on 172.16.64.213, GPU 5: rank 21: node gpu03" in adv
    assert "`sbatch --exclude=gpu03`" in adv


def test_ras_missing_rank_without_the_communicator_size_is_not_placed(site):
    adv = _advice("nccl-ras-missing-dead.log", site, ["gpu01", "gpu02", "gpu03", "gpu04"])
    assert "Missing ranks 21 not placed on nodes: the report does not say how many ranks" in adv
    assert "node gpu03" not in adv  # no table, no bootstrap line: no guess
    assert "Unresponsive process on 172.16.64.213 managing GPU 5." in adv


def test_diag_p2p_failure_names_both_gpus_and_the_node_to_exclude(site):
    adv = _advice("nccl-diag-p2p.log", site, ["gpu01", "gpu02"])
    assert "P2P write mismatch from rank 10 (GPU 2) to rank 11 (GPU 3) over NVL." in adv
    assert "rank 10: node gpu02 (node 1 of the job), local rank 2, TP group 1 (ranks 8-15) as its rank 2" in adv
    assert "rank 11: node gpu02 (node 1 of the job), local rank 3" in adv
    assert "`sbatch --exclude=gpu02`" in adv


def test_diag_p2p_of_a_smaller_communicator_is_not_read_as_global_ranks(site):
    adv = _advice("nccl-diag-p2p-subcomm.log", site, ["gpu01", "gpu02"])
    assert "its communicator has 8 of the job's 16 ranks" in adv
    assert "--exclude" not in adv and "node gpu" not in adv


def test_diag_ras_ecc_and_nvlink_rank_is_placed(site):
    adv = _advice("nccl-diag-ras.log", site, ["gpu01", "gpu02"])
    assert "ECC: rank 13: node gpu02 (node 1 of the job), local rank 5" in adv
    assert "NVLink: rank 13: node gpu02" in adv
    assert "`sbatch --exclude=gpu02`" in adv


def test_xid_pci_maps_to_the_rank_through_ncclss_init_line(site):
    adv = _advice("gpu-xid-rank.log", site, ["gpu08", "gpu09"])
    assert "Xid 79 at PCI 0000:9b:00 on gpu09: rank 13: node gpu09 (node 1 of the job), local rank 5" in adv
    assert "TP group 1 (ranks 8-15) as its rank 5" in adv
    assert "`sbatch --exclude=gpu09`" in adv


def test_xid_without_ncclss_init_lines_names_the_nodes_ranks(site):
    adv = _advice("gpu-xid.log", site, ["gpu08", "gpu09"])
    assert "on gpu09: the node's ranks are 8-15 (node 1 of the job)" in adv
    adv = _advice("gpu-xid.log", site, ["gpu01", "gpu02"])
    assert "on gpu09: not a node of this job's node list." in adv


def test_rank_advice_without_a_stamp_says_so(site):
    text = "\n".join(line for line in read("nccl-diag-ras.log").splitlines() if "# slurmgpu:" not in line)
    d = diagnose(text, site=site)
    (m,) = [m for m in d.matches if m.signature.id == "nccl-diag-ras"]
    assert any("No stamp line with the layout" in a for a in m.advice)


def test_log_without_node_list_says_how_to_give_it(site):
    assert "pass it with `slurmgpu doctor LOG --nodes HOSTLIST`" in _advice("nccl-diag-ras.log", site)


@pytest.mark.parametrize(
    "bus, index",
    [("0000:9b:00", 5), ("00000000:9B:00.0", 5), ("9b000", 5), ("0000:bb:00.0", 6), ("0000:1b:00", None)],
)
def test_pci_bus_id_forms_compare_by_domain_bus_device(bus, index):
    from slurmgpu.node.ranks import gpu_index_of

    assert gpu_index_of(bus, {"9b000": 5, "bb000": 6}) == index


def test_doctor_cli_nodes_option_names_the_node(tmp_path):
    p = subprocess.run(
        [sys.executable, "-m", "slurmgpu.cli", "doctor", os.path.join(DATA, "nccl-diag-ras.log"), "--site",
         "dgx-h100", "--nodes", "gpu[01-02]", "--json"],
        capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=ROOT), timeout=120,
    )  # fmt: skip
    assert p.returncode == 0, p.stderr
    (prob,) = json.loads(p.stdout)["problems"]
    assert any("rank 13: node gpu02" in a for a in prob["advice"])
    (place,) = prob["ranks"]  # the same place as data, for tools
    assert place["rank"] == 13 and place["node"] == "gpu02" and place["local_rank"] == 5
    assert place["groups"]["tp"] == {"group": 1, "position": 5, "ranks": list(range(8, 16))}
    assert place["groups"]["dp"]["ranks"] == [5, 13] and place["nvlink_domain"] == "node"
