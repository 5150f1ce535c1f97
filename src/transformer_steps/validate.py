"""One way to reject bad arguments everywhere in the package: TypeError for a wrong type, ValueError for a
wrong value, each naming the argument and what is allowed."""

from __future__ import annotations

import math
from numbers import Integral, Real


def _num(x) -> str:
    return f"{x:g}" if isinstance(x, float) else str(x)


def _range_text(minimum, maximum, min_open: bool, max_open: bool) -> str:
    if maximum is None:
        return f"{'>' if min_open else '>='} {_num(minimum)}"
    if minimum is None:
        return f"{'<' if max_open else '<='} {_num(maximum)}"
    return f"in {'(' if min_open else '['}{_num(minimum)}, {_num(maximum)}{')' if max_open else ']'}"


def _check_range(name, value, minimum, maximum, min_open, max_open):
    too_low = minimum is not None and (value <= minimum if min_open else value < minimum)
    too_high = maximum is not None and (value >= maximum if max_open else value > maximum)
    if too_low or too_high or (isinstance(value, float) and math.isnan(value)):
        raise ValueError(f"{name} must be {_range_text(minimum, maximum, min_open, max_open)}, got {value!r}")


def check_int(name: str, value, minimum: int | None = None, maximum: int | None = None) -> int:
    """An int (not a bool, not a float such as 2.0) in [minimum, maximum]."""
    if isinstance(value, bool) or not isinstance(value, Integral):
        raise TypeError(f"{name} must be an int, got {type(value).__name__} {value!r}")
    _check_range(name, value, minimum, maximum, False, False)
    return int(value)


def check_number(name: str, value, minimum: float | None = None, maximum: float | None = None, *,
                 min_open: bool = False, max_open: bool = False) -> float:
    """A real number (int or float, not a bool) in the interval; min_open/max_open exclude the ends."""
    if isinstance(value, bool) or not isinstance(value, Real):
        raise TypeError(f"{name} must be a number, got {type(value).__name__} {value!r}")
    _check_range(name, value, minimum, maximum, min_open, max_open)
    return value


def check_choice(name: str, value, allowed):
    if value not in allowed:
        raise ValueError(f"unknown {name} {value!r}; allowed: {', '.join(map(str, allowed))}")
    return value
