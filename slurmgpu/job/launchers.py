"""What each launcher needs from Slurm and what it must be told about the layout.

Pure data and small functions: tasks per node, default entry points, the
arguments that carry the parallel layout, and which user arguments would
contradict it. The templates turn this into shell; nothing here quotes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

from ..errors import ConfigError, Issue
from ..plan import Layout
from ..render import PathArg
from ..vocab import LAUNCHERS as LAUNCHER_NAMES

# How the program is started on each node:
#   torchrun    one srun task per node runs torchrun, which starts one worker per GPU
#   deepspeed   one task per node runs the deepspeed runner with --no_ssh
#   accelerate  one task per node runs `accelerate launch`
#   direct      one srun task per GPU runs the program itself (RANK etc. from Slurm)
#   server      one task per node runs a serving engine that spans the nodes
RUNNERS = ("torchrun", "deepspeed", "accelerate", "direct", "server")


@dataclass(frozen=True)
class Launcher:
    """How one launcher (torchrun, megatron, vllm, ...) runs a program: its runner and entry point."""

    name: str
    runner: str
    summary: str
    default_entry: Tuple[str, ...] = ()  # () = the user must name the program
    needs_weights: bool = False  # serving engines need the checkpoint to serve
    serving: bool = False
    runtime_keys: Tuple[str, ...] = ()  # flags the template adds per node at run time

    @property
    def per_node(self) -> bool:
        """One srun task per node (the launcher forks per-GPU workers itself)."""
        return self.runner != "direct"

    def tasks_per_node(self, gpus_per_node: int) -> int:
        return 1 if self.per_node else gpus_per_node


# Flags the templates add at run time (node rank, rendezvous address): the user may not pass them.
_VLLM_RUNTIME = ("--nnodes", "--node-rank", "--master-addr", "--master-port", "--headless")
_SGLANG_RUNTIME = ("--nnodes", "--node-rank", "--dist-init-addr")
# Other spellings of flags slurmgpu writes.
_ALIASES = {
    "--tensor-parallel-size": ("-tp",),
    "--pipeline-parallel-size": ("-pp",),
    "--tp": ("--tp-size",),
    "--recompute-granularity": ("--recompute-activations",),
}

LAUNCHERS: Dict[str, Launcher] = {
    "torchrun": Launcher("torchrun", "torchrun", "torchrun, one task per node, c10d rendezvous on the first node"),
    "srun": Launcher("srun", "direct", "srun, one task per GPU; RANK/LOCAL_RANK/WORLD_SIZE from Slurm"),
    "megatron": Launcher(
        "megatron", "torchrun", "Megatron-LM via torchrun, one task per node", default_entry=("pretrain_gpt.py",)
    ),
    "deepspeed": Launcher("deepspeed", "deepspeed", "DeepSpeed runner (--no_ssh), one task per node"),
    "nemo": Launcher(
        "nemo",
        "direct",
        "NeMo (Hydra overrides), one task per GPU",
        default_entry=("python", "/opt/NeMo/examples/nlp/language_modeling/megatron_gpt_pretraining.py"),
    ),
    "torchtitan": Launcher(
        "torchtitan", "torchrun", "torchtitan via torchrun, one task per node", default_entry=("-m", "torchtitan.train")
    ),
    "accelerate": Launcher("accelerate", "accelerate", "Hugging Face accelerate launch, one task per node"),
    "vllm": Launcher(
        "vllm",
        "server",
        "vLLM server across nodes (--nnodes/--node-rank, workers --headless)",
        default_entry=("vllm", "serve"),
        needs_weights=True,
        serving=True,
        runtime_keys=_VLLM_RUNTIME,
    ),
    "sglang": Launcher(
        "sglang",
        "server",
        "SGLang server across nodes (--nnodes/--node-rank/--dist-init-addr)",
        default_entry=("python", "-m", "sglang.launch_server"),
        needs_weights=True,
        serving=True,
        runtime_keys=_SGLANG_RUNTIME,
    ),
}
NAMES = LAUNCHER_NAMES  # slurmgpu.vocab; tests/test_vocab.py checks LAUNCHERS describes each, in order
PYTHONS = ("python", "python3")
DEFAULT_SAVE_INTERVAL = 500  # Megatron iterations between periodic saves under --requeue


def get_launcher(name: str) -> Launcher:
    try:
        return LAUNCHERS[name]
    except KeyError:
        import difflib

        hint = difflib.get_close_matches(name, NAMES, n=1)
        raise ConfigError(
            [
                Issue(
                    "--launcher",
                    None,
                    None,
                    "launcher",
                    "unknown launcher %r%s; expected one of: %s"
                    % (name, " (did you mean '%s'?)" % hint[0] if hint else "", ", ".join(NAMES)),
                )
            ]
        ) from None


@dataclass(frozen=True)
class Options:
    """The spec values that change launcher arguments (kept apart from the spec to stay pure)."""

    weights: Optional[str] = None
    seq: Optional[int] = None
    global_batch: Optional[int] = None
    checkpoint_dir: Optional[str] = None
    fsdp: bool = False  # the program shards parameters (ZeRO-3 / FSDP)
    zero: Optional[int] = None  # the plan's ZeRO stage (None: not planned)
    recompute: Optional[str] = None  # the plan's activation recomputation: none | selective | full
    requeue: bool = False
    checkpoint_signal: str = "TERM"
    save_interval: Optional[int] = None
    exit_duration_mins: Optional[int] = None  # walltime minus the checkpoint signal's lead


def program(launcher: Launcher, command: Sequence[str], args: Sequence[str], where: str = "command") -> Tuple[str, ...]:
    """The program argv (entry point + user arguments), before the layout arguments.

    A command that starts with an option extends the launcher's default entry point
    (`-- --data-path /d` for Megatron); any other command replaces it. torchrun-style
    launchers take a script or `-m module`, so a leading `python` is dropped.
    """
    cmd = list(command)
    if cmd and not cmd[0].startswith("-"):
        entry: List[str] = []
    else:
        entry = list(launcher.default_entry)
        if not entry:
            raise ConfigError([Issue(where, None, None, "command", _missing_program(launcher, bool(cmd)))])
    argv = entry + cmd + list(args)
    if launcher.runner in ("torchrun", "deepspeed", "accelerate") and argv and argv[0] in PYTHONS:
        argv = argv[1:]
    if launcher.runner == "deepspeed" and argv[:1] == ["-m"]:
        argv = ["--module"] + argv[1:]
    if not argv or argv[0] in ("-m", "--module") and len(argv) < 2:
        raise ConfigError([Issue(where, None, None, "command", _missing_program(launcher, True))])
    return tuple(argv)


def _missing_program(launcher: Launcher, only_options: bool) -> str:
    what = "options but no program" if only_options else "no program"
    return (
        "launcher %s got %s: put the program after `--` (slurmgpu gen --launcher %s -- train.py --lr 3e-4) "
        "or set `command:` in slurmgpu.yaml" % (launcher.name, what, launcher.name)
    )


def layout_args(launcher: Launcher, layout: Layout, opts: Options, user_argv: Sequence[str] = ()) -> Tuple[str, ...]:
    """Arguments that tell the framework the layout slurmgpu planned (and stamped)."""
    name = launcher.name
    given = {a.split("=", 1)[0] for a in user_argv}
    if name == "megatron":
        out = [
            "--tensor-model-parallel-size",
            str(layout.tp),
            "--pipeline-model-parallel-size",
            str(layout.pp),
            "--context-parallel-size",
            str(layout.cp),
            "--expert-model-parallel-size",
            str(layout.ep),
            "--micro-batch-size",
            str(layout.micro_batch),
        ]
        if opts.global_batch:
            out += ["--global-batch-size", str(opts.global_batch)]
        if opts.seq:
            out += ["--seq-length", str(opts.seq)]
        if layout.tp > 1:
            out.append("--sequence-parallel")
        if opts.fsdp:
            out.append("--use-torch-fsdp2")
        elif opts.zero != 0:
            out.append("--use-distributed-optimizer")
        if opts.recompute == "selective":
            out += ["--recompute-granularity", "selective"]
        elif opts.recompute == "full":
            out += ["--recompute-granularity", "full", "--recompute-method", "uniform", "--recompute-num-layers", "1"]
        if opts.checkpoint_dir:
            for flag in ("--save", "--load"):
                if flag not in given:
                    out += [flag, PathArg(opts.checkpoint_dir)]
        if opts.requeue:
            # Megatron saves and exits on --exit-signal (default SIGTERM); without --save-interval it
            # never saves on its own, so every requeue would restart from iteration 0.
            if "--exit-signal-handler" not in given:
                out.append("--exit-signal-handler")
            if opts.checkpoint_signal != "TERM" and "--exit-signal" not in given:
                out += ["--exit-signal", "SIG" + opts.checkpoint_signal]
            if opts.checkpoint_dir and "--save-interval" not in given:
                out += ["--save-interval", str(opts.save_interval or DEFAULT_SAVE_INTERVAL)]
            if opts.exit_duration_mins and "--exit-duration-in-mins" not in given:
                out += ["--exit-duration-in-mins", str(opts.exit_duration_mins)]
        elif opts.checkpoint_dir and opts.save_interval and "--save-interval" not in given:
            out += ["--save-interval", str(opts.save_interval)]
        return tuple(out)
    if name == "nemo":
        out = [
            "trainer.num_nodes=%d" % layout.nodes,
            "trainer.devices=%d" % layout.gpus_per_node,
            "model.tensor_model_parallel_size=%d" % layout.tp,
            "model.pipeline_model_parallel_size=%d" % layout.pp,
            "model.context_parallel_size=%d" % layout.cp,
            "model.expert_model_parallel_size=%d" % layout.ep,
            "model.micro_batch_size=%d" % layout.micro_batch,
            "model.sequence_parallel=%s" % ("true" if layout.tp > 1 else "false"),
        ]
        if opts.global_batch:
            out.append("model.global_batch_size=%d" % opts.global_batch)
        if opts.seq:
            out.append("model.encoder_seq_length=%d" % opts.seq)
        return tuple(out)
    if name == "torchtitan":
        out = [
            "--parallelism.tensor_parallel_degree",
            str(layout.tp),
            "--parallelism.pipeline_parallel_degree",
            str(layout.pp),
            "--parallelism.context_parallel_degree",
            str(layout.cp),
            "--parallelism.data_parallel_shard_degree",
            str(layout.dp),
            "--parallelism.data_parallel_replicate_degree",
            "1",
        ]
        if layout.ep > 1:
            out += ["--parallelism.expert_parallel_degree", str(layout.ep)]
        return tuple(out)
    multi = ("--nnodes", str(layout.nodes)) if layout.nodes > 1 else ()
    if name == "vllm":
        return ("--tensor-parallel-size", str(layout.tp), "--pipeline-parallel-size", str(layout.pp)) + multi
    if name == "sglang":
        return ("--tp", str(layout.tp), "--pp-size", str(layout.pp)) + multi
    return ()


def weights_args(launcher: Launcher, weights: Optional[str]) -> Tuple[str, ...]:
    """What the default entry point of a serving engine needs: `vllm serve W` / `--model-path W`."""
    if not launcher.needs_weights:
        return ()
    if not weights:
        raise ConfigError(
            [
                Issue(
                    "",
                    None,
                    None,
                    "weights",
                    "launcher %s serves a checkpoint: give it with --weights (a Hugging Face id or a "
                    "path, e.g. --weights meta-llama/Llama-3.1-70B-Instruct) or `weights:` in "
                    "slurmgpu.yaml" % launcher.name,
                )
            ]
        )
    return (weights,) if launcher.name == "vllm" else ("--model-path", weights)


def option_key(arg: str) -> Optional[str]:
    """The name an argument sets: '--flag' / '--flag=v' -> '--flag'; Hydra '+a.b=v' -> 'a.b'; else None."""
    if arg.startswith("-"):
        return arg.split("=", 1)[0]
    if "=" in arg:
        return arg.split("=", 1)[0].lstrip("+~")
    return None


def check_conflicts(
    launcher: Launcher, user_argv: Sequence[str], generated: Sequence[str], where: str = "command"
) -> None:
    """Refuse user arguments that would silently override what slurmgpu planned (and stamped)."""
    keys = set(launcher.runtime_keys)
    for g in generated:
        k = option_key(g)
        if k:
            keys.add(k)
            keys.update(_ALIASES.get(k, ()))
    bad = [a for a in user_argv if option_key(a) in keys]
    if bad:
        raise ConfigError(
            [
                Issue(
                    where,
                    None,
                    None,
                    "command",
                    (
                        "%s: slurmgpu sets %s itself; remove it from the program arguments and use the spec's "
                        "`parallel:` block, seq/global_batch, or the --tp/--pp/--cp/--ep/--micro-batch/--seq/"
                        "--global-batch flags, so the script's stamp matches what runs"
                        % (launcher.name, ", ".join(bad))
                    ),
                )
            ]
        )


def serving_layout_ok(launcher: Launcher, layout: Layout) -> Optional[str]:
    """A serving job is one engine over all its GPUs: no data-parallel replicas."""
    if launcher.serving and layout.dp * layout.cp != 1:
        return (
            "%s runs one server over all %d GPUs, so the layout must be tp x pp = %d (got tp=%d pp=%d dp=%d "
            "cp=%d); pin --dp 1 or use fewer nodes"
            % (launcher.name, layout.world, layout.world, layout.tp, layout.pp, layout.dp, layout.cp)
        )
    return None
