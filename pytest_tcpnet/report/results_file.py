"""Results files: every measured flow of a session as one JSON line, and reading them back."""

import datetime
import json
import os
import platform
import uuid
from dataclasses import dataclass, field
from pathlib import Path


class ResultsWriter:
    """Writes flow rows to a JSON-lines file as they arrive; one process (the xdist controller) owns it.

    Each line is written with a single write() and flushed, so a crashed session keeps every
    flow reported before the crash. ``run`` (host, start time, label) is added to every row so
    merged files stay traceable; its ``id`` tells the runs of a baseline apart. ``append`` adds to
    an existing file (a baseline saved over several runs) instead of replacing it.
    """

    def __init__(self, path, *, label=None, append=False):
        self.path = Path(path)
        # Made as JUnit's --junitxml makes its own: a CI job names test-results/x.jsonl before anything exists.
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except (FileExistsError, NotADirectoryError):
            raise ValueError(f"{self.path.parent} is not a directory") from None
        self.run = {
            "host": platform.node(),
            "started": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "label": label,
            "id": uuid.uuid4().hex[:12],
        }
        self._file = open(self.path, "a" if append else "w", encoding="utf-8")
        self.count = 0  # flows written

    def write(self, rows):
        for row in rows:
            self._file.write(json.dumps({**row, "run": self.run}, sort_keys=True, default=str) + "\n")
            self.count += row.get("kind") not in (TEST_KIND, SESSION_KIND)  # flows: what the summary line counts
        self._file.flush()

    def close(self):
        self._file.close()


#: Line kinds that are not flows: each test's outcome, and each session's collection (what it was to run).
TEST_KIND, SESSION_KIND = "test", "session"
#: Results-file schemas this version reads: 1 (flows only) and 2 (flows, tests and sessions).
READABLE_SCHEMAS = (1, 2)


@dataclass
class Results:
    """What results files hold: flow rows, one row per test that ran (its outcome) and one per session."""

    flows: list = field(default_factory=list)
    tests: list = field(default_factory=list)
    sessions: list = field(default_factory=list)


def read_results(paths):
    """Every line of several results files by kind, each tagged with 'source' (the file's name); a line this
    version cannot read (not JSON, not a row, another schema) is an error naming file:line."""
    results = Results()
    for path in paths:
        path = Path(path)
        if not path.is_file():
            raise ValueError(f"results file {path} does not exist")
        with open(path, encoding="utf-8") as lines:
            for number, line in enumerate(lines, 1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise ValueError(f"{path}:{number}: not a JSON line ({exc.msg})") from None
                if not isinstance(row, dict) or "test" not in row and row.get("kind") != SESSION_KIND:
                    raise ValueError(f"{path}:{number}: not a pytest-tcpnet results row (no 'test')")
                if row.get("schema") not in READABLE_SCHEMAS:
                    raise ValueError(
                        f"{path}:{number}: written by another version of pytest-tcpnet (schema "
                        f"{row.get('schema')!r}; this one reads {', '.join(map(str, READABLE_SCHEMAS))})"
                    )
                row.setdefault("source", os.path.basename(path))
                row.setdefault("path", str(path))  # shards' files often share a name, in directories of their own
                if row.get("kind") == TEST_KIND:
                    results.tests.append(row)
                elif row.get("kind") == SESSION_KIND:
                    results.sessions.append(row)
                elif "measured_bps" not in row:
                    raise ValueError(f"{path}:{number}: not a pytest-tcpnet flow row (needs 'test' and 'measured_bps')")
                else:
                    results.flows.append(row)
    return results


def read_rows(paths):
    """The flow rows of several results files (see read_results), each tagged with 'source'."""
    return read_results(paths).flows
