"""Seeded randomness: every draw in refattn comes from an explicit ``numpy.random.Generator``."""
from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

__all__ = ["as_rng", "glorot"]


def as_rng(rng) -> np.random.Generator:
    """Return a ``numpy.random.Generator`` from a Generator or an int seed.

    ``None`` is refused: a reference implementation never draws from an unseeded source, so that
    the same call gives the same numbers on every machine.
    """
    if isinstance(rng, np.random.Generator):
        return rng
    if isinstance(rng, (int, np.integer)) and not isinstance(rng, bool):
        return np.random.default_rng(int(rng))
    raise TypeError(
        f"rng must be a numpy.random.Generator or an int seed, got {type(rng).__name__}"
    )


def glorot(rng: np.random.Generator, fan_in: int, fan_out: int) -> NDArray:
    """A (fan_in, fan_out) matrix from Glorot/Xavier uniform, U(±√(6/(fan_in + fan_out)))."""
    bound = np.sqrt(6.0 / (fan_in + fan_out))
    return rng.uniform(-bound, bound, size=(fan_in, fan_out))
