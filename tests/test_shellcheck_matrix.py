"""Every preset x partition x launcher x container renders a script that bash and shellcheck accept.

The scripts are rendered in-process (fast), then checked with `bash -n` and with
shellcheck in two batches run side by side (shellcheck is the slow part; many files
per call amortise its start-up). The only directive in the scripts is the file-wide
`disable=SC2016`, explained in its own line: single quotes there are deliberate.
"""

from __future__ import annotations

import subprocess
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

import pytest

from slurmgpu import job as J
from slurmgpu.job import NAMES, ContainerSpec, JobSpec
from slurmgpu.plan import get_model
from slurmgpu.site import load_site, preset_dir, preset_names
from tests import programs

CONTAINERS = {
    "none": ContainerSpec(runtime="none"),
    "pyxis": ContainerSpec(runtime="pyxis", image="nvcr.io#nvidia/pytorch:24.04-py3", mounts=("/data:/data",)),
    "apptainer": ContainerSpec(runtime="apptainer", image="/images/train image.sif", mounts=("/scratch:/scratch",)),
}
# The variant run of each case names a registry image in the other runtime's spelling, so the
# translated reference (docker://... for Apptainer, REGISTRY#... for pyxis) is checked too; AMD
# sites get ROCm builds (a CUDA image there is an error).
VARIANT_IMAGE = {
    ("pyxis", "nvidia"): "nvcr.io/nvidia/pytorch:24.04-py3",
    ("apptainer", "nvidia"): "nvcr.io#nvidia/pytorch:24.04-py3",
    ("pyxis", "amd"): "docker.io/rocm/pytorch:rocm6.1_ubuntu22.04_py3.10_pytorch_2.1.2",
    ("apptainer", "amd"): "rocm/pytorch:rocm6.1_ubuntu22.04_py3.10_pytorch_2.1.2",
}
BASE_IMAGE_AMD = {"pyxis": "rocm/pytorch:latest"}
COMMAND = dict(
    programs.COMMAND,
    torchrun=("train.py", "--config", "cfg.yaml"),
    deepspeed=("train.py", "--epochs", "1"),
)


MEGATRON_INPUTS = dict(data="$SCRATCH/my corpus_text_document", tokenizer="/models/tok it's", train_iters=10, lr="3e-4")


def _spec(launcher, container, nodes, variant):
    return JobSpec(
        name="matrix %s" % launcher,
        launcher=launcher,
        nodes=nodes,
        command=COMMAND.get(launcher, ()),
        args=("--note", "it's $HOME") if variant else (),
        weights="org/model",
        container=CONTAINERS[container],
        requeue=bool(variant),
        checkpoint_dir="/scratch/ck pt" if variant else None,
        env={"WANDB_PROJECT": "a b"} if variant else {},
        preflight=not variant,
        time="01:00:00",
        sbatch=("--comment=#1",) if variant else (),
        # Megatron's training inputs: a smoke run, or (variant) real ones that need quoting
        smoke=launcher == "megatron" and not variant,
        **(MEGATRON_INPUTS if launcher == "megatron" and variant else {}),
        # NeMo and torchtitan refuse to run without a training length
        **({"train_iters": 10} if launcher in ("nemo", "torchtitan") else {}),
    )


def _cases():
    for name in preset_names():
        site = load_site(str(preset_dir() / (name + ".yaml")))
        for part in site.partitions:
            for i, launcher in enumerate(NAMES):
                for j, container in enumerate(CONTAINERS):
                    yield name, site, part, launcher, container, 2, (i + j) % 2
                yield name, site, part, launcher, "none", 1, 0


def _render(case, tmp_path):
    name, site, part, launcher, container, nodes, variant = case
    spec = replace(_spec(launcher, container, nodes, variant), partition=part)
    vendor = site.node_type_of(part).vendor
    if variant:
        image = VARIANT_IMAGE.get((container, vendor))
    else:
        image = BASE_IMAGE_AMD.get(container) if vendor == "amd" else None
    if image:
        spec = replace(spec, container=replace(spec.container, image=image))
    sizing = J.plan_layout(site, spec)
    if launcher == "megatron":  # with a model, so the model-shape arguments are rendered too
        sizing = J.Sizing(layout=sizing.layout, model=get_model("llama3.1-8b"))
    req, _ = J.build_request(site, spec, sizing, "slurmgpu gen matrix")
    text = J.render_request(req, J.search_path(None, None, site))
    path = tmp_path / ("%s-%s-%s-%s-%dn-%d.sh" % (name, part, launcher, container, nodes, variant))
    path.write_text(text)
    return str(path)


@pytest.mark.slow
def test_every_combination_passes_bash_n_and_shellcheck(tmp_path, monkeypatch):
    monkeypatch.setenv("SLURMGPU_CACHE_DIR", str(tmp_path / "cache"))
    files = [_render(c, tmp_path) for c in _cases()]
    sites = {c[0] for c in _cases()}
    assert sites == set(preset_names()) and len(files) >= len(sites) * len(NAMES) * 4

    def bash_n(path):
        r = subprocess.run(["bash", "-n", path], capture_output=True, text=True)
        return path, r.returncode, r.stderr

    with ThreadPoolExecutor(max_workers=2) as pool:
        bad = [(p, err) for p, rc, err in pool.map(bash_n, files) if rc != 0]
    assert bad == []

    def shellcheck(batch):
        return subprocess.run(
            ["shellcheck", "--severity=style", "--format=gcc"] + batch, capture_output=True, text=True
        )

    with ThreadPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(shellcheck, [files[0::2], files[1::2]]))
    report = "".join(r.stdout for r in results)
    assert all(r.returncode == 0 for r in results), report[:4000]


def test_each_fabric_kind_and_vendor_is_in_the_matrix():
    kinds = set()
    for name in preset_names():
        site = load_site(str(preset_dir() / (name + ".yaml")))
        for p in site.partitions.values():
            nt = site.node_types[p.node_type]
            kinds.add((nt.fabric, nt.vendor))
    assert {k for k, _ in kinds} >= {"infiniband", "roce", "efa", "slingshot", "ethernet"}
    assert ("slingshot", "amd") in kinds


def test_directives_are_explained():
    site = load_site(str(preset_dir() / "dgx-h100.yaml"))
    spec = _spec("vllm", "apptainer", 2, 1)
    req, _ = J.build_request(site, spec, J.plan_layout(site, spec), "x")
    text = J.render_request(req, J.search_path(None, None, site))
    directives = [ln for ln in text.splitlines() if ln.lstrip().startswith("# shellcheck")]
    assert directives == [
        "# shellcheck disable=SC2016 # single quotes in this script are deliberate: the text inside stays literal",
        "# shellcheck disable=SC2317 # the handler runs from the USR2 trap below, which shellcheck does not follow",
    ]  # the second: this variant has --requeue
    assert text.splitlines()[1].startswith("# slurmgpu: site=dgx-h100 ")
