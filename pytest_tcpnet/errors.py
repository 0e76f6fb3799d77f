"""Exceptions shared by every layer (stdlib only, so the pure model can raise them too)."""

import shutil

__all__ = ["TcpnetError", "LabError", "MissingCapability", "program_path"]


class TcpnetError(Exception):
    """Base class of pytest-tcpnet's own errors."""


class LabError(TcpnetError):
    """Building, running or tearing down a lab failed; the message says which step and why."""


class MissingCapability(TcpnetError):
    """This machine lacks something a lab needs (privilege, netem, a congestion control, a tool).

    The pytest plugin turns it into a skip with this reason, or a failure under --tcpnet-strict.
    """

    def __init__(self, capability, reason):
        super().__init__(f"{capability}: {reason}")
        self.capability = capability
        self.reason = reason


def program_path(program, *, package, capability=None, description=None):
    """Path of program on PATH, or MissingCapability naming the Debian package that provides it."""
    path = shutil.which(program)
    if path is None:
        raise MissingCapability(
            capability or program, f"{description or program} is not on PATH (apt-get install {package})"
        )
    return path


class UnboundedPathWarning(UserWarning):
    """A world whose flows nothing but the CPU bounds, where the CPU takes no time (a time-travel guest)."""
