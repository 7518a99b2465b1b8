"""torchtitan (`-m torchtitan.train` under torchrun): the planned model as a `--module/--config`
pair, and the layout, precision, sharding, recomputation, batch and checkpointing as its
`--section.option` overrides.

Two versions, chosen by the spec's `launcher_version` (Options.version):
- 0.3.0, the PyPI release (default: what a user can pip install), the first after the TOML->Python
  config refactor (#2386): `--module/--config` required, `--job.config_file` gone; the batch in
  sequences (local/global batch, seq_len), the dataset a CLI option.
- main at b5bcd76c (2026-08-21): the batch in tokens (num_tokens_per_microbatch_per_dp_rank,
  num_tokens_per_train_step, max_context_length, parallelism.num_pp_microbatches) and the dataset
  only in config functions (GrainDataLoader.Config.dataset is tyro.conf.Suppress).
Checked against tests/data/contract/torchtitan-0.3.0.json and torchtitan-main.json, recorded from
each version's own ConfigManager by contrib/contract/record_torchtitan.py.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Dict, List, Optional, Sequence, Tuple

from ...errors import ConfigError
from ...plan import Capabilities, Layout, node_shard
from ...plan.profile import TERMS, MemoryProfile, StageBytes
from ...render import PathArg
from .base import DEFAULT_SAVE_INTERVAL, PROGRAM_LOGITS_BYTES, Launcher, Options, field_error, given_keys, train_iters

if TYPE_CHECKING:
    from ...plan import ModelSpec

VERSION = "0.3.0"  # the default: the PyPI release
MAIN = "main"
MAIN_COMMIT = "b5bcd76c66d0acb1a08b176d9639425bc55e0b2a"  # torchtitan main as recorded (2026-08-21)
VERSIONS = (
    (VERSION, "torchtitan %s (PyPI; --module/--config configs)" % VERSION),
    (MAIN, "torchtitan main at %s (2026-08-21; batch in tokens)" % MAIN_COMMIT[:8]),
)

# slurmgpu model -> torchtitan (module, config function) of 0.3.0; shapes checked by the contract test
CONFIGS: Dict[str, Tuple[str, str]] = {
    "llama3.1-8b": ("llama3", "llama3_8b"),
    "llama3.1-70b": ("llama3", "llama3_70b"),
    "llama3.1-405b": ("llama3", "llama3_405b"),
    "deepseek-v3": ("deepseek_v3", "deepseek_v3_671b"),
}
# configs whose model carries a float8 converter (SM89+ / gfx942+; 0.3.0 and main alike): every
# Linear but the output head becomes Float8Linear, so they train in fp8 whatever the flags say, and
# no command-line option removes the converter. Plans for them must say fp8 (model_config).
FLOAT8_CONFIGS = ("llama3_405b",)
# torchtitan's own small model with its test tokenizer and c4_test (paths relative to its checkout)
SMOKE_ASSETS = "./tests/assets/tokenizer"
SMOKE_DATASET = "c4_test"
SMOKE_STEPS = 10
DATASETS = ("c4", "c4_test", "c4_validation")  # torchtitan/hf_datasets/text_datasets.py DATASETS
_PRECISION = {"bf16": "bfloat16", "fp32": "float32"}
_AC = {"selective": "activation-checkpoint:selective", "full": "activation-checkpoint:full"}
_AC["none"] = "activation-checkpoint:none"

# every option the adapter writes (either version), in torchtitan's documented underscore spelling;
# tyro also takes the dashed one, so that spelling is refused from the user too (check_conflicts)
FLAGS = (
    "--module",
    "--config",
    "--hf_assets_path",
    "--dataloader.dataset",
    "--dataloader.dataset_path",
    "--training.steps",
    "--training.seq_len",
    "--training.local_batch_size",
    "--training.global_batch_size",
    "--training.max_context_length",
    "--training.num_tokens_per_microbatch_per_dp_rank",
    "--training.num_tokens_per_train_step",
    "--parallelism.num_pp_microbatches",
    "--training.mixed_precision_param",
    "--training.disable_cuda_graphs",
    "--optimizer.param_groups.0.optimizer_kwargs.lr",
    "--lr_scheduler.warmup_steps",
    "--parallelism.data_parallel_shard_degree",
    "--parallelism.data_parallel_replicate_degree",
    "--parallelism.fsdp_reshard_after_forward",
    "--parallelism.tensor_parallel_degree",
    "--parallelism.pipeline_parallel_degree",
    "--parallelism.pipeline_parallel_schedule",
    "--parallelism.module_fqns_per_model_part",
    "--parallelism.pipeline_parallel_microbatch_size",
    "--parallelism.context_parallel_degree",
    "--parallelism.expert_parallel_degree",
    "--checkpoint.enable",
    "--checkpoint.folder",
    "--checkpoint.interval",
    "--checkpoint.load_step",
)

LAUNCHER = Launcher(
    "torchtitan",
    "torchrun",
    "torchtitan via torchrun, one task per node",
    default_entry=("-m", "torchtitan.train"),
    aliases=tuple((f, (f.replace("_", "-"),)) for f in FLAGS if "_" in f),
    targets=VERSIONS[0][1],
    # FSDP2 always shards (no plain ZeRO-0 DDP with TP/PP); no expert-TP option in 0.3.0 nor main;
    # attention through PyTorch SDPA (FlashAttention-2 kernels), which the cost model times apart
    # EP comes out of dp_shard x CP x TP only (ParallelDims), so ZeRO-1/2's node-local shard bounds it
    caps=Capabilities(zero=(1, 2, 3), attention="sdpa", ep_within_shard=True),
    versions=VERSIONS,
)


def memory(precision: str, model: Optional[ModelSpec] = None) -> MemoryProfile:
    """What torchtitan (0.3.0 and main alike) keeps per GPU with the flags `args` writes.

    training.dtype float32 (the default): parameters, gradients (mixed_precision_reduce float32) and
    Adam moments are fp32 and FSDP2-sharded over DP-shard x CP, with no separate master copy
    (4 + 4 + 8 B/param). FSDP2's MixedPrecisionPolicy gathers the compute copies in
    mixed_precision_param (bf16: 2 B/param). ZeRO-3 (the default "default" reshard policy) reshards
    after forward: two blocks gathered at a time, and the final norm/output layer stays gathered;
    with PP the default policy does not reshard, so the whole stage stays gathered from forward to
    backward. ZeRO-1/2 are HSDP inside a node with reshard_after_forward never: the stage stays gathered.
    """
    half = 4.0 if precision == "fp32" else 2.0
    hsdp = StageBytes(
        1,
        weights=4.0,
        grads=4.0,
        master=0.0,
        sharded=TERMS,
        group="node",
        copies=half,
        about="HSDP: fp32 weights, gradients and Adam moments sharded inside a node, gathered from forward to backward",
    )
    full = StageBytes(
        3,
        weights=4.0,
        grads=4.0,
        master=0.0,
        sharded=TERMS,
        gathered=2 * half,
        head_copy=half,
        copies_pp=half,
        about="FSDP2: fp32 weights, gradients and Adam moments sharded over DP x CP = {n}",
    )
    return MemoryProfile(
        framework="torchtitan (FSDP2, fp32 parameters)",
        stages=(hsdp, replace(hsdp, zero=2), full),
        default_zero=3,
        experts_keep_tp=False,  # models/common/moe_sharding.py: with EP the experts shard over EP, not TP
        # components/loss.py cross_entropy_loss upcasts the bf16 logits (.float()) before torch's
        # cross_entropy, as a user's program does (base.PROGRAM_LOGITS_BYTES)
        logits_bytes=PROGRAM_LOGITS_BYTES,
    )


def _error(field: str, msg: str) -> ConfigError:
    return field_error(field, "torchtitan: " + msg)


def model_config(opts: Options, user_argv: Sequence[str]) -> Tuple[str, ...]:
    """`--module M --config F`: the config function that builds the planned model."""
    given = given_keys(user_argv)
    if "--module" in given or "--config" in given:
        if not ("--module" in given and "--config" in given):
            raise _error("command", "give both --module and --config (e.g. --module llama3 --config llama3_8b)")
        return ()
    name = opts.model.name if opts.model else None
    if name is None:
        raise _error(
            "model",
            "no model to build: give --model (%s) or your own config function after `--` "
            "(-- --module my_pkg.configs --config my_run)" % ", ".join(sorted(CONFIGS)),
        )
    if name not in CONFIGS:
        raise _error(
            "model",
            "torchtitan %s has no config for model %r; it ships %s. Pick one of those with --model, or "
            "give your own config function after `--` (-- --module my_pkg.configs --config my_run)"
            % (opts.version or VERSION, name, ", ".join(sorted(CONFIGS))),
        )
    module, config = CONFIGS[name]
    if config in FLOAT8_CONFIGS and opts.gpu_fp8 is False:
        raise _error(
            "model",
            "torchtitan's %s config builds a float8 converter when it loads, which needs NVIDIA SM89+ or AMD "
            "MI300+ (torchtitan: 'float8 is only supported on NVIDIA SM89 or later, or AMD gfx942'); %s has no "
            "FP8 tensor cores, so every rank would fail at start. Use a site with H100/H200/B200/GB200/MI300, "
            "or give a config function without float8 after `--` (-- --module my_pkg.configs --config my_405b)"
            % (config, opts.gpu or "this site's GPU"),
        )
    if config in FLOAT8_CONFIGS and opts.precision != "fp8":
        raise _error(
            "precision",
            "torchtitan's %s config trains in float8: its model converts every Linear but the output head to "
            "Float8Linear, and no command-line option turns that off, so a %s plan would promise another job. "
            "Plan it as it runs with --precision fp8, or give a config function without float8 after `--` "
            "(-- --module my_pkg.configs --config my_405b)" % (config, opts.precision),
        )
    if opts.precision == "fp8" and config not in FLOAT8_CONFIGS:
        raise _error(
            "precision",
            "precision fp8: torchtitan %s's %s config has no float8 converter and the command line cannot add one; "
            "plan with --precision bf16, or give a config function with one after `--` (-- --module my_pkg.configs "
            "--config my_fp8_run); %s trains in float8 as shipped"
            % (opts.version or VERSION, config, ", ".join(FLOAT8_CONFIGS)),
        )
    return ("--module", module, "--config", config)


def _dp_split(layout: Layout, opts: Options) -> Tuple[int, int, Optional[str]]:
    """(shard, replicate, reshard_after_forward) from the planned ZeRO stage.

    ZeRO-3 is FSDP over all DP ranks; ZeRO-1/2 become HSDP, sharded inside one node (the
    parameters stay unsharded between forward and backward, as ZeRO-2 keeps them)."""
    dp = layout.dp
    if opts.fsdp or opts.zero in (None, 3) or dp == 1:
        return dp, 1, None
    shard = node_shard(dp, layout.cp, layout.tp, layout.gpus_per_node)
    return shard, dp // shard, "never"


def _pipeline(layout: Layout, opts: Options) -> List[str]:
    """The plan's split, module by module: torchtitan's own split (first/last_stage_less_layers, or
    layers_per_stage) cannot say every plan (DeepSeek-V3's 61 layers on 32 stages ran 1,2x30,0: an
    empty last stage; Llama 3.1 70B with 8 chunks per rank got its default 2), so the chunks are
    listed with --parallelism.module_fqns_per_model_part, which torchtitan takes as the split."""
    out = ["--parallelism.pipeline_parallel_degree", str(layout.pp)]  # said even when 1 (see args)
    if layout.pp == 1:
        return out
    vp = max(1, opts.virtual_stages)
    out += ["--parallelism.pipeline_parallel_schedule", "Interleaved1F1B" if vp > 1 else "1F1B"]
    counts = list(opts.stage_layers)
    if not counts and opts.model is not None and opts.model.layers % layout.pp == 0:
        counts = [opts.model.layers // layout.pp] * layout.pp
    if counts:
        out += ["--parallelism.module_fqns_per_model_part"] + module_chunks(counts, vp)
    if opts.version != MAIN:  # main sizes microbatches in tokens (_batch_tokens)
        out += ["--parallelism.pipeline_parallel_microbatch_size", str(layout.micro_batch)]
    return out


def module_chunks(counts: Sequence[int], vp: int) -> List[str]:
    """One word per model chunk, stage s = v*pp + r (rank r's v-th chunk, torchtitan's loop order),
    its module names comma-separated: the embedding first, layers in order, norm and head last."""
    pp = len(counts)
    chunks: List[List[str]] = []
    for v in range(vp):
        for r in range(pp):
            n = counts[r] // vp + (1 if v < counts[r] % vp else 0)
            chunks.append([""] * n)
    layer = 0
    for chunk in chunks:
        for i in range(len(chunk)):
            chunk[i] = "layers.%d" % layer
            layer += 1
    chunks[0].insert(0, "tok_embeddings")
    chunks[-1] += ["norm", "lm_head"]
    return [",".join(c) for c in chunks]


def _batch(layout: Layout, opts: Options) -> List[str]:
    """Per-DP-rank (local) and global batch in sequences: with PP one step runs all microbatches;
    without, torchtitan accumulates gradients up to the global batch."""
    dp = layout.dp
    g = opts.global_batch
    if layout.pp > 1 and g and g % dp == 0 and (g // dp) % layout.micro_batch == 0:
        return ["--training.local_batch_size", str(g // dp), "--training.global_batch_size", str(g)]
    out = ["--training.local_batch_size", str(layout.micro_batch)]
    if g and g % (layout.micro_batch * dp) == 0:
        out += ["--training.global_batch_size", str(g)]
    return out


def _batch_tokens(layout: Layout, opts: Options) -> List[str]:
    """main: the same batch in tokens. One forward per DP rank takes micro_batch sequences; with
    PP one step runs g/(dp*micro_batch) pipeline microbatches, without PP torchtitan accumulates
    gradients up to num_tokens_per_train_step (Trainer.__init__ divides it)."""
    seq = opts.seq
    if not seq:
        raise _error("seq", "torchtitan main counts the batch in tokens: give the sequence length with --seq")
    dp, mb, g = layout.dp, layout.micro_batch, opts.global_batch or 0
    out = ["--training.max_context_length", str(seq)]
    out += ["--training.num_tokens_per_microbatch_per_dp_rank", str(mb * seq)]
    whole = g > 0 and g % (dp * mb) == 0  # else one forward per DP rank per step (torchtitan's default)
    if whole:
        out += ["--training.num_tokens_per_train_step", str(g * seq)]
    if layout.pp > 1:
        out += ["--parallelism.num_pp_microbatches", str(g // (dp * mb) if whole else 1)]
    return out


def _data_main(opts: Options) -> None:
    """main takes the dataset only from the config function: refuse a `data` it cannot be told."""
    if opts.data and opts.data != "c4":
        raise _error(
            "data",
            "torchtitan main selects the dataset in the config function (GrainDataLoader.Config.dataset is "
            "not a command-line option), so data %r cannot be passed: the shipped configs stream c4 (data: c4); "
            "for your own data write a config function and give it with -- --module PKG --config FN (and drop "
            "`data`), or use --launcher-version %s (--dataloader.dataset_path)" % (opts.data, VERSION),
        )


def assets_path(tokenizer: str) -> str:
    """torchtitan reads the tokenizer from a folder (--hf_assets_path: tokenizer.json, config.json)
    and never downloads it, so a Hugging Face id would fail at start (FileNotFoundError). A path
    is absolute, ./relative, ~ or a $VARIABLE; anything else is taken for a Hub id and refused."""
    if tokenizer.startswith(("/", "./", "../", "~", "$")) or tokenizer in (".", ".."):
        return tokenizer
    raise _error(
        "tokenizer",
        "--tokenizer %r looks like a Hugging Face id, but torchtitan reads the tokenizer from a local folder "
        "(--hf_assets_path) and never downloads it, and compute nodes often cannot reach the Hub. Download it "
        "once where the Hub is reachable, e.g. in torchtitan's checkout: python scripts/download_hf_assets.py "
        "--repo_id %s --assets tokenizer --local_dir /shared/hf (a gated model also needs --hf_token), then "
        "give the folder: --tokenizer /shared/hf/%s" % (tokenizer, tokenizer, tokenizer.rstrip("/").split("/")[-1]),
    )


def args(layout: Layout, opts: Options, user_argv: Sequence[str] = ()) -> Tuple[str, ...]:
    given = given_keys(user_argv)
    out: List[str] = list(model_config(opts, user_argv))

    def add(flag: str, *values: str) -> None:
        if flag not in given and flag.replace("_", "-") not in given:
            out.extend((flag,) + values)

    main = opts.version == MAIN
    if main:
        _data_main(opts)
    # inputs: tokenizer (HF assets folder) and data, or torchtitan's own test assets for --smoke
    # (main: the config's own dataset, c4 streamed from the Hugging Face Hub; c4_test is not selectable)
    if opts.smoke:
        add("--hf_assets_path", assets_path(opts.tokenizer) if opts.tokenizer else SMOKE_ASSETS)
        if not main:
            add("--dataloader.dataset", SMOKE_DATASET)
        add("--training.steps", str(opts.train_iters or SMOKE_STEPS))
        add("--lr_scheduler.warmup_steps", "1")
    else:
        if opts.tokenizer:
            add("--hf_assets_path", PathArg(assets_path(opts.tokenizer)))
        elif "--hf_assets_path" not in given and "--hf-assets-path" not in given:
            raise _error(
                "tokenizer",
                "no tokenizer: give the Hugging Face assets folder (tokenizer.json, config.json) with "
                "--tokenizer DIR (e.g. one downloaded by torchtitan's scripts/download_hf_assets.py) or "
                "`tokenizer:` in slurmgpu.yaml; or use --smoke for torchtitan's test tokenizer and c4_test",
            )
        if main:
            pass  # the dataset is the config function's (checked by _data_main)
        elif opts.data in DATASETS:
            add("--dataloader.dataset", opts.data)
        elif opts.data:
            add("--dataloader.dataset", "c4")  # the c4 loader reads a local copy in c4's json layout
            add("--dataloader.dataset_path", PathArg(opts.data))
        steps = train_iters(opts)
        if steps:
            add("--training.steps", str(steps))
        elif "--training.steps" not in given and "--training-steps" not in given:
            raise _error(
                "train_iters",
                "no training length: give --train-iters STEPS or --tokens 2T (steps from the global batch and "
                "sequence), or `train_iters:` / `tokens:` in slurmgpu.yaml; otherwise torchtitan trains its config "
                "function's own length (1,000 to 10,000 steps)",
            )
    if opts.lr:
        add("--optimizer.param_groups.0.optimizer_kwargs.lr", opts.lr)
    if main:
        out += _batch_tokens(layout, opts)
    else:
        if opts.seq:
            add("--training.seq_len", str(opts.seq))
        out += _batch(layout, opts)

    if opts.precision == "fp8":  # a float8 config (model_config checked): bf16 parameters, fp8 GEMMs
        out += ["--training.mixed_precision_param", "bfloat16"]
    elif opts.precision not in _PRECISION:
        raise _error(
            "precision",
            "precision %s: torchtitan's --training.mixed_precision_param takes bfloat16 or float32; "
            "float8/MX training is a converter in a config function (e.g. llama3_8b_mxfp8), give it "
            "with -- --module/--config, or plan with --precision bf16" % opts.precision,
        )
    else:
        out += ["--training.mixed_precision_param", _PRECISION[opts.precision]]
    if layout.pp > 1 or layout.ep > 1:  # Trainer.Config refuses CUDA graphs with PP or a blocking EP dispatcher
        out.append("--training.disable_cuda_graphs")

    shard, replicate, reshard = _dp_split(layout, opts)
    out += [
        "--parallelism.data_parallel_shard_degree",
        str(shard),
        "--parallelism.data_parallel_replicate_degree",
        str(replicate),
    ]
    if reshard:
        out += ["--parallelism.fsdp_reshard_after_forward", reshard]
    out += ["--parallelism.tensor_parallel_degree", str(layout.tp)]
    out += _pipeline(layout, opts)
    # every degree is said, 1 included: a config function may set its own (deepseek_v3_671b: EP 2)
    out += ["--parallelism.context_parallel_degree", str(layout.cp)]
    out += ["--parallelism.expert_parallel_degree", str(layout.ep)]

    # checkpoints: torchtitan resumes from the newest step-N folder (load_step -1); it has no
    # save-on-signal, so under --requeue the periodic interval bounds the steps lost
    if (opts.checkpoint_dir or opts.requeue) and not opts.smoke:
        add("--checkpoint.enable")
        if opts.checkpoint_dir:
            add("--checkpoint.folder", PathArg(opts.checkpoint_dir))
        add("--checkpoint.interval", str(opts.save_interval or DEFAULT_SAVE_INTERVAL))
        add("--checkpoint.load_step=-1")
    # the activation-checkpoint policy is a tyro subcommand: it must come after every option
    if opts.recompute in _AC and not any(a.startswith("activation-checkpoint:") for a in user_argv):
        out.append(_AC[opts.recompute])
    return tuple(out)
