"""The job spec's fields, in one table: the slurmgpu.yaml key, its type and default, the check its
value gets, whether a `sites.<name>:` block may set it, and the CLI flag that overrides it.

`job.spec` builds its YAML checker, `apply_overrides` and the per-site field list from this
table, and `cli` builds the flags gen, submit, diff and plan share from it, so a new field is one
row. It is data only and imports nothing but `vocab`: the CLI reads it without loading the job
layer, which keeps `slurmgpu --help` fast on a login node.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional, Tuple, Union

from .vocab import KV_TRANSFERS, LAUNCHERS, PRECISIONS, PROGRAM_DEGREES, RUNTIMES, SERVE_MODES, TASK_ALIASES, TASKS

Default = Union[None, str, int, bool, Callable[[], object]]


@dataclass(frozen=True)
class SpecField:
    """One field of the job spec (or of its `container:` block)."""

    key: str  # the JobSpec attribute and the slurmgpu.yaml key
    kind: str  # the schema.Field kind: str, int, bool, any, map, strlist, strmap
    default: Default = None
    choices: Tuple[str, ...] = ()
    aliases: Tuple[Tuple[str, str], ...] = ()  # other words accepted for a choice: (alias, canonical name)
    positive: bool = False
    check: Optional[str] = None  # the value check in job.spec.CHECKS, for YAML and flag values alike
    per_site: bool = False  # a `sites.<name>:` block may set it
    flag: Optional[str] = None  # the CLI flag that overrides it (None: slurmgpu.yaml only)
    param: Optional[str] = None  # the click parameter name, where it is not the key
    metavar: Optional[str] = None
    help: str = ""
    # how the flag is spelled and merged: "value" (replaces), "int", "choice", "switch"
    # (--x/--no-x), "append" (repeatable, added after the spec's), "special" (job.spec's own code)
    cli: str = "value"

    @property
    def dest(self) -> str:
        return self.param or self.key


_PATH_VARS_HELP = "$USER, $HOME, $SCRATCH, $SLURM_JOB_ID expand on the node"

FIELDS: Tuple[SpecField, ...] = (
    SpecField("name", "str", check="one_line", flag="--job-name", param="name", metavar="NAME", help="Slurm job name."),
    SpecField(
        "model",
        "str",
        check="one_line",
        flag="--model",
        help="Catalogue model (llama3-70b), a size (13B) or a model YAML file.",
    ),
    SpecField(
        "task",
        "str",
        default="pretrain",
        choices=TASKS,
        aliases=TASK_ALIASES,
        check="task",
        flag="--task",
        cli="choice",
        help="What the planner sizes for (default pretrain; finetune is full fine-tuning; serve and sft are read "
        "as inference and finetune).",
    ),
    SpecField(
        "launcher",
        "str",
        default="torchrun",
        choices=LAUNCHERS,
        flag="--launcher",
        cli="choice",
        help="How the program is started.",
    ),
    SpecField("command", "any", cli="special"),  # the program after `--`
    SpecField("args", "strlist", default=tuple),
    SpecField(
        "weights",
        "str",
        check="one_line",
        per_site=True,
        flag="--weights",
        metavar="ID|PATH",
        help="Checkpoint a serving engine (vllm, sglang) loads.",
    ),
    SpecField("container", "map", per_site=True),  # its own fields: CONTAINER_FIELDS
    SpecField(
        "launcher_version",
        "str",
        check="one_line",
        per_site=True,
        flag="--launcher-version",
        metavar="VERSION",
        help="Framework version to write the launcher's flags for, where it supports more than one "
        "(torchtitan: 0.3.0 (default) or main); the script header names it.",
    ),
    SpecField("time", "any", check="time", per_site=True, flag="--time", metavar="D-HH:MM:SS", help="Time limit."),
    SpecField(
        "nodes",
        "any",
        per_site=True,
        flag="--nodes",
        metavar="N|plan",
        cli="special",
        help="Node count, or 'plan' to let the planner choose.",
    ),
    SpecField(
        "gpus",
        "int",
        positive=True,
        check="positive",
        per_site=True,
        flag="--gpus",
        cli="int",
        help="Total GPUs (instead of --nodes).",
    ),
    SpecField(
        "partition",
        "str",
        check="one_line",
        per_site=True,
        flag="--partition",
        help="Slurm partition (default: the site's).",
    ),
    SpecField("account", "str", check="one_line", per_site=True, flag="--account", help="Slurm account."),
    SpecField("qos", "str", check="one_line", per_site=True, flag="--qos", help="Slurm QOS."),
    SpecField(
        "constraint",
        "str",
        check="one_line",
        per_site=True,
        flag="--constraint",
        help="Slurm --constraint (default: the partition's).",
    ),
    SpecField("parallel", "map", per_site=True),  # its flags: PARALLEL_FLAGS
    SpecField("seq", "int", positive=True, check="positive", flag="--seq", cli="int", help="Sequence length."),
    SpecField(
        "global_batch",
        "int",
        positive=True,
        check="positive",
        flag="--global-batch",
        cli="int",
        help="Global batch size (sequences).",
    ),
    SpecField("tokens", "any", flag="--tokens", cli="special", help="Training tokens, e.g. 2T."),
    SpecField(
        "serve",
        "str",
        default="aggregated",
        choices=SERVE_MODES,
        flag="--serve",
        cli="choice",
        help="Serving deployment (vllm, sglang): one server over the nodes (aggregated, default), "
        "independent replicas behind the engine's router (router), or prefill and decode workers "
        "with the KV cache moved between them (disaggregated).",
    ),
    SpecField(
        "input_len",
        "int",
        positive=True,
        check="positive",
        flag="--input-len",
        metavar="TOKENS",
        cli="int",
        help="Serving: prompt tokens per request the plan sizes for (default 1024).",
    ),
    SpecField(
        "output_len",
        "int",
        positive=True,
        check="positive",
        flag="--output-len",
        metavar="TOKENS",
        cli="int",
        help="Serving: generated tokens per request (default 1024).",
    ),
    SpecField(
        "concurrency",
        "int",
        positive=True,
        check="positive",
        flag="--concurrency",
        metavar="N",
        cli="int",
        help="Serving: requests in flight the deployment holds (default: from --rate, else 128).",
    ),
    SpecField(
        "rate",
        "any",
        check="number",
        flag="--rate",
        metavar="REQ/S",
        help="Serving: request rate to size for, requests per second (instead of --concurrency).",
    ),
    SpecField(
        "kv_transfer",
        "str",
        choices=KV_TRANSFERS,
        per_site=True,
        flag="--kv-transfer",
        cli="choice",
        help="Disaggregated serving: the KV-cache transfer library (default nixl; mooncake: SGLang only).",
    ),
    SpecField(
        "ready_timeout",
        "int",
        default=1800,
        positive=True,
        check="positive",
        per_site=True,
        flag="--ready-timeout",
        metavar="SECONDS",
        cli="int",
        help="Serving: how long each worker may take to answer its health check before the job fails "
        "with its log tail (default 1800).",
    ),
    SpecField(
        "precision",
        "str",
        default="bf16",
        choices=PRECISIONS,
        flag="--precision",
        cli="choice",
        help="Number format (default bf16).",
    ),
    SpecField(
        "fsdp",
        "bool",
        default=False,
        flag="--fsdp",
        cli="switch",
        help="The program shards with FSDP (torchrun/srun: planned as FSDP2 instead of DDP; "
        "changes CUDA_DEVICE_MAX_CONNECTIONS).",
    ),
    SpecField(
        "implements",
        "strlist",
        default=tuple,
        choices=PROGRAM_DEGREES,
        check="implements",
        flag="--implements",
        metavar="LIST",
        cli="special",
        help="What your own program (torchrun, srun, accelerate, deepspeed) runs beyond data parallelism, "
        "comma-separated: %s; the planner uses only these (default: none, DDP/FSDP only)." % ",".join(PROGRAM_DEGREES),
    ),
    SpecField(
        "data",
        "str",
        check="one_line",
        per_site=True,
        flag="--data",
        metavar="PATH",
        help="Training data the framework reads (Megatron --data-path prefix, torchtitan dataset path); %s."
        % _PATH_VARS_HELP,
    ),
    SpecField(
        "tokenizer",
        "str",
        check="one_line",
        per_site=True,
        flag="--tokenizer",
        metavar="ID|PATH",
        help="Tokenizer: a Hugging Face id or a local path.",
    ),
    SpecField(
        "train_iters",
        "int",
        positive=True,
        check="positive",
        flag="--train-iters",
        metavar="STEPS",
        cli="int",
        help="Training steps (default: from --tokens and the global batch, where the launcher needs it).",
    ),
    SpecField("lr", "any", check="number", flag="--lr", metavar="RATE", help="Peak learning rate, e.g. 3e-4."),
    SpecField(
        "smoke",
        "bool",
        default=False,
        flag="--smoke",
        cli="switch",
        help="A short run on the framework's own mock/synthetic data, to prove the allocation before real data.",
    ),
    SpecField(
        "sbatch",
        "strlist",
        default=tuple,
        per_site=True,
        flag="--sbatch",
        metavar="--OPT=VALUE",
        cli="special",
        help="Extra #SBATCH option (repeatable), e.g. --sbatch=--mail-type=END.",
    ),
    SpecField(
        "env",
        "strmap",
        default=dict,
        per_site=True,
        flag="--env",
        metavar="NAME=VALUE",
        cli="special",
        help="Export in the job (repeatable).",
    ),
    SpecField(
        "checkpoint_dir",
        "str",
        check="one_line",
        per_site=True,
        flag="--checkpoint-dir",
        metavar="DIR",
        help="Checkpoint directory (exported, created); %s." % _PATH_VARS_HELP,
    ),
    SpecField(
        "preflight",
        "bool",
        default=True,
        flag="--preflight",
        cli="switch",
        help="Run `slurmgpu preflight` on every node before the launch (default: on).",
    ),
    SpecField(
        "nccl_diag",
        "bool",
        default=False,
        flag="--nccl-diag",
        cli="switch",
        help="Run NCCL's own diagnostics when the job's communicators start (NCCL 2.31+: "
        "NCCL_RUN_DIAGNOSTICS=1, NCCL_RUN_RAS_DIAGNOSTICS=1); `slurmgpu doctor` reads their NCCL DIAG lines.",
    ),
    SpecField(
        "requeue",
        "bool",
        default=False,
        flag="--requeue",
        cli="switch",
        help="Checkpoint and requeue before the time limit.",
    ),
    SpecField(
        "grace",
        "int",
        positive=True,
        check="grace",
        flag="--grace",
        metavar="SECONDS",
        cli="int",
        help="With --requeue: how long before the limit the program is asked to save (default: twice the "
        "checkpoint's write time at the site's requeue.checkpoint_gbps + KillWait + 60 s; 300 s without a model).",
    ),
    SpecField(
        "checkpoint_signal",
        "str",
        default="TERM",
        check="signal",
        flag="--checkpoint-signal",
        metavar="SIG",
        cli="special",
        help="Signal that asks the program to save (default TERM; not USR1).",
    ),
    SpecField(
        "max_requeues",
        "int",
        default=3,
        check="nonnegative",
        flag="--max-requeues",
        metavar="N",
        cli="int",
        help="With --requeue: requeue at most N times after a checkpoint (SLURM_RESTART_COUNT; default 3).",
    ),
    SpecField(
        "save_interval",
        "int",
        positive=True,
        check="positive",
        flag="--save-interval",
        metavar="STEPS",
        cli="int",
        help="Steps between periodic checkpoints (Megatron --save-interval; default 500 with --requeue).",
    ),
    SpecField(
        "dependency",
        "str",
        check="dependency",
        flag="--dependency",
        metavar="TYPE:JOBID",
        help="Slurm dependency, e.g. afterok:1234.",
    ),
    SpecField(
        "output",
        "str",
        check="one_line",
        flag="--stdout",
        param="log_output",
        metavar="PATH",
        help="The job's output file (default %x-%j.out).",
    ),
    SpecField(
        "error",
        "str",
        check="one_line",
        flag="--stderr",
        param="log_error",
        metavar="PATH",
        help="The job's error file (default: with stdout).",
    ),
    SpecField(
        "mem",
        "any",
        check="mem",
        per_site=True,
        flag="--mem",
        help="Memory per node (default: all of it on whole nodes).",
    ),
    SpecField(
        "cpus_per_task",
        "int",
        positive=True,
        check="positive",
        per_site=True,
        flag="--cpus-per-task",
        cli="int",
        help="CPUs per task (default: the node's CPUs / tasks).",
    ),
    SpecField(
        "segment",
        "int",
        positive=True,
        check="positive",
        per_site=True,
        flag="--segment",
        cli="int",
        help="Slurm --segment on topology/block sites (default: computed).",
    ),
    SpecField(
        "template",
        "str",
        default="job.sh.j2",
        check="template",
        flag="--template",
        metavar="NAME",
        help="Top-level template (default job.sh.j2).",
    ),
    SpecField("sites", "map"),  # per-site blocks: the fields above with per_site=True
)

CONTAINER_FIELDS: Tuple[SpecField, ...] = (
    SpecField(
        "runtime",
        "str",
        choices=RUNTIMES,
        flag="--container",
        param="container",
        cli="choice",
        help="Container runtime (default: the site's).",
    ),
    SpecField(
        "image",
        "str",
        check="one_line",
        flag="--image",
        cli="special",
        help="Container image (registry image or file; written in the site runtime's spelling).",
    ),
    SpecField(
        "mounts",
        "strlist",
        default=tuple,
        flag="--mount",
        param="mounts",
        metavar="SRC:DST",
        cli="special",
        help="Container mount (repeatable); %s." % _PATH_VARS_HELP,
    ),
    SpecField("mount_workdir", "bool", default=True),
)

# `parallel:` keys (vocab.PARALLEL_KEYS, in that order) and their pin flags (--tp, --micro-batch, ...)
PARALLEL_HELP = {
    "tp": "Pin tensor parallelism.",
    "pp": "Pin pipeline parallelism.",
    "dp": "Pin data parallelism.",
    "cp": "Pin context parallelism.",
    "ep": "Pin expert parallelism.",
    "micro_batch": "Pin the micro-batch size.",
}


def by_key(key: str) -> SpecField:
    for f in FIELDS:
        if f.key == key:
            return f
    raise KeyError(key)
