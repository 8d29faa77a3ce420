"""BLAS's ``dgemm`` called from jitted kernels, with what Numba's ``np.dot`` cannot take.

:func:`gemm` computes C ← op(A) op(B) + βC: β accumulates in place (no temporary), and the rows of
A, B and C may be at any stride (views of a scratch tile or of the output). It calls the ``dgemm``
behind SciPy (the one Numba's ``np.dot`` calls) through a symbol registered by name with llvmlite
(Numba's compiler layer, installed with it), so the kernels that call it stay cacheable: a cached
kernel refers to the name, and importing this module registers the address again. Imported only by
the kernels that use it (never on ``import refattn``); run them inside
:func:`refattn.kernels.blas.serial_blas` when they call it from their own threads.
"""
from __future__ import annotations

import llvmlite.binding
import numpy as np
from numba import types
from numba.extending import get_cython_function_address

from .._jit import jit_inline

__all__ = ["gemm", "gemm_work"]

_DGEMM = "refattn_scipy_dgemm"
llvmlite.binding.add_symbol(_DGEMM, get_cython_function_address("scipy.linalg.cython_blas", "dgemm"))
_dgemm = types.ExternalFunction(_DGEMM, types.void(*[types.voidptr] * 13))   # Fortran: every argument by pointer


@jit_inline
def gemm_work():  # pragma: no cover - jitted
    """The arguments :func:`gemm` passes by pointer: its dimensions, the characters N and T, α = 1, β (per thread)."""
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
