"""Kernel release strings and the TCP behaviour that depends on them."""

import re
from dataclasses import dataclass

__all__ = ["KernelVersion"]


@dataclass(frozen=True, order=True)
class KernelVersion:
    """A kernel release reduced to (major, minor, patch) for comparisons."""

    major: int
    minor: int
    patch: int = 0

    @classmethod
    def parse(cls, release):
        """Parse '6.1.0-56-amd64' or '6.18.44-fc' into KernelVersion(6, 1, 0)."""
        match = re.match(r"^(\d+)\.(\d+)(?:\.(\d+))?", release)
        if not match:
            raise ValueError(f"kernel release: cannot parse {release!r}; expected 'MAJOR.MINOR[.PATCH]…'")
        return cls(int(match.group(1)), int(match.group(2)), int(match.group(3) or 0))

    @property
    def uses_scaling_ratio(self):
        """True from 6.6 on: the receive window overhead is measured (scaling_ratio), not tcp_adv_win_scale."""
        return (self.major, self.minor) >= (6, 6)

    def __str__(self):
        return f"{self.major}.{self.minor}.{self.patch}"
