"""Keep a VM host's vCPUs from halting while a measurement runs: one lowest-priority spinner per CPU.

On a VM host a vCPU with nothing to run halts, and the hypervisor takes time to run it again when a
packet, a timer or another CPU wakes it; /proc/stat counts that wait as steal. A measurement wakes
CPUs thousands of times a second (each packet crosses veths and a shaper between processes), so
its links stall at every wake: on a 2-vCPU Firecracker host, a pipe ping-pong between two processes
read 0.05-0.45 CPUs of steal with nothing else running, and 0.005-0.015 (at twice the round trips)
beside one SCHED_IDLE spinner per CPU. A SCHED_IDLE task runs only when its CPU has nothing else
to do, so it gives way to the measurement's own work at once and only keeps the vCPU from halting.
"""

import contextlib
import os
import subprocess
import sys

from .. import guest

__all__ = ["awake_cpus", "keep_awake"]

_SPIN = """
import os, sys
os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
os.sched_setaffinity(0, {int(sys.argv[1])})
parent, n = os.getppid(), 0
while True:
    n += 1
    if n % 1000000 == 0 and os.getppid() != parent:  # the measurement's process died: nothing to keep awake
        break
"""


def keep_awake():
    """Whether measurements here keep the CPUs awake: $TCPNET_AWAKE_CPUS on/off, else (auto) on a host that is itself
    a VM (the CPU's hypervisor flag), never inside a --tcpnet-vm guest (its own CPUs are the emulator's)."""
    mode = os.environ.get("TCPNET_AWAKE_CPUS", "auto")
    if mode not in ("auto", "on", "off"):
        from ..errors import LabError

        raise LabError(f"TCPNET_AWAKE_CPUS: expected auto, on or off, got {mode!r}")
    if mode != "auto":
        return mode == "on"
    if guest.inside_vm():
        return False
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as f:
            return any(line.startswith("flags") and " hypervisor" in line for line in f)
    except OSError:
        return False


@contextlib.contextmanager
def awake_cpus():
    """For the block, one SCHED_IDLE spinner on each CPU this process may use (none where keep_awake() is False)."""
    if not keep_awake():
        yield []
        return
    spinners = []
    try:
        for cpu in sorted(os.sched_getaffinity(0)):
            spinners.append(
                subprocess.Popen(
                    [sys.executable, "-I", "-S", "-c", _SPIN, str(cpu)],
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            )
        yield spinners
    finally:
        for spinner in spinners:
            spinner.kill()
        for spinner in spinners:
            spinner.wait()
