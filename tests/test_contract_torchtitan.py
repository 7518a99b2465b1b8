"""torchtitan contract: every matrix case's command line is one torchtitan accepts, and says the
planned layout, precision, model and batch, for both versions the adapter writes (0.3.0 from
PyPI, the default, and main at b5bcd76c; the spec's launcher_version picks).

The judges are tests/data/contract/torchtitan-0.3.0.json and torchtitan-main.json, recorded from
each version's own ConfigManager (tyro parser) by contrib/contract/record_torchtitan.py;
torchtitan imports need triton, datasets, grain, tensorboard, ... (about 2 GB), so CI checks
against the records, and the recorder's --check mode re-parses the argvs with the real
ConfigManager when a pin moves.
"""

from __future__ import annotations

import json
import pathlib
from typing import Any, Dict, List, Tuple

import pytest

from slurmgpu.errors import ConfigError
from slurmgpu.job.launchers import torchtitan as tt
from tests.contract_matrix import matrix, render

DATA = pathlib.Path(__file__).parent / "data/contract"
CATALOGUES: Dict[str, Dict[str, Any]] = {
    v: json.loads((DATA / ("torchtitan-%s.json" % v)).read_text()) for v in (tt.VERSION, tt.MAIN)
}
CATALOGUE = CATALOGUES[tt.VERSION]
VERSIONS = (tt.VERSION, tt.MAIN)
INPUTS = dict(tokenizer="/data/hf/Llama-3.1", lr="3e-4", train_iters=100, checkpoint_dir="/ckpt/run1")


def parse(argv: List[str], version: str = tt.VERSION) -> Tuple[Dict[str, str], List[str]]:
    """torchtitan's parse of the program argv by the recorded rules: {option: value}, subcommands.

    Fails (AssertionError) on what tyro would refuse: an unknown option, a value that is not an int
    where it wants INT, a value outside the choices, an option after the subcommand."""
    cat = CATALOGUES[version]
    options: Dict[str, Dict[str, Any]] = cat["options"]
    negations = {n for v in options.values() for n in (v.get("negation") or [])}
    assert argv[:2] == ["-m", "torchtitan.train"], argv[:2]
    rest = list(argv[2:])
    got: Dict[str, str] = {}
    subs: List[str] = []
    i = 0
    while i < len(rest):
        a = rest[i]
        if not a.startswith("--"):
            assert a in cat["subcommands"], "unknown subcommand %r" % a
            subs.append(a)
            i += 1
            continue
        assert not subs, "option %s after subcommand %s: tyro refuses it" % (a, subs)
        key, _, inline = a.partition("=")
        if key in ("--module", "--config"):
            got[key] = inline or rest[i + 1]
            i += 1 if inline else 2
            continue
        norm = "--" + key[2:].replace("_", "-")
        if norm in negations:
            got[norm] = "False"
            i += 1
            continue
        assert norm in options, "torchtitan %s has no option %s" % (cat["version"], key)
        rule = options[norm]
        if rule["metavar"] is None and rule["choices"] is None:  # a flag
            got[norm] = "True"
            i += 1
            continue
        value = inline if inline else rest[i + 1]
        i += 1 if inline else 2
        meta = str(rule["metavar"])
        if meta in ("INT", "{None}|INT"):
            int(value)
        elif meta in ("FLOAT", "FLOAT|INT"):
            float(value)
        if rule["choices"]:
            assert value in rule["choices"], "%s %s not in %s" % (key, value, rule["choices"])
        got[norm] = value
    assert "--module" in got and "--config" in got, "--module/--config are required (ConfigManager)"
    return got, subs


def check_case(gen: object, want_ac: bool = True, version: str = tt.VERSION) -> None:
    req = gen.request  # type: ignore[attr-defined]
    lay = req.layout
    got, subs = parse(list(req.launch.program), version)
    cat = CATALOGUES[version]
    assert req.launch.targets == dict(tt.VERSIONS)[version]  # the script header names this version
    key = "%s:%s" % (got["--module"], got["--config"])
    assert key in cat["configs"], key
    # a degree the line leaves out is the config function's (deepseek_v3_671b sets EP 2); llama3_405b
    # cannot load on CPU, so there nothing may be left out
    defaults = cat["configs"][key].get("parallelism") or {}

    def p(k: str) -> int:
        flag = "--parallelism." + k
        assert flag in got or k.replace("-", "_") in defaults, "%s left to %s, whose default is unknown" % (flag, key)
        return int(got.get(flag, defaults.get(k.replace("-", "_"), 0)))

    shard, rep = p("data-parallel-shard-degree"), p("data-parallel-replicate-degree")
    # parsed back: torchtitan's mesh is the plan's layout
    assert (shard * rep, p("tensor-parallel-degree"), p("pipeline-parallel-degree")) == (lay.dp, lay.tp, lay.pp)
    assert (p("context-parallel-degree"), p("expert-parallel-degree")) == (lay.cp, lay.ep)
    assert shard * rep * lay.cp * lay.tp * lay.pp == lay.nodes * lay.gpus_per_node
    # ParallelDims: EP borrows from dp_shard * cp * tp
    assert (shard * lay.cp * lay.tp) % lay.ep == 0
    if lay.pp > 1 or lay.ep > 1:  # CATALOGUE["rules"]: Trainer.Config refuses CUDA graphs there
        assert got.get("--training.disable-cuda-graphs") == "True", "pp/ep > 1 without --training.disable_cuda_graphs"
    assert got["--training.mixed-precision-param"] == {"bf16": "bfloat16", "fp32": "float32"}[gen.sizing.plan.precision]  # type: ignore[attr-defined]
    check_batch(gen, got, version)
    model = gen.sizing.model  # type: ignore[attr-defined]
    rec = cat["configs"][key]
    if "model_config" in rec:  # the config function builds the planned shape
        mc = rec["model_config"]
        assert (mc["layers"], mc["dim"], mc["heads"], mc["experts"]) == (
            model.layers,
            model.hidden,
            model.heads,
            model.experts,
        ), (key, mc, model)
        if mc["kv_heads"]:
            assert mc["kv_heads"] == model.kv_heads
    else:  # llama3_405b cannot be built on CPU (float8 converter); its flavor is in its name
        assert key == "llama3:llama3_405b" and model.layers == 126, key
    if want_ac and gen.sizing.plan.recompute:  # type: ignore[attr-defined]
        assert subs == ["activation-checkpoint:" + gen.sizing.plan.recompute]  # type: ignore[attr-defined]
    if got.get("--checkpoint.enable"):
        assert got["--checkpoint.folder"] == INPUTS["checkpoint_dir"] and int(got["--checkpoint.load-step"]) == -1


def _site_fp8(preset: str) -> bool:
    from slurmgpu.site import load_site, lookup, preset_dir

    site = load_site(str(preset_dir() / ("%s.yaml" % preset)))
    facts = lookup(site.node_types[site.partition(None).node_type].gpu_model)
    return bool(facts and facts.fp8)


def test_float8_configs_are_the_recorded_ones() -> None:
    """FLOAT8_CONFIGS is what both catalogues saw fail to load on CPU with torchtitan's float8 error."""
    for version, cat in CATALOGUES.items():
        seen = {k.split(":")[1] for k, v in cat["configs"].items() if "float8" in v.get("load_error", "")}
        assert seen == set(tt.FLOAT8_CONFIGS), (version, seen)


def check_batch(gen: object, got: Dict[str, str], version: str) -> None:
    """The batch torchtitan would run is the plan's: sequences of seq tokens, micro_batch per
    forward per DP rank, global_batch per step (0.3.0 in sequences, main in tokens)."""
    lay = gen.request.layout  # type: ignore[attr-defined]
    plan = gen.sizing.plan  # type: ignore[attr-defined]
    seq, g, mb, dp = plan.seq, plan.global_batch, lay.micro_batch, lay.dp
    t = lambda k: int(got["--training." + k])  # noqa: E731
    if version == tt.VERSION:
        assert t("seq-len") == seq
        local = t("local-batch-size")
        if lay.pp > 1:
            assert int(got["--parallelism.pipeline-parallel-microbatch-size"]) == mb and local % mb == 0
        else:
            assert local == mb
        if "--training.global-batch-size" in got:
            assert t("global-batch-size") == g and g % (local * dp) == 0
        else:
            assert g % (mb * dp) != 0, "global batch %d left out although it divides" % g
        return
    # main: Trainer.__init__'s arithmetic over the parsed values (CATALOGUES["main"]["rules"])
    assert t("max-context-length") == seq
    per_mb = t("num-tokens-per-microbatch-per-dp-rank")
    assert per_mb == mb * seq
    sp = lay.tp  # enable_sequence_parallel defaults to True
    assert per_mb % (sp * (2 * lay.cp if lay.cp > 1 else 1)) == 0
    n_pp = int(got.get("--parallelism.num-pp-microbatches", "1")) if lay.pp > 1 else 1
    step = t("num-tokens-per-train-step") if "--training.num-tokens-per-train-step" in got else per_mb * n_pp * dp
    assert step % (per_mb * n_pp * dp) == 0
    if g % (mb * dp) == 0:
        assert step == g * seq, (step, g, seq)
        if lay.pp > 1:  # one step runs all microbatches through the pipeline
            assert n_pp == g // (mb * dp)


@pytest.mark.parametrize("version", VERSIONS)
def test_matrix_accepted_and_parsed_back(version: str) -> None:
    checked = refused_model = planner_refused = refused_fp8 = 0
    for case in matrix("pretrain"):
        try:
            gen = render(case, "torchtitan", launcher_version=version, **INPUTS)
        except ConfigError as e:
            if "float8 converter" in str(e):  # a site whose GPU has no FP8 tensor cores (lumi-g MI250X)
                assert tt.CONFIGS[case.model][1] in tt.FLOAT8_CONFIGS and not _site_fp8(case.preset), case.id
                refused_fp8 += 1
                continue
            assert case.model not in tt.CONFIGS and "has no config for model" in str(e), (case.id, e)
            refused_model += 1
            continue
        if gen is None:
            planner_refused += 1
            continue
        check_case(gen, version=version)
        key = "%s:%s" % tt.CONFIGS[case.model]
        if "float8" in CATALOGUES[version]["configs"][key].get("load_error", ""):
            assert _site_fp8(case.preset), "%s rendered on a GPU without FP8" % case.id
        checked += 1
    print(
        "torchtitan %s: %d checked, %d no torchtitan config, %d no FP8 for llama3_405b, %d refused by the planner"
        % (version, checked, refused_model, refused_fp8, planner_refused)
    )
    assert checked + refused_model + planner_refused + refused_fp8 == len(matrix("pretrain"))
    assert refused_fp8 > 0
    assert checked >= 40 and refused_model > 0  # only mixtral-8x7b (no torchtitan config) is refused


@pytest.mark.parametrize("version", VERSIONS)
def test_requeue_and_smoke_cases(version: str) -> None:
    n = 0
    for case in matrix("pretrain"):
        if case.model not in tt.CONFIGS or case.nodes > 2:
            continue
        gen = render(case, "torchtitan", smoke=True, lr="3e-4", launcher_version=version)
        if gen is None:
            continue
        check_case(gen, version=version)
        got, _ = parse(list(gen.request.launch.program), version)
        assert got["--hf-assets-path"] == tt.SMOKE_ASSETS
        # main has no dataset option: its configs' own c4 (streamed) stays
        assert got.get("--dataloader.dataset") == ("c4_test" if version == tt.VERSION else None)
        assert "--checkpoint.enable" not in got
        n += 1
    assert n > 0
    gen = render(matrix()[0], "torchtitan", requeue=True, launcher_version=version, **INPUTS)
    assert gen is not None
    got, _ = parse(list(gen.request.launch.program), version)
    assert got["--checkpoint.enable"] == "True" and got["--checkpoint.interval"] == "500"


def test_missing_tokenizer_is_named() -> None:
    with pytest.raises(ConfigError, match="no tokenizer.*--tokenizer"):
        render(matrix()[0], "torchtitan", lr="3e-4")


def test_mixtral_names_what_torchtitan_has() -> None:
    case = next(c for c in matrix() if c.model == "mixtral-8x7b" and c.nodes == 8)
    with pytest.raises(ConfigError, match="no config for model 'mixtral-8x7b'.*deepseek-v3"):
        render(case, "torchtitan", **INPUTS)
    # the user's own config function is taken as given
    gen = render(case, "torchtitan", command=("--module", "my.configs", "--config", "mixtral"), **INPUTS)
    assert gen is None or "--module" in gen.request.launch.program


def test_unknown_option_fails_the_parse() -> None:
    with pytest.raises(AssertionError, match="no option --job.config_file"):
        parse(["-m", "torchtitan.train", "--module", "llama3", "--config", "llama3_8b", "--job.config_file", "x"])
    with pytest.raises(AssertionError, match="required"):
        parse(["-m", "torchtitan.train", "--parallelism.tensor_parallel_degree", "2"])


def test_version_choice_is_explicit() -> None:
    """The default is 0.3.0 (PyPI); main is chosen by name, anything else names the choices."""
    case = matrix()[0]
    gen = render(case, "torchtitan", **INPUTS)
    assert gen is not None and gen.request.launch.targets.startswith("torchtitan 0.3.0")
    assert "--training.local_batch_size" in gen.request.launch.program
    gen = render(case, "torchtitan", launcher_version="main", **INPUTS)
    assert gen is not None and "b5bcd76c" in gen.request.launch.targets
    assert "--training.local_batch_size" not in gen.request.launch.program
    with pytest.raises(ConfigError, match="no version '0.4'.*0.3.0 or main"):
        render(case, "torchtitan", launcher_version="0.4", **INPUTS)
    with pytest.raises(ConfigError, match="one version only"):
        render(case, "torchrun", launcher_version="main", command=("train.py",), fsdp=True)


def test_main_refuses_a_dataset_it_cannot_be_told() -> None:
    case = matrix()[0]
    with pytest.raises(ConfigError, match="dataset in the config function.*--launcher-version 0.3.0"):
        render(case, "torchtitan", launcher_version="main", data="/data/c4", **INPUTS)
    gen = render(case, "torchtitan", launcher_version="main", data="c4", **INPUTS)
    assert gen is not None and "--dataloader.dataset" not in gen.request.launch.program
    # 0.3.0 takes the same path as --dataloader.dataset_path
    gen = render(case, "torchtitan", data="/data/c4", **INPUTS)
    assert gen is not None and "/data/c4" in gen.request.launch.program


def test_main_parser_refuses_the_0_3_batch_options() -> None:
    """The main catalogue is the judge: 0.3.0's batch spelling fails there (the test can fail)."""
    argv = ["-m", "torchtitan.train", "--module", "llama3", "--config", "llama3_8b", "--training.local_batch_size", "2"]
    parse(argv, tt.VERSION)
    with pytest.raises(AssertionError, match="main has no option --training.local_batch_size"):
        parse(argv, tt.MAIN)
