"""What the applications at either end do: a paced or pausing reader/writer, and one flow of several.

Validated at construction, like Link and Host, so a bad spec fails before anything starts.
"""

import math
from dataclasses import dataclass

from .specs import check_congestion_control
from .units import format_size, format_time, parse_size, parse_time
from .validation import check_integer, check_number, is_integer, is_number, refuse

__all__ = ["Pace", "Pause", "RateLimit", "Flow", "Cbr", "check_buffer_bytes", "check_positive_bytes"]


def _positive_number(field, value):
    return check_number(field, value, 0, low_open=True)


MAX_TRANSFER_BYTES = 2**40  # 1 TiB: far beyond any test, small enough that deadlines stay computable


def check_positive_bytes(field, value):
    """A byte count: a positive int (up to 1 TiB) or a size string like '1mb'."""
    nbytes = parse_size(value, field) if isinstance(value, str) else value
    if isinstance(value, str) and math.isfinite(nbytes) and nbytes == int(nbytes):
        nbytes = int(nbytes)
    if not is_integer(nbytes) or not 0 < nbytes <= MAX_TRANSFER_BYTES:
        refuse(field, "a positive int of bytes up to 2^40 (or a size like '1mb')", value)  # the value as given
    return nbytes


def check_buffer_bytes(field, value):
    """A socket buffer request: 1..2^31-1 bytes (setsockopt takes an int), or a size like '16kb'."""
    nbytes = parse_size(value, field) if isinstance(value, str) else value  # a bad unit says so itself
    # Finite first: int() of an infinity or NaN raises OverflowError or a message about NaN, not ours.
    if not is_number(nbytes) or nbytes != int(nbytes) or not 0 < nbytes <= 2**31 - 1:
        refuse(field, "a whole number of bytes in 1..2^31-1 (or a size like '16kb')", value)
    return int(nbytes)


@dataclass(frozen=True)
class Pace:
    """A reader (or writer) that moves `chunk` bytes `per_second` times a second (C4's slow reader)."""

    chunk: int = 1024
    per_second: float = 20.0

    def __post_init__(self):
        object.__setattr__(self, "chunk", check_buffer_bytes("Pace.chunk", self.chunk))
        _positive_number("Pace.per_second", self.per_second)
        if self.per_second > 100_000:
            raise ValueError(f"Pace.per_second: at most 100000 (a timer tick is ~10 us), got {self.per_second!r}")

    @property
    def rate_bps(self):
        """The application's own rate ceiling in bit/s."""
        return self.chunk * self.per_second * 8

    @property
    def by(self):
        """What sets the rate, for the model's `why` (RateLimit names the program's option)."""
        return "paced"

    def describe(self):
        """'1 kB x 20/s'."""
        return f"{format_size(self.chunk)} x {self.per_second:g}/s"


@dataclass(frozen=True)
class RateLimit:
    """A program's own rate limit (curl's --limit-rate): bytes per second on average, named by the option set."""

    bytes_per_second: float
    by: str

    def __post_init__(self):
        _positive_number("RateLimit.bytes_per_second", self.bytes_per_second)

    @property
    def rate_bps(self):
        """The application's own rate ceiling in bit/s."""
        return self.bytes_per_second * 8

    def describe(self):
        """'curl --limit-rate 200k (204.8 kB/s)'."""
        return f"{self.by} ({format_size(self.bytes_per_second)}/s)"


@dataclass(frozen=True)
class Pause:
    """Stop reading (or writing) after `after` bytes for `seconds`, then carry on at full speed (C14, C16)."""

    after: int
    seconds: float

    def __post_init__(self):
        object.__setattr__(self, "after", check_positive_bytes("Pause.after", self.after))
        seconds = parse_time(self.seconds, "Pause.seconds")
        if not math.isfinite(seconds) or seconds <= 0 or seconds > 600:
            raise ValueError(f"Pause.seconds: must be in (0, 600] seconds, got {self.seconds!r}")
        object.__setattr__(self, "seconds", float(seconds))

    def describe(self):
        """'pause 2 s after 1 MB'."""
        return f"pause {format_time(self.seconds)} after {format_size(self.after)}"


def check_reader(field, value):
    """None, a Pace or a Pause."""
    if value is not None and not isinstance(value, (Pace, Pause)):
        raise TypeError(f"{field}: expected None, Pace(...) or Pause(...), got {value!r}")
    return value


@dataclass(frozen=True)
class Flow:
    """One bulk flow (Pair.concurrent takes several): size or duration, buffers, cc, start offset, app behaviour.

    write_size is the bytes per send() call: the kernel checks SO_SNDBUF only when it starts a
    new skb, so one large write can overshoot a small buffer (C11).
    """

    nbytes: "int | None" = None
    duration: "float | None" = None
    direction: str = "download"
    sndbuf: "int | None" = None
    rcvbuf: "int | None" = None
    cc: "str | None" = None
    start: float = 0.0
    reader: "Pace | Pause | None" = None
    writer: "Pace | Pause | None" = None
    write_size: int = 1 << 20

    def __post_init__(self):
        if self.nbytes is not None:
            object.__setattr__(self, "nbytes", check_positive_bytes("nbytes", self.nbytes))
        if self.duration is not None:
            duration = parse_time(self.duration, "duration")
            if not math.isfinite(duration) or not 0 < duration <= 3600:
                raise ValueError(f"duration: must be in (0, 3600] seconds, got {self.duration!r}")
            object.__setattr__(self, "duration", float(duration))
        if (self.nbytes is None) == (self.duration is None):
            raise ValueError("nbytes/duration: give exactly one of them (bytes to move, or seconds to send for)")
        if self.direction not in ("download", "upload"):
            raise ValueError(f"direction: must be 'download' (server -> client) or 'upload', got {self.direction!r}")
        for name in ("sndbuf", "rcvbuf"):
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, check_buffer_bytes(name, value))
        if self.cc is not None:
            check_congestion_control("cc", self.cc)
        start = parse_time(self.start, "start")
        if not math.isfinite(start) or not 0 <= start <= 3600:
            raise ValueError(f"start: must be in [0, 3600] seconds, got {self.start!r}")
        object.__setattr__(self, "start", float(start))
        object.__setattr__(self, "write_size", check_buffer_bytes("write_size", self.write_size))
        check_reader("reader", self.reader)
        check_reader("writer", self.writer)
        for name in ("reader", "writer"):
            pause = getattr(self, name)
            if isinstance(pause, Pause) and self.nbytes is not None and pause.after >= self.nbytes:
                raise ValueError(
                    f"{name}: Pause(after={pause.after}) is not before the end of the "
                    f"{self.nbytes}-byte transfer; pause after fewer bytes"
                )


#: UDP payload that fits one 1500-byte frame under IPv6 (1500 - 40 - 8).
MAX_CBR_PACKET = 1452


@dataclass(frozen=True)
class Cbr:
    """Unresponsive cross traffic: UDP datagrams at a constant bit rate, for `duration` seconds from `start`.

    rate counts the UDP payload (packet_size bytes per datagram); each datagram carries its
    sequence number and send time, so the receiver measures loss and one-way delay on the
    lab's one clock. Runs beside TCP flows in Pair.concurrent and Pair.latency_under_load.
    """

    rate: "float | str"
    duration: "float | str"
    packet_size: int = 1200
    start: float = 0.0
    direction: str = "download"

    def __post_init__(self):
        from .units import parse_rate

        rate = parse_rate(self.rate, "Cbr.rate")
        if not math.isfinite(rate) or not 0 < rate <= 1e9:
            raise ValueError(f"Cbr.rate: must be > 0 and at most 1 Gbit/s (a Python sender's reach), got {self.rate!r}")
        object.__setattr__(self, "rate", float(rate))
        duration = parse_time(self.duration, "Cbr.duration")
        if not math.isfinite(duration) or not 0 < duration <= 3600:
            raise ValueError(f"Cbr.duration: must be in (0, 3600] seconds, got {self.duration!r}")
        object.__setattr__(self, "duration", float(duration))
        size = self.packet_size
        check_integer(
            "Cbr.packet_size", size, 16, MAX_CBR_PACKET, must=f"UDP payload bytes in 16..{MAX_CBR_PACKET} (one frame)"
        )
        if rate / (8 * size) > 100_000:
            raise ValueError(
                f"Cbr.rate: {rate / (8 * size):.0f} datagrams/s of {size} B is beyond a Python sender "
                "(at most 100000/s); use bigger packets"
            )
        start = parse_time(self.start, "Cbr.start")
        if not math.isfinite(start) or not 0 <= start <= 3600:
            raise ValueError(f"Cbr.start: must be in [0, 3600] seconds, got {self.start!r}")
        object.__setattr__(self, "start", float(start))
        if self.direction not in ("download", "upload"):
            raise ValueError(
                f"Cbr.direction: must be 'download' (server -> client) or 'upload', got {self.direction!r}"
            )

    def describe(self):
        """'UDP 5 Mbit/s (1200 B datagrams) for 8 s'."""
        from .units import format_rate

        return f"UDP {format_rate(self.rate)} ({self.packet_size} B datagrams) for {format_time(self.duration)}" + (
            f" from {format_time(self.start)}" if self.start else ""
        )
