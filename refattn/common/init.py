"""Parameter initialisation shared by the layers that draw their own weights."""
from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

__all__ = ["glorot"]


def glorot(rng: np.random.Generator, fan_in: int, fan_out: int) -> NDArray:
    """A (fan_in, fan_out) matrix from Glorot/Xavier uniform, U(±√(6/(fan_in + fan_out))).

    Parameters
    ----------
    rng : numpy.random.Generator
        Source of the draw.
    fan_in, fan_out : int
        The matrix's shape.

    Returns
    -------
    ndarray
    """
    bound = np.sqrt(6.0 / (fan_in + fan_out))
    return rng.uniform(-bound, bound, size=(fan_in, fan_out))
