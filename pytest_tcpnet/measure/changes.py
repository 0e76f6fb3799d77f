"""A world's links changing while a flow runs: each scheduled step applied in place, on time, by a timer process."""

import json
import os
import subprocess
import sys
import threading
import time

from ..errors import LabError

__all__ = ["LinkChanges"]

_TIMER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_link_timer.py")


class LinkChanges:
    """Applies the steps of every changing link of a world (Link fields holding a Schedule) from t=0 at start();
    stop() puts each link back as it started and returns what was applied.

    The steps' messages are encoded at construction and sent by a process of their own (_link_timer.py),
    which shares no interpreter lock with the samplers and workloads of this one. Each applied step:
    {"at": scheduled s, "sent_at": s it went out, "applied_at": s the kernel acked it, "end": the router end,
    "link": the direction as it became, "settings": what the kernel then held, "timer": the timer's priority}.
    """

    def __init__(self, world):
        self.world = world
        steps = {}
        for end, way in world.changing_ends():
            for at, phase in way.changes:
                steps.setdefault(at, []).append((end, phase, way))
        self.plan = sorted(steps.items(), key=lambda step: step[0])  # [(at, [(end, phase, frame way)])]
        self.applied = []
        self.origin = None
        self.timer_priority = None  # what the timer process got: "SCHED_FIFO 1", "nice -10", ...
        self._messages, self._timer, self._reader, self._failure = [], None, None, None
        if not self.plan:
            return
        seq = 1
        for _, changes in self.plan:
            messages = world.timed_change(changes, seq)
            self._messages.append(messages)
            seq = messages[-1][2][-1] + 1
        # Started now, so its start-up overlaps the workloads' set-up (tens of ms here, more in an emulated guest).
        self._timer = subprocess.Popen(
            [sys.executable, "-I", "-S", _TIMER, str(os.getpid())],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            pass_fds=sorted({fd for step in self._messages for fd, _, _ in step}),
        )

    def __bool__(self):
        return bool(self.plan)

    def wait_ready(self):
        """Wait until the timer process can send; call it before any data moves, so that t=0 is not late.

        A slow start of the timer process (an emulated guest beside a CPU hog) would otherwise move t=0 into a
        flow that already runs, and every step with it (docs/schedules.md, "How a step is applied").
        """
        if not self.plan or self.timer_priority is not None:
            return self
        ready = self._timer.stdout.readline()
        if not ready:
            self._kill()
            raise LabError(f"the link timer process exited before it started (status {self._timer.wait()})")
        self.timer_priority = json.loads(ready)["ready"]
        return self

    def start(self):
        """t=0 now; the steps follow from the timer process (none for a world whose links never change)."""
        if not self.plan:
            return self
        self.wait_ready()
        self.origin = time.monotonic()
        plan = [
            {"at": self.origin + at, "messages": [[fd, data.hex(), seqs] for fd, data, seqs in messages]}
            for (at, _), messages in zip(self.plan, self._messages)
        ]
        self._timer.stdin.write(json.dumps(plan) + "\n")
        self._timer.stdin.flush()
        self._reader = threading.Thread(target=self._read, name="tcpnet-link-changes", daemon=True)
        self._reader.start()
        return self

    def _read(self):
        try:
            for line in self._timer.stdout:
                report = json.loads(line)
                at, changes = self.plan[report["step"]]
                if report["error"]:
                    raise LabError(f"the step at {at:g} s was refused: {report['error']}")
                settings = self.world.read_back(changes)
                for end, phase, _ in changes:
                    self.applied.append(
                        {
                            "at": at,
                            "sent_at": report["sent_at"] - self.origin,
                            "applied_at": report["acked_at"] - self.origin,
                            "end": end.key,
                            "link": phase.describe(),
                            "settings": settings[end.key],
                            "timer": self.timer_priority,
                        }
                    )
        except BaseException as exc:  # reported by stop(): a missed step makes the measurement wrong
            self._failure = exc

    def _kill(self):
        if self._timer is not None and self._timer.poll() is None:
            self._timer.kill()
        if self._timer is not None:
            self._timer.wait()
            for pipe in (self._timer.stdin, self._timer.stdout):
                try:
                    pipe.close()
                except OSError:  # a plan it never read: the pipe is broken
                    pass

    def stop(self):
        """Stop applying steps; put every changed link back as it started; return the applied steps."""
        self._kill()  # steps not yet sent are not sent
        if self._reader is not None:
            self._reader.join()
        if self.origin is None:
            return []
        if self.applied and not self.world.closed:
            self.world.change([(end, way.phases[0][1], way) for end, way in self.world.changing_ends()])
        if self._failure is not None:
            raise LabError(f"a scheduled link change failed: {self._failure}") from self._failure
        return list(self.applied)
