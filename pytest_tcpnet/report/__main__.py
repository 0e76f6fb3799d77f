"""``python -m pytest_tcpnet.report merge a.jsonl b.jsonl [--by kernel] [--plot DIR] [--write OUT]``: one table from
many results files (CI shards, kernels, runs), and whether the shards ran each collected test once;
``python -m pytest_tcpnet.report diff old.jsonl new.jsonl``: the baseline verdict of new against old;
``python -m pytest_tcpnet.report durations junit.xml ... [--out .test_durations]``: pytest-split's durations."""

import argparse
import sys

from .merge import GROUP_BY, compare, comparison_table, flow_labels
from .results_file import read_results, read_rows
from .shards import coverage


def main(argv=None):
    """Command line entry point; returns the exit status."""
    parser = argparse.ArgumentParser(
        prog="python -m pytest_tcpnet.report",
        description="Reports from pytest-tcpnet results files (--tcpnet-results).",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    merge = commands.add_parser(
        "merge", help="merge results files (CI shards, kernels, runs) into one comparison table"
    )
    merge.add_argument("files", nargs="+", help="JSON-lines files written by pytest --tcpnet-results=PATH")
    merge.add_argument(
        "--by",
        choices=GROUP_BY,
        default="kernel",
        help="what the column groups are: kernel (default), source file, host or run label",
    )
    merge.add_argument("--plot", metavar="DIR", help="also write comparison plots (PNG) there (needs matplotlib)")
    merge.add_argument("--markdown", action="store_true", help="print the table as Markdown (a CI job's summary)")
    merge.add_argument(
        "--write",
        metavar="OUT",
        help="also write every line of the files to one results file (a baseline saved per shard becomes one "
        "baseline for --tcpnet-baseline and diff)",
    )
    diff = commands.add_parser(
        "diff",
        help="judge a results file against a baseline (or any earlier results file): "
        "which flows moved beyond the old runs' spread",
    )
    diff.add_argument("old", help="the baseline: a results file holding several runs (--tcpnet-baseline-mode=save)")
    diff.add_argument("new", help="the results file to judge (its repeated runs of a flow are judged by their mean)")
    durations = commands.add_parser(
        "durations", help="pytest-split's stored durations (--splits N --group i) from JUnit XML files of a run"
    )
    durations.add_argument("junit", nargs="+", help="JUnit XML files (pytest --junitxml) of the suite's sessions")
    durations.add_argument("--out", default=".test_durations", help="where to write them (default: .test_durations)")
    durations.add_argument("--rootdir", default=".", help="where the test files are (default: here)")
    args = parser.parse_args(argv)
    if args.command == "durations":
        return _durations(parser, args.junit, args.out, args.rootdir)
    if args.command == "diff":
        return _diff(parser, args.old, args.new)
    try:
        results = read_results(args.files)
    except ValueError as exc:
        parser.exit(2, f"error: {exc}\n")
    rows = results.flows
    if not rows and not results.tests:
        parser.exit(1, "no flows and no tests in " + ", ".join(args.files) + "\n")
    comparison = compare(rows, by=args.by)
    if rows:
        print(comparison_table(comparison, markdown=args.markdown))
        print(
            f"\n{len(rows)} flows from {len(args.files)} file(s), {len(comparison.flows)} conditions, "
            f"{len(comparison.groups)} {args.by}(s): {', '.join(map(str, comparison.groups))}"
        )
    covered = coverage(results.tests, results.sessions)
    if results.tests or results.sessions:
        print("\n" + ("```\n" + covered.describe() + "\n```" if args.markdown else covered.describe()))
    if args.write:
        _write_lines(args.files, args.write)
        print(f"\nevery line of {len(args.files)} file(s) written to {args.write}")
    if args.plot:
        try:
            from ..analysis.comparison import plot_comparison

            paths = plot_comparison(comparison, args.plot, labels=flow_labels(comparison))
        except ImportError as exc:
            parser.exit(3, f"--plot needs matplotlib (pip install matplotlib): {exc}\n")
        for path in paths:
            print(f"plot: {path}")
    if not covered.ok:
        print("\nmerge: the shards did not run each collected test once (above)", file=sys.stderr)
        return 1
    return 0


def _write_lines(files, out):
    """Concatenate results files (already read, so known good) into one."""
    with open(out, "w", encoding="utf-8") as merged:
        for name in files:
            with open(name, encoding="utf-8") as part:
                for line in part:
                    if line.strip():
                        merged.write(line if line.endswith("\n") else line + "\n")


def _durations(parser, junit, out, rootdir):
    """Write pytest-split's durations file; 1 when the JUnit files name no test found under rootdir."""
    import json

    from .durations import durations_from_junit

    try:
        found = durations_from_junit(junit, rootdir)
    except ValueError as exc:
        parser.exit(2, f"error: {exc}\n")
    if not found:
        parser.exit(1, f"no test of {', '.join(junit)} is in a test file under {rootdir}\n")
    with open(out, "w", encoding="utf-8") as f:
        json.dump(found, f, indent=1)
        f.write("\n")
    print(f"{len(found)} tests, {sum(found.values()):.0f} s in all, written to {out}")
    return 0


def _diff(parser, old, new):
    """Print the regression table of new against old; 1 when a flow moved, 0 otherwise."""
    from .baseline import baseline_table, load_baseline

    try:
        baseline, rows = load_baseline(old), read_rows([new])
    except ValueError as exc:
        parser.exit(2, f"error: {exc}\n")
    judgements = baseline.judge(rows)
    print(baseline_table(judgements))
    moved = [j for j in judgements if j.verdict == "moved"]
    print(
        f"\n{len(judgements)} flow(s) of {new} against {baseline.runs} run(s) in {old}: {len(moved)} moved, "
        f"{sum(j.verdict == 'held' for j in judgements)} held, {sum(j.verdict == 'not judged' for j in judgements)} "
        f"not judged"
    )
    for judgement in moved:
        print(judgement.describe())
    return 1 if moved else 0


if __name__ == "__main__":
    sys.exit(main())
