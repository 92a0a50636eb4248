"""The package's one check of a number given by a user: integer or real, in a range, named in the error.

Every layer uses it (the wrappers, the agents' hyperparameters, their configs), so a bad value reads the same
everywhere: a ``TypeError`` for a value of the wrong type, a ``ValueError`` for NaN, infinity or a value
outside its range, both naming the value and the range. It imports neither torch nor Stable-Baselines3.
"""

from __future__ import annotations

import math
import numbers
from typing import Any

import numpy as np

__all__ = ["check_int", "check_number"]


def check_number(
    name: str,
    value: Any,
    low: float | None = None,
    high: float | None = None,
    *,
    integer: bool = False,
    low_open: bool = False,
    high_open: bool = False,
    optional: bool = False,
) -> None:
    """Raise unless ``value`` is a finite number in the range (``None`` too when ``optional``).

    :param name: the value's name, for the message
    :param value: the value given
    :param low: the smallest valid value (``None``: no lower bound)
    :param high: the largest valid value (``None``: no upper bound)
    :param integer: the value must be an integer
    :param low_open: ``low`` itself is not valid
    :param high_open: ``high`` itself is not valid
    :param optional: ``None`` is valid
    :raise TypeError: for a value that is not a number (or not an integer when ``integer``)
    :raise ValueError: for NaN, infinity or a value outside the range
    """
    if value is None and optional:
        return
    kind = numbers.Integral if integer else numbers.Real
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, kind):
        expected = "an integer" if integer else "a number"
        raise TypeError(f"{name} must be {expected}{' or None' if optional else ''}, got {value!r} "
                        f"({type(value).__name__})")
    left = "(" if low_open else "["
    right = ")" if high_open else "]"
    valid = f"{left}{'-inf' if low is None else low}, {'inf' if high is None else high}{right}"
    number: Any = value  # a real number, as checked above
    inside = math.isfinite(number) and (
        (low is None or (number > low if low_open else number >= low))
        and (high is None or (number < high if high_open else number <= high))
    )
    if not inside:
        raise ValueError(f"{name} must be in {valid}, got {value!r}")


def check_int(value: Any, name: str, low: int = 0, high: int | None = None) -> int:
    """``value`` as an ``int`` if it is an integer in ``[low, high]`` (:func:`check_number`), else the error
    naming it."""
    if type(value) is int and value >= low and (high is None or value <= high):
        return value  # the common case, first
    check_number(name, value, low, high, integer=True)
    return int(value)
