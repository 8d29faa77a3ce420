"""efficient_attention (Shen et al.): right product against the left product, a naive loop, hand cases, properties."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from refattn.linear.efficient_attention import efficient_attention

from .naive import naive_efficient

TIGHT = {"rtol": 1e-12, "atol": 1e-12}


def qkv(rng, n, m, d=4, d_v=3, batch=()):
    return (rng.standard_normal((*batch, n, d)), rng.standard_normal((*batch, m, d)),
            rng.standard_normal((*batch, m, d_v)))


@pytest.mark.parametrize(("n", "m"), [(5, 8), (8, 5), (1, 1), (6, 6)])
def test_matches_the_naive_loop(rng, n, m):
    q, k, v = qkv(rng, n, m)
    out, A = efficient_attention(q, k, v, return_weights=True)
    out_ref, A_ref = naive_efficient(q, k, v)
    np.testing.assert_allclose(out, out_ref, **TIGHT)
    np.testing.assert_allclose(A, A_ref, **TIGHT)


def test_right_product_equals_left_product(rng):
    # Associativity: ρ_q(Q)(ρ_k(K)ᵀV) = (ρ_q(Q)ρ_k(K)ᵀ)V, the left product formed here independently.
    q, k, v = qkv(rng, 6, 9, d=5, d_v=2, batch=(2, 3))
    rho_q = np.exp(q) / np.exp(q).sum(axis=-1, keepdims=True)           # softmax over the d features
    rho_k = np.exp(k) / np.exp(k).sum(axis=-2, keepdims=True)           # softmax over the m positions
    left = (rho_q @ np.swapaxes(rho_k, -1, -2)) @ v
    np.testing.assert_allclose(efficient_attention(q, k, v), left, **TIGHT)


def test_hand_computed():
    # ρ_q(q) = softmax([0, ln 3]) = [1/4, 3/4]; the columns of K = [[0, 0], [ln 3, 0]] give
    # ρ_k = [[1/4, 1/2], [3/4, 1/2]]; A = [1/4·1/4 + 3/4·1/2, 1/4·3/4 + 3/4·1/2] = [7/16, 9/16];
    # out = 7/16·4 + 9/16·8 = 100/16.
    q = np.array([[0.0, np.log(3.0)]])
    k = np.array([[0.0, 0.0], [np.log(3.0), 0.0]])
    v = np.array([[4.0], [8.0]])
    out, A = efficient_attention(q, k, v, return_weights=True)
    np.testing.assert_allclose(A, [[7 / 16, 9 / 16]], rtol=1e-15)
    np.testing.assert_allclose(out, [[6.25]], rtol=1e-15)


def test_published_example():
    # LambdaClass, "Efficient attention explained" (2025): q = [2, 1, 3] against four keys gives
    # softmax(q) softmax_col(K)ᵀ = [0.1309, 0.0713, 0.6962, 0.1017] (printed to 4 decimals).
    q = np.array([[2.0, 1.0, 3.0]])
    k = np.array([[1.0, 0.0, 1.0], [0.0, 1.0, 0.0], [2.0, 1.0, 3.0], [1.0, 1.0, 0.0]])
    _, A = efficient_attention(q, k, np.eye(4), return_weights=True)
    np.testing.assert_allclose(A, [[0.1309, 0.0713, 0.6962, 0.1017]], atol=5e-5)


@given(st.integers(1, 7), st.integers(1, 9), st.integers(1, 5), st.integers(0, 2**32 - 1))
def test_rows_are_distributions_and_output_is_their_average(n, m, d, seed):
    rng = np.random.default_rng(seed)
    q, k, v = qkv(rng, n, m, d=d)
    q, k = 4 * q, 4 * k
    out, A = efficient_attention(q, k, v, return_weights=True)
    assert (A > 0).all()
    np.testing.assert_allclose(A.sum(axis=-1), 1.0, **TIGHT)
    np.testing.assert_allclose(A @ v, out, **TIGHT)


def test_softmax_axes_shift_invariance(rng):
    # ρ_q normalises each row of Q (invariant to q_i + a_i·1), ρ_k each column of K (invariant to
    # K[:, c] + b_c): the shifts that pin down which axis each softmax runs over.
    q, k, v = qkv(rng, 5, 7)
    out = efficient_attention(q, k, v)
    shifted = efficient_attention(q + rng.standard_normal((5, 1)), k + rng.standard_normal((1, 4)), v)
    np.testing.assert_allclose(shifted, out, **TIGHT)
    other = efficient_attention(q + rng.standard_normal((1, 4)), k, v)   # a shift across features is not neutral
    assert np.abs(other - out).max() > 1e-6


def test_permutation_equivariance_and_batch(rng):
    q, k, v = qkv(rng, 5, 7, batch=(3,))
    out = efficient_attention(q, k, v)
    perm_k, perm_q = rng.permutation(7), rng.permutation(5)
    np.testing.assert_allclose(efficient_attention(q, k[:, perm_k], v[:, perm_k]), out, **TIGHT)
    np.testing.assert_allclose(efficient_attention(q[:, perm_q], k, v), out[:, perm_q], **TIGHT)
    stacked = np.stack([efficient_attention(q[b], k[b], v[b]) for b in range(3)])
    np.testing.assert_allclose(stacked, out, **TIGHT)


def test_not_causal_every_output_sees_every_key(rng):
    q, k, v = qkv(rng, 4, 6)
    out = efficient_attention(q, k, v)
    v2 = v.copy()
    v2[-1] += 1.0
    assert (np.abs(efficient_attention(q, k, v2) - out)[0] > 0).all()


def test_large_logits_stay_finite(rng):
    q, k, v = qkv(rng, 4, 6)
    out, A = efficient_attention(1e4 * q, 1e4 * k, v, return_weights=True)
    assert np.isfinite(out).all()
    np.testing.assert_allclose(A.sum(axis=-1), 1.0, **TIGHT)


def test_float32_inputs_are_computed_in_float64(rng):
    q, k, v = qkv(rng, 4, 6)
    out = efficient_attention(q.astype(np.float32), k.astype(np.float32), v.astype(np.float32))
    assert out.dtype == np.float64


@pytest.mark.parametrize(("args", "error", "match"), [
    ((np.ones((3, 4), int), np.ones((5, 4)), np.ones((5, 2))), TypeError, "q must be a real floating-point array"),
    ((np.ones((3, 4)), np.ones((5, 3)), np.ones((5, 2))), ValueError, r"q has d_k=4 but k has d_k=3"),
    ((np.ones((3, 4)), np.ones((5, 4)), np.ones((6, 2))), ValueError, r"k has m=5 keys but v has m=6 values"),
    ((np.ones((3, 0)), np.ones((5, 0)), np.ones((5, 2))), ValueError, r"needs d_k >= 1, got q shape \(3, 0\)"),
    ((np.ones((2, 3, 4)), np.ones((3, 5, 4)), np.ones((3, 5, 2))), ValueError, "leading .batch. dimensions"),
])
def test_bad_input(args, error, match):
    with pytest.raises(error, match=match):
        efficient_attention(*args)
