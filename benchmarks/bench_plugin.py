"""Session start of a one-test project: with the plugin installed vs `-p no:tcpnet` (and, for scale, a tcpnet user).

Run: python benchmarks/bench_plugin.py [rounds]. Each round runs three fresh pytest processes on
a throw-away project with one unrelated test, interleaved so machine noise hits all alike:
`-p no:tcpnet` (as if not installed), the default (plugin loaded, unused), and a project whose
test requests the `tcpnet` fixture, collected only (what describing the machine costs: pyroute2
import and kernel probes). Prints wall-clock and CPU medians and the ratio of the first two from this one run.
`--baseline DIR` adds the default session with another checkout's plugin (e.g. an older commit:
`git archive COMMIT pytest_tcpnet | tar -x -C DIR`) to compare with. Timing: take
`flock /tmp/tcpnet-dev-vm.lock` on a shared machine.
"""

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

VARIANTS = {
    "without plugin (-p no:tcpnet)": ("test_unrelated.py", ["-p", "no:tcpnet"], REPO),
    "with plugin, unused": ("test_unrelated.py", [], REPO),
    "with plugin, a test uses tcpnet (--collect-only)": ("test_lab.py", ["--collect-only"], REPO),
}


def children_cpu_seconds():
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def session_seconds(project, test_file, extra, package_root):
    """(wall, CPU) seconds of one pytest process; CPU time is what other load on the machine disturbs least."""
    start, cpu_start = time.perf_counter(), children_cpu_seconds()
    subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *extra, test_file],
        cwd=project,
        check=True,
        stdout=subprocess.DEVNULL,
        env=dict(os.environ, PYTHONPATH=str(package_root)),
    )
    return time.perf_counter() - start, children_cpu_seconds() - cpu_start


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("rounds", type=int, nargs="?", default=30)
    parser.add_argument("--baseline", type=Path, help="directory holding another version's pytest_tcpnet/")
    args = parser.parse_args()
    rounds = args.rounds
    if args.baseline:
        VARIANTS[f"with plugin from {args.baseline}, unused"] = ("test_unrelated.py", [], args.baseline.resolve())
    times = {name: [] for name in VARIANTS}
    with tempfile.TemporaryDirectory() as project:
        Path(project, "test_unrelated.py").write_text("def test_arithmetic():\n    assert 1 + 1 == 2\n")
        Path(project, "test_lab.py").write_text("def test_lab(tcpnet):\n    pass\n")
        for variant in VARIANTS.values():  # warm-up: file caches, bytecode
            session_seconds(project, *variant)
        for _ in range(rounds):
            for name, variant in VARIANTS.items():
                times[name].append(session_seconds(project, *variant))
    for kind, index in (("wall", 0), ("CPU", 1)):
        medians = {name: statistics.median(sample[index] for sample in samples) for name, samples in times.items()}
        for name, median in medians.items():
            low, high = (f(sample[index] for sample in times[name]) * 1000 for f in (min, max))
            print(f"{kind:4s} {name:60s} median {median * 1000:7.1f} ms  (range {low:.0f}-{high:.0f} ms)")
        without, unused = medians["without plugin (-p no:tcpnet)"], medians["with plugin, unused"]
        print(
            f"{kind:4s} ratio with plugin unused / without: {unused / without:.3f} ({(unused - without) * 1000:+.1f} ms)"
        )
    print(f"{rounds} rounds, interleaved, one run")


if __name__ == "__main__":
    main()
