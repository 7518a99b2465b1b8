"""The submit-filter cases as data: each `NN-name.sh` here is a batch script whose header
comments say how it is submitted and what the filter must answer. Read by the Python tests
(slurmgpu check), the lua5.1 tests (the rendered job_submit.lua), and the real-cluster and
SPANK tests.

Header keys (`# key: value` lines; repeatable ones marked *):
  site      preset name, or a file in sites/ (without .yaml)
  args      sbatch options, shell-quoted
  env       NAME=VALUE ... (the submitting environment)
  user, account, qos
  expect    accept | reject
  expect-slurm*  FROM-TO accept|reject|sbatch: the verdict a controller of a Slurm release in
            FROM..TO gives instead (e.g. "24.05-25.11.1 reject": those cannot see a command-line
            --segment); sbatch: that release's sbatch refuses the job before any filter runs, and
            `slurmgpu check` says so (exit 2), e.g. "26.05-99.99 sbatch"
  message*  text that one rejection message contains
  warning*  text that one warning contains
  no-warnings (no value): the verdict has no warnings
  would     accept | warn | reject: the verdict with shadow partitions enforced (shadow mode)
  shadow-message*, shadow-warning*  text that one would-be message / warning contains (shadow
            mode: kept from the user, in `admin replay`)
  rule*, not-rule*   rule ids that did / did not fire
  source, launcher   where the layout came from, which launcher was recognised
  layout    tp=16 pp=1 ... (the layout the rules checked)
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

HERE = Path(__file__).resolve().parent
SITES = HERE / "sites"
_HEADER = re.compile(r"^# ([a-z-]+):?(?: (.*))?$")
_REPEATABLE = {"message", "warning", "rule", "not-rule", "expect-slurm", "shadow-message", "shadow-warning"}
_KEYS = _REPEATABLE | {
    "case",
    "site",
    "args",
    "env",
    "user",
    "account",
    "qos",
    "expect",
    "source",
    "launcher",
    "layout",
    "no-warnings",
    "would",
}


@dataclass(frozen=True)
class PolicyCase:
    name: str
    path: Path
    script: bytes
    description: str
    site: str
    args: Tuple[str, ...]
    env: Dict[str, str]
    user: Optional[str]
    account: Optional[str]
    qos: Optional[str]
    expect: str
    messages: Tuple[str, ...] = ()
    warnings: Tuple[str, ...] = ()
    no_warnings: bool = False
    rules: Tuple[str, ...] = ()
    not_rules: Tuple[str, ...] = ()
    source: Optional[str] = None
    launcher: Optional[str] = None
    layout: Dict[str, int] = field(default_factory=dict)
    expect_slurm: Tuple[Tuple[Tuple[int, int, int], Tuple[int, int, int], str], ...] = ()
    would: Optional[str] = None
    shadow_messages: Tuple[str, ...] = ()
    shadow_warnings: Tuple[str, ...] = ()

    def expect_for(self, slurm_version: Optional[str]) -> str:
        """The verdict a controller of this Slurm release ("24.11.5", a site's "24.11") gives:
        an `expect-slurm` range it falls in, else `expect`."""
        from slurmgpu.slurm import slurm_version_tuple

        ver = slurm_version_tuple(slurm_version)
        for lo, hi, verdict in self.expect_slurm:
            if ver is not None and lo <= ver <= hi:
                return verdict
        return self.expect

    @property
    def site_ref(self) -> str:
        """What load_site/resolve_site_ref takes: a path for test sites, else the preset name."""
        local = SITES / (self.site + ".yaml")
        return str(local) if local.exists() else self.site


def parse_case(path: Path) -> PolicyCase:
    data = path.read_bytes()
    values: Dict[str, List[str]] = {}
    for line in data.decode("utf-8").splitlines()[:60]:
        m = _HEADER.match(line.rstrip("\r"))
        if not m or m.group(1) not in _KEYS:
            continue
        values.setdefault(m.group(1), []).append((m.group(2) or "").strip())

    def one(key: str, default: Optional[str] = None) -> Optional[str]:
        v = values.get(key)
        if v and len(v) > 1 and key not in _REPEATABLE:
            raise ValueError("%s: '%s' given twice" % (path.name, key))
        return v[0] if v else default

    expect = one("expect")
    if expect not in ("accept", "reject"):
        raise ValueError("%s: '# expect: accept|reject' is required" % path.name)
    env = dict(item.split("=", 1) for item in shlex.split(one("env", "") or ""))
    layout = {k: int(v) for k, v in (item.split("=") for item in (one("layout", "") or "").split())}
    ranges = []
    for spec in values.get("expect-slurm", ()):
        m = re.match(r"^(\d+)\.(\d+)(?:\.(\d+))?-(\d+)\.(\d+)(?:\.(\d+))? (accept|reject|sbatch)$", spec)
        if not m:
            raise ValueError(
                "%s: '# expect-slurm: %s': expected FROM-TO accept|reject|sbatch, e.g. "
                "'24.05-25.11.1 reject'" % (path.name, spec)
            )
        g = m.groups()
        ranges.append(((int(g[0]), int(g[1]), int(g[2] or 0)), (int(g[3]), int(g[4]), int(g[5] or 99)), g[6]))
    return PolicyCase(
        name=path.stem,
        path=path,
        script=data,
        description=one("case", "") or "",
        site=one("site", "dgx-h100") or "dgx-h100",
        args=tuple(shlex.split(one("args", "") or "")),
        env=env,
        user=one("user"),
        account=one("account"),
        qos=one("qos"),
        expect=expect,
        messages=tuple(values.get("message", ())),
        warnings=tuple(values.get("warning", ())),
        no_warnings="no-warnings" in values,
        rules=tuple(values.get("rule", ())),
        not_rules=tuple(values.get("not-rule", ())),
        source=one("source"),
        launcher=one("launcher"),
        layout=layout,
        expect_slurm=tuple(ranges),
        would=one("would"),
        shadow_messages=tuple(values.get("shadow-message", ())),
        shadow_warnings=tuple(values.get("shadow-warning", ())),
    )


def load_cases() -> List[PolicyCase]:
    return [parse_case(p) for p in sorted(HERE.glob("*.sh"))]


def problems(
    case: PolicyCase,
    decision: str,
    messages: Sequence[str],
    warnings: Sequence[str],
    rules: Optional[Sequence[str]] = None,
    source: Optional[str] = None,
    launcher: Optional[str] = None,
    layout: Optional[Dict[str, Optional[int]]] = None,
    slurm_version: Optional[str] = None,
    would: Optional[str] = None,
    shadow: Optional[Tuple[Sequence[str], Sequence[str]]] = None,
    single_node: bool = False,
) -> List[str]:
    """What differs from the case's expectations (empty: the verdict is right) on a site of Slurm
    `slurm_version` (see expect_for). Fields passed as None are not checked (e.g. the lua5.1 path
    only sees the return code and the user lines). single_node: slurmctld's job_submit decided the
    job from its fields alone (log line source=single-node: it runs on one node wherever it may
    run), so only the decision is compared; the advice comes from check, cli_filter and SPANK."""
    out = []
    expect = case.expect_for(slurm_version)
    if decision != expect:
        out.append("decision %s, expected %s" % (decision, expect))
    if single_node:
        return out
    for text in case.messages:
        if not any(text in m for m in messages):
            out.append("no rejection message contains %r" % text)
    for text in case.warnings:
        if not any(text in w for w in warnings):
            out.append("no warning contains %r" % text)
    if case.no_warnings and warnings:
        out.append("unexpected warnings: %r" % list(warnings))
    if rules is not None:
        for r in case.rules:
            if r not in rules:
                out.append("rule %s did not fire (fired: %s)" % (r, list(rules)))
        for r in case.not_rules:
            if r in rules:
                out.append("rule %s fired" % r)
    if source is not None and case.source and source != case.source:
        out.append("source %s, expected %s" % (source, case.source))
    if launcher is not None and case.launcher and launcher != case.launcher:
        out.append("launcher %s, expected %s" % (launcher, case.launcher))
    if layout is not None:
        for k, v in case.layout.items():
            if layout.get(k) != v:
                out.append("layout %s=%s, expected %s" % (k, layout.get(k), v))
    if would is not None and case.would and would != case.would:
        out.append("would-be verdict %s, expected %s" % (would, case.would))
    if shadow is not None:
        for text in case.shadow_messages:
            if not any(text in m for m in shadow[0]):
                out.append("no would-be rejection message contains %r" % text)
        for text in case.shadow_warnings:
            if not any(text in w for w in shadow[1]):
                out.append("no would-be warning contains %r" % text)
    return out
