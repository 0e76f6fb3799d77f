"""Results files: every measured flow of a session as one JSON line, and reading them back."""

import datetime
import json
import os
import platform
import uuid
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
        self.count = 0

    def write(self, rows):
        for row in rows:
            self._file.write(json.dumps({**row, "run": self.run}, sort_keys=True, default=str) + "\n")
            self.count += 1
        self._file.flush()

    def close(self):
        self._file.close()


def read_rows(paths):
    """All rows of several results files, each tagged with 'source' (the file's name); bad lines name file:line."""
    rows = []
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
                if not isinstance(row, dict) or "measured_bps" not in row or "test" not in row:
                    raise ValueError(f"{path}:{number}: not a pytest-tcpnet flow row (needs 'test' and 'measured_bps')")
                row.setdefault("source", os.path.basename(path))
                rows.append(row)
    return rows
