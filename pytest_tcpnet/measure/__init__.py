"""Running a workload on a pair: measurement slots, counters before/after, socket sampling, results."""
