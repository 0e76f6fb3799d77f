"""Processes inside lab namespaces: bulk sender/receiver, TCP_INFO decoding, process tracking."""

from .process import NamespaceProcesses, nsenter_path
from .tcpinfo import decode_tcp_info, read_tcp_info

__all__ = ["NamespaceProcesses", "nsenter_path", "decode_tcp_info", "read_tcp_info", "BULK_SCRIPT"]

import os as _os

#: The bulk sender/receiver, started as a script so it does not import this package.
BULK_SCRIPT = _os.path.join(_os.path.dirname(__file__), "bulk.py")
