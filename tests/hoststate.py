"""A snapshot of everything the host namespace must keep (the product's host guard, used by the tests)."""

from pytest_tcpnet.hostguard import VOLATILE_SYSCTLS, differences, snapshot

__all__ = ["VOLATILE_SYSCTLS", "differences", "snapshot"]
