"""Running a workload on a pair: measurement slots, counters before/after, socket sampling, results."""

from .slots import measurement_slot

__all__ = ["measurement_slot"]
