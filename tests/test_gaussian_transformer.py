"""Gaussian Transformer's self-attention: the prior's shape, a hand-computed case, its constraint, the diagonal
option, one (w, b) per head, and the exact limit w = 0, b = 0."""
from __future__ import annotations

import math

import numpy as np
import pytest

from refattn import scaled_dot_product_attention
from refattn.prior import (
    GaussianTransformerParams,
    gaussian_transformer_attention,
    gaussian_transformer_prior,
    init_gaussian_transformer,
)

TIGHT = {"rtol": 1e-12, "atol": 1e-12}


def test_prior_shape():
    """G ≤ 0, symmetric in i − j, G_ii = b, and its maximum 0 at |i − j| = √(−b/w) (= 2 for w = ¼, b = −1)."""
    G = gaussian_transformer_prior(GaussianTransformerParams(0.25, -1.0), 9)
    assert np.all(G <= 0)
    np.testing.assert_array_equal(G, G.T)
    np.testing.assert_array_equal(np.diag(G), -1.0)
    np.testing.assert_array_equal(G[4], [-3.0, -1.25, 0.0, -0.75, -1.0, -0.75, 0.0, -1.25, -3.0])   # −|(4 − j)²/4 − 1|
    assert np.argmax(G[4, :4]) == 2


def test_hand_case_with_zero_queries():
    """q = 0: every score is 0, so the weights are softmax(G). w = 1, b = −1, n = 3 gives
    G = [[−1, 0, −3], [0, −1, 0], [−3, 0, −1]]; row 1 is (1, e⁻¹, 1)/(2 + e⁻¹)."""
    q = np.zeros((3, 2))
    k = np.array([[1.0, 2.0], [-1.0, 0.5], [0.3, 0.3]])
    v = np.array([[1.0], [10.0], [100.0]])
    out, A = gaussian_transformer_attention(q, k, v, params=GaussianTransformerParams(1.0, -1.0), return_weights=True)
    e = math.exp(-1.0)
    np.testing.assert_allclose(A[1], [1 / (2 + e), e / (2 + e), 1 / (2 + e)], rtol=1e-15, atol=0)
    row0 = np.array([e, 1.0, math.exp(-3.0)]) / (e + 1.0 + math.exp(-3.0))
    np.testing.assert_allclose(A[0], row0, rtol=1e-15, atol=0)
    np.testing.assert_allclose(out[1, 0], (1 + 10 * e + 100) / (2 + e), rtol=1e-15)


def test_exact_limit_and_a_flat_prior(rng):
    """w = 0, b = 0: G = 0, softmax attention, batched and causal too."""
    q, k, v = rng.standard_normal((3, 2, 7, 4))
    flat = GaussianTransformerParams(0.0, 0.0)
    for causal in (False, True):
        np.testing.assert_allclose(gaussian_transformer_attention(q, k, v, params=flat, causal=causal),
                                   scaled_dot_product_attention(q, k, v, causal=causal), **TIGHT)


def test_equals_sdpa_with_the_prior_as_bias(rng):
    q, k, v = rng.standard_normal((3, 8, 4))
    p = GaussianTransformerParams(0.3, -2.0)
    i, j = np.arange(8)[:, None], np.arange(8)[None, :]
    G = -np.abs(0.3 * (i - j) ** 2 - 2.0)
    np.testing.assert_allclose(gaussian_transformer_attention(q, k, v, params=p, scale=0.7),
                               scaled_dot_product_attention(q, k, v, mask=G, scale=0.7), **TIGHT)


def test_mask_diagonal_excludes_each_token_itself(rng):
    q, k, v = rng.standard_normal((3, 6, 4))
    p = GaussianTransformerParams(0.5, -1.0)
    out, A = gaussian_transformer_attention(q, k, v, params=p, mask_diagonal=True, return_weights=True)
    np.testing.assert_array_equal(np.diag(A), 0.0)
    G = gaussian_transformer_prior(p, 6)
    expected = scaled_dot_product_attention(q, k, v, mask=np.where(np.eye(6, dtype=bool), -np.inf, G))
    np.testing.assert_allclose(out, expected, **TIGHT)
    one = gaussian_transformer_attention(q[:1], k[:1], v[:1], params=p, mask_diagonal=True)
    np.testing.assert_array_equal(one, 0.0)                        # a single token sees no other: a zero row


def test_one_pair_per_head(rng):
    """w, b of shape (h,) against (B, h, n, d): each head its own prior."""
    q, k, v = rng.standard_normal((3, 2, 3, 5, 4))
    p = init_gaussian_transformer(0, num_heads=3)
    assert p.w.shape == (3,)
    out = gaussian_transformer_attention(q, k, v, params=p)
    for h in range(3):
        single = GaussianTransformerParams(p.w[h], p.b[h])
        np.testing.assert_allclose(out[:, h], gaussian_transformer_attention(q[:, h], k[:, h], v[:, h], params=single),
                                   **TIGHT)


def test_initialisation_keeps_the_signs():
    for seed in range(20):
        p = init_gaussian_transformer(seed)
        assert 0.0 <= p.w < 1.0 and -1.0 < p.b <= 0.0


def test_constraint_is_checked():
    with pytest.raises(ValueError, match="w must be finite and >= 0"):
        GaussianTransformerParams(-0.1, -1.0)
    with pytest.raises(ValueError, match="b must be finite and <= 0"):
        GaussianTransformerParams(0.1, 0.5)
    with pytest.raises(ValueError, match="w must be finite"):
        GaussianTransformerParams(np.nan, -1.0)
    with pytest.raises(ValueError, match="broadcast"):
        GaussianTransformerParams(np.zeros(2), np.zeros(3) - 1)
    with pytest.raises(TypeError, match="w must be a real floating-point"):
        GaussianTransformerParams(np.array([1]), -1.0)


def test_bottom_right_prior_follows_the_query_positions():
    """The last n of m positions: query i sits at i + m − n, so G_{i, i+m−n} = b."""
    G = gaussian_transformer_prior(GaussianTransformerParams(0.5, -0.25), 3, 7, causal="bottom-right")
    np.testing.assert_array_equal(G[np.arange(3), np.arange(4, 7)], -0.25)


def test_bad_arguments_are_named(rng):
    q = rng.standard_normal((5, 4))
    p = GaussianTransformerParams(0.5, -1.0)
    with pytest.raises(ValueError, match=r"n=4.*m=5"):
        gaussian_transformer_attention(q[:4], q, q, params=p)
    with pytest.raises(TypeError, match="mask_diagonal"):
        gaussian_transformer_attention(q, q, q, params=p, mask_diagonal=1)
    with pytest.raises(TypeError, match="params"):
        gaussian_transformer_attention(q, q, q, params=(0.5, -1.0))
    with pytest.raises(ValueError, match=r"gaussian_transformer draws w and b from rng: pass rng= \(or params=\)"):
        gaussian_transformer_attention(q, q, q)
    with pytest.raises(ValueError, match="leading"):
        gaussian_transformer_attention(np.stack([q, q]), q, q,
                                       params=GaussianTransformerParams(np.ones(3), -np.ones(3)))


def test_given_params_leave_rng_unused(rng):
    """params and rng both: the given params are used and nothing is drawn (the rule of every draw)."""
    q = rng.standard_normal((5, 4))
    p = GaussianTransformerParams(0.5, -1.0)
    np.testing.assert_array_equal(gaussian_transformer_attention(q, q, q, params=p, rng=0),
                                  gaussian_transformer_attention(q, q, q, params=p))
    assert not np.array_equal(gaussian_transformer_attention(q, q, q, rng=0),
                              gaussian_transformer_attention(q, q, q, params=p))
