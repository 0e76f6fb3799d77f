"""``python -m pytest_tcpnet.report merge a.jsonl b.jsonl [--by kernel] [--plot DIR]``: one table from many results files."""

import argparse
import sys

from .merge import GROUP_BY, compare, comparison_table, flow_labels
from .results_file import read_rows


def main(argv=None):
    """Command line entry point; returns the exit status."""
    parser = argparse.ArgumentParser(prog="python -m pytest_tcpnet.report",
                                     description="Reports from pytest-tcpnet results files (--tcpnet-results).")
    commands = parser.add_subparsers(dest="command", required=True)
    merge = commands.add_parser("merge", help="merge results files (CI shards, kernels, runs) into one comparison table")
    merge.add_argument("files", nargs="+", help="JSON-lines files written by pytest --tcpnet-results=PATH")
    merge.add_argument("--by", choices=GROUP_BY, default="kernel",
                       help="what the column groups are: kernel (default), source file, host or run label")
    merge.add_argument("--plot", metavar="DIR", help="also write comparison plots (PNG) there (needs matplotlib)")
    args = parser.parse_args(argv)
    try:
        rows = read_rows(args.files)
    except ValueError as exc:
        parser.exit(2, f"error: {exc}\n")
    if not rows:
        parser.exit(1, "no flows in " + ", ".join(args.files) + "\n")
    comparison = compare(rows, by=args.by)
    print(comparison_table(comparison))
    print(f"\n{len(rows)} flows from {len(args.files)} file(s), {len(comparison.flows)} conditions, "
          f"{len(comparison.groups)} {args.by}(s): {', '.join(map(str, comparison.groups))}")
    if args.plot:
        try:
            from ..analysis.comparison import plot_comparison
            paths = plot_comparison(comparison, args.plot, labels=flow_labels(comparison))
        except ImportError as exc:
            parser.exit(3, f"--plot needs matplotlib (pip install matplotlib): {exc}\n")
        for path in paths:
            print(f"plot: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
