"""The memory budget: default methods stream beyond it, over-budget arrays are refused before allocating.

Budgets here are set small (a few KiB) so that streaming happens at test sizes; ``tracemalloc``
sees NumPy's allocations (not the Numba kernels' small tiles), which is what the budget bounds.
"""
from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

from refattn import init_multi_head, multi_head_attention, scaled_dot_product_attention
from refattn.common import DEFAULT_MEMORY_BUDGET, MemoryBudgetError, temporary_memory_budget
from refattn.core.sdpa import AUTO_BLOCKED_ENTRIES

EXACT = {"rtol": 1e-13, "atol": 1e-13}          # blocked against equation (tests/test_blocked_sdpa.py)




def peak_of(call):
    """(result, peak bytes NumPy allocated during the call)."""
    tracemalloc.start()
    try:
        result = call()
        return result, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def problem(rng, batch=(2, 3), n=300, m=257, d=16, d_v=5):
    q, k, v = (rng.standard_normal((*batch, t, w)) for t, w in ((n, d), (m, d), (m, d_v)))
    mask = rng.random((n, m)) < 0.7
    mask[5] = False                                                # a fully masked row
    return q, k, v, mask


def test_the_default_is_auto_the_blocked_kernel_above_2_21_scores_within_the_budget(rng):
    # 2·1100·1100 scores > 2**21: the default, "auto", takes the blocked kernel though the scores would fit
    q, k, v = (rng.standard_normal((2, 1100, 8)) for _ in range(3))
    assert 2 * 1100 * 1100 > AUTO_BLOCKED_ENTRIES
    with temporary_memory_budget(DEFAULT_MEMORY_BUDGET):
        default = scaled_dot_product_attention(q, k, v, causal=True, return_lse=True)
        blocked = scaled_dot_product_attention(q, k, v, causal=True, return_lse=True, method="blocked")
    for a, b in zip(default, blocked, strict=True):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("policy", ["zero", "nan", "uniform"])
@pytest.mark.parametrize("causal", [False, True, "bottom-right"])
def test_default_streams_by_the_blocked_kernel_beyond_the_budget(rng, causal, policy):
    q, k, v, mask = problem(rng)
    options = {"mask": mask, "causal": causal, "fully_masked": policy, "key_lengths": np.array([257, 100, 0])}
    expected = scaled_dot_product_attention(q, k, v, return_lse=True, method="equation", **options)
    scores = np.empty((2, 3, 300, 257)).nbytes
    with temporary_memory_budget(scores // 8):
        blocked = scaled_dot_product_attention(q, k, v, return_lse=True, method="blocked", **options)   # (loaded)
        got, peak = peak_of(lambda: scaled_dot_product_attention(q, k, v, return_lse=True, **options))
    assert peak < scores // 8
    for a, b, c in zip(expected, got, blocked, strict=True):
        np.testing.assert_array_equal(b, c)                        # the default ran the blocked kernel
        np.testing.assert_allclose(b, a, **EXACT)


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("kind", ["bool", "bias"])
def test_other_dtypes_stream_by_chunks_of_query_rows(rng, dtype, kind):
    q, k, v, mask = problem(rng)
    # q and k in {-1, -1/2, 0, 1/2, 1}: every product is a multiple of 1/4 and every sum of 16 of them one of
    # 129 such values, exact in float16 and float32. The scores are then the same bits whatever order BLAS sums
    # a chunk of rows or all of them in (any kernel), and every later step of the log-sum-exp is row by row.
    q, k = (np.round(2 * np.clip(x, -1, 1)) / 2 for x in (q, k))
    if kind == "bias":
        mask = np.where(mask, rng.standard_normal(mask.shape), -np.inf)
    options = {"mask": mask, "causal": "bottom-right", "key_lengths": np.array([257, 100, 0]), "dtype": dtype}
    out_eq, lse_eq = scaled_dot_product_attention(q, k, v, return_lse=True, method="equation", **options)
    scores = np.empty((2, 3, 300, 257), dtype=dtype).nbytes
    with temporary_memory_budget(scores // 8):
        (out, lse), peak = peak_of(lambda: scaled_dot_product_attention(q, k, v, return_lse=True, **options))
    assert out.dtype == lse.dtype == dtype
    assert peak < scores // 2                                      # chunks of rows, never the whole scores
    np.testing.assert_array_equal(lse, lse_eq)                     # the same scores and softmax, row by row
    # The weights are the same too; only BLAS's order of Σ_j α_ij v_ij may differ with the number of
    # rows in the product: at most (m − 1)·eps·Σ_j α_ij |v_ij| <= (m − 1)·eps·max|v|.
    eps = np.finfo(dtype).eps
    np.testing.assert_allclose(out, out_eq, rtol=0, atol=256 * eps * np.abs(v).max())


def test_one_query_row_over_the_budget_is_refused(rng):
    q, k, v, _ = problem(rng)
    with temporary_memory_budget(64), pytest.raises(MemoryBudgetError, match=r"one query row"):
        scaled_dot_product_attention(q, k, v, dtype=np.float32)


@pytest.mark.parametrize("method", [None, "auto", "equation", "blocked"])
def test_over_budget_weights_are_refused_before_allocating(rng, method):
    q, k, v, _ = problem(rng)
    def call():
        with pytest.raises(MemoryBudgetError, match=r"the weights \(return_weights=True\) of shape \(2, 3, 300, "
                           r"257\) would take 0\.00345 GiB, above the memory budget of 6\.1e-05 GiB"):
            scaled_dot_product_attention(q, k, v, method=method, return_weights=True)

    with temporary_memory_budget(2**16):
        _, peak = peak_of(call)
    assert peak < 2**16


def test_weights_at_65536_are_refused_naming_32_gib():
    x = np.zeros((65536, 1))
    with temporary_memory_budget(DEFAULT_MEMORY_BUDGET), \
            pytest.raises(MemoryBudgetError, match=r"\(65536, 65536\) would take 32 GiB"):
        scaled_dot_product_attention(x, x, x, return_weights=True)
    assert issubclass(MemoryBudgetError, ValueError) and issubclass(MemoryBudgetError, MemoryError)


def test_the_equation_method_over_budget_is_refused(rng):
    q, k, v, _ = problem(rng)
    with temporary_memory_budget(2**16), pytest.raises(MemoryBudgetError, match=r'the scores of method="equation"'):
        scaled_dot_product_attention(q, k, v, method="equation")


def test_a_mask_the_blocked_kernel_would_broadcast_over_budget_is_refused(rng):
    q, k, v, mask = problem(rng)
    padding = np.arange(257) < 100                                 # (m,): broadcast to (n, m) for the kernel
    with temporary_memory_budget(2**16):
        with pytest.raises(MemoryBudgetError, match=r"mask broadcast to \(\.\.\., n, m\).*key_lengths="):
            scaled_dot_product_attention(q, k, v, padding)
        out = scaled_dot_product_attention(q, k, v, key_lengths=np.array(100))   # the same, without a mask
        full = scaled_dot_product_attention(q, k, v, mask)         # (n, m) as given: read in place
    np.testing.assert_allclose(out, scaled_dot_product_attention(q, k, v, padding, method="equation"), **EXACT)
    np.testing.assert_allclose(full, scaled_dot_product_attention(q, k, v, mask, method="equation"), **EXACT)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_multi_head_streams_like_sdpa(rng, dtype):
    params = init_multi_head(rng, 16, 4)
    x, memory = rng.standard_normal((2, 200, 16)), rng.standard_normal((2, 150, 16))
    expected = multi_head_attention(x, memory, params, num_heads=4, causal=True, method="equation", dtype=dtype)
    scores = np.empty((2, 4, 200, 150), dtype=dtype).nbytes
    with temporary_memory_budget(scores // 8):
        if dtype == np.float64:
            blocked = multi_head_attention(x, memory, params, num_heads=4, causal=True, method="blocked")
        out, peak = peak_of(lambda: multi_head_attention(x, memory, params, num_heads=4, causal=True, dtype=dtype))
    if dtype == np.float64:
        np.testing.assert_array_equal(out, blocked)                # the default ran the blocked kernel
    assert out.dtype == dtype and peak < scores // 2
    if dtype == np.float64:
        np.testing.assert_allclose(out, expected, **EXACT)
    else:
        # Chunked float32 equals the float32 equation path up to BLAS's order of the sums over
        # m = 150 keys (as above) and then over the h·d_v = 16 concatenated head outputs.
        np.testing.assert_allclose(out, expected, rtol=0, atol=200 * np.finfo(dtype).eps * np.abs(expected).max())
