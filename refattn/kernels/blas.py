"""The OpenBLAS libraries of this process, and a context that runs them on one thread.

The parallel kernels call BLAS (``np.dot`` inside Numba, or :func:`gemm`: both SciPy's OpenBLAS)
from each of their own threads, on tiles and chunks. OpenBLAS threads a product once it is large
enough (M·N·K above 4·65536 in its defaults: a 64 × 64 × 128 product already is), and a threaded
product started from several threads at once waits on one pool: measured here, chunkwise linear
attention at d = 128 and C = 64 took 2.2–4× the time of the same kernel with one BLAS thread. :func:`serial_blas`
sets every loaded OpenBLAS to one thread for the length of a kernel call and restores the previous
counts afterwards. The setting is process-wide: BLAS called meanwhile from another Python thread
also runs on one thread. Libraries other than OpenBLAS are left alone.

:func:`gemm` calls the BLAS ``dgemm`` behind SciPy (the one Numba's ``np.dot`` calls) from jitted
code, with what ``np.dot`` cannot take: β (C ← AB + βC accumulates in place, no temporary) and rows
at any stride (a view of a scratch tile). It reaches ``dgemm`` through a symbol registered by name
with llvmlite (Numba's compiler layer, installed with it), so the kernels that call it stay
cacheable: a cached kernel refers to the name, and the address is registered again on import.
"""
from __future__ import annotations

import contextlib
import ctypes
import functools
from typing import NamedTuple

import llvmlite.binding
import numpy as np
from numba import types
from numba.extending import get_cython_function_address

from .._jit import jit_inline

__all__ = ["OpenBLAS", "gemm", "gemm_work", "openblas_libraries", "serial_blas"]

_DGEMM = "refattn_scipy_dgemm"
llvmlite.binding.add_symbol(_DGEMM, get_cython_function_address("scipy.linalg.cython_blas", "dgemm"))
_dgemm = types.ExternalFunction(_DGEMM, types.void(*[types.voidptr] * 13))   # Fortran: every argument by pointer


class OpenBLAS(NamedTuple):
    """One loaded OpenBLAS: its path, the library, and the prefix and suffix of its exported names."""

    path: str
    library: ctypes.CDLL
    prefix: str
    suffix: str

    def function(self, name: str):
        """The exported function ``name`` (``get_config``, ``get_num_threads``, …) of this build."""
        return getattr(self.library, f"{self.prefix}{name}{self.suffix}")


def openblas_libraries() -> list[OpenBLAS]:
    """Every OpenBLAS mapped into this process now (NumPy's and SciPy's wheels each bring one); [] off Linux."""
    try:
        with open("/proc/self/maps") as maps:
            paths = sorted({line.split()[-1] for line in maps if "openblas" in line.lower() and "/" in line})
    except OSError:
        return []
    return [found for path in paths if (found := _open(path)) is not None]


@functools.cache
def _open(path: str) -> OpenBLAS | None:
    """The library at ``path`` if it exports OpenBLAS's functions under one of the wheels' names."""
    library = ctypes.CDLL(path)
    for prefix in ("scipy_openblas_", "openblas_"):
        for suffix in ("64_", ""):
            if all(hasattr(library, f"{prefix}{name}{suffix}")
                   for name in ("get_config", "get_num_threads", "set_num_threads")):
                return OpenBLAS(path, library, prefix, suffix)
    return None


@functools.cache
def _kernel_libraries() -> tuple[OpenBLAS, ...]:
    """The OpenBLAS libraries once the BLAS behind Numba's ``np.dot`` (SciPy's) is loaded."""
    import scipy.linalg.cython_blas  # noqa: F401  (Numba's np.dot calls it: load it before looking)

    return tuple(openblas_libraries())


@contextlib.contextmanager
def serial_blas():
    """Every loaded OpenBLAS on one thread inside the ``with`` block; the previous counts restored after."""
    libraries = _kernel_libraries()
    before = [library.function("get_num_threads")() for library in libraries]
    for library in libraries:
        library.function("set_num_threads")(1)
    try:
        yield
    finally:
        for library, threads in zip(libraries, before, strict=True):
            library.function("set_num_threads")(threads)


@jit_inline
def gemm_work():  # pragma: no cover - jitted
    """The arguments :func:`gemm` passes by pointer: its dimensions, the characters N and T, α = 1 and β (one per thread)."""
    chars, scalars = np.empty(2, dtype=np.uint8), np.empty(2)
    chars[0], chars[1], scalars[0] = 78, 84, 1.0
    return np.empty(6, dtype=np.int32), chars, scalars


@jit_inline
def gemm(A, trans_a, B, trans_b, beta, C, work):  # pragma: no cover - jitted
    """C ← op(A) op(B) + β C, op(X) = Xᵀ when ``trans_x``, for 2-d float64 views whose rows are contiguous.

    A row-major C = op(A) op(B) is the column-major Cᵀ = op(B)ᵀ op(A)ᵀ, so ``dgemm`` receives B first.
    ``work`` comes from :func:`gemm_work`. With β = 0, C is not read (BLAS's rule: NaN in it stays out).
    """
    M, N = C.shape
    K = A.shape[0] if trans_a else A.shape[1]
    if M == 0 or N == 0:
        return
    if K == 0:                                                     # an empty sum: BLAS refuses its ld
        if beta == 0.0:
            C[:] = 0.0
        else:
            C *= beta
        return
    dims, chars, scalars = work
    dims[0], dims[1], dims[2] = N, M, K
    dims[3] = max(B.strides[0] // 8, B.shape[1])                   # leading dimensions (a 1-row view may carry any)
    dims[4] = max(A.strides[0] // 8, A.shape[1])
    dims[5] = max(C.strides[0] // 8, N)
    scalars[1] = beta
    _dgemm(chars[int(trans_b):].ctypes, chars[int(trans_a):].ctypes, dims[0:].ctypes, dims[1:].ctypes,
           dims[2:].ctypes, scalars[0:].ctypes, B.ctypes, dims[3:].ctypes, A.ctypes, dims[4:].ctypes,
           scalars[1:].ctypes, C.ctypes, dims[5:].ctypes)
