"""The planner's hard rules and the submit policy (the Lua that slurmctld runs) give the same
verdict on where TP may go, for every preset partition: one rule, two places, no drift.

The planner judges a layout before it exists (`check_layout_rules`); the policy judges the
script that carries it (stamp line + the sbatch shape the generator writes, with --segment
where the planner asks for one). Multi-node jobs only: that is where the policy applies.

The generator's own path is held to the same verdict: `gen` without a model (the layout is
the pins, the --segment render's choice) writes a script exactly when the planner allows the
layout, and an explicit --segment is accepted by `gen` only where the policy accepts it, and
always when the policy itself names it in a fix.
"""

from __future__ import annotations

import math
import re
from typing import List, Optional, Tuple

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from slurmgpu import job as J
from slurmgpu.errors import ConfigError, PlanError, PolicyRejection
from slurmgpu.job import JobSpec
from slurmgpu.plan import Layout, ModelSpec, check_layout_rules, segment_for
from slurmgpu.policy import PolicyRunner, check_script
from slurmgpu.site import load_site, preset_dir, preset_names

# A model whose heads divide by every TP tried, so only placement rules can object.
WIDE = ModelSpec(
    name="wide", layers=144, hidden=147456, heads=1152, kv_heads=1152, ffn=4 * 147456, vocab=32000, seq=8192
)
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
            nt = site.node_types[part.node_type]
            extra = (9, 30) if nt.domain_nodes > 1 else ()  # NVL72: a part of a domain, and not whole domains
            for nodes in (2, 3, 4, 18, 36) + extra:
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
    assume(nodes <= part.max_nodes_per_job and (nodes * g) % tp == 0)
    planner, decision, _ = _verdicts(name, pname, nodes, tp)
    assert bool(planner) == (decision == "reject"), (name, pname, nodes, tp, planner, decision)


# ---------------------------------------------------------------------------
# The generator's path: no model (render's sizing and --segment), and explicit --segment


def _generate(name: str, pname: str, nodes: int, tp: int, segment: Optional[int] = None) -> Tuple[str, str]:
    """('written', script) or ('refused', why) for `slurmgpu gen --nodes N --tp TP [--segment S] -- train.py`."""
    site = _SITES[name]
    spec = JobSpec(
        launcher="torchrun", partition=pname, nodes=nodes, parallel={"tp": tp}, segment=segment, command=("train.py",)
    )
    try:
        gen = J.generate(site, spec, J.search_path(None, None, site))
    except (PolicyRejection, PlanError, ConfigError) as exc:
        return "refused", str(exc)
    return "written", gen.script


@pytest.mark.parametrize("case", CASES, ids=["%s-%s-n%d-tp%d" % c for c in CASES])
def test_gen_without_a_model_writes_exactly_what_the_planner_allows(case, tmp_path, monkeypatch):
    monkeypatch.setenv("SLURMGPU_CACHE_DIR", str(tmp_path / "cache"))
    planner, _, _ = _verdicts(*case)
    kind, text = _generate(*case)
    assert (kind == "written") == (not planner), (planner, text)
    if kind == "written":  # and what it wrote, --segment included, passes the filter as it stands
        name = case[0]
        v = check_script(_SITES[name], text)
        assert v.decision == "accept", v.messages


_FIX_SEGMENT = re.compile(r"add --segment=(\d+)")


def _block_cases():
    for c in CASES:
        nt = _SITES[c[0]].node_types[_SITES[c[0]].partitions[c[1]].node_type]
        if nt.domain_nodes > 1:
            yield c


BLOCK_CASES = list(_block_cases())


def _bare_verdict(name: str, pname: str, nodes: int, tp: int, segment: Optional[int] = None):
    site = _SITES[name]
    g = site.node_types[site.partitions[pname].node_type].gpus
    lay = Layout(tp=tp, pp=1, dp=nodes * g // tp, nodes=nodes, gpus_per_node=g)
    args = ["--partition", pname, "--nodes=%d" % nodes, "--gpus-per-node=%d" % g, "--ntasks-per-node=%d" % g]
    # an #SBATCH line, as generated scripts carry it: the NVL72 presets' Slurm (24.05) hands a
    # command-line --segment to sbatch but not to job_submit.lua, so the filter would never see it
    directive = "#SBATCH --segment=%d\n" % segment if segment else ""
    return _runner(name).check("#!/bin/bash\n%s%s\nsrun true\n" % (directive, lay.stamp(site.name)), args)


def test_block_cases_exist_and_the_policy_names_segments():
    assert BLOCK_CASES
    named = [c for c in BLOCK_CASES if any(_FIX_SEGMENT.search(m) for m in _bare_verdict(*c).messages)]
    assert named, "no case where the policy proposes a --segment"


def test_only_block_sites_are_told_to_add_a_segment():
    for c in CASES:
        if c in BLOCK_CASES:
            continue
        assert not any(_FIX_SEGMENT.search(m) for m in _bare_verdict(*c).messages), c


@pytest.mark.parametrize("case", BLOCK_CASES, ids=["%s-%s-n%d-tp%d" % c for c in BLOCK_CASES])
def test_every_segment_the_policy_names_in_a_fix_is_accepted_by_gen(case, tmp_path, monkeypatch):
    """Where the policy proposes no segment, it says why: the job passes (no TP group leaves a
    tray), TP is larger than the domain, or no segment of whole TP groups tiles the job (the
    planner finds none either)."""
    monkeypatch.setenv("SLURMGPU_CACHE_DIR", str(tmp_path / "cache"))
    name, pname, nodes, tp = case
    nt = _SITES[name].node_types[_SITES[name].partitions[pname].node_type]
    v = _bare_verdict(*case)
    named = [int(m.group(1)) for msg in v.messages for m in _FIX_SEGMENT.finditer(msg)]
    for seg in named:
        kind, text = _generate(*case, segment=seg)
        assert kind == "written", (seg, text)
        assert "#SBATCH --segment=%d\n" % seg in text
        assert check_script(_SITES[name], text).decision == "accept"
    tn = tp // math.gcd(tp, nt.gpus)  # trays one TP group spans
    planned, err = segment_for(nt, tp, nodes, nt.gpus)
    if tp > nt.nvlink_domain:
        assert not named and "tp-exceeds-domain" in v.rules, (v.rules, v.messages)
    elif tn == 1 or nodes == 1:
        assert not named and v.decision == "accept", (v.rules, v.messages)
    else:  # groups span trays: the policy names a segment exactly when the planner finds one
        assert bool(named) == (err is None), (named, planned, err, v.messages)
        assert v.decision == "reject" and "tp-needs-segment" in v.rules


@pytest.mark.parametrize("case", BLOCK_CASES, ids=["%s-%s-n%d-tp%d" % c for c in BLOCK_CASES])
def test_gen_accepts_an_explicit_segment_only_where_the_policy_does(case, tmp_path, monkeypatch):
    """Every --segment from 1 to the domain's node count: what gen writes, the policy accepts;
    and gen accepts every segment that the planner's rule allows."""
    monkeypatch.setenv("SLURMGPU_CACHE_DIR", str(tmp_path / "cache"))
    name, pname, nodes, tp = case
    nt = _SITES[name].node_types[_SITES[name].partitions[pname].node_type]
    planner, _, _ = _verdicts(*case)
    tp_over_domain = tp > nt.nvlink_domain
    tn = tp // math.gcd(tp, nt.gpus)  # trays one TP group spans
    kept = 0  # segments the policy accepts that keep tray-spanning TP groups inside one of several segments
    for seg in range(1, nt.domain_nodes + 1):
        kind, text = _generate(name, pname, nodes, tp, segment=seg)
        accepted = _bare_verdict(name, pname, nodes, tp, seg).decision == "accept"
        # rule_groups.lua: a segment inside one domain holds whole TP groups (a multiple of the
        # groups' span), or holds the whole job
        assert accepted == (not tp_over_domain and (nodes <= seg or seg % tn == 0)), (seg, tn, accepted)
        if kind == "written":
            assert accepted and check_script(_SITES[name], text).decision == "accept", (seg, text)
        elif accepted:
            # the policy takes a job inside one segment whatever the segment's size: gen is stricter
            # only for a segment of part TP groups, or one that does not cut the job into whole segments
            assert seg % tn or (seg < nodes and nodes % seg), (seg, text)
        kept += accepted and tn > 1 and seg < nodes
    if not tp_over_domain and 1 < tn < nodes and tn <= nt.domain_nodes:
        assert kept, "no segment of several was accepted for TP groups spanning %d trays" % tn
    if not planner:
        # the segment gen picks by itself is one of those it accepts
        kind, text = _generate(name, pname, nodes, tp)
        assert kind == "written", text
