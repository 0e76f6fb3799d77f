"""Exceptions shared by every layer (stdlib only, so the pure model can raise them too)."""

__all__ = ["TcpnetError", "LabError", "MissingCapability"]


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
