"""Kernel backends side by side: the host, User-Mode Linux and software emulation (TCG), one after the other.

Usage (root, from the repository root, nothing else running):
    python benchmarks/bench_backends.py [--backends host uml tcg deterministic] [--lines 6.1 6.12] [-k EXPR]

Runs benchmarks/fidelity_probe.py on the host and under ``--tcpnet-vm --tcpnet-vm-backend=B --tcpnet-kernel=L``
for each backend and kernel line (deterministic: ``--tcpnet-deterministic``, the time-travel UML build, 6.12
only), the way a user's session runs there (boot included), and prints one table:
each figure per backend, with the boot to the first test and the session's wall time. Rows go to
benchmarks/backends.jsonl too. One session at a time: two would share the host's two cores.
"""

import argparse
import collections
import json
import os
import re
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def run(backend, line, expr):
    """One session of the probe; returns (rows, boot seconds or None, wall seconds, exit code)."""
    out_dir = os.path.join(HERE, "backend-results")  # under the checkout: shared read-write with a guest
    os.makedirs(out_dir, exist_ok=True)
    out = os.path.join(out_dir, f"{backend}-{line}.jsonl")
    if os.path.exists(out):
        os.unlink(out)
    args = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-rs", "benchmarks/fidelity_probe.py"]
    if backend == "deterministic":  # the time-travel UML build (dev/setup-uml-tt), seeded netem
        args += ["--tcpnet-deterministic", f"--tcpnet-kernel={line}"]
    elif backend != "host":
        args += ["--tcpnet-vm", f"--tcpnet-vm-backend={backend}", f"--tcpnet-kernel={line}"]
    if expr:
        args += ["-k", expr]
    t0 = time.monotonic()
    proc = subprocess.run(
        args, cwd=ROOT, capture_output=True, text=True, env=dict(os.environ, TCPNET_FIDELITY_OUT=out, PYTHONPATH=ROOT)
    )
    wall = time.monotonic() - t0
    boot = re.search(r"guest started after ([0-9.]+) s", proc.stderr)
    if proc.returncode not in (0, 5):
        sys.stderr.write(
            f"--- {backend} {line}: exit {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-2000:]}\n"
        )
    rows = []
    if os.path.exists(out):
        with open(out, encoding="utf-8") as f:
            rows = [row for row in map(json.loads, f) if "value" in row]  # the probe's figures
    return rows, float(boot.group(1)) if boot else None, wall, proc.returncode


def fmt(value):
    return "-" if value is None else (f"{value:.3g}" if abs(value) < 100 else f"{value:.0f}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backends", nargs="+", default=["host", "uml", "tcg"])
    ap.add_argument("--lines", nargs="+", default=["6.1", "6.12"])
    ap.add_argument("-k", dest="expr", default=None, help="a pytest -k expression for the probe's tests")
    opts = ap.parse_args()
    columns, table, notes = [], collections.OrderedDict(), {}
    summary = []
    for backend in opts.backends:
        for line in ["host"] if backend == "host" else opts.lines:
            column = "host " + os.uname().release if backend == "host" else f"{backend} {line}"
            rows, boot, wall, code = run(backend, line, opts.expr)
            columns.append(column)
            summary.append((column, boot, wall, code))
            for r in rows:
                key = (r["figure"], r["unit"])
                table.setdefault(key, {})[column] = r["value"]
                notes.setdefault(key, {})[column] = r["note"]
            with open(os.path.join(HERE, "backends.jsonl"), "a", encoding="utf-8") as f:
                for r in rows:
                    f.write(json.dumps({**r, "column": column, "when": time.strftime("%Y-%m-%d %H:%M")}) + "\n")
    print("| figure | unit | " + " | ".join(columns) + " |")
    print("|---|---|" + "---:|" * len(columns))
    for (figure, unit), values in table.items():
        print(f"| {figure} | {unit} | " + " | ".join(fmt(values.get(c)) for c in columns) + " |")
    print("| boot to the first test | s | " + " | ".join(fmt(b) for _, b, _, _ in summary) + " |")
    print("| the probe session, wall time | s | " + " | ".join(fmt(w) for _, _, w, _ in summary) + " |")
    print()
    for (figure, _unit), per in notes.items():
        text = "; ".join(f"{c}: {n}" for c, n in per.items() if n)
        if text:
            print(f"- {figure}: {text}")
    return 0 if all(code in (0, 5) for *_, code in summary) else 1


if __name__ == "__main__":
    sys.exit(main())
