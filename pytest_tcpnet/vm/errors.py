"""The error type of the VM runner, carrying the exit code to return."""

from __future__ import annotations

# pytest's own exit codes, repeated here so that vm/ does not import pytest.
EXIT_INTERRUPTED = 2
EXIT_INTERNAL_ERROR = 3
EXIT_USAGE_ERROR = 4


class VMError(Exception):
    """A VM could not be set up or run; ``str(err)`` says why and what to do."""

    def __init__(self, message: str, exit_code: int = EXIT_INTERNAL_ERROR) -> None:
        super().__init__(message)
        self.exit_code = exit_code


class VMUsageError(VMError):
    """Something missing or wrong before any VM started (tool, kernel, option value)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, EXIT_USAGE_ERROR)
