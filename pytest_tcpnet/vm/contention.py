"""How much of the host's CPU other processes took from a VM session: the runner's warning, and each flow's.

Under software emulation the guest's endpoints and its shaped links run only while the
emulator's threads do, so a host busy with other work makes an emulated 20 Mbit/s path carry
less than 20 Mbit/s. The guest cannot see that from inside (an emulated CPU has no steal
time); the host can: its busy time (/proc/stat) less the CPU time of the runner and everything
it started (the emulator included) is what others used.
"""

from __future__ import annotations

import os
import resource
import time

__all__ = ["CONTENTION_WARNING_CORES", "HostContention", "cpu_snapshot", "others_cpus"]

#: Other processes' average use of host CPUs during a TCG session (or one flow of it) above which the runner
#: warns and a flow's description says its rates and timings were the busy host's, not the path's.
CONTENTION_WARNING_CORES = 0.5


def host_busy_seconds() -> "float | None":
    """CPU seconds the whole host spent busy since boot (None where /proc/stat is unreadable)."""
    try:
        with open("/proc/stat", encoding="ascii") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    # user nice system idle iowait irq softirq steal: everything but idle and iowait is busy.
    return (sum(fields[:8]) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")


def own_cpu_seconds() -> float:
    """CPU time of this process, its waited-for children and every descendant still running (the emulator)."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime + _live_descendants_cpu(os.getpid())


def _live_descendants_cpu(root: int) -> float:
    """CPU seconds of root's running descendants and of the children they waited for, from /proc."""
    parents, ticks = {}, {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return 0.0
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="ascii", errors="replace") as f:
                stat = f.read()
        except OSError:
            continue  # gone meanwhile
        fields = stat[stat.rfind(")") + 2:].split()  # after "pid (comm) ": state ppid ...
        try:
            parents[int(entry)] = int(fields[1])
            ticks[int(entry)] = sum(int(x) for x in fields[11:15])  # utime stime cutime cstime
        except (IndexError, ValueError):
            continue
    children = {}
    for pid, ppid in parents.items():
        children.setdefault(ppid, []).append(pid)
    total, todo = 0, list(children.get(root, ()))
    while todo:
        pid = todo.pop()
        total += ticks.get(pid, 0)
        todo.extend(children.get(pid, ()))
    return total / os.sysconf("SC_CLK_TCK")


def cpu_snapshot() -> dict:
    """The host's busy seconds, this process tree's, and the time: two of them give others_cpus()."""
    return {"busy_s": host_busy_seconds(), "own_s": own_cpu_seconds(), "at": time.monotonic(),
            "cpus": os.cpu_count()}


def others_cpus(before: "dict | None", after: "dict | None") -> "float | None":
    """Average number of host CPUs processes outside this tree kept busy between two snapshots (None: unknown)."""
    if not before or not after or before.get("busy_s") is None or after.get("busy_s") is None:
        return None
    wall = after["at"] - before["at"]
    if wall <= 0:
        return None
    return max(0.0, (after["busy_s"] - before["busy_s"]) - (after["own_s"] - before["own_s"])) / wall


class HostContention:
    """How much host CPU processes other than this one and its descendants used since construction."""

    def __init__(self):
        self._start = cpu_snapshot()

    def other_cores(self) -> "float | None":
        """Average number of host CPUs others kept busy (None where /proc/stat is unreadable)."""
        return others_cpus(self._start, cpu_snapshot())
