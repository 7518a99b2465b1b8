"""`slurmgpu admin replay`: the rendered job_submit filter over past jobs (accounting or a
directory of scripts), and what enforcing it would have done, grouped by rule, user and launcher.

Jobs come from `sacct` (Slurm keeps each batch script and environment when
`AccountingStoreFlags=job_script,job_env`; the sbatch command line is `SubmitLine`) or from
files. Each job is rebuilt into the job_desc slurmctld saw (slurm.sbatch) and judged by the same
Lua `slurmgpu check` runs. Work is bounded (`limit`, scripts over MAX_SCRIPT_BYTES are not
judged) and resumable: every finished job goes into a state file written atomically every
CHECKPOINT_EVERY jobs, and a rerun with the same state file skips them.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence, Tuple

from ..errors import SlurmgpuError
from ..site import Site
from ..slurm.runner import Runner
from .run import PolicyRunner, Verdict

MAX_SCRIPT_BYTES = 1 << 20  # sbatch's own default limit is 4 MiB; a bigger one is no training job
CHECKPOINT_EVERY = 500
SACCT_CHUNK = 100  # job ids per `sacct --batch-script/--env-vars` call
MAX_MESSAGES_PER_RULE = 3
MAX_EXAMPLES = 5
STATE_VERSION = 1
# sacct -P fields of the listing; SubmitLine last because it may contain '|'
SACCT_FIELDS = ("JobIDRaw", "User", "UID", "Account", "Partition", "QOS", "Submit", "SubmitLine")


@dataclass(frozen=True)
class PastJob:
    """One job to replay, as the controller received it."""

    job_id: str
    user: Optional[str] = None
    uid: Optional[int] = None
    account: Optional[str] = None
    partition: Optional[str] = None  # where it ran (sacct); the script and submit line decide
    qos: Optional[str] = None
    submit: str = ""  # submission time as sacct prints it, or the file's mtime
    submit_line: str = ""  # "sbatch -N2 train.sh" ("" for a file)
    script: Optional[bytes] = None
    env: Mapping[str, str] = field(default_factory=dict)
    script_path: str = "script.sh"


@dataclass(frozen=True)
class ReplayRow:
    """What the filter said about one past job (one CSV row; kept in the state file)."""

    job_id: str
    user: str
    account: str
    partition: str
    submit: str
    launcher: str
    would: str  # accept | warn | reject (shadow partitions enforced) | skipped | error
    verdict: str  # the audit word the installed filter gives (ok, warn, shadow-reject, ...)
    rules: Tuple[str, ...] = ()
    messages: Tuple[str, ...] = ()  # what the user would have been told (rejection first)

    def to_dict(self) -> Dict[str, object]:
        return {
            "job_id": self.job_id,
            "user": self.user,
            "account": self.account,
            "partition": self.partition,
            "submit": self.submit,
            "launcher": self.launcher,
            "would": self.would,
            "verdict": self.verdict,
            "rules": list(self.rules),
            "messages": list(self.messages),
        }

    @staticmethod
    def from_dict(d: Mapping[str, object]) -> ReplayRow:
        def s(k: str) -> str:
            v = d.get(k)
            return v if isinstance(v, str) else ""

        def t(k: str) -> Tuple[str, ...]:
            v = d.get(k)
            return tuple(str(x) for x in v) if isinstance(v, list) else ()

        return ReplayRow(
            s("job_id"),
            s("user"),
            s("account"),
            s("partition"),
            s("submit"),
            s("launcher"),
            s("would"),
            s("verdict"),
            t("rules"),
            t("messages"),
        )


def enforce_everywhere(site: Site) -> Site:
    """The site with every warn and shadow mode (site, partitions, launchers) made enforce: the
    question "what would enforcing have done". `off` stays off."""

    def up(mode: Optional[str]) -> Optional[str]:
        return "enforce" if mode in ("warn", "shadow") else mode

    pol = site.policy
    launchers = {k: up(v) or v for k, v in pol.launchers.items()}
    parts = {n: replace(p, policy=up(p.policy)) for n, p in site.partitions.items()}
    return replace(site, policy=replace(pol, mode=up(pol.mode) or pol.mode, launchers=launchers), partitions=parts)


def row_for(job: PastJob, runner: PolicyRunner) -> ReplayRow:
    """Judge one job; a job that cannot be rebuilt is an `error` row saying why."""

    def mk(would: str, *messages: str, verdict: str = "", launcher: str = "", rules: Tuple[str, ...] = ()) -> ReplayRow:
        return ReplayRow(
            job.job_id,
            job.user or "",
            job.account or "",
            job.partition or "",
            job.submit,
            launcher,
            would,
            verdict,
            rules,
            messages,
        )

    if job.script is None:
        return mk("skipped", "no batch script stored")
    if len(job.script) > MAX_SCRIPT_BYTES:
        why = "script of %d bytes is over the replay limit of %d" % (len(job.script), MAX_SCRIPT_BYTES)
        return mk("skipped", why)
    args: List[str] = []
    words: List[str] = []
    if job.submit_line:
        from ..slurm import split_command

        try:
            tokens = shlex.split(job.submit_line)
        except ValueError as exc:
            return mk("error", "SubmitLine: %s" % exc)
        if tokens and os.path.basename(tokens[0]) == "sbatch":
            _, args, words = split_command(tokens[1:])
    try:
        v: Verdict = runner.check(
            job.script,
            args,
            env=dict(job.env),
            user=job.user,
            uid=job.uid,
            account=job.account,
            qos=job.qos,
            script_path=job.script_path,
            script_args=words,
        )
    except SlurmgpuError as exc:
        return mk("error", str(exc).splitlines()[0])
    msgs = tuple(v.messages) + tuple(v.shadow_messages) + tuple(v.warnings) + tuple(v.shadow_warnings)
    rules = ("exempt",) if v.exempt else tuple(v.rules)
    return mk(v.would, *msgs, verdict=v.verdict, launcher=v.launcher or "", rules=rules)


# ------------------------------------------------------------------- sources
def jobs_from_dir(directory: str) -> Iterator[PastJob]:
    """Every regular file under `directory` (sorted, hidden names skipped) as a script submitted
    with no options; the id is the path relative to the directory, the user the file's owner."""
    root = Path(directory)
    if not root.is_dir():
        raise SlurmgpuError("--from-dir %s: not a directory" % directory)
    paths = sorted(
        p
        for p in root.rglob("*")
        if p.is_file() and not any(part.startswith(".") for part in p.relative_to(root).parts)
    )
    for p in paths:
        rel = str(p.relative_to(root))
        try:
            st = p.stat()
            with open(p, "rb") as f:
                data = f.read(MAX_SCRIPT_BYTES + 1)
        except OSError as exc:
            raise SlurmgpuError("cannot read %s: %s" % (p, exc.strerror)) from None
        yield PastJob(
            job_id=rel,
            user=_owner(st.st_uid),
            uid=st.st_uid,
            submit=time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(st.st_mtime)),
            script=data,
            script_path=rel,
        )


def _owner(uid: int) -> Optional[str]:
    try:
        import pwd

        return pwd.getpwuid(uid).pw_name
    except (ImportError, KeyError):
        return None


@dataclass(frozen=True)
class SacctQuery:
    """Which past jobs: `sacct -S since [-E until] [-u user] [-r partition]`."""

    since: str
    until: Optional[str] = None
    user: Optional[str] = None
    partition: Optional[str] = None

    def argv(self) -> List[str]:
        argv = ["sacct", "-a", "-X", "-P", "--noheader", "-S", self.since, "-o", ",".join(SACCT_FIELDS)]
        if self.until:
            argv += ["-E", self.until]
        if self.user:
            argv += ["-u", self.user]
        if self.partition:
            argv += ["-r", self.partition]
        return argv


def parse_listing(text: str) -> List[Dict[str, str]]:
    """`sacct -P` lines of SACCT_FIELDS; a line not starting with a job id continues the
    previous SubmitLine (a --wrap with a newline)."""
    rows: List[Dict[str, str]] = []
    n = len(SACCT_FIELDS)
    for line in text.splitlines():
        parts = line.split("|", n - 1)
        if len(parts) == n and re.fullmatch(r"\d+", parts[0]):
            rows.append(dict(zip(SACCT_FIELDS, parts)))
        elif rows and line:
            rows[-1]["SubmitLine"] += "\n" + line
    return rows


_SECTION = re.compile(r"^(Batch Script for|Environment used for) (\S+)[^\n]*\n-{20,}\n", re.M)


def parse_sections(text: str) -> List[Tuple[str, str]]:
    """`sacct --batch-script` / `--env-vars` output for several jobs: (job id, body) in order;
    a body of "NONE" means nothing was stored."""
    out: List[Tuple[str, str]] = []
    marks = list(_SECTION.finditer(text))
    for i, m in enumerate(marks):
        end = marks[i + 1].start() if i + 1 < len(marks) else len(text)
        body = text[m.end() : end]
        if body.endswith("\n\n"):
            body = body[:-1]  # the blank line sacct prints between jobs
        out.append((m.group(2), body))
    return out


def _env_of(body: str) -> Dict[str, str]:
    env: Dict[str, str] = {}
    for line in body.splitlines():
        k, sep, v = line.partition("=")
        if sep and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", k):
            env[k] = v
    return env


def _fetch(runner: Runner, flag: str, ids: Sequence[str]) -> Dict[str, Optional[str]]:
    """Bodies of `sacct FLAG -j ids` by id (None: not stored). Falls back to one call per job
    when the sections do not name exactly the ids asked for (a script that prints a header)."""
    res = runner.run(["sacct", flag, "-j", ",".join(ids)], timeout=300)
    if not res.ok:
        raise SlurmgpuError("cannot read past jobs: %s" % res.why())
    sections = parse_sections(res.stdout)
    if [i for i, _ in sections] != list(ids):
        if len(ids) == 1:
            return {ids[0]: sections[0][1] if sections else None}
        out: Dict[str, Optional[str]] = {}
        for one in ids:
            out.update(_fetch(runner, flag, [one]))
        return out
    return {i: (None if body.strip() == "NONE" else body) for i, body in sections}


def jobs_from_sacct(runner: Runner, query: SacctQuery, skip: Iterable[str] = ()) -> Iterator[PastJob]:
    """Past jobs from accounting, SACCT_CHUNK at a time (ids in `skip` are not fetched)."""
    res = runner.run(query.argv(), timeout=600)
    if not res.ok:
        raise SlurmgpuError("cannot list past jobs: %s" % res.why())
    done = set(skip)
    rows = [r for r in parse_listing(res.stdout) if r["JobIDRaw"] not in done]
    for start in range(0, len(rows), SACCT_CHUNK):
        chunk = rows[start : start + SACCT_CHUNK]
        ids = [r["JobIDRaw"] for r in chunk]
        scripts = _fetch(runner, "--batch-script", ids)
        envs = _fetch(runner, "--env-vars", ids)
        for r in chunk:
            jid = r["JobIDRaw"]
            script = scripts.get(jid)
            uid = r.get("UID") or ""
            yield PastJob(
                job_id=jid,
                user=r.get("User") or None,
                uid=int(uid) if uid.isdigit() else None,
                account=r.get("Account") or None,
                partition=r.get("Partition") or None,
                qos=r.get("QOS") or None,
                submit=r.get("Submit") or "",
                submit_line=r.get("SubmitLine") or "",
                script=script.encode("utf-8", "surrogateescape") if script is not None else None,
                env=_env_of(envs.get(jid) or ""),
            )


# --------------------------------------------------------------------- state
class ReplayState:
    """The resumable part of a replay: finished rows, keyed by job id, for one source."""

    def __init__(self, path: Optional[str], source: str):
        self.path = path
        self.source = source
        self.rows: Dict[str, ReplayRow] = {}
        if path and os.path.exists(path):
            try:
                with open(path, encoding="utf-8") as f:
                    data = json.load(f)
            except (OSError, ValueError) as exc:
                raise SlurmgpuError("--state %s: unreadable (%s); remove it to start over" % (path, exc)) from None
            if data.get("version") != STATE_VERSION or data.get("source") != source:
                raise SlurmgpuError(
                    "--state %s belongs to another replay (%s); use another file or remove it"
                    % (path, data.get("source"))
                )
            self.rows = {r["job_id"]: ReplayRow.from_dict(r) for r in data.get("rows", [])}

    def save(self) -> None:
        if not self.path:
            return
        tmp = "%s.%d.tmp" % (self.path, os.getpid())
        data = {"version": STATE_VERSION, "source": self.source, "rows": [r.to_dict() for r in self.rows.values()]}
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(data, f)
        os.replace(tmp, self.path)


def replay(
    site: Site,
    jobs: Iterable[PastJob],
    state: ReplayState,
    limit: int = 100000,
    progress: Optional[Callable[[int], None]] = None,
) -> ReplayReport:
    """Judge `jobs` (skipping those already in `state`) until `limit` rows in all."""
    runner = PolicyRunner(site)
    t0 = time.monotonic()
    new = 0
    truncated = False
    for job in jobs:
        if job.job_id in state.rows:
            continue
        if len(state.rows) >= limit:
            truncated = True
            break
        state.rows[job.job_id] = row_for(job, runner)
        new += 1
        if new % CHECKPOINT_EVERY == 0:
            state.save()
        if progress is not None:
            progress(len(state.rows))
    state.save()
    return ReplayReport(site.name, tuple(state.rows.values()), new, time.monotonic() - t0, truncated, limit)


# -------------------------------------------------------------------- report
@dataclass
class Group:
    """One line of the grouped report (mutable while the report is built)."""

    reject: int = 0
    warn: int = 0
    users: List[str] = field(default_factory=list)
    examples: List[str] = field(default_factory=list)
    messages: List[str] = field(default_factory=list)

    def add(self, r: ReplayRow, with_messages: bool) -> None:
        if r.would == "reject":
            self.reject += 1
        else:
            self.warn += 1
        if r.user and r.user not in self.users:
            self.users.append(r.user)
        if len(self.examples) < MAX_EXAMPLES:
            self.examples.append(r.job_id)
        if with_messages:
            self.add_messages(r)

    def add_messages(self, r: ReplayRow) -> None:
        for m in r.messages:
            if len(self.messages) < MAX_MESSAGES_PER_RULE and m not in self.messages:
                self.messages.append(m)

    def to_dict(self) -> Dict[str, object]:
        return {
            "reject": self.reject,
            "warn": self.warn,
            "users": list(self.users),
            "examples": list(self.examples),
            "messages": list(self.messages),
        }


@dataclass(frozen=True)
class ReplayReport:
    site: str
    rows: Tuple[ReplayRow, ...]
    judged_now: int  # rows judged by this run (the rest came from the state file)
    seconds: float
    truncated: bool  # stopped at the limit with jobs left
    limit: int

    @property
    def jobs_per_second(self) -> float:
        return self.judged_now / self.seconds if self.seconds > 0 else 0.0

    def counts(self) -> Dict[str, int]:
        out = {"accept": 0, "warn": 0, "reject": 0, "skipped": 0, "error": 0}
        for r in self.rows:
            out[r.would] = out.get(r.would, 0) + 1
        return out

    def groups(self) -> Dict[str, Dict[str, Group]]:
        """by_rule / by_user / by_launcher of the jobs enforcing would reject or warn: counts,
        users, example jobs, and (per rule) the first distinct messages users would have seen
        on jobs where it fired."""
        out: Dict[str, Dict[str, Group]] = {"by_rule": {}, "by_user": {}, "by_launcher": {}}
        for r in self.rows:
            if r.would not in ("reject", "warn"):
                continue
            keys = [("by_rule", rule) for rule in r.rules] + [
                ("by_user", r.user or "?"),
                ("by_launcher", r.launcher or "-"),
            ]
            for group, key in keys:
                g = out[group].setdefault(key, Group())
                # messages are not tagged by rule: a job where only this rule fired says which
                g.add(r, with_messages=group == "by_rule" and len(r.rules) == 1)
        for rule, g in out["by_rule"].items():
            if not g.messages:  # it only ever fired beside others: their messages, bounded
                for r in self.rows:
                    if r.would in ("reject", "warn") and rule in r.rules:
                        g.add_messages(r)
                        if len(g.messages) >= MAX_MESSAGES_PER_RULE:
                            break
        return out

    def to_dict(self) -> Dict[str, object]:
        return {
            "site": self.site,
            "jobs": len(self.rows),
            "judged_now": self.judged_now,
            "seconds": round(self.seconds, 3),
            "jobs_per_second": round(self.jobs_per_second, 1),
            "truncated": self.truncated,
            "limit": self.limit,
            "counts": self.counts(),
            **{k: {n: g.to_dict() for n, g in v.items()} for k, v in self.groups().items()},
            "results": [r.to_dict() for r in self.rows],
        }

    def csv_rows(self) -> List[List[str]]:
        head = ["job_id", "user", "account", "partition", "submit", "launcher", "would", "verdict", "rules", "message"]
        body = [
            [
                r.job_id,
                r.user,
                r.account,
                r.partition,
                r.submit,
                r.launcher,
                r.would,
                r.verdict,
                ",".join(r.rules),
                r.messages[0] if r.messages else "",
            ]
            for r in self.rows
        ]
        return [head] + body

    def text(self) -> str:
        c = self.counts()
        lines = [
            "replayed %d jobs on site %s: enforcing would reject %d, warn %d, accept %d"
            % (len(self.rows), self.site, c["reject"], c["warn"], c["accept"])
            + ("; %d skipped" % c["skipped"] if c["skipped"] else "")
            + ("; %d unreadable" % c["error"] if c["error"] else ""),
            "(%d judged now in %.1f s, %.0f jobs/s%s)"
            % (
                self.judged_now,
                self.seconds,
                self.jobs_per_second,
                "; stopped at --limit %d with jobs left" % self.limit if self.truncated else "",
            ),
        ]
        g = self.groups()
        for title, key in (("by rule", "by_rule"), ("by user", "by_user"), ("by launcher", "by_launcher")):
            if not g[key]:
                continue
            lines.append("")
            lines.append(title + ":")
            for name, d in sorted(g[key].items(), key=lambda kv: (-kv[1].reject - kv[1].warn, kv[0])):
                lines.append(
                    "  %-24s reject %-5d warn %-5d users %-4d e.g. %s"
                    % (name, d.reject, d.warn, len(d.users), ", ".join(d.examples))
                )
                for m in d.messages:
                    lines.append("      | " + m)
        errors = [r for r in self.rows if r.would in ("error", "skipped")][:MAX_EXAMPLES]
        if errors:
            lines.append("")
            lines.append("not judged (first %d):" % len(errors))
            for r in errors:
                lines.append("  %s: %s: %s" % (r.job_id, r.would, r.messages[0] if r.messages else ""))
        return "\n".join(lines) + "\n"
