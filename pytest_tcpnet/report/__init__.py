"""Pure reporting: session summary rows, JUnit properties, results files and merging them (no pytest here)."""

from .artifacts import KEEP_CHOICES, ArtifactStore
from .merge import Comparison, compare, comparison_table
from .results_file import ResultsWriter, read_rows
from .rows import flow_row, flow_rows
from .table import junit_properties, summary_table

__all__ = [
    "KEEP_CHOICES",
    "ArtifactStore",
    "Comparison",
    "compare",
    "comparison_table",
    "ResultsWriter",
    "read_rows",
    "flow_row",
    "flow_rows",
    "junit_properties",
    "summary_table",
]
