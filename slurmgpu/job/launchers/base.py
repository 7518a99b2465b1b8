"""What every launcher adapter shares: the launcher record, the options the plan and spec hand
it, the program argv, and the refusal of user arguments that would contradict the plan.

Pure data and small functions; the templates turn the argv into shell, nothing here quotes.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Callable, Dict, List, Optional, Sequence, Set, Tuple

from ...errors import ConfigError, Issue
from ...plan import Capabilities, Layout
from ...plan.profile import TERMS, MemoryProfile, StageBytes

if TYPE_CHECKING:
    from ...plan import ModelSpec

# How the program is started on each node:
#   torchrun    one srun task per node runs torchrun, which starts one worker per GPU
#   deepspeed   one task per node runs the deepspeed runner with --no_ssh
#   accelerate  one task per node runs `accelerate launch`
#   direct      one srun task per GPU runs the program itself (RANK etc. from Slurm)
#   server      one task per node runs a serving engine that spans the nodes
RUNNERS = ("torchrun", "deepspeed", "accelerate", "direct", "server")


def field_error(field: str, msg: str) -> ConfigError:
    """A problem with one merged spec field or flag value (no file or line to point at)."""
    return ConfigError([Issue("", None, None, field, msg)])


@dataclass(frozen=True)
class Launcher:
    """How one launcher (torchrun, megatron, vllm, ...) runs a program: its runner and entry point."""

    name: str
    runner: str
    summary: str
    default_entry: Tuple[str, ...] = ()  # () = the user must name the program
    entry_in: str = ""  # the container the default entry point exists in ("": anywhere the framework is)
    needs_weights: bool = False  # serving engines need the checkpoint to serve
    # spec fields the framework cannot start without (or --smoke); `init` scaffolds them
    needs_inputs: Tuple[str, ...] = ()
    serving: bool = False
    runtime_keys: Tuple[str, ...] = ()  # flags the template adds per node at run time
    # other spellings of flags the adapter writes: (flag, (alias, ...)), refused from the user too
    aliases: Tuple[Tuple[str, Tuple[str, ...]], ...] = ()
    targets: str = ""  # the framework version the adapter's flags are checked against (script header, docs)
    caps: Capabilities = Capabilities()  # what the planner may choose for this launcher
    # framework versions the adapter writes flags for, (name, what it targets); the first is the
    # default and `targets` says it. () = only `targets` (launcher_version is refused)
    versions: Tuple[Tuple[str, str], ...] = ()
    # runs the user's own program (torchrun, srun, accelerate, DeepSpeed): the planner assumes only data
    # parallelism (DDP, or FSDP/ZeRO where the launcher configures it or the spec says `fsdp: true`) and
    # the degrees the spec's `implements:` declares (program_caps)
    program: bool = False

    def version(self, wanted: Optional[str], where: str = "") -> Tuple[str, str]:
        """(version name, targets text) for the spec's launcher_version (None: the default)."""
        if not self.versions:
            if wanted is None:
                return "", self.targets
            msg = "launcher %s writes flags for one version only (%s): drop launcher_version %r" % (
                self.name,
                self.targets or "no version named",
                wanted,
            )
        else:
            if wanted is None:
                return self.versions[0]
            for v in self.versions:
                if v[0] == wanted:
                    return v
            msg = "launcher %s has no version %r: launcher_version (--launcher-version) takes %s (default %s)" % (
                self.name,
                wanted,
                " or ".join(v for v, _ in self.versions),
                self.versions[0][0],
            )
        raise ConfigError([Issue(where, None, None, "launcher_version", msg)])

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
    version: str = ""  # the framework version to write flags for (Launcher.versions; "" = the only one)
    gpu: str = ""  # the site's GPU model (node type gpu_model)
    gpu_fp8: Optional[bool] = None  # it has FP8 tensor cores (site.gpus GpuFacts.fp8); None: unknown GPU
    levers: Tuple[str, ...] = ()  # the plan's cheaper-memory flags to write (plan.profile.Lever keys)
    implements: Tuple[str, ...] = ()  # what the user's program declares it runs (spec `implements:`)


def train_iters(opts: Options) -> Optional[int]:
    """The training length the plan promises, in optimizer steps: --train-iters, or --tokens over
    the tokens one step takes (global batch x sequence), rounded up. None: neither was given."""
    if opts.train_iters:
        return opts.train_iters
    if not opts.tokens or not opts.global_batch or not opts.seq:
        return None
    return max(1, int(-(-float(opts.tokens) // (opts.global_batch * opts.seq))))


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
    if launcher.runner == "direct" and argv and argv[0].endswith(".py"):
        argv = ["python3"] + argv  # each task execs argv: a bare script.py is not on PATH (exit 127)
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
        raise field_error(
            "weights",
            "launcher %s serves a checkpoint: give it with --weights (a Hugging Face id or a "
            "path, e.g. --weights meta-llama/Llama-3.1-70B-Instruct) or `weights:` in "
            "slurmgpu.yaml" % launcher.name,
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


# How a serving engine sizes its expert-parallel group from the layout (the engine's own rule):
# vLLM's --enable-expert-parallel spreads the experts over TP x DP (vllm/config/parallel.py);
# SGLang asserts ep_size x moe_dp_size == tp_size (srt/arg_groups/parallel_hook.py, moe_dp_size 1).
SERVING_EP: Dict[str, Tuple[str, Callable[[Layout], int]]] = {
    "vllm": ("tp x dp", lambda lay: lay.tp * lay.dp),
    "sglang": ("tp", lambda lay: lay.tp),
}


def serving_layout_ok(launcher: Launcher, layout: Layout) -> Optional[str]:
    """Why a serving engine cannot run `layout` as one server (None: it can).

    DP replicas run inside the one server where the engine has them (caps.serving_dp: vLLM
    --data-parallel-size, SGLang --dp-size), across nodes only where caps.serving_dp_nodes; a
    replica that spans nodes must fill whole nodes (vLLM places DP ranks node by node).
    """
    if not launcher.serving:
        return None
    caps = launcher.caps
    if layout.cp != 1:
        return "%s has no context parallelism for serving: pin --cp 1 (got cp=%d)" % (launcher.name, layout.cp)
    if layout.dp > 1 and not caps.serving_dp:
        return (
            "%s runs one server over all %d GPUs, so the layout must be tp x pp = %d (got tp=%d pp=%d dp=%d); "
            "pin --dp 1 or use fewer nodes"
            % (launcher.name, layout.world, layout.world, layout.tp, layout.pp, layout.dp)
        )
    if layout.dp > 1 and layout.nodes > 1 and not caps.serving_dp_nodes:
        return (
            "%s runs data-parallel replicas only inside one node (got dp=%d on %d nodes): pin --dp 1 for one "
            "tp x pp server over the nodes, or use --nodes 1" % (launcher.name, layout.dp, layout.nodes)
        )
    replica, gpn = layout.tp * layout.pp, layout.gpus_per_node
    if layout.dp > 1 and layout.nodes > 1 and gpn % replica and replica % gpn:
        return (
            "%s places data-parallel replicas node by node: a replica of tp x pp = %d GPUs must divide or fill "
            "whole %d-GPU nodes" % (launcher.name, replica, gpn)
        )
    if layout.ep > 1:
        rule = SERVING_EP.get(launcher.name)
        if rule is None or not caps.ep:
            return "%s has no expert parallelism for serving: pin --ep 1" % launcher.name
        if layout.ep != rule[1](layout):
            return "%s spreads the experts over %s = %d GPUs: pin --ep %d (got ep=%d)" % (
                launcher.name,
                rule[0],
                rule[1](layout),
                rule[1](layout),
                layout.ep,
            )
    return None


DECLARE_HINT = (
    "add `implements: [%s]` to slurmgpu.yaml (or --implements %s) if your program runs it itself, "
    "or use --launcher megatron / torchtitan / nemo"
)


def program_caps(launcher: Launcher, implements: Sequence[str] = (), fsdp: bool = False) -> Capabilities:
    """What the planner may choose for `launcher`: its record's caps, or for a launcher that runs the
    user's own program, data parallelism plus what the program declares (`implements`), with the
    sharding it runs (torchrun/srun: DDP, or FSDP with `fsdp: true`; DeepSpeed, accelerate: their
    ZeRO/FSDP from the launcher's own flags)."""
    caps = launcher.caps
    if not launcher.program:
        return caps
    have = set(implements)
    zero = caps.zero
    if launcher.runner in ("torchrun", "direct"):
        zero = (3,) if fsdp else (0,)
    return replace(
        caps,
        tp="tp" in have,
        pp="pp" in have,
        cp="cp" in have,
        ep="ep" in have,
        virtual_stages=False,
        uneven_stages=False,
        zero=zero,
        zero3_with_pp=False,
        zero3_with_ep=False,
        declare=True,
    )


def torch_ddp(precision: str) -> StageBytes:
    """torch DDP on an fp32 model under autocast: fp32 weights and gradients, the reducer's buckets
    beside .grad (gradient_as_bucket_view False, the default), and autocast's 16-bit copies of the
    weights saved for backward (none at fp32)."""
    return StageBytes(
        0,
        weights=4.0,
        grads=4.0,
        master=0.0,
        buckets=4.0,
        copies=0.0 if precision == "fp32" else 2.0,
        about="torch DDP: fp32 weights and gradients, reducer buckets, autocast copies",
    )


# Bytes per logit a user's program holds at the loss (program_memory's docstring says which): torchrun,
# srun, accelerate and DeepSpeed start programs written this way, Megatron-style launchers do not.
PROGRAM_LOGITS_BYTES = 14.0


def program_memory(who: str, precision: str, implements: Sequence[str] = ()) -> MemoryProfile:
    """A program torchrun or srun only starts: what a PyTorch training script does by default.

    DDP (torch.nn.parallel.DistributedDataParallel, gradient_as_bucket_view False) keeps fp32
    weights and gradients and its reducer buckets (4 + 4 + 4 B/param), torch.optim.AdamW fp32
    moments (8), and torch.autocast's bf16 copies of the weights, saved for backward (2): 22 B/param.
    `fsdp: true` is FSDP2 fully_shard per block with MixedPrecisionPolicy(bf16): fp32 weights,
    gradients and moments sharded, two blocks gathered in bf16 at a time. Activations: no sequence
    parallelism, no recomputation unless `implements: [recompute]` (then full, per layer). At the
    loss such a program holds 14 B per logit, not Megatron's 4: the bf16 logits autocast returns,
    their fp32 upcast (`logits.float()`, as Hugging Face models do), the fp32 log-softmax that
    cross_entropy saves and the fp32 gradient flowing back (measured with bench/program_memory.py
    on an H200: the peak sat 8.9 GB above 4 B/logit for a 1B model at 8 x 4096 tokens of a 32k vocab).
    """
    half = 4.0 if precision == "fp32" else 2.0
    return MemoryProfile(
        framework="a PyTorch DDP/FSDP program under %s" % who,
        stages=(
            torch_ddp(precision),
            StageBytes(
                3,
                weights=4.0,
                grads=4.0,
                master=0.0,
                sharded=TERMS,
                gathered=2 * half,
                flag="fsdp: true",
                about="FSDP2 over DP x CP = {n}",
            ),
        ),
        sequence_parallel=False,
        recompute=("full",) if "recompute" in implements else ("none",),
        default_zero=0,
        logits_bytes=PROGRAM_LOGITS_BYTES,
    )


def check_precision(launcher: Launcher, opts: Options) -> None:
    """fp8 training needs FP8 tensor cores (site.gpus GpuFacts.fp8: Hopper, Ada, Blackwell, MI300):
    on an A100 or MI250X Transformer Engine stops at its first fp8 GEMM and torchao refuses to
    convert, so the plan's fp8 would never run. One rule for every training launcher; a serving
    engine is exempt (its fp8 weights run as W8A16 kernels on such GPUs)."""
    if opts.precision != "fp8" or opts.gpu_fp8 is not False or launcher.serving:
        return
    raise field_error(
        "precision",
        "launcher %s: precision fp8 needs FP8 tensor cores (NVIDIA H100/H200/B200/GB200/GB300, L40S, RTX 4090; "
        "AMD MI300), and %s has none, so the job would fail at its first fp8 matrix multiply; plan with "
        "--precision bf16 on this site" % (launcher.name, opts.gpu or "this site's GPU"),
    )


def check_caps(
    launcher: Launcher, layout: Layout, zero: Optional[int], implements: Sequence[str] = (), fsdp: bool = False
) -> None:
    """Refuse a layout the launcher's caps rule out (a pin, or a planner that ignored the caps):
    the framework would run something else than the plan, or fail at start-up."""
    caps = program_caps(launcher, implements, fsdp)
    bad = [
        "%s=%d" % (name, degree)
        for name, degree, ok in (
            ("tp", layout.tp, caps.tp),
            ("pp", layout.pp, caps.pp),
            ("cp", layout.cp, caps.cp),
            ("ep", layout.ep, caps.ep),
        )
        if degree > 1 and not ok
    ]
    if zero is not None and zero not in caps.zero:
        bad.append("ZeRO stage %d (it can run %s)" % (zero, ", ".join(str(z) for z in caps.zero)))
    if bad:
        degrees = [b.split("=")[0] for b in bad if "=" in b]
        hint = (
            "; " + DECLARE_HINT % (", ".join(degrees), ",".join(degrees))
            if degrees and launcher.program
            else ", or use --launcher megatron / torchtitan for model parallelism"
        )
        raise field_error(
            "parallel",
            "launcher %s cannot run %s (%s): pin --tp 1 --pp 1 --cp 1 --ep 1 so the plan is data "
            "parallel with ZeRO/FSDP sharding%s"
            % (launcher.name, ", ".join(bad), launcher.targets or "your program", hint),
        )
