"""A world's links changing while a flow runs: each scheduled step applied in place, on time, from a timer thread."""

import threading
import time

from ..errors import LabError

__all__ = ["LinkChanges"]


class LinkChanges:
    """Applies the steps of every changing link of a world (Link fields holding a Schedule) from t=0 at start();
    stop() puts each link back as it started and returns what was applied.

    Each applied step: {"at": scheduled s, "applied_at": s when the kernel acked it, "end": the router end,
    "link": the direction as it became, "settings": what the kernel then held}.
    """

    def __init__(self, world):
        self.world = world
        steps = {}
        for end, way in world.changing_ends():
            for at, phase in way.changes:
                steps.setdefault(at, []).append((end, phase, way))
        self.plan = sorted(steps.items(), key=lambda step: step[0])  # [(at, [(end, phase, frame way)])]
        for _, changes in self.plan:
            world.prepare_change(changes)
        self.applied = []
        self.origin = None
        self._stop = threading.Event()
        self._thread = None
        self._failure = None

    def __bool__(self):
        return bool(self.plan)

    def start(self):
        """t=0 now; the steps follow on a daemon thread (none for a world whose links never change)."""
        if not self.plan:
            return self
        self.origin = time.monotonic()
        if self.plan:
            self._thread = threading.Thread(target=self._run, name="tcpnet-link-changes", daemon=True)
            self._thread.start()
        return self

    def _run(self):
        try:
            for at, changes in self.plan:
                # Event.wait wakes within a fraction of a millisecond of its timeout on Linux; stop() cuts it short.
                if self._stop.wait(max(0.0, self.origin + at - time.monotonic())):
                    return
                sent_at = time.monotonic()
                done = self.world.change(changes)
                for end, phase, _ in changes:
                    acked_at, settings = done[end.key]
                    self.applied.append({"at": at, "sent_at": sent_at - self.origin,
                                         "applied_at": acked_at - self.origin, "end": end.key,
                                         "link": phase.describe(), "settings": settings})
        except BaseException as exc:  # reported by stop(): a missed step makes the measurement wrong
            self._failure = exc

    def stop(self):
        """Stop applying steps; put every changed link back as it started; return the applied steps."""
        if self.origin is None:
            return []
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self.applied and not self.world.closed:
            self.world.change([(end, way.phases[0][1], way) for end, way in self.world.changing_ends()])
        if self._failure is not None:
            raise LabError(f"a scheduled link change failed: {self._failure}") from self._failure
        return list(self.applied)
