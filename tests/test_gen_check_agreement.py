"""The invariant between the generator and the filter: every script `gen` writes is accepted by
`check` on the same site.

Over presets x partitions x launchers x sizes (1, 2, 4 nodes; more on multi-node NVLink domains),
with and without a model, and with explicit TP / --segment where that is the interesting part,
`generate` runs in-process and its script goes through `check_script` (the site's job_submit.lua
under lupa) with nothing but the script, as `slurmgpu check SCRIPT` would. Three outcomes:

- written: gen wrote a script; check must accept it and agree with gen's own verdict;
- refused: gen wrote nothing and said why (the model does not fit, a size the partition lacks);
  allowed, but counted, and never for the cases listed in MUST_WRITE;
- violation: gen raised PolicyRejection (its own filter refused what it made) or check rejects
  what gen wrote. There must be none.
"""

from __future__ import annotations

from collections import Counter
from typing import Dict, Iterator, Optional, Tuple

import pytest

from slurmgpu import job as J
from slurmgpu.errors import ConfigError, PlanError, PolicyRejection
from slurmgpu.job import NAMES, JobSpec
from slurmgpu.policy import check_script
from slurmgpu.site import load_site, preset_dir, preset_names
from tests import programs

pytest.importorskip("lupa")

_SITES = {name: load_site(str(preset_dir() / (name + ".yaml"))) for name in preset_names()}
COMMAND = programs.COMMAND
MODELS = (None, "llama3-8b")

# (site, nodes, pins, segment): the issue's GB200 cases; gen must write each and check accept it.
MUST_WRITE = (
    ("gb200-nvl72", 30, {"tp": 6}, None),
    ("gb200-nvl72", 30, {"tp": 6}, 3),
    ("gb200-nvl72", 30, {"tp": 6}, 15),
    ("gb200-nvl72", 36, {"tp": 8}, None),
    ("gb200-nvl72", 18, {"tp": 72}, None),
)

Case = Tuple[str, str, str, int, Optional[str], Tuple[Tuple[str, int], ...], Optional[int]]


def _sizes(site, pname) -> Tuple[int, ...]:
    part = site.partitions[pname]
    nt = site.node_types[part.node_type]
    sizes = [1, 2, 4]
    if nt.domain_nodes > 1:  # NVL72: inside one domain, a whole domain, and across domains
        sizes += [9, nt.domain_nodes, 30, 2 * nt.domain_nodes]
    return tuple(n for n in sizes if n <= part.max_nodes_per_job)


def _pins(site, pname, nodes) -> Iterator[Tuple[Tuple[Tuple[str, int], ...], Optional[int]]]:
    """No pins (the default layout), and on multi-node NVLink domains TP that crosses trays."""
    yield (), None
    nt = site.node_types[site.partitions[pname].node_type]
    if nt.domain_nodes > 1 and nodes > 1:
        for tp in (2 * nt.gpus, 6, nt.nvlink_domain):
            if (nodes * nt.gpus) % tp == 0 and tp <= nodes * nt.gpus:
                yield (("tp", tp),), None


def _cases() -> Iterator[Case]:
    for name, site in sorted(_SITES.items()):
        for pname in site.partitions:
            for launcher in NAMES:
                for nodes in _sizes(site, pname):
                    for model in MODELS:
                        for pins, seg in _pins(site, pname, nodes):
                            if pins and model:
                                continue  # pinned TP is the no-model path's business
                            yield name, pname, launcher, nodes, model, pins, seg
    for name, nodes, pins, seg in MUST_WRITE:
        site = _SITES[name]
        for pname in site.partitions:
            yield name, pname, "torchrun", nodes, None, tuple(sorted(pins.items())), seg


CASES = list(dict.fromkeys(_cases()))  # a MUST_WRITE case may also be in the matrix


def _spec(case: Case) -> JobSpec:
    name, pname, launcher, nodes, model, pins, seg = case
    serving = launcher in ("vllm", "sglang")
    parallel = dict(pins)
    if serving and model:
        # one server over the whole allocation: the planner would otherwise size replicas (dp > 1),
        # which the serving launchers refuse ("pin --dp 1 or use fewer nodes")
        parallel.setdefault("dp", 1)
    declared: Dict[str, object] = {}
    if model and launcher in ("torchrun", "srun", "accelerate", "deepspeed"):
        # a program the launcher only starts is planned as what it declares: with FSDP and recomputation
        # llama3-8b fits these sizes as data parallelism (as plain DDP it fits nowhere)
        declared = dict(fsdp=launcher in ("torchrun", "srun"), implements=("recompute",))
    return JobSpec(  # type: ignore[arg-type]
        **declared,
        name="agree",
        launcher=launcher,
        partition=pname,
        nodes=nodes,
        model=model,
        task="inference" if serving and model else "pretrain",
        command=COMMAND.get(launcher, ()),
        weights="org/model" if serving else None,
        parallel=parallel,
        segment=seg,
        time="01:00:00",
        smoke=True,  # frameworks that need data get their mock data (the layout is what is checked)
    )


def run_case(case: Case) -> Tuple[str, str]:
    """('written'|'refused'|'violation', detail)."""
    site = _SITES[case[0]]
    try:
        gen = J.generate(site, _spec(case), J.search_path(None, None, site), "slurmgpu gen agree")
    except PolicyRejection as exc:
        return "violation", "gen's own policy refused its script: %s" % exc
    except (PlanError, ConfigError) as exc:
        return "refused", str(exc)
    verdict = check_script(site, gen.script)
    if verdict.decision != "accept":
        return "violation", "check rejects what gen wrote: %s" % " | ".join(verdict.messages)
    if gen.verdict is None or gen.verdict.decision != verdict.decision or gen.verdict.rules != verdict.rules:
        return "violation", "gen and check disagree: %s vs %s" % (gen.verdict, verdict)
    return "written", ""


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> Dict[Case, Tuple[str, str]]:
    with pytest.MonkeyPatch.context() as mp:  # compiled templates cached for the whole matrix
        mp.setenv("SLURMGPU_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
        return {c: run_case(c) for c in CASES}


def test_every_script_gen_writes_is_accepted_by_check(results):
    counts = Counter(kind for kind, _ in results.values())
    violations = [
        "%s: %s" % ("/".join(str(x) for x in c), why) for c, (kind, why) in results.items() if kind == "violation"
    ]
    assert violations == [], "%d of %d cases: %s" % (len(violations), len(CASES), "\n".join(violations[:20]))
    # the matrix is not mostly refusals: it reaches every preset and launcher with written scripts
    written = [c for c, (kind, _) in results.items() if kind == "written"]
    assert {c[0] for c in written} == set(_SITES)
    assert {c[2] for c in written} == set(NAMES)
    assert counts["written"] >= 0.9 * len(CASES), counts


@pytest.mark.parametrize("must", MUST_WRITE, ids=["%s-n%d-%s-seg%s" % (m[0], m[1], m[2], m[3]) for m in MUST_WRITE])
def test_the_issue_cases_are_written_and_accepted(must, results):
    name, nodes, pins, seg = must
    for pname in _SITES[name].partitions:
        kind, why = results[(name, pname, "torchrun", nodes, None, tuple(sorted(pins.items())), seg)]
        assert kind == "written", why


def test_refusals_say_why_and_never_blame_the_policy(results):
    for c, (kind, why) in results.items():
        if kind == "refused":
            assert why and "policy" not in why.lower(), (c, why)


@pytest.mark.parametrize(
    "launcher, pins, segment",
    [
        ("megatron", {"tp": 1, "pp": 2, "ep": 64}, 16),  # one EP group = 64 ranks = 16 trays
        ("megatron", {"tp": 2, "pp": 2, "ep": 32}, 16),  # EP x expert-TP folds over 16 trays
        ("torchtitan", {"tp": 1, "pp": 2, "ep": 16}, 16),  # 4-tray groups, the largest rack-sized multiple
    ],
)
def test_moe_on_nvl72_gets_the_segment_of_its_expert_groups_and_check_accepts_it(launcher, pins, segment):
    """Issue 18: the segment covers the EP groups too (not only TP), and the filter accepts it."""
    site = _SITES["gb200-nvl72"]
    spec = JobSpec(
        model="deepseek-v3",
        task="lora",
        launcher=launcher,
        nodes=32,
        parallel=pins,
        command=COMMAND.get(launcher, ()),
        smoke=True,  # Megatron and torchtitan need data+tokenizer or --smoke
    )
    gen = J.generate(site, spec, J.search_path(None, None, site))
    assert "#SBATCH --segment=%d" % segment in gen.script.splitlines()
    v = check_script(site, gen.script)
    assert v.accepted, v.messages


def test_gen_pins_block_distribution_on_steps_of_one_task_per_gpu():
    """srun numbers ranks by task in gen's one-task-per-GPU steps: gen writes
    --distribution=block there, so SLURM_DISTRIBUTION=cyclic in the user's environment (or an
    #SBATCH --distribution line) cannot deal a TP group out over nodes. Without the flag the same
    script is refused with that environment."""
    site = _SITES["dgx-h100"]
    spec = JobSpec(
        name="dist",
        launcher="srun",
        partition="gpu",
        nodes=2,
        task="pretrain",
        command=COMMAND.get("srun", ()),
        parallel={"tp": 8, "pp": 2},
        time="01:00:00",
        smoke=True,
    )
    gen = J.generate(site, spec, J.search_path(None, None, site), "slurmgpu gen dist")
    assert "--ntasks-per-node=8 --distribution=block" in gen.script
    cyclic = {"SLURM_DISTRIBUTION": "cyclic"}
    assert check_script(site, gen.script, env=cyclic).decision == "accept"
    bare = gen.script.replace(" --distribution=block", "")
    v = check_script(site, bare, env=cyclic)
    assert v.decision == "reject" and "tp-spans-nodes" in v.rules, v.messages
