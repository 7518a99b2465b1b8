"""`slurmgpu report`: a finished run against its plan (issue 31).

The logs in tests/data/report are recorded lines in each framework's print format at the pinned
version (tests/data/report/README.md says which file and line each follows); no GPU ran here. The
expected figures below are worked out by hand from the numbers in those logs, so a reader that
picks the wrong line, unit or interval fails here. DeepSpeed is also read from a line the installed
DeepSpeed itself prints.
"""

from __future__ import annotations

import json
import re
import statistics
from pathlib import Path

import pytest
from click.testing import CliRunner

from slurmgpu.cli import main
from slurmgpu.node.doctor import LogSource
from slurmgpu.plan.planline import MARKER, parse_plan_line
from slurmgpu.runs import logs
from slurmgpu.runs.report import build, find_plan
from slurmgpu.stamp import parse_stamp

DATA = Path(__file__).resolve().parent / "data" / "report"
ROOT = Path(__file__).resolve().parents[1]
GB_PER_MIB = 1024**2 / 1e9
GB_PER_GIB = 1024**3 / 1e9


def _report(name: str, **kw):
    text = (DATA / name).read_text()
    facts = find_plan(text, None)
    assert facts is not None, name
    return build(LogSource(label=name, paths=(), text=text), facts, **kw)


def _cli(*args: str, env=None):
    r = CliRunner().invoke(main, list(args), env=env, catch_exceptions=False)
    return r.exit_code, r.output


def _iter_ms(name: str):
    """(iteration, elapsed ms) of a Megatron log, read with a plain regex (the test's own reading)."""
    text = (DATA / name).read_text()
    return [(int(i), float(ms)) for i, ms in re.findall(r"iteration +(\d+)/.*?per iteration \(ms\): ([0-9.]+)", text)]


# ---------------------------------------------------------------------------
# Every training launcher and both serving engines


def test_megatron_lm_steady_step_time_excludes_warmup_and_reads_mib():
    r = _report("megatron-lm.log")
    assert r.measured.framework == "megatron"
    rows = _iter_ms("megatron-lm.log")
    # warm-up: iteration 1 (95 s, initialisation) and every step up to 10 % of 50 -> iterations 1 and 5 out
    steady = [ms for it, ms in rows if it > 5]
    assert r.warmup == 5 and r.steady_n == len(steady) == 9
    step = r.term("step_time")
    assert step.measured == pytest.approx(statistics.median(steady) / 1000)
    assert step.measured < 64  # the checkpoint spike at iteration 40 (70.8 s) does not move the median
    tps = r.term("tokens_per_s_gpu")
    assert tps.measured == pytest.approx(512 * 8192 / step.measured / 8)
    assert tps.plan == 8755 and step.plan == 59.89 and step.band == 10
    # peak memory: the highest `max reserved` of all ranks' report lines (rank 4: 66210 MiB)
    assert r.term("memory").measured == pytest.approx(66210.00 * GB_PER_MIB)
    assert "max reserved" in r.term("memory").how
    # MFU on the plan's definition: plan MFU x measured / planned tokens/s
    assert r.term("mfu").measured == pytest.approx(0.5127 * tps.measured / 8755)
    assert all(t.inside() for t in r.terms if t.band is not None)


def test_megatron_bridge_memory_is_in_gigabytes_of_1e9():
    r = _report("megatron-bridge.log", fmt=None)
    assert r.measured.framework == "megatron-bridge"
    assert r.term("memory").measured == pytest.approx(68.944)  # mem-max-reserved-gigabytes, rank 0 after 5
    steady = [ms for it, ms in _iter_ms("megatron-bridge.log") if it > 5]
    assert r.term("step_time").measured == pytest.approx(statistics.median(steady) / 1000)


def test_srun_program_printing_megatron_lines_is_read_as_megatron():
    r = _report("srun-megatron.log")
    assert r.facts.plan["launcher"] == "srun" and r.measured.framework == "megatron"


def test_torchtitan_tps_is_per_gpu_and_validation_lines_do_not_count():
    r = _report("torchtitan.log")
    assert r.measured.framework == "torchtitan"
    text = (DATA / "torchtitan.log").read_text()
    clean = re.sub(r"\x1b\[[0-9;]*m", "", text)
    tps = [
        (int(s), int(t.replace(",", ""))) for s, t in re.findall(r"(?<!validate )step: +(\d+) .*?tps: ([0-9,]+)", clean)
    ]
    assert len(tps) == 11  # the `validate step` line (tps 20,111) is not a training step
    steady = [t for s, t in tps if s > 10]
    assert r.term("tokens_per_s_gpu").measured == pytest.approx(statistics.median(steady))
    assert r.term("step_time").measured == pytest.approx(512 * 8192 / 8 / statistics.median(steady))
    assert r.term("memory").measured == pytest.approx(61.23 * GB_PER_GIB)  # max reserved GiB, not the 70 of validation
    assert r.term("tokens_per_s_gpu").inside() is False  # -13 %: outside the plan's +-10 %
    assert any("torchtitan's own MFU" in n for n in r.notes)


def test_deepspeed_samples_are_sequences_of_the_whole_job():
    r = _report("deepspeed.log")
    assert r.measured.framework == "deepspeed"
    sps = [float(x) for x in re.findall(r"CurrSamplesPerSec=([0-9.]+)", (DATA / "deepspeed.log").read_text())]
    med = statistics.median(sps[1:])  # step 10 is the first logged interval: warm-up
    assert r.term("tokens_per_s_gpu").measured == pytest.approx(med * 8192 / 8)
    assert r.term("step_time").measured == pytest.approx(512 / med)
    assert r.term("memory").measured == pytest.approx(58.3 * GB_PER_GIB)  # printed "GB", computed / 1024**3
    assert r.versions.framework == "deepspeed 0.19.8"


@pytest.mark.parametrize(
    "name,launcher", [("accelerate-hf-trainer.log", "accelerate"), ("torchrun-hf-trainer.log", "torchrun")]
)
def test_hf_trainer_whole_run_average_says_so(name, launcher):
    r = _report(name)
    assert r.facts.plan["launcher"] == launcher and r.measured.framework == "hf-trainer"
    assert r.term("tokens_per_s_gpu").measured == pytest.approx(8.258 * 8192 / 8)
    assert r.term("step_time").measured == pytest.approx(1 / 0.01613)
    assert r.measured.whole_run and any("warm-up is included" in n for n in r.notes)


def test_vllm_benchmark_summary_against_the_serving_plan():
    r = _report("vllm.log")
    assert r.measured.framework == "vllm" and r.facts.serving
    assert r.term("tokens_per_s_gpu").measured == pytest.approx(1480.02 / 8)
    assert r.term("step_time").measured == pytest.approx(5.40e-3)  # median TPOT
    assert r.term("prefill").measured == pytest.approx(0.2598)  # median TTFT
    assert r.term("weights").measured == pytest.approx(14.99 * GB_PER_GIB)
    assert r.versions.framework == "vllm 0.33.0"
    assert r.term("step_time").band is None  # serving plans state no band (no measured serving run bounds them)


def test_vllm_engine_stats_without_a_benchmark_sum_the_engines():
    text = (DATA / "vllm.log").read_text()
    text = text[: text.index("=== Serving Benchmark")].rsplit("\n", 1)[0] + "\n"
    facts = find_plan(text, None)
    r = build(LogSource(label="x", paths=(), text=text), facts)
    rates = [
        float(x)
        for e, x, n in re.findall(r"Engine (\d+): .*?generation throughput: ([0-9.]+) tokens/s, Running: (\d+)", text)
        if int(n) > 0
    ]
    per_engine = {}
    for e, x, n in re.findall(r"Engine (\d+): .*?generation throughput: ([0-9.]+) tokens/s, Running: (\d+)", text):
        if int(n) > 0:
            per_engine.setdefault(e, []).append(float(x))
    assert len(rates) == 48 and len(per_engine) == 8  # the idle engine's 0.0 line is left out
    total = sum(statistics.median(v) for v in per_engine.values())
    assert r.term("tokens_per_s_gpu").measured == pytest.approx(total / 8)
    assert r.term("step_time").measured is None


def test_sglang_benchmark_and_load_lines():
    r = _report("sglang.log")
    assert r.measured.framework == "sglang"
    assert r.term("tokens_per_s_gpu").measured == pytest.approx(1350.0 / 8)
    assert r.term("step_time").measured == pytest.approx(5.90e-3)
    assert r.term("weights").measured == pytest.approx(14.99 * GB_PER_GIB)  # "GB" there is bytes / (1 << 30)


def test_every_launcher_has_a_recorded_log():
    from slurmgpu.vocab import LAUNCHERS

    seen = set()
    for p in DATA.glob("*.log"):
        words = parse_plan_line(p.read_text())
        assert words is not None, p.name
        seen.add(words["launcher"])
    assert seen == set(LAUNCHERS)


def test_formats_are_the_vocab_list():
    from slurmgpu.vocab import REPORT_FORMATS

    assert logs.FORMATS == REPORT_FORMATS


def test_deepspeed_reads_the_line_the_installed_deepspeed_prints(monkeypatch):
    """DeepSpeed's own ThroughputTimer (0.19.8, CPU) prints the line; the reader must take it."""
    monkeypatch.setenv("DS_ACCELERATOR", "cpu")
    timer = pytest.importorskip("deepspeed.utils.timer")
    from deepspeed.utils.config import get_timers_config

    out = []
    t = timer.ThroughputTimer(
        get_timers_config({}), batch_size=16, start_step=2, steps_per_output=2, logging_fn=out.append
    )
    for _ in range(6):
        t.start()
        t.stop(global_step=True)
    assert out, "DeepSpeed printed no throughput line"
    got = logs.read_deepspeed(out)
    assert got is not None and [s.step for s in got.samples] == [4, 6]
    assert got.samples[-1].samples_per_s == pytest.approx(
        float(re.search(r"CurrSamplesPerSec=([0-9.e+-]+)", out[-1]).group(1))
    )


# ---------------------------------------------------------------------------
# The plan line and the stamp


def test_generated_script_carries_the_plan_line_and_echoes_it(tmp_path):
    out = tmp_path / "job.sh"
    code, text = _cli("gen", "--site", "dgx-h100", "--model", "llama3.1-8b", "--launcher", "megatron", "--nodes", "1",
                      "--smoke", "--no-preflight", "-o", str(out))  # fmt: skip
    assert code == 0, text
    script = out.read_text()
    words = parse_plan_line(script)
    assert words is not None and words["launcher"] == "megatron" and words["band_basis"] == "published"
    assert "echo '%s" % MARKER in script  # echoed into the log, so a LOGFILE alone carries the plan
    # the plan line is no stamp: the stamp grammar (and the Lua filter's copy of it) still finds the stamp
    stamp = parse_stamp(script)
    assert stamp is not None and stamp["tp"] == re.search(r"^# slurmgpu: .*?tp=(\d+)", script, re.M).group(1)
    assert parse_stamp(script.replace("# slurmgpu: ", "# slurmgpu-x: ", 1).split("echo")[0]) is None


def test_a_log_without_a_stamp_is_an_input_error(tmp_path):
    log = tmp_path / "x.log"
    log.write_text((DATA / "megatron-lm.log").read_text().split("\n", 4)[4])
    code, out = _cli("report", str(log))
    assert code == 2 and "no slurmgpu stamp" in out and "--script" in out
    script = tmp_path / "job.sh"
    script.write_text("\n".join((DATA / "megatron-lm.log").read_text().splitlines()[:3]) + "\n")
    code, out = _cli("report", str(log), "--script", str(script))
    assert code == 0 and "plan (%s)" % script in out


def test_a_log_without_progress_lines_exits_1(tmp_path):
    log = tmp_path / "x.log"
    log.write_text("\n".join((DATA / "megatron-lm.log").read_text().splitlines()[:5]) + "\n")
    code, out = _cli("report", str(log))
    assert code == 1 and "none of the progress lines" in out


# ---------------------------------------------------------------------------
# --expect-within, --json, --format


def test_expect_within_exit_codes():
    log = str(DATA / "torchtitan.log")  # -13 % tokens/s against a +-10 % band
    assert _cli("report", log, "--expect-within", "10%")[0] == 1
    assert _cli("report", log, "--expect-within", "16%")[0] == 0
    assert _cli("report", log, "--expect-within", "band")[0] == 1
    code, out = _cli("report", str(DATA / "megatron-lm.log"), "--expect-within", "band")
    assert code == 0 and "every measured term inside" in out
    # a serving plan states no band: `band` has nothing to check, which is a failure, not a pass
    code, out = _cli("report", str(DATA / "vllm.log"), "--expect-within", "band")
    assert code == 1 and "NOTHING CHECKED" in out
    code, out = _cli("report", str(DATA / "vllm.log"), "--expect-within", "10%")
    assert code == 1 and "OUTSIDE (time to first token)" in out  # TTFT +26 %; the rest within 6 %
    assert _cli("report", str(DATA / "vllm.log"), "--expect-within", "30%")[0] == 0
    assert _cli("report", log, "--expect-within", "ten")[0] == 2


def test_json_is_a_list_with_every_term():
    code, out = _cli("report", str(DATA / "deepspeed.log"), str(DATA / "megatron-lm.log"), "--json")
    assert code == 0
    data = json.loads(out[out.index("[") :])
    assert [d["measured_from"]["framework"] for d in data] == ["deepspeed", "megatron"]
    terms = {t["term"]: t for t in data[1]["terms"]}
    assert set(terms) == {"step_time", "tokens_per_s_gpu", "mfu", "memory"}
    assert terms["step_time"]["band_pct"] == 10.0 and terms["step_time"]["inside_band"] is True
    assert data[1]["versions"]["nccl"] == "2.27.7+cuda12.9"
    assert data[1]["versions"]["env"]["env_hash"] == "3f9c1a7e52b0d864"


def test_format_picks_one_of_several_and_refuses_a_missing_one(tmp_path):
    mixed = tmp_path / "mixed.log"
    titan = [x for x in (DATA / "torchtitan.log").read_text().splitlines() if "step:" in x]
    mixed.write_text((DATA / "srun-megatron.log").read_text() + "\n".join(titan) + "\n")
    code, out = _cli("report", str(mixed), "--json", "--format", "torchtitan")
    assert code == 0 and json.loads(out[out.index("[") :])[0]["measured_from"]["framework"] == "torchtitan"
    code, out = _cli("report", str(mixed), "--json")
    got = json.loads(out[out.index("[") :])[0]
    assert got["measured_from"]["framework"] == "megatron" and got["other_formats"] == ["torchtitan"]
    assert _cli("report", str(mixed), "--format", "deepspeed")[0] == 1


def test_warmup_option_moves_the_steady_state():
    r = _report("megatron-lm.log", warmup=30)
    steady = [ms for it, ms in _iter_ms("megatron-lm.log") if it > 30]
    assert r.steady_n == len(steady) == 4
    assert r.term("step_time").measured == pytest.approx(statistics.median(steady) / 1000)


def test_html_has_the_measured_values_beside_the_plan(tmp_path):
    page = tmp_path / "r.html"
    code, out = _cli("report", str(DATA / "megatron-lm.log"), "--html", str(page))
    assert code == 0, out
    html = page.read_text()
    assert "Plan vs measured" in html and "59.89" in html and "<svg" in html
    assert "%.4g" % (statistics.median([ms for it, ms in _iter_ms("megatron-lm.log") if it > 5]) / 1000) in html
    assert "<script" not in html
    from tests.explain_util import html_problems

    assert html_problems(html) == []


# ---------------------------------------------------------------------------
# Finding a finished job's script and log (slurmgpu.node.doctor.find_job_log, shared with doctor)


def test_old_job_script_from_sacct_and_log_path_from_its_sbatch_output(tmp_path):
    """scontrol has forgotten the job; sacct (22.05: no StdOut field) has its record and, under
    AccountingStoreFlags=job_script, its script, whose #SBATCH --output names the log. Before, the
    script was read from scontrol only and the log looked for as slurm-ID.out: neither was found."""
    from slurmgpu.node.doctor import find_job_log
    from tests.test_doctor import Replay

    log = (DATA / "megatron-lm.log").read_text()
    script = "\n".join(log.splitlines()[:3]) + "\n#SBATCH --job-name=llama\n#SBATCH --output=%x-%j.out\nset -eu\n"
    (tmp_path / "llama-77.out").write_text("\n".join(log.splitlines()[3:]) + "\n")
    sacct_script = "Batch Script for 77\n" + "-" * 80 + "\n" + script
    r = Replay(
        {
            "sacct -j 77 -X -n -P -o JobId,JobName,WorkDir,NodeList": (0, "77|llama|%s|gpu[01-02]\n" % tmp_path),
            "sacct -j 77 --batch-script -n": (0, sacct_script),
        }
    )
    src = find_job_log("77", r)
    assert src.script_from == "sacct" and src.script == script
    assert src.paths == (str(tmp_path / "llama-77.out"),)
    facts = find_plan(src.text, src.script, "batch script of job 77 (sacct)")
    assert facts.where.endswith("(sacct)") and facts.plan["launcher"] == "megatron"
    assert src.nodes == ("gpu01", "gpu02")


def test_sacct_without_a_stored_script_says_none():
    from slurmgpu.node.doctor import batch_script
    from tests.test_doctor import Replay

    r = Replay({"sacct -j 5 --batch-script -n": (0, "Batch Script for 5\n" + "-" * 80 + "\nNONE\n")})
    assert batch_script("5", r) == (None, "")


def test_vllm_aggregated_engine_lines_count_once():
    """--aggregate-engine-logging prints one line for all engines ('8 Engines Aggregated: ...',
    vllm/v1/metrics/loggers.py AggregatedLoggingStatLogger): its throughput is already the total."""
    lines = [
        "(APIServer pid=1) INFO 09-14 09:31:%02d [loggers.py:283] 8 Engines Aggregated: Avg prompt throughput: 0.0 "
        "tokens/s, Avg generation throughput: %.1f tokens/s, Running: 8 reqs, Waiting: 0 reqs, GPU KV cache usage: "
        "0.4%%" % (i, v)
        for i, v in enumerate((1400.0, 1480.0, 1460.0))
    ]
    got = logs.read_vllm(lines)
    assert got is not None and logs.replica_total(got.samples) == pytest.approx(1460.0)


def test_the_generated_deepspeed_config_makes_deepspeed_print_its_throughput(tmp_path):
    """DeepSpeed 0.19.8 logs its throughput line at INFO every `steps_per_print` steps, and its logger
    starts at WARNING with steps_per_print unset: a config without the two keys logs no speed and
    report has nothing to read. The config `gen` writes, read by DeepSpeed's own config class,
    drives DeepSpeed's own timer here, and its line must reach the reader."""
    import logging

    ds_config = pytest.importorskip("deepspeed.runtime.config")
    from deepspeed.utils import logger as ds_logger
    from deepspeed.utils.logging import set_log_level_from_string
    from deepspeed.utils.timer import ThroughputTimer

    out = tmp_path / "job.sh"
    code, text = _cli("gen", "--site", "dgx-h100", "--model", "llama3.1-8b", "--launcher", "deepspeed", "--nodes", "1",
                      "--implements", "recompute", "--no-preflight", "-o", str(out), "--", "train.py")  # fmt: skip
    assert code == 0, text
    body = re.search(r"<<'SLURMGPU_EOF'\n(.*?)\nSLURMGPU_EOF\n", out.read_text(), re.S)
    raw = json.loads(body.group(1))
    cfg = ds_config.DeepSpeedConfig({k: v for k, v in raw.items() if k != "train_batch_size"})
    records: list = []
    handler = logging.Handler()
    handler.emit = lambda rec: records.append(rec.getMessage())  # type: ignore[assignment]
    level = ds_logger.level
    ds_logger.addHandler(handler)
    try:
        if cfg.log_level is not None:
            set_log_level_from_string(cfg.log_level)
        t = ThroughputTimer(cfg.timers_config, batch_size=raw["train_batch_size"], steps_per_output=cfg.steps_per_print)
        for _ in range(3 * (cfg.steps_per_print or 10)):
            t.start()
            t.stop(global_step=True)
    finally:
        ds_logger.removeHandler(handler)
        set_log_level_from_string(logging.getLevelName(level).lower())
    got = logs.read_deepspeed(records)
    assert got is not None and len(got.samples) >= 2, records


@pytest.mark.parametrize("launcher", ["torchrun", "srun", "accelerate", "megatron", "deepspeed", "nemo", "torchtitan"])
def test_the_fingerprint_line_does_not_change_the_launcher_the_filter_sees(launcher, tmp_path):
    """The submit filter reads launcher words anywhere in a script (outside comments): a fingerprint
    that named frameworks (it once listed 'sglang', 'vllm', ... in its Python) made a torchrun job
    look like SGLang to the filter, which then suggested SGLang's flags. Neither it nor the echoed
    plan line (which names the job's own launcher) may change what the filter sees."""
    from slurmgpu.policy import check_script
    from slurmgpu.site import load_site, preset_dir

    out = tmp_path / "job.sh"
    extra = ["--smoke"] if launcher in ("megatron", "nemo", "torchtitan") else ["--", "train.py"]
    if launcher in ("torchrun", "srun", "accelerate", "deepspeed"):  # the user's program is planned as declared:
        # as DDP (or ZeRO) without activation checkpointing, 8B's fp32 loss logits fit nowhere
        extra = ["--implements", "recompute"] + (["--fsdp"] if launcher in ("torchrun", "srun") else []) + extra
    code, text = _cli("gen", "--site", "dgx-h100", "--model", "llama3.1-8b", "--launcher", launcher, "--nodes", "2",
                      "--no-preflight", "-o", str(out), *extra)  # fmt: skip
    assert code == 0, text
    script = out.read_text()
    assert "# slurmgpu-env:" in script
    body = script.replace(script[script.index("# --- fingerprint") : script.index("# slurmgpu-env:")], "")
    body = "\n".join(ln for ln in body.splitlines() if not ln.startswith("echo '# slurmgpu-plan:")) + "\n"
    assert "slurmgpu-plan" in script and "echo '# slurmgpu-plan" not in body
    site = load_site(str(preset_dir() / "dgx-h100.yaml"))
    with_fp = check_script(site, script, partition="gpu")
    without = check_script(site, body, partition="gpu")
    assert (with_fp.launcher, with_fp.decision, with_fp.layout) == (without.launcher, without.decision, without.layout)
