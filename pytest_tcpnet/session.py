"""The session-wide pytest plugins that plugin.py registers: reports and artifacts, the host guard, SIGTERM.

Each delegates to code that works without pytest (report/, hostguard.py); importing this module
imports nothing heavy.
"""

import os

import pytest

from . import guest

__all__ = ["LAB_KEY", "ReportPlugin", "HostGuard", "SigtermTeardown", "add_report_options"]


LAB_KEY = pytest.StashKey[object]()
"""The test's Lab, set by the tcpnet fixture."""
_outcomes_key = pytest.StashKey[dict]()
_flows_key = pytest.StashKey[list]()
_kept_key = pytest.StashKey[str]()


def add_report_options(group):
    """The --tcpnet-artifacts/-keep/-results/-results-label options."""
    from .report import KEEP_CHOICES

    group.addoption(
        "--tcpnet-artifacts",
        dest="tcpnet_artifacts",
        metavar="DIR",
        default=None,
        help="where each test's pcaps, plots and flows.json go, one directory per test "
        "(default: tcpnet-artifacts/ under the rootdir)",
    )
    group.addoption(
        "--tcpnet-keep",
        dest="tcpnet_keep",
        choices=KEEP_CHOICES,
        default="failed",
        help="which tests' artifact directories survive the test: failed (default), all or none",
    )
    group.addoption(
        "--tcpnet-results",
        dest="tcpnet_results",
        metavar="PATH",
        default=None,
        help="write every measured flow with its full conditions as a JSON line to PATH (merge several "
        "with `python -m pytest_tcpnet.report merge`)",
    )
    group.addoption(
        "--tcpnet-results-label",
        dest="tcpnet_results_label",
        metavar="LABEL",
        default=None,
        help="a label stored with every row of --tcpnet-results (e.g. 'vm-6.1'), for `merge --by label`",
    )
    group.addoption(
        "--tcpnet-baseline",
        dest="tcpnet_baseline",
        metavar="PATH",
        default=None,
        help="a baseline of measured flows: save runs into it, or compare this run with it "
        "(--tcpnet-baseline-mode; docs/reports.md)",
    )
    group.addoption(
        "--tcpnet-baseline-mode",
        dest="tcpnet_baseline_mode",
        choices=("compare", "save"),
        default="compare",
        help="save: append this run's flows to the baseline (save 5 runs or more: the spread between them is "
        "the tolerance); compare (default): fail a test whose throughput moved outside the saved runs' "
        "99.9%% prediction interval, keyed by test id, flow number and kernel",
    )


class ReportPlugin:
    """Per-test artifact directories, the session summary, JUnit properties and the results file.

    Workers (xdist) build each test's flow rows and send them to the controller on the teardown
    report (``report.tcpnet_flows``; reports travel whole); only the controller (or a run without
    xdist) prints the summary and writes the results file, so several workers never share a file.
    """

    def __init__(self, config):
        from .report import ArtifactStore, ResultsWriter
        from .report.artifacts import artifacts_root

        self.config = config
        self.artifacts = ArtifactStore(artifacts_root(config), config.getoption("tcpnet_keep"))
        self.is_worker = hasattr(config, "workerinput")
        self.flows = []
        self.kept = []
        self.writer = None
        self.baseline = self.baseline_writer = None
        self._open_baseline(config)
        path = config.getoption("tcpnet_results")
        if path and not self.is_worker:
            try:
                self.writer = ResultsWriter(
                    config.invocation_params.dir / path, label=config.getoption("tcpnet_results_label")
                )
            except (OSError, ValueError) as exc:
                raise pytest.UsageError(f"--tcpnet-results={path}: {exc}") from None

    def _open_baseline(self, config):
        """--tcpnet-baseline: load it to compare (every process), or append to it (the controller)."""
        path = config.getoption("tcpnet_baseline")
        if not path:
            return
        from .report import ResultsWriter
        from .report.baseline import load_baseline

        path = config.invocation_params.dir / path
        try:
            if config.getoption("tcpnet_baseline_mode") == "compare":
                self.baseline = load_baseline(path)
            elif not self.is_worker:
                self.baseline_writer = ResultsWriter(path, label=config.getoption("tcpnet_results_label"), append=True)
        except (OSError, ValueError) as exc:
            raise pytest.UsageError(f"--tcpnet-baseline={path}: {exc}") from None

    def start_test(self, item):
        """A fresh artifact directory for the test; None (and a warning naming where) if it cannot be made.

        An artifact directory is a by-product: failing to make one must not turn the test into
        an error that hides its own outcome.
        """
        try:
            return self.artifacts.directory_for(item.nodeid)
        except OSError as exc:
            item.warn(
                pytest.PytestWarning(
                    f"tcpnet: no artifact directory for this test (pcaps and plots are not kept): cannot write "
                    f"{exc.filename or self.artifacts.root}: {exc.strerror or exc}; --tcpnet-artifacts=DIR moves them"
                )
            )
            return None

    def finish_test(self, item, lab):
        """Build the test's rows (summary, JUnit properties), then keep or remove its artifact directory."""
        from .report import flow_rows, junit_properties
        from .report.artifacts import write_flows

        outcomes = item.stash.get(_outcomes_key, {})
        failed = "failed" in outcomes.values()
        rows = flow_rows(lab.results, test=item.nodeid, outcome="failed" if failed else outcomes.get("call", "error"))
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
        lab = item.stash.get(LAB_KEY, None)
        if (
            report.when == "call"
            and report.failed
            and lab is not None
            and lab.artifact_dir is not None
            and self.artifacts.should_keep(True)
        ):
            self._explain_failure(item, report, lab)
        if report.when == "call" and report.passed and lab is not None and self.baseline is not None:
            self._compare_with_baseline(item, report, lab)
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
                extras.image(
                    base64.b64encode(p.read_bytes()).decode(),
                    name=p.name,
                    mime_type="image/svg+xml" if p.suffix == ".svg" else f"image/{p.suffix[1:]}",
                    extension=p.suffix[1:],
                )
                for p in images
            ]

    def _compare_with_baseline(self, item, report, lab):
        """Fail a passing test whose flows' throughput moved outside the baseline's spread, with the table."""
        from .report import flow_rows
        from .report.baseline import baseline_table

        judgements = self.baseline.judge(flow_rows(lab.results, test=item.nodeid))
        moved = [j for j in judgements if j.verdict == "moved"]
        if moved:
            report.outcome = "failed"
            report.longrepr = "\n".join(
                [
                    f"tcpnet baseline {self.baseline.path}: {len(moved)} flow(s) moved beyond the saved runs' spread",
                    *(f"  {j.describe()}" for j in moved),
                    "",
                    baseline_table(judgements),
                ]
            )

    def pytest_runtest_logreport(self, report):
        if self.is_worker or report.when != "teardown":
            return
        if getattr(report, "tcpnet_artifacts", None):
            self.kept.append(report.tcpnet_artifacts)
        rows = getattr(report, "tcpnet_flows", None)
        if not rows:
            return
        self.flows.extend(rows)
        for writer in (self.writer, self.baseline_writer):
            if writer is not None:
                writer.write(rows)

    def pytest_terminal_summary(self, terminalreporter):
        from .report import summary_table

        if self.flows:
            rows = sorted(self.flows, key=lambda r: (r["test"], r["flow"]))
            where = f" in a {guest.conditions()}" if guest.conditions() else ""
            terminalreporter.write_sep("=", f"tcpnet: {len(rows)} measured flow(s){where}")
            terminalreporter.write_line(summary_table(rows))
        if self.writer is not None:
            terminalreporter.write_line(f"tcpnet: {self.writer.count} flow(s) written to {self.writer.path}")
        self._summarize_baseline(terminalreporter)
        if self.kept:
            terminalreporter.write_line(f"tcpnet: artifacts kept (--tcpnet-keep={self.artifacts.keep}):")
            for path in sorted(self.kept):
                terminalreporter.write_line(f"  {path}")

    def _summarize_baseline(self, terminalreporter):
        if self.baseline_writer is None and self.baseline is None:
            return
        from .report import read_rows
        from .report.baseline import Baseline, baseline_table

        if self.baseline_writer is not None:
            self.baseline_writer.close()
            runs = Baseline(read_rows([self.baseline_writer.path])).runs
            terminalreporter.write_line(
                f"tcpnet baseline: {self.baseline_writer.count} flow(s) appended to "
                f"{self.baseline_writer.path}, which now holds {runs} run(s)"
            )
        if self.baseline is None or not self.flows:
            return
        judgements = self.baseline.judge(self.flows)
        counts = {v: sum(j.verdict == v for j in judgements) for v in ("moved", "held", "not judged")}
        terminalreporter.write_sep(
            "=",
            f"tcpnet baseline {self.baseline.path} ({self.baseline.runs} saved runs): "
            + ", ".join(f"{n} {v}" for v, n in counts.items() if n),
        )
        terminalreporter.write_line(baseline_table(judgements))

    def pytest_unconfigure(self, config):
        for writer in (self.writer, self.baseline_writer):
            if writer is not None:
                writer.close()


class HostGuard:
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


class SigtermTeardown:
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

        if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
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
