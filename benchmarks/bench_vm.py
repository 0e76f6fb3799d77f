#!/usr/bin/env python3
"""Measure what ``--tcpnet-vm`` costs: boot time to first command, and Python slowdown in the guest.

Side by side in one run: boot to first command under TCG (software emulation) and, if
/dev/kvm is usable, under KVM (a hang is reported as such after --kvm-timeout); then the
same Python workload on the host and in each guest that booted, with guest/host ratios:

- interpreter start (``python -c pass``),
- ``import pytest, pyroute2`` in a fresh interpreter, cold (first) and warm (second),
- a CPU loop in pure Python.

Usage: python benchmarks/bench_vm.py [--kernel PATH|RELEASE] [--no-kvm] [--kvm-timeout 30]
Not a test: it prints a table. The host's load average is printed too, because other VMs
or test sessions on a 2-core machine change every number here.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import secrets
import subprocess
import sys
import tempfile

from pytest_tcpnet.vm.accel import kvm_usable
from pytest_tcpnet.vm.kernel import resolve_kernel
from pytest_tcpnet.vm.launch import launch
from pytest_tcpnet.vm.runner import find_tools

WORKLOAD = r'''
import json, subprocess, sys, time

def timed(argv):
    t = time.perf_counter()
    subprocess.run(argv, check=True)
    return time.perf_counter() - t

py = sys.executable
out = {
    "start": timed([py, "-c", "pass"]),
    "import_cold": timed([py, "-c", "import pytest, pyroute2"]),
    "import_warm": timed([py, "-c", "import pytest, pyroute2"]),
}
t = time.perf_counter()
total = 0
for i in range(3_000_000):
    total += i * i
out["cpu_loop"] = time.perf_counter() - t
print("BENCH-RESULT " + json.dumps(out), flush=True)
'''

METRICS = [
    ("start", "python -c pass"),
    ("import_cold", "import pytest, pyroute2 (cold)"),
    ("import_warm", "import pytest, pyroute2 (warm)"),
    ("cpu_loop", "CPU loop, 3M iterations"),
]


def parse_result(text: str) -> "dict | None":
    """Return the workload's JSON result from captured output, or None."""
    for line in text.splitlines():
        if line.startswith("BENCH-RESULT "):
            return json.loads(line[len("BENCH-RESULT "):])
    return None


def run_host(script: str) -> dict:
    """Run the workload on the host."""
    out = subprocess.run([sys.executable, script], capture_output=True, text=True, check=True)
    return parse_result(out.stdout)


def run_guest(vng: str, kernel_path: str, accel: str, script: str, timeout: float) -> dict:
    """Boot a guest, time it to its first command, run the workload there."""
    sentinel = f"BENCH-STARTED-{secrets.token_hex(6)}"
    cmd = [vng, "--run", kernel_path, "--cpus", "2", "--memory", "2G", "--force-9p"]
    if accel == "tcg":
        cmd.append("--disable-kvm")
    cmd += ["--exec", f"echo {sentinel}; {sys.executable} {script}"]
    captured = io.StringIO()
    res = launch(cmd, cwd=os.path.dirname(script), sentinel=sentinel.encode(),
                 boot_timeout=timeout, stdout=captured, stderr=io.StringIO())
    if not res.started:
        why = "hung: no first command" if res.timed_out else f"vng exited {res.returncode}"
        return {"accel": accel, "boot": None, "error": f"{why} within {timeout:g} s"}
    result = parse_result(captured.getvalue()) or {}
    return {"accel": accel, "boot": res.start_seconds, "total": res.total_seconds, **result}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kernel", default=None, help="vmlinuz path or release (default as --tcpnet-vm)")
    ap.add_argument("--no-kvm", action="store_true", help="skip the KVM boot")
    ap.add_argument("--kvm-timeout", type=float, default=30.0, help="seconds before a KVM boot counts as hung")
    ap.add_argument("--tcg-timeout", type=float, default=180.0)
    opts = ap.parse_args()

    vng, _ = find_tools()
    kernel = resolve_kernel(opts.kernel)
    print(f"host {os.uname().release}, guest {kernel.release} ({kernel.path}); "
          f"load average before: {os.getloadavg()[0]:.2f}")
    with tempfile.TemporaryDirectory(prefix="tcpnet-bench-") as tmp:
        script = os.path.join(tmp, "workload.py")
        with open(script, "w", encoding="utf-8") as f:
            f.write(WORKLOAD)
        run_host(script)  # warm the host's page cache so "cold" means cold in the guest only
        host = run_host(script)
        guests = [run_guest(vng, kernel.path, "tcg", script, opts.tcg_timeout)]
        usable, why = kvm_usable()
        if opts.no_kvm:
            guests.append({"accel": "kvm", "boot": None, "error": "skipped (--no-kvm)"})
        elif not usable:
            guests.append({"accel": "kvm", "boot": None, "error": why})
        else:
            guests.append(run_guest(vng, kernel.path, "kvm", script, opts.kvm_timeout))

    print(f"load average after: {os.getloadavg()[0]:.2f}\n")
    print(f"{'boot to first command':34s}", end="")
    for g in guests:
        cell = f"{g['boot']:.1f} s" if g["boot"] is not None else g["error"]
        print(f"  {g['accel']}: {cell}", end="")
    print("\n")
    header = f"{'workload (seconds)':34s} {'host':>8s}"
    for g in guests:
        if g["boot"] is not None:
            header += f" {g['accel']:>8s} {'ratio':>7s}"
    print(header)
    for key, label in METRICS:
        row = f"{label:34s} {host[key]:8.3f}"
        for g in guests:
            if g["boot"] is not None and key in g:
                row += f" {g[key]:8.3f} {g[key] / host[key]:6.1f}x"
        print(row)
    print("\nJSON " + json.dumps({"host": host, "guests": guests}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
