"""calibrate: fits recover known terms, stay inside physical bounds, and cross-validation never lets a
held-out source inform its own prediction."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

import plan_accuracy  # noqa: E402

from slurmgpu.plan import make_plan  # noqa: E402
from slurmgpu.plan.calibrate import (  # noqa: E402
    MeasuredRun,
    fit_terms,
    leave_one_source_out,
    predict,
    prepare,
)
from slurmgpu.plan.terms import BOUNDS, DEFAULT_TERMS, PRIOR_TERMS, CostTerms  # noqa: E402

# a small spread of published layouts: H100 FP8 dense with TP/PP/CP, an MoE, B200, A100 FSDP
NAMES = (
    "n2407-llama3-8b",
    "n2407-llama2-70b",
    "n2407-gpt3-20b",
    "n2407-nemotron-22b",
    "nls-llama2-7b-64k",
    "n2502-mixtral-8x7b-b200",
    "n2502-gpt3-175b-b200",
    "tt-a100-l2-13b-none",
)


@pytest.fixture(scope="module")
def runs():
    rows = {r.name: r for r in plan_accuracy.load_rows()}
    return plan_accuracy.measured_runs([rows[n] for n in NAMES])


def _synthetic(runs, terms: CostTerms, sources=("a", "b", "c")):
    """The same runs with measured tokens/s the planner predicts under `terms`, spread over sources."""
    out = []
    for i, r in enumerate(runs):
        value = predict(prepare(r), terms)
        out.append(replace(r, source=sources[i % len(sources)], tokens_per_s_gpu=value))
    return out


def test_prediction_is_the_pinned_plans_tokens_per_gpu(runs):
    for r in runs:
        plan = make_plan(r.site, r.request)
        assert predict(prepare(r), DEFAULT_TERMS) == pytest.approx(plan.tokens_per_s / r.request.gpus, rel=1e-9)


def test_fit_recovers_the_terms_that_made_the_runs(runs):
    truth = replace(PRIOR_TERMS, gemm_hopper_fp8=0.52, gemm_blackwell_fp8=0.45)
    fitted = fit_terms(_synthetic(runs, truth), names=("gemm_hopper_fp8", "gemm_blackwell_fp8"), rounds=8)
    assert fitted.gemm_hopper_fp8 == pytest.approx(0.52, rel=0.04)
    assert fitted.gemm_blackwell_fp8 == pytest.approx(0.45, rel=0.04)
    assert fitted.tp_exposed == PRIOR_TERMS.tp_exposed  # not among the names: untouched


def test_a_held_out_source_never_informs_its_own_prediction(runs):
    truth = replace(PRIOR_TERMS, gemm_hopper_fp8=0.55)
    clean = _synthetic(runs, truth)
    # source "c" reports three times the throughput: a fit that saw it would move
    poisoned = [replace(r, tokens_per_s_gpu=3 * r.tokens_per_s_gpu) if r.source == "c" else r for r in clean]
    names = ("gemm_hopper_fp8", "gemm_blackwell_fp8", "tp_exposed")
    a = {h.run.name: h for h in leave_one_source_out(clean, names=names)}
    b = {h.run.name: h for h in leave_one_source_out(poisoned, names=names)}
    for r in clean:
        if r.source == "c":  # its own figures changed, its prediction did not
            assert b[r.name].predicted == pytest.approx(a[r.name].predicted, rel=1e-12)
            assert b[r.name].terms == a[r.name].terms
    # the check can fail: the in-sample fit does move with the poisoned source
    assert fit_terms(poisoned, names=names) != fit_terms(clean, names=names)
    # and the held-out predictions of the other sources see the poison
    assert any(b[r.name].predicted != a[r.name].predicted for r in clean if r.source != "c")


def test_fitted_terms_stay_inside_their_physical_bounds(runs):
    # runs twice as fast as any GEMM could make them: the ceiling stops at its bound, not at 2x
    fast = [replace(r, tokens_per_s_gpu=2.5 * predict(prepare(r), PRIOR_TERMS)) for r in runs]
    fitted = fit_terms(fast, rounds=3)
    for name, (lo, hi) in BOUNDS.items():
        assert lo <= getattr(fitted, name) <= hi, name
    assert fitted.gemm_hopper_fp8 == BOUNDS["gemm_hopper_fp8"][1]


def test_unknown_term_names_are_refused(runs):
    with pytest.raises(ValueError, match="unknown cost term 'gemm_eff'"):
        fit_terms(runs[:1], names=("gemm_eff",))


def test_a_run_the_memory_model_fits_only_with_recompute_is_predicted_not_fitted():
    rows = {r.name: r for r in plan_accuracy.load_rows()}
    # Llama 2 70B SFT on 16 H100 (TP 4 PP 4 DP 1): NeMo states no recomputation; the planner needs full
    run = plan_accuracy.measured_runs([rows["n2407-llama2-70b-sft"]])[0]
    p = prepare(run)
    assert p.forced
    wild = replace(run, tokens_per_s_gpu=10 * run.tokens_per_s_gpu)
    assert fit_terms([wild]) == PRIOR_TERMS  # left out: nothing to fit on
    held = leave_one_source_out([wild, replace(run, name="other", source="x")])
    assert held[0].predicted == pytest.approx(predict(p, PRIOR_TERMS))


def test_measured_run_fields_are_what_a_site_log_gives():
    # the API `slurmgpu calibrate` builds on: a run is a site, a pinned request and tokens/s per GPU
    run = MeasuredRun(
        "x",
        "site-log",
        plan_accuracy.site_for("h100", 8),
        plan_accuracy.request(next(r for r in plan_accuracy.load_rows() if r.name == "n2407-llama3-8b"), True),
        12036.0,
    )
    assert prepare(run).gpus == 8
