"""`gen`, `submit`, `init` and `templates list/show/eject`."""

from __future__ import annotations

import functools
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence, Tuple

import click

from .. import vocab
from ..errors import SlurmgpuError
from . import explain_out
from .app import _Command, _Group, alias, exits, main
from .common import _LAUNCHERS, OUTPUT_DIR, OUTPUT_FILE, _emit_json, _load_site, _write_atomic, spec_field_options
from .complete import complete_template

if TYPE_CHECKING:
    from ..job import Generated, JobSpec
    from ..site import Site


class _CommandWithProgram(_Command):
    """Everything after `--` is the program to launch (as with srun), never the SPEC argument."""

    def parse_args(self, ctx: click.Context, args: Any) -> Any:
        args = list(args)
        ctx.meta["slurmgpu.raw_args"] = list(args)
        if "--" in args:
            i = args.index("--")
            ctx.meta["slurmgpu.command"] = args[i + 1 :]
            args = args[:i]
        return super().parse_args(ctx, args)


def _job_options(f: Any, skip: Any = ()) -> Any:
    """The flags gen and submit share; each overrides one field of slurmgpu.yaml.

    `skip` names parameters a command replaces with its own (diff takes --site twice, writes no script).
    """
    opts = [
        click.argument("spec_file", metavar="[SPEC]", required=False, type=click.Path(dir_okay=False)),
        click.option(
            "--site",
            "site_name",
            metavar="NAME|PATH",
            help="Site config (default: $SLURMGPU_SITE, "
            "/etc/slurmgpu/site.yaml, ~/.config/slurmgpu/site.yaml, then dgx-h100).",
        ),
        click.option(
            "-o",
            "--output",
            "out_file",
            type=OUTPUT_FILE,
            metavar="FILE",
            help="Write the script to FILE (atomically) instead of standard output.",
        ),
        click.option("--json", "as_json", is_flag=True, help="Print script, plan and policy verdict as JSON."),
        *spec_field_options(),
        click.option(
            "--templates",
            "templates_dir",
            type=click.Path(file_okay=False),
            metavar="DIR",
            help="Look for templates here first.",
        ),
    ]
    for opt in reversed(opts):
        f = opt(f)
    if skip:
        f.__click_params__ = [p for p in f.__click_params__ if p.name not in skip]
    return f


_GEN_ONLY_FLAGS = {"--json": 0, "--test-only": 0, "--chain": 1}


def _regen_command(ctx: click.Context) -> str:
    """`slurmgpu gen ...` with the flags that shaped this script (for the script's header)."""
    from ..render import shquote

    raw = list(ctx.meta.get("slurmgpu.raw_args", []))
    cut = raw.index("--") if "--" in raw else len(raw)
    out, skip = [], 0
    for a in raw[:cut]:
        if skip:
            skip -= 1
            continue
        name = a.split("=", 1)[0]
        if name in _GEN_ONLY_FLAGS:
            skip = _GEN_ONLY_FLAGS[name] if "=" not in a else 0
            continue
        out.append(a)
    out += raw[cut:]
    return "slurmgpu gen" + "".join(" " + shquote(a) for a in out)


def no_spec_message(root: Path) -> str:
    """What `gen` says in a directory without slurmgpu.yaml when no flag describes a job."""
    return (
        "no slurmgpu.yaml found (%s): create one with `slurmgpu init`, give its path "
        "(slurmgpu gen path/to/slurmgpu.yaml), or describe the job with flags, e.g. "
        "`slurmgpu gen --model llama3-8b --launcher megatron --smoke` or "
        "`slurmgpu gen --launcher torchrun -- train.py`" % looked_in(root)
    )


def looked_in(root: Path) -> str:
    """Where find_repo looked for slurmgpu.yaml: from here up to `root` (a git root) or to /."""
    here = Path.cwd().resolve()
    if root != here:
        up_to = " and its parents up to the git root %s" % root
    elif (root / ".git").exists():
        up_to = ", the git root"
    else:
        up_to = " and its parents up to /" if root.parent != root else ""
    return "looked in %s%s" % (here, up_to)


def _job_spec(
    ctx: Optional[click.Context], kw: Dict[str, Any], need_job: bool = True
) -> Tuple[Path, JobSpec, Dict[str, Any]]:
    """The spec file (or the repo's slurmgpu.yaml) and the flags that override it -> (repo root, spec, flags).

    `need_job`: without a spec, at least --model, --launcher, --weights or a program after `--`
    must say what the job is (else the error says where slurmgpu.yaml was looked for)."""
    from ..job import JobSpec, find_repo, load_spec_issues

    spec_file = kw.pop("spec_file")
    root, found = find_repo(os.path.dirname(os.path.abspath(spec_file)) if spec_file else None)
    pending: List[Any] = []  # the spec's problems: reported with the site's, in one run (_spec_for_site)
    if spec_file:
        spec, pending = load_spec_issues(spec_file)
    elif found is not None:
        click.echo("slurmgpu: job spec %s" % found, err=True)
        spec, pending = load_spec_issues(str(found))
    else:
        if (
            need_job
            and not any(kw.get(k) for k in ("model", "launcher", "weights"))
            and not (ctx is not None and ctx.meta.get("slurmgpu.command"))
        ):
            raise SlurmgpuError(no_spec_message(root))
        spec = JobSpec()
    flags = dict(kw)
    flags["parallel"] = {k: flags.pop(k, None) for k in vocab.PARALLEL_KEYS}
    flags["output"], flags["error"] = flags.pop("log_output", None), flags.pop("log_error", None)
    flags["command"] = ctx.meta.get("slurmgpu.command") if ctx is not None else None
    flags["pending_issues"] = tuple(pending)
    return root, spec, flags


def _spec_for_site(
    spec: JobSpec, flags: Dict[str, Any], site: Site, known: Sequence[str] = (), launch: bool = True
) -> JobSpec:
    """Precedence: flags > the spec's sites.<site> block > its top-level fields. Every problem of
    the spec, its site block, the flags and what they name on this site is raised at once."""
    from ..errors import ConfigError
    from ..job import apply_overrides, for_site, spec_issues

    issues = list(flags.get("pending_issues") or ())
    try:
        spec, warnings = for_site(spec, site.name, known)
    except ConfigError as exc:
        issues += exc.issues
        warnings = ()
    for w in warnings:
        click.echo("warning: %s" % w, err=True)
    if spec.site_override:
        block = next(o for o in spec.sites if o.site == spec.site_override)
        click.echo(
            "slurmgpu: sites.%s from %s: %s" % (spec.site_override, spec.source, ", ".join(block.values) or "nothing"),
            err=True,
        )
    try:
        spec = apply_overrides(spec, flags)
    except ConfigError as exc:
        issues += exc.issues
    found = spec_issues(site, spec, launch)
    if issues or found.stop:  # training inputs alone: gen says first whether the filter refuses the layout
        issues += found.all()
        raise ConfigError(sorted(issues, key=lambda i: (i.file, i.line if i.line is not None else 1 << 30, i.col or 0)))
    return spec


def _build_job(ctx: click.Context, kw: Dict[str, Any]) -> Tuple[Site, JobSpec, Generated]:
    """Spec file (or the repo's slurmgpu.yaml) + the site's block + flags -> (site, spec, generated)."""
    from ..job import generate, search_path

    root, spec, flags = _job_spec(ctx, kw)
    site = _load_site(kw["site_name"])
    spec = _spec_for_site(spec, flags, site)
    dirs = search_path(kw["templates_dir"], root, site)
    return site, spec, generate(site, spec, dirs, regen=_regen_command(ctx))


def _summary(gen: Generated) -> None:
    """The plan, on standard error (standard output carries the script)."""
    req = gen.request
    lay = req.layout
    if req.serve is not None:  # router / disaggregated serving: the roles, not one layout
        click.echo(
            "slurmgpu: %s on %s/%s: %d node%s x %d GPUs, %s"
            % (
                gen.sizing.model.name if gen.sizing.model is not None else "job",
                req.site,
                req.sbatch.partition,
                lay.nodes,
                "s" if lay.nodes != 1 else "",
                lay.gpus_per_node,
                req.serve.summary,
            ),
            err=True,
        )
    else:
        _layout_summary(gen)
    for line in req.about:
        if line.startswith("Plan:"):
            click.echo("  " + line, err=True)
    for w in gen.warnings:
        click.echo("warning: %s" % w, err=True)


def _layout_summary(gen: Generated) -> None:
    req = gen.request
    lay = req.layout
    click.echo(
        "slurmgpu: %s on %s/%s: %d node%s x %d GPUs, tp=%d pp=%d dp=%d cp=%d ep=%d, micro-batch %d, "
        "launcher %s"
        % (
            gen.sizing.model.name if gen.sizing.model is not None else "job",
            req.site,
            req.sbatch.partition,
            lay.nodes,
            "s" if lay.nodes != 1 else "",
            lay.gpus_per_node,
            lay.tp,
            lay.pp,
            lay.dp,
            lay.cp,
            lay.ep,
            lay.micro_batch,
            req.launch.name,
        ),
        err=True,
    )


@main.command("gen", cls=_CommandWithProgram)
@_job_options
@click.option("--html", "html_file", metavar="FILE", type=OUTPUT_FILE, help=explain_out.HTML_HELP)
@alias("--explain-html", "--html", "html_file", metavar="FILE", type=OUTPUT_FILE)
@exits((1, "refused: the site's submit filter would reject the job (its message and the fix on stderr)"))
@click.pass_context
def gen_cmd(ctx: click.Context, /, out_file: Optional[str], as_json: bool, html_file: Optional[str], **kw: Any) -> None:
    """Write the batch script for a job: plan it, render it for the site, check it.

    SPEC is a slurmgpu.yaml (default: the repo's, if any); flags override its
    fields, and its sites.<name> block for the site in effect sits between the
    two (`slurmgpu docs gen`). The program to launch goes after `--`, as with srun. The script
    goes to standard output (or -o FILE), the plan summary to standard error. A layout
    whose tensor parallelism leaves an NVLink domain is refused (exit 1) with the
    submit filter's message and the planner's suggestion.

    \b
    Examples:
      slurmgpu gen --model llama3-70b --launcher megatron --nodes 2 --smoke
      slurmgpu gen --model llama3-8b --launcher megatron --data /d/tok --tokenizer /m/tok --train-iters 5000 --lr 3e-4
      slurmgpu gen --site perlmutter --nodes 4 -- train.py --lr 3e-4
      slurmgpu init --model llama3-8b --launcher torchrun && slurmgpu gen slurmgpu.yaml --site aws-p5 -o job.sh
      slurmgpu gen --launcher vllm --weights meta-llama/Llama-3.1-70B-Instruct --nodes 2 --json
      slurmgpu gen --model llama3-8b --launcher megatron --smoke --nodes 2 -o job.sh --html job.html
    """
    site, _spec, gen = _build_job(ctx, kw)
    _summary(gen)
    if html_file:
        explain_out.gen_view(site, gen, html_file)
    if out_file:
        _write_atomic(out_file, gen.script)
        click.echo("slurmgpu: wrote %s" % out_file, err=True)
    if as_json:
        d = gen.to_dict()
        d["path"] = out_file
        _emit_json(d)
    elif not out_file:
        click.echo(gen.script, nl=False)


@main.command("submit", cls=_CommandWithProgram)
@_job_options
@click.option("--test-only", is_flag=True, help="Ask sbatch whether and when the job would start; submit nothing.")
@click.option(
    "--chain",
    type=click.IntRange(1, 1000),
    default=1,
    show_default=True,
    help="Submit N copies, each starting after the previous ends (afterany): a long run in pieces.",
)
@exits(
    (1, "refused by the site's submit filter (as gen)"),
    (2, "usage or input error, or sbatch refused the job (its message and what to do on stderr)"),
)
@click.pass_context
def submit_cmd(
    ctx: click.Context, /, out_file: Optional[str], as_json: bool, test_only: bool, chain: int, **kw: Any
) -> None:
    """Generate the script (as `gen` does) and submit it with sbatch; print the job id.

    A chain (--chain N) with --requeue needs --checkpoint-dir, or each piece would start
    again from step 0.

    \b
    Examples:
      slurmgpu submit --model llama3-70b --launcher megatron --nodes 2 --smoke
      slurmgpu submit --model llama3-70b --launcher megatron --nodes 2 --smoke --test-only
      slurmgpu init --model llama3-8b --launcher megatron && \\
          slurmgpu submit --requeue --chain 4 --time 24:00:00 --checkpoint-dir '$SCRATCH/ckpt'
    """
    import shutil
    import subprocess

    from ..errors import SlurmError
    from ..slurm import advice
    from ..slurm.hints import NO_CONFIG

    _site, spec, gen = _build_job(ctx, kw)
    if chain > 1 and not spec.checkpoint_dir:
        if spec.requeue:
            raise SlurmgpuError(
                "--chain %d with --requeue and no --checkpoint-dir: every piece would start again from step 0; "
                "give --checkpoint-dir DIR (or `checkpoint_dir:` in slurmgpu.yaml), where the program saves and "
                "resumes (SLURMGPU_CHECKPOINT_DIR)" % chain
            )
        click.echo(
            "warning: --chain %d without --checkpoint-dir: each piece starts from step 0 unless the program "
            "resumes by itself" % chain,
            err=True,
        )
    _summary(gen)
    if out_file:
        _write_atomic(out_file, gen.script)
    sbatch = shutil.which("sbatch")
    if sbatch is None:
        raise SlurmError(
            "sbatch not found on PATH: %s; or write the script with `slurmgpu gen -o job.sh` and submit it there"
            % NO_CONFIG
        )
    ids = []
    prev = None
    for _ in range(chain):
        argv = [sbatch, "--parsable"] + (["--test-only"] if test_only else [])
        if prev is not None:
            argv.append("--dependency=afterany:%s" % prev)
        argv += [out_file] if out_file else []
        r = subprocess.run(argv, input=None if out_file else gen.script, capture_output=True, text=True)
        if r.returncode != 0:
            said = (r.stderr or r.stdout).strip()
            todo = advice(said, "sbatch")
            raise SlurmError(
                "sbatch did not submit the job (exit %d): %s%s"
                % (r.returncode, (said.splitlines() or ["no message"])[-1], " -- " + todo if todo else "")
            )
        if test_only:
            click.echo((r.stderr or r.stdout).strip(), err=True)
            break
        if r.stderr.strip():  # the controller's warnings (slurm.log_user) come back here
            click.echo(r.stderr.strip(), err=True)
        prev = r.stdout.strip().split(";")[0]
        ids.append(prev)
    if as_json:
        _emit_json(
            {
                "job_ids": ids,
                "test_only": test_only,
                "layout": gen.request.layout.to_dict(),
                "stamp": gen.request.stamp,
                "path": out_file,
            }
        )
    else:
        for job_id in ids:
            click.echo(job_id)


@main.command("diff", cls=_CommandWithProgram)
@click.option(
    "--site",
    "sites",
    multiple=True,
    required=True,
    metavar="NAME|PATH",
    help="A site to compare (give it twice or more: --site A --site B).",
)
@click.option("--all", "show_all", is_flag=True, help="Also show the values that are the same on every site.")
@click.option(
    "--json", "as_json", is_flag=True, help="Print the rows, warnings, errors and each site's render request as JSON."
)
@functools.partial(_job_options, skip=("site_name", "out_file", "as_json"))
@exits(
    (0, "the job generates on every site"),
    (1, "refused by a site's submit filter (the other columns still shown)"),
    (2, "cannot be planned on a site, or a usage or input error"),
)
@click.pass_context
def diff_cmd(ctx: click.Context, /, sites: Any, show_all: bool, as_json: bool, **kw: Any) -> None:
    """Show what changes when the same job is generated for other sites.

    Takes the spec (SPEC, else the repo's slurmgpu.yaml) and the flags `gen` takes, applies
    each site's `sites.<name>` block, plans and renders the job for every --site, and lines
    up what differs: node count and layout (TP/PP/DP...), the #SBATCH values (GPU request,
    partition, account, ...), the NCCL/RCCL environment, the container and the launch.

    A site where the job does not fit comes first, with the reason and the site's other
    partitions where it would fit. The exit status is then that of `gen` for that site.

    \b
    Examples:
      slurmgpu diff --site dgx-h100 --site perlmutter --model llama3-8b --launcher megatron --nodes 4 --smoke
      slurmgpu diff --site dgx-h100 --site lumi-g --model llama3-70b --launcher megatron --nodes 8 --smoke
      slurmgpu diff --site dgx-h100 --site perlmutter --site lumi-g --model llama3-8b --launcher megatron --smoke --all
      slurmgpu diff --site perlmutter --site aws-p5 --launcher torchrun --nodes 2 --json -- train.py \\
          | jq '.rows[] | select(.same | not)'
    """
    from ..job import compare, render_text, search_path, site_column

    if len(sites) < 2:
        raise click.UsageError("give at least two sites to compare: --site A --site B")
    root, spec, flags = _job_spec(ctx, kw)
    loaded = [_load_site(name) for name in sites]
    known = [x.name for x in loaded]
    columns = []
    for site_obj in loaded:
        site_spec = _spec_for_site(spec, flags, site_obj, known)
        columns.append(site_column(site_obj, site_spec, search_path(kw["templates_dir"], root, site_obj)))
    shown = spec.source
    if shown and not os.path.relpath(shown).startswith(".."):
        shown = os.path.relpath(shown)
    d = compare(columns, spec=shown)
    if as_json:
        _emit_json(d.to_dict())
    else:
        click.echo(render_text(d, show_all=show_all), nl=False)
    if d.exit_code:
        sys.exit(d.exit_code)


@main.command("init")
@click.option("--site", "site_name", metavar="NAME|PATH", help="Site to check the spec against (not stored).")
@click.option("--model", help="Model to plan for (catalogue name or size).")
@click.option("--launcher", type=click.Choice(_LAUNCHERS), help="How the program starts.")
@click.option("--nodes", type=click.IntRange(1), help="Node count (default: planned).")
@click.option("--job-name", "name", metavar="NAME", help="Job name (default: the directory's name).")
@click.option("--time", default="04:00:00", show_default=True, help="Time limit.")
@click.option("--image", help="Container image.")
@click.option(
    "--dir",
    "directory",
    type=OUTPUT_DIR,
    default=".",
    show_default=True,
    metavar="DIR",
    help="Repository to scaffold (must exist).",
)
@click.option("--force", is_flag=True, help="Overwrite an existing slurmgpu.yaml.")
@click.option("-y", "--yes", is_flag=True, help="Ask nothing; use defaults for what was not given.")
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
@exits(
    (0, "wrote slurmgpu.yaml and .slurmgpu/"),
    (2, "slurmgpu.yaml exists (--force replaces it), or a usage or input error"),
)
def init_cmd(
    site_name: Optional[str],
    model: Optional[str],
    launcher: Optional[str],
    nodes: Optional[int],
    name: Optional[str],
    time: str,
    image: Optional[str],
    directory: str,
    force: bool,
    yes: bool,
    command: Any,
) -> None:
    """Scaffold slurmgpu.yaml and .slurmgpu/templates/ in a research repo.

    Asks for what is missing only on a terminal and only when no job flag was
    given; the program to launch may follow `--`. Launchers that need a program
    (torchrun, srun, deepspeed, accelerate) get `command: [train.py]` when none
    is given: a placeholder to edit, so that `slurmgpu gen` works at once.
    Launchers that need training inputs (megatron: data, tokenizer, train_iters,
    lr) start as `smoke: true`, a short run on mock data, with those fields
    commented out beside it.

    \b
    Examples:
      slurmgpu init --launcher torchrun -- train.py --config configs/base.yaml
      slurmgpu init --model llama3-8b --launcher torchrun && slurmgpu gen -o job.sbatch
      slurmgpu init --model llama3-70b --launcher megatron --nodes 2 --image nvcr.io#nvidia/nemo:24.07
      slurmgpu init -y
    """
    import shlex
    from pathlib import Path

    from ..job import PLACEHOLDER_PROGRAM, REPO_DIR, SPEC_FILE, get_launcher, scaffold

    root = Path(directory).resolve()
    target = root / SPEC_FILE
    if target.exists() and not force:
        raise SlurmgpuError("%s exists; use --force to replace it" % target)
    ask = not yes and sys.stdin.isatty() and not any((model, launcher, nodes, name, command))
    command = tuple(command)
    if ask:
        launcher = click.prompt("Launcher", default="torchrun", type=click.Choice(_LAUNCHERS))
        model = click.prompt("Model (catalogue name or size; empty: none)", default="", show_default=False) or None
        name = click.prompt("Job name", default=root.name)
        if not get_launcher(launcher).default_entry:
            command = tuple(shlex.split(click.prompt("Program and its arguments", default=PLACEHOLDER_PROGRAM)))
    launcher = launcher or "torchrun"
    placeholder = not command and not get_launcher(launcher).default_entry
    if placeholder:
        command = (PLACEHOLDER_PROGRAM,)
    site = _load_site(site_name, quiet=True)
    declared = _declared_to_fit(site, launcher, model, nodes, command)
    text = scaffold(
        name=name or root.name,
        site=site.name,
        launcher=launcher,
        model=model,
        nodes=nodes,
        command=command,
        time=time,
        image=image,
        placeholder=placeholder,
        inputs=get_launcher(launcher).needs_inputs,
        program=get_launcher(launcher).program,
        fsdp=bool(declared and declared.fsdp),
        implements=tuple(declared.implements) if declared else (),
    )
    from ..job import spec_from_text

    spec_from_text(text, str(target))  # what init writes must load: checked before anything is written
    _write_atomic(str(target), text, mode=0o644)
    (root / REPO_DIR / "templates").mkdir(parents=True, exist_ok=True)
    readme = root / REPO_DIR / "README.md"
    if not readme.exists():
        _write_atomic(
            str(readme),
            "Templates in templates/ override slurmgpu's built-in ones for this repo.\n"
            "Copy one here with `slurmgpu templates eject NAME`; see `slurmgpu templates list`.\n",
            mode=0o644,
        )
    click.echo("slurmgpu: wrote %s and %s/" % (target, root / REPO_DIR), err=True)
    if placeholder and not (root / PLACEHOLDER_PROGRAM).exists():
        click.echo(
            "slurmgpu: command: %s is a placeholder (there is no %s in %s yet): put your program in "
            "`command:` in %s" % (PLACEHOLDER_PROGRAM, PLACEHOLDER_PROGRAM, root, SPEC_FILE),
            err=True,
        )
    if declared is not None:
        click.echo(
            "slurmgpu: %s does not fit as a plain data-parallel program; slurmgpu.yaml declares %s so the "
            "plan fits: your program must do that (or edit the spec)"
            % (
                model,
                " and ".join(
                    w
                    for w, on in (
                        ("fsdp: true", declared.fsdp),
                        ("implements: [%s]" % ", ".join(declared.implements), bool(declared.implements)),
                    )
                    if on
                ),
            ),
            err=True,
        )
    nxt = ["slurmgpu", "gen"]
    if root != Path.cwd().resolve():
        nxt.append(str(target))
    if site_name:  # the site is not stored in the spec
        nxt += ["--site", site_name]
    click.echo("next: %s -o job.sbatch" % " ".join(shlex.quote(a) for a in nxt), err=True)


def _declared_to_fit(site: Any, launcher: str, model: Optional[str], nodes: Optional[int], command: Any) -> Any:
    """What init must declare for a program launcher's model to plan (job.sizing.declared_to_fit)."""
    from ..errors import SlurmgpuError as _Err
    from ..job import JobSpec
    from ..job.sizing import declared_to_fit

    try:
        return declared_to_fit(site, JobSpec(launcher=launcher, model=model, nodes=nodes, command=tuple(command)))
    except _Err:
        return None


@main.group("templates", cls=_Group)
def templates_grp() -> None:
    """List, show and eject the batch-script templates.

    Search order: --templates DIR, the repo's .slurmgpu/templates/, the site's
    template directory, then the built-in ones.

    \b
    Examples:
      slurmgpu templates list
      slurmgpu templates show parts/fabric_infiniband.j2
      slurmgpu templates eject parts/launch_torchrun.j2
    """


def _template_dirs(templates_dir: Optional[str], site_name: Optional[str]) -> Any:
    from ..job import find_repo, search_path

    root, _ = find_repo()
    site = _load_site(site_name, quiet=True)
    return root, search_path(templates_dir, root, site)


def _template_name(name: str, dirs: Any) -> str:
    """Accept 'parts/fabric_roce.j2', 'fabric_roce' or 'parts/fabric_roce'."""
    from ..render import locate

    cands = [name] if name.endswith(".j2") else [name + ".j2"]
    cands += ["parts/" + c for c in cands if not c.startswith("parts/")]
    for c in cands:
        try:
            locate(c, dirs)
            return c
        except SlurmgpuError:
            continue
    return cands[0]


_TEMPLATE_OPTS = [
    click.option(
        "--templates", "templates_dir", type=click.Path(file_okay=False), metavar="DIR", help="Look here first."
    ),
    click.option("--site", "site_name", metavar="NAME|PATH", help="Site whose template directory to include."),
]


def _template_opts(f: Any) -> Any:
    for opt in reversed(_TEMPLATE_OPTS):
        f = opt(f)
    return f


@templates_grp.command("list")
@_template_opts
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def templates_list(templates_dir: Optional[str], site_name: Optional[str], as_json: bool) -> None:
    """List every template and where it comes from (and what it overrides).

    \b
    Example:
      slurmgpu templates list --json
    """
    from ..render import template_names

    _root, dirs = _template_dirs(templates_dir, site_name)
    rows: List[Dict[str, Any]] = [
        {"name": n, "source": d.label, "path": os.path.join(d.path, n), "overrides": [s.label for s in shadowed]}
        for n, d, shadowed in template_names(dirs)
    ]
    if as_json:
        _emit_json(rows)
        return
    width = max(len(r["name"]) for r in rows)
    for r in rows:
        extra = "  (overrides %s)" % ", ".join(r["overrides"]) if r["overrides"] else ""
        click.echo("%s  %s%s" % (r["name"].ljust(width), r["source"], extra))


@templates_grp.command("show")
@click.argument("name", shell_complete=complete_template)
@_template_opts
def templates_show(name: str, templates_dir: Optional[str], site_name: Optional[str]) -> None:
    """Print the template NAME that the search path resolves to.

    \b
    Example:
      slurmgpu templates show fabric_slingshot
    """
    from ..render import locate

    _root, dirs = _template_dirs(templates_dir, site_name)
    path, where = locate(_template_name(name, dirs), dirs)
    click.echo("slurmgpu: %s (%s)" % (path, where.label), err=True)
    click.echo(path.read_text(encoding="utf-8"), nl=False)


@templates_grp.command("eject")
@click.argument("name", shell_complete=complete_template)
@click.option("--force", is_flag=True, help="Overwrite the repo's copy.")
@_template_opts
def templates_eject(name: str, force: bool, templates_dir: Optional[str], site_name: Optional[str]) -> None:
    """Copy a built-in template into the repo's .slurmgpu/templates/ to customise it.

    \b
    Example:
      slurmgpu templates eject parts/launch_torchrun.j2 && ${EDITOR:-vi} .slurmgpu/templates/parts/launch_torchrun.j2
    """
    from pathlib import Path

    from ..job import REPO_TEMPLATES, builtin_dir
    from ..render import BUILTIN, locate

    root, dirs = _template_dirs(templates_dir, site_name)
    builtin = [d for d in dirs if d.label == BUILTIN]
    rel = _template_name(name, builtin)
    src, _ = locate(rel, builtin)
    dest = Path(root) / REPO_TEMPLATES / rel
    if dest.exists() and not force:
        raise SlurmgpuError("%s exists; use --force to replace it" % dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    _write_atomic(str(dest), src.read_text(encoding="utf-8"))
    os.chmod(str(dest), 0o644)
    click.echo("slurmgpu: copied %s (built-in, %s) to %s" % (rel, builtin_dir(), dest), err=True)
