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
