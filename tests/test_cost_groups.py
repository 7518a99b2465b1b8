"""The cost model's communication groups, stated as rules (issue 35: mutants of these survived the
suite): the gradient reduction runs over every data- and context-parallel rank of a stage (Megatron
reduces gradients over DP x CP: the CP ranks of a replica hold the same weights), and the routed
experts' gradients over their expert-DP ranks, EP x expert-TP x expert-DP = TP x CP x DP."""

from __future__ import annotations

import pytest

from slurmgpu.plan import PlanRequest, get_model, make_plan
from slurmgpu.plan.cost import _expert_dp
from slurmgpu.site import load_site, preset_dir


@pytest.mark.parametrize(
    "tp,dp,cp,ep,want",
    [
        (2, 32, 1, 64, (1, 1)),  # DeepSeek-V3 TP2 EP64 over DP32: expert TP 1, every rank distinct experts
        (2, 16, 1, 4, (2, 4)),  # EP divides DP: experts keep TP, 32 / (2 x 4) = 4 replicas
        (1, 8, 2, 4, (1, 4)),  # CP ranks hold experts too: 16 / 4
        (4, 4, 2, 8, (4, 1)),
    ],
)
def test_expert_dp_folds_ep_and_expert_tp_onto_the_stage_ranks(tp, dp, cp, ep, want):
    etp, edp = _expert_dp(tp, dp, cp, ep)
    assert (etp, edp) == want
    assert etp * ep * edp == tp * dp * cp


def test_the_gradient_reduction_spans_dp_times_cp():
    """Llama 3.1 8B on one 8-GPU node at 16K tokens, compute long enough to cover the reduction:
    8 ranks of DP x CP reduce the same gradients however they are split, so the exposed DP time
    is the same for DP8, DP4 x CP2 and DP2 x CP4 (counting only DP would make it smaller with CP)."""
    site = load_site(str(preset_dir() / "dgx-h100.yaml"))
    model = get_model("llama3.1-8b")

    def dp_time(dp: int, cp: int) -> float:
        pins = {"tp": 1, "pp": 1, "dp": dp, "cp": cp, "micro_batch": 1}
        req = PlanRequest(model=model, gpus=8, pins=pins, global_batch=16, seq=16384, recompute="full", zero=1)
        return make_plan(site, req).time_breakdown["dp"]

    ref = dp_time(8, 1)
    assert ref > 0
    assert dp_time(4, 2) == pytest.approx(ref, rel=1e-9)
    assert dp_time(2, 4) == pytest.approx(ref, rel=1e-9)
