#!/usr/bin/env python3
"""Mutation check: would the tests fail if the code were wrong?

Each mutation in bench/mutations.toml is a single-line bug of the kind real bugs look like (a
floor for a ceiling, "at least" for "a multiple of", TP written for expert TP, a term left out of
the memory model), kept with the code: a file glob, a code snippet found exactly once in the files
it matches, its replacement, a class, and the named test set that must catch it. The runner
copies the work tree (tracked and untracked, not ignored files) to a scratch directory, plants one
mutation at a time there (never in the work tree), runs its tests with pytest -x, and counts the
mutation killed when they fail (or time out: --timeout), survived when they pass.

A mutation whose snippet is no longer found (or found more than once) is reported as stale and
fails the run: the list must follow the code. Each test set first runs unmutated; if that fails
nothing is planted (a failing baseline would count every mutation killed).

The Python side is also sampled by cosmic-ray (`--tool N`: N of its operator mutants per module
in [tool] modules, drawn with a fixed seed, run against the module's test set), when the
`mutation` extra is installed (pip install -e '.[mutation]').

    python3 bench/mutation.py                  # the list, then prints the score table
    python3 bench/mutation.py -k filter.       # only ids containing "filter."
    python3 bench/mutation.py --class memory --jobs 2
    python3 bench/mutation.py --tool 12        # and 12 cosmic-ray mutants per module
    python3 bench/mutation.py --check          # only check that every snippet is found once

Exit status: 0 when nothing is stale, every mutation of a class marked `must_kill` is killed and
the score is at least --min-score (90); 1 otherwise; 2 for a bad list or a failing baseline.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import fnmatch
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

ROOT = Path(__file__).resolve().parent.parent
LIST = ROOT / "bench" / "mutations.toml"

try:  # Python 3.11+
    import tomllib as _toml  # novermin (3.9/3.10 read the list with tomli below)
except ImportError:  # pragma: no cover - 3.9/3.10: the mutation extra installs tomli
    try:
        import tomli as _toml  # type: ignore[no-redef]
    except ImportError:
        _toml = None  # type: ignore[assignment]


@dataclass(frozen=True)
class Mutation:
    id: str
    cls: str
    file: str  # glob, relative to the repository root
    find: str
    replace: str
    tests: str  # a name in [tests]
    why: str = ""


@dataclass
class Outcome:
    mutation: Mutation
    status: str  # killed | survived | timeout | stale | ambiguous | error | incompetent (cosmic-ray)
    seconds: float = 0.0
    path: str = ""
    detail: str = ""


@dataclass
class Spec:
    mutations: List[Mutation]
    tests: Dict[str, List[str]]
    must_kill: Tuple[str, ...]
    classes: Dict[str, str]
    tool_modules: Dict[str, str] = field(default_factory=dict)  # module path -> test set


def load_spec(path: Path) -> Spec:
    if _toml is None:
        raise SystemExit("bench/mutation.py: Python < 3.11 needs tomli (pip install -e '.[mutation]')")
    with open(path, "rb") as f:
        data = _toml.load(f)
    tests = {k: list(v) for k, v in data.get("tests", {}).items()}
    classes = dict(data.get("classes", {}))
    out, seen = [], set()
    for i, m in enumerate(data.get("mutation", [])):
        where = "%s: mutation #%d (%s)" % (path.name, i + 1, m.get("id", "no id"))
        for key in ("id", "class", "file", "find", "replace", "tests"):
            if not isinstance(m.get(key), str) or not m[key]:
                raise SystemExit("%s: '%s' must be a non-empty string" % (where, key))
        if m["id"] in seen:
            raise SystemExit("%s: id given twice" % where)
        if m["tests"] not in tests:
            raise SystemExit("%s: tests '%s' is not a set in [tests] (%s)" % (where, m["tests"], ", ".join(tests)))
        if m["class"] not in classes:
            raise SystemExit("%s: class '%s' is not in [classes] (%s)" % (where, m["class"], ", ".join(classes)))
        if m["find"] == m["replace"]:
            raise SystemExit("%s: the replacement is the snippet itself" % where)
        seen.add(m["id"])
        out.append(Mutation(m["id"], m["class"], m["file"], m["find"], m["replace"], m["tests"], m.get("why", "")))
    tool = dict(data.get("tool", {}).get("modules", {}))
    for mod, ts in tool.items():
        if ts not in tests:
            raise SystemExit("%s: [tool.modules] %s: tests '%s' is not a set in [tests]" % (path.name, mod, ts))
    return Spec(out, tests, tuple(data.get("must_kill", ())), classes, tool)


# ---------------------------------------------------------------------------
# the scratch copy


def tree_files(root: Path) -> List[str]:
    """Tracked and untracked-but-not-ignored files: what the tests see in the work tree."""
    p = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=str(root),
        capture_output=True,
        check=True,
    )
    return sorted({f for f in p.stdout.decode("utf-8", "surrogateescape").split("\0") if f})


# Ignored paths the tests use when present, linked (not copied) into each scratch copy: the
# frameworks' venv of the launcher contract tests (contrib/contract/make_env.py; without it those
# tests skip, and a launcher mutation they would catch survives).
CARRY = (".contract-env",)


def make_scratch(root: Path, files: Sequence[str], where: Path) -> Path:
    for f in files:
        src = root / f
        if not src.is_file() or src.is_symlink():
            continue
        dst = where / f
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dst)
    for name in CARRY:
        if (root / name).exists() and not (where / name).exists():
            (where / name).symlink_to(root / name)
    return where


def locate(root: Path, files: Sequence[str], m: Mutation) -> Tuple[str, List[str]]:
    """('ok'|'stale'|'ambiguous', matching paths): the snippet must occur exactly once."""
    hits: List[str] = []
    for f in files:
        if fnmatch.fnmatchcase(f, m.file):
            try:
                text = (root / f).read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError):
                continue
            hits += [f] * text.count(m.find)
    if not hits:
        return "stale", []
    return ("ok" if len(hits) == 1 else "ambiguous"), hits


# ---------------------------------------------------------------------------
# running tests


class Worker:
    """One scratch copy, one mutation at a time."""

    def __init__(self, scratch: Path, timeout: float) -> None:
        self.scratch = scratch
        self.timeout = timeout
        self.stamp = 0
        self.env = dict(os.environ)
        self.env.update(
            PYTHONPATH=str(scratch),
            SLURMGPU_CACHE_DIR=str(scratch / ".mutation-cache"),
            PYTHONHASHSEED="0",
            # no entry-point plugins: hypothesis', hydra's, anyio's and pytest-benchmark's plugins
            # cost seconds of start-up per run and none of the test sets needs them
            PYTEST_DISABLE_PLUGIN_AUTOLOAD="1",
        )
        self.env.pop("PYTEST_ADDOPTS", None)

    def pytest(self, args: Sequence[str], timeout: Optional[float] = None) -> Tuple[str, float, str]:
        """('pass'|'fail'|'timeout'|'skipped', seconds, last lines)."""
        cmd = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", "--no-header", *args]
        t0 = time.monotonic()
        try:
            p = subprocess.run(
                cmd,
                cwd=str(self.scratch),
                env=self.env,
                capture_output=True,
                timeout=timeout or self.timeout,
                start_new_session=True,
            )
        except subprocess.TimeoutExpired:
            return "timeout", time.monotonic() - t0, ""
        tail = p.stdout.decode("utf-8", "replace").strip().splitlines()[-3:]
        if p.returncode == 0 and not any(" passed" in line for line in tail):
            # everything skipped (a framework venv missing or stale): a pass that checked nothing
            return "skipped", time.monotonic() - t0, " | ".join(tail)
        return ("pass" if p.returncode == 0 else "fail"), time.monotonic() - t0, " | ".join(tail)

    def write(self, rel: str, text: str, base_mtime: float) -> None:
        """Write a version of a file with an mtime no other version had, so Python never reuses
        the bytecode of another version (its check is mtime + size)."""
        self.stamp += 1
        path = self.scratch / rel
        path.write_text(text, encoding="utf-8")
        t = base_mtime + 10 * self.stamp
        os.utime(path, (t, t))

    def run(self, m: Mutation, rel: str, tests: Sequence[str], timeout: Optional[float] = None) -> Outcome:
        path = self.scratch / rel
        original = path.read_text(encoding="utf-8")
        base = path.stat().st_mtime
        try:
            self.write(rel, original.replace(m.find, m.replace, 1), base)
            res, secs, tail = self.pytest(tests, timeout)
        finally:
            self.write(rel, original, base)
        status = {"fail": "killed", "pass": "survived", "timeout": "timeout", "skipped": "survived"}[res]
        return Outcome(m, status, secs, rel, tail)


# ---------------------------------------------------------------------------
# cosmic-ray: a fixed-seed sample of its operator mutants per module


def tool_sample(
    spec: Spec, root: Path, scratch_root: Path, files: Sequence[str], per_module: int, timeout: float, seed: int
) -> List[Outcome]:
    """Run N cosmic-ray mutants of each [tool.modules] module in its own scratch copy. The session
    is made by `cosmic-ray init`; all but a seeded sample of its work items are marked skipped in
    the session database, then `cosmic-ray exec` runs the rest (it mutates the copy in place)."""
    exe = shutil.which("cosmic-ray")
    if exe is None:
        raise SystemExit("--tool needs cosmic-ray: pip install -e '.[mutation]'")
    outcomes: List[Outcome] = []
    rng = random.Random(seed)
    for module, tset in sorted(spec.tool_modules.items()):
        work = make_scratch(root, files, scratch_root / ("cr-" + Path(module).stem))
        args = " ".join(
            ["-x", "-q", "-p", "no:cacheprovider", "--no-header"] + [_shell_word(a) for a in spec.tests[tset]]
        )
        cfg = work / "cosmic-ray.toml"
        cfg.write_text(
            "[cosmic-ray]\n"
            'module-path = "%s"\n'
            "timeout = %.0f\n"
            "excluded-modules = []\n"
            'test-command = "%s -m pytest %s"\n'
            "[cosmic-ray.distributor]\n"
            'name = "local"\n' % (module, timeout, sys.executable, args.replace('"', '\\"'))
        )
        db = work / "session.sqlite"
        env = dict(
            os.environ,
            PYTHONPATH=str(work),
            SLURMGPU_CACHE_DIR=str(work / ".mutation-cache"),
            PYTEST_DISABLE_PLUGIN_AUTOLOAD="1",
        )
        subprocess.run([exe, "init", str(cfg), str(db)], cwd=str(work), env=env, check=True, capture_output=True)
        from cosmic_ray.work_db import WorkDB, use_db
        from cosmic_ray.work_item import WorkerOutcome, WorkResult

        with use_db(str(db), WorkDB.Mode.open) as wdb:
            ids = sorted(item.job_id for item in wdb.work_items)
            keep = set(rng.sample(ids, min(per_module, len(ids))))
            wdb.set_multiple_results([j for j in ids if j not in keep], WorkResult(WorkerOutcome.SKIPPED))
        t0 = time.monotonic()
        subprocess.run([exe, "exec", str(cfg), str(db)], cwd=str(work), env=env, capture_output=True)
        secs = time.monotonic() - t0
        with use_db(str(db), WorkDB.Mode.open) as wdb:
            done = [(i, r) for i, r in wdb.completed_work_items if r.worker_outcome != WorkerOutcome.SKIPPED]
        for item, res in done:
            test = res.test_outcome.value if res.test_outcome is not None else None
            status = {"killed": "killed", "survived": "survived", "incompetent": "incompetent"}.get(test or "", "error")
            if res.worker_outcome == WorkerOutcome.ABNORMAL:
                status = "timeout"
            ms = item.mutations[0]
            name = "cr.%s:%d:%s" % (Path(module).stem, ms.start_pos[0], ms.operator_name.split("/")[-1])
            m = Mutation(name, "tool", module, "", "", tset)
            outcomes.append(Outcome(m, status, secs / max(1, len(done)), module, (res.diff or "").strip()))
        print("  cosmic-ray %s: %d mutants in %.0f s" % (module, len(done), secs), flush=True)
    return outcomes


def _shell_word(a: str) -> str:
    return a if all(c.isalnum() or c in "/._:-=[]" for c in a) else "'%s'" % a.replace("'", "'\\''")


# ---------------------------------------------------------------------------
# reporting


def table(outcomes: Sequence[Outcome], classes: Dict[str, str]) -> List[str]:
    rows: Dict[str, List[int]] = {}
    for o in outcomes:
        if o.status in ("stale", "ambiguous", "incompetent"):  # incompetent: the mutant cannot run at all
            continue
        r = rows.setdefault(o.mutation.cls, [0, 0, 0])
        r[0] += 1
        r[1 if o.status in ("killed", "timeout", "error") else 2] += 1
    lines = ["| class | planted | killed | survived | score |", "|---|---:|---:|---:|---:|"]
    tot = [0, 0, 0]
    order = [c for c in classes if c in rows] + sorted(c for c in rows if c not in classes)
    for c in order:
        p, k, s = rows[c]
        tot = [tot[0] + p, tot[1] + k, tot[2] + s]
        lines.append("| %s | %d | %d | %d | %.0f %% |" % (c, p, k, s, 100.0 * k / p if p else 0))
    if tot[0]:
        lines.append("| **all** | %d | %d | %d | %.1f %% |" % (tot[0], tot[1], tot[2], 100.0 * tot[1] / tot[0]))
    return lines


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--list", default=str(LIST), help="the mutation list (default: bench/mutations.toml)")
    ap.add_argument("-k", dest="only", default=None, help="only mutations whose id contains this text")
    ap.add_argument("--class", dest="cls", default=None, help="only this class")
    ap.add_argument("--jobs", type=int, default=1, help="mutations run at once, each in its own copy (default 1)")
    ap.add_argument(
        "--timeout",
        type=float,
        default=240.0,
        help="most seconds per mutation's tests (default 240; each gets ten times its set's baseline, at least 60)",
    )
    ap.add_argument("--tool", type=int, default=0, metavar="N", help="also N cosmic-ray mutants per [tool] module")
    ap.add_argument("--seed", type=int, default=35, help="seed of the cosmic-ray sample (default 35)")
    ap.add_argument("--min-score", type=float, default=90.0, help="fail below this score in percent (default 90)")
    ap.add_argument("--check", action="store_true", help="only check the list against the code (stale snippets)")
    ap.add_argument("--json", default=None, help="also write the outcomes as JSON to this file")
    ap.add_argument("--keep", action="store_true", help="keep the scratch copies (their path is printed)")
    ap.add_argument("--root", default=str(ROOT), help="the repository to copy (default: this one)")
    args = ap.parse_args(argv)

    spec = load_spec(Path(args.list))
    root = Path(args.root).resolve()
    files = tree_files(root)
    chosen = [
        m
        for m in spec.mutations
        if (args.only is None or args.only in m.id) and (args.cls is None or m.cls == args.cls)
    ]
    located: List[Tuple[Mutation, str]] = []
    outcomes: List[Outcome] = []
    for m in chosen:
        state, hits = locate(root, files, m)
        if state == "ok":
            located.append((m, hits[0]))
        else:
            outcomes.append(Outcome(m, state, detail=", ".join(sorted(set(hits)))))
    bad = [o for o in outcomes if o.status in ("stale", "ambiguous")]
    for o in bad:
        where = ("found %d times in %s" % (len(o.detail.split(", ")), o.detail)) if o.detail else "not found"
        print("STALE %s (%s): snippet %s in %s" % (o.mutation.id, o.status, where, o.mutation.file))
        print("      %r" % o.mutation.find[:200])
    print("%d mutations, %d located, %d stale" % (len(chosen), len(located), len(bad)), flush=True)
    if args.check:
        return 1 if bad else 0

    t_start = time.monotonic()
    tmp = Path(tempfile.mkdtemp(prefix="slurmgpu-mutation-"))
    try:
        jobs = max(1, args.jobs)
        workers = [Worker(make_scratch(root, files, tmp / ("w%d" % i)), args.timeout) for i in range(jobs)]
        print("scratch copies: %s (%d files each)" % (tmp, len(files)), flush=True)
        # the baseline: every test set used passes on the unmutated copy
        used = sorted({m.tests for m, _ in located} | (set(spec.tool_modules.values()) if args.tool else set()))
        free = list(workers)
        lock = threading.Lock()

        def baseline(name: str) -> Tuple[str, str, float, str]:
            with lock:
                w = free.pop()
            try:
                return (name,) + w.pytest(spec.tests[name], timeout=max(args.timeout, 600))
            finally:
                with lock:
                    free.append(w)

        base_secs: Dict[str, float] = {}
        with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
            failed = []
            for name, res, secs, tail in pool.map(baseline, used):
                base_secs[name] = secs
                print("  baseline %-22s %-7s %5.1f s" % (name, res, secs), flush=True)
                if res != "pass":
                    failed.append("baseline of test set '%s' does not pass: %s" % (name, tail))
        if failed:
            print("\n".join(failed))
            return 2

        def one(item: Tuple[Mutation, str]) -> Outcome:
            with lock:
                w = free.pop()
            try:
                # a mutant that hangs the code (a loop that never ends) is caught by its timeout: ten
                # times its test set's unmutated time (at least a minute), at most --timeout
                limit = min(args.timeout, max(60.0, 10.0 * base_secs.get(item[0].tests, args.timeout)))
                return w.run(item[0], item[1], spec.tests[item[0].tests], limit)
            finally:
                with lock:
                    free.append(w)

        with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
            for o in pool.map(one, located):
                outcomes.append(o)
                print("  %-9s %5.1f s  %s" % (o.status, o.seconds, o.mutation.id), flush=True)
        if args.tool:
            outcomes += tool_sample(spec, root, tmp, files, args.tool, args.timeout, args.seed)
    finally:
        if args.keep:
            print("kept: %s" % tmp)
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    elapsed = time.monotonic() - t_start

    listed = [o for o in outcomes if o.mutation.cls != "tool"]
    print()
    print("\n".join(table(listed, spec.classes)))
    tool = [o for o in outcomes if o.mutation.cls == "tool"]
    if tool:
        print()
        print("cosmic-ray sample (%d per module, seed %d): not part of the score" % (args.tool, args.seed))
        print("\n".join(table(tool, {"tool": ""})))
    survivors = [o for o in outcomes if o.status == "survived"]
    if survivors:
        print("\nsurvived:")
        for o in survivors:
            what = o.mutation.why or ("%r -> %r" % (o.mutation.find, o.mutation.replace))
            print("  %s [%s] %s: %s" % (o.mutation.id, o.mutation.cls, o.path, what if o.mutation.find else o.detail))
    planted = [o for o in listed if o.status not in ("stale", "ambiguous")]
    killed = [o for o in planted if o.status in ("killed", "timeout", "error")]
    score = 100.0 * len(killed) / len(planted) if planted else 0.0
    must = [o for o in survivors if o.mutation.cls in spec.must_kill]
    print(
        "\nscore %.1f %% (%d of %d killed), %d stale, %d timeouts, %.0f s (%d job%s)"
        % (
            score,
            len(killed),
            len(planted),
            len(bad),
            sum(1 for o in planted if o.status == "timeout"),
            elapsed,
            args.jobs,
            "s" if args.jobs > 1 else "",
        )
    )
    if must:
        print("survivors in classes that must be killed (%s): %s" % (", ".join(spec.must_kill), len(must)))
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {
                    "score": score,
                    "seconds": elapsed,
                    "outcomes": [
                        {
                            "id": o.mutation.id,
                            "class": o.mutation.cls,
                            "status": o.status,
                            "path": o.path,
                            "seconds": round(o.seconds, 1),
                        }
                        for o in outcomes
                    ],
                },
                indent=1,
            )
        )
    return 1 if (bad or must or score < args.min_score) else 0


if __name__ == "__main__":
    sys.exit(main())
