"""pytest plugin: the real-Slurm test cluster (contrib/testcluster/cluster.py).

Load it with ``-p tests.cluster_fixtures`` or from tests/conftest.py with
``from tests.cluster_fixtures import *  # noqa: F401,F403``.

Fixtures:

* ``slurm_cluster`` (session): a started ``TestCluster`` with the default
  layout (gpu: gpu[01-04] 8×h100; gpu4: g4n[01-02] 4×a100; pcie: pc[01-02]
  8×l40s), an accept-all job_submit.lua and a pass-through cli_filter.lua.
  Skipped when not root or Slurm is not installed, unless
  ``SLURMGPU_REQUIRE_CLUSTER=1``, which turns that into a failure.
  ``SLURMGPU_KEEP_CLUSTER=1`` keeps the cluster directory (logs) afterwards.
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
import sys
from pathlib import Path
from typing import Callable

import pytest

__all__ = [
    "testcluster",
    "slurm_cluster",
    "job_submit",
    "cli_filter",
    "ScriptSwap",
    "pytest_configure",
    "pytest_runtest_makereport",
    "pytest_terminal_summary",
    "_slurm_cluster_cleanup",
    "dgx_site_for",
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
_state: dict = {"cluster": None, "summary": None}


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "cluster: runs against the local Slurm test cluster "
        "(root + Debian slurm packages; see contrib/testcluster)")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    outcome = yield
    report = outcome.get_result()
    setattr(item, "rep_" + report.when, report)
    cluster = _state["cluster"]
    if (report.failed and cluster is not None
            and "slurm_cluster" in getattr(item, "fixturenames", ())
            and all(name != _LOG_SECTION for name, _ in report.sections)):
        report.sections.append((_LOG_SECTION, cluster.logs()))


def pytest_terminal_summary(terminalreporter) -> None:
    if _state["summary"]:
        terminalreporter.write_line(_state["summary"])


def _unavailable(reason: str) -> None:
    if os.environ.get(REQUIRE_ENV) == "1":
        pytest.fail(f"Slurm test cluster required ({REQUIRE_ENV}=1) but "
                    f"unavailable: {reason}", pytrace=False)
    pytest.skip(f"Slurm test cluster unavailable: {reason}")


@pytest.fixture(scope="session")
def slurm_cluster():
    """The session's TestCluster (see contrib/testcluster/cluster.py)."""
    reasons = testcluster.missing_prerequisites()
    if reasons:
        _unavailable("; ".join(reasons))
    cluster = testcluster.TestCluster(
        job_submit_lua=testcluster.ACCEPT_ALL_JOB_SUBMIT_LUA,
        cli_filter_lua=testcluster.PASSTHROUGH_CLI_FILTER_LUA,
        keep_dir=os.environ.get(KEEP_ENV) == "1")
    try:
        cluster.start()
    except testcluster.ClusterError as e:
        pytest.fail(f"Slurm test cluster did not start: {e}", pytrace=False)
    _state["cluster"] = cluster
    _state["summary"] = (f"slurm test cluster: {len(cluster.nodes)} nodes up "
                         f"in {cluster.startup_seconds:.1f} s ({cluster.dir})")
    if cluster.hosts_warning:
        _state["summary"] += f"; warning: {cluster.hosts_warning}"
    try:
        yield cluster
    finally:
        _state["cluster"] = None
        cluster.stop()


@pytest.fixture(autouse=True)
def _slurm_cluster_cleanup(request: pytest.FixtureRequest):
    """Cancel jobs a cluster test left behind, so the next test starts with
    idle nodes.  Does nothing (and starts nothing) for other tests."""
    yield
    cluster = _state["cluster"]
    if cluster is not None and "slurm_cluster" in request.fixturenames:
        cluster.cancel_all_jobs()


class ScriptSwap:
    """Install a Lua script for the duration of a test or a ``with`` block,
    then put the default back."""

    def __init__(self, install: Callable[..., None], default: str) -> None:
        self._install = install
        self._default = default
        self.active = False

    def __call__(self, lua_text: str, **kwargs) -> "ScriptSwap":
        """Install ``lua_text`` (kwargs go to the cluster's install method,
        e.g. ``verify=False`` for job_submit)."""
        self._install(lua_text, **kwargs)
        self.active = True
        return self

    def __enter__(self) -> "ScriptSwap":
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
    swap = ScriptSwap(slurm_cluster.install_job_submit,
                      testcluster.ACCEPT_ALL_JOB_SUBMIT_LUA)
    yield swap
    swap.restore()


@pytest.fixture
def cli_filter(slurm_cluster):
    """``cli_filter(lua_text)`` installs a cli_filter.lua; the pass-through
    default is restored after the test (or the ``with`` block)."""
    swap = ScriptSwap(slurm_cluster.install_cli_filter,
                      testcluster.PASSTHROUGH_CLI_FILTER_LUA)
    yield swap
    swap.restore()


def dgx_site_for(cluster) -> str:
    """A site config (YAML text) naming the cluster's default partition as DGX H100 nodes small
    enough for this machine: for tests that want the preset's fabric on real Slurm."""
    part = next(p for p in cluster.partitions if p.default)
    return (
        "extends: dgx-h100\n"
        "name: testcluster\n"
        "slurm_version: \"22.05\"\n"
        "default_partition: %s\n"
        "partitions:\n"
        "  %s: {node_type: dgx-h100, nodes: %d}\n"
        "node_types:\n"
        "  dgx-h100: {cpus: 2, memory_gb: 8}\n"
        "container: {runtime: none}\n" % (part.name, part.name, len(part.nodes))
    )
