"""The kernels' BLAS helpers: ``gemm`` (dgemm from jitted code) against NumPy; ``serial_blas`` restores the threads."""
from __future__ import annotations

import numba
import numpy as np
import pytest

from refattn.kernels.blas import openblas_libraries, serial_blas
from refattn.kernels.gemm import gemm, gemm_work

TIGHT = {"rtol": 1e-12, "atol": 1e-12}


@numba.njit
def _call(A, trans_a, B, trans_b, beta, C):
    gemm(A, trans_a, B, trans_b, beta, C, gemm_work())


@pytest.mark.parametrize("trans_a", [False, True])
@pytest.mark.parametrize("trans_b", [False, True])
@pytest.mark.parametrize(("M", "N", "K"), [(3, 4, 5), (1, 7, 2), (6, 1, 1), (32, 64, 32), (0, 3, 2), (3, 0, 2),
                                           (3, 2, 0)])
def test_gemm_is_the_product_plus_beta_c(rng, trans_a, trans_b, M, N, K):
    A = rng.standard_normal((K, M) if trans_a else (M, K))
    B = rng.standard_normal((N, K) if trans_b else (K, N))
    product = (A.T if trans_a else A) @ (B.T if trans_b else B)
    C0 = rng.standard_normal((M, N))
    C = C0.copy()
    _call(A, trans_a, B, trans_b, 0.5, C)
    np.testing.assert_allclose(C, product + 0.5 * C0, **TIGHT)
    C[:] = np.nan                                                  # beta = 0: C is written, never read
    _call(A, trans_a, B, trans_b, 0.0, C)
    np.testing.assert_allclose(C, product, **TIGHT)


def test_gemm_reads_and_writes_views_with_strided_rows(rng):
    big = rng.standard_normal((10, 12))
    C = np.zeros((10, 12))
    _call(big[2:6, 1:5], False, big[:4, 3:9], False, 0.0, C[1:5, 2:8])
    np.testing.assert_allclose(C[1:5, 2:8], big[2:6, 1:5] @ big[:4, 3:9], **TIGHT)
    outside = np.ones_like(C, dtype=bool)
    outside[1:5, 2:8] = False
    assert (C[outside] == 0).all()                                 # nothing written past the view
    _call(big[:3, :4], True, big[:3, 6:10], False, 1.0, C[1:5, 2:6])   # Aᵀ B of row views, accumulated
    np.testing.assert_allclose(C[1:5, 2:6], big[2:6, 1:5] @ big[:4, 3:7] + big[:3, :4].T @ big[:3, 6:10], **TIGHT)


def test_serial_blas_runs_one_thread_and_restores_the_counts():
    libraries = openblas_libraries()
    assert libraries, "NumPy's and SciPy's Linux wheels each bring an OpenBLAS"
    before = [library.function("get_num_threads")() for library in libraries]
    with serial_blas():
        assert all(library.function("get_num_threads")() == 1 for library in openblas_libraries())
    assert [library.function("get_num_threads")() for library in libraries] == before
