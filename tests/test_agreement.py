"""The planner's hard rules and the submit policy (the Lua that slurmctld runs) give the same
verdict on where TP may go, for every preset partition: one rule, two places, no drift.

The planner judges a layout before it exists (`check_layout_rules`); the policy judges the
script that carries it (stamp line + the sbatch shape the generator writes, with --segment
where the planner asks for one). Multi-node jobs only: that is where the policy applies.
"""
from __future__ import annotations

from typing import List, Tuple

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slurmgpu.layout import Layout
from slurmgpu.models import ModelSpec
from slurmgpu.plan import check_layout_rules, segment_for
from slurmgpu.policy import PolicyRunner
from slurmgpu.site import load_site, preset_dir, preset_names

# A model whose heads divide by every TP tried, so only placement rules can object.
WIDE = ModelSpec(name="wide", layers=144, hidden=147456, heads=1152, kv_heads=1152, ffn=4 * 147456,
                 vocab=32000, seq=8192)
TPS = (1, 2, 3, 4, 6, 8, 9, 12, 16, 24, 32, 36, 72, 144)

_SITES = {name: load_site(str(preset_dir() / (name + ".yaml"))) for name in preset_names()}
_RUNNERS = {}


def _runner(name: str) -> PolicyRunner:
    if name not in _RUNNERS:
        _RUNNERS[name] = PolicyRunner(_SITES[name])
    return _RUNNERS[name]


def _verdicts(name: str, pname: str, nodes: int, tp: int) -> Tuple[List[str], str, Tuple[str, ...]]:
    site = _SITES[name]
    nt = site.node_types[site.partitions[pname].node_type]
    g = nt.gpus
    lay = Layout(tp=tp, pp=1, dp=nodes * g // tp, nodes=nodes, gpus_per_node=g)
    # placement rules only: head divisibility is the model's business, not the filter's
    planner = [r for r in check_layout_rules(site, pname, WIDE, lay) if "TP=" in r and "heads" not in r]
    seg, _ = segment_for(nt, tp, nodes, g)
    args = ["--partition", pname, "--nodes=%d" % nodes, "--gpus-per-node=%d" % g, "--ntasks-per-node=%d" % g]
    # the segment as generated scripts carry it: job_submit.lua of 24.05-25.11.1 does not see a
    # command-line --segment (slurmgpu.jobdesc), only #SBATCH lines
    segment = "#SBATCH --segment=%d\n" % seg if seg else ""
    script = "#!/bin/bash\n%s%s\nsrun true\n" % (segment, lay.stamp(site.name))
    v = _runner(name).check(script, args)
    return planner, v.decision, v.rules


def _cases():
    for name, site in sorted(_SITES.items()):
        for pname, part in site.partitions.items():
            g = site.node_types[part.node_type].gpus
            for nodes in (2, 3, 4, 18, 36):
                if nodes <= part.max_nodes_per_job:
                    for tp in TPS:
                        if (nodes * g) % tp == 0:
                            yield name, pname, nodes, tp


CASES = list(_cases())


def test_the_matrix_covers_every_preset_and_both_verdicts():
    assert {c[0] for c in CASES} == set(_SITES)
    decisions = {_verdicts(*c)[1] for c in CASES[::7]}
    assert decisions == {"accept", "reject"}


@pytest.mark.parametrize("case", CASES, ids=["%s-%s-n%d-tp%d" % c for c in CASES])
def test_planner_and_policy_agree_on_tp_placement(case):
    planner, decision, rules = _verdicts(*case)
    tp_rules = [r for r in rules if r.startswith("tp-")]
    assert bool(planner) == (decision == "reject"), (planner, decision, rules)
    assert bool(planner) == bool(tp_rules), (planner, rules)


@settings(max_examples=150, deadline=None)
@given(st.sampled_from(sorted(_SITES)), st.integers(2, 40), st.integers(1, 80), st.data())
def test_agreement_on_random_shapes(name, nodes, tp, data):
    site = _SITES[name]
    pname = data.draw(st.sampled_from(sorted(site.partitions)))
    part = site.partitions[pname]
    g = site.node_types[part.node_type].gpus
    if nodes > part.max_nodes_per_job or (nodes * g) % tp:
        return
    planner, decision, _ = _verdicts(name, pname, nodes, tp)
    assert bool(planner) == (decision == "reject"), (name, pname, nodes, tp, planner, decision)
