"""What this host carries on a path no link slows: a few short unshaped flows, once per process, the model's "host"
bound (model.HostLimit). An unshaped flow is bound by the CPU that copies, checksums and forwards its bytes, which
the window and buffer bounds know nothing of: without it such a row read "expected 27.7 Gbit/s (rwnd)", ratio 0.05.
"""

import functools
import os

from . import guest
from .errors import LabError, MissingCapability
from .lab import Lab
from .model import HostLimit

__all__ = ["calibrate_host", "RUNS", "RUN_S"]

#: Short flows, their median counted: one run can be slowed by a neighbour's burst or sped by an idle moment (one
#: flow here read 3.6-5.5 Gbit/s from run to run); more runs only cost time (each process calibrates once).
RUNS, RUN_S = 3, 0.5


@functools.cache
def calibrate_host(*, runs=RUNS, run_s=RUN_S):
    """(HostLimit, a line that says so) from `runs` unshaped downloads of `run_s` each through a pair of this host's
    namespaces (defaults as a test's pair: the kernel's default cc, autotuned buffers, the lab's endpoint offloads),
    or (None, why) where it means nothing (a time-travel guest, whose CPU work takes no time) or cannot run. Once per
    process: pytester's in-process sessions and every test of a worker share it."""
    if guest.time_travel():
        return None, "tcpnet: no host limit: a time-travel guest's CPU work takes no time"
    try:
        with Lab(sweep=False) as lab:
            pair = lab.pair()
            # Sampled as a test's flows are: sampling TCP_INFO costs an unshaped flow CPU, so some of its rate.
            results = [pair.transfer(duration=run_s) for _ in range(runs)]
    except (LabError, MissingCapability, OSError) as exc:
        return None, f"tcpnet: no host limit: not calibrated ({exc})"
    rates = sorted(result.throughput_bps for result in results)
    busy = [r.host_contention_cpus for r in results if r.host_contention_cpus is not None]
    limit = HostLimit(
        bps=rates[len(rates) // 2],
        runs_bps=tuple(r.throughput_bps for r in results),
        run_s=run_s,
        kernel=os.uname().release,
        where=guest.conditions() or "host",
        contention_cpus=max(busy) if busy else None,
    )
    return limit, f"tcpnet: host limit: {limit.describe()}"
