"""Numba cores behind the ``method=`` options of the equation paths (imported lazily: no compile on import).

This package's ``__init__`` holds only NumPy plumbing shared by the Python wrappers; each kernel
module imports Numba itself, on first use. A kernel indexes its arrays without bounds checks
(unless ``NUMBA_BOUNDSCHECK=1``), so each module's public function checks every array the kernel
indexes, with :func:`check_kernel_array` and :func:`check_kernel_indices`, before calling it.
"""
from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

__all__ = ["POLICY_CODES", "check_kernel_array", "check_kernel_arrays", "check_kernel_indices", "check_policy",
           "kernel_rows", "kernel_scalar"]

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


def check_kernel_arrays(kernel: str, layouts: dict[str, tuple[NDArray, str]], written: tuple[str, ...] = ()) -> dict:
    """Check every array a kernel indexes against its layout before the kernel runs; return the sizes.

    ``layouts`` maps each argument's name to ``(array, "B n F")``: one symbol per axis, and a symbol
    that appears in several layouts must have the same size in all of them. Every array must be a
    C-contiguous float64 ndarray (the one type each kernel is compiled for) and the ``written`` ones
    writeable. A kernel's loops take their bounds from these sizes, so an array that disagrees
    would be read or written out of bounds: here it is a ``TypeError``/``ValueError`` naming the
    kernel, the argument, its shape and the layout, instead.

    Returns
    -------
    dict of str to int
        The size of every symbol.
    """
    sizes: dict[str, int] = {}
    source: dict[str, str] = {}
    for name, (x, layout) in layouts.items():
        symbols = layout.split()
        if not isinstance(x, np.ndarray) or x.dtype != np.float64:
            seen = f"dtype {x.dtype}" if isinstance(x, np.ndarray) else type(x).__name__
            raise TypeError(f"{kernel}: {name} must be a float64 ndarray ({', '.join(symbols)}), got {seen}")
        if x.ndim != len(symbols):
            raise ValueError(f"{kernel}: {name} must have shape ({', '.join(symbols)}), got shape {x.shape}")
        for symbol, size in zip(symbols, x.shape, strict=True):
            if sizes.setdefault(symbol, size) != size:
                raise ValueError(f"{kernel}: {name} has shape {x.shape} = ({', '.join(symbols)}), so {symbol}={size}, "
                                 f"but {source[symbol]} has {symbol}={sizes[symbol]}")
            source.setdefault(symbol, name)
        if not x.flags.c_contiguous:
            raise ValueError(f"{kernel}: {name} must be C-contiguous (kernel_rows makes it so)")
        if name in written and not x.flags.writeable:
            raise ValueError(f"{kernel}: {name} is written by the kernel and must be writeable")
    return sizes


def kernel_scalar(kernel: str, name: str, value, kind: type):
    """``value`` as the ``int``, finite ``float`` or ``bool`` (``kind``) a kernel takes; an error naming both otherwise.

    One scalar type per argument keeps one compilation per kernel; bools are not ints here.
    """
    is_bool = isinstance(value, (bool, np.bool_))
    if kind is bool and is_bool:
        return bool(value)
    if kind is int and not is_bool and isinstance(value, (int, np.integer)):
        return int(value)
    if kind is float and not is_bool and isinstance(value, (int, float, np.integer, np.floating)):
        if not np.isfinite(value):
            raise ValueError(f"{kernel}: {name} must be finite, got {value!r}")
        return float(value)
    wanted = {int: "an int", float: "a finite real number", bool: "True or False"}[kind]
    raise TypeError(f"{kernel}: {name} must be {wanted}, got {value!r}")
