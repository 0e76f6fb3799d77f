"""How much of the host's CPU processes outside the session took while it measured: each flow's reading.

A host busy with other work makes a path carry less than it should and time its packets late:
on the host its endpoints and its shaped links wait for a CPU; under a VM backend the guest
runs only while the emulator's (or User-Mode Linux's) threads do, and the guest cannot see
that from inside (an emulated CPU has no steal time). The host can: its busy time
(/proc/stat) less the CPU time of the session's own process tree is what others used. In a
guest the runner registers the host's snapshot (snapshot_elsewhere); on the host it is read here.
"""

from __future__ import annotations

import contextlib
import os
import resource
import struct
import time
from collections.abc import Iterator
from typing import Callable

from .guest import inside_vm, time_travel

__all__ = [
    "process_snapshot",
    "CONTENTION_WARNING_CORES",
    "STEAL_WARNING_CPUS",
    "HostContention",
    "cpu_snapshot",
    "host_snapshot",
    "others_cpus",
    "siblings_cpus",
    "steal_cpus",
    "surely_stolen_cpus",
    "STEAL_VOID_CPUS",
    "wait_for_steal_below",
    "snapshot_elsewhere",
    "idle_cpus_polling",
    "CPU_LATENCY_DEVICE",
]

#: Other processes' average use of host CPUs during a session (or one flow of it) above which the VM runner
#: warns and a flow's description says its rates and timings were the busy host's, not the path's.
CONTENTION_WARNING_CORES = 0.5

#: Hypervisor steal (average CPUs over a flow) from which a flow's description and the table name it: 0.02 of a CPU
#: is a 20 ms stall in a one-second flow; on a 2-vCPU Firecracker VM host, flows that missed their model by 3-11% in
#: a host session read 0.27-0.68 CPUs of steal, against a median of 0.007 over its 517 flows.
STEAL_WARNING_CPUS = 0.02

#: Hypervisor steal (average CPUs over a measurement, counted low: surely_stolen_cpus) from which the measurement is
#: void and taken again (measure.run, --tcpnet-steal-retakes). Two host sessions on a 2-vCPU Firecracker VM host: of
#: the link- or share-bound flows beside 0.1 CPUs of steal or more, 27% and 21% carried under 0.95 of the model,
#: against 2% and 7% of the others (docs/reports.md, "A busy host"); every failed rate verdict's flow read 0.28-0.68
#: CPUs. Quiet probes read 0.00-0.09.
STEAL_VOID_CPUS = 0.1

#: The kernel's PM QoS CPU latency request (Documentation/power/pm_qos_interface.rst): a process that writes a
#: latency to it holds that request until it closes the file, or dies.
CPU_LATENCY_DEVICE = "/dev/cpu_dma_latency"

_elsewhere: Callable[[], dict | None] | None = None


@contextlib.contextmanager
def idle_cpus_polling(wanted: bool = True) -> Iterator[bool | None]:
    """Ask the kernel to keep idle CPUs polling, not halted, for the block (a PM QoS CPU latency request of 0 us);
    yields whether the request is held (False: not wanted, or not allowed: the device is root's; None in a guest,
    whose idle CPUs are its host's threads: the runner holds the host's request for the whole session, and the
    guest's kernel has no idle governor that would read its own).

    A halted vCPU waits for its hypervisor to run it again when a packet or a timer wakes it, and /proc/stat counts
    that wait as steal: on a 2-vCPU Firecracker VM host a pipe ping-pong made 14-22 thousand round trips a second
    beside 0.000-0.20 CPUs of steal, and 128-153 thousand beside 0.000-0.005 with the request held (6 x 2 s each);
    1 MB transfers at 20 Mbit/s read 0.017-0.51 CPUs of steal and 0.968-1.002 of the model without it, 0.000-0.043
    and 0.986-1.003 with it (20 each, alternated). Nothing persists: the kernel drops the request when the file
    closes, however the process ends."""
    if not wanted:
        yield False
        return
    if inside_vm():
        yield None
        return
    try:
        fd = os.open(CPU_LATENCY_DEVICE, os.O_WRONLY | os.O_CLOEXEC)
    except OSError:  # no such device (a kernel without PM QoS), or not root (rootless sessions)
        yield False
        return
    try:
        try:
            os.write(fd, struct.pack("=i", 0))
        except OSError:
            held = False
        else:
            held = True
        yield held
    finally:
        os.close(fd)


def snapshot_elsewhere(provider: Callable[[], dict | None] | None) -> None:
    """Take host snapshots from provider from now on (a guest asks its runner; None: back to this machine)."""
    global _elsewhere
    _elsewhere = provider


def host_snapshot() -> dict | None:
    """The host's CPU snapshot for a measurement: the registered provider's, else this machine's (None in a
    guest with no provider: its own /proc/stat says nothing about the host)."""
    if _elsewhere is not None:
        return _elsewhere()
    if inside_vm():
        return None
    return process_snapshot(session_root())


def process_snapshot(root: int) -> dict:
    """Every user process's CPU ticks now, and which belong to root's tree: two give others_cpus() by process.

    On the host a session's own work is not all in its tree's counters: the zygote's children (the endpoints) are
    reaped by the kernel (SIGCHLD ignored), so their time never reaches a parent's cutime, and the softirq time of
    the lab's packets is charged to no process. So "others" is counted process by process: the ticks, between two
    snapshots, of user processes outside root's tree (kernel threads, which carry the lab's packets too, left
    out). A process that both starts and ends between the snapshots is not seen (an undercount of others)."""
    ticks, parents = {}, {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        entries = []
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="ascii", errors="replace") as f:
                stat = f.read()
            fields = stat[stat.rfind(")") + 2 :].split()  # after "pid (comm) ": state ppid ...
            pid, ppid = int(entry), int(fields[1])
            if pid == 2 or ppid == 2:  # kthreadd and the kernel's threads
                continue
            # utime + stime (not the waited-for children's: each process counts once) and the start time, which
            # tells a reused pid apart.
            ticks[pid] = (int(fields[11]) + int(fields[12]), int(fields[19]))
            parents[pid] = ppid
        except (OSError, IndexError, ValueError):
            continue  # gone meanwhile
    children: dict[int, list[int]] = {}
    for pid, ppid in parents.items():
        children.setdefault(ppid, []).append(pid)
    return {
        "processes": ticks,
        "own": sorted(_tree(root, children)),
        "mine": sorted(_tree(os.getpid(), children)),
        "steal_s": host_steal_seconds(),
        "at": time.monotonic(),
        "cpus": os.cpu_count(),
    }


def _tree(root: int, children: dict[int, list[int]]) -> set[int]:
    tree, todo = set(), [root]
    while todo:
        pid = todo.pop()
        tree.add(pid)
        todo.extend(children.get(pid, ()))
    return tree


def session_root() -> int:
    """The process whose tree is this session: an xdist worker's controller (its siblings are not 'others')."""
    return os.getppid() if os.environ.get("PYTEST_XDIST_WORKER") else os.getpid()


def host_busy_seconds() -> float | None:
    """CPU seconds the whole host spent busy since boot (None where /proc/stat is unreadable)."""
    fields = _cpu_fields()
    if fields is None:
        return None
    # user nice system idle iowait irq softirq steal: everything but idle and iowait is busy.
    return (sum(fields[:8]) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")


def _cpu_fields() -> list[int] | None:
    """/proc/stat's first line, the whole machine's CPU ticks by kind (None where unreadable)."""
    try:
        with open("/proc/stat", encoding="ascii") as f:
            return [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None


def host_steal_seconds() -> float | None:
    """CPU seconds the hypervisor ran something else while this machine's vCPUs wanted to run, since boot (/proc/stat's
    steal; None where unreadable). A VM host's shaped links stall while it steals: no process here sees it."""
    fields = _cpu_fields()
    return fields[7] / os.sysconf("SC_CLK_TCK") if fields is not None and len(fields) > 7 else None


def steal_cpus(before: dict | None, after: dict | None) -> float | None:
    """Average number of this machine's CPUs its hypervisor stole between two process_snapshot()s (None: unknown, or
    in a time-travel guest, whose clock stands still while the host is stalled: steal moves nothing it measures)."""
    return _stolen_cpus(before, after, 0.0)


def surely_stolen_cpus(before: dict | None, after: dict | None) -> float | None:
    """steal_cpus() less one clock tick, the counter's resolution: what was stolen for certain, so that a short
    measurement which straddled a tick's increment is not called stolen from (None: unknown, as for steal_cpus)."""
    return _stolen_cpus(before, after, 1 / os.sysconf("SC_CLK_TCK"))


def _stolen_cpus(before: dict | None, after: dict | None, less_s: float) -> float | None:
    if time_travel() or not before or not after or before.get("steal_s") is None or after.get("steal_s") is None:
        return None
    wall = after["at"] - before["at"]
    return max(0.0, after["steal_s"] - before["steal_s"] - less_s) / wall if wall > 0 else None


def wait_for_steal_below(cpus: float, *, window_s: float = 1.0, most_s: float = 10.0, spin: bool = True) -> float:
    """Wait until the hypervisor steals under `cpus` over a window_s window (or most_s passed); the seconds waited.

    A steal episode lasts seconds to minutes: a measurement taken again at once would likely land in the same one.
    Steal is only counted while a vCPU wants to run, so a window slept through on halted CPUs reads none whatever
    the hypervisor does (run 51: such windows read calm, and each retake read 0.84-0.90 CPUs): spin keeps one CPU
    busy; idle CPUs kept polling (idle_cpus_polling) want to run already, and the window sleeps."""
    started = time.monotonic()
    while True:
        before = _steal_now()
        end = time.monotonic() + window_s
        if not spin:
            time.sleep(window_s)
        while time.monotonic() < end:
            pass  # runnable, as a measurement's endpoints are: the hypervisor's steal shows
        stolen = surely_stolen_cpus(before, _steal_now())
        waited = time.monotonic() - started
        if stolen is None or stolen < cpus or waited + window_s > most_s:
            return waited


def _steal_now() -> dict | None:
    """The host's steal counter now, {"steal_s", "at"}: the runner's in a guest (None without one), else this
    machine's."""
    if _elsewhere is not None:
        return _elsewhere()
    if inside_vm():
        return None
    return {"steal_s": host_steal_seconds(), "at": time.monotonic()}


def siblings_cpus(before: dict | None, after: dict | None) -> float | None:
    """Average number of CPUs the session's other processes (an xdist worker's siblings and their children: not
    counted as others) kept busy between two process_snapshot()s (None: unknown)."""
    if not before or not after or "mine" not in before or "mine" not in after:
        return None
    wall = after["at"] - before["at"]
    if wall <= 0:
        return None
    session = set(before["own"]) | set(after["own"])
    mine = set(before["mine"]) | set(after["mine"])
    return _ticks_spent(before, after, lambda pid: pid in session and pid not in mine) / wall


def own_cpu_seconds(root: int | None = None) -> float:
    """CPU time of root (default: this process), its waited-for children and every descendant still running."""
    if root is None or root == os.getpid():
        own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
        return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime + _live_descendants_cpu(os.getpid())
    return _process_cpu(root) + _live_descendants_cpu(root)


def _process_cpu(pid: int) -> float:
    """CPU seconds of pid and the children it waited for, from /proc (0 if it is gone)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            stat = f.read()
        return sum(int(x) for x in stat[stat.rfind(")") + 2 :].split()[11:15]) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError):
        return 0.0


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
        fields = stat[stat.rfind(")") + 2 :].split()  # after "pid (comm) ": state ppid ...
        try:
            parents[int(entry)] = int(fields[1])
            ticks[int(entry)] = sum(int(x) for x in fields[11:15])  # utime stime cutime cstime
        except (IndexError, ValueError):
            continue
    children: dict[int, list[int]] = {}
    for pid, ppid in parents.items():
        children.setdefault(ppid, []).append(pid)
    total, todo = 0, list(children.get(root, ()))
    while todo:
        pid = todo.pop()
        total += ticks.get(pid, 0)
        todo.extend(children.get(pid, ()))
    return total / os.sysconf("SC_CLK_TCK")


def cpu_snapshot(root: int | None = None) -> dict:
    """The host's busy seconds, root's process tree's (default: this process), and the time: two of them give
    others_cpus()."""
    return {
        "busy_s": host_busy_seconds(),
        "own_s": own_cpu_seconds(root),
        "steal_s": host_steal_seconds(),  # a guest's steal_cpus(): the hypervisor stalls its VM host's guests too
        "at": time.monotonic(),
        "cpus": os.cpu_count(),
    }


def others_cpus(before: dict | None, after: dict | None) -> float | None:
    """Average number of host CPUs processes outside this tree kept busy between two snapshots (None: unknown)."""
    if before and after and "processes" in before and "processes" in after:
        return _others_by_process(before, after)
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

    def other_cores(self) -> float | None:
        """Average number of host CPUs others kept busy (None where /proc/stat is unreadable)."""
        return others_cpus(self._start, cpu_snapshot())


def _others_by_process(before: dict, after: dict) -> float | None:
    """others_cpus() of two process_snapshot()s: the ticks of processes in neither snapshot's own tree."""
    wall = after["at"] - before["at"]
    if wall <= 0:
        return None
    own = set(before["own"]) | set(after["own"])
    return _ticks_spent(before, after, lambda pid: pid not in own) / wall


def _ticks_spent(before: dict, after: dict, counted: Callable[[int], bool]) -> float:
    """CPU seconds the counted processes of two process_snapshot()s spent between them: a process that existed
    before counts its difference, a pid reused by a new process counts whole, one that ended counts nothing."""
    earlier, spent = before["processes"], 0
    for pid, (ticks, started) in after["processes"].items():
        if counted(pid):
            then = earlier.get(pid)
            spent += ticks - then[0] if then is not None and then[1] == started else ticks
    return max(0.0, spent / os.sysconf("SC_CLK_TCK"))
