"""Site + plan + job spec -> a batch script. The only module that uses Jinja2.

The flow is one way: `plan_layout` sizes the job (the planner, or the user's pins),
`build_request` turns site, layout and spec into a `RenderRequest` of plain frozen
data, `render` prints it through the templates, and `generate` runs the submit
policy on the result. Templates come from an ordered search path
(--templates > the repo's .slurmgpu/templates > the site's > built-in); repo and
site templates run sandboxed. Output is deterministic: same inputs, same bytes.
"""
from __future__ import annotations

import os
import re
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from . import __version__
from .errors import ConfigError, Issue, PlanError, PolicyRejection, TemplateError
from .fabric import FabricEnv, fabric_env
from .launchers import Launcher, Options, PathArg, get_launcher
from .layout import Layout
from .site import NodeType, Site, preset_dir

BUILTIN = "built-in"
REPO_TEMPLATES = os.path.join(".slurmgpu", "templates")


# ---------------------------------------------------------------------------
# Shell and sbatch quoting (also the template filters)

_SAFE = re.compile(r"^[A-Za-z0-9_@%+:,./-][A-Za-z0-9_@%+=:,./-]*\Z")  # \Z: "$" would let a final newline through
_CTRL = re.compile(r"[\x00-\x1f\x7f]")
_SBATCH_SPECIAL = re.compile(r"[\\\"'#\s]")
_SBATCH_QUOTE = re.compile(r"[\\\"'\s]")


def shquote(value: Any) -> str:
    """One bash word that expands to exactly `value` and stays on one line.

    Plain words stay bare; anything else is single-quoted; control characters
    (newlines) use bash's $'...' form so no generated line is ever split.
    """
    s = str(value)
    if _SAFE.match(s):
        return s
    if "\x00" in s:
        raise TemplateError("cannot put a NUL byte in a shell argument: %r" % s)
    if not _CTRL.search(s):
        return "'" + s.replace("'", "'\\''") + "'"
    out = []
    for ch in s:
        if ch == "\\":
            out.append("\\\\")
        elif ch == "'":
            out.append("\\'")
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\t":
            out.append("\\t")
        elif ch == "\r":
            out.append("\\r")
        elif _CTRL.match(ch):
            out.append("\\x%02x" % ord(ch))
        else:
            out.append(ch)
    return "$'" + "".join(out) + "'"


# The variables a path may use; the job's shell expands them on the compute node. Nothing
# else in any user value expands (docs/gen.md, "Paths").
PATH_VARS = ("USER", "HOME", "SCRATCH", "SLURM_JOB_ID")
_PATH_VAR = re.compile(r"\$(?:\{(%s)\}|(%s)(?![A-Za-z0-9_]))" % ("|".join(PATH_VARS), "|".join(PATH_VARS)))
_DQ_UNSAFE = re.compile(r'[$`"\\!\x00-\x1f\x7f]')


def expand_path(text: str, environ: Mapping[str, str]) -> str:
    """What the job's shell makes of a path value: each $VAR / ${VAR} of PATH_VARS replaced from
    `environ` (left as written when unset there), everything else as written."""
    return _PATH_VAR.sub(lambda m: environ.get(m.group(1) or m.group(2), m.group(0)), text)


def shpath(value: Any) -> str:
    """One bash word for a path: $USER, $HOME, $SCRATCH and $SLURM_JOB_ID (also as ${...})
    expand when the script runs; every other character stays literal, as with `shquote`.

    '/scratch/$USER/ckpt' -> "/scratch/${USER}/ckpt"; a value with no such variable is
    quoted exactly as by `shquote`. An unset variable stops the job (`set -u`) instead of
    writing to a truncated path.
    """
    s = str(value)
    pieces: List[Tuple[bool, str]] = []  # (is a variable, text)
    pos = 0
    for m in _PATH_VAR.finditer(s):
        if m.start() > pos:
            pieces.append((False, s[pos:m.start()]))
        pieces.append((True, m.group(1) or m.group(2)))
        pos = m.end()
    if not any(is_var for is_var, _ in pieces):
        return shquote(s)
    if pos < len(s):
        pieces.append((False, s[pos:]))
    if not any(_DQ_UNSAFE.search(text) for is_var, text in pieces if not is_var):
        return '"' + "".join("${%s}" % text if is_var else text for is_var, text in pieces) + '"'
    # Mixed: each literal piece quoted on its own (never bare, so shellcheck reads no "A"B"C").
    return "".join('"${%s}"' % text if is_var else _quoted(text) for is_var, text in pieces)


def _quoted(text: str) -> str:
    q = shquote(text)
    return q if q.startswith(("'", "$'")) else "'" + q + "'"  # a bare shquote word has no quote in it


def sbatch_quote(value: Any) -> str:
    """A value for an #SBATCH line, as sbatch's own parser reads it back.

    sbatch splits the line on blanks, groups "double quotes" (with \\" and \\\\ inside) and
    treats an unescaped '#' as the start of a comment, so a pyxis image is written
    nvcr.io\\#nvidia/pytorch:24.04-py3 and anything with blanks or quotes goes in double
    quotes. (A backslash before a blank does not work: checked against Slurm 22.05.)
    """
    s = str(value)
    if _CTRL.search(s):
        raise TemplateError("an #SBATCH value must be one line: %r" % s)
    if not _SBATCH_SPECIAL.search(s):
        return s
    if not _SBATCH_QUOTE.search(s):
        return s.replace("#", "\\#")
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def comment(value: Any) -> str:
    """Text safe inside a '# ...' line: control characters become spaces."""
    return _CTRL.sub(" ", str(value))


def arg_groups(argv: Sequence[str]) -> List[Tuple[str, ...]]:
    """Arguments grouped as they are displayed: the leading words (the program), then each option
    with its value (or alone). The words are kept as given (a launchers.PathArg stays one)."""
    groups: List[Tuple[str, ...]] = []
    i = 0
    while i < len(argv) and not str(argv[i]).startswith("-"):
        i += 1
    if i:
        groups.append(tuple(argv[:i]))
    while i < len(argv):
        a = str(argv[i])
        nxt = str(argv[i + 1]) if i + 1 < len(argv) else None
        if a.startswith("-") and a != "--" and "=" not in a and nxt is not None and not nxt.startswith("-"):
            groups.append((argv[i], argv[i + 1]))
            i += 2
        else:
            groups.append((argv[i],))
            i += 1
    return groups


def arg_lines(argv: Sequence[str]) -> List[str]:
    """Quoted arguments grouped for display: the leading words (the program) share a line, and so
    does an option with its value. Only the layout of the script changes, never the words.
    Path arguments (launchers.PathArg) are quoted with `shpath`, every other one with `shquote`."""
    def word(a: Any) -> str:
        return shpath(a) if isinstance(a, PathArg) else shquote(a)

    return [" ".join(word(a) for a in g) for g in arg_groups(argv)]


# ---------------------------------------------------------------------------
# The data a template sees

@dataclass(frozen=True)
class Sbatch:
    """The #SBATCH options of a script, resolved from site, layout and spec."""

    job_name: str
    nodes: int
    gpus_per_node: int
    gpu_request: str  # gpus-per-node | gres
    ntasks_per_node: int
    cpus_per_task: int
    mem: Optional[str]
    partition: str
    account: Optional[str]
    qos: Optional[str]
    constraint: Optional[str]
    time: Optional[str]
    output: str
    error: Optional[str]
    exclusive: bool
    segment: Optional[int]
    signal: Optional[str]
    requeue: bool
    dependency: Optional[str]
    extra: Tuple[str, ...] = ()


@dataclass(frozen=True)
class Launch:
    """The launcher and its full program line, as the template prints it."""

    name: str
    runner: str
    summary: str
    tasks_per_node: int
    program: Tuple[str, ...]  # entry point + user args + model/layout args, unquoted
    serving: bool = False


@dataclass(frozen=True)
class ContainerPlan:
    """The container the job runs in (runtime, image, mounts), resolved for the site."""

    runtime: str  # pyxis | apptainer | none
    image: Optional[str] = None
    mounts: Tuple[str, ...] = ()
    mount_workdir: bool = False
    gpu_flag: str = "--nv"


@dataclass(frozen=True)
class Requeue:
    """Checkpoint-and-requeue before the time limit: how early and which signal."""

    grace: int
    signal: str  # forwarded to the program to ask for a checkpoint


@dataclass(frozen=True)
class RenderRequest:
    """Everything a template may use; plain data, so `--json` can print it."""

    version: str
    template: str
    regen: str
    site: str
    site_ref: str  # what `slurmgpu preflight --site` should be given on the nodes
    stamp: str
    layout: Layout
    node: NodeType
    sbatch: Sbatch
    fabric: FabricEnv
    launch: Launch
    container: ContainerPlan
    env: Tuple[Tuple[str, str], ...] = ()
    checkpoint_dir: Optional[str] = None
    preflight: bool = True
    requeue: Optional[Requeue] = None
    export_srun_cpus: bool = True
    about: Tuple[str, ...] = ()
    model: Optional[str] = None  # catalogue name, read by `slurmgpu doctor` for out-of-memory advice

    def context(self) -> Dict[str, Any]:
        return {f: getattr(self, f) for f in self.__dataclass_fields__}

    def to_dict(self) -> Dict[str, Any]:
        d = asdict(self)
        d["fabric"] = self.fabric.to_dict()
        d["node"] = self.node.to_dict()
        return d


# ---------------------------------------------------------------------------
# Template search path and the one Environment factory

@dataclass(frozen=True)
class TemplateDir:
    """One directory of the template search path and where it comes from."""

    path: str
    label: str  # --templates | repo | site | built-in


def builtin_dir() -> str:
    from .site import data_dir

    return str(data_dir("templates"))


def search_path(templates: Optional[str], repo_root: Optional[Path], site: Optional[Site]) -> Tuple[TemplateDir, ...]:
    """--templates DIR > <repo>/.slurmgpu/templates > the site's template dir > built-in."""
    dirs: List[TemplateDir] = []
    if templates:
        if not os.path.isdir(templates):
            raise TemplateError("--templates %s: no such directory" % templates)
        dirs.append(TemplateDir(os.path.abspath(templates), "--templates"))
    if repo_root is not None and (repo_root / REPO_TEMPLATES).is_dir():
        dirs.append(TemplateDir(str(repo_root / REPO_TEMPLATES), "repo"))
    if site is not None and site.template_dir:
        if os.path.isdir(site.template_dir):
            dirs.append(TemplateDir(site.template_dir, "site"))
    dirs.append(TemplateDir(builtin_dir(), BUILTIN))
    return tuple(dirs)


def make_environment(dirs: Sequence[TemplateDir]) -> Any:
    """Strict: an undefined variable is an error, never an empty string in a job script.

    Sandboxed whenever a template can come from a repo or a site.
    """
    import jinja2

    if all(d.label == BUILTIN for d in dirs):
        env_class = jinja2.Environment
    else:
        from jinja2.sandbox import SandboxedEnvironment

        env_class = SandboxedEnvironment
    loader = jinja2.FileSystemLoader([d.path for d in dirs])
    env = env_class(loader=loader, undefined=jinja2.StrictUndefined, keep_trailing_newline=True,
                    trim_blocks=True, lstrip_blocks=True, autoescape=False, auto_reload=False,
                    bytecode_cache=_bytecode_cache(env_class.__name__))
    env.filters.update(shquote=shquote, shpath=shpath, sbatch_quote=sbatch_quote, comment=comment,
                       arg_lines=arg_lines)
    return env


def cache_dir(environ: Optional[Mapping[str, str]] = None) -> Optional[str]:
    """Where compiled templates are cached: $SLURMGPU_CACHE_DIR (empty: no cache), else
    $XDG_CACHE_HOME/slurmgpu or ~/.cache/slurmgpu. Jinja checks each template's source
    against the cached code, so an edited template is recompiled."""
    from .cache import cache_dir as root  # one definition, shared with the parsed-YAML cache

    return root(environ)


def _bytecode_cache(kind: str) -> Any:
    """A compiled-template cache (saves most of the template time on every later run), or None.

    One directory per environment class: the sandbox compiles the same source to different
    code (its calls go through `environment.call`), and Jinja's cache key is only the
    template's name and file, so a shared directory would hand one class the other's code.
    """
    d = cache_dir()
    if not d:
        return None
    # entries carry Jinja's and Python's bytecode magic; stale ones are redone
    d = os.path.join(d, "jinja", kind)
    try:
        os.makedirs(d, mode=0o700, exist_ok=True)
    except OSError:
        return None
    if not os.access(d, os.W_OK):
        return None
    from jinja2.bccache import FileSystemBytecodeCache

    return FileSystemBytecodeCache(d)


def template_names(dirs: Sequence[TemplateDir]) -> List[Tuple[str, TemplateDir, Tuple[TemplateDir, ...]]]:
    """Every template on the path: (name, where it resolves, the places it shadows)."""
    found: Dict[str, List[TemplateDir]] = {}
    for d in dirs:
        base = Path(d.path)
        for p in sorted(base.rglob("*.j2")):
            found.setdefault(p.relative_to(base).as_posix(), []).append(d)
    return [(n, where[0], tuple(where[1:])) for n, where in sorted(found.items())]


def locate(name: str, dirs: Sequence[TemplateDir]) -> Tuple[Path, TemplateDir]:
    for d in dirs:
        p = Path(d.path) / name
        if p.is_file():
            return p, d
    raise TemplateError(_not_found(name, dirs))


def _not_found(name: str, dirs: Sequence[TemplateDir]) -> str:
    looked = "\n".join("  %s (%s)" % (os.path.join(d.path, name), d.label) for d in dirs)
    return "template %r not found; looked in:\n%s" % (name, looked)


def render(req: RenderRequest, dirs: Sequence[TemplateDir]) -> str:
    """Render `req.template`; errors name the template file and line."""
    import jinja2

    env = make_environment(dirs)
    try:
        return env.get_template(req.template).render(**req.context())
    except jinja2.TemplateNotFound as exc:
        raise TemplateError(_not_found(exc.name or req.template, dirs)) from None
    except jinja2.TemplateSyntaxError as exc:
        raise TemplateError("%s:%s: template syntax error: %s" % (
            exc.filename or exc.name, exc.lineno, exc.message)) from None
    except TemplateError as exc:
        raise TemplateError("%s: %s" % (_where(exc), exc)) from None
    except Exception as exc:  # undefined variables, sandbox refusals, template bugs
        if isinstance(exc, (jinja2.UndefinedError, jinja2.TemplateError, TypeError, ValueError,
                            AttributeError, KeyError, IndexError, ZeroDivisionError)):
            raise TemplateError("%s: %s: %s" % (_where(exc), type(exc).__name__, exc)) from None
        raise


def _where(exc: BaseException) -> str:
    """file:line of the innermost template frame in a traceback (Jinja rewrites them)."""
    import traceback

    for frame in reversed(traceback.extract_tb(exc.__traceback__)):
        if frame.filename.endswith(".j2"):
            return "%s:%d" % (frame.filename, frame.lineno)
    return "<template>"


# ---------------------------------------------------------------------------
# Sizing: the planner, or the user's pins when there is no model

def _model(ref: str) -> Any:
    from .models import get_model, model_from_params
    from .schema import parse_size

    try:
        return get_model(ref)
    except ConfigError:
        if parse_size(ref) is not None:
            return model_from_params(ref)
        raise


def layout_from_pins(node: NodeType, nodes: Optional[int], gpus: Optional[int],
                     pins: Mapping[str, int]) -> Layout:
    """The layout when nothing is planned: the whole allocation is DP unless pinned."""
    gpn = node.gpus
    if gpus is not None:
        if gpus < gpn and (nodes or 1) == 1:
            gpn, nodes = gpus, 1
        else:
            need = -(-gpus // gpn)
            if gpus % gpn:
                raise PlanError("--gpus %d is not a whole number of %d-GPU nodes" % (gpus, gpn))
            if nodes is not None and nodes != need:
                raise PlanError("--gpus %d and --nodes %d disagree (%d GPUs per node)" % (gpus, nodes, gpn))
            nodes = need
    nodes = nodes or 1
    world = nodes * gpn
    tp, pp, cp, ep = (pins.get(k, 1) for k in ("tp", "pp", "cp", "ep"))
    inner = tp * pp * cp
    if world % inner:
        raise PlanError("tp x pp x cp = %d x %d x %d = %d does not divide the %d GPUs (%d nodes x %d)" % (
            tp, pp, cp, inner, world, nodes, gpn))
    dp = pins.get("dp", world // inner)
    if tp * pp * cp * dp != world:
        raise PlanError("tp x pp x cp x dp = %d, but the job has %d GPUs (%d nodes x %d)" % (
            inner * dp, world, nodes, gpn))
    if (dp * cp) % ep:
        raise PlanError("ep=%d must divide dp x cp = %d (experts are spread over data-parallel ranks)" % (ep, dp * cp))
    return Layout(tp=tp, pp=pp, dp=dp, cp=cp, ep=ep, micro_batch=pins.get("micro_batch", 1), nodes=nodes,
                  gpus_per_node=gpn)


@dataclass(frozen=True)
class Sizing:
    """The layout a script is rendered for: planned (with the plan) or pinned."""

    layout: Layout
    plan: Any = None  # slurmgpu.plan.Plan when a model was planned
    model: Any = None
    notes: Tuple[str, ...] = ()


def plan_layout(site: Site, spec: Any) -> Sizing:
    """Plan the job with the planner when the spec names a model; otherwise honour the pins."""
    partition = spec.partition or site.default_partition
    node = site.node_type_of(partition)
    launcher = get_launcher(spec.launcher)
    if not spec.model:
        pins = dict(spec.parallel)
        if launcher.serving:
            # One server over all GPUs: TP inside the NVLink domain, pipeline stages across the rest.
            if "tp" not in pins:
                pins["tp"] = min(node.gpus, node.nvlink_domain, spec.gpus or node.gpus)
            pins.setdefault("dp", 1)
            world = (spec.gpus if spec.gpus is not None else (spec.nodes or 1) * node.gpus)
            pins.setdefault("pp", max(1, world // (pins["tp"] * pins.get("cp", 1))))
        layout = layout_from_pins(node, spec.nodes, spec.gpus, pins)
        return Sizing(layout=layout, notes=("no model given: the layout is what was pinned, the rest "
                                            "data parallel (give --model to have it planned)",))
    from .plan import make_plan

    model = _model(spec.model)
    plan = make_plan(site, plan_request(site, spec, model))
    return Sizing(layout=plan.layout, plan=plan, model=model, notes=tuple(plan.explanation))


def plan_request(site: Site, spec: Any, model: Any, **extra: Any) -> Any:
    """The planner's request for a spec (`gen` and `plan` ask the same question); `extra` sets the
    planner-only knobs (optimizer, zero, recompute, target_days)."""
    from .plan import PlanRequest

    task = spec.task
    if get_launcher(spec.launcher).serving and task == "pretrain":
        task = "inference"
    return PlanRequest(model=model, task=task, partition=spec.partition or site.default_partition, gpus=spec.gpus,
                       nodes=spec.nodes, seq=spec.seq, global_batch=spec.global_batch, precision=spec.precision,
                       tokens=spec.tokens, pins=dict(spec.parallel), **extra)


# ---------------------------------------------------------------------------
# Building the request

def _version_tuple(v: Optional[str]) -> Optional[Tuple[int, int]]:
    m = re.match(r"^(\d+)\.(\d+)", v or "")
    return (int(m.group(1)), int(m.group(2))) if m else None


def site_ref(site: Site) -> str:
    """How the nodes should name this site: the preset name, or the config's absolute path."""
    try:
        preset = (preset_dir() / (site.name + ".yaml")).resolve()
        if Path(site.source).resolve() == preset:
            return site.name
    except OSError:
        pass
    return str(Path(site.source).resolve())


def segment_for(site: Site, node: NodeType, layout: Layout, wanted: Optional[int],
                planned: Optional[int] = None) -> Optional[int]:
    """--segment on sites whose NVLink domain spans nodes (topology/block, NVL72).

    Both the choice and the check of a user's --segment are the planner's rule
    (`plan.segment_for`, `plan.segment_error`: whole TP groups of tp / gcd(tp, GPUs per node)
    nodes inside one domain), which is also the submit policy's.
    """
    from .plan import segment_error
    from .plan import segment_for as planned_segment

    if wanted is not None:
        if site.topology != "block":
            raise ConfigError([Issue("", None, None, "segment",
                                     "--segment needs a topology/block site (NVLink domains across nodes); "
                                     "site %s has topology %s" % (site.name, site.topology))])
        err = segment_error(node, layout.tp, layout.nodes, layout.gpus_per_node, wanted)
        if err:
            raise ConfigError([Issue("", None, None, "segment", err)])
        return wanted
    if planned is not None:
        return planned
    seg, err = planned_segment(node, layout.tp, layout.nodes, layout.gpus_per_node)
    if err:
        raise PlanError(err)
    return seg


def build_request(site: Site, spec: Any, sizing: Sizing, regen: str = "") -> Tuple[RenderRequest, Tuple[str, ...]]:
    """Turn site + layout + spec into the frozen data the templates print; also return warnings."""
    warnings: List[str] = []
    layout = sizing.layout
    launcher = get_launcher(spec.launcher)
    partition = spec.partition or site.default_partition
    part = site.partition(partition)
    node = site.node_types[part.node_type]
    _check_size(spec, part, layout, launcher)
    fsdp = spec.fsdp or getattr(sizing.plan, "zero", None) == 3
    argv = launch_argv(launcher, spec, sizing, fsdp)
    container = _container(site, node, spec, warnings)
    fab = fabric_env(node, launcher.name, layout, fsdp)
    warnings.extend(_lint_user_env(fab, node, spec.env))
    warnings.extend(_lint_paths(spec.checkpoint_dir, container.mounts))
    tpn = launcher.tasks_per_node(layout.gpus_per_node)
    launch = Launch(name=launcher.name, runner=launcher.runner, summary=launcher.summary, tasks_per_node=tpn,
                    program=argv, serving=launcher.serving)
    ver = _version_tuple(site.slurm_version)
    req = RenderRequest(
        version=__version__, template=spec.template, regen=regen, site=site.name, site_ref=site_ref(site),
        stamp=layout.stamp(site.name), layout=layout, node=node,
        sbatch=_sbatch(site, part, node, spec, sizing, launcher), fabric=fab, launch=launch,
        container=container, env=tuple(spec.env.items()), checkpoint_dir=spec.checkpoint_dir,
        preflight=spec.preflight,
        requeue=Requeue(grace=spec.grace, signal=spec.checkpoint_signal) if spec.requeue else None,
        export_srun_cpus=ver is None or ver < (23, 11),
        about=about_lines(site, node, layout, launcher, fab, sizing),
        model=getattr(sizing.model, "name", None),
    )
    return req, tuple(warnings)


def _check_size(spec: Any, part: Any, layout: Layout, launcher: Launcher) -> None:
    from . import launchers as L
    from .spec import time_seconds

    bad = L.serving_layout_ok(launcher, layout)
    if bad:
        raise PlanError(bad)
    if layout.nodes > part.max_nodes_per_job:
        raise PlanError("partition %s allows at most %d node%s per job, the job needs %d" % (
            part.name, part.max_nodes_per_job, "s" if part.max_nodes_per_job != 1 else "", layout.nodes))
    limit = time_seconds(spec.time) if spec.time else None
    if spec.requeue and limit is not None and spec.grace >= limit:
        raise ConfigError([Issue("", None, None, "grace", "the checkpoint signal comes %d s before the limit, "
                                 "but the time limit %s is only %d s" % (spec.grace, spec.time, limit))])


def launch_argv(launcher: Launcher, spec: Any, sizing: Sizing, fsdp: bool) -> Tuple[str, ...]:
    """Entry point, the user's arguments, then what the plan decided (model shape, layout)."""
    from . import launchers as L

    plan = sizing.plan
    user_argv = tuple(spec.command) + tuple(spec.args)
    where = "%s (or the arguments after --)" % spec.source if spec.source else "arguments after --"
    argv = list(L.program(launcher, spec.command, spec.args, where))
    if not spec.command or spec.command[0].startswith("-"):  # the launcher's own entry point
        n_entry = len(launcher.default_entry)
        argv[n_entry:n_entry] = L.weights_args(launcher, spec.weights)
    seq = spec.seq or getattr(plan, "seq", None) or None
    opts = Options(weights=spec.weights, seq=seq,
                   global_batch=spec.global_batch or getattr(plan, "global_batch", None) or None,
                   checkpoint_dir=spec.checkpoint_dir, fsdp=fsdp, zero=getattr(plan, "zero", None),
                   recompute=getattr(plan, "recompute", None), requeue=spec.requeue,
                   checkpoint_signal=spec.checkpoint_signal)
    argv += list(megatron_model_args(launcher, sizing.model, user_argv, seq))
    planned = L.layout_args(launcher, sizing.layout, opts, user_argv)
    L.check_conflicts(launcher, user_argv, planned, where)
    return tuple(argv) + tuple(planned)


def _sbatch(site: Site, part: Any, node: NodeType, spec: Any, sizing: Sizing, launcher: Launcher) -> Sbatch:
    """The #SBATCH values: the layout's size, the launcher's tasks, the site's and spec's choices."""
    layout = sizing.layout
    tpn = launcher.tasks_per_node(layout.gpus_per_node)
    full_node = layout.gpus_per_node == node.gpus
    return Sbatch(
        job_name=spec.name or "%s-%s" % (_slug(spec.model) if spec.model else "job", launcher.name),
        nodes=layout.nodes, gpus_per_node=layout.gpus_per_node, gpu_request=site.gpu_request,
        ntasks_per_node=tpn,
        cpus_per_task=spec.cpus_per_task or max(1, node.cpus * layout.gpus_per_node // node.gpus // tpn),
        mem=spec.mem if spec.mem is not None else ("0" if part.exclusive or full_node else None),
        partition=part.name, account=spec.account or site.account, qos=spec.qos or site.qos,
        constraint=spec.constraint or part.constraint, time=spec.time, output=spec.output or "%x-%j.out",
        error=spec.error, exclusive=part.exclusive,
        segment=segment_for(site, node, layout, spec.segment, getattr(sizing.plan, "segment", None)),
        signal="B:USR2@%d" % spec.grace if spec.requeue else None, requeue=spec.requeue,
        dependency=spec.dependency, extra=tuple(spec.sbatch))


def _lint_user_env(fab: FabricEnv, node: NodeType, env: Mapping[str, str]) -> List[str]:
    """NCCL mistakes in the user's own environment (typos, values NCCL ignores, fabric contradictions)."""
    if not any(k.startswith(("NCCL_", "TORCH_NCCL_")) for k in env):
        return []
    from .ncclenv import lint_env

    merged = {e.name: e.value for e in fab.env}
    merged.update(env)
    return ["environment: %s" % f for f in lint_env(merged, node)
            if f.level in ("error", "warning") and f.var in env]


def _lint_paths(checkpoint_dir: Optional[str], mounts: Sequence[str]) -> List[str]:
    """Path values that will not expand as their author probably meant (see shpath)."""
    out = []
    named = [("checkpoint_dir", checkpoint_dir)] if checkpoint_dir else []
    named += [("container mount", m) for m in mounts]
    for what, value in named:
        if value.startswith("~"):
            out.append("%s %s: a leading ~ is not expanded in the job; write $HOME instead (paths expand only %s)"
                       % (what, value, ", ".join("$" + v for v in PATH_VARS)))
    return out


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", os.path.basename(text.rstrip("/"))).strip("-") or "job"


def _container(site: Site, node: NodeType, spec: Any, warnings: List[str]) -> ContainerPlan:
    """The container the job runs in, with the image in the runtime's own spelling (slurmgpu.images).

    An image the site cannot run (no runtime, the other runtime's file format, a CUDA build on
    AMD GPUs or a ROCm build on NVIDIA ones) is an error that says where the image was set and
    how to give this site its own, never dropped with a warning.
    """
    from .images import ImageError, spell

    runtime = spec.container.runtime or site.container.runtime
    image = spec.container.image or site.container.image
    if spec.container.image:
        at = getattr(spec.container, "image_at", None) or ("container.image", None, None, "")
    else:
        at = (site.source, None, None, "container.image")
    mounts = tuple(site.container.mounts) + tuple(spec.container.mounts)
    if runtime == "none" and image and not spec.container.runtime:
        raise ConfigError([Issue(*at, (
            "site %s runs no container runtime (its config says container.runtime: none), so nothing would run "
            "image %s; to run on the host there, say so for that site (sites: {%s: {container: {runtime: none}}} "
            "in slurmgpu.yaml, or --container none), or choose a runtime it has (--container apptainer|pyxis)" % (
                site.name, image, site.name)))])
    if runtime != "none" and not image:
        if spec.container.runtime:
            raise ConfigError([Issue("", None, None, "container.image",
                                     "container runtime %s needs an image: --image IMAGE or container.image in "
                                     "slurmgpu.yaml" % runtime)])
        warnings.append("site %s runs jobs in %s containers but no image was given: the job runs on the host "
                        "(--image IMAGE to use one)" % (site.name, runtime))
        runtime = "none"
    if runtime == "none":
        return ContainerPlan(runtime="none")
    try:
        spelled = spell(image, runtime, site.name, node.vendor, node.gpu_model)
    except ImageError as exc:
        raise ConfigError([Issue(*at, str(exc))]) from None
    return ContainerPlan(runtime=runtime, image=spelled, mounts=mounts,
                         mount_workdir=spec.container.mount_workdir and runtime == "pyxis",
                         gpu_flag="--rocm" if node.vendor == "amd" else "--nv")


def megatron_model_args(launcher: Launcher, model: Any, user_argv: Sequence[str],
                        seq: Optional[int]) -> Tuple[str, ...]:
    """The model's shape as Megatron arguments, so the planned job is the job that runs."""
    if launcher.name != "megatron" or model is None:
        return ()
    given = {a.split("=", 1)[0] for a in user_argv}
    out: List[str] = []

    def add(flag: str, *values: Any) -> None:
        if flag not in given:
            out.extend((flag,) + tuple(str(v) for v in values))

    add("--num-layers", model.layers)
    add("--hidden-size", model.hidden)
    add("--num-attention-heads", model.heads)
    add("--ffn-hidden-size", model.ffn)
    if model.kv_heads and model.kv_heads != model.heads:
        add("--group-query-attention")
        add("--num-query-groups", model.kv_heads)
    if model.gated:
        add("--swiglu")
    if not seq:
        add("--seq-length", model.seq)
    add("--max-position-embeddings", max(seq or 0, model.seq))
    if not model.tied_embeddings:
        add("--untie-embeddings-and-output-weights")
    if model.is_moe:
        add("--num-experts", model.experts)
        add("--moe-router-topk", model.experts_active)
    return tuple(out)


def about_lines(site: Site, node: NodeType, layout: Layout, launcher: Launcher, fab: FabricEnv,
                sizing: Sizing) -> Tuple[str, ...]:
    """The human comment block: what the layout is and why."""
    lines = [
        "Layout: %d GPUs = %d node%s x %d %s; NVLink domain %d GPUs (%s)" % (
            layout.world, layout.nodes, "s" if layout.nodes != 1 else "", layout.gpus_per_node, node.gpu_model,
            node.nvlink_domain, node.link),
        "  TP=%-3d tensor parallel: %d consecutive ranks, %s" % (
            layout.tp, layout.tp, "inside one NVLink domain" if layout.tp <= node.nvlink_domain
            else "SPANS NVLink domains"),
        "  PP=%-3d pipeline stages" % layout.pp,
        "  DP=%-3d data-parallel replicas" % layout.dp,
        "  CP=%-3d context parallel   EP=%d expert parallel   micro-batch %d" % (
            layout.cp, layout.ep, layout.micro_batch),
        "Launcher: %s" % launcher.summary,
        "Fabric: %s (%s), %d compute NIC%s, %g Gb/s per node" % (
            fab.kind, fab.library, len(node.compute_nics), "" if len(node.compute_nics) == 1 else "s",
            node.fabric_gbps),
    ]
    if sizing.model is not None:
        lines.append("Model: %s" % getattr(sizing.model, "label", sizing.model))
    for note in sizing.notes:
        lines.append("Plan: %s" % note)
    return tuple(comment(x) for x in lines)


# ---------------------------------------------------------------------------
# The whole pipeline

@dataclass(frozen=True)
class Generated:
    """Everything `gen` produced: the script, its request, the sizing and the verdict."""

    script: str
    request: RenderRequest
    sizing: Sizing
    warnings: Tuple[str, ...] = ()
    verdict: Any = None
    spec: Any = None

    def to_dict(self) -> Dict[str, Any]:
        plan = self.sizing.plan
        return {
            "script": self.script, "site": self.request.site, "layout": self.request.layout.to_dict(),
            "spec": self.spec.to_dict() if self.spec is not None else None,
            "stamp": self.request.stamp, "plan": plan.to_dict() if plan is not None else None,
            "warnings": list(self.warnings),
            "policy": self.verdict.to_dict() if self.verdict is not None else None,
            "request": self.request.to_dict(),
        }


def generate(site: Site, spec: Any, dirs: Sequence[TemplateDir], regen: str = "") -> Generated:
    """Plan, render and check a job; raises PolicyRejection for a layout the filter would refuse."""
    try:
        sizing = plan_layout(site, spec)
    except PlanError:
        _refuse_pinned_tp(site, spec, dirs, regen)
        raise
    req, warnings = build_request(site, spec, sizing, regen)
    script = render(req, dirs)
    verdict = check_policy(site, spec, script, sizing)
    warns = list(warnings) + list(getattr(verdict, "warnings", ()) or ())
    return Generated(script=script, request=req, sizing=sizing, warnings=tuple(warns), verdict=verdict, spec=spec)


def _refuse_pinned_tp(site: Site, spec: Any, dirs: Sequence[TemplateDir], regen: str) -> None:
    """The planner refused a pinned TP: if the submit filter would refuse it too, say it in the
    filter's words (plus the planner's suggestion), as for a job planned without a model."""
    if "tp" not in spec.parallel:
        return
    from .errors import SlurmgpuError

    try:
        node = site.node_type_of(spec.partition or site.default_partition)
        probe = Sizing(layout=layout_from_pins(node, spec.nodes, spec.gpus, spec.parallel), model=_model(spec.model))
        req, _ = build_request(site, spec, probe, regen)
        script = render(req, dirs)
    except SlurmgpuError:
        return  # the planner's own message stands
    check_policy(site, spec, script, probe)


def check_policy(site: Site, spec: Any, script: str, sizing: Sizing) -> Any:
    """Run the submit filter's rules on the script; on reject add the planner's suggestion."""
    from .policy import check_script

    partition = spec.partition or site.default_partition
    verdict = check_script(site, script, partition=partition, account=spec.account or site.account,
                           qos=spec.qos or site.qos)
    if verdict.decision == "reject":
        msg = "\n".join(verdict.messages) or "the site's submit policy rejects this job"
        raise PolicyRejection(msg + "\n" + suggestion(site, spec, sizing))
    return verdict


def suggestion(site: Site, spec: Any, sizing: Sizing) -> str:
    """What to run instead: the planner's layout without the offending pins."""
    partition = spec.partition or site.default_partition
    node = site.node_type_of(partition)
    domain = node.nvlink_domain
    if spec.model:
        pins = {k: v for k, v in spec.parallel.items() if k not in ("tp", "pp", "dp")}
        try:
            alt = plan_layout(site, replace(spec, parallel=pins)).layout
        except (PlanError, ConfigError):
            alt = None
        if alt is not None and alt.tp <= domain:
            return ("suggestion: the planner picks tp=%d pp=%d dp=%d cp=%d on %d node%s: drop the --tp/--pp/--dp "
                    "pins, or pin --tp %d --pp %d" % (alt.tp, alt.pp, alt.dp, alt.cp, alt.nodes,
                                                        "s" if alt.nodes != 1 else "", alt.tp, alt.pp))
    # never the TP just refused: the largest TP that stays inside one node and one domain, below it
    tp, gpn = sizing.layout.tp, sizing.layout.gpus_per_node
    smaller = [t for t in range(min(tp - 1, gpn, domain), 0, -1) if gpn % t == 0 and domain % t == 0]
    example = ", e.g. --tp %d," % smaller[0] if smaller else ""
    return ("suggestion: keep tp <= %d (the NVLink domain of %s on partition %s)%s and add pipeline "
            "or data parallelism across nodes" % (domain, node.name, partition, example))
