"""Rules that only snapshot tests used to hold: a golden script or a recorded plan re-blessed with
`--update-golden` would have hidden a bug in either. Stated here as the rules themselves.

* Megatron's distributed optimizer (ZeRO-1; NeMo's distributed Adam) shards the optimizer state
  over DP x CP ranks (the CP ranks of a DP replica hold the same weights), and the routed experts'
  state over their expert-DP ranks (TP x CP x DP / (expert TP x EP)); weights and gradients stay
  whole until ZeRO-2/3.
* `--cpus-per-task` x `--ntasks-per-node` is the node's CPU share of the GPUs the job uses: never
  more (Slurm would then need more nodes than the layout has, and the filter counts it so), and
  short of it by less than one CPU per task.
"""

from __future__ import annotations

import pytest

from slurmgpu import job as J
from slurmgpu.job import JobSpec
from slurmgpu.plan import get_model
from slurmgpu.plan.memory import TrainShape, stage_layers, stage_params, training_memory
from slurmgpu.site import load_site, preset_dir, preset_names

GB = 1e9
DENSE = get_model("llama3.1-8b")
MOE = get_model("mixtral-8x7b")


def _mem(model, zero=1, **kw):  # type: ignore[no-untyped-def]
    shape = dict(tp=2, pp=1, dp=4, cp=1, ep=1, micro_batch=1, micro_batches=8, seq=8192)
    shape.update(kw)
    return training_memory(model, TrainShape(**shape), zero=zero)


def _bytes_per_rank(model, tp: int, ep: int = 1):  # type: ignore[no-untyped-def]
    """(dense, expert) parameters one rank holds on a single stage before DP sharding."""
    sp = stage_params(model, stage_layers(model.layers, 1), 0)
    # the callers below keep EP dividing DP x CP, so the experts keep TP (expert TP = TP)
    return (sp.dense + sp.embed) / tp, sp.experts / (tp * ep)


@pytest.mark.parametrize("dp,cp", [(8, 1), (4, 2), (2, 4), (1, 8)])
def test_distributed_optimizer_shards_over_dp_times_cp(dp, cp):
    """Only DP x CP matters to the optimizer state: 8 ranks of it, whichever way they are split."""
    m = _mem(DENSE, dp=dp, cp=cp)
    ref = _mem(DENSE, dp=8, cp=1)
    assert m.optimizer == pytest.approx(ref.optimizer)
    dense, _ = _bytes_per_rank(DENSE, 2)
    # 12 bytes per parameter (the textbook profile: fp32 master copy + Adam's two fp32 moments), over DP x CP
    assert m.optimizer * GB == pytest.approx(12.0 * dense / (dp * cp))
    assert m.weights * GB == pytest.approx(2.0 * dense) and m.gradients * GB == pytest.approx(2.0 * dense)


def test_more_cp_or_dp_ranks_shard_the_optimizer_further_and_nothing_else():
    base = _mem(DENSE, dp=4, cp=1)
    for more in (_mem(DENSE, dp=8, cp=1), _mem(DENSE, dp=4, cp=2)):
        assert more.optimizer == pytest.approx(base.optimizer / 2)
        assert (more.weights, more.gradients) == (pytest.approx(base.weights), pytest.approx(base.gradients))


def test_without_the_distributed_optimizer_nothing_shards_and_zero2_shards_gradients_too():
    z0 = [_mem(DENSE, zero=0, dp=dp, cp=cp) for dp, cp in ((2, 1), (8, 2))]
    assert z0[0].optimizer == pytest.approx(z0[1].optimizer)
    z2 = [_mem(DENSE, zero=2, dp=dp, cp=cp) for dp, cp in ((4, 1), (4, 2), (8, 1))]
    assert z2[1].gradients == pytest.approx(z2[0].gradients / 2) == pytest.approx(z2[2].gradients)
    assert z2[1].optimizer == pytest.approx(z2[2].optimizer)


def test_expert_state_shards_over_expert_dp():
    """Mixtral TP2 EP4 over DP8 x CP2: the experts' optimizer state is split over TP x CP x DP /
    (expert TP x EP) = 2 x 2 x 8 / (2 x 4) = 4 expert-DP ranks; the dense part over DP x CP = 16."""
    m = _mem(MOE, dp=8, cp=2, ep=4)
    dense, experts = _bytes_per_rank(MOE, 2, ep=4)
    assert m.optimizer * GB == pytest.approx(12.0 * dense / 16 + 12.0 * experts / 4)
    assert m.weights * GB == pytest.approx(2.0 * (dense + experts))


# ---------------------------------------------------------------------------
# CPUs per task


def _cases():
    for name in preset_names():
        site = load_site(str(preset_dir() / (name + ".yaml")))
        nt = site.node_types[site.partitions[site.default_partition].node_type]
        if not nt.cpus:
            continue
        for gpus in sorted({nt.gpus, max(1, nt.gpus // 2)}):
            for launcher in ("torchrun", "srun"):
                yield name, launcher, gpus


CPU_CASES = list(_cases())


@pytest.mark.parametrize("name,launcher,gpus", CPU_CASES, ids=["%s-%s-g%d" % c for c in CPU_CASES])
def test_cpus_per_task_times_tasks_is_the_share_of_the_gpus_used(name, launcher, gpus, tmp_path, monkeypatch):
    monkeypatch.setenv("SLURMGPU_CACHE_DIR", str(tmp_path / "cache"))
    site = load_site(str(preset_dir() / (name + ".yaml")))
    nt = site.node_types[site.partitions[site.default_partition].node_type]
    spec = JobSpec(launcher=launcher, nodes=1, gpus=gpus, parallel={"tp": 1}, command=("train.py",))
    g = J.generate(site, spec, J.search_path(None, None, site))
    sb = g.request.sbatch
    assert sb.gpus_per_node == gpus
    assert sb.ntasks_per_node == (gpus if launcher == "srun" else 1)
    used = sb.ntasks_per_node * sb.cpus_per_task
    share = nt.cpus * gpus / nt.gpus
    assert used <= share and share - used < sb.ntasks_per_node, (used, share)
    assert "#SBATCH --cpus-per-task=%d\n" % sb.cpus_per_task in g.script


def test_the_users_cpus_per_task_is_kept():
    site = load_site(str(preset_dir() / "dgx-h100.yaml"))
    spec = JobSpec(launcher="srun", nodes=1, parallel={"tp": 1}, cpus_per_task=3, command=("train.py",))
    g = J.generate(site, spec, J.search_path(None, None, site))
    assert g.request.sbatch.cpus_per_task == 3 and "#SBATCH --cpus-per-task=3\n" in g.script
