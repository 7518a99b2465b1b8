"""What slurmctld's job_submit plugin receives for an sbatch submission.

`slurmgpu check` must give the controller's verdict, so it turns a script's `#SBATCH` lines,
`SBATCH_*` input variables and command-line options into the job_desc fields sbatch sends
(e.g. `--gpus-per-node=8` -> tres_per_node "gres:gpu:8"), with sbatch's precedence: command
line over environment over script. The Lua adapter then reads them exactly as in slurmctld.

What sbatch sends depends on the Slurm release (``slurm_version``, the site's; None: 22.05's
behaviour).  Seen on the test cluster's 22.05.8 and 24.11.5, and read in Slurm's sources:

* TRES spelling: "gres:gpu:8" up to 23.02, "gres/gpu:8" from 23.11.
* ``--export=NIL`` and a list of names pass the SLURM_* names of the submitting shell up to
  23.11, every name starting with SLURM (SLURMGPU_TP too) from 24.05 (src/common/env.c,
  env_merge_filter); ``--export=NONE`` passes every SLURM* name in both.
* ``--segment`` (sbatch 24.05+; older ones refuse the option) reaches job_submit.lua as
  ``job_desc.segment_size`` only from 25.11.2: on 24.05-25.11.1 a command-line --segment is
  invisible to the controller's filter (an ``#SBATCH --segment`` line is still in the script
  it reads), so the model leaves segment_size out there.
* From 26.05 the client itself refuses two requests after cli_filter ran, before the
  controller sees them (``client_refusals_2605``).
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any, Dict, List, Mapping, NoReturn, Optional, Sequence, Tuple, Union

from ..errors import ConfigError, Issue
from .parse import parse_hostlist

GRES_SLASH_FROM = (23, 11, 0)  # tres_per_node "gres/gpu:8" instead of "gres:gpu:8"
EXPORT_SLURM_PREFIX_FROM = (24, 5, 0)  # --export=NIL/list pass SLURM* names, not only SLURM_*
SEGMENT_OPTION_FROM = (24, 5, 0)  # sbatch --segment
SEGMENT_VISIBLE_FROM = (25, 11, 2)  # job_submit/lua shows job_desc.segment_size
CLIENT_CHECKS_2605 = (26, 5, 0)  # sbatch/salloc/srun: --gres=gpu x --gpus-per-node, --segment vs -N
Version = Tuple[int, int, int]


_TIME = re.compile(r"^(?:(\d+)-(\d+)(?::(\d+)(?::(\d+))?)?|(\d+)(?::(\d+)(?::(\d+))?)?)$")
TIME_UNLIMITED = ("unlimited", "infinite", "-1")


def time_seconds(v: str) -> Optional[int]:
    """Slurm time formats (MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS) in seconds; None for
    anything else (sbatch also takes UNLIMITED/INFINITE/-1: no limit, see TIME_UNLIMITED)."""
    m = _TIME.match(v.strip())
    if not m:
        return None
    d, dh, dm, ds, a, b, c = m.groups()
    if d is not None:
        return int(d) * 86400 + int(dh) * 3600 + int(dm or 0) * 60 + int(ds or 0)
    if c is not None:
        return int(a) * 3600 + int(b) * 60 + int(c)
    if b is not None:
        return int(a) * 60 + int(b)
    return int(a) * 60


def tres_prefix(slurm_version: Optional[str]) -> str:
    """How Slurm `slurm_version` spells a GRES in TRES strings (job_desc.tres_per_node,
    `scontrol show job`'s TresPerNode): "gres/" from 23.11, else "gres:"."""
    ver = slurm_version_tuple(slurm_version)
    return "gres/" if ver and ver >= GRES_SLASH_FROM else "gres:"


def slurm_version_tuple(version: Optional[str]) -> Optional[Version]:
    """ "24.11" -> (24, 11, 99) (a release without a patch level: its latest), "25.11.1" ->
    (25, 11, 1); None when unknown."""
    m = re.match(r"^\s*(\d+)\.(\d+)(?:\.(\d+))?", version or "")
    if not m:
        return None
    return int(m.group(1)), int(m.group(2)), int(m.group(3)) if m.group(3) else 99


# sbatch's long options (getopt_long accepts any unambiguous prefix of these).
_LONG = (
    "account acctg-freq array batch bb bbf begin burst-buffer chdir cluster-constraint clusters "
    "comment constraint container contiguous core-spec cores-per-socket cpu-freq cpus-per-gpu "
    "cpus-per-task deadline delay-boot dependency distribution error exclude exclusive export "
    "export-file extra-node-info get-user-env gid gpu-bind gpu-freq gpus gpus-per-node "
    "gpus-per-socket gpus-per-task gres gres-flags help hint hold ignore-pbs input job-name "
    "kill-on-invalid-dep licenses mail-type mail-user mcs-label mem mem-bind mem-per-cpu "
    "mem-per-gpu mincpus network nice no-kill no-requeue nodefile nodelist nodes ntasks "
    "ntasks-per-core ntasks-per-gpu ntasks-per-node ntasks-per-socket open-mode output "
    "overcommit oversubscribe parsable partition power prefer priority profile propagate qos "
    "quiet reboot requeue reservation segment signal sockets-per-node spread-job switches "
    "test-only thread-spec threads-per-core time time-min tmp tres-bind tres-per-task uid usage "
    "use-min-nodes verbose version wait wait-all-nodes wckey wrap "
    # newer releases: --stepmgr (24.05), --external (25.05), --spread-segments and
    # --consolidate-segments (25.11)
    "stepmgr external spread-segments consolidate-segments"
).split()
_NO_ARG = set(
    "contiguous help hold ignore-pbs no-requeue overcommit oversubscribe parsable quiet reboot "
    "spread-job test-only usage use-min-nodes verbose version wait "
    "stepmgr external spread-segments consolidate-segments".split()
)
_OPTIONAL_ARG = {"exclusive", "get-user-env", "no-kill", "propagate", "requeue"}  # --requeue=expedite: 25.11
_SHORT = {
    "A": "account",
    "a": "array",
    "b": "begin",
    "c": "cpus-per-task",
    "C": "constraint",
    "D": "chdir",
    "d": "dependency",
    "e": "error",
    "F": "nodefile",
    "G": "gpus",
    "i": "input",
    "J": "job-name",
    "L": "licenses",
    "M": "clusters",
    "m": "distribution",
    "N": "nodes",
    "n": "ntasks",
    "o": "output",
    "p": "partition",
    "q": "qos",
    "S": "core-spec",
    "t": "time",
    "w": "nodelist",
    "x": "exclude",
}
_SHORT_NO_ARG = {
    "H": "hold",
    "h": "help",
    "k": "no-kill",
    "O": "overcommit",
    "Q": "quiet",
    "s": "oversubscribe",
    "V": "version",
    "v": "verbose",
    "W": "wait",
}
# SBATCH_* input environment variables sbatch reads (they override #SBATCH lines).
_ENV_INPUT = {
    "SBATCH_ACCOUNT": "account",
    "SBATCH_EXCLUSIVE": "exclusive",
    "SBATCH_EXPORT": "export",
    "SBATCH_GPUS": "gpus",
    "SBATCH_GPUS_PER_NODE": "gpus-per-node",
    "SBATCH_GPUS_PER_SOCKET": "gpus-per-socket",
    "SBATCH_GPUS_PER_TASK": "gpus-per-task",
    "SBATCH_GRES": "gres",
    "SBATCH_PARTITION": "partition",
    "SBATCH_QOS": "qos",
    "SBATCH_SEGMENT_SIZE": "segment",
}
_INT_OPTS = {
    "ntasks",
    "ntasks-per-node",
    "sockets-per-node",
    "segment",
    "ntasks-per-gpu",
    "cpus-per-task",
    "cpus-per-gpu",
}
NODELIST_RAISES_MAX_FROM = (24, 11)  # sbatch -N1 -w a,b: 22.05 refuses, 24.11 runs on both hosts
SPREAD_JOB = 1 << 8  # job_desc.bitflags of --spread-job (slurm.h SLURM_BIT(8))
# job_desc.bitflags (uint64_t) bits a user sets from sbatch (slurm.h, src/common/slurm_opt.c of
# 24.11 and 26.05); those from bit 32 on are why the filter must read the field as 64 bits
GRES_FLAG_BITS = {
    "enforce-binding": 1 << 4,
    "disable-binding": 1 << 19,
    "one-task-per-sharing": 1 << 38,
    "multiple-tasks-per-sharing": 1 << 39,
}
STEPMGR_ENABLED = 1 << 41  # --stepmgr (24.05)
EXTERNAL_JOB = 1 << 24  # --external (25.05)
SEGMENT_FLAG_BITS = {"spread-segments": 1 << 43, "consolidate-segments": 1 << 44}  # 25.11
EXPEDITED_REQUEUE = 1 << 45  # --requeue=expedite (25.11)
_HEADER_LIMIT = 1 << 20  # sbatch stops at the first command; never read further than this
_FIRST_COMMAND = re.compile(r"^[ \t\r]*[^#\s]", re.M)  # first line that is neither blank nor a comment
_DIRECTIVE = re.compile(r"^#SBATCH(.*)$", re.M)

Where = Tuple[str, Optional[int]]


def _canonical(name: str, where: Where) -> Optional[str]:
    if name in _LONG:
        return name
    matches = [n for n in _LONG if n.startswith(name)]
    if len(matches) == 1:
        return matches[0]
    if len(matches) > 1:
        _fail(where, "--" + name, "ambiguous option (could be %s)" % ", ".join("--" + m for m in matches))
    return None  # unknown: sbatch would complain; the filter does not care


def _fail(where: Where, field: str, message: str) -> NoReturn:
    raise ConfigError([Issue(where[0], where[1], None, field, message)])


Stray = Tuple[str, str, Where]  # ("option" | "word", the token, where): what sbatch stops at


def parse_options(
    argv: Sequence[str], where: Where, strays: Optional[List[Stray]] = None
) -> List[Tuple[str, Optional[str], Where]]:
    """sbatch options -> [(long name, value, where)]; unknown options are skipped (and, with
    `strays`, listed there with the words that are no option, which sbatch refuses)."""
    out: List[Tuple[str, Optional[str], Where]] = []
    i = 0
    argv = list(argv)
    while i < len(argv):
        arg = argv[i]
        i += 1
        if arg == ":":
            _fail(
                where,
                ":",
                "heterogeneous jobs (':' between components) are not supported by "
                "slurmgpu check; check each component on its own",
            )
        if arg.startswith("--") and len(arg) > 2:
            name, eq, value = arg[2:].partition("=")
            canon = _canonical(name, where)
            if canon is None:
                if strays is not None:
                    strays.append(("option", arg, where))
                    if not eq and i < len(argv) and not argv[i].startswith("-"):
                        i += 1  # its value, most likely: not a second problem
                continue
            if eq:
                if canon in _NO_ARG:
                    _fail(where, "--" + canon, "takes no value, got '%s'" % value)
                out.append((canon, value, where))
            elif canon in _NO_ARG or canon in _OPTIONAL_ARG:
                out.append((canon, "" if canon in _OPTIONAL_ARG else None, where))
            else:
                if i >= len(argv):
                    _fail(where, "--" + canon, "needs a value")
                out.append((canon, argv[i], where))
                i += 1
        elif arg.startswith("-") and len(arg) > 1:
            letter, rest = arg[1], arg[2:]
            if letter in _SHORT:
                if rest:
                    value = rest[1:] if rest.startswith("=") else rest
                else:
                    if i >= len(argv):
                        _fail(where, "-" + letter, "needs a value")
                    value = argv[i]
                    i += 1
                out.append((_SHORT[letter], value, where))
            elif letter in _SHORT_NO_ARG:
                out.append((_SHORT_NO_ARG[letter], None, where))
            elif strays is not None:
                strays.append(("option", arg, where))
        elif strays is not None:
            strays.append(("word", arg, where))
        # anything else (script arguments, stray words) is not an option
    return out


def script_strays(script: Union[str, bytes], path: str) -> List[Stray]:
    """The words of the script's #SBATCH lines that sbatch refuses: unknown options and words
    that are no option (sbatch: "Invalid directive found in batch script")."""
    out: List[Stray] = []
    for n, rest in header_lines(script):
        if rest.strip() in _HET_SEPARATORS or (rest and not rest[0].isspace()):
            continue
        try:
            words = shlex.split(rest, comments=True, posix=True)
        except ValueError:
            continue  # job_desc reports it
        parse_options(words, (path, n), out)
    return out


def split_command(tokens: Sequence[str]) -> Tuple[Optional[str], List[str], List[str]]:
    """`[options] SCRIPT [more options]` -> (script, option tokens, other words). The first word
    that is not an option or an option's value is the script; unlike sbatch, options after it
    still count as options (so `slurmgpu check job.sh -N2` reads naturally)."""
    script: Optional[str] = None
    options: List[str] = []
    words: List[str] = []
    i = 0
    tokens = list(tokens)
    while i < len(tokens):
        tok = tokens[i]
        i += 1
        takes_value = False
        if tok.startswith("--") and len(tok) > 2 and "=" not in tok:
            canon = _canonical(tok[2:], ("command line", None))
            takes_value = canon is not None and canon not in _NO_ARG and canon not in _OPTIONAL_ARG
        elif tok.startswith("-") and len(tok) == 2 and tok[1] in _SHORT:
            takes_value = True
        if tok.startswith("-") and len(tok) > 1:
            options.append(tok)
            if takes_value and i < len(tokens):
                options.append(tokens[i])
                i += 1
        elif script is None:
            script = tok
        else:
            words.append(tok)
    return script, options, words


def header_lines(script: Union[str, bytes]) -> List[Tuple[int, str]]:
    """(line number, text after '#SBATCH') for the directives sbatch reads: those before the
    first line that is neither blank nor a comment."""
    if isinstance(script, bytes):
        text = script[:_HEADER_LIMIT].decode("utf-8", "replace")
    else:
        text = script[:_HEADER_LIMIT]
    first = _FIRST_COMMAND.search(text, text.find("\n") + 1 if text.startswith("#!") else 0)
    head = text[: first.start()] if first else text
    out = []
    for m in _DIRECTIVE.finditer(head):
        out.append((head.count("\n", 0, m.start()) + 1, m.group(1).rstrip("\r")))
    return out


_HET_SEPARATORS = ("hetjob", "packjob")  # `#SBATCH hetjob`: the next directives are the next component


def het_count(script: Union[str, bytes], sbatch_args: Sequence[str] = ()) -> int:
    """Components of the het job `sbatch [args : args ...] script` submits (1: not a het job)."""
    in_script = 1 + sum(1 for _, rest in header_lines(script) if rest.strip() in _HET_SEPARATORS)
    return max(in_script, 1 + sum(1 for a in sbatch_args if a == ":"))


def _script_options(
    script: Union[str, bytes], path: str, component: Optional[int] = None
) -> List[Tuple[str, Optional[str], Where]]:
    out = []
    group = 0
    for n, rest in header_lines(script):
        if rest.strip() in _HET_SEPARATORS:
            group += 1
            continue
        if component is not None and group != component:
            continue
        if rest and not rest[0].isspace():
            continue  # "#SBATCHX" is not a directive
        try:
            words = shlex.split(rest, comments=True, posix=True)
        except ValueError as exc:
            _fail((path, n), "#SBATCH", "cannot split the line (%s)" % exc)
        out.extend(parse_options(words, (path, n)))
    return out


def _tres(kind: str, value: str, where: Where, option: str, prefix: str = "gres:") -> str:
    items = [x for x in value.split(",") if x]
    if not items:
        _fail(where, option, "needs a GPU count such as 8 or h100:8")
    out = []
    for item in items:
        if kind == "gres":
            out.append(item if item.startswith(("gres:", "gres/")) else prefix + item)
        else:
            out.append(prefix + "gpu:" + item)
    return ",".join(out)


def _nodes(value: str, where: Where) -> Tuple[int, int]:
    m = re.match(r"^(\d+)(?:-(\d+))?$", value.strip())
    if not m:
        _fail(where, "--nodes", "expected a node count like 2 or 2-4, got '%s'" % value)
    lo = int(m.group(1))
    hi = int(m.group(2)) if m.group(2) else lo
    if lo < 1 or hi < lo:
        _fail(where, "--nodes", "expected 1 <= min <= max, got '%s'" % value)
    return lo, hi


def _bitflags(opts: Mapping[str, Tuple[Optional[str], Where]]) -> int:
    """job_desc.bitflags as sbatch sets it from the options (0: none of them)."""
    bits = SPREAD_JOB if "spread-job" in opts else 0
    if "gres-flags" in opts:
        value, where = opts["gres-flags"]
        for word in (value or "").lower().split(","):
            if word == "allow-task-sharing":
                _fail(where, "--gres-flags", "allow-task-sharing is for srun only (sbatch refuses it)")
            if word not in GRES_FLAG_BITS:
                _fail(where, "--gres-flags", "expected %s, got '%s'" % (", ".join(sorted(GRES_FLAG_BITS)), word))
            bits |= GRES_FLAG_BITS[word]
    if "stepmgr" in opts:
        bits |= STEPMGR_ENABLED
    if "external" in opts:
        bits |= EXTERNAL_JOB
    for name, bit in SEGMENT_FLAG_BITS.items():
        if name in opts:
            bits |= bit
    if (opts.get("requeue", (None,))[0] or "").strip().lower() == "expedite":
        bits |= EXPEDITED_REQUEUE
    return bits


def _gres_has_gpu(gres: Optional[str]) -> bool:
    """Whether a --gres value asks for GPUs as sbatch 26.05 tells it: "gres/gpu" anywhere in the
    normalised list (so gpu:h100:8 and gres/gpu:8 do, --gres=none does not)."""
    if not gres or gres.strip().lower() == "none":
        return False
    items = [x.strip() for x in gres.split(",") if x.strip()]
    return any(("gres/" + x.split("gres:", 1)[-1].split("gres/", 1)[-1]).startswith("gres/gpu") for x in items)


def client_refusals_2605(opts: Mapping[str, Tuple[Optional[str], Where]], ints: Mapping[str, int]) -> None:
    """What sbatch/salloc/srun of Slurm 26.05 refuse after cli_filter ran (src/common/slurm_opt.c,
    validate_options_salloc_sbatch_srun), so `check` says it as sbatch would:

    * --gres=gpu with --gpus-per-node, either from the command line, a directive or the
      environment (SBATCH_GRES, SBATCH_GPUS_PER_NODE): "sbatch: fatal: --gpus-per-node and
      --gres=gpu are mutually exclusive." (slurmctld does not check it: REST submissions pass);
    * a --segment that does not divide the node count (-N, its maximum for a range) when the job
      has more nodes than one segment: "--segment=4 does not fit the job size (6)".
    """
    gres = opts.get("gres", (None, ("", None)))[0]
    if "gpus-per-node" in opts and _gres_has_gpu(gres):
        _fail(
            opts["gpus-per-node"][1],
            "--gpus-per-node",
            "Slurm 26.05's sbatch refuses it together with --gres=%s (from %s): 'sbatch: fatal: --gpus-per-node "
            "and --gres=gpu are mutually exclusive' (also when either is set through SBATCH_GRES or "
            "SBATCH_GPUS_PER_NODE); keep one of the two" % (gres, _where_words(opts["gres"][1])),
        )
    if "segment" in ints and ints["segment"] > 0 and "nodes" in opts:
        count = _nodes(opts["nodes"][0] or "", opts["nodes"][1])[1]  # a range's maximum, as sbatch
        seg = ints["segment"]
        if count > seg and count % seg:
            _fail(
                opts["segment"][1],
                "--segment",
                "Slurm 26.05's sbatch refuses --segment=%d for %d nodes: 'sbatch: fatal: --segment=%d does not fit "
                "the job size (%d): node count must be evenly divisible by segment size'; use a --segment that "
                "divides %d" % (seg, count, seg, count, count),
            )


def _where_words(where: Where) -> str:
    """ "line 3 of job.sh", "the environment", "the command line" for a message."""
    if where[1] is not None:
        return "line %d of %s" % (where[1], where[0])
    return "the " + where[0]


def _export_env(export: Optional[str], env: Mapping[str, str], slurm_prefix: bool = False) -> Dict[str, str]:
    """The environment slurmctld receives for --export (default ALL); `slurm_prefix`: NIL and
    lists pass every SLURM* name (24.05+), not only SLURM_* ones."""
    if export is None or export == "" or export.startswith("ALL"):
        out = dict(env)
        items = export.split(",")[1:] if export else []
    elif export == "NONE":
        # seen live on 22.05: NONE passes every name starting with SLURM (SLURMGPU_TP too),
        # while NIL and a list of names pass only SLURM_* names (plus the listed ones)
        out = {k: v for k, v in env.items() if k.startswith("SLURM")}
        out["SLURM_GET_USER_ENV"] = "1"
        items = []
    else:
        out = {k: v for k, v in env.items() if k.startswith("SLURM" if slurm_prefix else "SLURM_")}
        items = [] if export == "NIL" else export.split(",")
    for item in items:
        name, eq, value = item.partition("=")
        if eq:
            out[name] = value
        elif name in env:
            out[name] = env[name]
    return out


def option_sources(
    script: Union[str, bytes],
    sbatch_args: Sequence[str] = (),
    env: Optional[Mapping[str, str]] = None,
    script_path: str = "script.sh",
    partition: Optional[str] = None,
    het_component: Optional[int] = None,
    strays: Optional[List[Stray]] = None,
) -> List[Tuple[str, Optional[str], Where]]:
    """Every sbatch option of a submission with where it was set, in sbatch's order of precedence
    (script, SBATCH_* environment, command line: a later one wins). `strays` collects what the
    command line has that sbatch cannot read (script_strays gives the script's)."""
    env = env or {}
    sources = _script_options(script, script_path, het_component)
    for var, name in sorted(_ENV_INPUT.items()):
        if var in env:
            sources.append((name, env[var], ("environment", None)))
    if het_component is not None:
        groups: List[List[str]] = [[]]
        for a in sbatch_args:
            if a == ":":
                groups.append([])
            else:
                groups[-1].append(a)
        sbatch_args = groups[het_component] if het_component < len(groups) else []
    sources.extend(parse_options(sbatch_args, ("command line", None), strays))
    if partition:
        sources.append(("partition", partition, ("--partition", None)))
    return sources


def job_desc(
    script: Union[str, bytes],
    sbatch_args: Sequence[str] = (),
    env: Optional[Mapping[str, str]] = None,
    script_path: str = "script.sh",
    partition: Optional[str] = None,
    user: Optional[str] = None,
    uid: Optional[int] = None,
    account: Optional[str] = None,
    qos: Optional[str] = None,
    script_args: Sequence[str] = (),
    slurm_version: Optional[str] = None,
    het_component: Optional[int] = None,
) -> Dict[str, Any]:
    """The job_desc fields (unset numbers omitted, read as NO_VAL) for `sbatch [sbatch_args]
    script_path [script_args]` with this script text and environment, as the job_submit.lua
    of Slurm `slurm_version` ("24.11"; None: 22.05) sees them. `het_component`: that component
    of a het job (see het_count): its own directives and `:`-separated options; only
    component 0 carries the script, as in slurmctld. A script with a NUL byte is refused, as
    sbatch refuses it (the controller would see the text only up to the NUL)."""
    data = script if isinstance(script, bytes) else script.encode("utf-8", "surrogateescape")
    if b"\0" in data:
        at = data.index(b"\0")
        _fail(
            (script_path, data.count(b"\n", 0, at) + 1),
            "script",
            "contains a NUL byte; sbatch refuses such scripts (remove it, e.g. with tr -d '\\000')",
        )
    env = dict(env or {})
    ver = slurm_version_tuple(slurm_version)
    prefix = tres_prefix(slurm_version)
    opts: Dict[str, Tuple[Optional[str], Where]] = {}
    sources = option_sources(script, sbatch_args, env, script_path, partition, het_component)
    for name, value, where in sources:
        opts[name] = (value, where)

    def val(name: str) -> Optional[str]:
        return opts[name][0] if name in opts else None

    desc: Dict[str, Any] = {"script": script, "argv": [script_path] + list(script_args)}
    for name in ("partition", "account", "qos"):
        if val(name):
            desc[name] = val(name)
    if account:
        desc["account"] = account
    if qos:
        desc["qos"] = qos
    ints: Dict[str, int] = {}
    for name in _INT_OPTS:
        if name in opts:
            value, where = opts[name]
            if value is None or not re.match(r"^\d+$", value.strip()):
                _fail(where, "--" + name, "expected a whole number, got '%s'" % value)
            ints[name] = int(value)
    if "nodes" in opts:
        lo, hi = _nodes(opts["nodes"][0] or "", opts["nodes"][1])
        desc["min_nodes"], desc["max_nodes"] = lo, hi
    if ver and ver >= CLIENT_CHECKS_2605:
        client_refusals_2605(opts, ints)
    if "ntasks" in ints:
        desc["num_tasks"] = ints["ntasks"]
    if "ntasks-per-node" in ints:
        desc["ntasks_per_node"] = ints["ntasks-per-node"]
        if "num_tasks" not in desc and "min_nodes" in desc:
            desc["num_tasks"] = desc["min_nodes"] * ints["ntasks-per-node"]
    if "cpus-per-task" in ints:
        desc["cpus_per_task"] = ints["cpus-per-task"]
    tasks = desc.get("num_tasks")
    if "cpus-per-task" in ints and tasks:
        desc["min_cpus"] = tasks * ints["cpus-per-task"]  # sbatch: ntasks x cpus-per-task
    if val("nodelist"):
        nodelist = (val("nodelist") or "").strip()
        if "/" in nodelist:  # sbatch reads a file name given to -w (one host per line)
            try:
                nodelist = ",".join(Path(nodelist).read_text(encoding="utf-8").split())
            except OSError as exc:
                _fail(opts["nodelist"][1], "--nodelist", "cannot read the host file: %s" % exc)
        desc["req_nodes"] = nodelist
        if any(int(b) - int(a) > 65536 for a, b in re.findall(r"(\d+)-(\d+)", nodelist)):
            _fail(opts["nodelist"][1], "--nodelist", "a host range of '%s' is larger than any cluster" % nodelist)
        hosts = len(set(parse_hostlist(nodelist)))
        # sbatch raises the node count to the hosts listed; a -N maximum below it is refused
        # by 22.05's sbatch and raised too by 24.11's (both seen live; releases between: unverified)
        if (
            desc.get("max_nodes") is not None
            and desc["max_nodes"] < hosts
            and not (ver and ver >= NODELIST_RAISES_MAX_FROM)
        ):
            _fail(
                opts["nodelist"][1],
                "--nodelist",
                "lists %d hosts but --nodes allows at most %d (sbatch: invalid number of nodes)"
                % (hosts, desc["max_nodes"]),
            )
        if desc.get("min_nodes", 0) < hosts:
            desc["min_nodes"] = hosts
        if desc.get("max_nodes") is not None and desc["max_nodes"] < hosts:
            desc["max_nodes"] = hosts
    bits = _bitflags(opts)
    if bits:
        desc["bitflags"] = bits
    if "sockets-per-node" in ints:
        desc["sockets_per_node"] = ints["sockets-per-node"]
    if "segment" in ints and not (ver and SEGMENT_OPTION_FROM <= ver < SEGMENT_VISIBLE_FROM):
        desc["segment_size"] = ints["segment"]
    per_node = []
    for name, kind in (("gpus-per-node", "gpu"), ("gres", "gres")):
        if val(name) and val(name) != "none":
            per_node.append(_tres(kind, val(name) or "", opts[name][1], "--" + name, prefix))
    if per_node:
        desc["tres_per_node"] = ",".join(per_node)
    for name, field in (
        ("gpus", "tres_per_job"),
        ("gpus-per-task", "tres_per_task"),
        ("gpus-per-socket", "tres_per_socket"),
    ):
        if val(name):
            desc[field] = _tres("gpu", val(name) or "", opts[name][1], "--" + name, prefix)
    if "ntasks-per-gpu" in ints:
        desc["ntasks_per_tres"] = ints["ntasks-per-gpu"]
        per_node_gpus = re.findall(r"(\d+)$", val("gpus-per-node") or "")
        if "num_tasks" in desc and per_node_gpus:
            # sbatch sends --ntasks in min_cpus and the tasks of one node's GPUs in num_tasks (seen live,
            # 22.05 and 24.11: --ntasks=16 --ntasks-per-gpu=1 --gpus-per-node=8 -> num_tasks=8 min_cpus=16)
            desc["min_cpus"] = desc["num_tasks"] * ints.get("cpus-per-task", 1)
            desc["num_tasks"] = ints["ntasks-per-gpu"] * int(per_node_gpus[0])
    if "cpus-per-gpu" in ints:
        desc["cpus_per_tres"] = "%sgpu:%d" % (prefix, ints["cpus-per-gpu"])
    if "ntasks-per-gpu" in ints and "num_tasks" not in desc and val("gpus"):
        total = sum(int(m) for m in re.findall(r"(?:^|[:,])(\d+)(?=,|$)", val("gpus") or ""))
        if total:
            desc["num_tasks"] = total * ints["ntasks-per-gpu"]
    if "exclusive" in opts:
        mode = (val("exclusive") or "").strip()
        shared = {"": 0, "user": 2, "mcs": 3, "topo": 4}.get(mode)
        if shared is None:
            _fail(opts["exclusive"][1], "--exclusive", "expected nothing, user, mcs or topo, got '%s'" % mode)
        desc["shared"] = shared
    elif "oversubscribe" in opts:
        desc["shared"] = 1
    if val("wrap"):
        desc["script"] = "#!/bin/sh\n# This script was created by sbatch --wrap.\n\n%s\n" % val("wrap")
    if "external" in opts:  # sbatch --external (25.05+) sends no batch script (seen on 26.05)
        desc.pop("script", None)
        desc["argv"] = []
    desc["environment"] = _export_env(val("export"), env, slurm_prefix=bool(ver and ver >= EXPORT_SLURM_PREFIX_FROM))
    if val("distribution"):  # sbatch passes -m to the job's sruns as SLURM_DISTRIBUTION (and its plane size)
        dist = (val("distribution") or "").strip()
        desc["environment"]["SLURM_DISTRIBUTION"] = dist
        plane = re.match(r"^plane=(\d+)", dist)
        if plane:
            desc["environment"]["SLURM_DIST_PLANESIZE"] = plane.group(1)
    if user:
        desc["user_name"] = user
    if uid is not None:
        desc["user_id"] = uid
    if het_component is not None:
        desc["het_job_offset"] = het_component
        if het_component > 0:
            del desc["script"], desc["argv"]
    return desc
