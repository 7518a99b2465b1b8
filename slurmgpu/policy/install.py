"""Installing a rendered filter on a controller: validate the Lua, write atomically, check slurm.conf
and plugstack.conf load it."""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import FrozenSet, Optional, Tuple, Union

from ..errors import Refused, SlurmgpuError
from ..site import Site
from .lua import _GENERATED_LINE, FILENAMES, SLURM_CONF_LINES, SPANK_PLUGSTACK_LINE, render_filter
from .run import _have_lupa


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
        import subprocess

        with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as f:
            f.write(text)
        try:
            proc = subprocess.run([luac, "-p", f.name], capture_output=True, text=True)
        finally:
            os.unlink(f.name)
        if proc.returncode != 0:
            raise SlurmgpuError("rendered %s does not compile under Lua 5.1: %s" % (name, proc.stderr.strip()))


def written_by_slurmgpu(data: Union[str, bytes]) -> bool:
    """Whether a filter file starts with the header `render_filter` writes."""
    if isinstance(data, bytes):
        data = data[:4096].decode("utf-8", "replace")
    return bool(_GENERATED_LINE.match(data.split("\n", 1)[0].rstrip("\r")))


# Where the site of `admin install` may come from (slurmgpu.site.site_search's reasons):
# the admin named it. ~/.config/slurmgpu/site.yaml and the built-in default are not a
# decision about the cluster's policy.
EXPLICIT_SITE_SOURCES = ("--site", "$SLURMGPU_SITE", "admin config")


def install_site_problem(path: str, why: str, allow_preset: bool = False) -> Optional[str]:
    """Why this site must not be installed as the cluster's filter (None: it may).

    `path`, `why` are what slurmgpu.site.site_search returned. Built-in presets are examples,
    never a cluster's policy: they need `allow_preset`, however they were named."""
    from ..site import preset_dir

    if why not in EXPLICIT_SITE_SOURCES:
        return (
            "admin install needs an explicit site: --site PATH, $SLURMGPU_SITE or /etc/slurmgpu/site.yaml "
            "(found only the %s, %s). A submit filter enforces one cluster's policy; write that "
            "cluster's site config (`slurmgpu discover -o site.yaml` drafts one) and name it." % (why, path)
        )
    try:
        is_preset = Path(path).resolve().parent == preset_dir().resolve()
    except OSError:
        is_preset = False
    if is_preset and not allow_preset:
        return (
            "site %s (%s: %s) is a built-in preset: an example, never a cluster's policy. Write your "
            "cluster's site config (`slurmgpu discover -o site.yaml`, or a file with `extends: %s` and "
            "your partitions) and pass it with --site, or pass --allow-preset to install the example "
            "anyway." % (Path(path).stem, why, path, Path(path).stem)
        )
    return None


@dataclass(frozen=True)
class InstallPlan:
    """What installing one filter would do (nothing is written to make it)."""

    kind: str
    path: str
    site: str
    text: str  # what would be written
    existing: Optional[bytes]  # the file there now (None: no file)
    notes: Tuple[str, ...] = ()  # warnings for the admin (e.g. exemptions that will not be honoured)

    @property
    def foreign(self) -> bool:
        """A file is there that slurmgpu did not write (a site's own filter)."""
        return self.existing is not None and not written_by_slurmgpu(self.existing)

    @property
    def changes(self) -> bool:
        return self.existing != self.text.encode("utf-8")

    def diff(self) -> str:
        """Unified diff from the file there now (or nothing) to the rendered one."""
        import difflib

        old = self.existing.decode("utf-8", "replace") if self.existing is not None else ""
        lines = list(
            difflib.unified_diff(
                old.splitlines(True),
                self.text.splitlines(True),
                fromfile=self.path if self.existing is not None else "/dev/null",
                tofile="%s (rendered for site %s)" % (self.path, self.site),
            )
        )
        return "".join(ln if ln.endswith("\n") else ln + "\n\\ No newline at end of file\n" for ln in lines)


def accounting_enforce(slurm_conf: Union[str, Path]) -> Optional[FrozenSet[str]]:
    """The AccountingStorageEnforce words of a slurm.conf, with the ones Slurm implies (qos,
    limits and safe imply associations; safe implies limits); None: no such file."""
    try:
        text = Path(slurm_conf).read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise SlurmgpuError("cannot read %s: %s" % (slurm_conf, exc.strerror)) from None
    words = set()
    for raw in text.splitlines():
        k, eq, v = raw.split("#", 1)[0].strip().partition("=")
        if eq and k.strip().lower() == "accountingstorageenforce":
            words = {w.strip().lower() for w in v.split(",") if w.strip()}  # the last line wins
    if words & {"qos", "limits", "safe"}:
        words.add("associations")
    if "safe" in words:
        words.add("limits")
    return frozenset(words)


def accounting_check(site: Site, conf_dir: Union[str, Path]) -> Tuple[Optional[str], Tuple[str, ...]]:
    """(refusal, notes) for the site's account/QOS exemptions against the slurm.conf beside the
    filter: an exemption the site honours but Slurm does not validate (anyone could type -A or
    --qos for it) refuses the install; one the filter will not honour is a note."""
    pol = site.policy
    if not (pol.exempt_accounts or pol.exempt_qos):
        return None, ()
    claimed = set(pol.accounting_enforce)
    if claimed & {"qos", "limits", "safe"}:
        claimed.add("associations")
    conf_file = Path(conf_dir) / "slurm.conf"
    have = accounting_enforce(conf_file)
    needs = []
    if pol.exempt_accounts:
        needs.append(("associations", "exempt_accounts", "-A"))
    if pol.exempt_qos:
        needs.append(("qos", "exempt_qos", "--qos"))
    notes = []
    for word, field, flag in needs:
        if word in claimed and have is not None and word not in have:
            return (
                "site %s honours policy.%s because policy.accounting_enforce says Slurm validates %s, but %s "
                "has AccountingStorageEnforce=%s: any user could exempt a job by typing %s. Add %s to "
                "AccountingStorageEnforce (and restart slurmctld), or remove %s from policy.accounting_enforce. "
                "Nothing was installed."
                % (site.name, field, flag, conf_file, ",".join(sorted(have)) or "(not set)", flag, word, word)
            ), ()
        if word not in claimed:
            notes.append(
                "policy.%s is set but policy.accounting_enforce lacks %s: the filter ignores %s exemptions "
                "(a user could type %s) and says so to the job's user%s"
                % (
                    field,
                    word,
                    flag,
                    flag,
                    "; this slurm.conf does enforce %s, so add it to policy.accounting_enforce" % word
                    if have and word in have
                    else "",
                )
            )
    return None, tuple(notes)


def _slurm_conf_value(conf_dir: Path, key: str) -> Optional[str]:
    """The value of `key` in slurm.conf of `conf_dir` (the last line wins, keys are
    case-insensitive, as Slurm reads them); None: no such line or no slurm.conf."""
    try:
        text = (conf_dir / "slurm.conf").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    found = None
    for raw in text.splitlines():
        k, eq, v = raw.split("#", 1)[0].strip().partition("=")
        if eq and k.strip().lower() == key.lower():
            found = v.strip()
    return found


def cli_filter_target(conf_dir: Union[str, Path]) -> Tuple[Path, Tuple[str, ...]]:
    """Where the clients read cli_filter.lua, and notes for the admin.

    Slurm 25.11 added `CliFilterParameters=cli_filter_lua_path=<absolute path>`: with it the clients
    load that file instead of cli_filter.lua beside slurm.conf, so that is where the filter must go
    (a copy beside slurm.conf would be ignored). Slurm wants its directory mode 755, the file 644,
    both owned by SlurmdUser; and every login node reads its own copy (the path is not served by
    configless slurmctld)."""
    conf = Path(conf_dir)
    params = _slurm_conf_value(conf, "CliFilterParameters") or ""
    path = None
    for item in params.split(","):
        k, eq, v = item.strip().partition("=")
        if eq and k.strip().lower() == "cli_filter_lua_path":
            path = v.strip()
    if path is None:
        return conf / FILENAMES["cli_filter"], ()
    if not os.path.isabs(path):
        raise SlurmgpuError(
            "%s: CliFilterParameters=cli_filter_lua_path=%s is not an absolute path, which Slurm requires; "
            "fix slurm.conf first" % (conf / "slurm.conf", path)
        )
    target = Path(path)
    notes = [
        "slurm.conf sets CliFilterParameters=cli_filter_lua_path=%s (Slurm 25.11+): the cli_filter goes "
        "there; every login node reads its own copy of that file" % path
    ]
    parent = target.parent
    if not parent.is_dir():
        raise SlurmgpuError(
            "%s (the directory of cli_filter_lua_path in %s) does not exist: create it (mode 755, owned by "
            "SlurmdUser) first" % (parent, conf / "slurm.conf")
        )
    mode = parent.stat().st_mode & 0o777
    if mode != 0o755:
        notes.append("%s has mode %03o; Slurm wants 755 for the directory of cli_filter_lua_path" % (parent, mode))
    owner = _slurm_conf_value(conf, "SlurmdUser") or "root"
    try:
        import pwd

        have = pwd.getpwuid(parent.stat().st_uid).pw_name
    except (ImportError, KeyError):
        have = str(parent.stat().st_uid)
    if have != owner:
        notes.append("%s is owned by %s; Slurm wants it owned by SlurmdUser (%s)" % (parent, have, owner))
    return target, tuple(notes)


def batch_step_check(site: Site, conf_dir: Union[str, Path], with_spank: bool = False) -> Optional[str]:
    """Why installing job_submit on a site with policy.script_check batch-step is refused (None: it
    is not): that job_submit leaves the batch script of a job that may span nodes to the SPANK
    plugin, so the plugin must load this site's policy (plugstack.conf beside slurm.conf, the
    policy file it names rendered from the same site), or nothing checks those scripts at all.
    `with_spank`: the spank policy is installed in the same run."""
    if site.policy.script_check != "batch-step":
        return None
    conf = Path(conf_dir)
    spank = conf / FILENAMES["spank"]
    same = with_spank
    if not same:
        try:
            same = spank.read_text(encoding="utf-8", errors="replace") == render_filter(site, "spank")
        except OSError:
            same = False
    loaded = plugstack_loads_spank(conf, spank)
    if same and loaded:
        return None
    return (
        "site %s has policy.script_check batch-step: job_submit leaves the batch script of a job that may "
        "run on several nodes to the SPANK plugin at the batch step, but %s. Install the plugin's policy "
        "first (slurmgpu admin install --kind spank, or --kind all) and load it in plugstack.conf "
        "(slurmgpu docs admin-spank), or set policy.script_check: submit. Nothing was installed."
        % (
            site.name,
            "the plugstack.conf of %s does not load slurmgpu_spank.so with policy=%s" % (conf, spank)
            if not loaded
            else "%s is not this site's rendered spank policy" % spank,
        )
    )


def plan_install(
    site: Site, conf_dir: Union[str, Path], kind: str = "job_submit", with_spank: bool = False
) -> InstallPlan:
    """Render and compile the filter and read what it would replace. `with_spank`: the spank policy
    is installed in the same run (see batch_step_check)."""
    text = render_filter(site, kind)
    validate_lua(text, FILENAMES[kind])
    conf = Path(conf_dir)
    if not conf.is_dir():
        raise SlurmgpuError("%s is not a directory (give the directory that holds slurm.conf)" % conf)
    target = conf / FILENAMES[kind]
    target_notes: Tuple[str, ...] = ()
    if kind == "cli_filter":
        target, target_notes = cli_filter_target(conf)
    try:
        existing: Optional[bytes] = target.read_bytes()
    except FileNotFoundError:
        existing = None
    except OSError as exc:
        raise SlurmgpuError("cannot read %s: %s" % (target, exc.strerror)) from None
    notes: Tuple[str, ...] = ()
    if kind != "spank":  # slurmstepd has no account or QOS: the SPANK policy exempts by user only
        refusal, notes = accounting_check(site, conf)
        if refusal:
            raise Refused(refusal)
    if kind == "job_submit":
        refusal = batch_step_check(site, conf, with_spank)
        if refusal:
            raise Refused(refusal)
    return InstallPlan(
        kind=kind, path=str(target), site=site.name, text=text, existing=existing, notes=target_notes + notes
    )


def backup_file(target: Path) -> Path:
    """Copy `target` (bytes, mode, mtime) to `<name>.bak-YYYYmmddTHHMMSS[-N]` beside it,
    never overwriting a file; the copy is complete before its name appears."""
    stamp = time.strftime("%Y%m%dT%H%M%S")
    for i in range(1000):
        dest = target.with_name("%s.bak-%s%s" % (target.name, stamp, "-%d" % i if i else ""))
        try:
            os.close(os.open(str(dest), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))  # reserve the name
        except FileExistsError:
            continue
        break
    else:
        raise SlurmgpuError("cannot find a free backup name for %s" % target)
    fd, tmp = tempfile.mkstemp(prefix="." + target.name + ".bak.", dir=str(target.parent))
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(target.read_bytes())
            f.flush()
            os.fsync(f.fileno())
        shutil.copystat(str(target), tmp)
        os.replace(tmp, str(dest))
    except BaseException:
        for p in (tmp, str(dest)):
            if os.path.exists(p):
                os.unlink(p)
        raise
    return dest


@dataclass(frozen=True)
class Installed:
    """Where `admin install` put a filter, and whether slurm.conf already loads it."""

    path: str
    kind: str
    slurm_conf_line: str
    conf_has_line: bool  # slurm.conf in that directory already enables the plugin
    replaced: bool
    backup: Optional[str] = None  # where the replaced file was kept (None: nothing replaced, or unchanged)
    foreign: bool = False  # the replaced file was not written by slurmgpu (installed with force)


def install_filter(
    site: Site,
    conf_dir: Union[str, Path],
    kind: str = "job_submit",
    force: bool = False,
    plan: Optional[InstallPlan] = None,
) -> Installed:
    """Write the rendered filter next to slurm.conf atomically (temp file + rename), with an
    mtime strictly newer (by >= 1 s) than the file it replaces: slurmctld 22.05 reloads the
    script only when its mtime is newer than the last load.

    A file there that slurmgpu did not write (no render-filter header) is refused (Refused,
    nothing written) unless `force`. Any file that is replaced by different content is first
    kept as `<name>.bak-<timestamp>` beside it."""
    if plan is None:
        plan = plan_install(site, conf_dir, kind)
    if plan.foreign and not force:
        raise Refused(
            "%s was not written by slurmgpu (its first line is not a `slurmgpu admin render-filter` "
            "header): it is this site's own filter. Nothing was installed; `slurmgpu admin install "
            "--dry-run` shows the diff, and --force replaces it (keeping a backup beside it)." % plan.path
        )
    conf = Path(conf_dir)
    target = Path(plan.path)
    text = plan.text
    now = time.time()
    replaced = target.exists()
    backup = None
    mtime = now
    if replaced:
        mtime = max(now, target.stat().st_mtime + 1.0)
        if plan.changes:
            backup = str(backup_file(target))
    fd, tmp = tempfile.mkstemp(prefix="." + target.name + ".", dir=str(target.parent))  # same directory: rename
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
    foreign = plan.foreign

    def done(slurm_conf_line: str, conf_has_line: bool) -> Installed:
        return Installed(
            path=str(target),
            kind=kind,
            slurm_conf_line=slurm_conf_line,
            conf_has_line=conf_has_line,
            replaced=replaced,
            backup=backup,
            foreign=foreign,
        )

    if kind == "spank":
        line = SPANK_PLUGSTACK_LINE % ("<plugindir>/slurmgpu_spank.so", target)
        return done(line, plugstack_loads_spank(conf, target))
    line = SLURM_CONF_LINES[kind]
    has = False
    conf_file = conf / "slurm.conf"
    if conf_file.is_file():
        key, _, value = line.partition("=")
        for raw in conf_file.read_text(encoding="utf-8", errors="replace").splitlines():
            k, eq, v = raw.split("#", 1)[0].strip().partition("=")
            names = [
                x.strip()[len(kind) + 1 :] if x.strip().startswith(kind + "/") else x.strip() for x in v.split(",")
            ]
            if eq and k.strip().lower() == key.lower() and value in names:
                has = True
    return done(line, has)


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
        if (
            len(words) >= 2
            and words[0] in ("required", "optional")
            and words[1].endswith("/slurmgpu_spank.so")
            and "policy=%s" % policy in words[2:]
            and "mode=off" not in words[2:]
        ):
            return True
    return False
