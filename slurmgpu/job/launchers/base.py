"""What every launcher adapter shares: the launcher record, the options the plan and spec hand
it, the program argv, and the refusal of user arguments that would contradict the plan.

Pure data and small functions; the templates turn the argv into shell, nothing here quotes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, List, Optional, Sequence, Set, Tuple

from ...errors import ConfigError, Issue
from ...plan import Capabilities, Layout

if TYPE_CHECKING:
    from ...plan import ModelSpec

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
    # spec fields the framework cannot start without (or --smoke); `init` scaffolds them
    needs_inputs: Tuple[str, ...] = ()
    serving: bool = False
    runtime_keys: Tuple[str, ...] = ()  # flags the template adds per node at run time
    # other spellings of flags the adapter writes: (flag, (alias, ...)), refused from the user too
    aliases: Tuple[Tuple[str, Tuple[str, ...]], ...] = ()
    targets: str = ""  # the framework version the adapter's flags are checked against (script header, docs)
    caps: Capabilities = Capabilities()  # what the planner may choose for this launcher

    @property
    def per_node(self) -> bool:
        """One srun task per node (the launcher forks per-GPU workers itself)."""
        return self.runner != "direct"

    def tasks_per_node(self, gpus_per_node: int) -> int:
        return 1 if self.per_node else gpus_per_node


PYTHONS = ("python", "python3")
DEFAULT_SAVE_INTERVAL = 500  # Megatron iterations between periodic saves under --requeue


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
    model: Optional[ModelSpec] = None  # the planned model's shape (None: the user's own program)
    precision: str = "bf16"  # the plan's precision: bf16 | fp16 | fp8 | fp32
    virtual_stages: int = 1  # interleaved pipeline chunks per GPU
    stage_layers: Tuple[int, ...] = ()  # layers per pipeline stage, first to last (uneven stages)
    data: Optional[str] = None
    tokenizer: Optional[str] = None
    train_iters: Optional[int] = None
    tokens: Optional[float] = None  # training tokens (--tokens): train_iters derives from it
    lr: Optional[str] = None
    smoke: bool = False  # a short run on the framework's mock data


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


def given_keys(user_argv: Sequence[str]) -> Set[str]:
    """The flags the user passed (`--flag` and `--flag=v` alike): adapters leave those alone."""
    return {a.split("=", 1)[0] for a in user_argv}


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
    aliases = dict(launcher.aliases)
    for g in generated:
        k = option_key(g)
        if k:
            keys.add(k)
            keys.update(aliases.get(k, ()))
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
