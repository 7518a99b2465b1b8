"""`slurmgpu admin stats`: the filter's verdicts over a window, counted per verdict, rule and
partition, from its own slurmctld.log lines (`slurmgpu-filter: decision=... verdict=...`), and
written in the node-exporter textfile format for a site's Prometheus.

A log line carries the timestamp slurmctld put in front of it (`[2026-12-01T10:01:27.472]`,
the default iso8601_ms format; `LogTimeFormat=rfc5424*` too); lines without one are counted only
when no window is asked for. Lines of filters older than the `verdict=` field are classified
from `decision=` and `rules=` (reject or ok). A summary line (`source=single-node count=N`: the
one-node jobs job_submit accepted from their fields in a window, policy.single_node_log_s) counts
N jobs, dated at the line.
"""

from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Dict, Iterable, List, Optional, Tuple

from ..errors import SlurmgpuError
from ..slurm.runner import Runner

TAG = "slurmgpu-filter:"
VERDICTS = ("ok", "warn", "reject", "shadow-warn", "shadow-reject", "exempt", "error")
_STAMP = re.compile(
    r"^\[(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.\d+)?\]|^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.\d+)?([+-]\d\d:\d\d|Z)?"
)
_DEFAULT_PART = re.compile(r" partition=\(default ([^)\s]*)\)")
_FIELD = re.compile(r"(?:^| )([a-z_-]+)=(\S*)")


@dataclass(frozen=True)
class LogVerdict:
    """One filter decision read back from the log."""

    when: Optional[float]  # epoch seconds; None: the line had no timestamp
    verdict: str
    partition: str
    origin: str
    rules: Tuple[str, ...]
    count: int = 1  # jobs the line stands for: a summary line of one-node accepts says count=N


def parse_line(line: str) -> Optional[LogVerdict]:
    """A decision line of the filter, or None (other lines, the filter's warnings)."""
    at = line.find(TAG + " decision=")
    if at < 0:
        return None
    fields = dict(_FIELD.findall(line[at + len(TAG) :]))
    decision = fields.get("decision", "")
    verdict = fields.get("verdict")
    rules = tuple(r for r in fields.get("rules", "-").split(",") if r and r != "-")
    if verdict not in VERDICTS:
        if "internal-error" in fields:
            verdict = "error"
        elif "exempt" in fields:
            verdict = "exempt"
        else:
            verdict = "reject" if decision == "reject" else "ok"
    partition = fields.get("partition", "?")
    m = _DEFAULT_PART.search(line, at)  # a job that named none: "partition=(default gpu)"
    if m:
        partition = m.group(1)
    count = fields.get("count", "1")
    n = int(count) if count.isdigit() else 1
    return LogVerdict(_when(line), verdict, partition, fields.get("origin", "?"), rules, n)


def _when(line: str) -> Optional[float]:
    m = _STAMP.match(line)
    if not m:
        return None
    text = m.group(1) or m.group(2)
    zone = m.group(3)
    dt = datetime.strptime(text, "%Y-%m-%dT%H:%M:%S")
    if zone:
        if zone == "Z":
            dt = dt.replace(tzinfo=timezone.utc)
        else:
            sign = 1 if zone[0] == "+" else -1
            hours, minutes = int(zone[1:3]), int(zone[4:6])
            return dt.replace(tzinfo=timezone.utc).timestamp() - sign * (hours * 3600 + minutes * 60)
        return dt.timestamp()
    return time.mktime(dt.timetuple())  # slurmctld's local time


def parse_since(text: str, now: Optional[float] = None) -> float:
    """`24h`, `7d`, `30m` (ago) or an ISO date/time (`2026-11-01`, `2026-11-01T08:00`) -> epoch."""
    now = time.time() if now is None else now
    m = re.fullmatch(r"(\d+)([smhd])", text.strip())
    if m:
        return now - int(m.group(1)) * {"s": 1, "m": 60, "h": 3600, "d": 86400}[m.group(2)]
    for fmt in ("%Y-%m-%dT%H:%M:%S", "%Y-%m-%dT%H:%M", "%Y-%m-%d"):
        try:
            return time.mktime(datetime.strptime(text.strip(), fmt).timetuple())
        except ValueError:
            pass
    raise SlurmgpuError("--since %r: expected a duration (24h, 7d, 30m) or a date (2026-11-01[T08:00[:00]])" % text)


@dataclass
class Stats:
    """Counts over a window (mutable while lines are read)."""

    since: Optional[float]
    until: float
    lines: int = 0
    undated: int = 0  # decision lines without a timestamp (not counted when a window is asked)
    by_verdict: Dict[Tuple[str, str], int] = field(default_factory=dict)  # (verdict, partition)
    by_rule: Dict[Tuple[str, str, str], int] = field(default_factory=dict)  # (rule, verdict, partition)

    def add(self, v: LogVerdict) -> None:
        if v.when is None:
            self.undated += 1
            if self.since is not None:
                return
        elif (self.since is not None and v.when < self.since) or v.when > self.until:
            return
        self.lines += v.count
        k = (v.verdict, v.partition)
        self.by_verdict[k] = self.by_verdict.get(k, 0) + v.count
        for r in v.rules:
            kr = (r, v.verdict, v.partition)
            self.by_rule[kr] = self.by_rule.get(kr, 0) + v.count

    def verdict_totals(self) -> Dict[str, int]:
        out = {v: 0 for v in VERDICTS}
        for (verdict, _), n in self.by_verdict.items():
            out[verdict] = out.get(verdict, 0) + n
        return out

    def to_dict(self) -> Dict[str, object]:
        return {
            "since": self.since,
            "until": self.until,
            "decisions": self.lines,
            "undated_lines": self.undated,
            "verdicts": self.verdict_totals(),
            "by_partition": [
                {"verdict": v, "partition": p, "count": n} for (v, p), n in sorted(self.by_verdict.items())
            ],
            "by_rule": [
                {"rule": r, "verdict": v, "partition": p, "count": n} for (r, v, p), n in sorted(self.by_rule.items())
            ],
        }

    def text(self) -> str:
        span = "since %s" % _iso(self.since) if self.since is not None else "whole log"
        lines = ["%d filter decisions (%s, until %s)" % (self.lines, span, _iso(self.until))]
        totals = self.verdict_totals()
        lines.append("  " + "  ".join("%s %d" % (v, totals[v]) for v in VERDICTS))
        if self.by_verdict:
            lines.append("by partition:")
            parts = sorted({p for _, p in self.by_verdict})
            for p in parts:
                row = ["%s %d" % (v, n) for (v, q), n in sorted(self.by_verdict.items()) if q == p]
                lines.append("  %-16s %s" % (p, "  ".join(row)))
        if self.by_rule:
            lines.append("by rule:")
            rules: Dict[str, Dict[str, int]] = {}
            for (r, v, _), n in self.by_rule.items():
                rules.setdefault(r, {})[v] = rules.setdefault(r, {}).get(v, 0) + n
            for r in sorted(rules, key=lambda k: (-sum(rules[k].values()), k)):
                lines.append("  %-24s %s" % (r, "  ".join("%s %d" % kv for kv in sorted(rules[r].items()))))
        if self.undated and self.since is not None:
            lines.append(
                "warning: %d decision lines had no timestamp and were not counted (LogTimeFormat?)" % self.undated
            )
        return "\n".join(lines) + "\n"


def _iso(t: Optional[float]) -> str:
    return "-" if t is None else time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(t))


def collect(paths: Iterable[str], since: Optional[float], until: Optional[float] = None) -> Stats:
    """Read the logs (plain text; rotated `.gz` files too) and count the decisions in the window."""
    st = Stats(since, time.time() if until is None else until)
    for path in paths:
        try:
            if path.endswith(".gz"):
                import gzip

                f = gzip.open(path, "rt", encoding="utf-8", errors="replace")
            else:
                f = open(path, encoding="utf-8", errors="replace")
        except OSError as exc:
            raise SlurmgpuError("cannot read %s: %s" % (path, exc.strerror)) from None
        with f:
            for line in f:
                v = parse_line(line)
                if v is not None:
                    st.add(v)
    return st


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def prometheus_text(st: Stats, site: str) -> str:
    """The node-exporter textfile format: gauges of the counts in the window."""
    s = _label(site)
    out: List[str] = [
        "# HELP slurmgpu_filter_decisions Submit-filter decisions in the window, by verdict and partition.",
        "# TYPE slurmgpu_filter_decisions gauge",
    ]
    for (verdict, part), n in sorted(st.by_verdict.items()):
        out.append(
            'slurmgpu_filter_decisions{site="%s",verdict="%s",partition="%s"} %d'
            % (s, _label(verdict), _label(part), n)
        )
    out += [
        "# HELP slurmgpu_filter_rule_hits Jobs on which a filter rule fired in the window, by verdict and partition.",
        "# TYPE slurmgpu_filter_rule_hits gauge",
    ]
    for (rule, verdict, part), n in sorted(st.by_rule.items()):
        out.append(
            'slurmgpu_filter_rule_hits{site="%s",rule="%s",verdict="%s",partition="%s"} %d'
            % (s, _label(rule), _label(verdict), _label(part), n)
        )
    window = (st.until - st.since) if st.since is not None else 0
    out += [
        "# HELP slurmgpu_filter_window_seconds Length of the window counted (0: the whole log).",
        "# TYPE slurmgpu_filter_window_seconds gauge",
        'slurmgpu_filter_window_seconds{site="%s"} %d' % (s, window),
        "# HELP slurmgpu_filter_stats_timestamp_seconds When these counts were taken.",
        "# TYPE slurmgpu_filter_stats_timestamp_seconds gauge",
        'slurmgpu_filter_stats_timestamp_seconds{site="%s"} %d' % (s, int(st.until)),
    ]
    return "\n".join(out) + "\n"


def write_atomic(path: str, text: str) -> None:
    """Write beside the target and rename over it, so node-exporter never reads half a file
    (its textfile collector skips names not ending in .prom, like the temporary one)."""
    d = os.path.dirname(os.path.abspath(path))
    tmp = os.path.join(d, ".%s.%d.tmp" % (os.path.basename(path), os.getpid()))
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except OSError as exc:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise SlurmgpuError("cannot write %s: %s" % (path, exc.strerror)) from None


_TOKEN = re.compile(r"(?:^|\s)slurmgpu=([a-z-]+)(?::([\w,+-]*))?")


def collect_accounting(runner: Runner, since: float, until: Optional[float] = None) -> Stats:
    """Count the AdminComment tokens of the jobs submitted in the window (`sacct`). Rejected jobs
    have no record, so accounting shows only what was let through; the log shows everything."""
    st = Stats(since, time.time() if until is None else until)
    argv = ["sacct", "-a", "-X", "-P", "--noheader", "-S", _iso(since), "-E", _iso(st.until)]
    res = runner.run(argv + ["-o", "Submit,Partition,AdminComment"], timeout=600)
    if not res.ok:
        raise SlurmgpuError("cannot read accounting: %s" % res.why())
    for line in res.stdout.splitlines():
        submit, _, rest = line.partition("|")
        partition, _, comment = rest.partition("|")
        m = _TOKEN.search(comment)
        if not m or m.group(1) not in VERDICTS:
            continue
        rules = tuple(r for r in (m.group(2) or "").split(",") if r and r != "+")
        try:
            when: Optional[float] = time.mktime(datetime.strptime(submit, "%Y-%m-%dT%H:%M:%S").timetuple())
        except ValueError:
            when = None
        st.add(LogVerdict(when, m.group(1), partition or "?", "job_submit", rules))
    return st
