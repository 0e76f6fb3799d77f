"""Session start of a one-test project: with the plugin installed vs `-p no:tcpnet` (and, for scale, a tcpnet user).

Run: python benchmarks/bench_plugin.py [rounds]. Each round runs three fresh pytest processes on
a throw-away project with one unrelated test, interleaved so machine noise hits all alike:
`-p no:tcpnet` (as if not installed), the default (plugin loaded, unused), and a project whose
test requests the `tcpnet` fixture, collected only (what describing the machine costs: pyroute2
import and kernel probes). Prints medians and the ratio of the first two from this one run.
Timing: take `flock /tmp/tcpnet-dev-vm.lock` on a shared machine.
"""

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

VARIANTS = {
    "without plugin (-p no:tcpnet)": ("test_unrelated.py", ["-p", "no:tcpnet"]),
    "with plugin, unused": ("test_unrelated.py", []),
    "with plugin, a test uses tcpnet (--collect-only)": ("test_lab.py", ["--collect-only"]),
}


def session_seconds(project, test_file, extra):
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *extra, test_file],
                   cwd=project, check=True, stdout=subprocess.DEVNULL,
                   env=dict(os.environ, PYTHONPATH=str(REPO)))
    return time.perf_counter() - start


def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 15
    times = {name: [] for name in VARIANTS}
    with tempfile.TemporaryDirectory() as project:
        Path(project, "test_unrelated.py").write_text("def test_arithmetic():\n    assert 1 + 1 == 2\n")
        Path(project, "test_lab.py").write_text("def test_lab(tcpnet):\n    pass\n")
        for name, (test_file, extra) in VARIANTS.items():  # warm-up: file caches, bytecode
            session_seconds(project, test_file, extra)
        for _ in range(rounds):
            for name, (test_file, extra) in VARIANTS.items():
                times[name].append(session_seconds(project, test_file, extra))
    medians = {name: statistics.median(samples) for name, samples in times.items()}
    for name, median in medians.items():
        spread = f"{min(times[name]) * 1000:.0f}-{max(times[name]) * 1000:.0f}"
        print(f"{name:50s} median {median * 1000:7.1f} ms  (range {spread} ms, {rounds} rounds)")
    without, unused = medians["without plugin (-p no:tcpnet)"], medians["with plugin, unused"]
    print(f"ratio with/without plugin: {unused / without:.3f} ({(unused - without) * 1000:+.1f} ms)")


if __name__ == "__main__":
    main()
