"""One spec on several sites: `sites:` overrides, image references per runtime, `diff`, `plan` with a spec.

Unit tests for slurmgpu.images and spec.for_site, then the real CLI (CliRunner) in a
throw-away repo, and bash -n + shellcheck on what it renders. The worked example in
docs/gen.md is read from the document itself, so the docs stay true.
"""

from __future__ import annotations

import json
import re
import subprocess
import textwrap
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner

from slurmgpu import job as J
from slurmgpu.cli import main
from slurmgpu.errors import ConfigError
from slurmgpu.job import ContainerSpec, ImageError, JobSpec, for_site, load_spec, parse_image, spell
from slurmgpu.site import load_site, preset_dir

ROOT = Path(__file__).resolve().parent.parent
GEN_MD = ROOT / "docs" / "gen.md"


def preset(name):
    return load_site(str(preset_dir() / (name + ".yaml")))


@pytest.fixture
def repo(tmp_path, monkeypatch):
    (tmp_path / ".git").mkdir()
    monkeypatch.chdir(tmp_path)
    for var in ("SLURMGPU_SITE", "XDG_CONFIG_HOME"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("SLURMGPU_CACHE_DIR", "")
    monkeypatch.setenv("SLURMGPU_SYSTEM_SITE", str(tmp_path / "no-admin-site.yaml"))
    return tmp_path


def run(*args):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def write_spec(repo, text):
    path = repo / "slurmgpu.yaml"
    path.write_text(textwrap.dedent(text))
    return path


def sbatch(text, opt):
    return [ln for ln in text.splitlines() if ln.startswith("#SBATCH %s" % opt)]


def image_line(text):
    return next(ln for ln in text.splitlines() if ln.startswith("SLURMGPU_IMAGE="))


# ---------------------------------------------------------------------------
# Image references: one parse, each runtime's spelling


@pytest.mark.parametrize(
    "written, pyxis, apptainer",
    [
        (
            "nvcr.io#nvidia/pytorch:24.04-py3",
            "nvcr.io#nvidia/pytorch:24.04-py3",
            "docker://nvcr.io/nvidia/pytorch:24.04-py3",
        ),
        (
            "nvcr.io/nvidia/pytorch:24.04-py3",
            "nvcr.io#nvidia/pytorch:24.04-py3",
            "docker://nvcr.io/nvidia/pytorch:24.04-py3",
        ),
        (
            "docker://nvcr.io/nvidia/pytorch:24.04-py3",
            "nvcr.io#nvidia/pytorch:24.04-py3",
            "docker://nvcr.io/nvidia/pytorch:24.04-py3",
        ),
        (
            "docker://nvcr.io#nvidia/pytorch:24.04-py3",
            "nvcr.io#nvidia/pytorch:24.04-py3",
            "docker://nvcr.io/nvidia/pytorch:24.04-py3",
        ),
        ("pytorch/pytorch:2.5.1-devel", "pytorch/pytorch:2.5.1-devel", "docker://pytorch/pytorch:2.5.1-devel"),
        ("docker.io/library/ubuntu:22.04", "library/ubuntu:22.04", "docker://docker.io/library/ubuntu:22.04"),
        ("ubuntu", "ubuntu", "docker://ubuntu"),
        ("localhost:5000/team/img:v1", "localhost:5000#team/img:v1", "docker://localhost:5000/team/img:v1"),
        (
            "ghcr.io/org/img@sha256:" + "a" * 64,
            "ghcr.io#org/img@sha256:" + "a" * 64,
            "docker://ghcr.io/org/img@sha256:" + "a" * 64,
        ),
        ("/images/train.sqsh", "/images/train.sqsh", None),
        ("/images/train.sif", None, "/images/train.sif"),
        ("$SCRATCH/images/train.sif", None, "$SCRATCH/images/train.sif"),
        ("/images/sandbox-dir", "/images/sandbox-dir", "/images/sandbox-dir"),
        ("oras://ghcr.io/org/img.sif:v1", None, "oras://ghcr.io/org/img.sif:v1"),
        ("library://lolcow", None, "library://lolcow"),
    ],
)
def test_one_reference_in_each_runtimes_spelling(written, pyxis, apptainer):
    for runtime, want in (("pyxis", pyxis), ("apptainer", apptainer)):
        if want is None:
            with pytest.raises(ImageError) as exc:
                spell(written, runtime, "some-site", "nvidia")
            assert written in str(exc.value) and "some-site" in str(exc.value)
        else:
            assert spell(written, runtime, "some-site", "nvidia") == want


def test_parse_keeps_the_parts():
    ref = parse_image("nvcr.io/nvidia/pytorch:24.04-py3")
    assert (ref.kind, ref.registry, ref.path, ref.tag, ref.digest) == (
        "registry",
        "nvcr.io",
        "nvidia/pytorch",
        "24.04-py3",
        None,
    )
    assert parse_image("/x/y.sif").file_format == "sif" and parse_image("/x/y.sqsh").file_format == "squashfs"
    with pytest.raises(ImageError, match="cannot read"):
        parse_image("nvcr.io#nvidia/pytorch:")


def test_file_of_the_other_runtime_is_an_error_naming_both():
    with pytest.raises(ImageError) as exc:
        spell("/images/train.sif", "pyxis", "dgx-h100", "nvidia")
    msg = str(exc.value)
    assert "/images/train.sif" in msg and "SIF" in msg and "dgx-h100" in msg and "pyxis" in msg and ".sqsh" in msg
    with pytest.raises(ImageError) as exc:
        spell("/images/train.sqsh", "apptainer", "lumi-g", "amd")
    msg = str(exc.value)
    assert "/images/train.sqsh" in msg and "squashfs" in msg and "lumi-g" in msg and "Apptainer" in msg


@pytest.mark.parametrize(
    "image, stack",
    [
        ("nvcr.io#nvidia/pytorch:24.04-py3", "cuda"),
        ("nvidia/cuda:12.4.1-devel-ubuntu22.04", "cuda"),
        ("pytorch/pytorch:2.5.1-cuda12.4-cudnn9-devel", "cuda"),
        ("/appl/torch-cu121.sif", "cuda"),
        ("rocm/pytorch:rocm6.1_ubuntu22.04_py3.10_pytorch_2.1.2", "rocm"),
        ("/appl/lumi-pytorch-rocm-6.1.sif", "rocm"),
        ("ubuntu:22.04", None),
        ("/appl/sglang.sif", None),
        ("docs/cudatoolkit-and-rocm:1", None),
    ],
)
def test_gpu_stack_from_the_name(image, stack):
    assert parse_image(image).gpu_stack() == stack


def test_cuda_image_on_amd_and_rocm_image_on_nvidia_are_errors_naming_both():
    with pytest.raises(ImageError) as exc:
        spell("nvcr.io#nvidia/pytorch:24.04-py3", "apptainer", "lumi-g", "amd", "MI250X-GCD-64GB")
    msg = str(exc.value)
    assert (
        "nvcr.io#nvidia/pytorch:24.04-py3" in msg
        and "CUDA" in msg
        and "lumi-g" in msg
        and "AMD" in msg
        and "MI250X" in msg
        and "ROCm" in msg
    )
    with pytest.raises(ImageError) as exc:
        spell("rocm/pytorch:latest", "pyxis", "dgx-h100", "nvidia", "H100")
    msg = str(exc.value)
    assert "rocm/pytorch:latest" in msg and "ROCm" in msg and "dgx-h100" in msg and "NVIDIA" in msg
    assert spell("ubuntu:22.04", "apptainer", "lumi-g", "amd") == "docker://ubuntu:22.04"


# ---------------------------------------------------------------------------
# The renderer: the image the templates see


def render_spec(site, spec):
    req, warnings = J.build_request(site, spec, J.plan_layout(site, spec), "slurmgpu gen test")
    return J.render_request(req, J.search_path(None, None, site)), req, warnings


def _spec(**kw):
    return JobSpec(**dict(dict(launcher="torchrun", nodes=2, command=("train.py",)), **kw))


def test_apptainer_gets_the_docker_uri_and_pyxis_the_hash_form():
    spec = _spec(container=ContainerSpec(runtime="apptainer", image="nvcr.io#nvidia/pytorch:24.04-py3"))
    text, req, _ = render_spec(preset("dgx-h100"), spec)
    assert req.container.image == "docker://nvcr.io/nvidia/pytorch:24.04-py3"
    assert image_line(text) == "SLURMGPU_IMAGE=docker://nvcr.io/nvidia/pytorch:24.04-py3"
    text, req, _ = render_spec(
        preset("dgx-h100"), _spec(container=ContainerSpec(image="nvcr.io/nvidia/pytorch:24.04-py3"))
    )
    assert image_line(text) == "SLURMGPU_IMAGE='nvcr.io#nvidia/pytorch:24.04-py3'"
    assert '--container-image="$SLURMGPU_IMAGE"' in text


def test_an_image_for_a_site_without_a_runtime_is_an_error_not_dropped(tmp_path):
    path = tmp_path / "slurmgpu.yaml"
    path.write_text(
        'launcher: torchrun\ncommand: [train.py]\nnodes: 2\ncontainer:\n  image: "nvcr.io#nvidia/pytorch:24.04-py3"\n'
    )
    spec = load_spec(str(path))
    with pytest.raises(ConfigError) as exc:
        render_spec(preset("perlmutter"), spec)
    msg = str(exc.value)
    assert msg.startswith("%s:5:3: container.image: " % path)
    assert "perlmutter" in msg and "nvcr.io#nvidia/pytorch:24.04-py3" in msg and "runtime: none" in msg
    # Saying so for that site (or --container none) runs it on the host, as asked.
    text, req, _ = render_spec(preset("perlmutter"), replace(spec, container=replace(spec.container, runtime="none")))
    assert req.container.runtime == "none" and "SLURMGPU_IMAGE" not in text


def test_cuda_image_on_lumi_is_refused_where_it_was_set(tmp_path):
    path = tmp_path / "slurmgpu.yaml"
    path.write_text(
        "launcher: torchrun\ncommand: [train.py]\nnodes: 2\ncontainer: {image: nvcr.io/nvidia/pytorch:24.04-py3}\n"
    )
    with pytest.raises(ConfigError) as exc:
        render_spec(preset("lumi-g"), load_spec(str(path)))
    msg = str(exc.value)
    assert msg.startswith("%s:4:13: container.image: " % path) and "lumi-g" in msg and "CUDA" in msg


# ---------------------------------------------------------------------------
# sites: in the spec

EXAMPLE = """\
    name: demo
    launcher: torchrun
    command: [train.py]
    nodes: 2
    account: top
    env: {A: top, B: top}
    sbatch: ["--mail-type=END"]
    parallel: {tp: 2}
    container:
      image: "nvcr.io#nvidia/pytorch:24.04-py3"
      mounts: ["/data:/data"]
    sites:
      perlmutter: {account: m1234_g, nodes: plan, time: 01:30:00, container: {runtime: none}}
      lumi-g:
        image: /appl/lumi-pytorch-rocm-6.1.sif
        partition: small-g
        env: {B: lumi, C: lumi}
        sbatch: ["--gpu-bind=closest"]
        parallel: {pp: 2}
        container: {mounts: ["/scratch:/scratch"]}
    """


def test_site_blocks_load_and_merge_like_flags(repo):
    spec = load_spec(str(write_spec(repo, EXAMPLE)))
    assert [o.site for o in spec.sites] == ["perlmutter", "lumi-g"]
    pm, warnings = for_site(spec, "perlmutter")
    assert warnings == () and pm.site_override == "perlmutter"
    assert pm.account == "m1234_g" and pm.nodes is None and pm.time == "01:30:00"  # unquoted flow-style time
    assert pm.container.runtime == "none" and pm.container.image == spec.container.image
    lumi, _ = for_site(spec, "lumi-g")
    assert lumi.account == "top" and lumi.partition == "small-g" and lumi.nodes == 2
    assert lumi.env == {"A": "top", "B": "lumi", "C": "lumi"}
    assert lumi.sbatch == ("--mail-type=END", "--gpu-bind=closest")
    assert lumi.parallel == {"tp": 2, "pp": 2}
    assert lumi.container.mounts == ("/data:/data", "/scratch:/scratch")
    assert lumi.container.image == "/appl/lumi-pytorch-rocm-6.1.sif"
    assert lumi.container.image_at[1:] == (15, 5, "sites.lumi-g.image")
    other, _ = for_site(spec, "dgx-h100")
    assert other == spec and other.site_override is None
    assert json.loads(json.dumps(spec.to_dict()["sites"]["lumi-g"]["container"])) == {
        "mounts": ["/scratch:/scratch"],
        "image": "/appl/lumi-pytorch-rocm-6.1.sif",
    }


@pytest.mark.parametrize(
    "block, at, field, words",
    [
        ("perlmutter: {acount: x}", "acount", "sites.perlmutter.acount", "did you mean 'account'"),
        ("perlmutter: {model: llama3-8b}", "model", "sites.perlmutter.model", "cannot differ per site"),
        ("perlmutter: {launcher: srun}", "launcher", "sites.perlmutter.launcher", "cannot differ per site"),
        ("perlmutter: {zzz: 1}", "zzz", "sites.perlmutter.zzz", "a site block may set weights, container"),
        ("perlmutter: {time: later}", "time", "sites.perlmutter.time", "expected a Slurm time limit"),
        ('perlmutter: {sbatch: ["--nodes=2"]}', '"--nodes', "sites.perlmutter.sbatch[0]", "written by slurmgpu"),
        ("perlmutter: {env: {1BAD: x}}", "1BAD", "sites.perlmutter.env.1BAD", "not a valid environment"),
        ("perlmutter: {container: {runtim: none}}", "runtim", "sites.perlmutter.container.runtim", "did you mean"),
        (
            "perlmutter: {container: {runtime: docker}}",
            "runtime",
            "sites.perlmutter.container.runtime",
            "must be one of",
        ),
        ("perlmutter: {image: a, container: {image: b}}", "image", "sites.perlmutter.image", "given twice"),
        ("perlmutter: [account]", "perlmutter", "sites.perlmutter", "expected a mapping"),
    ],
)
def test_site_block_mistakes_are_located(repo, block, at, field, words):
    """file:line:col of the offending key (or item), the field path under sites.<name>, and the fix."""
    line = "  %s" % block
    path = write_spec(repo, "launcher: torchrun\nsites:\n%s\n" % line)
    with pytest.raises(ConfigError) as exc:
        load_spec(str(path))
    got = str(exc.value)
    assert "%s:3:%d: %s: " % (path, line.index(at) + 1, field) in got and words in got, got


def test_a_typo_in_a_block_for_another_site_is_still_an_error(repo):
    path = write_spec(
        repo,
        """\
        launcher: torchrun
        sites:
          lumi-g: {partiton: small-g}
        """,
    )
    with pytest.raises(
        ConfigError,
        match=r"slurmgpu.yaml:3:12: sites.lumi-g.partiton: unknown key "
        r"\(did you mean 'partition'\?\)",
    ):
        load_spec(str(path))
    r = run("gen", "--site", "dgx-h100", "--", "train.py")
    assert r.exit_code == 2 and "sites.lumi-g.partiton" in r.stderr


def test_site_names_typo_is_an_error_unknown_name_a_warning(repo):
    spec = load_spec(
        str(
            write_spec(
                repo,
                """\
        launcher: torchrun
        sites:
          perlmuter: {account: x}
          my-own-cluster: {account: y}
        """,
            )
        )
    )
    with pytest.raises(ConfigError) as exc:
        for_site(spec, "dgx-h100")
    assert "slurmgpu.yaml:3:3: sites.perlmuter: no site is called 'perlmuter' (did you mean 'perlmutter'?)" in str(
        exc.value
    )
    spec = replace(spec, sites=spec.sites[1:])
    same, warnings = for_site(spec, "dgx-h100")
    assert same == spec and len(warnings) == 1
    assert "slurmgpu.yaml:4:3: sites.my-own-cluster: no built-in preset is called my-own-cluster" in warnings[0]
    mine, warnings = for_site(spec, "my-own-cluster")
    assert warnings == () and mine.account == "y"
    assert for_site(spec, "dgx-h100", known=["my-own-cluster"])[1] == ()


# ---------------------------------------------------------------------------
# gen: the block of the site in effect, under the flags

SPEC3 = """\
    name: demo
    launcher: torchrun
    command: [train.py]
    nodes: 2
    account: top
    container:
      image: nvcr.io/nvidia/pytorch:24.04-py3
    sites:
      perlmutter: {account: m1234_g, qos: debug, nodes: 4, container: {runtime: none}}
      lumi-g: {account: project_465000000, image: /appl/lumi-pytorch-rocm-6.1.sif, partition: small-g, nodes: 1}
    """


def test_gen_applies_the_block_of_the_site_in_effect_and_flags_win(repo):
    write_spec(repo, SPEC3)
    r = run("gen", "--site", "perlmutter")
    assert r.exit_code == 0, r.stderr
    assert sbatch(r.stdout, "--account") == ["#SBATCH --account=m1234_g"]
    assert sbatch(r.stdout, "--qos") == ["#SBATCH --qos=debug"] and sbatch(r.stdout, "--nodes") == ["#SBATCH --nodes=4"]
    assert "SLURMGPU_IMAGE" not in r.stdout
    assert "slurmgpu: sites.perlmutter from %s: account, qos, nodes, container" % (repo / "slurmgpu.yaml") in r.stderr
    r = run("gen", "--site", "perlmutter", "--account", "flag", "--nodes", "3")
    assert sbatch(r.stdout, "--account") == ["#SBATCH --account=flag"] and sbatch(r.stdout, "--nodes") == [
        "#SBATCH --nodes=3"
    ]
    r = run("gen", "--site", "dgx-h100")
    assert r.exit_code == 0, r.stderr
    assert sbatch(r.stdout, "--account") == ["#SBATCH --account=top"] and "sites." not in r.stderr
    assert image_line(r.stdout) == "SLURMGPU_IMAGE='nvcr.io#nvidia/pytorch:24.04-py3'"
    r = run("gen", "--site", "lumi-g")
    assert r.exit_code == 0, r.stderr
    assert image_line(r.stdout) == "SLURMGPU_IMAGE=/appl/lumi-pytorch-rocm-6.1.sif"
    assert sbatch(r.stdout, "--partition") == ["#SBATCH --partition=small-g"]
    r = run("gen", "--site", "lumi-g", "--image", "nvcr.io/nvidia/pytorch:24.04-py3")
    assert r.exit_code == 2 and "error: --image: image nvcr.io/nvidia/pytorch:24.04-py3 is a CUDA" in r.stderr


def test_gen_json_carries_the_blocks_and_the_one_applied(repo):
    write_spec(repo, SPEC3)
    r = run("gen", "--site", "lumi-g", "--json")
    d = json.loads(r.stdout)
    assert d["spec"]["site_override"] == "lumi-g" and set(d["spec"]["sites"]) == {"perlmutter", "lumi-g"}
    assert d["request"]["container"]["image"] == "/appl/lumi-pytorch-rocm-6.1.sif"


def test_generated_scripts_for_three_sites_pass_bash_and_shellcheck(repo):
    write_spec(repo, SPEC3)
    files = []
    for site in ("dgx-h100", "perlmutter", "lumi-g"):
        for extra in ((), ("--container", "apptainer")) if site == "dgx-h100" else ((),):
            out = repo / ("job-%s-%d.sh" % (site, len(extra)))
            r = run("gen", "--site", site, "-o", str(out), *extra)
            assert r.exit_code == 0, r.stderr
            files.append(str(out))
    assert "docker://nvcr.io/nvidia/pytorch:24.04-py3" in Path(files[1]).read_text()
    for f in files:
        subprocess.run(["bash", "-n", f], check=True)
    r = subprocess.run(["shellcheck", "--severity=style"] + files, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout


# ---------------------------------------------------------------------------
# diff


def test_diff_lines_up_two_sites_from_the_render_requests(repo):
    write_spec(repo, SPEC3)
    r = run("diff", "--site", "dgx-h100", "--site", "perlmutter", "--json")
    assert r.exit_code == 0, r.stderr
    d = json.loads(r.stdout)
    rows = {(x["section"], x["key"]): x for x in d["rows"]}
    assert d["sites"] == ["dgx-h100", "perlmutter"] and d["errors"] == [None, None]
    assert rows[("sbatch", "GPU request")]["values"] == ["--gpus-per-node=8", "--gpus-per-node=4"]
    assert rows[("sbatch", "--account")]["values"] == ["top", "m1234_g"]
    assert rows[("layout", "nodes")]["values"] == ["2", "4"]
    assert rows[("env", "NCCL_IB_HCA")]["values"][1] is None and rows[("env", "FI_PROVIDER")]["values"] == [None, "cxi"]
    assert rows[("container", "runtime")]["values"] == ["pyxis", "none"]
    assert rows[("container", "image")]["values"] == ["nvcr.io#nvidia/pytorch:24.04-py3", None]
    assert rows[("launch", "launcher")]["same"] and not rows[("layout", "nodes")]["same"]
    assert d["changed"] == sum(1 for x in d["rows"] if not x["same"])
    # Each column is exactly the request gen builds for that site.
    for i, site in enumerate(d["sites"]):
        g = json.loads(run("gen", "--site", site, "--json").stdout)["request"]
        want = dict(g, regen="")
        assert d["requests"][i] == want


def test_diff_text_side_by_side_and_all(repo):
    write_spec(repo, SPEC3)
    r = run("diff", "--site", "dgx-h100", "--site", "lumi-g")
    assert r.exit_code == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith("slurmgpu diff: dgx-h100 vs lumi-g (spec slurmgpu.yaml): ")
    head = lines[2]
    assert head.index("dgx-h100") < head.index("lumi-g")
    runtime = next(ln for ln in lines if "runtime" in ln)
    assert runtime.split() == ["*", "runtime", "pyxis", "apptainer"]
    assert not any(ln.split()[:2] == ["*", "launcher"] for ln in lines if ln.strip())  # same: hidden
    r = run("diff", "--site", "dgx-h100", "--site", "lumi-g", "--all")
    assert "--all shows the rest" not in r.stdout
    launcher = next(ln for ln in r.stdout.splitlines() if "launcher" in ln)
    assert launcher.startswith("    launcher ") and launcher.count("torchrun (1 task per node)") == 2
    runtime = next(ln for ln in r.stdout.splitlines() if "runtime" in ln)
    assert runtime.startswith("  * runtime ")


def test_diff_with_model_flags_shows_the_layout_per_site(repo):
    r = run(
        "diff",
        "--site",
        "dgx-h100",
        "--site",
        "lumi-g",
        "--model",
        "llama3-70b",
        "--launcher",
        "megatron",
        "--nodes",
        "8",
        "--smoke",
        "--json",
    )
    assert r.exit_code == 0, r.stderr
    d = json.loads(r.stdout)
    rows = {(x["section"], x["key"]): x["values"] for x in d["rows"]}
    for i, _site in enumerate(("dgx-h100", "lumi-g")):
        req = d["requests"][i]
        assert rows[("layout", "pp")][i] == str(req["layout"]["pp"])
        assert rows[("launch", "--pipeline-model-parallel-size")][i] == str(req["layout"]["pp"])
        assert rows[("sbatch", "--partition")][i] == req["sbatch"]["partition"]


def test_diff_keeps_the_other_column_when_one_site_fails(repo):
    r = run(
        "diff",
        "--site",
        "dgx-h100",
        "--site",
        "perlmutter",
        "--model",
        "llama3-70b",
        "--launcher",
        "megatron",
        "--nodes",
        "8",
        "--smoke",
    )
    assert r.exit_code == 2
    assert "error: perlmutter: Llama 3.1 70B" in r.stdout and "does not fit" in r.stdout
    assert "(failed)" in r.stdout
    d = json.loads(
        run(
            "diff",
            "--site",
            "dgx-h100",
            "--site",
            "perlmutter",
            "--model",
            "llama3-70b",
            "--launcher",
            "megatron",
            "--nodes",
            "8",
            "--smoke",
            "--json",
        ).stdout
    )
    assert d["failed"] == [False, True] and d["requests"][1] is None and d["requests"][0]["layout"]["nodes"] == 8


def test_diff_needs_two_sites(repo):
    r = CliRunner().invoke(main, ["diff", "--site", "dgx-h100", "--", "train.py"])
    assert r.exit_code == 2 and "at least two sites" in r.output


# ---------------------------------------------------------------------------
# plan reads the spec like gen


def test_plan_uses_the_repos_spec_its_site_block_and_flags(repo):
    write_spec(
        repo,
        """\
        model: llama3-70b
        task: lora
        launcher: megatron
        nodes: 2
        sites:
          perlmutter: {nodes: 4}
        """,
    )
    r = run("plan", "--site", "dgx-h100", "--json")
    assert r.exit_code == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["nodes"] == 2 and d["task"] == "lora" and "slurmgpu: job spec" in r.stderr
    d = json.loads(run("plan", "--site", "perlmutter", "--json").stdout)
    assert d["nodes"] == 4 and d["gpus_per_node"] == 4
    d = json.loads(run("plan", "--site", "dgx-h100", "--nodes", "4", "--task", "pretrain", "--json").stdout)
    assert d["nodes"] == 4 and d["task"] == "pretrain"
    other = repo / "other.yaml"
    other.write_text("model: llama3.1-8b\nlauncher: megatron\nnodes: 1\n")
    d = json.loads(run("plan", "--spec", str(other), "--site", "dgx-h100", "--json").stdout)
    assert d["nodes"] == 1 and d["model"]["name"] == "llama3.1-8b"


def test_plan_and_gen_agree_on_a_spec(repo):
    write_spec(repo, "model: llama3.1-8b\nlauncher: megatron\nnodes: 2\nparallel: {tp: 2}\nsmoke: true\n")
    p = json.loads(run("plan", "--site", "dgx-h100", "--json").stdout)
    g = json.loads(run("gen", "--site", "dgx-h100", "--json").stdout)
    assert {k: p[k] for k in ("tp", "pp", "dp", "cp", "ep", "nodes")} == {
        k: g["layout"][k] for k in ("tp", "pp", "dp", "cp", "ep", "nodes")
    }


def test_plan_without_a_model_anywhere_is_a_usage_error(repo):
    r = CliRunner().invoke(main, ["plan", "--site", "dgx-h100"])
    assert r.exit_code == 2 and "--model" in r.output


# ---------------------------------------------------------------------------
# The worked example in docs/gen.md


def _doc_block(after):
    text = GEN_MD.read_text()
    start = text.index(after)
    m = re.search(r"```(?:yaml|console)\n(.*?)```", text[start:], re.S)
    return m.group(1)


def test_the_worked_example_in_the_docs_renders_on_three_sites(repo):
    spec = _doc_block("<!-- worked-example: slurmgpu.yaml")
    (repo / "slurmgpu.yaml").write_text(spec)
    for site in ("dgx-h100", "perlmutter", "lumi-g"):
        r = run("gen", "--site", site, "-o", str(repo / ("%s.sh" % site)))
        assert r.exit_code == 0, r.stderr
    assert "#SBATCH --nodes=4" in (repo / "perlmutter.sh").read_text()
    assert "apptainer exec --rocm" in (repo / "lumi-g.sh").read_text()
    r = run("diff", "--site", "dgx-h100", "--site", "perlmutter", "--site", "lumi-g")
    assert r.exit_code == 0, r.stderr
    console = _doc_block("```console\n$ slurmgpu diff --site dgx-h100 --site perlmutter")
    shown = console.split("\n", 1)[1]
    r = run("diff", "--site", "dgx-h100", "--site", "perlmutter")
    assert r.stdout == shown, "docs/gen.md's diff output is stale:\n" + r.stdout
    # Without its lumi-g block the CUDA image is refused there, as the docs say.
    (repo / "slurmgpu.yaml").write_text(spec.split("  lumi-g:")[0])
    r = run("gen", "--site", "lumi-g")
    doc_error = next(ln for ln in GEN_MD.read_text().splitlines() if "is a CUDA (NVIDIA) build" in ln)
    assert r.exit_code == 2
    assert r.stderr.splitlines()[-1] == doc_error.replace("/home/me/sft/slurmgpu.yaml", str(repo / "slurmgpu.yaml"))
