"""Checks for public parameters, with one error shape: "name: must be <what>, got <value>".

Every layer validates its parameters through these (the model is the bottom layer), so a bool
never passes for a number (bool is an int subclass: Link(loss=True) is a mistake, not 100%),
NaN and infinity never pass a range, and every refusal reads the same way.
"""

from __future__ import annotations

import math
from typing import NoReturn, TypeGuard

__all__ = ["refuse", "is_integer", "is_real", "is_number", "check_flag", "check_integer", "check_number"]


def refuse(name: str, must: str, value: object, error: type[Exception] = ValueError) -> NoReturn:
    """Raise error("name: must be <must>, got <value>")."""
    raise error(f"{name}: must be {must}, got {value!r}")


def check_flag(name: str, value: object, error: type[Exception] = TypeError) -> bool:
    """value if it is True or False; otherwise refuse ("name: must be True or False, got ...")."""
    if not isinstance(value, bool):
        refuse(name, "True or False", value, error)
    return value


def is_integer(value: object) -> TypeGuard[int]:
    """An int, and not a bool."""
    return isinstance(value, int) and not isinstance(value, bool)


def is_real(value: object) -> TypeGuard[float]:
    """An int or a float (NaN and the infinities too), and not a bool."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def is_number(value: object) -> TypeGuard[float]:
    """An int or a float, finite, and not a bool."""
    return is_real(value) and math.isfinite(value)


def check_integer(
    name: str, value: object, low: int | None = None, high: int | None = None, *, must: str | None = None
) -> int:
    """value as an int in [low, high] (either bound may be None: open); otherwise refuse with must (default:
    "a whole number in low..high")."""
    if is_integer(value):
        if (low is None or value >= low) and (high is None or value <= high):
            return value
    refuse(name, must or _integer_range(low, high), value)


def check_number(
    name: str,
    value: object,
    low: float | None = None,
    high: float | None = None,
    *,
    low_open: bool = False,
    high_open: bool = False,
    must: str | None = None,
) -> float:
    """value as a finite number within the bounds (low_open/high_open exclude the bound itself); otherwise refuse
    with must (default: the interval in words)."""
    if is_number(value):
        number = float(value)
        above = low is None or (number > low if low_open else number >= low)
        below = high is None or (number < high if high_open else number <= high)
        if above and below:
            return value  # an int stays an int
    refuse(name, must or _number_range(low, high, low_open, high_open), value)


def _integer_range(low: int | None, high: int | None) -> str:
    if low is not None and high is not None:
        return f"a whole number in {low}..{high}"
    if low is not None:
        return f"a whole number >= {low}"
    if high is not None:
        return f"a whole number <= {high}"
    return "a whole number"


def _number_range(low: float | None, high: float | None, low_open: bool, high_open: bool) -> str:
    if low is not None and high is not None:
        return f"a number in {'(' if low_open else '['}{low:g}, {high:g}{')' if high_open else ']'}"
    if low is not None:
        return f"a finite number {'>' if low_open else '>='} {low:g}"
    if high is not None:
        return f"a finite number {'<' if high_open else '<='} {high:g}"
    return "a finite number"
