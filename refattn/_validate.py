"""Input checks shared by every mechanism: dtypes, shapes, options, random generators.

Every public function validates at its top with these helpers, so that bad input gets a
``TypeError``/``ValueError`` naming the argument and the shapes seen, never an obscure NumPy
broadcasting error three calls deeper.
"""
from __future__ import annotations

from collections.abc import Iterable

import numpy as np
from numpy.typing import ArrayLike, NDArray

__all__ = [
    "as_float",
    "check_choice",
    "check_positive_int",
    "check_qkv",
    "compute_dtype",
]

_COMPUTE_DTYPES = (np.float16, np.float32, np.float64)


def compute_dtype(dtype) -> np.dtype:
    """Return ``dtype`` as a NumPy float dtype, or raise ``TypeError`` naming it."""
    dt = np.dtype(dtype)
    if dt.type not in _COMPUTE_DTYPES:
        raise TypeError(f"dtype must be float16, float32 or float64, got {dt}")
    return dt


def as_float(name: str, x: ArrayLike, dtype=np.float64, *, min_ndim: int = 0) -> NDArray:
    """Convert ``x`` to a float array of ``dtype`` (float64 by default).

    Real floating inputs of any precision (and CPU tensors of other frameworks, through
    ``np.asarray``) are accepted. Booleans, integers and complex numbers are refused with a
    ``TypeError`` rather than silently cast: an integer array passed as queries is almost always a
    bug (token ids instead of embeddings), and attention over complex numbers is not defined here.
    """
    arr = np.asarray(x)
    if arr.dtype.kind != "f":
        raise TypeError(
            f"{name} must be a real floating-point array, got dtype {arr.dtype} "
            f"with shape {arr.shape}"
        )
    if arr.ndim < min_ndim:
        raise ValueError(f"{name} must have at least {min_ndim} dimensions, got shape {arr.shape}")
    return arr.astype(compute_dtype(dtype), copy=False)


def check_choice(name: str, value, choices: Iterable) -> None:
    """Raise ``ValueError`` unless ``value`` is one of ``choices``."""
    choices = tuple(choices)
    # ``value in choices`` would accept 1 for True; compare types too.
    if not any(value is c or (type(value) is type(c) and value == c) for c in choices):
        raise ValueError(f"{name} must be one of {choices!r}, got {value!r}")


def check_positive_int(name: str, value) -> int:
    """Raise ``ValueError`` unless ``value`` is an int >= 1 (bools refused)."""
    if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{name} must be a positive int, got {value!r}")
    return int(value)


def broadcast_batch(named_shapes: dict[str, tuple[int, ...]]) -> tuple[int, ...]:
    """Broadcast the leading (batch) dims of several arrays, naming them if they clash."""
    try:
        return np.broadcast_shapes(*named_shapes.values())
    except ValueError:
        seen = ", ".join(f"{n} {s}" for n, s in named_shapes.items())
        raise ValueError(f"leading (batch) dimensions do not broadcast: {seen}") from None


def check_qkv(q: NDArray, k: NDArray, v: NDArray) -> tuple[int, ...]:
    """Check ``q (..., n, d_k)``, ``k (..., m, d_k)``, ``v (..., m, d_v)``; return the batch shape."""
    for name, x in (("q", q), ("k", k), ("v", v)):
        if x.ndim < 2:
            raise ValueError(f"{name} must have shape (..., length, dim), got shape {x.shape}")
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(
            f"q has d_k={q.shape[-1]} but k has d_k={k.shape[-1]} "
            f"(q shape {q.shape}, k shape {k.shape})"
        )
    if k.shape[-2] != v.shape[-2]:
        raise ValueError(
            f"k has m={k.shape[-2]} keys but v has m={v.shape[-2]} values "
            f"(k shape {k.shape}, v shape {v.shape})"
        )
    return broadcast_batch({"q": q.shape[:-2], "k": k.shape[:-2], "v": v.shape[:-2]})
