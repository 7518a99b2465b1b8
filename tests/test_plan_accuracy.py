"""The calibration table's figures are what docs/planner.md and slurmgpu/plan/accuracy.py say."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

import plan_accuracy  # noqa: E402

from slurmgpu.plan.accuracy import ERROR_BANDS  # noqa: E402

DOC = ROOT / "docs" / "planner.md"
BLOCK = re.compile(r"(<!-- accuracy:begin -->\n)(.*?)(<!-- accuracy:end -->)", re.S)


@pytest.fixture(scope="module")
def results():
    return plan_accuracy.run_all()


def test_docs_accuracy_table_is_current(results, request):
    table = plan_accuracy.markdown(results) + "\n"
    text = DOC.read_text()
    assert BLOCK.search(text), "docs/planner.md lost its accuracy markers"
    if request.config.getoption("--update-golden"):
        text = BLOCK.sub(lambda m: m.group(1) + table + m.group(3), text)
        DOC.write_text(text)
    assert BLOCK.search(text).group(2) == table, (
        "docs/planner.md's accuracy table is stale: run pytest tests/test_plan_accuracy.py --update-golden"
    )


def test_error_bands_match_the_table(results):
    assert ERROR_BANDS == plan_accuracy.bands(results), (
        "slurmgpu/plan/accuracy.py ERROR_BANDS differ from bench/plan_accuracy.py; copy its bands()"
    )


def test_every_row_has_a_source_and_refusals_name_a_reason(results):
    for r in results:
        assert r.row.source.strip(), r.row.name
        if r.refused:  # a refusal says what is wrong, not only that it failed
            assert "does not fit" in r.refused or "rule" in r.refused or "must" in r.refused, r.refused


def test_no_published_recipe_is_refused(results):
    # Llama 2 70B SFT on 16 H100s (TP4 PP4 DP1) was refused at 16 B/param; NeMo's distributed Adam
    # keeps 14 (16-bit master remainders), which fits with full recompute
    assert [r.row.name for r in results if r.refused] == []


def test_free_choice_keeps_the_published_style_layout_within_the_band(results):
    # a free choice that differs from the published-style layout lists it with its predicted gap
    from slurmgpu.plan import make_plan

    row = next(r.row for r in results if r.row.name == "n2407-llama3-8b")
    p = make_plan(plan_accuracy.site_for(row.gpu, row.gpus), plan_accuracy.request(row, False))
    assert any("published-style layout" in n for n in p.notes)
    assert any("published-style layout" in a.why or "within the error band" in a.why for a in p.alternatives)
