"""Renamed options keep their old names for one release, with a ``DeprecationWarning`` and a CHANGELOG line.

:func:`renamed` wraps a public function so that ``fn(old=x)`` still works as ``fn(new=x)``;
:meth:`refattn.mechanism.Mechanism.of` reads the same table (``fn.__renamed__``), so a record's
``apply`` accepts the old name too.
"""
from __future__ import annotations

import functools
import warnings
from collections.abc import Callable, Mapping
from typing import TypeVar

__all__ = ["REMOVED_IN", "none_is_auto", "renamed", "take_renamed"]

REMOVED_IN = "0.4.0"        # the release after the next: one release of warnings

F = TypeVar("F", bound=Callable)


def take_renamed(owner: str, options: dict, table: Mapping[str, str], *, stacklevel: int = 3) -> dict:
    """``options`` with each old name of ``table`` (old -> new) moved to its new name, warning once per name.

    Both names at once is a ``TypeError`` naming them.
    """
    for old, new in table.items():
        if old in options:
            if new in options:
                raise TypeError(f"{owner} got both {old}= (the deprecated name) and {new}=; pass {new}= only")
            warnings.warn(f"{owner}: option {old}= is renamed {new}= (the old name goes in refattn {REMOVED_IN})",
                          DeprecationWarning, stacklevel=stacklevel)
            options[new] = options.pop(old)
    return options


def renamed(**old_to_new: str) -> Callable[[F], F]:
    """Decorate a function whose keyword options ``old`` are now called ``new``: the old names still work, warning."""

    def decorate(fn: F) -> F:
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            return fn(*args, **take_renamed(fn.__name__, kwargs, old_to_new))

        wrapper.__renamed__ = dict(old_to_new)                     # type: ignore[attr-defined]
        return wrapper                                             # type: ignore[return-value]

    return decorate


def none_is_auto(owner: str, method):
    """``method``, with the old default ``None`` read as ``"auto"`` (the one default), warning."""
    if method is None:
        warnings.warn(f'{owner}: method=None is method="auto", the one default (None goes in refattn {REMOVED_IN})',
                      DeprecationWarning, stacklevel=3)
        return "auto"
    return method
