"""Running the Lua policy from Python (lupa, or the lua5.1 binary as a fallback) and reading its
verdict: the same code `job_submit.lua` runs in slurmctld."""

from __future__ import annotations

import json
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from ..errors import SlurmgpuError
from ..site import Site
from .lua import _lua_file, lua_literal, render_filter


@dataclass(frozen=True)
class JobShape:
    """The job's shape on one partition, as the filter computed it the way slurmctld does."""

    partition: str
    nodes: int  # the nodes Slurm must give the job (at least)
    nodes_max: Optional[int] = None  # the most it may get (None: no upper bound asked)
    gpus_per_node: Optional[int] = None  # None: the request does not fix it
    ranks_per_node: Optional[int] = None
    nodes_how: Optional[str] = None  # what set the node count (--nodes, --nodelist, CPUs, ...)
    ranks_how: Optional[str] = None

    def to_dict(self) -> Dict[str, Any]:
        return {
            "partition": self.partition,
            "nodes": self.nodes,
            "nodes_max": self.nodes_max,
            "gpus_per_node": self.gpus_per_node,
            "ranks_per_node": self.ranks_per_node,
            "nodes_how": self.nodes_how,
            "ranks_how": self.ranks_how,
        }


def _int_or_none(v: Any) -> Optional[int]:
    return int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _shapes(raw: Any) -> Tuple[JobShape, ...]:
    out = []
    for d in raw or ():
        if isinstance(d, Mapping) and d.get("partition") is not None:
            out.append(
                JobShape(
                    partition=str(d["partition"]),
                    nodes=int(d.get("nodes") or 1),
                    nodes_max=_int_or_none(d.get("nodes_max")),
                    gpus_per_node=_int_or_none(d.get("gpus_per_node")),
                    ranks_per_node=_int_or_none(d.get("ranks_per_node")),
                    nodes_how=d.get("nodes_how") or None,
                    ranks_how=d.get("ranks_how") or None,
                )
            )
    return tuple(out)


@dataclass(frozen=True)
class Verdict:
    """The filter's answer for one job, as slurmctld would give it."""

    decision: str  # "accept" | "reject"
    exit_code: int  # for `slurmgpu check`: 0 accepted, 1 rejected
    messages: Tuple[str, ...]  # why it is rejected (sent to the user)
    warnings: Tuple[str, ...]  # sent to the user, job accepted
    layout: Mapping[str, Optional[int]]  # tp, pp, dp, cp, ep the rules checked (dp None if unknown)
    source: str  # where the layout came from: stamp | env | flags | none
    launcher: Optional[str] = None
    partitions: Tuple[str, ...] = ()
    rules: Tuple[str, ...] = ()  # ids of the rules that fired
    mode: str = "enforce"
    slurm_code: int = 0  # what job_submit.lua returns: 0, 2072 (reject), -1 (internal error)
    exempt: bool = False
    internal_error: Optional[str] = None
    lines: Tuple[str, ...] = field(default=(), repr=False)  # the user-visible lines, in order
    # partitions of a GPU job that the site does not describe (the filter checks nothing there),
    # and one admin-facing note for each; slurmctld logs each name once
    unknown_partitions: Tuple[str, ...] = ()
    notes: Tuple[str, ...] = ()
    # the --segment job_submit wrote into the job (site policy.repair_segment, Slurm 25.11+)
    repair_segment: Optional[int] = None
    # shadow mode: what enforce would have told the user (the user is told nothing)
    shadow_messages: Tuple[str, ...] = ()
    shadow_warnings: Tuple[str, ...] = ()
    would: str = "accept"  # accept | warn | reject: the verdict with shadow partitions enforced
    verdict: str = "ok"  # the audit word: ok warn reject shadow-warn shadow-reject exempt error
    audit: str = "slurmgpu=ok"  # the token job_submit.lua appends to AdminComment
    shapes: Tuple[JobShape, ...] = ()  # per checked partition: nodes, GPUs and ranks per node
    het_components: int = 1  # components of a het job (each judged as slurmctld does)
    # where the site judges the script (policy.script_check): "submit" (job_submit, sbatch refuses)
    # or "batch-step" (the SPANK plugin when the job starts; sbatch accepts)
    judged_at: str = "submit"

    @property
    def accepted(self) -> bool:
        return self.decision == "accept"

    def to_dict(self) -> Dict[str, Any]:
        return {
            "decision": self.decision,
            "exit_code": self.exit_code,
            "messages": list(self.messages),
            "warnings": list(self.warnings),
            "layout": dict(self.layout),
            "source": self.source,
            "launcher": self.launcher,
            "partitions": list(self.partitions),
            "rules": list(self.rules),
            "repair_segment": self.repair_segment,
            "mode": self.mode,
            "slurm_code": self.slurm_code,
            "exempt": self.exempt,
            "internal_error": self.internal_error,
            "unknown_partitions": list(self.unknown_partitions),
            "notes": list(self.notes),
            "shadow_messages": list(self.shadow_messages),
            "shadow_warnings": list(self.shadow_warnings),
            "would": self.would,
            "verdict": self.verdict,
            "audit": self.audit,
            "shape": self.shapes[0].to_dict() if self.shapes else None,
            "shapes": [x.to_dict() for x in self.shapes],
            "het_components": self.het_components,
            "judged_at": self.judged_at,
        }


def verdict_from_data(d: Mapping[str, Any]) -> Verdict:
    layout = d.get("layout") or {}
    messages = tuple(d.get("messages") or ())
    warnings = tuple(d.get("warnings") or ())
    return Verdict(
        decision=str(d["decision"]),
        exit_code=0 if d["decision"] == "accept" else 1,
        messages=messages,
        warnings=warnings,
        layout={k: (int(layout[k]) if layout.get(k) is not None else None) for k in ("tp", "pp", "dp", "cp", "ep")},
        source=str(d.get("source") or "none"),
        launcher=(d.get("launcher") or None),
        partitions=tuple(d.get("partitions") or ()),
        rules=tuple(d.get("rules") or ()),
        mode=str(d.get("mode") or ""),
        slurm_code=int(d.get("code") or 0),
        repair_segment=int(d["repair_segment"]) if d.get("repair_segment") else None,
        exempt=bool(d.get("exempt")),
        internal_error=d.get("internal_error"),
        lines=messages + warnings,
        unknown_partitions=tuple(d.get("unknown_partitions") or ()),
        notes=tuple(d.get("notes") or ()),
        shadow_messages=tuple(d.get("shadow_messages") or ()),
        shadow_warnings=tuple(d.get("shadow_warnings") or ()),
        would=str(d.get("would") or "accept"),
        verdict=str(d.get("verdict") or "ok"),
        audit=str(d.get("audit") or "slurmgpu=ok"),
        shapes=_shapes(d.get("shapes")),
        judged_at=str(d.get("judged_at") or "submit"),
    )


def het_verdict(parts: Sequence[Verdict]) -> Verdict:
    """One verdict for a het job's components, in order (slurmctld stops at the first rejected
    one, which is then the last): every component's lines with the prefix sbatch shows ("1: ")."""
    import dataclasses

    messages: Tuple[str, ...] = ()
    warnings: Tuple[str, ...] = ()
    lines: Tuple[str, ...] = ()
    rules: Tuple[str, ...] = ()
    shapes: Tuple[JobShape, ...] = ()
    for i, v in enumerate(parts):
        mine = tuple("%d: %s" % (i, m) for m in v.messages)
        theirs = tuple("%d: %s" % (i, w) for w in v.warnings)
        messages += mine
        warnings += theirs
        lines += mine + theirs
        rules += tuple(r for r in v.rules if r not in rules)
        shapes += v.shapes
    bad = [v for v in parts if not v.accepted]
    return dataclasses.replace(
        bad[0] if bad else parts[-1],
        messages=messages,
        warnings=warnings,
        lines=lines,
        rules=rules,
        shapes=shapes,
        het_components=len(parts),
    )


def _from_lua(obj: Any, lua: Any = None) -> Any:
    """lupa table -> list (1..n keys) or dict, recursively (`lua`: the lupa module of the runtime
    the table comes from, default lupa.lua51)."""
    if lua is None:
        from lupa import lua51

        lua = lua51

    if lua.lua_type(obj) != "table":
        return obj
    keys = list(obj.keys())
    if keys and all(isinstance(k, int) for k in keys) and sorted(keys) == list(range(1, len(keys) + 1)):
        return [_from_lua(obj[i], lua) for i in range(1, len(keys) + 1)]
    if not keys:
        return []
    return {k: _from_lua(v, lua) for k, v in obj.items()}


# Lua versions lupa can run the filter under: Debian's Slurm links 5.1; RHEL-family builds
# link the distribution's Lua (5.3 on EL8, 5.4 on EL9).
LUA_VERSIONS = ("5.1", "5.3", "5.4")


def _lupa_module(version: str) -> Any:
    import importlib

    if version not in LUA_VERSIONS:
        raise SlurmgpuError("unknown Lua version '%s' (expected %s)" % (version, ", ".join(LUA_VERSIONS)))
    return importlib.import_module("lupa.lua" + version.replace(".", ""))


def _lua_binary() -> Optional[str]:
    return shutil.which("lua5.1")


def _have_lupa() -> bool:
    try:
        from lupa import lua51  # noqa: F401
    except ImportError:
        return False
    return True


def part_list(site: Site) -> List[Dict[str, Any]]:
    """The part_list slurmctld would pass (name, flag_default) for the site's partitions."""
    return [
        {
            "name": name,
            "flag_default": 1 if name == site.default_partition else 0,
            "total_nodes": p.nodes,
            "max_nodes": p.max_nodes_per_job,
        }
        for name, p in site.partitions.items()
    ]


class PolicyRunner:
    """The rendered job_submit.lua of one site, loaded once, run on job_descs.

    backend: "lupa" (lupa.lua51 in-process), "lua5.1" (the Debian binary, one process per
    call) or "auto" (lupa if importable). `lua`: the Lua version lupa runs ("5.1", "5.3",
    "5.4"), as slurmctld builds linked against that Lua would.
    """

    def __init__(self, site: Site, backend: str = "auto", lua: str = "5.1"):
        self.site = site
        self.text = render_filter(site, "job_submit")
        self.parts = part_list(site)
        if backend == "auto":
            backend = "lupa" if _have_lupa() else "lua5.1"
        if backend == "lua5.1" and not _lua_binary():
            raise SlurmgpuError("running the filter needs Lua 5.1: pip install lupa, or install the lua5.1 package")
        self.backend = backend
        if lua != "5.1" and backend != "lupa":
            raise SlurmgpuError("Lua %s needs the lupa backend" % lua)
        self._lua = None
        self._lupa = None
        if backend == "lupa":
            self._lupa = _lupa_module(lua)
            rt = self._lupa.LuaRuntime(unpack_returned_tuples=True)
            rt.execute(_lua_file("slurm_stub.lua"))
            rt.execute(self.text)
            self._lua = rt
            self._verdict = rt.eval("function(d, p, u) return slurmgpu_stub.export(slurmgpu_stub.verdict(d, p, u)) end")
            self._submit = rt.eval("slurmgpu_stub.submit")
            self._verdicts = rt.eval(
                "function(ds, p, u) local o = slurmgpu_stub.verdicts(ds, p, u) local r = {} "
                "for i = 1, #o do r[i] = o[i] end return r end"
            )

    def evaluate_desc(self, desc: Mapping[str, Any], uid: Optional[int] = None) -> Verdict:
        """The verdict of job_submit.lua for these job_desc fields (see slurmgpu.slurm.sbatch)."""
        if self._lua is not None:
            rt = self._lua
            v = self._verdict(rt.table_from(dict(desc), recursive=True), rt.table_from(self.parts, recursive=True), uid)
            return verdict_from_data(_from_lua(v, self._lupa))
        return verdict_from_data(self._run_binary(desc, uid))

    def evaluate_het(self, descs: Sequence[Mapping[str, Any]], uid: Optional[int] = None) -> Verdict:
        """The verdict for a het job's component job_descs, submitted in one go as slurmctld does."""
        if self._lua is not None:
            rt = self._lua
            out = self._verdicts(
                rt.table_from([dict(d) for d in descs], recursive=True), rt.table_from(self.parts, recursive=True), uid
            )
            data = _from_lua(out, self._lupa)
        else:
            data = self._run_binary_het(descs, uid)
        return het_verdict([verdict_from_data(d) for d in data])

    def submit_desc(self, desc: Mapping[str, Any], uid: Optional[int] = None) -> Tuple[int, List[str]]:
        """slurm_job_submit's return value and the slurm.log_user lines, as slurmctld gets them."""
        rc, msgs, _ = self.submit_desc_logged(desc, uid)
        return rc, msgs

    def submit_desc_logged(
        self, desc: Mapping[str, Any], uid: Optional[int] = None
    ) -> Tuple[int, List[str], List[str]]:
        """submit_desc, plus the lines the filter wrote to the controller log."""
        if self._lua is None:
            raise SlurmgpuError("submit_desc needs lupa")
        rt = self._lua
        rc, msgs, log, _ = self._submit(
            rt.table_from(dict(desc), recursive=True), rt.table_from(self.parts, recursive=True), uid
        )
        return (int(rc), [msgs[i] for i in range(1, len(msgs) + 1)], [log[i] for i in range(1, len(log) + 1)])

    def _run_binary_het(self, descs: Sequence[Mapping[str, Any]], uid: Optional[int]) -> List[Dict[str, Any]]:
        call = "slurmgpu_stub.verdicts(%s, %s, %s)" % (
            lua_literal([dict(d) for d in descs]),
            lua_literal(self.parts),
            lua_literal(uid),
        )
        out: List[Dict[str, Any]] = self._run_binary(None, uid, call)  # type: ignore[assignment]
        return out

    def _run_binary(
        self, desc: Optional[Mapping[str, Any]], uid: Optional[int], call: Optional[str] = None
    ) -> Dict[str, Any]:
        import subprocess  # only this fallback runs a process: gen with lupa does not load it

        if call is None:
            call = "slurmgpu_stub.export(slurmgpu_stub.verdict(%s, %s, %s))" % (
                lua_literal(dict(desc or {})),
                lua_literal(self.parts),
                lua_literal(uid),
            )
        with tempfile.TemporaryDirectory(prefix="slurmgpu-check-") as tmp:
            Path(tmp, "job_submit.lua").write_text(self.text, encoding="utf-8")
            Path(tmp, "slurm_stub.lua").write_text(_lua_file("slurm_stub.lua"), encoding="utf-8")
            driver = ("dofile('slurm_stub.lua')\ndofile('job_submit.lua')\nio.write(slurmgpu_stub.json(%s))\n") % call
            Path(tmp, "driver.lua").write_bytes(driver.encode("utf-8", "surrogateescape"))
            proc = subprocess.run([_lua_binary() or "lua5.1", "driver.lua"], cwd=tmp, capture_output=True, timeout=120)
        if proc.returncode != 0:
            raise SlurmgpuError("lua5.1 failed running the filter: %s" % proc.stderr.decode("utf-8", "replace").strip())
        verdict: Dict[str, Any] = json.loads(proc.stdout.decode("utf-8"))
        return verdict

    def check(
        self,
        script: Union[str, bytes],
        sbatch_args: Sequence[str] = (),
        partition: Optional[str] = None,
        env: Optional[Mapping[str, str]] = None,
        user: Optional[str] = None,
        account: Optional[str] = None,
        qos: Optional[str] = None,
        script_path: str = "script.sh",
        uid: Optional[int] = None,
        script_args: Sequence[str] = (),
        cluster: bool = False,
    ) -> Verdict:
        """The filter's verdict for `sbatch [sbatch_args] script`; with `cluster`, what sbatch and
        slurmctld refuse before the filter first (see check_script)."""
        from ..slurm import het_count, job_desc

        n = het_count(script, sbatch_args)
        descs = [
            job_desc(
                script,
                sbatch_args,
                env=env,
                script_path=script_path,
                partition=partition,
                user=user,
                uid=uid,
                account=account,
                qos=qos,
                script_args=script_args,
                slurm_version=self.site.slurm_version,
                het_component=i if n > 1 else None,
            )
            for i in range(n)
        ]
        never: List[str] = []
        if cluster:  # what sbatch or slurmctld refuse never reaches the filter: raised (exit 2) first
            from .refuse import cluster_refusals

            never = cluster_refusals(self.site, script, sbatch_args, descs, env, script_path, partition)
        verdict = self.evaluate_het(descs, uid) if n > 1 else self.evaluate_desc(descs[0], uid)
        if not never:
            return verdict
        from dataclasses import replace

        return replace(verdict, warnings=verdict.warnings + tuple(never))


def check_script(
    site: Site,
    script: Union[str, bytes],
    sbatch_args: Sequence[str] = (),
    partition: Optional[str] = None,
    env: Optional[Mapping[str, str]] = None,
    user: Optional[str] = None,
    account: Optional[str] = None,
    qos: Optional[str] = None,
    script_path: str = "script.sh",
    uid: Optional[int] = None,
    script_args: Sequence[str] = (),
) -> Verdict:
    """The controller's verdict for `sbatch [sbatch_args] script` on this site.

    `env` is the submitting environment (None: empty); it matters for SLURMGPU_TP etc.,
    shell variables the script does not set, SBATCH_* input variables and NCCL settings.
    Raises ConfigError for unreadable sbatch options and for what sbatch or slurmctld would
    refuse before the filter runs (slurm.refusals; exit 2 in the CLI); a job they accept that can
    never start comes back with a warning.
    """
    return PolicyRunner(site).check(
        script,
        sbatch_args,
        partition=partition,
        env=env,
        user=user,
        account=account,
        qos=qos,
        script_path=script_path,
        uid=uid,
        script_args=script_args,
        cluster=True,
    )
