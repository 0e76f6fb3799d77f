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

from . import session
from .errors import MissingCapability

_STRICT_CHOICES = ("off", "undeclared", "all")
_skipped_for_capability = pytest.StashKey[bool]()
_machine_described = pytest.StashKey[bool]()


def pytest_addoption(parser, pluginmanager):
    # Now, as plugins load: before pytest-split registers its splitting plugin (session.CollectionWatch says why).
    pluginmanager.register(session.CollectionWatch(), "tcpnet-collected")
    group = parser.getgroup("tcpnet", "TCP labs in network namespaces (pytest-tcpnet)")
    group.addoption(
        "--tcpnet-strict",
        dest="tcpnet_strict",
        choices=_STRICT_CHOICES,
        default=os.environ.get("TCPNET_STRICT", "off"),
        help="turn 'skipped: capability missing' into a failure: 'all' for every test (use where the "
        "capability must be present, e.g. in the VM run of CI), 'undeclared' only for tests that "
        "hit a missing capability without declaring it with @pytest.mark.tcpnet_needs "
        "(default: $TCPNET_STRICT or off)",
    )
    from . import vm

    vm.add_options(group)
    session.add_report_options(group)
    group.addoption(
        "--tcpnet-host-guard",
        dest="tcpnet_host_guard",
        action="store_true",
        default=os.environ.get("TCPNET_HOST_GUARD") == "1",
        help="snapshot the host namespace's links, addresses, routes (all tables), rules, qdiscs and net "
        "sysctls at session start and fail the session, naming each difference, if any changed by its "
        "end (env TCPNET_HOST_GUARD=1)",
    )
    from .rootless import MODE_ENV, MODES

    group.addoption(
        "--tcpnet-rootless",
        dest="tcpnet_rootless",
        choices=MODES,
        default=os.environ.get(MODE_ENV) or "auto",
        help="without root, re-run the session in a user namespace of its own so labs still build: 'auto' "
        "(default; where unprivileged user namespaces are allowed), 'on' (fail if they are not), 'off' "
        "(lab tests skip). Env: TCPNET_ROOTLESS",
    )


def _markable_needs():
    """{need: what it is} for every need with a needs_<need> marker; kernel versions are not identifiers."""
    from .model import KNOWN_CONGESTION_CONTROLS
    from .requirements import ACTION_NEEDS, MACHINE_NEEDS, QDISC_NEEDS, TOOL_NEEDS

    kinds = {"privilege": "CAP_NET_ADMIN and CAP_SYS_ADMIN", "root": "same as privilege", **MACHINE_NEEDS}
    kinds.update({q: f"qdisc sch_{q}" for q in QDISC_NEEDS})
    kinds.update({a: f"tc action act_{a}" for a in ACTION_NEEDS})
    kinds.update({cc: f"congestion control tcp_{cc}" for cc in KNOWN_CONGESTION_CONTROLS})
    kinds.update({tool: f"tool on PATH, from {package}" for tool, package in TOOL_NEEDS.items()})
    return dict(sorted(kinds.items()))


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "tcpnet_needs(*needs): the test needs these from the machine: 'privilege', a qdisc "
        "('netem', 'htb', 'tbf', ...), a congestion control ('bbr', ...), a tool ('tshark', 'iperf3', 'curl', "
        "...) or a kernel version ('kernel>=6.6'; also <=, ==, >, <). Missing -> skipped with the reason (failed under "
        "--tcpnet-strict=all). Each need N also marks the test needs_N, so `-m needs_netem` selects what "
        "must run under a netem kernel; kernel versions are not identifiers and get no needs_ marker.",
    )
    # Every need a marker can name gets its needs_ marker, so --strict-markers accepts them all.
    for need, kind in _markable_needs().items():
        config.addinivalue_line("markers", f"needs_{need}: added automatically from tcpnet_needs('{need}') ({kind})")
    config.addinivalue_line("markers", "tcpnet_vm_boot: boots a real VM (slow: about a minute each)")
    config.pluginmanager.register(session.ReportPlugin(config), "tcpnet-report")
    config.pluginmanager.register(session.SigtermTeardown(), "tcpnet-sigterm")
    if config.getoption("tcpnet_host_guard") and not hasattr(config, "workerinput"):
        config.pluginmanager.register(session.HostGuard(), "tcpnet-host-guard")  # xdist: the controller guards
    from . import vm

    vm.use_host_for_analysis()  # in a --tcpnet-vm guest: tshark and plots run on the host


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config):
    from . import rootless, vm

    code = vm.maybe_run_in_vm(config)
    return code if code is not None else rootless.maybe_run_rootless(config)


def _tcpnet_option_given(config):
    """True when the command line names a --tcpnet-* option: the user asked for tcpnet."""
    return any(str(arg).startswith("--tcpnet") for arg in config.invocation_params.args)


def _uses_tcpnet(item):
    """True when a collected test requests the tcpnet fixture or declares tcpnet needs."""
    return "tcpnet" in getattr(item, "fixturenames", ()) or item.get_closest_marker("tcpnet_needs") is not None


def _describe_machine(config):
    from .requirements import describe_machine

    config.stash[_machine_described] = True
    return "\n".join(filter(None, [describe_machine(), session.describe_seed(config)]))


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
    _seed_sweeps_for_shard(config, items)
    markable = _markable_needs()
    for item in items:
        for mark in item.iter_markers("tcpnet_needs"):
            for need in mark.args:
                # Only needs with a registered marker: an unknown one is reported by check_need at setup.
                if isinstance(need, str) and need in markable:
                    item.add_marker(f"needs_{need}")


def _seed_sweeps_for_shard(config, items):
    """Under pytest-split (--splits N --group i), each hypothesis sweep gets a seed of its shard (docs/sharding.md)."""
    import sys

    splits, group = config.getoption("splits", None), config.getoption("group", None)
    if not (splits and group) or "hypothesis" not in sys.modules:  # no sweep was collected without hypothesis
        return
    from . import strategies

    base = config.getoption("hypothesis_seed", None) or 0
    functions = (getattr(item.obj, "__func__", item.obj) for item in items if getattr(item, "obj", None) is not None)
    for function in {id(f): f for f in functions}.values():
        strategies.seed_for_shard(function, splits=splits, group=group, base=base)


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


@pytest.fixture(scope="session")
def _tcpnet_host_limit(request, _tcpnet_sweep):
    """What one unshaped flow carries on this host (session.host_limit), once per process: every lab's "host" bound."""
    limit, line = session.host_limit(request.config)
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    if line and reporter is not None:
        reporter.ensure_newline()
        reporter.write_line(line)
    return limit


@pytest.fixture
def tcpnet(request, _tcpnet_sweep, _tcpnet_host_limit):
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
    lab = Lab(
        sweep=False,
        artifact_dir=reporting.start_test(request.node),
        seed=session.lab_seed(request.config, request.node.nodeid),
        host_limit=_tcpnet_host_limit,
        steal_retakes=request.config.getoption("tcpnet_steal_retakes", None),
        idle_poll=request.config.getoption("tcpnet_idle_poll", "on") == "on",
    )
    request.node.stash[session.LAB_KEY] = lab
    try:
        yield lab
    finally:
        try:
            lab.close()
        finally:
            reporting.finish_test(request.node, lab)
    reporting.require_quiet(lab)  # after the lab is gone: an error at teardown, beside the call's own outcome
