"""Shard balance: the project's own host session cut into N shards by pytest-split (.test_durations), each run for
real, one after another; the largest shard's wall time against the mean (1.0 is perfect balance).

Usage (root, from the repository root): python benchmarks/bench_shards.py [--shards 4] [--workers 2]

Each shard runs as dev/test's host session does (-n WORKERS, tests and examples), so the figure is what a CI
matrix of N jobs on machines like this one would wait for: the slowest job. pytest-split's own estimate of each
group (from the stored durations) is printed beside it.
"""

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_shard(group, shards, workers):
    """(wall seconds, pytest-split's estimate, the session's last line) of one shard of the host session; its whole
    output is kept in the system's temporary directory (named in the line when it failed)."""
    split = ["--splits", str(shards), "--group", str(group), "--splitting-algorithm", "least_duration"]
    split += ["--durations-path", os.path.join(ROOT, ".test_durations")]
    session = ["-p", "no:cacheprovider", "--tcpnet-strict=undeclared", "-m", "not tcpnet_vm_boot", *split]
    # pytest-split says its estimate where it splits: in a collection without xdist (a worker's words are not shown).
    listed = subprocess.run(
        [sys.executable, "-m", "pytest", *session, "--collect-only", "-q", "tests", "examples"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    estimate = re.search(r"Running group \d+/\d+ \(estimated duration: ([\d.]+)s\)", listed.stdout)
    start = time.monotonic()
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rf", "-n", str(workers), *session, "tests", "examples"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    wall = time.monotonic() - start
    log = os.path.join(tempfile.gettempdir(), f"bench_shards-{group}of{shards}.log")
    with open(log, "w", encoding="utf-8") as f:
        f.write(out.stdout + out.stderr)
    lines = [line for line in out.stdout.splitlines() if re.search(r"\d+ (passed|failed)", line)]
    last = lines[-1] if lines else f"exit {out.returncode}"
    return wall, float(estimate.group(1)) if estimate else None, last + (f" ({log})" if out.returncode else "")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shards", type=int, default=4)
    ap.add_argument("--workers", type=int, default=2)
    opts = ap.parse_args()
    if opts.shards < 2 or opts.workers < 1:
        ap.error("--shards must be 2 or more and --workers 1 or more")
    walls = []
    print("| shard | wall | pytest-split's estimate | session |")
    print("|---|---:|---:|---|")
    for group in range(1, opts.shards + 1):
        wall, estimate, last = run_shard(group, opts.shards, opts.workers)
        walls.append(wall)
        shown = f"{estimate:.0f} s" if estimate is not None else "-"
        print(f"| {group}/{opts.shards} | {wall:.0f} s | {shown} | {last.strip('= ')} |", flush=True)
    mean = statistics.mean(walls)
    print(
        f"\nlargest shard / mean: {max(walls) / mean:.2f} (largest {max(walls):.0f} s, mean {mean:.0f} s, "
        f"all {sum(walls):.0f} s; {opts.workers} xdist workers each, one shard at a time)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
