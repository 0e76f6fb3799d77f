"""The installed plugin costs nothing where unused: no heavy imports, no probes, no sweep, no header line.

Each test runs a real pytest session in a subprocess on a small project whose conftest writes
the names in sys.modules at the end of the session, with and without ``-p no:tcpnet``.
"""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

# Written at the very end of the session, so everything any hook imported is in it.
DUMP_MODULES = textwrap.dedent("""
    import json, os, sys
    def pytest_unconfigure(config):
        process = os.environ.get("PYTEST_XDIST_WORKER", "main")
        with open(f"modules-{process}.json", "w") as out:
            json.dump(sorted(sys.modules), out)
""")

UNRELATED_TEST = "def test_arithmetic():\n    assert 1 + 1 == 2\n"

TCPNET_TEST = textwrap.dedent("""
    def test_uses_a_lab(tcpnet):
        assert tcpnet is not None
""")

# What the plugin itself may import in an unrelated session: the package's pure, stdlib-only parts.
LIGHT_MODULES = {
    "pytest_tcpnet",
    "pytest_tcpnet.plugin",
    "pytest_tcpnet.session",
    "pytest_tcpnet.errors",
    "pytest_tcpnet.requirements",
    "pytest_tcpnet.privilege",
    "pytest_tcpnet.rootless",
    "pytest_tcpnet.guest",
    "pytest_tcpnet.model",
    "pytest_tcpnet.model.kernel",
    "pytest_tcpnet.model.specs",
    "pytest_tcpnet.model.app",
    "pytest_tcpnet.model.tcp",
    "pytest_tcpnet.model.units",
    "pytest_tcpnet.model.window",
    "pytest_tcpnet.model.predict",
    "pytest_tcpnet.model.queues",
    "pytest_tcpnet.model.schedule",
    "pytest_tcpnet.model.validation",
    "pytest_tcpnet.model.netem",
    "pytest_tcpnet.model.stats",
    "pytest_tcpnet.hostload",
    "pytest_tcpnet.records",
    "pytest_tcpnet.assertions",
    "pytest_tcpnet.assertions.latency",
    "pytest_tcpnet.assertions.shares",
    "pytest_tcpnet.assertions.schedule",
    "pytest_tcpnet.assertions.throughput",
    "pytest_tcpnet.assertions.window",
    "pytest_tcpnet.assertions.events",
    "pytest_tcpnet.assertions.verdicts",
    "pytest_tcpnet.report",
    "pytest_tcpnet.report.artifacts",
    "pytest_tcpnet.report.merge",
    "pytest_tcpnet.report.results_file",
    "pytest_tcpnet.report.rows",
    "pytest_tcpnet.report.table",
    "pytest_tcpnet.vm",
    "pytest_tcpnet.vm.options",
}
# Never imported by the plugin in an unrelated session: netlink (pyroute2), labs and workloads, optional
# heavy libraries (hypothesis may be there anyway: its own pytest plugin imports it).
HEAVY_PREFIXES = (
    "pyroute2",
    "pytest_tcpnet.netlink",
    "pytest_tcpnet.lab",
    "pytest_tcpnet.workload",
    "pytest_tcpnet.measure",
    "pytest_tcpnet.capture",
    "pytest_tcpnet.analysis.plots",
    "pytest_tcpnet.vm.runner",
    "hypothesis",
    "matplotlib",
    "numpy",
    "iperf3",
)


def run_session(project, *args):
    """Run pytest in `project` with this worktree's pytest_tcpnet first on the path.

    Returns the output and the modules any of the session's processes (xdist workers too) had imported.
    """
    for old in project.glob("modules-*.json"):
        old.unlink()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    env.pop("TCPNET_STRICT", None)
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    dumps = list(project.glob("modules-*.json"))
    assert dumps, "the conftest wrote no module list"
    return out.stdout, set().union(*(json.loads(dump.read_text()) for dump in dumps))


@pytest.fixture
def unrelated_project(tmp_path):
    (tmp_path / "conftest.py").write_text(DUMP_MODULES)
    (tmp_path / "test_unrelated.py").write_text(UNRELATED_TEST)
    return tmp_path


def heavy(modules):
    return sorted(m for m in modules if m.startswith(HEAVY_PREFIXES))


def test_unrelated_session_imports_only_the_light_part(unrelated_project):
    _, without = run_session(unrelated_project, "-p", "no:tcpnet")
    output, with_plugin = run_session(unrelated_project)
    assert "pytest_tcpnet.plugin" not in without and "pytest_tcpnet.plugin" in with_plugin
    added = with_plugin - without
    third_party = {m for m in added if m.split(".")[0] not in sys.stdlib_module_names}
    assert third_party <= LIGHT_MODULES, sorted(third_party - LIGHT_MODULES)
    assert heavy(added) == [] and "pyroute2" not in with_plugin
    assert "tcpnet:" not in output  # no machine description: nothing asked for it


def test_unrelated_session_under_verbose_and_strict_markers_stays_light(unrelated_project):
    _, without = run_session(unrelated_project, "-v", "--strict-markers", "-n", "2", "-p", "no:tcpnet")
    output, modules = run_session(unrelated_project, "-v", "--strict-markers", "-n", "2")
    assert heavy(modules - without) == [] and "pyroute2" not in modules
    assert "tcpnet:" not in output


def test_a_session_that_uses_the_fixture_describes_the_machine(unrelated_project):
    # The positive control: the same measurement does see netlink once a test uses tcpnet.
    (unrelated_project / "test_lab.py").write_text(TCPNET_TEST)
    output, modules = run_session(unrelated_project, "--collect-only")
    assert f"tcpnet: kernel {os.uname().release}" in output
    assert "pyroute2" in modules and "pytest_tcpnet.netlink" in modules


def test_a_tcpnet_option_describes_the_machine_in_the_header(unrelated_project):
    output, modules = run_session(unrelated_project, "--tcpnet-strict=off")
    header = output.split("collected")[0]
    assert f"tcpnet: kernel {os.uname().release}" in header
    assert "pyroute2" in modules


def test_quiet_sessions_print_no_description(unrelated_project):
    (unrelated_project / "test_lab.py").write_text(TCPNET_TEST)
    output, _ = run_session(unrelated_project, "-q", "--collect-only")
    assert "tcpnet:" not in output
