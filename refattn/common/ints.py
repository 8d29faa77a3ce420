"""Integer sizes and counts: positive or non-negative, an exact int (not a bool), small enough to index in int64."""
from __future__ import annotations

import numpy as np

__all__ = ["MAX_SIZE", "below_max_size", "check_non_negative_int", "check_positive_int", "is_int"]


#: The largest size or count taken (a length, a number of blocks, features or draws): an index must fit in int64.
MAX_SIZE = 2**62


def is_int(value) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def below_max_size(name: str, value) -> int:
    """``int(value)``, or a ``ValueError`` naming it above :data:`MAX_SIZE`: a count, size or number of iterations
    that large cannot index an array, and would fail deep inside NumPy (or run for ever) without naming it."""
    if value > MAX_SIZE:
        raise ValueError(f"{name}={value} is too large: sizes and counts must be at most 2**62 (an index must fit "
                         "in int64)")
    return int(value)


def check_positive_int(name: str, value) -> int:
    """Return ``value`` as an int, or raise ``ValueError`` unless it is an int >= 1 (bools refused), at most
    :data:`MAX_SIZE`.

    Parameters
    ----------
    name : str
        The argument's name, for the message.
    value : object
        What was passed.

    Returns
    -------
    int
    """
    if not is_int(value) or value < 1:
        raise ValueError(f"{name} must be a positive int, got {value!r}")
    return below_max_size(name, value)


def check_non_negative_int(name: str, value) -> int:
    """Return ``value`` as an int, or raise ``ValueError`` unless it is an int >= 0 (a window, count or offset), at
    most :data:`MAX_SIZE`.

    Parameters
    ----------
    name : str
        The argument's name, for the message.
    value : object
        What was passed.

    Returns
    -------
    int
    """
    if not is_int(value) or value < 0:
        raise ValueError(f"{name} must be a non-negative int, got {value!r}")
    return below_max_size(name, value)
