"""Router and disaggregated serving: the planner's figures recomputed from first principles, the
placement and ports the script gets, and the refusals (issue 32). The scripts' runs are in
tests/test_e2e_serving.py, the engines' and routers' parsers in tests/test_contract_serving_modes.py."""

from __future__ import annotations

import re
import subprocess
from dataclasses import replace

import pytest

from slurmgpu.errors import ConfigError, PlanError
from slurmgpu.job import JobSpec, generate
from slurmgpu.job.templates import search_path
from slurmgpu.plan import get_model
from slurmgpu.plan.memory import usable_gb
from slurmgpu.plan.serving import ERROR_BAND, Workload, format_serve_plan, place, plan_serving
from slurmgpu.site import load_site, preset_dir


def site(name: str):  # type: ignore[no-untyped-def]
    return load_site(str(preset_dir() / (name + ".yaml")))


def gen(preset: str, **kw: object):  # type: ignore[no-untyped-def]
    s = site(preset)
    spec = JobSpec(**dict(dict(weights="org/m", time="01:00:00"), **kw))  # type: ignore[arg-type]
    return generate(s, spec, search_path(None, None, s))


def test_kv_pool_is_what_the_weights_leave_counted_in_tokens_and_requests() -> None:
    """Llama 3.1 70B on H100: per GPU, usable memory - weights - working set = KV pool; one token's
    KV is 2 (K, V) x 80 layers x 8 KV heads x 128 x 2 bytes / TP, recomputed here from the shape."""
    m = get_model("llama3.1-70b")
    sp = plan_serving(site("dgx-h100"), m, Workload(1024, 1024), "router", nodes=1)
    r = sp.chosen.roles[0]
    w = r.worker
    assert abs(w.kv_pool_gb - (usable_gb(80) - w.weights_gb - w.work_gb)) < 1e-9
    per_token = 2 * 80 * 8 * 128 * 2 / w.tp
    assert w.kv_tokens == int(w.kv_pool_gb * 1e9 / per_token)
    assert w.kv_seqs == w.kv_tokens // 2048
    assert abs(w.weights_gb - 2 * m.params / w.tp / 1e9) / w.weights_gb < 0.02  # bf16, split over TP
    # the router replicas fill the node: 8 GPUs / TP
    assert r.count * w.gpus == 8


def test_decode_is_bounded_by_hbm_and_prefill_by_compute() -> None:
    m = get_model("llama3.1-8b")
    sp = plan_serving(site("dgx-h100"), m, Workload(2048, 256, concurrency=64), "disaggregated", nodes=1)
    dec = sp.chosen.role("decode")
    pre = sp.chosen.role("prefill")
    assert dec is not None and pre is not None
    # one decode step reads the weights and every request's KV at least once from HBM (3.35 TB/s)
    kv = 2 * 32 * 8 * 128 * 2 * dec.batch * (2048 + 128) / dec.worker.tp
    floor_s = (dec.worker.weights_gb * 1e9 + kv) / 3.35e12
    assert dec.decode_step_s >= floor_s * 0.99
    # a prompt costs at least its forward FLOPs (2 x params x tokens) at the H100's 989 TFLOP/s
    assert pre.worker.prefill_s >= 2 * m.active_params * 2048 / (989e12 * pre.worker.tp)
    assert "compute-bound" in pre.why and "HBM bandwidth" in dec.why
    assert sp.chosen.tpot_s == dec.decode_step_s  # a decode worker never prefills


def test_modes_are_compared_on_the_same_nodes_and_the_band_is_unvalidated() -> None:
    m = get_model("llama3.1-70b")
    sp = plan_serving(site("dgx-h100"), m, Workload(), "disaggregated", nodes=2)
    assert {d.mode for d in sp.compared} >= {"router", "disaggregated"}
    assert all(d.nodes == 2 and d.gpus <= 16 for d in sp.compared)
    text = format_serve_plan(sp)
    assert "unvalidated until measured" in text and sp.error_band == ERROR_BAND
    assert "<- chosen" in text


def test_nvl72_pairs_share_a_domain_and_move_kv_over_nvlink() -> None:
    m = get_model("llama3.1-70b")
    nvl = plan_serving(site("gb200-nvl72"), m, Workload(), "disaggregated", nodes=4)
    assert nvl.chosen.kv_over_nvlink and "NVLink" in " ".join(nvl.chosen.notes)
    h100 = plan_serving(site("dgx-h100"), m, Workload(), "disaggregated", nodes=2)
    assert not h100.chosen.kv_over_nvlink
    g = gen("gb200-nvl72", launcher="sglang", model="llama3.1-70b", serve="disaggregated", nodes=4)
    assert "#SBATCH --segment=4\n" in g.script and "UCX_CUDA_IPC_ENABLE_MNNVL=y" in g.script


def test_pp_only_when_no_tp_worker_holds_the_model() -> None:
    ds = get_model("deepseek-v3")
    h100 = plan_serving(site("dgx-h100"), ds, Workload(), "router", precision="fp8")
    assert [(r.worker.tp, r.worker.pp) for r in h100.chosen.roles] == [(8, 2)]
    h200 = plan_serving(site("dgx-h200"), ds, Workload(), "router", precision="fp8")
    assert all(r.worker.pp == 1 for r in h200.chosen.roles)


def test_place_packs_workers_on_nodes_in_order() -> None:
    spots, used = place([(4, 3), (8, 1), (16, 1), (2, 2)], 8)
    assert spots == [(0, 1, 0), (0, 1, 4), (1, 1, 0), (2, 1, 0), (3, 2, 0), (5, 1, 0), (5, 1, 2)]
    assert used == 6


def test_router_script_gives_each_worker_its_gpus_ports_and_a_health_wait() -> None:
    g = gen("dgx-h100", launcher="vllm", model="llama3.1-70b", serve="router", nodes=2)
    serve = g.request.serve
    assert serve is not None and serve.mode == "router"
    names = [w.name for w in serve.workers]
    assert names == ["replica-%d" % i for i in range(len(names))]
    # two TP=4 replicas per node: GPUs 0-3 and 4-7, placed by one loop over index:node:nodes:GPUs
    assert "SLURMGPU_PLACES=(0:0:1:0+1+2+3 1:0:1:4+5+6+7 2:1:1:0+1+2+3 3:1:1:4+5+6+7)" in g.script
    assert 'env CUDA_VISIBLE_DEVICES="$SLURMGPU_VISIBLE"' in g.script
    assert g.script.count("vllm serve") == 1  # one line for the role, not one per worker
    wait = g.script.index('slurmgpu_wait_ready "${SLURMGPU_NAMES[$i]}"')
    assert g.script.index("slurmgpu_started") < wait < g.script.index("# vllm-router on the first node")
    assert g.script.index("slurmgpu_wait_ready router") < g.script.index('echo "slurmgpu: serving at')
    assert "vllm-router \\\n    --host 0.0.0.0" in g.script and '"${SLURMGPU_ROUTER_ARGS[@]}" &' in g.script
    assert g.verdict is not None
    r = subprocess.run(["bash", "-n"], input=g.script, text=True, capture_output=True)
    assert r.returncode == 0, r.stderr


def test_disaggregated_kv_nic_is_the_compute_hcas_never_storage_or_management() -> None:
    g = gen("dgx-h100", launcher="sglang", model="llama3.1-70b", serve="disaggregated", nodes=2, kv_transfer="mooncake")
    hcas = "mlx5_0,mlx5_3,mlx5_4,mlx5_5,mlx5_6,mlx5_9,mlx5_10,mlx5_11"
    assert "export UCX_NET_DEVICES=%s,lo  #" % ",".join(h + ":1" for h in hcas.split(",")) in g.script
    assert "--disaggregation-ib-device %s" % hcas in g.script
    assert "--disaggregation-transfer-backend mooncake" in g.script
    for other in ("mlx5_1", "mlx5_2", "mlx5_7", "mlx5_8", "bond0"):
        assert not re.search(r"(UCX_NET_DEVICES|ib-device)\S* \S*\b%s\b" % other, g.script)


def test_refusals_name_the_fix() -> None:
    with pytest.raises(PlanError, match="no checked KV-transfer recipe for efa"):
        gen("aws-p5", launcher="vllm", model="llama3.1-8b", serve="disaggregated")
    assert gen("aws-p5", launcher="vllm", model="llama3.1-8b", serve="router").request.serve is not None
    with pytest.raises(ConfigError, match="needs a serving engine"):
        gen("dgx-h100", launcher="torchrun", model="llama3.1-8b", serve="router", command=("train.py",))
    with pytest.raises(ConfigError, match="drop the pinned tp"):
        gen("dgx-h100", launcher="vllm", model="llama3.1-8b", serve="router", parallel={"tp": 2})
    with pytest.raises(ConfigError, match="Mooncake's flags for SGLang only"):
        gen("dgx-h100", launcher="vllm", model="llama3.1-8b", serve="disaggregated", kv_transfer="mooncake")
    with pytest.raises(ConfigError, match="shorter than input_len"):
        gen("dgx-h100", launcher="vllm", model="llama3.1-8b", serve="router", seq=1024)
    with pytest.raises(ConfigError, match="serving job runs until"):
        gen("dgx-h100", launcher="vllm", model="llama3.1-8b", serve="router", requeue=True)


def test_a_user_flag_that_the_plan_sets_is_refused_for_every_worker() -> None:
    with pytest.raises(ConfigError, match="--port"):
        gen("dgx-h100", launcher="sglang", model="llama3.1-8b", serve="router", args=("--port", "9000"))
    g = gen("dgx-h100", launcher="sglang", model="llama3.1-8b", serve="router", args=("--mem-fraction-static", "0.8"))
    assert g.script.count("--mem-fraction-static 0.8") == 1  # on the role's one line, for all its workers
    assert all("--mem-fraction-static" in w.argv for w in g.request.serve.workers)  # type: ignore[union-attr]


def test_rate_sizes_the_fewest_nodes_that_serve_it() -> None:
    m = get_model("llama3.1-8b")
    low = plan_serving(site("dgx-h100"), m, Workload(rate=5.0), "router")
    high = plan_serving(site("dgx-h100"), m, Workload(rate=400.0), "router")
    assert low.chosen.nodes < high.chosen.nodes and high.chosen.requests_per_s >= 400.0
    d = plan_serving(site("dgx-h100"), m, Workload(rate=400.0), "disaggregated")
    assert d.chosen.requests_per_s >= 400.0 * 0.95
    with pytest.raises(PlanError, match="--rate must be a positive number"):
        plan_serving(site("dgx-h100"), m, replace(Workload(), rate=-1.0), "router")


def test_check_explains_a_serving_jobs_groups(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from click.testing import CliRunner

    from slurmgpu.cli import main

    g = gen("dgx-h100", launcher="sglang", model="llama3.1-70b", serve="disaggregated", nodes=2)
    path = tmp_path / "serve.sh"
    path.write_text(g.script)
    r = CliRunner().invoke(main, ["check", str(path), "--site", "dgx-h100"])
    assert r.exit_code == 0, r.output
    roles = g.request.serve.role_counts()  # type: ignore[union-attr]
    lines = [x for x in r.output.splitlines() if x.startswith("serving group:")]
    assert [x.split(": ", 1)[1].split(" worker")[0] for x in lines] == ["%d %s" % (n, role) for role, n, _, _ in roles]
    assert all("TP inside one NVLink domain" in x for x in lines)
    # a worker line that claims a TP the domain cannot hold is called out
    path.write_text(g.script.replace("role=decode tp=4", "role=decode tp=16", 1))
    r = CliRunner().invoke(main, ["check", str(path), "--site", "dgx-h100"])
    assert "TP NOT inside one NVLink domain" in r.output


def test_plan_and_gen_json_carry_the_serving_plan() -> None:
    import json

    from click.testing import CliRunner

    from slurmgpu.cli import main

    r = CliRunner().invoke(
        main,
        ["plan", "--model", "llama3.1-70b", "--task", "inference", "--serve", "disaggregated", "--nodes", "2",
         "--input-len", "2048", "--output-len", "256", "--site", "dgx-h100", "--json"],
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)["serving"]
    assert out["mode"] == "disaggregated" and out["workload"]["input_len"] == 2048
    roles = {x["role"]: x for x in out["deployment"]["roles"]}
    assert set(roles) == {"prefill", "decode"} and roles["decode"]["kv_requests_per_worker"] > 0
    assert {d["mode"] for d in out["compared"]} == {"aggregated", "router", "disaggregated"}
    assert out["error_band"].startswith("unvalidated until measured")
    g = gen("dgx-h100", launcher="vllm", model="llama3.1-8b", serve="router", nodes=1)
    assert g.to_dict()["serving"]["mode"] == "router" and g.to_dict()["request"]["serve"]["mode"] == "router"


def test_serving_scripts_pass_bash_n_and_shellcheck_in_every_container(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Router and disaggregated scripts with each runtime, multi-node workers (PP over nodes), NVL72,
    AMD, and user values that need quoting: bash -n and shellcheck (style) accept every one."""
    import shutil

    from slurmgpu.job import ContainerSpec

    containers = {
        "none": ContainerSpec(runtime="none"),
        "pyxis": ContainerSpec(runtime="pyxis", image="nvcr.io#nvidia/vllm:26.01-py3", mounts=("/data:/data",)),
        "apptainer": ContainerSpec(runtime="apptainer", image="/images/serve it.sif", mounts=("/scratch:/scratch",)),
    }
    cases = [
        ("dgx-h100", "llama3.1-70b", "bf16", 2),
        ("dgx-h100", "deepseek-v3", "fp8", 4),  # TP8 x PP2 workers over two nodes each
        ("gb200-nvl72", "llama3.1-70b", "bf16", 4),
        ("hgx-h100-roce", "mixtral-8x7b", "bf16", 2),
    ]
    files = []
    for preset, model, prec, nodes in cases:
        for engine in ("vllm", "sglang"):
            for mode in ("router", "disaggregated"):
                for name, c in containers.items():
                    g = gen(
                        preset, launcher=engine, model=model, precision=prec, serve=mode, nodes=nodes, container=c,
                        weights="org/it's model", args=("--note", "it's $HOME"), env={"HF_HOME": "/a b"},
                    )  # fmt: skip
                    path = tmp_path / ("%s-%s-%s-%s-%s.sh" % (preset, model, engine, mode, name))
                    path.write_text(g.script)
                    files.append(str(path))
    amd = gen("lumi-g", launcher="vllm", model="llama3.1-8b", serve="router", nodes=1)
    assert "HIP_VISIBLE_DEVICES=" in amd.script
    (tmp_path / "amd.sh").write_text(amd.script)
    files.append(str(tmp_path / "amd.sh"))
    for f in files:
        r = subprocess.run(["bash", "-n", f], capture_output=True, text=True)
        assert r.returncode == 0, (f, r.stderr)
    if not shutil.which("shellcheck"):
        pytest.skip("shellcheck not installed (make deps installs it)")
    r = subprocess.run(["shellcheck", "--severity=style", "--format=gcc"] + files, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout[:4000]


def test_a_serving_deployment_claims_no_single_server_binding() -> None:
    """One server's CPU/NUMA binding (SGLang --numa-node for GPUs 0-7) is not a worker's on GPUs 4-7:
    the deployment neither writes it nor has preflight check it."""
    g = gen("dgx-h100", launcher="sglang", model="llama3.1-70b", serve="router", nodes=2)
    assert g.request.binding is None
    assert "--numa-node" not in g.script and "CPU/NUMA binding" not in g.script and "--ranks sglang" not in g.script
    one = gen("dgx-h100", launcher="sglang", model="llama3.1-70b", nodes=1)
    assert one.request.binding is not None  # the aggregated server keeps its binding


def test_workers_kv_pool_is_the_engines_own_preallocation() -> None:
    """The worker's KV pool is what each engine's rule leaves (issue 34's profiles, plan/profile.py):
    vLLM takes gpu_memory_utilization 0.92 of the GPU for everything, SGLang mem_fraction_static for
    weights and KV; the serving planner reads them from the same memory terms, not its own formula."""
    from slurmgpu.job.launchers import get_launcher, memory_profile
    from slurmgpu.plan.memory import inference_memory

    m = get_model("llama3.1-70b")
    for engine in ("vllm", "sglang"):
        g = gen("dgx-h100", launcher=engine, model="llama3.1-70b", serve="router", nodes=1)
        w = g.sizing.serve.chosen.roles[0].worker  # type: ignore[union-attr]
        prof = memory_profile(get_launcher(engine), "bf16", (), m)
        assert prof.serve is not None
        mb = inference_memory(m, w.tp, w.pp, 1, 1, 2048, "bf16", profile=prof, capacity_gb=80, gpu="H100-SXM5-80GB")
        assert abs(w.kv_pool_gb - mb.kv_pool) < 1e-9 and mb.kv_pool > 0
        if engine == "vllm":
            assert abs(mb.reserved - 0.92 * 80) < 1e-6


def test_a_large_deployment_stays_inside_the_filters_budget() -> None:
    """192 replicas (24 nodes of TP=1) pass the site's submit filter: one line per role and a loop,
    not one block per worker (unrolled, 48 replicas already ran out of the filter's work budget)."""
    g = gen("dgx-h100", launcher="sglang", model="llama3.1-8b", serve="router", nodes=24)
    assert len(g.request.serve.workers) == 192 and g.verdict is not None  # type: ignore[union-attr]
    assert len(g.script) < 32 * 1024
    with pytest.raises(ConfigError, match="200 workers need more ports"):
        gen("dgx-h100", launcher="sglang", model="llama3.1-8b", serve="router", nodes=25)


def test_a_deployment_wider_than_the_partition_names_the_load_and_the_way_out() -> None:
    """Sized on its own (no --nodes), a deployment that needs more nodes than the partition allows is
    refused with the load it was sized for and the --nodes that fits; the user never passed --nodes,
    so "--nodes 6 exceeds" (the old words) pointed at nothing they wrote."""
    with pytest.raises(
        PlanError, match=r"needs 6 nodes for the default 128 requests in flight, but partition gpu allows 4"
    ):
        gen("rtx-4090", launcher="sglang", model="llama3.1-70b", serve="disaggregated")
    g = gen("rtx-4090", launcher="sglang", model="llama3.1-70b", serve="disaggregated", nodes=4)
    assert g.request.serve is not None and g.request.serve.mode == "disaggregated"
    g = gen("rtx-4090", launcher="sglang", model="llama3.1-70b", serve="disaggregated", concurrency=16)
    assert g.request.serve is not None and g.request.layout.nodes <= 4


@pytest.mark.parametrize("engine", ["sglang", "vllm"])
def test_the_routers_metrics_port_is_inside_the_jobs_block_and_not_its_own_port(engine: str) -> None:
    """sglang-router and vllm-router both open a Prometheus listener on port 29000 unless told
    otherwise (--prometheus-port, default 29000 in their router_args.py). That is the router's own
    port for a job whose id ends in 9 (block 20000 + 9 x 1000: the router panics "Address already in
    use" at start), and any second router on the node collides too. The script gives it a port of
    the job's block, in every block different from the router's and the workers' ports."""
    g = gen("dgx-h100", launcher=engine, model="llama3.1-8b", serve="router")
    serve = g.request.serve
    assert serve is not None
    argv = [str(a) for a in serve.router.argv]
    assert "--prometheus-port" in argv
    var = re.fullmatch(r"\$\{(SLURMGPU_\w+)\}", argv[argv.index("--prometheus-port") + 1])
    assert var is not None
    m = re.search(r"^%s=\$\(\(SLURMGPU_PORT0 \+ (\d+)\)\)$" % var.group(1), g.script, re.M)
    assert m is not None, "the script never sets %s" % var.group(1)
    offset = int(m.group(1))
    used = {serve.router.port} | {w.port for w in serve.workers} | {w.side for w in serve.workers}
    assert 0 < offset < serve.port_span and offset not in used
