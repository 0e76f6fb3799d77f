"""Pure analysis of measurements: series, expert-event counts, limited-by diagnosis, plots (matplotlib, lazy)."""
