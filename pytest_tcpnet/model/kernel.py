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

    @property
    def clamps_set_buffers_at_the_initial_ratio(self):
        """True for 6.6-6.9: a socket whose SO_RCVBUF is set keeps the window the initial scaling_ratio (~25%) gives.

        dfa2f0483360 (6.6) sized windows from scaling_ratio, whose first guess was about a quarter of
        the buffer; a buffer the application locked never grew past it: the 2024 case of source 002,
        where Kafka consumers' windows halved. 697a6c8cec03 raised the first guess to ~50% (6.10).
        """
        return (6, 6) <= (self.major, self.minor) < (6, 10)

    @property
    def window_rule(self):
        """The receive-window rule this release follows, by name (docs/model.md)."""
        if not self.uses_scaling_ratio:
            return "the buffer less 1/2^tcp_adv_win_scale, kernel < 6.6"
        if self.clamps_set_buffers_at_the_initial_ratio:
            return "scaling_ratio from ~25%, kernel 6.6-6.9 (a set SO_RCVBUF keeps it: the 2024 halving)"
        return "scaling_ratio, kernel >= 6.10"

    def __str__(self):
        return f"{self.major}.{self.minor}.{self.patch}"
