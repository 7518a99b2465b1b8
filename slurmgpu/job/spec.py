"""The job spec (`slurmgpu.yaml`): what a research repo checks in so any site can render it.

A spec names the job, not the cluster: model, launcher, program, container,
time, size (or "plan it"), and the few Slurm settings a user may choose. Every
field can be overridden from the command line; the same checks run on both, and
errors name the file, line and field (or the flag).
"""

from __future__ import annotations

import os
import re
import shlex
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from ..errors import ConfigError, Issue
from ..jobfields import CONTAINER_FIELDS, FIELDS, SpecField
from ..schema import Checker, Field
from ..slurm.sbatch import time_seconds as time_seconds  # re-exported: sizing and request read it here
from ..vocab import PARALLEL_KEYS, TASK_ALIASES, TASKS

SPEC_FILE = "slurmgpu.yaml"
REPO_DIR = ".slurmgpu"
# Signals the batch shell may forward to the program to ask for a checkpoint. Not USR1:
# NCCL / PyTorch (and Lightning's SLURM plugin) may install their own SIGUSR1 handler.
CHECKPOINT_SIGNALS = ("TERM", "INT", "USR2", "HUP")
DEFAULT_TEMPLATE = "job.sh.j2"
# What `slurmgpu init` writes as `command:` when the launcher needs a program and none was given.
PLACEHOLDER_PROGRAM = "train.py"

# #SBATCH options slurmgpu writes itself, and the spec field (or flag) that controls each.
MANAGED_SBATCH = {
    "--nodes": "nodes",
    "-N": "nodes",
    "--gpus-per-node": "the site (gpus per node)",
    "--gres": "the site (gpus per node)",
    "--gpus": "gpus",
    "-G": "gpus",
    "--gpus-per-task": "the launcher",
    "--ntasks-per-node": "the launcher",
    "--ntasks": "the launcher",
    "-n": "the launcher",
    "--cpus-per-task": "cpus_per_task",
    "-c": "cpus_per_task",
    "--job-name": "name",
    "-J": "name",
    "--partition": "partition",
    "-p": "partition",
    "--account": "account",
    "-A": "account",
    "--qos": "qos",
    "-q": "qos",
    "--time": "time",
    "-t": "time",
    "--output": "output",
    "-o": "output",
    "--error": "error",
    "-e": "error",
    "--exclusive": "the site's partition (exclusive)",
    "--segment": "segment",
    "--signal": "requeue/grace",
    "--requeue": "requeue",
    "--dependency": "dependency",
    "-d": "dependency",
    "--constraint": "constraint",
    "-C": "constraint",
    "--mem": "mem",
}


# Where a value was set, for errors found later (file or flag, line, column, field).
Where = Tuple[str, Optional[int], Optional[int], str]


@dataclass(frozen=True)
class ContainerSpec:
    """The container a job asks for (no runtime or image: the site's)."""

    runtime: Optional[str] = None  # None: the site's default runtime
    image: Optional[str] = None
    mounts: Tuple[str, ...] = ()
    mount_workdir: bool = True  # pyxis: mount the submit directory and start there
    image_at: Optional[Where] = field(default=None, compare=False)  # where `image` was set


# The fields a `sites.<name>:` block may set: what differs between clusters for the same job
# (queue names and accounts, the size in that site's GPUs, the image its runtime and GPUs need,
# paths and environment). The job itself (model, launcher, program, arguments) is the same
# everywhere. `image` is short for `container: {image: ...}`.
SITE_FIELDS = tuple(f.key for f in FIELDS if f.per_site) + ("image",)


@dataclass(frozen=True)
class SiteOverride:
    """One `sites.<name>:` block, checked: the spec fields that apply only when that site is in effect."""

    site: str
    values: Mapping[str, Any]  # spec field -> value; "container" -> {container field: value}
    where: Where = ("", None, None, "")
    image_at: Optional[Where] = None

    def to_dict(self) -> Dict[str, Any]:
        out: Dict[str, Any] = {}
        for k, v in self.values.items():
            if k == "container":
                out[k] = {ck: list(cv) if isinstance(cv, tuple) else cv for ck, cv in v.items()}
            else:
                out[k] = list(v) if isinstance(v, tuple) else dict(v) if isinstance(v, Mapping) else v
        return out


@dataclass(frozen=True)
class JobSpec:
    """A job as slurmgpu.yaml and the flags describe it, before planning."""

    name: Optional[str] = None
    model: Optional[str] = None
    task: str = "pretrain"
    launcher: str = "torchrun"
    command: Tuple[str, ...] = ()
    args: Tuple[str, ...] = ()
    weights: Optional[str] = None
    container: ContainerSpec = ContainerSpec()
    launcher_version: Optional[str] = None  # None: the launcher's default (Launcher.versions)
    time: Optional[str] = None
    nodes: Optional[int] = None  # None: let the planner choose
    gpus: Optional[int] = None
    partition: Optional[str] = None
    account: Optional[str] = None
    qos: Optional[str] = None
    constraint: Optional[str] = None
    parallel: Mapping[str, int] = field(default_factory=dict)
    seq: Optional[int] = None
    global_batch: Optional[int] = None
    tokens: Optional[float] = None
    serve: str = "aggregated"  # serving deployment: aggregated | router | disaggregated
    input_len: Optional[int] = None  # serving: prompt tokens per request
    output_len: Optional[int] = None  # serving: generated tokens per request
    concurrency: Optional[int] = None  # serving: requests in flight
    rate: Optional[str] = None  # serving: requests per second, as written
    kv_transfer: Optional[str] = None  # disaggregated serving: nixl | mooncake (None: nixl)
    ready_timeout: int = 1800  # serving: seconds each worker may take to become ready
    precision: str = "bf16"
    fsdp: bool = False
    implements: Tuple[str, ...] = ()  # what the user's own program runs beyond DP (vocab.PROGRAM_DEGREES)
    data: Optional[str] = None  # what the framework trains on (path/prefix; $VARS expand on the node)
    tokenizer: Optional[str] = None
    train_iters: Optional[int] = None
    lr: Optional[str] = None  # kept as written (3e-4), passed to the framework as is
    smoke: bool = False  # a short run on the framework's mock data
    sbatch: Tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    checkpoint_dir: Optional[str] = None
    preflight: bool = True
    nccl_diag: bool = False  # NCCL 2.31 diagnostics at communicator start (NCCL DIAG lines for doctor)
    requeue: bool = False
    grace: Optional[int] = None  # None: from the site (KillWait) and the checkpoint's write time
    checkpoint_signal: str = "TERM"
    max_requeues: int = 3  # self-requeues after a checkpoint, counted by SLURM_RESTART_COUNT
    save_interval: Optional[int] = None  # steps between periodic checkpoints (Megatron --save-interval)
    dependency: Optional[str] = None
    output: Optional[str] = None
    error: Optional[str] = None
    mem: Optional[str] = None
    cpus_per_task: Optional[int] = None
    segment: Optional[int] = None
    template: str = DEFAULT_TEMPLATE
    sites: Tuple[SiteOverride, ...] = ()  # the spec's `sites:` blocks, every one checked
    site_override: Optional[str] = None  # the site whose block `for_site` applied
    source: Optional[str] = None  # the file it came from
    # where each field was set: (file, line, col) in the spec, or (flag, None, None)
    locs: Mapping[str, Tuple[str, Optional[int], Optional[int]]] = field(default_factory=dict, compare=False)

    def where(self, key: str) -> Tuple[str, Optional[int], Optional[int]]:
        """Where field `key` was set (the spec file, a sites.<name> block or a flag)."""
        return self.locs.get(key) or (self.source or "", None, None)

    def to_dict(self) -> Dict[str, Any]:
        d = {
            k: getattr(self, k) for k in self.__dataclass_fields__ if k not in ("container", "source", "sites", "locs")
        }
        d["command"], d["args"], d["sbatch"] = list(self.command), list(self.args), list(self.sbatch)
        d["implements"] = list(self.implements)
        d["parallel"], d["env"] = dict(self.parallel), dict(self.env)
        d["container"] = {
            "runtime": self.container.runtime,
            "image": self.container.image,
            "mounts": list(self.container.mounts),
            "mount_workdir": self.container.mount_workdir,
        }
        d["sites"] = {o.site: o.to_dict() for o in self.sites}
        return d


# ---------------------------------------------------------------------------
# Value checks shared by the YAML loader and the CLI overrides. Each returns None
# when the value is fine, else a sentence saying what is right.

_CTRL = re.compile(r"[\x00-\x1f\x7f]")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_MEM = re.compile(r"^[0-9]+[KMGT]?$")
_DEPENDENCY = re.compile(r"^(singleton|[a-z]+(:[0-9_+]+)+)([,?]([a-z]+(:[0-9_+]+)+|singleton))*$")


def one_line(v: Any) -> Optional[str]:
    if not isinstance(v, str) or not v:
        return "expected a non-empty string"
    if _CTRL.search(v):
        return "must be a single line without control characters (got %r)" % v
    return None


def check_time(v: Any) -> Optional[str]:
    if not isinstance(v, str) or time_seconds(v) is None:
        return (
            'expected a Slurm time limit such as "04:00:00", "2-00:00:00" or "90" (minutes), got %r; '
            "quote it in YAML" % (v,)
        )
    return None


def check_positive(v: Any) -> Optional[str]:
    if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
        return "expected a positive integer, got %r" % (v,)
    return None


def check_nonnegative(v: Any) -> Optional[str]:
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        return "expected a whole number of 0 or more, got %r" % (v,)
    return None


def check_env_name(name: str) -> Optional[str]:
    if not _ENV_NAME.match(name):
        return "%r is not a valid environment variable name (letters, digits, _; not starting with a digit)" % name
    return None


def check_env_value(v: str) -> Optional[str]:
    if "\x00" in v:
        return "environment values cannot contain NUL bytes"
    return None


def check_sbatch_line(v: Any) -> Optional[str]:
    bad = one_line(v)
    if bad:
        return bad
    if not v.startswith("-"):
        return "expected one sbatch option such as \"--mail-type=END\" (without '#SBATCH'), got %r" % v
    name = v.split("=", 1)[0] if v.startswith("--") else v[:2]
    if name in MANAGED_SBATCH:
        return "%s is written by slurmgpu; set %s in the spec (or its flag) instead" % (name, MANAGED_SBATCH[name])
    return None


def check_mount(v: Any) -> Optional[str]:
    bad = one_line(v)
    if bad:
        return bad
    if "," in v:
        return "a mount cannot contain ',' (pyxis separates mounts with commas): %r" % v
    return None


def check_dependency(v: Any) -> Optional[str]:
    if not isinstance(v, str) or not _DEPENDENCY.match(v):
        return 'expected a Slurm dependency such as "afterok:1234" or "afterany:12:13", got %r' % (v,)
    return None


def check_signal(v: Any) -> Optional[str]:
    s = str(v).upper()
    s = s[3:] if s.startswith("SIG") else s
    if s == "USR1":
        return (
            "SIGUSR1 may be caught by NCCL/PyTorch (or Lightning's SLURM plugin) instead of your checkpoint "
            "handler; use one of %s" % ", ".join(CHECKPOINT_SIGNALS)
        )
    if s not in CHECKPOINT_SIGNALS:
        return "expected one of %s, got %r" % (", ".join(CHECKPOINT_SIGNALS), v)
    return None


def check_template(v: Any) -> Optional[str]:
    bad = one_line(v)
    if bad:
        return bad
    if v.startswith("/") or ".." in v.split("/") or not v.endswith(".j2"):
        return "expected a template name relative to the template search path, ending in .j2 (got %r)" % v
    return None


def check_argv(v: Any) -> Optional[str]:
    if any("\x00" in a for a in v):
        return "arguments cannot contain NUL bytes"
    return None


def parse_command(v: Any) -> Tuple[Optional[Tuple[str, ...]], Optional[str]]:
    """A command is a list of arguments or one string split like a shell would (no expansion)."""
    if isinstance(v, str):
        try:
            parts = shlex.split(v)
        except ValueError as exc:
            return None, "cannot split the command string (%s); write it as a YAML list instead" % exc
        return tuple(parts), check_argv(parts)
    if isinstance(v, list) and all(isinstance(x, (str, int, float)) and not isinstance(x, bool) for x in v):
        argv = tuple(str(x) for x in v)
        return argv, check_argv(argv)
    return None, "expected a list of arguments or a command string"


def parse_nodes(v: Any) -> Tuple[Optional[int], Optional[str]]:
    if isinstance(v, str) and v.strip().lower() in ("plan", "auto"):
        return None, None
    if isinstance(v, str) and v.strip().isdigit():
        v = int(v)
    bad = check_positive(v)
    return (None, bad + ' or "plan"') if bad else (v, None)


def normal_signal(v: str) -> str:
    s = v.upper()
    return s[3:] if s.startswith("SIG") else s


# ---------------------------------------------------------------------------
# YAML


def check_mem(v: Any) -> Optional[str]:
    if _MEM.match(str(v)):
        return None
    return "expected a Slurm memory size such as 0 (all), 512G or 64000M, got %r" % (v,)


def check_number(v: Any) -> Optional[str]:
    try:
        ok = not isinstance(v, bool) and float(str(v)) > 0 and float(str(v)) != float("inf")
    except ValueError:
        ok = False
    return None if ok else "expected a positive number such as 3e-4 or 0.0003, got %r" % (v,)


def check_implements(v: Any) -> Optional[str]:
    from ..vocab import PROGRAM_DEGREES

    items = [v] if isinstance(v, str) else list(v or ())
    bad = [str(x) for x in items if x not in PROGRAM_DEGREES]
    if bad:
        return "expected any of %s (what your program runs itself), got %s" % (
            ", ".join(PROGRAM_DEGREES),
            ", ".join(repr(b) for b in bad),
        )
    return None


def split_implements(values: Any) -> Tuple[str, ...]:
    """--implements tp,pp (or repeated) -> ('tp', 'pp'), in vocab order, without repeats."""
    from ..vocab import PROGRAM_DEGREES

    items = {x.strip() for v in values for x in str(v).split(",") if x.strip()}
    return tuple(k for k in PROGRAM_DEGREES if k in items) + tuple(sorted(items - set(PROGRAM_DEGREES)))


def check_task(v: Any) -> Optional[str]:
    """One of vocab.TASKS or a word vocab.TASK_ALIASES reads as one (serve = inference)."""
    aliases = dict(TASK_ALIASES)
    if isinstance(v, str) and (v.lower() in TASKS or v.lower() in aliases):
        return None
    import difflib

    hint = difflib.get_close_matches(str(v).lower(), list(TASKS) + list(aliases), n=1)
    mean = ""
    if hint:
        mean = " (did you mean '%s'%s?)" % (hint[0], " = " + aliases[hint[0]] if hint[0] in aliases else "")
    return "expected one of %s, got %r%s" % (", ".join(TASKS), v, mean)


def task_name(v: str) -> str:
    """The canonical task for a word check_task accepts."""
    return dict(TASK_ALIASES).get(v.lower(), v.lower())


def check_grace(v: Any) -> Optional[str]:
    bad = check_positive(v)
    if bad is None and v > 65535:
        return "Slurm's --signal accepts at most 65535 seconds, got %d" % v
    return bad


# The value checks jobfields.FIELDS names (`check=`), for slurmgpu.yaml values and flags alike.
CHECKS: Dict[str, Callable[[Any], Optional[str]]] = {
    "one_line": one_line,
    "positive": check_positive,
    "time": check_time,
    "dependency": check_dependency,
    "template": check_template,
    "signal": check_signal,
    "mem": check_mem,
    "grace": check_grace,
    "nonnegative": check_nonnegative,
    "number": check_number,
    "implements": check_implements,
    "task": check_task,
}


def _schema(fields: Sequence[SpecField]) -> Dict[str, Field]:
    # a field with aliases is checked (and its alias read) by its `check`, not by the schema's choices
    return {
        f.key: Field(
            f.kind, default=f.default, choices=(f.choices or None) if not f.aliases else None, positive=f.positive
        )
        for f in fields
    }


_FIELDS = _schema(FIELDS)
_CONTAINER_FIELDS = _schema(CONTAINER_FIELDS)
# the fields read as they are (the others have their own code below)
_PLAIN = tuple(f for f in FIELDS if f.kind in ("str", "int", "bool") and f.cli != "special")


def load_spec(path: str) -> JobSpec:
    """Load and check a job spec; every problem is reported with file:line:col and field."""
    spec, issues = load_spec_issues(path)
    if issues:
        raise ConfigError(issues)
    return spec


def load_spec_issues(path: str) -> Tuple[JobSpec, List[Issue]]:
    """The spec and its problems, without stopping at them: the caller adds what the site, the
    model catalogue and the launcher find (job.validate) and reports everything in one run.
    A file that cannot be read or parsed as YAML still raises (there is nothing to go on)."""
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except OSError as exc:
        raise ConfigError([Issue(path, None, None, "", "cannot read job spec: %s" % (exc.strerror or exc))]) from None
    return spec_issues_from_text(text, path)


def spec_from_text(text: str, path: str) -> JobSpec:
    """A job spec from its YAML text (`path` only names it in errors and as its source)."""
    spec, issues = spec_issues_from_text(text, path)
    if issues:
        raise ConfigError(issues)
    return spec


def spec_issues_from_text(text: str, path: str) -> Tuple[JobSpec, List[Issue]]:
    from ..yamlsrc import load_yaml

    data = load_yaml(text, path)
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError([Issue(path, 1, 1, "", "expected a mapping at the top level of a job spec")])
    return spec_and_issues(data, path, text)


def spec_from_data(data: Any, path: str, text: str = "") -> JobSpec:
    spec, issues = spec_and_issues(data, path, text)
    if issues:
        raise ConfigError(issues)
    return spec


def spec_and_issues(data: Any, path: str, text: str = "") -> Tuple[JobSpec, List[Issue]]:
    """The spec from parsed YAML, with every problem found; a field with a bad value keeps what
    could be read of it, so the checks that need the site can still run on the others."""
    ck = Checker(path)
    v = ck.take(data, _FIELDS, "")
    kw: Dict[str, Any] = {}
    for f in _PLAIN:
        if v[f.key] is None:
            continue
        kw[f.key] = v[f.key]
        if f.check and f.check != "positive":  # positive ints: the schema checked them
            _report(ck, data, f.key, CHECKS[f.check](kw[f.key]))
    if "task" in kw and check_task(kw["task"]) is None:
        kw["task"] = task_name(kw["task"])
    sig = v["checkpoint_signal"]
    if sig is not None:
        _report(ck, data, "checkpoint_signal", check_signal(sig))
        kw["checkpoint_signal"] = normal_signal(sig)

    if v["command"] is not None:
        cmd, bad = parse_command(v["command"])
        _report(ck, data, "command", bad)
        if cmd is not None:
            kw["command"] = cmd
    kw["args"] = tuple(v["args"] or ())
    _report(ck, data, "args", check_argv(kw["args"]))
    if v["implements"]:
        kw["implements"] = split_implements(v["implements"])
        _report(ck, data, "implements", check_implements(kw["implements"]))
    if v["time"] is not None:
        t = v["time"]
        if isinstance(t, int) and not isinstance(t, bool):
            t = _raw_scalar(text, data, "time") or str(t)
        _report(ck, data, "time", check_time(t))
        kw["time"] = t if isinstance(t, str) else None
    if v["nodes"] is not None:
        n, bad = parse_nodes(v["nodes"])
        _report(ck, data, "nodes", bad)
        kw["nodes"] = n
    if v["tokens"] is not None:
        from ..schema import parse_size

        tok = parse_size(v["tokens"])
        if tok is None or tok <= 0:
            ck.error(data, "tokens", "tokens", "expected a token count such as 2T or 1.5e12, got %r" % (v["tokens"],))
        kw["tokens"] = tok
    if v["lr"] is not None:
        kw["lr"] = str(v["lr"])
        _report(ck, data, "lr", check_number(kw["lr"]))
    if v["mem"] is not None:
        kw["mem"] = str(v["mem"])
        _report(ck, data, "mem", check_mem(kw["mem"]))

    par = ck.take(v["parallel"], {k: Field("int", positive=True) for k in PARALLEL_KEYS}, "parallel", data, "parallel")
    kw["parallel"] = {k: par[k] for k in PARALLEL_KEYS if par[k] is not None}

    sb = tuple(v["sbatch"] or ())
    raw_sb = data.get("sbatch")
    for i, line in enumerate(sb):
        bad = check_sbatch_line(line)
        if bad:
            ck.error(raw_sb, i, "sbatch[%d]" % i, bad)
    kw["sbatch"] = sb
    env = dict(v["env"] or {})
    raw_env = data.get("env")
    for name, value in env.items():
        bad = check_env_name(name) or check_env_value(value)
        if bad:
            ck.error(raw_env, name, "env." + name, bad)
    kw["env"] = env

    c = ck.take(v["container"], _CONTAINER_FIELDS, "container", data, "container")
    raw_c = data.get("container")
    mounts = tuple(c["mounts"] or ())
    raw_m = raw_c.get("mounts") if isinstance(raw_c, dict) else None
    for i, m in enumerate(mounts):
        bad = check_mount(m)
        if bad:
            ck.error(raw_m, i, "container.mounts[%d]" % i, bad)
    image_at = None
    if c["image"] is not None:
        _report(ck, raw_c, "image", one_line(c["image"]), "container.image")
        image_at = ck.where(raw_c, "image") + ("container.image",)
    kw["container"] = ContainerSpec(
        runtime=c["runtime"], image=c["image"], mounts=mounts, mount_workdir=c["mount_workdir"], image_at=image_at
    )
    if v["sites"] is not None:
        kw["sites"] = _site_overrides(ck, v["sites"], path, text)
    locs = getattr(data, "locs", {})
    kw["locs"] = {k: tuple(locs[k][:3]) for k in data if isinstance(k, str) and k in locs}
    issues = sorted(ck.issues, key=lambda i: (i.file, i.line or 0, i.col or 0))
    return JobSpec(source=path, **kw), issues


def _site_overrides(ck: Checker, raw: Any, path: str, text: str) -> Tuple[SiteOverride, ...]:
    """Check every `sites.<name>:` block (also those for other sites) with the top level's rules."""
    import difflib

    from ..yamlsrc import LocDict

    out: List[SiteOverride] = []
    for name, block in raw.items():
        label = "sites.%s" % name
        if not isinstance(name, str) or not name:
            ck.error(raw, name, "sites", "a site name must be a non-empty string, got %r" % (name,))
            continue
        if block is None:
            block = LocDict()
        if not isinstance(block, dict):
            ck.error(
                raw,
                name,
                label,
                "expected a mapping of spec fields for site %s (%s), got %s"
                % (name, ", ".join(SITE_FIELDS), _describe(block)),
            )
            continue
        sub = LocDict()
        sub.loc = getattr(block, "loc", None)
        block_locs = getattr(block, "locs", {})
        for key, value in block.items():
            if key in SITE_FIELDS:
                sub[key] = value
                if key in block_locs:
                    sub.locs[key] = block_locs[key]
            elif key in _FIELDS:
                ck.error(
                    block,
                    key,
                    "%s.%s" % (label, key),
                    "cannot differ per site: the job is the same on every "
                    "site, so set it at the top level (a site block may set %s)" % ", ".join(SITE_FIELDS),
                )
            else:
                hint = difflib.get_close_matches(str(key), SITE_FIELDS, n=1)
                ck.error(
                    block,
                    key,
                    "%s.%s" % (label, key),
                    "unknown key%s"
                    % (
                        " (did you mean '%s'?)" % hint[0]
                        if hint
                        else "; a site block may set %s" % ", ".join(SITE_FIELDS)
                    ),
                )
        image_at: Optional[Where] = None
        if "image" in sub:
            c = sub.get("container")
            if isinstance(c, dict) and "image" in c:
                first = ck.where(c, "image")
                ck.error(
                    block,
                    "image",
                    label + ".image",
                    "the image is given twice: here and as container.image (line %s); keep one" % first[1],
                )
                continue
            merged = LocDict(c if isinstance(c, dict) else {})
            merged.locs.update(getattr(c, "locs", {}))
            merged.loc = getattr(c, "loc", None) or ck.where(sub, "image")
            merged["image"] = sub.pop("image")
            merged.locs["image"] = ck.where(sub, "image")
            if c is None or isinstance(c, dict):
                sub["container"] = merged
                sub.locs.setdefault("container", merged.locs["image"])
            image_at = merged.locs["image"] + (label + ".image",)
        elif isinstance(sub.get("container"), dict) and "image" in sub["container"]:
            image_at = ck.where(sub["container"], "image") + (label + ".container.image",)
        try:
            parsed = spec_from_data(sub, path, text)
        except ConfigError as exc:
            ck.issues.extend(replace(i, path=label + "." + i.path if i.path else label) for i in exc.issues)
            continue
        values: Dict[str, Any] = {}
        for key in sub:
            if key == "container":
                given = sub["container"] if isinstance(sub["container"], dict) else {}
                values[key] = {f: getattr(parsed.container, f) for f in _CONTAINER_FIELDS if f in given}
            else:
                values[key] = getattr(parsed, key)
        out.append(SiteOverride(site=name, values=values, where=ck.where(raw, name) + (label,), image_at=image_at))
    return tuple(out)


def _describe(v: Any) -> str:
    from ..schema import describe

    return describe(v)


def for_site(spec: JobSpec, site: str, known: Sequence[str] = ()) -> Tuple[JobSpec, Tuple[str, ...]]:
    """`spec` with its `sites.<site>` block applied, and warnings. CLI flags go on top (apply_overrides).

    Blocks for other sites are ignored here (they were checked when the spec was loaded). A block
    whose name is no built-in preset, not `site` and not in `known` is an error when the name is close
    to one of those (a typo: did-you-mean), else a warning: it may name a site file used elsewhere.
    """
    from ..site import preset_names

    names = sorted(set(preset_names()) | {site} | set(known))
    issues: List[Issue] = []
    warnings: List[str] = []
    chosen = None
    for o in spec.sites:
        if o.site == site:
            chosen = o
            continue
        if o.site in names:
            continue
        import difflib  # only for a block naming no known site: not loaded on every run

        hint = difflib.get_close_matches(o.site, names, n=1, cutoff=0.75)
        if hint:
            issues.append(
                Issue(
                    *o.where,
                    "no site is called '%s' (did you mean '%s'?); the site in effect is %s" % (o.site, hint[0], site),
                )
            )
        else:
            warnings.append(
                str(
                    Issue(
                        *o.where,
                        "no built-in preset is called %s and the site in effect is %s; this "
                        "block applies only where a site named %s is in effect" % (o.site, site, o.site),
                    )
                )
            )
    if issues:
        raise ConfigError(issues)
    if chosen is None:
        return spec, tuple(warnings)
    return _merge_site(spec, chosen), tuple(warnings)


def _merge_site(spec: JobSpec, o: SiteOverride) -> JobSpec:
    """A site block works like the flags: values replace, env/parallel entries overlay, sbatch/mounts add."""
    kw: Dict[str, Any] = {}
    for key, value in o.values.items():
        if key == "env":
            kw[key] = dict(spec.env, **value)
        elif key == "parallel":
            kw[key] = dict(spec.parallel, **value)
        elif key == "sbatch":
            kw[key] = tuple(spec.sbatch) + tuple(value)
        elif key == "container":
            ckw = dict(value)
            if "mounts" in ckw:
                ckw["mounts"] = tuple(spec.container.mounts) + tuple(ckw["mounts"])
            if "image" in ckw:
                ckw["image_at"] = o.image_at
            kw[key] = replace(spec.container, **ckw)
        else:
            kw[key] = value
    locs = dict(spec.locs)
    locs.update({k: o.where[:3] for k in o.values})
    return replace(spec, site_override=o.site, locs=locs, **kw)


def _report(ck: Checker, data: Any, key: str, bad: Optional[str], path: Optional[str] = None) -> None:
    if bad:
        ck.error(data, key, path or key, bad)


def _raw_scalar(text: str, data: Any, key: str) -> Optional[str]:
    """The value as written: YAML 1.1 reads an unquoted 01:30:00 as the base-60 integer 5400."""
    loc = getattr(data, "locs", {}).get(key)
    if not loc or not text:
        return None
    lines = text.splitlines()
    if loc[1] > len(lines):
        return None
    rest = lines[loc[1] - 1][loc[2] - 1 :]
    m = re.match(r"\s*%s\s*:\s*([^#\s,}\]]+)" % re.escape(key), rest)
    return m.group(1) if m and ":" in m.group(1) else None


# ---------------------------------------------------------------------------
# Overrides from the command line


def apply_overrides(spec: JobSpec, flags: Mapping[str, Any]) -> JobSpec:
    """Return `spec` with the given flag values (None = not given); errors name the flag."""
    issues: List[Issue] = []

    def bad(flag: str, msg: Optional[str]) -> bool:
        if msg:
            issues.append(Issue(flag, None, None, "", msg))
            return True
        return False

    kw: Dict[str, Any] = {}
    for f in FIELDS:
        value = flags.get(f.key)
        if f.flag is None or value is None or f.cli == "special":
            continue
        if f.cli == "switch":
            kw[f.key] = bool(value)
        elif f.check is None or not bad(f.flag, CHECKS[f.check](value)):
            kw[f.key] = str(value) if f.kind == "any" else value
    if "task" in kw:
        kw["task"] = task_name(kw["task"])
    if flags.get("checkpoint_signal") is not None and not bad(
        "--checkpoint-signal", check_signal(flags["checkpoint_signal"])
    ):
        kw["checkpoint_signal"] = normal_signal(flags["checkpoint_signal"])
    if flags.get("nodes") is not None:
        n, msg = parse_nodes(flags["nodes"])
        if not bad("--nodes", msg):
            kw["nodes"] = n
    if flags.get("tokens") is not None:
        from ..schema import parse_size

        tok = parse_size(flags["tokens"])
        if not bad("--tokens", None if tok and tok > 0 else "expected a token count such as 2T"):
            kw["tokens"] = tok
    par = dict(spec.parallel)
    for key in PARALLEL_KEYS:
        value = (flags.get("parallel") or {}).get(key)
        if value is not None and not bad("--" + key.replace("_", "-"), check_positive(value)):
            par[key] = value
    kw["parallel"] = par
    if flags.get("implements"):
        declared = split_implements(flags["implements"])
        if not bad("--implements", check_implements(declared)):
            kw["implements"] = declared
    if flags.get("command"):
        cmd = tuple(flags["command"])
        if not bad("--", check_argv(cmd)):
            kw["command"] = cmd
    if flags.get("sbatch"):
        for line in flags["sbatch"]:
            bad("--sbatch", check_sbatch_line(line))
        kw["sbatch"] = tuple(spec.sbatch) + tuple(flags["sbatch"])
    if flags.get("env"):
        env = dict(spec.env)
        for item in flags["env"]:
            name, sep, value = item.partition("=")
            if not sep:
                bad("--env", "expected NAME=VALUE, got %r" % item)
                continue
            if not bad("--env", check_env_name(name) or check_env_value(value)):
                env[name] = value
        kw["env"] = env
    c = spec.container
    ckw: Dict[str, Any] = {}
    if flags.get("container") is not None:
        ckw["runtime"] = flags["container"]
    if flags.get("image") is not None and not bad("--image", one_line(flags["image"])):
        ckw["image"], ckw["image_at"] = flags["image"], ("--image", None, None, "")
    if flags.get("mounts"):
        for m in flags["mounts"]:
            bad("--mount", check_mount(m))
        ckw["mounts"] = tuple(c.mounts) + tuple(flags["mounts"])
    if ckw:
        kw["container"] = replace(c, **ckw)
    if issues:
        raise ConfigError(issues)
    locs = dict(spec.locs)
    for f in FIELDS:
        if f.flag is not None and f.key in kw and flags.get(f.key) not in (None, (), [], {}):
            locs[f.key] = (f.flag, None, None)
    if flags.get("command"):
        locs["command"] = ("the arguments after --", None, None)
    return replace(spec, locs=locs, **kw)


# ---------------------------------------------------------------------------
# Where the repo is


def find_repo(start: Optional[str] = None) -> Tuple[Path, Optional[Path]]:
    """The research repo around `start` and its slurmgpu.yaml, if any.

    Walks up to the first directory holding slurmgpu.yaml or .slurmgpu/, stopping at a
    git root; falls back to the git root, then to `start` itself.
    """
    here = Path(start or os.getcwd()).resolve()
    git_root = None
    for d in [here] + list(here.parents):
        if (d / SPEC_FILE).is_file():
            return d, d / SPEC_FILE
        if (d / REPO_DIR).is_dir():
            return d, None
        if (d / ".git").exists():
            git_root = d
            break
    return (git_root or here), None


# ---------------------------------------------------------------------------
# `slurmgpu init`


_INPUT_EXAMPLES = {  # init's commented-out training inputs: an example value and what it is
    "data": ("/data/corpus_text_document", "what it trains on ($VARS expand on the node)"),
    "tokenizer": ("meta-llama/Llama-3.1-8B", "a Hugging Face id or a local path"),
    "train_iters": ("10000", "training steps; or `tokens: 2T` instead"),
    "lr": ("3e-4", "peak learning rate"),
}


def scaffold(
    name: str,
    site: str,
    launcher: str,
    model: Optional[str],
    nodes: Optional[int],
    command: Tuple[str, ...],
    time: str,
    image: Optional[str] = None,
    placeholder: bool = False,
    inputs: Tuple[str, ...] = (),
    program: bool = False,
    fsdp: bool = False,
    implements: Tuple[str, ...] = (),
) -> str:
    """The text of a fresh slurmgpu.yaml, commented so users see the other fields.

    `placeholder`: `command` is init's stand-in (PLACEHOLDER_PROGRAM), and the line says so.
    `inputs`: training inputs the launcher cannot start without: the spec starts as a smoke run
    on mock data (so `gen` works at once) with those fields commented out beside it.
    `program`: the launcher runs the user's own program; the spec then says what it runs (`fsdp`,
    `implements`, set where the model fits only so: the program must then do it).
    """
    import json

    def q(s: str) -> str:
        return json.dumps(s)

    lines = [
        "# slurmgpu job spec: render it for any site with `slurmgpu gen` (the guide: `slurmgpu docs gen`).",
        "# Written by `slurmgpu init --site %s`; the site is not part of the spec." % site,
        "name: %s" % q(name),
        ("model: %s" % q(model)) if model else "# model: llama3-70b        # catalogue name or a size such as 13B",
        "launcher: %s" % launcher,
    ]
    if command and placeholder:
        lines.append(
            "command: [%s]   # placeholder: your program and its arguments (a list, or a string)"
            % ", ".join(q(a) for a in command)
        )
    elif command:
        lines.append("command: [%s]" % ", ".join(q(a) for a in command))
    else:
        lines.append("# command: [train.py, --config, configs/base.yaml]   # or a string")
    lines += [
        "time: %s" % q(time),
        ("nodes: %d" % nodes) if nodes else "nodes: plan              # or a number",
    ]
    if inputs:
        lines.append("smoke: true                 # a short run on mock data; for the real run set these and drop it:")
        for f in inputs:
            value, note = _INPUT_EXAMPLES.get(f, ("...", f))
            lines.append("# %-36s # %s" % ("%s: %s" % (f, value), note))
    if program:
        lines.append(
            ("fsdp: true                  # planned as FSDP: make your program shard with it (torch fully_shard)")
            if fsdp
            else "# fsdp: true                # your program shards with FSDP (planned as DDP without it)"
        )
        lines.append(
            ("implements: [%s]%s# what your program runs beyond data parallelism" % (", ".join(implements), " " * 8))
            if implements
            else "# implements: [tp, pp]      # what your program runs beyond data parallelism (tp pp cp ep recompute)"
        )
    lines += [
        "# parallel: {tp: 8, pp: 2}   # pin parts of the layout; the rest is planned",
        "container:",
        ("  image: %s" % q(image)) if image else '  # image: "nvcr.io#nvidia/pytorch:24.04-py3"',
        "  # runtime: pyxis            # pyxis | apptainer | none (default: the site's)",
        '  # mounts: ["/data:/data"]',
        "# account: my-project",
        '# sbatch: ["--mail-type=END"]',
        "# env: {WANDB_PROJECT: my-run}",
        "# checkpoint_dir: /scratch/$USER/ckpt   # $USER $HOME $SCRATCH $SLURM_JOB_ID expand on the node",
        "# requeue: true               # checkpoint and requeue before the time limit",
        "# max_requeues: 3             # at most this many self-requeues (SLURM_RESTART_COUNT)",
        "preflight: true",
    ]
    return "\n".join(lines) + "\n"
