"""Every `--requeue` script's signal path is one its launcher and framework handle (issue 15).

The torchrun line is parsed with torch's own parser (torch.distributed.run.get_args_parser), so a
flag torchrun does not know, or a signal it would not handle, fails here. Megatron's flags are
checked against what its argument parser accepts, recorded below from the upstream source.
"""

from __future__ import annotations

import re
import shlex
import signal

import pytest

from slurmgpu.errors import ConfigError
from slurmgpu.job import resume
from slurmgpu.job.launchers import LAUNCHERS
from slurmgpu.job.spec import JobSpec
from slurmgpu.plan import Layout, get_model
from tests.test_render import preset, render_spec

torch_run = pytest.importorskip("torch.distributed.run", reason="torch (the e2e extra) parses the torchrun line")

# What Megatron-LM's parser accepts for the flags slurmgpu writes with --requeue, recorded from
# NVIDIA/Megatron-LM main at d98e8a6 (2026-08-22, megatron-core 0.20.0):
# megatron/training/config/training_config.py (TrainingConfig, CheckpointConfig) turned into flags
# by megatron/training/argument_utils.py (ArgumentGroupFactory: field name -> --dashed-name, bool
# False -> store_true, Enum -> its member's name). Value: how the value is read (None: no value).
MEGATRON_FLAGS = {
    "--exit-signal-handler": None,  # TrainingConfig.exit_signal_handler: bool = False
    "--exit-signal": "signal",  # TrainingConfig.exit_signal: signal.Signals (by name, e.g. SIGUSR2)
    "--exit-duration-in-mins": int,  # TrainingConfig.exit_duration_in_mins: int | None
    "--save": str,  # CheckpointConfig.save: str | None
    "--load": str,  # CheckpointConfig.load: str | None
    "--save-interval": int,  # CheckpointConfig.save_interval (also --persistent-save-interval)
}
REQUEUE_FLAGS = set(MEGATRON_FLAGS)  # the checkpoint/exit flags among them: each is in the table

TORCHRUN_RUNNERS = sorted(n for n, ln in LAUNCHERS.items() if ln.runner == "torchrun")
TRAINING = sorted(n for n, ln in LAUNCHERS.items() if not ln.serving)
SIGNALS = ("TERM", "USR2")


def _gen(launcher, sig, **kw):
    spec = JobSpec(
        launcher=launcher,
        nodes=2,
        command=("train.py",) if not LAUNCHERS[launcher].default_entry else (),
        requeue=True,
        checkpoint_signal=sig,
        checkpoint_dir="/scratch/ck pt",
        **dict({"smoke": True}, **kw),  # the frameworks that need data get their mock data
    )
    if LAUNCHERS[launcher].caps.tp:
        lay = Layout(tp=8, pp=2, dp=1, nodes=2, gpus_per_node=8)
    else:  # DeepSpeed / accelerate run plain data parallel (their caps)
        lay = Layout(tp=1, pp=1, dp=16, nodes=2, gpus_per_node=8)
    model = get_model("llama3.1-70b")
    text, req, _ = render_spec(preset("dgx-h100"), spec, layout=lay, model=model)
    return text, req


def _torchrun_argv(text):
    m = re.search(r"^\s*torchrun \\\n((?:.*\\\n)*.*)$", text, re.M)
    assert m, text
    line = m.group(1).replace("\\\n", " ").strip()
    return shlex.split(line[:-1] if line.endswith("&") else line)  # "&": the step runs in the background


def _lead(text):
    m = re.search(r"^#SBATCH --signal=B:USR2@(\d+)$", text, re.M)
    assert m, text
    return int(m.group(1))


@pytest.mark.parametrize("sig", SIGNALS)
@pytest.mark.parametrize("launcher", TRAINING)
def test_the_signal_reaches_every_step_process(launcher, sig):
    """Slurm signals the batch shell; its handler signals every process of the steps (not srun,
    which turns TERM into KILL); the program learns the signal and where to ask for a requeue."""
    if launcher in ("deepspeed", "accelerate") and sig == "USR2":
        with pytest.raises(ConfigError, match="checkpoint_signal: the %s runner handles only" % launcher):
            _gen(launcher, sig)
        return
    text, req = _gen(launcher, sig)
    assert _lead(text) == req.requeue.grace
    assert "\ntrap slurmgpu_checkpoint_signal USR2\n" in text
    body = text.split("slurmgpu_checkpoint_signal() {", 1)[1].split("}", 1)[0]
    assert 'scancel --signal=%s "$SLURM_JOB_ID"' % sig in body and "kill " not in body
    assert "export SLURMGPU_CHECKPOINT_SIGNAL=%s " % sig in text
    assert 'export SLURMGPU_REQUEUE_REQUEST="${SLURMGPU_CHECKPOINT_DIR:-$PWD}/' in text
    # the handler is armed after preflight and before the step starts
    assert text.index("# --- preflight") < text.index("trap slurmgpu_checkpoint_signal") < text.index("# --- launch")


@pytest.mark.parametrize("sig", SIGNALS)
@pytest.mark.parametrize("launcher", TORCHRUN_RUNNERS)
def test_torchrun_handles_the_signal_and_waits_for_the_save(launcher, sig):
    text, req = _gen(launcher, sig)
    args = torch_run.get_args_parser().parse_args(_torchrun_argv(text))
    handled = args.signals_to_handle.split(",")
    assert "SIG" + sig in handled
    assert {"SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT"} <= set(handled)  # torch's defaults kept
    for name in handled:
        signal.Signals[name]  # a real signal name, as torch looks it up
    assert int(args.shutdown_timeout) >= _lead(text)  # torchrun waits for the workers' save
    assert args.nnodes == "2" and args.nproc_per_node == "8"


def test_torchrun_without_requeue_keeps_its_defaults():
    spec = JobSpec(launcher="torchrun", nodes=2, command=("train.py",))
    text, _, _ = render_spec(preset("dgx-h100"), spec)
    args = torch_run.get_args_parser().parse_args(_torchrun_argv(text))
    assert args.signals_to_handle == "SIGTERM,SIGINT,SIGHUP,SIGQUIT"  # torch's default, untouched


@pytest.mark.parametrize("sig", SIGNALS)
def test_megatron_saves_on_the_signal_resumes_and_exits_before_the_limit(sig):
    text, req = _gen("megatron", sig, time="2-00:00:00", save_interval=250)
    prog = torch_run.get_args_parser().parse_args(_torchrun_argv(text)).training_script_args
    flags = [a for a in prog if a.startswith("--")]
    value = {a: prog[i + 1] if i + 1 < len(prog) else None for i, a in enumerate(prog)}
    emitted = {f for f in flags if f in REQUEUE_FLAGS or "exit" in f or "save" in f or "load" in f}
    assert emitted <= REQUEUE_FLAGS, emitted - REQUEUE_FLAGS  # nothing Megatron would not parse
    for f in emitted:
        kind = MEGATRON_FLAGS[f]
        if kind is None:
            assert value[f] is None or value[f].startswith("--")
        elif kind == "signal":
            assert value[f] in signal.Signals.__members__
        else:
            kind(value[f])
    assert "--exit-signal-handler" in flags
    if sig == "TERM":
        assert "--exit-signal" not in flags  # Megatron's default
    else:
        assert signal.Signals[value["--exit-signal"]] == signal.Signals["SIG" + sig]
    assert value["--save"] == value["--load"] == "/scratch/ck pt"  # the restart loads what it saved
    assert value["--save-interval"] == "250"
    lead = _lead(text)
    assert int(value["--exit-duration-in-mins"]) == (2 * 86400 - lead) // 60  # saves before TimeLimit
    # Megatron exits 0 after saving on the signal: the script takes that as the ask for a requeue
    assert 'if [ "$rc" -eq 0 ] && [ "$SLURMGPU_SIGNALLED" -eq 1 ]; then asked=1; fi' in text


def test_megatron_save_interval_defaults_with_requeue():
    text, _ = _gen("megatron", "TERM")
    prog = torch_run.get_args_parser().parse_args(_torchrun_argv(text)).training_script_args
    assert prog[prog.index("--save-interval") + 1] == "500"
    assert "--exit-duration-in-mins" not in prog  # no --time: nothing to count down from


def test_exit_status_carries_the_ask_only_where_the_launcher_passes_it_on():
    """srun passes the program's status on (exit 75 asks); torchrun reports 1 for any worker failure."""
    direct, _ = _gen("srun", "TERM")
    agent, _ = _gen("torchrun", "TERM")
    assert 'if [ "$rc" -eq 75 ]; then asked=1; fi' in direct
    assert 'if [ "$rc" -eq 75 ]' not in agent


def test_lead_time_covers_the_checkpoint_write():
    """The lead comes from the model's checkpoint size at the site's bandwidth plus KillWait."""
    text, req = _gen("torchrun", "TERM")
    site = preset("dgx-h100")
    params = get_model("llama3.1-70b").params
    gbps = site.requeue.checkpoint_gbps or resume.DEFAULT_CHECKPOINT_GBPS
    write = params * resume.BYTES_PER_PARAM / (gbps * 1e9)
    assert req.requeue.grace >= 2 * write + site.requeue.kill_wait
