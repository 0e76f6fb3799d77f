"""``python -m pytest_tcpnet.report merge a.jsonl b.jsonl [--by kernel] [--plot DIR]``: one table from many results files;
``python -m pytest_tcpnet.report diff old.jsonl new.jsonl``: the baseline verdict of new against old."""

import argparse
import sys

from .merge import GROUP_BY, compare, comparison_table, flow_labels
from .results_file import read_rows


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
    diff = commands.add_parser(
        "diff",
        help="judge a results file against a baseline (or any earlier results file): "
        "which flows moved beyond the old runs' spread",
    )
    diff.add_argument("old", help="the baseline: a results file holding several runs (--tcpnet-baseline-mode=save)")
    diff.add_argument("new", help="the results file to judge (its repeated runs of a flow are judged by their mean)")
    args = parser.parse_args(argv)
    if args.command == "diff":
        return _diff(parser, args.old, args.new)
    try:
        rows = read_rows(args.files)
    except ValueError as exc:
        parser.exit(2, f"error: {exc}\n")
    if not rows:
        parser.exit(1, "no flows in " + ", ".join(args.files) + "\n")
    comparison = compare(rows, by=args.by)
    print(comparison_table(comparison))
    print(
        f"\n{len(rows)} flows from {len(args.files)} file(s), {len(comparison.flows)} conditions, "
        f"{len(comparison.groups)} {args.by}(s): {', '.join(map(str, comparison.groups))}"
    )
    if args.plot:
        try:
            from ..analysis.comparison import plot_comparison

            paths = plot_comparison(comparison, args.plot, labels=flow_labels(comparison))
        except ImportError as exc:
            parser.exit(3, f"--plot needs matplotlib (pip install matplotlib): {exc}\n")
        for path in paths:
            print(f"plot: {path}")
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
