"""pytest adapter: options, markers, the `tcpnet` fixture, skip/fail policy for missing capabilities.

Thin on purpose: everything here delegates to objects that work without pytest.

Free where unused: a session that requests no ``tcpnet`` fixture, carries no ``tcpnet_needs``
marker and passes no ``--tcpnet-*`` option imports nothing heavy (no pyroute2), probes
nothing, sweeps nothing and prints no ``tcpnet:`` line. The machine description is printed in
the header when a ``--tcpnet-*`` option is on the command line, otherwise after collection
when a collected test uses tcpnet; the sweep of dead sessions' namespaces runs when the first
``tcpnet`` fixture of a process is set up (tests/test_plugin_cost.py checks all of it).
"""

import os

import pytest

from .errors import MissingCapability

_STRICT_CHOICES = ("off", "undeclared", "all")
_skipped_for_capability = pytest.StashKey[bool]()
_machine_described = pytest.StashKey[bool]()


def pytest_addoption(parser):
    group = parser.getgroup("tcpnet", "TCP labs in network namespaces (pytest-tcpnet)")
    group.addoption(
        "--tcpnet-strict", dest="tcpnet_strict", choices=_STRICT_CHOICES,
        default=os.environ.get("TCPNET_STRICT", "off"),
        help="turn 'skipped: capability missing' into a failure: 'all' for every test (use where the "
             "capability must be present, e.g. in the VM run of CI), 'undeclared' only for tests that "
             "hit a missing capability without declaring it with @pytest.mark.tcpnet_needs "
             "(default: $TCPNET_STRICT or off)")
    from . import vm
    vm.add_options(group)
    _add_report_options(group)
    group.addoption(
        "--tcpnet-host-guard", dest="tcpnet_host_guard", action="store_true",
        default=os.environ.get("TCPNET_HOST_GUARD") == "1",
        help="snapshot the host namespace's links, addresses, routes (all tables), rules, qdiscs and net "
             "sysctls at session start and fail the session, naming each difference, if any changed by its "
             "end (env TCPNET_HOST_GUARD=1)")
    from .rootless import MODE_ENV, MODES
    group.addoption(
        "--tcpnet-rootless", dest="tcpnet_rootless", choices=MODES, default=os.environ.get(MODE_ENV) or "auto",
        help="without root, re-run the session in a user namespace of its own so labs still build: 'auto' "
             "(default; where unprivileged user namespaces are allowed), 'on' (fail if they are not), 'off' "
             "(lab tests skip). Env: TCPNET_ROOTLESS")


def _markable_needs():
    """{need: what it is} for every need with a needs_<need> marker; kernel versions are not identifiers."""
    from .model import KNOWN_CONGESTION_CONTROLS
    from .requirements import QDISC_NEEDS, TOOL_NEEDS
    kinds = {"privilege": "CAP_NET_ADMIN and CAP_SYS_ADMIN", "root": "same as privilege"}
    kinds.update({q: f"qdisc sch_{q}" for q in QDISC_NEEDS})
    kinds.update({cc: f"congestion control tcp_{cc}" for cc in KNOWN_CONGESTION_CONTROLS})
    kinds.update({tool: f"tool on PATH, from {package}" for tool, package in TOOL_NEEDS.items()})
    return dict(sorted(kinds.items()))


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "tcpnet_needs(*needs): the test needs these from the machine: 'privilege', a qdisc "
        "('netem', 'htb', 'tbf', ...), a congestion control ('bbr', ...), a tool ('tshark', 'iperf3', 'curl', "
        "...) or a kernel version ('kernel>=6.6'; also <=, ==, >, <). Missing -> skipped with the reason (failed under "
        "--tcpnet-strict=all). Each need N also marks the test needs_N, so `-m needs_netem` selects what "
        "must run under a netem kernel; kernel versions are not identifiers and get no needs_ marker.")
    # Every need a marker can name gets its needs_ marker, so --strict-markers accepts them all.
    for need, kind in _markable_needs().items():
        config.addinivalue_line("markers", f"needs_{need}: added automatically from tcpnet_needs('{need}') ({kind})")
    config.addinivalue_line("markers", "tcpnet_vm_boot: boots a real VM (slow: about a minute each)")
    config.pluginmanager.register(_ReportPlugin(config), "tcpnet-report")
    config.pluginmanager.register(_SigtermTeardown(), "tcpnet-sigterm")
    if config.getoption("tcpnet_host_guard") and not hasattr(config, "workerinput"):
        config.pluginmanager.register(_HostGuard(), "tcpnet-host-guard")  # xdist: the controller guards
    from . import vm
    vm.use_host_for_analysis()  # in a --tcpnet-vm guest: tshark and plots run on the host


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config):
    from . import rootless, vm
    code = vm.maybe_run_in_vm(config)
    return code if code is not None else rootless.maybe_run_rootless(config)


class _SigtermTeardown:
    """SIGTERM ends the session the way Ctrl-C does (KeyboardInterrupt), so fixtures tear their labs down.

    Installed only where SIGTERM still has its default action (whoever set another one keeps it);
    repeated SIGTERMs are ignored while the teardown runs; the default comes back at unconfigure.
    """

    def __init__(self):
        self.installed = False
        self.received = False
        self.pid = os.getpid()

    def pytest_configure(self, config):
        import signal
        import threading

        if threading.current_thread() is threading.main_thread() and \
                signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
            signal.signal(signal.SIGTERM, self._interrupt)
            self.installed = True

    def _interrupt(self, signum, frame):
        if os.getpid() != self.pid:
            # A forked helper (pyroute2 forks to create namespaces) inherits this handler: it must die
            # as SIGTERM says, not unwind a copy of the session's stack.
            import signal
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return
        if self.received:
            return
        self.received = True
        raise KeyboardInterrupt("SIGTERM: tearing the labs down")

    def pytest_unconfigure(self, config):
        import signal

        if self.installed:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            self.installed = False


class _HostGuard:
    """--tcpnet-host-guard: the host namespace at the end of the session must equal its start."""

    def __init__(self):
        self.before = None
        self.changes = []

    def pytest_sessionstart(self, session):
        from . import hostguard
        self.before = hostguard.snapshot()

    @pytest.hookimpl(trylast=True)  # after the session-scoped fixtures' teardown
    def pytest_sessionfinish(self, session):
        from . import hostguard
        if self.before is None:
            return
        self.changes = hostguard.differences(self.before, hostguard.snapshot())
        if self.changes:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def pytest_terminal_summary(self, terminalreporter):
        if self.changes:
            terminalreporter.section("tcpnet host guard: the host namespace changed", red=True, bold=True)
            for line in self.changes:
                terminalreporter.line(line)
        elif self.before is not None:
            terminalreporter.line("tcpnet host guard: host namespace unchanged")


def _tcpnet_option_given(config):
    """True when the command line names a --tcpnet-* option: the user asked for tcpnet."""
    return any(str(arg).startswith("--tcpnet") for arg in config.invocation_params.args)


def _uses_tcpnet(item):
    """True when a collected test requests the tcpnet fixture or declares tcpnet needs."""
    return "tcpnet" in getattr(item, "fixturenames", ()) or item.get_closest_marker("tcpnet_needs") is not None


def _describe_machine(config):
    from .requirements import describe_machine
    config.stash[_machine_described] = True
    return describe_machine()


def pytest_report_header(config):
    # Probing imports pyroute2 and asks the kernel: only for sessions that asked for tcpnet.
    if _tcpnet_option_given(config):
        return _describe_machine(config)
    return None


def pytest_report_collectionfinish(config, items):
    # Without an option, describe the machine once collection shows a test that uses tcpnet
    # (under xdist the controller collects nothing: pass a --tcpnet-* option to get the line).
    if config.stash.get(_machine_described, False) or config.option.verbose < 0 or config.option.no_header:
        return None
    if any(_uses_tcpnet(item) for item in items):
        return _describe_machine(config)
    return None


@pytest.fixture(scope="session")
def _tcpnet_sweep(request):
    """Remove what killed sessions left behind (their owner pid is dead), once per process, before the first lab."""
    from . import netlink
    if not netlink.has_net_admin():
        return
    removed = netlink.sweep_stale_namespaces()
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    if removed and reporter is not None:
        reporter.ensure_newline()
        reporter.write_line(f"tcpnet: removed {len(removed)} namespace(s) left by dead sessions")


def pytest_collection_modifyitems(config, items):
    markable = _markable_needs()
    for item in items:
        for mark in item.iter_markers("tcpnet_needs"):
            for need in mark.args:
                # Only needs with a registered marker: an unknown one is reported by check_need at setup.
                if isinstance(need, str) and need in markable:
                    item.add_marker(f"needs_{need}")


def _strictness(config):
    return config.getoption("tcpnet_strict")


def _declared_needs(item):
    return {need for mark in item.iter_markers("tcpnet_needs") for need in mark.args}


def _missing(item, exc, declared):
    """Skip, or fail when the strictness option says this missing capability must not be skipped."""
    strict = _strictness(item.config)
    if strict == "all" or (strict == "undeclared" and not declared):
        pytest.fail(f"capability missing (--tcpnet-strict={strict}): {exc}", pytrace=False)
    hint = "" if declared else f" (declare it: @pytest.mark.tcpnet_needs({exc.capability!r}))"
    item.stash[_skipped_for_capability] = True
    pytest.skip(f"{exc}{hint}")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    # Point a capability skip at the test, not at this file where pytest.skip was raised.
    if report.skipped and item.stash.get(_skipped_for_capability, False) and isinstance(report.longrepr, tuple):
        path, line = item.reportinfo()[:2]
        report.longrepr = (str(path), (line or 0) + 1, report.longrepr[2])
    return report


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    from .requirements import check_needs
    needs = _declared_needs(item)
    try:
        check_needs(sorted(needs))
    except MissingCapability as exc:
        if _strictness(item.config) == "all":
            _missing(item, exc, declared=True)
        # A skip mark (rather than raising) lets pytest's skipping plugin, which runs after this
        # hook, report the test's own location instead of this file's.
        item.add_marker(pytest.mark.skip(reason=str(exc)))


@pytest.hookimpl(wrapper=True)
def pytest_pyfunc_call(pyfuncitem):
    try:
        return (yield)
    except MissingCapability as exc:
        _missing(pyfuncitem, exc, declared=exc.capability in _declared_needs(pyfuncitem))


@pytest.hookimpl(wrapper=True)
def pytest_fixture_setup(fixturedef, request):
    try:
        return (yield)
    except MissingCapability as exc:
        item = request.node
        _missing(item, exc, declared=exc.capability in _declared_needs(item))


@pytest.fixture
def tcpnet(request, _tcpnet_sweep):
    """A Lab for this test (pytest-tcpnet): ``tcpnet.pair(link=, client=, server=)`` builds paths; all torn down after.
    Each pair is client - router - server in network namespaces, the path shaped on the router
    (``Link(rate=, rtt=, loss=, ...)``), the endpoints set by ``Host(sysctls=, cc=)``;
    ``pair.transfer(...)``, ``pair.iperf3(...)``, ``pair.http_download(...)`` run and measure a
    workload. Needs root (CAP_NET_ADMIN and CAP_SYS_ADMIN) or unprivileged user namespaces, else
    the test is skipped with the reason; declare other needs with
    ``@pytest.mark.tcpnet_needs("netem", ...)`` (see ``pytest --markers``).
    ``tcpnet.artifact_dir`` is this test's artifact directory (kept per --tcpnet-keep); every
    result the lab produced reaches the session summary, JUnit properties and results file.
    """
    from .lab import Lab
    reporting = request.config.pluginmanager.get_plugin("tcpnet-report")
    lab = Lab(sweep=False, artifact_dir=reporting.start_test(request.node))
    request.node.stash[_lab_key] = lab
    try:
        yield lab
    finally:
        try:
            lab.close()
        finally:
            reporting.finish_test(request.node, lab)


# --- Artifacts and reports (issue 7): options and hooks; the logic lives in report/ ---

_lab_key = pytest.StashKey[object]()
_outcomes_key = pytest.StashKey[dict]()
_flows_key = pytest.StashKey[list]()
_kept_key = pytest.StashKey[str]()


def _add_report_options(group):
    from .report import KEEP_CHOICES
    group.addoption(
        "--tcpnet-artifacts", dest="tcpnet_artifacts", metavar="DIR", default=None,
        help="where each test's pcaps, plots and flows.json go, one directory per test "
             "(default: tcpnet-artifacts/ under the rootdir)")
    group.addoption(
        "--tcpnet-keep", dest="tcpnet_keep", choices=KEEP_CHOICES, default="failed",
        help="which tests' artifact directories survive the test: failed (default), all or none")
    group.addoption(
        "--tcpnet-results", dest="tcpnet_results", metavar="PATH", default=None,
        help="write every measured flow with its full conditions as a JSON line to PATH (merge several "
             "with `python -m pytest_tcpnet.report merge`)")
    group.addoption(
        "--tcpnet-results-label", dest="tcpnet_results_label", metavar="LABEL", default=None,
        help="a label stored with every row of --tcpnet-results (e.g. 'vm-6.1'), for `merge --by label`")


class _ReportPlugin:
    """Per-test artifact directories, the session summary, JUnit properties and the results file.

    Workers (xdist) build each test's flow rows and send them to the controller on the teardown
    report (``report.tcpnet_flows``; reports travel whole); only the controller (or a run without
    xdist) prints the summary and writes the results file, so several workers never share a file.
    """

    def __init__(self, config):
        from .report import ArtifactStore, ResultsWriter
        self.config = config
        root = config.getoption("tcpnet_artifacts")
        root = config.rootpath / "tcpnet-artifacts" if root is None else config.invocation_params.dir / root
        self.artifacts = ArtifactStore(root, config.getoption("tcpnet_keep"))
        self.is_worker = hasattr(config, "workerinput")
        self.flows = []
        self.kept = []
        self.writer = None
        path = config.getoption("tcpnet_results")
        if path and not self.is_worker:
            try:
                self.writer = ResultsWriter(config.invocation_params.dir / path,
                                            label=config.getoption("tcpnet_results_label"))
            except (OSError, ValueError) as exc:
                raise pytest.UsageError(f"--tcpnet-results={path}: {exc}") from None

    def start_test(self, item):
        """A fresh artifact directory for the test."""
        return self.artifacts.directory_for(item.nodeid)

    def finish_test(self, item, lab):
        """Build the test's rows (summary, JUnit properties), then keep or remove its artifact directory."""
        from .report import flow_rows, junit_properties
        from .report.artifacts import write_flows
        outcomes = item.stash.get(_outcomes_key, {})
        failed = "failed" in outcomes.values()
        rows = flow_rows(lab.results, test=item.nodeid,
                         outcome="failed" if failed else outcomes.get("call", "error"))
        item.stash[_flows_key] = rows
        item.user_properties.extend(junit_properties(rows))
        if lab.artifact_dir is not None:
            if rows and self.artifacts.should_keep(failed):
                write_flows(lab.artifact_dir, rows)
            if self.artifacts.finish(lab.artifact_dir, failed=failed):
                item.stash[_kept_key] = str(lab.artifact_dir)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item, call):
        report = yield
        item.stash.setdefault(_outcomes_key, {})[report.when] = report.outcome
        lab = item.stash.get(_lab_key, None)
        if report.when == "call" and report.failed and lab is not None and lab.artifact_dir is not None \
                and self.artifacts.should_keep(True):
            self._explain_failure(item, report, lab)
        if report.when == "teardown":  # extra report attributes travel to the xdist controller with the report
            if item.stash.get(_flows_key, None):
                report.tcpnet_flows = item.stash[_flows_key]
            if item.stash.get(_kept_key, None):
                report.tcpnet_artifacts = item.stash[_kept_key]
        return report

    def _explain_failure(self, item, report, lab):
        """Write the failed test's plots and flows into its directory and name them in the failure report."""
        from .report.artifacts import explain_failure
        section, images = explain_failure(lab.results, lab.artifact_dir, test=item.nodeid, keep=self.artifacts.keep)
        if section:
            report.sections.append(("tcpnet artifacts", section))
        if images and item.config.pluginmanager.hasplugin("html"):
            import base64

            from pytest_html import extras
            report.extras = list(getattr(report, "extras", [])) + [
                extras.image(base64.b64encode(p.read_bytes()).decode(), name=p.name,
                             mime_type="image/svg+xml" if p.suffix == ".svg" else f"image/{p.suffix[1:]}",
                             extension=p.suffix[1:]) for p in images]

    def pytest_runtest_logreport(self, report):
        if self.is_worker or report.when != "teardown":
            return
        if getattr(report, "tcpnet_artifacts", None):
            self.kept.append(report.tcpnet_artifacts)
        rows = getattr(report, "tcpnet_flows", None)
        if not rows:
            return
        self.flows.extend(rows)
        if self.writer is not None:
            self.writer.write(rows)

    def pytest_terminal_summary(self, terminalreporter):
        from .report import summary_table
        if self.flows:
            rows = sorted(self.flows, key=lambda r: (r["test"], r["flow"]))
            terminalreporter.write_sep("=", f"tcpnet: {len(rows)} measured flow(s)")
            terminalreporter.write_line(summary_table(rows))
        if self.writer is not None:
            terminalreporter.write_line(f"tcpnet: {self.writer.count} flow(s) written to {self.writer.path}")
        if self.kept:
            terminalreporter.write_line(f"tcpnet: artifacts kept (--tcpnet-keep={self.artifacts.keep}):")
            for path in sorted(self.kept):
                terminalreporter.write_line(f"  {path}")

    def pytest_unconfigure(self, config):
        if self.writer is not None:
            self.writer.close()
