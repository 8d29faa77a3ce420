"""Layer normalisation and the position-wise feed-forward network (Vaswani et al., 2017, §3.1, §3.3)."""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from refattn import FeedForwardParams, feed_forward, init_feed_forward, init_layer_norm, layer_norm

TOL = dict(rtol=1e-12, atol=1e-12)


def loop_layer_norm(x, gamma, beta, eps):
    """LN(x)_k = γ_k (x_k − μ)/√(σ² + ε) + β_k, row by row with Python floats."""
    x = np.asarray(x)
    out = np.empty_like(x)
    for idx in np.ndindex(*x.shape[:-1]):
        row = [float(v) for v in x[idx]]
        d = len(row)
        mu = math.fsum(row) / d
        var = math.fsum((v - mu) ** 2 for v in row) / d
        out[idx] = [gamma[k] * (row[k] - mu) / math.sqrt(var + eps) + beta[k] for k in range(d)]
    return out


def loop_feed_forward(x, p):
    """FFN(x) = max(0, x W₁ + b₁) W₂ + b₂, one position and one scalar at a time."""
    x = np.asarray(x)
    d_model, d_ff = p.w_1.shape
    out = np.empty(x.shape[:-1] + (p.w_2.shape[1],))
    for idx in np.ndindex(*x.shape[:-1]):
        hidden = [max(0.0, sum(x[idx][c] * p.w_1[c, f] for c in range(d_model)) + p.b_1[f])
                  for f in range(d_ff)]
        out[idx] = [sum(hidden[f] * p.w_2[f, o] for f in range(d_ff)) + p.b_2[o]
                    for o in range(p.w_2.shape[1])]
    return out


def random_ffn(rng, d_model, d_ff):
    return FeedForwardParams(rng.standard_normal((d_model, d_ff)), rng.standard_normal(d_ff),
                             rng.standard_normal((d_ff, d_model)), rng.standard_normal(d_model))


# --- layer norm ---------------------------------------------------------------------------------

@pytest.mark.parametrize("shape", [(7,), (3, 5), (2, 4, 6)])
def test_layer_norm_zero_mean_unit_variance(rng, shape):
    x = 3.0 * rng.standard_normal(shape) + 5.0
    y = layer_norm(x, eps=0.0)
    assert y.shape == x.shape and y.dtype == np.float64
    # mean of d values of size O(1): error ≲ d·eps
    np.testing.assert_allclose(y.mean(axis=-1), 0.0, rtol=0, atol=1e-14)
    np.testing.assert_allclose(y.var(axis=-1), 1.0, rtol=0, atol=1e-14)


@pytest.mark.parametrize("eps", [0.0, 1e-5, 0.5])
def test_layer_norm_matches_loop_formula(rng, eps):
    x = rng.standard_normal((3, 4, 6)) * 2.0 - 1.0
    gamma, beta = rng.standard_normal(6), rng.standard_normal(6)
    np.testing.assert_allclose(layer_norm(x, gamma, beta, eps), loop_layer_norm(x, gamma, beta, eps), **TOL)
    np.testing.assert_allclose(layer_norm(x, eps=eps), loop_layer_norm(x, np.ones(6), np.zeros(6), eps),
                               **TOL)


def test_layer_norm_hand_computed():
    # x = (1, 2, 3): μ = 2, σ² = 2/3 → (x − μ)/σ = (−√1.5, 0, √1.5); γ = (2, 1, 1), β = (0, 0, 10)
    y = layer_norm([1.0, 2.0, 3.0], gamma=[2.0, 1.0, 1.0], beta=[0.0, 0.0, 10.0], eps=0.0)
    np.testing.assert_allclose(y, [-2 * math.sqrt(1.5), 0.0, 10.0 + math.sqrt(1.5)], rtol=1e-15, atol=0)


def test_layer_norm_gamma_beta_are_applied(rng):
    x = rng.standard_normal((4, 5))
    gamma, beta = rng.standard_normal(5), rng.standard_normal(5)
    base = layer_norm(x)
    np.testing.assert_allclose(layer_norm(x, gamma=gamma), base * gamma, rtol=1e-15, atol=0)
    np.testing.assert_allclose(layer_norm(x, beta=beta), base + beta, rtol=1e-15, atol=0)
    np.testing.assert_allclose(layer_norm(x, gamma, beta), base * gamma + beta, **TOL)
    p = init_layer_norm(5)
    np.testing.assert_array_equal(p.gamma, np.ones(5))
    np.testing.assert_array_equal(p.beta, np.zeros(5))
    np.testing.assert_array_equal(layer_norm(x, p.gamma, p.beta), base)


def test_layer_norm_eps(rng):
    const = np.full((2, 4), 3.25)
    beta = rng.standard_normal(4)
    y = layer_norm(const, gamma=rng.standard_normal(4), beta=beta)   # default eps = 1e-5
    assert np.isfinite(y).all()
    np.testing.assert_array_equal(y, np.broadcast_to(beta, (2, 4)))  # (x − μ) = 0 exactly
    with np.errstate(invalid="ignore"):
        assert np.isnan(layer_norm(const, eps=0.0)).all()            # 0/0 without eps (IEEE)
    # eps enters as √(σ² + ε): a row with σ² = 1 is scaled by 1/√(1 + ε)
    x = np.array([-1.0, 1.0])                                        # μ = 0, σ² = 1
    np.testing.assert_allclose(layer_norm(x, eps=0.5), x / math.sqrt(1.5), rtol=1e-15, atol=0)


def test_layer_norm_bad_input(rng):
    x = rng.standard_normal((3, 4))
    with pytest.raises(ValueError, match=r"gamma has shape \(5,\) but x has d_model=4"):
        layer_norm(x, gamma=np.ones(5))
    with pytest.raises(ValueError, match=r"beta has shape \(1, 4\) but x has d_model=4"):
        layer_norm(x, beta=np.zeros((1, 4)))
    with pytest.raises(ValueError, match=r"eps must be a non-negative number"):
        layer_norm(x, eps=-1e-5)
    with pytest.raises(TypeError, match=r"x must be a real floating-point array"):
        layer_norm(np.arange(4))


@settings(max_examples=30)
@given(rows=st.integers(1, 4), d=st.integers(2, 9), seed=st.integers(0, 2**16))
def test_layer_norm_rows_are_independent_and_shift_scale_invariant(rows, d, seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((rows, d))
    y = layer_norm(x, eps=0.0)
    for r in range(rows):
        np.testing.assert_array_equal(layer_norm(x[r], eps=0.0), y[r])
    # LN(a·x + c) = LN(x) for a > 0 when ε = 0 (relative error of σ: a few ulp, amplified by
    # the division by σ ≥ min over rows; the rows here have σ = O(1))
    atol = 1e-12 * max(1.0, 1 / x.std(axis=-1).min())
    np.testing.assert_allclose(layer_norm(2.5 * x + 7.0, eps=0.0), y, rtol=0, atol=atol)


# --- feed-forward -------------------------------------------------------------------------------

@pytest.mark.parametrize("shape", [(5, 4), (2, 3, 4), (4,)])
def test_feed_forward_matches_loop(rng, shape):
    p = random_ffn(rng, 4, 7)
    x = rng.standard_normal(shape)
    y = feed_forward(x, p)
    assert y.shape == shape
    np.testing.assert_allclose(y, loop_feed_forward(x, p), **TOL)


def test_feed_forward_relu_is_active(rng):
    # The hidden layer has both signs, so the max(0, ·) matters; a linear map would differ.
    p = random_ffn(rng, 4, 16)
    x = rng.standard_normal((6, 4))
    pre = x @ p.w_1 + p.b_1
    assert (pre < 0).any() and (pre > 0).any()
    linear = pre @ p.w_2 + p.b_2
    assert np.abs(feed_forward(x, p) - linear).max() > 1e-3


def test_feed_forward_rows_are_independent(rng):
    p = random_ffn(rng, 4, 8)
    x = rng.standard_normal((2, 5, 4))
    y = feed_forward(x, p)
    x2 = x.copy()
    x2[1, 3] = rng.standard_normal(4)
    y2 = feed_forward(x2, p)
    changed = np.zeros((2, 5), dtype=bool)
    changed[1, 3] = True
    np.testing.assert_array_equal(y2[~changed], y[~changed])
    assert np.abs(y2[1, 3] - y[1, 3]).min() > 0


def test_feed_forward_params_validation(rng):
    w_1, b_1, w_2, b_2 = rng.standard_normal((4, 6)), np.zeros(6), rng.standard_normal((6, 4)), np.zeros(4)
    FeedForwardParams(w_1, b_1, w_2, b_2)
    with pytest.raises(ValueError, match=r"b_1 has shape \(5,\); expected \(6,\).*\(4, 6\)"):
        FeedForwardParams(w_1, np.zeros(5), w_2, b_2)
    with pytest.raises(ValueError, match=r"w_2 has shape \(4, 6\); expected \(6, 4\)"):
        FeedForwardParams(w_1, b_1, w_2.T, b_2)
    with pytest.raises(ValueError, match=r"b_2 has shape \(6,\); expected \(4,\)"):
        FeedForwardParams(w_1, b_1, w_2, np.zeros(6))


def re_shape(shape):
    return r"\(" + r",\s*".join(str(s) for s in shape) + (r",\)" if len(shape) == 1 else r"\)")


@pytest.mark.parametrize("w_1_shape", [(4,), (2, 4, 6)])
def test_feed_forward_params_non_matrix_w_1(rng, w_1_shape):
    # The convention: bad input gets a ValueError that names the argument and the shape seen.
    with pytest.raises(ValueError, match=r"w_1.*" + re_shape(w_1_shape)):
        FeedForwardParams(rng.standard_normal(w_1_shape), np.zeros(6), rng.standard_normal((6, 4)),
                          np.zeros(4))


def test_feed_forward_bad_input(rng):
    p = init_feed_forward(rng, 4, 8)
    with pytest.raises(ValueError, match=r"x has d_model=5 \(shape \(3, 5\)\) but w_1 has shape \(4, 8\)"):
        feed_forward(rng.standard_normal((3, 5)), p)
    with pytest.raises(TypeError, match=r"x must be a real floating-point array"):
        feed_forward(np.ones((3, 4), dtype=np.int32), p)


def test_init_feed_forward():
    p = init_feed_forward(np.random.default_rng(3), 6, 10)
    assert p.w_1.shape == (6, 10) and p.w_2.shape == (10, 6)
    np.testing.assert_array_equal(p.b_1, np.zeros(10))
    np.testing.assert_array_equal(p.b_2, np.zeros(6))
    bound = math.sqrt(6.0 / 16)                                      # Glorot, fan_in + fan_out = 16
    assert np.abs(p.w_1).max() <= bound and np.abs(p.w_2).max() <= bound
    q = init_feed_forward(3, 6, 10)
    np.testing.assert_array_equal(q.w_1, p.w_1)
    np.testing.assert_array_equal(q.w_2, p.w_2)
    assert not np.array_equal(init_feed_forward(4, 6, 10).w_1, p.w_1)
    with pytest.raises(ValueError, match=r"d_ff must be a positive int"):
        init_feed_forward(0, 6, 0)
