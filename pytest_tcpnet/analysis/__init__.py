"""Pure analysis of measurements: series from captures, limited-by diagnosis, plots (matplotlib, lazily)."""
