"""`slurmgpu gen / submit / init / templates` end to end, through the real CLI."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

from slurmgpu.cli import main
from slurmgpu.job import load_spec
from slurmgpu.plan import PlanRequest, get_model, make_plan
from slurmgpu.render import shquote
from slurmgpu.site import load_site, preset_dir
from tests.cluster_fixtures import dgx_site_for

ROOT = Path(__file__).resolve().parent.parent


def preset(name):
    return load_site(str(preset_dir() / (name + ".yaml")))


@pytest.fixture
def repo(tmp_path, monkeypatch):
    """An empty research repo as the working directory, with no site or cache from the user's home."""
    (tmp_path / ".git").mkdir()
    monkeypatch.chdir(tmp_path)
    for var in ("SLURMGPU_SITE", "XDG_CONFIG_HOME"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("SLURMGPU_CACHE_DIR", str(tmp_path / ".cache"))
    monkeypatch.setenv("SLURMGPU_SYSTEM_SITE", str(tmp_path / "no-admin-site.yaml"))
    return tmp_path


def run(*args, input=None):
    return CliRunner().invoke(main, list(args), input=input, catch_exceptions=False)


def sbatch_lines(text):
    return [ln for ln in text.splitlines() if ln.startswith("#SBATCH ")]


def stamp_of(text):
    line = next(ln for ln in text.splitlines() if ln.startswith("# slurmgpu: "))
    return dict(kv.split("=") for kv in line[len("# slurmgpu: ") :].split())


# ---------------------------------------------------------------------------
# gen


def _readme_gen_commands():
    """The README's `slurmgpu gen ... --launcher megatron` commands, as the user would paste them."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    out = []
    for block in re.findall(r"```sh\n(.*?)```", text, re.S):
        block = block.replace("\\\n", " ")
        for line in block.splitlines():
            line = line.split("&&")[-1].strip()
            if line.startswith("slurmgpu gen ") and "--launcher megatron" in line:
                out.append(shlex.split(line)[1:])
    return out


def test_the_readme_headline_job_renders_and_the_real_run_has_its_inputs(repo):
    """The README's first command exits 0 and starts Megatron (smoke, mock data); the real run beside
    it reaches Megatron's data, tokenizer and length; without them gen names what is missing."""
    smoke, real = _readme_gen_commands()
    assert "--smoke" in smoke and "--smoke" not in real
    r = run(*smoke)
    assert r.exit_code == 0, r.stderr
    assert "    --mock-data \\\n" in r.stdout and " nodes=8 " in r.stdout.splitlines()[1]
    r = run(*real)
    assert r.exit_code == 0, r.stderr
    want = dict(zip(real, real[1:]))
    assert "    --data-path %s \\\n" % want["--data"] in r.stdout
    assert "    --tokenizer-model %s \\\n" % want["--tokenizer"] in r.stdout
    assert "    --train-iters " in r.stdout and "--mock-data" not in r.stdout
    bare = [a for a in smoke if a != "--smoke"]
    r = run(*bare)
    assert r.exit_code == 2 and r.stdout == ""
    for word in ("--data", "--tokenizer", "--train-iters", "--lr", "--smoke"):
        assert word in r.stderr


def test_llama3_70b_megatron_on_two_default_nodes(repo):
    r = run(
        "gen",
        "--model",
        "llama3-70b",
        "--launcher",
        "megatron",
        "--nodes",
        "2",
        "--tp",
        "8",
        "--pp",
        "2",
        "--task",
        "lora",
        "--data",
        "/data/llama_text_document",
        "--tokenizer",
        "meta-llama/Meta-Llama-3-70B",
        "--train-iters",
        "2000",
        "--lr",
        "1e-4",
    )
    assert r.exit_code == 0, r.stderr
    text = r.stdout
    # the training inputs reach Megatron under its own names
    for line in (
        "--data-path /data/llama_text_document",
        "--tokenizer-model meta-llama/Meta-Llama-3-70B",
        "--train-iters 2000",
        "--lr 1e-4",
    ):
        assert "    %s \\\n" % line in text or "    %s\n" % line in text, line
    site = preset("dgx-h100")
    nt = site.node_type_of()
    assert "#SBATCH --gpus-per-node=%d" % nt.gpus in sbatch_lines(text)
    assert (
        "export NCCL_IB_HCA=%s " % shquote("=" + ",".join("%s:%d" % (n.name, n.port) for n in nt.compute_nics)) in text
    )
    assert "export NCCL_SOCKET_IFNAME='=%s' " % nt.socket_ifname in text
    assert "--tensor-model-parallel-size 8 \\\n" in text and "--pipeline-model-parallel-size 2 \\\n" in text
    assert stamp_of(text)["tp"] == "8" and stamp_of(text)["pp"] == "2"
    assert "slurmgpu: site dgx-h100" in r.stderr and "tp=8 pp=2" in r.stderr


def test_the_script_carries_the_planners_layout(repo):
    r = run("gen", "--model", "llama3.1-8b", "--launcher", "megatron", "--nodes", "2", "--smoke")
    assert r.exit_code == 0, r.stderr
    assert "    --mock-data \\\n" in r.stdout
    from slurmgpu.job.launchers import get_launcher, planner_caps

    caps = planner_caps(get_launcher("megatron"))  # the launcher's layouts and Megatron's memory rules
    plan = make_plan(preset("dgx-h100"), PlanRequest(model=get_model("llama3.1-8b"), nodes=2, caps=caps))
    lay = plan.layout
    assert stamp_of(r.stdout) == {
        "site": "dgx-h100",
        "tp": str(lay.tp),
        "pp": str(lay.pp),
        "dp": str(lay.dp),
        "cp": str(lay.cp),
        "ep": str(lay.ep),
        "nodes": "2",
        "gpus_per_node": str(lay.gpus_per_node),
    }
    assert "--tensor-model-parallel-size %d \\\n" % lay.tp in r.stdout
    assert plan.explanation[0] in r.stderr


def test_one_spec_renders_for_each_site(repo):
    (repo / "slurmgpu.yaml").write_text(
        textwrap.dedent("""\
        name: portable
        launcher: torchrun
        command: [train.py, --config, cfg.yaml]
        nodes: 2
        time: "02:00:00"
        """)
    )
    out = {}
    for site in ("dgx-h100", "perlmutter", "aws-p5", "frontier"):
        r = run("gen", "--site", site)
        assert r.exit_code == 0, r.stderr
        assert "job spec %s" % (repo / "slurmgpu.yaml") in r.stderr
        out[site] = r.stdout
    pm, p5, fr = preset("perlmutter").node_type_of(), preset("aws-p5").node_type_of(), preset("frontier")
    assert "export FI_PROVIDER=cxi " in out["perlmutter"] and "export NCCL_NET='AWS Libfabric' " in out["perlmutter"]
    assert "#SBATCH --gpus-per-node=%d" % pm.gpus in sbatch_lines(out["perlmutter"])
    assert "#SBATCH --constraint=%s" % preset("perlmutter").partition().constraint in sbatch_lines(out["perlmutter"])
    assert "NCCL_IB_HCA" not in out["perlmutter"]
    assert "export FI_PROVIDER=efa " in out["aws-p5"]
    assert "#SBATCH --gres=gpu:%d" % p5.gpus in sbatch_lines(out["aws-p5"])
    assert "NCCL_IB_HCA" not in out["aws-p5"] and "--gpus-per-node" not in out["aws-p5"]
    assert "export NCCL_NET='AWS Libfabric' " in out["frontier"] and "RCCL" in out["frontier"]
    assert "preflight --site frontier" in out["frontier"] and fr.node_type_of().vendor == "amd"
    assert "NCCL_IB_HCA=" in out["dgx-h100"] and "FI_PROVIDER" not in out["dgx-h100"]
    for text in out.values():
        assert "    train.py \\\n    --config cfg.yaml\n" in text


def test_program_after_double_dash_is_not_the_spec(repo):
    r = run("gen", "--nodes", "1", "--", "train.py", "--json", "--", "x")
    assert r.exit_code == 0, r.stderr
    assert "    train.py \\\n    --json \\\n    -- \\\n    x\n" in r.stdout
    assert "# Regenerate: slurmgpu gen --nodes 1 -- train.py --json -- x\n" in r.stdout


def test_missing_program_is_explained(repo):
    r = run("gen", "--launcher", "torchrun", "--nodes", "2")
    assert r.exit_code == 2
    assert "after `--`" in r.stderr and "command:" in r.stderr
    r = run("gen", "--launcher", "vllm", "--nodes", "1")
    assert r.exit_code == 2 and "--weights" in r.stderr


def test_default_entry_points(repo):
    r = run(
        "gen", "--launcher", "megatron", "--nodes", "2", "--tokenizer", "t", "--train-iters", "9", "--lr", "1e-4",
        "--", "--data-path", "/d",
    )  # fmt: skip
    assert r.exit_code == 0, r.stderr
    assert "    pretrain_gpt.py \\\n    --data-path /d \\\n" in r.stdout
    r = run("gen", "--launcher", "vllm", "--nodes", "2", "--weights", "meta-llama/Llama-3.1-70B-Instruct")
    assert r.exit_code == 0, r.stderr
    assert "    vllm serve meta-llama/Llama-3.1-70B-Instruct \\\n" in r.stdout


def test_layout_flags_in_the_program_are_refused(repo):
    r = run("gen", "--launcher", "megatron", "--nodes", "2", "--", "--tensor-model-parallel-size", "4")
    assert r.exit_code == 2 and "--tp" in r.stderr and "--tensor-model-parallel-size" in r.stderr
    assert "--smoke" in r.stderr  # and, in the same error, the training inputs that are missing


def test_tp_across_nvlink_domains_is_refused_like_the_filter(repo):
    from slurmgpu.policy import check_script

    r = run("gen", "--launcher", "torchrun", "--nodes", "2", "--tp", "16", "-o", "job.sh", "--", "train.py")
    assert r.exit_code == 1
    assert not (repo / "job.sh").exists() and not list(repo.glob(".job.sh.*"))
    assert "suggestion:" in r.stderr and r.stdout == ""
    # The same message the submit filter gives for that layout (a hand-written script with the stamp).
    site = preset("dgx-h100")
    probe = (
        "#!/bin/bash\n# slurmgpu: site=dgx-h100 tp=16 pp=1 dp=1 cp=1 ep=1 nodes=2 gpus_per_node=8\n"
        "#SBATCH --nodes=2\n#SBATCH --gpus-per-node=8\n#SBATCH --ntasks-per-node=1\nsrun torchrun train.py\n"
    )
    verdict = check_script(site, probe, partition="gpu")
    assert verdict.decision == "reject"
    for msg in verdict.messages:
        assert msg in r.stderr


@pytest.mark.parametrize("extra, segment", [((), 15), (("--segment", "3"), 3), (("--segment", "15"), 15)])
def test_gb200_tp6_on_30_nodes_gets_a_segment_its_own_filter_accepts(repo, extra, segment):
    """TP=6 on 4-GPU trays needs segments of 3 nodes; gen once chose --segment=10 (refused by the
    policy) and refused the policy's own --segment=3."""
    r = run(
        "gen", "--site", "gb200-nvl72", "--nodes", "30", "--tp", "6", *extra, "-o", "job.sh", "--", "python", "train.py"
    )
    assert r.exit_code == 0, r.stderr
    text = (repo / "job.sh").read_text()
    assert "#SBATCH --segment=%d" % segment in sbatch_lines(text)
    c = run("check", "--site", "gb200-nvl72", "job.sh")
    assert c.exit_code == 0, c.output


def test_pinned_tp_across_nodes_with_a_model_gets_the_filters_words_and_a_plan(repo):
    r = run("gen", "--model", "llama3.1-8b", "--launcher", "megatron", "--nodes", "2", "--tp", "16")
    assert r.exit_code == 1 and r.stdout == ""
    assert "NVLink domain" in r.stderr
    from slurmgpu.job.launchers import get_launcher, planner_caps

    caps = planner_caps(get_launcher("megatron"))
    lay = make_plan(preset("dgx-h100"), PlanRequest(model=get_model("llama3.1-8b"), nodes=2, caps=caps)).layout
    assert (
        "suggestion: the planner picks tp=%d pp=%d dp=%d cp=%d on 2 nodes" % (lay.tp, lay.pp, lay.dp, lay.cp)
        in r.stderr
    )


def test_output_file_is_written_atomically(repo):
    (repo / "job.sh").write_text("old\n")
    r = run("gen", "--nodes", "2", "-o", "job.sh", "--", "train.py")
    assert r.exit_code == 0, r.stderr
    assert r.stdout == "" and (repo / "job.sh").read_text().startswith("#!/bin/bash\n")
    assert os.access(str(repo / "job.sh"), os.X_OK)
    assert [p.name for p in repo.iterdir() if p.name.startswith(".job.sh")] == []
    before = (repo / "job.sh").read_text()
    r = run("gen", "--nodes", "2", "--tp", "16", "-o", "job.sh", "--", "train.py")
    assert r.exit_code == 1 and (repo / "job.sh").read_text() == before


def test_json_output(repo):
    r = run("gen", "--nodes", "2", "--json", "--", "train.py")
    assert r.exit_code == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["script"].startswith("#!/bin/bash\n") and d["layout"]["nodes"] == 2
    assert d["policy"]["decision"] == "accept" and d["stamp"] == d["script"].splitlines()[1]
    assert d["request"]["sbatch"]["gpus_per_node"] == 8 and d["request"]["launch"]["program"] == ["train.py"]
    assert d["spec"]["command"] == ["train.py"] and d["spec"]["nodes"] == 2


def test_flag_errors_name_the_flag(repo):
    r = run("gen", "--nodes", "2", "--time", "tomorrow", "--env", "X", "--", "train.py")
    assert r.exit_code == 2 and "--time" in r.stderr and "--env" in r.stderr
    r = run("gen", "--nodes", "2", "--sbatch=--nodes=4", "--", "train.py")
    assert r.exit_code == 2 and "--sbatch" in r.stderr and "nodes" in r.stderr


def test_spec_file_errors_are_located(repo):
    (repo / "bad.yaml").write_text("launcher: torchrun\nnodes: two\n")
    r = run("gen", "bad.yaml")
    assert r.exit_code == 2 and "bad.yaml:2:" in r.stderr and "nodes" in r.stderr


def test_regenerate_line_reproduces_the_script(repo):
    args = [
        "gen",
        "--site",
        "perlmutter",
        "--nodes",
        "2",
        "--job-name",
        "a b",
        "--env",
        "X=$y z",
        "--",
        "train.py",
        "it's",
        "$HOME",
    ]
    first = subprocess.run([sys.executable, "-m", "slurmgpu.cli"] + args, capture_output=True, text=True, cwd=repo)
    assert first.returncode == 0, first.stderr
    line = next(ln for ln in first.stdout.splitlines() if ln.startswith("# Regenerate: "))
    argv = shlex.split(line[len("# Regenerate: ") :])
    assert argv[:2] == ["slurmgpu", "gen"]
    again = subprocess.run([sys.executable, "-m", "slurmgpu.cli"] + argv[1:], capture_output=True, text=True, cwd=repo)
    assert again.returncode == 0 and again.stdout == first.stdout


@pytest.mark.parametrize(
    "args, want",
    [
        (["--launcher", "vllm", "--nodes", "1"], "error: weights: launcher vllm serves a checkpoint"),
        (["--segment", "2", "--nodes", "2", "--", "train.py"], "error: segment: --segment needs a topology/block site"),
        (
            ["--site", "gb200-nvl72", "--segment", "3", "--nodes", "4", "--", "train.py"],
            "error: segment: --segment=3 does not tile the 4-node job",
        ),
        (["--container", "pyxis", "--", "train.py"], "error: container.image: container runtime pyxis needs an image"),
        (
            ["--requeue", "--time", "5:00", "--", "train.py"],
            "error: grace: the checkpoint signal would come 300 s before",
        ),
    ],
)
def test_error_messages_name_the_field_once(repo, args, want):
    r = run("gen", *args)
    assert r.exit_code == 2
    err = [ln for ln in r.stderr.splitlines() if ln.startswith("error: ")]
    assert len(err) == 1 and err[0].startswith(want), r.stderr


def test_issue_prints_each_part_once():
    from slurmgpu.errors import Issue

    assert str(Issue("", None, None, "segment", "m")) == "segment: m"
    assert str(Issue("segment", None, None, "segment", "m")) == "segment: m"
    assert str(Issue("a.yaml", 3, 7, "time", "m")) == "a.yaml:3:7: time: m"
    assert str(Issue("--time", None, None, "", "m")) == "--time: m"
    assert str(Issue("", 3, None, "", "m")) == "m"


# ---------------------------------------------------------------------------
# templates


def test_templates_list_show_eject_and_use(repo):
    r = run("templates", "list", "--json")
    rows = {row["name"]: row for row in json.loads(r.stdout)}
    assert rows["job.sh.j2"]["source"] == "built-in" and "parts/launch_megatron.j2" in rows
    r = run("templates", "eject", "rendezvous")
    assert r.exit_code == 0, r.stderr
    ejected = repo / ".slurmgpu" / "templates" / "parts" / "rendezvous.j2"
    assert ejected.read_text() == (ROOT / "templates" / "parts" / "rendezvous.j2").read_text()
    assert run("templates", "eject", "parts/rendezvous.j2").exit_code != 0  # no silent overwrite
    ejected.write_text(ejected.read_text() + "# site-specific tweak\n")
    r = run("templates", "list")
    assert any(
        ln.startswith("parts/rendezvous.j2") and "repo" in ln and "overrides built-in" in ln
        for ln in r.stdout.splitlines()
    )
    r = run("templates", "show", "parts/rendezvous.j2")
    assert r.stdout.endswith("# site-specific tweak\n") and "(repo)" in r.stderr
    r = run("gen", "--nodes", "2", "--", "train.py")
    assert "# site-specific tweak\n" in r.stdout
    r = run("templates", "show", "no_such_part")
    assert r.exit_code == 2 and "looked in" in r.stderr


def test_an_override_in_one_repo_does_not_break_gen_elsewhere(repo, tmp_path_factory, monkeypatch):
    """eject + gen in repo A fill the user's template cache; gen in directory B must still work."""
    monkeypatch.delenv("SLURMGPU_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(repo / "xdg-cache"))
    r = run("templates", "eject", "parts/launch_torchrun.j2")
    assert r.exit_code == 0, r.stderr
    r = run("gen", "--nodes", "2", "--", "train.py")
    assert r.exit_code == 0, r.stderr
    assert "overrides built-in" in run("templates", "list").stdout
    elsewhere = tmp_path_factory.mktemp("elsewhere")  # outside repo A: no repo templates there
    (elsewhere / ".git").mkdir()
    monkeypatch.chdir(elsewhere)
    assert "overrides built-in" not in run("templates", "list").stdout
    for _ in range(2):  # cold, then warm
        r = run("gen", "--nodes", "2", "--", "train.py")
        assert r.exit_code == 0, r.stderr
        assert "torchrun \\\n" in r.stdout
    monkeypatch.chdir(repo)
    r = run("gen", "--nodes", "2", "--", "train.py")
    assert r.exit_code == 0, r.stderr


def test_templates_dir_flag_wins(repo, tmp_path):
    other = tmp_path / "mine" / "parts"
    other.mkdir(parents=True)
    (other / "preflight.j2").write_text("# my preflight\n")
    r = run("gen", "--nodes", "2", "--templates", str(tmp_path / "mine"), "--", "train.py")
    assert r.exit_code == 0 and "# my preflight\n" in r.stdout


# ---------------------------------------------------------------------------
# init


def test_init_scaffolds_a_spec_that_gen_uses(repo):
    r = run("init", "--launcher", "torchrun", "--job-name", "demo", "--", "train.py", "--lr", "3e-4")
    assert r.exit_code == 0, r.stderr
    spec = load_spec(str(repo / "slurmgpu.yaml"))
    assert spec.name == "demo" and spec.command == ("train.py", "--lr", "3e-4") and spec.launcher == "torchrun"
    assert (repo / ".slurmgpu" / "templates").is_dir()
    assert run("init", "--launcher", "srun").exit_code == 2  # exists: no overwrite
    r = run("gen", "--site", "aws-p5")
    assert r.exit_code == 0, r.stderr
    assert "#SBATCH --job-name=demo" in r.stdout and "    train.py \\\n    --lr 3e-4\n" in r.stdout


def test_init_then_gen_as_the_readme_says(repo):
    """`slurmgpu init --model llama3-8b --launcher torchrun && slurmgpu gen -o job.sbatch`, then check."""
    r = run("init", "--model", "llama3-8b", "--launcher", "torchrun")
    assert r.exit_code == 0, r.stderr
    spec = load_spec(str(repo / "slurmgpu.yaml"))
    assert spec.command == ("train.py",) and spec.model == "llama3-8b"
    assert 'command: ["train.py"]   # placeholder' in (repo / "slurmgpu.yaml").read_text()
    assert "train.py is a placeholder" in r.stderr
    nxt = [ln for ln in r.stderr.splitlines() if ln.startswith("next: ")]
    assert nxt == ["next: slurmgpu gen -o job.sbatch"]
    argv = shlex.split(nxt[0][len("next: ") :])
    assert argv[0] == "slurmgpu"
    r = run(*argv[1:])  # what init says to run next works
    assert r.exit_code == 0, r.stderr
    assert (repo / "job.sbatch").is_file() and (repo / "job.sbatch").read_text().endswith("    train.py\n")
    r = run("check", "job.sbatch")
    assert r.exit_code == 0, r.stderr + r.stdout


def test_init_next_names_the_spec_and_site_when_not_the_defaults(repo, tmp_path):
    other = tmp_path / "other repo"
    other.mkdir()
    (other / "train.py").write_text("")
    r = run("init", "--dir", str(other), "--site", "aws-p5", "--launcher", "srun")
    assert r.exit_code == 0, r.stderr
    assert "placeholder (there is no" not in r.stderr  # train.py exists there
    nxt = [ln for ln in r.stderr.splitlines() if ln.startswith("next: ")][0]
    argv = shlex.split(nxt[len("next: ") :])
    assert argv == ["slurmgpu", "gen", str((other / "slurmgpu.yaml").resolve()), "--site", "aws-p5", "-o", "job.sbatch"]
    r = run(*argv[1:])
    assert r.exit_code == 0, r.stderr
    assert '#SBATCH --job-name="other repo"\n' in (repo / "job.sbatch").read_text()


def test_init_with_an_entry_point_launcher_writes_no_placeholder(repo):
    r = run("init", "--model", "llama3-8b", "--launcher", "megatron", "--nodes", "1")
    assert r.exit_code == 0, r.stderr
    assert load_spec(str(repo / "slurmgpu.yaml")).command == ()
    assert "placeholder" not in r.stderr
    # Megatron cannot start without data, tokenizer, length and lr: init starts as a smoke run
    assert load_spec(str(repo / "slurmgpu.yaml")).smoke
    assert run("gen", "-o", "job.sbatch").exit_code == 0
    assert "    --mock-data \\\n" in (repo / "job.sbatch").read_text()
    # the real run: uncomment the inputs init wrote beside it, drop smoke
    text = (repo / "slurmgpu.yaml").read_text()
    text = re.sub(r"^smoke: true.*\n", "", text, flags=re.M)
    text = re.sub(r"^# (data|tokenizer|train_iters|lr): ", r"\1: ", text, flags=re.M)
    (repo / "slurmgpu.yaml").write_text(text)
    r = run("gen", "-o", "job.sbatch")
    assert r.exit_code == 0, r.stderr
    real = (repo / "job.sbatch").read_text()
    assert "--mock-data" not in real and "    --data-path /data/corpus_text_document \\\n" in real


def test_init_asks_nothing_without_a_terminal(repo):
    r = run("init", "-y", "--force")
    assert r.exit_code == 0, r.stderr
    spec = load_spec(str(repo / "slurmgpu.yaml"))
    assert spec.launcher == "torchrun" and spec.name == repo.name and spec.time == "04:00:00"


# ---------------------------------------------------------------------------
# submit (a stand-in sbatch here; tests/test_hostile.py runs real Slurm)


@pytest.fixture
def fake_sbatch(repo, monkeypatch):
    bin_dir = repo / "bin"
    bin_dir.mkdir()
    log = repo / "sbatch.log"
    (bin_dir / "sbatch").write_text(
        textwrap.dedent("""\
        #!/bin/bash
        n=$(( $(wc -l < %(log)s 2>/dev/null || echo 0) + 100 ))
        printf '%%s ' "$@" >> %(log)s; printf '\\n' >> %(log)s
        cat > %(dir)s/stdin.$n
        for a in "$@"; do
          [ "$a" = --test-only ] && { echo "sbatch: Job 99 to start at 2030-01-01T00:00:00" >&2; exit 0; }
        done
        echo "$n"
        """)
        % {"log": shlex.quote(str(log)), "dir": shlex.quote(str(repo))}
    )
    (bin_dir / "sbatch").chmod(0o755)
    monkeypatch.setenv("PATH", "%s:%s" % (bin_dir, os.environ["PATH"]))
    return log


def test_submit_prints_job_ids_and_chains(repo, fake_sbatch):
    r = run("submit", "--nodes", "2", "--chain", "3", "--", "train.py")
    assert r.exit_code == 0, r.stderr
    ids = r.stdout.split()
    calls = fake_sbatch.read_text().splitlines()
    assert ids == ["100", "101", "102"] and len(calls) == 3
    assert "--dependency=afterany:100" in calls[1] and "--dependency=afterany:101" in calls[2]
    assert (repo / "stdin.100").read_text().startswith("#!/bin/bash\n")


def test_submit_test_only(repo, fake_sbatch):
    r = run("submit", "--nodes", "2", "--test-only", "--", "train.py")
    assert r.exit_code == 0 and r.stdout == "" and "to start at" in r.stderr
    assert "--test-only" in fake_sbatch.read_text()


def test_submit_without_sbatch(repo, monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    r = run("submit", "--nodes", "2", "--", "train.py")
    assert r.exit_code == 2 and "sbatch not found" in r.stderr


@pytest.mark.cluster
def test_submit_test_only_on_real_slurm(repo, slurm_cluster, monkeypatch):
    (repo / "site.yaml").write_text(dgx_site_for(slurm_cluster))
    for k, v in slurm_cluster.env.items():
        monkeypatch.setenv(k, v)
    r = run(
        "submit", "--site", str(repo / "site.yaml"), "--nodes", "2", "--mem", "1000M", "--test-only", "--", "train.py"
    )
    assert r.exit_code == 0, r.stderr
    assert "to start at" in r.stderr


# ---------------------------------------------------------------------------
# Help and start-up


@pytest.mark.parametrize(
    "cmd",
    [
        ["gen"],
        ["submit"],
        ["init"],
        ["templates"],
        ["templates", "list"],
        ["templates", "show"],
        ["templates", "eject"],
    ],
)
def test_help_has_examples(cmd):
    r = run(*cmd, "--help")
    assert r.exit_code == 0 and "Example" in r.stdout


def test_cli_import_stays_light():
    code = (
        "import sys, slurmgpu.cli; print(sorted(m for m in ('jinja2', 'yaml', 'lupa', 'slurmgpu.render', "
        "'slurmgpu.plan', 'slurmgpu.spec') if m in sys.modules))"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert r.stdout.strip() == "[]"


def test_gen_nccl_diag_turns_on_nccls_diagnostics_for_the_launch():
    r = CliRunner().invoke(
        main, ["gen", "--site", "dgx-h100", "--nodes", "2", "--nccl-diag", "--", "python", "train.py"],
        catch_exceptions=False,
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    assert "export NCCL_RUN_DIAGNOSTICS=1\n" in r.output and "export NCCL_RUN_RAS_DIAGNOSTICS=1\n" in r.output
    r = CliRunner().invoke(main, ["gen", "--site", "dgx-h100", "--nodes", "2", "--", "python", "train.py"])
    assert "NCCL_RUN_DIAGNOSTICS" not in r.output
    # the user's own value wins, and NCCL's lint knows the 2.31 names (no "unknown variable" warning)
    r = CliRunner().invoke(
        main, ["gen", "--site", "dgx-h100", "--nodes", "2", "--nccl-diag", "--env", "NCCL_RUN_RAS_DIAGNOSTICS=0",
               "--", "python", "train.py"],
        catch_exceptions=False,
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    assert "export NCCL_RUN_RAS_DIAGNOSTICS=0\n" in r.output and "export NCCL_RUN_RAS_DIAGNOSTICS=1" not in r.output
    assert "NCCL_RUN_RAS_DIAGNOSTICS" not in "".join(ln for ln in r.output.splitlines() if "warning" in ln)
