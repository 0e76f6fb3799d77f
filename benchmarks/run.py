"""Run every benchmark, print one table, write benchmarks/RESULTS.md.

Usage (root, from the repository root): flock /tmp/tcpnet-dev-vm.lock python benchmarks/run.py [--vm] [--skip NAME ...]

Each benchmarks/bench_*.py runs as its own subprocess (so one's imports, threads and memory
never colour another's figures). bench_lab.py prints ``BENCH-ROW {json}`` lines that become the
table; other benchmarks' output is kept verbatim. With --vm, bench_lab.py --quick (and
bench_workloads.py at the guest's scale) also runs in a VM booted as --tcpnet-vm boots it, with
the kernel it uses (netem is there: RTT and loss fidelity are measured only in the VM). Hand-written analysis in benchmarks/NOTES.md is appended to RESULTS.md.
"""

import argparse
import datetime
import glob
import io
import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)


def machine(where):
    load = os.getloadavg()[0]
    return f"{where}: kernel {os.uname().release}, {os.cpu_count()} cores, load average {load:.2f} at start"


def commit():
    if os.environ.get("TCPNET_BENCH_COMMIT"):  # a snapshot (git archive) run outside the checkout
        return os.environ["TCPNET_BENCH_COMMIT"]

    def git(*args):
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True).stdout.strip()

    dirty = " (with uncommitted changes)" if git("status", "--porcelain", "--untracked-files=no") else ""
    return (git("rev-parse", "--short", "HEAD") or "unknown") + dirty


def rows_of(text):
    return [json.loads(line[len("BENCH-ROW ") :]) for line in text.splitlines() if line.startswith("BENCH-ROW ")]


def run_bench(path, args=(), timeout=1200):
    """Run one benchmark script; return (rows, other output, seconds, exit code)."""
    t0 = time.monotonic()
    try:
        out = subprocess.run(
            [sys.executable, path, *args],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=timeout,
            env=dict(os.environ, PYTHONPATH=ROOT),
        )
        text, code = out.stdout + out.stderr, out.returncode
    except subprocess.TimeoutExpired as exc:
        text, code = f"{exc.stdout or ''}\n(timed out after {timeout} s)", -1
        text = text if isinstance(text, str) else text.decode(errors="replace")
    others = "\n".join(line for line in text.splitlines() if not line.startswith("BENCH-ROW "))
    return rows_of(text), others, time.monotonic() - t0, code


def run_in_vm(timeout):
    """bench_lab.py --quick, then bench_workloads.py at the guest's scale, in one VM booted as --tcpnet-vm boots it.

    Returns (rows, output, header). Fast boot (cached read-only root) where it is available,
    else vng; software emulation either way (guests hang at boot under KVM here).
    """
    from pytest_tcpnet.vm import fastboot
    from pytest_tcpnet.vm.kernel import resolve_kernel
    from pytest_tcpnet.vm.launch import launch
    from pytest_tcpnet.vm.runner import GUEST_MODULES, find_tools

    vng, qemu = find_tools()
    kernel = resolve_kernel(None)
    sentinel = f"BENCH-STARTED-{secrets.token_hex(6)}"
    python = f"TCPNET_IN_VM=1 PYTHONPATH={ROOT} {sys.executable}"
    steps = [
        f"echo {sentinel}",
        f"for m in {' '.join(GUEST_MODULES)}; do modprobe -q $m; done",
        "mkdir -p /run/netns",
        f"cd {ROOT}",
        f"{python} benchmarks/bench_lab.py --quick",
        # The guest carries ~0.6 Gbit/s: 50 MB per transfer keeps this to a minute or two.
        "echo '== bench_workloads.py in the VM'",
        f"{python} benchmarks/bench_workloads.py --rounds 3 --bytes 50000000 --seconds 2 --observe-bytes 0",
    ]
    workdir = tempfile.mkdtemp(prefix="tcpnet-bench-vm-")
    try:
        boot = fastboot.prepare(kernel, qemu)
        run_sh = os.path.join(workdir, "run.sh")
        with open(run_sh, "w") as f:
            f.write(fastboot.session_script("\n".join(steps) + "\n"))
        cmd = fastboot.qemu_command(qemu, boot, "tcg", 2, "2G", [workdir], run_sh)
        how = "fast boot"
    except fastboot.Unavailable as err:
        cmd = [
            vng,
            "--run",
            kernel.path,
            "--cpus",
            "2",
            "--memory",
            "2G",
            "--force-9p",
            "--disable-kvm",
            "--exec",
            "; ".join(steps),
        ]
        how = f"vng (fast boot unavailable: {err})"
    captured = io.StringIO()
    try:
        result = launch(
            cmd,
            cwd=ROOT,
            sentinel=sentinel.encode(),
            boot_timeout=180,
            stdout=captured,
            stderr=io.StringIO(),
            after_start_timeout=timeout,
        )
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    text = captured.getvalue()
    header = f"VM: kernel {kernel.release}, 2 vCPUs, software emulation (TCG), {how}"
    if not result.started:
        return [], f"VM did not start (exit {result.returncode})", header
    return rows_of(text), "\n".join(line for line in text.splitlines() if not line.startswith("BENCH-ROW ")), header


def table(rows):
    lines = ["| section | figure | value | unit | goal | met | note |", "|---|---|---:|---|---|---|---|"]
    for r in rows:
        value = f"{r['value']:.2f}" if isinstance(r["value"], float) else str(r["value"])
        met = "" if r["met"] is None else ("yes" if r["met"] else "**no**")
        lines.append(
            f"| {r['section']} | {r['metric']} | {value} | {r['unit']} | {r['goal'] or ''} | {met} | {r['note']} |"
        )
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vm", action="store_true", help="also run bench_lab.py --quick in a VM (netem fidelity)")
    ap.add_argument("--skip", nargs="*", default=[], help="benchmark file names to skip (e.g. bench_vm.py)")
    ap.add_argument("--output", default=os.path.join(HERE, "RESULTS.md"))
    opts = ap.parse_args()
    started = datetime.datetime.now(datetime.timezone.utc)
    host = machine("host")
    sections = [
        f"# Benchmark results\n\nDate: {started:%Y-%m-%d %H:%M} UTC  \nCommit: {commit()}  \n"
        f"Machine: {host}  \nCommand: `flock /tmp/tcpnet-dev-vm.lock python benchmarks/run.py"
        f"{' --vm' if opts.vm else ''}`\n"
    ]
    print(host)

    def write():
        # Written after every benchmark, so a run cut short still leaves what it measured.
        with open(opts.output, "w") as f:
            f.write("\n".join(sections + notes))

    notes_path = os.path.join(HERE, "NOTES.md")
    notes = []
    if os.path.exists(notes_path):
        with open(notes_path) as f:
            notes = [f.read()]
    # Ours first (the lab's figures), then the others' benchmarks.
    paths = sorted(glob.glob(os.path.join(HERE, "bench_*.py")), key=lambda p: (not p.endswith("bench_lab.py"), p))
    for path in paths:
        name = os.path.basename(path)
        if name in opts.skip:
            continue
        print(f"\n== {name}", flush=True)
        rows, others, seconds, code = run_bench(path)
        print(others)
        status = "" if code == 0 else f" (exit {code})"
        sections.append(f"## {name} on the host ({seconds:.0f} s){status}\n")
        if rows:
            print(table(rows))
            sections.append(table(rows) + "\n")
        if others.strip() and (not rows or code != 0 or name != "bench_lab.py"):
            sections.append("```\n" + others.strip()[-6000:] + "\n```\n")
        write()
        if name == "bench_lab.py" and opts.vm:
            run_vm_section(sections)
            write()
    print(f"\nwrote {opts.output}")


def run_vm_section(sections):
    """bench_lab.py --quick and bench_workloads.py in a VM, appended to the sections."""
    print("\n== bench_lab.py --quick and bench_workloads.py in a VM", flush=True)
    t0 = time.monotonic()
    rows, others, header = run_in_vm(600)
    print(header)
    print(others[-3000:])
    print(table(rows))
    sections.append(
        f"## bench_lab.py --quick and bench_workloads.py in a VM ({time.monotonic() - t0:.0f} s incl. boot)"
        f"\n\n{header}\n\n" + (table(rows) + "\n\n" if rows else "") + "```\n" + others.strip()[-4000:] + "\n```\n"
    )


if __name__ == "__main__":
    main()
