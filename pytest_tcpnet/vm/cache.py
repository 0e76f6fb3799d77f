"""The project's own cache directory on the host: the only place the VM runner stores what it derives."""

from __future__ import annotations

import os
import stat
from pathlib import Path


def cache_dir() -> Path:
    """Return ``$XDG_CACHE_HOME/pytest-tcpnet`` (default ``~/.cache/pytest-tcpnet``)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "pytest-tcpnet"


def private_dir(*parts: str) -> Path:
    """Create (mode 0700) and return a directory under ``cache_dir()`` that only we can write."""
    path = cache_dir().joinpath(*parts)
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o022:
        raise OSError(f"{path} is not a directory owned by uid {os.geteuid()} and writable only by it")
    return path


def write_atomically(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` via a private temporary file and a rename (readers never see half)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
