"""Send a world's scheduled link changes at their times, from a process of its own. Stdlib only.

Usage: python -I -S _link_timer.py (by LinkChanges; its netlink sockets are inherited file descriptors).

A timer thread of the test's process woke late beside a CPU hog (docs/schedules.md, "How a step is
applied"): to run, it needs the interpreter lock, which the samplers' threads hold (and a garbage
collection they set off holds longer; docs/design.md, pitfall 18). This process holds nothing else.
As root it runs SCHED_FIFO (it only sleeps and sends), else at nice -10 where it may, else at the
parent's priority; below SCHED_FIFO it asks for a short time slice (SLICE_NS), which a kernel from
6.12 on honours: a task waking with the earliest deadline runs first. It sleeps to each step's time
and never spins: a spin used up its slice, and beside a CPU hog the scheduler then made it wait a
slice of the hog's (docs/schedules.md, "How a step is applied").

Protocol, one JSON line each way: it prints {"ready": priority}; reads the plan, [{"at": monotonic
s, "messages": [[fd, hex bytes, [seq, ...]], ...]}, ...]; prints {"step": i, "sent_at", "acked_at",
"error"} as each step's acks arrive. It dies with its parent (PR_SET_PDEATHSIG).
"""

import ctypes
import json
import os
import socket
import struct
import sys
import time
from collections import namedtuple

_HEADER = struct.Struct("=IHHII")  # nlmsghdr: length, type, flags, seq, pid
_NLMSG_ERROR = 2
#: The time slice a timer without SCHED_FIFO asks for (sched_setattr's sched_runtime; the kernel's floor is 0.1 ms).
SLICE_NS = 100_000
#: sched_setattr and sched_getattr, by machine (other machines keep the default slice).
_SCHED_ATTR_CALLS = {"x86_64": (314, 315), "aarch64": (274, 275)}
_SCHED_ATTR = struct.Struct("=IIQiIQQQ")  # struct sched_attr up to sched_period: 48 bytes
_SchedAttr = namedtuple("_SchedAttr", "size policy flags nice priority runtime deadline period")


def _die_with_parent(parent):
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, 9)  # PR_SET_PDEATHSIG, SIGKILL
    except (OSError, AttributeError):
        pass
    if os.getppid() != parent:  # the parent died before the request took effect
        sys.exit(0)


def _raise_priority():
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))
        return "SCHED_FIFO 1"
    except (OSError, AttributeError):
        pass
    try:
        os.setpriority(os.PRIO_PROCESS, 0, -10)
    except OSError:
        pass
    nice = os.getpriority(os.PRIO_PROCESS, 0)
    return f"nice {nice}, 0.1 ms slice" if _short_slice(nice) else f"nice {nice}"


def _short_slice(nice):
    """Ask for a SLICE_NS time slice at this nice (no privilege needed); True if the kernel reads it back."""
    calls = _SCHED_ATTR_CALLS.get(os.uname().machine)
    if calls is None:
        return False
    setattr_call, getattr_call = calls
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        request = _SchedAttr(_SCHED_ATTR.size, os.SCHED_OTHER, 0, nice, 0, SLICE_NS, 0, 0)
        asked = ctypes.create_string_buffer(_SCHED_ATTR.pack(*request))
        if libc.syscall(setattr_call, 0, asked, 0) != 0:
            return False
        held = ctypes.create_string_buffer(_SCHED_ATTR.size)
        if libc.syscall(getattr_call, 0, held, _SCHED_ATTR.size, 0) != 0:
            return False
    except (OSError, AttributeError):
        return False
    # Before 6.12 the kernel ignores the slice asked for and reads back 0.
    return _SchedAttr(*_SCHED_ATTR.unpack(held.raw)).runtime == SLICE_NS


def _await_acks(sock, seqs):
    """Read until every seq is acked; the first refusal as text, else None."""
    pending, error = set(seqs), None
    while pending:
        data = sock.recv(65536)
        offset = 0
        while offset + _HEADER.size <= len(data):
            length, kind, _, seq, _ = _HEADER.unpack_from(data, offset)
            if kind == _NLMSG_ERROR and seq in pending:
                pending.discard(seq)
                code = -struct.unpack_from("=i", data, offset + _HEADER.size)[0]
                if code and error is None:
                    error = f"request {seq}: {os.strerror(code)}"
            offset += max(_HEADER.size, (length + 3) & ~3)
    return error


def main():
    _die_with_parent(int(sys.argv[1]))
    priority = _raise_priority()
    print(json.dumps({"ready": priority}), flush=True)
    line = sys.stdin.readline()
    if not line:
        return
    plan = json.loads(line)
    # One socket object per descriptor: a second one's collection would close the first's.
    socks = {fd: socket.socket(fileno=fd) for fd in {fd for step in plan for fd, _, _ in step["messages"]}}
    for number, step in enumerate(plan):
        delay = step["at"] - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        while time.monotonic() < step["at"]:
            pass
        sent_at, error = time.monotonic(), None
        for fd, data, seqs in step["messages"]:
            socks[fd].send(bytes.fromhex(data))
            error = _await_acks(socks[fd], seqs) or error
        print(
            json.dumps({"step": number, "sent_at": sent_at, "acked_at": time.monotonic(), "error": error}), flush=True
        )


if __name__ == "__main__":
    main()
