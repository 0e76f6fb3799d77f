"""Shards of one suite (pytest-split's --splits/--group, per kernel) put back together: did they cover it once?

Each session writes to its results file the tests it collected before the split (`session` rows) and
each test's outcome (`test` rows). Merged, the shards of one suite should together run every
collected test exactly once: a test no shard ran (a shard lost, or a split of another collection)
and a test two shards ran with different outcomes are errors; the same outcome twice is said. A
suite is a kernel and a run label (--tcpnet-results-label): one CI job's host and rootless
sessions run the same tests on one kernel, under two labels.
"""

from dataclasses import dataclass, field

from .table import MISSING


@dataclass
class Coverage:
    """How the shards of each suite (kernel, label) covered its collected tests."""

    #: suite -> {test id: [(results file, outcome)]} for every test that ran.
    ran: dict = field(default_factory=dict)
    #: suite -> sorted test ids collected by some shard and run by none.
    missing: dict = field(default_factory=dict)
    #: suite -> {test id: [(file, outcome)]}: run by two or more shards with the same outcome.
    twice: dict = field(default_factory=dict)
    #: suite -> {test id: [(file, outcome)]}: run by two or more shards with different outcomes.
    conflicts: dict = field(default_factory=dict)
    #: The results files with test rows but no session row (a session that did not finish).
    unfinished: list = field(default_factory=list)

    @property
    def ok(self):
        """No test lost, none claimed twice with different outcomes, every session finished."""
        return not any(self.missing.values()) and not any(self.conflicts.values()) and not self.unfinished

    def describe(self):
        """The coverage in lines: per suite, tests collected and run, then each problem by name."""
        lines = []
        for suite in sorted(self.ran, key=str):
            tests = self.ran[suite]
            outcomes = {}
            for claims in tests.values():
                outcome = claims[-1][1]
                outcomes[outcome] = outcomes.get(outcome, 0) + 1
            sources = sorted({source for claims in tests.values() for source, _ in claims})
            counts = ", ".join(f"{n} {outcome}" for outcome, n in sorted(outcomes.items()))
            kernel, label = suite
            named = f"kernel {kernel}" + (f", {label}" if label else "")
            lines.append(f"{named}: {len(tests)} test(s) ran in {len(sources)} file(s): {counts or 'none'}")
            for test in self.missing.get(suite, []):
                lines.append(f"  ran in no shard: {test}")
            for word, found in (("ran twice", self.twice), ("conflicting outcomes", self.conflicts)):
                for test, claims in sorted(found.get(suite, {}).items()):
                    lines.append(
                        f"  {word}: {test}: " + ", ".join(f"{outcome} in {source}" for source, outcome in claims)
                    )
        for source in self.unfinished:
            lines.append(f"{source}: tests but no session row: that session did not finish (its shard is incomplete)")
        return "\n".join(lines)


def coverage(tests, sessions):
    """The Coverage of test rows against session rows (results_file.read_results), per suite (kernel, label)."""
    result = Coverage()
    for row in tests:
        result.ran.setdefault(_suite(row), {}).setdefault(row["test"], []).append((_file(row), row.get("outcome")))
    collected = {}
    for row in sessions:
        collected.setdefault(_suite(row), set()).update(row.get("collected") or [])
        result.ran.setdefault(_suite(row), {})
    finished = {_file(row) for row in sessions}
    result.unfinished = sorted({_file(row) for row in tests} - finished, key=str)
    for suite, tests_ran in result.ran.items():
        result.missing[suite] = sorted(collected.get(suite, set()) - set(tests_ran))
        for test, claims in tests_ran.items():
            if len(claims) < 2:
                continue
            outcomes = {outcome for _, outcome in claims}
            (result.conflicts if len(outcomes) > 1 else result.twice).setdefault(suite, {})[test] = claims
    return result


def _file(row):
    """The results file a row came from, as given to the reader."""
    return row.get("path") or row.get("source")


def _suite(row):
    """(kernel, run label) of a row: the tests one sharded session was to run together."""
    return (row.get("kernel") or MISSING, (row.get("run") or {}).get("label"))
