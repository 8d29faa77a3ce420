"""Random draws with one rule: a draw is given or drawn from ``rng``, and the record's call sees every one.

A mechanism that draws (hash rotations, centroids, random features, parameters) takes each draw as
an option of its own (``omega=``, ``planes=``, ``params=``) and ``rng``. :func:`given_or_drawn`
returns the given value, or draws it from ``rng``, or refuses with the one message every mechanism
gives for a missing ``rng``. Inside a registry call (:meth:`refattn.mechanism.Mechanism.apply`) it
also notes the value in the call's :class:`Trace`, so ``AttentionResult.draws`` holds exactly what
the call used: fed back as options, the draws reproduce the result without ``rng``.

A mechanism whose pattern comes out of its own computation (sorted blocks, hash buckets) notes it
with :func:`note_allowed`, for ``AttentionResult.allowed``. Outside a registry call both are no-ops.
"""
from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np
from numpy.typing import NDArray

from .common.checks import as_rng

__all__ = ["Trace", "given_or_drawn", "missing_draw", "note_allowed", "note_draw", "optional_rng", "tracing"]

T = TypeVar("T")


@dataclass
class Trace:
    """What one registry call noted: its draws by option name, and the pairs it let each query see.

    ``owner`` is the record's id: the name a missing draw's message gives inside a registry call.
    """

    owner: str | None = None
    draws: dict[str, Any] = field(default_factory=dict)
    allowed: NDArray | None = None
    allowed_noted: bool = False


_TRACE: contextvars.ContextVar[Trace | None] = contextvars.ContextVar("refattn_trace", default=None)


@contextlib.contextmanager
def tracing(owner: str | None = None) -> Iterator[Trace]:
    """A fresh :class:`Trace` of the registry call ``owner`` for the calls inside the block (nested blocks have
    their own)."""
    trace = Trace(owner)
    token = _TRACE.set(trace)
    try:
        yield trace
    finally:
        _TRACE.reset(token)


def optional_rng(rng) -> np.random.Generator | None:
    """``rng`` as a Generator (an int is a seed), or None: convert once, so that several draws share one stream."""
    return None if rng is None else as_rng(rng)


def given_or_drawn(by: str, option: str, value: T | None, rng: np.random.Generator | None,
                   draw: Callable[[np.random.Generator], T], *, what: str | None = None) -> T:
    """``value`` when given, else ``draw(rng)``; noted as the draw ``option`` of the current registry call.

    Parameters
    ----------
    by : str
        The mechanism, for the message.
    option : str
        The option that takes the draw back (``value``'s parameter name).
    value : object or None
        The caller's value of ``option``; ``None`` means "draw it".
    rng : numpy.random.Generator or None
        The generator (:func:`optional_rng` converts a seed once, before the first draw).
    draw : callable
        ``draw(rng) -> value``.
    what : str, optional
        What is drawn, in words, for the message (default: the option's name).

    Raises
    ------
    ValueError
        ``value`` and ``rng`` both None: "<who> draws <what> from rng: pass rng= (or <option>=)", who the
        record's id inside a registry call (the name the caller used), ``by`` otherwise.
    """
    trace = _TRACE.get()
    if value is None:
        if rng is None:
            raise missing_draw(by, option, what)
        value = draw(rng)
    if trace is not None:
        trace.draws[option] = value
    return value


def missing_draw(by: str, option: str, what: str | None = None) -> ValueError:
    """The one error of a draw with neither a value nor ``rng``: "<who> draws <what> from rng: pass rng= (or
    <option>=)", who the record's id inside a registry call (the name its caller used), ``by`` otherwise.

    Parameters
    ----------
    by : str
        The mechanism, as the function names itself.
    option : str
        The option that takes the draw.
    what : str, optional
        What is drawn, in words (default: the option's name).
    """
    trace = _TRACE.get()
    who = trace.owner if trace is not None and trace.owner else by
    return ValueError(f"{who} draws {what or option} from rng: pass rng= (or {option}=)")


def note_draw(option: str, value: Any) -> None:
    """Note ``value`` as the draw ``option`` of the current registry call, where nothing was drawn from rng.

    For a value the mechanism settles without ``rng`` (a deterministic default, or no parameters at all), so
    that the call's draws still name every option of the record's ``draws``.
    """
    trace = _TRACE.get()
    if trace is not None:
        trace.draws[option] = value


def note_allowed(allowed: NDArray | None | Callable[[], NDArray | None]) -> None:
    """Note the pairs (query i, key j) the current registry call let each query see (None: every pair).

    A callable is called only inside a registry call: the pairs then cost nothing to a direct call.
    """
    trace = _TRACE.get()
    if trace is not None:
        trace.allowed, trace.allowed_noted = (allowed() if callable(allowed) else allowed), True
