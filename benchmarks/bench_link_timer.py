"""How late does the link timer send a step? The shipped timer process (measure/_link_timer.py), as root
(SCHED_FIFO) and as an unprivileged user (nice 0, a 0.1 ms slice where the kernel honours it), side by side.

Run as root, holding the shared timing lock:
    flock /tmp/tcpnet-dev-vm.lock python3 benchmarks/bench_link_timer.py [steps] [hogs]
Each round gives each timer a plan of `steps` steps 15 ms apart with nothing to send (the sending is netlink's
cost, the same for both) while `hogs` busy loops (default: one per core, plus one) keep every CPU busy; rounds
alternate the two so load changes hit both. Prints each one's lateness (sent_at - at) at p50, p90, p99 and max.
Timing promises are judged here, not in tests (docs/schedules.md, "How a step is applied").
"""

import json
import os
import subprocess
import sys
import time

TIMER = os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "pytest_tcpnet", "measure", "_link_timer.py"
)
NOBODY = 65534


def _unprivileged():
    os.setgid(NOBODY)
    os.setuid(NOBODY)


def lateness(steps, privileged):
    """[seconds each step was sent after its time] and the priority the timer reported."""
    timer = subprocess.Popen(
        [sys.executable, "-I", "-S", TIMER, str(os.getpid())],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        preexec_fn=None if privileged else _unprivileged,
    )
    try:
        priority = json.loads(timer.stdout.readline())["ready"]
        start = time.monotonic() + 0.1
        plan = [{"at": start + 0.015 * i, "messages": []} for i in range(steps)]
        timer.stdin.write(json.dumps(plan) + "\n")
        timer.stdin.flush()
        late = [json.loads(timer.stdout.readline())["sent_at"] - step["at"] for step in plan]
    finally:
        timer.kill()
        timer.wait()
    return late, priority


def percentiles(values):
    ordered = sorted(values)
    pick = lambda q: ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1e3  # noqa: E731
    return f"p50 {pick(0.5):.3f}, p90 {pick(0.9):.3f}, p99 {pick(0.99):.3f}, max {ordered[-1] * 1e3:.3f} ms"


def main():
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 500
    hogs = int(sys.argv[2]) if len(sys.argv) > 2 else (os.cpu_count() or 1) + 1
    if os.geteuid() != 0:
        sys.exit("run as root: the unprivileged timer is started as user nobody")
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(hogs)]
    try:
        found = {True: [], False: []}
        priorities = {}
        for _ in range(2):
            for privileged in (True, False):
                late, priorities[privileged] = lateness(steps // 2, privileged)
                found[privileged].extend(late)
    finally:
        for hog in busy:
            hog.kill()
            hog.wait()
    print(
        f"link timer beside {hogs} CPU hogs on {os.cpu_count()} cores, kernel {os.uname().release}, {steps} steps each:"
    )
    for privileged in (True, False):
        print(f"  {priorities[privileged]:>24}: sent {percentiles(found[privileged])} late")


if __name__ == "__main__":
    main()
