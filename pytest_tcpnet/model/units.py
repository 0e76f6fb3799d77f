"""Parse tc-style quantities ("100mbit", "20ms", "1%", "64kb") into SI base units."""

import math
import re

from .validation import is_real

__all__ = [
    "MTU_FRAME_BYTES",
    "parse_rate",
    "parse_time",
    "parse_fraction",
    "parse_size",
    "format_rate",
    "format_time",
    "format_size",
]

#: Bytes one full-size packet occupies on the veth (1500 MTU + Ethernet header); used to
#: turn byte sizes and BDPs into the packet counts qdisc limits are expressed in.
MTU_FRAME_BYTES = 1514

# tc(8) units. Rates are decimal (kbit = 1000 bit/s), "bps" means *bytes* per second;
# sizes are binary (kb = 1024 bytes), exactly as tc parses them.
_RATE_UNITS = {
    "bit": 1,
    "kbit": 1e3,
    "mbit": 1e6,
    "gbit": 1e9,
    "tbit": 1e12,
    "kibit": 1024,
    "mibit": 1024**2,
    "gibit": 1024**3,
    "tibit": 1024**4,
    "bps": 8,
    "kbps": 8e3,
    "mbps": 8e6,
    "gbps": 8e9,
    "tbps": 8e12,
}
_TIME_UNITS = {
    "s": 1,
    "sec": 1,
    "secs": 1,
    "ms": 1e-3,
    "msec": 1e-3,
    "msecs": 1e-3,
    "us": 1e-6,
    "usec": 1e-6,
    "usecs": 1e-6,
    "ns": 1e-9,
    "nsec": 1e-9,
    "nsecs": 1e-9,
}
_SIZE_UNITS = {
    "b": 1,
    "k": 1024,
    "kb": 1024,
    "m": 1024**2,
    "mb": 1024**2,
    "g": 1024**3,
    "gb": 1024**3,
    "kbit": 1024 / 8,
    "mbit": 1024**2 / 8,
    "gbit": 1024**3 / 8,
}
_NUMBER_WITH_UNIT = re.compile(r"^\s*([+-]?[0-9]*\.?[0-9]+(?:e[+-]?[0-9]+)?)\s*([a-z%]*)\s*$", re.IGNORECASE)


def _split(field, text, units, allowed):
    match = _NUMBER_WITH_UNIT.match(text)
    if not match:
        raise ValueError(f"{field}: cannot parse {text!r}; expected a number with one of the units {allowed}")
    number, unit = float(match.group(1)), match.group(2).lower()
    if unit not in units:
        raise ValueError(f"{field}: unknown unit {match.group(2)!r} in {text!r}; allowed units: {allowed}")
    return number * units[unit]


def _number(field, value):
    # bool is an int subclass; Link(loss=True) is a mistake, not 100%.
    if not is_real(value):
        raise TypeError(f"{field}: expected a number or a string with a unit, got {type(value).__name__} {value!r}")
    if math.isnan(value) or math.isinf(value):
        raise ValueError(f"{field}: must be finite, got {value!r}")
    return float(value)


def parse_rate(value, field="rate"):
    """Return a rate in bit/s from a number (bit/s) or a tc rate string ("100mbit")."""
    if isinstance(value, str):
        return _split(field, value, _RATE_UNITS, "bit, kbit, mbit, gbit, tbit (decimal) or kbps, mbps (bytes/s)")
    return _number(field, value)


def parse_time(value, field="time"):
    """Return seconds from a number (s) or a tc time string ("20ms"); a bare string number means seconds."""
    if isinstance(value, str):
        return _split(field, value, {**_TIME_UNITS, "": 1}, "s, ms, us, ns")
    return _number(field, value)


def parse_fraction(value, field="fraction"):
    """Return a fraction from a number (0..1) or a percentage string ("1%")."""
    if isinstance(value, str):
        return (
            _split(field, value, {"%": 0.01}, "% (e.g. '1%'), or a number 0..1")
            if "%" in value
            else _split(field, value, {"": 1}, "% (e.g. '1%'), or a number 0..1")
        )
    return _number(field, value)


def parse_size(value, field="size"):
    """Return bytes from a number (bytes) or a tc size string ("64kb" = 65536)."""
    if isinstance(value, str):
        return _split(field, value, {**_SIZE_UNITS, "": 1}, "b, kb, mb, gb (1024-based, as tc)")
    return _number(field, value)


def format_rate(bps):
    """Human rate: 12.3 Mbit/s."""
    for unit, scale in (("Gbit/s", 1e9), ("Mbit/s", 1e6), ("kbit/s", 1e3)):
        if abs(bps) >= scale:
            return f"{bps / scale:.4g} {unit}"
    return f"{bps:.4g} bit/s"


def format_time(seconds):
    """Human time: 20 ms."""
    if seconds >= 1:
        return f"{seconds:.4g} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.4g} ms"
    return f"{seconds * 1e6:.4g} us"


def format_size(nbytes):
    """Human size: 1.5 MB (decimal, as throughput figures are)."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(nbytes) >= scale:
            return f"{nbytes / scale:.4g} {unit}"
    return f"{nbytes:.0f} B"
