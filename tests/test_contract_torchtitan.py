"""torchtitan contract: every matrix case's command line is one torchtitan 0.3.0 accepts, and says
the planned layout, precision and model.

The judge is tests/data/contract/torchtitan-0.3.0.json, recorded from torchtitan 0.3.0's own
ConfigManager (tyro parser) by contrib/contract/record_torchtitan.py; torchtitan imports need
triton, datasets, tensorboard, ... (about 2 GB), so CI checks against the record, and the
recorder's --check mode re-parses the argvs with the real ConfigManager when the pin moves.
"""

from __future__ import annotations

import json
import pathlib
from typing import Dict, List, Tuple

import pytest

from slurmgpu.errors import ConfigError
from slurmgpu.job.launchers import torchtitan as tt
from tests.contract_matrix import matrix, render

CATALOGUE = json.loads((pathlib.Path(__file__).parent / "data/contract/torchtitan-0.3.0.json").read_text())
OPTIONS: Dict[str, Dict[str, object]] = CATALOGUE["options"]
NEGATIONS = {n for v in OPTIONS.values() for n in (v.get("negation") or [])}  # type: ignore[union-attr]
INPUTS = dict(tokenizer="/data/hf/Llama-3.1", lr="3e-4", train_iters=100, checkpoint_dir="/ckpt/run1")


def parse(argv: List[str]) -> Tuple[Dict[str, str], List[str]]:
    """torchtitan's parse of the program argv by the recorded rules: {option: value}, subcommands.

    Fails (AssertionError) on what tyro would refuse: an unknown option, a value that is not an int
    where it wants INT, a value outside the choices, an option after the subcommand."""
    assert argv[:2] == ["-m", "torchtitan.train"], argv[:2]
    rest = list(argv[2:])
    got: Dict[str, str] = {}
    subs: List[str] = []
    i = 0
    while i < len(rest):
        a = rest[i]
        if not a.startswith("--"):
            assert a in CATALOGUE["subcommands"], "unknown subcommand %r" % a
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
        if norm in NEGATIONS:
            got[norm] = "False"
            i += 1
            continue
        assert norm in OPTIONS, "torchtitan %s has no option %s" % (CATALOGUE["version"], key)
        rule = OPTIONS[norm]
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


def check_case(gen: object, want_ac: bool = True) -> None:
    req = gen.request  # type: ignore[attr-defined]
    lay = req.layout
    got, subs = parse(list(req.launch.program))
    key = "%s:%s" % (got["--module"], got["--config"])
    assert key in CATALOGUE["configs"], key
    p = lambda k, d="1": int(got.get("--parallelism." + k, d))  # noqa: E731
    shard, rep = p("data-parallel-shard-degree", "-1"), p("data-parallel-replicate-degree")
    # parsed back: torchtitan's mesh is the plan's layout
    assert (shard * rep, p("tensor-parallel-degree"), p("pipeline-parallel-degree")) == (lay.dp, lay.tp, lay.pp)
    assert (p("context-parallel-degree"), p("expert-parallel-degree")) == (lay.cp, lay.ep)
    assert shard * rep * lay.cp * lay.tp * lay.pp == lay.nodes * lay.gpus_per_node
    # ParallelDims: EP borrows from dp_shard * cp * tp
    assert (shard * lay.cp * lay.tp) % lay.ep == 0
    if lay.pp > 1 or lay.ep > 1:  # CATALOGUE["rules"]: Trainer.Config refuses CUDA graphs there
        assert got.get("--training.disable-cuda-graphs") == "True", "pp/ep > 1 without --training.disable_cuda_graphs"
    assert got["--training.mixed-precision-param"] == {"bf16": "bfloat16", "fp32": "float32"}[gen.sizing.plan.precision]  # type: ignore[attr-defined]
    model = gen.sizing.model  # type: ignore[attr-defined]
    rec = CATALOGUE["configs"][key]
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


def test_matrix_accepted_and_parsed_back() -> None:
    checked = refused_model = planner_refused = 0
    for case in matrix("pretrain"):
        try:
            gen = render(case, "torchtitan", **INPUTS)
        except ConfigError as e:
            assert case.model not in tt.CONFIGS and "has no config for model" in str(e), (case.id, e)
            refused_model += 1
            continue
        if gen is None:
            planner_refused += 1
            continue
        check_case(gen)
        checked += 1
    print(
        "torchtitan: %d checked, %d no torchtitan config, %d refused by the planner"
        % (checked, refused_model, planner_refused)
    )
    assert checked + refused_model + planner_refused == len(matrix("pretrain"))
    assert checked >= 40 and refused_model > 0  # only mixtral-8x7b (no torchtitan config) is refused


def test_requeue_and_smoke_cases() -> None:
    n = 0
    for case in matrix("pretrain"):
        if case.model not in tt.CONFIGS or case.nodes > 2:
            continue
        gen = render(case, "torchtitan", smoke=True, lr="3e-4")
        if gen is None:
            continue
        check_case(gen)
        got, _ = parse(list(gen.request.launch.program))
        assert got["--dataloader.dataset"] == "c4_test" and got["--hf-assets-path"] == tt.SMOKE_ASSETS
        assert "--checkpoint.enable" not in got
        n += 1
    assert n > 0
    gen = render(matrix()[0], "torchtitan", requeue=True, **INPUTS)
    assert gen is not None
    got, _ = parse(list(gen.request.launch.program))
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
