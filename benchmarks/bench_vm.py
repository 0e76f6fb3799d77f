#!/usr/bin/env python3
"""Measure what ``--tcpnet-vm`` costs, before and after fast boot, side by side in one run.

Each guest is booted twice, the old way (virtme-ng: a PC with firmware, udev, uncached 9p root,
as the runner did before fast boot and still does as its fallback) and the new way (fast boot:
microvm, uncompressed kernel, own init, cached read-only root), under TCG (software emulation)
and, with --kvm, under KVM. Measured in each guest, and on the host for the ratios:

- boot to first command (wall time from starting the VM to the guest's first line),
- interpreter start (``python -c pass``), and small stdlib imports,
- ``import pytest, pyroute2, hypothesis`` in a fresh interpreter, cold (first) and warm (second),
- a CPU loop in pure Python (what emulation costs, independent of files).

With --suite, also the VM part of CI (``pytest --tcpnet-vm ... -m "needs_netem or
kernel_comparison" tests examples``), timed with fast boot off (TCPNET_VM_FASTBOOT=0, the
old runner) and on.

Usage: flock /tmp/tcpnet-dev-vm.lock python benchmarks/bench_vm.py [--kernel PATH|RELEASE]
       [--kvm] [--suite] [--repeat N]
Not a test: it prints a table (and a JSON line). The host's load average is printed too,
because other VMs or test sessions on a 2-core machine change every number here.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import secrets
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from pytest_tcpnet.vm import fastboot  # noqa: E402
from pytest_tcpnet.vm.accel import kvm_usable  # noqa: E402
from pytest_tcpnet.vm.kernel import resolve_kernel  # noqa: E402
from pytest_tcpnet.vm.launch import launch  # noqa: E402
from pytest_tcpnet.vm.runner import find_tools  # noqa: E402

WORKLOAD = r"""
import json, subprocess, sys, time

def timed(argv):
    t = time.perf_counter()
    subprocess.run(argv, check=True)
    return time.perf_counter() - t

py = sys.executable
out = {
    "start": timed([py, "-c", "pass"]),
    "stdlib": timed([py, "-c", "import socket, json, struct, time"]),
    "import_cold": timed([py, "-c", "import pytest, pyroute2, hypothesis"]),
    "import_warm": timed([py, "-c", "import pytest, pyroute2, hypothesis"]),
}
t = time.perf_counter()
total = 0
for i in range(3_000_000):
    total += i * i
out["cpu_loop"] = time.perf_counter() - t
print("BENCH-RESULT " + json.dumps(out), flush=True)
"""

METRICS = [
    ("boot", "boot to first command"),
    ("start", "python -c pass"),
    ("stdlib", "import socket, json, struct, time"),
    ("import_cold", "import pytest, pyroute2, hypothesis (cold)"),
    ("import_warm", "import pytest, pyroute2, hypothesis (warm)"),
    ("cpu_loop", "CPU loop, 3M iterations"),
]

SUITE = [
    sys.executable,
    "-m",
    "pytest",
    "--tcpnet-vm",
    "--tcpnet-strict=all",
    "-p",
    "no:cacheprovider",
    "-q",
    "-rfE",
    "-m",
    "needs_netem or kernel_comparison",
    "tests",
    "examples",
]


def parse_result(text: str) -> dict | None:
    """Return the workload's JSON result from captured output, or None."""
    for line in text.splitlines():
        if line.startswith("BENCH-RESULT "):
            return json.loads(line[len("BENCH-RESULT ") :])
    return None


def run_host(script: str) -> dict:
    """Run the workload on the host."""
    out = subprocess.run([sys.executable, script], capture_output=True, text=True, check=True)
    return parse_result(out.stdout)


def boot_command(how: str, vng: str, qemu: str, kernel, accel: str, workdir: str, sentinel: str, script: str) -> list:
    """Return the command that boots a guest the old way ("vng") or the new way ("fast")."""
    body = f"echo {sentinel}\ncd {workdir}\n{sys.executable} {script}\n"
    if how == "vng":
        cmd = [vng, "--run", kernel.path, "--cpus", "2", "--memory", "2G", "--force-9p", "--rwdir", workdir]
        if accel == "tcg":
            cmd.append("--disable-kvm")
        return cmd + ["--exec", body.replace("\n", "; ")]
    run_sh = os.path.join(workdir, "run.sh")
    with open(run_sh, "w", encoding="utf-8") as f:
        f.write(fastboot.session_script(body))
    boot = fastboot.prepare(kernel, qemu)
    return fastboot.qemu_command(qemu, boot, accel, 2, "2G", [workdir], run_sh)


def run_guest(how: str, vng: str, qemu: str, kernel, accel: str, script: str, timeout: float) -> dict:
    """Boot a guest, time it to its first command, run the workload there."""
    sentinel = f"BENCH-STARTED-{secrets.token_hex(6)}"
    workdir = os.path.dirname(script)
    try:
        cmd = boot_command(how, vng, qemu, kernel, accel, workdir, sentinel, script)
    except fastboot.Unavailable as err:
        return {"how": how, "accel": accel, "boot": None, "error": f"unavailable: {err}"}
    captured = io.StringIO()
    res = launch(
        cmd, cwd=workdir, sentinel=sentinel.encode(), boot_timeout=timeout, stdout=captured, stderr=io.StringIO()
    )
    if not res.started:
        why = "hung: no first command" if res.timed_out else f"exited {res.returncode}"
        return {"how": how, "accel": accel, "boot": None, "error": f"{why} within {timeout:g} s"}
    result = parse_result(captured.getvalue()) or {}
    return {"how": how, "accel": accel, "boot": res.start_seconds, "total": res.total_seconds, **result}


def run_suite(fast: bool) -> dict:
    """Time the VM part of CI with fast boot on or off."""
    env = dict(os.environ, TCPNET_VM_FASTBOOT="1" if fast else "0")
    t = time.monotonic()
    out = subprocess.run(
        SUITE,
        cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    took = time.monotonic() - t
    lines = out.stdout.strip().splitlines() or [""]
    failed = [ln for ln in lines if ln.startswith(("FAILED ", "ERROR "))]
    return {"fast": fast, "seconds": took, "returncode": out.returncode, "summary": lines[-1], "failed": failed}


def _median(runs: list, key: str) -> float | None:
    values = [r[key] for r in runs if r.get(key) is not None]
    return statistics.median(values) if values else None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kernel", default=None, help="vmlinuz path or release (default as --tcpnet-vm)")
    ap.add_argument("--kvm", action="store_true", help="also boot under KVM (if /dev/kvm is usable)")
    ap.add_argument("--kvm-timeout", type=float, default=30.0, help="seconds before a KVM boot counts as hung")
    ap.add_argument("--tcg-timeout", type=float, default=180.0)
    ap.add_argument("--repeat", type=int, default=1, help="boots per configuration (median shown)")
    ap.add_argument("--suite", action="store_true", help="also time the VM part of CI, old and new")
    opts = ap.parse_args()

    vng, qemu = find_tools()
    kernel = resolve_kernel(opts.kernel)
    print(
        f"host {os.uname().release}, guest {kernel.release} ({kernel.path}); "
        f"load average before: {os.getloadavg()[0]:.2f}"
    )
    configs = [("vng", "tcg"), ("fast", "tcg")]
    if opts.kvm:
        usable, why = kvm_usable()
        if usable:
            configs += [("vng", "kvm"), ("fast", "kvm")]
        else:
            print(f"KVM skipped: {why}")
    columns = {}
    with tempfile.TemporaryDirectory(prefix="tcpnet-bench-") as tmp:
        script = os.path.join(tmp, "workload.py")
        with open(script, "w", encoding="utf-8") as f:
            f.write(WORKLOAD)
        run_host(script)  # warm the host's page cache so "cold" means cold in the guest only
        host = run_host(script)
        # Interleaved (old, new, old, new, ...) so that a change in the machine's load hits both.
        runs = {c: [] for c in configs}
        for _ in range(opts.repeat):
            for how, acc in configs:
                timeout = opts.kvm_timeout if acc == "kvm" else opts.tcg_timeout
                runs[(how, acc)].append(run_guest(how, vng, qemu, kernel, acc, script, timeout))
        for c, rs in runs.items():
            errors = [r["error"] for r in rs if r.get("error")]
            columns[c] = {k: _median(rs, k) for k, _ in METRICS}
            columns[c]["error"] = errors[0] if errors and columns[c]["boot"] is None else None
    suite = [run_suite(fast=False), run_suite(fast=True)] if opts.suite else []

    print(f"load average after: {os.getloadavg()[0]:.2f}\n")
    header = f"{f'seconds (median of {opts.repeat})':44s} {'host':>7s}"
    for how, acc in configs:
        header += f" {how + '/' + acc:>10s}"
    header += "   speed-up (old/new)"
    print(header)
    for key, label in METRICS:
        row = f"{label:44s} {host.get(key, 0.0) if key != 'boot' else 0.0:7.3f}"
        for c in configs:
            v = columns[c][key]
            row += f" {v:10.2f}" if v is not None else f" {'-':>10s}"
        for acc in dict.fromkeys(a for _, a in configs):
            old, new = columns.get(("vng", acc), {}).get(key), columns.get(("fast", acc), {}).get(key)
            if old and new:
                row += f"   {acc}: {old / new:4.1f}x"
        print(row)
    for c in configs:
        if columns[c]["error"]:
            print(f"{c[0]}/{c[1]}: {columns[c]['error']}")
    if suite:
        old, new = suite
        print(f"\nVM part of CI, fast boot off: {old['seconds']:6.1f} s (exit {old['returncode']}: {old['summary']})")
        print(f"VM part of CI, fast boot on:  {new['seconds']:6.1f} s (exit {new['returncode']}: {new['summary']})")
        print(f"speed-up: {old['seconds'] / new['seconds']:.1f}x")
        for run in suite:
            for line in run["failed"]:
                print(f"  fast boot {'on' if run['fast'] else 'off'}: {line}")
    print(
        "\nJSON "
        + json.dumps({"host": host, "guests": {f"{h}/{a}": v for (h, a), v in columns.items()}, "suite": suite})
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
