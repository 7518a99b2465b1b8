"""pytest plugin: the real-Slurm test cluster (contrib/testcluster/cluster.py).

Load it with ``-p tests.cluster_fixtures`` or from tests/conftest.py with
``from tests.cluster_fixtures import *  # noqa: F401,F403``.

Fixtures:

* ``slurm_release`` (session, parametrised): each Slurm release the cluster
  tests run on (``testcluster.test_releases()``): the host's own, and the other
  Debian releases' in the chroots that contrib/testcluster/make-chroot.sh builds
  (22.05 on Debian 12 plus 24.11 in a trixie chroot and 26.05 in a forky one; on
  Debian 13 bookworm's 22.05 and forky's 26.05).  Test ids carry the release:
  ``test_x[slurm24.11]``.  A release that
  cannot run is skipped -- a failure under ``SLURMGPU_REQUIRE_CLUSTER=1``.
* ``slurm_cluster`` (session, one per release): a started ``TestCluster`` with the default
  layout (gpu: gpu[01-04] 8×h100; gpu4: g4n[01-02] 4×a100; pcie: pc[01-02]
  8×l40s), an accept-all job_submit.lua and a pass-through cli_filter.lua.
  Skipped when not root or Slurm is not installed, unless
  ``SLURMGPU_REQUIRE_CLUSTER=1``, which turns that into a failure.
  ``SLURMGPU_KEEP_CLUSTER=1`` keeps the cluster directory (logs) afterwards.
* ``accounting_cluster`` (session, native release only): like ``slurm_cluster`` plus
  slurmdbd and a private MariaDB (``sacct`` works, batch scripts and environments are
  stored); opt-in, since it adds a few seconds of start-up.  Its own job_submit.lua is
  swapped with ``accounting_job_submit``.  (The chroot release has no accounting: its chroot
  would need slurmdbd and MariaDB too, which make-chroot.sh does not install.)
* ``job_submit`` / ``cli_filter``: swap the Lua script for one test::

      def test_x(slurm_cluster, job_submit):
          job_submit(LUA)            # restored after the test
          with job_submit(OTHER):    # or restored at the end of the block
              ...

Jobs left by a test that uses ``slurm_cluster`` are cancelled after it, and
a failing test gets the cluster's log tails in its report.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
from pathlib import Path
from typing import Callable, List

import pytest

__all__ = [
    "testcluster",
    "slurm_release",
    "slurm_cluster",
    "accounting_cluster",
    "accounting_job_submit",
    "enforced_accounting_cluster",
    "new_cluster",
    "job_submit",
    "cli_filter",
    "ScriptSwap",
    "pytest_configure",
    "pytest_collection_modifyitems",
    "pytest_runtest_makereport",
    "pytest_terminal_summary",
    "_slurm_cluster_cleanup",
    "dgx_site_for",
    "job_python_has",
    "job_slurmgpu",
]

REQUIRE_ENV = "SLURMGPU_REQUIRE_CLUSTER"
KEEP_ENV = "SLURMGPU_KEEP_CLUSTER"
_LOG_SECTION = "slurm test cluster logs"
_CLUSTER_PY = Path(__file__).resolve().parents[1] / "contrib" / "testcluster" / "cluster.py"


def _load_testcluster():
    name = "slurmgpu_testcluster"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, _CLUSTER_PY)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


testcluster = _load_testcluster()
_state: dict = {"cluster": None, "accounting": None, "enforced": None, "summary": []}
RELEASES = testcluster.test_releases()
_REPO = Path(__file__).resolve().parents[1]


def _release_ids(releases) -> list:
    ids = []
    for r in releases:
        label = r.label if r.label not in ids else "%s-%s" % (r.label, r.name)
        ids.append(label)
    return ids


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "cluster: runs against the local Slurm test cluster (root + Debian slurm packages; see contrib/testcluster)",
    )


PER_RELEASE_ONLY_ENV = "SLURMGPU_TESTCLUSTER_PER_RELEASE_ONLY"


def pytest_collection_modifyitems(config: pytest.Config, items: List[pytest.Item]) -> None:
    """SLURMGPU_TESTCLUSTER_PER_RELEASE_ONLY=1: leave out the cluster tests that do not run per
    release (the accounting cluster's, the matrix check...), so that `make test`, which runs one
    pytest per release at once, runs those only once (in the native release's process)."""
    if os.environ.get(PER_RELEASE_ONLY_ENV) != "1":
        return
    keep, drop = [], []
    for item in items:
        once = item.get_closest_marker("cluster") is not None and "slurm_release" not in getattr(
            item, "fixturenames", ()
        )
        (drop if once else keep).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    outcome = yield
    report = outcome.get_result()
    setattr(item, "rep_" + report.when, report)
    names = getattr(item, "fixturenames", ())
    cluster = _state["cluster"] if "slurm_cluster" in names else _state["accounting"]
    if (
        report.failed
        and cluster is not None
        and ("slurm_cluster" in names or "accounting_cluster" in names)
        and all(name != _LOG_SECTION for name, _ in report.sections)
    ):
        report.sections.append((_LOG_SECTION, cluster.logs()))


def pytest_terminal_summary(terminalreporter) -> None:
    for line in _state["summary"]:
        terminalreporter.write_line(line)


def _unavailable(reason: str) -> None:
    if os.environ.get(REQUIRE_ENV) == "1":
        pytest.fail(f"Slurm test cluster required ({REQUIRE_ENV}=1) but unavailable: {reason}", pytrace=False)
    pytest.skip(f"Slurm test cluster unavailable: {reason}")


@pytest.fixture(scope="session", params=RELEASES, ids=_release_ids(RELEASES))
def slurm_release(request):
    """One Slurm release the cluster tests run on (a ``testcluster.Release``)."""
    release = request.param
    reasons = release.missing()
    if reasons:
        _unavailable("Slurm %s (%s): %s" % (release.major or "?", release.name, "; ".join(reasons)))
    return release


@pytest.fixture(scope="session")
def new_cluster(slurm_release, tmp_path_factory):
    """``new_cluster(partitions, **kwargs)``: a (not yet started) TestCluster of
    this test's Slurm release that sees the repository (read-only) and pytest's
    temporary directories (read-write) at their own paths."""
    basetemp = str(tmp_path_factory.getbasetemp())

    def make(partitions=None, **kwargs):
        kwargs.setdefault("release", slurm_release)
        kwargs.setdefault("shared_paths", (str(_REPO),))
        kwargs.setdefault("writable_paths", (basetemp,))
        return testcluster.TestCluster(partitions, **kwargs)

    return make


@pytest.fixture(scope="session")
def slurm_cluster(slurm_release, new_cluster):
    """The session's TestCluster for one release (see contrib/testcluster/cluster.py)."""
    cluster = new_cluster(
        job_submit_lua=testcluster.ACCEPT_ALL_JOB_SUBMIT_LUA,
        cli_filter_lua=testcluster.PASSTHROUGH_CLI_FILTER_LUA,
        keep_dir=os.environ.get(KEEP_ENV) == "1",
    )
    try:
        cluster.start()
    except testcluster.ClusterError as e:
        pytest.fail(f"Slurm {slurm_release.major} test cluster did not start: {e}", pytrace=False)
    _state["cluster"] = cluster
    summary = (
        f"slurm test cluster ({slurm_release.label}, {slurm_release.name}): "
        f"{len(cluster.nodes)} nodes up in {cluster.startup_seconds:.1f} s ({cluster.dir})"
    )
    if cluster.hosts_warning:
        summary += f"; warning: {cluster.hosts_warning}"
    _state["summary"].append(summary)
    try:
        yield cluster
    finally:
        _state["cluster"] = None
        cluster_dir = cluster.dir
        cluster.stop()
        problems = cluster.host_problems(cluster_dir)
        assert not problems, "the Slurm %s test cluster harmed the host: %s" % (
            slurm_release.major,
            "; ".join(problems),
        )


def _new_accounting_cluster(**extra):
    """An accounting TestCluster of the native release, not started (unavailable: fail or skip)."""
    release = testcluster.native_release()
    reasons = release.missing() + testcluster.accounting_missing(release)
    if reasons:
        _unavailable("accounting cluster: " + "; ".join(reasons))
    cluster = testcluster.TestCluster(
        job_submit_lua=testcluster.ACCEPT_ALL_JOB_SUBMIT_LUA,
        keep_dir=os.environ.get(KEEP_ENV) == "1",
        release=release,
        accounting=True,
        **extra,
    )
    return release, cluster


@pytest.fixture(scope="session")
def accounting_cluster(tmp_path_factory):
    """A TestCluster of the native release with slurmdbd and MariaDB (see cluster.py,
    "Accounting"), an accept-all job_submit.lua; one per session, started on first use."""
    release, cluster = _new_accounting_cluster()
    try:
        cluster.start()
    except testcluster.ClusterError as e:
        pytest.fail(f"accounting test cluster did not start: {e}", pytrace=False)
    _state["accounting"] = cluster
    _state["summary"].append(
        f"slurm accounting cluster ({release.label}): up in {cluster.startup_seconds:.1f} s, "
        f"of which {cluster.accounting_seconds:.1f} s MariaDB + slurmdbd + sacctmgr ({cluster.dir})"
    )
    try:
        yield cluster
    finally:
        _state["accounting"] = None
        cluster.stop()


ENFORCE_LINE = "AccountingStorageEnforce=associations,qos"


@pytest.fixture(scope="session")
def enforced_accounting_cluster():
    """Like ``accounting_cluster``, with ``AccountingStorageEnforce=associations,qos``: Slurm
    refuses an account or QOS its user may not use. It has the account ``benchmarks`` and
    the QOS ``admin``, which root may use and nobody may not (for the exemption tests)."""
    _, cluster = _new_accounting_cluster(extra_config=ENFORCE_LINE)
    try:
        cluster.start()
        for cmd in (
            ["sacctmgr", "-i", "add", "qos", "admin"],
            ["sacctmgr", "-i", "add", "account", "benchmarks", "Cluster=slurmgpu-test", "Description=exempt"],
            ["sacctmgr", "-i", "add", "user", "root", "Account=benchmarks", "Cluster=slurmgpu-test"],
            ["sacctmgr", "-i", "modify", "user", "root", "set", "QOS+=admin"],
        ):
            cluster.run(cmd, timeout=30, check=True)
    except testcluster.ClusterError as e:
        cluster.stop()
        pytest.fail(f"enforced accounting test cluster did not start: {e}", pytrace=False)
    _state["enforced"] = cluster
    try:
        yield cluster
    finally:
        _state["enforced"] = None
        cluster.stop()


@pytest.fixture
def accounting_job_submit(accounting_cluster):
    """Like ``job_submit``, for the accounting cluster."""
    swap = ScriptSwap(accounting_cluster.install_job_submit, testcluster.ACCEPT_ALL_JOB_SUBMIT_LUA)
    yield swap
    swap.restore()


@pytest.fixture(autouse=True)
def _slurm_cluster_cleanup(request: pytest.FixtureRequest):
    """Cancel jobs a cluster test left behind, so the next test starts with
    idle nodes.  Does nothing (and starts nothing) for other tests."""
    yield
    for key, name in (
        ("cluster", "slurm_cluster"),
        ("accounting", "accounting_cluster"),
        ("enforced", "enforced_accounting_cluster"),
    ):
        cluster = _state[key]
        if cluster is not None and name in request.fixturenames:
            cluster.cancel_all_jobs()


class ScriptSwap:
    """Install a Lua script for the duration of a test or a ``with`` block,
    then put the default back."""

    def __init__(self, install: Callable[..., None], default: str) -> None:
        self._install = install
        self._default = default
        self.active = False

    def __call__(self, lua_text: str, **kwargs) -> ScriptSwap:
        """Install ``lua_text`` (kwargs go to the cluster's install method,
        e.g. ``verify=False`` for job_submit)."""
        self._install(lua_text, **kwargs)
        self.active = True
        return self

    def __enter__(self) -> ScriptSwap:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.restore()

    def restore(self) -> None:
        if self.active:
            self._install(self._default)
            self.active = False


@pytest.fixture
def job_submit(slurm_cluster):
    """``job_submit(lua_text, verify=True)`` installs a job_submit.lua; the
    accept-all default is restored after the test (or the ``with`` block)."""
    swap = ScriptSwap(slurm_cluster.install_job_submit, testcluster.ACCEPT_ALL_JOB_SUBMIT_LUA)
    yield swap
    swap.restore()


@pytest.fixture
def cli_filter(slurm_cluster):
    """``cli_filter(lua_text)`` installs a cli_filter.lua; the pass-through
    default is restored after the test (or the ``with`` block)."""
    swap = ScriptSwap(slurm_cluster.install_cli_filter, testcluster.PASSTHROUGH_CLI_FILTER_LUA)
    yield swap
    swap.restore()


def dgx_site_for(cluster) -> str:
    """A site config (YAML text) naming the cluster's default partition as DGX H100 nodes small
    enough for this machine: for tests that want the preset's fabric on real Slurm."""
    part = next(p for p in cluster.partitions if p.default)
    return (
        "extends: dgx-h100\n"
        "name: testcluster\n"
        'slurm_version: "%s"\n'
        "default_partition: %s\n"
        "partitions:\n"
        "  %s: {node_type: dgx-h100, nodes: %d}\n"
        "node_types:\n"
        "  dgx-h100: {cpus: 2, memory_gb: 8}\n"
        "container: {runtime: none}\n" % (cluster.release.major, part.name, part.name, len(part.nodes))
    )


def job_slurmgpu(cluster) -> List[str]:
    """The slurmgpu command line (argv) the cluster's jobs can run: the installed one (or this
    interpreter's module) natively; inside a chroot release this checkout under the release's own
    Python (the chroot sees the checkout at its own path)."""
    if cluster.in_chroot:
        return ["env", "PYTHONPATH=%s" % _REPO, cluster.python, "-m", "slurmgpu.cli"]
    found = shutil.which("slurmgpu")
    return [found] if found else [sys.executable, "-m", "slurmgpu.cli"]


def job_python_has(cluster, module: str) -> bool:
    """Whether the Python that the cluster's jobs run (``cluster.python``, inside the chroot
    for a chroot release) can import ``module``."""
    proc = cluster.run([cluster.python, "-c", "import %s" % module], timeout=120)
    return proc.returncode == 0
