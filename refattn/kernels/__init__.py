"""Numba cores behind the ``method=`` options of the equation paths (imported lazily: no compile on import).

This package's ``__init__`` holds only NumPy plumbing shared by the Python wrappers; each kernel
module imports Numba itself, on first use. A kernel indexes its arrays without bounds checks
(unless ``NUMBA_BOUNDSCHECK=1``), so each module's public function checks every array the kernel
indexes, with :func:`check_kernel_array` and :func:`check_kernel_indices`, before calling it.
"""
from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

__all__ = ["kernel_rows", "check_kernel_array", "check_kernel_indices", "check_policy", "POLICY_CODES"]

POLICY_CODES = {"zero": 0, "nan": 1, "uniform": 2}   # fully_masked policies as the kernels' int codes


def kernel_rows(x: NDArray, batch: tuple[int, ...], core: tuple[int, ...]) -> NDArray:
    """``x`` broadcast to ``(*batch, *core)`` and flattened to ``(B, *core)``, C-contiguous, writeable, float64.

    A Numba kernel then always sees one array type (one compilation); copies only when it must.
    """
    shape = (*batch, *core)
    x = x if x.shape == shape else np.broadcast_to(x, shape)
    return np.require(x.reshape(int(np.prod(batch)), *core), np.float64, ("C", "W"))


def check_kernel_array(name: str, x, shape: tuple[int | None, ...], dtype=np.float64, *,
                       writeable: bool = False) -> tuple[int, ...]:
    """Return ``x.shape``, or raise unless ``x`` is a C-contiguous ndarray of ``dtype`` and ``shape``.

    ``None`` in ``shape`` takes any size; ``dtype`` "int" takes any signed integer type. A
    ``TypeError`` for the wrong type or dtype, a ``ValueError`` for the wrong shape or layout.
    """
    if not isinstance(x, np.ndarray):
        raise TypeError(f"{name} must be a numpy array, got {type(x).__name__}")
    if not (x.dtype.kind == "i" if dtype == "int" else x.dtype == dtype):
        wanted = "a signed integer dtype" if dtype == "int" else f"dtype {np.dtype(dtype)}"
        raise TypeError(f"{name} must have {wanted}, got {x.dtype} with shape {x.shape}")
    if x.ndim != len(shape) or any(s is not None and s != t for s, t in zip(shape, x.shape, strict=True)):
        wanted = "(" + ", ".join("·" if s is None else str(s) for s in shape) + ("," if len(shape) == 1 else "") + ")"
        raise ValueError(f"{name} must have shape {wanted}, got shape {x.shape}")
    if not x.flags.c_contiguous or (writeable and not x.flags.writeable):
        raise ValueError(f"{name} must be C-contiguous{' and writeable' if writeable else ''} (shape {x.shape})")
    return x.shape


def check_kernel_indices(name: str, x, shape: tuple[int | None, ...], low: int, high: int, dtype="int") -> None:
    """Raise unless ``x`` is a C-contiguous integer array of ``shape`` with every value in ``[low, high]``."""
    check_kernel_array(name, x, shape, dtype)
    if x.size and (x.min() < low or x.max() > high):
        raise ValueError(f"{name} must lie in [{low}, {high}], got values in [{x.min()}, {x.max()}]")


def check_policy(policy) -> int:
    """The fully-masked policy code (0 zero, 1 NaN, 2 uniform) as an int, or a ``ValueError``."""
    if isinstance(policy, (bool, np.bool_)) or not isinstance(policy, (int, np.integer)) \
            or policy not in POLICY_CODES.values():
        raise ValueError(f"policy must be one of the codes {POLICY_CODES}, got {policy!r}")
    return int(policy)
