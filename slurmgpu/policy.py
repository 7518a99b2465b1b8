"""The submit filter from Python: render it for a site, install it, and run it (`slurmgpu check`).

The rules live in one place, contrib/lua/policy.lua. This module never re-implements them:
it bakes the site into a Lua table, glues policy.lua to the Slurm adapters, and runs the
rendered job_submit.lua under real Lua 5.1 (lupa.lua51, else the `lua5.1` binary) with a
stub `slurm` table that behaves like Slurm 22.05's, so `check` gives the controller's verdict.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from . import __version__
from .errors import SlurmgpuError
from .site import Site, data_dir

KINDS = ("job_submit", "cli_filter", "spank")
FILENAMES = {"job_submit": "job_submit.lua", "cli_filter": "cli_filter.lua", "spank": "slurmgpu_spank.lua"}
SLURM_CONF_LINES = {"job_submit": "JobSubmitPlugins=lua", "cli_filter": "CliFilterPlugins=lua",
                    "spank": "PlugStackConfig=<plugstack.conf>"}
# The plugstack.conf line that loads the SPANK launch guard (contrib/spank, docs/admin-spank.md).
SPANK_PLUGSTACK_LINE = "required %s policy=%s mode=enforce on_error=allow"
REJECT_CODE = 2072  # what job_submit.lua returns for a rejection (ESLURM_INVALID_GRES)

# NCCL variables a multi-node job should set, per fabric (fabric fact sheet sections 1-2).
_NCCL_BY_FABRIC = {
    "infiniband": ("NCCL_IB_HCA",),
    "roce": ("NCCL_IB_HCA",),
    "efa": (),
    "slingshot": ("NCCL_NET",),
    "ethernet": (),
}


def lua_dir() -> Path:
    """contrib/lua in a source tree, slurmgpu/_data/contrib in a wheel."""
    d = data_dir("contrib")
    return d / "lua" if (d / "lua").is_dir() else d


def _lua_file(name: str) -> str:
    return (lua_dir() / name).read_text(encoding="utf-8")


# ---------------------------------------------------------------------------
# Lua literals

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_LUA_KEYWORDS = set("and break do else elseif end false for function if in local nil not or repeat "
                    "return then true until while".split())
_UNSAFE = re.compile(rb'[\x00-\x1f"\\\x7f-\xff]')


def lua_string(value: Union[str, bytes]) -> str:
    """A Lua 5.1 string literal holding exactly these bytes."""
    data = value.encode("utf-8", "surrogateescape") if isinstance(value, str) else value
    return '"' + _UNSAFE.sub(lambda m: b"\\%03d" % m.group()[0], data).decode("ascii") + '"'


def lua_literal(value: Any, indent: int = 0) -> str:
    """Plain data -> a deterministic Lua 5.1 literal (dict keys sorted)."""
    pad = "  " * (indent + 1)
    if value is None:
        return "nil"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, (str, bytes)):
        return lua_string(value)
    if isinstance(value, (list, tuple)):
        if not value:
            return "{}"
        if all(not isinstance(v, (dict, list, tuple)) for v in value):
            return "{" + ", ".join(lua_literal(v) for v in value) + "}"
        return "{\n" + "".join(pad + lua_literal(v, indent + 1) + ",\n" for v in value) + "  " * indent + "}"
    if isinstance(value, Mapping):
        items = [(k, v) for k, v in sorted(value.items(), key=lambda kv: str(kv[0])) if v is not None]
        if not items:
            return "{}"
        out = []
        for k, v in items:
            key = k if isinstance(k, str) and _IDENT.match(k) and k not in _LUA_KEYWORDS else "[%s]" % lua_literal(k)
            out.append("%s%s = %s,\n" % (pad, key, lua_literal(v, indent + 1)))
        return "{\n" + "".join(out) + "  " * indent + "}"
    raise TypeError("cannot write %r as a Lua literal" % (value,))


# ---------------------------------------------------------------------------
# Site -> Lua table

def topology_table(site: Site) -> Dict[str, Any]:
    """What the policy knows about a site: per partition GPUs per node, NVLink domain (GPUs and
    nodes), link, fabric, the NCCL variables multi-node jobs should set, and the effective mode;
    plus the site's policy switches. Plain data, the same dict that is baked into the Lua."""
    parts: Dict[str, Any] = {}
    for name, p in site.partitions.items():
        nt = site.node_types[p.node_type]
        nccl = list(_NCCL_BY_FABRIC.get(nt.fabric, ()))
        if nt.socket_ifname and nt.fabric in ("infiniband", "roce", "slingshot", "ethernet"):
            nccl.append("NCCL_SOCKET_IFNAME")
        parts[name] = {
            "gpus": nt.gpus, "domain": nt.nvlink_domain, "domain_nodes": nt.domain_nodes,
            "link": nt.link, "fabric": nt.fabric, "gpu_model": nt.gpu_model, "nodes": p.nodes,
            "max_nodes": p.max_nodes_per_job, "exclusive": bool(p.exclusive),
            "mode": p.policy or site.policy.mode, "nccl": nccl,
        }
    pol = site.policy
    from .jobdesc import EXPORT_SLURM_PREFIX_FROM, slurm_version_tuple

    ver = slurm_version_tuple(site.slurm_version)
    return {
        "site": site.name,
        # sbatch --export=NIL/list passes every SLURM* name (SLURMGPU_TP too) from 24.05
        "export_keeps_slurm_prefix": bool(ver and ver >= EXPORT_SLURM_PREFIX_FROM),
        "default_partition": site.default_partition,
        "topology": site.topology,
        "mode": pol.mode,
        "on_internal_error": pol.on_internal_error,
        "launchers": dict(sorted(pol.launchers.items())),
        "exempt_users": list(pol.exempt_users),
        "exempt_accounts": list(pol.exempt_accounts),
        "exempt_qos": list(pol.exempt_qos),
        "partitions": parts,
        "partition_order": list(site.partitions),
    }


def topology_lua(site: Site) -> str:
    """`return {...}`: the site table for embedding next to policy.lua (e.g. a SPANK plugin)."""
    return "return " + lua_literal(topology_table(site)) + "\n"


def render_filter(site: Site, kind: str) -> str:
    """The complete job_submit.lua or cli_filter.lua for a site (deterministic text)."""
    if kind not in KINDS:
        raise SlurmgpuError("unknown filter kind '%s' (expected %s)" % (kind, " or ".join(KINDS)))
    policy = _lua_file("policy.lua").rstrip("\n")
    adapter = _lua_file(kind + "_adapter.lua").rstrip("\n")
    head = (
        "-- %s for site '%s', generated by slurmgpu %s (slurmgpu admin render-filter).\n"
        "-- Do not edit: change the site config and render again. Install it next to slurm.conf\n"
        "-- with `slurmgpu admin install` (it makes the mtime newer, which is what makes\n"
        "-- slurmctld reload it); slurm.conf needs: %s\n"
        "-- Lua 5.1. Log lines are tagged 'slurmgpu-filter:'.\n"
    ) % (FILENAMES[kind], site.name, __version__, SLURM_CONF_LINES[kind])
    if kind == "spank":
        head = (
            "-- slurmgpu_spank.lua for site '%s', generated by slurmgpu %s (slurmgpu admin render-filter).\n"
            "-- Do not edit: change the site config and render again. The SPANK plugin\n"
            "-- (contrib/spank) loads it in every task of every job step, as the job's user, so it\n"
            "-- must be readable by all users on every node. plugstack.conf needs:\n"
            "--   %s\n"
            "-- Lua 5.1. Log lines are tagged 'slurmgpu-filter:'.\n"
        ) % (site.name, __version__, SPANK_PLUGSTACK_LINE % ("<plugindir>/slurmgpu_spank.so", "<this file>"))
    return (head + "\nlocal TOPO = " + lua_literal(topology_table(site)) + "\n\n"
            "local P = (function()\n" + policy + "\nend)()\n\n" + adapter + "\n")


# ---------------------------------------------------------------------------
# Verdicts

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

    @property
    def accepted(self) -> bool:
        return self.decision == "accept"

    def to_dict(self) -> Dict[str, Any]:
        return {
            "decision": self.decision, "exit_code": self.exit_code, "messages": list(self.messages),
            "warnings": list(self.warnings), "layout": dict(self.layout), "source": self.source,
            "launcher": self.launcher, "partitions": list(self.partitions), "rules": list(self.rules),
            "mode": self.mode, "slurm_code": self.slurm_code, "exempt": self.exempt,
            "internal_error": self.internal_error,
        }


def verdict_from_data(d: Mapping[str, Any]) -> Verdict:
    layout = d.get("layout") or {}
    messages = tuple(d.get("messages") or ())
    warnings = tuple(d.get("warnings") or ())
    return Verdict(
        decision=str(d["decision"]), exit_code=0 if d["decision"] == "accept" else 1,
        messages=messages, warnings=warnings,
        layout={k: (int(layout[k]) if layout.get(k) is not None else None) for k in ("tp", "pp", "dp", "cp", "ep")},
        source=str(d.get("source") or "none"), launcher=(d.get("launcher") or None),
        partitions=tuple(d.get("partitions") or ()), rules=tuple(d.get("rules") or ()),
        mode=str(d.get("mode") or ""), slurm_code=int(d.get("code") or 0), exempt=bool(d.get("exempt")),
        internal_error=d.get("internal_error"), lines=messages + warnings,
    )


# ---------------------------------------------------------------------------
# Running the rendered filter

def _from_lua(obj: Any, lua: Any = None) -> Any:
    """lupa table -> list (1..n keys) or dict, recursively (`lua`: the lupa module of the runtime
    the table comes from, default lupa.lua51)."""
    if lua is None:
        from lupa import lua51 as lua

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
    return [{"name": name, "flag_default": 1 if name == site.default_partition else 0,
             "total_nodes": p.nodes, "max_nodes": p.max_nodes_per_job} for name, p in site.partitions.items()]


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

    def evaluate_desc(self, desc: Mapping[str, Any], uid: Optional[int] = None) -> Verdict:
        """The verdict of job_submit.lua for these job_desc fields (see slurmgpu.jobdesc)."""
        if self._lua is not None:
            rt = self._lua
            v = self._verdict(rt.table_from(dict(desc), recursive=True),
                              rt.table_from(self.parts, recursive=True), uid)
            return verdict_from_data(_from_lua(v, self._lupa))
        return verdict_from_data(self._run_binary(desc, uid))

    def submit_desc(self, desc: Mapping[str, Any], uid: Optional[int] = None) -> Tuple[int, List[str]]:
        """slurm_job_submit's return value and the slurm.log_user lines, as slurmctld gets them."""
        rc, msgs, _ = self.submit_desc_logged(desc, uid)
        return rc, msgs

    def submit_desc_logged(self, desc: Mapping[str, Any],
                           uid: Optional[int] = None) -> Tuple[int, List[str], List[str]]:
        """submit_desc, plus the lines the filter wrote to the controller log."""
        if self._lua is None:
            raise SlurmgpuError("submit_desc needs lupa")
        rt = self._lua
        rc, msgs, log = self._submit(rt.table_from(dict(desc), recursive=True),
                                     rt.table_from(self.parts, recursive=True), uid)
        return (int(rc), [msgs[i] for i in range(1, len(msgs) + 1)],
                [log[i] for i in range(1, len(log) + 1)])

    def _run_binary(self, desc: Mapping[str, Any], uid: Optional[int]) -> Dict[str, Any]:
        with tempfile.TemporaryDirectory(prefix="slurmgpu-check-") as tmp:
            Path(tmp, "job_submit.lua").write_text(self.text, encoding="utf-8")
            Path(tmp, "slurm_stub.lua").write_text(_lua_file("slurm_stub.lua"), encoding="utf-8")
            driver = ("dofile('slurm_stub.lua')\ndofile('job_submit.lua')\n"
                      "local v = slurmgpu_stub.verdict(%s, %s, %s)\n"
                      "io.write(slurmgpu_stub.json(slurmgpu_stub.export(v)))\n") % (
                lua_literal(dict(desc)), lua_literal(self.parts), lua_literal(uid))
            Path(tmp, "driver.lua").write_bytes(driver.encode("utf-8", "surrogateescape"))
            proc = subprocess.run([_lua_binary() or "lua5.1", "driver.lua"], cwd=tmp, capture_output=True, timeout=120)
        if proc.returncode != 0:
            raise SlurmgpuError("lua5.1 failed running the filter: %s" % proc.stderr.decode("utf-8", "replace").strip())
        return json.loads(proc.stdout.decode("utf-8"))

    def check(self, script: Union[str, bytes], sbatch_args: Sequence[str] = (), partition: Optional[str] = None,
              env: Optional[Mapping[str, str]] = None, user: Optional[str] = None, account: Optional[str] = None,
              qos: Optional[str] = None, script_path: str = "script.sh", uid: Optional[int] = None,
              script_args: Sequence[str] = ()) -> Verdict:
        """The verdict for `sbatch [sbatch_args] script` (see check_script)."""
        from .jobdesc import job_desc

        desc = job_desc(script, sbatch_args, env=env, script_path=script_path, partition=partition,
                        user=user, uid=uid, account=account, qos=qos, script_args=script_args,
                        slurm_version=self.site.slurm_version)
        return self.evaluate_desc(desc, uid)


def check_script(site: Site, script: Union[str, bytes], sbatch_args: Sequence[str] = (),
                 partition: Optional[str] = None, env: Optional[Mapping[str, str]] = None,
                 user: Optional[str] = None, account: Optional[str] = None, qos: Optional[str] = None,
                 script_path: str = "script.sh", uid: Optional[int] = None,
                 script_args: Sequence[str] = ()) -> Verdict:
    """The controller's verdict for `sbatch [sbatch_args] script` on this site.

    `env` is the submitting environment (None: empty); it matters for SLURMGPU_TP etc.,
    shell variables the script does not set, SBATCH_* input variables and NCCL settings.
    Raises ConfigError for unreadable sbatch options (exit 2 in the CLI).
    """
    return PolicyRunner(site).check(script, sbatch_args, partition=partition, env=env, user=user,
                                    account=account, qos=qos, script_path=script_path, uid=uid,
                                    script_args=script_args)


# ---------------------------------------------------------------------------
# Installing

def validate_lua(text: str, name: str = "filter") -> None:
    """Refuse to install a file Lua 5.1 cannot compile (slurmctld would keep the old one, or die)."""
    if _have_lupa():
        from lupa import lua51

        rt = lua51.LuaRuntime()
        ok, err = rt.eval("function(s, n) local f, e = loadstring(s, n); return f ~= nil, e end")(text, name)
        if not ok:
            raise SlurmgpuError("rendered %s does not compile under Lua 5.1: %s" % (name, err))
        return
    luac = shutil.which("luac5.1")
    if luac:
        with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as f:
            f.write(text)
        try:
            proc = subprocess.run([luac, "-p", f.name], capture_output=True, text=True)
        finally:
            os.unlink(f.name)
        if proc.returncode != 0:
            raise SlurmgpuError("rendered %s does not compile under Lua 5.1: %s" % (name, proc.stderr.strip()))


@dataclass(frozen=True)
class Installed:
    path: str
    kind: str
    slurm_conf_line: str
    conf_has_line: bool  # slurm.conf in that directory already enables the plugin
    replaced: bool


def install_filter(site: Site, conf_dir: Union[str, Path], kind: str = "job_submit") -> Installed:
    """Write the rendered filter next to slurm.conf atomically (temp file + rename), with an
    mtime strictly newer (by >= 1 s) than the file it replaces: slurmctld 22.05 reloads the
    script only when its mtime is newer than the last load."""
    text = render_filter(site, kind)
    validate_lua(text, FILENAMES[kind])
    conf = Path(conf_dir)
    if not conf.is_dir():
        raise SlurmgpuError("%s is not a directory (give the directory that holds slurm.conf)" % conf)
    target = conf / FILENAMES[kind]
    now = time.time()
    replaced = target.exists()
    mtime = now
    if replaced:
        mtime = max(now, target.stat().st_mtime + 1.0)
    fd, tmp = tempfile.mkstemp(prefix="." + FILENAMES[kind] + ".", dir=str(conf))
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        os.utime(tmp, (mtime, mtime))
        os.replace(tmp, target)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    if kind == "spank":
        line = SPANK_PLUGSTACK_LINE % ("<plugindir>/slurmgpu_spank.so", target)
        return Installed(path=str(target), kind=kind, slurm_conf_line=line,
                         conf_has_line=plugstack_loads_spank(conf, target), replaced=replaced)
    line = SLURM_CONF_LINES[kind]
    has = False
    conf_file = conf / "slurm.conf"
    if conf_file.is_file():
        key, _, value = line.partition("=")
        for raw in conf_file.read_text(encoding="utf-8", errors="replace").splitlines():
            k, eq, v = raw.split("#", 1)[0].strip().partition("=")
            names = [x.strip()[len(kind) + 1:] if x.strip().startswith(kind + "/") else x.strip() for x in v.split(",")]
            if eq and k.strip().lower() == key.lower() and value in names:
                has = True
    return Installed(path=str(target), kind=kind, slurm_conf_line=line, conf_has_line=has, replaced=replaced)


def plugstack_loads_spank(conf_dir: Union[str, Path], policy: Union[str, Path]) -> bool:
    """Whether the plugstack.conf that slurm.conf in conf_dir names (PlugStackConfig=, default
    plugstack.conf beside it) has an active slurmgpu_spank.so line with policy=<policy>."""
    conf = Path(conf_dir)
    stack = conf / "plugstack.conf"
    slurm_conf = conf / "slurm.conf"
    if slurm_conf.is_file():
        for raw in slurm_conf.read_text(encoding="utf-8", errors="replace").splitlines():
            k, eq, v = raw.split("#", 1)[0].strip().partition("=")
            if eq and k.strip().lower() == "plugstackconfig" and v.strip():
                stack = Path(v.strip()) if os.path.isabs(v.strip()) else conf / v.strip()
    if not stack.is_file():
        return False
    for raw in stack.read_text(encoding="utf-8", errors="replace").splitlines():
        words = raw.split("#", 1)[0].split()
        if (len(words) >= 2 and words[0] in ("required", "optional") and words[1].endswith("/slurmgpu_spank.so")
                and "policy=%s" % policy in words[2:] and "mode=off" not in words[2:]):
            return True
    return False
