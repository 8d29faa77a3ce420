"""Numba cores behind the ``method=`` options of the equation paths (imported lazily: no compile on import).

This package's ``__init__`` holds only NumPy plumbing shared by the Python wrappers; each kernel
module imports Numba itself, on first use.
"""
from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

__all__ = ["kernel_rows", "POLICY_CODES"]

POLICY_CODES = {"zero": 0, "nan": 1, "uniform": 2}   # fully_masked policies as the kernels' int codes


def kernel_rows(x: NDArray, batch: tuple[int, ...], core: tuple[int, ...]) -> NDArray:
    """``x`` broadcast to ``(*batch, *core)`` and flattened to ``(B, *core)``, C-contiguous, writeable, float64.

    A Numba kernel then always sees one array type (one compilation); copies only when it must.
    """
    shape = (*batch, *core)
    x = x if x.shape == shape else np.broadcast_to(x, shape)
    return np.require(x.reshape(int(np.prod(batch)), *core), np.float64, ("C", "W"))
