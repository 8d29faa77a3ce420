"""Poolingformer's two-level attention: a hand-computed case, the segments and the pooling against loops, the effective
matrix W = (I + A₂P)A₁ rebuilt from its factors, the exact limits, the methods, the draws, memory, edge sizes and bad
input. The naive loop of tests/naive.py and the registry-driven tests cover the rest."""
from __future__ import annotations

import math
import tracemalloc

import numpy as np
import pytest

from refattn import registry, scaled_dot_product_attention
from refattn.common import MemoryBudgetError, temporary_memory_budget
from refattn.compressed import (
    PoolingformerParams,
    init_poolingformer,
    pooling_matrix,
    pooling_pattern,
    poolingformer_attention,
)
from refattn.sparse import band_pattern, sparse_attention

TIGHT = {"rtol": 1e-12, "atol": 1e-12}
GEOMETRY = {"window": 1, "pool_window": 3, "kernel_size": 3, "stride": 2}


def _qkv(rng, n=9, m=11, d=4, d_v=3, batch=()):
    return (rng.standard_normal((*batch, n, d)), rng.standard_normal((*batch, m, d)),
            rng.standard_normal((*batch, m, d_v)))


# --- a hand-computed case ----------------------------------------------------------------------------

def test_hand_computed_mean_pooling():
    """d = 1, scale 1, w₁ = 0: y = v = (0, 2, 4). W_Q = W_K = 1, w₂ = 1, κ = 2, ξ = 1: query i pools the segments
    starting at i − 1 and i, means ỹ = 0 (s = −1: {0}), 1, 3, 4 (s = 2: {2}).
    Query 0: scores 0·0, 0·1 → ½, ½ → z = ½. Query 1: scores 2·1, 2·3 → z = (1 + 3e⁴)/(1 + e⁴).
    Query 2: scores 4·3, 4·4 → z = (3 + 4e⁴)/(1 + e⁴). out = y + z. Row 0 of W: A₁ = I, A₂P row 0 = ½(1, 0, 0) +
    ½(½, ½, 0), so W_0 = (1.75, 0.25, 0)."""
    q, k, v = np.array([[1.0], [1.0], [1.0]]), np.array([[5.0], [-3.0], [0.5]]), np.array([[0.0], [2.0], [4.0]])
    params = PoolingformerParams(np.ones((1, 1)), np.ones((1, 1)), np.zeros((1, 2)))
    out, W = poolingformer_attention(q, k, v, window=0, pool_window=1, kernel_size=2, stride=1, pooling="mean",
                                     params=params, scale=1.0, return_weights=True)
    e4 = math.exp(4.0)
    np.testing.assert_allclose(out, [[0.5], [2 + (1 + 3 * e4) / (1 + e4)], [4 + (3 + 4 * e4) / (1 + e4)]],
                               rtol=1e-15)
    np.testing.assert_allclose(W[0], [1.75, 0.25, 0.0], rtol=1e-15)
    np.testing.assert_allclose(W.sum(axis=-1), 2.0, rtol=1e-15)


# --- the segments and the pooling --------------------------------------------------------------------

@pytest.mark.parametrize(("n", "pool_window", "kernel_size", "stride"),
                         [(7, 3, 3, 2), (6, 2, 2, 3), (5, 0, 1, 1), (4, 5, 4, 1), (8, 2, 5, 4)])
def test_pooling_pattern_is_the_segments_of_each_window(n, pool_window, kernel_size, stride):
    """Row i: the starts s = i − w₂ + tξ while s + κ − 1 ≤ i + w₂, those whose segment meets [0, n), as columns
    s + κ − 1."""
    pattern = pooling_pattern(n, pool_window, kernel_size, stride)
    assert pattern.shape == (n, n + kernel_size - 1)
    for i in range(n):
        starts, s = [], i - pool_window
        while s + kernel_size - 1 <= i + pool_window:
            if any(0 <= l < n for l in range(s, s + kernel_size)):
                starts.append(s)
            s += stride
        assert (pattern.row(i) - (kernel_size - 1)).tolist() == starts, f"row {i}"


def test_pooling_matrix_mean_rows_and_conv_with_a_zero_kernel_is_the_mean(rng):
    y = rng.standard_normal((2, 6, 3))
    P = pooling_matrix(y, 3)
    for s in range(-2, 6):                                         # row s + 2: the mean of {s, s+1, s+2} ∩ [0, 6)
        members = [l for l in range(s, s + 3) if 0 <= l < 6]
        expected = np.zeros(6)
        expected[members] = 1 / len(members)
        np.testing.assert_array_equal(P[:, s + 2], np.broadcast_to(expected, (2, 6)))
    np.testing.assert_allclose(pooling_matrix(y, 3, pooling="conv", w_kernel=np.zeros((3, 3))), P, rtol=1e-15)


def test_pooling_matrix_conv_is_a_softmax_of_the_segment_mean(rng):
    """Segment s = 1 (positions 1, 2, 3): δ = softmax(ȳ W_δ) with ȳ = mean(y_1, y_2, y_3); the first segment
    (s = −2, only position 0) weighs it 1."""
    y, w = rng.standard_normal((6, 3)), rng.standard_normal((3, 3))
    P = pooling_matrix(y, 3, pooling="conv", w_kernel=w)
    logits = y[1:4].mean(axis=0) @ w
    np.testing.assert_allclose(P[3, 1:4], np.exp(logits) / np.exp(logits).sum(), rtol=1e-14)
    np.testing.assert_array_equal(P[0], [1, 0, 0, 0, 0, 0])
    np.testing.assert_allclose(P.sum(axis=-1), 1.0, rtol=1e-15)


# --- the effective matrix ----------------------------------------------------------------------------

@pytest.mark.parametrize("pooling", ["conv", "mean"])
@pytest.mark.parametrize("residual", [True, False])
def test_output_is_the_effective_matrix_times_v_and_rows_sum_to_the_levels(rng, pooling, residual):
    q, k, v = _qkv(rng, batch=(2,))
    out, W = poolingformer_attention(q, k, v, **GEOMETRY, pooling=pooling, residual=residual, rng=5,
                                     return_weights=True)
    np.testing.assert_allclose(out, W @ v, **TIGHT)
    assert np.all(W >= 0)
    np.testing.assert_allclose(W.sum(axis=-1), 2.0 if residual else 1.0, **TIGHT)


@pytest.mark.parametrize("pooling", ["conv", "mean"])
def test_effective_matrix_is_the_product_of_its_factors(rng, pooling):
    """W = (I + A₂P)A₁ from the public pieces: A₁ the band attention, P the pooling of the first level's outputs, A₂
    softmax attention of yW_Q on the pooled keys under the segments' mask."""
    q, k, v = _qkv(rng, n=10, m=8)
    params = init_poolingformer(1, 3, 4, 3)
    out, W = poolingformer_attention(q, k, v, **GEOMETRY, pooling=pooling, params=params, return_weights=True)
    y, A1 = sparse_attention(q, k, v, band_pattern(10, 1, m=8), method="equation", return_weights=True)
    P = pooling_matrix(y, 3, pooling=pooling, w_kernel=params.w_kernel)
    z, A2 = scaled_dot_product_attention(y @ params.w_q, P @ y @ params.w_k, P @ y,
                                         pooling_pattern(10, 3, 3, 2).to_mask(), return_weights=True)
    np.testing.assert_allclose(W, (np.eye(10) + A2 @ P) @ A1, **TIGHT)
    np.testing.assert_allclose(out, y + z, **TIGHT)


def test_allowed_is_where_the_effective_matrix_weighs(rng):
    q, k, v = _qkv(rng, n=12, m=12)
    result = registry.get("poolingformer").apply(q, k, v, rng=2, return_weights=True)
    np.testing.assert_array_equal(result.allowed, result.weights != 0)
    assert not result.allowed.all()                                # w₁ = 1, w₂ = 3: a wide band, not everything


# --- exact limits ------------------------------------------------------------------------------------

def test_first_level_alone_is_softmax_attention_and_the_residual_doubles_it(rng):
    """w₂ = 0, κ = ξ = 1: the second level sees one segment, the query's own output, with weight 1: z = y."""
    q, k, v = _qkv(rng, n=6, m=9)
    own = {"window": 9, "pool_window": 0, "kernel_size": 1, "stride": 1}
    y = sparse_attention(q, k, v, band_pattern(6, 9, m=9))
    for pooling in ("conv", "mean", "max"):
        np.testing.assert_array_equal(poolingformer_attention(q, k, v, **own, pooling=pooling, residual=False,
                                                              rng=0), y)
        np.testing.assert_array_equal(poolingformer_attention(q, k, v, **own, pooling=pooling, rng=0), 2 * y)
    np.testing.assert_allclose(y, scaled_dot_product_attention(q, k, v), **TIGHT)


# --- methods, draws, memory --------------------------------------------------------------------------

@pytest.mark.parametrize("pooling", ["conv", "mean", "max"])
def test_methods_agree(rng, pooling):
    q, k, v = _qkv(rng, n=13, m=10, batch=(2, 1))
    outs = [poolingformer_attention(q, k, v, **GEOMETRY, pooling=pooling, rng=4, method=method)
            for method in ("equation", "csr", "auto")]
    for other in outs[1:]:
        np.testing.assert_allclose(other, outs[0], **TIGHT)


def test_apply_draws_the_parameters_from_rng(rng):
    q, k, v = _qkv(rng, d=4, d_v=3)
    result = registry.get("poolingformer").apply(q, k, v, rng=3, return_draws=True)
    drawn, expected = result.draws["params"], init_poolingformer(3, 3, 4, 3)
    for name in ("w_q", "w_k", "w_kernel"):
        np.testing.assert_array_equal(getattr(drawn, name), getattr(expected, name))


def test_nothing_n_by_m_at_large_n():
    """n = 4096: the dense scores (128 MiB) are far above a 16 MiB budget, so "auto" runs both levels on the CSR
    kernel; the peak stays under the budget, and the dense weights are refused before they are allocated."""
    rng = np.random.default_rng(0)
    q, k, v = rng.standard_normal((3, 4096, 8))
    registry.get("poolingformer").apply(q[:8], k[:8], v[:8], rng=0, method="csr")     # compile outside the trace
    with temporary_memory_budget(16 * 2**20):
        tracemalloc.start()
        out = poolingformer_attention(q, k, v, window=4, pool_window=32, kernel_size=4, stride=4, rng=0)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        with pytest.raises(MemoryBudgetError, match="return_weights"):
            poolingformer_attention(q, k, v, window=4, pool_window=32, kernel_size=4, stride=4, rng=0,
                                    return_weights=True)
    assert out.shape == (4096, 8) and np.isfinite(out).all()
    assert peak < 16 * 2**20, f"peak {peak / 2**20:.1f} MiB"


# --- edge sizes and bad input ------------------------------------------------------------------------

def test_edge_sizes(rng):
    q, k, v = _qkv(rng, n=5, m=6)
    out, W = poolingformer_attention(q[:0], k, v, **GEOMETRY, rng=0, return_weights=True)
    assert out.shape == (0, 3) and W.shape == (0, 6)
    out, W = poolingformer_attention(q, k[:0], v[:0], **GEOMETRY, rng=0, return_weights=True)
    np.testing.assert_array_equal(out, np.zeros((5, 3)))
    assert W.shape == (5, 0)
    out, W = poolingformer_attention(q, k, v[:, :0], **GEOMETRY, rng=0, return_weights=True)
    assert out.shape == (5, 0) and W.shape == (5, 6)
    out = poolingformer_attention(np.zeros((0, 5, 4)), np.zeros((0, 6, 4)), np.zeros((0, 6, 3)), **GEOMETRY, rng=0)
    assert out.shape == (0, 5, 3)
    with pytest.raises(ValueError, match="d_k"):
        poolingformer_attention(q[:, :0], k[:, :0], v, **GEOMETRY, rng=0)


def test_no_causal_form(rng):
    q, k, v = _qkv(rng)
    for causal in (True, "bottom-right"):
        with pytest.raises(ValueError, match="Poolingformer has no causal form .*encoder"):
            poolingformer_attention(q, k, v, **GEOMETRY, rng=0, causal=causal)
        with pytest.raises(ValueError, match="poolingformer takes causal in"):
            registry.get("poolingformer").apply(q, k, v, rng=0, causal=causal)


@pytest.mark.parametrize(("options", "error", "match"), [
    ({"window": -1}, ValueError, "window must be a non-negative int"),
    ({"stride": 0}, ValueError, "stride must be a positive int"),
    ({"kernel_size": 0}, ValueError, "kernel_size must be a positive int"),
    ({"kernel_size": 8}, ValueError, r"kernel_size=8 does not fit .* 2·pool_window \+ 1 = 7"),
    ({"pooling": "avg"}, ValueError, "pooling must be one of"),
    ({"residual": 1}, TypeError, "residual must be True or False"),
    ({"method": "blocked"}, ValueError, "method must be one of"),
    ({"pooling": "max", "return_weights": True}, ValueError, "pooling='max' has no effective matrix"),
])
def test_bad_options_are_named(rng, options, error, match):
    q, k, v = _qkv(rng)
    with pytest.raises(error, match=match):
        poolingformer_attention(q, k, v, **(GEOMETRY | options), rng=0)


def test_bad_params_are_named(rng):
    q, k, v = _qkv(rng, d=4, d_v=3)
    with pytest.raises(ValueError, match=r"poolingformer draws its parameters from rng: pass rng= "
                                         r"\(or params=\)"):
        poolingformer_attention(q, k, v, **GEOMETRY)
    given = init_poolingformer(0, 3, 4, 3)                         # rng (a registry passes it) is then unused
    np.testing.assert_array_equal(poolingformer_attention(q, k, v, **GEOMETRY, rng=5, params=given),
                                  poolingformer_attention(q, k, v, **GEOMETRY, params=given))
    with pytest.raises(TypeError, match="params must be a PoolingformerParams"):
        poolingformer_attention(q, k, v, **GEOMETRY, params={"w_q": 0})
    with pytest.raises(ValueError, match=r"expected \(3, 4\) and \(3, 3\)"):
        poolingformer_attention(q, k, v, **GEOMETRY, params=init_poolingformer(0, 3, 4, 2))
    with pytest.raises(ValueError, match=r"w_k has shape \(3, 2\) but w_q has shape \(3, 4\)"):
        PoolingformerParams(np.zeros((3, 4)), np.zeros((3, 2)), np.zeros((3, 3)))
    with pytest.raises(ValueError, match=r"w_kernel must have shape \(d_v, kernel_size\)"):
        PoolingformerParams(np.zeros((3, 4)), np.zeros((3, 4)), np.zeros((2, 3)))
    with pytest.raises(ValueError, match="pass w_kernel"):
        pooling_matrix(np.zeros((4, 3)), 2, pooling="conv")
