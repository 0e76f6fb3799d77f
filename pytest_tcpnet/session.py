"""The session-wide pytest plugins that plugin.py registers: reports and artifacts, the host guard, SIGTERM.

Each delegates to code that works without pytest (report/, hostguard.py); importing this module
imports nothing heavy.
"""

import argparse
import os
import time

import pytest

from . import guest

__all__ = [
    "LAB_KEY",
    "COLLECTED_KEY",
    "ReportPlugin",
    "CollectionWatch",
    "HostGuard",
    "SigtermTeardown",
    "add_report_options",
]


LAB_KEY = pytest.StashKey[object]()
"""The test's Lab, set by the tcpnet fixture."""
_outcomes_key = pytest.StashKey[dict]()
_flows_key = pytest.StashKey[list]()
_kept_key = pytest.StashKey[str]()
_attempt_key = pytest.StashKey[int]()
_earlier_rows_key = pytest.StashKey[list]()
_stolen_key = pytest.StashKey[list]()
COLLECTED_KEY = pytest.StashKey[set]()
"""The session's collected test ids, before a shard plugin's split (CollectionWatch)."""


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
        "--tcpnet-verify-impairments",
        dest="tcpnet_verify_impairments",
        choices=("warn", "fail", "off"),
        default="warn",
        help="when a link's counters show it applied another loss than its Link asked for, beyond chance (a "
        "correlated netem loss, a wrong shaper): warn (default; the failure messages say so anyway), fail the "
        "test, or off",
    )
    group.addoption(
        "--tcpnet-require-quiet",
        dest="tcpnet_require_quiet",
        metavar="CPUS",
        type=_cpus,
        default=None,
        help="a verdict taken while processes outside the session kept more than CPUS host CPUs busy is an error "
        "that says so, neither a pass nor a failure of the path (CI on shared runners: 0.5)",
    )
    group.addoption(
        "--tcpnet-retry",
        dest="tcpnet_retry",
        metavar="N",
        type=_retries,
        default=0,
        help="run a failed test that measured something up to N more times (default 0); every attempt is kept "
        "(table, JUnit, results file) and a test that passed only on a retry is listed as flaky at the end",
    )
    group.addoption(
        "--tcpnet-steal-reruns",
        dest="tcpnet_steal_reruns",
        metavar="N",
        type=_retries,
        default=2,
        help="run a failed test again, once the steal calms, when a flow it measured ran while the hypervisor stole "
        "0.1 CPUs or more (a VM host: its shaped links stalled, your own program's flows too), up to N times "
        "(default 2; 0: never); each void attempt is kept (table, JUnit, results file) and listed at the end. Never "
        "for load from other processes",
    )
    group.addoption(
        "--tcpnet-steal-retakes",
        dest="tcpnet_steal_retakes",
        metavar="N",
        type=_retries,
        default=None,
        help="a measurement while the hypervisor stole 0.1 CPUs or more (a VM host: its shaped links stalled) is "
        "void and taken again once the steal calms, up to N times (default 4; 0: never); each flow records the void "
        "takes and the session lists them at the end",
    )
    group.addoption(
        "--tcpnet-idle-poll",
        dest="tcpnet_idle_poll",
        choices=("on", "off"),
        default="on",
        help="while a measurement runs, keep the machine's idle CPUs polling instead of halted (a PM QoS CPU latency "
        "request of 0, held by an open file and gone when it closes; needs root): a VM host's halted vCPUs wait for "
        "their hypervisor on every wake-up, which stalls shaped links and reads as steal (default on; each result "
        "records cpus_polled)",
    )
    group.addoption(
        "--tcpnet-seed",
        dest="tcpnet_seed",
        metavar="SEED",
        type=_seed,
        default=os.environ.get("TCPNET_SEED") or None,
        help="seed every netem qdisc from SEED and the test's id, so each test's links lose, duplicate and corrupt "
        "the same packets on every run (Linux 6.6 or later: the session header says where the kernel is older; "
        "docs/reports.md; env TCPNET_SEED)",
    )
    group.addoption(
        "--tcpnet-host-limit",
        dest="tcpnet_host_limit",
        metavar="auto|off|RATE",
        type=_host_limit,
        default="auto",
        help="the model's bound for a path no link slows: auto (default) calibrates once per process what one "
        "unshaped flow carries here (3 x 0.5 s); off: no such bound; a rate (e.g. 4gbit) takes it as given",
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


def _whole_number(what, base=10):
    """An option's parser of a whole number >= 0 (base 0: also 0x.. and 0o..); `what` names it in the error."""

    def parse(text):
        try:
            value = int(text, base)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be a whole number {what}>= 0, got {text!r}") from None
        if value < 0:
            raise argparse.ArgumentTypeError(f"must be a whole number {what}>= 0, got {text!r}")
        return value

    return parse


#: --tcpnet-retry's N and --tcpnet-seed's SEED.
_retries = _whole_number("of retries ")
_seed = _whole_number("", base=0)


def _host_limit(text):
    """--tcpnet-host-limit's parser: "auto", "off" or a rate in bit/s."""
    if text in ("auto", "off"):
        return text
    from .model import parse_rate

    try:
        return parse_rate(text, "--tcpnet-host-limit")
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"must be auto, off or a rate such as 4gbit: {exc}") from None


def host_limit(config):
    """(model.HostLimit or None, a line for the terminal or None) as --tcpnet-host-limit asks: calibrated (auto), none
    (off), or the rate given."""
    asked = config.getoption("tcpnet_host_limit", "auto")
    if asked == "off":
        return None, None
    if asked == "auto":
        from .calibrate import calibrate_host

        return calibrate_host()
    from .model import HostLimit

    limit = HostLimit(bps=asked, runs_bps=(), run_s=0.0, kernel=os.uname().release, source="--tcpnet-host-limit")
    return limit, f"tcpnet: host limit: {limit.describe()}"


def busy_host_words(results):
    """Why a verdict may be the host's, not the path's: the most other processes kept busy while any of `results`
    was measured, from half a CPU on (hostload.CONTENTION_WARNING_CORES); else ""."""
    from .hostload import CONTENTION_WARNING_CORES
    from .results import host_contentions

    loads = host_contentions(results)
    busy = [cpus for cpus in loads if cpus >= CONTENTION_WARNING_CORES]
    if not busy:
        return ""
    return (
        f"{len(busy)} of the {len(loads)} flow(s) this test measured ran while processes outside the session kept up to "
        f"{max(busy):.1f} CPUs busy: the path's links and endpoints run only when they "
        "get a CPU, so a rate or timing verdict may be the busy host's rather than the path's; judge it again on a "
        "quiet host (--tcpnet-require-quiet=CPUS makes this an error instead)"
    )


def _failure_line(report):
    """A failed report's message in one line: its exception's first line where pytest has it, else the last line of
    its text (an error's location)."""
    crash = getattr(getattr(report, "longrepr", None), "reprcrash", None)
    lines = (crash.message if crash is not None else "").strip().splitlines()
    if not lines:
        lines = report.longreprtext.strip().splitlines() or ["(no message)"]
        lines = lines[-1:]
    return lines[0][:500]


def lab_seed(config, nodeid):
    """The seed of a test's lab under --tcpnet-seed (from SEED and the test's id), or None: none asked, or a kernel
    whose netem takes no seed (before 6.6; describe_seed says so in the header)."""
    seed = config.getoption("tcpnet_seed", None)
    if seed is None or not _kernel_seeds_netem():
        return None
    from .netlink import netem_seed

    return netem_seed(seed, nodeid)


def describe_seed(config):
    """The header's line for --tcpnet-seed, or None."""
    seed = config.getoption("tcpnet_seed", None)
    if seed is None:
        return None
    if _kernel_seeds_netem():
        return f"tcpnet: netem seed {seed}: each test's links draw from it and the test's id"
    return (
        f"tcpnet: netem seed {seed} asked, but kernel {os.uname().release}'s netem takes no seed (Linux 6.6 or later): "
        "links draw unseeded"
    )


def _kernel_seeds_netem():
    from .errors import MissingCapability
    from .netlink import NETEM_SEED_NEED
    from .requirements import check_need

    try:
        check_need(NETEM_SEED_NEED)
    except MissingCapability:
        return False
    return True


def _cpus(text):
    """--tcpnet-require-quiet's CPUS: a number >= 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number of CPUs >= 0, got {text!r}") from None
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a number of CPUs >= 0, got {text!r}")
    return value


class BusyHostError(Exception):
    """A test's measurements ran beside more load than --tcpnet-require-quiet allows."""


class ImpairmentWarning(pytest.PytestWarning):
    """A link's counters show it applied another impairment than its Link asked for (--tcpnet-verify-impairments)."""


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
        self.flaky = []
        self.rerun_beside_steal = []
        self.writer = None
        # Test ids collected before a split (pytest-split) kept some of them: CollectionWatch's, and xdist workers'.
        self.collected = config.stash.setdefault(COLLECTED_KEY, set())
        self.tests = {}  # test id -> (its phases' outcomes, their seconds) so far (the controller's, from the reports)
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
        from .report.rows import test_outcome

        outcomes = item.stash.get(_outcomes_key, {})
        failed = "failed" in outcomes.values()
        rows = flow_rows(lab.results, test=item.nodeid, outcome=test_outcome(outcomes))
        attempt = item.stash.get(_attempt_key, None)
        if attempt is not None:  # run by pytest_runtest_protocol's loop: say which attempt each row is
            for row in rows:
                row["attempt"] = attempt
        item.stash[_flows_key] = rows
        item.user_properties.extend(junit_properties(rows))
        if lab.artifact_dir is not None:
            if rows and self.artifacts.should_keep(failed):
                write_flows(lab.artifact_dir, rows)
            if self.artifacts.finish(lab.artifact_dir, failed=failed):
                item.stash[_kept_key] = str(lab.artifact_dir)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item, call):
        from .report.rows import phase_outcome

        report = yield
        # An expected failure is neither skipped nor passed in the table: pytest's own words for it.
        item.stash.setdefault(_outcomes_key, {})[report.when] = phase_outcome(report)
        lab = item.stash.get(LAB_KEY, None)
        if (
            report.when == "call"
            and report.failed
            and lab is not None
            and lab.artifact_dir is not None
            and self.artifacts.should_keep(True)
        ):
            self._explain_failure(item, report, lab)
        if report.when == "call" and report.failed and lab is not None:
            busy = busy_host_words(lab.results)
            if busy:
                report.sections.append(("tcpnet busy host", busy))
        if report.when == "call" and lab is not None:
            self._verify_impairments(item, report, lab)
        if report.when == "call" and report.passed and lab is not None and self.baseline is not None:
            self._compare_with_baseline(item, report, lab)
        if report.when == "call" and report.failed and lab is not None:
            from .results import stolen_from

            item.stash[_stolen_key] = stolen_from(lab.results)  # (after every check above that may fail it)
        if report.when == "teardown":  # extra report attributes travel to the xdist controller with the report
            rows = item.stash.get(_earlier_rows_key, []) + item.stash.get(_flows_key, [])
            if rows:
                report.tcpnet_flows = rows
            if item.stash.get(_kept_key, None):
                report.tcpnet_artifacts = item.stash[_kept_key]
        return report

    def require_quiet(self, lab):
        """Raise BusyHostError when a flow of this lab ran beside more other load than --tcpnet-require-quiet."""
        limit = self.config.getoption("tcpnet_require_quiet", None)
        if limit is None:
            return
        from .results import host_contentions

        busy = [cpus for cpus in host_contentions(lab.results) if cpus > limit]
        if busy:
            worst = max(busy)
            raise BusyHostError(
                f"tcpnet: {len(busy)} of this test's measurements ran while processes outside the session kept up to "
                f"{worst:.2f} CPUs busy (--tcpnet-require-quiet={limit:g}): its verdict says more about the host than "
                f"the path; run it again on a quiet host"
            )

    def _verify_impairments(self, item, report, lab):
        """Name every link that did not apply what its Link asked (--tcpnet-verify-impairments): a warning, or a
        failure of a test that would have passed on a path other than the one it asked for."""
        mode = self.config.getoption("tcpnet_verify_impairments", "warn")
        if mode == "off":
            return
        from .results import transfer_of

        seen = {}
        for transfer in filter(None, map(transfer_of, lab.results)):
            for applied in transfer.impairment_mismatches:
                seen.setdefault(applied.key, applied)
        if not seen:
            return
        lines = [applied.describe() for applied in seen.values()]
        if mode == "fail" and report.passed:
            report.outcome = "failed"
            report.longrepr = "\n".join(
                ["tcpnet: the path did not apply the impairment the test asked for (--tcpnet-verify-impairments=fail)"]
                + [f"  {line}" for line in lines]
            )
        elif mode == "warn":
            for line in lines:
                item.warn(ImpairmentWarning(f"tcpnet: {line}"))

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

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_protocol(self, item, nextitem):
        """Run a failed test that measured something again, keeping every attempt on record: at once under
        --tcpnet-retry, and, once the steal calms, when a flow it measured ran beside hypervisor steal (the attempt is
        void: --tcpnet-steal-reruns). Load from other processes never voids an attempt."""
        retries = self.config.getoption("tcpnet_retry", 0)
        reruns = self.config.getoption("tcpnet_steal_reruns", 0)
        if not (retries or reruns) or "tcpnet" not in getattr(item, "fixturenames", ()):
            return None
        from _pytest.runner import runtestprotocol

        item.ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
        failures, voids, attempt = [], [], 0
        while True:
            attempt += 1
            item.stash[_attempt_key] = attempt
            item.stash[_outcomes_key] = {}
            item.stash[_flows_key] = []
            item.stash[_stolen_key] = []
            properties = len(item.user_properties)
            started = time.monotonic()
            reports = runtestprotocol(item, nextitem=nextitem, log=False)
            failed = next((r for r in reports if r.failed), None)
            if failed is None or not item.stash.get(_flows_key, None):
                break
            # This attempt failed after measuring: keep its figures under its number, then run the test afresh.
            message = f"attempt {attempt}: {_failure_line(failed)}"
            stolen = item.stash[_stolen_key]
            void = bool(stolen) and len(voids) < reruns
            if void:
                waited = self._wait_for_calm(time.monotonic() - started)
                voids.append(
                    f"{message} [void: {len(stolen)} flow(s) measured while the hypervisor stole up to "
                    f"{max(stolen):.2f} CPUs; the next attempt waited {waited:.1f} s for the steal to calm]"
                )
                for row in item.stash[_flows_key]:
                    row["void_attempt"] = True
            elif len(failures) < retries:
                failures.append(message)
            else:
                break
            item.user_properties[properties:] = [
                (name.replace("tcpnet.", f"tcpnet.attempt{attempt}.", 1), value)
                for name, value in item.user_properties[properties:]
            ]
            if void:
                item.user_properties.append((f"tcpnet.attempt{attempt}.void_steal_cpus", f"{max(stolen):.3g}"))
            item.stash[_earlier_rows_key] = item.stash.get(_earlier_rows_key, []) + item.stash[_flows_key]
            item._initrequest()  # fresh fixtures: a new lab for the next attempt
        for report in reports:
            report.tcpnet_attempt = attempt
            report.tcpnet_failed_attempts = failures
            report.tcpnet_void_attempts = voids
            if report.when == "teardown" and attempt > 1:  # JUnit reads a test case's properties from its teardown
                report.user_properties = list(report.user_properties) + [("tcpnet.attempts", str(attempt))]
            if report.when == "call" and report.failed and voids:
                report.sections.append(("tcpnet void attempts (hypervisor steal)", "\n".join(voids)))
            item.ihook.pytest_runtest_logreport(report=report)
        item.ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)
        return True

    def _wait_for_calm(self, attempt_s):
        """Wait until the hypervisor's steal reads calm over a window as long as the void attempt (1-5 s, at most
        measure.run's STEAL_CALM_MOST_S), with idle CPUs kept polling as a measurement keeps them; the seconds
        waited."""
        from . import hostload
        from .measure.run import STEAL_CALM_MOST_S

        with hostload.idle_cpus_polling(self.config.getoption("tcpnet_idle_poll", "on") == "on") as polled:
            return hostload.wait_for_steal_below(
                hostload.STEAL_VOID_CPUS,
                window_s=min(max(1.0, attempt_s), 5.0),
                most_s=STEAL_CALM_MOST_S,
                spin=not polled,  # steal is counted only while a vCPU wants to run (hostload.wait_for_steal_below)
            )

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node, error):
        """xdist: a worker's collection (each worker collects the whole suite before the split)."""
        self.collected.update(getattr(node, "workeroutput", {}).get("tcpnet_collected", []))

    def _test_row(self, report):
        """Follow a test's phases (the controller has no item under xdist, only reports); at its teardown, its row
        for the results file."""
        from .report.rows import phase_outcome, test_outcome, test_row

        phases, seconds = self.tests.get(report.nodeid, ({}, 0.0))
        phases[report.when] = phase_outcome(report)
        seconds += getattr(report, "duration", 0.0) or 0.0
        if report.when != "teardown":
            self.tests[report.nodeid] = (phases, seconds)
            return None
        self.tests.pop(report.nodeid, None)
        return test_row(report.nodeid, test_outcome(phases), seconds, shard=self._shard())

    def _shard(self):
        """pytest-split's --splits/--group as {"splits": N, "group": i}, or None when the suite was not split."""
        splits, group = self.config.getoption("splits", None), self.config.getoption("group", None)
        return {"splits": splits, "group": group} if splits and group else None

    def pytest_runtest_logreport(self, report):
        if not self.is_worker and self.writer is not None:
            row = self._test_row(report)
            if row is not None:
                self.writer.write([row])
        if (
            not self.is_worker
            and report.when == "call"
            and report.passed
            and getattr(report, "tcpnet_failed_attempts", None)
        ):
            self.flaky.append((report.nodeid, report.tcpnet_failed_attempts))
        if not self.is_worker and report.when == "call" and getattr(report, "tcpnet_void_attempts", None):
            self.rerun_beside_steal.append(
                (report.nodeid, report.outcome, report.tcpnet_attempt, report.tcpnet_void_attempts)
            )
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
        self._summarize_retakes(terminalreporter)
        if self.rerun_beside_steal:
            terminalreporter.write_sep(
                "=",
                f"tcpnet: {len(self.rerun_beside_steal)} test(s) run again: failed attempts void beside hypervisor "
                "steal (--tcpnet-steal-reruns)",
                yellow=True,
            )
            for nodeid, outcome, attempt, voids in self.rerun_beside_steal:
                terminalreporter.write_line(f"{nodeid}: {outcome} on attempt {attempt}")
                for void in voids:
                    terminalreporter.write_line(f"  {void}")
        if self.flaky:
            terminalreporter.write_sep(
                "=", f"tcpnet: {len(self.flaky)} flaky test(s): passed only on a retry", yellow=True
            )
            for nodeid, failures in self.flaky:
                terminalreporter.write_line(nodeid)
                for failure in failures:
                    terminalreporter.write_line(f"  {failure}")

    def pytest_sessionfinish(self, session):
        """Write the session's row (what it collected: merging shards checks each test ran once); a flaky test
        fails the session under --tcpnet-strict=all (docs/reports.md, 'Retries')."""
        if self.writer is not None and not self.is_worker:
            from .report.rows import session_row

            self.writer.write([session_row(self.collected, session.exitstatus, shard=self._shard())])
        if self.flaky and self.config.getoption("tcpnet_strict", None) == "all":
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def _summarize_retakes(self, terminalreporter):
        """List the measurements taken again beside hypervisor steal (measure.run): a retake is never silent."""
        retaken = [row for row in self.flows if row.get("void_takes")]
        if not retaken:
            return
        tests = sorted({row["test"] for row in retaken})
        terminalreporter.write_sep(
            "=",
            f"tcpnet: {len(retaken)} result(s) of {len(tests)} test(s) measured again: earlier takes void beside "
            "hypervisor steal (--tcpnet-steal-retakes)",
            yellow=True,
        )
        for row in sorted(retaken, key=lambda r: (r["test"], r["flow"])):
            takes = "; ".join(
                f"{take['steal_cpus']:.2f} CPUs stolen over {take['seconds']:.1f} s" for take in row["void_takes"]
            )
            steal = row.get("host_steal_cpus")
            kept = "" if steal is None else f"; the kept take: {steal:.2f}"
            terminalreporter.write_line(f"{row['test']} result {row['flow']} ({row['kind']}): {takes}{kept}")

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


class CollectionWatch:
    """Keeps the session's collected test ids (config.stash[COLLECTED_KEY]) as they are before a shard plugin
    deselects all but its group, after -m and -k have deselected theirs.

    Register it before pytest-split registers its plugin (in its pytest_configure): among trylast hooks, the one
    registered first is called first. plugin.py registers it from pytest_addoption, which runs as plugins load.
    """

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, config, items):
        collected = config.stash.setdefault(COLLECTED_KEY, set())
        collected.update(item.nodeid for item in items)
        if hasattr(config, "workerinput"):  # xdist: the controller collects nothing; each worker collects all
            config.workeroutput["tcpnet_collected"] = sorted(collected)


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
