"""bench/submit_bench.py's filters that stop part-way (--parts): they must load, let the bench
prove each switch (reject its short probe) and accept the bench's script, or the split of the
controller's time they measure means nothing."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import lupa.lua51 as lupa51
import pytest

from slurmgpu.policy import lua_dir, part_list, render_filter
from slurmgpu.site import load_site
from slurmgpu.slurm import job_desc

ROOT = Path(__file__).resolve().parents[1]


def _bench():
    spec = importlib.util.spec_from_file_location("slurmgpu_submit_bench", ROOT / "bench" / "submit_bench.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def _submit(text: str, script: str, parts):
    rt = lupa51.LuaRuntime(unpack_returned_tuples=True)
    rt.execute((lua_dir() / "slurm_stub.lua").read_text())
    rt.execute(text)
    desc = job_desc(script, [], env={"PATH": "/usr/bin"}, script_path="job.sh", user="root", uid=0)
    rc, _, log, _ = rt.eval("slurmgpu_stub.submit")(
        rt.table_from(dict(desc), recursive=True), rt.table_from(parts, recursive=True), 0
    )
    return int(rc), [log[i] for i in range(1, len(log) + 1)]


def test_part_filters_prove_their_switch_and_accept_the_bench_script():
    bench = _bench()
    site = load_site(str(bench.SITE_FILE))
    full = render_filter(site, "job_submit")
    parts = part_list(site)
    script = "#!/bin/bash\n#SBATCH -N2 --gpus-per-node=8 -p gpu\n" + "srun python pretrain_gpt.py %s\n" % " ".join(
        bench.MEGATRON_ARGS[1:]
    )
    assert len(script) > 200 > len(bench.PROBE)
    assert _submit(full, bench.PROBE, parts)[0] == 2072  # the real filter rejects the probe too
    made = bench.part_filters(full)
    assert sorted(made) == sorted(bench.PART_BODIES)
    for name, text in made.items():
        assert _submit(text, bench.PROBE, parts)[0] == 2072, name
        rc, log = _submit(text, script, parts)
        assert rc == 0, name
        assert len(log) == (1 if name == "fields+log-line" else 0), (name, log)


def test_part_filters_refuse_a_filter_without_the_submit_function():
    with pytest.raises(SystemExit, match="--parts"):
        _bench().part_filters("-- not a slurmgpu job_submit.lua\n")


def test_compare_rev_renders_the_filter_of_a_revision():
    bench = _bench()
    site = load_site(str(bench.SITE_FILE))
    text = bench.render_at_rev("HEAD")
    assert "function slurm_job_submit" in text
    assert _submit(text, bench.PROBE, part_list(site))[0] == 2072
    with pytest.raises(SystemExit, match="no-such-rev"):
        bench.render_at_rev("no-such-rev")


def _submit_desc(text: str, desc, parts, uid: int = 1000):
    rt = lupa51.LuaRuntime(unpack_returned_tuples=True)
    rt.execute((lua_dir() / "slurm_stub.lua").read_text())
    rt.execute(text)
    rc, msgs, log, _ = rt.eval("slurmgpu_stub.submit")(
        rt.table_from(dict(desc), recursive=True), rt.table_from(parts, recursive=True), uid
    )
    return int(rc), [log[i] for i in range(1, len(log) + 1)]


def test_the_mix_keeps_the_helios_shares_and_every_job_is_of_its_class():
    """--mix: a batch of 40 has the Helios trace's shares (72.2% one GPU, 22.5% one node, 5.3% several
    nodes, rounded: 29/9/2), spread out; every job is accepted by slurmgpu on the test cluster, and
    slurmctld's job_submit decides the one-node jobs from their fields (source=single-node) and reads
    the multi-node ones whole."""
    bench = _bench()
    plan = bench.mix_plan(40)
    assert [plan.count(c) for c, _ in bench.HELIOS_SHARES] == [29, 9, 2]
    multi = [i for i, c in enumerate(plan) if c == "multi-node"]
    assert "single-node" in plan[:10] and multi[1] - multi[0] >= 10, plan  # spread out, not in runs
    assert abs(sum(share for _, share in bench.HELIOS_SHARES) - 1.0) < 1e-9
    site = load_site(str(bench.SITE_FILE))
    text, parts = render_filter(site, "job_submit"), part_list(site)
    seen = set()
    for batch in range(3):  # each batch goes on through the scripts of each class
        for cls, script, args in bench.mix_jobs(40, batch):
            seen.add(script)
            rc, log = _submit_desc(text, job_desc(script, args, script_path="job.sh", user="bob", uid=1000), parts)
            assert rc == 0, (cls, script[:80], log)
            line = [x for x in log if "slurmgpu-filter:" in x][0]
            assert ("source=single-node" in line) == (cls != "multi-node"), (cls, line)
    assert len(seen) == sum(len(v) for v in bench.MIX.values())


PRODUCTION_DIR = Path(__import__("os").environ.get("SLURMGPU_PRODUCTION_FILTERS", "/nonexistent"))


@pytest.mark.skipif(
    not PRODUCTION_DIR.is_dir(),
    reason="set SLURMGPU_PRODUCTION_FILTERS to a dir fetched by bench/fetch_production_filters.sh",
)
def test_production_filters_load_adapted_accept_the_workloads_and_refuse_the_probe(tmp_path):
    """--production: each adapted filter loads on the stub, accepts every job of both workloads (so all
    filters measure the same submissions) and refuses the probe with the bench's comment."""
    bench = _bench()
    texts, files = bench.production_filters(PRODUCTION_DIR, tmp_path)
    for name, body in files.items():
        (tmp_path / name).write_text(body)
    site = load_site(str(bench.SITE_FILE))
    parts = part_list(site)
    jobs = [(script, args) for _, script, args in bench.mix_jobs(40)] + [(bench.generate_script(), [bench.MEM])]
    for name, text in texts.items():
        for script, args in jobs:
            rc, log = _submit_desc(text, job_desc(script, args, script_path="job.sh", user="bob", uid=1000), parts)
            assert rc == 0, (name, script[:80], log)
        probe = dict(job_desc(bench.PROBE, [], script_path="job.sh", user="bob", uid=1000), comment=bench.PROBE_COMMENT)
        assert _submit_desc(text, probe, parts)[0] == 2072, name
