"""The memory budget: the largest dense array a call may allocate, checked before allocating."""
from __future__ import annotations

import math
import os
from contextlib import contextmanager

from .ints import check_positive_int

__all__ = [
    "DEFAULT_MEMORY_BUDGET",
    "MEMORY_BUDGET_ENV",
    "MemoryBudgetError",
    "check_fits",
    "memory_budget",
    "set_memory_budget",
    "temporary_memory_budget",
]


MEMORY_BUDGET_ENV = "REFATTN_MEMORY_BUDGET"


DEFAULT_MEMORY_BUDGET = 4 * 2**30


_budget: list[int | None] = [None]                                  # set_memory_budget's value, if any


class MemoryBudgetError(ValueError, MemoryError):
    """An array refattn was asked for would exceed the memory budget; raised before allocating it."""


def memory_budget() -> int:
    """The bytes one dense intermediate may take before refattn streams instead (or refuses).

    The default methods switch to their streaming paths (blocked, csr, scan) where a dense n × m
    array would exceed it, and asking for such an array (``return_weights=True``) raises
    :class:`MemoryBudgetError` before allocating. It is :data:`DEFAULT_MEMORY_BUDGET` (4 GiB), or
    the environment variable ``REFATTN_MEMORY_BUDGET`` (bytes, read at each call), or what
    :func:`set_memory_budget` set, in increasing order of precedence.

    Returns
    -------
    int
    """
    if _budget[0] is not None:
        return _budget[0]
    text = os.environ.get(MEMORY_BUDGET_ENV)
    if text is None:
        return DEFAULT_MEMORY_BUDGET
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"{MEMORY_BUDGET_ENV} must be a whole number of bytes, got {text!r}") from None
    return check_positive_int(MEMORY_BUDGET_ENV, value)


def set_memory_budget(nbytes: int | None) -> int | None:
    """Set the memory budget (bytes), or ``None`` to fall back to the environment and the default.

    Parameters
    ----------
    nbytes : int or None
        The new budget.

    Returns
    -------
    int or None
        The previous setting, so that a caller can restore it.
    """
    previous = _budget[0]
    _budget[0] = None if nbytes is None else check_positive_int("nbytes", nbytes)
    return previous


@contextmanager
def temporary_memory_budget(nbytes: int | None):
    """Set the memory budget for the duration of a ``with`` block, then restore the previous setting.

    Parameters
    ----------
    nbytes : int or None
        The budget inside the block (``None``: the environment's or the default).

    Returns
    -------
    context manager
        Restores the previous setting on leaving the block, however it is left.

    Examples
    --------
    >>> with temporary_memory_budget(1024):
    ...     memory_budget()
    1024
    """
    previous = set_memory_budget(nbytes)
    try:
        yield
    finally:
        set_memory_budget(previous)


def check_fits(what: str, shape: tuple[int, ...], itemsize: int = 8) -> None:
    """Raise :class:`MemoryBudgetError` before allocating an array of ``shape`` that exceeds the budget.

    Parameters
    ----------
    what : str
        What the array is, for the message (e.g. "the weights (return_weights=True)").
    shape : tuple of int
        Its shape.
    itemsize : int, default 8
        Bytes per entry.
    """
    nbytes = math.prod(shape) * itemsize
    budget = memory_budget()
    if nbytes > budget:
        raise MemoryBudgetError(
            f"{what} of shape {tuple(shape)} would take {nbytes / 2**30:.3g} GiB, above the memory budget of "
            f"{budget / 2**30:.3g} GiB (refattn.common.set_memory_budget or {MEMORY_BUDGET_ENV} raise it)"
        )
